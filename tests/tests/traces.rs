//! One trace from agent to device (SPEC O4), with real parts: the official OpenTelemetry SDK
//! plays the agent host and the official MCP Python SDK carries its context in `_meta`; `writ
//! dev` exports over OTLP to a receiver decoding with the official `opentelemetry-proto`; the
//! upstream MCP server (the Python SDK's server, traced) continues the trace Writ hands it.

use std::time::Duration;

use serde_json::{json, Value};
use writ_tests::eventually;
use writ_tests::otlp::Receiver;
use writ_tests::procs::{Admin, DevProcess};
use writ_tests::upstream::UpstreamServer;

/// The demo press's read (performed by the demo executor) and a forecast of the upstream
/// `weather`.
fn catalog() -> Value {
    json!({"actions": [
        {"id": "read_press", "title": "Read the press", "description": "The press's state, read by its executor.",
         "input_schema": {"type": "object", "properties": {}, "additionalProperties": false},
         "risk": "low", "execution": "read", "device_class": "press.v1", "cost_units": 1},
        {"id": "weather.forecast", "title": "Forecast", "risk": "low",
         "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
         "execution": {"upstream": "weather/forecast"}}]})
}

/// The agent host's turn: its trace and span ids, and each tool's error flag.
async fn agent_turn(dev: &DevProcess, otlp: &str, tools: &[&str]) -> Value {
    let args = [&[dev.var("WRIT_MCP_URL"), dev.var("WRIT_DEMO_TOKEN"), otlp][..], tools].concat();
    writ_tests::upstream::python_report("otel_agent.py", &args).await
}

/// Writ's span of `trace` named `name`.
fn named<'a>(spans: &'a [Value], trace: &str, name: &str) -> Option<&'a Value> {
    spans.iter().find(|s| s["trace_id"] == trace && s["name"] == name && s["service"] == "writ-dev")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_trace_covers_the_agent_the_edge_the_ledger_the_executor_and_an_upstream() {
    let receiver = Receiver::start();
    let upstream = UpstreamServer::start(&["--otlp", &receiver.url()]);
    let dev = DevProcess::start(&["--otlp-endpoint", &receiver.url()]).await;
    let admin = Admin::trusting(std::path::Path::new(dev.var("WRIT_CA_FILE")), dev.var("WRIT_ADMIN_TOKEN"));
    let add = ["upstream", "add", "--tenant", "demo", "weather", "--mcp-url", &upstream.url(), "--auth", "none"];
    let (code, out, err) = dev.cli(&add);
    assert_eq!(code, 0, "{out}{err}");
    let (code, out, err) = dev.cli(&["upstream", "sync", "--tenant", "demo", "weather", "--approve"]);
    assert_eq!(code, 0, "{out}{err}");
    admin.post_ok(dev.var("WRIT_ADMIN_URL"), "/v1/tenants/demo/catalogs", catalog()).await;

    let turn = eventually("the edge serves the catalog", Duration::from_secs(30), || async {
        let turn = agent_turn(&dev, &receiver.url(), &["read_press", "weather.forecast"]).await;
        (turn["results"].as_object()?.values().all(|e| e == false)).then_some(turn)
    })
    .await;
    let trace = turn["trace_id"].as_str().unwrap().to_string();
    // Every hop's span, in one trace.
    let wanted = [
        "writ.operation.submit read_press",
        "writ.ledger.submit submit_operation",
        "writ.executor.attempt read_press",
        "writ.ledger.submit start_attempt",
        "tools/call read_press",
        "tools/call weather.forecast",
        "tools/call forecast",
    ];
    let spans = eventually("every hop's span is exported", Duration::from_secs(30), || async {
        let spans = receiver.spans();
        wanted.iter().all(|n| named(&spans, &trace, n).is_some()).then_some(spans)
    })
    .await;
    let span = |name: &str| named(&spans, &trace, name).unwrap_or_else(|| panic!("{name}: {spans:#?}"));
    let parent_of = |child: &Value, parent: &Value| {
        assert_eq!(child["parent_span_id"], parent["span_id"], "{} under {}", child["name"], parent["name"]);
    };
    // The agent's turn → the MCP SDK's client span → the edge's server span, per the MCP
    // conventions (its name, kind and `mcp.*` attributes).
    let agent = spans.iter().find(|s| s["trace_id"] == trace.as_str() && s["name"] == "agent turn").expect("the turn");
    assert_eq!(agent["span_id"], turn["span_id"]);
    let by_id = |id: &Value| spans.iter().find(|s| &s["span_id"] == id).unwrap_or_else(|| panic!("span {id}"));
    let edge = span("tools/call read_press");
    let client = by_id(&edge["parent_span_id"]);
    assert_eq!(client["service"], "agent-host", "the edge continues the SDK's client span: {client}");
    parent_of(client, agent);
    let attributes = &edge["attributes"];
    assert_eq!(
        (edge["kind"].as_str(), attributes["mcp.method.name"].as_str()),
        (Some("SPAN_KIND_SERVER"), Some("tools/call"))
    );
    assert_eq!(
        (attributes["gen_ai.tool.name"].as_str(), attributes["mcp.protocol.version"].as_str()),
        (Some("read_press"), Some("2026-07-28"))
    );
    // The edge → the operation's submission → the ledger (committed at a Raft index); the
    // executor's attempt continues under the submission, and its start is the ledger's too.
    let submission = span("writ.operation.submit read_press");
    parent_of(submission, edge);
    let ledger = span("writ.ledger.submit submit_operation");
    parent_of(ledger, submission);
    assert!(ledger["attributes"]["writ.raft.log_index"].as_str().unwrap().parse::<u64>().unwrap() > 0, "{ledger}");
    assert!(ledger["events"].as_array().unwrap().contains(&json!("committed")), "{ledger}");
    let attempt = span("writ.executor.attempt read_press");
    parent_of(attempt, submission);
    parent_of(span("writ.ledger.submit start_attempt"), attempt);
    // The upstream tool: the edge's server span → its client span → the upstream's own span.
    let forecast = span("tools/call weather.forecast");
    let outgoing = span("tools/call forecast");
    parent_of(outgoing, forecast);
    assert_eq!(outgoing["kind"], "SPAN_KIND_CLIENT");
    let upstream_span = eventually("the upstream's span", Duration::from_secs(30), || async {
        receiver.spans().into_iter().find(|s| s["service"] == "upstream" && s["trace_id"] == trace.as_str())
    })
    .await;
    parent_of(&upstream_span, outgoing);
    // The trace id is the one the audit records and the operation carry.
    let audit = admin.get(dev.var("WRIT_ADMIN_URL"), &format!("/v1/tenants/demo/audit?trace={trace}")).await.unwrap();
    assert!(!audit["records"].as_array().unwrap().is_empty(), "{audit}");
    authority_chains_are_on_the_record(&dev, &admin, &trace).await;
}

/// Each request decision of the agent's turn carries the authority chain: the client and the
/// protocol it spoke, the principal's kind and token, the catalog and its digest, and the
/// upstream or operation the call reached; `writ admin audit list` shows it.
async fn authority_chains_are_on_the_record(dev: &DevProcess, admin: &Admin, trace: &str) {
    let url = dev.var("WRIT_ADMIN_URL");
    let path = format!("/v1/tenants/demo/audit?trace={trace}&domain=request");
    let page = admin.get(url, &path).await.unwrap();
    let records = page["records"].as_array().unwrap();
    let call = |name: &str| {
        let found =
            records.iter().find(|r| r["operation"] == "tools/call" && r["detail"].as_str().unwrap().contains(name));
        found.unwrap_or_else(|| panic!("no decision for {name}: {page}"))["authority"].clone()
    };
    let forecast = call("weather.forecast");
    assert_eq!(
        (forecast["upstream"].as_str(), forecast["upstream_tool"].as_str()),
        (Some("weather"), Some("forecast"))
    );
    assert_eq!(forecast["protocol_version"], "2026-07-28", "{forecast}");
    assert_eq!(forecast["principal_kind"], "agent", "{forecast}");
    assert_eq!(forecast["delegation"].as_array().map(Vec::len), Some(1), "{forecast}");
    assert!(forecast["catalog_version"].as_u64() >= Some(1), "{forecast}");
    assert_eq!(forecast["policy_digest"].as_str().map(str::len), Some(64), "{forecast}");
    let press = call("read_press");
    assert!(press["operation_id"].as_str().is_some_and(|o| !o.is_empty()), "{press}");
    let (code, out, err) = dev.cli(&["audit", "list", "--tenant", "demo", "--trace", trace]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("upstream weather/forecast") && out.contains("agent"), "{out}");
}

/// Hostile trace context is ignored: the request starts a trace of its own, and nothing of
/// the header reaches a span.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_or_oversized_trace_context_starts_a_new_trace() {
    let receiver = Receiver::start();
    let dev = DevProcess::start(&["--otlp-endpoint", &receiver.url()]).await;
    let (mcp, token) = (dev.var("WRIT_MCP_URL"), dev.var("WRIT_DEMO_TOKEN"));
    let long_state = format!("k={}", "v".repeat(10_000));
    let hostile = [
        ("traceparent", "00-zzzz-yyyy-01".to_string()),
        ("traceparent", format!("00-{}-00f067aa0ba902b7-01", "0".repeat(32))),
        ("traceparent", format!("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01{}", "0".repeat(5000))),
        ("tracestate", long_state.clone()),
    ];
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "server/discover",
        "params": {"_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {}, "traceparent": {"not": "text"}}}});
    let mut traces = Vec::new();
    for (header, value) in &hostile {
        let r = http
            .post(mcp)
            .bearer_auth(token)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2026-07-28")
            .header("mcp-method", "server/discover")
            .header(*header, value)
            .json(&body)
            .send()
            .await
            .unwrap();
        let status = r.status();
        let text = r.text().await.unwrap();
        assert_eq!(status, 200, "{header}: {value:.60} {text}");
        let answer: Value = serde_json::from_str(&text).unwrap();
        let trace =
            answer["result"]["_meta"]["writ/trace_id"].as_str().expect("the result names its trace").to_string();
        assert_eq!(trace.len(), 32, "{answer}");
        assert!(!trace.starts_with("4bf92f35") && trace != "0".repeat(32), "a trace of its own: {trace}");
        traces.push(trace);
    }
    let spans = eventually("the requests' spans", Duration::from_secs(30), || async {
        let spans = receiver.spans();
        traces.iter().all(|t| spans.iter().any(|s| s["trace_id"] == t.as_str())).then_some(spans)
    })
    .await;
    for s in spans.iter().filter(|s| traces.contains(&s["trace_id"].as_str().unwrap_or_default().to_string())) {
        assert_eq!(s["parent_span_id"], "", "a root span: {s}");
        assert!(!s.to_string().contains("vvvvvvvvvv"), "no header text in a span: {s}");
    }
}
