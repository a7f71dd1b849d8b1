//! Admission (SPEC D9, E2: after authentication, before anything else): per-tenant and
//! per-principal request quotas that hold across every edge replica. The edge spends slices
//! leased from the ledger (`writ_api::quota`): one ledger write per slice, not per request.
//! A slice is used only while its window lasts, measured on this edge's monotonic clock from
//! before the lease was sent — so a slow or skewed clock can only end a slice early, never let
//! it spill into the next window.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use writ_api::auth::Authority;
use writ_api::dto::{SubmitRequest, SubmitResponse};
use writ_api::ledger::{Command, Event, Outcome};
use writ_api::quota::slice_size;
use writ_api::{ReasonCode, Rejection};
use writ_client::verifier::Verifier;
use writ_client::Ledger;

/// Slices kept before expired ones are dropped.
const SLICES_MAX: usize = 10_000;

#[derive(Default)]
struct Slice {
    remaining: u64,
    valid_until: Option<Instant>,
    /// The window's quota is spent (the ledger granted nothing).
    exhausted: bool,
}

/// A refused admission: the rejection and, for QUOTA_EXCEEDED, when to retry.
#[derive(Debug)]
pub struct Refused {
    pub rejection: Rejection,
    pub retry_after: Option<Duration>,
}

impl From<Rejection> for Refused {
    fn from(rejection: Rejection) -> Refused {
        Refused { rejection, retry_after: None }
    }
}

/// One principal's slice; its async lock makes concurrent requests wait for one lease.
type SliceCell = Arc<tokio::sync::Mutex<Slice>>;

/// The edge's quota slices, per (tenant, principal).
pub struct Admission {
    ledger: Arc<dyn Ledger>,
    slices: Mutex<HashMap<(String, String), SliceCell>>,
}

impl Admission {
    pub fn new(ledger: Arc<dyn Ledger>) -> Admission {
        Admission { ledger, slices: Mutex::new(HashMap::new()) }
    }

    /// Admits one request of `a`, or refuses it with QUOTA_EXCEEDED (and a retry hint) or
    /// LEDGER_UNAVAILABLE (a lease was needed and the ledger could not grant it: fail closed).
    pub async fn admit(&self, verifier: &Verifier, a: &Authority, trace_id: &str) -> Result<(), Refused> {
        let limits = verifier.with_state(|s| {
            let tenant = s.tenants.get(&a.tenant_id).and_then(|t| t.settings.quotas.requests_per_minute);
            let principal = s
                .principal_quotas
                .get(&a.tenant_id)
                .and_then(|m| m.get(&a.principal_id))
                .and_then(|q| q.requests_per_minute);
            tenant.into_iter().chain(principal).min()
        });
        let Some(limit) = limits else { return Ok(()) };
        let cell = {
            let mut slices = self.slices.lock().expect("slices");
            if slices.len() >= SLICES_MAX {
                let now = Instant::now();
                slices.retain(|_, s| s.try_lock().map_or(true, |s| s.valid_until.is_some_and(|t| t > now)));
            }
            slices.entry((a.tenant_id.clone(), a.principal_id.clone())).or_default().clone()
        };
        // One lease at a time per principal: concurrent requests wait for it.
        let mut slice = cell.lock().await;
        let now = Instant::now();
        if let Some(until) = slice.valid_until.filter(|t| *t > now) {
            if slice.remaining > 0 {
                slice.remaining -= 1;
                return Ok(());
            }
            if slice.exhausted {
                return Err(exceeded(until - now));
            }
        }
        let sent = Instant::now();
        let command = Command::LeaseRequestQuota {
            tenant_id: a.tenant_id.clone(),
            principal_id: a.principal_id.clone(),
            wanted: slice_size(limit),
        };
        let response = self.ledger.submit(SubmitRequest::new(trace_id.to_string(), command)).await?;
        let lease = match response {
            SubmitResponse { outcome: Outcome::Applied { events, .. }, .. } => {
                events.into_iter().find_map(|env| match env.event {
                    Event::RequestQuotaLeasedV1 { granted, window_ends_at_ms, .. } => {
                        Some((granted, window_ends_at_ms.saturating_sub(env.at_ms)))
                    }
                    _ => None,
                })
            }
            SubmitResponse { outcome: Outcome::Rejected { reason, message, .. }, .. } => {
                return Err(Rejection::new(reason, message).into())
            }
            _ => None,
        };
        let (granted, left_ms) =
            lease.ok_or_else(|| Rejection::new(ReasonCode::INTERNAL, "unexpected lease outcome"))?;
        let outcome = if granted == 0 { "spent" } else { "granted" };
        metrics::counter!("writ_edge_quota_leases_total", "outcome" => outcome).increment(1);
        let until = sent + Duration::from_millis(left_ms);
        slice.valid_until = Some(until);
        slice.exhausted = granted == 0;
        slice.remaining = granted.saturating_sub(1);
        if granted == 0 {
            return Err(exceeded(until.saturating_duration_since(Instant::now())));
        }
        Ok(())
    }
}

fn exceeded(retry_after: Duration) -> Refused {
    metrics::counter!("writ_edge_quota_refusals_total").increment(1);
    Refused {
        rejection: Rejection::new(
            ReasonCode::QUOTA_EXCEEDED,
            format!("the request quota of this minute is spent; retry in {} s", retry_after.as_secs() + 1),
        ),
        retry_after: Some(retry_after),
    }
}
