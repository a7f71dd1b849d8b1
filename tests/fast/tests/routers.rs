//! Router tests on the in-memory ledger (`writ_client::MemoryLedger`): the edge's request path
//! in SPEC E2 order — Host check, body limit, authentication, admission, protocol checks,
//! authorization, schema validation — and the admin API's routes, each answered by the real
//! routers through `oneshot`, with no process, socket or RocksDB.

use std::time::Duration;

use axum::body::Body;
use serde_json::{json, Value};
use writ_tests_fast::routers::{meta, Routers, EDGE_URL};

fn names(list: &Value) -> Vec<&str> {
    list["result"]["tools"].as_array().expect("tools").iter().filter_map(|t| t["name"].as_str()).collect()
}

fn catalog() -> Value {
    json!({"actions": [
        {"id": "list_devices", "title": "devices", "risk": "low", "execution": {"builtin": "writ.devices"},
         "input_schema": {"type": "object", "properties": {"limit": {"type": "integer"}}, "additionalProperties": false}},
        {"id": "dump_audit", "title": "audit", "risk": "low", "execution": {"builtin": "writ.devices"},
         "scope": "audit:read", "input_schema": {"type": "object"}}
    ]})
}

/// Revokes `token` (of tenant `acme`) through the admin API.
async fn revoke(r: &Routers, token: &str) {
    let jti = writ_api::auth::segment(token, 1).and_then(|c| c["jti"].as_str().map(str::to_string)).unwrap();
    r.admin_ok("POST", &format!("/v1/tenants/acme/tokens/{jti}/revoke"), Some(json!({}))).await;
}

/// The audit records of `tenant` with `query` (e.g. `domain=request&outcome=denied`).
async fn audit(r: &Routers, tenant: &str, query: &str) -> Vec<Value> {
    let page = r.admin_ok("GET", &format!("/v1/tenants/{tenant}/audit?{query}"), None).await;
    page["records"].as_array().cloned().unwrap_or_default()
}

#[tokio::test]
async fn the_edge_authenticates_before_anything_else() {
    let r = Routers::new();
    let tokens = r.tenant("acme", catalog(), &[("agent", Some("full"), &[])]).await;
    // No token: 401 with the protected-resource metadata in the challenge.
    let (status, headers, _) = r.call(None, "tools/list", json!({})).await;
    assert_eq!(status, 401);
    let challenge = headers["www-authenticate"].to_str().unwrap();
    assert!(challenge.contains("resource_metadata=") && challenge.contains("scope=\"tools:list\""), "{challenge}");
    let (status, _, prm) = r.edge_get("/.well-known/oauth-protected-resource/mcp").await;
    assert_eq!((status, prm["resource"].as_str()), (200, Some(EDGE_URL)));
    // A forged token, and a well-formed one that is not a token at all.
    for bad in ["not-a-token", "eyJhbGciOiJFZERTQSJ9.eyJzdWIiOiJ4In0.c2ln"] {
        let (status, headers, body) = r.call(Some(bad), "tools/list", json!({})).await;
        assert_eq!(status, 401, "{body}");
        assert!(headers["www-authenticate"].to_str().unwrap().contains("invalid_token"));
        assert_eq!(body["error"]["data"]["reason"], "AUTH_TOKEN_INVALID", "{body}");
    }
    // Authentication comes before the body is decoded: garbage without a token is a 401.
    let (status, _, _) = r.mcp(None, &[], Body::from("{not json")).await;
    assert_eq!(status, 401);
    // Revoked within the replica: refused at once.
    revoke(&r, &tokens[0]).await;
    r.caught_up().await;
    let (status, _, body) = r.call(Some(&tokens[0]), "tools/list", json!({})).await;
    assert_eq!((status, &body["error"]["data"]["reason"]), (401, &json!("AUTH_TOKEN_REVOKED")), "{body}");
}

/// Allowed reads' decisions are group-committed as one event per batch (issue 19's cheap
/// audit): the ledger writes one audit record per decision, and the edge's replica follows the
/// batch without rebuilding any of them (it keeps no audit trail; `writ://audit/recent` asks
/// the ledger).
#[tokio::test]
async fn decision_batches_are_one_event_that_the_replica_does_not_fold_into_a_trail() {
    let r = Routers::new();
    let tokens = r.tenant("acme", catalog(), &[("agent", Some("full"), &[])]).await;
    let tenant = r.ledger.with_state(|s| s.tenant("acme").map(|t| t.id.clone())).expect("tenant");
    // No request quota: its leases would be records of their own among those counted.
    r.admin_ok("PATCH", "/v1/tenants/acme/settings", Some(json!({"quotas": {}}))).await;
    r.admin_ok("PUT", "/v1/tenants/acme/principals/agent/quotas", Some(json!({}))).await;
    r.caught_up().await;
    let before = r.ledger.with_state(|s| (s.revision, s.audit[&tenant].next_seq));
    for _ in 0..20 {
        let (status, _, body) = r.call(Some(&tokens[0]), "tools/list", json!({})).await;
        assert_eq!(status, 200, "{body}");
    }
    assert!(r.audit.flush(Duration::from_secs(10)).await, "buffered decisions committed");
    let after = r.ledger.with_state(|s| (s.revision, s.audit[&tenant].next_seq));
    assert_eq!(after.1 - before.1, 20, "one audit record per decision");
    assert!(after.0 - before.0 < 20, "fewer events than decisions: {before:?} → {after:?}");
    r.caught_up().await;
    assert!(r.verifier.with_state(|s| s.audit.is_empty()), "the replica keeps no audit trail");
}

/// The edge's cache of verified tokens (issue 19): a verified token is served from the cache, and
/// the very next request after the replica folded a revocation, or a tenant's suspension, is
/// refused — no window in which the cache still accepts it.
#[tokio::test]
async fn a_cached_token_is_refused_right_after_its_revocation() {
    let r = Routers::new();
    let tokens = r.tenant("acme", catalog(), &[("agent", Some("full"), &[]), ("other", Some("full"), &[])]).await;
    for _ in 0..3 {
        let (status, _, body) = r.call(Some(&tokens[0]), "tools/list", json!({})).await;
        assert_eq!(status, 200, "{body}");
    }
    assert!(r.verifier.token_cache_hits() >= 2, "repeated requests are answered from the cache");
    revoke(&r, &tokens[0]).await;
    r.caught_up().await;
    let (status, _, body) = r.call(Some(&tokens[0]), "tools/list", json!({})).await;
    assert_eq!((status, &body["error"]["data"]["reason"]), (401, &json!("AUTH_TOKEN_REVOKED")), "{body}");
    // Another principal's cached token stops at its tenant's suspension the same way.
    let (status, _, body) = r.call(Some(&tokens[1]), "tools/list", json!({})).await;
    assert_eq!(status, 200, "{body}");
    r.admin_ok("POST", "/v1/tenants/acme/suspend", Some(json!({}))).await;
    r.caught_up().await;
    let (status, _, body) = r.call(Some(&tokens[1]), "tools/list", json!({})).await;
    assert_ne!(status, 200, "a suspended tenant's cached token is refused: {body}");
}

/// `tools/list` is rendered once per catalog and scope set (issue 19) and served from that: its
/// pages still hold every tool exactly once, and a newly published catalog is listed as soon as
/// the replica has it.
#[tokio::test]
async fn rendered_tool_lists_page_fully_and_follow_the_catalog() {
    let r = Routers::new();
    let action = |i: usize| {
        json!({"id": format!("tool_{i:03}"), "title": "t", "risk": "low", "execution": {"builtin": "writ.devices"},
               "input_schema": {"type": "object"}})
    };
    let tokens = r
        .tenant("acme", json!({"actions": (0..150).map(action).collect::<Vec<_>>()}), &[("agent", Some("full"), &[])])
        .await;
    let first = all(&r, tokens[0].clone()).await;
    let unique: std::collections::BTreeSet<&String> = first.iter().collect();
    assert_eq!(first.len(), unique.len(), "every tool once, over two pages");
    assert_eq!(first.iter().filter(|n| n.starts_with("tool_")).count(), 150, "{first:?}");
    assert_eq!(all(&r, tokens[0].clone()).await, first, "the same list again");
    let catalog = json!({"actions": (0..151).map(action).collect::<Vec<_>>()});
    r.admin_ok("POST", "/v1/tenants/acme/catalogs", Some(catalog)).await;
    r.caught_up().await;
    let after = all(&r, tokens[0].clone()).await;
    assert!(after.contains(&"tool_150".to_string()) && after.len() == first.len() + 1, "{after:?}");
}

/// Every tool name `token` is listed, page after page.
async fn all(r: &Routers, token: String) -> Vec<String> {
    let (mut names_seen, mut cursor) = (Vec::new(), None::<String>);
    loop {
        let params = cursor.as_ref().map_or(json!({}), |c| json!({"cursor": c}));
        let (status, _, page) = r.call(Some(&token), "tools/list", params).await;
        assert_eq!(status, 200, "{page}");
        names_seen.extend(names(&page).into_iter().map(str::to_string));
        match page["result"]["nextCursor"].as_str() {
            Some(next) => cursor = Some(next.to_string()),
            None => return names_seen,
        }
    }
}

#[tokio::test]
async fn hosts_and_body_size_are_checked_at_the_door() {
    let r = Routers::with_config(|c| c.body_bytes_max = 4096);
    let tokens = r.tenant("acme", catalog(), &[("agent", Some("full"), &[])]).await;
    let request = axum::http::Request::builder()
        .method("POST")
        .uri("/mcp")
        .header("host", "evil.example")
        .header("authorization", format!("Bearer {}", tokens[0]))
        .body(Body::from("{}"))
        .unwrap();
    let (status, _, _) = r.edge_raw(request).await;
    assert_eq!(status, 403, "a Host outside the allowlist is refused (DNS rebinding)");
    let huge = format!("{{\"pad\":\"{}\"}}", "x".repeat(8192));
    let (status, _, body) = r.mcp(Some(&tokens[0]), &[], Body::from(huge)).await;
    assert_eq!((status, &body["error"]["data"]["reason"]), (413, &json!("PAYLOAD_TOO_LARGE")), "{body}");
}

#[tokio::test]
async fn protocol_checks_come_in_spec_order_and_are_audited() {
    let r = Routers::new();
    let tokens = r.tenant("acme", catalog(), &[("agent", Some("full"), &[])]).await;
    let token = Some(tokens[0].as_str());
    let headers = [("MCP-Protocol-Version", "2026-07-28"), ("Mcp-Method", "tools/list")];
    let post = |body: Value| Body::from(body.to_string());
    // No `_meta`: invalid params.
    let no_meta = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}});
    let (status, _, body) = r.mcp(token, &headers, post(no_meta)).await;
    assert_eq!((status, &body["error"]["code"], &body["id"]), (400, &json!(-32602), &json!(1)), "{body}");
    // The header and `_meta` disagree: header mismatch first.
    let v999 = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {"_meta": meta("v999.0.0")}});
    let (status, _, body) = r.mcp(token, &headers, post(v999.clone())).await;
    assert_eq!((status, &body["error"]["code"]), (400, &json!(-32020)), "{body}");
    // Both say an unsupported version.
    let unsupported = [("MCP-Protocol-Version", "v999.0.0"), ("Mcp-Method", "tools/list")];
    let (status, _, body) = r.mcp(token, &unsupported, post(v999)).await;
    assert_eq!(
        (status, &body["error"]["code"], &body["error"]["data"]["requested"]),
        (400, &json!(-32022), &json!("v999.0.0"))
    );
    // `Mcp-Method` must name the body's method (base64-encoded values are decoded).
    let listed = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/list", "params": {"_meta": meta("2026-07-28")}});
    let encoded = [("MCP-Protocol-Version", "2026-07-28"), ("Mcp-Method", "=?base64?dG9vbHMvbGlzdA==?=")];
    let (status, _, body) = r.mcp(token, &encoded, post(listed.clone())).await;
    assert_eq!(status, 200, "{body}");
    let wrong = [("MCP-Protocol-Version", "2026-07-28"), ("Mcp-Method", "tools/call")];
    let (status, _, body) = r.mcp(token, &wrong, post(listed)).await;
    assert_eq!((status, &body["error"]["code"]), (400, &json!(-32020)), "{body}");
    // An unknown method.
    let (status, _, body) = r.call(token, "tools/frobnicate", json!({})).await;
    assert_eq!((status, &body["error"]["code"]), (404, &json!(-32601)), "{body}");
    // Each refusal is a denial on record, committed before the answer — but the second header
    // mismatch of `tools/list` is the same denial as the first (principal, the body's method,
    // reason) and is counted for the window's aggregate instead.
    let denied = audit(&r, "acme", "domain=request&outcome=denied").await;
    assert_eq!(denied.len(), 4, "protocol refusals are audited: {denied:#?}");
    assert!(denied.iter().all(|d| d["operation"] == "tools/list" || d["operation"] == "other"), "{denied:#?}");
}

#[tokio::test]
async fn admission_holds_the_tenants_request_quota() {
    let r = Routers::new();
    let tokens = r.tenant("acme", catalog(), &[("agent", Some("full"), &[])]).await;
    let settings = json!({"quotas": {"requests_per_minute": 3}});
    r.admin_ok("PATCH", "/v1/tenants/acme/settings", Some(settings)).await;
    r.caught_up().await;
    let mut statuses = Vec::new();
    let mut refused = None;
    for _ in 0..6 {
        let (status, headers, body) = r.call(Some(&tokens[0]), "tools/list", json!({})).await;
        statuses.push(status);
        if status == 429 {
            refused = Some((headers, body));
        }
    }
    let admitted = statuses.iter().filter(|s| **s == 200).count();
    // Requests of the window end of a minute may fall into the next window: at most 2 × 3.
    assert!((1..=6).contains(&admitted) && statuses.contains(&429), "{statuses:?}");
    let (headers, body) = refused.expect("a refusal");
    assert_eq!(body["error"]["data"]["reason"], "QUOTA_EXCEEDED", "{body}");
    assert!(headers["retry-after"].to_str().unwrap().parse::<u64>().is_ok_and(|s| (1..=61).contains(&s)));
    let denied = audit(&r, "acme", "domain=request&outcome=denied").await;
    assert!(denied.iter().any(|d| d["reason_code"] == "QUOTA_EXCEEDED"), "{denied:#?}");
}

#[tokio::test]
async fn authorization_hides_what_a_principal_may_not_call() {
    let r = Routers::new();
    let tokens = r
        .tenant(
            "acme",
            catalog(),
            &[("agent", Some("full"), &[]), ("auditor", Some("full"), &["audit:read"]), ("blind", None, &["ops:read"])],
        )
        .await;
    let (agent, auditor, blind) = (&tokens[0], &tokens[1], &tokens[2]);
    // The list is filtered by scope; a tool outside the scopes is exactly like a missing one.
    let (status, _, list) = r.call(Some(agent), "tools/list", json!({})).await;
    assert_eq!(status, 200, "{list}");
    assert!(names(&list).contains(&"list_devices") && !names(&list).contains(&"dump_audit"), "{list}");
    let (_, _, list) = r.call(Some(auditor), "tools/list", json!({})).await;
    assert!(names(&list).contains(&"dump_audit"), "{list}");
    let (_, _, hidden) = r.call(Some(agent), "tools/call", json!({"name": "dump_audit", "arguments": {}})).await;
    let (_, _, missing) = r.call(Some(agent), "tools/call", json!({"name": "no_such_tool", "arguments": {}})).await;
    assert_eq!(hidden["error"]["data"]["reason"], "TOOL_NOT_FOUND", "{hidden}");
    assert_eq!(hidden["error"]["code"], missing["error"]["code"], "hidden and missing look alike: {missing}");
    // The audit says why: the scope.
    let denied = audit(&r, "acme", "domain=request&outcome=denied").await;
    assert!(denied.iter().any(|d| d["reason_code"] == "APP_SCOPE_FORBIDDEN"), "{denied:#?}");
    // No tools:list at all: 403 with an insufficient_scope challenge.
    let (status, headers, _) = r.call(Some(blind), "tools/list", json!({})).await;
    assert_eq!(status, 403);
    assert!(headers["www-authenticate"].to_str().unwrap().contains("insufficient_scope"));
    // A suspended tenant's tokens stop working (the domain gate).
    r.admin_ok("POST", "/v1/tenants/acme/suspend", Some(json!({}))).await;
    r.caught_up().await;
    let (status, _, body) = r.call(Some(agent), "tools/list", json!({})).await;
    assert_eq!((status, &body["error"]["data"]["reason"]), (403, &json!("TENANT_SUSPENDED")), "{body}");
}

#[tokio::test]
async fn tool_input_is_validated_against_the_catalog_schema() {
    let r = Routers::new();
    let tokens = r.tenant("acme", catalog(), &[("agent", Some("full"), &[])]).await;
    let call = json!({"name": "list_devices", "arguments": {"limit": "ten", "extra": 1}});
    let (status, _, bad) = r.call(Some(&tokens[0]), "tools/call", call).await;
    assert_eq!(status, 200, "{bad}");
    assert_eq!(
        (&bad["result"]["isError"], &bad["result"]["_meta"]["writ/reason"]),
        (&json!(true), &json!("INPUT_INVALID"))
    );
    assert_eq!(bad["result"]["_meta"]["writ/errors"].as_array().map(Vec::len), Some(2), "{bad}");
    let (_, headers, good) =
        r.call(Some(&tokens[0]), "tools/call", json!({"name": "list_devices", "arguments": {"limit": 2}})).await;
    assert_eq!(good["result"]["isError"], Value::Null, "{good}");
    assert!(headers.contains_key("x-writ-trace-id"));
}

#[tokio::test]
async fn admin_routes_answer_with_reason_codes() {
    let r = Routers::new();
    // Operator authentication.
    let request = axum::http::Request::builder().uri("/v1/tenants").body(Body::empty()).unwrap();
    let (anonymous, _, body) = r.admin_raw(request).await;
    assert_eq!(body["reason"], "AUTH_TOKEN_MISSING", "{body}");
    let wrong = axum::http::Request::builder()
        .uri("/v1/tenants")
        .header("authorization", "Bearer not-the-operator-token")
        .body(Body::empty())
        .unwrap();
    let (status, _, body) = r.admin_raw(wrong).await;
    assert_eq!((status, &body["reason"]), (401, &json!("AUTH_TOKEN_INVALID")));
    assert_eq!(anonymous, 401);
    // Tenants: create, duplicate, show, list, suspend, resume, settings.
    let (status, _, created) = r.admin("POST", "/v1/tenants", Some(json!({"name": "acme"}))).await;
    assert_eq!((status, &created["name"]), (201, &json!("acme")));
    let (status, _, dup) = r.admin("POST", "/v1/tenants", Some(json!({"name": "acme"}))).await;
    assert_eq!((status, &dup["reason"]), (409, &json!("TENANT_ALREADY_EXISTS")));
    let (status, _, bad) = r.admin("POST", "/v1/tenants", Some(json!({"name": "-bad"}))).await;
    assert_eq!((status, &bad["reason"]), (400, &json!("INPUT_INVALID")));
    let (status, _, unknown) = r.admin("POST", "/v1/tenants", Some(json!({"name": "x", "colour": 1}))).await;
    assert_eq!((status, &unknown["reason"]), (400, &json!("INPUT_INVALID")), "unknown fields are refused");
    assert_eq!(r.admin_ok("GET", "/v1/tenants/acme", None).await["state"], "active");
    let (status, _, missing) = r.admin("GET", "/v1/tenants/nope", None).await;
    assert_eq!((status, &missing["reason"]), (404, &json!("TENANT_NOT_FOUND")));
    assert_eq!(r.admin_ok("GET", "/v1/tenants", None).await["tenants"].as_array().map(Vec::len), Some(1));
    r.admin_ok("POST", "/v1/tenants/acme/suspend", Some(json!({"note": "billing"}))).await;
    let (status, _, again) = r.admin("POST", "/v1/tenants/acme/suspend", Some(json!({}))).await;
    assert_eq!((status, &again["reason"]), (409, &json!("TENANT_STATE_CONFLICT")));
    r.admin_ok("POST", "/v1/tenants/acme/resume", Some(json!({}))).await;
    let settings = r.admin_ok("PATCH", "/v1/tenants/acme/settings", Some(json!({"audit_max_events": 100}))).await;
    assert_eq!(settings["settings"]["audit_max_events"], 100, "{settings}");
    // Sites, devices, principals, quotas, catalogs, tokens, audit.
    r.admin_ok("POST", "/v1/tenants/acme/sites", Some(json!({"name": "plant"}))).await;
    let device = json!({"name": "press-1", "site": "plant", "device_class": "press.v1"});
    r.admin_ok("POST", "/v1/tenants/acme/devices", Some(device)).await;
    assert_eq!(r.admin_ok("GET", "/v1/tenants/acme/devices/press-1", None).await["name"], "press-1");
    let (status, _, no_site) = r
        .admin(
            "POST",
            "/v1/tenants/acme/devices",
            Some(json!({"name": "d", "site": "nowhere", "device_class": "x.v1"})),
        )
        .await;
    assert_eq!((status, &no_site["reason"]), (404, &json!("SITE_NOT_FOUND")));
    r.admin_ok("POST", "/v1/tenants/acme/principals", Some(json!({"name": "bot", "kind": "agent", "preset": "full"})))
        .await;
    r.admin_ok("PUT", "/v1/tenants/acme/principals/bot/quotas", Some(json!({"requests_per_minute": 5}))).await;
    let quotas = r.admin_ok("GET", "/v1/tenants/acme/principals/bot/quotas", None).await;
    assert_eq!(quotas["quotas"]["requests_per_minute"], 5, "{quotas}");
    r.admin_ok("POST", "/v1/tenants/acme/catalogs", Some(catalog())).await;
    assert_eq!(r.admin_ok("GET", "/v1/tenants/acme/catalogs/1", None).await["version"], 1);
    let issued = r.admin_ok("POST", "/v1/tenants/acme/tokens", Some(json!({"principal": "bot"}))).await;
    let inspected = r.admin_ok("POST", "/v1/tokens/inspect", Some(json!({"token": issued["token"]}))).await;
    assert_eq!(inspected["valid"], true, "{inspected}");
    let long = json!({"token": "t".repeat(writ_api::auth::BEARER_BYTES_MAX + 1)});
    let (status, _, refused) = r.admin("POST", "/v1/tokens/inspect", Some(long)).await;
    assert_eq!((status, &refused["reason"]), (400, &json!("INPUT_INVALID")), "a token past its bound");
    let trail = audit(&r, "acme", "limit=1000").await;
    let kinds: Vec<&str> = trail.iter().filter_map(|rec| rec["operation"].as_str()).collect();
    for kind in ["tenant_created", "tenant_suspended", "device_created", "principal_created", "token_issued"] {
        assert!(kinds.contains(&kind), "{kind} missing from {kinds:?}");
    }
    // Operations that do not exist, and the cluster of one member.
    let (status, _, op) = r.admin("GET", "/v1/tenants/acme/operations/op-nope", None).await;
    assert_eq!((status, &op["reason"]), (404, &json!("OPERATION_NOT_FOUND")));
    let cluster = r.admin_ok("GET", "/v1/cluster/status", None).await;
    assert_eq!(cluster["leader"], 1, "{cluster}");
    let (status, _, change) =
        r.admin("POST", "/v1/cluster/learners", Some(json!({"node_id": 2, "addr": "http://x"}))).await;
    assert_eq!((status, &change["reason"]), (400, &json!("INPUT_INVALID")));
}

#[tokio::test]
async fn lists_discovery_read_audit_and_failing_closed() {
    let r = Routers::new();
    let read = |id: &str, scope: Option<&str>| json!({"id": id, "title": id, "input_schema": {"type": "object"}, "risk": "low", "execution": "read", "scope": scope});
    let catalog =
        json!({"actions": [read("read_temp", None), read("move_arm", None), read("dump_audit", Some("audit:read"))]});
    let tokens = r
        .tenant(
            "edge-co",
            catalog,
            &[
                ("full-agent", Some("full"), &[]),
                ("reader", Some("readOnly"), &["tools:call:read_temp"]),
                ("blind", None, &["ops:read"]),
            ],
        )
        .await;
    let (full, reader, blind) = (tokens[0].as_str(), tokens[1].as_str(), tokens[2].as_str());
    // A token for another audience is invalid here.
    let body = json!({"principal": "full-agent", "audience": "https://other.example/mcp"});
    let elsewhere =
        r.admin_ok("POST", "/v1/tenants/edge-co/tokens", Some(body)).await["token"].as_str().unwrap().to_string();
    let (status, headers, _) = r.call(Some(&elsewhere), "tools/list", json!({})).await;
    assert_eq!(status, 401);
    assert!(headers["www-authenticate"].to_str().unwrap().contains("invalid_token"));
    // Scope-filtered, deterministic lists.
    let (status, _, list) = r.call(Some(full), "tools/list", json!({})).await;
    assert_eq!(status, 200, "{list}");
    let expected = [
        "context.search",
        "move_arm",
        "observation.capture",
        "operation.execute",
        "operation.propose",
        "operation.readback",
        "read_temp",
    ];
    assert_eq!(names(&list), expected);
    assert_eq!(list["result"]["resultType"], "complete");
    assert!(list["result"]["ttlMs"].as_u64().is_some() && list["result"]["cacheScope"] == "private");
    let (_, _, again) = r.call(Some(full), "tools/list", json!({})).await;
    assert_eq!(names(&again), names(&list));
    // A reader may look (dry runs included) but not act.
    let (_, _, list) = r.call(Some(reader), "tools/list", json!({})).await;
    assert_eq!(names(&list), ["context.search", "operation.propose", "operation.readback", "read_temp"]);
    // A denial is on record before the answer, under the answer's trace id.
    let (status, headers, _) = r.call(Some(blind), "tools/list", json!({})).await;
    assert_eq!(status, 403);
    let denied = audit(&r, "edge-co", "domain=request&outcome=denied").await;
    let trace = headers["x-writ-trace-id"].to_str().unwrap();
    assert!(denied.iter().any(|d| d["trace_id"] == trace && d["reason_code"] == "APP_SCOPE_FORBIDDEN"), "{denied:#?}");
    let (status, _, discover) = r.call(Some(reader), "server/discover", json!({})).await;
    // The 2025 versions are served on the same endpoint through `initialize`.
    let versions = json!(["2026-07-28", "2025-11-25", "2025-06-18", "2025-03-26"]);
    assert_eq!((status, &discover["result"]["supportedVersions"]), (200, &versions));
    // Cross-origin requests and the removed GET stream.
    let cross = axum::http::Request::builder()
        .method("POST")
        .uri("/mcp")
        .header("host", "127.0.0.1:8080")
        .header("origin", "http://evil.example.com")
        .header("authorization", format!("Bearer {full}"))
        .body(Body::from("{}"))
        .unwrap();
    assert_eq!(r.edge_raw(cross).await.0, 403);
    assert_eq!(r.edge_get("/mcp").await.0, 405);
    // Allowed reads are group-committed; a flush (as at shutdown) commits what is buffered.
    assert!(r.audit.flush(Duration::from_secs(10)).await, "buffered decisions committed");
    let before = audit(&r, "edge-co", "domain=request&outcome=allowed").await.len();
    r.call(Some(reader), "server/discover", json!({})).await;
    assert!(r.audit.flush(Duration::from_secs(10)).await, "buffered decisions committed");
    assert_eq!(audit(&r, "edge-co", "domain=request&outcome=allowed").await.len(), before + 1);
    // Fail-close (E6): with the ledger gone the replica goes stale, every request is refused
    // with LEDGER_UNAVAILABLE, and the edge reports not ready.
    r.ledger.stop();
    writ_tests_fast::eventually("the edge to fail closed", Duration::from_secs(15), || async {
        let (status, _, body) = r.call(Some(reader), "tools/list", json!({})).await;
        (status == 503 && body["error"]["data"]["reason"] == "LEDGER_UNAVAILABLE").then_some(())
    })
    .await;
    // Readiness reads the same replica on its own probe: it follows within the same bound.
    writ_tests_fast::eventually("the edge to report not ready", Duration::from_secs(15), || async {
        (r.edge_get("/readyz").await.0 == 503).then_some(())
    })
    .await;
}

/// A tenant's `settings.allowed_origins` (issue 21): once the tenant lists origins, a browser
/// request (one with `Origin`) from anywhere else is refused with `ORIGIN_NOT_ALLOWED` and audited;
/// requests without `Origin` and tenants without a list keep the edge's own check only.
#[tokio::test]
async fn a_tenants_allowed_origins_are_enforced_at_the_edge() {
    let r = Routers::with_config(|c| {
        c.allowed_origins.extend(["https://app.example".to_string(), "https://other.example".to_string()])
    });
    let acme = r.tenant("acme", catalog(), &[("agent", Some("full"), &[])]).await;
    let open = r.tenant("open", catalog(), &[("agent", Some("full"), &[])]).await;
    let patch = json!({"allowed_origins": ["https://app.example"]});
    r.admin_ok("PATCH", "/v1/tenants/acme/settings", Some(patch)).await;
    r.caught_up().await;
    let list = |token: String, origin: Option<&'static str>| {
        let r = &r;
        async move {
            let body = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/list",
                              "params": {"_meta": writ_tests_fast::routers::meta("2026-07-28")}});
            let mut headers = vec![("MCP-Protocol-Version", "2026-07-28"), ("Mcp-Method", "tools/list")];
            headers.extend(origin.map(|o| ("origin", o)));
            r.mcp(Some(&token), &headers, Body::from(body.to_string())).await
        }
    };
    assert_eq!(list(acme[0].clone(), Some("https://app.example")).await.0, 200);
    assert_eq!(list(acme[0].clone(), None).await.0, 200, "not a browser: the tenant's list does not apply");
    let (status, headers, body) = list(acme[0].clone(), Some("https://other.example")).await;
    assert_eq!((status, &body["error"]["data"]["reason"]), (403, &json!("ORIGIN_NOT_ALLOWED")), "{body}");
    let denied = audit(&r, "acme", "domain=request&outcome=denied").await;
    let trace = headers["x-writ-trace-id"].to_str().unwrap();
    assert!(denied.iter().any(|d| d["trace_id"] == trace && d["reason_code"] == "ORIGIN_NOT_ALLOWED"), "{denied:#?}");
    assert_eq!(list(open[0].clone(), Some("https://other.example")).await.0, 200, "a tenant without a list");
}
