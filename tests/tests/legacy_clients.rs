//! The agent hosts of the 2025 era as real processes against two `writ edge` replicas of one
//! cluster: the official TypeScript SDK 1.x client and the Python SDK 1.x client
//! (`streamablehttp_client`), each behind a round-robin balancer so that every request goes to
//! the other edge — a session opened on one edge continues on the other, a server request
//! (elicitation) asked on one is answered through the other, and the session survives one edge
//! being killed and started again on a new port — and the MCP Inspector's CLI listing and
//! calling tools on each edge. Installed by `make nodedeps` and `make pydeps`.

use std::process::Stdio;
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use writ_tests::mcp::{builtin, tenant};
use writ_tests::procs::{Cluster, EdgeProc};

/// A client process run in two phases: it prints a JSON line per phase and, between them,
/// reads the ports to use next from stdin.
struct Phased {
    child: tokio::process::Child,
    stdout: tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
    name: &'static str,
}

impl Phased {
    fn spawn(name: &'static str, mut cmd: tokio::process::Command) -> Phased {
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("{name} starts: {e}"));
        let stdout = BufReader::new(child.stdout.take().expect("stdout")).lines();
        Phased { child, stdout, name }
    }

    /// The next phase's report.
    async fn report(&mut self) -> Value {
        let line = tokio::time::timeout(Duration::from_secs(120), self.stdout.next_line()).await;
        match line {
            Ok(Ok(Some(line))) => serde_json::from_str(&line).unwrap_or_else(|_| panic!("{}: {line}", self.name)),
            _ => {
                let _ = self.child.start_kill();
                let mut err = String::new();
                if let Some(mut e) = self.child.stderr.take() {
                    let _ = tokio::io::AsyncReadExt::read_to_string(&mut e, &mut err).await;
                }
                panic!("{} ended without its report:\n{err}", self.name)
            }
        }
    }

    async fn continue_on(&mut self, ports: [u16; 2]) {
        let stdin = self.child.stdin.as_mut().expect("stdin");
        stdin.write_all(format!("[{}, {}]\n", ports[0], ports[1]).as_bytes()).await.expect("write ports");
        stdin.flush().await.expect("flush");
    }
}

/// A one-node cluster with two edges sharing the first edge's canonical URL and seal key, and
/// tenant `alpha` whose agent may read devices, be asked its name, and press.
async fn deployment() -> (Cluster, tempfile::TempDir, EdgeProc, EdgeProc, String) {
    let cluster = Cluster::start(1).await;
    let dir = tempfile::tempdir().unwrap();
    let urls = cluster.all_urls();
    let e1 = EdgeProc::start(dir.path(), &urls, None).await;
    let e2 = EdgeProc::start(dir.path(), &urls, Some(&e1.url())).await;
    let press = json!({"id": "press", "title": "press", "risk": "low", "execution": "operation",
                       "device_class": "press.v1",
                       "input_schema": {"type": "object", "properties": {"force_kn": {"type": "integer"}}}});
    let actions = vec![
        builtin("list_devices", "writ.devices", None),
        builtin("greet", "conformance.input_required_elicitation", None),
        press,
    ];
    tenant(&cluster.admin, &urls[0], "alpha", actions).await;
    let issued = cluster
        .admin
        .post_ok(&urls[0], "/v1/tenants/alpha/tokens", json!({"principal": "agent", "audience": e1.url()}))
        .await;
    let token = issued["token"].as_str().expect("token").to_string();
    (cluster, dir, e1, e2, token)
}

fn ports_served(report: &Value) -> Vec<u64> {
    report["served"].as_array().expect("served").iter().map(|s| s["port"].as_u64().unwrap()).collect()
}

/// A session id of the 2025 wire, tried directly on `edge`: the HTTP status of a `ping`.
async fn ping_status(edge: &str, token: &str, session: &str) -> (u16, Value) {
    let r = reqwest::Client::builder()
        .no_proxy()
        .build()
        .unwrap()
        .post(edge)
        .bearer_auth(token)
        .header("Mcp-Session-Id", session)
        .header("MCP-Protocol-Version", "2025-11-25")
        .header("Accept", "application/json, text/event-stream")
        .json(&json!({"jsonrpc": "2.0", "id": 7, "method": "ping"}))
        .send()
        .await
        .expect("edge reachable");
    (r.status().as_u16(), r.json().await.unwrap_or(Value::Null))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typescript_sdk_v1_session_continues_across_edges_and_an_edge_restart() {
    let (cluster, dir, mut e1, e2, token) = deployment().await;
    let canonical = e1.url();
    let sdk = writ_tests::tools::dir().join("mcp-ts1/node_modules/@modelcontextprotocol/sdk");
    assert!(sdk.exists(), "@modelcontextprotocol/sdk 1.x is not installed: run `make nodedeps`");
    let script = format!("{}/node/legacy_client.mjs", env!("CARGO_MANIFEST_DIR"));
    let mut cmd = tokio::process::Command::new(writ_tests::tools::node());
    cmd.arg(&script).arg(&sdk).args([&canonical, &token, &e1.port.to_string(), &e2.port.to_string()]);
    cmd.args(["list_devices", "greet", "press", "alpha-press"]);
    let mut client = Phased::spawn("the TypeScript SDK 1.x client", cmd);

    let one = client.report().await;
    assert_eq!(one["protocolVersion"], "2025-11-25", "{one}");
    let tools: Vec<&str> = one["tools"].as_array().unwrap().iter().map(|t| t.as_str().unwrap()).collect();
    for want in ["list_devices", "greet", "press", "operation.execute"] {
        assert!(tools.contains(&want), "{want} listed: {tools:?}");
    }
    assert_eq!(one["read"]["devices"][0]["name"], "alpha-press", "{one}");
    assert_eq!(one["ask"], json!(["Hello, Ada!"]), "the elicitation was asked and answered: {one}");
    assert_eq!(one["asked"], json!(["What is your name?"]));
    let ports = ports_served(&one);
    assert!(ports.contains(&(e1.port as u64)) && ports.contains(&(e2.port as u64)), "both edges served: {one}");
    let methods: Vec<&str> = one["served"].as_array().unwrap().iter().map(|s| s["method"].as_str().unwrap()).collect();
    let call = methods.iter().rposition(|m| *m == "tools/call").unwrap();
    let answered = methods.iter().rposition(|m| *m == "response").expect("the client answered the elicitation");
    assert!(answered > call, "{methods:?}");
    assert_ne!(ports[answered], ports[call], "the answer reached the other edge, which handed it over: {one}");

    // One edge is killed and started again (a new port): the same session continues.
    e1.kill();
    let e1b = EdgeProc::start(dir.path(), &cluster.all_urls(), Some(&canonical)).await;
    client.continue_on([e1b.port, e2.port]).await;
    let two = client.report().await;
    assert_eq!(two["sessionId"], one["sessionId"], "the same session: {two}");
    assert_eq!(two["tools"].as_u64(), Some(tools.len() as u64));
    assert_eq!(two["ask"], json!(["Hello, Ada!"]), "{two}");
    // An idempotent retry through the legacy client: the same operation, replayed.
    let (first, retry) = (&two["first"], &two["retry"]);
    assert!(first["operation_id"].is_string(), "{two}");
    assert_eq!(first["operation_id"], retry["operation_id"], "{two}");
    assert_eq!(retry["replayed"], true, "{two}");
    assert!(ports_served(&two).contains(&(e1b.port as u64)), "the restarted edge served the session: {two}");

    // The client ended its session (DELETE through one edge): refused on both from then on.
    let session = one["sessionId"].as_str().unwrap();
    for edge in [e1b.url(), e2.url()] {
        let (status, body) =
            writ_tests::eventually("the end of the session on every edge", Duration::from_secs(10), || {
                let (edge, token) = (edge.clone(), token.clone());
                async move {
                    let (status, body) = ping_status(&edge, &token, session).await;
                    (status == 404).then_some((status, body))
                }
            })
            .await;
        assert_eq!(status, 404);
        assert_eq!(body["error"]["data"]["reason"], "SESSION_NOT_FOUND", "{body}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_sdk_v1_session_continues_across_edges_and_an_edge_restart() {
    let (cluster, dir, mut e1, e2, token) = deployment().await;
    let canonical = e1.url();
    let python = writ_tests::tools::dir().join("py-mcp1/bin/python");
    assert!(python.exists(), "the Python mcp 1.x environment is missing: run `make pydeps`");
    let script = format!("{}/python/legacy_client.py", env!("CARGO_MANIFEST_DIR"));
    let mut cmd = tokio::process::Command::new(python);
    cmd.arg(&script).args([&canonical, &token, &e1.port.to_string(), &e2.port.to_string(), "list_devices", "greet"]);
    let mut client = Phased::spawn("the Python SDK 1.x client", cmd);

    let one = client.report().await;
    assert_eq!(one["protocolVersion"], "2025-11-25", "{one}");
    assert_eq!(one["read"]["devices"][0]["name"], "alpha-press", "{one}");
    assert_eq!(one["ask"], json!(["Hello, Ada!"]), "{one}");
    let ports = ports_served(&one);
    assert!(ports.contains(&(e1.port as u64)) && ports.contains(&(e2.port as u64)), "both edges served: {one}");
    // The client named itself at initialize: its calls' decisions carry that and the protocol
    // version of its session, on whichever edge served them.
    let path = "/v1/tenants/alpha/audit?domain=request&operation=tools/call";
    let page = writ_tests::eventually("both calls' decisions", Duration::from_secs(30), || async {
        let page = cluster.admin.get(&cluster.all_urls()[0], path).await.ok()?;
        (page["records"].as_array()?.len() >= 2).then_some(page)
    })
    .await;
    for chain in page["records"].as_array().unwrap().iter().map(|r| &r["authority"]) {
        assert_eq!(
            (chain["client_name"].as_str(), chain["client_version"].as_str()),
            (Some("writ-legacy-probe"), Some("1.0.7"))
        );
        assert_eq!(
            (chain["protocol_version"].as_str(), chain["principal_kind"].as_str()),
            (Some("2025-11-25"), Some("agent"))
        );
    }

    e1.kill();
    let e1b = EdgeProc::start(dir.path(), &cluster.all_urls(), Some(&canonical)).await;
    client.continue_on([e1b.port, e2.port]).await;
    let two = client.report().await;
    assert_eq!(two["sessionId"], one["sessionId"], "{two}");
    assert_eq!(two["ask"], json!(["Hello, Ada!"]), "{two}");
    assert_eq!(two["tools"].as_u64(), one["tools"].as_array().map(|t| t.len() as u64));
    assert!(ports_served(&two).contains(&(e1b.port as u64)), "{two}");
}

/// The MCP Inspector's CLI mode (its own session per command) lists and calls tools on both
/// edges.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_inspector_cli_lists_and_calls_tools_on_both_edges() {
    let (_cluster, _dir, e1, e2, token) = deployment().await;
    let cli = writ_tests::tools::dir().join("inspector/node_modules/@modelcontextprotocol/inspector/cli/build/cli.js");
    assert!(cli.exists(), "the MCP Inspector is not installed: run `make nodedeps`");
    let auth = format!("Authorization: Bearer {token}");
    for edge in [e1.url(), e2.url()] {
        let run = |args: &[&str]| {
            let mut cmd = tokio::process::Command::new(writ_tests::tools::node());
            cmd.arg(&cli).args(["--cli", &edge, "--transport", "http", "--header", &auth]).args(args);
            cmd.kill_on_drop(true).output()
        };
        let listed = tokio::time::timeout(Duration::from_secs(60), run(&["--method", "tools/list"])).await;
        let listed = listed.expect("in time").expect("inspector runs");
        assert!(listed.status.success(), "{}", String::from_utf8_lossy(&listed.stderr));
        let listed: Value = serde_json::from_slice(&listed.stdout).expect("JSON");
        let names: Vec<&str> =
            listed["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
        assert!(names.contains(&"list_devices") && names.contains(&"press"), "{names:?}");
        let called = run(&["--method", "tools/call", "--tool-name", "list_devices"]);
        let called = tokio::time::timeout(Duration::from_secs(60), called).await.expect("in time").expect("runs");
        assert!(called.status.success(), "{}", String::from_utf8_lossy(&called.stderr));
        let called: Value = serde_json::from_slice(&called.stdout).expect("JSON");
        assert_eq!(called["structuredContent"]["devices"][0]["name"], "alpha-press", "{called}");
    }
}

/// `writ admin client-config` prints what a host's configuration must contain; the printed
/// URL and header connect a real 2025-era client (the Inspector's CLI), and an unknown
/// principal is refused with its reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_config_prints_a_configuration_a_real_client_connects_with() {
    let dev = writ_tests::procs::DevProcess::start(&[]).await;
    let mcp = dev.var("WRIT_MCP_URL").to_string();
    let args = ["client-config", "--tenant", "demo", "--principal", "demo-agent", "--mcp-url", &mcp];
    let (code, out, err) = dev.cli(&[&args[..], &["--host", "cursor", "--issue-token"]].concat());
    assert_eq!(code, 0, "{err}");
    let body: String = out.lines().filter(|l| !l.starts_with('#')).collect();
    let config: Value = serde_json::from_str(&body).unwrap_or_else(|_| panic!("JSON: {out}"));
    let server = &config["mcpServers"]["writ"];
    assert_eq!(server["url"], mcp.as_str());
    let header = format!("Authorization: {}", server["headers"]["Authorization"].as_str().unwrap());

    let cli = writ_tests::tools::dir().join("inspector/node_modules/@modelcontextprotocol/inspector/cli/build/cli.js");
    let listed = tokio::process::Command::new(writ_tests::tools::node())
        .arg(&cli)
        .args(["--cli", server["url"].as_str().unwrap(), "--transport", "http", "--header", &header])
        .args(["--method", "tools/list"])
        .kill_on_drop(true)
        .output();
    let listed = tokio::time::timeout(Duration::from_secs(60), listed).await.expect("in time").expect("runs");
    assert!(listed.status.success(), "{}", String::from_utf8_lossy(&listed.stderr));
    let listed: Value = serde_json::from_slice(&listed.stdout).expect("JSON");
    assert!(listed["tools"].as_array().unwrap().iter().any(|t| t["name"] == "list_devices"), "{listed}");

    let (code, codex, err) = dev.cli(&[&args[..], &["--host", "codex"]].concat());
    assert_eq!(code, 0, "{err}");
    assert!(codex.contains(&format!("url = \"{mcp}\"")) && codex.contains("bearer_token_env_var = \"WRIT_TOKEN\""));
    let (code, _, err) =
        dev.cli(&["client-config", "--tenant", "demo", "--principal", "ghost", "--mcp-url", &mcp, "--host", "vscode"]);
    assert_ne!(code, 0);
    assert!(err.contains("PRINCIPAL_NOT_FOUND"), "{err}");
}

/// A subscribed resource (a work item) is announced on the session's GET stream when it
/// changes; after unsubscribing it no longer is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscribed_resource_is_announced_on_the_sessions_get_stream() {
    let dev = writ_tests::procs::DevProcess::start(&[]).await;
    let mcp = dev.var("WRIT_MCP_URL").to_string();
    // A principal that may read work items (the demo agent may not: it would be told nothing).
    let create = ["principal", "create", "--tenant", "demo", "watcher", "--kind", "agent", "--scope", "tools:list"];
    let (code, _, err) = dev.cli(&[&create[..], &["--scope", "resources:read", "--scope", "work:read"]].concat());
    assert_eq!(code, 0, "{err}");
    let (code, issued, err) =
        dev.cli(&["--output", "json", "token", "issue", "--tenant", "demo", "watcher", "--audience", &mcp]);
    assert_eq!(code, 0, "{err}");
    let token = serde_json::from_str::<Value>(&issued).expect("JSON")["token"].as_str().unwrap().to_string();
    for id in ["wo-1", "wo-2"] {
        let (code, _, err) = dev.cli(&[
            "work",
            "create",
            "--tenant",
            "demo",
            id,
            "--title",
            "Press job",
            "--owner",
            "line 2",
            "--action",
            "home_press",
        ]);
        assert_eq!(code, 0, "{err}");
    }
    let session = writ_tests::mcp::LegacySession::open(&mcp, &token).await;
    let subscribe =
        |method: &str, uri: &str| json!({"jsonrpc": "2.0", "id": 2, "method": method, "params": {"uri": uri}});
    let r = session.call(subscribe("resources/subscribe", "writ://work/wo-1")).await;
    assert_eq!(r["result"], json!({}));
    let stream = session.stream().await;
    assert_eq!(stream.status(), 200);
    let mut frames: Frames = Box::pin(stream.bytes_stream());
    let update = |id: &str| {
        let args = ["work", "update", "--tenant", "demo", id, "--title", "Press job, revised"];
        let (code, _, err) = dev.cli(&args);
        assert_eq!(code, 0, "{err}");
    };
    update("wo-1");
    let line = next_update(&mut frames).await;
    assert!(line.contains("writ://work/wo-1"), "{line}");
    // Unsubscribed from wo-1, subscribed to wo-2: a change of wo-1 is not announced, of wo-2 is.
    session.send(subscribe("resources/unsubscribe", "writ://work/wo-1")).await;
    session.send(subscribe("resources/subscribe", "writ://work/wo-2")).await;
    update("wo-1");
    update("wo-2");
    let line = next_update(&mut frames).await;
    assert!(line.contains("writ://work/wo-2"), "only the subscribed item: {line}");
}

type Frames = futures::stream::BoxStream<'static, reqwest::Result<axum::body::Bytes>>;

/// The next `notifications/resources/updated` line of an event stream (15 s at most).
async fn next_update(frames: &mut Frames) -> String {
    let reading = async {
        let mut seen = String::new();
        while let Some(Ok(chunk)) = futures::StreamExt::next(frames).await {
            seen.push_str(&String::from_utf8_lossy(&chunk));
            if let Some(line) = seen.lines().find(|l| l.contains("notifications/resources/updated")) {
                return line.to_string();
            }
        }
        panic!("the stream ended: {seen}")
    };
    tokio::time::timeout(Duration::from_secs(15), reading).await.expect("an update in time")
}
