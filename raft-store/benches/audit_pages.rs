//! What a page of a tenant's audit trail costs to read: 1,000 records out of 20,000, held as
//! positions in their events (rendered from the event at each read) and, once the events have
//! left the event log, held whole. Run with `cargo bench -p writ-raft-store --bench audit_pages`.

use criterion::{criterion_group, criterion_main, Criterion};
use openraft::alias::EntryOf;
use openraft::entry::RaftEntry;
use openraft::storage::RaftStateMachine;
use writ_api::audit::AuditFilter;
use writ_api::ledger::{BatchedCommand, Command, LedgerRequest};
use writ_raft_store::state_machine::StateMachine;
use writ_raft_store::TypeConfig;

const T: &str = "tenant-1";
const T0: u64 = 1_700_000_000_000;

fn principal(i: u64) -> BatchedCommand {
    let spec = writ_api::principal::PrincipalSpecV1 {
        principal_id: format!("p-{i:06}"),
        name: format!("agent-{i:06}"),
        kind: writ_api::principal::PrincipalKind::Agent,
        preset: None,
        scopes: Default::default(),
        metadata: [("team".to_string(), "line 3".to_string())].into(),
    };
    BatchedCommand { trace_id: format!("{i:032x}"), command: Command::CreatePrincipal { tenant_id: T.into(), spec } }
}

/// Applies `command` as log entry `index` at ledger time `stamp_ms`.
fn apply(rt: &tokio::runtime::Runtime, sm: &StateMachine, index: u64, stamp_ms: u64, command: Command) {
    let req = LedgerRequest { stamp_ms, trace_id: "bench".into(), command: command.into() };
    let entry = EntryOf::<TypeConfig>::new_normal(openraft::testing::log_id::<TypeConfig>(1, 1, index), req);
    let mut sm = sm.clone();
    rt.block_on(async move { sm.apply(futures::stream::iter([Ok((entry, None))])).await.unwrap() });
}

fn pages(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (_log, sm) = writ_raft_store::open(dir.path()).unwrap();
    apply(&rt, &sm, 1, T0, Command::CreateTenant { tenant_id: T.into(), name: "bench".into(), display_name: None });
    let patch = writ_api::settings::TenantSettingsPatch { audit_max_events: Some(100_000), ..Default::default() };
    apply(&rt, &sm, 2, T0, Command::SetTenantSettings { tenant_id: T.into(), patch });
    for b in 0..20u64 {
        let commands = (0..1000).map(|i| principal(b * 1000 + i)).collect();
        apply(&rt, &sm, 3 + b, T0 + b, Command::Batch { commands });
    }
    let page = |sm: &StateMachine| {
        let (records, _) = sm.audit_page(T, 10_000, 1000, &AuditFilter::default()).unwrap();
        assert_eq!(records.len(), 1000);
        records
    };
    let mut group = c.benchmark_group("a page of 1,000 audit records");
    group.bench_function("held as positions in their events", |b| b.iter(|| page(&sm)));
    // A week on, the events leave the log and the records are written out whole.
    let later = T0 + writ_api::retention::EVENT_LOG_KEPT_MS + 1000;
    let trimmed = sm.read().state.revision;
    for (i, index) in (30..40).enumerate() {
        let tenant_id = format!("other-{i}");
        apply(&rt, &sm, index, later, Command::CreateTenant { tenant_id, name: format!("o-{i}"), display_name: None });
    }
    assert!(sm.read().event_floor > trimmed, "every event of the page left the log");
    group.bench_function("held whole", |b| b.iter(|| page(&sm)));
    group.finish();
}

criterion_group!(benches, pages);
criterion_main!(benches);
