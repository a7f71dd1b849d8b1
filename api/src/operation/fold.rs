//! How operations', proposals' and evidence's events change the state: this domain's part of
//! [`LedgerState::fold_views`].

use std::collections::BTreeMap;

use crate::cold::{ColdOperation, ColdTier, Row};
use crate::ledger::{Event, EventEnvelope};
use crate::operation::{DeviceLease, Operation, OperationSpecV1, OperationState, DISPATCH_START_MS};
use crate::state::{drop_empty, idempotency_slot, CorruptEvent, LedgerState};

impl LedgerState {
    /// Operations (`fold_operation`), their proposals and evidence.
    pub(crate) fn fold_operation(&mut self, env: &EventEnvelope) -> Result<(), CorruptEvent> {
        match &env.event {
            Event::OperationProposedV1 { tenant_id, proposal } => {
                let live = self.proposals.entry(tenant_id.clone()).or_default();
                live.retain(|_, p| p.expires_at_ms > env.at_ms);
                live.insert(proposal.proposal_id.clone(), proposal.clone());
            }
            Event::ProposalUsedV1 { tenant_id, proposal_id, .. } => {
                let live = self.proposals.get_mut(tenant_id).and_then(|m| m.remove(proposal_id).map(|_| m.is_empty()));
                match live {
                    Some(true) => {
                        self.proposals.remove(tenant_id);
                    }
                    Some(false) => {}
                    None => return Err(CorruptEvent::new(env, format!("unknown proposal '{proposal_id}'"))),
                }
            }
            Event::OperationSubmittedV1 { .. }
            | Event::DeviceReservedV1 { .. }
            | Event::DeviceReleasedV1 { .. }
            | Event::OperationDispatchedV1 { .. }
            | Event::OperationTransitionedV1 { .. }
            | Event::AttemptLeaseExtendedV1 { .. }
            | Event::EvidenceReportedV1 { .. }
            | Event::ObservationRecordedV1 { .. }
            | Event::OperationInputsAnsweredV1 { .. }
            | Event::OperationCancelRequestedV1 { .. }
            | Event::OperationRefusedV1 { .. } => {
                if let Event::OperationDispatchedV1 { tenant_id, operation_id, executor_id } = &env.event {
                    // Kept only for executors an edge has said something of (ledger version 13
                    // on), so a replay of older entries folds to the same state.
                    let presence = self.executor_presence.get_mut(tenant_id).and_then(|m| m.get_mut(executor_id));
                    if let Some(p) = presence {
                        p.last_dispatch = Some((operation_id.clone(), env.at_ms));
                    }
                }
                fold_lifecycle(self, env)?
            }
            // A projection keeps no evidence records: the edge reads evidence from the ledger.
            Event::EvidenceStoredV1 { .. } | Event::EvidenceExpiredV1 { .. } if self.projection => {}
            Event::EvidenceStoredV1 { tenant_id, blob } => {
                store_evidence(&mut self.cold, tenant_id, blob, env.revision)
            }
            Event::EvidenceExpiredV1 { tenant_id, blobs } => {
                for r in blobs {
                    let row = Row::Evidence(&r.operation_id, &r.content_hash);
                    let old = self.cold.get(tenant_id, row);
                    let old =
                        old.ok_or_else(|| CorruptEvent::new(env, format!("unknown evidence '{}'", r.content_hash)))?;
                    let gone: crate::evidence::EvidenceBlobV1 =
                        crate::decode_unbounded(&old).expect("an evidence row decodes");
                    let time = Row::EvidenceTime(gone.at_ms, &r.operation_id, &r.content_hash);
                    self.cold.put(tenant_id, time, env.revision, Some(&[]), None);
                    self.cold.put(tenant_id, row, env.revision, Some(&old), None);
                    self.cold.counts(tenant_id, |c| {
                        c.evidence -= 1;
                        c.evidence_bytes -= gone.size;
                    });
                }
            }
            _ => return Err(CorruptEvent::new(env, "an event of another domain")),
        }
        Ok(())
    }
}

/// A stored blob's record, and its time row (what expires first), as cold rows written at
/// `revision`.
fn store_evidence(cold: &mut ColdTier, tenant_id: &str, blob: &crate::evidence::EvidenceBlobV1, revision: u64) {
    let (id, hash) = (blob.operation_id.as_str(), blob.content_hash.as_str());
    let bytes = crate::encode(blob).expect("an evidence record is always encodable");
    cold.put(tenant_id, Row::EvidenceTime(blob.at_ms, id, hash), revision, None, Some(Vec::new()));
    cold.put(tenant_id, Row::Evidence(id, hash), revision, None, Some(bytes));
    cold.counts(tenant_id, |c| {
        c.evidence += 1;
        c.evidence_bytes += blob.size;
    });
}

/// Folds an operation event into the state; an event naming an operation the state does not
/// hold is [`CorruptEvent`].
fn fold_lifecycle(state: &mut LedgerState, env: &EventEnvelope) -> Result<(), CorruptEvent> {
    use OperationState::*;
    match &env.event {
        Event::OperationSubmittedV1 { tenant_id, spec } => fold_submitted(state, env, tenant_id, spec),
        Event::DeviceReservedV1 { tenant_id, device_id, operation_id, fencing_token, expires_at_ms } => {
            state.fencing.entry(tenant_id.clone()).or_default().insert(device_id.clone(), *fencing_token);
            let lease = DeviceLease {
                operation_id: operation_id.clone(),
                fencing_token: *fencing_token,
                expires_at_ms: *expires_at_ms,
            };
            state.device_leases.entry(tenant_id.clone()).or_default().insert(device_id.clone(), lease);
            change(state, env, tenant_id, operation_id, |op| {
                op.state = Reserved;
                op.fencing_token = Some(*fencing_token);
            })?
        }
        Event::DeviceReleasedV1 { tenant_id, device_id, operation_id } => {
            if let Some(leases) = state.device_leases.get_mut(tenant_id) {
                if leases.get(device_id).is_some_and(|l| &l.operation_id == operation_id) {
                    leases.remove(device_id);
                }
            }
        }
        Event::OperationDispatchedV1 { tenant_id, operation_id, executor_id } => {
            change(state, env, tenant_id, operation_id, |op| {
                op.state = Dispatched;
                op.executor_id = Some(executor_id.clone());
                op.lease_expires_at_ms = Some(env.at_ms + DISPATCH_START_MS);
            })?
        }
        Event::OperationTransitionedV1 { tenant_id, operation_id, to, cause, .. } => {
            change(state, env, tenant_id, operation_id, |op| {
                op.attempts += u32::from(*to == Attempting);
                op.state = *to;
                op.cause = cause.clone();
                if *to == Reserved {
                    // Offered again: no executor holds it.
                    op.executor_id = None;
                    op.lease_expires_at_ms = None;
                }
            })?
        }
        Event::OperationInputsAnsweredV1 { tenant_id, operation_id, answers } => {
            change(state, env, tenant_id, operation_id, |op| {
                op.answers.extend(answers.iter().map(|(k, v)| (k.clone(), v.clone())))
            })?
        }
        Event::OperationCancelRequestedV1 { tenant_id, operation_id, by_principal_id } => {
            change(state, env, tenant_id, operation_id, |op| {
                op.cancel_requested = true;
                op.cause = format!("cancellation requested by '{by_principal_id}' during the attempt");
            })?
        }
        Event::AttemptLeaseExtendedV1 { tenant_id, device_id, operation_id, expires_at_ms } => {
            if let Some(l) = device_id.as_ref().and_then(|d| state.device_leases.get_mut(tenant_id)?.get_mut(d)) {
                if &l.operation_id == operation_id {
                    l.expires_at_ms = *expires_at_ms;
                }
            }
            change(state, env, tenant_id, operation_id, |op| op.lease_expires_at_ms = Some(*expires_at_ms))?
        }
        Event::EvidenceReportedV1 { tenant_id, operation_id, evidence } => {
            change(state, env, tenant_id, operation_id, |op| op.evidence.push(evidence.clone()))?
        }
        Event::ObservationRecordedV1 { tenant_id, operation_id, observation } => {
            change(state, env, tenant_id, operation_id, |op| op.observations.push(observation.clone()))?
        }
        Event::OperationRefusedV1 { tenant_id, operation_id, cause, .. } => {
            change(state, env, tenant_id, operation_id, |op| {
                op.state = Failed;
                op.cause = cause.clone();
            })?
        }
        _ => {}
    }
    Ok(())
}

/// A submitted operation: counted in its tenant's and principal's windows, its idempotency key
/// bound, carried by the work item it names (decide checked the item's scope and bounds), and
/// stored waiting for input or verified.
fn fold_submitted(state: &mut LedgerState, env: &EventEnvelope, tenant_id: &str, spec: &OperationSpecV1) {
    state.operation_windows.entry(tenant_id.to_string()).or_default().record(env.at_ms, spec.cost_units);
    state
        .principal_operation_windows
        .entry(tenant_id.to_string())
        .or_default()
        .entry(spec.principal_id.clone())
        .or_default()
        .record(env.at_ms, spec.cost_units);
    // A projection answers no replay (the ledger does), so it keeps no idempotency keys.
    if !state.projection {
        let slot = idempotency_slot(&spec.principal_id, &spec.idempotency_key);
        let id = spec.operation_id.as_bytes().to_vec();
        state.cold.put(tenant_id, Row::Key(&slot), env.revision, None, Some(id));
        state.cold.counts(tenant_id, |c| c.keys += 1);
    }
    if let Some(w) = spec.work_ref.as_ref().and_then(|r| state.works.get_mut(tenant_id)?.get_mut(&r.id)) {
        w.operations.push(spec.operation_id.clone());
        w.cost_used += spec.cost_units;
    }
    let waiting = !spec.input_requests.is_empty();
    let op = Operation {
        tenant_id: tenant_id.to_string(),
        spec: spec.clone(),
        state: if waiting { OperationState::Proposed } else { OperationState::Verified },
        executor_id: None,
        fencing_token: None,
        attempts: 0,
        lease_expires_at_ms: None,
        evidence: Vec::new(),
        observations: Vec::new(),
        answers: BTreeMap::new(),
        cancel_requested: false,
        cause: if waiting { "waiting for the requester's input" } else { "recorded" }.into(),
        created_at_ms: env.at_ms,
        updated_at_ms: env.at_ms,
        revision: env.revision,
    };
    store(state, env, Taken { op, history: Vec::new(), before: None });
}

/// An operation taken out of the state to be changed: its history, and what its cold row was
/// when it was no longer live.
struct Taken {
    op: Operation,
    history: Vec<crate::operation::TransitionV1>,
    before: Option<Before>,
}

/// A cold operation row before a change: its bytes (the tenant's digest moves by them) and the
/// shape its counts and time rows were kept by.
pub(crate) struct Before {
    pub(crate) bytes: Vec<u8>,
    pub(crate) shape: Shape,
}

/// What a cold operation row is counted and walked by.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Shape {
    state: OperationState,
    updated_at_ms: u64,
    compacted: bool,
    transitions: u64,
}

impl Shape {
    pub(crate) fn of(row: &ColdOperation) -> Shape {
        Shape {
            state: row.op.state,
            updated_at_ms: row.op.updated_at_ms,
            compacted: row.compacted,
            transitions: if row.compacted { 0 } else { row.history.len() as u64 },
        }
    }

    /// Its retention time row: by when it finished, whole or compacted, or when its effect was
    /// reported while that waits for a decision; none while its effect is unknown.
    fn time_row(self, id: &str) -> Option<Row<'_>> {
        match (self.compacted, self.state) {
            (true, _) => Some(Row::Compacted(self.updated_at_ms, id)),
            (false, s) if s.is_terminal() => Some(Row::Finished(self.updated_at_ms, id)),
            (false, OperationState::EffectReported) => Some(Row::Reported(self.updated_at_ms, id)),
            (false, _) => None,
        }
    }

    /// Whether it is in the operator's queue: whole, and waiting for a human (a binding can no
    /// longer be decided).
    fn waits(self) -> bool {
        !self.compacted && self.state.needs_attention()
    }
}

/// Takes the operation out of the state (no copy when it is live), lets `f` change it, and
/// stores it back with its indexes moved from what it was to what it is.
fn change(
    state: &mut LedgerState,
    env: &EventEnvelope,
    tenant_id: &str,
    operation_id: &str,
    f: impl FnOnce(&mut Operation),
) -> Result<(), CorruptEvent> {
    let Some(mut taken) = take(state, tenant_id, operation_id) else {
        // A projection holds live operations only: one it does not hold has finished.
        if state.projection {
            return Ok(());
        }
        return Err(CorruptEvent::new(env, format!("unknown operation '{operation_id}'")));
    };
    f(&mut taken.op);
    store(state, env, taken);
    Ok(())
}

/// The live operation out of its maps and indexes, or the one no longer live out of its cold
/// row's counts (a projection has no cold rows).
fn take(state: &mut LedgerState, tenant_id: &str, operation_id: &str) -> Option<Taken> {
    if let Some(op) = state.operations.get_mut(tenant_id).and_then(|m| m.remove(operation_id)) {
        state.index.update(Some(&op), None);
        let history = state.history.get_mut(tenant_id).and_then(|h| h.remove(operation_id)).unwrap_or_default();
        return Some(Taken { op, history, before: None });
    }
    if state.projection {
        return None;
    }
    let bytes = state.cold.get(tenant_id, Row::Operation(operation_id))?;
    let row: ColdOperation = crate::decode_unbounded(&bytes).expect("a cold operation row decodes");
    if row.compacted {
        return None; // a binding takes no change
    }
    let before = Some(Before { bytes, shape: Shape::of(&row) });
    Some(Taken { op: row.op, history: row.history, before })
}

/// Moves `tenant_id`'s cold counts by a row of `shape` (`out`: it leaves).
pub(crate) fn count(cold: &mut ColdTier, tenant_id: &str, shape: Shape, out: bool) {
    let (s, n) = (shape.state, shape.transitions);
    cold.counts(tenant_id, |c| {
        let by_state = c.by_state.entry(s).or_default();
        let records = if shape.compacted { &mut c.bindings } else { &mut c.operations };
        if out {
            *records -= 1;
            c.transitions -= n;
            *by_state -= 1;
        } else {
            *records += 1;
            c.transitions += n;
            *by_state += 1;
        }
        if c.by_state.get(&s) == Some(&0) {
            c.by_state.remove(&s);
        }
    });
}

/// Stores the operation as changed by `env`: its transition in its history, its live set, its
/// indexes, and (once attempted or ended) no upstream claim on it any more. A live operation
/// stays in memory; one no longer live becomes a cold row, and a finished one a time row for
/// retention. A projection keeps live operations only ([`LedgerState::project`]): one that
/// stops being live leaves it with its history (for a taker of [`LedgerState::departed`]).
fn store(state: &mut LedgerState, env: &EventEnvelope, taken: Taken) {
    let Taken { mut op, mut history, before } = taken;
    op.updated_at_ms = env.at_ms;
    op.revision = env.revision;
    record_transition(&mut history, env);
    let (tenant_id, id) = (op.tenant_id.clone(), op.spec.operation_id.clone());
    let live = state.live_operations.entry(tenant_id.clone()).or_default();
    if op.is_live() {
        live.insert(id.clone());
    } else {
        live.remove(&id);
    }
    if !op.state.is_waiting() {
        if let Some(m) = state.upstream_operations.get_mut(&tenant_id) {
            m.remove(&id);
            if m.is_empty() {
                state.upstream_operations.remove(&tenant_id);
            }
        }
    }
    if op.is_live() {
        state.index.update(None, Some(&op));
        if !history.is_empty() {
            state.history.entry(tenant_id.clone()).or_default().insert(id.clone(), history);
        }
        state.operations.entry(tenant_id).or_default().insert(id, op);
        return;
    }
    drop_empty(&mut state.history, &tenant_id);
    drop_empty(&mut state.operations, &tenant_id);
    if state.projection {
        if let Some(departed) = state.departed.as_mut() {
            departed.push(super::Departed { op, history });
        }
        return;
    }
    store_cold(&mut state.cold, ColdOperation { op, history, compacted: false }, before, env.revision);
}

/// Writes an operation no longer live as its cold row at `revision` (over `before`, its row
/// until now): its counts, the time row retention walks (`Shape::time_row`), and its place in
/// the operator's queue while it waits for a human.
pub(crate) fn store_cold(cold: &mut ColdTier, row: ColdOperation, before: Option<Before>, revision: u64) {
    let (tenant_id, id) = (row.op.tenant_id.clone(), row.op.spec.operation_id.clone());
    let shape = Shape::of(&row);
    let was = before.as_ref().map(|b| b.shape);
    if let Some(was) = was {
        count(cold, &tenant_id, was, true);
    }
    if let Some(time) = was.and_then(|w| w.time_row(&id)) {
        cold.put(&tenant_id, time, revision, Some(&[]), None);
    }
    if let Some(time) = shape.time_row(&id) {
        cold.put(&tenant_id, time, revision, None, Some(Vec::new()));
    }
    let waited = was.is_some_and(Shape::waits);
    match (waited, shape.waits()) {
        (false, true) => cold.put(&tenant_id, Row::Attention(&id), revision, None, Some(Vec::new())),
        (true, false) => cold.put(&tenant_id, Row::Attention(&id), revision, Some(&[]), None),
        _ => {}
    }
    count(cold, &tenant_id, shape, false);
    let bytes = crate::encode(&row).expect("an operation is always encodable");
    let old = before.map(|b| b.bytes);
    cold.put(&tenant_id, Row::Operation(&id), revision, old.as_deref(), Some(bytes));
}

/// Appends the transition `env` made (if it made one) to its operation's history, keeping the
/// first and the newest ([`crate::operation::HISTORY_KEPT`] in all).
fn record_transition(steps: &mut Vec<crate::operation::TransitionV1>, env: &EventEnvelope) {
    use crate::operation::{TransitionV1, HISTORY_KEPT};
    use OperationState::*;
    let (from, to, cause, reason) = match &env.event {
        Event::OperationSubmittedV1 { spec, .. } => {
            let (to, cause) = if spec.input_requests.is_empty() {
                (Verified, "recorded")
            } else {
                (Proposed, "recorded; waiting for the requester's input")
            };
            (None, to, cause.to_string(), None)
        }
        Event::DeviceReservedV1 { device_id, fencing_token, .. } => {
            let cause = format!("device '{device_id}' reserved with fencing token {fencing_token}");
            (Some(Verified), Reserved, cause, None)
        }
        Event::OperationDispatchedV1 { executor_id, .. } => {
            let cause = format!("dispatched to executor '{executor_id}'");
            (Some(Reserved), Dispatched, cause, None)
        }
        Event::OperationTransitionedV1 { from, to, cause, .. } => (Some(*from), *to, cause.clone(), None),
        Event::OperationRefusedV1 { reason, cause, .. } => (Some(Dispatched), Failed, cause.clone(), Some(*reason)),
        _ => return,
    };
    if steps.len() >= HISTORY_KEPT {
        steps.remove(1);
    }
    steps.push(TransitionV1 {
        from,
        to,
        cause,
        reason,
        at_ms: env.at_ms,
        revision: env.revision,
        trace_id: env.trace_id.clone(),
    });
}

impl LedgerState {
    /// Moves what a state decoded from an older format holds in memory and now keeps as cold
    /// rows ([`crate::cold`]): operations no longer live with their histories, compacted
    /// operations, idempotency keys, token records, closed work items — all written at the
    /// state's revision (a replay starts after it). A state of the current format has none of them in memory.
    pub fn cool(&mut self) {
        self.cold.at = self.revision;
        let rev = self.revision;
        for (tenant_id, tenant) in &self.tenants {
            self.cold.open(tenant_id, tenant.created_at_ms);
        }
        for (tenant_id, keys) in std::mem::take(&mut self.idempotency) {
            for (slot, id) in keys {
                self.cold.put(&tenant_id, Row::Key(&slot), rev, None, Some(id.into_bytes()));
                self.cold.counts(&tenant_id, |c| c.keys += 1);
            }
        }
        let mut moved = false;
        for ops in self.operations.values_mut() {
            let done: Vec<String> = ops.iter().filter(|(_, op)| !op.is_live()).map(|(id, _)| id.clone()).collect();
            for id in done {
                let op = ops.remove(&id).expect("listed above");
                let history = self.history.get_mut(&op.tenant_id).and_then(|h| h.remove(&id)).unwrap_or_default();
                store_cold(&mut self.cold, ColdOperation { op, history, compacted: false }, None, rev);
                moved = true;
            }
        }
        for (tenant_id, blobs) in std::mem::take(&mut self.evidence) {
            for blob in blobs.into_values() {
                store_evidence(&mut self.cold, &tenant_id, &blob, rev);
            }
        }
        for (_, ops) in std::mem::take(&mut self.compacted) {
            for (_, op) in ops {
                store_cold(&mut self.cold, ColdOperation { op, history: Vec::new(), compacted: true }, None, rev);
            }
        }
        self.cool_tokens();
        self.cool_works();
        self.operations.retain(|_, m| !m.is_empty());
        self.history.retain(|_, m| !m.is_empty());
        if moved {
            self.rebuild_index();
        }
    }
}
