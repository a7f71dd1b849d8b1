//! Trust boundaries between Writ's parts (SPEC S1, S2), through real `writ node` processes:
//! every listener speaks TLS from the cluster CA, and who may call what is decided by the role
//! the caller's certificate names, before any body is read.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{json, Value};
use writ_api::dto::{ClusterChange, Query, QueryRequest, SubmitRequest};
use writ_api::grant::Credential;
use writ_api::ledger::Command;
use writ_api::role::Role;
use writ_api::token::TenantIssuerV1;
use writ_tests::pki;
use writ_tests::procs::{writ_bin, Cluster};

/// (status, reason) of a POST of `body` to `url`: the refusal's reason, or the reason of a
/// command the ledger committed as rejected (empty when it was applied).
async fn post(http: &reqwest::Client, url: &str, body: &Value) -> (StatusCode, String) {
    let r = http.post(url).json(body).send().await.expect("request");
    let status = r.status();
    let v: Value = r.json().await.unwrap_or(Value::Null);
    let reason = v["reason"].as_str().or(v["outcome"]["Rejected"]["reason"].as_str());
    (status, reason.unwrap_or_default().to_string())
}

fn submit(command: Command) -> Value {
    serde_json::to_value(SubmitRequest::new("trust-test", command)).expect("json")
}

/// A submit of `command` with the credential an edge presents for it.
fn submit_as(command: Command, credential: Credential) -> Value {
    serde_json::to_value(SubmitRequest::acting("trust-test", command, credential)).expect("json")
}

/// The bearer credential of a token the admin API issued.
fn bearer(issued: &Value) -> Credential {
    Credential::Bearer(issued["token"].as_str().expect("token").to_string())
}

/// An open fuse of the upstream `shop` of `tenant_id`, as the edge `another-edge` records it.
fn another_edges_fuse(tenant_id: &str) -> Command {
    let fuse =
        writ_api::upstream::FuseV1 { open: true, failures: 3, reason: "x".into(), config_version: 1, changed_at_ms: 0 };
    Command::SetUpstreamFuse { tenant_id: tenant_id.into(), name: "shop".into(), edge_id: "another-edge".into(), fuse }
}

/// An executor's connection to the edge `another-edge`, as if that edge said so.
fn another_edges_presence(tenant_id: &str) -> Command {
    Command::SetExecutorPresence {
        tenant_id: tenant_id.into(),
        executor_id: "x-1".into(),
        edge_id: "another-edge".into(),
        connected: true,
    }
}

/// A start of a missing operation claimed for `claimant`.
fn start_as(claimant: &str, tenant_id: &str) -> Command {
    Command::StartAttempt {
        tenant_id: tenant_id.into(),
        operation_id: "op-missing".into(),
        executor_id: claimant.into(),
        fencing_token: 0,
        lease_ms: 1000,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_client_and_raft_route_refuses_callers_without_the_right_role() {
    let cluster = Cluster::start(3).await;
    let leader = cluster.leader(Duration::from_secs(30)).await;
    let url = cluster.nodes[leader as usize - 1].url();
    // A write through the admin API lands everywhere: nodes forward and replicate over mutual
    // TLS with their node credentials.
    assert!(cluster.admin.create_tenant(&cluster.nodes[0].url(), "secure").await.expect("create"));
    let tenant_id =
        cluster.admin.get(&url, "/v1/tenants/secure").await.expect("tenant")["id"].as_str().expect("id").to_string();

    // No credential: every /client/* and /raft/* call is refused with a reason, unread.
    let anonymous = pki::http(None);
    for path in ["/client/status", "/client/cluster", "/client/read-index", "/client/snapshot", "/client/watch?from=1"]
    {
        let r = anonymous.get(format!("{url}{path}")).send().await.expect("get");
        assert_eq!(r.status(), StatusCode::UNAUTHORIZED, "{path}");
        assert_eq!(r.json::<Value>().await.expect("body")["reason"], "PEER_UNAUTHENTICATED", "{path}");
    }
    let lease = Command::LeaseRequestQuota { tenant_id: tenant_id.clone(), principal_id: "p".into(), wanted: 1 };
    for path in [
        "/client/submit",
        "/client/query",
        "/client/cluster",
        "/raft/append",
        "/raft/vote",
        "/raft/pre-vote",
        "/raft/snapshot",
    ] {
        let (status, reason) = post(&anonymous, &format!("{url}{path}"), &submit(lease.clone())).await;
        assert_eq!((status, reason.as_str()), (StatusCode::UNAUTHORIZED, "PEER_UNAUTHENTICATED"), "{path}");
    }
    // Probes stay open (read-only).
    assert!(anonymous.get(format!("{url}/healthz")).send().await.expect("healthz").status().is_success());

    // An edge identity: only what edges need.
    let edge = pki::http(Some((Role::Edge, "intruder")));
    let issuer = TenantIssuerV1 {
        issuer: "https://attacker.example".into(),
        audience: "urn:writ:mcp".into(),
        jwks: "{\"keys\":[]}".into(),
    };
    let refused = [
        ("/client/submit", submit(Command::SetTenantIssuer { tenant_id: tenant_id.clone(), issuer })),
        ("/client/submit", submit(Command::SuspendTenant { tenant_id: tenant_id.clone(), note: None })),
        (
            "/client/query",
            serde_json::to_value(QueryRequest {
                query: Query::ListTenants { after: None, limit: 10 },
                consistency: Default::default(),
            })
            .expect("json"),
        ),
        (
            "/client/cluster",
            serde_json::to_value(ClusterChange::AddLearner { node_id: 9, addr: "https://127.0.0.1:1".into() })
                .expect("json"),
        ),
        ("/raft/vote", json!({})),
        ("/raft/pre-vote", json!({})),
        ("/raft/append", json!({})),
        // It records its own upstream fuses and executor connections, and performs upstream
        // operations as itself only.
        ("/client/submit", submit(another_edges_fuse(&tenant_id))),
        ("/client/submit", submit(another_edges_presence(&tenant_id))),
        ("/client/submit", submit(start_as("edge:another-edge", &tenant_id))),
    ];
    for (path, body) in &refused {
        let (status, reason) = post(&edge, &format!("{url}{path}"), body).await;
        assert_eq!((status, reason.as_str()), (StatusCode::FORBIDDEN, "PEER_FORBIDDEN"), "{path} {body}");
    }
    // What an edge needs passes the role gate (and meets the ledger's own rules).
    let (status, reason) = post(&edge, &format!("{url}/client/submit"), &submit(lease)).await;
    assert_ne!(reason, "PEER_FORBIDDEN", "{status}");
    let (status, reason) =
        post(&edge, &format!("{url}/client/submit"), &submit(start_as("edge:intruder", &tenant_id))).await;
    assert_eq!((status, reason.as_str()), (StatusCode::OK, "OPERATION_NOT_FOUND"), "as itself: the ledger decides");
    assert!(edge.get(format!("{url}/client/status")).send().await.expect("status").status().is_success());
    // An edge may submit operations, but the ledger re-derives their authority: a token it
    // never issued, or an input the action's schema forbids, is refused; nothing is recorded.
    let admin = &cluster.admin;
    let catalog = json!({"actions": [
        {"id": "move_press", "title": "Move the press", "risk": "low", "execution": "operation",
         "device_class": "press.v1", "cost_units": 1,
         "input_schema": {"type": "object", "required": ["position_mm"],
                          "properties": {"position_mm": {"type": "number", "maximum": 500}}}},
        {"id": "slam_press", "title": "Slam the press", "risk": "high", "execution": "operation",
         "device_class": "press.v1", "cost_units": 1, "input_schema": {"type": "object"}}
    ]});
    admin.post_ok(&url, "/v1/tenants/secure/catalogs", catalog).await;
    let agent = admin
        .post_ok(&url, "/v1/tenants/secure/principals", json!({"name": "agent", "kind": "agent", "preset": "full"}))
        .await;
    admin.post_ok(&url, "/v1/tenants/secure/sites", json!({"name": "plant"})).await;
    let device = admin
        .post_ok(
            &url,
            "/v1/tenants/secure/devices",
            json!({"name": "press-1", "site": "plant", "device_class": "press.v1"}),
        )
        .await;
    let issued = admin.post_ok(&url, "/v1/tenants/secure/tokens", json!({"principal": "agent"})).await;
    let spec_of = |authority: &str, input: Value| writ_api::operation::OperationSpecV1 {
        operation_id: format!("op-{authority}-{}", input["position_mm"]),
        principal_id: agent["id"].as_str().expect("principal id").into(),
        authority_ref: authority.into(),
        action: "move_press".into(),
        payload_hash: writ_api::operation::payload_hash(&input),
        input: input.to_string(),
        idempotency_key: format!("k-{authority}-{}", input["position_mm"]),
        deadline_ms: writ_client::now_ms() + 600_000,
        cost_units: 0,
        cost_ceiling: None,
        device_id: device["id"].as_str().map(str::to_string),
        work_ref: None,
        preconditions: Default::default(),
        trace_id: "trust-test".into(),
        input_requests: Default::default(),
    };
    let operation = |authority: &str, input: Value| {
        let command = Command::SubmitOperation { tenant_id: tenant_id.clone(), spec: spec_of(authority, input) };
        submit_as(command, bearer(&issued))
    };
    let jti = issued["jti"].as_str().expect("jti");
    // A bare reference names no authority: the token id alone, without the token, is refused
    // by the node before anything reaches the log.
    let bare = submit(Command::SubmitOperation {
        tenant_id: tenant_id.clone(),
        spec: spec_of(jti, json!({"position_mm": 11})),
    });
    let (status, reason) = post(&edge, &format!("{url}/client/submit"), &bare).await;
    assert_eq!((status, reason.as_str()), (StatusCode::UNAUTHORIZED, "AUTH_TOKEN_MISSING"), "a bare token id");
    let cases = [
        ("jti-it-never-issued", json!({"position_mm": 10}), "AUTH_TOKEN_INVALID"),
        (jti, json!({"position_mm": 9000}), "INPUT_INVALID"),
    ];
    for (authority, input, want) in cases {
        let (status, reason) = post(&edge, &format!("{url}/client/submit"), &operation(authority, input)).await;
        assert_eq!(reason, want, "{status}");
    }
    let (status, reason) =
        post(&edge, &format!("{url}/client/submit"), &operation(jti, json!({"position_mm": 10}))).await;
    assert!(
        status.is_success() && reason.is_empty(),
        "a valid operation under a real token is taken: {status} {reason}"
    );
    // A high-risk call is recorded only verified: with a proposal its principal recorded for
    // exactly that call (used once), never on an edge's word.
    let slam = |position: i64| {
        let mut spec = spec_of(jti, json!({"position_mm": position}));
        spec.action = "slam_press".into();
        spec
    };
    let submit_with = |proposal: Option<&str>, spec: writ_api::operation::OperationSpecV1| {
        let tenant_id = tenant_id.clone();
        let command = match proposal {
            Some(p) => Command::SubmitProposed { tenant_id, proposal_id: p.into(), spec },
            None => Command::SubmitOperation { tenant_id, spec },
        };
        submit_as(command, bearer(&issued))
    };
    let client_submit = format!("{url}/client/submit");
    let (_, reason) = post(&edge, &client_submit, &submit_with(None, slam(1))).await;
    assert_eq!(reason, "VERIFY_REQUIRED", "no proposal, no confirmation");
    let (_, reason) = post(&edge, &client_submit, &submit_with(Some("prop-made-up"), slam(1))).await;
    assert_eq!(reason, "PROPOSAL_INVALID", "a proposal the ledger never recorded");
    let mut proposal = slam(1);
    proposal.operation_id = "prop-slam".into();
    let propose =
        submit_as(Command::ProposeOperation { tenant_id: tenant_id.clone(), spec: proposal }, bearer(&issued));
    let (status, reason) = post(&edge, &client_submit, &propose).await;
    assert!(status.is_success() && reason.is_empty(), "{status} {reason}");
    let (_, reason) = post(&edge, &client_submit, &submit_with(Some("prop-slam"), slam(2))).await;
    assert_eq!(reason, "PROPOSAL_INVALID", "the proposal names another input");
    // A principal's acts on that operation (cancel here; answer, observe and decide alike): an
    // edge may submit them only wrapped in the authority it admitted them under, and the ledger
    // re-derives it — another principal's token, or one without the act's scope, is refused.
    let op_id = format!("op-{jti}-10");
    let cancel = Command::CancelOperation {
        tenant_id: tenant_id.clone(),
        operation_id: op_id.clone(),
        by_principal_id: agent["id"].as_str().expect("principal id").into(),
    };
    let (status, reason) = post(&edge, &format!("{url}/client/submit"), &submit(cancel.clone())).await;
    assert_eq!((status, reason.as_str()), (StatusCode::FORBIDDEN, "PEER_FORBIDDEN"), "a bare act");
    admin
        .post_ok(&url, "/v1/tenants/secure/principals", json!({"name": "other", "kind": "agent", "preset": "full"}))
        .await;
    let others = admin.post_ok(&url, "/v1/tenants/secure/tokens", json!({"principal": "other"})).await;
    let reader =
        admin.post_ok(&url, "/v1/tenants/secure/tokens", json!({"principal": "agent", "scopes": ["ops:read"]})).await;
    let on_behalf = |authority: &Value| {
        let authority_ref = authority["jti"].as_str().expect("jti").to_string();
        submit_as(Command::OnBehalfOf { authority_ref, command: Box::new(cancel.clone()) }, bearer(authority))
    };
    for (authority, want) in [(&others, "AUTH_TOKEN_INVALID"), (&reader, "APP_SCOPE_FORBIDDEN")] {
        let (status, reason) = post(&edge, &format!("{url}/client/submit"), &on_behalf(authority)).await;
        assert_eq!(reason, want, "{status} {authority}");
    }
    let path = format!("/v1/tenants/secure/operations/{op_id}");
    let op = admin.get(&url, &path).await.expect("operation");
    assert_eq!(op["state"], "reserved", "the refused acts changed nothing: {op}");
    let (status, reason) = post(&edge, &format!("{url}/client/submit"), &on_behalf(&issued)).await;
    assert!(status.is_success() && reason.is_empty(), "the requester's own token cancels: {status} {reason}");
    let op = admin.get(&url, &path).await.expect("operation");
    assert_eq!(op["state"], "cancelled", "{op}");

    // An operator credential is for the admin API, not the client API.
    let operator = pki::http(Some((Role::Operator, "alice")));
    let r = operator.get(format!("{url}/client/status")).send().await.expect("status");
    assert_eq!(r.status(), StatusCode::FORBIDDEN);

    // The tenant was not changed by any of it.
    let tenant = cluster.admin.get(&url, "/v1/tenants/secure").await.expect("tenant");
    assert_eq!(tenant["state"], "active", "{tenant}");
    let issuers = cluster.admin.get(&url, "/v1/tenants/secure/issuers").await.expect("issuers");
    assert!(!issuers.to_string().contains("attacker"), "{issuers}");
    let status = cluster.admin.get(&url, "/v1/cluster/status").await.expect("cluster");
    assert!(!status.to_string().contains("127.0.0.1:1\""), "{status}");

    // A certificate from another CA is refused at the handshake.
    let foreign = tempfile::tempdir().expect("dir");
    writ_node::pki::init(foreign.path()).expect("foreign CA");
    let id = writ_api::role::Identity::new(Role::Node, "1").expect("id");
    let creds = writ_node::pki::issue(foreign.path(), &id, &["127.0.0.1".into()], 1).expect("foreign cert");
    let forged = writ_client::ClientTls::with_identity(&pki::ca_file(), &creds.cert, &creds.key).expect("tls");
    let forged = forged.apply(reqwest::Client::builder().no_proxy()).build().expect("client");
    assert!(forged.get(format!("{url}/client/status")).send().await.is_err(), "a foreign certificate was accepted");
}

#[test]
fn writ_pki_creates_a_ca_and_role_credentials() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().expect("dir");
    let pki_dir = dir.path().join("pki");
    let run = |args: &[&str]| std::process::Command::new(writ_bin()).args(args).output().expect("writ pki");
    let d = pki_dir.to_str().expect("utf-8");
    assert!(run(&["pki", "init", "--dir", d]).status.success());
    let again = run(&["pki", "init", "--dir", d]);
    assert_eq!(again.status.code(), Some(1), "a CA is never replaced");
    let issued = run(&["pki", "issue", "edge", "e1", "--dir", d, "--host", "127.0.0.1"]);
    assert!(issued.status.success(), "{}", String::from_utf8_lossy(&issued.stderr));
    let pem = std::fs::read(pki_dir.join("edge-e1.pem")).expect("cert");
    let der = pem_der(&pem);
    assert_eq!(writ_node::pki::identity_of(&der).expect("identity").to_string(), "edge:e1");
    let mode = std::fs::metadata(pki_dir.join("edge-e1-key.pem")).expect("key").permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    for bad in [["pki", "issue", "root", "x"], ["pki", "issue", "node", "zero"]] {
        let out = run(&[bad[0], bad[1], bad[2], bad[3], "--dir", d]);
        assert_eq!(out.status.code(), Some(2), "{bad:?}");
    }
}

fn pem_der(pem: &[u8]) -> Vec<u8> {
    use base64::Engine;
    let text = String::from_utf8_lossy(pem);
    let body: String = text.lines().filter(|l| !l.starts_with("-----")).collect();
    base64::engine::general_purpose::STANDARD.decode(body).expect("base64")
}

/// SPEC S4 at the edge of `writ dev`: oversized transport headers are refused before anything
/// is read, client text never becomes a metric label, and a huge `preconditions` map is
/// INPUT_INVALID instead of ledger state.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_input_at_the_edge_is_bounded() {
    let dev = writ_tests::procs::DevProcess::start(&[]).await;
    let (mcp, token) = (dev.var("WRIT_MCP_URL").to_string(), dev.var("WRIT_DEMO_TOKEN").to_string());
    let http = reqwest::Client::builder().no_proxy().build().expect("client");
    let metrics_url = mcp.replace("/mcp", "/metrics");
    let metrics = || async { http.get(&metrics_url).send().await.expect("metrics").text().await.expect("text") };
    let series = |text: &str| text.lines().filter(|l| l.starts_with("writ_edge_requests_total{")).count();
    // A page of another site reaching the edge through a rebound DNS name reads no metrics.
    let rebound = http.get(&metrics_url).header("Host", "rebind.example").send().await.expect("metrics");
    assert_eq!(rebound.status(), StatusCode::FORBIDDEN);
    // One ordinary request first, so that the request series exist.
    let (status, _, _) = writ_tests::mcp::rpc(&mcp, Some(&token), "tools/list", json!({})).await;
    assert_eq!(status, 200);
    let before = metrics().await;

    let send = |method: String| {
        let body =
            json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": writ_tests::mcp::meta()}});
        http.post(&mcp)
            .bearer_auth(&token)
            .header("MCP-Protocol-Version", "2026-07-28")
            .header("Mcp-Method", method)
            .json(&body)
            .send()
    };
    // 5 KB: over MCP_HEADER_BYTES_MAX, refused by the edge with its reason; 400 KB likewise 431.
    let r = send("m".repeat(5 * 1024)).await.expect("send");
    assert_eq!(r.status(), StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE);
    assert_eq!(r.json::<Value>().await.expect("json")["error"]["data"]["reason"], "HEADER_TOO_LARGE");
    if let Ok(r) = send("m".repeat(400 * 1024)).await {
        assert_eq!(r.status(), StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE);
    }
    // Under the limit but unknown: refused as a mismatch, counted under `other`, never verbatim.
    for i in 0..20 {
        let junk = format!("junk-{i}-{}", "x".repeat(3000));
        let r = send(junk).await.expect("send");
        assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    }
    let after = metrics().await;
    assert!(!after.contains("junk-"), "client text became a metric label");
    assert!(series(&after) <= series(&before) + 2, "request series grew with client text:\n{after}");

    // 900 KB of preconditions: INPUT_INVALID, nothing recorded.
    let args = json!({"action": "home_press", "input": {}, "device": "demo-press", "idempotency_key": "huge",
                      "preconditions": {"position": "p".repeat(900 * 1024)}});
    let (status, _, answer) =
        writ_tests::mcp::rpc(&mcp, Some(&token), "tools/call", json!({"name": "operation.execute", "arguments": args}))
            .await;
    let reason = answer["result"]["_meta"]["writ/reason"].as_str().or(answer["error"]["data"]["reason"].as_str());
    assert_eq!(reason, Some("INPUT_INVALID"), "{status} {answer}");
    let read = json!({"name": "operation.readback", "arguments": {"idempotency_key": "huge"}});
    let (_, _, found) = writ_tests::mcp::rpc(&mcp, Some(&token), "tools/call", read).await;
    assert_eq!(found["result"]["_meta"]["writ/reason"], "OPERATION_NOT_FOUND", "{found}");

    // A 900 KB operation id is refused unread; no refusal echoes it into the log or the audit.
    let huge_id = "o".repeat(900 * 1024);
    let capture = json!({"name": "observation.capture",
                         "arguments": {"operation_id": huge_id, "content_hash": "0".repeat(64), "summary": "x"}});
    let (_, _, captured) = writ_tests::mcp::rpc(&mcp, Some(&token), "tools/call", capture).await;
    let text = captured.to_string();
    assert!(text.contains("INPUT_INVALID") && text.len() < 4096, "{}", &text[..text.len().min(300)]);
    let admin =
        writ_tests::procs::Admin::trusting(std::path::Path::new(dev.var("WRIT_CA_FILE")), dev.var("WRIT_ADMIN_TOKEN"));
    let page = admin.get(dev.var("WRIT_ADMIN_URL"), "/v1/tenants/demo/audit?limit=1000").await.expect("audit");
    let longest = page["records"].as_array().expect("records").iter().map(|r| r.to_string().len()).max();
    assert!(longest.is_some_and(|n| n < 8 * 1024), "an audit record of {longest:?} bytes");

    // subscriptions/listen: a principal holds at most LISTEN_STREAMS_PER_PRINCIPAL open streams
    // on an edge; one more is QUOTA_EXCEEDED until one of them ends.
    let listen = |id: usize| {
        let params = json!({"notifications": {"toolsListChanged": true}, "_meta": writ_tests::mcp::meta()});
        http.post(&mcp)
            .bearer_auth(&token)
            .header("MCP-Protocol-Version", "2026-07-28")
            .header("Mcp-Method", "subscriptions/listen")
            .json(&json!({"jsonrpc": "2.0", "id": format!("sub-{id}"), "method": "subscriptions/listen", "params": params}))
            .send()
    };
    let max = writ_mcp_edge::caps::LISTEN_STREAMS_PER_PRINCIPAL;
    let mut open = Vec::new();
    for i in 0..max {
        let r = listen(i).await.expect("listen");
        assert_eq!(r.headers()["content-type"], "text/event-stream", "stream {i}");
        open.push(r);
    }
    let over = listen(max).await.expect("listen");
    assert_eq!(over.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(over.json::<Value>().await.expect("json")["error"]["data"]["reason"], "QUOTA_EXCEEDED");
    drop(open.pop());
    writ_tests::eventually("a slot freed by a closed stream", std::time::Duration::from_secs(60), || async {
        let r = listen(max + 1).await.ok()?;
        (r.headers().get("content-type")? == "text/event-stream").then_some(())
    })
    .await;
}

/// SPEC S4 at the executor endpoint: a flood of handshakes with self-signed certificates that
/// claim a tenant is counted, never written to that tenant's trail one record per handshake.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_self_signed_handshake_flood_leaves_the_tenants_audit_alone() {
    const HANDSHAKES: usize = 10_000;
    let dev = writ_tests::procs::DevProcess::start(&[]).await;
    let admin =
        writ_tests::procs::Admin::trusting(std::path::Path::new(dev.var("WRIT_CA_FILE")), dev.var("WRIT_ADMIN_TOKEN"));
    let admin_url = dev.var("WRIT_ADMIN_URL");
    let tenant_id =
        admin.get(admin_url, "/v1/tenants/demo").await.expect("tenant")["id"].as_str().expect("id").to_string();
    let audit = || async {
        let page = admin.get(admin_url, "/v1/tenants/demo/audit?limit=1000").await.expect("audit");
        page["records"].as_array().cloned().unwrap_or_default()
    };
    let before = audit().await;
    // The executor endpoint's address: the demo executor's configuration names it.
    let config = std::fs::read_to_string(dev.data_dir().join("executor/executor.toml")).expect("executor config");
    let endpoint = config
        .lines()
        .find_map(|l| l.split('"').find(|p| p.starts_with("https://")))
        .expect("an executor endpoint")
        .to_string();
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).expect("key");
    let mut params = rcgen::CertificateParams::default();
    let san = format!("urn:writ:executor:{tenant_id}:s-x:x-flood");
    params.subject_alt_names = vec![rcgen::SanType::URI(san.try_into().expect("uri"))];
    let cert = params.self_signed(&key).expect("self-signed");
    let identity =
        reqwest::Identity::from_pem(format!("{}{}", cert.pem(), key.serialize_pem()).as_bytes()).expect("id");
    let flood = reqwest::Client::builder()
        .no_proxy()
        .identity(identity)
        .danger_accept_invalid_certs(true)
        .pool_max_idle_per_host(0)
        .build()
        .expect("client");
    let next = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let workers: Vec<_> = (0..16)
        .map(|_| {
            let (flood, next, url) = (flood.clone(), next.clone(), format!("{endpoint}/executor/v1/dispatch"));
            tokio::spawn(async move {
                let mut refused = 0;
                while next.fetch_add(1, std::sync::atomic::Ordering::Relaxed) < HANDSHAKES {
                    match flood.get(&url).send().await {
                        Ok(r) => assert!(!r.status().is_success(), "a self-signed certificate was served"),
                        Err(_) => refused += 1,
                    }
                }
                refused
            })
        })
        .collect();
    let mut refused = 0;
    for w in workers {
        refused += w.await.expect("worker");
    }
    assert_eq!(refused, HANDSHAKES, "every handshake is refused");
    // Every refusal is counted...
    let metrics_url = dev.var("WRIT_MCP_URL").replace("/mcp", "/metrics");
    let plain = reqwest::Client::builder().no_proxy().build().expect("client");
    let metrics = plain.get(&metrics_url).send().await.expect("metrics").text().await.expect("text");
    let counted: f64 = metrics
        .lines()
        .find(|l| l.starts_with("writ_edge_executor_refused_total{stage=\"tls\"}"))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .expect("the TLS refusal counter");
    assert!(counted >= HANDSHAKES as f64, "{counted}");
    // ...and the trail kept every record it had, with at most the window's one aggregate added.
    let after = audit().await;
    assert!(after.len() <= before.len() + 1, "{} records before, {} after", before.len(), after.len());
    assert_eq!(after.first().map(|r| r["seq"].clone()), before.first().map(|r| r["seq"].clone()));
}

/// SPEC S4: a principal hammering a refusal (here its request quota) is audited as the first
/// denial, committed before its response, and then counted: 1,000 refusals add a handful of
/// Raft entries, not 1,000.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_quota_refusals_cost_a_handful_of_raft_entries() {
    let dev = writ_tests::procs::DevProcess::start(&[]).await;
    let (mcp, token) = (dev.var("WRIT_MCP_URL").to_string(), dev.var("WRIT_DEMO_TOKEN").to_string());
    let (code, out, err) =
        dev.cli(&["principal", "quotas", "--tenant", "demo", "demo-agent", "--requests-per-minute", "1"]);
    assert_eq!(code, 0, "{out}{err}");
    let ca = writ_client::ClientTls::trusting(std::path::Path::new(dev.var("WRIT_CA_FILE"))).expect("ca");
    let node = ca.apply(reqwest::Client::builder().no_proxy()).build().expect("client");
    let metrics_url = format!("{}/metrics", dev.var("WRIT_ADMIN_URL"));
    let log_index = || async {
        let text = node.get(&metrics_url).send().await.expect("metrics").text().await.expect("text");
        text.lines()
            .find(|l| l.starts_with("writ_raft_last_log_index"))
            .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .expect("writ_raft_last_log_index") as u64
    };
    // Use up the minute's one request, then wait until the edge refuses.
    writ_tests::eventually("the quota to refuse", std::time::Duration::from_secs(20), || async {
        let (status, _, _) = writ_tests::mcp::rpc(&mcp, Some(&token), "tools/list", json!({})).await;
        (status == 429).then_some(())
    })
    .await;
    let before = log_index().await;
    let started = std::time::Instant::now();
    let http = reqwest::Client::builder().no_proxy().build().expect("client");
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": writ_tests::mcp::meta()}});
    let mut refused = 0;
    // Each with its own `Mcp-Method` text: denials are told apart by what the body names.
    for i in 0..1000 {
        let r = http
            .post(&mcp)
            .bearer_auth(&token)
            .header("MCP-Protocol-Version", "2026-07-28")
            .header("Mcp-Method", format!("tools/list-{i}"))
            .json(&body)
            .send()
            .await
            .expect("edge");
        if r.status() == StatusCode::TOO_MANY_REQUESTS {
            assert_eq!(r.json::<Value>().await.expect("json")["error"]["data"]["reason"], "QUOTA_EXCEEDED");
            refused += 1;
        }
    }
    let after = log_index().await;
    // The quota allows one request per (calendar) minute, and each denial window or quota
    // window may add its first denial, its aggregate and a lease: a bound by elapsed time,
    // not by the number of requests.
    let elapsed = started.elapsed().as_secs();
    let (minutes, windows) = (elapsed / 60 + 2, elapsed / writ_mcp_edge::audit::DENIAL_WINDOW.as_secs() + 1);
    assert!(refused >= 1000 - minutes as usize, "{refused} of 1000 refused in {elapsed} s");
    let entries = after - before;
    println!("1,000 refusals in {elapsed} s took {entries} Raft entries");
    assert!(entries <= 2 * windows + 2 * minutes, "1,000 refusals in {elapsed} s took {entries} Raft entries");
}

/// SPEC S3 through `writ dev` and MCP: a critical action waits for an approval its own agent
/// cannot give; another principal holding ops:approve gives it, and the operation runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_critical_call_runs_only_with_another_principals_approval() {
    let dev = writ_tests::procs::DevProcess::start(&[]).await;
    let admin =
        writ_tests::procs::Admin::trusting(std::path::Path::new(dev.var("WRIT_CA_FILE")), dev.var("WRIT_ADMIN_TOKEN"));
    let (url, mcp, agent) = (dev.var("WRIT_ADMIN_URL"), dev.var("WRIT_MCP_URL"), dev.var("WRIT_DEMO_TOKEN"));
    let catalog = json!({"actions": [
        {"id": "crush", "title": "Crush", "description": "Crushes with the press.", "input_schema": {"type": "object"},
         "risk": "critical", "execution": "operation", "device_class": "press.v1", "cost_units": 1}]});
    admin.post_ok(url, "/v1/tenants/demo/catalogs", catalog).await;
    let scopes = json!(["ops:approve", "tools:list", "ops:read"]);
    admin
        .post_ok(url, "/v1/tenants/demo/principals", json!({"name": "approver", "kind": "human", "scopes": scopes}))
        .await;
    let issued = admin.post_ok(url, "/v1/tenants/demo/tokens", json!({"principal": "approver", "audience": mcp})).await;
    let approver = issued["token"].as_str().expect("token").to_string();
    let tool = |token: String, name: &'static str, arguments: Value| {
        let mcp = mcp.to_string();
        async move {
            let (_, _, r) =
                writ_tests::mcp::rpc(&mcp, Some(&token), "tools/call", json!({"name": name, "arguments": arguments}))
                    .await;
            // A tool result, or the JSON-RPC error (e.g. an unknown tool).
            if r["result"].is_null() {
                r
            } else {
                r["result"].clone()
            }
        }
    };
    // Wait until the edge serves the new catalog; the call is verified (proposed) first.
    let call = json!({"action": "crush", "input": {}, "device": "demo-press"});
    let proposed = writ_tests::eventually("the critical call proposed", std::time::Duration::from_secs(20), || async {
        let r = tool(agent.to_string(), "operation.propose", call.clone()).await;
        r["structuredContent"]["proposal"].is_string().then_some(r)
    })
    .await;
    let mut args = call.clone();
    args["idempotency_key"] = json!("crush-1");
    args["deadline_s"] = json!(600);
    let unverified = tool(agent.to_string(), "operation.execute", args.clone()).await;
    assert_eq!(unverified["_meta"]["writ/reason"], "VERIFY_REQUIRED", "{unverified}");
    args["proposal"] = proposed["structuredContent"]["proposal"].clone();
    let called = tool(agent.to_string(), "operation.execute", args.clone()).await;
    assert_eq!(called["structuredContent"]["state"], "proposed", "{called}");
    let id = called["structuredContent"]["operation_id"].as_str().expect("id").to_string();
    // The agent has no approve tool, and cannot approve anyway.
    let own = tool(agent.to_string(), "operation.approve", json!({"operation_id": id, "approve": true})).await;
    assert_eq!(own["error"]["data"]["reason"], "TOOL_NOT_FOUND", "{own}");
    // The approver approves exactly this call; the demo executor then performs it.
    let approved = tool(approver, "operation.approve", json!({"operation_id": id, "approve": true})).await;
    assert_ne!(approved["isError"], true, "{approved}");
    let read = json!({"operation_id": id});
    let done =
        writ_tests::eventually("the approved operation's effect", std::time::Duration::from_secs(30), || async {
            let r = tool(agent.to_string(), "operation.readback", read.clone()).await;
            (r["structuredContent"]["state"] == "effect_reported").then_some(r)
        })
        .await;
    assert_eq!(done["structuredContent"]["attempts"], 1, "{done}");
}

/// A revoked role certificate (SPEC S1) is refused by a node from the moment it applied the
/// revocation — also on a connection opened before — while another certificate of the same role
/// keeps working; revoking it again is a clear conflict.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_role_certificate_is_refused_even_on_an_open_connection() {
    let (node, _dir) = writ_tests::procs::single_node().await;
    let url = node.url.clone();
    let doomed = pki::http(Some((Role::Edge, "doomed")));
    let bystander = pki::http(Some((Role::Edge, "bystander")));
    let read_index = |client: &reqwest::Client| {
        let request = client.get(format!("{url}/client/read-index"));
        async move { request.send().await.expect("read-index") }
    };
    // Opens the connection the client keeps for the next request.
    assert_eq!(read_index(&doomed).await.status(), StatusCode::OK);

    let cert = pki::credential(Role::Edge, "doomed").cert;
    let args = ["credential", "revoke-cert", "--cert", cert.to_str().expect("path"), "-o", "json"];
    let (code, out, err) = writ_tests::procs::run_cli(&url, &args);
    assert_eq!(code, 0, "{out}{err}");
    let shown: Value = serde_json::from_str(&out).expect("json");
    assert_eq!(shown["revoked_certificates"][0]["identity"], "edge:doomed", "{shown}");
    let refused = writ_tests::eventually("the revoked certificate refused", Duration::from_secs(10), || async {
        let r = read_index(&doomed).await;
        (r.status() == StatusCode::FORBIDDEN).then_some(r)
    })
    .await;
    assert_eq!(refused.json::<Value>().await.expect("body")["reason"], "CREDENTIAL_RETIRED");
    assert_eq!(read_index(&bystander).await.status(), StatusCode::OK, "another edge certificate still works");
    let (code, out, err) = writ_tests::procs::run_cli(&url, &args[..4]);
    assert_ne!(code, 0, "revoked twice: {out}");
    assert!(err.contains("CREDENTIAL_RETIRED"), "{err}");
    node.shutdown().await;
}

/// Every byte of every file under `dir` (the node's data: its RocksDB column families and
/// write-ahead log, its snapshots), and whether `needle` is among them.
fn files_contain(dir: &std::path::Path, needle: &[u8]) -> bool {
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).expect("read dir").flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if std::fs::read(&path).is_ok_and(|b| b.windows(needle.len()).any(|w| w == needle)) {
                return true;
            }
        }
    }
    false
}

/// SPEC S3 through a real `writ node`: an edge certificate is no authority. Every act it
/// submits for a principal is verified by the node against the credential sent with it; a bare
/// reference (the anonymous issuer, a tenant issuer's URL, a token id), another principal's
/// token, or a tenant token without the act's scope in its claim is refused before anything
/// reaches the log — and the tokens that were accepted appear in no file of the node's data.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edge_certificate_acts_only_with_the_principals_credential() {
    use base64::Engine;
    let cluster = Cluster::start(1).await;
    let url = cluster.nodes[0].url();
    let admin = &cluster.admin;
    for tenant in ["alpha", "beta"] {
        assert!(admin.create_tenant(&url, tenant).await.expect("tenant"));
    }
    let catalog = json!({"actions": [
        {"id": "home", "title": "Home", "risk": "low", "execution": "operation", "cost_units": 1,
         "input_schema": {"type": "object"}}]});
    admin.post_ok(&url, "/v1/tenants/alpha/catalogs", catalog).await;
    let full = |name: &str| json!({"name": name, "kind": "agent", "preset": "full"});
    let agent = admin.post_ok(&url, "/v1/tenants/alpha/principals", full("agent")).await;
    let agent_id = agent["id"].as_str().expect("id").to_string();
    admin.post_ok(&url, "/v1/tenants/beta/principals", full("approver")).await;
    let alpha = admin.get(&url, "/v1/tenants/alpha").await.expect("alpha")["id"].as_str().expect("id").to_string();
    let beta = admin.get(&url, "/v1/tenants/beta").await.expect("beta")["id"].as_str().expect("id").to_string();
    let approver = admin.get(&url, "/v1/tenants/beta/principals/approver").await.expect("approver");
    let approver_token = admin.post_ok(&url, "/v1/tenants/beta/tokens", json!({"principal": "approver"})).await;
    let agent_token = admin.post_ok(&url, "/v1/tenants/alpha/tokens", json!({"principal": "agent"})).await;
    // A tenant issuer of alpha whose token asks only for tools:list.
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ED25519).expect("key");
    let x = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(key.public_key_raw());
    let jwks = json!({"keys": [{"kty": "OKP", "crv": "Ed25519", "x": x, "kid": "idp-1", "alg": "EdDSA"}]});
    let issuer = json!({"issuer": "https://idp.example", "audience": "writ-prod", "jwks": jwks.to_string()});
    let (code, body) =
        admin.send(reqwest::Method::PUT, &format!("{url}/v1/tenants/alpha/issuers"), Some(issuer)).await.unwrap();
    assert_eq!(code, 200, "{body}");
    let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::EdDSA);
    header.kid = Some("idp-1".into());
    let exp = writ_client::now_ms() / 1000 + 300;
    let claims = json!({"iss": "https://idp.example", "sub": "agent", "aud": "writ-prod", "exp": exp,
                        "jti": "idp-token-1", "scope": "tools:list"});
    let signing = jsonwebtoken::EncodingKey::from_ed_pem(key.serialize_pem().as_bytes()).expect("pem");
    let narrow = Credential::Bearer(jsonwebtoken::encode(&header, &claims, &signing).expect("sign"));

    let spec = |authority_ref: &str, n: u32| writ_api::operation::OperationSpecV1 {
        operation_id: format!("op-forged-{n}"),
        principal_id: agent_id.clone(),
        authority_ref: authority_ref.into(),
        action: "home".into(),
        payload_hash: writ_api::operation::payload_hash(&json!({})),
        input: "{}".into(),
        idempotency_key: format!("k-{n}"),
        deadline_ms: writ_client::now_ms() + 600_000,
        cost_units: 1,
        cost_ceiling: None,
        device_id: None,
        work_ref: None,
        preconditions: Default::default(),
        trace_id: "forged".into(),
        input_requests: Default::default(),
    };
    let submit_op = |r: &str, n| Command::SubmitOperation { tenant_id: alpha.clone(), spec: spec(r, n) };
    let propose_op = |r: &str, n| Command::ProposeOperation { tenant_id: alpha.clone(), spec: spec(r, n) };
    let agent_jti = agent_token["jti"].as_str().expect("jti");
    // Tenant beta's approver "approving" with alpha's agent token, and cancelling as alpha's
    // agent under the narrow issuer token (tools:list, no ops:cancel).
    let approve = Command::OnBehalfOf {
        authority_ref: approver_token["jti"].as_str().expect("jti").into(),
        command: Box::new(Command::AnswerInputs {
            tenant_id: beta.clone(),
            operation_id: "op-critical".into(),
            by_principal_id: approver["id"].as_str().expect("id").into(),
            answers: [(writ_api::operation::APPROVAL_REQUEST.to_string(), json!({"action": "accept"}).to_string())]
                .into(),
        }),
    };
    let cancel = Command::OnBehalfOf {
        authority_ref: "https://idp.example".into(),
        command: Box::new(Command::CancelOperation {
            tenant_id: alpha.clone(),
            operation_id: "op-forged-1".into(),
            by_principal_id: agent_id.clone(),
        }),
    };
    let anonymous = writ_api::auth::ANONYMOUS_ISSUER;
    let forged = [
        ("anonymous, no credential", submit(submit_op(anonymous, 1)), "AUTH_TOKEN_MISSING"),
        ("anonymous credential", submit_as(submit_op(anonymous, 2), Credential::Anonymous), "AUTH_TOKEN_MISSING"),
        ("issuer URL, no credential", submit(propose_op("https://idp.example", 3)), "AUTH_TOKEN_MISSING"),
        ("token id, no token", submit(submit_op(agent_jti, 4)), "AUTH_TOKEN_MISSING"),
        (
            "a made-up token",
            submit_as(submit_op(agent_jti, 5), Credential::Bearer("e30.e30.sig".into())),
            "AUTH_TOKEN_INVALID",
        ),
        ("another tenant's approval", submit_as(approve, bearer(&agent_token)), "AUTH_TOKEN_INVALID"),
        ("the token's scope claim", submit_as(cancel, narrow.clone()), "APP_SCOPE_FORBIDDEN"),
        ("an issuer token as a token id", submit_as(submit_op(agent_jti, 6), narrow), "AUTH_TOKEN_INVALID"),
    ];
    let edge = pki::http(Some((Role::Edge, "intruder")));
    let client_submit = format!("{url}/client/submit");
    for (what, body, want) in &forged {
        let (status, reason) = post(&edge, &client_submit, body).await;
        assert_eq!(reason, *want, "{what}: {status}");
        assert!(status.is_client_error(), "{what}: refused before the log, not committed as rejected: {status}");
    }
    // A trace id is bounded too, whoever sends it.
    let mut long_trace = submit_as(submit_op(agent_jti, 8), bearer(&agent_token));
    long_trace["trace_id"] = json!("t".repeat(100 * 1024));
    let (status, reason) = post(&edge, &client_submit, &long_trace).await;
    assert_eq!((status, reason.as_str()), (StatusCode::BAD_REQUEST, "INPUT_INVALID"));
    // Wrapping a command the edge may not send bare changes nothing: another edge's fuse.
    let fuse = another_edges_fuse(&alpha);
    let decision = writ_api::audit::RequestDecisionV1 {
        trace_id: "t".into(),
        principal_id: agent_id.clone(),
        token_id: None,
        parent_token_id: None,
        method: "tools/call".into(),
        name: None,
        outcome: "allowed".into(),
        reason: None,
    };
    let wrapped = Command::Audited { decision: decision.clone(), command: Box::new(fuse) };
    let (status, reason) = post(&edge, &client_submit, &submit(wrapped)).await;
    assert_eq!((status, reason.as_str()), (StatusCode::FORBIDDEN, "PEER_FORBIDDEN"));
    // Audit records only for the tenant's own principals.
    let ghost = writ_api::audit::RequestDecisionV1 { principal_id: "ghost".into(), ..decision.clone() };
    let (_, reason) = post(
        &edge,
        &client_submit,
        &submit(Command::RecordDecisions { tenant_id: beta.clone(), decisions: vec![ghost] }),
    )
    .await;
    assert_eq!(reason, "PRINCIPAL_NOT_FOUND");
    // A decision about a real principal only with a credential of that principal: an edge
    // records decisions about requests it served, not about whoever it likes.
    let about_agent = || Command::RecordDecisions { tenant_id: alpha.clone(), decisions: vec![decision.clone()] };
    let vouched = |voucher: Option<Credential>| {
        let mut req = SubmitRequest::new("trust-test", about_agent());
        req.vouchers = voucher.into_iter().collect();
        serde_json::to_value(req).expect("json")
    };
    assert_eq!(post(&edge, &client_submit, &vouched(None)).await.1, "AUTH_TOKEN_MISSING", "no voucher");
    let (_, reason) = post(&edge, &client_submit, &vouched(Some(bearer(&approver_token)))).await;
    assert_eq!(reason, "AUTH_TOKEN_MISSING", "another principal's token");
    let (status, reason) = post(&edge, &client_submit, &vouched(Some(bearer(&agent_token)))).await;
    assert!(status.is_success() && reason.is_empty(), "the agent's own token: {status} {reason}");
    let operations = admin.get(&url, "/v1/tenants/alpha/operations").await.expect("operations");
    assert!(!operations.to_string().contains("op-forged"), "a forged act was recorded: {operations}");

    // Anonymous access is what the tenant records, for one edge and one principal.
    let anonymous_path = format!("{url}/v1/tenants/alpha/anonymous/intruder");
    let (code, shown) =
        admin.send(reqwest::Method::PUT, &anonymous_path, Some(json!({"principal": "agent"}))).await.unwrap();
    assert_eq!(code, 200, "{shown}");
    assert_eq!(shown["tenant"]["anonymous"], json!({"intruder": agent_id}), "{shown}");
    let as_anonymous = |n| submit_as(submit_op(anonymous, n), Credential::Anonymous);
    let (status, reason) = post(&edge, &client_submit, &as_anonymous(10)).await;
    assert!(status.is_success() && reason.is_empty(), "the recorded edge acts without a token: {status} {reason}");
    let other_edge = pki::http(Some((Role::Edge, "bystander")));
    assert_eq!(post(&other_edge, &client_submit, &as_anonymous(11)).await.1, "AUTH_TOKEN_MISSING", "another edge");
    let approve_anonymously = Command::OnBehalfOf {
        authority_ref: anonymous.into(),
        command: Box::new(Command::AnswerInputs {
            tenant_id: beta.clone(),
            operation_id: "op-critical".into(),
            by_principal_id: approver["id"].as_str().expect("id").into(),
            answers: Default::default(),
        }),
    };
    let (_, reason) = post(&edge, &client_submit, &submit_as(approve_anonymously, Credential::Anonymous)).await;
    assert_eq!(reason, "AUTH_TOKEN_MISSING", "another tenant's principal");
    let (code, shown) = admin.send(reqwest::Method::DELETE, &anonymous_path, None).await.unwrap();
    assert_eq!((code, &shown["tenant"]["anonymous"]), (200, &json!({})), "{shown}");
    assert_eq!(post(&edge, &client_submit, &as_anonymous(12)).await.1, "AUTH_TOKEN_MISSING", "taken away");

    // With the principal's own token the same act is taken, recorded with the node's grant.
    let (status, reason) = post(&edge, &client_submit, &submit_as(submit_op(agent_jti, 7), bearer(&agent_token))).await;
    assert!(status.is_success() && reason.is_empty(), "{status} {reason}");
    let op = admin.get(&url, "/v1/tenants/alpha/operations/op-forged-7").await.expect("the operation");
    assert_eq!(op["spec"]["principal_id"], agent_id.as_str(), "{op}");

    // Tokens are secrets: none of those the node verified is in its log, state, a snapshot or
    // a backup; the accepted act is (the search reads the files the log is in).
    admin.post_ok(&url, "/v1/cluster/snapshot", json!({})).await;
    // In the node's directory, beside its data: the token search below reads both.
    let backup = cluster.nodes[0].dir.join("ledger.backup");
    let out = backup.to_str().expect("utf-8").to_string();
    let (code, said, err) =
        tokio::task::spawn_blocking(move || writ_tests::procs::run_cli(&url, &["backup", "--out", &out]))
            .await
            .expect("backup");
    assert_eq!(code, 0, "{said}{err}");
    let data = cluster.nodes[0].dir.join("data");
    assert!(files_contain(&data, b"op-forged-7"), "the search does not see the log");
    assert!(backup.exists(), "no backup written");
    for token in [&agent_token, &approver_token] {
        let secret = token["token"].as_str().expect("token");
        let signature = secret.rsplit('.').next().expect("signature");
        assert!(!files_contain(&cluster.nodes[0].dir, signature.as_bytes()), "a token is stored");
    }
    // And what the node stores is readable by no other local user.
    assert_eq!(modes_open_to_others(&data), Vec::<String>::new(), "data files other users can read");
}

/// Every file or directory under `dir` whose mode lets group or others in.
fn modes_open_to_others(dir: &std::path::Path) -> Vec<String> {
    use std::os::unix::fs::PermissionsExt;
    let mut open = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).expect("read dir").flatten() {
            let path = entry.path();
            let mode = std::fs::symlink_metadata(&path).expect("metadata").permissions().mode();
            if mode & 0o077 != 0 {
                open.push(format!("{} {:o}", path.display(), mode & 0o777));
            }
            if path.is_dir() {
                stack.push(path);
            }
        }
    }
    open
}
