//! What one retention entry's apply costs on a node's store: a tenant's finished operations
//! seeded in bulk (`writ node seed`: each one's admitted submission, dispatch, audited start and
//! effect report through the state machine's own apply), then `ApplyRetentionV2` entries stamped
//! three days later applied one by one, each compacting reported operations and releasing
//! bindings (`writ_api::retention::retired_per_entry` of each at most), as the leader's reaper
//! submits them once retention comes due. Every replica applies each entry while it holds the
//! state, so this time is what every write and read that needs the state waits behind.
//!
//! Run with `cargo bench -p writ-node --bench retention_apply` (`RETENTION_BENCH_OPS`
//! operations, 200,000 unless set; the ledger version in force `RETENTION_BENCH_VERSION`, the
//! newest unless set, which sizes the entries). Prints each entry's apply time and their
//! summary.

use std::time::{Duration, Instant};

use writ_api::ledger::{Command, LedgerRequest};

const TENANT: &str = "bench";
/// Past one horizon (compaction) and two (release) of the default day of retention.
const AHEAD_MS: u64 = 3 * 24 * 3600 * 1000;

#[tokio::main]
async fn main() {
    let knob = |name: &str| std::env::var(name).ok().and_then(|v| v.parse::<u64>().ok());
    let operations = knob("RETENTION_BENCH_OPS").unwrap_or(200_000);
    let version = knob("RETENTION_BENCH_VERSION")
        .map_or(writ_api::ledger::LEDGER_VERSION, |v| u32::try_from(v).expect("a ledger version"));
    let dir = tempfile::tempdir().unwrap();
    first_entry(dir.path()).await;
    let started = Instant::now();
    writ_node::seed::seed(dir.path(), TENANT, operations, None, &[]).await.unwrap();
    println!("seeded {operations} operations in {:.1} s", started.elapsed().as_secs_f64());

    let stamp = writ_client::now_ms() + AHEAD_MS;
    let mut applies: Vec<Duration> = Vec::new();
    let mut last: Option<Instant> = None;
    let mut raised = false;
    writ_raft_store::bulk::grow(dir.path(), |state| {
        if let Some(at) = last.take() {
            applies.push(at.elapsed());
        }
        let command = if !raised {
            raised = true;
            Command::RaiseLedgerVersion { version }
        } else if writ_api::retention::next_due(state, TENANT, true).is_some_and(|at| at <= stamp) {
            last = Some(Instant::now());
            Command::ApplyRetentionV2 { tenant_id: TENANT.into() }
        } else {
            return None;
        };
        Some(vec![LedgerRequest { stamp_ms: stamp, trace_id: String::new(), command: command.into() }])
    })
    .await
    .unwrap();
    println!(
        "ledger version {version}, {} records of each kind per entry at most",
        writ_api::retention::retired_per_entry(version)
    );
    report(&applies);
}

/// What a new member's first start leaves: one entry in its log, committed (the seeding applies
/// it first, then grows the ledger as it grows a stopped cluster's).
async fn first_entry(dir: &std::path::Path) {
    use openraft::entry::RaftEntry;
    use openraft::storage::{IOFlushed, RaftLogStorage};
    let (mut log, _sm) = writ_raft_store::open(dir).unwrap();
    let log_id = openraft::testing::log_id::<writ_raft_store::TypeConfig>(1, 1, 1);
    let entry = openraft::alias::EntryOf::<writ_raft_store::TypeConfig>::new_blank(log_id);
    log.append([entry], IOFlushed::noop()).await.unwrap();
    log.save_committed(Some(log_id)).await.unwrap();
}

fn report(applies: &[Duration]) {
    let ms = |d: &Duration| d.as_secs_f64() * 1000.0;
    for (i, d) in applies.iter().enumerate() {
        println!("entry {i:4}: {:8.1} ms", ms(d));
    }
    let mut sorted: Vec<f64> = applies.iter().map(ms).collect();
    sorted.sort_by(f64::total_cmp);
    let mean = sorted.iter().sum::<f64>() / sorted.len() as f64;
    let at = |q: f64| sorted[((sorted.len() - 1) as f64 * q).round() as usize];
    println!(
        "retention entries: {} · mean {mean:.1} ms · p50 {:.1} · p90 {:.1} · max {:.1}",
        sorted.len(),
        at(0.5),
        at(0.9),
        at(1.0)
    );
}
