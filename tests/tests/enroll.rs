//! Executor enrollment (SPEC X1, issue 3 "must show" 5) against a real node: a CSR plus a
//! one-time token yields a certificate that verifies against the tenant's executor CA; a
//! reused or expired token is refused; no private key is ever accepted.

use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::{CertificateDer, UnixTime};
use serde_json::{json, Value};
use writ_tests::procs::{run_cli, single_node, Admin};

async fn enroll(url: &str, body: Value) -> (u16, Value) {
    // No operator token: the enrollment token is the only credential.
    let client = writ_tests::pki::http(None);
    let resp = client.post(format!("{url}/v1/enroll")).json(&body).send().await.unwrap();
    let code = resp.status().as_u16();
    (code, resp.json().await.unwrap_or(Value::Null))
}

fn der_of(pem: &str) -> Vec<u8> {
    use base64::Engine;
    let b64: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
    base64::engine::general_purpose::STANDARD.decode(b64).unwrap()
}

fn token_via_cli(url: &str, ttl: &str) -> String {
    let (code, out, err) = run_cli(
        url,
        &[
            "executor",
            "enroll-token",
            "--tenant",
            "plant-co",
            "--site",
            "north",
            "--device",
            "press-1",
            "--ttl",
            ttl,
            "-o",
            "json",
        ],
    );
    assert_eq!(code, 0, "{out}{err}");
    serde_json::from_str::<Value>(&out).unwrap()["token"].as_str().unwrap().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn csr_enrollment_issues_a_verifiable_certificate_once() {
    let (node, _dir) = single_node().await;
    let url = node.url.clone();
    let admin = Admin::new();
    let (code, t) = admin.post(&url, "/v1/tenants", json!({"name": "plant-co"})).await.unwrap();
    assert_eq!(code, 201, "{t}");
    let tenant = t["id"].as_str().unwrap().to_string();
    admin.post_ok(&url, &format!("/v1/tenants/{tenant}/sites"), json!({"name": "north"})).await;
    let device = admin
        .post_ok(
            &url,
            &format!("/v1/tenants/{tenant}/devices"),
            json!({"name": "press-1", "site": "north", "device_class": "press.v1"}),
        )
        .await;

    // The executor makes its key locally; only the CSR travels.
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    let csr = rcgen::CertificateParams::new(vec![]).unwrap().serialize_request(&key).unwrap().pem().unwrap();
    let token = token_via_cli(&url, "10m");
    let (code, wrong) = enroll(&url, json!({"token": format!("{token}x"), "csr": csr})).await;
    assert_eq!((code, wrong["reason"].as_str()), (401, Some("ENROLLMENT_TOKEN_INVALID")), "{wrong}");
    let (code, body) = enroll(&url, json!({"token": token, "csr": csr, "private_key": key.serialize_pem()})).await;
    assert_eq!((code, body["reason"].as_str()), (400, Some("INPUT_INVALID")), "a private key field is refused: {body}");
    let (code, body) = enroll(&url, json!({"token": token, "csr": key.serialize_pem()})).await;
    assert_eq!((code, body["reason"].as_str()), (400, Some("ENROLLMENT_CSR_INVALID")), "{body}");

    let (code, issued) = enroll(&url, json!({"token": token, "csr": csr})).await;
    assert_eq!(code, 200, "{issued}");
    assert_eq!(issued["device_ids"], json!([device["id"]]));
    // The certificate chains to the tenant CA, for client authentication, and carries the key
    // from the CSR.
    let mut roots = rustls::RootCertStore::empty();
    roots.add(CertificateDer::from(der_of(issued["ca_certificate"].as_str().unwrap()))).unwrap();
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let verifier =
        rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider).build().unwrap();
    let cert_der = der_of(issued["certificate"].as_str().unwrap());
    verifier
        .verify_client_cert(&CertificateDer::from(cert_der.clone()), &[], UnixTime::now())
        .expect("the executor certificate verifies against the tenant CA");
    assert_eq!(issued["fingerprint"], writ_api::sha256_hex(&cert_der));
    let spki = key.public_key_raw().to_vec();
    assert!(cert_der.windows(spki.len()).any(|w| w == spki.as_slice()), "the certificate holds the CSR's key");

    // One time only.
    let (code, again) = enroll(&url, json!({"token": token, "csr": csr})).await;
    assert_eq!((code, again["reason"].as_str()), (409, Some("ENROLLMENT_TOKEN_USED")), "{again}");
    // Expired.
    let short = token_via_cli(&url, "1s");
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let (code, late) = enroll(&url, json!({"token": short, "csr": csr})).await;
    assert_eq!((code, late["reason"].as_str()), (401, Some("ENROLLMENT_TOKEN_EXPIRED")), "{late}");

    // The ledger recorded fingerprint and serial; revocation is recorded too.
    let (code, out, err) = run_cli(&url, &["executor", "list", "--tenant", "plant-co", "-o", "json"]);
    assert_eq!(code, 0, "{err}");
    let list: Value = serde_json::from_str(&out).unwrap();
    let x = &list["executors"][0];
    assert_eq!((&x["cert"]["fingerprint"], &x["cert"]["serial"]), (&issued["fingerprint"], &issued["serial"]));
    let id = x["id"].as_str().unwrap();
    let (code, out, err) = run_cli(&url, &["executor", "revoke", "--tenant", "plant-co", id, "-o", "json"]);
    assert_eq!(code, 0, "{out}{err}");
    let list: Value = serde_json::from_str(&out).unwrap();
    assert!(list["executors"][0]["revoked_at_ms"].as_u64().is_some(), "{list}");
    let (code, _, err) = run_cli(&url, &["executor", "revoke", "--tenant", "plant-co", id]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("EXECUTOR_STATE_CONFLICT"), "{err}");
    node.shutdown().await;
}
