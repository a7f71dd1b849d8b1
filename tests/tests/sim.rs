//! Seeded fault simulation on the in-process harness: partition the leader into a minority,
//! check that a submit through a follower waits for the election and lands, that the old
//! leader commits nothing while the majority elects and goes on, heal, and check that every
//! replica converges to one digest.
//!
//! Also retention (issue 18) applied alike on every replica and carried by snapshots.
//!
//! Reproduce a failing seed: `WRIT_SIM_SEED=<seed> cargo test -p writ-tests --test cluster sim::`.

use std::time::Duration;

use openraft::async_runtime::WatchReceiver;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::sync::Arc;
use writ_api::dto::{Consistency, Query, QueryRequest, SubmitRequest};
use writ_api::ledger::{Command, Outcome};
use writ_tests::eventually;
use writ_tests::sim::{SimCluster, Switchboard};

fn seeds() -> Vec<u64> {
    match std::env::var("WRIT_SIM_SEED") {
        Ok(s) => vec![s.parse().expect("WRIT_SIM_SEED must be a number")],
        Err(_) => vec![1, 2, 3],
    }
}

/// A random command over a small name space (conflicts and rejections are part of the mix).
fn random_command(rng: &mut StdRng) -> Command {
    let i = rng.random_range(0..40);
    match rng.random_range(0..9) {
        0..=3 => Command::CreateTenant { tenant_id: format!("t-{i}"), name: format!("n-{i}"), display_name: None },
        4 | 5 => Command::SuspendTenant { tenant_id: format!("t-{i}"), note: None },
        6 | 7 => Command::ResumeTenant { tenant_id: format!("t-{i}") },
        // The audit chain switches at the entry that puts version 16 in force (the first; the
        // others are refused), alike on every replica.
        _ => Command::RaiseLedgerVersion { version: 16 },
    }
}

async fn run_seed(seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let c = SimCluster::start(3, rng.random_range(1_600_000_000_000..1_800_000_000_000)).await;
    let leader = eventually("initial leader", Duration::from_secs(20), || async { c.leader() }).await;

    // Phase 1: a seeded workload through random nodes (followers forward to the leader).
    for i in 0..rng.random_range(20..60) {
        let via = rng.random_range(1..=3u64);
        let req = SubmitRequest::new(format!("s{seed}-a{i}"), random_command(&mut rng));
        c.nodes[&via].submit_request(req, false).await.expect("phase 1 submit");
    }

    // Phase 2: cut the leader off. It must commit nothing; the majority elects and goes on.
    let applied_before = c.nodes[&leader].status().await.last_applied_index;
    c.board.isolate(leader);
    // A submit through a follower right after the cut waits for the election and lands on the
    // new leader, instead of failing with LEDGER_UNAVAILABLE (issue 17, step 5).
    let follower = *c.nodes.keys().find(|id| **id != leader).expect("a follower");
    let during = SubmitRequest::new(
        format!("s{seed}-during"),
        Command::CreateTenant { tenant_id: "t-during".into(), name: "during".into(), display_name: None },
    );
    let resp = c.nodes[&follower].submit_request(during, false).await;
    assert!(
        matches!(resp, Ok(ref r) if matches!(r.outcome, Outcome::Applied { .. })),
        "seed {seed}: a submit during the election failed: {resp:?}"
    );
    let orphan = SubmitRequest::new(
        format!("s{seed}-orphan"),
        Command::CreateTenant { tenant_id: "t-orphan".into(), name: "orphan".into(), display_name: None },
    );
    let old_leader = c.nodes[&leader].clone();
    let orphan_result = tokio::time::timeout(Duration::from_secs(3), old_leader.submit_request(orphan, false)).await;
    assert!(
        !matches!(orphan_result, Ok(Ok(_))),
        "seed {seed}: the isolated leader acknowledged a write: {orphan_result:?}"
    );
    assert_eq!(
        c.nodes[&leader].status().await.last_applied_index,
        applied_before,
        "seed {seed}: minority applied something"
    );

    let new_leader =
        eventually("majority leader", Duration::from_secs(20), || async { c.leader().filter(|id| *id != leader) })
            .await;
    let mut acked = vec!["during".to_string()];
    for i in 0..rng.random_range(10..30) {
        let name = format!("p{i}");
        let req = SubmitRequest::new(
            format!("s{seed}-b{i}"),
            Command::CreateTenant { tenant_id: format!("t-{name}"), name: name.clone(), display_name: None },
        );
        let resp = c.nodes[&new_leader].submit_request(req, false).await.expect("majority submit");
        assert!(matches!(resp.outcome, Outcome::Applied { .. }), "seed {seed}: {resp:?}");
        acked.push(name);
    }

    // Phase 3: heal; every replica converges to one applied index and digest.
    c.board.heal();
    let (index, digest) = eventually("convergence", Duration::from_secs(30), || async {
        let s: Vec<_> = futures::future::join_all(c.nodes.values().map(|n| n.status())).await;
        let first = (s[0].last_applied_index, s[0].state_digest.clone());
        s.iter().all(|x| (x.last_applied_index, x.state_digest.clone()) == first).then_some(first)
    })
    .await;
    assert!(index.is_some() && digest.len() == 64);

    // Every acknowledged write survived; the orphaned one never became visible.
    for node in c.nodes.values() {
        for name in &acked {
            let q = QueryRequest {
                query: Query::GetTenant { tenant: name.clone() },
                consistency: Consistency::Linearizable,
            };
            node.query_request(q).await.unwrap_or_else(|e| panic!("seed {seed}: node {} lost {name}: {e}", node.id));
        }
        let q = QueryRequest { query: Query::GetTenant { tenant: "orphan".into() }, consistency: Consistency::Stale };
        assert!(node.query_request(q).await.is_err(), "seed {seed}: minority write became visible on node {}", node.id);
    }
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitioned_leader_commits_nothing_and_replicas_converge() {
    writ_tests::init_test_log();
    for seed in seeds() {
        let outcome = tokio::spawn(run_seed(seed)).await;
        if let Err(e) = outcome {
            panic!(
                "simulation failed for seed {seed}: {e}\nreproduce: WRIT_SIM_SEED={seed} cargo test -p writ-tests --test cluster sim:: -- --nocapture"
            );
        }
    }
}

/// Submits `command` through node `via` and expects it applied.
async fn submit_applied(c: &SimCluster, via: u64, command: Command) -> Outcome {
    let resp = c.nodes[&via].submit_request(SubmitRequest::new("retention", command), false).await;
    let resp = resp.expect("submitted");
    assert!(matches!(resp.outcome, Outcome::Applied { .. }), "{resp:?}");
    resp.outcome
}

/// A tenant `t` with an agent, a catalog and a token, and one operation of it (`op-1`, key
/// `k-1`) submitted and cancelled through `leader`: its spec.
async fn a_cancelled_operation(c: &SimCluster, leader: u64, t: &str) -> writ_api::operation::OperationSpecV1 {
    let t = t.to_string();
    let catalog = writ_api::catalog::compile(
        br#"{"actions": [{"id": "note", "title": "Note", "description": "Writes a note.", "input_schema": {"type": "object"},
             "risk": "low", "execution": "operation", "cost_units": 1}]}"#,
    )
    .expect("catalog");
    let principal = writ_api::principal::PrincipalSpecV1 {
        principal_id: "agent".into(),
        name: "agent".into(),
        kind: writ_api::principal::PrincipalKind::Agent,
        preset: Some(writ_api::principal::RolePreset::Full),
        scopes: Default::default(),
        metadata: Default::default(),
    };
    let token = writ_api::token::TokenRequestV1 {
        jti: "jti-agent".into(),
        principal_id: "agent".into(),
        scopes: Default::default(),
        ttl_s: 3600,
        parent_jti: None,
    };
    for command in [
        Command::CreateTenant { tenant_id: t.clone(), name: "acme".into(), display_name: None },
        Command::CreatePrincipal { tenant_id: t.clone(), spec: principal },
        Command::PublishCatalog { tenant_id: t.clone(), catalog },
        Command::IssueToken { tenant_id: t.clone(), request: token },
    ] {
        submit_applied(c, leader, command).await;
    }
    let input = serde_json::json!({"text": "hello"});
    let spec = writ_api::operation::OperationSpecV1 {
        operation_id: "op-1".into(),
        principal_id: "agent".into(),
        authority_ref: "jti-agent".into(),
        action: "note".into(),
        payload_hash: writ_api::operation::payload_hash(&input),
        input: input.to_string(),
        idempotency_key: "k-1".into(),
        deadline_ms: 1_700_000_000_000 + 3_600_000,
        cost_units: 1,
        cost_ceiling: None,
        device_id: None,
        work_ref: None,
        preconditions: Default::default(),
        trace_id: "retention".into(),
        input_requests: Default::default(),
    };
    submit_applied(c, leader, Command::SubmitOperation { tenant_id: t.clone(), spec: spec.clone() }).await;
    let cancel =
        Command::CancelOperation { tenant_id: t, operation_id: "op-1".into(), by_principal_id: "agent".into() };
    submit_applied(c, leader, cancel).await;
    spec
}

/// Three nodes, node 3 advertising ledger version `version` (not upgraded yet), with tenant
/// `t-1`'s cancelled operation `op-1` ([`a_cancelled_operation`]): the cluster, its leader and
/// the tenant.
async fn with_a_member_at(version: u32) -> (SimCluster, u64, &'static str) {
    writ_tests::init_test_log();
    let board = Arc::new(Switchboard::default());
    let c = SimCluster::start_with(board, 3, 1_700_000_000_000, |id| (id == 3).then_some(version)).await;
    let leader = eventually("initial leader", Duration::from_secs(20), || async { c.leader() }).await;
    a_cancelled_operation(&c, leader, "t-1").await;
    (c, leader, "t-1")
}

/// The leader's reaper applies retention without being asked, with the command every member
/// reads: while a member is on ledger version 14, `ApplyRetentionV2` is gated and the reaper
/// retires with `ApplyRetention` (without that fallback nothing would ever be compacted).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reaper_retires_with_the_command_every_member_reads() {
    let (c, leader, t) = with_a_member_at(14).await;
    let gated = c.nodes[&leader]
        .submit_request(SubmitRequest::new("retention", Command::ApplyRetentionV2 { tenant_id: t.into() }), false)
        .await
        .expect_err("a member on version 14 cannot read it");
    assert_eq!(gated.reason, writ_api::ReasonCode::LEDGER_VERSION_GATED, "{gated:?}");
    c.advance_clocks(24 * 3_600_000 + 60_000);
    for node in c.nodes.values() {
        node.start_reaper();
    }
    eventually("the reaper to compact the cancelled operation", Duration::from_secs(30), || async {
        let a = c.nodes[&leader].sm.read();
        (writ_api::retention::storage(&a.state, t).bindings == 1).then_some(())
    })
    .await;
    c.shutdown().await;
}

/// A blob carried as bytes reaches a cluster with a member on ledger version 19: the leader
/// proposes it as base64, which that member reads, instead of refusing it as gated.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blob_as_bytes_is_proposed_as_base64_while_a_member_is_older() {
    let (c, leader, t) = with_a_member_at(19).await;
    let upload = Command::StoreEvidenceV2 {
        tenant_id: t.into(),
        operation_id: "op-1".into(),
        mime_type: "text/plain".into(),
        content_hash: writ_api::sha256_hex(b"frame"),
        content: b"frame".to_vec(),
        by: writ_api::evidence::Uploader::Executor { executor_id: "x-1".into() },
    };
    let resp = c.nodes[&leader].submit_request(SubmitRequest::new("blob", upload), false).await;
    // Decided by every member (no operation of that executor), not gated before proposal.
    let outcome = resp.expect("proposed").outcome;
    assert!(
        matches!(outcome, Outcome::Rejected { reason: writ_api::ReasonCode::OPERATION_NOT_FOUND, .. }),
        "{outcome:?}"
    );
    c.shutdown().await;
}

/// Issue 18's retention on every replica (must show 2): a finished operation is compacted to its
/// binding once the tenant's idempotency retention has passed in ledger time, by the same entry
/// on every node; a node cut off meanwhile catches up through a snapshot (the leader's log
/// purged) that carries the binding; every replica reaches one digest, and a replay through
/// any node still answers with the original outcome.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_compacts_alike_on_every_replica_and_travels_in_snapshots() {
    writ_tests::init_test_log();
    let c = SimCluster::start(3, 1_700_000_000_000).await;
    let leader = eventually("initial leader", Duration::from_secs(20), || async { c.leader() }).await;
    let t = "t-1".to_string();
    let submit = |via: u64, command: Command| submit_applied(&c, via, command);
    let spec = a_cancelled_operation(&c, leader, &t).await;

    // Node 3 is cut off; a day and a minute later the others compact the cancelled operation.
    let cut = *c.nodes.keys().find(|id| **id != leader).expect("a follower");
    // (The leader has heard every member's ledger version, as its version watch does: the gate
    // trusts a member's last word while it is unreachable, and refuses one never heard from.)
    let versions = c.nodes[&leader].member_versions().await;
    assert!(versions.values().all(|v| *v == Some(writ_api::ledger::LEDGER_VERSION)), "{versions:?}");
    c.board.isolate(cut);
    c.advance_clocks(24 * 3_600_000 + 60_000);
    let Outcome::Applied { events, .. } = submit(leader, Command::ApplyRetention { tenant_id: t.clone() }).await else {
        unreachable!()
    };
    assert!(events.iter().any(|e| e.event.kind() == "operations_compacted"), "{events:?}");
    // Its log purged behind a snapshot, the leader can only send the cut node that snapshot.
    c.nodes[&leader].change(writ_api::dto::ClusterChange::Snapshot, false).await.expect("snapshot");
    c.nodes[&leader].change(writ_api::dto::ClusterChange::PurgeLog, false).await.expect("purge");
    let status = c.nodes[&leader].status().await;
    assert_eq!(status.purged_index, status.snapshot_index, "the leader's log is purged through its snapshot");
    c.board.heal();
    // The cut node's state machine takes the snapshot before its Raft metrics report it, so the
    // wait covers both: one digest everywhere and the snapshot on the node that was cut off.
    let digest = eventually("every replica at one digest, node cut by snapshot", Duration::from_secs(30), || async {
        let s: Vec<_> = futures::future::join_all(c.nodes.values().map(|n| n.status())).await;
        let first = (s[0].last_applied_index, s[0].state_digest.clone());
        let converged = s.iter().all(|x| (x.last_applied_index, x.state_digest.clone()) == first);
        (converged && c.nodes[&cut].status_view(false).await.snapshot_index.is_some()).then_some(first.1)
    })
    .await;
    for node in c.nodes.values() {
        let a = node.sm.read();
        assert!(a.state.operations.get(&t).is_none_or(|m| m.is_empty()), "node {}: no record in memory", node.id);
        let storage = writ_api::retention::storage(&a.state, &t);
        assert_eq!((storage.operations, storage.bindings), (0, 1), "node {}: the record is a binding", node.id);
        let binding = a.state.operation(&t, "op-1").expect("the binding, read from the node's store");
        assert_eq!(binding.state, writ_api::operation::OperationState::Cancelled, "node {}", node.id);
        assert!(binding.spec.input.is_empty(), "node {}: compacted", node.id);
        assert_eq!(a.state.digest(), digest);
    }
    // A replay through the node that caught up by snapshot answers with the original outcome.
    let mut replay = spec;
    replay.operation_id = "op-1-retry".into();
    replay.deadline_ms += 25 * 3_600_000;
    let Outcome::Applied { operation, .. } = submit(cut, Command::SubmitOperation { tenant_id: t, spec: replay }).await
    else {
        unreachable!()
    };
    let operation = operation.expect("the replay's view");
    assert_eq!(
        (operation.spec.operation_id.as_str(), operation.state),
        ("op-1", writ_api::operation::OperationState::Cancelled)
    );
    c.shutdown().await;
}

/// Pre-vote (SPEC P3, issue 17 step 5): a follower cut off from everyone asks for elections
/// again and again, but only as pre-votes nobody answers, so its term never rises; back on the
/// network it catches up under the same leader and term. Without pre-vote on the wire (openraft's
/// default network grants every pre-vote unasked) it raised its term each time and deposed the
/// healthy leader as soon as it returned.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_isolated_follower_does_not_depose_a_healthy_leader_when_it_returns() {
    writ_tests::init_test_log();
    let c = SimCluster::start(3, 1_700_000_000_000).await;
    let leader = eventually("initial leader", Duration::from_secs(20), || async { c.leader() }).await;
    let term = |id: u64| c.nodes[&id].raft.metrics().borrow_watched().current_term;
    let before = term(leader);
    let cut = *c.nodes.keys().find(|id| **id != leader).expect("a follower");

    c.board.isolate(cut);
    let asked = c.board.votes_asked_by(cut);
    // Two election rounds of the cut node (each asks both peers).
    eventually("the cut follower to try twice to be elected", Duration::from_secs(30), || async {
        (c.board.votes_asked_by(cut) >= asked + 4).then_some(())
    })
    .await;
    assert_eq!(term(cut), before, "a pre-vote nobody granted raised the cut follower's term");
    c.board.heal();

    let command = Command::CreateTenant { tenant_id: "t-back".into(), name: "back".into(), display_name: None };
    let resp = c.nodes[&leader]
        .submit_request(SubmitRequest::new("pre-vote", command), false)
        .await
        .expect("the leader still takes writes");
    eventually("the returned follower to apply the new write", Duration::from_secs(30), || async {
        let applied = c.nodes[&cut].raft.metrics().borrow_watched().last_applied.map(|l| l.index);
        (applied >= Some(resp.log_index)).then_some(())
    })
    .await;
    assert_eq!(c.leader(), Some(leader), "the leader was deposed");
    for id in c.nodes.keys() {
        assert_eq!(term(*id), before, "node {id}'s term moved");
    }
    c.shutdown().await;
}

/// A membership change sent to a leader fresh from its election, before its first entry has
/// committed, waits for that entry instead of being refused as "already undergoing a
/// configuration change" (openraft's answer while the previous membership is not known
/// committed; the CI run that found it had asked right after a single node's bootstrap). While
/// the leader cannot reach a quorum the change is refused as retryable, `LEDGER_UNAVAILABLE`,
/// not as the operator's mistake, `CLUSTER_CHANGE_INVALID`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_membership_change_right_after_an_election_waits_for_the_leaders_first_entry() {
    use writ_api::dto::ClusterChange;
    use writ_api::ReasonCode;
    writ_tests::init_test_log();
    let board = std::sync::Arc::new(writ_tests::sim::Switchboard::default());
    board.cut_appends();
    let c = SimCluster::start_on(board.clone(), 3, 1_700_000_000_000).await;
    let leader = eventually("a leader elected while appends are cut", Duration::from_secs(20), || async {
        c.leader().filter(|id| c.nodes[id].raft.metrics().borrow_watched().current_leader == Some(*id))
    })
    .await;
    let change = || ClusterChange::ChangeMembership { voters: vec![1, 2] };
    let refused = c.nodes[&leader].change(change(), false).await.expect_err("nothing can commit yet");
    assert_eq!(refused.reason, ReasonCode::LEDGER_UNAVAILABLE, "refused as retryable: {}", refused.message);

    board.heal();
    let leader = eventually("a leader after the heal", Duration::from_secs(20), || async { c.leader() }).await;
    c.nodes[&leader].change(change(), false).await.expect("the change waits for the first entry");
    let voters = || {
        c.nodes[&leader]
            .raft
            .metrics()
            .borrow_watched()
            .membership_config
            .membership()
            .voter_ids()
            .collect::<Vec<u64>>()
    };
    assert_eq!(voters(), vec![1, 2], "the change is in effect when it answers");
    c.shutdown().await;
}
