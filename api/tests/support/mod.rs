//! The operation tests' shared fixture: a tenant with principals, tokens, devices, a catalog
//! and two enrolled executors, the commands of an operation's life, and the invariants every
//! reached state must keep (used by the property test and by the simulation).
#![allow(dead_code)]

use std::collections::BTreeMap;

use writ_api::ledger::{Command, LedgerRequest, Outcome};
use writ_api::operation::{payload_hash, AttemptOutcome, EvidenceV1, Operation, OperationSpecV1, OperationState};
use writ_api::principal::{PrincipalKind, PrincipalSpecV1, RolePreset};
use writ_api::state::LedgerState;
use writ_api::token::TokenRequestV1;
use writ_api::ReasonCode;

pub const T: &str = "t-1";
pub const LEASE: u64 = 1_000;

pub struct Ledger {
    pub state: LedgerState,
    pub now: u64,
}

impl Ledger {
    pub fn new() -> Ledger {
        let mut l = Ledger { state: LedgerState::default(), now: 1_000_000 };
        l.ok(Command::CreateTenant { tenant_id: T.into(), name: "acme".into(), display_name: None });
        for p in ["agent", "other-agent", "observer"] {
            let spec = PrincipalSpecV1 {
                principal_id: p.into(),
                name: p.into(),
                kind: PrincipalKind::Agent,
                preset: Some(RolePreset::Full),
                scopes: Default::default(),
                metadata: Default::default(),
            };
            l.ok(Command::CreatePrincipal { tenant_id: T.into(), spec });
        }
        let site = Command::CreateSite {
            tenant_id: T.into(),
            site_id: "s-1".into(),
            name: "plant".into(),
            display_name: None,
        };
        l.ok(site);
        for d in ["press", "arm"] {
            l.ok(Command::CreateDevice {
                tenant_id: T.into(),
                device_id: d.into(),
                site_id: "s-1".into(),
                name: d.into(),
                device_class: "press.v1".into(),
            });
        }
        let catalog = writ_api::catalog::compile(CATALOG.as_bytes()).expect("catalog");
        l.ok(Command::PublishCatalog { tenant_id: T.into(), catalog });
        // Every principal acts through a token the ledger issued (the re-check of SPEC S3).
        for p in ["agent", "other-agent", "observer"] {
            l.issue_token(&format!("jti-{p}"), p, &[]);
        }
        // Executors: x-1 drives both devices, x-press only the press.
        let ca = writ_api::device::ExecutorCaV1 { fingerprint: writ_api::sha256_hex(b"ca"), cert_der: b"ca".to_vec() };
        l.ok(Command::RegisterExecutorCa { tenant_id: T.into(), ca: ca.clone() });
        for (x, devices) in [("x-1", &["press", "arm"][..]), ("x-press", &["press"][..])] {
            let enrollment = writ_api::device::EnrollmentV1 {
                enrollment_id: format!("e-{x}"),
                site_id: "s-1".into(),
                device_ids: devices.iter().map(|d| d.to_string()).collect(),
                token_sha256: writ_api::sha256_hex(x.as_bytes()),
                ttl_s: 60,
            };
            l.ok(Command::CreateEnrollment { tenant_id: T.into(), enrollment });
            let cert = writ_api::device::ExecutorCertV1 {
                executor_id: x.into(),
                fingerprint: writ_api::sha256_hex(format!("cert-{x}").as_bytes()),
                serial: "01".into(),
                not_after_ms: l.now + 86_400_000,
                ca_fingerprint: ca.fingerprint.clone(),
            };
            l.ok(Command::CompleteEnrollment {
                tenant_id: T.into(),
                enrollment_id: format!("e-{x}"),
                token_sha256: writ_api::sha256_hex(x.as_bytes()),
                cert,
            });
        }
        l
    }

    /// Issues a day-long token `jti` to `principal`, with `scopes` (none: the principal's own).
    pub fn issue_token(&mut self, jti: &str, principal: &str, scopes: &[&str]) {
        let request = TokenRequestV1 {
            jti: jti.into(),
            principal_id: principal.into(),
            scopes: scopes.iter().map(|s| s.to_string()).collect(),
            ttl_s: 24 * 3600,
            parent_jti: None,
        };
        self.ok(Command::IssueToken { tenant_id: T.into(), request });
    }

    pub fn run(&mut self, command: Command) -> Outcome {
        let req = LedgerRequest { stamp_ms: self.now, trace_id: "tr".into(), command: command.into() };
        self.state.execute(&req).0
    }

    pub fn ok(&mut self, command: Command) -> usize {
        match self.run(command) {
            Outcome::Applied { events, .. } => events.len(),
            other => panic!("expected success, got {other:?}"),
        }
    }

    pub fn refused(&mut self, command: Command) -> ReasonCode {
        match self.run(command) {
            Outcome::Rejected { reason, .. } => reason,
            other => panic!("expected a rejection, got {other:?}"),
        }
    }

    pub fn op(&self, id: &str) -> Operation {
        self.state.operation(T, id).expect("the operation exists").into_owned()
    }
}

/// The test tenant's catalog: a device action, a deviceless one, a dear one, one proposed first
/// (dry run), a critical one and a read.
pub const CATALOG: &str = r#"{"actions": [
  {"id": "move_press", "title": "Move", "description": "Moves a press.", "input_schema": {"type": "object"},
   "risk": "low", "execution": "operation", "device_class": "press.v1", "cost_units": 1},
  {"id": "note", "title": "Note", "description": "Writes a note.", "input_schema": {"type": "object"},
   "risk": "low", "execution": "operation", "cost_units": 1},
  {"id": "dear_note", "title": "Dear note", "description": "Writes an expensive note.",
   "input_schema": {"type": "object"}, "risk": "low", "execution": "operation", "cost_units": 9},
  {"id": "careful_note", "title": "Careful note", "description": "A note that is proposed first.",
   "input_schema": {"type": "object", "properties": {"p": {"type": "integer"}}}, "risk": "low",
   "execution": "operation", "dry_run": true, "cost_units": 1},
  {"id": "crush", "title": "Crush", "description": "Crushes with a press; needs another principal's approval.",
   "input_schema": {"type": "object"}, "risk": "critical", "execution": "operation", "device_class": "press.v1",
   "cost_units": 1},
  {"id": "read_press", "title": "Read", "description": "Reads a press through its executor.",
   "input_schema": {"type": "object"}, "risk": "low", "execution": "read", "device_class": "press.v1", "cost_units": 1}
]}"#;

pub fn spec(
    id: &str,
    key: &str,
    payload: serde_json::Value,
    device: Option<&str>,
    deadline_ms: u64,
) -> OperationSpecV1 {
    OperationSpecV1 {
        operation_id: id.into(),
        principal_id: "agent".into(),
        authority_ref: "jti-agent".into(),
        action: if device.is_some() { "move_press" } else { "note" }.into(),
        payload_hash: payload_hash(&payload),
        input: payload.to_string(),
        idempotency_key: key.into(),
        deadline_ms,
        cost_units: 1,
        cost_ceiling: Some(5),
        device_id: device.map(str::to_string),
        work_ref: None,
        preconditions: BTreeMap::new(),
        trace_id: "tr".into(),
        input_requests: BTreeMap::new(),
    }
}

/// Submits `s` under its principal's token.
pub fn submit(mut s: OperationSpecV1) -> Command {
    s.authority_ref = format!("jti-{}", s.principal_id);
    Command::SubmitOperation { tenant_id: T.into(), spec: s }
}

/// Proposes `s` (a dry run) as proposal `proposal_id`, under its principal's token.
pub fn propose(proposal_id: &str, mut s: OperationSpecV1) -> Command {
    s.authority_ref = format!("jti-{}", s.principal_id);
    s.operation_id = proposal_id.into();
    Command::ProposeOperation { tenant_id: T.into(), spec: s }
}

/// Submits `s` with the proposal `proposal_id`, under its principal's token.
pub fn submit_proposed(proposal_id: &str, mut s: OperationSpecV1) -> Command {
    s.authority_ref = format!("jti-{}", s.principal_id);
    Command::SubmitProposed { tenant_id: T.into(), proposal_id: proposal_id.into(), spec: s }
}

pub fn dispatch(id: &str) -> Command {
    Command::DispatchOperation { tenant_id: T.into(), operation_id: id.into(), executor_id: "x-1".into() }
}

pub fn start(id: &str, fencing_token: u64) -> Command {
    Command::StartAttempt {
        tenant_id: T.into(),
        operation_id: id.into(),
        executor_id: "x-1".into(),
        fencing_token,
        lease_ms: LEASE,
    }
}

/// `executor`'s start of `id` (its claim, when the operation waits in `reserved`).
pub fn start_by(executor: &str, id: &str, fencing_token: u64) -> Command {
    Command::StartAttempt {
        tenant_id: T.into(),
        operation_id: id.into(),
        executor_id: executor.into(),
        fencing_token,
        lease_ms: LEASE,
    }
}

pub fn cancel(id: &str) -> Command {
    Command::CancelOperation { tenant_id: T.into(), operation_id: id.into(), by_principal_id: "agent".into() }
}

pub fn report(id: &str, fencing_token: u64, outcome: AttemptOutcome) -> Command {
    let evidence =
        EvidenceV1 { content_hash: "ab".repeat(32), evidence_return_ref: "s3://ev/1".into(), summary: "moved".into() };
    Command::ReportAttempt {
        tenant_id: T.into(),
        operation_id: id.into(),
        fencing_token,
        outcome,
        evidence: Some(evidence),
    }
}

/// Every operation of `tenant_id`, live or not, in id order.
pub fn all_ops(state: &LedgerState, tenant_id: &str) -> Vec<Operation> {
    let (mut out, mut after) = (Vec::new(), None);
    loop {
        let (page, next) = state.list_operations(tenant_id, &Default::default(), after.as_deref(), 1000);
        out.extend(page);
        match next {
            Some(n) => after = Some(n),
            None => return out,
        }
    }
}

/// The operation invariants over a state; each violation as a sentence.
pub fn invariant_violations(state: &LedgerState) -> Vec<String> {
    let mut violations = Vec::new();
    let mut by_state: BTreeMap<String, BTreeMap<OperationState, u64>> = BTreeMap::new();
    for op in state.tenants.keys().flat_map(|t| all_ops(state, t)) {
        *by_state.entry(op.tenant_id.clone()).or_default().entry(op.state).or_default() += 1;
    }
    if by_state != state.operations_by_state() {
        violations.push(format!("operations by state {:?}, counted {:?}", by_state, state.operations_by_state()));
    }
    let ops = all_ops(state, T);
    // A tenant's cold rows are keyed by when it was created, whatever path a replica took.
    for (id, tenant) in &state.tenants {
        let incarnation = state.cold.tenants.get(id).map(|c| c.incarnation);
        if incarnation != Some(tenant.created_at_ms) {
            violations.push(format!("{id}'s cold rows are under {incarnation:?}, not {}", tenant.created_at_ms));
        }
    }
    let proposals = state.proposals.get(T).into_iter().flat_map(|m| m.values());
    let mut by_principal: BTreeMap<&str, usize> = BTreeMap::new();
    for p in proposals {
        *by_principal.entry(&p.principal_id).or_default() += 1;
    }
    if let Some((p, n)) = by_principal.iter().find(|(_, n)| **n > writ_api::operation::PROPOSALS_PER_PRINCIPAL_MAX) {
        violations.push(format!("{p} holds {n} proposals"));
    }
    for op in &ops {
        if op.attempts > 1 {
            violations.push(format!("attempted {} times: {op:?}", op.attempts));
        }
        if op.state == OperationState::Expired && op.attempts != 0 {
            violations.push(format!("expired after an attempt: {op:?}"));
        }
        // A cancelled operation was never attempted, unless the cancellation was asked for
        // during the attempt and the executor then reported no effect.
        if op.state == OperationState::Cancelled && op.attempts != 0 && !op.cancel_requested {
            violations.push(format!("cancelled after an attempt nobody asked to cancel: {op:?}"));
        }
        let live = op.state.is_waiting() || op.state == OperationState::Attempting;
        let indexed = state.live_operations.get(T).is_some_and(|s| s.contains(&op.spec.operation_id));
        if live != indexed {
            violations.push(format!("live index out of step: {op:?}"));
        }
    }
    // Each operation no longer live has the time row retention walks and its place in the
    // operator's queue exactly as its record says.
    for op in &ops {
        use writ_api::cold::{ColdOperation, Row};
        let id = op.spec.operation_id.as_str();
        let Some(bytes) = state.cold.get(T, Row::Operation(id)) else { continue };
        let row: ColdOperation = writ_api::decode_unbounded(&bytes).expect("a cold operation row decodes");
        let (at, s, whole) = (row.op.updated_at_ms, row.op.state, !row.compacted);
        let rows = [
            ("finished", Row::Finished(at, id), whole && s.is_terminal()),
            ("reported", Row::Reported(at, id), whole && s == OperationState::EffectReported),
            ("compacted", Row::Compacted(at, id), !whole),
            ("queue", Row::Attention(id), whole && s.needs_attention()),
        ];
        for (what, time, want) in rows {
            if state.cold.get(T, time).is_some() != want {
                violations.push(format!("{id} ({s:?}, whole: {whole}) has {what} row: {}", !want));
            }
        }
    }
    // The indexes kept by every fold are the ones a rebuild from the operations makes (what a
    // node decoding a snapshot does), and the due index finds exactly what a scan would.
    let mut rebuilt = state.clone();
    rebuilt.rebuild_index();
    if rebuilt.index != state.index {
        violations.push(format!("indexes out of step: kept {:?}, rebuilt {:?}", state.index, rebuilt.index));
    }
    let due_by_scan: std::collections::BTreeSet<&String> = ops
        .iter()
        .filter(|op| {
            let now = state.clock_ms;
            let timed = matches!(op.state, OperationState::Dispatched | OperationState::Attempting);
            (op.state.is_waiting() && op.spec.deadline_ms <= now)
                || (timed && op.lease_expires_at_ms.is_some_and(|at| at <= now))
        })
        .map(|op| &op.spec.operation_id)
        .collect();
    let due_by_index: std::collections::BTreeSet<&String> = state
        .index
        .due
        .get(T)
        .into_iter()
        .flatten()
        .filter(|(at, _)| *at <= state.clock_ms)
        .map(|(_, id)| id)
        .collect();
    if due_by_scan != due_by_index {
        violations.push(format!("due index {due_by_index:?} is not the scan's {due_by_scan:?}"));
    }
    // An operation between its reservation and its outcome holds its device: nothing else may
    // take the device while an attempt may run or its effect is unknown.
    for op in &ops {
        use OperationState::*;
        let holds = matches!(op.state, Reserved | Dispatched | Attempting | UnknownEffect);
        if let (true, Some(device)) = (holds, &op.spec.device_id) {
            let holder = state.device_leases.get(T).and_then(|m| m.get(device)).map(|l| &l.operation_id);
            if holder != Some(&op.spec.operation_id) {
                violations.push(format!(
                    "{device} is not held by {:?} {}: holder {holder:?}",
                    op.state, op.spec.operation_id
                ));
            }
        }
    }
    for (device, lease) in state.device_leases.get(T).into_iter().flat_map(|m| m.iter()) {
        match state.operation(T, &lease.operation_id) {
            Some(holder) if holder.state.is_terminal() => {
                violations.push(format!("{device} held by finished {holder:?}"))
            }
            Some(_) => {}
            None => violations.push(format!("{device} held by unknown operation {}", lease.operation_id)),
        }
    }
    violations
}
