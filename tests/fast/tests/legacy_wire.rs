//! The 2025 wire's sessions against bad input, in process (the edge and admin routers over an
//! in-memory ledger): a session id is its caller's alone (tenant, principal and credential),
//! forged, replayed-elsewhere or ended ids are refused with SESSION_NOT_FOUND, misuse of the
//! wire with SESSION_INVALID, every refusal is audited (repeats aggregated), and opening
//! sessions — even a flood of them — writes no session record: only a client's own change does.

use std::time::Duration;

use axum::body::Body;
use serde_json::{json, Value};
use writ_tests_fast::routers::{Answer, Routers};

fn catalog() -> Value {
    json!({"actions": [{"id": "list_devices", "title": "devices", "risk": "low",
                        "execution": {"builtin": "writ.devices"}, "input_schema": {"type": "object"}}]})
}

fn initialize_body(version: &str, client_info: Value, capabilities: Value) -> Body {
    let params = json!({"protocolVersion": version, "capabilities": capabilities, "clientInfo": client_info});
    Body::from(json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": params}).to_string())
}

async fn initialize(r: &Routers, token: &str) -> String {
    let (status, headers, body) =
        r.mcp(Some(token), &[], initialize_body("2025-11-25", json!({"name": "t", "version": "1"}), json!({}))).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["result"]["protocolVersion"], "2025-11-25");
    headers["mcp-session-id"].to_str().expect("a session id").to_string()
}

/// A request (or any message) of the session `sid`.
async fn send(r: &Routers, token: &str, sid: &str, message: Value) -> Answer {
    let headers = [("mcp-session-id", sid), ("mcp-protocol-version", "2025-11-25")];
    r.mcp(Some(token), &headers, Body::from(message.to_string())).await
}

async fn request(r: &Routers, token: &str, sid: &str, method: &str, params: Value) -> Answer {
    send(r, token, sid, json!({"jsonrpc": "2.0", "id": 9, "method": method, "params": params})).await
}

fn reason(answer: &Answer) -> &str {
    answer.2["error"]["data"]["reason"].as_str().unwrap_or_default()
}

async fn delete(r: &Routers, token: &str, sid: &str) -> u16 {
    let request = axum::http::Request::builder()
        .method("DELETE")
        .uri("/mcp")
        .header("host", "127.0.0.1:8080")
        .header("authorization", format!("Bearer {token}"))
        .header("mcp-session-id", sid)
        .body(Body::empty())
        .unwrap();
    r.edge_raw(request).await.0
}

async fn denied(r: &Routers, tenant: &str) -> Vec<Value> {
    let page = r.admin_ok("GET", &format!("/v1/tenants/{tenant}/audit?domain=request&outcome=denied"), None).await;
    page["records"].as_array().cloned().unwrap_or_default()
}

fn session_records(r: &Routers) -> usize {
    r.ledger.with_state(|s| s.sessions.values().map(|m| m.len()).sum())
}

#[tokio::test]
async fn a_session_is_its_callers_alone_and_bad_session_input_changes_nothing() {
    let r = Routers::new();
    let acme = r.tenant("acme", catalog(), &[("agent", Some("full"), &[]), ("other", Some("full"), &[])]).await;
    let (agent, other) = (&acme[0], &acme[1]);
    let beta = r.tenant("beta", catalog(), &[("agent", Some("full"), &[])]).await;
    let second = r.admin_ok("POST", "/v1/tenants/acme/tokens", Some(json!({"principal": "agent"}))).await;
    let second = second["token"].as_str().unwrap().to_string();
    r.caught_up().await;

    let sid = initialize(&r, agent).await;
    assert!(sid.bytes().all(|b| (0x21..=0x7e).contains(&b)), "visible ASCII");
    assert_eq!(request(&r, agent, &sid, "ping", json!({})).await.2["result"], json!({}));
    let listed = request(&r, agent, &sid, "tools/list", json!({})).await;
    assert!(listed.2["result"]["tools"].as_array().is_some_and(|t| !t.is_empty()), "{}", listed.2);

    // Forged, garbage, or another caller's: as if it did not exist (404).
    let mut forged = sid.clone().into_bytes();
    let last = forged.len() - 1;
    forged[last] = if forged[last] == b'A' { b'B' } else { b'A' };
    let forged = String::from_utf8(forged).unwrap();
    for (token, id, why) in [
        (agent.as_str(), forged.as_str(), "a forged id"),
        (agent, "not-a-session", "garbage"),
        (other, sid.as_str(), "another principal"),
        (&beta[0], sid.as_str(), "another tenant"),
        (&second, sid.as_str(), "another token of the same principal"),
    ] {
        let answer = request(&r, token, id, "tools/list", json!({})).await;
        assert_eq!((answer.0, reason(&answer)), (404, "SESSION_NOT_FOUND"), "{why}: {}", answer.2);
    }
    // Misuse of the wire: initialize inside a session, a response nothing waits for, a
    // request of neither era.
    let again = send(&r, agent, &sid, json!({"jsonrpc": "2.0", "id": 2, "method": "initialize", "params": {}})).await;
    assert_eq!((again.0, reason(&again)), (400, "SESSION_INVALID"), "{}", again.2);
    let stray = send(&r, agent, &sid, json!({"jsonrpc": "2.0", "id": "writ-x", "result": {}})).await;
    assert_eq!((stray.0, reason(&stray)), (400, "SESSION_INVALID"), "{}", stray.2);
    let bare = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/list"}).to_string();
    assert_eq!(r.mcp(Some(agent), &[], Body::from(bare)).await.0, 400, "no session and no _meta");
    // Hostile initialize: oversized clientInfo, capabilities that are not an object, a version
    // nobody serves (the error names the supported ones); an older dated one is offered 2025-11-25.
    let big = json!({"name": "x".repeat(2000), "version": "1"});
    let oversized = r.mcp(Some(agent), &[], initialize_body("2025-11-25", big, json!({}))).await;
    assert_eq!((oversized.0, reason(&oversized)), (400, "SESSION_INVALID"), "{}", oversized.2);
    assert!(oversized.1.get("mcp-session-id").is_none());
    let listy = r.mcp(Some(agent), &[], initialize_body("2025-11-25", json!({}), json!([1]))).await;
    assert_eq!(reason(&listy), "SESSION_INVALID");
    let future = r.mcp(Some(agent), &[], initialize_body("v999", json!({}), json!({}))).await;
    assert_eq!((future.0, &future.2["error"]["code"]), (400, &json!(-32602)), "{}", future.2);
    let supported = &future.2["error"]["data"]["supported"];
    assert!(supported.as_array().unwrap().contains(&json!("2025-11-25")), "{supported}");
    assert_eq!(future.2["error"]["data"]["requested"], "v999");
    let older = r.mcp(Some(agent), &[], initialize_body("2024-11-05", json!({}), json!({}))).await;
    assert_eq!(older.2["result"]["protocolVersion"], "2025-11-25");
    // DELETE of someone else's session: refused, and the session lives on.
    assert_eq!(delete(&r, other, &sid).await, 404);
    assert_eq!(request(&r, agent, &sid, "ping", json!({})).await.0, 200);

    // A flood of initialize calls writes no session record.
    for _ in 0..100 {
        initialize(&r, agent).await;
    }
    r.caught_up().await;
    assert_eq!(session_records(&r), 0, "opening sessions writes nothing");
    // A client's change is one record, a repeat none.
    for _ in 0..3 {
        let set = request(&r, agent, &sid, "logging/setLevel", json!({"level": "debug"})).await;
        assert_eq!(set.2["result"], json!({}), "{}", set.2);
    }
    let loud = request(&r, agent, &sid, "logging/setLevel", json!({"level": "shout"})).await;
    assert_eq!(reason(&loud), "INPUT_INVALID", "{}", loud.2);
    let sub = request(&r, agent, &sid, "resources/subscribe", json!({"uri": "writ://audit/recent"})).await;
    assert_eq!(sub.2["result"], json!({}), "{}", sub.2);
    let long = request(&r, agent, &sid, "resources/subscribe", json!({"uri": "x".repeat(2000)})).await;
    assert_eq!(reason(&long), "INPUT_INVALID", "{}", long.2);
    r.caught_up().await;
    let record = r.ledger.with_state(|s| s.sessions.values().flat_map(|m| m.values()).next().cloned()).unwrap();
    assert_eq!((record.log_level.as_deref(), record.subscriptions.len()), (Some("debug"), 1));
    assert_eq!(session_records(&r), 1);

    // Ended by its caller: refused from then on, whatever is asked.
    assert_eq!(delete(&r, agent, &sid).await, 204);
    for method in ["ping", "tools/list", "logging/setLevel"] {
        let answer = request(&r, agent, &sid, method, json!({"level": "info"})).await;
        assert_eq!((answer.0, reason(&answer)), (404, "SESSION_NOT_FOUND"), "{method}");
    }

    // Every refusal is on the record (repeats within the window aggregated), in the caller's
    // own tenant.
    assert!(r.audit.flush(Duration::from_secs(10)).await);
    let acme_denied = denied(&r, "acme").await;
    for want in ["SESSION_NOT_FOUND", "SESSION_INVALID", "PROTOCOL_VERSION_UNSUPPORTED"] {
        assert!(acme_denied.iter().any(|d| d["reason_code"] == want), "{want}: {acme_denied:#?}");
    }
    assert!(denied(&r, "beta").await.iter().any(|d| d["reason_code"] == "SESSION_NOT_FOUND"));
}
