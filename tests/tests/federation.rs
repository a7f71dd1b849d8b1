//! Federation (issue "Federation"; SPEC F1): a tenant's upstream MCP servers as governed tool
//! sources, through the real binaries — `writ dev`, `writ admin upstream …` — against the
//! official Python SDK's `MCPServer` as the upstream (a server no one here wrote), in both
//! protocol eras, with the official Python client calling through Writ.

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use writ_tests::eventually;
use writ_tests::mcp::rpc;
use writ_tests::procs::{canned, Admin, DevProcess};
use writ_tests::upstream::{EverythingServer, UpstreamServer};

struct Dev {
    dev: DevProcess,
    admin: Admin,
}

/// Catalog actions backed by the upstream `weather`'s tools (schemas are the tenant's own).
fn catalog() -> Value {
    let object = |props: Value, required: Value| json!({"type": "object", "properties": props, "required": required});
    json!({"actions": [
        {"id": "weather.forecast", "title": "Forecast", "risk": "low",
         "input_schema": object(json!({"city": {"type": "string"}, "unit": {"type": "string"}}), json!(["city"])),
         "execution": {"upstream": "weather/forecast"}},
        {"id": "weather.slow", "title": "Slow", "description": "Waits.", "risk": "low",
         "input_schema": object(json!({"seconds": {"type": "number", "maximum": 60}}), json!(["seconds"])),
         "execution": {"upstream": "weather/slow"}},
        {"id": "weather.steps", "title": "Steps", "risk": "low",
         "input_schema": object(json!({"n": {"type": "integer", "maximum": 10}}), json!(["n"])),
         "execution": {"upstream": "weather/steps"}},
        {"id": "weather.chatty", "title": "Chatty", "risk": "low",
         "input_schema": object(json!({"n": {"type": "integer", "maximum": 10}}), json!(["n"])),
         "execution": {"upstream": "weather/chatty"}},
        {"id": "weather.huge", "title": "Huge", "description": "Big.", "risk": "low",
         "input_schema": object(json!({"size": {"type": "integer"}}), json!(["size"])),
         "execution": {"upstream": "weather/huge"}},
        {"id": "weather.bad", "title": "Bad", "description": "Breaks its schema.", "risk": "low",
         "input_schema": object(json!({}), json!([])),
         "execution": {"upstream": "weather/bad_output"}},
        {"id": "weather.unpinned", "title": "Unpinned", "description": "Not upstream.", "risk": "low",
         "input_schema": object(json!({}), json!([])),
         "execution": {"upstream": "weather/nonexistent"}},
        {"id": "weather.order", "title": "Order", "risk": "low",
         "input_schema": object(json!({"sku": {"type": "string"}}), json!(["sku"])),
         "execution": {"upstream_operation": "weather/place_order"}},
        {"id": "weather.steps_op", "title": "Steps, as an operation", "risk": "low",
         "input_schema": object(json!({"n": {"type": "integer", "maximum": 10}}), json!(["n"])),
         "execution": {"upstream_operation": "weather/steps"}},
        {"id": "weather.chatty_op", "title": "Chatty, as an operation", "risk": "low",
         "input_schema": object(json!({"n": {"type": "integer", "maximum": 10}}), json!(["n"])),
         "execution": {"upstream_operation": "weather/chatty"}},
        {"id": "weather.slow_order", "title": "Slow order", "description": "Waits, with an effect.", "risk": "low",
         "input_schema": object(json!({"seconds": {"type": "number", "maximum": 60}}), json!(["seconds"])),
         "execution": {"upstream_operation": "weather/slow"}},
    ]})
}

impl Dev {
    async fn start() -> Dev {
        Dev::start_with(&[]).await
    }

    /// `writ dev ARGS` with the demo tenant's catalog published.
    async fn start_with(args: &[&str]) -> Dev {
        let dev = DevProcess::start(args).await;
        let ca = std::path::Path::new(dev.var("WRIT_CA_FILE"));
        let admin = Admin::trusting(ca, dev.var("WRIT_ADMIN_TOKEN"));
        let d = Dev { dev, admin };
        d.admin.post_ok(d.admin_url(), "/v1/tenants/demo/catalogs", catalog()).await;
        d
    }

    fn admin_url(&self) -> &str {
        self.dev.var("WRIT_ADMIN_URL")
    }

    fn mcp(&self) -> &str {
        self.dev.var("WRIT_MCP_URL")
    }

    /// `writ admin ARGS`, which must succeed (its stdout).
    fn cli_ok(&self, args: &[&str]) -> String {
        let (code, out, err) = self.dev.cli(args);
        assert_eq!(code, 0, "writ admin {args:?}: {out}{err}");
        out
    }

    /// A token of a new principal of the demo tenant with `scopes` (and `tools:list`).
    async fn token(&self, name: &str, scopes: &[&str]) -> String {
        let mut scopes = scopes.to_vec();
        scopes.push("tools:list");
        let body = json!({"name": name, "kind": "agent", "scopes": scopes});
        self.admin.post_ok(self.admin_url(), "/v1/tenants/demo/principals", body).await;
        let body = json!({"principal": name, "audience": self.mcp()});
        let issued = self.admin.post_ok(self.admin_url(), "/v1/tenants/demo/tokens", body).await;
        issued["token"].as_str().unwrap().to_string()
    }

    async fn call(&self, token: &str, name: &str, args: Value) -> Value {
        rpc(self.mcp(), Some(token), "tools/call", json!({"name": name, "arguments": args})).await.2
    }

    async fn upstream(&self, name: &str) -> Value {
        self.admin.get(self.admin_url(), &format!("/v1/tenants/demo/upstreams/{name}")).await.unwrap()
    }

    async fn audit(&self) -> Vec<Value> {
        let page = self.admin.get(self.admin_url(), "/v1/tenants/demo/audit?limit=1000").await.unwrap();
        page["records"].as_array().cloned().unwrap_or_default()
    }
}

/// The reason of a refused call (`error.data.reason`) or of an error result (`_meta`).
fn reason(answer: &Value) -> String {
    answer["error"]["data"]["reason"]
        .as_str()
        .or_else(|| answer["result"]["_meta"]["writ/reason"].as_str())
        .unwrap_or_default()
        .to_string()
}

/// Established TCP connections from this host to loopback `port` (client side only).
fn established_to(port: u16) -> usize {
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap_or_default();
    let port_hex = format!(":{port:04X}");
    table
        .lines()
        .skip(1)
        .filter(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f.len() > 3 && f[2].ends_with(&port_hex) && !f[1].ends_with(&port_hex) && f[3] == "01"
        })
        .count()
}

/// The official Python client lists the edge's tools and calls `tool` through it.
async fn python_call(dev: &Dev, token: &str, tool: &str, args: Value) -> Value {
    python_call_logged(dev, token, tool, args, None).await
}

/// [`python_call`], asking for log messages at `log_level` when given.
async fn python_call_logged(dev: &Dev, token: &str, tool: &str, args: Value, log_level: Option<&str>) -> Value {
    let args = args.to_string();
    let args = [&[dev.mcp(), token, tool, args.as_str()][..], log_level.as_slice()].concat();
    writ_tests::upstream::python_report("call_tool.py", &args).await
}

/// A credential file of tenant `demo` holding `content`: `<dir>/demo/upstream-token` (a
/// reference names a file in a directory named after its tenant).
fn demo_secret(content: &str) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("demo")).unwrap();
    let path = dir.path().join("demo").join("upstream-token");
    std::fs::write(&path, content).unwrap();
    (dir, path)
}

/// Adds the upstream `weather` at `url` speaking `protocol` with credential reference `auth`.
fn add(dev: &Dev, url: &str, protocol: &str, auth: &str) {
    let args = ["upstream", "add", "--tenant", "demo", "weather", "--mcp-url", url, "--protocol", protocol];
    dev.cli_ok(&[&args[..], &["--auth", auth]].concat());
}

/// [`add`], then syncs and approves its tools.
fn add_and_approve(dev: &Dev, url: &str, protocol: &str, auth: &str) {
    add(dev, url, protocol, auth);
    let synced = dev.cli_ok(&["upstream", "sync", "--tenant", "demo", "weather", "--approve"]);
    assert!(synced.contains("approved"), "{synced}");
}

/// Both protocol eras and `auto`: the upstream's tools are pinned only after approval, listed
/// and called through Writ by the Python client, with the credential taken from a file
/// reference (never stored) and sent as a bearer token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_tools_serve_in_both_eras_once_approved() {
    let (_dir, secret) = demo_secret("upstream-secret-7f3a\n");
    let auth = format!("file:{}", secret.display());
    for protocol in ["2026-07-28", "2025-11-25", "auto"] {
        let upstream = UpstreamServer::start(&["--token", "upstream-secret-7f3a"]);
        let dev = Dev::start().await;
        let scopes = ["tools:call:weather.forecast", "tools:call:weather.unpinned", "tools:call:weather.chatty"];
        let token = dev.token("reader", &scopes).await;
        add(&dev, &upstream.url(), protocol, &auth);
        // Nothing is served before an operator approved the upstream's tools.
        let early = dev.call(&token, "weather.forecast", json!({"city": "Oslo"})).await;
        assert_eq!(reason(&early), "UPSTREAM_TOOL_NOT_PINNED", "{early}");
        let synced = dev.cli_ok(&["upstream", "sync", "--tenant", "demo", "weather"]);
        assert!(synced.contains("forecast") && synced.contains("added") && synced.contains("pending"), "{synced}");
        // The era spoken: `initialize` and a session for 2025-11-25, discovery otherwise.
        let era = if protocol == "2025-11-25" { "2025-11-25" } else { "2026-07-28" };
        assert!(synced.contains(&format!("over MCP {era}")), "{protocol}: {synced}");
        let still = dev.call(&token, "weather.forecast", json!({"city": "Oslo"})).await;
        assert_eq!(reason(&still), "UPSTREAM_TOOL_NOT_PINNED", "a pending set is not served: {still}");
        let approved = dev.cli_ok(&["upstream", "sync", "--tenant", "demo", "weather", "--approve"]);
        assert!(approved.contains("approved"), "{approved}");
        // The Python client lists and calls through Writ; the edge waits for its replica.
        let report = eventually("the approval reaches the edge", Duration::from_secs(20), || async {
            let report = python_call(&dev, &token, "weather.forecast", json!({"city": "Oslo"})).await;
            (report["result"]["is_error"] == json!(false)).then_some(report)
        })
        .await;
        assert_eq!(report["result"]["structured"], json!({"city": "Oslo", "temp_c": 21}), "{protocol}: {report}");
        assert!(report["tools"].as_array().unwrap().contains(&json!("weather.forecast")));
        assert_eq!(report["descriptions"]["weather.forecast"], json!("Today's forecast for a city."), "pinned text");
        assert_eq!(upstream.calls("forecast"), 1, "{protocol}");
        // The upstream's log messages of a call reach the client that asked for them (and only
        // at its level): `_meta` logLevel in 2026-07-28, `logging/setLevel` on a 2025-11-25 session.
        let logged = python_call_logged(&dev, &token, "weather.chatty", json!({"n": 3}), Some("info")).await;
        assert_eq!(logged["result"]["texts"], json!(["3 messages"]), "{protocol}: {logged}");
        let messages: Vec<&Value> = logged["logs"].as_array().unwrap().iter().map(|l| &l["data"]).collect();
        assert_eq!(
            messages,
            [&json!("message 1 of 3"), &json!("message 2 of 3"), &json!("message 3 of 3")],
            "{protocol}: {logged}"
        );
        assert_eq!(logged["logs"][0]["logger"], json!("upstream:weather/chatty"), "{logged}");
        let quiet = python_call_logged(&dev, &token, "weather.chatty", json!({"n": 2}), Some("error")).await;
        assert_eq!(quiet["logs"], json!([]), "below the level asked for: {quiet}");
        assert!(
            upstream.auth_headers().iter().all(|h| h == "Bearer upstream-secret-7f3a"),
            "{:?}",
            upstream.auth_headers()
        );
        // A catalog action naming a tool the upstream does not have is refused, not called.
        let missing = dev.call(&token, "weather.unpinned", json!({})).await;
        assert_eq!(reason(&missing), "UPSTREAM_TOOL_NOT_PINNED", "{missing}");
        // The credential is a reference: nothing the ledger serves contains the token.
        let shown = dev.upstream("weather").await;
        assert_eq!(shown["upstream"]["spec"]["auth"], json!({"bearer_file": {"path": secret}}));
        let audit = dev.audit().await;
        assert!(!serde_json::to_string(&audit).unwrap().contains("upstream-secret-7f3a"));
        assert!(!serde_json::to_string(&shown).unwrap().contains("upstream-secret-7f3a"));
    }
}

/// Scope, schema and quota refusals happen before the upstream is called; the pinned input
/// schema is enforced too; oversized or schema-breaking results are OUTPUT_INVALID; a hanging
/// upstream is cut off at the call timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_are_governed_before_and_after_the_upstream() {
    let upstream = UpstreamServer::start(&[]);
    let dev = Dev::start().await;
    add_and_approve(&dev, &upstream.url(), "2026-07-28", "none");
    let all = [
        "tools:call:weather.forecast",
        "tools:call:weather.slow",
        "tools:call:weather.huge",
        "tools:call:weather.bad",
        "tools:call:weather.steps",
    ];
    let token = dev.token("caller", &all).await;
    eventually("the approval reaches the edge", Duration::from_secs(20), || async {
        let r = dev.call(&token, "weather.forecast", json!({"city": "Rome"})).await;
        (r["result"]["isError"] != json!(true) && r["error"].is_null()).then_some(())
    })
    .await;
    let base = upstream.calls("forecast");
    assert!(established_to(upstream.port) >= 1, "the edge keeps its connection to the upstream (the counter sees it)");

    // Scope: a principal without the action's scope does not see it, and nothing is called.
    let other = dev.token("outsider", &["tools:call:weather.slow"]).await;
    let refused = dev.call(&other, "weather.forecast", json!({"city": "Rome"})).await;
    assert_eq!(reason(&refused), "TOOL_NOT_FOUND", "{refused}");
    // Schema: the action's schema, then the pinned tool's.
    let bad = dev.call(&token, "weather.forecast", json!({})).await;
    assert_eq!(reason(&bad), "INPUT_INVALID", "{bad}");
    let bad_type = dev.call(&token, "weather.forecast", json!({"city": 7})).await;
    assert_eq!(reason(&bad_type), "INPUT_INVALID", "{bad_type}");
    // Quota: one request a minute for this principal; the second is refused at admission.
    let limited = dev.token("limited", &["tools:call:weather.forecast"]).await;
    let id = dev.admin.get(dev.admin_url(), "/v1/tenants/demo/principals/limited").await.unwrap()["id"].clone();
    let quota = json!({"requests_per_minute": 1});
    let path = format!("/v1/tenants/demo/principals/{}/quotas", id.as_str().unwrap());
    let (status, body) =
        dev.admin.send(reqwest::Method::PUT, &format!("{}{path}", dev.admin_url()), Some(quota)).await.unwrap();
    assert!(status < 300, "{status} {body}");
    let first = eventually("the quota reaches the edge", Duration::from_secs(20), || async {
        let r = dev.call(&limited, "weather.forecast", json!({"city": "Rome"})).await;
        (!reason(&r).is_empty() && reason(&r) != "INPUT_INVALID").then_some(r)
    })
    .await;
    assert!(reason(&first).contains("QUOTA"), "{first}");
    let calls_now = upstream.calls("forecast");
    assert!(calls_now <= base + 1, "only the admitted call may reach the upstream: {calls_now} vs {base}");
    let again = dev.call(&limited, "weather.forecast", json!({"city": "Rome"})).await;
    assert!(reason(&again).contains("QUOTA"), "{again}");
    assert_eq!(upstream.calls("forecast"), calls_now, "refused calls never reach the upstream");

    // Output: over the result ceiling, and against the pinned output schema.
    let huge = dev.call(&token, "weather.huge", json!({"size": 2_000_000})).await;
    assert_eq!(reason(&huge), "OUTPUT_INVALID", "{huge}");
    let broken = dev.call(&token, "weather.bad", json!({})).await;
    assert_eq!(reason(&broken), "OUTPUT_INVALID", "{broken}");
    assert_eq!(upstream.calls("huge"), 1);

    // Progress the upstream reports is relayed to the client (over the request's SSE stream).
    let progressed = python_call(&dev, &token, "weather.steps", json!({"n": 3})).await;
    assert_eq!(progressed["result"]["texts"], json!(["3 steps"]), "{progressed}");
    let steps: Vec<f64> =
        progressed["progress"].as_array().unwrap().iter().filter_map(|p| p["progress"].as_f64()).collect();
    assert_eq!(steps, vec![1.0, 2.0, 3.0], "{progressed}");
    assert_eq!(progressed["progress"][2]["message"], json!("step 3 of 3"));

    // A hanging upstream: the call timeout holds.
    dev.cli_ok(&["upstream", "set", "--tenant", "demo", "weather", "--call-timeout-ms", "1000"]);
    let started = Instant::now();
    let hung = eventually("the new timeout reaches the edge", Duration::from_secs(20), || async {
        let r = dev.call(&token, "weather.slow", json!({"seconds": 30})).await;
        (reason(&r) == "UPSTREAM_FAILED").then_some(r)
    })
    .await;
    assert!(hung.to_string().contains("did not answer"), "{hung}");
    assert!(started.elapsed() < Duration::from_secs(20), "cut off at the call timeout");
    // Two more hanging calls are cut off too, which opens the fuse (timeouts count); none of
    // them leaves its connection behind (the upstream is still sleeping in every one).
    for _ in 0..2 {
        let r = dev.call(&token, "weather.slow", json!({"seconds": 30})).await;
        assert_eq!(reason(&r), "UPSTREAM_FAILED", "{r}");
    }
    let fused = dev.call(&token, "weather.slow", json!({"seconds": 30})).await;
    assert_eq!(reason(&fused), "UPSTREAM_UNAVAILABLE", "{fused}");
    assert_eq!(upstream.calls("slow"), 3, "the cut-off calls reached the upstream, the refused one did not");
    let open = eventually("the cut-off calls' connections are closed", Duration::from_secs(10), || async {
        let n = established_to(upstream.port);
        (n <= 1).then_some(n)
    })
    .await;
    assert!(open <= 1, "{open} connections to the upstream stay open");
    // The edge records its open fuse: the upstream's tools are fused for operators to see.
    let fused = eventually("the fuse is recorded", Duration::from_secs(20), || async {
        let health = dev.admin.get(dev.admin_url(), "/v1/tenants/demo/health").await.ok()?;
        let slow = health["tools"].as_array()?.iter().find(|t| t["tool"] == "weather.slow")?.clone();
        (slow["state"] == "fused").then_some(slow)
    })
    .await;
    assert!(fused["why"].as_str().unwrap().starts_with("open on 1 edges"), "{fused}");
    let audit = dev.audit().await;
    assert!(
        audit
            .iter()
            .any(|r| r["reason_code"] == json!("UPSTREAM_FAILED") && r["detail"].to_string().contains("weather.slow")),
        "the failed call is audited with its reason"
    );
}

/// An effectful upstream tool (`upstream_operation`) is a durable operation the edge performs:
/// the idempotency key reaches the upstream and a retry is a replay, never a second call; the
/// result is the attempt's evidence; an upstream error fails it; a call cut off after it was
/// sent leaves its effect unknown (and a retry does not call again); an unreachable upstream is
/// refused before any attempt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_effectful_upstream_tool_is_one_durable_operation() {
    let mut upstream = UpstreamServer::start(&[]);
    let dev = Dev::start().await;
    add(&dev, &upstream.url(), "2026-07-28", "none");
    // Set before the approval, so an edge that serves the approved tools has the timeout too.
    // Long enough for the (Python SDK) upstream's quick answers on a loaded CI machine (at 1 s
    // an out-of-stock answer was once cut off as unknown_effect), short against the 30 s
    // `slow_order` it cuts off.
    dev.cli_ok(&["upstream", "set", "--tenant", "demo", "weather", "--call-timeout-ms", "5000"]);
    dev.cli_ok(&["upstream", "sync", "--tenant", "demo", "weather", "--approve"]);
    let scopes = [
        "tools:call:weather.forecast",
        "tools:call:weather.order",
        "tools:call:weather.slow_order",
        "tools:call:weather.steps_op",
        "tools:call:weather.chatty_op",
        "ops:read",
        "resources:read",
    ];
    let token = dev.token("buyer", &scopes).await;
    let order = |sku: &str, key: &str| {
        let (sku, key, token) = (sku.to_string(), key.to_string(), token.clone());
        let url = dev.mcp().to_string();
        async move {
            let params = json!({"name": "weather.order", "arguments": {"sku": sku},
                                "_meta": {"io.writ/idempotencyKey": key}});
            rpc(&url, Some(&token), "tools/call", params).await.2
        }
    };
    eventually("the approval reaches the edge", Duration::from_secs(20), || async {
        let r = dev.call(&token, "weather.forecast", json!({"city": "Rome"})).await;
        (r["result"]["isError"] != json!(true) && r["error"].is_null()).then_some(())
    })
    .await;

    // One call: the upstream's answer, the operation beside it, the key passed upstream.
    let first = order("A-1", "order-1").await;
    let result = &first["result"];
    assert_eq!(result["isError"], json!(false), "{first}");
    let operation = &result["_meta"]["writ/operation"];
    let id = operation["operation_id"].as_str().expect("the operation").to_string();
    assert_eq!(
        result["structuredContent"],
        json!({"order_id": "order-A-1", "sku": "A-1", "key": "order-1", "operation": id})
    );
    assert_eq!((operation["state"].as_str(), operation["attempts"].as_u64()), (Some("effect_reported"), Some(1)));
    let hash = operation["evidence"][0]["content_hash"].as_str().expect("the result as evidence").to_string();
    // A retry is a replay: the same operation, no second call; another payload is refused.
    let again = order("A-1", "order-1").await;
    let replay = &again["result"]["structuredContent"];
    assert_eq!((replay["operation_id"].as_str(), replay["replayed"].as_bool()), (Some(id.as_str()), Some(true)));
    let reused = order("B-2", "order-1").await;
    assert_eq!(reason(&reused), "IDEMPOTENCY_KEY_REUSED", "{reused}");
    assert_eq!(upstream.calls("place_order"), 1, "one call for the key, whatever the retries");
    // The upstream's answer is the attempt's evidence, read back by its hash.
    let uri = format!("writ://operations/{id}/evidence/{hash}");
    assert_eq!(operation["evidence"][0]["evidence_return_ref"], json!(uri), "{first}");
    let evidence = rpc(dev.mcp(), Some(&token), "resources/read", json!({"uri": uri})).await.2;
    assert!(evidence.to_string().contains("order-A-1"), "{evidence}");

    // Performed in the request's reply task: the upstream's progress and log messages reach the
    // (Python SDK's) client before the answer, as for reads.
    let progressed = python_call(&dev, &token, "weather.steps_op", json!({"n": 3})).await;
    assert_eq!(progressed["result"]["texts"], json!(["3 steps"]), "{progressed}");
    let steps: Vec<f64> =
        progressed["progress"].as_array().unwrap().iter().filter_map(|p| p["progress"].as_f64()).collect();
    assert_eq!(steps, vec![1.0, 2.0, 3.0], "{progressed}");
    let logged = python_call_logged(&dev, &token, "weather.chatty_op", json!({"n": 2}), Some("info")).await;
    let messages: Vec<&Value> = logged["logs"].as_array().unwrap().iter().map(|l| &l["data"]).collect();
    assert_eq!(messages, [&json!("message 1 of 2"), &json!("message 2 of 2")], "{logged}");
    assert_eq!((upstream.calls("steps"), upstream.calls("chatty")), (1, 1), "each performed once");

    // The upstream's own error: no effect, the operation failed.
    let failed = order("out-of-stock", "order-2").await;
    assert_eq!(failed["result"]["isError"], json!(true), "{failed}");
    assert_eq!(failed["result"]["_meta"]["writ/operation"]["state"], json!("failed"), "{failed}");

    // Two calls with one key at once: one performs it, the other answers the same operation.
    let before = upstream.calls("place_order");
    let (a, b) = tokio::join!(order("D-4", "order-4"), order("D-4", "order-4"));
    assert_eq!(upstream.calls("place_order"), before + 1, "{a} {b}");
    for answer in [&a, &b] {
        assert_ne!(answer["result"]["isError"], json!(true), "{answer}");
    }

    // Cut off after it was sent: the effect is unknown, and a retry does not call again.
    let slow = |key: &str| {
        let params = json!({"name": "weather.slow_order", "arguments": {"seconds": 30},
                            "_meta": {"io.writ/idempotencyKey": key}});
        rpc(dev.mcp(), Some(&token), "tools/call", params)
    };
    let cut = slow("slow-1").await.2;
    assert_eq!(reason(&cut), "UPSTREAM_FAILED", "{cut}");
    assert_eq!(cut["result"]["_meta"]["writ/operation"]["state"], json!("unknown_effect"), "{cut}");
    let retried = slow("slow-1").await.2;
    assert_eq!(retried["result"]["structuredContent"]["state"], json!("unknown_effect"), "{retried}");
    assert_eq!(upstream.calls("slow"), 1);

    // Unreachable: refused before any attempt (nothing was sent), the operation failed unattempted.
    upstream.kill();
    let down = order("C-3", "order-3").await;
    assert_eq!(reason(&down), "UPSTREAM_FAILED", "{down}");
    let op = &down["result"]["_meta"]["writ/operation"];
    assert_eq!((op["state"].as_str(), op["attempts"].as_u64()), (Some("failed"), Some(0)), "{down}");
    let audit = dev.audit().await;
    assert!(audit.iter().any(|r| r["detail"].to_string().contains("weather.order")), "the calls are audited");
}

/// OAuth 2.0 client credentials: the node (for `sync`) and the edge (for calls) ask the token
/// endpoint for access tokens with the referenced secret, keep them, and renew them before they
/// expire (the upstream here refuses expired tokens); a wrong secret is a clear refusal; the
/// secret is nowhere in what Writ stores or shows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oauth_client_credentials_are_asked_for_kept_and_renewed() {
    let (_dir, secret) = demo_secret("client-s3cret-91\n");
    let upstream = UpstreamServer::start(&["--oauth", "writ-edge:client-s3cret-91", "--token-ttl", "3"]);
    let dev = Dev::start().await;
    let token_url = format!("http://127.0.0.1:{}/token", upstream.port);
    let secret_ref = format!("file:{}", secret.display());
    let oauth = ["--oauth-token-url", &token_url, "--oauth-client-id", "writ-edge", "--oauth-scope", "tools:read"];
    let args =
        ["upstream", "add", "--tenant", "demo", "weather", "--mcp-url", &upstream.url(), "--protocol", "2026-07-28"];
    dev.cli_ok(&[&args[..], &oauth[..], &["--oauth-secret", &secret_ref]].concat());
    let synced = dev.cli_ok(&["upstream", "sync", "--tenant", "demo", "weather", "--approve"]);
    assert!(synced.contains("approved"), "{synced}");
    let token = dev.token("reader", &["tools:call:weather.forecast"]).await;
    // Calls keep working across the tokens' 3-second lives: the edge renews before expiry.
    let first_token = upstream.grants().0.len();
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut calls = 0;
    while upstream.grants().0.len() < first_token + 2 {
        assert!(Instant::now() < deadline, "no renewal within 30 s: {:?}", upstream.grants());
        let r = dev.call(&token, "weather.forecast", json!({"city": "Oslo"})).await;
        if reason(&r) == "UPSTREAM_TOOL_NOT_PINNED" {
            continue; // the approval is still on its way to the edge
        }
        assert_eq!(r["result"]["structuredContent"], json!({"city": "Oslo", "temp_c": 21}), "call {calls}: {r}");
        calls += 1;
    }
    let (grants, denied) = upstream.grants();
    assert!(calls > grants.len(), "tokens are kept between calls: {calls} calls, {} grants", grants.len());
    assert!(grants.iter().all(|s| s == "tools:read"), "{grants:?}");
    assert_eq!(denied, 0);
    assert!(upstream.auth_headers().iter().all(|h| h.starts_with("Bearer tok-")), "{:?}", upstream.auth_headers());
    // The configuration names the secret by reference only.
    let shown = dev.cli_ok(&["upstream", "show", "--tenant", "demo", "weather"]);
    assert!(shown.contains("writ-edge") && shown.contains(&secret_ref), "{shown}");
    let audit = dev.audit().await;
    for place in
        [serde_json::to_string(&audit).unwrap(), shown, serde_json::to_string(&dev.upstream("weather").await).unwrap()]
    {
        assert!(!place.contains("client-s3cret-91"), "the secret leaked: {place}");
    }
    // A wrong secret is refused by the token endpoint, and said so.
    let (_wrong_dir, wrong) = demo_secret("not-the-secret\n");
    let wrong_ref = format!("file:{}", wrong.display());
    let set = ["upstream", "set", "--tenant", "demo", "weather"];
    dev.cli_ok(
        &[&set[..], &["--oauth-token-url", &token_url, "--oauth-client-id", "writ-edge", "--oauth-secret", &wrong_ref]]
            .concat(),
    );
    let (code, out, err) = dev.dev.cli(&["upstream", "sync", "--tenant", "demo", "weather"]);
    assert_ne!(code, 0, "{out}");
    assert!(err.contains("refused client 'writ-edge': HTTP 401 invalid_client"), "{err}");
    assert!(!err.contains("not-the-secret") && !out.contains("not-the-secret"));
    assert!(upstream.grants().1 >= 1);
}

/// Drift found without an operator: the edge's watch lists the upstream's tools and records a
/// change as pending (shown with its diff), which is not served until approved.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edge_finds_upstream_drift_without_a_sync() {
    let v1 = UpstreamServer::start(&[]);
    let v2 = UpstreamServer::start(&["--variant", "v2"]);
    let gateway = writ_tests::upstream::Gateway::start(v1.port).await;
    let dev = Dev::start_with(&["--upstream-watch-s", "1"]).await;
    add_and_approve(&dev, &gateway.url(), "2026-07-28", "none");
    let pinned = dev.upstream("weather").await["upstream"]["pinned"]["digest"].clone();
    assert!(pinned.is_string(), "approved");
    // Unchanged: the watch records nothing (no pending set appears while it looks).
    let looked = gateway.requests();
    eventually("the watch looks at the upstream", Duration::from_secs(20), || async {
        (gateway.requests() > looked + 2).then_some(())
    })
    .await;
    assert!(dev.upstream("weather").await["upstream"]["pending"].is_null());
    // The upstream changes behind the same URL: the watch finds it and records it as pending.
    gateway.point_to(v2.port);
    let view = eventually("the watch records the drift", Duration::from_secs(30), || async {
        let view = dev.upstream("weather").await;
        view["upstream"]["pending"].is_object().then_some(view)
    })
    .await;
    let diff = view["pending_diff"].to_string();
    assert!(diff.contains("forecast") && diff.contains("input_schema"), "{diff}");
    assert_eq!(view["upstream"]["pinned"]["digest"], pinned, "nothing is pinned without an approval");
    let shown = dev.cli_ok(&["upstream", "show", "--tenant", "demo", "weather"]);
    assert!(shown.contains("pending"), "{shown}");
    // At the desk: the drift is an alarm on Now, and the tenant's page shows its diff with an
    // approval bound to the digest it shows — a stale digest pins nothing, the shown one pins.
    let desk = writ_tests::desk::Desk::sign_in(&dev.dev).await;
    let (_, now) = desk.get("/console").await;
    assert!(now.contains("upstream &#39;weather&#39;: its tools changed"), "{now}");
    let (_, page) = desk.get("/console/tenants/demo").await;
    assert!(page.contains("~forecast (") && page.contains("Approve these tools"), "{page}");
    let (csrf, digest) = (writ_tests::desk::hidden(&page, "csrf"), writ_tests::desk::hidden(&page, "digest"));
    assert_eq!(digest, view["upstream"]["pending"]["digest"].as_str().unwrap());
    let approve = "/console/tenants/demo/upstreams/weather/approve";
    let (status, refused) = desk.post(approve, &[("csrf", &csrf), ("digest", pinned.as_str().unwrap())]).await;
    assert!(status == 409 && refused.contains("UPSTREAM_DIGEST_MISMATCH"), "{status} {refused}");
    let (status, back) = desk.post(approve, &[("csrf", &csrf), ("digest", &digest)]).await;
    assert_eq!((status, back.as_str()), (303, "/console/tenants/demo"));
    let after = dev.upstream("weather").await;
    assert_eq!(
        (after["upstream"]["pinned"]["digest"].as_str(), after["upstream"]["pending"].is_null()),
        (Some(digest.as_str()), true)
    );
}

/// Drift pinning: a changed upstream (description and schema) becomes a pending diff; agents
/// keep seeing and being checked against the pinned tool until an operator approves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_change_is_not_served_until_approved() {
    let v1 = UpstreamServer::start(&[]);
    let dev = Dev::start().await;
    add_and_approve(&dev, &v1.url(), "auto", "none");
    let token = dev.token("reader", &["tools:call:weather.forecast"]).await;
    let shown = |v: &Value| v["descriptions"]["weather.forecast"].as_str().unwrap_or_default().to_string();
    let before = eventually("the approval reaches the edge", Duration::from_secs(20), || async {
        let r = python_call(&dev, &token, "weather.forecast", json!({"city": "Lima"})).await;
        (r["result"]["is_error"] == json!(false)).then_some(r)
    })
    .await;
    assert_eq!(shown(&before), "Today's forecast for a city.");

    // The upstream is replaced by a version that changed the tool.
    let v2 = UpstreamServer::start(&["--variant", "v2"]);
    dev.cli_ok(&["upstream", "set", "--tenant", "demo", "weather", "--mcp-url", &v2.url()]);
    let synced = dev.cli_ok(&["upstream", "sync", "--tenant", "demo", "weather"]);
    assert!(synced.contains("changed") && synced.contains("description input_schema"), "{synced}");
    let view = dev.upstream("weather").await;
    assert_eq!(view["pending_diff"]["changed"][0]["id"], json!("forecast"), "{view}");
    // Not served: agents see the pinned description, and calls are checked against the pinned
    // schema (the new upstream then refuses the call it no longer accepts).
    let pending = python_call(&dev, &token, "weather.forecast", json!({"city": "Lima"})).await;
    assert_eq!(shown(&pending), "Today's forecast for a city.", "{pending}");
    // An approval of something else than what is pending is refused.
    let (code, _, err) = dev.dev.cli(&["upstream", "show", "--tenant", "demo", "weather", "--output", "json"]);
    assert_eq!(code, 0, "{err}");
    let (status, body) = dev
        .admin
        .post(dev.admin_url(), "/v1/tenants/demo/upstreams/weather/approve", json!({"digest": "0000"}))
        .await
        .unwrap();
    assert_eq!((status, body["reason"].as_str()), (409, Some("UPSTREAM_DIGEST_MISMATCH")), "{body}");

    dev.cli_ok(&["upstream", "sync", "--tenant", "demo", "weather", "--approve"]);
    let after = eventually("the new approval reaches the edge", Duration::from_secs(20), || async {
        let r = python_call(&dev, &token, "weather.forecast", json!({"city": "Lima", "unit": "f"})).await;
        (shown(&r) != "Today's forecast for a city.").then_some(r)
    })
    .await;
    assert_eq!(shown(&after), "The forecast for a city, in the unit asked for.");
    assert_eq!(after["result"]["structured"]["temp_c"], json!(70), "{after}");
    // The new pinned schema requires `unit`: refused before the call.
    let calls = v2.calls("forecast");
    let refused = dev.call(&token, "weather.forecast", json!({"city": "Lima"})).await;
    assert_eq!(reason(&refused), "INPUT_INVALID", "{refused}");
    assert_eq!(v2.calls("forecast"), calls);

    // Removed: calls are refused, and the edge lets go of its connection to it.
    assert!(established_to(v2.port) >= 1, "the edge holds a connection to the upstream");
    dev.cli_ok(&["upstream", "remove", "--tenant", "demo", "weather"]);
    eventually("the removal reaches the edge", Duration::from_secs(20), || async {
        let r = dev.call(&token, "weather.forecast", json!({"city": "Lima", "unit": "c"})).await;
        (reason(&r) == "UPSTREAM_NOT_FOUND").then_some(())
    })
    .await;
    // Well within uvicorn's 5 s keep-alive timeout, so it is the edge that closed it.
    eventually("the connection to the removed upstream is closed", Duration::from_secs(3), || async {
        (established_to(v2.port) == 0).then_some(())
    })
    .await;
}

/// The TypeScript reference "everything" server, a 2025-11-25 server (sessions), as an
/// upstream: explicitly in that era and found by `auto`'s fallback from discovery.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_typescript_reference_server_serves_as_an_upstream() {
    let everything = EverythingServer::start();
    for protocol in ["2025-11-25", "auto"] {
        let dev = DevProcess::start(&[]).await;
        let ca = std::path::Path::new(dev.var("WRIT_CA_FILE"));
        let admin = Admin::trusting(ca, dev.var("WRIT_ADMIN_TOKEN"));
        let action = json!({"id": "ts.echo", "title": "Echo", "risk": "low",
            "input_schema": {"type": "object", "properties": {"message": {"type": "string"}}, "required": ["message"]},
            "execution": {"upstream": "everything/echo"}});
        admin.post_ok(dev.var("WRIT_ADMIN_URL"), "/v1/tenants/demo/catalogs", json!({"actions": [action]})).await;
        let (code, out, err) = dev.cli(&[
            "upstream",
            "add",
            "--tenant",
            "demo",
            "everything",
            "--mcp-url",
            &everything.url(),
            "--protocol",
            protocol,
        ]);
        assert_eq!(code, 0, "{out}{err}");
        let (code, out, err) = dev.cli(&["upstream", "sync", "--tenant", "demo", "everything", "--approve"]);
        assert_eq!(code, 0, "{out}{err}");
        assert!(
            out.contains("over MCP 2025-11-25") && out.contains("echo") && out.contains("approved"),
            "{protocol}: {out}"
        );
        let d = Dev { dev, admin };
        let token = d.token("reader", &["tools:call:ts.echo"]).await;
        let r = eventually("a call through the everything server", Duration::from_secs(20), || async {
            let r = d.call(&token, "ts.echo", json!({"message": "hello"})).await;
            r["result"]["content"][0]["text"].as_str().map(str::to_string)
        })
        .await;
        assert_eq!(r, "Echo: hello", "{protocol}");
        // The pinned description is what agents see.
        let list = rpc(d.mcp(), Some(&token), "tools/list", json!({})).await.2;
        assert_eq!(list["result"]["tools"][0]["description"], json!("Echoes back the input string"), "{list}");
    }
}

/// SPEC F1, S4: an upstream URL cannot be turned against the network Writ runs in. A redirect
/// is not followed (and what the target says is not echoed), a name that resolves to loopback
/// is refused at connect time, Writ's own `/mcp` is no upstream, a credential file that is
/// a symbolic link to another secret is not read, and another tenant's credential cannot be named.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_calls_cannot_be_turned() {
    let dev = Dev::start().await;
    let (secret_port, secret_hits) = canned(200, Vec::new(), "SECRET-INTERNAL-BODY").await;
    let location = format!("http://127.0.0.1:{secret_port}/mcp");
    let (redirector, _) = canned(307, vec![("location", location)], "").await;
    let refused_sync = |name: &str| {
        let (code, out, err) = dev.dev.cli(&["upstream", "sync", "--tenant", "demo", name]);
        assert_ne!(code, 0, "{name} synced: {out}{err}");
        format!("{out}{err}")
    };
    let add_as = |name: &str, url: &str, auth: &str| {
        let args = ["upstream", "add", "--tenant", "demo", name, "--mcp-url", url, "--protocol", "2025-11-25"];
        dev.cli_ok(&[&args[..], &["--auth", auth]].concat());
    };

    add_as("redirecting", &format!("http://127.0.0.1:{redirector}/mcp"), "none");
    let said = refused_sync("redirecting");
    assert_eq!(secret_hits.load(std::sync::atomic::Ordering::SeqCst), 0, "the redirect was followed: {said}");
    assert!(!said.contains("SECRET-INTERNAL-BODY"), "{said}");

    // `localhost` is a name (it resolves through /etc/hosts, to loopback): https to it is
    // refused when it resolves, whatever the URL rules allowed.
    add_as("by-name", &format!("https://localhost:{secret_port}/mcp"), "none");
    let said = refused_sync("by-name");
    assert!(said.contains("not a public address"), "{said}");
    assert_eq!(secret_hits.load(std::sync::atomic::Ordering::SeqCst), 0);

    // The edge's own endpoint.
    add_as("itself", dev.mcp(), "none");
    let said = refused_sync("itself");
    assert!(said.contains("own listeners"), "{said}");

    // A credential reference named like an upstream's, linking to another secret.
    let dir = tempfile::tempdir().unwrap();
    let other = dir.path().join("operator-token");
    std::fs::write(&other, "operator-secret-8d1e").unwrap();
    std::fs::create_dir(dir.path().join("demo")).unwrap();
    let link = dir.path().join("demo").join("upstream-shop");
    std::os::unix::fs::symlink(&other, &link).unwrap();
    add_as("linked", &format!("http://127.0.0.1:{secret_port}/mcp"), &format!("file:{}", link.display()));
    let said = refused_sync("linked");
    assert!(said.contains("symbolic link"), "{said}");
    assert_eq!(secret_hits.load(std::sync::atomic::Ordering::SeqCst), 0, "the linked secret was sent");

    // Another tenant's credential: a variable or a file not of this tenant's own is refused
    // when the upstream is configured.
    let (_theirs_dir, theirs) = demo_secret("other-tenant-secret");
    let elsewhere = theirs.parent().unwrap().with_file_name("acme").join("upstream-token");
    std::fs::create_dir(elsewhere.parent().unwrap()).unwrap();
    std::fs::rename(&theirs, &elsewhere).unwrap();
    for foreign in [
        format!("file:{}", elsewhere.display()),
        "env:WRIT_UPSTREAM_ACME__TOKEN".into(),
        "env:WRIT_UPSTREAM_DEMO_TOKEN".into(),
    ] {
        let args = [
            "upstream",
            "add",
            "--tenant",
            "demo",
            "foreign",
            "--mcp-url",
            &format!("http://127.0.0.1:{secret_port}/mcp"),
        ];
        let (code, out, err) = dev.dev.cli(&[&args[..], &["--auth", &foreign]].concat());
        assert_ne!(code, 0, "{foreign} accepted: {out}");
        assert!(err.contains("UPSTREAM_INVALID") && err.contains("not a credential of tenant 'demo'"), "{err}");
    }
    assert_eq!(secret_hits.load(std::sync::atomic::Ordering::SeqCst), 0);
}

/// Every tool has a health state operators read (`writ admin tenant health`, the desk): the
/// edge's own tool and the demo executor's are connected; an upstream's tool is unreachable
/// until its tools are pinned, connected once they are, and degraded when they drift.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_tool_has_a_health_state_operators_read() {
    let (v1, v2) = (UpstreamServer::start(&[]), UpstreamServer::start(&["--variant", "v2"]));
    let gateway = writ_tests::upstream::Gateway::start(v1.port).await;
    let dev = DevProcess::start(&[]).await;
    let admin = Admin::trusting(std::path::Path::new(dev.var("WRIT_CA_FILE")), dev.var("WRIT_ADMIN_TOKEN"));
    let catalog = json!({"actions": [
        {"id": "list_devices", "title": "Devices", "description": "The tenant's devices.", "risk": "low",
         "input_schema": {"type": "object"}, "execution": {"builtin": "writ.devices"}},
        {"id": "read_press", "title": "Read the press", "description": "Its state.", "risk": "low",
         "input_schema": {"type": "object"}, "execution": "read", "device_class": "press.v1", "cost_units": 1},
        {"id": "weather.forecast", "title": "Forecast", "risk": "low",
         "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
         "execution": {"upstream": "weather/forecast"}}]});
    admin.post_ok(dev.var("WRIT_ADMIN_URL"), "/v1/tenants/demo/catalogs", catalog).await;
    let cli = |args: &[&str]| {
        let (code, out, err) = dev.cli(args);
        assert_eq!(code, 0, "writ admin {args:?}: {out}{err}");
        out
    };
    cli(&["upstream", "add", "--tenant", "demo", "weather", "--mcp-url", &gateway.url(), "--auth", "none"]);
    let states = || {
        let health: Value = serde_json::from_str(&cli(&["--output", "json", "tenant", "health", "demo"])).unwrap();
        let tools = health["tools"].as_array().unwrap().iter();
        tools
            .map(|t| (t["tool"].as_str().unwrap().to_string(), t["state"].as_str().unwrap().to_string()))
            .collect::<Vec<_>>()
    };
    let expect = |forecast: &str| {
        [("list_devices", "connected"), ("read_press", "connected"), ("weather.forecast", forecast)]
            .map(|(t, s)| (t.to_string(), s.to_string()))
            .to_vec()
    };
    eventually("the demo executor's connection is recorded", Duration::from_secs(20), || async {
        (states() == expect("unreachable")).then_some(())
    })
    .await;
    // The node's metrics count the tools by state (the demo tenant's and nobody else's here).
    let trust = writ_client::ClientTls::trusting(std::path::Path::new(dev.var("WRIT_CA_FILE"))).unwrap();
    let http = trust.apply(reqwest::Client::builder().no_proxy()).build().unwrap();
    let metrics =
        http.get(format!("{}/metrics", dev.var("WRIT_ADMIN_URL"))).send().await.unwrap().text().await.unwrap();
    for line in ["writ_tools_by_health{state=\"unreachable\"} 1", "writ_tools_by_health{state=\"connected\"} 2"] {
        assert!(metrics.lines().any(|l| l == line), "{line} in {metrics}");
    }
    // A stream of the health says the whole picture first, then each tool that changes.
    let url = format!("{}/v1/tenants/demo/health/events", dev.var("WRIT_ADMIN_URL"));
    let mut events = http.get(url).bearer_auth(dev.var("WRIT_ADMIN_TOKEN")).send().await.unwrap();
    assert_eq!(events.headers()["content-type"], "text/event-stream");
    let mut said = String::new();
    let mut next_event = async || loop {
        if let Some((event, rest)) = said.split_once("\n\n").map(|(e, r)| (e.to_string(), r.to_string())) {
            said = rest;
            if !event.starts_with(':') {
                return event;
            }
            continue;
        }
        let chunk = tokio::time::timeout(Duration::from_secs(30), events.chunk()).await.expect("an event in time");
        said.push_str(&String::from_utf8_lossy(&chunk.unwrap().expect("the stream stays open")));
    };
    let first = next_event().await;
    assert!(first.starts_with("event: health") && first.contains("\"weather.forecast\""), "{first}");
    cli(&["upstream", "sync", "--tenant", "demo", "weather", "--approve"]);
    assert_eq!(states(), expect("connected"), "pinned");
    let change = next_event().await;
    assert!(
        change.starts_with("event: tool") && change.contains("\"tool\":\"weather.forecast\",\"state\":\"connected\""),
        "{change}"
    );
    gateway.point_to(v2.port);
    cli(&["upstream", "sync", "--tenant", "demo", "weather"]);
    assert_eq!(states(), expect("degraded"), "its tools drifted and wait for review");
    let desk = writ_tests::desk::Desk::sign_in(&dev).await;
    let (_, page) = desk.get("/console/tenants/demo").await;
    assert!(page.contains("Tool health") && page.contains("tool-weather.forecast"), "{page}");
    assert!(page.contains("weather&#39;s tools changed and wait for review"), "{page}");
}
