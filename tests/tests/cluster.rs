//! Real `writ node` processes on loopback: failover under `kill -9`, restart catch-up, and a
//! wiped node rebuilt through a snapshot after the log was purged.

use std::collections::BTreeSet;
use std::time::Duration;

use writ_tests::eventually;
use writ_tests::procs::{run_cli, Cluster};

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
        let r = ledger.submit(writ_api::dto::SubmitRequest { trace_id: format!("routed-{i}"), command }).await;
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
    c.node_mut(old).kill();
    let new = c.leader(Duration::from_secs(20)).await;
    assert_ne!(new, old, "a surviving node must take over");

    let survivors = c.running_urls();
    acked.extend(create_many(&c, &survivors, "after", 0..200, 8).await);
    assert_eq!(acked.len(), 700);
    assert_all_readable(&c, &survivors[0], &acked).await;

    c.node_mut(old).start(false);
    let (index, digest) = c.converged(Duration::from_secs(60)).await;
    assert!(index >= 700, "applied index {index} is below the number of creates");
    assert_eq!(digest.len(), 64);
    // The restarted node serves every acknowledged create too.
    let restarted = c.nodes.iter().find(|n| n.id == old).map(|n| n.url()).expect("node");
    assert_all_readable(&c, &restarted, &acked).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wiped_node_catches_up_through_snapshot_after_purge() {
    let mut c = Cluster::start(3).await;
    let urls = c.all_urls();
    let mut acked = create_many(&c, &urls, "early", 0..60, 4).await;
    let leader = c.leader(Duration::from_secs(10)).await;
    let victim = c.nodes.iter().map(|n| n.id).find(|id| *id != leader).expect("a follower");
    c.node_mut(victim).kill();
    c.node_mut(victim).wipe();
    // The operator procedure for a lost disk: take the member out, then re-add it as a
    // learner and promote it once it has caught up (see ARCHITECTURE.md, "Recovery").
    let leader_url = c.nodes.iter().find(|n| n.id == leader).map(|n| n.url()).expect("leader");
    let others: Vec<u64> = c.nodes.iter().map(|n| n.id).filter(|id| *id != victim).collect();
    c.admin.post_ok(&leader_url, "/v1/cluster/membership", serde_json::json!({"voters": others})).await;

    let survivors = c.running_urls();
    acked.extend(create_many(&c, &survivors, "late", 0..60, 4).await);
    c.admin.post_ok(&leader_url, "/v1/cluster/snapshot", serde_json::json!({})).await;
    let purged = c.admin.post_ok(&leader_url, "/v1/cluster/purge", serde_json::json!({})).await;
    assert!(purged["purged_index"].as_u64().unwrap_or(0) > 0, "log was not purged: {purged}");

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
    assert_all_readable(&c, &victim_url, &acked).await;
    // The snapshot carried the audit trail: the wiped node lists the same records.
    for tenant in ["early-0", "late-59"] {
        let path = format!("/v1/tenants/{tenant}/audit");
        let on_victim = c.admin.get(&victim_url, &path).await.expect("audit on the wiped node");
        let on_leader = c.admin.get(&leader_url, &path).await.expect("audit on the leader");
        assert_eq!(on_victim, on_leader);
        assert_eq!(on_victim["records"][0]["operation"], "tenant_created", "{on_victim}");
    }
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
    c.converged(Duration::from_secs(30)).await;

    // Upgraded: the same command goes through, and node 3 applies it.
    c.node_mut(3).kill();
    c.node_mut(3).raft_extra = String::new();
    c.node_mut(3).start(false);
    eventually("the upgraded cluster to take version-2 commands", Duration::from_secs(40), || {
        let (admin, url) = (c.admin.clone(), url.clone());
        async move { (admin.post(&url, "/v1/tenants/gated/work", work("wo-up")).await.ok()?.0 == 201).then_some(()) }
    })
    .await;
    c.converged(Duration::from_secs(30)).await;
}
