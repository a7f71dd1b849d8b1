//! [`Verifier`]: token verification against a local replica of the ledger state, kept current
//! by the ledger's watch stream — so verification costs no ledger round trip, and a revocation
//! committed on any node reaches every verifier as soon as the event is streamed (SPEC D3).
//!
//! The replica starts from a linearizable snapshot, then applies events in revision order. A
//! gap, an end line or a lost connection sends it back to a fresh snapshot. The verifier fails
//! closed: with no contact with the ledger for longer than the staleness bound (heartbeats
//! arrive every [`writ_api::dto::WATCH_HEARTBEAT`]) every verification answers LEDGER_UNAVAILABLE,
//! because a revocation might be missing.
//!
//! Verified tokens are cached (by sha256, at most [`VERIFIED_TOKENS_MAX`]): a hit skips the
//! signature check. The cache forgets everything, under the replica's write lock, when the
//! replica folds an event that may change a verification
//! ([`writ_api::ledger::Event::affects_authentication`]: a revocation, a suspension, a key or
//! issuer change) or loads a snapshot, so no request decided after the replica holds a revocation
//! is served from the cache; an entry also ends with its token's expiry.
//!
//! An event the replica cannot fold (it does not fit the state: a corrupt feed) stops the feed
//! loudly: the replica is marked not current, so every verification fails closed with
//! LEDGER_UNAVAILABLE, and the feed starts over from a fresh snapshot after a backoff. No lock
//! is held across anything that can panic, and a poisoned lock also counts as not current.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock, RwLockReadGuard, Weak};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use futures::StreamExt;
use writ_api::auth::{self, Authority};
use writ_api::dto::{WatchFilter, WatchLine};
use writ_api::ledger::DispatchChange;
use writ_api::state::LedgerState;
use writ_api::Rejection;

use crate::ledger::{unavailable, Ledger};
use crate::now_ms;

/// Default bound on how old the replica may be before verifications fail closed.
pub const STALENESS_MAX_DEFAULT: Duration = Duration::from_secs(5);
/// How long a verification waits for the replica to reach the revision a token was issued at.
pub const CATCH_UP_WAIT: Duration = Duration::from_secs(1);
/// Dispatch changes a slow receiver may fall behind by before it is told it lagged.
pub const DISPATCH_CHANGES_BUFFERED: usize = 4096;
/// Most verified tokens a verifier keeps (a full cache starts over).
pub const VERIFIED_TOKENS_MAX: usize = 4096;
const RETRY_MIN: Duration = Duration::from_millis(100);
const RETRY_MAX: Duration = Duration::from_secs(2);

/// A ledger state to decide on: an edge's [`Verifier`] replica, or — inside a node — the node's
/// own applied state (its admin API needs no second copy and no second fold of every event).
pub trait StateView: Send + Sync {
    /// Runs `f` on the state (under its read lock).
    fn read(&self, f: &mut dyn FnMut(&LedgerState));
    /// Whether the state may be decided on; verifications fail closed otherwise.
    fn is_current(&self) -> bool;
    /// Waits until the state has reached `revision` (true) or `timeout` passed (false).
    fn wait_for(&self, revision: u64, timeout: Duration) -> BoxFuture<'_, bool>;
}

impl dyn StateView {
    /// Runs `f` on the state and returns what it returns.
    pub fn with_state<T>(&self, f: impl FnOnce(&LedgerState) -> T) -> T {
        let (mut f, mut out) = (Some(f), None);
        self.read(&mut |s| out = f.take().map(|f| f(s)));
        out.expect("read runs its closure")
    }

    /// Verifies `bearer` for `audiences` at `now_ms`: waits briefly for a current state and for
    /// the revision a Writ token was recorded at, then decides under the state's lock (checking
    /// again there that it is current, so nothing is decided on a replica its feed just broke).
    pub async fn verify(&self, bearer: &str, audiences: &[String], now_ms: u64) -> Result<Authority, Rejection> {
        self.current().await?;
        if let Some(rev) = auth::recorded_revision(bearer) {
            self.wait_for(rev, CATCH_UP_WAIT).await;
        }
        self.with_state(|state| {
            if !self.is_current() {
                return Err(unavailable("token state is not current: the ledger feed stopped; retry shortly"));
            }
            auth::verify(state, bearer, audiences, now_ms)
        })
    }

    /// Waits briefly for the state to be current (starting, or a feed reconnecting), then
    /// fails closed.
    pub async fn current(&self) -> Result<(), Rejection> {
        let deadline = Instant::now() + CATCH_UP_WAIT;
        while !self.is_current() {
            if Instant::now() >= deadline {
                return Err(unavailable("token state is not current: the ledger feed is down; retry shortly"));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(())
    }
}

impl StateView for Verifier {
    fn read(&self, f: &mut dyn FnMut(&LedgerState)) {
        f(&self.inner.read_state())
    }

    fn is_current(&self) -> bool {
        Verifier::is_current(self)
    }

    fn wait_for(&self, revision: u64, timeout: Duration) -> BoxFuture<'_, bool> {
        Box::pin(Verifier::wait_for(self, revision, timeout))
    }
}

struct Inner {
    state: RwLock<LedgerState>,
    /// Revision of the replica; verifications waiting for a token's revision watch it.
    revision: tokio::sync::watch::Sender<u64>,
    /// What each folded event changes for dispatch ([`writ_api::ledger::Event::dispatch_change`])
    /// and snapshot loads: executors' dispatch feeds follow it instead of rescanning.
    dispatch: tokio::sync::broadcast::Sender<DispatchChange>,
    /// Last time the feed proved the replica current (snapshot, event or heartbeat).
    contact: Mutex<Option<Instant>>,
    audiences: Vec<String>,
    staleness_max: Duration,
    tokens: TokenCache,
}

/// Verified tokens by the sha256 of the bearer, each with the epoch it was verified in; the
/// epoch moves (and the entries go) whenever the replica may verify tokens differently.
#[derive(Default)]
struct TokenCache {
    epoch: AtomicU64,
    entries: Mutex<HashMap<String, (u64, Authority)>>,
    hits: AtomicU64,
}

impl TokenCache {
    fn entries(&self) -> MutexGuard<'_, HashMap<String, (u64, Authority)>> {
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The authority `key` was verified to in the current epoch, if it has not expired.
    fn get(&self, key: &str, now_ms: u64) -> Option<Authority> {
        let epoch = self.epoch.load(Ordering::SeqCst);
        let hit =
            self.entries().get(key).filter(|(e, a)| *e == epoch && now_ms < a.expires_at_ms).map(|(_, a)| a.clone());
        let result = if hit.is_some() { "hit" } else { "miss" };
        metrics::counter!("writ_verifier_token_cache_total", "result" => result).increment(1);
        if hit.is_some() {
            self.hits.fetch_add(1, Ordering::Relaxed);
        }
        hit
    }

    /// Keeps `authority`, verified in `epoch` (read before the verification began).
    fn put(&self, key: String, epoch: u64, authority: Authority) {
        let mut entries = self.entries();
        if entries.len() >= VERIFIED_TOKENS_MAX {
            entries.clear();
        }
        entries.insert(key, (epoch, authority));
    }

    /// Forgets every verification (called under the replica's write lock).
    fn forget(&self) {
        self.epoch.fetch_add(1, Ordering::SeqCst);
        self.entries().clear();
    }
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
        Self::follow_with(ledger, vec![audience.into()], STALENESS_MAX_DEFAULT)
    }

    /// Starts following `ledger`, accepting Writ tokens issued for any of `audiences`.
    pub fn follow_with(ledger: Arc<dyn Ledger>, audiences: Vec<String>, staleness_max: Duration) -> Verifier {
        let inner = Arc::new(Inner {
            state: RwLock::new(LedgerState::default()),
            revision: tokio::sync::watch::channel(0).0,
            dispatch: tokio::sync::broadcast::channel(DISPATCH_CHANGES_BUFFERED).0,
            contact: Mutex::new(None),
            audiences,
            staleness_max,
            tokens: TokenCache::default(),
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

    /// What the replica's folds change for executors' dispatch streams, in order: an operation
    /// that may have entered or left what an executor is offered, a tenant whose executors may
    /// be accepted or refused anew, or everything (a snapshot loaded). A receiver that falls
    /// more than [`DISPATCH_CHANGES_BUFFERED`] behind is told it lagged (then: look at
    /// everything).
    pub fn dispatch_changes(&self) -> tokio::sync::broadcast::Receiver<DispatchChange> {
        self.inner.dispatch.subscribe()
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

    /// Verifies a bearer token at `now_ms` (ms since the epoch): from the cache of verified
    /// tokens when the replica is current and nothing that may change the answer was folded
    /// since (see the module docs), else against the replica.
    pub async fn verify_at(&self, bearer: &str, now_ms: u64) -> Result<Authority, Rejection> {
        let key = writ_api::sha256_hex(bearer.as_bytes());
        if self.is_current() {
            if let Some(authority) = self.inner.tokens.get(&key, now_ms) {
                return Ok(authority);
            }
        }
        let epoch = self.inner.tokens.epoch.load(Ordering::SeqCst);
        let verified = (self as &dyn StateView).verify(bearer, &self.inner.audiences, now_ms).await;
        if let Ok(authority) = &verified {
            self.inner.tokens.put(key, epoch, authority.clone());
        }
        verified
    }

    /// How long since the feed last proved the replica current (`None` before the first
    /// snapshot): the verifier's lag behind the ledger, in time.
    pub fn staleness(&self) -> Option<Duration> {
        self.inner.contact().map(|t| t.elapsed())
    }

    /// Verifications answered from the cache so far.
    pub fn token_cache_hits(&self) -> u64 {
        self.inner.tokens.hits.load(Ordering::Relaxed)
    }

    /// The authority of an anonymous loopback request (see [`auth::anonymous`]), from a current
    /// replica.
    pub async fn anonymous(&self, tenant: &str, principal: &str) -> Result<Authority, Rejection> {
        (self as &dyn StateView).current().await?;
        let state = self.inner.read_state();
        if !self.is_current() {
            return Err(unavailable("token state is not current: the ledger feed stopped; retry shortly"));
        }
        auth::anonymous(&state, tenant, principal)
    }

    /// Whether the replica heard from the ledger within the staleness bound (and is whole).
    pub fn is_current(&self) -> bool {
        !self.inner.state.is_poisoned() && self.inner.contact().is_some_and(|t| t.elapsed() <= self.inner.staleness_max)
    }

    /// Runs `f` on the replica (e.g. to read principals or catalogs at the same revision).
    /// Callers decide on a current replica first ([`Verifier::verify`] fails closed otherwise).
    pub fn with_state<T>(&self, f: impl FnOnce(&LedgerState) -> T) -> T {
        f(&self.inner.read_state())
    }
}

impl Inner {
    /// The replica for reading. A poisoned lock is read as it is: [`Verifier::is_current`]
    /// reports it, so verifications refuse before anything is decided on it.
    fn read_state(&self) -> RwLockReadGuard<'_, LedgerState> {
        self.state.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn contact_slot(&self) -> MutexGuard<'_, Option<Instant>> {
        self.contact.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn contact(&self) -> Option<Instant> {
        *self.contact_slot()
    }

    /// Replaces the replica with a snapshot (which also heals a poisoned lock). The replica
    /// keeps no audit trail ([`LedgerState::fold_views`]), so the snapshot's audit index goes.
    fn load(&self, mut snapshot: LedgerState) {
        snapshot.audit.clear();
        let revision = snapshot.revision;
        {
            let mut state = self.state.write().unwrap_or_else(PoisonError::into_inner);
            *state = snapshot;
            self.tokens.forget();
        }
        self.state.clear_poison();
        self.revision.send_replace(revision);
        let _ = self.dispatch.send(DispatchChange::All);
        *self.contact_slot() = Some(Instant::now());
    }
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
                let started = inner.upgrade().is_some_and(|i| i.contact().is_some());
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
        inner.load(snapshot);
    }
    let mut lines = ledger.watch(WatchFilter { from: Some(from), ..Default::default() }).await?;
    while let Some(line) = lines.next().await {
        let Some(inner) = weak.upgrade() else { return Ok(()) };
        match line {
            WatchLine::Event(e) => {
                let mut state = inner.state.write().unwrap_or_else(PoisonError::into_inner);
                if e.revision <= state.revision {
                    continue;
                }
                if e.revision != state.revision + 1 {
                    return Err(unavailable(format!("watch skipped from {} to {}", state.revision, e.revision)));
                }
                if let Err(corrupt) = state.fold_views(&e) {
                    // The replica is partly folded: refuse everything until a fresh snapshot
                    // (marked before the lock is released, so no reader decides on it).
                    *inner.contact_slot() = None;
                    drop(state);
                    tracing::error!(error = %corrupt, "the ledger feed carried an event this replica cannot fold; failing closed and reloading");
                    return Err(unavailable(format!("the ledger replica stopped: {corrupt}")));
                }
                if e.event.affects_authentication() {
                    inner.tokens.forget();
                }
                drop(state);
                inner.revision.send_replace(e.revision);
                if let Some(change) = e.event.dispatch_change() {
                    // No receiver is no error: no dispatch stream is open.
                    let _ = inner.dispatch.send(change);
                }
            }
            WatchLine::Heartbeat { .. } => {}
            WatchLine::End { end, message, .. } => return Err(Rejection::new(end, message)),
        }
        *inner.contact_slot() = Some(Instant::now());
    }
    Err(unavailable("the watch stream ended"))
}
