//! Real `writ node` processes on loopback: failover under `kill -9`, restart catch-up, and a
//! wiped node rebuilt through a snapshot after the log was purged.

use std::collections::BTreeSet;
use std::time::Duration;

use writ_tests::eventually;
use writ_tests::procs::{node_log_stats, restore_node, run_cli, seed_node, Cluster};

/// Creates tenants `{prefix}-{i}` for i in range with `concurrency` workers, spread over
/// `urls`; returns the acknowledged names. Retries a name whose outcome was uncertain.
async fn create_many(
    c: &Cluster,
    urls: &[String],
    prefix: &str,
    range: std::ops::Range<usize>,
    concurrency: usize,
) -> Vec<String> {
    let names: Vec<String> = range.map(|i| format!("{prefix}-{i}")).collect();
    let chunks: Vec<Vec<String>> = names.chunks(names.len().div_ceil(concurrency).max(1)).map(|c| c.to_vec()).collect();
    let mut tasks = Vec::new();
    for (w, chunk) in chunks.into_iter().enumerate() {
        let admin = c.admin.clone();
        let urls = urls.to_vec();
        tasks.push(tokio::spawn(async move {
            let mut acked = Vec::new();
            for (i, name) in chunk.into_iter().enumerate() {
                let mut attempt = 0;
                loop {
                    let url = &urls[(w + i + attempt) % urls.len()];
                    match admin.create_tenant(url, &name).await {
                        // Acknowledged now, or by an earlier attempt whose reply was lost.
                        Ok(_) => {
                            acked.push(name.clone());
                            break;
                        }
                        Err(e) => {
                            attempt += 1;
                            assert!(attempt < 100, "create {name} kept failing: {e}");
                            tokio::time::sleep(Duration::from_millis(100)).await;
                        }
                    }
                }
            }
            acked
        }));
    }
    let mut acked = Vec::new();
    for t in tasks {
        acked.extend(t.await.expect("worker"));
    }
    acked
}

async fn assert_all_readable(c: &Cluster, url: &str, acked: &[String]) {
    let names: BTreeSet<String> = c.admin.all_tenant_names(url).await.expect("list tenants").into_iter().collect();
    let missing: Vec<&String> = acked.iter().filter(|n| !names.contains(*n)).collect();
    assert!(missing.is_empty(), "acknowledged creates missing after failover: {missing:?}");
}

/// Leader-aware routing (issue 17): a client whose node list has the leader last learns from
/// the `forwarded` answers — two followers forward, then every submit goes straight to the
/// leader.
async fn settles_on_the_leader(c: &Cluster, leader: u64) {
    use writ_client::Ledger;
    let leader_url = c.nodes.iter().find(|n| n.id == leader).map(|n| n.url()).expect("leader");
    let mut urls: Vec<String> = c.all_urls().into_iter().filter(|u| *u != leader_url).collect();
    urls.push(leader_url);
    let ledger = writ_client::HttpLedger::with_http(
        urls,
        writ_client::NodeHttp::with_tls(Some(&writ_tests::pki::client_tls(writ_api::role::Role::Node, "9"))),
    );
    let mut forwarded = Vec::new();
    for i in 0..6 {
        let command = writ_api::ledger::Command::CreateTenant {
            tenant_id: format!("t-routed-{i}"),
            name: format!("routed-{i}"),
            display_name: None,
        };
        let r = ledger.submit(writ_api::dto::SubmitRequest::new(format!("routed-{i}"), command)).await;
        forwarded.push(r.expect("routed submit").forwarded);
    }
    assert_eq!(forwarded, [true, true, false, false, false, false], "submits settle on the leader");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_kill_failover_restart_and_convergence() {
    let mut c = Cluster::start(3).await;
    let urls = c.all_urls();
    let mut acked = create_many(&c, &urls, "before", 0..500, 16).await;
    assert_eq!(acked.len(), 500);

    let old = c.leader(Duration::from_secs(10)).await;
    settles_on_the_leader(&c, old).await;
    // Pre-vote over the nodes' own Raft network: while the leader lives, a follower asked to
    // back a higher term refuses and nothing moves (openraft's default network would have
    // granted it unasked, and one follower's missed heartbeats made a real election).
    let term = |url: String| {
        let admin = c.admin.clone();
        async move { admin.get(&url, "/client/status").await.expect("status")["term"].as_u64().expect("term") }
    };
    let before = term(urls[0].clone()).await;
    for n in c.nodes.iter().filter(|n| n.id != old) {
        let candidate = c.nodes.iter().map(|n| n.id).find(|id| *id != old && *id != n.id).expect("another follower");
        assert!(!pre_vote(candidate, n.id, &n.url(), before + 1).await, "node {} granted a pre-vote", n.id);
    }
    for url in &urls {
        assert_eq!(term(url.clone()).await, before, "{url}: the term moved");
        // The state digest (an encoding of the whole state) only for who asks for it.
        let brief = c.admin.get(url, "/client/status?digest=false").await.expect("status");
        assert_eq!(brief["state_digest"], "", "{url}");
        let full = c.admin.get(url, "/client/status").await.expect("status");
        assert_eq!(full["state_digest"].as_str().map(str::len), Some(64), "{url}");
    }
    c.node_mut(old).kill();
    let new = c.leader(Duration::from_secs(20)).await;
    assert_ne!(new, old, "a surviving node must take over");

    let survivors = c.running_urls();
    acked.extend(create_many(&c, &survivors, "after", 0..200, 8).await);
    assert_eq!(acked.len(), 700);
    assert_all_readable(&c, &survivors[0], &acked).await;

    c.node_mut(old).start(false);
    // Converged: every node at the same applied index with the same state digest (the creates
    // may share entries, batched by the leader, so the index says nothing of their number).
    let (_, digest) = c.converged(Duration::from_secs(60)).await;
    assert_eq!(digest.len(), 64);
    // The restarted node serves every acknowledged create too.
    let restarted = c.nodes.iter().find(|n| n.id == old).map(|n| n.url()).expect("node");
    assert_all_readable(&c, &restarted, &acked).await;
}

/// Asks node `to` for a pre-vote for `term` as `candidate`, over the nodes' Raft network with
/// the candidate's node certificate: whether it would grant it.
async fn pre_vote(candidate: u64, to: u64, url: &str, term: u64) -> bool {
    use openraft::network::{RPCOption, RaftNetworkFactory, RaftNetworkV2};
    let http = writ_tests::pki::http(Some((writ_api::role::Role::Node, &candidate.to_string())));
    let mut network = writ_node::network::HttpRaftNetwork::new(candidate, http, 1 << 20);
    let mut peer = network.new_client(to, &openraft::BasicNode::new(url)).await;
    let vote = openraft::Vote::new(term, candidate);
    let rpc = openraft::raft::VoteRequest::new(vote, None);
    peer.pre_vote(rpc, RPCOption::new(Duration::from_secs(5))).await.expect("pre-vote answered").vote_granted
}

/// A Raft RPC speaks for the node its certificate names: node 2's certificate asking for a
/// vote as node 3, or appending as leader 3, is refused before Raft sees it; as itself it is
/// answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_raft_rpc_speaks_only_for_the_node_its_certificate_names() {
    let c = Cluster::start(1).await;
    let url = c.nodes[0].url();
    let as_node_2 = writ_tests::pki::http(Some((writ_api::role::Role::Node, "2")));
    let post = |path: &'static str, body: Vec<u8>| {
        let request = as_node_2.post(format!("{url}{path}")).body(body);
        async move {
            let r = request.send().await.expect("sent");
            let status = r.status().as_u16();
            let text = r.text().await.unwrap_or_default();
            (status, text)
        }
    };
    let vote = |candidate: u64| {
        let rpc =
            openraft::raft::VoteRequest::<writ_raft_store::TypeConfig>::new(openraft::Vote::new(9, candidate), None);
        writ_api::encode(&rpc).expect("encode")
    };
    for path in ["/raft/vote", "/raft/pre-vote"] {
        let (status, text) = post(path, vote(3)).await;
        assert_eq!(status, 403, "{path}: {text}");
        assert!(text.contains("PEER_FORBIDDEN"), "{path}: {text}");
    }
    let append = openraft::raft::AppendEntriesRequest::<writ_raft_store::TypeConfig> {
        vote: openraft::Vote::new_committed(9, 3),
        prev_log_id: None,
        entries: Vec::new(),
        leader_commit: None,
    };
    let (status, text) = post("/raft/append", writ_api::encode(&append).expect("encode")).await;
    assert_eq!(status, 403, "append as another leader: {text}");
    // As itself, node 2's pre-vote is answered (and not granted: it is no member).
    let (status, _) = post("/raft/pre-vote", vote(2)).await;
    assert_eq!(status, 200);
}

/// A wiped node catches up through a snapshot after the log was purged (issue 18, must show 1):
/// the snapshot streams in 64 KiB chunks to nodes that accept Raft bodies of at most 256 KiB —
/// a snapshot several times larger than that cap arrives whole, checked, with equal digests
/// and audit trails. The leader's own snapshot holds its state only; the audit records travel
/// in the transfer file written from its column families.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wiped_node_catches_up_through_snapshot_after_purge() {
    const CHUNK: u64 = 64 << 10;
    const CAP: u64 = 256 << 10;
    let mut c = Cluster::start_with(3, |n| {
        n.raft_extra = format!("snapshot_chunk_bytes = {CHUNK}\nrpc_body_bytes_max = {CAP}");
    })
    .await;
    let urls = c.all_urls();
    let mut acked = create_many(&c, &urls, "early", 0..500, 4).await;
    let leader = c.leader(Duration::from_secs(10)).await;
    let victim = c.nodes.iter().map(|n| n.id).find(|id| *id != leader).expect("a follower");
    c.node_mut(victim).kill();
    c.node_mut(victim).wipe();
    // The operator procedure for a lost disk: take the member out, then re-add it as a
    // learner and promote it once it has caught up (see docs/design/storage.md, "Recovery").
    let leader_url = c.nodes.iter().find(|n| n.id == leader).map(|n| n.url()).expect("leader");
    let others: Vec<u64> = c.nodes.iter().map(|n| n.id).filter(|id| *id != victim).collect();
    c.admin.post_ok(&leader_url, "/v1/cluster/membership", serde_json::json!({"voters": others})).await;

    let survivors = c.running_urls();
    acked.extend(create_many(&c, &survivors, "late", 0..500, 4).await);
    c.admin.post_ok(&leader_url, "/v1/cluster/snapshot", serde_json::json!({})).await;
    let purged = c.admin.post_ok(&leader_url, "/v1/cluster/purge", serde_json::json!({})).await;
    assert!(purged["purged_index"].as_u64().unwrap_or(0) > 0, "log was not purged: {purged}");
    let leader_node = c.nodes.iter().find(|n| n.id == leader).expect("leader");
    let built = newest_snapshot_file(leader_node, "snap");
    assert_eq!(
        writ_raft_store::snapshot::contents(&built).expect("snapshot"),
        writ_raft_store::snapshot::Contents::StateOnly
    );

    c.node_mut(victim).start(false);
    let victim_url = c.nodes.iter().find(|n| n.id == victim).map(|n| n.url()).expect("victim");
    writ_tests::eventually("wiped node listening", Duration::from_secs(20), || async {
        c.admin.get(&victim_url, "/healthz").await.ok().map(|_| ())
    })
    .await;
    let learner = serde_json::json!({"node_id": victim, "addr": victim_url});
    c.admin.post_ok(&leader_url, "/v1/cluster/learners", learner).await;
    let all: Vec<u64> = c.nodes.iter().map(|n| n.id).collect();
    c.admin.post_ok(&leader_url, "/v1/cluster/membership", serde_json::json!({"voters": all})).await;
    c.converged(Duration::from_secs(60)).await;
    let status = c.admin.get(&victim_url, "/client/status").await.expect("status");
    assert!(status["snapshot_index"].as_u64().is_some(), "wiped node did not install a snapshot: {status}");
    let chunks = metric(&c, &victim_url, "writ_snapshot_chunks_received_total").await;
    let sent = metric(&c, &leader_url, "writ_snapshot_bytes_sent_total").await;
    let leader_node = c.nodes.iter().find(|n| n.id == leader).expect("leader");
    let transfer = newest_snapshot_file(leader_node, "xfer");
    let transfer_bytes = std::fs::metadata(&transfer).expect("transfer file").len();
    assert!(sent >= transfer_bytes, "{sent} bytes sent: the transfer file ({transfer_bytes}) went whole");
    assert!(transfer_bytes > 2 * CAP, "the snapshot sent ({transfer_bytes} bytes) exceeds the body cap twice over");
    assert!(chunks >= transfer_bytes / CHUNK, "{chunks} chunks for {transfer_bytes} bytes");
    let own = std::fs::metadata(&built).expect("snapshot").len();
    assert!(own < transfer_bytes, "the leader's own snapshot ({own} bytes) holds no audit; the transfer does");
    eprintln!("wiped node: a snapshot of {transfer_bytes} bytes ({own} without audit) arrived in {chunks} chunks (body cap {CAP})");
    assert_all_readable(&c, &victim_url, &acked).await;
    // The snapshot carried the audit trail: the wiped node lists the same records.
    // What followers (edges) load carries no audit index: it does not grow with audit retention.
    let resp =
        c.admin.client(&victim_url).send(reqwest::Method::GET, "/client/snapshot", None).await.expect("snapshot");
    let state = writ_api::state::LedgerState::decode_versioned(&resp.bytes().await.expect("bytes")).expect("state");
    assert!(state.audit.is_empty() && state.tenants.len() >= 1000, "{} tenants", state.tenants.len());
    for tenant in ["early-0", "late-499"] {
        let path = format!("/v1/tenants/{tenant}/audit");
        let on_victim = c.admin.get(&victim_url, &path).await.expect("audit on the wiped node");
        let on_leader = c.admin.get(&leader_url, &path).await.expect("audit on the leader");
        assert_eq!(on_victim, on_leader);
        assert_eq!(on_victim["records"][0]["operation"], "tenant_created", "{on_victim}");
    }
}

/// A follower behind by more than one Raft body catches up: openraft hands the network up to
/// 300 entries per append whatever their size, and the leader sends as many as fit in the
/// peers' body limit (`writ_raft_appends_split_total`) instead of one append the follower
/// refuses — before, a follower that missed more than the limit never caught up without a
/// snapshot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_behind_by_more_than_one_raft_body_catches_up_in_appends_that_fit() {
    const CAP: u64 = 16 << 10;
    let mut c = Cluster::start_with(3, |n| {
        n.raft_extra = format!("snapshot_chunk_bytes = 4096\nrpc_body_bytes_max = {CAP}");
    })
    .await;
    let leader = c.leader(Duration::from_secs(10)).await;
    let victim = c.nodes.iter().map(|n| n.id).find(|id| *id != leader).expect("a follower");
    c.node_mut(victim).kill();
    let survivors = c.running_urls();
    let acked = create_many(&c, &survivors, "behind", 0..300, 8).await;
    assert_eq!(acked.len(), 300);

    c.node_mut(victim).start(false);
    c.converged(Duration::from_secs(60)).await;
    let victim_url = c.nodes.iter().find(|n| n.id == victim).map(|n| n.url()).expect("victim");
    assert_all_readable(&c, &victim_url, &acked).await;
    let split = metric_sum(&c, "writ_raft_appends_split_total").await;
    assert!(split > 0, "no append was split: the catch-up fitted in one body of {CAP} bytes, so this shows nothing");
}

/// Issue 18's version gate through real nodes: a member advertising an older ledger version (as
/// a node not yet upgraded would) holds the cluster to it — a newer command is refused before
/// it is proposed, naming the node, while older commands go on and every node applies them —
/// and once the node is upgraded the command goes through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_on_an_older_ledger_version_gates_newer_commands() {
    let mut c = Cluster::start(3).await;
    let url = c.nodes[0].url();
    c.admin.post_ok(&url, "/v1/tenants", serde_json::json!({"name": "gated"})).await;
    let work = |id: &str| serde_json::json!({"id": id, "title": "t", "owner": "o", "scope": {"actions": ["a"]}});
    assert_eq!(
        c.admin.post(&url, "/v1/tenants/gated/work", work("wo-0")).await.unwrap().0,
        201,
        "all on the newest version"
    );

    c.node_mut(3).kill();
    c.node_mut(3).raft_extra = "ledger_version_max = 1".into();
    c.node_mut(3).start(false);
    let version = eventually("node 3 to advertise version 1", Duration::from_secs(30), || async {
        let (code, out, _) = run_cli(&url, &["cluster", "version", "-o", "json"]);
        let v: serde_json::Value = serde_json::from_str(&out).ok()?;
        (code == 0 && v["nodes"]["3"] == 1).then_some(v)
    })
    .await;
    let newest = u64::from(writ_api::ledger::LEDGER_VERSION);
    assert_eq!((version["cluster"].as_u64(), version["nodes"]["1"].as_u64()), (Some(1), Some(newest)), "{version}");
    let mut n = 0;
    let refused = eventually("the gate to refuse a version-2 command", Duration::from_secs(40), || {
        n += 1;
        let (admin, url, body) = (c.admin.clone(), url.clone(), work(&format!("wo-{n}")));
        async move {
            let (code, body) = admin.post(&url, "/v1/tenants/gated/work", body).await.ok()?;
            (code == 409).then_some(body)
        }
    })
    .await;
    assert_eq!(refused["reason"], "LEDGER_VERSION_GATED", "{refused}");
    assert!(refused["message"].as_str().unwrap().contains("3 (version 1)"), "{refused}");
    c.admin.post_ok(&url, "/v1/tenants", serde_json::json!({"name": "still-version-1"})).await;
    // Concurrent writes while node 3 is on version 1: the leader proposes no batch entry (an
    // older build would stop at one it cannot decode), and all of them converge.
    let urls = c.running_urls();
    let before = batched_commands(&c).await;
    let acked = create_many(&c, &urls, "v1", 0..120, 16).await;
    assert_eq!(batched_commands(&c).await, before, "a batch was proposed to a version-1 member");
    c.converged(Duration::from_secs(30)).await;
    assert_all_readable(&c, &c.nodes[2].url(), &acked).await;

    // Upgraded: the same command goes through, and node 3 applies it.
    c.node_mut(3).kill();
    c.node_mut(3).raft_extra = String::new();
    c.node_mut(3).start(false);
    eventually("the upgraded cluster to take version-2 commands", Duration::from_secs(40), || {
        let (admin, url) = (c.admin.clone(), url.clone());
        async move { (admin.post(&url, "/v1/tenants/gated/work", work("wo-up")).await.ok()?.0 == 201).then_some(()) }
    })
    .await;
    // Now concurrent writes share entries (issue 17's batching), and every member applies them.
    let urls = c.running_urls();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let mut acked = Vec::new();
    let before = batched_commands(&c).await;
    for round in 0.. {
        acked.extend(create_many(&c, &urls, &format!("v6-{round}"), 0..64, 32).await);
        if batched_commands(&c).await > before {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "no batch entry after {round} rounds of concurrent writes");
    }
    c.converged(Duration::from_secs(30)).await;
    for n in &c.nodes {
        assert_all_readable(&c, &n.url(), &acked).await;
    }
}

/// The ledger version in force through real nodes: while a member runs an older build (one
/// advertising version 15) the leader raises nothing and records are chained as before; once
/// every member runs this build the leader puts its version in force, every node applies it,
/// and the audit trail lists the records from before and after the raise alike. The older
/// member is node 1, which founds the cluster: every membership the cluster passes through
/// while it forms holds it, so none of them may raise the version.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_leader_puts_in_force_the_newest_version_every_member_runs() {
    let mut c = Cluster::start_with(3, |n| {
        if n.id == 1 {
            n.raft_extra = "ledger_version_max = 15".into();
        }
    })
    .await;
    let url = c.nodes[0].url();
    let version = || {
        let (code, out, _) = run_cli(&url, &["cluster", "version", "-o", "json"]);
        let v: serde_json::Value = serde_json::from_str(&out).ok()?;
        (code == 0).then_some(v)
    };
    eventually("node 1 to advertise version 15", Duration::from_secs(30), || async {
        version().filter(|v| v["nodes"]["1"] == 15)
    })
    .await;
    let agent = |name: &str| serde_json::json!({"name": name, "kind": "agent", "preset": "readOnly"});
    c.admin.post_ok(&url, "/v1/tenants", serde_json::json!({"name": "raised"})).await;
    c.admin.post_ok(&url, "/v1/tenants/raised/principals", agent("before")).await;
    let before = version().expect("cluster version");
    assert_eq!((before["cluster"].as_u64(), before["in_force"].as_u64()), (Some(15), Some(0)), "{before}");

    c.node_mut(1).kill();
    c.node_mut(1).raft_extra = String::new();
    c.node_mut(1).start(false);
    let newest = u64::from(writ_api::ledger::LEDGER_VERSION);
    eventually("the newest version in force", Duration::from_secs(60), || async {
        version().filter(|v| v["in_force"].as_u64() == Some(newest))
    })
    .await;
    c.admin.post_ok(&url, "/v1/tenants/raised/principals", agent("after")).await;
    c.converged(Duration::from_secs(30)).await;
    for n in &c.nodes {
        let status = c.admin.get(&n.url(), "/client/status").await.expect("status");
        assert_eq!(status["ledger_version_in_force"].as_u64(), Some(newest), "node {}: {status}", n.id);
        let page = c.admin.get(&n.url(), "/v1/tenants/raised/audit").await.expect("audit");
        let created: Vec<&str> = page["records"]
            .as_array()
            .expect("records")
            .iter()
            .filter(|r| r["operation"] == "principal_created")
            .filter_map(|r| r["detail"].as_str())
            .collect();
        assert_eq!(created.len(), 2, "node {}: {page}", n.id);
        assert!(created[0].contains("before") && created[1].contains("after"), "node {}: {created:?}", n.id);
    }
}

/// Commands the leader proposed inside batch entries of more than one
/// (`writ_ledger_batch_commands`: its sum less its count, summed over the nodes).
async fn batched_commands(c: &Cluster) -> u64 {
    metric_sum(c, "writ_ledger_batch_commands_sum").await - metric_sum(c, "writ_ledger_batch_commands_count").await
}

/// `name`'s value in the metrics of the node at `url` (0 before it has one).
async fn metric(c: &Cluster, url: &str, name: &str) -> u64 {
    let metrics = c.admin.client(url).send(reqwest::Method::GET, "/metrics", None).await.expect("metrics");
    let text = metrics.text().await.expect("text");
    text.lines()
        .find_map(|l| l.strip_prefix(name).and_then(|v| v.strip_prefix(' ')))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .unwrap_or(0.0) as u64
}

/// `name` summed over the running nodes.
async fn metric_sum(c: &Cluster, name: &str) -> u64 {
    let mut sum = 0;
    for url in c.running_urls() {
        sum += metric(c, &url, name).await;
    }
    sum
}

/// Issue 18's backup and restore through real processes: `writ admin backup` taken while
/// principals are being created, then `writ node restore` seeds a new node that founds a new
/// 3-node cluster — every principal acknowledged before the backup started is there, the audit
/// trail is the same, and the members that joined (by snapshot) reach the founder's digest. A
/// running node's data directory and a damaged backup are refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_taken_under_load_restores_into_a_new_cluster() {
    let mut c = Cluster::start(3).await;
    let url = c.nodes[0].url();
    c.admin.post_ok(&url, "/v1/tenants", serde_json::json!({"name": "kept"})).await;
    // Load: principals created one after another until told to stop; each acknowledgement is
    // stamped with when it arrived.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let load = {
        let (admin, url, stop) = (c.admin.clone(), url.clone(), stop.clone());
        tokio::spawn(async move {
            let mut acked = Vec::new();
            for i in 0.. {
                if stop.load(std::sync::atomic::Ordering::Relaxed) {
                    break;
                }
                let body = serde_json::json!({"name": format!("p-{i}"), "kind": "agent", "preset": "readOnly"});
                if let Ok((201, _)) = admin.post(&url, "/v1/tenants/kept/principals", body).await {
                    acked.push((format!("p-{i}"), std::time::Instant::now()));
                }
            }
            acked
        })
    };
    eventually("some load", Duration::from_secs(30), || async {
        let page = c.admin.get(&url, "/v1/tenants/kept/principals?limit=100").await.ok()?;
        // More than the 50 asserted below: the write in flight is visible before its
        // acknowledgement arrives (it failed once with 49 acknowledged before the backup).
        (page["principals"].as_array()?.len() >= 55).then_some(())
    })
    .await;
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("ledger.backup");
    let started = std::time::Instant::now();
    let (code, out, err) = {
        let (url, file) = (url.clone(), file.display().to_string());
        tokio::task::spawn_blocking(move || run_cli(&url, &["backup", "--out", &file, "-o", "json"])).await.unwrap()
    };
    assert_eq!(code, 0, "{out}{err}");
    let summary: serde_json::Value = serde_json::from_str(&out).expect("summary");
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let acked = load.await.expect("load");
    let before: Vec<&String> = acked.iter().filter(|(_, at)| *at < started).map(|(n, _)| n).collect();
    assert!(before.len() >= 50 && acked.len() > before.len(), "{} of {} before", before.len(), acked.len());
    assert!(summary["audit_records"].as_u64() > Some(20) && summary["events"].as_u64() > Some(20), "{summary}");
    eprintln!("backup: {summary}; {} of {} principals acknowledged before it began", before.len(), acked.len());
    assert!(!dir.path().join("ledger.partial").exists(), "no partial file is left");

    // A running cluster's data directory is refused; so is a damaged backup, leaving nothing.
    let (code, _, err) = restore_node(&file, &c.nodes[1].dir.join("data"));
    assert!(code == 1 && err.contains("holds a node's data"), "{err}");
    let mut damaged = std::fs::read(&file).expect("backup");
    let at = damaged.len() / 2;
    damaged[at] ^= 0x40;
    let damaged_file = dir.path().join("damaged.backup");
    std::fs::write(&damaged_file, damaged).expect("write");
    let (code, _, err) = restore_node(&damaged_file, &dir.path().join("nowhere"));
    assert!(code == 1 && err.contains("error: restore"), "{err}");
    assert!(!dir.path().join("nowhere/db").exists() && !dir.path().join("nowhere/seed").exists());

    // A new cluster founded on the backup.
    let mut restored_out = String::new();
    let fresh = Cluster::start_with(3, |node| {
        if node.id == 1 {
            let (code, out, err) = restore_node(&file, &node.dir.join("data"));
            assert_eq!(code, 0, "{out}{err}");
            restored_out = out.clone();
        }
    })
    .await;
    assert!(restored_out.contains(summary["manifest"]["state_digest"].as_str().unwrap()), "{restored_out}");
    let (_, digest) = fresh.converged(Duration::from_secs(60)).await;
    let new_url = fresh.nodes[2].url();
    for name in &before {
        let got = fresh.admin.get(&new_url, &format!("/v1/tenants/kept/principals/{name}")).await;
        assert!(got.is_ok(), "{name} was acknowledged before the backup: {got:?}");
    }
    let trail = |admin: &writ_tests::procs::Admin, url: String| {
        let admin = admin.clone();
        async move { admin.get(&url, "/v1/tenants/kept/audit?limit=20").await.expect("audit")["records"].clone() }
    };
    assert_eq!(trail(&fresh.admin, new_url.clone()).await, trail(&c.admin, url.clone()).await);
    // The founder and a member that joined by snapshot agree, and the founder serves new writes.
    fresh.admin.post_ok(&fresh.nodes[0].url(), "/v1/tenants", serde_json::json!({"name": "after-restore"})).await;
    let (_, after) = fresh.converged(Duration::from_secs(60)).await;
    assert_ne!(after, digest, "the restored cluster takes writes");

    // What a node's log holds, read offline: refused while the node runs, counted once stopped.
    let (code, _, err) = node_log_stats(&c.nodes[1].dir.join("data"));
    assert!(code == 1 && err.contains("still running"), "{err}");
    c.nodes[2].kill();
    let (code, out, err) = node_log_stats(&c.nodes[2].dir.join("data"));
    assert_eq!(code, 0, "{err}");
    let principals: u64 = out
        .lines()
        .find_map(|l| l.strip_prefix("create_principal"))
        .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no create_principal row:\n{out}"));
    assert!(principals > 0 && out.starts_with("entries "), "{out}");
    let families = ["column family", "events", "audit", "evidence", "cold"];
    assert!(families.iter().all(|f| out.lines().any(|l| l.starts_with(&format!("{f} ")))), "{out}");
}

/// A node keeps what it applied (events, audit records) in memtables only until its next
/// snapshot: apply writes them without RocksDB's WAL. Killed with `-9`, it loses them, and on
/// restart replays its log from its newest snapshot: its audit trail (read from its own
/// store) is the leader's again, record for record, and its state digest too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_killed_before_flushing_replays_its_log_to_the_same_trail() {
    let mut c = Cluster::start(3).await;
    let url = c.nodes[0].url();
    c.admin.post_ok(&url, "/v1/tenants", serde_json::json!({"name": "kept"})).await;
    for i in 0..40 {
        let body = serde_json::json!({"name": format!("p-{i}"), "kind": "agent", "preset": "readOnly"});
        c.admin.post_ok(&url, "/v1/tenants/kept/principals", body).await;
    }
    c.converged(Duration::from_secs(30)).await;
    let admin = c.admin.clone();
    let trail = |url: String| {
        let admin = admin.clone();
        async move { admin.get(&url, "/v1/tenants/kept/audit?limit=100").await.expect("audit")["records"].clone() }
    };
    let before = trail(url.clone()).await;
    assert!(before.as_array().is_some_and(|r| r.len() > 40), "{before}");
    c.node_mut(3).kill();
    c.node_mut(3).start(false);
    c.converged(Duration::from_secs(60)).await;
    let killed = c.nodes.iter().find(|n| n.id == 3).map(|n| n.url()).expect("node 3");
    assert_eq!(trail(killed).await, before, "node 3's audit trail after the kill");
}

/// Unmounts (lazily) what a test mounted, after its nodes are gone.
struct Unmount(std::sync::Arc<std::sync::Mutex<Option<std::path::PathBuf>>>);

impl Drop for Unmount {
    fn drop(&mut self) {
        if let Some(p) = self.0.lock().unwrap().take() {
            let _ = std::process::Command::new("umount").arg("-l").arg(p).status();
        }
    }
}

/// The bytes free on the filesystem holding `path` (`df`).
fn free_bytes(path: &std::path::Path) -> u64 {
    let out = std::process::Command::new("df").args(["-B1", "--output=avail"]).arg(path).output().expect("df");
    String::from_utf8_lossy(&out.stdout).lines().nth(1).and_then(|l| l.trim().parse().ok()).expect("df's figure")
}

/// Issue 18's disk pressure through a real node whose data directory is a 64 MiB tmpfs: once
/// something else fills the filesystem below the node's `min_free_disk_bytes`, writes are refused
/// with STORAGE_FULL (507) before they are proposed, reads go on, the alarm shows in the status
/// and the metrics; when the space returns, writes are accepted again without a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_short_of_disk_refuses_writes_serves_reads_and_recovers() {
    let mounted = std::sync::Arc::new(std::sync::Mutex::new(None));
    let _unmount = Unmount(mounted.clone());
    let c = Cluster::start_with(1, |n| {
        let data = n.dir.join("data");
        std::fs::create_dir_all(&data).expect("data dir");
        let status = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=64m", "tmpfs"])
            .arg(&data)
            .status()
            .expect("mount");
        assert!(status.success(), "mounting a tmpfs needs root, as the network-namespace tests do");
        *mounted.lock().unwrap() = Some(data);
        n.raft_extra = format!("min_free_disk_bytes = {}", 16 << 20);
    })
    .await;
    let url = c.nodes[0].url();
    c.admin.post_ok(&url, "/v1/tenants", serde_json::json!({"name": "roomy"})).await;
    let data = c.nodes[0].dir.join("data");
    // Something else takes the space: 8 MiB stay free, under the node's 16.
    let ballast = data.join("ballast");
    let fill = free_bytes(&data).saturating_sub(8 << 20);
    {
        use std::io::Write;
        let mut f = std::fs::File::create(&ballast).expect("ballast");
        let block = vec![0u8; 1 << 20];
        for _ in 0..fill / (1 << 20) {
            f.write_all(&block).expect("fill");
        }
        f.sync_all().expect("sync");
    }
    let refused = eventually("writes refused for lack of space", Duration::from_secs(30), || {
        let (admin, url) = (c.admin.clone(), url.clone());
        async move {
            let (code, body) = admin.post(&url, "/v1/tenants", serde_json::json!({"name": "cramped"})).await.ok()?;
            (code == 507).then_some(body)
        }
    })
    .await;
    assert_eq!(refused["reason"], "STORAGE_FULL", "{refused}");
    assert!(refused["message"].as_str().unwrap().contains("short of space"), "{refused}");
    let read = c.admin.get(&url, "/v1/tenants/roomy").await.expect("reads go on");
    assert_eq!(read["name"], "roomy");
    let status = c.admin.get(&url, "/client/status").await.expect("status");
    assert_eq!(status["storage_alarm"], true, "{status}");
    let text =
        c.admin.client(&url).send(reqwest::Method::GET, "/metrics", None).await.expect("metrics").text().await.unwrap();
    assert!(text.contains("writ_storage_alarm 1"), "{text}");

    // Space returns: writes are accepted again, with no restart.
    std::fs::remove_file(&ballast).expect("remove the ballast");
    eventually("writes accepted again", Duration::from_secs(30), || {
        let (admin, url) = (c.admin.clone(), url.clone());
        async move {
            (admin.post(&url, "/v1/tenants", serde_json::json!({"name": "roomy-again"})).await.ok()?.0 == 201)
                .then_some(())
        }
    })
    .await;
    let status = c.admin.get(&url, "/client/status").await.expect("status");
    assert_eq!(status["storage_alarm"], false, "{status}");
    drop(c);
}

/// Issue 18: snapshots are also triggered by log size — with `snapshot_every_log_bytes` at
/// 64 KiB, a few hundred writes (far fewer than the 100,000 entries of the count trigger) make
/// the node build a snapshot, and its log can be purged behind it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_is_built_once_the_log_has_grown_by_its_size_threshold() {
    let c = Cluster::start_with(1, |n| n.raft_extra = "snapshot_every_log_bytes = 65536".into()).await;
    let url = c.nodes[0].url();
    let status = c.admin.get(&url, "/client/status").await.expect("status");
    assert!(status["snapshot_index"].is_null(), "no snapshot yet: {status}");
    let long = "x".repeat(200);
    for i in 0..200 {
        let body = serde_json::json!({"name": format!("sized-{i}"), "display_name": long});
        c.admin.post_ok(&url, "/v1/tenants", body).await;
    }
    let status = eventually("a snapshot by log size", Duration::from_secs(30), || async {
        let s = c.admin.get(&url, "/client/status").await.ok()?;
        s["snapshot_index"].as_u64().map(|_| s)
    })
    .await;
    assert!(status["last_applied_index"].as_u64() < Some(1_000), "{status}");
    // The snapshot says where its bytes are: the 200 tenants' names, in the tenant section.
    let tenant_bytes = metric(&c, &url, "writ_state_section_bytes{section=\"tenant\"}").await;
    assert!(tenant_bytes > 40_000, "{tenant_bytes} bytes in the tenant section");
    // Each of the 200 writes, awaited one after another, was applied in an apply of its own.
    let applies = metric(&c, &url, "writ_state_apply_seconds_count").await;
    assert!(applies >= 200, "{applies} applies timed");
    // Each apply's RocksDB write is timed within it.
    let writes = metric(&c, &url, "writ_state_write_seconds_count").await;
    assert!(writes >= 200, "{writes} state writes timed");
    // Each, appended alone, was made durable by a WAL sync of its own, timed.
    let syncs = metric(&c, &url, "writ_log_sync_seconds_count").await;
    assert!(syncs >= 200, "{syncs} WAL syncs timed");
}

/// Issue 18: the members of a cluster stagger their snapshots (`writ_node::ledger::staggered`):
/// with a trigger of 200 entries, node n builds its first after 200 × (1 + n/10) entries, so
/// three members that apply the same entries together do not all clone, encode and sync their
/// state at once on the same cores (under `make bench` P4, three builds at once took a quarter
/// of the throughput of the window they fell in).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_build_their_snapshots_at_staggered_indexes() {
    const EVERY: u64 = 200;
    let c = Cluster::start_with(3, |n| n.raft_extra = format!("snapshot_every_entries = {EVERY}")).await;
    let urls = c.all_urls();
    // One entry per write, one after another: 300 entries, past every member's first trigger
    // (at most 260) and before any second one (at least 440).
    create_many(&c, &urls, "staggered", 0..300, 1).await;
    c.converged(Duration::from_secs(30)).await;
    let mut built = Vec::new();
    for node in &c.nodes {
        let url = node.url();
        let at = eventually("a snapshot on every member", Duration::from_secs(30), || async {
            c.admin.get(&url, "/client/status").await.ok()?["snapshot_index"].as_u64()
        })
        .await;
        // Its trigger-th entry is at log index trigger − 1 (the log counts from 0).
        let due = writ_node::ledger::staggered(EVERY, node.id) - 1;
        assert!(at >= due && at < 2 * EVERY, "node {} built at {at}, its trigger's index is {due}", node.id);
        built.push(at);
    }
    built.sort();
    assert!(built.windows(2).all(|w| w[1] >= w[0] + EVERY / 20), "members built together: {built:?}");
}

/// Issue 18: a snapshot transfer resumes where the receiver stands — a new attempt (after a
/// lost connection) is told how much arrived, a chunk sent again is not appended twice, and a
/// whole file whose digest does not match is dropped so the next attempt starts over. Driven
/// with a node's credential against `POST /raft/snapshot-chunk`, as a leader would.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_transfer_resumes_where_the_receiver_stands() {
    use writ_node::network::{ChunkReply, SnapshotChunk};
    use writ_raft_store::TypeConfig;
    let c = Cluster::start(1).await;
    let url = format!("{}/raft/snapshot-chunk", c.nodes[0].url());
    let http = writ_tests::pki::http(Some((writ_api::role::Role::Node, "9")));
    let chunk = |offset: Option<u64>, data: Vec<u8>, done: Option<(u64, String)>| SnapshotChunk {
        vote: openraft::alias::VoteOf::<TypeConfig>::new(1, 9),
        meta: openraft::alias::SnapshotMetaOf::<TypeConfig> {
            last_log_id: Some(openraft::testing::log_id::<TypeConfig>(1, 9, 1_000_000)),
            last_membership: Default::default(),
        },
        offset,
        data,
        done,
    };
    let send = |c: SnapshotChunk| {
        let (http, url) = (http.clone(), url.clone());
        async move {
            let resp = http.post(&url).body(writ_api::encode(&c).unwrap()).send().await.expect("sent");
            let status = resp.status().as_u16();
            let bytes = resp.bytes().await.expect("body");
            (status, writ_api::decode::<Result<ChunkReply, openraft::errors::RaftError<TypeConfig>>>(&bytes).ok())
        }
    };
    let at = |(status, reply): (u16, Option<Result<ChunkReply, _>>)| match reply {
        Some(Ok(ChunkReply::Resume { offset })) if status == 200 => offset,
        other => panic!("expected a resume point, got {status} {other:?}"),
    };
    let piece = vec![7u8; 1000];
    assert_eq!(at(send(chunk(None, vec![], None)).await), 0, "nothing held yet");
    assert_eq!(at(send(chunk(Some(0), piece.clone(), None)).await), 1000);
    assert_eq!(at(send(chunk(Some(0), piece.clone(), None)).await), 1000, "a chunk sent again is not appended twice");
    assert_eq!(at(send(chunk(None, vec![], None)).await), 1000, "a new attempt resumes where the last one stopped");
    assert_eq!(at(send(chunk(Some(1000), piece.clone(), None)).await), 2000);
    // The last chunk with a digest that does not match: refused, and the part dropped.
    let (status, _) = send(chunk(Some(2000), piece, Some((3000, "00".repeat(32))))).await;
    assert_eq!(status, 500);
    assert_eq!(at(send(chunk(None, vec![], None)).await), 0, "a damaged file is started over");
}

/// The newest file with extension `ext` in `node`'s snapshot directory: `snap` for the node's
/// own snapshots (state only), `xfer` for the transfer files it wrote for peers.
fn newest_snapshot_file(node: &writ_tests::procs::NodeProc, ext: &str) -> std::path::PathBuf {
    let files = std::fs::read_dir(node.dir.join("data/snapshots")).expect("snapshots");
    let paths = files.flatten().map(|e| e.path()).filter(|p| p.extension().is_some_and(|x| x == ext));
    paths.max().unwrap_or_else(|| panic!("no .{ext} snapshot file"))
}

/// `kB` of a `/proc/<pid>/status` line (`VmRSS`, `VmHWM`) as bytes.
fn proc_bytes(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.trim().strip_suffix("kB")?.trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// Issue 18's rejoin measurement (`make soak`; `WRIT_SOAK_AUDIT` records, 1,000,000 by default):
/// a cluster whose tenant retains that many audit records (recorded as edges record request
/// decisions, 1,000 per entry) purges its log behind a snapshot; a wiped member rejoins. Prints
/// the snapshot's size, the time to catch up and the peak extra memory of sender and receiver,
/// and checks that neither held the snapshot whole (both stay below its size) and that the
/// rejoined node has the same digest and audit trail.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement: make soak"]
async fn soak_a_wiped_node_rejoins_a_cluster_holding_a_million_audit_records() {
    use writ_api::audit::RequestDecisionV1;
    use writ_api::dto::SubmitRequest;
    use writ_api::ledger::Command;
    use writ_client::Ledger;
    let records: u64 = std::env::var("WRIT_SOAK_AUDIT").ok().and_then(|v| v.parse().ok()).unwrap_or(1_000_000);
    let mut c = Cluster::start(3).await;
    let leader = c.leader(Duration::from_secs(10)).await;
    let leader_url = c.nodes.iter().find(|n| n.id == leader).map(|n| n.url()).expect("leader");
    let tenant = c.admin.post_ok(&leader_url, "/v1/tenants", serde_json::json!({"name": "soak"})).await;
    let tenant_id = tenant["id"].as_str().expect("id").to_string();
    let settings = serde_json::json!({"audit_max_events": records + 1000});
    let (code, body) = c
        .admin
        .send(reqwest::Method::PATCH, &format!("{leader_url}/v1/tenants/soak/settings"), Some(settings))
        .await
        .expect("settings");
    assert_eq!(code, 200, "{body}");
    let ledger = std::sync::Arc::new(writ_tests::pki::edge_ledger(c.all_urls(), "soak-edge"));
    let started = std::time::Instant::now();
    let batches = records.div_ceil(1000);
    let mut tasks = Vec::new();
    for w in 0..4u64 {
        let (ledger, tenant_id) = (ledger.clone(), tenant_id.clone());
        tasks.push(tokio::spawn(async move {
            for b in (w..batches).step_by(4) {
                let decisions = (0..1000)
                    .map(|i| RequestDecisionV1 {
                        trace_id: format!("soak-{b}-{i}"),
                        principal_id: "p-soak".into(),
                        token_id: Some(format!("jti-{i}")),
                        parent_token_id: None,
                        method: "tools/call".into(),
                        name: Some("read_status".into()),
                        outcome: "allowed".into(),
                        reason: None,
                    })
                    .collect();
                let command = Command::RecordDecisions { tenant_id: tenant_id.clone(), decisions };
                let req = SubmitRequest::new(format!("soak-{b}"), command);
                ledger.submit(req).await.expect("a batch of decisions");
            }
        }));
    }
    for t in tasks {
        t.await.expect("loader");
    }
    let loaded = started.elapsed();
    // Every member has applied it all (a debug build applies slowly) before one is wiped.
    c.converged(Duration::from_secs(1200)).await;
    let victim = c.nodes.iter().map(|n| n.id).find(|id| *id != leader).expect("a follower");
    c.node_mut(victim).kill();
    c.node_mut(victim).wipe();
    let others: Vec<u64> = c.nodes.iter().map(|n| n.id).filter(|id| *id != victim).collect();
    c.admin.post_ok(&leader_url, "/v1/cluster/membership", serde_json::json!({"voters": others})).await;
    let built = std::time::Instant::now();
    c.admin.post_ok(&leader_url, "/v1/cluster/snapshot", serde_json::json!({})).await;
    // (The request waits a bounded time; a large snapshot may still be building.)
    eventually("the snapshot built", Duration::from_secs(1200), || async {
        let s = c.admin.get(&leader_url, "/client/status").await.ok()?;
        (s["snapshot_index"].as_u64().is_some() && s["snapshot_index"] == s["last_applied_index"]).then_some(())
    })
    .await;
    let build_time = built.elapsed();
    let purged = c.admin.post_ok(&leader_url, "/v1/cluster/purge", serde_json::json!({})).await;
    assert!(purged["purged_index"].as_u64().unwrap_or(0) > 0, "{purged}");
    let leader_node = c.nodes.iter().find(|n| n.id == leader).expect("leader");
    let built_bytes = std::fs::metadata(newest_snapshot_file(leader_node, "snap")).expect("snapshot").len();
    let sender = leader_node.pid().expect("leader pid");
    let sender_before = proc_bytes(sender, "VmRSS:");
    // The sender's peak from here on: its high-water mark reset to what it holds now.
    std::fs::write(format!("/proc/{sender}/clear_refs"), "5").expect("reset the sender's peak RSS");

    c.node_mut(victim).start(false);
    let victim_url = c.nodes.iter().find(|n| n.id == victim).map(|n| n.url()).expect("victim");
    eventually("wiped node listening", Duration::from_secs(60), || async {
        c.admin.get(&victim_url, "/healthz").await.ok().map(|_| ())
    })
    .await;
    let receiver = c.nodes.iter().find(|n| n.id == victim).and_then(|n| n.pid()).expect("victim pid");
    let receiver_before = proc_bytes(receiver, "VmRSS:");
    let rejoin = std::time::Instant::now();
    let learner = serde_json::json!({"node_id": victim, "addr": victim_url});
    let (code, body) = c.admin.post(&leader_url, "/v1/cluster/learners", learner).await.expect("learner");
    assert_eq!(code, 200, "{body}");
    let caught_up = eventually("the wiped node caught up", Duration::from_secs(1800), || async {
        let mine = c.admin.get(&victim_url, "/client/status").await.ok()?;
        let theirs = c.admin.get(&leader_url, "/client/status").await.ok()?;
        (mine["state_digest"] == theirs["state_digest"] && mine["revision"] == theirs["revision"])
            .then(|| rejoin.elapsed())
    })
    .await;
    let sender_peak = proc_bytes(sender, "VmHWM:");
    let leader_node = c.nodes.iter().find(|n| n.id == leader).expect("leader");
    let snapshot_bytes = std::fs::metadata(newest_snapshot_file(leader_node, "xfer")).expect("transfer").len();
    let receiver_peak = proc_bytes(receiver, "VmHWM:");
    let path = "/v1/tenants/soak/audit?limit=5";
    assert_eq!(
        c.admin.get(&victim_url, path).await.expect("audit"),
        c.admin.get(&leader_url, path).await.expect("audit")
    );
    let mb = |b: u64| b as f64 / 1048576.0;
    eprintln!(
        "soak: {records} audit records loaded in {loaded:?}; snapshot {:.1} MB (state only) built and log purged in {build_time:?}; \
         transfer file {:.1} MB; wiped node caught up in {caught_up:?}; sender RSS {:.1} -> peak {:.1} MB (+{:.1}); receiver RSS {:.1} -> peak {:.1} MB (+{:.1})",
        mb(built_bytes),
        mb(snapshot_bytes),
        mb(sender_before),
        mb(sender_peak),
        mb(sender_peak.saturating_sub(sender_before)),
        mb(receiver_before),
        mb(receiver_peak),
        mb(receiver_peak.saturating_sub(receiver_before)),
    );
    assert!(sender_peak.saturating_sub(sender_before) < snapshot_bytes, "the sender held the snapshot whole");
    assert!(receiver_peak.saturating_sub(receiver_before) < snapshot_bytes, "the receiver held the snapshot whole");
}

/// `writ node seed` grows a stopped cluster's ledger by finished operations through the state
/// machine's own apply, and gives the other members the same store: restarted, the members
/// hold one ledger (one digest), the seeded operations read as the write path leaves them, and
/// the cluster takes writes after. Refused while the node runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_cluster_grown_in_bulk_restarts_holding_one_grown_ledger() {
    let mut c = Cluster::start(3).await;
    let url = c.nodes[0].url();
    c.admin.post_ok(&url, "/v1/tenants", serde_json::json!({"name": "before"})).await;
    let (index, _) = c.converged(Duration::from_secs(60)).await;
    let data = |c: &Cluster, i: usize| c.nodes[i].dir.join("data");
    let (code, _, err) = seed_node(&data(&c, 0), 10, &[]);
    assert!(code == 1 && err.contains("error: seed"), "{err}");

    for node in c.nodes.iter_mut() {
        node.kill();
    }
    let (code, out, err) = seed_node(&data(&c, 0), 120, &[data(&c, 1), data(&c, 2)]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("seeded 120 finished operations") && out.contains("484 requests applied"), "{out}");
    // The log ends at the snapshot's entry, so a leader's first append probes with it.
    let (code, stats, err) = node_log_stats(&data(&c, 2));
    assert_eq!(code, 0, "{err}");
    assert!(stats.lines().next().is_some_and(|l| l.contains(": 1 entries,")), "{stats}");
    for node in c.nodes.iter_mut() {
        node.start(false);
    }
    let (grown, digest) = c.converged(Duration::from_secs(60)).await;
    assert!(grown >= index + 484, "applied index {grown}, before {index}");

    let listed = c.admin.get(&url, "/v1/tenants/seed/operations?limit=200").await.expect("seeded operations");
    let ops = listed["operations"].as_array().expect("operations");
    assert_eq!(ops.len(), 120, "{listed}");
    assert!(ops.iter().all(|op| op["state"] == "effect_reported" && op["attempts"] == 1), "{}", ops[0]);

    c.admin.post_ok(&url, "/v1/tenants", serde_json::json!({"name": "after"})).await;
    let (_, after) = c.converged(Duration::from_secs(60)).await;
    assert_ne!(after, digest, "the grown cluster takes writes");

    // Grown again, now from the snapshot the first growth left and the writes after it.
    for node in c.nodes.iter_mut() {
        node.kill();
    }
    let (code, _, err) = seed_node(&data(&c, 1), 30, &[data(&c, 0), data(&c, 2)]);
    assert_eq!(code, 0, "{err}");
    for node in c.nodes.iter_mut() {
        node.start(false);
    }
    c.converged(Duration::from_secs(60)).await;
    let listed = c.admin.get(&url, "/v1/tenants/seed/operations?limit=200").await.expect("seeded operations");
    assert_eq!(listed["operations"].as_array().map(Vec::len), Some(150), "{listed}");
    let names = c.admin.all_tenant_names(&url).await.expect("tenants");
    assert!(["before", "after", "seed"].iter().all(|t| names.iter().any(|n| n == t)), "{names:?}");
}
