//! `--verify` (SPEC T2): after the run, the ledger's view (admin API: operations and the
//! audit trail) is checked against what the agents were told.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use futures::StreamExt;
use serde::Serialize;
use serde_json::Value;
use writ_api::audit::{AuditFilter, AuditRecord};
use writ_api::operation::{Operation, OperationState};

use crate::writ::{Admin, Seen, Tenant};

/// One invariant and whether it held.
#[derive(Debug, Clone, Serialize)]
pub struct Check {
    pub name: &'static str,
    pub ok: bool,
    pub detail: String,
}

/// The outcome of `--verify`.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Verification {
    pub checks: Vec<Check>,
    /// Final states of the acknowledged operations.
    pub states: BTreeMap<String, u64>,
    /// Acknowledged operations the ledger does not have (must be 0).
    pub acknowledged_lost: u64,
    /// Time until every acknowledged operation had settled.
    pub drain_s: f64,
}

impl Verification {
    pub fn passed(&self) -> bool {
        self.checks.iter().all(|c| c.ok)
    }

    fn check(&mut self, name: &'static str, problems: Vec<String>, ok_detail: String) {
        let ok = problems.is_empty();
        let detail = if ok {
            ok_detail
        } else {
            let shown: Vec<&String> = problems.iter().take(5).collect();
            format!("{} problem(s), e.g. {shown:?}", problems.len())
        };
        self.checks.push(Check { name, ok, detail });
    }
}

/// States in which an operation no longer waits on the system (an operator may still act on
/// `unknown_effect`, and an agent may still decide on `effect_reported`).
fn settled(state: OperationState) -> bool {
    state.is_terminal() || matches!(state, OperationState::EffectReported | OperationState::UnknownEffect)
}

/// Checks the invariants for the operations of run `run_id` (idempotency keys `{run_id}-…`),
/// waiting up to `drain` for acknowledged operations to settle.
pub async fn verify(
    admin: &Admin,
    tenants: &[Tenant],
    seen: &Seen,
    run_id: &str,
    since_ms: u64,
    operations_per_minute: Option<u64>,
    drain: Duration,
) -> Result<Verification, String> {
    let mut v = Verification::default();
    // 1. Every acknowledged operation is in the ledger and settles, attempted at most once.
    let ops = settle(&mut v, admin, tenants, seen, drain).await;
    // 2. The audit trail of each tenant since the run began.
    let mut trails = Vec::new();
    for t in tenants {
        trails.push(trail_of(admin, t, run_id, since_ms, drain).await?);
    }
    check_trails(&mut v, tenants, seen, &ops, &trails, operations_per_minute);
    // 3. What the devices saw and what agents were told.
    check_devices(&mut v, tenants);
    v.check(
        "retries got the same operation; changed payloads were refused",
        seen.violations.clone(),
        "every retry and reuse answered correctly".into(),
    );
    Ok(v)
}

/// Reads every acknowledged operation until all have settled or `drain` ends; checks that none
/// is lost, all settled and none was attempted twice. Returns what the ledger said of each.
async fn settle(
    v: &mut Verification,
    admin: &Admin,
    tenants: &[Tenant],
    seen: &Seen,
    drain: Duration,
) -> BTreeMap<String, Operation> {
    let started = Instant::now();
    let mut pending: Vec<usize> = (0..seen.acked.len()).collect();
    let mut ops: BTreeMap<String, Operation> = BTreeMap::new();
    let mut lost = Vec::new();
    let mut unreadable: Option<String> = None;
    loop {
        let answers: Vec<(usize, Result<Option<Operation>, String>)> = futures::stream::iter(pending.iter().copied())
            .map(|i| async move {
                let a = &seen.acked[i];
                (i, admin.operation(&tenants[a.tenant].name, &a.operation_id).await)
            })
            .buffer_unordered(32)
            .collect()
            .await;
        let mut still = Vec::new();
        for (i, answer) in answers {
            match answer {
                Ok(None) => lost.push(seen.acked[i].operation_id.clone()),
                Ok(Some(op)) => {
                    if !settled(op.state) {
                        still.push(i);
                    }
                    ops.insert(seen.acked[i].operation_id.clone(), op);
                }
                // The cluster may be electing or recovering: not settled yet, asked again
                // until the drain ends.
                Err(e) => {
                    unreadable = Some(e);
                    still.push(i);
                }
            }
        }
        pending = still;
        if pending.is_empty() || started.elapsed() >= drain {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    v.drain_s = started.elapsed().as_secs_f64();
    for op in ops.values() {
        *v.states.entry(op.state.as_str().to_string()).or_default() += 1;
    }
    v.acknowledged_lost = lost.len() as u64;
    let n = seen.acked.len();
    v.check("every acknowledged operation is in the ledger", lost, format!("{n} acknowledged, all present"));
    let unsettled: Vec<String> = pending
        .iter()
        .map(|i| {
            let id = &seen.acked[*i].operation_id;
            match ops.get(id) {
                Some(o) => format!("{id}: {}", o.state.as_str()),
                None => format!("{id}: unreadable ({})", unreadable.as_deref().unwrap_or("?")),
            }
        })
        .collect();
    let detail = format!("all settled within {:.1} s: {:?}", v.drain_s, v.states);
    v.check("every acknowledged operation settled", unsettled, detail);
    let twice: Vec<String> = ops
        .iter()
        .filter(|(_, op)| op.attempts > 1)
        .map(|(id, op)| format!("{id}: {} attempts", op.attempts))
        .collect();
    v.check("no operation attempted twice (ledger)", twice, "at most one attempt each".into());
    ops
}

/// The operation records of the tenant's audit trail from one whole quota window before the
/// run began (ledger time may trail this clock), read as a [`Trail`] of run `run_id`.
async fn trail_of(admin: &Admin, t: &Tenant, run_id: &str, since_ms: u64, drain: Duration) -> Result<Trail, String> {
    let window = writ_api::quota::WINDOW_MS;
    let filter = AuditFilter {
        domain: Some("operation".into()),
        since_ms: Some(since_ms.saturating_sub(window) / window * window),
        ..Default::default()
    };
    let asked = Instant::now();
    loop {
        match admin.audit(&t.name, &filter).await {
            Ok(records) => return Ok(Trail::read(&records, run_id)),
            Err(e) if asked.elapsed() >= drain => return Err(e),
            Err(_) => tokio::time::sleep(Duration::from_secs(1)).await,
        }
    }
}

/// What the tenants' trails say against the ledger and the agents: one operation per key,
/// every acknowledged one audited, attempts agreeing, no quota overshoot, no overlapping
/// reservations.
fn check_trails(
    v: &mut Verification,
    tenants: &[Tenant],
    seen: &Seen,
    ops: &BTreeMap<String, Operation>,
    trails: &[Trail],
    operations_per_minute: Option<u64>,
) {
    let (mut keys, mut audited, mut quota, mut overlaps, mut attempts_off) =
        (Vec::new(), BTreeSet::new(), Vec::new(), Vec::new(), Vec::new());
    let mut beyond_retention: BTreeSet<&str> = BTreeSet::new();
    let mut submitted_total = 0u64;
    for (ti, (t, a)) in tenants.iter().zip(trails).enumerate() {
        submitted_total += a.by_key.values().map(BTreeSet::len).sum::<usize>() as u64;
        for (key, ids) in a.by_key.iter().filter(|(_, ids)| ids.len() > 1) {
            keys.push(format!("{}: key {key} → {ids:?}", t.name));
        }
        audited.extend(a.by_key.values().flatten().cloned());
        // An operation that began at or before the oldest record read may have records the
        // tenant's audit retention dropped: its trail is not checked.
        let retained = |id: &str| ops.get(id).is_none_or(|op| a.oldest_ms.is_none_or(|o| op.created_at_ms > o));
        beyond_retention.extend(
            seen.acked
                .iter()
                .filter(|ack| ack.tenant == ti && !retained(&ack.operation_id))
                .map(|ack| ack.operation_id.as_str()),
        );
        for ((principal, window), count) in &a.per_minute {
            if let Some(limit) = operations_per_minute.filter(|limit| count > limit) {
                quota
                    .push(format!("{}: {principal} had {count} operations in minute {window} (limit {limit})", t.name));
            }
        }
        overlaps.extend(a.overlaps.iter().map(|o| format!("{}: {o}", t.name)));
        for ack in seen.acked.iter().filter(|ack| ack.tenant == ti && retained(&ack.operation_id)) {
            let id = &ack.operation_id;
            let ledger = ops.get(id).map_or(0, |op| u64::from(op.attempts));
            let trail = a.attempts.get(id).copied().unwrap_or(0);
            if ledger != trail {
                attempts_off.push(format!("{id}: ledger says {ledger} attempts, audit has {trail}"));
            }
        }
    }
    let uncertain = seen.uncertain.len();
    let detail = format!("{submitted_total} operations submitted in this run, one per key ({uncertain} executes ended without an answer)");
    v.check("one operation per idempotency key (audit)", keys, detail);
    let acked: BTreeSet<&str> = seen.acked.iter().map(|a| a.operation_id.as_str()).collect();
    let checked: Vec<&str> = acked.iter().copied().filter(|id| !beyond_retention.contains(id)).collect();
    let unaudited: Vec<String> = checked.iter().filter(|id| !audited.contains(**id)).map(|id| id.to_string()).collect();
    let detail = match beyond_retention.len() {
        0 => format!("{} acknowledged ⊆ audited", acked.len()),
        older => format!(
            "{} acknowledged ⊆ audited ({older} older than the oldest record the tenants' audit retention kept: not checked)",
            checked.len()
        ),
    };
    v.check("every acknowledged operation audited", unaudited, detail);
    v.check("audit attempts agree with the ledger", attempts_off, "attempt transitions = attempts".into());
    let detail = match operations_per_minute {
        Some(l) => format!("≤ {l} operations per principal per minute; {} refusals seen", seen.quota_refusals),
        None => "no operation quota set".into(),
    };
    v.check("no quota overshoot", quota, detail);
    v.check("no overlapping device reservations", overlaps, "reservations of each device are disjoint".into());
}

/// Every line of the simulated devices' attempt logs is distinct: no device saw an operation
/// twice.
fn check_devices(v: &mut Verification, tenants: &[Tenant]) {
    let mut repeated = Vec::new();
    let mut device_attempts = 0;
    for t in tenants {
        let Ok(log) = std::fs::read_to_string(t.executor_dir.join("attempts.log")) else { continue };
        let mut once = BTreeSet::new();
        for line in log.lines().filter(|l| !l.is_empty()) {
            device_attempts += 1;
            if !once.insert(line.to_string()) {
                repeated.push(format!("{}: {line}", t.name));
            }
        }
    }
    let detail = format!("{device_attempts} device attempts, all distinct");
    v.check("no operation attempted twice (device logs)", repeated, detail);
}

/// What a tenant's audit trail says about operations.
#[derive(Debug, Default)]
pub struct Trail {
    /// Idempotency key (this run's only) → operation ids submitted with it.
    pub by_key: BTreeMap<String, BTreeSet<String>>,
    /// (principal, minute) → operations submitted (any run).
    pub per_minute: BTreeMap<(String, u64), u64>,
    /// Operation → transitions into `attempting`.
    pub attempts: BTreeMap<String, u64>,
    /// Reservations of a device taken while another operation still held it.
    pub overlaps: Vec<String>,
    /// Ledger time of the oldest record read: the tenant's audit retention may have dropped
    /// what came before it (a run longer than the tenant's audit keeps).
    pub oldest_ms: Option<u64>,
}

impl Trail {
    pub fn read(records: &[AuditRecord], run_id: &str) -> Trail {
        let mut t = Trail { oldest_ms: records.iter().map(|r| r.at_ms).min(), ..Trail::default() };
        let prefix = format!("{run_id}-");
        // device → (operation, hold expiry)
        let mut held: BTreeMap<String, (String, u64)> = BTreeMap::new();
        for r in records.iter().filter(|r| r.outcome == "applied") {
            let d: Value = serde_json::from_str(&r.detail).unwrap_or(Value::Null);
            let s = |v: &Value| v.as_str().unwrap_or_default().to_string();
            match r.operation.as_str() {
                "operation_submitted" => {
                    let spec = &d["spec"];
                    let principal = s(&spec["principal_id"]);
                    *t.per_minute.entry((principal, r.at_ms / writ_api::quota::WINDOW_MS)).or_default() += 1;
                    let key = s(&spec["idempotency_key"]);
                    if key.starts_with(&prefix) {
                        t.by_key.entry(key).or_default().insert(s(&spec["operation_id"]));
                    }
                }
                "operation_transitioned" if d["to"] == "attempting" => {
                    *t.attempts.entry(s(&d["operation_id"])).or_default() += 1;
                }
                "device_reserved" => {
                    let (device, op) = (s(&d["device_id"]), s(&d["operation_id"]));
                    if let Some((other, expires)) = held.get(&device) {
                        if *other != op && *expires > r.at_ms {
                            t.overlaps.push(format!(
                                "device {device} reserved for {op} at {} while {other} held it until {expires}",
                                r.at_ms
                            ));
                        }
                    }
                    held.insert(device, (op, d["expires_at_ms"].as_u64().unwrap_or(u64::MAX)));
                }
                "attempt_lease_extended" => {
                    if let Some(h) = held.values_mut().find(|(op, _)| *op == s(&d["operation_id"])) {
                        h.1 = d["expires_at_ms"].as_u64().unwrap_or(h.1);
                    }
                }
                "device_released" => {
                    let device = s(&d["device_id"]);
                    if held.get(&device).is_some_and(|(op, _)| *op == s(&d["operation_id"])) {
                        held.remove(&device);
                    }
                }
                _ => {}
            }
        }
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::writ::Acked;
    use serde_json::json;

    fn rec(seq: u64, at_ms: u64, operation: &str, detail: Value) -> AuditRecord {
        AuditRecord {
            seq,
            at_ms,
            revision: seq,
            trace_id: String::new(),
            tenant_id: "t".into(),
            domain: "operation".into(),
            operation: operation.into(),
            outcome: "applied".into(),
            reason_code: None,
            principal_id: None,
            token_id: None,
            parent_token_id: None,
            detail: detail.to_string(),
            authority: None,
        }
    }

    fn submitted(seq: u64, at_ms: u64, op: &str, key: &str) -> AuditRecord {
        rec(
            seq,
            at_ms,
            "operation_submitted",
            json!({"spec": {"operation_id": op, "idempotency_key": key, "principal_id": "p"}}),
        )
    }

    fn reserved(seq: u64, at_ms: u64, op: &str, device: &str, expires: u64) -> AuditRecord {
        rec(seq, at_ms, "device_reserved", json!({"device_id": device, "operation_id": op, "expires_at_ms": expires}))
    }

    #[test]
    fn a_clean_trail_has_nothing_to_report() {
        let t = Trail::read(
            &[
                submitted(1, 1_000, "o1", "run-1"),
                reserved(2, 1_001, "o1", "d", 9_000),
                rec(3, 1_002, "operation_transitioned", json!({"operation_id": "o1", "to": "attempting"})),
                rec(4, 1_003, "device_released", json!({"device_id": "d", "operation_id": "o1"})),
                submitted(5, 1_004, "o2", "run-2"),
                reserved(6, 1_005, "o2", "d", 9_000),
                submitted(7, 1_006, "o3", "other-run-1"),
            ],
            "run",
        );
        assert!(t.overlaps.is_empty(), "{:?}", t.overlaps);
        assert_eq!(t.by_key.len(), 2, "only this run's keys");
        assert!(t.by_key.values().all(|ids| ids.len() == 1));
        assert_eq!(t.attempts["o1"], 1);
        assert_eq!(t.per_minute[&("p".to_string(), 0)], 3, "quotas count every run");
    }

    #[test]
    fn a_doubly_used_key_and_an_overlapping_reservation_are_found() {
        let t = Trail::read(
            &[
                submitted(1, 1_000, "o1", "run-1"),
                submitted(2, 1_001, "o2", "run-1"),
                reserved(3, 1_002, "o1", "d", 9_000),
                // o2 takes the device while o1 still holds it (not released, not expired).
                reserved(4, 2_000, "o2", "d", 9_500),
                // After the hold ran out, taking it over is no overlap.
                reserved(5, 9_600, "o3", "d", 20_000),
            ],
            "run",
        );
        assert_eq!(t.by_key["run-1"].len(), 2);
        assert_eq!(t.overlaps.len(), 1, "{:?}", t.overlaps);
        assert!(t.overlaps[0].contains("o2") && t.overlaps[0].contains("o1"));
    }

    /// A finished operation of tenant "t" created at `created_at_ms` with `attempts` attempts.
    fn operation(id: &str, created_at_ms: u64, attempts: u32) -> Operation {
        serde_json::from_value(json!({
            "tenant_id": "t",
            "spec": {"operation_id": id, "principal_id": "p", "authority_ref": "a", "action": "log_entry",
                     "payload_hash": "h", "input": "{}", "idempotency_key": format!("run-{id}"), "deadline_ms": 1,
                     "cost_units": 1, "cost_ceiling": null, "device_id": null, "work_ref": null, "preconditions": {},
                     "trace_id": "", "input_requests": {}},
            "state": "effect_reported", "executor_id": "x", "fencing_token": null, "attempts": attempts,
            "lease_expires_at_ms": null, "evidence": [], "observations": [], "answers": {}, "cancel_requested": false,
            "cause": "", "created_at_ms": created_at_ms, "updated_at_ms": created_at_ms, "revision": 1
        }))
        .expect("an operation")
    }

    #[test]
    fn operations_older_than_the_retained_trail_are_not_checked_against_it() {
        let tenant =
            Tenant { name: "t".into(), token: String::new(), devices: vec![], executor_dir: "/nowhere".into() };
        let acked = |id: &str| Acked {
            tenant: 0,
            key: format!("run-{id}"),
            input: Value::Null,
            device: None,
            operation_id: id.into(),
        };
        // The trail starts at 4,000: retention dropped what "old" (created at 1,000) left there.
        let trail = Trail::read(
            &[
                submitted(9, 4_000, "another", "other-run-1"),
                submitted(10, 5_000, "new", "run-new"),
                rec(11, 5_001, "operation_transitioned", json!({"operation_id": "new", "to": "attempting"})),
            ],
            "run",
        );
        let mut ops: BTreeMap<String, Operation> =
            [("old", 1_000, 1), ("new", 5_000, 1)].map(|(id, at, n)| (id.to_string(), operation(id, at, n))).into();
        let check = |ops: &BTreeMap<String, Operation>, ids: &[&str]| {
            let seen = Seen { acked: ids.iter().map(|id| acked(id)).collect(), ..Seen::default() };
            let mut v = Verification::default();
            check_trails(&mut v, std::slice::from_ref(&tenant), &seen, ops, std::slice::from_ref(&trail), None);
            v
        };
        let v = check(&ops, &["old", "new"]);
        assert!(v.passed(), "{:?}", v.checks);
        let audited = v.checks.iter().find(|c| c.name == "every acknowledged operation audited").expect("check");
        assert!(audited.detail.contains("1 older than the oldest record"), "{}", audited.detail);
        // An operation created after the trail's start is still checked: missing from it, it fails.
        ops.insert("lost".into(), operation("lost", 6_000, 1));
        let v = check(&ops, &["old", "new", "lost"]);
        let failed: Vec<&Check> = v.checks.iter().filter(|c| !c.ok).collect();
        assert_eq!(failed.len(), 2, "unaudited and its attempts: {failed:?}");
        assert!(failed.iter().all(|c| c.detail.contains("lost") && !c.detail.contains("old")), "{failed:?}");
    }

    #[test]
    fn lease_extensions_keep_the_hold() {
        let t = Trail::read(
            &[
                reserved(1, 1_000, "o1", "d", 2_000),
                rec(2, 1_900, "attempt_lease_extended", json!({"operation_id": "o1", "expires_at_ms": 5_000})),
                reserved(3, 3_000, "o2", "d", 9_000),
            ],
            "run",
        );
        assert_eq!(t.overlaps.len(), 1, "the extended hold still covered 3000");
    }
}
