//! Issue 5, must-shows 1, 2 and 6 on a cluster: three `writ node` processes, two `writ edge`
//! processes (each with its mutual-TLS executor endpoint) and a `writ executor run` process that
//! may use either edge. Agents speak MCP to both edges.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use writ_tests::eventually;
use writ_tests::mcp::try_rpc;
use writ_tests::procs::{Admin, Cluster, EdgeProc, ExecutorProc};

struct Setup {
    cluster: Cluster,
    e1: EdgeProc,
    e2: EdgeProc,
    executor: ExecutorProc,
    token: String,
    _dir: tempfile::TempDir,
}

/// Tenant `ops` with one device action and one device-less action, an agent, and an executor
/// (simulated device, attempt counter) that may stream from either edge.
async fn setup() -> Setup {
    let cluster = Cluster::start(3).await;
    let urls = cluster.all_urls();
    let dir = tempfile::tempdir().unwrap();
    let e1 = EdgeProc::start(dir.path(), &urls, None).await;
    let e2 = EdgeProc::start(dir.path(), &urls, Some(&e1.url())).await;
    let admin = Admin::new();
    let url = &urls[0];
    admin.post_ok(url, "/v1/tenants", json!({"name": "ops"})).await;
    let catalog = json!({"actions": [
        {"id": "home_press", "title": "Home the press", "input_schema": {"type": "object"}, "risk": "low",
         "execution": "operation", "device_class": "press.v1", "cost_units": 1},
        {"id": "log_entry", "title": "Write a log entry", "input_schema": {"type": "object"}, "risk": "low",
         "execution": "operation", "cost_units": 1}
    ]});
    admin.post_ok(url, "/v1/tenants/ops/catalogs", catalog).await;
    admin.post_ok(url, "/v1/tenants/ops/principals", json!({"name": "agent", "kind": "agent", "preset": "full"})).await;
    admin.post_ok(url, "/v1/tenants/ops/sites", json!({"name": "plant"})).await;
    let device = json!({"name": "press-1", "site": "plant", "device_class": "press.v1"});
    admin.post_ok(url, "/v1/tenants/ops/devices", device).await;
    let issued =
        admin.post_ok(url, "/v1/tenants/ops/tokens", json!({"principal": "agent", "audience": e1.url()})).await;
    let token = issued["token"].as_str().unwrap().to_string();
    let mut executor = ExecutorProc::enroll(
        &admin.client(url),
        "ops",
        "plant",
        &["press-1"],
        &e2.url(),
        &dir.path().join("executor"),
        "kind = \"simulated\"\nattempts_file = \"attempts.log\"",
    )
    .await;
    executor.set_handler(
        "kind = \"simulated\"\nattempts_file = \"attempts.log\"",
        Some(&[e1.executor_url(), e2.executor_url()]),
    );
    executor.start();
    Setup { cluster, e1, e2, executor, token, _dir: dir }
}

/// `operation.execute` through `edge`; Err for transport failures and non-200 answers.
async fn execute(edge: &str, token: &str, args: &Value, timeout: Duration) -> Result<Value, String> {
    let params = json!({"name": "operation.execute", "arguments": args});
    match try_rpc(edge, Some(token), "tools/call", params, timeout).await? {
        (200, _, body) if body["result"].is_object() => Ok(body["result"].clone()),
        (status, _, body) => Err(format!("HTTP {status}: {body}")),
    }
}

fn reason(result: &Value) -> &str {
    result["_meta"]["writ/reason"].as_str().unwrap_or_default()
}

async fn operation(admin: &Admin, urls: &[String], id: &str) -> Option<Value> {
    for url in urls {
        if let Ok(op) = admin.get(url, &format!("/v1/tenants/ops/operations/{id}")).await {
            return Some(op);
        }
    }
    None
}

/// Must-shows 1 and 2: the same execute 20 times across both edges — concurrently, and again
/// after client-side timeouts — is one operation and one attempt; the same key with another
/// payload is refused on either edge and attempts nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_across_edges_are_one_operation_and_one_attempt() {
    let s = setup().await;
    let edges = [s.e1.url(), s.e2.url()];
    let args =
        json!({"action": "home_press", "input": {"speed": "slow"}, "device": "press-1", "idempotency_key": "retry-1"});
    let mut calls = Vec::new();
    for i in 0..12 {
        let (edge, token, args) = (edges[i % 2].clone(), s.token.clone(), args.clone());
        calls.push(tokio::spawn(async move { execute(&edge, &token, &args, Duration::from_secs(30)).await }));
    }
    // Clients that gave up early (a 1 ms timeout: the request may or may not have landed)...
    for i in 0..4 {
        let _ = execute(&edges[i % 2], &s.token, &args, Duration::from_millis(1)).await;
    }
    // ...and retried afterwards.
    let mut answers = Vec::new();
    for i in 0..4 {
        answers.push(execute(&edges[i % 2], &s.token, &args, Duration::from_secs(30)).await.expect("retry answered"));
    }
    for c in calls {
        answers.push(c.await.unwrap().expect("concurrent call answered"));
    }
    let ids: BTreeSet<&str> = answers
        .iter()
        .map(|a| a["structuredContent"]["operation_id"].as_str().unwrap_or_else(|| panic!("{a}")))
        .collect();
    assert_eq!(ids.len(), 1, "one operation for one key: {ids:?}");
    let id = ids.into_iter().next().unwrap().to_string();
    let admin = Admin::new();
    let urls = s.cluster.all_urls();
    eventually("the effect report", Duration::from_secs(20), || async {
        let op = operation(&admin, &urls, &id).await?;
        (op["state"] == "effect_reported").then_some(())
    })
    .await;
    assert_eq!(s.executor.attempts(), vec![id.clone()], "the device was moved once");

    // Must-show 2: same key, changed payload → refused on both edges; nothing attempted.
    let changed = json!({"action": "home_press", "input": {"speed": "normal"}, "device": "press-1", "idempotency_key": "retry-1"});
    for edge in &edges {
        let refused = execute(edge, &s.token, &changed, Duration::from_secs(30)).await.unwrap();
        assert_eq!(reason(&refused), "IDEMPOTENCY_KEY_REUSED", "{refused}");
    }
    let replay = execute(&edges[1], &s.token, &args, Duration::from_secs(30)).await.unwrap();
    assert_eq!(replay["structuredContent"]["operation_id"], id.as_str(), "the original stands: {replay}");
    // A barrier instead of a pause: a fresh operation for the same device through the same
    // executor. Dispatches reach the executor in order, so had the refused or replayed requests
    // caused an attempt, it would stand before the barrier's in the attempt log.
    let barrier =
        json!({"action": "home_press", "input": {"speed": "slow"}, "device": "press-1", "idempotency_key": "barrier"});
    let barrier = execute(&edges[0], &s.token, &barrier, Duration::from_secs(30)).await.unwrap();
    let barrier = barrier["structuredContent"]["operation_id"].as_str().expect("barrier operation").to_string();
    eventually("the barrier's effect", Duration::from_secs(20), || async {
        let op = operation(&admin, &urls, &barrier).await?;
        (op["state"] == "effect_reported").then_some(())
    })
    .await;
    assert_eq!(s.executor.attempts(), vec![id.clone(), barrier], "no attempt for a refused or replayed request");

    // What edges load (`GET /client/snapshot`, the projection) holds live operations only: not
    // this finished one, its idempotency key or the audit index; the nodes' own record keeps
    // all of it (and answered the replay above).
    let on_node = operation(&admin, &urls, &id).await.expect("the operation on a node");
    assert!(on_node["spec"]["input"].as_str().is_some_and(|i| i.contains("slow")), "{on_node}");
    assert_eq!(on_node["state"], "effect_reported", "{on_node}");
    let resp = admin.client(&urls[0]).send(reqwest::Method::GET, "/client/snapshot", None).await.expect("snapshot");
    let state = writ_api::state::LedgerState::decode_versioned(&resp.bytes().await.expect("bytes")).expect("state");
    let tenant = &state.tenant_names["ops"];
    assert!(!state.operations.get(tenant).is_some_and(|m| m.contains_key(&id)), "a finished operation was sent");
    assert!(state.idempotency.is_empty() && state.compacted.is_empty() && state.audit.is_empty());
    assert!(state.evidence.is_empty(), "evidence records are read from the ledger");
    // Of the cold rows it carries the token records alone (an edge verifies tokens with them).
    let kind = |k: &Vec<u8>| writ_api::cold::kind_prefix_of(k).and_then(|p| p.last().copied());
    let only_tokens = state.cold.pending_rows().keys().all(|k| kind(k).is_some_and(|k| b"tyd".contains(&k)));
    let sums = state.cold.tenants.values();
    let no_operations = sums.clone().all(|c| c.operations + c.bindings + c.keys + c.evidence == 0);
    assert!(only_tokens && no_operations, "no cold row of operations is sent");
    assert!(state.cold.tenants[tenant].tokens > 0, "the tenant's token records are sent");
    // Nor does either edge's replica keep them once they finished (once it applied the end).
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    for edge in &edges {
        eventually("the edge's replica to hold no operation", Duration::from_secs(10), || async {
            let metrics = http.get(edge.replace("/mcp", "/metrics")).send().await.ok()?.text().await.ok()?;
            metrics.lines().any(|l| l == "writ_verifier_operations 0").then_some(())
        })
        .await;
    }
}

/// Must-show 6: `kill -9` of the leader and of one edge during a stream of executes: every
/// acknowledged operation is in the ledger and settles truthfully (its effect after one attempt,
/// or — its start confirmed only after the lease ran out — no attempt at all), none is attempted
/// twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_the_leader_and_an_edge_loses_nothing_and_repeats_nothing() {
    let mut s = setup().await;
    let edges = [s.e1.url(), s.e2.url()];
    let acked: Arc<Mutex<BTreeMap<String, String>>> = Arc::default();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut agents = Vec::new();
    for agent in 0..4 {
        let (edges, token, acked, stop) = (edges.clone(), s.token.clone(), acked.clone(), stop.clone());
        agents.push(tokio::spawn(async move {
            let mut n = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                n += 1;
                let key = format!("a{agent}-{n}");
                let args = json!({"action": "log_entry", "input": {"n": n}, "idempotency_key": key});
                // Retry the same key (on the other edge) until it is acknowledged.
                let started = Instant::now();
                let mut i = agent + n;
                while started.elapsed() < Duration::from_secs(30) {
                    match execute(&edges[i % 2], &token, &args, Duration::from_secs(10)).await {
                        Ok(r) if r["structuredContent"]["operation_id"].is_string() => {
                            let id = r["structuredContent"]["operation_id"].as_str().unwrap().to_string();
                            acked.lock().unwrap().insert(key.clone(), id);
                            break;
                        }
                        _ => {
                            i += 1;
                            tokio::time::sleep(Duration::from_millis(100)).await;
                        }
                    }
                }
            }
        }));
    }
    let acknowledged = || acked.lock().unwrap().len();
    eventually("executes being acknowledged", Duration::from_secs(30), || async {
        (acknowledged() >= 5).then_some(())
    })
    .await;
    let before = acknowledged();
    let leader = s.cluster.leader(Duration::from_secs(10)).await;
    s.cluster.node_mut(leader).kill();
    s.e1.kill();
    // Load goes on until the survivors have acknowledged a good number of executes.
    eventually("executes acknowledged after the kills", Duration::from_secs(60), || async {
        (acknowledged() >= before + 20).then_some(())
    })
    .await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for a in agents {
        a.await.unwrap();
    }
    let acked = acked.lock().unwrap().clone();
    assert!(acked.len() > before, "executes kept being acknowledged after the kills ({before} → {})", acked.len());
    let admin = Admin::new();
    let urls = s.cluster.running_urls();
    let ids: BTreeSet<String> = acked.values().cloned().collect();
    assert_eq!(ids.len(), acked.len(), "distinct keys are distinct operations");
    let deadline = Instant::now() + Duration::from_secs(60);
    // Settled truthfully: the effect reported after one attempt — or, when the start's answer
    // came only after its lease ran out (the leader was being replaced), failed with the
    // executor's report that nothing was attempted (it then never touches the device).
    let mut not_attempted = BTreeSet::new();
    loop {
        let mut pending = Vec::new();
        for id in &ids {
            match operation(&admin, &urls, id).await {
                Some(op) if op["state"] == "effect_reported" => assert_eq!(op["attempts"], 1, "{op}"),
                Some(op) if op["state"] == "failed" && op.to_string().contains("not attempted") => {
                    not_attempted.insert(id.clone());
                }
                other => pending
                    .push(other.map_or_else(|| format!("{id}: not found"), |op| format!("{id}: {}", op["state"]))),
            }
        }
        if pending.is_empty() {
            break;
        }
        if Instant::now() >= deadline {
            // The executor's own account of those operations, for the failure report.
            let log = s.executor.log();
            let lines: Vec<&str> = log
                .lines()
                .filter(|l| pending.iter().any(|p| l.contains(&p[..p.find(':').unwrap_or(p.len())])))
                .collect();
            panic!("acknowledged operations without their effect: {pending:?}\nexecutor log:\n{}", lines.join("\n"));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let attempts = s.executor.attempts();
    let distinct: BTreeSet<&String> = attempts.iter().collect();
    assert_eq!(distinct.len(), attempts.len(), "no operation attempted twice");
    for id in &ids {
        let attempted = distinct.contains(id);
        assert!(attempted != not_attempted.contains(id), "{id}: attempted {attempted}, reported as not attempted");
    }
    eprintln!(
        "acknowledged {} operations ({} before the kills); {} attempts; {} not attempted (start confirmed too late)",
        acked.len(),
        before,
        attempts.len(),
        not_attempted.len()
    );
}
