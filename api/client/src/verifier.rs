//! [`Verifier`]: token verification against a local replica of the ledger state, kept current
//! by the ledger's watch stream — so verification costs no ledger round trip, and a revocation
//! committed on any node reaches every verifier as soon as the event is streamed (SPEC D3).
//!
//! The replica starts from a linearizable snapshot, then applies events in revision order. A
//! lost connection or a node's end line (it drains) resumes the watch after the replica's own
//! revision, on whichever node answers; a gap, a compacted revision or an event it cannot fold
//! sends it back to a fresh snapshot. The verifier fails
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
use writ_api::operation::Departed;
use writ_api::state::LedgerState;
use writ_api::{ReasonCode, Rejection};

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
    /// Whether a snapshot has loaded (an empty ledger's replica stays at revision 0).
    loaded: tokio::sync::watch::Sender<bool>,
    /// What each folded event changes for dispatch ([`writ_api::ledger::Event::dispatch_change`])
    /// and snapshot loads: executors' dispatch feeds follow it instead of rescanning.
    dispatch: tokio::sync::broadcast::Sender<DispatchChange>,
    /// Last time the feed proved the replica current (snapshot, event or heartbeat).
    contact: Mutex<Option<Instant>>,
    audiences: Vec<String>,
    staleness_max: Duration,
    tokens: TokenCache,
    /// Operations callers follow on this replica ([`Verifier::watch_operation`]), by tenant and
    /// id: how many watch each, and its last record once the replica let it go.
    followed: Mutex<HashMap<String, HashMap<String, Followed>>>,
}

/// One followed operation: its watches, and — once it stopped being live, which the replica
/// then no longer holds — its last record, for the watches to read without asking the ledger.
#[derive(Default)]
struct Followed {
    watches: usize,
    departed: Option<Arc<Departed>>,
}

/// An operation followed on the replica ([`Verifier::watch_operation`]): while it lives, the
/// replica keeps the operation's last record when it stops being live (and the replica lets
/// it go), so its caller reads the end of the operation from the replica like every step
/// before it. Bounded by the watches open: nothing is kept for an operation no one follows.
pub struct OperationWatch {
    inner: Arc<Inner>,
    tenant_id: String,
    operation_id: String,
}

impl OperationWatch {
    /// Runs `f` on the replica this watch follows ([`Verifier::with_state`]).
    pub fn with_state<T>(&self, f: impl FnOnce(&LedgerState) -> T) -> T {
        f(&self.inner.read_state())
    }

    /// The operation as the replica held it when it stopped being live (with its history), if
    /// it did while this watch was open.
    pub fn departed(&self) -> Option<Arc<Departed>> {
        let followed = self.inner.followed_map();
        followed.get(&self.tenant_id)?.get(&self.operation_id)?.departed.clone()
    }
}

impl Drop for OperationWatch {
    fn drop(&mut self) {
        let mut followed = self.inner.followed_map();
        let Some(ops) = followed.get_mut(&self.tenant_id) else { return };
        if let Some(f) = ops.get_mut(&self.operation_id) {
            f.watches -= 1;
            if f.watches == 0 {
                ops.remove(&self.operation_id);
            }
        }
        if ops.is_empty() {
            followed.remove(&self.tenant_id);
        }
    }
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
            loaded: tokio::sync::watch::channel(false).0,
            dispatch: tokio::sync::broadcast::channel(DISPATCH_CHANGES_BUFFERED).0,
            contact: Mutex::new(None),
            audiences,
            staleness_max,
            tokens: TokenCache::default(),
            followed: Mutex::default(),
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

    /// Follows one operation on the replica until the watch is dropped ([`OperationWatch`]).
    pub fn watch_operation(&self, tenant_id: &str, operation_id: &str) -> OperationWatch {
        let mut followed = self.inner.followed_map();
        let ops = followed.entry(tenant_id.to_string()).or_default();
        ops.entry(operation_id.to_string()).or_default().watches += 1;
        OperationWatch {
            inner: self.inner.clone(),
            tenant_id: tenant_id.to_string(),
            operation_id: operation_id.to_string(),
        }
    }

    /// What the replica's folds change for executors' dispatch streams, in order: an operation
    /// that may have entered or left what an executor is offered, a tenant whose executors may
    /// be accepted or refused anew, or everything (a snapshot loaded). A receiver that falls
    /// more than [`DISPATCH_CHANGES_BUFFERED`] behind is told it lagged (then: look at
    /// everything).
    pub fn dispatch_changes(&self) -> tokio::sync::broadcast::Receiver<DispatchChange> {
        self.inner.dispatch.subscribe()
    }

    /// Waits until the replica has loaded its first snapshot (true), even of an empty ledger,
    /// or `timeout` passed (false).
    pub async fn loaded(&self, timeout: Duration) -> bool {
        let mut rx = self.inner.loaded.subscribe();
        tokio::time::timeout(timeout, rx.wait_for(|loaded| *loaded)).await.is_ok_and(|r| r.is_ok())
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

    fn followed_map(&self) -> MutexGuard<'_, HashMap<String, HashMap<String, Followed>>> {
        self.followed.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Keeps each of `departed` that a watch follows ([`OperationWatch::departed`]).
    fn keep_followed(&self, departed: Vec<Departed>) {
        let mut followed = self.followed_map();
        for d in departed {
            let watched = followed.get_mut(&d.op.tenant_id).and_then(|ops| ops.get_mut(&d.op.spec.operation_id));
            if let Some(f) = watched {
                f.departed = Some(Arc::new(d));
            }
        }
    }

    fn contact_slot(&self) -> MutexGuard<'_, Option<Instant>> {
        self.contact.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn contact(&self) -> Option<Instant> {
        *self.contact_slot()
    }

    /// Replaces the replica with a snapshot (which also heals a poisoned lock). The replica is
    /// a projection ([`LedgerState::project`]; a node sends one, an older node or a ledger in
    /// memory may not): no audit index, no inputs of operations that are no longer live.
    fn load(&self, mut snapshot: LedgerState) {
        snapshot.project();
        snapshot.keep_departed();
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
        self.loaded.send_replace(true);
    }
}

/// Snapshot, then watch; on a break, watch again from the replica's own revision (on whichever
/// node answers) when the replica is whole and the events after it are still retained, else
/// start over from a snapshot — after a bounded backoff. Ends when every [`Verifier`] handle is
/// gone.
///
/// Resuming matters when a node goes away: every edge watching it used to reload the whole
/// state from another node at once, each load encoding the state under that node's read lock
/// (seconds for a large ledger, in the middle of a failover).
async fn feed(inner: Weak<Inner>, ledger: Arc<dyn Ledger>) {
    let mut backoff = RETRY_MIN;
    let mut resume = false;
    loop {
        match follow_once(&inner, ledger.as_ref(), resume).await {
            Ok(()) => backoff = RETRY_MIN,
            Err(Break { rejection: e, resumable, streamed }) => {
                // Before the first snapshot (e.g. while the cluster elects a leader at start-up)
                // a failed attempt is expected; later it means lost contact.
                let started = inner.upgrade().is_some_and(|i| i.contact().is_some());
                if started {
                    tracing::warn!(reason = %e.reason, message = %e.message, resumable, "verifier feed interrupted");
                } else {
                    tracing::debug!(reason = %e.reason, message = %e.message, "verifier waiting for the ledger");
                }
                resume = resumable;
                // A session that broke after working is retried after the shortest wait; one
                // that failed to start backs off further.
                backoff = if streamed { RETRY_MIN } else { (backoff * 2).min(RETRY_MAX) };
            }
        }
        if inner.strong_count() == 0 {
            return;
        }
        tokio::time::sleep(backoff).await;
    }
}

/// Why a feed session ended, whether the next may resume from the replica's revision, and
/// whether this one had streamed anything before it broke.
struct Break {
    rejection: Rejection,
    resumable: bool,
    streamed: bool,
}

impl Break {
    /// The replica is whole: only the connection (or the node) went away.
    fn resumable(rejection: Rejection) -> Break {
        Break { rejection, resumable: true, streamed: false }
    }

    /// The replica must be reloaded from a snapshot.
    fn reload(rejection: Rejection) -> Break {
        Break { rejection, resumable: false, streamed: false }
    }

    fn after_streaming(self, streamed: bool) -> Break {
        Break { streamed, ..self }
    }
}

/// One session: a snapshot (unless `resume`: then the replica's own revision is where the
/// watch starts), then the watch. Returns when the stream ends or falls out of order.
async fn follow_once(weak: &Weak<Inner>, ledger: &dyn Ledger, resume: bool) -> Result<(), Break> {
    let mut streamed = false;
    follow_session(weak, ledger, resume, &mut streamed).await.map_err(|b| b.after_streaming(streamed))
}

/// [`follow_once`]'s session; `streamed` turns true with the first event or heartbeat.
async fn follow_session(
    weak: &Weak<Inner>,
    ledger: &dyn Ledger,
    resume: bool,
    streamed: &mut bool,
) -> Result<(), Break> {
    let from = match weak.upgrade() {
        None => return Ok(()),
        Some(inner) if resume => {
            metrics::counter!("writ_verifier_sessions_total", "start" => "resumed").increment(1);
            *inner.revision.borrow() + 1
        }
        Some(_) => {
            let snapshot = ledger.snapshot().await.map_err(Break::reload)?;
            let from = snapshot.revision + 1;
            let Some(inner) = weak.upgrade() else { return Ok(()) };
            inner.load(snapshot);
            metrics::counter!("writ_verifier_sessions_total", "start" => "snapshot").increment(1);
            from
        }
    };
    let mut lines = ledger.watch(WatchFilter { from: Some(from), ..Default::default() }).await.map_err(|e| {
        if e.reason == ReasonCode::REVISION_COMPACTED {
            Break::reload(e)
        } else {
            Break::resumable(e)
        }
    })?;
    while let Some(line) = lines.next().await {
        // An end line is no sign the session worked (a node without a leader ends at once).
        *streamed |= !matches!(line, WatchLine::End { .. });
        let Some(inner) = weak.upgrade() else { return Ok(()) };
        match line {
            WatchLine::Event(e) => {
                let mut state = inner.state.write().unwrap_or_else(PoisonError::into_inner);
                if e.revision <= state.revision {
                    continue;
                }
                if e.revision != state.revision + 1 {
                    let skipped = format!("watch skipped from {} to {}", state.revision, e.revision);
                    return Err(Break::reload(unavailable(skipped)));
                }
                if let Err(corrupt) = state.fold_views(&e) {
                    // The replica is partly folded: refuse everything until a fresh snapshot
                    // (marked before the lock is released, so no reader decides on it).
                    *inner.contact_slot() = None;
                    drop(state);
                    tracing::error!(error = %corrupt, "the ledger feed carried an event this replica cannot fold; failing closed and reloading");
                    return Err(Break::reload(unavailable(format!("the ledger replica stopped: {corrupt}"))));
                }
                if e.event.affects_authentication() {
                    inner.tokens.forget();
                }
                // Kept before the lock is released: a reader that finds the operation gone
                // finds its last record.
                let departed = state.take_departed();
                if !departed.is_empty() {
                    inner.keep_followed(departed);
                }
                drop(state);
                inner.revision.send_replace(e.revision);
                if let Some(change) = e.event.dispatch_change() {
                    // No receiver is no error: no dispatch stream is open.
                    let _ = inner.dispatch.send(change);
                }
            }
            WatchLine::Heartbeat { .. } => {}
            // The events after the replica are gone: only a snapshot brings it up to date.
            WatchLine::End { end, message, .. } if end == ReasonCode::REVISION_COMPACTED => {
                return Err(Break::reload(Rejection::new(end, message)))
            }
            // E.g. the node drains for a shutdown: go on at another node.
            WatchLine::End { end, message, .. } => return Err(Break::resumable(Rejection::new(end, message))),
        }
        *inner.contact_slot() = Some(Instant::now());
    }
    Err(Break::resumable(unavailable("the watch stream ended")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::MemoryLedger;
    use writ_api::dto::SubmitResponse;
    use writ_api::dto::{ClusterChange, ClusterStatus, NodeStatus, QueryRequest, QueryResult, SubmitRequest};
    use writ_api::ledger::Command;

    /// A ledger whose first watch ends after its first event — with an end line when `end` is
    /// set, else as a lost connection — and that counts snapshots and where each watch began.
    struct Breaking {
        inner: MemoryLedger,
        end: Option<ReasonCode>,
        snapshots: AtomicU64,
        watched_from: Mutex<Vec<u64>>,
    }

    impl Ledger for Breaking {
        fn submit(&self, req: SubmitRequest) -> BoxFuture<'_, Result<SubmitResponse, Rejection>> {
            self.inner.submit(req)
        }
        fn query(&self, req: QueryRequest) -> BoxFuture<'_, Result<QueryResult, Rejection>> {
            self.inner.query(req)
        }
        fn node_status(&self) -> BoxFuture<'_, Result<NodeStatus, Rejection>> {
            self.inner.node_status()
        }
        fn cluster_status(&self) -> BoxFuture<'_, Result<ClusterStatus, Rejection>> {
            self.inner.cluster_status()
        }
        fn cluster_change(&self, change: ClusterChange) -> BoxFuture<'_, Result<NodeStatus, Rejection>> {
            self.inner.cluster_change(change)
        }
        fn snapshot(&self) -> BoxFuture<'_, Result<LedgerState, Rejection>> {
            self.snapshots.fetch_add(1, Ordering::SeqCst);
            self.inner.snapshot()
        }
        fn watch(&self, filter: WatchFilter) -> BoxFuture<'_, Result<crate::ledger::WatchStream, Rejection>> {
            Box::pin(async move {
                let first = {
                    let mut from = self.watched_from.lock().unwrap();
                    from.push(filter.from.unwrap_or(0));
                    from.len() == 1
                };
                let stream = self.inner.watch(filter).await?;
                if !first {
                    return Ok(stream);
                }
                // Up to and including the first event, then the break.
                let events = stream
                    .scan(false, |seen, line| {
                        let done = *seen;
                        *seen |= matches!(line, WatchLine::Event(_));
                        futures::future::ready((!done).then_some(line))
                    })
                    .boxed();
                let end = self.end.map(|end| WatchLine::End { end, message: "cut".into(), next: 0 });
                Ok(events.chain(futures::stream::iter(end)).boxed())
            })
        }
    }

    async fn tenant(ledger: &dyn Ledger, name: &str) {
        let command = Command::CreateTenant { tenant_id: format!("t-{name}"), name: name.into(), display_name: None };
        ledger.submit(SubmitRequest::new(name, command)).await.expect("submitted");
    }

    /// Follows `ledger` through its break: the replica reaches every event, and this returns how
    /// many snapshots it loaded and where each watch began.
    async fn through_a_break(end: Option<ReasonCode>) -> (u64, Vec<u64>) {
        let ledger = Arc::new(Breaking {
            inner: MemoryLedger::new(),
            end,
            snapshots: AtomicU64::new(0),
            watched_from: Mutex::new(Vec::new()),
        });
        tenant(ledger.as_ref(), "a").await;
        let verifier = Verifier::follow(ledger.clone(), "urn:test");
        let start = ledger.inner.with_state(|s| s.revision);
        assert!(verifier.wait_for(start, Duration::from_secs(10)).await, "the first snapshot");
        for name in ["b", "c", "d"] {
            tenant(ledger.as_ref(), name).await;
        }
        let last = ledger.inner.with_state(|s| s.revision);
        assert!(verifier.wait_for(last, Duration::from_secs(10)).await, "the replica reaches the last event");
        assert_eq!(verifier.with_state(|s| s.tenants.len()), 4);
        let from = ledger.watched_from.lock().unwrap().clone();
        (ledger.snapshots.load(Ordering::SeqCst), from)
    }

    /// The replica of an empty ledger (revision 0) says it has loaded once its snapshot is in:
    /// an edge of a new cluster serves at once instead of after its whole wait.
    #[tokio::test]
    async fn a_replica_of_an_empty_ledger_is_loaded_at_revision_zero() {
        let ledger = Arc::new(MemoryLedger::new());
        let verifier = Verifier::follow(ledger, "urn:test");
        assert!(verifier.loaded(Duration::from_secs(10)).await, "the empty snapshot loads");
        assert_eq!(verifier.revision(), 0);
        assert!(verifier.is_current());
    }

    /// What the replica keeps of operations it let go is bounded by the watches open: only a
    /// watched operation's last record is kept, and it goes with the operation's last watch.
    #[tokio::test]
    async fn only_a_watched_operation_is_kept_when_the_replica_lets_it_go() {
        let verifier = Verifier::follow(Arc::new(MemoryLedger::new()), "urn:test");
        let departed = |id: &str| {
            let spec = serde_json::json!({"operation_id": id, "principal_id": "p", "authority_ref": "j",
                "action": "a", "payload_hash": "h", "input": "{}", "idempotency_key": id, "deadline_ms": 1,
                "cost_units": 0, "cost_ceiling": null, "device_id": null, "work_ref": null, "preconditions": {},
                "trace_id": "tr", "input_requests": {}});
            let op = serde_json::json!({"tenant_id": "t", "spec": spec, "state": "effect_reported",
                "executor_id": null, "fencing_token": null, "attempts": 1, "lease_expires_at_ms": null,
                "evidence": [], "observations": [], "answers": {}, "cancel_requested": false, "cause": "",
                "created_at_ms": 1, "updated_at_ms": 2, "revision": 9});
            Departed { op: serde_json::from_value(op).unwrap_or_else(|e| panic!("{e}")), history: Vec::new() }
        };
        let (a, b) = (verifier.watch_operation("t", "op-a"), verifier.watch_operation("t", "op-a"));
        verifier.inner.keep_followed(vec![departed("op-a"), departed("op-b")]);
        assert!(a.departed().is_some_and(|d| d.op.spec.operation_id == "op-a") && b.departed().is_some());
        let counts = |v: &Verifier| v.inner.followed_map().get("t").map(|ops| ops.len());
        assert_eq!(counts(&verifier), Some(1), "op-b, which no one watches, is not kept");
        drop(a);
        assert!(b.departed().is_some(), "kept while a watch is open");
        drop(b);
        assert!(verifier.inner.followed_map().is_empty(), "gone with its last watch");
    }

    /// A lost connection (or a node that drains) resumes the watch after the replica's own
    /// revision, without reloading the state; a compacted revision reloads it.
    #[tokio::test]
    async fn a_broken_watch_resumes_from_the_replica_and_a_compacted_one_reloads() {
        let (snapshots, from) = through_a_break(None).await;
        assert_eq!(snapshots, 1, "a lost connection reloaded the state");
        assert_eq!(from[1], from[0] + 1, "resumed right after the one event seen: {from:?}");

        let (snapshots, _) = through_a_break(Some(ReasonCode::LEDGER_UNAVAILABLE)).await;
        assert_eq!(snapshots, 1, "a node's end line (e.g. draining) reloaded the state");

        let (snapshots, _) = through_a_break(Some(ReasonCode::REVISION_COMPACTED)).await;
        assert_eq!(snapshots, 2, "the events after the replica are gone: only a snapshot catches up");
    }
}
