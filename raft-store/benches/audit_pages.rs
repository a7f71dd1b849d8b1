//! What a page of a tenant's audit trail costs to read: 1,000 records out of 30,000, held as
//! positions in their events (rendered from the event at each read) — a record per event, or
//! all of one event's (an edge's batch of a thousand request decisions) — and, once the events
//! have left the event log, held whole. Run with `cargo bench -p writ-raft-store --bench audit_pages`.

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

/// A thousand request decisions of one edge's batch, by principal `p-000000`.
fn decisions(batch: u64) -> Command {
    let decisions = (0..1000)
        .map(|i| writ_api::audit::RequestDecisionV1 {
            trace_id: format!("{:032x}", batch * 1000 + i),
            principal_id: "p-000000".into(),
            token_id: Some("jti-1".into()),
            parent_token_id: None,
            method: "tools/call".into(),
            name: Some("press".into()),
            outcome: "allowed".into(),
            reason: None,
        })
        .collect();
    Command::RecordDecisions { tenant_id: T.into(), decisions }
}

fn principal(i: u64) -> BatchedCommand {
    let spec = writ_api::principal::PrincipalSpecV1 {
        principal_id: format!("p-{i:06}"),
        name: format!("agent-{i:06}"),
        kind: writ_api::principal::PrincipalKind::Agent,
        preset: Some(writ_api::principal::RolePreset::Full),
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
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (_log, sm) = writ_raft_store::open(dir.path()).unwrap();
    apply(&rt, &sm, 1, T0, Command::CreateTenant { tenant_id: T.into(), name: "bench".into(), display_name: None });
    let patch = writ_api::settings::TenantSettingsPatch { audit_max_events: Some(100_000), ..Default::default() };
    apply(&rt, &sm, 2, T0, Command::SetTenantSettings { tenant_id: T.into(), patch });
    for b in 0..20u64 {
        let commands = (0..1000).map(|i| principal(b * 1000 + i)).collect();
        apply(&rt, &sm, 3 + b, T0 + b, Command::Batch { commands });
    }
    for b in 0..10u64 {
        apply(&rt, &sm, 23 + b, T0 + 20 + b, decisions(b));
    }
    let page_after = |sm: &StateMachine, after: u64| {
        let (records, _) = sm.audit_page(T, after, 1000, &AuditFilter::default()).unwrap();
        assert_eq!(records.len(), 1000);
        records
    };
    let page = |sm: &StateMachine| page_after(sm, 10_000);
    let mut group = c.benchmark_group("a page of 1,000 audit records");
    group.bench_function("held as positions in their events", |b| b.iter(|| page(&sm)));
    group.bench_function("held as positions in one event", |b| b.iter(|| page_after(&sm, 25_000)));
    // A week on, the events leave the log and the records are written out whole.
    // The event log's retention runs beside the applies, as on a node.
    let later = T0 + writ_api::retention::EVENT_LOG_KEPT_MS + 1000;
    let trimmed = sm.read().state.revision;
    sm.spawn_event_log_retention().unwrap();
    for (i, index) in (40..50).enumerate() {
        let tenant_id = format!("other-{i}");
        apply(&rt, &sm, index, later, Command::CreateTenant { tenant_id, name: format!("o-{i}"), display_name: None });
    }
    rt.block_on(async {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(300);
        while sm.read().event_floor <= trimmed {
            assert!(std::time::Instant::now() < deadline, "the event log's retention did not reach the page");
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    });
    group.bench_function("held whole", |b| b.iter(|| page(&sm)));
    group.finish();
}

criterion_group!(benches, pages);
criterion_main!(benches);
