//! The operation contract at the ledger (SPEC D6–D8, X3), decided by the pure state machine every
//! replica runs: retries are not re-executions, a key is bound to one payload, a device is held
//! by one operation with monotonically increasing fencing tokens, deadlines and lost outcomes are
//! decided by ledger time, and only an independent observation lets an effect be accepted. A
//! property test checks the invariants over random command sequences and that a replica
//! rebuilt from the events equals the live one.

use std::collections::BTreeMap;

use proptest::prelude::*;
use serde_json::json;
use writ_api::evidence::{Uploader, EVIDENCE_PER_OPERATION_MAX};
use writ_api::ledger::{Command, Event, EventEnvelope, LedgerRequest, Outcome};
use writ_api::operation::{AttemptOutcome, EvidenceV1, Operation, OperationSpecV1, OperationState, Verdict, WorkRef};
use writ_api::principal::{PrincipalKind, PrincipalSpecV1};
use writ_api::settings::TenantSettingsPatch;
use writ_api::work::{WorkChangeV1, WorkScopeV1, WorkState};
use writ_api::ReasonCode;

use crate::support::*;

#[test]
fn a_retry_is_not_a_second_execution() {
    let mut l = Ledger::new();
    let s = spec("op-1", "k-1", json!({"position_mm": 120}), Some("press"), l.now + 60_000);
    assert_eq!(l.ok(submit(s.clone())), 2, "submitted + device reserved");
    for i in 0..19 {
        // Retries carry new operation ids (each edge mints one): the key decides.
        let mut again = s.clone();
        again.operation_id = format!("op-retry-{i}");
        assert_eq!(l.ok(submit(again)), 0, "a replay appends nothing");
    }
    assert_eq!(all_ops(&l.state, T).len(), 1);
    l.ok(dispatch("op-1"));
    l.ok(start("op-1", 1));
    assert_eq!(l.refused(start("op-1", 1)), ReasonCode::OPERATION_STATE_CONFLICT, "one attempt");
    assert_eq!(l.ok(submit(s)), 0, "a retry during the attempt is still a replay");
    assert_eq!((l.op("op-1").attempts, l.op("op-1").state), (1, OperationState::Attempting));
}

/// A catalog `read` is an operation of its own (recorded, reserved, attempted, reported), which
/// members older than ledger version 10 would refuse: the leader's gate asks for 10.
#[test]
fn a_read_is_recorded_like_an_operation_and_gated_to_version_10() {
    let mut l = Ledger::new();
    let mut s = spec("op-r", "k-r", json!({}), Some("press"), l.now + 60_000);
    s.action = "read_press".into();
    let read = submit(s);
    assert_eq!(read.ledger_version(), 1, "the command alone cannot tell");
    assert_eq!(l.state.ledger_version_of(&read), 10, "the catalog makes it a read");
    let note = submit(spec("op-n", "k-n", json!({}), None, l.now + 60_000));
    assert_eq!(l.state.ledger_version_of(&note), 1);
    assert_eq!(l.ok(read), 2, "submitted + device reserved");
    l.ok(dispatch("op-r"));
    l.ok(start("op-r", 1));
    l.ok(report("op-r", 1, AttemptOutcome::Effect));
    assert_eq!(l.op("op-r").state, OperationState::EffectReported);
}

#[test]
fn the_same_key_with_another_payload_is_refused() {
    let mut l = Ledger::new();
    l.ok(submit(spec("op-1", "k-1", json!({"position_mm": 120}), None, l.now + 60_000)));
    let changed = spec("op-2", "k-1", json!({"position_mm": 121}), None, l.now + 60_000);
    assert_eq!(l.refused(submit(changed)), ReasonCode::IDEMPOTENCY_KEY_REUSED);
    // The key is per principal: another principal may use it.
    let mut other = spec("op-3", "k-1", json!({"position_mm": 121}), None, l.now + 60_000);
    other.principal_id = "other-agent".into();
    l.ok(submit(other));
    assert_eq!(all_ops(&l.state, T).len(), 2);
}

#[test]
fn one_operation_holds_a_device_and_stale_fencing_tokens_are_refused() {
    let mut l = Ledger::new();
    let deadline = l.now + 60_000;
    l.ok(submit(spec("op-1", "k-1", json!({"p": 1}), Some("press"), deadline)));
    let mut rival = spec("op-2", "k-2", json!({"p": 2}), Some("press"), deadline);
    rival.principal_id = "other-agent".into();
    assert_eq!(l.refused(submit(rival.clone())), ReasonCode::DEVICE_RESERVED);
    l.ok(submit(spec("op-3", "k-3", json!({"p": 3}), Some("arm"), deadline)));
    l.ok(dispatch("op-1"));
    assert_eq!(l.refused(start("op-1", 7)), ReasonCode::FENCING_TOKEN_STALE);
    l.ok(start("op-1", 1));
    l.ok(report("op-1", 1, AttemptOutcome::Effect));
    // Released: the rival gets the device with the next token; op-1's token is stale for it.
    l.ok(submit(rival));
    assert_eq!(l.op("op-2").fencing_token, Some(2));
    l.ok(dispatch("op-2"));
    assert_eq!(l.refused(start("op-2", 1)), ReasonCode::FENCING_TOKEN_STALE);
    l.ok(start("op-2", 2));
}

#[test]
fn operation_quotas_are_consumed_by_the_submission() {
    use writ_api::settings::{QuotasV1, TenantSettingsPatch};
    let mut l = Ledger::new();
    let quotas = |q: QuotasV1| Command::SetTenantSettings {
        tenant_id: T.into(),
        patch: TenantSettingsPatch { quotas: Some(q), ..Default::default() },
    };
    l.ok(quotas(QuotasV1 { operations_per_minute: Some(2), ..Default::default() }));
    l.now = 60_000 * 100; // the start of a minute
    l.ok(submit(spec("op-1", "k-1", json!({"p": 1}), None, l.now + 600_000)));
    l.ok(submit(spec("op-2", "k-2", json!({"p": 2}), None, l.now + 600_000)));
    assert_eq!(l.ok(submit(spec("op-1b", "k-1", json!({"p": 1}), None, l.now + 600_000))), 0, "a replay costs nothing");
    assert_eq!(
        l.refused(submit(spec("op-3", "k-3", json!({"p": 3}), None, l.now + 600_000))),
        ReasonCode::QUOTA_EXCEEDED
    );
    l.now += 60_000;
    l.ok(submit(spec("op-3", "k-3", json!({"p": 3}), None, l.now + 600_000)));

    // Cost units per day: each operation costs 1 here.
    l.ok(quotas(QuotasV1 { cost_units_per_day: Some(4), ..Default::default() }));
    l.ok(submit(spec("op-4", "k-4", json!({"p": 4}), None, l.now + 600_000)));
    assert_eq!(
        l.refused(submit(spec("op-5", "k-5", json!({"p": 5}), None, l.now + 600_000))),
        ReasonCode::QUOTA_EXCEEDED
    );

    // Concurrency: operations waiting or attempting at once.
    l.ok(quotas(QuotasV1 { concurrent_operations: Some(4), ..Default::default() }));
    assert_eq!(l.state.live_operations[T].len(), 4);
    assert_eq!(
        l.refused(submit(spec("op-6", "k-6", json!({"p": 6}), None, l.now + 600_000))),
        ReasonCode::QUOTA_EXCEEDED
    );
    l.ok(Command::CancelOperation {
        tenant_id: T.into(),
        operation_id: "op-1".into(),
        by_principal_id: "agent".into(),
    });
    l.ok(submit(spec("op-6", "k-6", json!({"p": 6}), None, l.now + 600_000)));
}

#[test]
fn a_principals_own_operation_quotas_apply_on_top_of_its_tenants() {
    use writ_api::quota::PrincipalQuotasV2;
    let mut l = Ledger::new();
    let own = |q: PrincipalQuotasV2| Command::SetPrincipalQuotasV2 {
        tenant_id: T.into(),
        principal: "agent".into(),
        quotas: q,
    };
    let by = |principal: &str, id: &str| {
        let mut s = spec(id, id, json!({"id": id}), None, 1_000_000_000);
        s.principal_id = principal.into();
        submit(s)
    };
    l.now = 60_000 * 100;
    l.ok(own(PrincipalQuotasV2 {
        operations_per_minute: Some(1),
        concurrent_operations: Some(3),
        ..Default::default()
    }));
    l.ok(by("agent", "a-1"));
    assert_eq!(l.refused(by("agent", "a-2")), ReasonCode::QUOTA_EXCEEDED);
    l.ok(by("other-agent", "o-1")); // another principal is not limited by it
    l.ok(by("other-agent", "o-2"));
    l.now += 60_000;
    l.ok(by("agent", "a-2"));
    l.now += 60_000;
    l.ok(by("agent", "a-3"));
    l.now += 60_000;
    assert_eq!(l.refused(by("agent", "a-4")), ReasonCode::QUOTA_EXCEEDED, "3 of its own are live");
    l.ok(own(PrincipalQuotasV2 { cost_units_per_day: Some(4), ..Default::default() }));
    l.ok(by("agent", "a-4"));
    assert_eq!(l.refused(by("agent", "a-5")), ReasonCode::QUOTA_EXCEEDED, "4 cost units today");
    l.ok(own(PrincipalQuotasV2::default()));
    l.ok(by("agent", "a-5"));
    assert!(l.state.principal_quotas.get(T).is_none_or(|m| m.is_empty()), "cleared");
    let bad = PrincipalQuotasV2 { concurrent_operations: Some(0), ..Default::default() };
    assert_eq!(l.refused(own(bad)), ReasonCode::INPUT_INVALID);
}

#[test]
fn an_attempt_without_a_device_still_has_a_lease() {
    let mut l = Ledger::new();
    l.ok(submit(spec("op-1", "k-1", json!({"p": 1}), None, l.now + 60_000)));
    l.ok(dispatch("op-1"));
    l.ok(start("op-1", 0));
    l.now += LEASE;
    l.ok(Command::ExpireDue { tenant_id: T.into() });
    assert_eq!(l.op("op-1").state, OperationState::UnknownEffect, "a lost outcome is never left attempting");
}

#[test]
fn an_executor_refuses_a_dispatch_before_attempting() {
    let mut l = Ledger::new();
    l.ok(submit(spec("op-1", "k-1", json!({"p": 1}), Some("press"), l.now + 60_000)));
    let refuse = |executor: &str, token: u64| Command::RefuseDispatch {
        tenant_id: T.into(),
        operation_id: "op-1".into(),
        executor_id: executor.into(),
        fencing_token: token,
        reason: "precondition door=closed not met".into(),
    };
    assert_eq!(l.refused(refuse("x-9", 1)), ReasonCode::EXECUTOR_NOT_FOUND, "no such executor");
    l.ok(dispatch("op-1"));
    assert_eq!(l.refused(refuse("x-2", 1)), ReasonCode::OPERATION_STATE_CONFLICT, "only its executor");
    assert_eq!(l.refused(refuse("x-1", 9)), ReasonCode::FENCING_TOKEN_STALE);
    l.ok(refuse("x-1", 1));
    assert_eq!((l.op("op-1").state, l.op("op-1").attempts), (OperationState::Failed, 0));
    assert!(!l.state.device_leases[T].contains_key("press"), "a refused operation frees its device");
    assert!(l.state.live_operations[T].is_empty(), "a finished operation leaves the live index");
    assert_eq!(l.refused(start("op-1", 1)), ReasonCode::OPERATION_STATE_CONFLICT, "never attempted afterwards");
}

#[test]
fn a_deadline_that_passes_while_queued_expires_the_operation() {
    let mut l = Ledger::new();
    l.ok(submit(spec("op-1", "k-1", json!({"p": 1}), Some("press"), l.now + 5_000)));
    l.ok(dispatch("op-1"));
    l.now += 5_000;
    // The next operation command applies the due transitions first: the stale dispatch is dead.
    assert_eq!(l.refused(start("op-1", 1)), ReasonCode::OPERATION_STATE_CONFLICT);
    assert_eq!((l.op("op-1").state, l.op("op-1").attempts), (OperationState::Expired, 0));
    assert!(!l.state.device_leases[T].contains_key("press"), "an expired operation frees its device");
    let past = spec("op-2", "k-2", json!({"p": 2}), None, l.now);
    assert_eq!(l.refused(submit(past)), ReasonCode::DEADLINE_EXCEEDED);
    // The cost is the catalog's (9), not what the submitter says (1).
    let mut dear = spec("op-3", "k-3", json!({"p": 3}), None, l.now + 1);
    dear.action = "dear_note".into();
    assert_eq!(dear.cost_units, 1);
    assert_eq!(l.refused(submit(dear)), ReasonCode::COST_CEILING_EXCEEDED);
}

#[test]
fn a_lost_outcome_is_an_unknown_effect_until_reconciled() {
    let mut l = Ledger::new();
    let s = spec("op-1", "k-1", json!({"p": 1}), Some("press"), l.now + 60_000);
    l.ok(submit(s.clone()));
    l.ok(dispatch("op-1"));
    l.ok(start("op-1", 1));
    l.now += LEASE; // the executor died mid-attempt: no renewal, no report
    l.ok(Command::ExpireDue { tenant_id: T.into() });
    assert_eq!(l.op("op-1").state, OperationState::UnknownEffect);
    assert_eq!(l.ok(submit(s)), 0, "a retry replays the unknown effect; no attempt");
    assert_eq!(l.op("op-1").attempts, 1);
    let next = spec("op-2", "k-2", json!({"p": 2}), Some("press"), l.now + 60_000);
    assert_eq!(
        l.refused(submit(next.clone())),
        ReasonCode::UNKNOWN_EFFECT_UNRESOLVED,
        "the device may still be moving: reconcile before another operation"
    );
    l.ok(Command::ResolveUnknownEffect {
        tenant_id: T.into(),
        operation_id: "op-1".into(),
        by_principal_id: "observer".into(),
        outcome: AttemptOutcome::NoEffect,
        note: "camera shows the press did not move".into(),
    });
    assert_eq!(l.op("op-1").state, OperationState::Failed);
    l.ok(submit(next));
}

#[test]
fn only_an_independent_observation_lets_an_effect_be_accepted() {
    let mut l = Ledger::new();
    l.ok(submit(spec("op-1", "k-1", json!({"p": 1}), Some("press"), l.now + 60_000)));
    l.ok(dispatch("op-1"));
    l.ok(start("op-1", 1));
    l.ok(report("op-1", 1, AttemptOutcome::Effect));
    assert_eq!(l.op("op-1").state, OperationState::EffectReported);
    let decide = |verdict| Command::DecideOperation {
        tenant_id: T.into(),
        operation_id: "op-1".into(),
        by_principal_id: "observer".into(),
        verdict,
        note: "".into(),
    };
    assert_eq!(l.refused(decide(Verdict::Accept)), ReasonCode::OBSERVATION_REQUIRED, "evidence alone");
    let observe = |who: &str| Command::RecordObservation {
        tenant_id: T.into(),
        operation_id: "op-1".into(),
        observer_id: who.into(),
        evidence: EvidenceV1 {
            content_hash: "cd".repeat(32),
            evidence_return_ref: "cam://1".into(),
            summary: "at 120 mm".into(),
        },
    };
    assert_eq!(l.refused(observe("agent")), ReasonCode::INPUT_INVALID, "the requester cannot observe itself");
    l.ok(observe("observer"));
    l.ok(decide(Verdict::Accept));
    assert_eq!(l.op("op-1").state, OperationState::Accepted);
    assert_eq!(l.refused(decide(Verdict::Reject)), ReasonCode::OPERATION_STATE_CONFLICT);
}

/// An edge's projection holds an operation while it is live, with its history, and lets it go
/// (history and key too) once it stops being live; later events about it (an observation, the
/// acceptance) fold as nothing there, while the ledger keeps the whole record.
#[test]
fn a_projection_lets_an_operation_go_when_it_stops_being_live() {
    let mut l = Ledger::new();
    let mut edge = l.state.clone();
    edge.project();
    let step = |l: &mut Ledger, edge: &mut writ_api::state::LedgerState, command: Command| {
        let req = LedgerRequest { stamp_ms: l.now, trace_id: "tr".into(), command: command.into() };
        let (outcome, events) = l.state.execute(&req);
        assert!(matches!(outcome, Outcome::Applied { .. }), "{outcome:?}");
        for env in &events {
            edge.fold_views(env).expect("the projection folds every event");
        }
    };
    let held = |edge: &writ_api::state::LedgerState| {
        let op = edge.operations.get(T).and_then(|m| m.get("op-1")).is_some();
        (op, edge.history.get(T).is_some_and(|h| h.contains_key("op-1")))
    };
    let deadline = l.now + 60_000;
    step(&mut l, &mut edge, submit(spec("op-1", "k-1", json!({"p": 1}), Some("press"), deadline)));
    step(&mut l, &mut edge, dispatch("op-1"));
    step(&mut l, &mut edge, start("op-1", 1));
    assert_eq!(held(&edge), (true, true), "live: held with its history");
    assert_eq!(edge.operations[T]["op-1"].spec.input, l.op("op-1").spec.input, "inputs kept while live");
    step(&mut l, &mut edge, report("op-1", 1, AttemptOutcome::Effect));
    assert_eq!(held(&edge), (false, false), "effect reported: no longer live, let go");
    assert!(edge.idempotency.is_empty() && edge.operations.is_empty() && edge.history.is_empty());
    assert!(edge.evidence.is_empty());
    // Of the cold rows it keeps the token records alone (with their time rows): it verifies
    // tokens.
    let kind = |k: &Vec<u8>| writ_api::cold::kind_prefix_of(k).and_then(|p| p.last().copied());
    let kinds: std::collections::BTreeSet<u8> = edge.cold.pending_rows().keys().filter_map(kind).collect();
    assert_eq!(kinds, [b't', b'y'].into(), "token records and their time rows only");
    assert!(edge.token(T, "jti-agent").is_some_and(|t| Some(t) == l.state.token(T, "jti-agent")));
    step(
        &mut l,
        &mut edge,
        Command::RecordObservation {
            tenant_id: T.into(),
            operation_id: "op-1".into(),
            observer_id: "observer".into(),
            evidence: EvidenceV1 {
                content_hash: "cd".repeat(32),
                evidence_return_ref: "cam://1".into(),
                summary: "ok".into(),
            },
        },
    );
    let accept = Command::DecideOperation {
        tenant_id: T.into(),
        operation_id: "op-1".into(),
        by_principal_id: "observer".into(),
        verdict: Verdict::Accept,
        note: "".into(),
    };
    step(&mut l, &mut edge, accept);
    assert_eq!(held(&edge), (false, false));
    assert_eq!(l.op("op-1").state, OperationState::Accepted, "the ledger keeps the whole record");
    step(&mut l, &mut edge, Command::RevokeToken { tenant_id: T.into(), jti: "jti-agent".into() });
    assert!(edge.token(T, "jti-agent").is_some_and(|t| t.revoked_at_ms.is_some()), "the edge sees the revocation");
    let mut expected = l.state.clone();
    expected.project();
    expected.clock_ms = edge.clock_ms;
    assert_eq!(edge, expected, "folded event by event, it is the projection of the state");
}

/// A projection asked to keep what it lets go hands each operation that stopped being live,
/// whole and with its history, to one taker; one not asked keeps nothing.
#[test]
fn a_projection_hands_over_the_operations_it_lets_go_once_asked() {
    let mut l = Ledger::new();
    let (mut kept, mut plain) = (l.state.clone(), l.state.clone());
    kept.project();
    kept.keep_departed();
    plain.project();
    let mut step = |l: &mut Ledger, command: Command| {
        let req = LedgerRequest { stamp_ms: l.now, trace_id: "tr".into(), command: command.into() };
        let (outcome, events) = l.state.execute(&req);
        assert!(matches!(outcome, Outcome::Applied { .. }), "{outcome:?}");
        for env in &events {
            kept.fold_views(env).expect("folds");
            plain.fold_views(env).expect("folds");
        }
        kept.take_departed()
    };
    let deadline = l.now + 60_000;
    assert!(step(&mut l, submit(spec("op-1", "k-1", json!({"p": 1}), Some("press"), deadline))).is_empty());
    assert!(step(&mut l, dispatch("op-1")).is_empty());
    assert!(step(&mut l, start("op-1", 1)).is_empty(), "live: still held");
    let departed = step(&mut l, report("op-1", 1, AttemptOutcome::Effect));
    assert_eq!(departed.len(), 1, "{departed:?}");
    assert_eq!(departed[0].op, l.op("op-1"), "the operation as the ledger holds it");
    assert_eq!(departed[0].history, l.state.operation_history(T, "op-1"), "with its whole history");
    assert_eq!(departed[0].history.last().map(|t| t.to), Some(OperationState::EffectReported));
    assert!(kept.take_departed().is_empty(), "taken once");
    assert_eq!(plain.departed, None, "a projection not asked keeps nothing");
    assert!(plain.take_departed().is_empty());
}

#[test]
fn cancel_is_immediate_before_the_attempt_and_asked_of_the_executor_during_it() {
    let mut l = Ledger::new();
    l.ok(submit(spec("op-1", "k-1", json!({"p": 1}), Some("press"), l.now + 60_000)));
    l.ok(cancel("op-1"));
    assert_eq!(l.op("op-1").state, OperationState::Cancelled);
    assert!(l.state.device_leases[T].is_empty(), "the device is free again");
    assert_eq!(l.refused(cancel("op-1")), ReasonCode::OPERATION_STATE_CONFLICT, "terminal");
    // During the attempt: recorded, the executor decides; no effect → cancelled.
    l.ok(submit(spec("op-2", "k-2", json!({"p": 2}), Some("press"), l.now + 60_000)));
    l.ok(dispatch("op-2"));
    l.ok(start("op-2", 2));
    assert_eq!(l.ok(cancel("op-2")), 1);
    assert!(l.op("op-2").cancel_requested);
    assert_eq!(l.op("op-2").state, OperationState::Attempting);
    assert_eq!(l.ok(cancel("op-2")), 0, "asking again changes nothing");
    l.ok(report("op-2", 2, AttemptOutcome::NoEffect));
    assert_eq!(l.op("op-2").state, OperationState::Cancelled);
    // An effect reported despite the request is the truth.
    l.ok(submit(spec("op-3", "k-3", json!({"p": 3}), Some("press"), l.now + 60_000)));
    l.ok(dispatch("op-3"));
    l.ok(start("op-3", 3));
    l.ok(cancel("op-3"));
    l.ok(report("op-3", 3, AttemptOutcome::Effect));
    assert_eq!(l.op("op-3").state, OperationState::EffectReported);
}

#[test]
fn a_dispatch_not_started_in_time_is_offered_again_and_the_late_start_refused() {
    let mut l = Ledger::new();
    l.ok(submit(spec("op-1", "k-1", json!({"p": 1}), Some("press"), l.now + 120_000)));
    l.ok(dispatch("op-1"));
    assert_eq!(l.refused(start_by("x-press", "op-1", 1)), ReasonCode::OPERATION_STATE_CONFLICT, "x-1's dispatch");
    l.now += writ_api::operation::DISPATCH_START_MS;
    l.ok(Command::ExpireDue { tenant_id: T.into() });
    let op = l.op("op-1");
    assert_eq!((op.state, op.executor_id.as_deref(), op.fencing_token), (OperationState::Reserved, None, Some(1)));
    // Offered again: another executor's start claims it, and x-1's late start is refused.
    l.ok(start_by("x-press", "op-1", 1));
    assert_eq!(l.refused(start("op-1", 1)), ReasonCode::OPERATION_STATE_CONFLICT, "the late start is refused");
    let op = l.op("op-1");
    assert_eq!((op.attempts, op.state, op.executor_id.as_deref()), (1, OperationState::Attempting, Some("x-press")));
}

/// Issue 17 step 2: the executor's start is the claim — a reserved operation goes to the first
/// eligible executor that starts it, in one entry (no separate dispatch), exactly once.
#[test]
fn the_first_eligible_executor_to_start_claims_a_reserved_operation() {
    let mut l = Ledger::new();
    let deadline = l.now + 60_000;
    l.ok(submit(spec("op-1", "k-1", json!({"p": 1}), Some("arm"), deadline)));
    assert_eq!(l.refused(start_by("x-press", "op-1", 1)), ReasonCode::OPERATION_NOT_FOUND, "not its device");
    assert_eq!(l.refused(start_by("x-9", "op-1", 1)), ReasonCode::EXECUTOR_NOT_FOUND);
    assert_eq!(l.refused(start_by("x-1", "op-1", 2)), ReasonCode::FENCING_TOKEN_STALE);
    assert_eq!(l.op("op-1").state, OperationState::Reserved, "refusals claim nothing");
    assert_eq!(l.ok(start_by("x-1", "op-1", 1)), 3, "dispatched, attempting and the lease, in one entry");
    let op = l.op("op-1");
    assert_eq!((op.state, op.attempts, op.executor_id.as_deref()), (OperationState::Attempting, 1, Some("x-1")));
    assert_eq!(l.refused(start_by("x-1", "op-1", 1)), ReasonCode::OPERATION_STATE_CONFLICT, "one attempt");
    // Two executors race for a press operation: the ledger decides once.
    l.ok(submit(spec("op-2", "k-2", json!({"p": 2}), Some("press"), deadline)));
    l.ok(start_by("x-press", "op-2", 1));
    assert_eq!(l.refused(start_by("x-1", "op-2", 1)), ReasonCode::OPERATION_STATE_CONFLICT);
    assert_eq!(l.op("op-2").executor_id.as_deref(), Some("x-press"));
    // A deviceless operation is any executor's of the tenant; a revoked one claims nothing.
    l.ok(submit(spec("op-3", "k-3", json!({"p": 3}), None, deadline)));
    l.ok(Command::RevokeExecutor { tenant_id: T.into(), executor_id: "x-press".into() });
    assert_eq!(l.refused(start_by("x-press", "op-3", 0)), ReasonCode::EXECUTOR_REVOKED);
    // The refusal before attempting claims the same way.
    let refuse = Command::RefuseDispatch {
        tenant_id: T.into(),
        operation_id: "op-3".into(),
        executor_id: "x-1".into(),
        fencing_token: 0,
        reason: "precondition door=closed not met".into(),
    };
    l.ok(refuse);
    let op = l.op("op-3");
    assert_eq!((op.state, op.attempts, op.executor_id.as_deref()), (OperationState::Failed, 0, Some("x-1")));
}

/// Issue 17 step 2: a command carries the decision of the request that made it; the ledger
/// records it after the command's events — allowed, or denied with the command's rejection —
/// and answers with the operation as the command left it (a replay: the prior one).
#[test]
fn a_command_carries_its_requests_decision_and_answers_with_the_operation() {
    use writ_api::audit::RequestDecisionV1;
    use writ_api::ledger::Event;
    let mut l = Ledger::new();
    let decision = RequestDecisionV1 {
        trace_id: "tr-1".into(),
        principal_id: "agent".into(),
        token_id: Some("jti-agent".into()),
        parent_token_id: None,
        method: "tools/call".into(),
        name: Some("operation.execute".into()),
        outcome: "allowed".into(),
        reason: None,
    };
    let audited = |command: Command| Command::Audited { decision: decision.clone(), command: Box::new(command) };
    let recorded = |events: &[writ_api::ledger::EventEnvelope]| match &events.last().expect("events").event {
        Event::RequestDecidedV1 { decision, .. } => decision.clone(),
        other => panic!("the decision comes last, got {other:?}"),
    };
    let s = spec("op-1", "k-1", json!({"p": 1}), Some("press"), l.now + 60_000);
    let Outcome::Applied { events, operation: Some(op) } = l.run(audited(submit(s.clone()))) else {
        panic!("applied with the operation")
    };
    assert_eq!(events.len(), 3, "submitted, reserved, the decision: {events:?}");
    assert_eq!((recorded(&events).outcome.as_str(), recorded(&events).reason), ("allowed", None));
    assert_eq!((op.spec.operation_id.as_str(), op.state), ("op-1", OperationState::Reserved));
    // A replay under a new operation id answers with the prior operation, and is recorded.
    let mut again = s.clone();
    again.operation_id = "op-retry".into();
    let Outcome::Applied { events, operation: Some(op) } = l.run(audited(submit(again))) else { panic!("replay") };
    assert_eq!((events.len(), op.spec.operation_id.as_str()), (1, "op-1"));
    // Refused: the rejection, then the decision as denied with its reason.
    let mut other = spec("op-2", "k-2", json!({"p": 2}), Some("press"), l.now + 60_000);
    other.principal_id = "other-agent".into();
    let req = LedgerRequest { stamp_ms: l.now, trace_id: "tr".into(), command: audited(submit(other)).into() };
    let (outcome, events, trail) = l.state.execute_audited(&req);
    assert!(matches!(outcome, Outcome::Rejected { reason: ReasonCode::DEVICE_RESERVED, .. }), "{outcome:?}");
    assert!(matches!(events[0].event, Event::CommandRejectedV2 { .. }), "{events:?}");
    let denied = recorded(&events);
    assert_eq!((denied.outcome.as_str(), denied.reason), ("denied", Some(ReasonCode::DEVICE_RESERVED)));
    assert_eq!(trail.len(), 2, "both on the tenant's trail: {trail:#?}");
    // The executor's start carries its call's decision too, and answers with the attempt.
    let Outcome::Applied { operation: Some(op), .. } = l.run(audited(start_by("x-1", "op-1", 1))) else {
        panic!("started")
    };
    assert_eq!((op.state, op.attempts), (OperationState::Attempting, 1));
    // A decision travels with one plain command only, and within its bounds.
    let nested = audited(audited(cancel("op-1")));
    assert_eq!(l.refused(nested), ReasonCode::INPUT_INVALID);
    let mut long = decision.clone();
    long.method = "m".repeat(writ_api::audit::DECISION_FIELD_BYTES_MAX + 1);
    let unbounded = Command::Audited { decision: long, command: Box::new(cancel("op-1")) };
    assert_eq!(l.refused(unbounded), ReasonCode::INPUT_INVALID);
    assert_eq!(l.op("op-1").state, OperationState::Attempting, "a refused wrapper runs nothing");
}

fn asking(id: &str, key: &str, requests: &[&str]) -> OperationSpecV1 {
    let mut s = spec(id, key, json!({"k": key}), Some("press"), 1_000_000 + 60_000);
    s.input_requests = requests
        .iter()
        .map(|r| (r.to_string(), json!({"method": "elicitation/create", "params": {"message": r}}).to_string()))
        .collect();
    s
}

fn answer(id: &str, by: &str, answers: &[(&str, &str)]) -> Command {
    Command::AnswerInputs {
        tenant_id: T.into(),
        operation_id: id.into(),
        by_principal_id: by.into(),
        answers: answers
            .iter()
            .map(|(k, action)| (k.to_string(), json!({"action": action, "content": {}}).to_string()))
            .collect(),
    }
}

#[test]
fn an_operation_waiting_for_input_is_verified_only_when_every_answer_accepts() {
    let mut l = Ledger::new();
    l.ok(submit(asking("op-1", "k-1", &["name", "confirm"])));
    assert_eq!(l.op("op-1").state, OperationState::Proposed);
    assert!(l.state.device_leases.get(T).is_none_or(|m| m.is_empty()), "nothing reserved while waiting");
    assert_eq!(l.refused(dispatch("op-1")), ReasonCode::OPERATION_STATE_CONFLICT);
    assert_eq!(l.refused(answer("op-1", "other-agent", &[("name", "accept")])), ReasonCode::OPERATION_NOT_FOUND);
    // Partial: one answer recorded, still waiting; unknown ids and repeats are ignored.
    assert_eq!(l.ok(answer("op-1", "agent", &[("name", "accept"), ("bogus", "accept")])), 1);
    assert_eq!(l.op("op-1").state, OperationState::Proposed);
    assert_eq!(l.ok(answer("op-1", "agent", &[("name", "decline")])), 0, "an answer is final");
    // The last answer verifies and reserves it.
    l.ok(answer("op-1", "agent", &[("confirm", "accept")]));
    assert_eq!(l.op("op-1").state, OperationState::Reserved);
    assert_eq!(l.op("op-1").answers.len(), 2);
    l.ok(dispatch("op-1"));
    // A declined input cancels the operation.
    l.ok(submit(asking("op-2", "k-2", &["confirm"])));
    l.ok(answer("op-2", "agent", &[("confirm", "decline")]));
    assert_eq!(l.op("op-2").state, OperationState::Cancelled);
    // A deadline passing while it waits for input expires it.
    l.ok(submit(asking("op-3", "k-3", &["confirm"])));
    l.now += 61_000;
    assert_eq!(l.refused(answer("op-3", "agent", &[("confirm", "accept")])), ReasonCode::OPERATION_STATE_CONFLICT);
    assert_eq!(l.op("op-3").state, OperationState::Expired);
}

/// One step of a random workload. Three operation keys over two devices, so that the steps of
/// one operation's life (submit, dispatch, start, cancel, report) often meet in a sequence.
#[derive(Debug, Clone)]
enum Step {
    Submit {
        key: u8,
        payload: u8,
        device: u8,
        ttl_ms: u64,
    },
    Dispatch(u8),
    Start(u8, bool),
    /// The start of the press-only executor: a rival claim.
    Claim(u8),
    Report(u8, bool),
    Advance(u64),
    Expire,
    Resolve(u8),
    Cancel(u8),
    Refuse(u8),
    /// A dry run of the careful (proposed-first) action as proposal `prop-<k>`, and its use.
    Propose(u8, u8),
    SubmitProposed(u8, u8),
}

const KEYS: u8 = 3;

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        3 => (0u8..KEYS, 0u8..2, 0u8..3, 1u64..20_000).prop_map(|(key, payload, device, ttl_ms)| Step::Submit {
            key,
            payload,
            device,
            ttl_ms
        }),
        3 => (0u8..KEYS).prop_map(Step::Dispatch),
        3 => (0u8..KEYS, prop::bool::weighted(0.8)).prop_map(|(k, f)| Step::Start(k, f)),
        1 => (0u8..KEYS).prop_map(Step::Claim),
        3 => (0u8..KEYS, any::<bool>()).prop_map(|(k, e)| Step::Report(k, e)),
        1 => (1u64..3_000).prop_map(Step::Advance),
        1 => Just(Step::Expire),
        1 => (0u8..KEYS).prop_map(Step::Resolve),
        2 => (0u8..KEYS).prop_map(Step::Cancel),
        1 => (0u8..KEYS).prop_map(Step::Refuse),
        1 => (0u8..KEYS, 0u8..2).prop_map(|(k, p)| Step::Propose(k, p)),
        1 => (0u8..KEYS, 0u8..2).prop_map(|(k, p)| Step::SubmitProposed(k, p)),
    ]
}

/// The life of one operation, in order: submitted, dispatched, started, cancelled during its
/// attempt, reported. A workload interleaves prefixes of such lives with random steps, so the
/// late transitions (cancel or report during an attempt, a lease running out) are reached
/// often, not only when chance lines five steps up.
fn life(key: u8, device: u8, effect: bool) -> Vec<Step> {
    vec![
        Step::Submit { key, payload: 0, device, ttl_ms: 20_000 },
        Step::Dispatch(key),
        Step::Start(key, true),
        Step::Cancel(key),
        Step::Report(key, effect),
    ]
}

/// Random steps and prefixes of operation lives, up to about 60 steps.
fn workload() -> impl Strategy<Value = Vec<Step>> {
    let piece = prop_oneof![
        4 => step().prop_map(|s| vec![s]),
        1 => (0u8..KEYS, 0u8..3, any::<bool>(), 1usize..=5).prop_map(|(key, device, effect, len)| {
            let mut steps = life(key, device, effect);
            steps.truncate(len);
            steps
        }),
    ];
    proptest::collection::vec(piece, 1..30).prop_map(|pieces| pieces.concat())
}

/// What a run of steps reached, beyond the invariants holding.
#[derive(Debug, Default)]
struct Reached {
    /// Operations cancelled while their attempt ran (and reported no effect).
    cancelled_during_attempt: usize,
    /// Every entry the run executed, in order.
    requests: Vec<LedgerRequest>,
}

/// Runs `steps` against a fresh ledger, checking the invariants after every command and, at
/// the end, that a replica folding the events equals the live state.
fn run_steps(steps: Vec<Step>) -> Result<Reached, TestCaseError> {
    let mut l = Ledger::new();
    let mut log = Vec::new();
    let base = l.state.clone();
    let id = |k: u8| format!("op-{k}");
    let mut last_token: BTreeMap<String, u64> = BTreeMap::new();
    let mut requests = Vec::new();
    let token_of = |l: &Ledger, k: u8| l.state.operation(T, &id(k)).and_then(|o| o.fencing_token).unwrap_or(0);
    for s in steps {
        let command = match s {
            Step::Submit { key, payload, device, ttl_ms } => {
                let device = ["press", "arm"].get(device as usize).copied();
                submit(spec(&id(key), &format!("k-{key}"), json!({"p": payload}), device, l.now + ttl_ms))
            }
            Step::Dispatch(k) => dispatch(&id(k)),
            Step::Start(k, fresh) => {
                let token = token_of(&l, k);
                start(&id(k), if fresh { token } else { token + 1 })
            }
            Step::Claim(k) => start_by("x-press", &id(k), token_of(&l, k)),
            Step::Report(k, effect) => {
                let outcome = if effect { AttemptOutcome::Effect } else { AttemptOutcome::NoEffect };
                report(&id(k), token_of(&l, k), outcome)
            }
            Step::Advance(ms) => {
                l.now += ms;
                continue;
            }
            Step::Expire => Command::ExpireDue { tenant_id: T.into() },
            Step::Resolve(k) => Command::ResolveUnknownEffect {
                tenant_id: T.into(),
                operation_id: id(k),
                by_principal_id: "observer".into(),
                outcome: AttemptOutcome::NoEffect,
                note: "".into(),
            },
            Step::Cancel(k) => cancel(&id(k)),
            Step::Propose(k, p) | Step::SubmitProposed(k, p) => {
                let mut call = spec(&id(k), &format!("k-{k}"), json!({"p": p}), None, l.now + 20_000);
                call.action = "careful_note".into();
                if matches!(s, Step::Propose(..)) {
                    propose(&format!("prop-{k}"), call)
                } else {
                    submit_proposed(&format!("prop-{k}"), call)
                }
            }
            Step::Refuse(k) => Command::RefuseDispatch {
                tenant_id: T.into(),
                operation_id: id(k),
                executor_id: "x-1".into(),
                fencing_token: token_of(&l, k),
                reason: "stale".into(),
            },
        };
        let req = LedgerRequest { stamp_ms: l.now, trace_id: "tr".into(), command: command.into() };
        let (_, events) = l.state.execute(&req);
        requests.push(req);
        log.extend(events);
        let violations = invariant_violations(&l.state);
        prop_assert!(violations.is_empty(), "{}", violations.join("\n"));
        for (device, lease) in l.state.device_leases.get(T).into_iter().flat_map(|m| m.iter()) {
            let last = last_token.entry(device.clone()).or_insert(0);
            prop_assert!(lease.fencing_token >= *last, "fencing tokens of {} went back", device);
            *last = lease.fencing_token;
        }
    }
    let mut projected = base.clone();
    let mut replica = base;
    for env in &log {
        replica.apply_event(env);
    }
    // Ledger time also advances on entries that append no event (a replay); every replica
    // executes every entry, so only a fold of the events alone lags on the clock.
    replica.clock_ms = l.state.clock_ms;
    prop_assert_eq!(&replica, &l.state);
    // An edge's projection folded event by event is the projection of the state: the live
    // operations, whole, with their histories; no finished operation, binding, idempotency key
    // or audit index.
    projected.project();
    for env in &log {
        projected.fold_views(env).map_err(|e| TestCaseError::fail(e.to_string()))?;
    }
    projected.clock_ms = l.state.clock_ms;
    let mut expected = l.state.clone();
    expected.project();
    prop_assert!(expected.audit.is_empty() && expected.compacted.is_empty() && expected.idempotency.is_empty());
    prop_assert!(expected.evidence.is_empty());
    let live: Vec<&String> = l.state.live_operations.values().flatten().collect();
    let held: Vec<&String> = expected.operations.values().flat_map(|m| m.keys()).collect();
    prop_assert_eq!(held.len(), live.len());
    for op in expected.operations.values().flat_map(|m| m.values()) {
        prop_assert!(op.is_live(), "{} {:?}", op.spec.operation_id, op.state);
        prop_assert_eq!(&op.spec.input, &l.state.operation(T, &op.spec.operation_id).unwrap().spec.input);
    }
    for (tenant, steps) in &expected.history {
        prop_assert!(steps.keys().all(|id| expected.operations.get(tenant).is_some_and(|m| m.contains_key(id))));
    }
    prop_assert_eq!(&projected, &expected);
    // Every operation of an action that demands verification used up a proposal of its own.
    let used: Vec<&String> = log
        .iter()
        .filter_map(|e| match &e.event {
            Event::ProposalUsedV1 { operation_id, .. } => Some(operation_id),
            _ => None,
        })
        .collect();
    for env in &log {
        if let Event::OperationSubmittedV1 { spec, .. } = &env.event {
            let verified = spec.action != "careful_note" || used.contains(&&spec.operation_id);
            prop_assert!(verified, "{} was recorded without a proposal", spec.operation_id);
        }
    }
    let cancelled_during_attempt =
        all_ops(&l.state, T).iter().filter(|op| op.state == OperationState::Cancelled && op.attempts == 1).count();
    Ok(Reached { cancelled_during_attempt, requests })
}

/// Executes `requests` on a fresh ledger, consecutive ones of the same time grouped into batch
/// entries of the sizes `sizes` names in turn (1: an entry of its own); returns every
/// command's outcome, the events and audit records in order, and the final state.
fn execute_grouped(
    requests: &[LedgerRequest],
    sizes: &[usize],
) -> (Vec<Outcome>, Vec<EventEnvelope>, Vec<writ_api::audit::AuditRecord>, writ_api::state::LedgerState) {
    let mut state = Ledger::new().state;
    let (mut outcomes, mut events, mut audit) = (Vec::new(), Vec::new(), Vec::new());
    let mut sizes = sizes.iter().cycle();
    let mut rest = requests;
    while let Some(first) = rest.first() {
        let same_time = rest.iter().take_while(|r| r.stamp_ms == first.stamp_ms).count();
        let n = (*sizes.next().unwrap_or(&1)).clamp(1, same_time);
        let (group, after) = rest.split_at(n);
        rest = after;
        let entry = if n == 1 {
            group[0].clone()
        } else {
            let commands = group
                .iter()
                .map(|r| writ_api::ledger::BatchedCommand {
                    trace_id: r.trace_id.clone(),
                    command: (*r.command).clone(),
                })
                .collect();
            LedgerRequest {
                stamp_ms: first.stamp_ms,
                trace_id: String::new(),
                command: Command::Batch { commands }.into(),
            }
        };
        let (outcome, mut appended, audited) = state.execute_audited(&entry);
        let mut records = writ_api::trail::records_of(&appended, &audited);
        match outcome {
            Outcome::Batch(each) => {
                assert_eq!(each.len(), n, "one outcome per command");
                outcomes.extend(each);
            }
            one => outcomes.push(one),
        }
        events.append(&mut appended);
        audit.append(&mut records);
    }
    (outcomes, events, audit, state)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// A batch entry (`Command::Batch`, what a leader proposes under load) is exactly its
    /// commands as consecutive entries: the same outcome for each, the same events and audit
    /// records, the same state — so every invariant the workloads check holds for batches too.
    #[test]
    fn a_batch_entry_is_its_commands_in_a_row(steps in workload(), sizes in proptest::collection::vec(1usize..6, 1..20)) {
        let requests = run_steps(steps)?.requests;
        let alone = execute_grouped(&requests, &[1]);
        let batched = execute_grouped(&requests, &sizes);
        prop_assert_eq!(&batched.0, &alone.0);
        prop_assert_eq!(&batched.1, &alone.1);
        prop_assert_eq!(&batched.2, &alone.2);
        prop_assert!(batched.3 == alone.3, "the states differ");
        prop_assert_eq!(batched.3.digest(), alone.3.digest());
    }
}

/// A batch inside a batch is refused as one command (a leader never forms one), and the other
/// commands of the entry stand.
#[test]
fn a_nested_batch_is_refused_alone() {
    let mut l = Ledger::new();
    let inner = Command::Batch { commands: Vec::new() };
    let commands = vec![
        writ_api::ledger::BatchedCommand { trace_id: "a".into(), command: inner },
        writ_api::ledger::BatchedCommand {
            trace_id: "b".into(),
            command: submit(spec("op-1", "k-1", json!({"p": 1}), None, l.now + 60_000)),
        },
    ];
    let Outcome::Batch(outcomes) = l.run(Command::Batch { commands }) else { panic!("not a batch outcome") };
    assert!(matches!(outcomes[0], Outcome::Rejected { reason: ReasonCode::INPUT_INVALID, .. }), "{:?}", outcomes[0]);
    assert!(matches!(&outcomes[1], Outcome::Applied { operation: Some(op), .. } if op.spec.operation_id == "op-1"));
    assert_eq!(Command::Batch { commands: Vec::new() }.submittable().unwrap_err().reason, ReasonCode::INPUT_INVALID);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Whatever happens: an operation is attempted at most once, a device is held by at most one
    /// live operation and its fencing tokens only grow, nothing expired was ever attempted,
    /// nothing attempted is cancelled unless asked to during the attempt, and a replica that
    /// folds the events equals the live state.
    #[test]
    fn invariants_hold_and_replay_is_exact(steps in workload()) {
        run_steps(steps)?;
    }
}

/// The generator is only as good as the cases it reaches: with a fixed seed, a run of the same
/// size as the property test must reach a cancellation during an attempt (the case the old
/// invariant "cancelled ⇒ never attempted" got wrong).
#[test]
fn the_generator_reaches_cancel_during_attempt() {
    use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
    let rng = TestRng::from_seed(RngAlgorithm::ChaCha, &[7; 32]);
    let mut runner = TestRunner::new_with_rng(Config { cases: 64, ..Config::default() }, rng);
    let reached = std::cell::Cell::new(0);
    runner
        .run(&workload(), |steps| {
            reached.set(reached.get() + run_steps(steps)?.cancelled_during_attempt);
            Ok(())
        })
        .expect("the invariants hold");
    assert!(reached.get() > 0, "no generated case cancelled an operation during its attempt");
}

/// The invariant check is not vacuous: each mutation of a reached state is caught.
#[test]
fn a_mutated_state_breaks_the_invariants() {
    let mut l = Ledger::new();
    l.ok(submit(spec("op-1", "k-1", json!({"p": 1}), Some("press"), l.now + 60_000)));
    l.ok(dispatch("op-1"));
    l.ok(start("op-1", 1));
    l.ok(cancel("op-1"));
    l.ok(report("op-1", 1, AttemptOutcome::NoEffect));
    assert_eq!((l.op("op-1").state, l.op("op-1").attempts), (OperationState::Cancelled, 1));
    assert!(invariant_violations(&l.state).is_empty(), "cancelled during its attempt is allowed");
    // op-1 has finished: it is a cold row, changed where it is kept.
    let mutate = |f: &dyn Fn(&mut Operation)| {
        use writ_api::cold::{ColdOperation, Row};
        let mut state = l.state.clone();
        let old = state.cold.get(T, Row::Operation("op-1")).expect("op-1 is a cold row");
        let mut row: ColdOperation = writ_api::decode(&old).expect("a cold row");
        f(&mut row.op);
        let new = writ_api::encode(&row).expect("encodable");
        state.cold.put(T, Row::Operation("op-1"), state.revision, Some(&old), Some(new));
        invariant_violations(&state)
    };
    assert!(!mutate(&|op| op.cancel_requested = false).is_empty(), "a cancel nobody asked for during the attempt");
    assert!(!mutate(&|op| op.attempts = 2).is_empty(), "a second attempt");
    assert!(!mutate(&|op| op.state = OperationState::Expired).is_empty(), "an attempted operation expired");
    assert!(!mutate(&|op| op.state = OperationState::Attempting).is_empty(), "the live index out of step");
    // The derived indexes: one left out of step with the operations is caught.
    l.ok(submit(spec("op-2", "k-2", json!({"p": 2}), Some("press"), l.now + 60_000)));
    assert!(invariant_violations(&l.state).is_empty());
    let mut state = l.state.clone();
    state.index.due.clear();
    assert!(!invariant_violations(&state).is_empty(), "a live operation missing from the due index");
    let mut state = l.state.clone();
    state.index.live_by_principal.clear();
    assert!(!invariant_violations(&state).is_empty(), "a principal's live count lost");
}

/// SPEC S3: whoever submits, the ledger re-derives the authority an operation names and checks
/// it covers the action, the device and the input; the cost is the catalog's.
#[test]
fn the_ledger_rechecks_the_authority_behind_an_operation() {
    let mut l = Ledger::new();
    let as_ref = |s: &OperationSpecV1, authority: &str| {
        let mut s = s.clone();
        s.authority_ref = authority.into();
        Command::SubmitOperation { tenant_id: T.into(), spec: s }
    };
    let base = spec("op-1", "k-1", json!({"p": 1}), Some("press"), l.now + 60_000);
    // A token the ledger never issued, or another principal's.
    assert_eq!(l.refused(as_ref(&base, "jti-forged")), ReasonCode::AUTH_TOKEN_INVALID);
    assert_eq!(l.refused(as_ref(&base, "jti-observer")), ReasonCode::AUTH_TOKEN_INVALID);
    // A token scoped below the action: refused although the principal holds the scope.
    l.issue_token("jti-narrow", "agent", &["ops:read"]);
    assert_eq!(l.refused(as_ref(&base, "jti-narrow")), ReasonCode::APP_SCOPE_FORBIDDEN);
    // An action missing from the catalog, a device of no such class, input its schema forbids.
    let mut unknown = base.clone();
    unknown.action = "launch_rocket".into();
    assert_eq!(l.refused(submit(unknown)), ReasonCode::TOOL_NOT_FOUND);
    let mut deviceless = base.clone();
    deviceless.device_id = Some("no-such-device".into());
    assert_eq!(l.refused(submit(deviceless)), ReasonCode::DEVICE_NOT_FOUND);
    let mut bad_input = base.clone();
    bad_input.input = "[1, 2]".into();
    assert_eq!(l.refused(submit(bad_input)), ReasonCode::INPUT_INVALID);
    // A revoked token stops working at the ledger too, and so does an expired one.
    l.ok(Command::RevokeToken { tenant_id: T.into(), jti: "jti-agent".into() });
    assert_eq!(l.refused(submit(base.clone())), ReasonCode::AUTH_TOKEN_REVOKED);
    l.now += 24 * 3_600_000;
    assert_eq!(l.refused(as_ref(&base, "jti-other-agent")), ReasonCode::AUTH_TOKEN_INVALID);
    let mut theirs = base.clone();
    theirs.principal_id = "other-agent".into();
    theirs.deadline_ms = l.now + 60_000;
    assert_eq!(l.refused(submit(theirs)), ReasonCode::AUTH_TOKEN_EXPIRED);
    assert!(all_ops(&l.state, T).is_empty(), "nothing was recorded");
}

/// SPEC S3: a critical action runs only with the approval of another principal holding
/// ops:approve, for exactly that call; the ledger adds the approval request itself.
#[test]
fn an_agent_cannot_approve_its_own_critical_call() {
    use writ_api::operation::{APPROVAL_REQUEST, APPROVE_SCOPE, CONFIRM_REQUEST};
    let mut l = Ledger::new();
    let approver = PrincipalSpecV1 {
        principal_id: "approver".into(),
        name: "approver".into(),
        kind: PrincipalKind::Agent,
        preset: None,
        scopes: [APPROVE_SCOPE.to_string()].into(),
        metadata: Default::default(),
    };
    l.ok(Command::CreatePrincipal { tenant_id: T.into(), spec: approver });
    let mut s = spec("op-1", "k-1", json!({"p": 1}), Some("press"), l.now + 600_000);
    s.action = "crush".into();
    assert_eq!(l.refused(submit(s.clone())), ReasonCode::VERIFY_REQUIRED, "critical: verified by its requester first");
    l.ok(propose("prop-1", s.clone()));
    l.ok(submit_proposed("prop-1", s.clone()));
    let op = l.op("op-1");
    assert_eq!(op.state, OperationState::Proposed, "it waits for the approval the ledger asked for");
    assert!(op.spec.input_requests.contains_key(APPROVAL_REQUEST));
    assert!(!l.state.device_leases.get(T).is_some_and(|m| m.contains_key("press")), "nothing is reserved yet");
    let approve = |by: &str, hash: &str| Command::AnswerInputs {
        tenant_id: T.into(),
        operation_id: "op-1".into(),
        by_principal_id: by.into(),
        answers: [(
            APPROVAL_REQUEST.to_string(),
            json!({"action": "accept", "content": {"payload_hash": hash}}).to_string(),
        )]
        .into(),
    };
    let hash = s.payload_hash.clone();
    // Its requester cannot, nor a principal without ops:approve, nor an approval of another call.
    assert_eq!(l.refused(approve("agent", &hash)), ReasonCode::APP_SCOPE_FORBIDDEN);
    assert_eq!(l.refused(approve("observer", &hash)), ReasonCode::APP_SCOPE_FORBIDDEN);
    assert_eq!(l.refused(approve("approver", &"0".repeat(64))), ReasonCode::INPUT_INVALID);
    // An edge cannot smuggle its own "approval" request in either.
    let mut sneaky = spec("op-2", "k-2", json!({"p": 2}), Some("arm"), l.now + 600_000);
    sneaky.action = "crush".into();
    sneaky.input_requests.insert(CONFIRM_REQUEST.into(), json!({"method": "x"}).to_string());
    sneaky.input_requests.insert(APPROVAL_REQUEST.into(), json!({"method": "x"}).to_string());
    assert_eq!(l.refused(submit(sneaky)), ReasonCode::INPUT_INVALID);
    // The approver's approval: verified and reserved, with the approver on the record.
    l.ok(approve("approver", &hash));
    let op = l.op("op-1");
    assert_eq!(op.state, OperationState::Reserved);
    assert!(op.answers[APPROVAL_REQUEST].contains("\"approver\":\"approver\""), "{:?}", op.answers);
    assert!(l.state.device_leases[T].contains_key("press"));
}

/// SPEC E5, S3: the ledger holds the verification rule whatever an edge does — an action that
/// demands verification (dry run, high or critical risk) is recorded only with its principal's
/// own, unexpired, unused proposal of exactly that call, or waiting for a confirmation that only
/// its requester answers; proposals are bounded per principal and leave the state when used or
/// expired.
#[test]
fn the_ledger_holds_the_verification_rule() {
    use writ_api::operation::{CONFIRM_REQUEST, PROPOSALS_PER_PRINCIPAL_MAX, PROPOSAL_TTL_MS};
    let mut l = Ledger::new();
    let careful = |id: &str, key: &str, p: i64, l: &Ledger| {
        let mut s = spec(id, key, json!({"p": p}), None, l.now + 600_000);
        s.action = "careful_note".into();
        s.input = json!({"p": p}).to_string();
        s
    };
    let s = careful("op-1", "k-1", 1, &l);
    assert_eq!(l.refused(submit(s.clone())), ReasonCode::VERIFY_REQUIRED, "neither a proposal nor a confirmation");
    // A proposal passes the same re-check as a submission.
    let mut bad = careful("op-x", "k-x", 1, &l);
    bad.input = json!({"p": "one"}).to_string();
    assert_eq!(l.refused(propose("prop-bad", bad)), ReasonCode::INPUT_INVALID, "the schema applies");
    let mut foreign = s.clone();
    foreign.authority_ref = "jti-other-agent".into();
    assert_eq!(
        l.refused(Command::ProposeOperation { tenant_id: T.into(), spec: foreign }),
        ReasonCode::AUTH_TOKEN_INVALID,
        "another principal's token"
    );
    assert_eq!(l.ok(propose("prop-1", s.clone())), 1, "recorded");
    assert_eq!(l.ok(propose("prop-1", s.clone())), 0, "a resubmission of the same proposal records nothing");
    assert_eq!(l.state.proposals[T]["prop-1"].expires_at_ms, l.now + PROPOSAL_TTL_MS);
    // Only exactly that call, by that principal.
    let other_input = careful("op-1", "k-1", 2, &l);
    assert_eq!(l.refused(submit_proposed("prop-1", other_input)), ReasonCode::PROPOSAL_INVALID, "another input");
    let mut theirs = s.clone();
    theirs.principal_id = "other-agent".into();
    assert_eq!(l.refused(submit_proposed("prop-1", theirs)), ReasonCode::PROPOSAL_INVALID, "another principal");
    assert_eq!(l.refused(submit_proposed("prop-none", s.clone())), ReasonCode::PROPOSAL_INVALID, "never made");
    assert_eq!(l.refused(submit_proposed(&"p".repeat(201), s.clone())), ReasonCode::INPUT_INVALID, "bounded id");
    assert_eq!(l.ok(submit_proposed("prop-1", s.clone())), 3, "submitted, proposal used, reserved");
    assert_eq!(l.op("op-1").state, OperationState::Reserved);
    assert!(!l.state.proposals.contains_key(T), "a used proposal is gone");
    assert_eq!(l.ok(submit_proposed("prop-1", s.clone())), 0, "a retry of the call is a replay");
    let again = careful("op-2", "k-2", 1, &l);
    assert_eq!(l.refused(submit_proposed("prop-1", again.clone())), ReasonCode::PROPOSAL_INVALID, "used once");
    // After its time: PROPOSAL_EXPIRED.
    l.ok(propose("prop-2", again.clone()));
    l.now += PROPOSAL_TTL_MS;
    let mut late = again.clone();
    late.deadline_ms = l.now + 60_000;
    assert_eq!(l.refused(submit_proposed("prop-2", late.clone())), ReasonCode::PROPOSAL_EXPIRED);
    // Or a confirmation only its requester answers.
    late.input_requests.insert(CONFIRM_REQUEST.into(), json!({"method": "elicitation/create"}).to_string());
    l.ok(submit(late));
    assert_eq!(l.op("op-2").state, OperationState::Proposed, "waits for the confirmation");
    let confirm = |by: &str| Command::AnswerInputs {
        tenant_id: T.into(),
        operation_id: "op-2".into(),
        by_principal_id: by.into(),
        answers: [(CONFIRM_REQUEST.to_string(), json!({"action": "accept", "content": {"confirm": true}}).to_string())]
            .into(),
    };
    assert_eq!(l.refused(confirm("other-agent")), ReasonCode::OPERATION_NOT_FOUND, "not by another principal");
    l.ok(confirm("agent"));
    assert_eq!(l.op("op-2").state, OperationState::Reserved);
    // Bounded: at most PROPOSALS_PER_PRINCIPAL_MAX live ones; expired ones make room and leave.
    for i in 0..PROPOSALS_PER_PRINCIPAL_MAX {
        l.ok(propose(&format!("prop-b{i}"), careful("x", "x", i as i64, &l)));
    }
    assert_eq!(l.refused(propose("prop-over", careful("x", "x", 99, &l))), ReasonCode::QUOTA_EXCEEDED);
    let mut theirs = careful("x", "x", 99, &l);
    theirs.principal_id = "other-agent".into();
    l.ok(propose("prop-theirs", theirs));
    l.now += PROPOSAL_TTL_MS;
    l.ok(propose("prop-later", careful("x", "x", 99, &l)));
    assert_eq!(l.state.proposals[T].len(), 1, "expired proposals were dropped: {:?}", l.state.proposals[T].keys());
    // The proposals are part of the state's encoding (format 3).
    let decoded = writ_api::state::LedgerState::decode_versioned(&l.state.encode_versioned()).unwrap();
    assert_eq!(decoded, l.state);
}

/// SPEC S3: an edge submits a principal's act on an operation only inside `OnBehalfOf`, and
/// the ledger re-derives the authority it names: a live token of that very principal that
/// grants the act's scope.
#[test]
fn acts_on_behalf_of_a_principal_need_its_live_token_and_the_acts_scope() {
    let mut l = Ledger::new();
    l.ok(submit(spec("op-1", "k-1", json!({"p": 1}), Some("press"), l.now + 60_000)));
    l.issue_token("jti-agent-read", "agent", &["ops:read"]);
    let on_behalf = |authority_ref: &str, command: Command| Command::OnBehalfOf {
        authority_ref: authority_ref.into(),
        command: Box::new(command),
    };
    assert_eq!(
        l.refused(on_behalf("jti-other-agent", cancel("op-1"))),
        ReasonCode::AUTH_TOKEN_INVALID,
        "another's token"
    );
    assert_eq!(
        l.refused(on_behalf("jti-agent-read", cancel("op-1"))),
        ReasonCode::APP_SCOPE_FORBIDDEN,
        "no ops:cancel"
    );
    assert_eq!(l.refused(on_behalf("jti-nobody", cancel("op-1"))), ReasonCode::AUTH_TOKEN_INVALID, "an unknown token");
    let not_an_act = on_behalf("jti-agent", submit(spec("op-2", "k-2", json!({"p": 2}), None, l.now + 60_000)));
    assert_eq!(l.refused(not_an_act), ReasonCode::INPUT_INVALID, "only acts on operations are wrapped");
    assert_eq!(l.op("op-1").state, OperationState::Reserved, "nothing above touched it");
    l.ok(Command::RevokeToken { tenant_id: T.into(), jti: "jti-agent".into() });
    assert_eq!(l.refused(on_behalf("jti-agent", cancel("op-1"))), ReasonCode::AUTH_TOKEN_REVOKED, "a revoked token");
    l.issue_token("jti-agent-2", "agent", &[]);
    l.ok(on_behalf("jti-agent-2", cancel("op-1")));
    assert_eq!(l.op("op-1").state, OperationState::Cancelled);
}

/// The operator's queue (issue 21): pages by operation id with a cursor that moves on past what a
/// filter skips, and `needs_attention` shows only what waits for a human.
#[test]
fn the_operators_queue_pages_filters_and_shows_what_needs_attention() {
    use writ_api::dto::OperationFilter;
    let mut l = Ledger::new();
    for i in 0..5 {
        let s = spec(&format!("op-{i}"), &format!("k-{i}"), json!({"p": i}), None, l.now + 60_000);
        l.ok(submit(s));
    }
    let ids = |ops: &[Operation]| ops.iter().map(|o| o.spec.operation_id.clone()).collect::<Vec<_>>();
    let all = OperationFilter::default();
    let (page, next) = l.state.list_operations(T, &all, None, 2);
    assert_eq!((ids(&page), next.as_deref()), (vec!["op-0".to_string(), "op-1".into()], Some("op-1")));
    let (page, next) = l.state.list_operations(T, &all, next.as_deref(), 2);
    assert_eq!((ids(&page), next.as_deref()), (vec!["op-2".to_string(), "op-3".into()], Some("op-3")));
    let (page, next) = l.state.list_operations(T, &all, next.as_deref(), 2);
    assert_eq!((ids(&page), next), (vec!["op-4".to_string()], None));
    // One operation reports an effect: it waits for a verdict.
    l.ok(start("op-3", 1));
    l.ok(report("op-3", 1, AttemptOutcome::Effect));
    let attention = OperationFilter { needs_attention: true, ..Default::default() };
    assert_eq!(ids(&l.state.list_operations(T, &attention, None, 10).0), ["op-3"]);
    let reserved = OperationFilter { state: Some(OperationState::Reserved), ..Default::default() };
    assert_eq!(ids(&l.state.list_operations(T, &reserved, None, 10).0), ["op-0", "op-1", "op-2", "op-4"]);
    let later = OperationFilter { since_ms: Some(l.now + 1), ..Default::default() };
    assert_eq!(l.state.list_operations(T, &later, None, 10), (Vec::new(), None));
}

/// Operation ids of different lengths page without a gap or a repeat: listing merges live
/// operations with cold rows, whose keys order ids by length first, and a scan cut short (65
/// rows at a page of one) bounds the merge; pages follow the rows' order, so a cursor means the
/// same in both and nothing falls between two pages (the operator's queue alike).
#[test]
fn operations_with_ids_of_every_length_are_each_listed_once() {
    use writ_api::dto::OperationFilter;
    let mut l = Ledger::new();
    let (mut everything, mut waiting) = (Vec::new(), Vec::new());
    for i in 1..=140 {
        let id = format!("op-{i}");
        l.ok(submit(spec(&id, &format!("k-{i}"), json!({"p": i}), None, l.now + 60_000)));
        if i % 3 != 0 {
            l.ok(start(&id, 1));
            l.ok(report(&id, 1, AttemptOutcome::Effect));
            waiting.push(id.clone());
        } else if i < 130 {
            l.ok(cancel(&id));
        }
        everything.push(id);
    }
    let in_row_order = |mut ids: Vec<String>| {
        ids.sort_by(|a, b| (a.len(), a).cmp(&(b.len(), b)));
        ids
    };
    let all_pages = |filter: &OperationFilter, limit: usize| {
        let (mut seen, mut after) = (Vec::new(), None::<String>);
        for _ in 0..400 {
            let (page, next) = l.state.list_operations(T, filter, after.as_deref(), limit);
            seen.extend(page.into_iter().map(|o| o.spec.operation_id));
            let Some(next) = next else { return seen };
            after = Some(next);
        }
        panic!("no last page");
    };
    let attention = OperationFilter { needs_attention: true, ..Default::default() };
    for limit in [1, 7, 500] {
        assert_eq!(all_pages(&OperationFilter::default(), limit), in_row_order(everything.clone()), "pages of {limit}");
        assert_eq!(all_pages(&attention, limit), in_row_order(waiting.clone()), "the queue in pages of {limit}");
    }
}

/// From ledger version 19 in force a closed work item is retired one horizon after it closed
/// (the items closed before get their time rows when 19 comes into force), so a tenant's cap
/// counts what it holds and the id is free again; before 19 none is retired. An edge's
/// projection, whose rows carry no time rows of items closed before it was made, folds the
/// retirement too.
#[test]
fn from_ledger_version_19_closed_work_items_are_retired_a_horizon_after_they_close() {
    use writ_api::cold::Row;
    let day = 24 * 3_600_000;
    let mut log: Vec<LedgerRequest> = Vec::new();
    let mut run = |l: &mut Ledger, command: Command| {
        let req = LedgerRequest { stamp_ms: l.now, trace_id: "tr".into(), command: command.into() };
        log.push(req.clone());
        let (outcome, events) = l.state.execute(&req);
        assert!(matches!(outcome, Outcome::Applied { .. }), "{outcome:?}");
        events
    };
    let retired = |events: Vec<EventEnvelope>| -> Vec<String> {
        (events.into_iter())
            .flat_map(|e| match e.event {
                Event::WorksRetiredV1 { work_ids, .. } => work_ids,
                _ => Vec::new(),
            })
            .collect()
    };
    let retention = || Command::ApplyRetentionV2 { tenant_id: T.into() };
    let close = |id: &str| revise(id, None, WorkChangeV1 { state: Some(WorkState::Completed), ..Default::default() });
    let mut l = Ledger::new();
    run(&mut l, Command::RaiseLedgerVersion { version: 18 });
    run(&mut l, work("wo-early", &["press"], &[], None));
    run(&mut l, close("wo-early"));
    let early = l.now;
    run(&mut l, work("wo-open", &["press"], &[], None));
    l.now += day;
    assert!(retired(run(&mut l, retention())).is_empty(), "under 18 no closed item is retired");
    assert_eq!(l.state.work_count(T), 2);

    // 19 in force: the item closed before gets its time row, by when it closed.
    assert!(l.state.cold.get(T, Row::WorkClosed(early, "wo-early")).is_none());
    run(&mut l, Command::RaiseLedgerVersion { version: 19 });
    assert!(l.state.cold.get(T, Row::WorkClosed(early, "wo-early")).is_some());
    run(&mut l, work("wo-late", &["press"], &[], None));
    run(&mut l, close("wo-late"));
    let late = l.now;
    let mut edge = l.state.clone();
    edge.project();
    assert!(edge.work(T, "wo-late").is_some() && edge.cold.get(T, Row::WorkClosed(late, "wo-late")).is_none());
    let events = run(&mut l, retention());
    events.iter().for_each(|env| edge.fold_views(env).expect("the projection folds it"));
    assert_eq!(retired(events), ["wo-early"]);
    assert!(l.state.work(T, "wo-early").is_none() && edge.work(T, "wo-early").is_none());
    assert_eq!(l.state.work_count(T), 2, "the open item and the one closed a moment ago");
    assert_eq!(l.state.cold.oldest(T, writ_api::cold::Aging::Works), Some(late), "what retention waits for");

    // One horizon after it closed, the later one goes too — from the projection as well.
    l.now = late + day - 1;
    let events = run(&mut l, retention());
    events.iter().for_each(|env| edge.fold_views(env).expect("the projection folds it"));
    assert!(retired(events).is_empty());
    l.now = late + day;
    let events = run(&mut l, retention());
    events.iter().for_each(|env| edge.fold_views(env).expect("the projection folds it"));
    assert_eq!(retired(events), ["wo-late"]);
    assert!(edge.work(T, "wo-late").is_none() && edge.work_count(T) == 1);
    assert_eq!(l.state.work_count(T), 1);
    assert_eq!(writ_api::retention::storage(&l.state, T).work_items, 1);
    assert_eq!(l.state.list_work(T, None, None, 10).0.iter().map(|w| w.id.as_str()).collect::<Vec<_>>(), ["wo-open"]);

    // The id is free again: a new item, at revision 1.
    run(&mut l, work("wo-early", &["press"], &[], None));
    assert_eq!(l.state.work(T, "wo-early").map(|w| (w.revision, w.state)), Some((1, WorkState::Open)));

    // Every replica retires the same: the same requests from the same start give the same state.
    let mut replica = Ledger::new();
    for req in &log {
        replica.state.execute(req);
    }
    assert_eq!(replica.state.digest(), l.state.digest());
    let decoded = writ_api::state::LedgerState::decode_versioned(&l.state.encode_versioned()).expect("decodes");
    assert_eq!(decoded.digest(), l.state.digest());
    assert!(invariant_violations(&l.state).is_empty());
}

fn work(id: &str, actions: &[&str], devices: &[&str], cost_ceiling: Option<u64>) -> Command {
    Command::CreateWork {
        tenant_id: T.into(),
        work_id: id.into(),
        title: "Replace the press tool".into(),
        owner: "line 2".into(),
        scope: WorkScopeV1 {
            actions: actions.iter().map(|a| a.to_string()).collect(),
            devices: devices.iter().map(|d| d.to_string()).collect(),
            cost_ceiling,
        },
        by: "operator".into(),
    }
}

fn revise(id: &str, expected: Option<u64>, change: WorkChangeV1) -> Command {
    Command::ReviseWork {
        tenant_id: T.into(),
        work_id: id.into(),
        expected_revision: expected,
        change,
        by: "operator".into(),
    }
}

fn against(mut s: OperationSpecV1, work: &str, revision: u64) -> OperationSpecV1 {
    s.work_ref = Some(WorkRef { id: work.into(), revision });
    s
}

#[test]
fn work_items_admit_operations_only_at_their_revision_and_within_their_scope() {
    let mut l = Ledger::new();
    let dl = l.now + 60_000;
    l.ok(work("wo-1", &["move_press", "note"], &["press"], Some(2)));
    assert_eq!(l.refused(work("wo-1", &["note"], &[], None)), ReasonCode::WORK_ALREADY_EXISTS);
    assert_eq!(l.refused(work("wo-2", &["note"], &["nope"], None)), ReasonCode::DEVICE_NOT_FOUND);
    let at = |id: &str, key: &str, device: Option<&str>, rev: u64| {
        submit(against(spec(id, key, json!({"n": key}), device, dl), "wo-1", rev))
    };
    assert_eq!(
        l.refused(submit(against(spec("op-0", "k-0", json!({}), None, dl), "wo-9", 1))),
        ReasonCode::WORK_NOT_FOUND
    );
    l.ok(at("op-1", "k-1", Some("press"), 1));
    // The work moves on: what was decided on revision 1 is stale, revision 2 is accepted.
    l.ok(revise("wo-1", Some(1), WorkChangeV1 { owner: Some("line 3".into()), ..Default::default() }));
    assert_eq!(l.refused(at("op-2", "k-2", None, 1)), ReasonCode::STALE_REVISION);
    assert_eq!(
        l.refused(revise("wo-1", Some(1), WorkChangeV1 { title: Some("x".into()), ..Default::default() })),
        ReasonCode::STALE_REVISION,
        "a change made against an old revision is stale too"
    );
    l.ok(at("op-2", "k-2", None, 2));
    // Outside the approved scope: another device, another action, beyond the cost ceiling.
    assert_eq!(l.refused(at("op-3", "k-3", Some("arm"), 2)), ReasonCode::WORK_SCOPE_EXCEEDED);
    let mut dear = against(spec("op-4", "k-4", json!({}), None, dl), "wo-1", 2);
    dear.action = "dear_note".into();
    assert_eq!(l.refused(submit(dear)), ReasonCode::WORK_SCOPE_EXCEEDED);
    assert_eq!(l.refused(at("op-5", "k-5", None, 2)), ReasonCode::COST_CEILING_EXCEEDED, "2 units used of 2");
    // A replay answers with its operation whatever the work did since.
    l.ok(at("op-1", "k-1", Some("press"), 1));
    let item = &l.state.works[T]["wo-1"];
    assert_eq!((item.revision, item.cost_used, item.operations.clone()), (2, 2, vec!["op-1".into(), "op-2".into()]));
    // Closing records its operations; a closed item takes nothing more.
    let closed = l.run(revise("wo-1", None, WorkChangeV1 { state: Some(WorkState::Completed), ..Default::default() }));
    let Outcome::Applied { events, .. } = closed else { panic!("{closed:?}") };
    let Event::WorkRevisedV1 { revision: 3, operations, .. } = &events.last().unwrap().event else { panic!() };
    assert_eq!(operations.iter().map(|o| o.operation_id.as_str()).collect::<Vec<_>>(), ["op-1", "op-2"]);
    assert_eq!(l.refused(at("op-6", "k-6", None, 3)), ReasonCode::WORK_STATE_CONFLICT);
    assert_eq!(
        l.refused(revise("wo-1", None, WorkChangeV1 { owner: Some("x".into()), ..Default::default() })),
        ReasonCode::WORK_STATE_CONFLICT
    );
    // Closed, it is a cold row, no longer in memory: read, listed, counted and its id kept.
    assert!(!l.state.works.contains_key(T), "no open item left in memory");
    let closed = l.state.work(T, "wo-1").expect("the closed item reads back");
    assert_eq!((closed.state, closed.revision, closed.operations.len()), (WorkState::Completed, 3, 2));
    assert_eq!(l.state.cold.works(T, None, 10).len(), 1);
    assert_eq!((l.state.work_count(T), writ_api::retention::storage(&l.state, T).work_items), (1, 1));
    assert_eq!(l.refused(work("wo-1", &["note"], &[], None)), ReasonCode::WORK_ALREADY_EXISTS);
    // A proposal is checked the same way.
    l.ok(work("wo-2", &["careful_note"], &[], None));
    let mut careful = against(spec("p-1", "kp", json!({"p": 1}), None, dl), "wo-2", 7);
    careful.action = "careful_note".into();
    assert_eq!(l.refused(propose("prop-1", careful)), ReasonCode::STALE_REVISION);
    // Open and closed items list together, in the rows' order of ids.
    let listed = |state| l.state.list_work(T, state, None, 10).0.into_iter().map(|w| w.id).collect::<Vec<_>>();
    assert_eq!(listed(None), ["wo-1", "wo-2"]);
    assert_eq!(listed(Some(WorkState::Open)), ["wo-2"]);
    assert_eq!(listed(Some(WorkState::Completed)), ["wo-1"]);
}

#[test]
fn an_executors_coded_refusal_fails_the_operation_with_its_reason_in_the_history() {
    let mut l = Ledger::new();
    l.ok(submit(spec("op-1", "k-1", json!({"p": 1}), Some("press"), l.now + 60_000)));
    let refuse = |reason: ReasonCode| Command::RefuseDispatchV2 {
        tenant_id: T.into(),
        operation_id: "op-1".into(),
        executor_id: "x-1".into(),
        fencing_token: 1,
        reason,
        message: "door=closed not met (door is open)".into(),
    };
    assert_eq!(l.refused(refuse(ReasonCode::TENANT_SUSPENDED)), ReasonCode::INPUT_INVALID, "not an executor's reason");
    l.ok(refuse(ReasonCode::PRECONDITION_FAILED));
    assert_eq!(l.op("op-1").state, OperationState::Failed);
    assert!(!l.state.device_leases[T].contains_key("press"), "a refused operation frees its device");
    let steps: Vec<_> = l.state.operation_history(T, "op-1").iter().map(|s| (s.from, s.to, s.reason)).collect();
    use OperationState::*;
    assert_eq!(
        steps,
        [
            (None, Verified, None),
            (Some(Verified), Reserved, None),
            (Some(Reserved), Dispatched, None),
            (Some(Dispatched), Failed, Some(ReasonCode::PRECONDITION_FAILED)),
        ]
    );
    let revisions: Vec<u64> = l.state.operation_history(T, "op-1").iter().map(|s| s.revision).collect();
    assert!(revisions.windows(2).all(|w| w[0] < w[1]), "each step names the revision that made it: {revisions:?}");
}

fn store(by: Uploader, bytes: &[u8], hash: Option<String>) -> Command {
    Command::StoreEvidence {
        tenant_id: T.into(),
        operation_id: "op-1".into(),
        mime_type: "text/plain".into(),
        content_hash: hash.unwrap_or_else(|| writ_api::sha256_hex(bytes)),
        content_base64: writ_api::evidence::to_base64(bytes),
        by,
    }
}

#[test]
fn evidence_is_stored_for_an_attempt_and_expires_with_the_tenants_audit_retention() {
    let mut l = Ledger::new();
    let x1 = || Uploader::Executor { executor_id: "x-1".into() };
    l.ok(submit(spec("op-1", "k-1", json!({"p": 1}), Some("press"), l.now + 60_000)));
    assert_eq!(l.refused(store(x1(), b"moved", None)), ReasonCode::OPERATION_NOT_FOUND, "not yet its operation");
    let observer = Uploader::Principal { principal_id: "observer".into() };
    assert_eq!(l.refused(store(observer, b"moved", None)), ReasonCode::OPERATION_STATE_CONFLICT, "no attempt yet");
    l.ok(start("op-1", 1));
    assert_eq!(
        l.refused(store(Uploader::Executor { executor_id: "x-press".into() }, b"moved", None)),
        ReasonCode::OPERATION_NOT_FOUND,
        "not its operation"
    );
    assert_eq!(l.refused(store(x1(), b"moved", Some("ab".repeat(32)))), ReasonCode::INPUT_INVALID, "hash checked");
    l.ok(store(x1(), b"moved", None));
    assert_eq!(l.ok(store(x1(), b"moved", None)), 0, "the same blob again is no change");
    assert_eq!(writ_api::retention::storage(&l.state, T).evidence_bytes, 5);
    for i in 1..EVIDENCE_PER_OPERATION_MAX {
        l.ok(store(x1(), format!("frame {i}").as_bytes(), None));
    }
    assert_eq!(l.refused(store(x1(), b"one too many", None)), ReasonCode::QUOTA_EXCEEDED);
    assert_eq!(l.ok(store(x1(), b"frame 7", None)), 0, "a blob it holds is no change, even at the bound");
    // With an audit retention of an hour, an hour of ledger time later the blobs go.
    let patch = TenantSettingsPatch { audit_max_age_s: Some(3600), ..Default::default() };
    l.ok(Command::SetTenantSettings { tenant_id: T.into(), patch });
    l.now += 3_600_000;
    let Outcome::Applied { events, .. } = l.run(Command::ExpireDue { tenant_id: T.into() }) else { panic!() };
    let expired = events.iter().find_map(|e| match &e.event {
        Event::EvidenceExpiredV1 { blobs, .. } => Some(blobs.len()),
        _ => None,
    });
    assert_eq!(expired, Some(EVIDENCE_PER_OPERATION_MAX));
    let left = writ_api::retention::storage(&l.state, T);
    assert_eq!((left.evidence_blobs, left.evidence_bytes), (0, 0));
    let mut replica = l.state.clone();
    replica.rebuild_index();
    assert_eq!(replica.index, l.state.index, "the index folds as it rebuilds");
}

/// An effect reported with its evidence blob.
fn report_with_blob(id: &str, token: u64, bytes: &[u8], mime: &str) -> Command {
    Command::ReportAttemptV2 {
        tenant_id: T.into(),
        operation_id: id.into(),
        fencing_token: token,
        outcome: AttemptOutcome::Effect,
        evidence: EvidenceV1 {
            content_hash: writ_api::sha256_hex(bytes),
            evidence_return_ref: format!("writ://operations/{id}/evidence/{}", writ_api::sha256_hex(bytes)),
            summary: "moved".into(),
        },
        content: writ_api::evidence::EvidenceContentV1 {
            mime_type: mime.into(),
            content_base64: writ_api::evidence::to_base64(bytes),
        },
    }
}

#[test]
fn a_report_carries_its_evidence_into_the_store_and_stands_when_the_store_refuses_it() {
    let mut l = Ledger::new();
    let report = report_with_blob;
    l.ok(submit(spec("op-1", "k-1", json!({"p": 1}), Some("press"), l.now + 60_000)));
    l.ok(start("op-1", 1));
    assert_eq!(l.refused(report("op-1", 9, b"moved", "text/plain")), ReasonCode::FENCING_TOKEN_STALE);
    let cmd = report("op-1", 1, b"moved", "text/plain");
    let outcome = l.run(cmd.clone());
    assert_eq!(l.op("op-1").state, OperationState::EffectReported);
    assert_eq!(writ_api::retention::storage(&l.state, T).evidence_blobs, 1, "one entry: the report and its blob");
    assert_eq!(cmd.stored_blob(&outcome).map(|(_, bytes)| bytes), Some(b"moved".to_vec()));
    // A blob the store refuses leaves the report standing, its reference saying why.
    l.ok(submit(spec("op-2", "k-2", json!({"p": 2}), Some("arm"), l.now + 60_000)));
    l.ok(start("op-2", 1));
    let cmd = report("op-2", 1, b"<html>", "text/html");
    let outcome = l.run(cmd.clone());
    assert_eq!(l.op("op-2").state, OperationState::EffectReported);
    assert_eq!(l.op("op-2").evidence[0].evidence_return_ref, "not stored: INPUT_INVALID");
    assert_eq!(cmd.stored_blob(&outcome), None, "nothing for the node to keep");
}

/// A blob carried as its bytes (`ReportAttemptV3`, `StoreEvidenceV2`: what an edge sends) is
/// decided, folded and stored exactly as the same blob in base64, which is what a leader
/// proposes instead while a member cannot read bytes: the same outcome, state and stored bytes,
/// and the same refusals.
#[test]
fn a_blob_as_bytes_applies_as_the_same_blob_in_base64() {
    let upload = |id: &str, bytes: &[u8]| Command::StoreEvidence {
        tenant_id: T.into(),
        operation_id: id.into(),
        mime_type: "text/plain".into(),
        content_hash: writ_api::sha256_hex(bytes),
        content_base64: writ_api::evidence::to_base64(bytes),
        by: Uploader::Executor { executor_id: "x-1".into() },
    };
    let mut bytes_ledger = Ledger::new();
    let mut base64_ledger = Ledger::new();
    let commands = [
        submit(spec("op-1", "k-1", json!({"p": 1}), Some("press"), bytes_ledger.now + 60_000)),
        start("op-1", 1),
        upload("op-1", b"frame 1"),
        upload("op-1", b"frame 1"),
        upload("op-9", b"frame 9"),
        report_with_blob("op-1", 1, b"moved", "text/plain"),
        submit(spec("op-2", "k-2", json!({"p": 2}), Some("arm"), bytes_ledger.now + 60_000)),
        start("op-2", 1),
        report_with_blob("op-2", 1, b"<html>", "text/html"),
    ];
    for command in commands {
        let as_bytes = command.clone().with_blob_bytes().expect("standard base64");
        assert_eq!(as_bytes.carries_blob(), command.carries_blob());
        if command.carries_blob() {
            assert_ne!(as_bytes, command, "carried as bytes");
            assert_eq!((as_bytes.ledger_version(), as_bytes.kind()), (20, command.kind()));
        }
        assert_eq!(as_bytes.with_blobs_as_base64(), command, "what a leader proposes to older members");
        let ours = bytes_ledger.run(as_bytes.clone());
        let theirs = base64_ledger.run(command.clone());
        assert_eq!(ours, theirs, "{}", command.kind());
        assert_eq!(as_bytes.stored_blobs(&ours), command.stored_blobs(&theirs));
        assert_eq!(bytes_ledger.state.digest(), base64_ledger.state.digest());
    }
    assert_eq!(writ_api::retention::storage(&bytes_ledger.state, T).evidence_blobs, 2);
    // Text that is not base64 is refused where it arrives, before any replica sees it.
    let mut bad = upload("op-1", b"x");
    if let Command::StoreEvidence { content_base64, .. } = &mut bad {
        *content_base64 = "%%%".into();
    }
    assert_eq!(bad.with_blob_bytes().unwrap_err().reason, ReasonCode::INPUT_INVALID);
    // Inside a wrapper the blob goes back to base64 too.
    let wrapped = Command::Batch {
        commands: vec![writ_api::ledger::BatchedCommand {
            trace_id: "tr".into(),
            command: upload("op-1", b"frame 2").with_blob_bytes().unwrap(),
        }],
    };
    assert!(wrapped.ledger_version() >= 20 && wrapped.with_blobs_as_base64().ledger_version() < 20);
}

/// A follower applies what its leader proposed with no one waiting on it: the same state,
/// events, records and stored blobs, without the events and operation an answer carries.
#[test]
fn an_entry_no_one_waits_on_applies_the_same_without_an_answer() {
    let mut l = Ledger::new();
    let mut follower = l.state.clone();
    let commands = [
        submit(spec("op-1", "k-1", json!({"p": 1}), Some("press"), l.now + 60_000)),
        start("op-1", 1),
        report_with_blob("op-1", 1, b"moved", "text/plain"),
        submit(spec("op-2", "k-1", json!({"p": 2}), Some("press"), l.now + 60_000)),
    ];
    let mut kinds = Vec::new();
    for command in commands {
        let req = LedgerRequest { stamp_ms: l.now, trace_id: "tr".into(), command: command.clone().into() };
        let (answer, events, records) = l.state.execute_audited(&req);
        let (unanswered, followed, recorded) = follower.execute_unanswered(&req);
        assert_eq!((&followed, &recorded), (&events, &records));
        assert_eq!(follower.digest(), l.state.digest());
        assert_eq!(command.stored_blobs(&unanswered), command.stored_blobs(&answer));
        match (&answer, &unanswered) {
            (Outcome::Applied { events, operation }, Outcome::Applied { events: kept, operation: None }) => {
                assert!(operation.is_some() && !events.is_empty(), "the answer: {answer:?}");
                assert_eq!(kept.is_empty(), !command.carries_blob(), "only a blob's events: {kept:?}");
                kinds.push("applied");
            }
            (Outcome::Rejected { .. }, _) => {
                assert_eq!(unanswered, answer, "a rejection is the same");
                kinds.push("rejected");
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(kinds, ["applied", "applied", "applied", "rejected"]);
    assert!(l.op("op-1").state == OperationState::EffectReported);
}

#[test]
fn retention_compacts_finished_operations_to_bindings_that_still_answer_replays_then_releases_them() {
    let mut l = Ledger::new();
    // Every request from here on, to replay on a second replica.
    let mut log: Vec<LedgerRequest> = Vec::new();
    let mut run = |l: &mut Ledger, command: Command| {
        log.push(LedgerRequest { stamp_ms: l.now, trace_id: "tr".into(), command: command.clone().into() });
        l.run(command)
    };
    let retention = || Command::ApplyRetention { tenant_id: T.into() };
    let kinds = |o: &Outcome| match o {
        Outcome::Applied { events, .. } => events.iter().map(|e| e.event.kind()).collect::<Vec<_>>(),
        other => panic!("expected success, got {other:?}"),
    };
    let day = 24 * 3_600_000;
    let failed = spec("op-1", "k-1", json!({"p": 1}), Some("press"), l.now + 60_000);
    let cancelled = spec("op-2", "k-2", json!({"p": 2}), None, l.now + 60_000);
    let live = spec("op-3", "k-3", json!({"p": 3}), Some("arm"), l.now + 5 * day);
    for s in [&failed, &cancelled, &live] {
        kinds(&run(&mut l, submit(s.clone())));
    }
    kinds(&run(&mut l, start("op-1", 1)));
    kinds(&run(&mut l, report("op-1", 1, AttemptOutcome::NoEffect)));
    kinds(&run(&mut l, cancel("op-2")));
    let finished_at = l.now;
    assert_eq!(l.op("op-1").state, OperationState::Failed);
    assert_eq!(l.op("op-2").state, OperationState::Cancelled);
    let before = writ_api::retention::storage(&l.state, T);
    assert_eq!((before.operations, before.bindings, before.idempotency_keys, before.tokens), (3, 0, 3, 3));
    assert_eq!(before.next_retention_ms, Some(finished_at + day));

    // Within the tenant's idempotency retention (24 h) nothing goes.
    l.now = finished_at + day - 1;
    assert!(kinds(&run(&mut l, retention())).is_empty());
    assert_eq!(all_ops(&l.state, T).len(), 3);

    // Past it, the finished operations keep only their bindings; the live one stays whole.
    l.now = finished_at + day;
    assert_eq!(kinds(&run(&mut l, retention())), ["operations_compacted"]);
    assert_eq!(l.state.operations[T].keys().collect::<Vec<_>>(), ["op-3"], "only the live one in memory");
    let binding = l.op("op-1");
    assert_eq!((binding.state, binding.spec.input.as_str()), (OperationState::Failed, ""), "compact, outcome kept");
    assert!(l.state.operation_history(T, "op-1").is_empty(), "its transitions are gone");
    let after = writ_api::retention::storage(&l.state, T);
    assert_eq!((after.operations, after.bindings, after.idempotency_keys), (1, 2, 3));
    assert!(after.state_bytes < before.state_bytes, "{} < {}", after.state_bytes, before.state_bytes);

    // A replay still answers with the original outcome; the key still refuses another payload;
    // the operation still reads back by id.
    let mut replay = failed.clone();
    replay.operation_id = "op-1-retry".into();
    replay.deadline_ms = l.now + 60_000;
    let outcome = run(&mut l, submit(replay.clone()));
    let Outcome::Applied { events, operation } = outcome else { panic!("a replay: {outcome:?}") };
    let operation = operation.expect("the replay's view");
    assert!(events.is_empty(), "{events:?}");
    assert_eq!((operation.spec.operation_id.as_str(), operation.state), ("op-1", OperationState::Failed));
    let mut reused = replay.clone();
    reused.payload_hash = writ_api::operation::payload_hash(&json!({"p": 99}));
    reused.input = json!({"p": 99}).to_string();
    let outcome = run(&mut l, submit(reused.clone()));
    assert!(matches!(outcome, Outcome::Rejected { reason: ReasonCode::IDEMPOTENCY_KEY_REUSED, .. }), "{outcome:?}");
    let by_id = writ_api::dto::Query::GetOperation { tenant_id: T.into(), operation_id: "op-2".into() };
    assert!(writ_api::query::answer(&l.state, by_id).is_ok(), "read back by id");

    // One more retention later the bindings are released (the key is free again), and the
    // day-long tokens, expired a day ago, and the minute-long enrollments are dropped.
    l.now = finished_at + 2 * day;
    assert_eq!(kinds(&run(&mut l, retention())), ["bindings_released", "credentials_retired"]);
    let released = writ_api::retention::storage(&l.state, T);
    assert!(released.bindings == 0 && released.tokens == 0 && l.state.cold.tokens(T, None, 10).is_empty());
    assert!(l.state.operation(T, "op-1").is_none(), "released");
    assert!(!l.state.enrollments.contains_key(T));
    assert_eq!(writ_api::retention::storage(&l.state, T).idempotency_keys, 1);
    assert_eq!(writ_api::retention::next_due(&l.state, T, true), None, "nothing else is due");
    // With a new token (its jti's record is gone), the key binds a new operation.
    let request = writ_api::token::TokenRequestV1 {
        jti: "jti-agent".into(),
        principal_id: "agent".into(),
        scopes: Default::default(),
        ttl_s: 3600,
        parent_jti: None,
    };
    kinds(&run(&mut l, Command::IssueToken { tenant_id: T.into(), request }));
    reused.deadline_ms = l.now + 60_000;
    let outcome = run(&mut l, submit(reused));
    let Outcome::Applied { operation, .. } = outcome else { panic!("a new operation: {outcome:?}") };
    assert_eq!(operation.expect("its view").spec.operation_id, "op-1-retry");

    // Every replica decides the same: the same requests from the same start give the same
    // state; the indexes fold as they rebuild; the state format carries the bindings.
    let mut replica = Ledger::new();
    for req in &log {
        replica.state.execute(req);
    }
    assert_eq!(replica.state.digest(), l.state.digest());
    let mut rebuilt = l.state.clone();
    rebuilt.rebuild_index();
    assert_eq!(rebuilt.index, l.state.index);
    let decoded = writ_api::state::LedgerState::decode_versioned(&l.state.encode_versioned()).expect("decodes");
    assert_eq!(decoded.digest(), l.state.digest());
    assert!(invariant_violations(&l.state).is_empty());
}

/// An effect reported and never decided is compacted one horizon after the report — by
/// `ApplyRetentionV2` only, so members that cannot read it retire the same records — and an
/// unknown effect is kept whole until someone resolves it.
#[test]
fn a_reported_effect_nobody_decides_is_compacted_and_an_unknown_one_kept() {
    use writ_api::cold::Row;
    let mut l = Ledger::new();
    let day = 24 * 3_600_000;
    let reported = spec("op-1", "k-1", json!({"p": 1}), Some("press"), l.now + 60_000);
    l.ok(submit(reported.clone()));
    l.ok(dispatch("op-1"));
    l.ok(start("op-1", 1));
    l.ok(report("op-1", 1, AttemptOutcome::Effect));
    let reported_at = l.now;
    l.ok(submit(spec("op-2", "k-2", json!({"p": 2}), Some("arm"), l.now + 60_000)));
    l.ok(dispatch("op-2"));
    l.ok(start("op-2", 1));
    l.now += LEASE; // no report: its effect is unknown
    l.ok(Command::ExpireDue { tenant_id: T.into() });
    assert_eq!(l.op("op-2").state, OperationState::UnknownEffect);
    assert_eq!(l.state.cold.attention(T, None, 10), ["op-1", "op-2"], "both wait for a human");
    assert_eq!(writ_api::retention::next_due(&l.state, T, true), Some(reported_at + day));
    let v1 = || Command::ApplyRetention { tenant_id: T.into() };
    let v2 = || Command::ApplyRetentionV2 { tenant_id: T.into() };
    assert_eq!((v1().ledger_version(), v2().ledger_version()), (3, 15));

    // A state of format 16 had no time row for the reported effect: decoding it adds the row,
    // to the same state (the digest covers every row).
    let mut v16 = l.state.clone();
    let rev = v16.revision;
    v16.cold.put(T, Row::Reported(reported_at, "op-1"), rev, Some(&[]), None);
    assert_ne!(v16.digest(), l.state.digest());
    let upgraded = writ_api::state::LedgerState::decode_versioned(&v16.encode_format_16()).expect("format 16");
    assert_eq!(upgraded.digest(), l.state.digest(), "upgraded as a fold keeps it");
    // A node's snapshot of format 16 holds no rows (they are in its store): the store it is
    // attached to is indexed then.
    let store = std::sync::Arc::new(crate::sim::SimCold::default());
    v16.cold.attach(store.clone());
    store.write(&mut v16);
    let mut snapshot = writ_api::state::LedgerState::decode_versioned(&v16.encode_format_16()).expect("format 16");
    // Its only rows not in the store are its token records, which that format kept in memory.
    let kind = |k: &Vec<u8>| writ_api::cold::kind_prefix_of(k).and_then(|p| p.last().copied());
    assert!(snapshot.cold.pending_rows().keys().all(|k| kind(k).is_some_and(|k| b"ty".contains(&k))));
    assert!(snapshot.cold.tenants[T].tokens > 0 && snapshot.token(T, "jti-agent").is_some());
    assert_eq!(snapshot.digest(), v16.digest(), "nothing to index before the store is attached");
    snapshot.cold.attach(store.clone());
    assert_eq!(snapshot.digest(), l.state.digest(), "indexed on attach");
    assert!(snapshot.cold.get(T, Row::Reported(reported_at, "op-1")).is_some());

    l.now = reported_at + day - 1;
    assert_eq!(l.ok(v2()), 0, "within the horizon the effect may still be decided");
    l.now = reported_at + day;
    assert_eq!(l.ok(v1()), 0, "a member of version 14 retires no reported effect");
    let without_reports = writ_api::retention::next_due(&l.state, T, false);
    assert!(without_reports.is_none_or(|at| at > l.now), "nothing else due yet: {without_reports:?}");
    assert_eq!(l.ok(v2()), 1, "compacted");
    let binding = l.op("op-1");
    assert_eq!((binding.state, binding.spec.input.as_str()), (OperationState::EffectReported, ""));
    assert_eq!(l.state.cold.attention(T, None, 10), ["op-2"], "a binding is no human's to decide");
    let decide = Command::DecideOperation {
        tenant_id: T.into(),
        operation_id: "op-1".into(),
        by_principal_id: "observer".into(),
        verdict: Verdict::Reject,
        note: "".into(),
    };
    assert_eq!(l.refused(decide), ReasonCode::OPERATION_NOT_FOUND, "no longer decided");
    let mut replay = reported;
    replay.operation_id = "op-1-retry".into();
    replay.deadline_ms = l.now + 60_000;
    let Outcome::Applied { events, operation } = l.run(submit(replay)) else { panic!("a replay") };
    assert!(events.is_empty());
    assert_eq!(operation.expect("its view").state, OperationState::EffectReported, "the replay says what happened");

    // A horizon later the binding is released; the unknown effect is still whole.
    l.now = reported_at + 2 * day;
    l.ok(v2());
    assert!(l.state.operation(T, "op-1").is_none(), "released");
    assert_eq!(l.op("op-2").state, OperationState::UnknownEffect);
    assert_eq!(l.state.cold.attention(T, None, 10), ["op-2"]);
    assert!(invariant_violations(&l.state).is_empty());
}

/// From ledger version 18 in force a retention entry retires at most a quarter as many records
/// of each kind (every replica holds its state while it applies one); before, the thousand of
/// the earlier rule, so replicas switch at the entry that puts 18 in force.
#[test]
fn from_ledger_version_18_a_retention_entry_retires_at_most_250_of_a_kind() {
    let day = 24 * 3_600_000;
    let compacted_per_entry = |version: u32| {
        let mut l = Ledger::new();
        l.ok(Command::RaiseLedgerVersion { version });
        for i in 0..300 {
            let (id, key) = (format!("op-{i}"), format!("k-{i}"));
            l.ok(submit(spec(&id, &key, json!({ "p": i }), None, l.now + 60_000)));
            l.ok(cancel(&id));
        }
        l.now += day;
        let mut entries = Vec::new();
        loop {
            let outcome = l.run(Command::ApplyRetentionV2 { tenant_id: T.into() });
            let Outcome::Applied { events, .. } = outcome else { panic!("{outcome:?}") };
            let compacted: usize = events
                .iter()
                .map(|e| match &e.event {
                    writ_api::ledger::Event::OperationsCompactedV1 { operation_ids, .. } => operation_ids.len(),
                    _ => 0,
                })
                .sum();
            if compacted == 0 {
                break;
            }
            entries.push(compacted);
        }
        assert_eq!(writ_api::retention::storage(&l.state, T).bindings, 300);
        entries
    };
    assert_eq!(compacted_per_entry(17), [300], "one entry of up to 1,000");
    assert_eq!(compacted_per_entry(18), [250, 50], "entries of up to 250");
    assert_eq!(writ_api::retention::retired_per_entry(18), writ_api::retention::RETIRED_PER_ENTRY);
}

/// A command with a decision and its authority chain: the decision is recorded after the
/// command's events with the operation (and, for an executor's start, the attempt) it made.
#[test]
fn a_command_with_its_decisions_chain_records_the_operation_and_attempt() {
    use writ_api::audit::{AuthorityChainV1, RequestDecisionV1, RequestDecisionV2};
    use writ_api::ledger::Event;
    let mut l = Ledger::new();
    let decision = |principal: &str, token: Option<&str>| RequestDecisionV2 {
        decision: RequestDecisionV1 {
            trace_id: "tr-1".into(),
            principal_id: principal.into(),
            token_id: token.map(str::to_string),
            parent_token_id: None,
            method: "tools/call".into(),
            name: Some("move_press".into()),
            outcome: "allowed".into(),
            reason: None,
        },
        authority: AuthorityChainV1 { client_name: Some("agent-host".into()), ..Default::default() },
    };
    let audited =
        |d: RequestDecisionV2, command: Command| Command::AuditedV2 { decision: d, command: Box::new(command) };
    let chain = |outcome: Outcome| match outcome {
        Outcome::Applied { events, .. } => match &events.last().expect("events").event {
            Event::RequestsDecidedV2 { decisions, .. } => decisions[0].authority.clone(),
            other => panic!("the decision comes last, got {other:?}"),
        },
        other => panic!("applied, got {other:?}"),
    };
    let s = spec("op-1", "k-1", json!({"p": 1}), Some("press"), l.now + 60_000);
    let submitted = chain(l.run(audited(decision("agent", Some("jti-agent")), submit(s))));
    assert_eq!(submitted.operation_id.as_deref(), Some("op-1"));
    assert_eq!(
        (submitted.principal_kind.as_deref(), submitted.delegation.as_slice()),
        (Some("agent"), &["jti-agent".to_string()][..])
    );
    assert_eq!((submitted.client_name.as_deref(), submitted.attempt_id), (Some("agent-host"), None));
    let started = chain(l.run(audited(decision("executor:x-1", None), start_by("x-1", "op-1", 1))));
    assert_eq!(started.principal_kind.as_deref(), Some("executor"));
    assert_eq!((started.operation_id.as_deref(), started.attempt_id.as_deref()), (Some("op-1"), Some("op-1/1")));
}

#[test]
fn an_upstream_operation_is_performed_only_by_an_edge_once_and_never_offered_to_executors() {
    let mut l = Ledger::new();
    // The catalog grows an action an upstream tool performs.
    let mut doc: serde_json::Value = serde_json::from_str(CATALOG).unwrap();
    doc["actions"].as_array_mut().unwrap().push(json!({"id": "order", "title": "Order",
        "input_schema": {"type": "object"}, "risk": "low", "execution": {"upstream_operation": "shop/place_order"}}));
    let catalog = writ_api::catalog::compile(doc.to_string().as_bytes()).unwrap();
    let publish = Command::PublishCatalog { tenant_id: T.into(), catalog };
    assert_eq!(publish.ledger_version(), 5, "members must know the execution before it is published");
    l.ok(publish);
    let deadline = l.now + 60_000;
    let order = |id: &str, key: &str| {
        let mut s = spec(id, key, json!({"sku": key}), None, deadline);
        s.action = "order".into();
        s.cost_ceiling = None;
        s
    };
    let outcome = l.run(submit(order("op-1", "k-1")));
    let Outcome::Applied { events, .. } = outcome else { panic!("{outcome:?}") };
    assert!(events.iter().any(|e| matches!(&e.event,
        Event::OperationUpstreamBoundV1 { target, .. } if target == "shop/place_order")));
    assert_eq!(l.state.upstream_operation(T, "op-1"), Some("shop/place_order"));
    // Executors do not see it: neither their claim nor a dispatch reaches it.
    assert_eq!(l.refused(start("op-1", 0)), ReasonCode::OPERATION_NOT_FOUND);
    assert_eq!(l.refused(dispatch("op-1")), ReasonCode::OPERATION_NOT_FOUND);
    // An edge claims nothing else.
    l.ok(submit(spec("op-2", "k-2", json!({"p": 2}), None, deadline)));
    assert_eq!(l.refused(start_by("edge:e-1", "op-2", 0)), ReasonCode::OPERATION_NOT_FOUND);
    assert_eq!(l.refused(start_by("edge:", "op-1", 0)), ReasonCode::OPERATION_NOT_FOUND);
    // The edge's start is the claim; it is the one attempt, and the binding leaves with it.
    l.ok(start_by("edge:e-1", "op-1", 0));
    assert_eq!(l.op("op-1").executor_id.as_deref(), Some("edge:e-1"));
    assert_eq!(l.op("op-1").state, OperationState::Attempting);
    assert_eq!(l.state.upstream_operation(T, "op-1"), None);
    assert_eq!(l.refused(start_by("edge:e-2", "op-1", 0)), ReasonCode::OPERATION_STATE_CONFLICT);
    assert_eq!(l.ok(submit(order("op-1b", "k-1"))), 0, "a retry is a replay, not a second call");
    // The edge gives its lease up at once when the upstream may have acted without saying so.
    l.ok(Command::RenewAttemptLease {
        tenant_id: T.into(),
        operation_id: "op-1".into(),
        fencing_token: 0,
        lease_ms: 1,
    });
    l.now += 1;
    l.ok(Command::ExpireDue { tenant_id: T.into() });
    assert_eq!(l.op("op-1").state, OperationState::UnknownEffect);
    // One the edge cannot reach the upstream for is refused before any attempt.
    l.ok(submit(order("op-3", "k-3")));
    l.ok(Command::RefuseDispatchV2 {
        tenant_id: T.into(),
        operation_id: "op-3".into(),
        executor_id: "edge:e-1".into(),
        fencing_token: 0,
        reason: ReasonCode::EXECUTOR_UNAVAILABLE,
        message: "upstream 'shop' is unreachable".into(),
    });
    assert_eq!((l.op("op-3").state, l.op("op-3").attempts), (OperationState::Failed, 0));
    // One that expires unclaimed leaves nothing behind; a replica folding the events agrees.
    l.ok(submit(order("op-4", "k-4")));
    l.now += 120_000;
    l.ok(Command::ExpireDue { tenant_id: T.into() });
    assert_eq!(l.op("op-4").state, OperationState::Expired);
    assert!(l.state.upstream_operations.is_empty(), "{:?}", l.state.upstream_operations);
    let mut later = order("op-5", "k-5");
    later.deadline_ms = l.now + 60_000;
    l.ok(submit(later));
    let copy = writ_api::state::LedgerState::decode_versioned(&l.state.encode_versioned()).unwrap();
    assert_eq!(copy.upstream_operation(T, "op-5"), Some("shop/place_order"));
    assert_eq!(copy.digest(), l.state.digest());
}

/// A named operator approves a critical call too — with its own session (`Command::ByOperator`),
/// when its role decides and it works on the tenant — and no command names an operator
/// without that operator's session.
#[test]
fn a_named_approver_approves_a_critical_call_with_its_own_session() {
    use writ_api::operation::APPROVAL_REQUEST;
    use writ_api::operator::{OperatorRole, OperatorSessionV1, OperatorV1};
    let mut l = Ledger::new();
    for (name, role) in [("ann", OperatorRole::Approver), ("vic", OperatorRole::Viewer)] {
        let operator =
            OperatorV1 { name: name.into(), role, tenant_id: Some(T.into()), display_name: None, sign_in: None };
        l.ok(Command::SetOperator { operator });
        let session_id = if name == "ann" { "a" } else { "b" }.repeat(32);
        let session = OperatorSessionV1 {
            session_id,
            operator: name.into(),
            secret_sha256: "0".repeat(64),
            opened_at_ms: l.now,
            expires_at_ms: l.now + 3_600_000,
            idle_timeout_ms: 0,
            last_used_at_ms: 0,
        };
        l.ok(Command::OpenOperatorSession { session });
    }
    let mut s = spec("op-1", "k-1", json!({"p": 1}), Some("press"), l.now + 600_000);
    s.action = "crush".into();
    l.ok(propose("prop-1", s.clone()));
    l.ok(submit_proposed("prop-1", s.clone()));
    let approve = |by: &str| Command::AnswerInputs {
        tenant_id: T.into(),
        operation_id: "op-1".into(),
        by_principal_id: by.into(),
        answers: [(
            APPROVAL_REQUEST.to_string(),
            json!({"action": "accept", "content": {"payload_hash": s.payload_hash}}).to_string(),
        )]
        .into(),
    };
    let by = |session: &str, command: Command| Command::ByOperator {
        session_id: session.repeat(32),
        command: Box::new(command),
    };
    assert_eq!(l.refused(approve("operator:ann")), ReasonCode::OPERATOR_SCOPE_VIOLATION, "no session, no operator");
    assert_eq!(l.refused(by("b", approve("operator:vic"))), ReasonCode::OPERATOR_ROLE_REQUIRED, "a viewer");
    assert_eq!(l.refused(by("a", approve("operator:vic"))), ReasonCode::OPERATOR_SCOPE_VIOLATION, "another's name");
    l.ok(by("a", approve("operator:ann")));
    let op = l.op("op-1");
    assert_eq!(op.state, OperationState::Reserved);
    assert!(op.answers[APPROVAL_REQUEST].contains("\"approver\":\"operator:ann\""), "{:?}", op.answers);
}
