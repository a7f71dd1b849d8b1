//! Refusals recorded in a tenant's audit trail without flooding it: a refusal is a denied
//! decision of who was refused, at most once per (tenant, who, method, reason) per
//! [`REFUSAL_WINDOW`], the repeats counted into the next record. Used by the tenants'
//! authorization servers and by the operator checks of the admin API.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use writ_api::ledger::Command;
use writ_api::ReasonCode;

use crate::service::{submit_plain, AdminState};

/// How long repeats of one refusal are counted before the next one is recorded.
const REFUSAL_WINDOW: Duration = Duration::from_secs(10);
/// Most refusals counted at once (past it, the oldest windows are forgotten).
const REFUSAL_KEYS_MAX: usize = 4096;

/// What refusal a window counts: tenant, who, method, reason.
type RefusalKey = (String, String, &'static str, ReasonCode);

/// Refusals being counted: when each key's window opened, and how often it repeated since.
#[derive(Default)]
pub(crate) struct Refusals(Mutex<BTreeMap<RefusalKey, (Instant, u64)>>);

impl Refusals {
    /// Whether this refusal is recorded now (the first of its key in a window), with how many
    /// repeats of it the previous window counted.
    fn record_now(&self, key: RefusalKey) -> Option<u64> {
        let mut counted = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let now = Instant::now();
        if let Some((since, repeats)) = counted.get_mut(&key) {
            if now.duration_since(*since) < REFUSAL_WINDOW {
                *repeats += 1;
                return None;
            }
            let previous = *repeats;
            (*since, *repeats) = (now, 0);
            return Some(previous);
        }
        if counted.len() >= REFUSAL_KEYS_MAX {
            counted.retain(|_, (since, _)| now.duration_since(*since) < REFUSAL_WINDOW);
        }
        if counted.len() < REFUSAL_KEYS_MAX {
            counted.insert(key, (now, 0));
        }
        Some(0)
    }
}

/// Records that `who` was refused `method` for `reason` in `tenant_id`'s trail (a denied
/// decision naming `name`), unless this refusal was recorded within the window.
pub(crate) async fn record(
    st: &AdminState,
    tenant_id: &str,
    who: String,
    name: Option<String>,
    method: &'static str,
    reason: ReasonCode,
) {
    let Some(repeats) = st.refusals.record_now((tenant_id.to_string(), who.clone(), method, reason)) else {
        return;
    };
    let name = match repeats {
        0 => name,
        n => Some(format!(
            "{} (and {n} more in the previous {} s)",
            name.as_deref().unwrap_or(method),
            REFUSAL_WINDOW.as_secs()
        )),
    };
    let bounded = |t: &str| writ_api::audit::truncated(t, writ_api::audit::DECISION_FIELD_BYTES_MAX);
    let decision = writ_api::audit::RequestDecisionV1 {
        trace_id: crate::service::trace_id(),
        principal_id: bounded(&who),
        token_id: None,
        parent_token_id: None,
        method: method.to_string(),
        name: name.as_deref().map(bounded),
        outcome: "denied".into(),
        reason: Some(reason),
    };
    let command = Command::RecordDecisions { tenant_id: tenant_id.to_string(), decisions: vec![decision] };
    // Recorded as the node's own act: the refused person may not be allowed to record anything.
    if let Err(e) = submit_plain(st, command).await {
        tracing::warn!(reason = %e.reason, message = %e.message, "a refusal could not be recorded");
    }
}
