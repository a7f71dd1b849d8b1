//! Upstream drift found without an operator: every period an edge lists the tools of each
//! open tenant's upstream MCP servers (one at a time, each within the upstream's own timeouts,
//! over a connection of its own, with the credential resolved on the edge's host) and records
//! a set that differs from the pending one — or from the pinned one when none is pending — with
//! `ObserveUpstreamTools`: a pending diff an operator approves, never served before.
//!
//! The edges watch, not the ledger: the consensus process never calls a tenant's URL. Every
//! edge watches, starting at a random share of the period so replicas spread their looks; a
//! set another edge recorded first is unchanged here once the replica holds it.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use writ_api::dto::SubmitRequest;
use writ_api::ledger::{Command, Outcome};
use writ_api::state::LedgerState;
use writ_api::upstream::UpstreamV1;
use writ_client::{Ledger, Verifier};

/// Default seconds between an edge's looks at every upstream's tools.
pub const WATCH_S_DEFAULT: u64 = 300;

/// Looks every `period` (never, when it is zero) until `stop` resolves;
/// `writ_upstream_watch_total{outcome}` counts the looks at each upstream.
pub async fn watch(verifier: Verifier, ledger: Arc<dyn Ledger>, period: Duration, stop: impl Future<Output = ()>) {
    if period.is_zero() {
        return;
    }
    tokio::pin!(stop);
    let mut wait = period.mul_f64(rand::random::<f64>());
    loop {
        tokio::select! {
            _ = &mut stop => return,
            _ = tokio::time::sleep(wait) => {}
        }
        for (tenant_id, upstream) in verifier.with_state(watched) {
            let outcome = look(ledger.as_ref(), tenant_id, &upstream).await;
            metrics::counter!("writ_upstream_watch_total", "outcome" => outcome).increment(1);
        }
        wait = period;
    }
}

/// The upstreams of every tenant that takes changes.
fn watched(st: &LedgerState) -> Vec<(String, UpstreamV1)> {
    st.upstreams
        .iter()
        .filter(|(t, _)| st.tenants.get(*t).is_some_and(|t| t.closed().is_none()))
        .flat_map(|(t, m)| m.values().map(move |u| (t.clone(), u.clone())))
        .collect()
}

/// Lists one upstream's tools and records them when they changed: `unchanged`, `changed`,
/// `unreachable` (skipped until the next look) or `failed` (not recorded).
async fn look(ledger: &dyn Ledger, tenant_id: String, u: &UpstreamV1) -> &'static str {
    let known = u.pending.as_ref().or(u.pinned.as_ref()).map(|s| s.digest.clone());
    let tools = match writ_client::upstream::observe(&u.spec).await {
        Ok((tools, _)) if Some(&tools.digest) == known.as_ref() => return "unchanged",
        Ok((tools, _)) => tools,
        Err(e) => {
            tracing::debug!(upstream = %u.name, message = %e.message, "upstream watch could not list tools");
            return "unreachable";
        }
    };
    let command = Command::ObserveUpstreamTools { tenant_id, name: u.name.clone(), tools };
    let req = SubmitRequest::new(format!("upstream-watch-{}", writ_client::now_ms()), command);
    let refused = match ledger.submit(req).await {
        Ok(r) => match r.outcome {
            Outcome::Rejected { reason, message, .. } => Some((reason, message)),
            _ => None,
        },
        Err(e) => Some((e.reason, e.message)),
    };
    match refused {
        None => "changed",
        Some((reason, message)) => {
            tracing::warn!(upstream = %u.name, %reason, %message, "recording upstream drift failed");
            "failed"
        }
    }
}
