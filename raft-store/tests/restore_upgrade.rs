//! A backup of state format 16, as a node of that format wrote it (its cold rows as records
//! beside a state that holds none), restores into a node of this build with the upgrade's
//! rows in its store: an operation whose reported effect waits for a decision gets the time row
//! format 17 added, so retention can find it, and the restored state is the one this build
//! folds from the same commands.

use std::collections::BTreeMap;
use std::io::Cursor;

use writ_api::backup::{read_backup, BackupWriter, FRAME_BYTES_MAX, FRAME_COLD};
use writ_api::cold::Row;
use writ_api::ledger::{Command, LedgerRequest, Outcome};
use writ_api::operation::{payload_hash, AttemptOutcome, OperationSpecV1, OperationState};
use writ_api::principal::{PrincipalKind, PrincipalSpecV1, RolePreset};
use writ_api::state::LedgerState;
use writ_api::token::TokenRequestV1;

const T: &str = "t-1";
const NOW: u64 = 1_900_000_000_000;
const CATALOG: &str = r#"{"actions": [
  {"id": "move_press", "title": "Move", "description": "Moves a press.", "input_schema": {"type": "object"},
   "risk": "low", "execution": "operation", "device_class": "press.v1", "cost_units": 1}
]}"#;

fn run(st: &mut LedgerState, at_ms: u64, command: Command) {
    let (outcome, _) = st.execute(&LedgerRequest { stamp_ms: at_ms, trace_id: "r".into(), command: command.into() });
    assert!(matches!(outcome, Outcome::Applied { .. }), "{outcome:?}");
}

/// A tenant whose one operation reported its effect at `NOW + 3` and waits for a decision.
fn reported_effect() -> LedgerState {
    let mut st = LedgerState::default();
    run(&mut st, NOW, Command::CreateTenant { tenant_id: T.into(), name: "plant".into(), display_name: None });
    let agent = PrincipalSpecV1 {
        principal_id: "agent".into(),
        name: "agent".into(),
        kind: PrincipalKind::Agent,
        preset: Some(RolePreset::Full),
        scopes: Default::default(),
        metadata: Default::default(),
    };
    run(&mut st, NOW, Command::CreatePrincipal { tenant_id: T.into(), spec: agent });
    let request = TokenRequestV1 {
        jti: "jti-agent".into(),
        principal_id: "agent".into(),
        scopes: Default::default(),
        ttl_s: 3600,
        parent_jti: None,
    };
    run(&mut st, NOW, Command::IssueToken { tenant_id: T.into(), request });
    let site =
        Command::CreateSite { tenant_id: T.into(), site_id: "s".into(), name: "site".into(), display_name: None };
    run(&mut st, NOW, site);
    let device = Command::CreateDevice {
        tenant_id: T.into(),
        device_id: "press".into(),
        site_id: "s".into(),
        name: "press".into(),
        device_class: "press.v1".into(),
    };
    run(&mut st, NOW, device);
    let catalog = writ_api::catalog::compile(CATALOG.as_bytes()).expect("catalog");
    run(&mut st, NOW, Command::PublishCatalog { tenant_id: T.into(), catalog });
    let input = serde_json::json!({"to": 3});
    let spec = OperationSpecV1 {
        operation_id: "op-1".into(),
        principal_id: "agent".into(),
        authority_ref: "jti-agent".into(),
        action: "move_press".into(),
        payload_hash: payload_hash(&input),
        input: input.to_string(),
        idempotency_key: "k-1".into(),
        deadline_ms: NOW + 3_600_000,
        cost_units: 1,
        cost_ceiling: None,
        device_id: Some("press".into()),
        work_ref: None,
        preconditions: BTreeMap::new(),
        trace_id: "r".into(),
        input_requests: BTreeMap::new(),
    };
    run(&mut st, NOW + 1, Command::SubmitOperation { tenant_id: T.into(), spec });
    let op = || "op-1".to_string();
    run(
        &mut st,
        NOW + 2,
        Command::DispatchOperation { tenant_id: T.into(), operation_id: op(), executor_id: "x".into() },
    );
    let start = Command::StartAttempt {
        tenant_id: T.into(),
        operation_id: op(),
        executor_id: "x".into(),
        fencing_token: 1,
        lease_ms: 60_000,
    };
    run(&mut st, NOW + 2, start);
    let report = Command::ReportAttempt {
        tenant_id: T.into(),
        operation_id: op(),
        fencing_token: 1,
        outcome: AttemptOutcome::Effect,
        evidence: None,
    };
    run(&mut st, NOW + 3, report);
    assert_eq!(st.operation(T, "op-1").map(|o| o.state), Some(OperationState::EffectReported));
    st
}

/// A backup of `state`, its rows written by `records` (each `(kind, key, value)`), the state in
/// `versioned` bytes.
fn backup(state: &LedgerState, versioned: &[u8], records: &[(u8, Vec<u8>, Vec<u8>)]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut w = BackupWriter::begin_encoded(&mut out, 1, 1, state, versioned, FRAME_BYTES_MAX as usize).unwrap();
    for (kind, key, value) in records {
        w.record(*kind, key, value).unwrap();
    }
    w.end().unwrap();
    out
}

#[test]
fn a_format_16_backup_restores_with_its_reported_effects_indexed() {
    let today = reported_effect();
    let reported = Row::Reported(NOW + 3, "op-1");
    assert!(today.cold.get(T, reported).is_some(), "this build writes the time row");

    // What a node of format 16 held: the same state without the time row, its rows in its store.
    let mut v16 = today.clone();
    let revision = v16.revision;
    v16.cold.put(T, reported, revision, Some(&[]), None);
    assert_ne!(v16.digest(), today.digest(), "the digest covers the row");
    let dirs = tempfile::tempdir().unwrap();
    let (old, new) = (dirs.path().join("old"), dirs.path().join("new"));
    writ_raft_store::backup::restore(&old, Cursor::new(backup(&v16, &v16.encode_versioned(), &[]))).unwrap();
    let (_log, node) = writ_raft_store::open(&old).unwrap();
    let held = node.read().state.clone();
    assert!(held.cold.pending_rows().is_empty(), "the node's rows are in its store");
    assert!(held.cold.get(T, reported).is_none());
    assert_eq!(held.digest(), v16.digest());

    // Its backup in format 16: the state's bytes as that format wrote them, the rows as records.
    let mut written = Vec::new();
    node.write_backup(1, &mut written).unwrap();
    let mut rows = Vec::new();
    read_backup(Cursor::new(&written), |kind, key, value| {
        if kind == FRAME_COLD {
            rows.push((kind, key.to_vec(), value.to_vec()));
        }
        Ok(())
    })
    .unwrap();
    assert!(!rows.is_empty());
    let format_16 = held.encode_format_16();
    assert_eq!(writ_api::format::unwrap(writ_api::format::STATE_MAGIC, &format_16).unwrap().0, 16);
    drop(node);

    let summary = writ_raft_store::backup::restore(&new, Cursor::new(backup(&held, &format_16, &rows))).unwrap();
    assert_eq!(summary.cold_rows, rows.len() as u64);
    let (_log, restored) = writ_raft_store::open(&new).unwrap();
    let state = &restored.read().state;
    assert!(state.cold.pending_rows().is_empty(), "the upgrade's rows went to the store");
    assert!(state.cold.get(T, reported).is_some(), "the reported effect is indexed for retention");
    assert_eq!(state.digest(), today.digest(), "the state this build folds from the same commands");
    assert_eq!(writ_api::retention::next_due(state, T, true), writ_api::retention::next_due(&today, T, true));
}
