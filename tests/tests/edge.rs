//! The MCP edge over real HTTP in front of a real node: tool calls with output validation and
//! sealed request state, operation tools and executors. The request path itself (Host and
//! Origin, body limit, authentication, admission, protocol checks, authorization, schema
//! validation, failing closed) is covered by router tests on the in-memory ledger
//! (`routers.rs`).

use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use writ_api::dto::SubmitRequest;
use writ_api::ledger::Command;
use writ_client::verifier::Verifier;
use writ_client::Ledger;
use writ_mcp_edge::EdgeConfig;
use writ_tests::procs::{single_node, Admin};

struct Edge {
    url: String,
    http: reqwest::Client,
}

impl Edge {
    async fn post(
        &self,
        token: Option<&str>,
        headers: &[(&str, &str)],
        body: Value,
    ) -> (u16, reqwest::header::HeaderMap, Value) {
        let mut rb = self.http.post(&self.url).json(&body);
        if let Some(t) = token {
            rb = rb.bearer_auth(t);
        }
        for (k, v) in headers {
            rb = rb.header(*k, *v);
        }
        let resp = rb.send().await.expect("edge reachable");
        let (code, h) = (resp.status().as_u16(), resp.headers().clone());
        (code, h, resp.json().await.unwrap_or(Value::Null))
    }

    /// `tools/call` of `name` with `params` (`arguments`, `inputResponses`, `requestState`).
    async fn tool(&self, token: &str, name: &str, mut params: Value) -> Value {
        params["name"] = json!(name);
        params["_meta"] = meta("2026-07-28");
        params["_meta"]["io.modelcontextprotocol/clientCapabilities"] = json!({"elicitation": {}});
        let body = json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": params});
        let headers = [("MCP-Protocol-Version", "2026-07-28"), ("Mcp-Method", "tools/call"), ("Mcp-Name", name)];
        self.post(Some(token), &headers, body).await.2
    }
}

fn meta(version: &str) -> Value {
    json!({"io.modelcontextprotocol/protocolVersion": version, "io.modelcontextprotocol/clientCapabilities": {}})
}

fn names(list: &Value) -> Vec<String> {
    list["result"]["tools"].as_array().expect("tools").iter().map(|t| t["name"].as_str().unwrap().to_string()).collect()
}

/// An in-process edge following the node at `url`: the client, its audit sink and the
/// protected-resource metadata URL.
async fn serve_edge(url: &str) -> (Edge, writ_mcp_edge::audit::AuditSink, String) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let edge_url = format!("http://127.0.0.1:{}/mcp", listener.local_addr().unwrap().port());
    let ledger = Arc::new(writ_tests::pki::edge_ledger(vec![url.to_string()], "in-process")) as Arc<dyn Ledger>;
    let verifier = Verifier::follow(ledger.clone(), edge_url.clone());
    let config = EdgeConfig::for_url(&edge_url, writ_mcp_edge::seal::SealKey::random());
    let prm_url = config.resource_metadata_url();
    let audit = writ_mcp_edge::audit::AuditSink::start(ledger.clone());
    let router = writ_mcp_edge::router(ledger, verifier, audit.clone(), config).unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await });
    (Edge { url: edge_url, http: reqwest::Client::builder().no_proxy().build().unwrap() }, audit, prm_url)
}

/// `tools/call` end to end: input validated against the catalog schema (a tool error the model
/// can act on), output validated against the output schema, MRTR state bound to the request,
/// catalog actions that need an executor refused with a reason, body limit, and authentication
/// before the body is even decoded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_call_validates_both_ways_and_binds_request_state() {
    let (node, _dir) = single_node().await;
    let admin = Admin::new();
    let url = node.url.clone();
    let (edge, _audit, _) = serve_edge(&url).await;
    admin.post_ok(&url, "/v1/tenants", json!({"name": "calls"})).await;
    let catalog = json!({"actions": [
        {"id": "strict_devices", "title": "devices", "risk": "low", "execution": {"builtin": "writ.devices"},
         "input_schema": {"type": "object", "properties": {"limit": {"type": "integer"}}, "additionalProperties": false},
         "output_schema": {"type": "object", "required": ["devices", "cursor"]}},
        {"id": "greet", "title": "greet", "risk": "low", "execution": {"builtin": "conformance.input_required_elicitation"},
         "input_schema": {"type": "object"}},
        {"id": "press", "title": "press", "risk": "high", "execution": "operation", "device_class": "press.v1",
         "input_schema": {"type": "object"}}
    ]});
    admin.post_ok(&url, "/v1/tenants/calls/catalogs", catalog).await;
    admin.post_ok(&url, "/v1/tenants/calls/principals", json!({"name": "a", "kind": "agent", "preset": "full"})).await;
    let issued = admin.post_ok(&url, "/v1/tenants/calls/tokens", json!({"principal": "a", "audience": edge.url})).await;
    let token = issued["token"].as_str().unwrap();

    let bad = writ_tests::eventually("the catalog at the edge", Duration::from_secs(5), || async {
        let r = edge.tool(token, "strict_devices", json!({"arguments": {"limit": "ten", "x": 1}})).await;
        r["result"].is_object().then_some(r)
    })
    .await;
    assert_eq!(
        (&bad["result"]["isError"], &bad["result"]["_meta"]["writ/reason"]),
        (&json!(true), &json!("INPUT_INVALID"))
    );
    assert_eq!(bad["result"]["_meta"]["writ/errors"].as_array().map(Vec::len), Some(2), "{bad}");
    let out = edge.tool(token, "strict_devices", json!({"arguments": {"limit": 3}})).await;
    assert_eq!(
        (&out["error"]["code"], &out["error"]["data"]["reason"]),
        (&json!(-32603), &json!("OUTPUT_INVALID")),
        "{out}"
    );
    // A direct call of an operation action needs a device of its class the caller may use.
    let op = edge.tool(token, "press", json!({})).await;
    assert_eq!(op["result"]["_meta"]["writ/reason"], "DEVICE_NOT_FOUND", "{op}");

    // MRTR: the state is bound to this request's arguments and refuses tampering.
    let first = edge.tool(token, "greet", json!({"arguments": {"lang": "en"}})).await;
    assert_eq!(first["result"]["resultType"], "input_required", "{first}");
    let state = first["result"]["requestState"].as_str().unwrap().to_string();
    let answer = json!({"user_name": {"action": "accept", "content": {"name": "Ada"}}});
    let other_args = edge
        .tool(token, "greet", json!({"arguments": {"lang": "fr"}, "inputResponses": answer, "requestState": state}))
        .await;
    assert_eq!(other_args["error"]["data"]["reason"], "REQUEST_STATE_INVALID", "{other_args}");
    let tampered = edge
        .tool(
            token,
            "greet",
            json!({"arguments": {"lang": "en"}, "inputResponses": answer, "requestState": format!("{state}x")}),
        )
        .await;
    assert_eq!(tampered["error"]["data"]["reason"], "REQUEST_STATE_INVALID", "{tampered}");
    let done = edge
        .tool(token, "greet", json!({"arguments": {"lang": "en"}, "inputResponses": answer, "requestState": state}))
        .await;
    assert_eq!(done["result"]["content"][0]["text"], "Hello, Ada!", "{done}");

    // The audit resource exists only for principals holding audit:read.
    let auditor = json!({"name": "auditor", "kind": "human", "scopes": ["audit:read", "resources:read"]});
    admin.post_ok(&url, "/v1/tenants/calls/principals", auditor).await;
    let issued =
        admin.post_ok(&url, "/v1/tenants/calls/tokens", json!({"principal": "auditor", "audience": edge.url})).await;
    let auditor = issued["token"].as_str().unwrap();
    let audit_uri = json!({"uri": "writ://audit/recent"});
    // 60 allowed reads: their decisions are the tenant's newest records once group-committed,
    // and the resource shows the newest 50 of them (the edge keeps no audit index: the ledger
    // finds them).
    for _ in 0..60 {
        let (code, _, _) = writ_tests::mcp::rpc(&edge.url, Some(token), "tools/list", json!({})).await;
        assert_eq!(code, 200);
    }
    let newest = writ_tests::eventually("60 decisions in the trail", Duration::from_secs(5), || async {
        let page = admin.get(&url, "/v1/tenants/calls/audit?limit=1000").await.ok()?;
        let records = page["records"].as_array()?;
        let lists = records.iter().filter(|r| r["operation"] == "tools/list").count();
        (lists == 60).then(|| records.last().and_then(|r| r["seq"].as_u64()))?
    })
    .await;
    let read = writ_tests::eventually("the auditor at the edge", Duration::from_secs(5), || async {
        let (code, _, body) = writ_tests::mcp::rpc(&edge.url, Some(auditor), "resources/read", audit_uri.clone()).await;
        (code == 200).then_some(body)
    })
    .await;
    let records: Vec<Value> = serde_json::from_str(read["result"]["contents"][0]["text"].as_str().unwrap()).unwrap();
    let seqs: Vec<u64> = records.iter().map(|r| r["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs.len(), 50, "{seqs:?}");
    assert!(seqs.windows(2).all(|w| w[1] == w[0] + 1), "consecutive, oldest first: {seqs:?}");
    assert!(seqs[49] >= newest, "the newest records ({seqs:?}; the trail had {newest} before the read)");
    let (_, _, listed) = writ_tests::mcp::rpc(&edge.url, Some(auditor), "resources/list", json!({})).await;
    assert!(listed.to_string().contains("writ://audit/recent"), "{listed}");
    let (_, _, hidden) = writ_tests::mcp::rpc(&edge.url, Some(token), "resources/read", audit_uri).await;
    assert_eq!(hidden["error"]["data"]["reason"], "RESOURCE_NOT_FOUND", "{hidden}");
    let (_, _, listed) = writ_tests::mcp::rpc(&edge.url, Some(token), "resources/list", json!({})).await;
    assert!(!listed.to_string().contains("writ://audit"), "{listed}");

    // Body limit, and authentication before the body is decoded.
    let huge = "x".repeat(writ_mcp_edge::BODY_BYTES_MAX_DEFAULT + 1);
    let r = edge.http.post(&edge.url).bearer_auth(token).body(huge).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 413);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"]["data"]["reason"], "PAYLOAD_TOO_LARGE");
    let r = edge.http.post(&edge.url).body("{not json").send().await.unwrap();
    assert_eq!(r.status().as_u16(), 401, "an unauthenticated request learns nothing about its body");
    node.shutdown().await;
}

/// `operation.execute` / `operation.readback` through the edge into the ledger (issue 5, first
/// slice): the key binds one payload (retries replay the same operation), the device is held by
/// one operation, the verify gate holds, and a deadline that passes with no executor expires the
/// operation (the leader's reaper) and frees the device.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operation_execute_records_one_durable_operation_per_key() {
    let (node, _dir) = single_node().await;
    let admin = Admin::new();
    let url = node.url.clone();
    let (edge, _audit, _) = serve_edge(&url).await;
    admin.post_ok(&url, "/v1/tenants", json!({"name": "ops"})).await;
    admin.post_ok(&url, "/v1/tenants/ops/sites", json!({"name": "plant"})).await;
    let press = json!({"name": "press-1", "site": "plant", "device_class": "press.v1"});
    admin.post_ok(&url, "/v1/tenants/ops/devices", press).await;
    let action = |id: &str, dry_run: bool| {
        let risk = if dry_run { "high" } else { "medium" };
        json!({"id": id, "title": id, "risk": risk, "execution": "operation", "device_class": "press.v1",
               "dry_run": dry_run, "cost_units": 1,
               "input_schema": {"type": "object", "required": ["position_mm"],
                                "properties": {"position_mm": {"type": "number", "minimum": 0, "maximum": 500}}}})
    };
    let catalog = json!({"actions": [action("move_press", false), action("careful_move", true)]});
    admin.post_ok(&url, "/v1/tenants/ops/catalogs", catalog).await;
    for (name, preset) in [("agent", "full"), ("reader", "readOnly")] {
        admin
            .post_ok(&url, "/v1/tenants/ops/principals", json!({"name": name, "kind": "agent", "preset": preset}))
            .await;
    }
    let token = |who: &str| {
        let (admin, url, who, aud) = (admin.clone(), url.clone(), who.to_string(), edge.url.clone());
        async move {
            let t = admin.post_ok(&url, "/v1/tenants/ops/tokens", json!({"principal": who, "audience": aud})).await;
            t["token"].as_str().unwrap().to_string()
        }
    };
    let (agent, reader) = (token("agent").await, token("reader").await);
    let execute = |key: &str, act: &str, position: i64, deadline_s: u64| {
        json!({"arguments": {"action": act, "idempotency_key": key, "device": "press-1",
                             "input": {"position_mm": position}, "deadline_s": deadline_s}})
    };

    let first = writ_tests::eventually("the catalog at the edge", Duration::from_secs(5), || async {
        let r = edge.tool(&agent, "operation.execute", execute("k-1", "move_press", 120, 2)).await;
        r["result"]["structuredContent"]["operation_id"].is_string().then_some(r)
    })
    .await;
    let op = &first["result"]["structuredContent"];
    assert_eq!(
        (&op["state"], &op["fencing_token"], &op["replayed"]),
        (&json!("reserved"), &json!(1), &json!(false)),
        "{first}"
    );
    for _ in 0..3 {
        let again = edge.tool(&agent, "operation.execute", execute("k-1", "move_press", 120, 2)).await;
        let replay = &again["result"]["structuredContent"];
        assert_eq!((&replay["operation_id"], &replay["replayed"]), (&op["operation_id"], &json!(true)), "{again}");
    }
    let reason = |r: &Value| r["result"]["_meta"]["writ/reason"].clone();
    let changed = edge.tool(&agent, "operation.execute", execute("k-1", "move_press", 121, 2)).await;
    assert_eq!(reason(&changed), "IDEMPOTENCY_KEY_REUSED", "{changed}");
    let busy = edge.tool(&agent, "operation.execute", execute("k-2", "move_press", 10, 2)).await;
    assert_eq!(reason(&busy), "DEVICE_RESERVED", "{busy}");
    let gated = edge.tool(&agent, "operation.execute", execute("k-3", "careful_move", 10, 2)).await;
    assert_eq!(reason(&gated), "VERIFY_REQUIRED", "{gated}");
    let bad = edge.tool(&agent, "operation.execute", execute("k-4", "move_press", -5, 2)).await;
    assert_eq!(reason(&bad), "INPUT_INVALID", "{bad}");
    let keyless = edge.tool(&agent, "operation.execute", json!({"arguments": {"action": "move_press"}})).await;
    assert_eq!(reason(&keyless), "INPUT_INVALID", "the tool's own schema requires a key: {keyless}");
    // A reader cannot execute (the tool does not exist for it) but can read back.
    let (_, _, list) = writ_tests::mcp::rpc(&edge.url, Some(&reader), "tools/list", json!({})).await;
    let listed = names(&list);
    assert!(listed.contains(&"operation.readback".to_string()) && !listed.contains(&"operation.execute".to_string()));
    let denied = edge.tool(&reader, "operation.execute", execute("k-5", "move_press", 10, 2)).await;
    assert_eq!(denied["error"]["data"]["reason"], "TOOL_NOT_FOUND", "{denied}");
    let read =
        edge.tool(&reader, "operation.readback", json!({"arguments": {"operation_id": op["operation_id"]}})).await;
    assert_eq!(read["result"]["structuredContent"]["state"], "reserved", "{read}");

    // No executor takes it: the deadline passes, the leader's reaper expires it and the device is free.
    let expired = writ_tests::eventually("the deadline to expire the operation", Duration::from_secs(10), || async {
        let r = edge.tool(&agent, "operation.readback", json!({"arguments": {"idempotency_key": "k-1"}})).await;
        (r["result"]["structuredContent"]["state"] == "expired").then_some(r)
    })
    .await;
    assert_eq!(expired["result"]["structuredContent"]["attempts"], 0);
    let next = edge.tool(&agent, "operation.execute", execute("k-6", "move_press", 10, 60)).await;
    assert_eq!(next["result"]["structuredContent"]["fencing_token"], 2, "{next}");

    // The operator through the CLI: show it, refuse to accept what no one observed (nothing was
    // even attempted), cancel it — the device is free again with the next fencing token.
    let id = next["result"]["structuredContent"]["operation_id"].as_str().unwrap().to_string();
    let cli = |args: Vec<&str>| writ_tests::procs::run_cli(&url, &args);
    let (code, out, _) = cli(vec!["operation", "show", "--tenant", "ops", &id]);
    assert!(code == 0 && out.contains("reserved") && out.contains("move_press"), "{out}");
    let (code, _, err) = cli(vec!["operation", "accept", "--tenant", "ops", &id, "--note", "looks fine"]);
    assert!(code != 0 && err.contains("OPERATION_STATE_CONFLICT"), "{err}");
    let (code, out, err) = cli(vec!["operation", "cancel", "--tenant", "ops", &id]);
    assert!(code == 0 && out.contains("cancelled"), "{out}{err}");
    let after = edge.tool(&agent, "operation.execute", execute("k-7", "move_press", 10, 60)).await;
    assert_eq!(after["result"]["structuredContent"]["fencing_token"], 3, "{after}");

    // Independent acceptance (X3). The executor's part is played here by ledger commands as a
    // node submits them, the legacy way a log written before starts claimed has them: an
    // explicit dispatch, one attempt, effect reported with evidence. (Edges may no longer
    // dispatch: `writ_api::role`.)
    let id = after["result"]["structuredContent"]["operation_id"].as_str().unwrap().to_string();
    let ledger = writ_client::HttpLedger::with_http(
        vec![url.clone()],
        writ_client::NodeHttp::with_tls(Some(&writ_tests::pki::client_tls(writ_api::role::Role::Node, "1"))),
    );
    let tenant_id = admin.get(&url, "/v1/tenants/ops").await.unwrap()["id"].as_str().unwrap().to_string();
    let evidence = writ_api::operation::EvidenceV1 {
        content_hash: "ab".repeat(32),
        evidence_return_ref: "sim://press-1/1".into(),
        summary: "moved to 10 mm".into(),
    };
    for command in [
        Command::DispatchOperation {
            tenant_id: tenant_id.clone(),
            operation_id: id.clone(),
            executor_id: "x-1".into(),
        },
        Command::StartAttempt {
            tenant_id: tenant_id.clone(),
            operation_id: id.clone(),
            executor_id: "x-1".into(),
            fencing_token: 3,
            lease_ms: 30_000,
        },
        Command::ReportAttempt {
            tenant_id: tenant_id.clone(),
            operation_id: id.clone(),
            fencing_token: 3,
            outcome: writ_api::operation::AttemptOutcome::Effect,
            evidence: Some(evidence),
        },
    ] {
        let r = ledger.submit(SubmitRequest::new("executor", command)).await.unwrap();
        assert!(matches!(r.outcome, writ_api::ledger::Outcome::Applied { .. }), "{:?}", r.outcome);
    }
    for (name, scopes) in [("watcher", vec!["observe:capture", "ops:read"]), ("owner", vec!["ops:accept", "ops:read"])]
    {
        admin
            .post_ok(&url, "/v1/tenants/ops/principals", json!({"name": name, "kind": "human", "scopes": scopes}))
            .await;
    }
    let (watcher, owner) = (token("watcher").await, token("owner").await);
    let decide = json!({"arguments": {"operation_id": id, "verdict": "accept", "note": "ok"}});
    let early = writ_tests::eventually("the owner at the edge", Duration::from_secs(5), || async {
        let r = edge.tool(&owner, "operation.decide", decide.clone()).await;
        r["result"].is_object().then_some(r)
    })
    .await;
    assert_eq!(reason(&early), "OBSERVATION_REQUIRED", "the executor's evidence alone: {early}");
    let observation = json!({"arguments": {"operation_id": id, "content_hash": "cd".repeat(32),
                                           "evidence_return_ref": "cam://line-1/frame/9", "summary": "press at 10 mm"}});
    let own = edge.tool(&agent, "observation.capture", observation.clone()).await;
    assert_eq!(reason(&own), "INPUT_INVALID", "the requester cannot observe its own operation: {own}");
    let seen = writ_tests::eventually("the watcher at the edge", Duration::from_secs(5), || async {
        let r = edge.tool(&watcher, "observation.capture", observation.clone()).await;
        r["result"]["structuredContent"].is_object().then_some(r)
    })
    .await;
    let observations = seen["result"]["structuredContent"]["observations"].as_array().cloned().unwrap_or_default();
    assert_eq!(observations.len(), 1, "{seen}");
    let (_, _, list) = writ_tests::mcp::rpc(&edge.url, Some(&agent), "tools/list", json!({})).await;
    assert!(!list.to_string().contains("operation.decide"), "the requester is not the acceptance owner");
    let accepted = edge.tool(&owner, "operation.decide", decide).await;
    assert_eq!(accepted["result"]["structuredContent"]["state"], "accepted", "{accepted}");
    node.shutdown().await;
}
