//! What one operation command costs as the tenant's backlog grows (issue 17, step 1): the
//! ledger's execute of an attempt-lease renewal and the reaper's look for due work, with 10 and
//! with 100,000 live operations in the tenant. With indexes instead of scans both stay flat.
//! A second group applies a whole operation (submit, dispatch, start, a report with its blob)
//! as the leader does, building each answer, and as a follower does, building none; and as a
//! follower did before ledger version 16, building and chaining each audit record. A third
//! applies one with a camera frame as base64 and as bytes.
//! Run with `cargo bench -p writ-api --bench operations`.

use std::collections::BTreeMap;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use writ_api::ledger::{Command, LedgerRequest, Outcome};
use writ_api::operation::{payload_hash, OperationSpecV1};
use writ_api::principal::{PrincipalKind, PrincipalSpecV1, RolePreset};
use writ_api::state::LedgerState;
use writ_api::token::TokenRequestV1;

const T: &str = "t-1";
const NOW: u64 = 1_900_000_000_000;
const CATALOG: &str = r#"{"actions": [
  {"id": "move_press", "title": "Move", "description": "Moves a press.", "input_schema": {"type": "object"},
   "risk": "low", "execution": "operation", "device_class": "press.v1", "cost_units": 1},
  {"id": "note", "title": "Note", "description": "Writes a note.", "input_schema": {"type": "object"},
   "risk": "low", "execution": "operation", "cost_units": 1}
]}"#;

fn run(st: &mut LedgerState, command: Command) {
    let (outcome, _) = st.execute(&LedgerRequest { stamp_ms: NOW, trace_id: "b".into(), command: command.into() });
    assert!(matches!(outcome, Outcome::Applied { .. }), "{outcome:?}");
}

fn spec(id: &str, action: &str, device: Option<&str>) -> OperationSpecV1 {
    let input = serde_json::json!({});
    OperationSpecV1 {
        operation_id: id.into(),
        principal_id: "agent".into(),
        authority_ref: "jti-agent".into(),
        action: action.into(),
        payload_hash: payload_hash(&input),
        input: input.to_string(),
        idempotency_key: id.into(),
        deadline_ms: NOW + 3_600_000,
        cost_units: 1,
        cost_ceiling: None,
        device_id: device.map(str::to_string),
        work_ref: None,
        preconditions: BTreeMap::new(),
        trace_id: "b".into(),
        input_requests: BTreeMap::new(),
    }
}

/// A tenant with `backlog` reserved (deviceless) operations waiting, and one operation
/// attempting on device `press` with fencing token 1.
fn setup(backlog: usize) -> LedgerState {
    let mut st = LedgerState::default();
    run(&mut st, Command::CreateTenant { tenant_id: T.into(), name: "bench".into(), display_name: None });
    let spec_p = PrincipalSpecV1 {
        principal_id: "agent".into(),
        name: "agent".into(),
        kind: PrincipalKind::Agent,
        preset: Some(RolePreset::Full),
        scopes: Default::default(),
        metadata: Default::default(),
    };
    run(&mut st, Command::CreatePrincipal { tenant_id: T.into(), spec: spec_p });
    let request = TokenRequestV1 {
        jti: "jti-agent".into(),
        principal_id: "agent".into(),
        scopes: Default::default(),
        ttl_s: 24 * 3600,
        parent_jti: None,
    };
    run(&mut st, Command::IssueToken { tenant_id: T.into(), request });
    run(
        &mut st,
        Command::CreateSite { tenant_id: T.into(), site_id: "s".into(), name: "plant".into(), display_name: None },
    );
    run(
        &mut st,
        Command::CreateDevice {
            tenant_id: T.into(),
            device_id: "press".into(),
            site_id: "s".into(),
            name: "press".into(),
            device_class: "press.v1".into(),
        },
    );
    let catalog = writ_api::catalog::compile(CATALOG.as_bytes()).expect("catalog");
    run(&mut st, Command::PublishCatalog { tenant_id: T.into(), catalog });
    for i in 0..backlog {
        run(&mut st, Command::SubmitOperation { tenant_id: T.into(), spec: spec(&format!("n-{i:06}"), "note", None) });
    }
    run(&mut st, Command::SubmitOperation { tenant_id: T.into(), spec: spec("m", "move_press", Some("press")) });
    run(&mut st, Command::DispatchOperation { tenant_id: T.into(), operation_id: "m".into(), executor_id: "x".into() });
    let start = Command::StartAttempt {
        tenant_id: T.into(),
        operation_id: "m".into(),
        executor_id: "x".into(),
        fencing_token: 1,
        lease_ms: 60_000,
    };
    run(&mut st, start);
    assert_eq!(st.live_operations[T].len(), backlog + 1);
    st
}

fn backlog(c: &mut Criterion) {
    let mut group = c.benchmark_group("operation command by live backlog");
    // WRIT_BENCH_BACKLOG="10,10000" measures other sizes (building 100,000 live operations
    // through the ledger takes minutes where each command still scans them).
    let sizes = std::env::var("WRIT_BENCH_BACKLOG").unwrap_or_else(|_| "10,100000".into());
    for n in sizes.split(',').filter_map(|n| n.trim().parse::<usize>().ok()) {
        let mut st = setup(n);
        let renew = Command::RenewAttemptLease {
            tenant_id: T.into(),
            operation_id: "m".into(),
            fencing_token: 1,
            lease_ms: 60_000,
        };
        group.bench_with_input(BenchmarkId::new("execute renew_attempt_lease", n), &n, |b, _| {
            b.iter(|| run(&mut st, renew.clone()))
        });
        group.bench_with_input(BenchmarkId::new("reaper: due work of the tenant", n), &n, |b, _| {
            b.iter(|| writ_api::decide::operation::due(&st, T, NOW).len())
        });
    }
    group.finish();
}

/// How an operation's report carries its blob: the blob, and its base64 (`None`: as bytes).
#[derive(Clone, Copy)]
struct Report {
    frame: &'static [u8],
    base64: Option<&'static str>,
}

/// What an edge sends: a short text blob, as bytes.
const TEXT_REPORT: Report = Report { frame: b"moved to 3", base64: None };

/// One operation's commands on device `arm`, each through `execute` (the leader's, answered, or
/// a follower's).
fn one_operation(st: &mut LedgerState, i: u64, execute: fn(&mut LedgerState, &LedgerRequest) -> Outcome, r: Report) {
    let id = format!("w-{i}");
    let apply = |st: &mut LedgerState, command: Command| {
        let req = LedgerRequest { stamp_ms: NOW, trace_id: "b".into(), command: command.into() };
        let outcome = execute(st, &req);
        assert!(matches!(outcome, Outcome::Applied { .. }), "{outcome:?}");
    };
    apply(st, Command::SubmitOperation { tenant_id: T.into(), spec: spec(&id, "move_press", Some("arm")) });
    apply(st, Command::DispatchOperation { tenant_id: T.into(), operation_id: id.clone(), executor_id: "x".into() });
    let fencing_token = st.operation(T, &id).and_then(|o| o.fencing_token).expect("reserved");
    let start = Command::StartAttempt {
        tenant_id: T.into(),
        operation_id: id.clone(),
        executor_id: "x".into(),
        fencing_token,
        lease_ms: 60_000,
    };
    apply(st, start);
    let (tenant_id, operation_id, mime_type) = (T.to_string(), id.clone(), "text/plain".to_string());
    let outcome = writ_api::operation::AttemptOutcome::Effect;
    let evidence = writ_api::operation::EvidenceV1 {
        content_hash: writ_api::sha256_hex(r.frame),
        evidence_return_ref: String::new(),
        summary: "moved".into(),
    };
    let report = match r.base64 {
        Some(text) => {
            let content = writ_api::evidence::EvidenceContentV1 { mime_type, content_base64: text.to_string() };
            Command::ReportAttemptV2 { tenant_id, operation_id, fencing_token, outcome, evidence, content }
        }
        None => {
            let content = writ_api::evidence::EvidenceBytesV1 { mime_type, bytes: r.frame.to_vec() };
            Command::ReportAttemptV3 { tenant_id, operation_id, fencing_token, outcome, evidence, content }
        }
    };
    apply(st, report);
}

fn applied(c: &mut Criterion) {
    let mut group = c.benchmark_group("an operation's commands applied");
    let device = Command::CreateDevice {
        tenant_id: T.into(),
        device_id: "arm".into(),
        site_id: "s".into(),
        name: "arm".into(),
        device_class: "press.v1".into(),
    };
    let answered: fn(&mut LedgerState, &LedgerRequest) -> Outcome = |st, req| st.execute_audited(req).0;
    let unanswered: fn(&mut LedgerState, &LedgerRequest) -> Outcome = |st, req| st.execute_unanswered(req).0;
    let cases = [
        ("by the leader (answered)", answered, 16),
        ("by a follower (unanswered)", unanswered, 16),
        ("by a follower (unanswered), each record built and chained (before ledger version 16)", unanswered, 0),
    ];
    for (name, execute, version) in cases {
        let mut st = setup(10);
        run(&mut st, device.clone());
        if version > 0 {
            run(&mut st, Command::RaiseLedgerVersion { version });
        }
        let mut i = 0;
        group.bench_function(name, |b| {
            b.iter(|| {
                i += 1;
                one_operation(&mut st, i, execute, TEXT_REPORT)
            })
        });
    }
    group.finish();
}

/// A follower applying an operation whose report carries a camera frame (18 KiB, the size of
/// the soak's simulated camera's PNG) as base64 (before ledger version 20) and as its bytes.
fn frames(c: &mut Criterion) {
    static FRAME: std::sync::LazyLock<Vec<u8>> =
        std::sync::LazyLock::new(|| (0..18 * 1024).map(|i: u32| (i.wrapping_mul(2_654_435_761) >> 24) as u8).collect());
    static BASE64: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| writ_api::evidence::to_base64(&FRAME));
    let mut group = c.benchmark_group("an operation with a camera frame applied by a follower");
    let unanswered: fn(&mut LedgerState, &LedgerRequest) -> Outcome = |st, req| st.execute_unanswered(req).0;
    for (name, as_bytes) in [("frame as base64", false), ("frame as bytes", true)] {
        let mut st = setup(10);
        run(&mut st, Command::RaiseLedgerVersion { version: 16 });
        run(
            &mut st,
            Command::CreateDevice {
                tenant_id: T.into(),
                device_id: "arm".into(),
                site_id: "s".into(),
                name: "arm".into(),
                device_class: "press.v1".into(),
            },
        );
        let report = Report { frame: FRAME.as_slice(), base64: (!as_bytes).then_some(BASE64.as_str()) };
        // Back to the start before the tenant's evidence quota would refuse the frames.
        let (base, mut i) = (st.clone(), 0);
        let full = |st: &LedgerState| st.cold.tenants.get(T).map_or(0, |c| c.evidence_bytes) > 128 << 20;
        group.bench_function(name, |b| {
            b.iter(|| {
                i += 1;
                if full(&st) {
                    st = base.clone();
                }
                one_operation(&mut st, i, unanswered, report)
            })
        });
    }
    group.finish();
}

criterion_group!(benches, backlog, applied, frames);
criterion_main!(benches);
