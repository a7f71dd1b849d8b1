//! Tokens end to end (SPEC D2, D3, issue 3 "must show" 1 and 2): issued and revoked through the
//! admin API of real nodes, verified by the verifier library exactly as an edge will, with the
//! Nimi matrix cases that need no edge.

use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine;
use serde_json::{json, Value};
use writ_api::ReasonCode;
use writ_client::Ledger;
use writ_client::{now_ms, Verifier};
use writ_tests::procs::{run_cli, single_node, Admin, Cluster};

const AUD: &str = "urn:writ:mcp";

async fn setup_tenant(admin: &Admin, url: &str, name: &str) -> String {
    let (code, t) = admin.post(url, "/v1/tenants", json!({"name": name})).await.expect("create tenant");
    assert_eq!(code, 201, "{t}");
    t["id"].as_str().expect("tenant id").to_string()
}

async fn principal(admin: &Admin, url: &str, tenant: &str, name: &str, preset: &str) -> Value {
    let body = json!({"name": name, "kind": "agent", "preset": preset});
    let (code, p) = admin.post(url, &format!("/v1/tenants/{tenant}/principals"), body).await.expect("principal");
    assert_eq!(code, 201, "{p}");
    p
}

async fn issue(admin: &Admin, url: &str, tenant: &str, body: Value) -> (u16, Value) {
    admin.post(url, &format!("/v1/tenants/{tenant}/tokens"), body).await.expect("issue")
}

fn verifier_on(url: &str) -> Verifier {
    Verifier::follow(Arc::new(writ_tests::pki::edge_ledger(vec![url.to_string()], "verifier")) as Arc<dyn Ledger>, AUD)
}

async fn ready(v: &Verifier) {
    writ_tests::eventually("verifier bootstrapped", Duration::from_secs(20), || async {
        (v.revision() > 0).then_some(())
    })
    .await;
}

/// Reads a watch stream until its first heartbeat (everything stored has been delivered).
async fn watch_until_idle(url: &str, path: &str) -> Vec<Value> {
    let client = writ_tests::pki::http(Some((writ_api::role::Role::Edge, "watcher")));
    let Ok(mut resp) = client.get(format!("{url}{path}")).send().await else { return Vec::new() };
    let mut buf = Vec::new();
    let mut lines = Vec::new();
    while let Ok(Some(chunk)) = resp.chunk().await {
        buf.extend_from_slice(&chunk);
        while let Some(nl) = buf.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = buf.drain(..=nl).collect();
            let Ok(v) = serde_json::from_slice::<Value>(&line) else { return lines };
            if v.get("heartbeat").is_some() {
                return lines;
            }
            lines.push(v);
        }
    }
    lines
}

fn reason(r: Result<writ_api::auth::Authority, writ_api::Rejection>) -> ReasonCode {
    r.expect_err("verification should fail").reason
}

#[tokio::test]
async fn revoking_a_parent_reaches_a_verifier_on_another_node_within_a_second() {
    let cluster = Cluster::start(3).await;
    let urls = cluster.all_urls();
    let leader = cluster.leader(Duration::from_secs(20)).await;
    let writer = urls[(leader - 1) as usize].clone();
    let other = urls.iter().find(|u| **u != writer).expect("another node").clone();
    let admin = &cluster.admin;
    let tenant = setup_tenant(admin, &writer, "revocation").await;
    principal(admin, &writer, &tenant, "planner", "delegate").await;
    principal(admin, &writer, &tenant, "worker", "readOnly").await;

    let (code, parent) = issue(admin, &writer, &tenant, json!({"principal": "planner"})).await;
    assert_eq!(code, 201, "{parent}");
    let pj = parent["jti"].as_str().expect("jti");
    let delegate = |body: Value| {
        let path = format!("/v1/tenants/{tenant}/tokens/{pj}/delegate");
        let writer = writer.clone();
        async move { admin.post(&writer, &path, body).await.expect("delegate") }
    };
    let (code, child) = delegate(json!({"principal": "worker", "scopes": ["tools:list", "ops:read"]})).await;
    assert_eq!(code, 201, "{child}");
    assert_eq!(child["depth"], 1);
    assert_eq!(child["parent_jti"], parent["jti"]);

    // Child scopes ⊄ parent: refused by the ledger.
    let (code, body) = delegate(json!({"scopes": ["audit:read"]})).await;
    assert_eq!((code, body["reason"].as_str()), (403, Some("APP_SCOPE_FORBIDDEN")), "{body}");
    // An unknown scope prefix is bad input, not a missing grant.
    let (code, body) = delegate(json!({"principal": "worker", "scopes": ["admin:write"]})).await;
    assert_eq!((code, body["reason"].as_str()), (400, Some("INPUT_INVALID")), "{body}");
    let (code, body) = delegate(json!({"scopes": ["devices:use:lab-1"], "ttl_s": 60})).await;
    assert_eq!(code, 201, "parent holds devices:use:*: {body}");
    // Beyond the depth limit (default 1): refused, and the refusal is recorded.
    let cj = child["jti"].as_str().expect("child jti");
    let (code, body) = admin
        .post(&writer, &format!("/v1/tenants/{tenant}/tokens/{cj}/delegate"), json!({}))
        .await
        .expect("delegate from child");
    assert_eq!((code, body["reason"].as_str()), (403, Some("DELEGATION_DEPTH_EXCEEDED")), "{body}");
    let rejected =
        writ_tests::eventually("the depth rejection in the tenant's event stream", Duration::from_secs(10), || async {
            let path = format!("/client/watch?from=1&stream={tenant}&kind=command_rejected");
            watch_until_idle(&other, &path)
                .await
                .into_iter()
                .find(|l| l["event"]["CommandRejectedV2"]["reason"] == "DELEGATION_DEPTH_EXCEEDED")
        })
        .await;
    assert_eq!(rejected["event"]["CommandRejectedV2"]["command"], "issue_token");
    // The refusal names the chain it would have extended.
    assert_eq!(rejected["event"]["CommandRejectedV2"]["subject"]["parent_token_id"], cj, "{rejected}");
    assert!(!rejected["trace_id"].as_str().unwrap_or("").is_empty());

    // A verifier fed by a node that did not take the writes.
    let verifier = verifier_on(&other);
    ready(&verifier).await;
    let parent_token = parent["token"].as_str().expect("token");
    let child_token = child["token"].as_str().expect("token");
    let a = verifier.verify(child_token).await.expect("child verifies");
    assert_eq!(a.chain, vec![pj.to_string(), cj.to_string()]);
    assert_eq!(a.parent_token_id.as_deref(), Some(pj));
    assert_eq!(a.principal_name, "worker");
    a.require("ops:read").expect("child holds ops:read");
    assert_eq!(a.require("ops:execute").unwrap_err().reason, ReasonCode::APP_SCOPE_FORBIDDEN);
    verifier.verify(parent_token).await.expect("parent verifies");

    // Revoke the parent on the leader; time until the other node's verifier refuses the child.
    let t0 = Instant::now();
    let (code, revoked) =
        admin.post(&writer, &format!("/v1/tenants/{tenant}/tokens/{pj}/revoke"), json!({})).await.expect("revoke");
    assert_eq!(code, 200, "{revoked}");
    assert!(revoked["cascade"].as_array().expect("cascade").iter().any(|j| j == cj), "{revoked}");
    loop {
        match verifier.verify(child_token).await {
            Err(e) if e.reason == ReasonCode::AUTH_TOKEN_REVOKED => break,
            Ok(_) => {}
            Err(e) => panic!("unexpected rejection {e:?}"),
        }
        assert!(t0.elapsed() < Duration::from_secs(1), "revocation took longer than 1 s to reach the verifier");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let elapsed = t0.elapsed();
    eprintln!("revocation visible on another node's verifier after {elapsed:?}");
    assert_eq!(reason(verifier.verify(parent_token).await), ReasonCode::AUTH_TOKEN_REVOKED);
    // Revoking again is a clear conflict; delegating from a revoked parent is refused.
    let (code, body) =
        admin.post(&writer, &format!("/v1/tenants/{tenant}/tokens/{pj}/revoke"), json!({})).await.unwrap();
    assert_eq!((code, body["reason"].as_str()), (409, Some("TOKEN_ALREADY_REVOKED")));
    let (code, body) = delegate(json!({})).await;
    assert_eq!((code, body["reason"].as_str()), (401, Some("AUTH_TOKEN_REVOKED")), "{body}");
}

#[tokio::test]
async fn nimi_matrix_cases_at_the_verifier() {
    let (node, _dir) = single_node().await;
    let url = node.url.clone();
    let admin = Admin::new();
    let tenant = setup_tenant(&admin, &url, "nimi").await;
    principal(&admin, &url, &tenant, "agent-1", "full").await;
    let verifier = verifier_on(&url);
    ready(&verifier).await;

    let (code, issued) = issue(&admin, &url, &tenant, json!({"principal": "agent-1", "ttl_s": 120})).await;
    assert_eq!(code, 201, "{issued}");
    let token = issued["token"].as_str().expect("token").to_string();
    let expires = issued["expires_at_ms"].as_u64().expect("expiry");
    let a = verifier.verify(&token).await.expect("fresh token verifies");
    a.require("ops:execute").expect("full preset");

    // Expired token → AUTH_TOKEN_EXPIRED (checked at a clock past its expiry).
    assert_eq!(reason(verifier.verify_at(&token, expires + 1).await), ReasonCode::AUTH_TOKEN_EXPIRED);
    // Wrong audience, tampered signature, garbage → AUTH_TOKEN_INVALID.
    let (_, wrong_aud) =
        issue(&admin, &url, &tenant, json!({"principal": "agent-1", "audience": "https://elsewhere/mcp"})).await;
    assert_eq!(reason(verifier.verify(wrong_aud["token"].as_str().unwrap()).await), ReasonCode::AUTH_TOKEN_INVALID);
    let mut tampered = token.clone();
    let last = tampered.pop().expect("char");
    tampered.push(if last == 'A' { 'B' } else { 'A' });
    assert_eq!(reason(verifier.verify(&tampered).await), ReasonCode::AUTH_TOKEN_INVALID);
    assert_eq!(reason(verifier.verify("not-a-jwt").await), ReasonCode::AUTH_TOKEN_INVALID);

    // Revoked scope → APP_SCOPE_REVOKED, both for the existing token and for a new request.
    let (code, body) = admin
        .post(&url, &format!("/v1/tenants/{tenant}/principals/agent-1/scopes/revoke"), json!({"scope": "ops:execute"}))
        .await
        .unwrap();
    assert_eq!(code, 200, "{body}");
    writ_tests::eventually("scope revocation reaches the verifier", Duration::from_secs(5), || async {
        let a = verifier.verify(&token).await.ok()?;
        (a.require("ops:execute").err()?.reason == ReasonCode::APP_SCOPE_REVOKED).then_some(())
    })
    .await;
    let (code, body) = issue(&admin, &url, &tenant, json!({"principal": "agent-1", "scopes": ["ops:execute"]})).await;
    assert_eq!((code, body["reason"].as_str()), (403, Some("APP_SCOPE_REVOKED")), "{body}");

    // Suspended tenant → TENANT_SUSPENDED, before any scope check, for every token.
    let (code, _) = admin.post(&url, &format!("/v1/tenants/{tenant}/suspend"), json!({})).await.unwrap();
    assert_eq!(code, 200);
    writ_tests::eventually("suspension reaches the verifier", Duration::from_secs(5), || async {
        (verifier.verify(&token).await.err()?.reason == ReasonCode::TENANT_SUSPENDED).then_some(())
    })
    .await;
    let (code, body) = issue(&admin, &url, &tenant, json!({"principal": "agent-1", "scopes": ["ops:execute"]})).await;
    assert_eq!((code, body["reason"].as_str()), (403, Some("TENANT_SUSPENDED")), "{body}");
    admin.post(&url, &format!("/v1/tenants/{tenant}/resume"), json!({})).await.unwrap();

    // A revoked principal's tokens stop verifying.
    admin.post(&url, &format!("/v1/tenants/{tenant}/principals/agent-1/revoke"), json!({})).await.unwrap();
    writ_tests::eventually("principal revocation reaches the verifier", Duration::from_secs(5), || async {
        (verifier.verify(&token).await.err()?.reason == ReasonCode::AUTH_TOKEN_REVOKED).then_some(())
    })
    .await;
    node.shutdown().await;
}

/// A tenant's own issuer: an Ed25519 key published as an inline JWKS.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenant_issuer_tokens_verify_with_the_inline_jwks() {
    let (node, _dir) = single_node().await;
    let url = node.url.clone();
    let admin = Admin::new();
    let tenant = setup_tenant(&admin, &url, "own-idp").await;
    principal(&admin, &url, &tenant, "svc-1", "readOnly").await;
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ED25519).expect("key");
    let x = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(key.public_key_raw());
    let jwks = json!({"keys": [{"kty": "OKP", "crv": "Ed25519", "x": x, "kid": "idp-1", "alg": "EdDSA"}]});
    let issuer = json!({"issuer": "https://idp.example", "audience": "writ-prod", "jwks": jwks.to_string()});
    let (code, body) = admin
        .send(reqwest::Method::PUT, &format!("{url}/v1/tenants/{tenant}/issuers"), Some(issuer.clone()))
        .await
        .unwrap();
    assert_eq!(code, 200, "{body}");
    // Another tenant cannot claim the same issuer; Writ's own issuer is reserved.
    let other = setup_tenant(&admin, &url, "squatter").await;
    let (code, body) =
        admin.send(reqwest::Method::PUT, &format!("{url}/v1/tenants/{other}/issuers"), Some(issuer)).await.unwrap();
    assert_eq!((code, body["reason"].as_str()), (409, Some("ISSUER_CONFLICT")), "{body}");
    let bad = json!({"issuer": "https://idp2.example", "audience": "a", "jwks": "{\"keys\":[{\"kty\":\"OKP\"}]}"});
    let (code, body) =
        admin.send(reqwest::Method::PUT, &format!("{url}/v1/tenants/{other}/issuers"), Some(bad)).await.unwrap();
    assert_eq!((code, body["reason"].as_str()), (400, Some("INPUT_INVALID")), "{body}");

    let signing = jsonwebtoken::EncodingKey::from_ed_pem(key.serialize_pem().as_bytes()).expect("pem");
    let sign = |claims: Value, kid: &str| {
        let mut h = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::EdDSA);
        h.kid = Some(kid.to_string());
        jsonwebtoken::encode(&h, &claims, &signing).expect("sign")
    };
    let now = now_ms() / 1000;
    let claims = |aud: &str, exp: u64| json!({"iss": "https://idp.example", "sub": "svc-1", "aud": aud, "exp": exp, "scope": "tools:list ops:execute"});
    let verifier = verifier_on(&url);
    ready(&verifier).await;
    let ok = verifier.verify(&sign(claims("writ-prod", now + 300), "idp-1")).await.expect("tenant token verifies");
    assert_eq!(ok.tenant_id, tenant);
    assert_eq!(ok.principal_name, "svc-1");
    // The token asked for ops:execute, but the principal (readOnly) does not hold it.
    assert!(ok.scopes.contains("tools:list") && !ok.scopes.contains("ops:execute"), "{:?}", ok.scopes);
    assert_eq!(
        reason(verifier.verify(&sign(claims("writ-prod", now - 5), "idp-1")).await),
        ReasonCode::AUTH_TOKEN_EXPIRED
    );
    assert_eq!(
        reason(verifier.verify(&sign(claims("other", now + 300), "idp-1")).await),
        ReasonCode::AUTH_TOKEN_INVALID
    );
    assert_eq!(
        reason(verifier.verify(&sign(claims("writ-prod", now + 300), "nope")).await),
        ReasonCode::AUTH_TOKEN_INVALID
    );
    // A token expiring in 2100 outlives the tenant's token_ttl_max_s: refused.
    let year_2100 = 4_102_444_800;
    assert_eq!(
        reason(verifier.verify(&sign(claims("writ-prod", year_2100), "idp-1")).await),
        ReasonCode::AUTH_TOKEN_INVALID
    );
    // So is one claiming to be issued an hour from now.
    let mut future = claims("writ-prod", now + 3900);
    future["iat"] = json!(now + 3600);
    assert_eq!(reason(verifier.verify(&sign(future, "idp-1")).await), ReasonCode::AUTH_TOKEN_INVALID);
    // Without a scope claim the token grants no scope (not the principal's).
    let mut bare = claims("writ-prod", now + 300);
    bare.as_object_mut().expect("claims").remove("scope");
    let none = verifier.verify(&sign(bare, "idp-1")).await.expect("a scope-less token verifies");
    assert!(none.scopes.is_empty(), "{:?}", none.scopes);
    assert_eq!(none.require("tools:list").map_err(|r| r.reason), Err(ReasonCode::APP_SCOPE_FORBIDDEN));

    // The CLI inspects a token with the same verdict.
    let (code, out, err) =
        run_cli(&url, &["token", "inspect", &sign(claims("writ-prod", now - 5), "idp-1"), "-o", "json"]);
    assert_eq!(code, 1, "{out}{err}");
    let v: Value = serde_json::from_str(&out).expect("json");
    assert_eq!(v["reason"], "AUTH_TOKEN_EXPIRED");

    // Revoking one token id (`jti`) of the issuer: its tokens are refused, the others are not.
    let with_jti = |jti: &str| {
        let mut c = claims("writ-prod", now + 300);
        c["jti"] = json!(jti);
        sign(c, "idp-1")
    };
    let (doomed, kept) = (with_jti("idp-tok-1"), with_jti("idp-tok-2"));
    verifier.verify(&doomed).await.expect("verifies before the revocation");
    let (code, out, err) = run_cli(
        &url,
        &["issuer", "revoke-token", "--tenant", "own-idp", "https://idp.example", "--jti", "idp-tok-1", "-o", "json"],
    );
    assert_eq!(code, 0, "{out}{err}");
    let revocation: Value = serde_json::from_str(&out).expect("json");
    assert!(revocation["until_ms"].as_u64().expect("until") > now_ms() + 3_600_000, "{revocation}");
    writ_tests::eventually("the revoked token id refused", Duration::from_secs(10), || async {
        verifier.verify(&doomed).await.err().filter(|e| e.reason == ReasonCode::AUTH_TOKEN_REVOKED)
    })
    .await;
    verifier.verify(&kept).await.expect("another token id still verifies");
    let (code, out, err) =
        run_cli(&url, &["issuer", "revoke-token", "--tenant", "own-idp", "https://idp.example", "--jti", "idp-tok-1"]);
    assert_ne!(code, 0, "revoked twice: {out}");
    assert!(err.contains("TOKEN_ALREADY_REVOKED"), "{err}");
    let (code, out, _) = run_cli(&url, &["credential", "show", "--tenant", "own-idp", "-o", "json"]);
    assert_eq!(code, 0);
    let shown: Value = serde_json::from_str(&out).expect("json");
    assert!(shown["tenant"]["revoked_issuer_tokens"]["https://idp.example"]["idp-tok-1"].is_u64(), "{shown}");

    // The tenant maps its principals from another claim: `client_id` names svc-1, whatever `sub` is.
    let (code, out, err) =
        run_cli(&url, &["oauth", "settings", "--tenant", "own-idp", "--principal-claim", "client_id"]);
    assert_eq!(code, 0, "{out}{err}");
    let mut mapped = claims("writ-prod", now + 300);
    (mapped["sub"], mapped["client_id"]) = (json!("user-7@idp.example"), json!("svc-1"));
    let by_claim = writ_tests::eventually("the claim mapping applies", Duration::from_secs(10), || async {
        verifier.verify(&sign(mapped.clone(), "idp-1")).await.ok()
    })
    .await;
    assert_eq!(by_claim.principal_name, "svc-1");
    let unmapped = claims("writ-prod", now + 300);
    let refused = verifier.verify(&sign(unmapped, "idp-1")).await.expect_err("no client_id claim");
    assert!(refused.message.contains("client_id"), "{}", refused.message);
    node.shutdown().await;
}

/// Retiring a node's token-signing key (SPEC S1): every token it signed is refused at once, the
/// key can never come back, and the node signs the next token with a new key it stores.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retired_signing_key_refuses_its_tokens_and_its_node_moves_to_a_new_key() {
    let (node, dir) = single_node().await;
    let url = node.url.clone();
    let admin = Admin::new();
    let tenant = setup_tenant(&admin, &url, "key-rotation").await;
    principal(&admin, &url, &tenant, "agent", "readOnly").await;
    let (code, old) = issue(&admin, &url, &tenant, json!({"principal": "agent", "audience": AUD})).await;
    assert_eq!(code, 201, "{old}");
    let old_token = old["token"].as_str().expect("token").to_string();
    let kid_of =
        |token: &str| writ_api::auth::segment(token, 0).expect("header")["kid"].as_str().expect("kid").to_string();
    let old_kid = kid_of(&old_token);
    let key_file = dir.path().join("signing-key.pem");
    let old_pem = std::fs::read_to_string(&key_file).expect("key file");
    let verifier = verifier_on(&url);
    ready(&verifier).await;
    verifier.verify(&old_token).await.expect("verifies before the retirement");

    let (code, out, err) = run_cli(&url, &["credential", "retire-key", &old_kid, "-o", "json"]);
    assert_eq!(code, 0, "{out}{err}");
    let shown: Value = serde_json::from_str(&out).expect("json");
    assert!(shown["retired_signing_keys"][&old_kid].is_u64(), "{shown}");
    writ_tests::eventually("the retired key's token refused", Duration::from_secs(10), || async {
        verifier.verify(&old_token).await.err().filter(|e| e.reason == ReasonCode::AUTH_TOKEN_REVOKED)
    })
    .await;
    let (code, out, err) = run_cli(&url, &["credential", "retire-key", &old_kid]);
    assert_ne!(code, 0, "retired twice: {out}");
    assert!(err.contains("CREDENTIAL_RETIRED"), "{err}");

    // The next token comes from a new key, registered and stored in the node's key file.
    let (code, new) = issue(&admin, &url, &tenant, json!({"principal": "agent", "audience": AUD})).await;
    assert_eq!(code, 201, "{new}");
    let new_token = new["token"].as_str().expect("token");
    assert_ne!(kid_of(new_token), old_kid);
    verifier.verify(new_token).await.expect("a token of the new key verifies");
    assert_ne!(std::fs::read_to_string(&key_file).expect("key file"), old_pem, "the key file holds the new key");
    let (_, out, _) = run_cli(&url, &["credential", "show", "-o", "json"]);
    let shown: Value = serde_json::from_str(&out).expect("json");
    assert_eq!(shown["signing_keys"], json!([kid_of(new_token)]), "{shown}");
    node.shutdown().await;
}
