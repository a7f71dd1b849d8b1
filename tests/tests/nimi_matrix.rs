//! The Nimi acceptance matrix (SPEC G6; `seeds/nimi-mcp-agent-whitepaper.txt` §16), one named
//! test per case, through the boundaries a user touches: an MCP client against `writ dev`, the
//! admin API an operator uses, an enrolled executor's mutual-TLS client, and (case 9) a real
//! upstream MCP server (the official Python SDK's) behind a gateway that counts what reaches it.

use std::time::Duration;

use serde_json::{json, Value};
use writ_tests::eventually;
use writ_tests::mcp::rpc;
use writ_tests::procs::{Admin, DevProcess, ExecutorProc};
use writ_tests::upstream::{Gateway, UpstreamServer};

struct Dev {
    dev: DevProcess,
    admin: Admin,
    dir: tempfile::TempDir,
}

impl Dev {
    async fn start() -> Dev {
        let dev = DevProcess::start(&[]).await;
        let ca = std::path::Path::new(dev.var("WRIT_CA_FILE"));
        let admin = Admin::trusting(ca, dev.var("WRIT_ADMIN_TOKEN"));
        Dev { dev, admin, dir: tempfile::tempdir().unwrap() }
    }

    fn admin_url(&self) -> &str {
        self.dev.var("WRIT_ADMIN_URL")
    }

    fn mcp(&self) -> &str {
        self.dev.var("WRIT_MCP_URL")
    }

    /// A principal of the demo tenant (a preset name, or explicit scopes).
    async fn principal(&self, name: &str, preset: Option<&str>, scopes: &[&str]) -> Value {
        let body = match preset {
            Some(p) => json!({"name": name, "kind": "agent", "preset": p}),
            None => json!({"name": name, "kind": "agent", "scopes": scopes}),
        };
        self.admin.post_ok(self.admin_url(), "/v1/tenants/demo/principals", body).await
    }

    /// Issues a token (the whole answer: `token`, `jti`, `expires_at_ms`).
    async fn issue(&self, principal: &str, ttl_s: Option<u64>) -> Value {
        let body = json!({"principal": principal, "audience": self.mcp(), "ttl_s": ttl_s});
        self.admin.post_ok(self.admin_url(), "/v1/tenants/demo/tokens", body).await
    }

    async fn token(&self, name: &str, preset: Option<&str>, scopes: &[&str]) -> String {
        self.principal(name, preset, scopes).await;
        self.issue(name, None).await["token"].as_str().unwrap().to_string()
    }

    async fn call(&self, token: &str, name: &str, args: Value) -> (u16, Value) {
        let (status, _, body) =
            rpc(self.mcp(), Some(token), "tools/call", json!({"name": name, "arguments": args})).await;
        (status, body)
    }

    async fn audit(&self) -> Vec<Value> {
        let page = self.admin.get(self.admin_url(), "/v1/tenants/demo/audit?limit=1000").await.unwrap();
        page["records"].as_array().cloned().unwrap_or_default()
    }

    /// The audit records matching `want`, waiting for buffered decisions to be committed.
    async fn audited(&self, what: &str, want: impl Fn(&Value) -> bool) -> Vec<Value> {
        eventually(what, Duration::from_secs(10), || async {
            let hits: Vec<Value> = self.audit().await.into_iter().filter(&want).collect();
            (!hits.is_empty()).then_some(hits)
        })
        .await
    }

    async fn principal_id(&self, name: &str) -> String {
        let p = self.admin.get(self.admin_url(), &format!("/v1/tenants/demo/principals/{name}")).await.unwrap();
        p["id"].as_str().unwrap_or_else(|| panic!("principal {name}: {p}")).to_string()
    }
}

/// The business reason of a tool result (`_meta["writ/reason"]`).
fn reason(result: &Value) -> &str {
    result["result"]["_meta"]["writ/reason"].as_str().unwrap_or_default()
}

fn names(list: &Value) -> Vec<String> {
    list["result"]["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap().to_string()).collect()
}

/// Case 1: a readOnly principal discovers (tools/list, context.search) and dry-runs: the
/// preview says what would happen and what it lacks to commit, and carries no proposal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_01_read_only_discovers_and_dry_runs() {
    let d = Dev::start().await;
    let ro = d.token("viewer", Some("readOnly"), &[]).await;
    let (status, _, list) = rpc(d.mcp(), Some(&ro), "tools/list", json!({})).await;
    assert_eq!(status, 200, "{list}");
    let tools = names(&list);
    for t in ["context.search", "operation.propose", "operation.readback"] {
        assert!(tools.contains(&t.to_string()), "{t} listed for readOnly: {tools:?}");
    }
    assert!(!tools.contains(&"operation.execute".to_string()), "{tools:?}");
    let (_, search) = d.call(&ro, "context.search", json!({})).await;
    assert_eq!(search["result"]["isError"], Value::Null, "{search}");
    assert!(search["result"]["structuredContent"]["devices"].is_array(), "{search}");

    let (_, preview) = d
        .call(
            &ro,
            "operation.propose",
            json!({"action": "move_press", "device": "demo-press", "input": {"position_mm": 12}}),
        )
        .await;
    let s = &preview["result"]["structuredContent"];
    assert_eq!(preview["result"]["isError"], Value::Null, "{preview}");
    assert_eq!(s["preview"]["action"], "move_press", "{preview}");
    assert_eq!(s["preview"]["risk"], "high");
    assert_eq!(s["policy"]["allowed"], false);
    let denied: Vec<&str> = s["policy"]["denied"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    assert_eq!(denied, ["tools:call:move_press", "devices:use:demo-press", "ops:execute"]);
    assert_eq!(s["proposal"], Value::Null, "no proposal for a caller who may not commit");
    // Dry runs record nothing: no operation exists.
    assert!(d.audit().await.iter().all(|r| r["domain"] != "operation"));
}

/// Case 2: a readOnly principal's commit is refused, and the refusal is in the audit trail.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_02_read_only_commit_is_refused_and_audited() {
    let d = Dev::start().await;
    let ro = d.token("viewer", Some("readOnly"), &[]).await;
    let args = json!({"action": "home_press", "device": "demo-press", "idempotency_key": "k-1"});
    let (_, r) = d.call(&ro, "operation.execute", args).await;
    assert_eq!(r["error"]["data"]["reason"], "TOOL_NOT_FOUND", "{r}");
    let (_, direct) = d.call(&ro, "home_press", json!({})).await;
    assert_eq!(direct["error"]["data"]["reason"], "TOOL_NOT_FOUND", "{direct}");
    let viewer = d.principal_id("viewer").await;
    let denials = d
        .audited("the denied commits", |r| {
            r["principal_id"] == viewer.as_str() && r["outcome"] == "denied" && r["operation"] == "tools/call"
        })
        .await;
    let denied: Vec<&str> = denials.iter().map(|r| r["reason_code"].as_str().unwrap()).collect();
    assert_eq!(denied, ["APP_SCOPE_FORBIDDEN", "APP_SCOPE_FORBIDDEN"], "{denials:?}");
    assert!(denials[0]["detail"].as_str().unwrap().contains("operation.execute"));
    assert!(denials[1]["detail"].as_str().unwrap().contains("home_press"));
    assert!(d.audit().await.iter().all(|r| r["domain"] != "operation"), "nothing was recorded");
}

/// Case 3: committing an action that demands a dry run without its verified proposal is
/// refused with a parseable reason code (and with a proposal for another payload too).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_03_commit_without_verify_is_refused_with_a_reason_code() {
    let d = Dev::start().await;
    let agent = d.token("agent", Some("full"), &[]).await;
    let call = |input: Value, proposal: Option<&str>| {
        let mut c = json!({"action": "move_press", "device": "demo-press", "input": input, "idempotency_key": "k-3"});
        if let Some(p) = proposal {
            c["proposal"] = json!(p);
        }
        c
    };
    let (_, r) = d.call(&agent, "operation.execute", call(json!({"position_mm": 40}), None)).await;
    assert_eq!(r["result"]["isError"], true, "{r}");
    assert_eq!(reason(&r), "VERIFY_REQUIRED", "{r}");
    let text = r["result"]["content"][0]["text"].as_str().unwrap();
    assert!(text.starts_with("VERIFY_REQUIRED"), "the text leads with the code: {text}");

    let mut dry = call(json!({"position_mm": 40}), None);
    dry.as_object_mut().unwrap().remove("idempotency_key");
    let (_, p) = d.call(&agent, "operation.propose", dry).await;
    let proposal = p["result"]["structuredContent"]["proposal"].as_str().expect("a proposal").to_string();
    let (_, other) = d.call(&agent, "operation.execute", call(json!({"position_mm": 41}), Some(&proposal))).await;
    assert_eq!(reason(&other), "PROPOSAL_INVALID", "a proposal binds its payload: {other}");
    let (_, ok) = d.call(&agent, "operation.execute", call(json!({"position_mm": 40}), Some(&proposal))).await;
    assert_eq!(ok["result"]["isError"], Value::Null, "{ok}");
    assert!(ok["result"]["structuredContent"]["operation_id"].is_string(), "{ok}");
}

/// Case 4: scope overreach is refused with a non-empty reason code — calling an action outside
/// the granted scopes (as a tool and through operation.execute), using a device not granted,
/// and delegating scopes the parent does not hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_04_scope_overreach_is_refused_with_a_reason() {
    let d = Dev::start().await;
    let scopes =
        ["tools:list", "context:read", "ops:execute", "ops:read", "tools:call:home_press", "devices:use:demo-press"];
    let narrow = d.token("narrow", None, &scopes).await;
    let (_, direct) = d.call(&narrow, "move_press", json!({"position_mm": 1})).await;
    assert_eq!(direct["error"]["data"]["reason"], "TOOL_NOT_FOUND", "{direct}");
    let (_, via) = d
        .call(
            &narrow,
            "operation.execute",
            json!({"action": "move_press", "device": "demo-press",
                                                   "input": {"position_mm": 1}, "idempotency_key": "k-4"}),
        )
        .await;
    assert_eq!(reason(&via), "TOOL_NOT_FOUND", "{via}");
    d.admin
        .post_ok(
            d.admin_url(),
            "/v1/tenants/demo/devices",
            json!({"name": "press-2", "site": "demo-site", "device_class": "press.v1"}),
        )
        .await;
    let (_, device) = d
        .call(
            &narrow,
            "operation.execute",
            json!({"action": "home_press", "device": "press-2", "idempotency_key": "k-5"}),
        )
        .await;
    assert_eq!(reason(&device), "DEVICE_NOT_FOUND", "{device}");
    // Delegation cannot widen: the child asks for more than the parent holds.
    d.principal("planner", None, &["tools:list", "tokens:delegate"]).await;
    let parent = d.issue("planner", None).await;
    let jti = parent["jti"].as_str().unwrap();
    let (code, wider) = d
        .admin
        .post(d.admin_url(), &format!("/v1/tenants/demo/tokens/{jti}/delegate"), json!({"scopes": ["ops:execute"]}))
        .await
        .unwrap();
    assert_eq!((code, wider["reason"].as_str()), (403, Some("APP_SCOPE_FORBIDDEN")), "{wider}");
    let narrow_id = d.principal_id("narrow").await;
    d.audited("the overreaching call", |r| {
        r["principal_id"] == narrow_id.as_str() && r["reason_code"] == "APP_SCOPE_FORBIDDEN"
    })
    .await;
}

/// Case 5: an expired token fails authentication with a challenge the client can act on (the
/// resource metadata to get a new token); with a fresh token the same request succeeds — the
/// edge keeps no session, so "rebuilding the session" is just a new token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_05_expired_token_fails_authentication_and_a_new_one_works() {
    let d = Dev::start().await;
    let (code, out, err) = d.dev.cli(&["tenant", "set", "demo", "--token-ttl-min", "1"]);
    assert_eq!(code, 0, "{out}{err}");
    d.principal("brief", Some("full"), &[]).await;
    let issued = d.issue("brief", Some(1)).await;
    let token = issued["token"].as_str().unwrap().to_string();
    let expires = issued["expires_at_ms"].as_u64().unwrap();
    let (status, _, _) = rpc(d.mcp(), Some(&token), "tools/list", json!({})).await;
    assert_eq!(status, 200, "valid before its expiry");
    let now = || std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64;
    while now() <= expires + 1000 {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (status, challenge, body) = rpc(d.mcp(), Some(&token), "tools/list", json!({})).await;
    assert_eq!(status, 401, "{body}");
    assert_eq!(body["error"]["data"]["reason"], "AUTH_TOKEN_EXPIRED", "{body}");
    assert!(challenge.contains("error=\"invalid_token\""), "{challenge}");
    assert!(challenge.contains("resource_metadata="), "the client learns where to get a new token: {challenge}");
    let fresh = d.issue("brief", Some(600)).await;
    let (status, _, list) = rpc(d.mcp(), fresh["token"].as_str(), "tools/list", json!({})).await;
    assert_eq!(status, 200, "{list}");
    assert!(names(&list).contains(&"operation.execute".to_string()));
}

/// Case 6: a delegation beyond the depth limit is refused, and the chain stays auditable: the
/// refusal names the principal and the parent token, whose own record names its parent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_06_delegation_depth_exceeded_is_refused_and_the_chain_audited() {
    let d = Dev::start().await;
    d.principal("planner", Some("delegate"), &[]).await;
    let root = d.issue("planner", None).await;
    let root_jti = root["jti"].as_str().unwrap().to_string();
    let delegate = |jti: String, body: Value| {
        let admin = &d.admin;
        let url = d.admin_url().to_string();
        async move { admin.post(&url, &format!("/v1/tenants/demo/tokens/{jti}/delegate"), body).await.unwrap() }
    };
    let (code, child) =
        delegate(root_jti.clone(), json!({"scopes": ["tools:list", "tokens:delegate"], "audience": d.mcp()})).await;
    assert_eq!(code, 201, "depth 1 is within the default limit: {child}");
    let child_jti = child["jti"].as_str().unwrap().to_string();
    let (status, _, _) = rpc(d.mcp(), child["token"].as_str(), "tools/list", json!({})).await;
    assert_eq!(status, 200, "the child token works at the edge");
    let (code, grandchild) = delegate(child_jti.clone(), json!({"scopes": ["tools:list"]})).await;
    assert_eq!((code, grandchild["reason"].as_str()), (403, Some("DELEGATION_DEPTH_EXCEEDED")), "{grandchild}");

    let planner = d.principal_id("planner").await;
    let refusal = d.audited("the refused delegation", |r| r["reason_code"] == "DELEGATION_DEPTH_EXCEEDED").await;
    assert_eq!(refusal[0]["outcome"], "rejected");
    assert_eq!(refusal[0]["principal_id"], planner.as_str(), "{refusal:?}");
    assert_eq!(refusal[0]["parent_token_id"], child_jti.as_str(), "{refusal:?}");
    let audit = d.audit().await;
    let issued_child = audit.iter().find(|r| r["token_id"] == child_jti.as_str()).expect("the child's record");
    assert_eq!(issued_child["parent_token_id"], root_jti.as_str(), "the chain continues to the root");
    let issued_root = audit.iter().find(|r| r["token_id"] == root_jti.as_str()).expect("the root's record");
    assert_eq!(issued_root["parent_token_id"], Value::Null);
}

/// Case 7: the domain gate comes first — for a suspended tenant every request is refused with
/// TENANT_SUSPENDED, even one that the scope gate would also refuse.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_07_domain_gate_fires_before_the_scope_gate() {
    let d = Dev::start().await;
    let ro = d.token("viewer", Some("readOnly"), &[]).await;
    let full = d.token("agent", Some("full"), &[]).await;
    d.admin.post_ok(d.admin_url(), "/v1/tenants/demo/suspend", json!({"note": "app mode: maintenance"})).await;
    let gated = |token: String| {
        let d = &d;
        async move {
            eventually("the suspension at the edge", Duration::from_secs(5), || {
                let token = token.clone();
                async move {
                    let args = json!({"action": "home_press", "device": "demo-press", "idempotency_key": "k-7"});
                    let (status, body) = d.call(&token, "operation.execute", args).await;
                    (body["error"]["data"]["reason"] == "TENANT_SUSPENDED").then_some((status, body))
                }
            })
            .await
        }
    };
    let (status, body) = gated(ro.clone()).await;
    assert_eq!(status, 403, "the readOnly caller lacks the scope, yet the domain gate answers: {body}");
    let (status, _) = gated(full.clone()).await;
    assert_eq!(status, 403);
    let viewer = d.principal_id("viewer").await;
    let denied =
        d.audited("the gated request", |r| r["principal_id"] == viewer.as_str() && r["outcome"] == "denied").await;
    assert!(denied.iter().all(|r| r["reason_code"] == "TENANT_SUSPENDED"), "{denied:?}");
    d.admin.post_ok(d.admin_url(), "/v1/tenants/demo/resume", json!({})).await;
    eventually("the resumption at the edge", Duration::from_secs(5), || async {
        let (_, body) = d.call(&ro, "operation.execute", json!({"action": "home_press", "idempotency_key": "k"})).await;
        (body["error"]["data"]["reason"] == "TOOL_NOT_FOUND").then_some(())
    })
    .await;
}

/// Case 8: every audit record carries the minimum fields (at least six: when, trace, tenant,
/// who, what, outcome, plus the reason of a refusal), and secrets never reach it: the bearer
/// token is redacted where it was issued and appears nowhere in the trail.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_08_audit_records_have_the_minimum_fields_and_redact_secrets() {
    let d = Dev::start().await;
    let agent = d.token("agent", Some("full"), &[]).await;
    let ro = d.token("viewer", Some("readOnly"), &[]).await;
    let (_, ok) = d.call(&agent, "home_press", json!({})).await;
    assert_eq!(ok["result"]["isError"], Value::Null, "{ok}");
    d.call(&ro, "operation.execute", json!({"action": "home_press", "idempotency_key": "k"})).await;
    let agent_id = d.principal_id("agent").await;
    d.audited("the agent's operation", |r| r["domain"] == "operation" && r["principal_id"] == agent_id.as_str()).await;
    d.audited("the viewer's denial", |r| r["outcome"] == "denied").await;
    let audit = d.audit().await;
    assert!(audit.len() > 10, "{}", audit.len());
    for r in &audit {
        for field in ["at_ms", "trace_id", "tenant_id", "domain", "operation", "outcome"] {
            let v = &r[field];
            assert!(!v.is_null() && v != "" && v != 0, "{field} missing in {r}");
        }
        if r["outcome"] == "denied" || r["outcome"] == "rejected" {
            assert!(r["reason_code"].is_string(), "a refusal says why: {r}");
        }
        if r["domain"] == "request" {
            let who = r["principal_id"].as_str().unwrap_or_else(|| panic!("who asked: {r}"));
            // Agents present a token; executors their certificate (the principal names it).
            assert!(who.starts_with("executor") || r["token_id"].is_string(), "with which credential: {r}");
        }
    }
    let issued: Vec<&Value> = audit.iter().filter(|r| r["operation"] == "token_issued").collect();
    assert!(issued.len() >= 3);
    for r in issued {
        let detail: Value = serde_json::from_str(r["detail"].as_str().unwrap()).unwrap();
        assert_eq!(detail["token"], "[REDACTED]", "{r}");
    }
    let ca = writ_client::ClientTls::trusting(std::path::Path::new(d.dev.var("WRIT_CA_FILE"))).unwrap();
    let export = ca
        .apply(reqwest::Client::builder().no_proxy())
        .build()
        .unwrap()
        .get(format!("{}/v1/tenants/demo/audit/export", d.admin_url()))
        .bearer_auth(&d.admin.token)
        .send()
        .await
        .unwrap();
    assert_eq!(export.status(), 200);
    let text = export.text().await.unwrap();
    assert!(text.lines().count() >= audit.len(), "the export has every record");
    for secret in [&agent, &ro, &d.admin.token] {
        let signature = secret.rsplit('.').next().unwrap();
        assert!(!text.contains(signature), "a bearer secret leaked into the audit trail");
    }
}

/// Case 9: an outbound MCP client (the edge's, to an upstream server) stops after 3
/// consecutive failures: exactly 3 calls reach the dead upstream's address, the next ones are
/// refused at once with UPSTREAM_UNAVAILABLE and audited, and the open fuse is on the ledger
/// (`writ admin upstream show`); once the upstream runs again and its configuration changes,
/// calls succeed and the fuse shows closed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_09_an_upstream_fuse_opens_after_3_failures_and_recovers_on_a_config_change() {
    let d = Dev::start().await;
    let mut upstream = UpstreamServer::start(&[]);
    let gateway = Gateway::start(upstream.port).await;
    let action = json!({"id": "echo.slow", "title": "Slow", "description": "An upstream tool.", "risk": "low",
        "input_schema": {"type": "object", "properties": {"seconds": {"type": "number"}}, "required": ["seconds"]},
        "execution": {"upstream": "echo/slow"}});
    d.admin.post_ok(d.admin_url(), "/v1/tenants/demo/catalogs", json!({"actions": [action]})).await;
    let cli = |args: &[&str]| {
        let (code, out, err) = d.dev.cli(args);
        assert_eq!(code, 0, "writ admin {args:?}: {out}{err}");
        out
    };
    cli(&["upstream", "add", "--tenant", "demo", "echo", "--mcp-url", &gateway.url(), "--protocol", "2026-07-28"]);
    cli(&["upstream", "sync", "--tenant", "demo", "echo", "--approve"]);
    let agent = d.token("agent", None, &["tools:call:echo.slow"]).await;
    let args = json!({"seconds": 0});
    eventually("a call through the upstream", Duration::from_secs(20), || async {
        let (_, r) = d.call(&agent, "echo.slow", args.clone()).await;
        (r["result"]["structuredContent"]["result"] == "done").then_some(())
    })
    .await;
    let reason_of = |r: &Value| r["error"]["data"]["reason"].as_str().unwrap_or_default().to_string();

    upstream.kill();
    let before = gateway.requests();
    for n in 1..=3 {
        let (_, r) = d.call(&agent, "echo.slow", args.clone()).await;
        assert_eq!(reason_of(&r), "UPSTREAM_FAILED", "failure {n}: {r}");
    }
    let started = std::time::Instant::now();
    let (_, fast) = d.call(&agent, "echo.slow", args.clone()).await;
    assert_eq!(reason_of(&fast), "UPSTREAM_UNAVAILABLE", "{fast}");
    assert_eq!(gateway.requests() - before, 3, "exactly 3 failures reached the upstream's address");
    assert!(started.elapsed() < Duration::from_secs(1), "refused fast, without reaching out");
    let refused =
        d.audited("the fast refusal", |r| r["reason_code"] == "UPSTREAM_UNAVAILABLE" && r["outcome"] == "denied").await;
    assert!(refused[0]["detail"].to_string().contains("echo.slow"), "{refused:?}");
    let open = eventually("the open fuse on the ledger", Duration::from_secs(20), || async {
        let (_, out, _) = d.dev.cli(&["upstream", "show", "--tenant", "demo", "echo"]);
        out.lines().any(|l| l.contains(" open ") && l.contains(" 3 ")).then_some(out)
    })
    .await;
    println!("writ admin upstream show (fuse open):\n{open}");

    // The upstream runs again (elsewhere) and the operator points the upstream at it.
    let restarted = UpstreamServer::start(&[]);
    cli(&["upstream", "set", "--tenant", "demo", "echo", "--mcp-url", &restarted.url()]);
    let ok = eventually("calls succeed after the configuration change", Duration::from_secs(20), || async {
        let (_, r) = d.call(&agent, "echo.slow", args.clone()).await;
        (r["result"]["structuredContent"]["result"] == "done").then_some(r)
    })
    .await;
    assert_eq!(ok["result"]["isError"], json!(false), "{ok}");
    assert!(restarted.calls("slow") >= 1);
    let closed = eventually("the closed fuse on the ledger", Duration::from_secs(20), || async {
        let (_, out, _) = d.dev.cli(&["upstream", "show", "--tenant", "demo", "echo"]);
        out.lines().any(|l| l.contains(" closed ") && l.contains("configuration changed")).then_some(out)
    })
    .await;
    println!("writ admin upstream show (fuse closed):\n{closed}");
}

/// Case 10: the capability sandbox of a plug-in — here an executor, whose capability is the
/// devices it was enrolled for: touching an operation dispatched to another executor is refused
/// and traceable (audited with the executor as the principal and the request's trace id).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_10_out_of_capability_calls_are_sandboxed_and_traceable() {
    let d = Dev::start().await;
    d.admin
        .post_ok(
            d.admin_url(),
            "/v1/tenants/demo/devices",
            json!({"name": "press-9", "site": "demo-site", "device_class": "press.v1"}),
        )
        .await;
    let intruder = ExecutorProc::enroll(
        &d.admin.client(d.admin_url()),
        "demo",
        "demo-site",
        &["press-9"],
        d.mcp(),
        &d.dir.path().join("intruder"),
        "kind = \"simulated\"",
    )
    .await;
    let agent = d.token("agent", Some("full"), &[]).await;
    let (_, r) = d
        .call(
            &agent,
            "operation.execute",
            json!({"action": "home_press", "device": "demo-press", "idempotency_key": "k-10"}),
        )
        .await;
    let op = r["result"]["structuredContent"]["operation_id"].as_str().unwrap_or_else(|| panic!("{r}")).to_string();
    let endpoint = std::fs::read_to_string(intruder.dir.join("executor.toml")).unwrap();
    let endpoint = endpoint.split('"').find(|s| s.starts_with("https://")).expect("edge url").to_string();
    let client = intruder.mtls_client();
    let mut traces = Vec::new();
    let evidence = json!({"content_hash": "0".repeat(64), "evidence_return_ref": "x://1", "summary": "forged"});
    for (step, body) in [
        ("start", json!({"fencing_token": 1, "lease_ms": 5000})),
        ("renew", json!({"fencing_token": 1, "lease_ms": 5000})),
        ("report", json!({"fencing_token": 1, "outcome": "effect", "evidence": evidence})),
    ] {
        let resp =
            client.post(format!("{endpoint}/executor/v1/operations/{op}/{step}")).json(&body).send().await.unwrap();
        let status = resp.status().as_u16();
        let trace = resp.headers().get("x-writ-trace-id").and_then(|v| v.to_str().ok()).map(str::to_string);
        let body: Value = resp.json().await.unwrap_or(Value::Null);
        assert_eq!((status, body["reason"].as_str()), (404, Some("OPERATION_NOT_FOUND")), "{step}: {body}");
        traces.push(trace.expect("a trace id on the refusal"));
    }
    let who = format!("executor:{}", intruder.executor_id);
    let refused =
        d.audited("the sandbox refusals", |r| r["principal_id"] == who.as_str() && r["outcome"] == "denied").await;
    for t in &traces {
        let r =
            refused.iter().find(|r| r["trace_id"] == t.as_str()).unwrap_or_else(|| panic!("trace {t}: {refused:?}"));
        assert_eq!(r["reason_code"], "OPERATION_NOT_FOUND");
    }
}
