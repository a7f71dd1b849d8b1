//! Named operators on the admin API (the routers on an in-memory ledger): sessions handed out
//! once, roles as sets of acts, a tenant's operator kept to its tenant, refusals recorded in
//! the operator's own tenant without flooding, acts recorded under the person's name, and
//! signing out.

use serde_json::{json, Value};
use writ_tests_fast::routers::Routers;

async fn audit(r: &Routers, tenant: &str, query: &str) -> Vec<Value> {
    let page = r.admin_ok("GET", &format!("/v1/tenants/{tenant}/audit?{query}"), None).await;
    page["records"].as_array().cloned().unwrap_or_default()
}

async fn session(r: &Routers, name: &str) -> String {
    let opened = r.admin_ok("POST", &format!("/v1/operators/{name}/sessions"), Some(json!({"ttl_s": 600}))).await;
    opened["credential"].as_str().expect("credential").to_string()
}

/// `(status, reason)` of a request made with `credential`.
async fn as_op(r: &Routers, credential: &str, method: &str, path: &str, body: Option<Value>) -> (u16, String) {
    let (status, _, answer) = r.admin_as(credential, method, path, body).await;
    (status, answer["reason"].as_str().unwrap_or_default().to_string())
}

#[tokio::test]
async fn operators_act_by_role_and_scope_and_are_named_in_the_audit() {
    let r = Routers::new();
    for tenant in ["acme", "beta"] {
        r.admin_ok("POST", "/v1/tenants", Some(json!({"name": tenant}))).await;
    }
    for (name, role, tenant) in
        [("vic", "viewer", None), ("otto", "operator", Some("acme")), ("ann", "approver", Some("acme"))]
    {
        r.admin_ok("PUT", "/v1/operators", Some(json!({"name": name, "role": role, "tenant": tenant}))).await;
    }
    let (vic, otto, ann) = (session(&r, "vic").await, session(&r, "otto").await, session(&r, "ann").await);
    let (_, _, me) = r.admin_as(&otto, "GET", "/v1/operators/me", None).await;
    assert_eq!((me["actor"].as_str(), me["role"].as_str()), (Some("operator:otto"), Some("operator")), "{me}");
    let (_, _, me) = r.admin("GET", "/v1/operators/me", None).await;
    assert_eq!(me["actor"], "break-glass");

    let site = |name: &str| Some(json!({"name": name}));
    // A viewer reads everything but changes nothing, the cluster included.
    assert_eq!(as_op(&r, &vic, "GET", "/v1/tenants/beta", None).await.0, 200);
    let refused = (403, "OPERATOR_ROLE_REQUIRED".to_string());
    assert_eq!(as_op(&r, &vic, "POST", "/v1/tenants/acme/sites", site("p1")).await, refused);
    assert_eq!(as_op(&r, &vic, "POST", "/v1/cluster/snapshot", None).await, refused);
    assert_eq!(as_op(&r, &vic, "PUT", "/v1/operators", Some(json!({"name": "vic", "role": "admin"}))).await, refused);
    // An approver decides but does not configure.
    assert_eq!(as_op(&r, &ann, "POST", "/v1/tenants/acme/sites", site("p1")).await, refused);
    // A tenant's operator configures its tenant, and nothing else.
    let (status, _) = as_op(&r, &otto, "POST", "/v1/tenants/acme/sites", site("plant")).await;
    assert!((200..300).contains(&status), "{status}");
    let out = (403, "OPERATOR_SCOPE_VIOLATION".to_string());
    assert_eq!(as_op(&r, &otto, "GET", "/v1/tenants/beta", None).await, out);
    assert_eq!(as_op(&r, &otto, "POST", "/v1/tenants/beta/sites", site("plant")).await, out);
    assert_eq!(as_op(&r, &otto, "GET", "/v1/tenants", None).await, out);
    assert_eq!(as_op(&r, &otto, "GET", "/v1/operators", None).await, out);

    // The trail names who acted: the person's act before the act itself.
    let acted = audit(&r, "acme", "operation=operator_acted").await;
    assert_eq!(acted.len(), 1, "{acted:?}");
    assert!(acted[0]["detail"].as_str().unwrap_or_default().contains("\"otto\""), "{}", acted[0]);
    // Refusals land in the operator's own tenant, once per kind per window however often.
    for _ in 0..20 {
        as_op(&r, &otto, "GET", "/v1/tenants/beta", None).await;
    }
    let refusals = audit(&r, "acme", "principal=operator:otto&outcome=denied").await;
    let kinds: Vec<&str> = refusals.iter().filter_map(|d| d["reason_code"].as_str()).collect();
    assert_eq!(kinds, ["OPERATOR_SCOPE_VIOLATION"], "{refusals:?}");
    assert!(audit(&r, "beta", "principal=operator:otto").await.is_empty());

    // A wrong secret, a signed-out session, a removed operator: each no session at all.
    let (prefix, _) = otto.rsplit_once('.').expect("credential");
    let invalid = (401, "OPERATOR_SESSION_INVALID".to_string());
    assert_eq!(as_op(&r, &format!("{prefix}.guess"), "GET", "/v1/operators/me", None).await, invalid);
    let (status, _) = as_op(&r, &otto, "POST", "/v1/operators/otto/sessions/close", Some(json!({}))).await;
    assert_eq!(status, 200);
    assert_eq!(as_op(&r, &otto, "GET", "/v1/operators/me", None).await, invalid);
    r.admin_ok("DELETE", "/v1/operators/vic", None).await;
    assert_eq!(as_op(&r, &vic, "GET", "/v1/tenants/beta", None).await, invalid);
}
