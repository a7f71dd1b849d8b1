//! Operations (SPEC D6–D8, X3): what each operation command does, including the transitions
//! that ledger time makes due (see `crate::operation` for the contract and the types).

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use crate::catalog::Execution;
use crate::decide::prelude::*;
use crate::operation::*;
use crate::principal::PrincipalState;

/// An operation transition event.
pub fn transition(op: &Operation, to: OperationState, cause: impl Into<String>) -> Event {
    Event::OperationTransitionedV1 {
        tenant_id: op.tenant_id.clone(),
        operation_id: op.spec.operation_id.clone(),
        from: op.state,
        to,
        cause: cause.into(),
    }
}

/// The release of the device `op` holds (if it holds one).
pub fn release(op: &Operation) -> Option<Event> {
    op.spec.device_id.as_ref().map(|d| Event::DeviceReleasedV1 {
        tenant_id: op.tenant_id.clone(),
        device_id: d.clone(),
        operation_id: op.spec.operation_id.clone(),
    })
}

/// The events that bring the operations of a tenant up to ledger time `now`: waiting ones past
/// their deadline expire (and free their device); attempted ones whose lease ran out become
/// `unknown_effect` (their device stays held until reconciled). Only the operations that have
/// fallen due are looked at (the due index, `OperationIndex::due`), never the whole backlog.
pub fn due(state: &LedgerState, tenant_id: &str, now: u64) -> Vec<Event> {
    let mut events = Vec::new();
    // Evidence older than the tenant's audit retention goes (oldest first, bounded per entry).
    if state.next_evidence_expiry(tenant_id).is_some_and(|at| at <= now) {
        let age_ms = state.tenants[tenant_id].settings.audit_max_age_s.unwrap_or(0).saturating_mul(1000);
        let blobs: Vec<crate::evidence::EvidenceRefV1> = state
            .cold
            .evidence_by_time(tenant_id, crate::evidence::EVIDENCE_EXPIRED_PER_ENTRY)
            .into_iter()
            .take_while(|(at, ..)| at.saturating_add(age_ms) <= now)
            .map(|(_, operation_id, content_hash)| crate::evidence::EvidenceRefV1 { operation_id, content_hash })
            .collect();
        events.push(Event::EvidenceExpiredV1 { tenant_id: tenant_id.to_string(), blobs });
    }
    let (Some(ops), Some(index)) = (state.operations.get(tenant_id), state.index.due.get(tenant_id)) else {
        return events;
    };
    // What has fallen due, in operation-id order (the order of the events is part of the
    // replicated history).
    let due: BTreeSet<&String> = index.iter().take_while(|(at, _)| *at <= now).map(|(_, id)| id).collect();
    for op in due.into_iter().filter_map(|id| ops.get(id)) {
        if op.state.is_waiting() && op.spec.deadline_ms <= now {
            events.push(transition(op, OperationState::Expired, "the deadline passed before an attempt started"));
            events.extend(release(op));
        } else if op.state == OperationState::Dispatched && op.lease_expires_at_ms.is_some_and(|at| at <= now) {
            let to = op.executor_id.as_deref().unwrap_or("?");
            events.push(transition(
                op,
                OperationState::Reserved,
                format!("executor '{to}' did not start an attempt within {DISPATCH_START_MS} ms: offered again"),
            ));
        } else if op.state == OperationState::Attempting && op.lease_expires_at_ms.is_some_and(|at| at <= now) {
            events.push(transition(
                op,
                OperationState::UnknownEffect,
                "the attempt's lease expired without an outcome",
            ));
        }
    }
    events
}

fn not_found(operation_id: &str) -> Rejection {
    Rejection::new(ReasonCode::OPERATION_NOT_FOUND, format!("no operation '{operation_id}'"))
}

fn conflict(op: &Operation, what: &str) -> Rejection {
    Rejection::new(
        ReasonCode::OPERATION_STATE_CONFLICT,
        format!("operation '{}' is {:?}: {what}", op.spec.operation_id, op.state).replace('"', ""),
    )
}

fn stale(op: &Operation, presented: u64) -> Rejection {
    Rejection::new(
        ReasonCode::FENCING_TOKEN_STALE,
        format!(
            "fencing token {presented} is not operation '{}''s current token {:?}",
            op.spec.operation_id, op.fencing_token
        ),
    )
}

fn find<'a>(
    state: &'a LedgerState,
    tenant_id: &str,
    operation_id: &str,
) -> Result<std::borrow::Cow<'a, Operation>, Rejection> {
    state.whole_operation(tenant_id, operation_id).ok_or_else(|| not_found(operation_id))
}

/// The operation quotas (SPEC D9) of the tenant, then of the principal, consumed by the
/// submission itself: operations per minute and cost units per day (ledger time), and
/// operations waiting or attempting at once.
fn quotas_allow(
    state: &LedgerState,
    tenant: &crate::ledger::Tenant,
    spec: &OperationSpecV1,
    now: u64,
) -> Result<(), Rejection> {
    let q = &tenant.settings.quotas;
    let usage = state.operation_windows.get(&tenant.id).map_or((0, 0), |w| w.usage(now));
    let live = state.live_operations.get(&tenant.id).map_or(0, |l| l.len() as u64);
    let limits = (q.operations_per_minute, q.cost_units_per_day, q.concurrent_operations);
    within("the tenant's", limits, usage, live, spec.cost_units, now)?;
    let Some(own) = state.principal_quotas.get(&tenant.id).and_then(|m| m.get(&spec.principal_id)) else {
        return Ok(());
    };
    let usage = state
        .principal_operation_windows
        .get(&tenant.id)
        .and_then(|m| m.get(&spec.principal_id))
        .map_or((0, 0), |w| w.usage(now));
    let live = state.index.live_by_principal.get(&tenant.id).and_then(|m| m.get(&spec.principal_id)).copied();
    let live = live.unwrap_or(0);
    let limits = (own.operations_per_minute, own.cost_units_per_day, own.concurrent_operations);
    within("the principal's", limits, usage, live, spec.cost_units, now)
}

/// One set of operation limits (per minute, cost per day, concurrent) against its usage.
fn within(
    whose: &str,
    (per_minute, cost_per_day, concurrent): (Option<u64>, Option<u64>, Option<u64>),
    (ops, cost): (u64, u64),
    live: u64,
    asked: u64,
    now: u64,
) -> Result<(), Rejection> {
    let exceeded = |what: String| Rejection::new(ReasonCode::QUOTA_EXCEEDED, format!("{whose} {what}"));
    if let Some(limit) = per_minute.filter(|l| ops >= *l) {
        let retry = crate::quota::WINDOW_MS - now % crate::quota::WINDOW_MS;
        return Err(exceeded(format!("operations_per_minute ({limit}) reached; retry after {retry} ms")));
    }
    if let Some(limit) = cost_per_day.filter(|l| cost + asked > *l) {
        let retry = crate::quota::DAY_MS - now % crate::quota::DAY_MS;
        return Err(exceeded(format!(
            "cost_units_per_day ({limit}) would be exceeded ({cost} used, {asked} asked); retry after {retry} ms"
        )));
    }
    if let Some(limit) = concurrent.filter(|l| live >= *l) {
        return Err(exceeded(format!(
            "concurrent_operations ({limit}) reached: {live} operations are waiting or attempting; retry when one ends"
        )));
    }
    Ok(())
}

/// The reservation that verifies `spec` for an attempt: its device's next fencing token (the
/// device must be free), or straight to `reserved` when it drives none.
fn reserve(state: &LedgerState, tenant_id: &str, spec: &OperationSpecV1) -> Result<Event, Rejection> {
    let t = tenant_id.to_string();
    Ok(match &spec.device_id {
        Some(device_id) => {
            if state.devices.get(tenant_id).is_none_or(|m| !m.contains_key(device_id)) {
                return Err(Rejection::new(ReasonCode::DEVICE_NOT_FOUND, format!("no device '{device_id}'")));
            }
            let held = state.device_leases.get(tenant_id).and_then(|m| m.get(device_id));
            #[cfg(feature = "sim-mutants")]
            let held = held.filter(|h| {
                !(crate::mutants::active(crate::mutants::Mutant::ExpiredLeaseIsFree)
                    && h.expires_at_ms <= state.clock_ms)
            });
            if let Some(held) = held {
                // An attempt whose effect is unknown holds its device until someone reconciles
                // it (the device may still be moving): not a wait, a human's decision.
                let holder = state.operation(tenant_id, &held.operation_id);
                if holder.is_some_and(|op| op.state == OperationState::UnknownEffect) {
                    return Err(Rejection::new(
                        ReasonCode::UNKNOWN_EFFECT_UNRESOLVED,
                        format!(
                            "device '{device_id}': the effect of operation '{}' is unknown; it must be resolved \
                             (writ admin operation resolve) before another operation drives the device",
                            held.operation_id
                        ),
                    ));
                }
                return Err(Rejection::new(
                    ReasonCode::DEVICE_RESERVED,
                    format!(
                        "device '{device_id}' is held by operation '{}'; retry after {} (ledger ms)",
                        held.operation_id, held.expires_at_ms
                    ),
                ));
            }
            let last = state.fencing.get(tenant_id).and_then(|m| m.get(device_id)).copied().unwrap_or(0);
            Event::DeviceReservedV1 {
                tenant_id: t,
                device_id: device_id.clone(),
                operation_id: spec.operation_id.clone(),
                fencing_token: last + 1,
                expires_at_ms: spec.deadline_ms,
            }
        }
        None => Event::OperationTransitionedV1 {
            tenant_id: t,
            operation_id: spec.operation_id.clone(),
            from: OperationState::Verified,
            to: OperationState::Reserved,
            cause: "no device to reserve".into(),
        },
    })
}

/// SPEC S3, defence in depth behind the edge: the ledger re-derives the authority an operation
/// names ([`crate::auth::authority_of_ref`]) at ledger time and checks that it covers the
/// action's scope and the device's `devices:use:<name>`, that the action is an operation of the
/// tenant's current catalog, that the device is one of its class, and that the input satisfies
/// the action's input schema. The cost is the catalog's, whatever the submitter said: a
/// compromised edge can act only through tokens the ledger issued (or the tenant's own
/// issuers), within their scopes. Answers the spec as the ledger records it and whether its
/// action demands verification (a proposal or a confirmation, see [`verified`]).
fn recheck_authority(
    state: &LedgerState,
    tenant_id: &str,
    spec: &OperationSpecV1,
    now: u64,
) -> Result<(OperationSpecV1, bool), Rejection> {
    let authority = crate::auth::authority_of_ref(state, tenant_id, &spec.principal_id, &spec.authority_ref, now)?;
    let (action, scopes) = action_scopes(state, tenant_id, spec)?;
    for scope in &scopes {
        authority.require(scope)?;
    }
    let input: Value = serde_json::from_str(&spec.input).map_err(|_| invalid("the input is not JSON"))?;
    let validator = crate::catalog::stored_validator(&action.input_schema)?;
    let errors: Vec<String> =
        validator.iter_errors(&input).map(|e| format!("{}: {e}", e.instance_path())).take(5).collect();
    if !errors.is_empty() {
        return Err(invalid(format!("the input fails the action's schema: {}", errors.join("; "))));
    }
    if spec.input_requests.contains_key(APPROVAL_REQUEST) {
        return Err(invalid(format!("input request id '{APPROVAL_REQUEST}' is reserved for approvals")));
    }
    let mut checked = spec.clone();
    checked.cost_units = action.cost_units;
    if action.risk == crate::catalog::Risk::Critical {
        checked.input_requests.insert(APPROVAL_REQUEST.into(), approval_request(&spec.payload_hash));
        if checked.input_requests.len() > INPUT_REQUESTS_MAX {
            return Err(invalid(format!("at most {INPUT_REQUESTS_MAX} input requests, the approval included")));
        }
    }
    Ok((checked, action.demands_verification()))
}

/// The operation action `spec` calls in the tenant's current catalog, and the scopes calling it
/// needs: the action's, and `devices:use:<name>` of the device it drives.
fn action_scopes<'a>(
    state: &'a LedgerState,
    tenant_id: &str,
    spec: &OperationSpecV1,
) -> Result<(&'a crate::catalog::CatalogActionV1, Vec<String>), Rejection> {
    let action = state
        .catalog(tenant_id, None)
        .and_then(|c| c.catalog.actions.iter().find(|a| a.id == spec.action))
        .filter(|a| a.execution.is_operation())
        .ok_or_else(|| {
            let msg = format!("'{}' is no operation action of the tenant's current catalog", spec.action);
            Rejection::new(ReasonCode::TOOL_NOT_FOUND, msg)
        })?;
    let mut scopes = vec![action.scope.clone()];
    match (&action.device_class, &spec.device_id) {
        (Some(class), Some(id)) => {
            let device = state
                .devices
                .get(tenant_id)
                .and_then(|m| m.get(id))
                .filter(|d| &d.device_class == class)
                .ok_or_else(|| Rejection::new(ReasonCode::DEVICE_NOT_FOUND, format!("no {class} device '{id}'")))?;
            scopes.push(format!("devices:use:{}", device.name));
        }
        (Some(class), None) => return Err(invalid(format!("'{}' drives a {class} device: name it", action.id))),
        (None, Some(_)) => return Err(invalid(format!("'{}' drives no device", action.id))),
        (None, None) => {}
    }
    Ok((action, scopes))
}

/// The scopes a submission or proposal needs beyond what its command states (see
/// [`action_scopes`]); none for any other command.
pub fn scopes_needed(state: &LedgerState, command: &Command) -> Result<Vec<String>, Rejection> {
    match command {
        Command::SubmitOperation { tenant_id, spec }
        | Command::ProposeOperation { tenant_id, spec }
        | Command::SubmitProposed { tenant_id, spec, .. } => Ok(action_scopes(state, tenant_id, spec)?.1),
        _ => Ok(Vec::new()),
    }
}

/// The verification rule (SPEC E5, S3), held by the ledger whatever the edge did: a call of an
/// action that demands verification is recorded only with a proposal its principal recorded
/// for exactly this call (used up: the answer is its [`Event::ProposalUsedV1`]), or waiting
/// for a confirmation ([`CONFIRM_REQUEST`]) that only its requester answers. A proposal named
/// for any other call is checked the same way.
fn verified(
    state: &LedgerState,
    tenant_id: &str,
    spec: &OperationSpecV1,
    proposal_id: Option<&str>,
    demands: bool,
    now: u64,
) -> Result<Option<Event>, Rejection> {
    let Some(proposal_id) = proposal_id else {
        if demands && !spec.input_requests.contains_key(CONFIRM_REQUEST) {
            let msg = format!(
                "'{}' must be verified first: call operation.propose and pass its proposal (or confirm the call)",
                spec.action
            );
            return Err(Rejection::new(ReasonCode::VERIFY_REQUIRED, msg));
        }
        return Ok(None);
    };
    if proposal_id.is_empty() || proposal_id.len() > KEY_BYTES_MAX {
        return Err(invalid(format!("a proposal id is 1..={KEY_BYTES_MAX} bytes")));
    }
    let proposal = state
        .proposals
        .get(tenant_id)
        .and_then(|m| m.get(proposal_id))
        .filter(|p| p.principal_id == spec.principal_id)
        .ok_or_else(|| {
            let msg =
                format!("no proposal '{proposal_id}' of yours: it was used, expired or never made; propose again");
            Rejection::new(ReasonCode::PROPOSAL_INVALID, msg)
        })?;
    if proposal.expires_at_ms <= now {
        let msg = format!("proposal '{proposal_id}' expired {} ms ago: propose again", now - proposal.expires_at_ms);
        return Err(Rejection::new(ReasonCode::PROPOSAL_EXPIRED, msg));
    }
    if proposal.action != spec.action
        || proposal.call_digest != spec.call_digest()
        || proposal.payload_hash != spec.payload_hash
    {
        let msg =
            format!("proposal '{proposal_id}' was made for another call (action, input, device or preconditions)");
        return Err(Rejection::new(ReasonCode::PROPOSAL_INVALID, msg));
    }
    Ok(Some(Event::ProposalUsedV1 {
        tenant_id: tenant_id.to_string(),
        proposal_id: proposal_id.to_string(),
        operation_id: spec.operation_id.clone(),
    }))
}

/// The tenant may take submissions and `spec`'s principal is active.
fn may_submit(state: &LedgerState, tenant: &crate::ledger::Tenant, spec: &OperationSpecV1) -> Result<(), Rejection> {
    if let Some(closed) = tenant.closed() {
        return Err(closed);
    }
    spec.validate()?;
    let principal = state
        .principals
        .get(&tenant.id)
        .and_then(|m| m.get(&spec.principal_id))
        .ok_or_else(|| Rejection::new(ReasonCode::PRINCIPAL_NOT_FOUND, "no such principal"))?;
    if principal.state != PrincipalState::Active {
        let msg = format!("principal '{}' was revoked", principal.name);
        return Err(Rejection::new(ReasonCode::AUTH_TOKEN_REVOKED, msg));
    }
    Ok(())
}

/// [`Command::ProposeOperation`]: every check of a submission but the idempotency key, the
/// deadline, quotas and the device's holder; recorded for [`PROPOSAL_TTL_MS`] of ledger time,
/// within [`PROPOSALS_PER_PRINCIPAL_MAX`] and [`PROPOSALS_PER_TENANT_MAX`] live ones.
fn propose(
    state: &LedgerState,
    tenant: &crate::ledger::Tenant,
    spec: &OperationSpecV1,
    now: u64,
) -> Result<Vec<Event>, Rejection> {
    may_submit(state, tenant, spec)?;
    let live = state.proposals.get(&tenant.id);
    let id = &spec.operation_id;
    if let Some(p) = live.and_then(|m| m.get(id)) {
        if p.principal_id == spec.principal_id && p.call_digest == spec.call_digest() {
            return Ok(vec![]); // the same proposal again (a resubmission whose answer was lost)
        }
        return Err(invalid(format!("proposal id '{id}' is taken")));
    }
    let (checked, _) = recheck_authority(state, &tenant.id, spec, now)?;
    crate::work::decide::admits(state, &tenant.id, &checked)?;
    let live: Vec<_> = live.into_iter().flat_map(|m| m.values()).filter(|p| p.expires_at_ms > now).collect();
    let own = live.iter().filter(|p| p.principal_id == spec.principal_id).count();
    if own >= PROPOSALS_PER_PRINCIPAL_MAX || live.len() >= PROPOSALS_PER_TENANT_MAX {
        let msg = format!(
            "at most {PROPOSALS_PER_PRINCIPAL_MAX} live proposals per principal and {PROPOSALS_PER_TENANT_MAX} per \
             tenant: execute or let some expire ({} ms each)",
            PROPOSAL_TTL_MS
        );
        return Err(Rejection::new(ReasonCode::QUOTA_EXCEEDED, msg));
    }
    Ok(vec![Event::OperationProposedV1 {
        tenant_id: tenant.id.clone(),
        proposal: ProposalV1 {
            proposal_id: id.clone(),
            principal_id: checked.principal_id.clone(),
            action: checked.action.clone(),
            call_digest: checked.call_digest(),
            payload_hash: checked.payload_hash.clone(),
            expires_at_ms: now + PROPOSAL_TTL_MS,
        },
    }])
}

/// An approval (SPEC S3): never by the operation's requester, only by an active principal
/// holding [`APPROVE_SCOPE`], answering nothing else, and — when it accepts — naming the
/// operation's payload digest (it approves exactly this call).
fn approver_may_approve(
    state: &LedgerState,
    tenant_id: &str,
    op: &Operation,
    approver_id: &str,
    answers: &BTreeMap<String, String>,
) -> Result<(), Rejection> {
    if op.spec.principal_id == approver_id {
        let msg = "a requester cannot approve its own call: another principal holding ops:approve must";
        return Err(Rejection::new(ReasonCode::APP_SCOPE_FORBIDDEN, msg));
    }
    if answers.len() != 1 {
        return Err(invalid("an approver answers only the approval"));
    }
    if let Some(operator) = approver_id.strip_prefix(crate::operator::ACTOR_PREFIX) {
        operator_may_approve(state, tenant_id, operator)?;
        return approves_this_call(op, answers);
    }
    let approver = state
        .principals
        .get(tenant_id)
        .and_then(|m| m.get(approver_id))
        .filter(|p| p.state == PrincipalState::Active)
        .ok_or_else(|| Rejection::new(ReasonCode::PRINCIPAL_NOT_FOUND, "no such active principal"))?;
    let holds = approver.scopes.iter().any(|g| crate::principal::scope_covers(g, APPROVE_SCOPE))
        && !approver.revoked_scopes.iter().any(|r| crate::principal::scope_covers(r, APPROVE_SCOPE));
    if !holds {
        let msg = format!("principal '{}' does not hold {APPROVE_SCOPE}", approver.name);
        return Err(Rejection::new(ReasonCode::APP_SCOPE_FORBIDDEN, msg));
    }
    approves_this_call(op, answers)
}

/// An approval that accepts names the operation's payload digest: it approves exactly this call.
fn approves_this_call(op: &Operation, answers: &BTreeMap<String, String>) -> Result<(), Rejection> {
    let answer: Value = answers
        .get(APPROVAL_REQUEST)
        .and_then(|a| serde_json::from_str(a).ok())
        .ok_or_else(|| invalid("the approval is not JSON"))?;
    if answer["action"] == "accept" && answer["content"]["payload_hash"] != op.spec.payload_hash.as_str() {
        return Err(invalid("the approval names another call (payload digest): read the operation again"));
    }
    Ok(())
}

/// A named operator approves when its role decides and it works on this tenant (that the act
/// is that operator's own, made with its session, `Command::ByOperator` checks).
fn operator_may_approve(state: &LedgerState, tenant_id: &str, name: &str) -> Result<(), Rejection> {
    let operator = state
        .operators
        .operators
        .get(name)
        .ok_or_else(|| Rejection::new(ReasonCode::OPERATOR_NOT_FOUND, "no such operator"))?;
    if !operator.role.may(crate::operator::OperatorAct::Decide) {
        let msg = format!("operator '{name}' ({}) does not approve", operator.role.as_str());
        return Err(Rejection::new(ReasonCode::OPERATOR_ROLE_REQUIRED, msg));
    }
    if operator.tenant_id.as_deref().is_some_and(|t| t != tenant_id) {
        return Err(Rejection::new(
            ReasonCode::OPERATOR_SCOPE_VIOLATION,
            format!("operator '{name}' works on another tenant"),
        ));
    }
    Ok(())
}

/// The claim an executor's start (or refusal) makes on `op` (SPEC D6, X2): the start *is* the
/// claim — an operation waiting in `reserved` goes to the first eligible executor that starts
/// it (an active executor of the tenant enrolled for the operation's device; any of its
/// executors when it drives none), recorded as its dispatch in the same entry. An operation
/// already dispatched (a log written before starts claimed) is the executor's it went to.
///
/// An upstream operation (`Execution::UpstreamOperation`) is claimed only by an edge, named
/// `edge:<id>` ([`crate::ledger::EDGE_PERFORMER_PREFIX`]; the node checks the id is the
/// submitting edge's own), and an edge claims nothing else: to the other side the operation
/// does not exist.
fn claim(state: &LedgerState, op: &Operation, executor_id: &str, what: &str) -> Result<Vec<Event>, Rejection> {
    let by_edge = executor_id.strip_prefix(crate::ledger::EDGE_PERFORMER_PREFIX);
    let upstream = state.upstream_operation(&op.tenant_id, &op.spec.operation_id);
    match (op.state, op.executor_id.as_deref()) {
        (OperationState::Dispatched, Some(e)) if e == executor_id => Ok(vec![]),
        (OperationState::Reserved, _) if upstream.is_some() || by_edge.is_some() => {
            if upstream.is_none() || by_edge.is_none_or(str::is_empty) {
                return Err(not_found(&op.spec.operation_id));
            }
            Ok(vec![Event::OperationDispatchedV1 {
                tenant_id: op.tenant_id.clone(),
                operation_id: op.spec.operation_id.clone(),
                executor_id: executor_id.to_string(),
            }])
        }
        (OperationState::Reserved, _) => {
            let executor = state.executors.get(&op.tenant_id).and_then(|m| m.get(executor_id)).ok_or_else(|| {
                Rejection::new(ReasonCode::EXECUTOR_NOT_FOUND, format!("no executor '{executor_id}'"))
            })?;
            if executor.revoked_at_ms.is_some() {
                return Err(Rejection::new(
                    ReasonCode::EXECUTOR_REVOKED,
                    format!("executor '{executor_id}' was revoked"),
                ));
            }
            if op.spec.device_id.as_ref().is_some_and(|d| !executor.device_ids.contains(d)) {
                return Err(not_found(&op.spec.operation_id)); // not its device: not its operation
            }
            Ok(vec![Event::OperationDispatchedV1 {
                tenant_id: op.tenant_id.clone(),
                operation_id: op.spec.operation_id.clone(),
                executor_id: executor_id.to_string(),
            }])
        }
        #[cfg(feature = "sim-mutants")]
        (OperationState::Attempting, Some(e))
            if e != executor_id && crate::mutants::active(crate::mutants::Mutant::SecondStart) =>
        {
            Ok(vec![Event::OperationDispatchedV1 {
                tenant_id: op.tenant_id.clone(),
                operation_id: op.spec.operation_id.clone(),
                executor_id: executor_id.to_string(),
            }])
        }
        _ => Err(conflict(op, &format!("{what} only on a reserved operation (or one dispatched to it)"))),
    }
}

fn validate_reason(reason: &str) -> Result<(), Rejection> {
    if reason.is_empty() || reason.len() > KEY_BYTES_MAX {
        return Err(invalid(format!("reason must be 1..={KEY_BYTES_MAX} bytes")));
    }
    Ok(())
}

fn lease_ms_ok(lease_ms: u64) -> Result<(), Rejection> {
    if (1..=LEASE_MS_MAX).contains(&lease_ms) {
        Ok(())
    } else {
        Err(invalid(format!("lease_ms must be 1..={LEASE_MS_MAX}")))
    }
}

/// [`Command::SubmitOperation`] and [`Command::SubmitProposed`] (the proposal it names, if any).
fn submit(
    state: &LedgerState,
    tenant: &crate::ledger::Tenant,
    spec: &OperationSpecV1,
    proposal_id: Option<&str>,
    now: u64,
) -> Result<Vec<Event>, Rejection> {
    let tenant_id = tenant.id.as_str();
    may_submit(state, tenant, spec)?;
    if let Some(prior) = state.bound_operation(tenant_id, &spec.principal_id, &spec.idempotency_key) {
        // A replay answers with the prior operation whatever changed since (its proposal was
        // used by the first submission).
        // (Its whole record, or the binding retention compacted it to.)
        let prior = state.operation(tenant_id, &prior).ok_or_else(|| not_found(&prior))?;
        if prior.spec.payload_hash == spec.payload_hash {
            return Ok(vec![]); // a replay: the prior operation stands, whatever its state
        }
        return Err(Rejection::new(
            ReasonCode::IDEMPOTENCY_KEY_REUSED,
            format!("idempotency key '{}' was used for another payload", spec.idempotency_key),
        ));
    }
    // Anything new passes the re-check and the verification rule; its cost is the catalog's.
    let (spec, demands) = recheck_authority(state, tenant_id, spec, now)?;
    let spec = &spec;
    crate::work::decide::admits(state, tenant_id, spec)?;
    if state.operation(tenant_id, &spec.operation_id).is_some() {
        return Err(invalid(format!("operation id '{}' is taken", spec.operation_id)));
    }
    let used = verified(state, tenant_id, spec, proposal_id, demands, now)?;
    if spec.deadline_ms <= now {
        return Err(Rejection::new(ReasonCode::DEADLINE_EXCEEDED, "the deadline has already passed"));
    }
    quotas_allow(state, tenant, spec, now)?;
    if let Some(ceiling) = spec.cost_ceiling.filter(|c| spec.cost_units > *c) {
        return Err(Rejection::new(
            ReasonCode::COST_CEILING_EXCEEDED,
            format!("the action costs {} units, over the ceiling of {ceiling}", spec.cost_units),
        ));
    }
    let mut events = vec![Event::OperationSubmittedV1 { tenant_id: tenant_id.to_string(), spec: spec.clone() }];
    if let Some(Execution::UpstreamOperation(target)) = state
        .catalog(tenant_id, None)
        .and_then(|c| c.catalog.actions.iter().find(|a| a.id == spec.action))
        .map(|a| &a.execution)
    {
        events.push(Event::OperationUpstreamBoundV1 {
            tenant_id: tenant_id.to_string(),
            operation_id: spec.operation_id.clone(),
            target: target.clone(),
        });
    }
    events.extend(used);
    // Waiting for its requester's input: neither verified nor reserved yet.
    if spec.input_requests.is_empty() {
        events.push(reserve(state, tenant_id, spec)?);
    } else if let Some(d) =
        spec.device_id.as_ref().filter(|d| state.devices.get(tenant_id).is_none_or(|m| !m.contains_key(*d)))
    {
        return Err(Rejection::new(ReasonCode::DEVICE_NOT_FOUND, format!("no device '{d}'")));
    }
    Ok(events)
}

/// Decides an operation command at ledger time `now` (the tenant's due transitions were
/// applied just before, see `LedgerState::execute_audited`).
pub fn decide(state: &LedgerState, cmd: &Command, now: u64) -> Result<Vec<Event>, Rejection> {
    use OperationState::*;
    let tenant_id = cmd.stream();
    let tenant = existing(state, tenant_id)?;
    let t = tenant_id.to_string();
    match cmd {
        Command::SubmitOperation { spec, .. } => submit(state, tenant, spec, None, now),
        Command::SubmitProposed { spec, proposal_id, .. } => submit(state, tenant, spec, Some(proposal_id), now),
        Command::ProposeOperation { spec, .. } => propose(state, tenant, spec, now),
        Command::AnswerInputs { .. } => answer_inputs(state, tenant_id, cmd, now),
        Command::DispatchOperation { operation_id, executor_id, .. } => {
            let found = find(state, tenant_id, operation_id)?;
            let op = &*found;
            if state.upstream_operation(tenant_id, operation_id).is_some() {
                return Err(not_found(operation_id)); // an edge's to perform, never dispatched
            }
            match (op.state, &op.executor_id) {
                (Dispatched, Some(e)) if e == executor_id => Ok(vec![]),
                (Reserved, _) => Ok(vec![Event::OperationDispatchedV1 {
                    tenant_id: t,
                    operation_id: operation_id.clone(),
                    executor_id: executor_id.clone(),
                }]),
                _ => Err(conflict(op, "only a reserved operation is dispatched")),
            }
        }
        Command::StartAttempt { .. } => start_attempt(state, tenant_id, cmd, now),
        Command::RefuseDispatch { .. } => refuse_dispatch(state, tenant_id, cmd, now),
        Command::RefuseDispatchV2 { .. } => refuse_dispatch_v2(state, tenant_id, cmd, now),
        Command::StoreEvidence { .. } | Command::StoreEvidenceV2 { .. } => store_evidence(state, tenant_id, cmd, now),
        Command::RenewAttemptLease { operation_id, fencing_token, lease_ms, .. } => {
            lease_ms_ok(*lease_ms)?;
            let found = find(state, tenant_id, operation_id)?;
            let op = &*found;
            if op.state != Attempting {
                return Err(conflict(op, "only an attempt's lease is renewed"));
            }
            if op.fencing_token.is_some_and(|f| f != *fencing_token) {
                return Err(stale(op, *fencing_token));
            }
            Ok(vec![Event::AttemptLeaseExtendedV1 {
                tenant_id: t,
                device_id: op.spec.device_id.clone(),
                operation_id: operation_id.clone(),
                expires_at_ms: now + lease_ms,
            }])
        }
        Command::ReportAttempt { .. } => report_attempt(state, tenant_id, cmd, now),
        Command::ReportAttemptV2 { .. } | Command::ReportAttemptV3 { .. } => {
            report_attempt_v2(state, tenant_id, cmd, now)
        }
        Command::RecordObservation { .. } => record_observation(state, tenant_id, cmd, now),
        Command::DecideOperation { .. } => decide_operation(state, tenant_id, cmd, now),
        Command::ResolveUnknownEffect { .. } => resolve_unknown_effect(state, tenant_id, cmd, now),
        Command::CancelOperation { .. } => cancel_operation(state, tenant_id, cmd, now),
        Command::ExpireDue { .. } => Ok(vec![]),
        Command::OnBehalfOf { authority_ref, command } => {
            crate::decide::on_behalf_of(state, authority_ref, command, now)
        }
        other => Err(Rejection::new(ReasonCode::INTERNAL, format!("{} is not an operation command", other.kind()))),
    }
}

/// A requester's answers to its operation's input requests, or an approver's approval.
fn answer_inputs(state: &LedgerState, tenant_id: &str, cmd: &Command, _now: u64) -> Result<Vec<Event>, Rejection> {
    use OperationState::*;
    let Command::AnswerInputs { operation_id, by_principal_id, answers, .. } = cmd else { return Err(misrouted(cmd)) };
    let t = tenant_id.to_string();
    let found = find(state, tenant_id, operation_id)?;
    let op = &*found;
    let requester = &op.spec.principal_id == by_principal_id;
    let approving = answers.contains_key(APPROVAL_REQUEST);
    if !requester && !approving {
        return Err(not_found(operation_id)); // only its requester answers
    }
    if op.state != Proposed {
        return Err(conflict(op, "only an operation waiting for input takes answers"));
    }
    if approving {
        approver_may_approve(state, tenant_id, op, by_principal_id, answers)?;
    }
    let mut fresh: BTreeMap<String, String> = BTreeMap::new();
    for (id, answer) in answers {
        if op.spec.input_requests.contains_key(id) && !op.answers.contains_key(id) {
            json_text_ok("an answer", id, answer)?;
            // The approval records who gave it.
            let answer = if id == APPROVAL_REQUEST {
                let mut v: Value = serde_json::from_str(answer).map_err(|_| invalid("the approval is not JSON"))?;
                v["approver"] = Value::String(by_principal_id.clone());
                v.to_string()
            } else {
                answer.clone()
            };
            fresh.insert(id.clone(), answer);
        }
    }
    if fresh.is_empty() {
        return Ok(vec![]);
    }
    let all: BTreeMap<&String, &String> = op.answers.iter().chain(fresh.iter()).collect();
    let complete = all.len() == op.spec.input_requests.len();
    let accepted = |a: &str| serde_json::from_str::<Value>(a).is_ok_and(|v| v["action"] == "accept");
    let declined = all.iter().find(|(_, a)| !accepted(a)).map(|(id, _)| id.to_string());
    let mut events = vec![Event::OperationInputsAnsweredV1 {
        tenant_id: t.clone(),
        operation_id: operation_id.clone(),
        answers: fresh.clone(),
    }];
    match (complete, declined) {
        (false, _) => {}
        (true, Some(id)) => events.push(transition(op, Cancelled, format!("input '{id}' was declined"))),
        (true, None) => {
            events.push(transition(op, Verified, "every input was answered"));
            events.push(reserve(state, tenant_id, &op.spec)?);
        }
    }
    Ok(events)
}

/// An executor starts its attempt of a dispatched operation (its fencing token, a lease).
fn start_attempt(state: &LedgerState, tenant_id: &str, cmd: &Command, now: u64) -> Result<Vec<Event>, Rejection> {
    use OperationState::*;
    let Command::StartAttempt { operation_id, executor_id, fencing_token, lease_ms, .. } = cmd else {
        return Err(misrouted(cmd));
    };
    let t = tenant_id.to_string();
    lease_ms_ok(*lease_ms)?;
    let found = find(state, tenant_id, operation_id)?;
    let op = &*found;
    let mut events = claim(state, op, executor_id, "an attempt starts")?;
    if op.fencing_token.is_some_and(|f| f != *fencing_token) {
        return Err(stale(op, *fencing_token));
    }
    events.push(Event::OperationTransitionedV1 {
        tenant_id: t.clone(),
        operation_id: operation_id.clone(),
        from: Dispatched,
        to: Attempting,
        cause: format!("attempt {} started by executor '{executor_id}'", op.attempts + 1),
    });
    events.push(Event::AttemptLeaseExtendedV1 {
        tenant_id: t,
        device_id: op.spec.device_id.clone(),
        operation_id: operation_id.clone(),
        expires_at_ms: now + lease_ms,
    });
    Ok(events)
}

/// An executor refuses a dispatched operation before attempting it (a free-text reason).
fn refuse_dispatch(state: &LedgerState, tenant_id: &str, cmd: &Command, _now: u64) -> Result<Vec<Event>, Rejection> {
    use OperationState::*;
    let Command::RefuseDispatch { operation_id, executor_id, fencing_token, reason, .. } = cmd else {
        return Err(misrouted(cmd));
    };
    let t = tenant_id.to_string();
    let found = find(state, tenant_id, operation_id)?;
    let op = &*found;
    let mut events = claim(state, op, executor_id, "an executor refuses an operation before attempting")?;
    if op.fencing_token.is_some_and(|f| f != *fencing_token) {
        return Err(stale(op, *fencing_token));
    }
    validate_reason(reason)?;
    events.push(Event::OperationTransitionedV1 {
        tenant_id: t.clone(),
        operation_id: operation_id.clone(),
        from: Dispatched,
        to: Failed,
        cause: format!("refused by executor '{executor_id}' before any attempt: {reason}"),
    });
    events.extend(release(op));
    Ok(events)
}

/// An executor refuses a dispatched operation before attempting it (a coded reason).
fn refuse_dispatch_v2(state: &LedgerState, tenant_id: &str, cmd: &Command, _now: u64) -> Result<Vec<Event>, Rejection> {
    let Command::RefuseDispatchV2 { operation_id, executor_id, fencing_token, reason, message, .. } = cmd else {
        return Err(misrouted(cmd));
    };
    let t = tenant_id.to_string();
    let found = find(state, tenant_id, operation_id)?;
    let op = &*found;
    let mut events = claim(state, op, executor_id, "an executor refuses an operation before attempting")?;
    if op.fencing_token.is_some_and(|f| f != *fencing_token) {
        return Err(stale(op, *fencing_token));
    }
    validate_reason(message)?;
    if !EXECUTOR_REFUSALS.contains(reason) {
        let allowed: Vec<&str> = EXECUTOR_REFUSALS.iter().map(|r| r.as_str()).collect();
        return Err(invalid(format!("an executor refuses with one of {}", allowed.join(", "))));
    }
    events.push(Event::OperationRefusedV1 {
        tenant_id: t.clone(),
        operation_id: operation_id.clone(),
        executor_id: executor_id.clone(),
        reason: *reason,
        cause: format!("refused by executor '{executor_id}' before any attempt: {reason}: {message}"),
    });
    events.extend(release(op));
    Ok(events)
}

/// An upload of a blob of evidence: what `StoreEvidence`, `StoreEvidenceV2` and a report with
/// its blob carry.
struct Upload<'a> {
    operation_id: &'a str,
    mime_type: &'a str,
    content_hash: &'a str,
    content: crate::evidence::Blob<'a>,
    by: crate::evidence::Uploader,
}

/// A blob of evidence of an attempted operation, within the operation's and the tenant's bounds.
fn store_evidence(state: &LedgerState, tenant_id: &str, cmd: &Command, now: u64) -> Result<Vec<Event>, Rejection> {
    let (Command::StoreEvidence { operation_id, mime_type, content_hash, by, .. }
    | Command::StoreEvidenceV2 { operation_id, mime_type, content_hash, by, .. }) = cmd
    else {
        return Err(misrouted(cmd));
    };
    let content = cmd.blob_content().ok_or_else(|| misrouted(cmd))?;
    store_upload(state, tenant_id, Upload { operation_id, mime_type, content_hash, content, by: by.clone() }, now)
}

/// [`store_evidence`] of `upload`.
fn store_upload(state: &LedgerState, tenant_id: &str, upload: Upload<'_>, now: u64) -> Result<Vec<Event>, Rejection> {
    let Upload { operation_id, mime_type, content_hash, content, by } = upload;
    let t = tenant_id.to_string();
    use crate::evidence::*;
    let found = find(state, tenant_id, operation_id)?;
    let op = &*found;
    if let Uploader::Executor { executor_id } = &by {
        if op.executor_id.as_deref() != Some(executor_id.as_str()) {
            return Err(not_found(operation_id)); // not its operation
        }
    }
    if op.attempts == 0 {
        return Err(conflict(op, "evidence is of an attempt: only an attempted operation takes it"));
    }
    let size = checked_bytes(mime_type, content, content_hash)?.len();
    // One read of the operation's records answers both checks: no operation holds more than
    // the bound, so the scan sees every record it has.
    let stored = state.cold.evidence_of(tenant_id, operation_id, EVIDENCE_PER_OPERATION_MAX);
    if stored.iter().any(|blob| blob.content_hash == content_hash) {
        return Ok(vec![]); // stored already (a retried upload)
    }
    if stored.len() >= EVIDENCE_PER_OPERATION_MAX {
        let msg =
            format!("operation '{operation_id}' carries {EVIDENCE_PER_OPERATION_MAX} blobs of evidence, its most");
        return Err(Rejection::new(ReasonCode::QUOTA_EXCEEDED, msg));
    }
    let used = state.cold.tenants.get(tenant_id).map_or(0, |c| c.evidence_bytes);
    if used + size as u64 > EVIDENCE_BYTES_PER_TENANT_MAX {
        let msg = format!("the tenant keeps {used} bytes of evidence; {EVIDENCE_BYTES_PER_TENANT_MAX} is its most");
        return Err(Rejection::new(ReasonCode::QUOTA_EXCEEDED, msg));
    }
    Ok(vec![Event::EvidenceStoredV1 {
        tenant_id: t,
        blob: EvidenceBlobV1 {
            content_hash: content_hash.to_string(),
            operation_id: operation_id.to_string(),
            mime_type: mime_type.to_string(),
            size: size as u64,
            by,
            at_ms: now,
        },
    }])
}

/// An attempt's outcome, with its evidence references.
fn report_attempt(state: &LedgerState, tenant_id: &str, cmd: &Command, _now: u64) -> Result<Vec<Event>, Rejection> {
    use OperationState::*;
    let Command::ReportAttempt { operation_id, fencing_token, outcome, evidence, .. } = cmd else {
        return Err(misrouted(cmd));
    };
    let t = tenant_id.to_string();
    let found = find(state, tenant_id, operation_id)?;
    let op = &*found;
    if !matches!(op.state, Attempting | UnknownEffect) {
        return Err(conflict(op, "only an attempted operation reports an outcome"));
    }
    if op.fencing_token.is_some_and(|f| f != *fencing_token) {
        return Err(stale(op, *fencing_token));
    }
    let late = if op.state == UnknownEffect { " (late: after the lease expired)" } else { "" };
    let mut events: Vec<Event> = evidence
        .iter()
        .map(|e| Event::EvidenceReportedV1 {
            tenant_id: t.clone(),
            operation_id: operation_id.clone(),
            evidence: e.clone(),
        })
        .collect();
    events.push(match outcome {
        AttemptOutcome::Effect => transition(op, EffectReported, format!("the executor reported the effect{late}")),
        AttemptOutcome::NoEffect if op.cancel_requested => {
            transition(op, Cancelled, format!("cancelled during the attempt; the executor reported no effect{late}"))
        }
        AttemptOutcome::NoEffect => transition(op, Failed, format!("the executor reported no effect{late}")),
    });
    events.extend(release(op));
    Ok(events)
}

/// An attempt's outcome with its evidence blob: the report stands alone; the blob is stored if it can be.
fn report_attempt_v2(state: &LedgerState, tenant_id: &str, cmd: &Command, now: u64) -> Result<Vec<Event>, Rejection> {
    let (operation_id, fencing_token, outcome, evidence, mime_type) = match cmd {
        Command::ReportAttemptV2 { operation_id, fencing_token, outcome, evidence, content, .. } => {
            (operation_id, fencing_token, outcome, evidence, &content.mime_type)
        }
        Command::ReportAttemptV3 { operation_id, fencing_token, outcome, evidence, content, .. } => {
            (operation_id, fencing_token, outcome, evidence, &content.mime_type)
        }
        _ => return Err(misrouted(cmd)),
    };
    let content = cmd.blob_content().ok_or_else(|| misrouted(cmd))?;
    let t = tenant_id.to_string();
    let report = |evidence: EvidenceV1| Command::ReportAttempt {
        tenant_id: t.clone(),
        operation_id: operation_id.clone(),
        fencing_token: *fencing_token,
        outcome: *outcome,
        evidence: Some(evidence),
    };
    // The report's own checks (state, fencing) come first and decide alone whether it stands;
    // its events are the answer's unless the blob is refused.
    let reported = decide(state, &report(evidence.clone()), now)?;
    let found = find(state, tenant_id, operation_id)?;
    let by = crate::evidence::Uploader::Executor { executor_id: found.executor_id.clone().unwrap_or_default() };
    let upload = Upload { operation_id, mime_type, content_hash: &evidence.content_hash, content, by };
    // The blob is stored while the operation is still attempted; a blob the store
    // refuses (a full quota) leaves the report standing, its reference saying why.
    match store_upload(state, tenant_id, upload, now) {
        Ok(mut events) => {
            events.extend(reported);
            Ok(events)
        }
        Err(refused) => {
            let mut unstored = evidence.clone();
            unstored.evidence_return_ref = format!("not stored: {}", refused.reason);
            decide(state, &report(unstored), now)
        }
    }
}

/// An independent observation of an attempted operation.
fn record_observation(state: &LedgerState, tenant_id: &str, cmd: &Command, now: u64) -> Result<Vec<Event>, Rejection> {
    use OperationState::*;
    let Command::RecordObservation { operation_id, observer_id, evidence, .. } = cmd else {
        return Err(misrouted(cmd));
    };
    let t = tenant_id.to_string();
    let found = find(state, tenant_id, operation_id)?;
    let op = &*found;
    if !matches!(op.state, Attempting | EffectReported | UnknownEffect) {
        return Err(conflict(op, "observations are recorded for attempted operations"));
    }
    if observer_id == &op.spec.principal_id {
        return Err(invalid("the observer must be another principal than the one that asked for the operation"));
    }
    if state.principals.get(tenant_id).is_none_or(|m| !m.contains_key(observer_id)) {
        return Err(Rejection::new(ReasonCode::PRINCIPAL_NOT_FOUND, "no such observer"));
    }
    let observation = ObservationV1 { observer_id: observer_id.clone(), evidence: evidence.clone(), at_ms: now };
    Ok(vec![Event::ObservationRecordedV1 { tenant_id: t, operation_id: operation_id.clone(), observation }])
}

/// A reported effect accepted (with an observation) or rejected.
fn decide_operation(state: &LedgerState, tenant_id: &str, cmd: &Command, _now: u64) -> Result<Vec<Event>, Rejection> {
    use OperationState::*;
    let Command::DecideOperation { operation_id, by_principal_id, verdict, note, .. } = cmd else {
        return Err(misrouted(cmd));
    };
    let found = find(state, tenant_id, operation_id)?;
    let op = &*found;
    if op.state != EffectReported {
        return Err(conflict(op, "only a reported effect is accepted or rejected"));
    }
    match verdict {
        Verdict::Accept if op.observations.is_empty() => Err(Rejection::new(
            ReasonCode::OBSERVATION_REQUIRED,
            "no independent observation is linked to this operation; the executor's evidence alone cannot accept it",
        )),
        Verdict::Accept => Ok(vec![transition(op, Accepted, format!("accepted by '{by_principal_id}': {note}"))]),
        Verdict::Reject => Ok(vec![transition(op, Rejected, format!("rejected by '{by_principal_id}': {note}"))]),
    }
}

/// An operator says what happened to an operation whose effect is unknown.
fn resolve_unknown_effect(
    state: &LedgerState,
    tenant_id: &str,
    cmd: &Command,
    _now: u64,
) -> Result<Vec<Event>, Rejection> {
    use OperationState::*;
    let Command::ResolveUnknownEffect { operation_id, by_principal_id, outcome, note, .. } = cmd else {
        return Err(misrouted(cmd));
    };
    let found = find(state, tenant_id, operation_id)?;
    let op = &*found;
    if op.state != UnknownEffect {
        return Err(conflict(op, "only an unknown effect is resolved"));
    }
    let mut events = vec![match outcome {
        AttemptOutcome::Effect => {
            transition(op, EffectReported, format!("resolved by '{by_principal_id}': effect happened: {note}"))
        }
        AttemptOutcome::NoEffect => {
            transition(op, Failed, format!("resolved by '{by_principal_id}': no effect: {note}"))
        }
    }];
    events.extend(release(op));
    Ok(events)
}

/// A cancellation: asked of the executor during an attempt, at once before it.
fn cancel_operation(state: &LedgerState, tenant_id: &str, cmd: &Command, _now: u64) -> Result<Vec<Event>, Rejection> {
    use OperationState::*;
    let Command::CancelOperation { operation_id, by_principal_id, .. } = cmd else { return Err(misrouted(cmd)) };
    let t = tenant_id.to_string();
    let found = find(state, tenant_id, operation_id)?;
    let op = &*found;
    if op.state == Attempting {
        // The executor is told (lease renewals) and reports the true outcome.
        return Ok(if op.cancel_requested {
            vec![]
        } else {
            vec![Event::OperationCancelRequestedV1 {
                tenant_id: t,
                operation_id: operation_id.clone(),
                by_principal_id: by_principal_id.clone(),
            }]
        });
    }
    if !op.state.is_waiting() {
        return Err(conflict(op, "an operation is cancelled only before or during its attempt"));
    }
    let mut events = vec![transition(op, Cancelled, format!("cancelled by '{by_principal_id}'"))];
    events.extend(release(op));
    Ok(events)
}
