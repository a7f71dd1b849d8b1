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

/// The edge CA an executor will trust is pinned by its enrollment token (the operator hands the
/// token over out of band): whoever answers the enrollment cannot make it trust another CA. An
/// answer naming another CA is refused and nothing is written; the pinned CA is accepted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_enrollment_answer_cannot_swap_the_edge_ca() {
    let (node, _dir) = single_node().await;
    let url = node.url.clone();
    let admin = Admin::new();
    admin.post_ok(&url, "/v1/tenants", json!({"name": "plant-co"})).await;
    admin.post_ok(&url, "/v1/tenants/plant-co/sites", json!({"name": "north"})).await;
    let device = json!({"name": "press-1", "site": "north", "device_class": "press.v1"});
    admin.post_ok(&url, "/v1/tenants/plant-co/devices", device).await;
    let token = token_via_cli(&url, "10m");
    let cluster_ca = std::fs::read_to_string(writ_tests::pki::ca_file()).unwrap();
    let pin = writ_api::sha256_hex(&der_of(&cluster_ca));
    assert!(token.starts_with("wen2.") && token.ends_with(&pin), "the token pins the edges' CA: {token}");

    // An "edge" that answers every enrollment itself, naming the CA it likes.
    let answer = |edge_ca: &str| {
        json!({"executor_id": "x-1", "tenant_id": "t", "site_id": "s", "device_ids": [],
               "certificate": cluster_ca, "ca_certificate": cluster_ca, "fingerprint": "00", "serial": "00",
               "not_after_ms": 0, "executor_urls": ["https://127.0.0.1:9"], "edge_ca_certificate": edge_ca})
        .to_string()
    };
    let other = rcgen::CertificateParams::new(vec![]).unwrap();
    let other_ca = other.self_signed(&rcgen::KeyPair::generate().unwrap()).unwrap().pem();
    let enroll_at = |port: u16, out: std::path::PathBuf| {
        let token = token.clone();
        tokio::task::spawn_blocking(move || {
            std::process::Command::new(writ_tests::procs::writ_bin())
                .args(["executor", "enroll", "--edge", &format!("http://127.0.0.1:{port}"), "--token", &token])
                .arg("--out")
                .arg(&out)
                .output()
                .expect("run writ executor enroll")
        })
    };
    let dir = tempfile::tempdir().unwrap();
    let (swapping, hits) =
        writ_tests::procs::canned(200, vec![("content-type", "application/json".into())], answer(&other_ca)).await;
    let out = enroll_at(swapping, dir.path().join("swapped")).await.unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && stderr.contains("does not pin"), "{stderr}");
    assert_eq!(hits.load(std::sync::atomic::Ordering::SeqCst), 1);
    assert!(!dir.path().join("swapped").join("executor.key").exists(), "nothing is written");
    // The same answer naming the pinned CA is taken.
    let (honest, _) =
        writ_tests::procs::canned(200, vec![("content-type", "application/json".into())], answer(&cluster_ca)).await;
    let out = enroll_at(honest, dir.path().join("pinned")).await.unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(std::fs::read_to_string(dir.path().join("pinned").join("edge-ca.crt")).unwrap(), cluster_ca);
    node.shutdown().await;
}
