//! Group commit: every append is reported flushed only after a WAL sync, and a burst of
//! appends shares syncs instead of paying one each.

use openraft::alias::EntryOf;
use openraft::entry::RaftEntry;
use openraft::storage::{IOFlushed, RaftLogStorage};
use openraft::testing::log_id;
use openraft::type_config::TypeConfigExt;
use writ_api::ledger::{Command, LedgerRequest};
use writ_raft_store::TypeConfig;

#[test]
fn a_burst_of_appends_shares_wal_syncs_and_all_are_acknowledged() {
    TypeConfig::run(async {
        let dir = tempfile::tempdir().expect("tempdir");
        let (mut log, _sm) = writ_raft_store::open(dir.path()).expect("open");
        const APPENDS: u64 = 200;
        let mut acks = Vec::new();
        for index in 1..=APPENDS {
            let req = LedgerRequest {
                stamp_ms: index,
                trace_id: format!("t{index}"),
                command: Command::ResumeTenant { tenant_id: format!("t-{index}") }.into(),
            };
            let entry = EntryOf::<TypeConfig>::new_normal(log_id::<TypeConfig>(1, 1, index), req);
            let (tx, rx) = TypeConfig::oneshot();
            log.append([entry], IOFlushed::signal(tx)).await.expect("append");
            acks.push(rx);
        }
        for rx in acks {
            rx.await.expect("callback delivered").expect("flushed without error");
        }
        let (appends, syncs) = log.flush_stats();
        eprintln!("group commit: {appends} appends made durable by {syncs} WAL syncs");
        assert_eq!(appends, APPENDS, "every append passed through the flusher");
        assert!((1..APPENDS).contains(&syncs), "{syncs} WAL syncs for {APPENDS} appends: no grouping");
        // What was acknowledged is readable back.
        let state = log.get_log_state().await.expect("log state");
        assert_eq!(state.last_log_id.map(|l| l.index()), Some(APPENDS));
    });
}
