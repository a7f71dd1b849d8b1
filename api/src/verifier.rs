//! [`Verifier`]: token verification against a local replica of the ledger state, kept current
//! by the ledger's watch stream — so verification costs no ledger round trip, and a revocation
//! committed on any node reaches every verifier as soon as the event is streamed (SPEC D3).
//!
//! The replica starts from a linearizable snapshot, then applies events in revision order. A
//! gap, an end line or a lost connection sends it back to a fresh snapshot. The verifier fails
//! closed: with no contact with the ledger for longer than the staleness bound (heartbeats
//! arrive every [`crate::dto::WATCH_HEARTBEAT`]) every verification answers LEDGER_UNAVAILABLE,
//! because a revocation might be missing.

use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures::StreamExt;

use crate::auth::{self, Authority};
use crate::client::{unavailable, Ledger};
use crate::dto::{WatchFilter, WatchLine};
use crate::ledger::Rejection;
use crate::state::LedgerState;

/// Default bound on how old the replica may be before verifications fail closed.
pub const STALENESS_MAX_DEFAULT: Duration = Duration::from_secs(5);
/// How long a verification waits for the replica to reach the revision a token was issued at.
pub const CATCH_UP_WAIT: Duration = Duration::from_secs(1);
const RETRY_MIN: Duration = Duration::from_millis(100);
const RETRY_MAX: Duration = Duration::from_secs(2);

struct Inner {
    state: RwLock<LedgerState>,
    /// Revision of the replica; verifications waiting for a token's revision watch it.
    revision: tokio::sync::watch::Sender<u64>,
    /// Last time the feed proved the replica current (snapshot, event or heartbeat).
    contact: Mutex<Option<Instant>>,
    audience: String,
    staleness_max: Duration,
}

/// A token verifier following one ledger (any node; followers serve the watch as well).
/// Cheap to clone; the feed task stops when the last clone is dropped.
#[derive(Clone)]
pub struct Verifier {
    inner: Arc<Inner>,
}

impl Verifier {
    /// Starts following `ledger`. `audience` is what Writ tokens must be issued for.
    pub fn follow(ledger: Arc<dyn Ledger>, audience: impl Into<String>) -> Verifier {
        Self::follow_with(ledger, audience, STALENESS_MAX_DEFAULT)
    }

    pub fn follow_with(ledger: Arc<dyn Ledger>, audience: impl Into<String>, staleness_max: Duration) -> Verifier {
        let inner = Arc::new(Inner {
            state: RwLock::new(LedgerState::default()),
            revision: tokio::sync::watch::channel(0).0,
            contact: Mutex::new(None),
            audience: audience.into(),
            staleness_max,
        });
        tokio::spawn(feed(Arc::downgrade(&inner), ledger));
        Verifier { inner }
    }

    /// The replica's revision (0 before the first snapshot).
    pub fn revision(&self) -> u64 {
        *self.inner.revision.borrow()
    }

    /// Follows the replica's revision (changes whenever an event is applied or a snapshot
    /// loaded).
    pub fn revisions(&self) -> tokio::sync::watch::Receiver<u64> {
        self.inner.revision.subscribe()
    }

    /// Waits until the replica has reached `revision` (true) or `timeout` passed (false).
    pub async fn wait_for(&self, revision: u64, timeout: Duration) -> bool {
        let mut rx = self.inner.revision.subscribe();
        tokio::time::timeout(timeout, rx.wait_for(|r| *r >= revision)).await.is_ok_and(|r| r.is_ok())
    }

    /// Verifies a bearer token now.
    pub async fn verify(&self, bearer: &str) -> Result<Authority, Rejection> {
        self.verify_at(bearer, now_ms()).await
    }

    /// Verifies a bearer token at `now_ms` (ms since the epoch).
    pub async fn verify_at(&self, bearer: &str, now_ms: u64) -> Result<Authority, Rejection> {
        self.current().await?;
        if let Some(rev) = auth::recorded_revision(bearer) {
            if self.revision() < rev {
                self.wait_for(rev, CATCH_UP_WAIT).await;
            }
        }
        let state = self.inner.state.read().expect("state lock");
        auth::verify(&state, bearer, &self.inner.audience, now_ms)
    }

    /// The authority of an anonymous loopback request (see [`auth::anonymous`]), from a current
    /// replica.
    pub async fn anonymous(&self, tenant: &str, principal: &str) -> Result<Authority, Rejection> {
        self.current().await?;
        auth::anonymous(&self.inner.state.read().expect("state lock"), tenant, principal)
    }

    /// Waits briefly for the replica to be current (starting, or the feed reconnecting), then
    /// fails closed.
    async fn current(&self) -> Result<(), Rejection> {
        let deadline = Instant::now() + CATCH_UP_WAIT;
        while !self.is_current() {
            if Instant::now() >= deadline {
                return Err(unavailable("token state is not current: the ledger feed is down; retry shortly"));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(())
    }

    /// Whether the replica heard from the ledger within the staleness bound.
    pub fn is_current(&self) -> bool {
        self.inner.contact.lock().expect("contact lock").is_some_and(|t| t.elapsed() <= self.inner.staleness_max)
    }

    /// Runs `f` on the replica (e.g. to read principals or catalogs at the same revision).
    pub fn with_state<T>(&self, f: impl FnOnce(&LedgerState) -> T) -> T {
        f(&self.inner.state.read().expect("state lock"))
    }
}

pub fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

/// Snapshot, then watch; on any break, start over after a bounded backoff. Ends when every
/// [`Verifier`] handle is gone.
async fn feed(inner: Weak<Inner>, ledger: Arc<dyn Ledger>) {
    let mut backoff = RETRY_MIN;
    loop {
        match follow_once(&inner, ledger.as_ref()).await {
            Ok(()) => backoff = RETRY_MIN,
            Err(e) => {
                // Before the first snapshot (e.g. while the cluster elects a leader at start-up)
                // a failed attempt is expected; later it means lost contact.
                let started = inner.upgrade().is_some_and(|i| i.contact.lock().expect("contact lock").is_some());
                if started {
                    tracing::warn!(reason = %e.reason, message = %e.message, "verifier feed interrupted");
                } else {
                    tracing::debug!(reason = %e.reason, message = %e.message, "verifier waiting for the ledger");
                }
                backoff = (backoff * 2).min(RETRY_MAX);
            }
        }
        if inner.strong_count() == 0 {
            return;
        }
        tokio::time::sleep(backoff).await;
    }
}

/// One snapshot-then-watch session. Returns when the stream ends or falls out of order.
async fn follow_once(weak: &Weak<Inner>, ledger: &dyn Ledger) -> Result<(), Rejection> {
    let snapshot = ledger.snapshot().await?;
    let from = snapshot.revision + 1;
    {
        let Some(inner) = weak.upgrade() else { return Ok(()) };
        *inner.state.write().expect("state lock") = snapshot;
        inner.revision.send_replace(from - 1);
        *inner.contact.lock().expect("contact lock") = Some(Instant::now());
    }
    let mut lines = ledger.watch(WatchFilter { from: Some(from), ..Default::default() }).await?;
    while let Some(line) = lines.next().await {
        let Some(inner) = weak.upgrade() else { return Ok(()) };
        match line {
            WatchLine::Event(e) => {
                let mut state = inner.state.write().expect("state lock");
                if e.revision <= state.revision {
                    continue;
                }
                if e.revision != state.revision + 1 {
                    return Err(unavailable(format!("watch skipped from {} to {}", state.revision, e.revision)));
                }
                state.apply_event(&e);
                drop(state);
                inner.revision.send_replace(e.revision);
            }
            WatchLine::Heartbeat { .. } => {}
            WatchLine::End { end, message, .. } => return Err(Rejection::new(end, message)),
        }
        *inner.contact.lock().expect("contact lock") = Some(Instant::now());
    }
    Err(unavailable("the watch stream ended"))
}
