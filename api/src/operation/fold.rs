//! How operations', proposals' and evidence's events change the state: this domain's part of
//! [`LedgerState::fold_views`].

use std::collections::BTreeMap;

use crate::ledger::{Event, EventEnvelope};
use crate::operation::{DeviceLease, Operation, OperationSpecV1, OperationState, DISPATCH_START_MS};
use crate::state::{drop_empty, evidence_slot, idempotency_slot, CorruptEvent, LedgerState};

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
                *self.index.evidence_bytes.entry(tenant_id.clone()).or_default() += blob.size;
                let slot = evidence_slot(&blob.operation_id, &blob.content_hash);
                self.index.evidence_by_time.entry(tenant_id.clone()).or_default().insert((blob.at_ms, slot.clone()));
                self.evidence.entry(tenant_id.clone()).or_default().insert(slot, blob.clone());
            }
            Event::EvidenceExpiredV1 { tenant_id, blobs } => {
                for r in blobs {
                    let slot = evidence_slot(&r.operation_id, &r.content_hash);
                    let gone = self.evidence.get_mut(tenant_id).and_then(|m| m.remove(&slot));
                    let gone = gone.ok_or_else(|| CorruptEvent::new(env, format!("unknown evidence '{slot}'")))?;
                    if let Some(n) = self.index.evidence_bytes.get_mut(tenant_id) {
                        *n -= gone.size;
                    }
                    if let Some(by_time) = self.index.evidence_by_time.get_mut(tenant_id) {
                        by_time.remove(&(gone.at_ms, slot));
                    }
                }
                if self.evidence.get(tenant_id).is_some_and(|m| m.is_empty()) {
                    self.evidence.remove(tenant_id);
                    self.index.evidence_bytes.remove(tenant_id);
                    self.index.evidence_by_time.remove(tenant_id);
                }
            }
            _ => return Err(CorruptEvent::new(env, "an event of another domain")),
        }
        Ok(())
    }
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
    record_transition(state, env);
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
        state
            .idempotency
            .entry(tenant_id.to_string())
            .or_default()
            .insert(idempotency_slot(&spec.principal_id, &spec.idempotency_key), spec.operation_id.clone());
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
    store(state, env, op);
}

/// Takes the operation out of the map (no copy), lets `f` change it, and stores it back with
/// its indexes moved from what it was to what it is.
fn change(
    state: &mut LedgerState,
    env: &EventEnvelope,
    tenant_id: &str,
    operation_id: &str,
    f: impl FnOnce(&mut Operation),
) -> Result<(), CorruptEvent> {
    let Some(mut op) = state.operations.get_mut(tenant_id).and_then(|m| m.remove(operation_id)) else {
        // A projection holds live operations only: one it does not hold has finished.
        if state.projection {
            return Ok(());
        }
        return Err(CorruptEvent::new(env, format!("unknown operation '{operation_id}'")));
    };
    state.index.update(Some(&op), None);
    f(&mut op);
    store(state, env, op);
    Ok(())
}

/// Stores `op` as changed by `env`: its live set, its indexes, and (once attempted or ended)
/// no upstream claim on it any more. A projection keeps live operations only
/// ([`LedgerState::project`]): one that stops being live leaves it with its history.
fn store(state: &mut LedgerState, env: &EventEnvelope, mut op: Operation) {
    op.updated_at_ms = env.at_ms;
    op.revision = env.revision;
    let live = state.live_operations.entry(op.tenant_id.clone()).or_default();
    if op.is_live() {
        live.insert(op.spec.operation_id.clone());
    } else {
        live.remove(&op.spec.operation_id);
    }
    if !op.state.is_waiting() {
        if let Some(m) = state.upstream_operations.get_mut(&op.tenant_id) {
            m.remove(&op.spec.operation_id);
            if m.is_empty() {
                state.upstream_operations.remove(&op.tenant_id);
            }
        }
    }
    if state.projection && !op.is_live() {
        let tenant_id = op.tenant_id.clone();
        if let Some(h) = state.history.get_mut(&tenant_id) {
            h.remove(&op.spec.operation_id);
        }
        drop_empty(&mut state.history, &tenant_id);
        drop_empty(&mut state.operations, &tenant_id);
        return;
    }
    state.index.update(None, Some(&op));
    state.operations.entry(op.tenant_id.clone()).or_default().insert(op.spec.operation_id.clone(), op);
}

/// Appends the transition `env` made (if it made one) to its operation's history, keeping the
/// first and the newest ([`crate::operation::HISTORY_KEPT`] in all).
fn record_transition(state: &mut LedgerState, env: &EventEnvelope) {
    use crate::operation::{TransitionV1, HISTORY_KEPT};
    use OperationState::*;
    let (tenant_id, operation_id, from, to, cause, reason) = match &env.event {
        Event::OperationSubmittedV1 { tenant_id, spec } => {
            let (to, cause) = if spec.input_requests.is_empty() {
                (Verified, "recorded")
            } else {
                (Proposed, "recorded; waiting for the requester's input")
            };
            (tenant_id, &spec.operation_id, None, to, cause.to_string(), None)
        }
        Event::DeviceReservedV1 { tenant_id, device_id, operation_id, fencing_token, .. } => {
            let cause = format!("device '{device_id}' reserved with fencing token {fencing_token}");
            (tenant_id, operation_id, Some(Verified), Reserved, cause, None)
        }
        Event::OperationDispatchedV1 { tenant_id, operation_id, executor_id } => {
            let cause = format!("dispatched to executor '{executor_id}'");
            (tenant_id, operation_id, Some(Reserved), Dispatched, cause, None)
        }
        Event::OperationTransitionedV1 { tenant_id, operation_id, from, to, cause } => {
            (tenant_id, operation_id, Some(*from), *to, cause.clone(), None)
        }
        Event::OperationRefusedV1 { tenant_id, operation_id, reason, cause, .. } => {
            (tenant_id, operation_id, Some(Dispatched), Failed, cause.clone(), Some(*reason))
        }
        _ => return,
    };
    if state.projection && !state.operations.get(tenant_id).is_some_and(|m| m.contains_key(operation_id)) {
        return;
    }
    let steps = state.history.entry(tenant_id.clone()).or_default().entry(operation_id.clone()).or_default();
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
