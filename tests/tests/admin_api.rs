//! The admin API and `writ admin` CLI against a real single-node ledger: bad input gets clear
//! reason codes, authentication is enforced, the watch stream delivers events in order.

use std::time::Duration;

use serde_json::{json, Value};
use writ_tests::procs::{run_cli, single_node, writ_bin, Admin, TEST_OPERATOR_TOKEN};

async fn raw(url: &str, method: &str, path: &str, token: Option<&str>, body: Option<&str>) -> (u16, Value) {
    let client = writ_tests::pki::http(None);
    let mut rb = client.request(method.parse().expect("method"), format!("{url}{path}"));
    if let Some(t) = token {
        rb = rb.bearer_auth(t);
    }
    if let Some(b) = body {
        rb = rb.header("content-type", "application/json").body(b.to_string());
    }
    let resp = rb.send().await.expect("send");
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_and_auth_get_reason_codes() {
    let (node, _dir) = single_node().await;
    let url = node.url.as_str();
    let tok = Some(TEST_OPERATOR_TOKEN);
    let big = format!("{{\"name\":\"{}\"}}", "a".repeat(70 * 1024));
    // (method, path, token, body, expected status, expected reason)
    type Case<'a> = (&'a str, &'a str, Option<&'a str>, Option<&'a str>, u16, &'a str);
    let cases: Vec<Case> = vec![
        ("POST", "/v1/tenants", None, Some(r#"{"name":"acme"}"#), 401, "AUTH_TOKEN_MISSING"),
        ("POST", "/v1/tenants", Some("wrong-token-wrong-token"), Some(r#"{"name":"acme"}"#), 401, "AUTH_TOKEN_INVALID"),
        ("GET", "/v1/cluster/status", None, None, 401, "AUTH_TOKEN_MISSING"),
        ("POST", "/v1/tenants", tok, Some(r#"{"name":"#), 400, "INPUT_INVALID"),
        ("POST", "/v1/tenants", tok, Some(r#"{"name":"acme","colour":"blue"}"#), 400, "INPUT_INVALID"),
        ("POST", "/v1/tenants", tok, Some(r#"{"name":42}"#), 400, "INPUT_INVALID"),
        ("POST", "/v1/tenants", tok, Some(r#"{"name":"Not Valid"}"#), 400, "INPUT_INVALID"),
        ("POST", "/v1/tenants", tok, Some(&big), 413, "PAYLOAD_TOO_LARGE"),
        ("POST", "/v1/tenants", tok, Some(r#"{"name":"acme"}"#), 201, ""),
        ("POST", "/v1/tenants", tok, Some(r#"{"name":"acme"}"#), 409, "TENANT_ALREADY_EXISTS"),
        ("GET", "/v1/tenants/nope", tok, None, 404, "TENANT_NOT_FOUND"),
        ("POST", "/v1/tenants/acme/resume", tok, None, 409, "TENANT_STATE_CONFLICT"),
        ("POST", "/v1/tenants/acme/suspend", tok, Some(r#"{"note":"billing"}"#), 200, ""),
        ("POST", "/v1/tenants/acme/suspend", tok, None, 409, "TENANT_STATE_CONFLICT"),
        ("POST", "/v1/tenants/acme/suspend", tok, Some(r#"{"nope":1}"#), 400, "INPUT_INVALID"),
        ("GET", "/v1/tenants?limit=0", tok, None, 400, "INPUT_INVALID"),
        ("GET", "/v1/tenants?bogus=1", tok, None, 400, "INPUT_INVALID"),
        ("GET", "/v1/nothing-here", tok, None, 404, "NOT_FOUND"),
        ("DELETE", "/v1/tenants", tok, None, 405, "METHOD_NOT_ALLOWED"),
        ("PATCH", "/v1/tenants/acme/settings", tok, Some(r#"{"idempotency_retention_s":3600}"#), 400, "INPUT_INVALID"),
        (
            "PATCH",
            "/v1/tenants/acme/settings",
            tok,
            Some(r#"{"audit_max_events":10,"colour":1}"#),
            400,
            "INPUT_INVALID",
        ),
        (
            "PATCH",
            "/v1/tenants/acme/settings",
            tok,
            Some(r#"{"allowed_origins":["https://x.example/p"]}"#),
            400,
            "INPUT_INVALID",
        ),
        ("PATCH", "/v1/tenants/nope/settings", tok, Some(r#"{"audit_max_events":10}"#), 404, "TENANT_NOT_FOUND"),
        ("PATCH", "/v1/tenants/acme/settings", None, Some(r#"{"audit_max_events":10}"#), 401, "AUTH_TOKEN_MISSING"),
    ];
    for (method, path, token, body, status, reason) in cases {
        let (got_status, got) = raw(url, method, path, token, body).await;
        assert_eq!(got_status, status, "{method} {path} {body:?}: {got}");
        if !reason.is_empty() {
            assert_eq!(got["reason"], reason, "{method} {path}: {got}");
            assert!(got["message"].as_str().is_some_and(|m| !m.is_empty()), "{got}");
            assert!(got["code"].as_u64().is_some(), "{got}");
        }
    }
    // The unknown field is named in the message.
    let (_, got) = raw(url, "POST", "/v1/tenants", tok, Some(r#"{"name":"x","colour":"blue"}"#)).await;
    assert!(got["message"].as_str().unwrap_or("").contains("colour"), "{got}");
    // A valid patch changes only what it names; the ledger's message names the broken rule.
    let (s, t) =
        raw(url, "PATCH", "/v1/tenants/acme/settings", tok, Some(r#"{"audit_max_events":500,"audit_mode":"strict"}"#))
            .await;
    assert_eq!(s, 200, "{t}");
    assert_eq!(t["settings"]["audit_max_events"], 500);
    assert_eq!(t["settings"]["audit_mode"], "strict");
    assert_eq!(t["settings"]["idempotency_retention_s"], 86_400);
    let (_, e) = raw(url, "PATCH", "/v1/tenants/acme/settings", tok, Some(r#"{"idempotency_retention_s":60}"#)).await;
    assert!(e["message"].as_str().unwrap_or("").contains("24 h"), "{e}");
    // Health, readiness and Prometheus metrics are served by the node.
    let http = writ_tests::pki::http(None);
    for path in ["/healthz", "/readyz"] {
        assert_eq!(http.get(format!("{url}{path}")).send().await.expect(path).status().as_u16(), 200, "{path}");
    }
    let metrics = http.get(format!("{url}/metrics")).send().await.expect("metrics").text().await.expect("text");
    for name in
        ["writ_raft_term", "writ_raft_is_leader 1", "writ_ledger_submits_total", "writ_log_group_commit_appends"]
    {
        assert!(metrics.contains(name), "{name} missing from /metrics:\n{metrics}");
    }
    // Histograms with buckets (seconds and counts), never summaries.
    for name in ["writ_ledger_submit_seconds_bucket{le=\"0.0005\"}", "writ_log_group_commit_appends_bucket{le=\"1\"}"] {
        assert!(metrics.contains(name), "{name} missing from /metrics:\n{metrics}");
    }
    assert!(!metrics.contains("quantile="), "{metrics}");
    // What RocksDB holds in memory, by part: the writes above sit in memtables.
    let rocksdb = |part: &str| {
        let prefix = format!("writ_rocksdb_memory_bytes{{part=\"{part}\"}} ");
        metrics.lines().find_map(|l| l.strip_prefix(prefix.as_str())).and_then(|v| v.parse::<f64>().ok())
    };
    assert!(rocksdb("memtables") > Some(0.0), "{metrics}");
    for part in ["table_readers", "block_cache", "block_cache_pinned"] {
        assert!(rocksdb(part).is_some(), "{part} missing from /metrics:\n{metrics}");
    }
    // How far its compactions are behind: the writes above left files to flush, none stopped.
    let compaction = |part: &str| {
        let prefix = format!("writ_rocksdb_compaction{{part=\"{part}\"}} ");
        metrics.lines().find_map(|l| l.strip_prefix(prefix.as_str())).and_then(|v| v.parse::<f64>().ok())
    };
    assert_eq!(compaction("write_stopped"), Some(0.0), "{metrics}");
    for part in ["l0_files_max", "pending_bytes", "delayed_write_rate", "running"] {
        assert!(compaction(part).is_some(), "{part} missing from /metrics:\n{metrics}");
    }
    // The runtime's stall probe has woken (every 10 ms since the node started).
    assert!(metrics.contains("writ_runtime_stall_seconds_bucket{le=\"0.0005\"}"), "{metrics}");
    // What the system allocator has handed out (this process runs on it).
    let held = metrics.lines().find_map(|l| l.strip_prefix("writ_allocator_bytes{part=\"in_use\"} "));
    assert!(held.and_then(|v| v.parse::<f64>().ok()) > Some(0.0), "{metrics}");
    for name in [
        "writ_operations_by_state{state=\"unknown_effect\",tenant_class=\"standard\"} 0",
        "writ_operations_by_state{state=\"unknown_effect\",tenant_class=\"strict\"} 0",
        "writ_ledger_records{kind=\"bindings\"} 0",
        "writ_ledger_records{kind=\"tokens\"}",
        "writ_build_info{role=\"node\"",
    ] {
        assert!(metrics.contains(name), "{name} missing from /metrics:\n{metrics}");
    }
    // OpenAPI is public and lists the tenant routes.
    let (s, doc) = raw(url, "GET", "/v1/openapi.json", None, None).await;
    assert_eq!(s, 200);
    assert!(doc["paths"]["/v1/tenants"].is_object());
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_drives_tenants_with_trustworthy_exit_codes() {
    let (node, _dir) = single_node().await;
    let cli = |args: &[&str]| run_cli(&node.url, args);
    let (code, out, err) = cli(&["tenant", "create", "globex", "--display-name", "Globex", "--output", "json"]);
    assert_eq!(code, 0, "{err}");
    let t: Value = serde_json::from_str(&out).expect("json output");
    assert_eq!(t["name"], "globex");
    assert_eq!(t["state"], "active");
    // A fresh tenant is bounded from its first entry: the default quotas, unless asked not to.
    let defaults = serde_json::to_value(writ_api::settings::QuotasV1::fresh_tenant()).unwrap();
    assert_eq!(t["settings"]["quotas"], defaults, "{t}");
    assert!(t["settings"]["quotas"]["requests_per_minute"].as_u64().is_some_and(|n| n > 0), "{t}");
    let (code, out, err) = cli(&["tenant", "create", "unbounded", "--no-quotas", "--output", "json"]);
    assert_eq!(code, 0, "{err}");
    let t: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        t["settings"]["quotas"],
        json!({"requests_per_minute": null, "operations_per_minute": null,
        "cost_units_per_day": null, "concurrent_operations": null}),
        "{t}"
    );

    let (code, _, err) = cli(&["tenant", "create", "globex"]);
    assert_eq!(code, 1, "duplicate must exit 1");
    assert!(err.contains("TENANT_ALREADY_EXISTS"), "{err}");

    let (code, out, _) = cli(&["tenant", "suspend", "globex", "--note", "audit"]);
    assert_eq!(code, 0);
    assert!(out.contains("suspended"), "{out}");
    let (code, out, _) = cli(&["tenant", "list"]);
    assert_eq!(code, 0);
    assert!(out.starts_with("NAME") && out.contains("globex"), "{out}");
    let (code, _, _) = cli(&["tenant", "resume", "globex"]);
    assert_eq!(code, 0);
    // A deleted tenant is a tombstone: shown as deleted, refusing every change.
    assert_eq!(cli(&["tenant", "create", "initech"]).0, 0);
    let (code, out, err) = cli(&["tenant", "delete", "initech", "--note", "offboarded"]);
    assert!(code == 0 && out.contains("deleted"), "{out}{err}");
    let (code, _, err) = cli(&["tenant", "resume", "initech"]);
    assert!(code == 1 && err.contains("TENANT_DELETED"), "{err}");
    // Its data is kept for the retention (30 days of ledger time) before it may be purged.
    let (code, _, err) = cli(&["tenant", "purge", "initech"]);
    assert!(code == 1 && err.contains("TENANT_STATE_CONFLICT") && err.contains("kept until"), "{err}");
    let (code, out, err) = cli(&[
        "tenant",
        "set",
        "globex",
        "--audit-mode",
        "strict",
        "--idempotency-retention",
        "48h",
        "--allowed-origin",
        "https://app.example",
        "--requests-per-minute",
        "600",
        "--output",
        "json",
    ]);
    assert_eq!(code, 0, "{err}");
    let t: Value = serde_json::from_str(&out).expect("json output");
    assert_eq!(t["settings"]["idempotency_retention_s"], 172_800);
    assert_eq!(t["settings"]["allowed_origins"], json!(["https://app.example"]));
    assert_eq!(t["settings"]["quotas"]["requests_per_minute"], 600);
    let (code, _, err) = cli(&["tenant", "set", "globex", "--idempotency-retention", "1h"]);
    assert_eq!(code, 1);
    assert!(err.contains("INPUT_INVALID"), "{err}");
    let (code, out, _) = cli(&["tenant", "show", "globex"]);
    assert_eq!(code, 0);
    assert!(out.contains("audit_mode") && out.contains("strict"), "{out}");
    let (code, out, _) = cli(&["cluster", "status"]);
    assert_eq!(code, 0);
    assert!(out.contains("leader"), "{out}");

    // Wrong token → 4; unreachable → 3; no endpoint → 2.
    let out = std::process::Command::new(writ_bin())
        .args(["admin", "tenant", "list", "--url", &node.url, "--token", "not-the-operator-token"])
        .env("WRIT_CA_FILE", writ_tests::pki::ca_file())
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(4));
    let out = std::process::Command::new(writ_bin())
        .args(["admin", "tenant", "list", "--url", "http://127.0.0.1:1", "--token", "x"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(3));
    let out = std::process::Command::new(writ_bin())
        .args(["admin", "tenant", "list"])
        .env_remove("WRIT_ADMIN_URL")
        .env_remove("WRIT_ADMIN_TOKEN")
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2));
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_streams_events_from_a_revision_with_filters() {
    let (node, _dir) = single_node().await;
    let admin = Admin::new();
    for name in ["w-a", "w-b", "w-c"] {
        assert!(admin.create_tenant(&node.url, name).await.expect("create"));
    }
    admin.post_ok(&node.url, "/v1/tenants/w-b/suspend", json!({})).await;
    // From revision 1, only tenant_created events: the three creates, in order, then live ones.
    let http = writ_tests::pki::http(Some((writ_api::role::Role::Edge, "watcher")));
    let resp = http.get(format!("{}/client/watch?from=1&kind=tenant_created", node.url)).send().await.expect("watch");
    assert_eq!(resp.status().as_u16(), 200);
    let mut stream = resp.bytes_stream();
    let live = admin.clone();
    let url = node.url.clone();
    tokio::spawn(async move { live.create_tenant(&url, "w-d").await });
    let mut buf = String::new();
    let mut events: Vec<Value> = Vec::new();
    use futures::StreamExt;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while events.len() < 4 {
        let chunk = tokio::time::timeout_at(deadline, stream.next()).await.expect("watch delivered in time");
        buf.push_str(&String::from_utf8_lossy(&chunk.expect("stream open").expect("chunk")));
        while let Some(nl) = buf.find('\n') {
            let line: String = buf.drain(..=nl).collect();
            events.push(serde_json::from_str(&line).expect("ndjson line"));
        }
    }
    let names: Vec<&str> =
        events.iter().map(|e| e["event"]["TenantCreatedV1"]["name"].as_str().unwrap_or("?")).collect();
    assert_eq!(names, ["w-a", "w-b", "w-c", "w-d"]);
    let revs: Vec<u64> = events.iter().map(|e| e["revision"].as_u64().unwrap_or(0)).collect();
    assert!(revs.windows(2).all(|w| w[0] < w[1]), "{revs:?}");
    // Each tenant stream is gap-free from 1.
    assert!(events.iter().all(|e| e["seq"] == 1));

    // The binary encoding edges use (`BINARY_MEDIA_TYPE`): the same watch as frames, and a
    // submit answered in bincode.
    let tls = writ_tests::pki::client_tls(writ_api::role::Role::Edge, "watcher");
    let wire = writ_client::NodeHttp::with_tls(Some(&tls));
    let raw = http
        .get(format!("{}/client/watch?from=1", node.url))
        .header("accept", writ_api::dto::BINARY_MEDIA_TYPE)
        .send()
        .await
        .expect("binary watch");
    assert_eq!(raw.headers()["content-type"], writ_api::dto::BINARY_MEDIA_TYPE);
    drop(raw);
    let filter =
        writ_api::dto::WatchFilter { from: Some(1), kind: Some("tenant_created".into()), ..Default::default() };
    let mut frames = wire.watch(&node.url, &filter).await.expect("watch frames");
    let mut binary_names = Vec::new();
    while binary_names.len() < 4 {
        let line = tokio::time::timeout_at(deadline, frames.next()).await.expect("frames in time").expect("open");
        if let writ_api::dto::WatchLine::Event(e) = line {
            if let writ_api::ledger::Event::TenantCreatedV1 { name, .. } = e.event {
                binary_names.push(name);
            }
        }
    }
    assert_eq!(binary_names, ["w-a", "w-b", "w-c", "w-d"]);
    let tenant_id = admin.get(&node.url, "/v1/tenants/w-a").await.expect("tenant")["id"].as_str().unwrap().to_string();
    let lease = writ_api::ledger::Command::LeaseRequestQuota { tenant_id, principal_id: "nobody".into(), wanted: 1 };
    let req = writ_api::dto::SubmitRequest::new("binary", lease);
    let answer = wire.submit(&node.url, &req, false).await.expect("binary submit");
    assert!(matches!(answer.outcome, writ_api::ledger::Outcome::Rejected { .. }), "{:?}", answer.outcome);
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn principals_lifecycle_through_api_and_cli() {
    let (node, _dir) = single_node().await;
    let url = node.url.as_str();
    let tok = Some(TEST_OPERATOR_TOKEN);
    let (s, _) = raw(url, "POST", "/v1/tenants", tok, Some(r#"{"name":"lab"}"#)).await;
    assert_eq!(s, 201);
    let (s, _) = raw(url, "POST", "/v1/tenants", tok, Some(r#"{"name":"other"}"#)).await;
    assert_eq!(s, 201);
    let create = r#"{"name":"planner","kind":"agent","preset":"readOnly","scopes":["tools:call:move_arm"],"metadata":{"team":"robots"}}"#;
    let (s, p) = raw(url, "POST", "/v1/tenants/lab/principals", tok, Some(create)).await;
    assert_eq!(s, 201, "{p}");
    assert_eq!(p["kind"], "agent");
    assert_eq!(p["state"], "active");
    let scopes: Vec<&str> = p["scopes"].as_array().expect("scopes").iter().filter_map(|v| v.as_str()).collect();
    assert!(scopes.contains(&"ops:read") && scopes.contains(&"tools:call:move_arm"), "{scopes:?}");
    // A new principal has quotas of its own, in the same entry as its creation.
    let (s, q) = raw(url, "GET", "/v1/tenants/lab/principals/planner/quotas", tok, None).await;
    assert_eq!(s, 200, "{q}");
    assert_eq!(q["quotas"], serde_json::to_value(writ_api::quota::PrincipalQuotasV2::fresh_principal()).unwrap());

    type Case<'a> = (&'a str, &'a str, Option<&'a str>, u16, &'a str);
    let cases: Vec<Case> = vec![
        ("POST", "/v1/tenants/lab/principals", Some(create), 409, "PRINCIPAL_ALREADY_EXISTS"),
        (
            "POST",
            "/v1/tenants/lab/principals",
            Some(r#"{"name":"x","kind":"agent","scopes":["root:all"]}"#),
            400,
            "INPUT_INVALID",
        ),
        (
            "POST",
            "/v1/tenants/lab/principals",
            Some(r#"{"name":"x","kind":"robot","preset":"full"}"#),
            400,
            "INPUT_INVALID",
        ),
        ("POST", "/v1/tenants/lab/principals", Some(r#"{"name":"x","kind":"agent"}"#), 400, "INPUT_INVALID"),
        (
            "POST",
            "/v1/tenants/nope/principals",
            Some(r#"{"name":"x","kind":"agent","preset":"full"}"#),
            404,
            "TENANT_NOT_FOUND",
        ),
        // Tenant isolation: the principal does not exist as far as another tenant is concerned.
        ("GET", "/v1/tenants/other/principals/planner", None, 404, "PRINCIPAL_NOT_FOUND"),
        (
            "POST",
            "/v1/tenants/lab/principals/planner/scopes/revoke",
            Some(r#"{"scope":"ops:execute"}"#),
            400,
            "INPUT_INVALID",
        ),
        ("POST", "/v1/tenants/lab/principals/ghost/revoke", None, 404, "PRINCIPAL_NOT_FOUND"),
    ];
    for (method, path, body, status, reason) in cases {
        let (got_status, got) = raw(url, method, path, tok, body).await;
        assert_eq!(got_status, status, "{method} {path} {body:?}: {got}");
        assert_eq!(got["reason"], reason, "{method} {path}: {got}");
    }
    let (_, e) = raw(
        url,
        "POST",
        "/v1/tenants/lab/principals",
        tok,
        Some(r#"{"name":"x","kind":"agent","scopes":["root:all"]}"#),
    )
    .await;
    assert!(e["message"].as_str().unwrap_or("").contains("unknown scope 'root:all'"), "{e}");

    // CLI: create with a preset, list, revoke a scope, revoke the principal.
    let cli = |args: &[&str]| run_cli(&node.url, args);
    let (code, out, err) = cli(&[
        "principal",
        "create",
        "--tenant",
        "lab",
        "runner",
        "--kind",
        "service",
        "--preset",
        "full",
        "--meta",
        "owner=ops",
        "-o",
        "json",
    ]);
    assert_eq!(code, 0, "{err}");
    let runner: Value = serde_json::from_str(&out).expect("json");
    assert_eq!(runner["metadata"]["owner"], "ops");
    let (code, out, _) = cli(&["principal", "list", "--tenant", "lab"]);
    assert_eq!(code, 0);
    assert!(out.contains("planner") && out.contains("runner"), "{out}");
    let (code, out, err) =
        cli(&["principal", "revoke-scope", "--tenant", "lab", "runner", "ops:execute", "-o", "json"]);
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).expect("json");
    assert!(v["revoked_scopes"].as_array().is_some_and(|a| a.iter().any(|s| s == "ops:execute")), "{v}");
    let (code, _, _) = cli(&["principal", "revoke", "--tenant", "lab", "runner", "--note", "rotated"]);
    assert_eq!(code, 0);
    let (code, _, err) = cli(&["principal", "revoke", "--tenant", "lab", "runner"]);
    assert_eq!(code, 1);
    assert!(err.contains("PRINCIPAL_STATE_CONFLICT"), "{err}");
    let (code, _, err) = cli(&["principal", "create", "--tenant", "lab", "z", "--kind", "agent", "--scope", "nope:x"]);
    assert_eq!(code, 1);
    assert!(err.contains("INPUT_INVALID"), "{err}");
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sites_and_devices_through_api_and_cli() {
    let (node, _dir) = single_node().await;
    let url = node.url.as_str();
    let tok = Some(TEST_OPERATOR_TOKEN);
    for name in ["plantco", "rival"] {
        let (s, _) = raw(url, "POST", "/v1/tenants", tok, Some(&format!(r#"{{"name":"{name}"}}"#))).await;
        assert_eq!(s, 201);
    }
    let (s, site) =
        raw(url, "POST", "/v1/tenants/plantco/sites", tok, Some(r#"{"name":"north","display_name":"North plant"}"#))
            .await;
    assert_eq!(s, 201, "{site}");
    let (s, dev) = raw(
        url,
        "POST",
        "/v1/tenants/plantco/devices",
        tok,
        Some(r#"{"name":"press-1","site":"north","device_class":"press.v1"}"#),
    )
    .await;
    assert_eq!(s, 201, "{dev}");
    assert_eq!(dev["site_id"], site["id"]);

    type Case<'a> = (&'a str, &'a str, Option<&'a str>, u16, &'a str);
    let cases: Vec<Case> = vec![
        ("POST", "/v1/tenants/plantco/sites", Some(r#"{"name":"north"}"#), 409, "SITE_ALREADY_EXISTS"),
        (
            "POST",
            "/v1/tenants/plantco/devices",
            Some(r#"{"name":"press-1","site":"north","device_class":"press.v1"}"#),
            409,
            "DEVICE_ALREADY_EXISTS",
        ),
        (
            "POST",
            "/v1/tenants/plantco/devices",
            Some(r#"{"name":"x","site":"south","device_class":"press.v1"}"#),
            404,
            "SITE_NOT_FOUND",
        ),
        (
            "POST",
            "/v1/tenants/plantco/devices",
            Some(r#"{"name":"x","site":"north","device_class":"no spaces"}"#),
            400,
            "INPUT_INVALID",
        ),
        ("POST", "/v1/tenants/plantco/devices", Some(r#"{"name":"x","site":"north"}"#), 400, "INPUT_INVALID"),
        // Tenant isolation: another tenant can neither see nor use plantco's site or device.
        ("GET", "/v1/tenants/rival/devices/press-1", None, 404, "DEVICE_NOT_FOUND"),
        (
            "POST",
            "/v1/tenants/rival/devices",
            Some(r#"{"name":"x","site":"north","device_class":"press.v1"}"#),
            404,
            "SITE_NOT_FOUND",
        ),
        ("GET", "/v1/tenants/plantco/devices?site=south", None, 404, "SITE_NOT_FOUND"),
    ];
    for (method, path, body, status, reason) in cases {
        let (got_status, got) = raw(url, method, path, tok, body).await;
        assert_eq!(got_status, status, "{method} {path} {body:?}: {got}");
        assert_eq!(got["reason"], reason, "{method} {path}: {got}");
    }
    let (s, list) = raw(url, "GET", "/v1/tenants/rival/devices", tok, None).await;
    assert_eq!(s, 200);
    assert_eq!(list["devices"], json!([]));

    let cli = |args: &[&str]| run_cli(&node.url, args);
    let (code, _, err) = cli(&["site", "create", "--tenant", "plantco", "south"]);
    assert_eq!(code, 0, "{err}");
    let (code, _, err) =
        cli(&["device", "create", "--tenant", "plantco", "--site", "south", "arm-1", "--class", "robot-arm.v2"]);
    assert_eq!(code, 0, "{err}");
    let (code, out, _) = cli(&["device", "list", "--tenant", "plantco", "--site", "south"]);
    assert_eq!(code, 0);
    assert!(out.contains("arm-1") && !out.contains("press-1"), "{out}");
    let (code, out, _) = cli(&["site", "list", "--tenant", "plantco", "-o", "json"]);
    assert_eq!(code, 0);
    let sites: Value = serde_json::from_str(&out).expect("json");
    assert_eq!(sites["sites"].as_array().map(Vec::len), Some(2));
    node.shutdown().await;
}

/// `writ admin … | head`: a reader that closes the pipe before the command writes ends the
/// command quietly with success, as a Unix filter would, instead of panicking.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_ends_quietly_when_its_reader_goes_away() {
    let (node, _dir) = single_node().await;
    let url = node.url.clone();
    let out = tokio::task::spawn_blocking(move || {
        let mut child = std::process::Command::new(writ_bin())
            .args(["admin", "tenant", "list"])
            .env("WRIT_ADMIN_URL", &url)
            .env("WRIT_CA_FILE", writ_tests::pki::ca_file())
            .env("WRIT_ADMIN_TOKEN", TEST_OPERATOR_TOKEN)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("run writ admin");
        // The reader is gone before the command has its answer to print.
        drop(child.stdout.take());
        child.wait_with_output().expect("wait for writ admin")
    })
    .await
    .expect("join");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    node.shutdown().await;
}

/// The admin API's `x-writ-trace-id` is the trace the ledger records: the same id on the
/// response and on the events (audit records) the request produced; a caller's plain trace id
/// is kept, anything else replaced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_trace_id_is_the_ledgers() {
    let (node, _dir) = single_node().await;
    let http = writ_tests::pki::http(None);
    let create = |name: &'static str, trace: Option<&'static str>| {
        let mut rb = http
            .post(format!("{}/v1/tenants", node.url))
            .bearer_auth(TEST_OPERATOR_TOKEN)
            .json(&serde_json::json!({"name": name}));
        if let Some(t) = trace {
            rb = rb.header("x-writ-trace-id", t);
        }
        async move {
            let r = rb.send().await.expect("admin API");
            assert_eq!(r.status(), 201);
            r.headers()["x-writ-trace-id"].to_str().expect("ascii").to_string()
        }
    };
    let minted = create("traced-a", None).await;
    let kept = create("traced-b", Some("caller-trace_42")).await;
    assert_eq!(kept, "caller-trace_42");
    let replaced = create("traced-c", Some("not a plain id!")).await;
    assert_ne!(replaced, "not a plain id!");
    let admin = Admin::new();
    for (tenant, trace) in [("traced-a", &minted), ("traced-b", &kept), ("traced-c", &replaced)] {
        let page = admin.get(&node.url, &format!("/v1/tenants/{tenant}/audit")).await.expect("audit");
        let created = page["records"]
            .as_array()
            .and_then(|r| r.iter().find(|r| r["operation"] == "tenant_created"))
            .unwrap_or_else(|| panic!("no tenant_created record: {page}"))
            .clone();
        assert_eq!(created["trace_id"], trace.as_str(), "{created}");
    }
    node.shutdown().await;
}
