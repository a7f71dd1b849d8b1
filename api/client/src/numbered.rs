//! Numbered exchanges: many calls between two processes over one long-lived HTTP/2 exchange
//! instead of a request each — an edge's submits to a node (`/client/submit-stream`), an
//! executor's attempt calls to an edge. Calls go out as numbered frames
//! ([`writ_api::frames`]), as many as are queued in one write; the server runs each on its own
//! and answers under its number once done, as many as are ready in one write.
//!
//! A call's outcome rules are those of a request of its own ([`CallError`]):
//! - not written yet (the exchange could not be opened, or had ended): `NotSent`, so another
//!   server may be asked;
//! - written and not answered when the exchange breaks or the call's deadline passes:
//!   `Uncertain`, so the caller decides (e.g. repeats it with the same idempotency key);
//! - answered: the server's answer, a refusal included.
//!
//! A server that does not serve the exchange (404) is sent a request per call from then on.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::{Stream, StreamExt};
use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::sync::{mpsc, oneshot};
use writ_api::dto::BINARY_MEDIA_TYPE;
use writ_api::frames::{numbered, Frames};
use writ_api::{ReasonCode, Rejection};

use crate::ledger::CallError;

/// Frames an exchange holds before the first waiting call is written; beyond, a call waits
/// for room (the server's HTTP/2 window holds the exchange back in turn).
const QUEUED_FRAMES_MAX: usize = 1024;
/// Most bytes of frames written as one chunk.
const CHUNK_BYTES_MAX: usize = 256 * 1024;
/// Longest answer payload: the bound of any message the ledger decodes.
const ANSWER_PAYLOAD_BYTES_MAX: usize = 64 * 1024 * 1024;

type Waiting<T> = oneshot::Sender<Result<T, CallError>>;
type Pending<T> = Arc<Mutex<Option<BTreeMap<u64, Waiting<T>>>>>;

/// What a client's exchanges at one path are bound by.
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    /// Where the servers serve the exchange.
    pub path: &'static str,
    /// Longest call payload the server takes (a longer call is refused here, unsent).
    pub payload_max: usize,
    /// How long a call waits, for room in the queue (then it is not sent) and for its answer
    /// (then it is uncertain).
    pub deadline: Duration,
}

/// A client's exchanges at one path, one per server it has called; answers are `T`.
pub struct Exchanges<T> {
    bounds: Bounds,
    slots: Mutex<BTreeMap<String, Slot<T>>>,
    /// One lock per server, held while an exchange with it is opened: callers who find none
    /// open one, not one each, and a server that does not answer holds up only its own callers.
    opening: Mutex<BTreeMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

enum Slot<T> {
    Open(Arc<Exchange<T>>),
    /// The server answered 404: it takes a request per call.
    Unsupported,
    /// The last open failed without an answer: calls until then are not sent (and go to
    /// another server) rather than each waiting for the server again.
    Unreachable {
        until: Instant,
        why: String,
    },
}

/// How long a server whose exchange could not be opened is passed over.
const UNREACHABLE_FOR: Duration = Duration::from_secs(1);

/// The way to call a server.
pub enum Route<T> {
    Exchange(Arc<Exchange<T>>),
    Request,
}

impl<T: DeserializeOwned + Send + 'static> Exchanges<T> {
    pub fn new(bounds: Bounds) -> Self {
        Exchanges { bounds, slots: Default::default(), opening: Default::default() }
    }

    /// The way to call `base`: its open exchange, else a new one, else a request per call when
    /// the server serves none. `NotSent` when the server could not be asked at all.
    pub async fn route(&self, http: &reqwest::Client, base: &str) -> Result<Route<T>, CallError> {
        if let Some(route) = self.current(base) {
            return route;
        }
        let lock = self.opening.lock().expect("exchanges").entry(base.to_string()).or_default().clone();
        let _opening = lock.lock().await;
        if let Some(route) = self.current(base) {
            return route;
        }
        let (slot, route) = match open(http, base, self.bounds).await {
            Ok(Some(exchange)) => {
                let exchange = Arc::new(exchange);
                (Slot::Open(exchange.clone()), Ok(Route::Exchange(exchange)))
            }
            Ok(None) => (Slot::Unsupported, Ok(Route::Request)),
            Err(CallError::NotSent(why)) => {
                let until = Instant::now() + UNREACHABLE_FOR;
                (Slot::Unreachable { until, why: why.clone() }, Err(CallError::NotSent(why)))
            }
            Err(refused) => return Err(refused),
        };
        self.slots.lock().expect("exchanges").insert(base.to_string(), slot);
        route
    }

    /// Lets every exchange go (calls in flight on them still finish); the next call opens a
    /// new one, e.g. with a renewed certificate.
    pub fn reset(&self) {
        self.slots.lock().expect("exchanges").clear();
    }

    fn current(&self, base: &str) -> Option<Result<Route<T>, CallError>> {
        match self.slots.lock().expect("exchanges").get(base)? {
            Slot::Open(exchange) if exchange.is_open() => Some(Ok(Route::Exchange(exchange.clone()))),
            Slot::Unsupported => Some(Ok(Route::Request)),
            Slot::Unreachable { until, why } if Instant::now() < *until => Some(Err(CallError::NotSent(why.clone()))),
            Slot::Open(_) | Slot::Unreachable { .. } => None,
        }
    }
}

/// One open exchange with a server.
pub struct Exchange<T> {
    frames: mpsc::Sender<Vec<u8>>,
    /// Calls written and not yet answered, by number; `None` once the exchange has ended.
    pending: Pending<T>,
    next: AtomicU64,
    server: String,
    bounds: Bounds,
}

impl<T> Exchange<T> {
    fn is_open(&self) -> bool {
        self.pending.lock().expect("pending calls").is_some() && !self.frames.is_closed()
    }

    /// Writes a call (`call`, encoded) and waits for its answer.
    pub async fn call<C: Serialize>(&self, call: &C) -> Result<T, CallError> {
        let payload = writ_api::encode(call)
            .map_err(|e| CallError::Rejected(Rejection::new(ReasonCode::INTERNAL, format!("unencodable call: {e}"))))?;
        if payload.len() > self.bounds.payload_max {
            let message = format!("a call of {} bytes (at most {})", payload.len(), self.bounds.payload_max);
            return Err(CallError::Rejected(Rejection::new(ReasonCode::PAYLOAD_TOO_LARGE, message)));
        }
        let number = self.next.fetch_add(1, Ordering::Relaxed);
        let (waiting, answer) = oneshot::channel();
        match self.pending.lock().expect("pending calls").as_mut() {
            Some(pending) => pending.insert(number, waiting),
            None => return Err(self.not_sent()),
        };
        // One deadline for both waits: for room in the queue (a server that stops reading
        // fills it) and for the answer. A call that never entered the queue was not sent.
        let (deadline, secs) = (tokio::time::Instant::now() + self.bounds.deadline, self.bounds.deadline.as_secs());
        match tokio::time::timeout_at(deadline, self.frames.send(numbered(number, &payload))).await {
            Ok(Ok(())) => {}
            Ok(Err(_)) => {
                self.forget(number);
                return Err(self.not_sent());
            }
            Err(_) => {
                self.forget(number);
                return Err(CallError::NotSent(format!("{} took no call within {secs} s", self.server)));
            }
        }
        match tokio::time::timeout_at(deadline, answer).await {
            Ok(Ok(answer)) => answer,
            Ok(Err(_)) => Err(CallError::Uncertain(format!("the answer of a call to {} was lost", self.server))),
            Err(_) => {
                self.forget(number);
                Err(CallError::Uncertain(format!("{} did not answer a call within {secs} s", self.server)))
            }
        }
    }

    fn forget(&self, number: u64) {
        if let Some(pending) = self.pending.lock().expect("pending calls").as_mut() {
            pending.remove(&number);
        }
    }

    fn not_sent(&self) -> CallError {
        CallError::NotSent(format!("the exchange with {} had ended", self.server))
    }
}

/// Opens an exchange with `base`: `None` when the server serves none (404). Nothing is called
/// until it is open, so every failure to open is `NotSent`, but the server's refusal of the
/// caller, which is its answer.
async fn open<T: DeserializeOwned + Send + 'static>(
    http: &reqwest::Client,
    base: &str,
    bounds: Bounds,
) -> Result<Option<Exchange<T>>, CallError> {
    let server = base.trim_end_matches('/').to_string();
    let (frames, queued) = mpsc::channel(QUEUED_FRAMES_MAX);
    let body = coalesced(queued, CHUNK_BYTES_MAX).map(Ok::<_, Infallible>);
    let sent = http
        .post(format!("{server}{}", bounds.path))
        .header(reqwest::header::CONTENT_TYPE, BINARY_MEDIA_TYPE)
        .header(reqwest::header::ACCEPT, BINARY_MEDIA_TYPE)
        .body(reqwest::Body::wrap_stream(body))
        .send();
    let resp = match tokio::time::timeout(bounds.deadline, sent).await {
        Ok(Ok(resp)) => resp,
        Ok(Err(e)) => return Err(CallError::NotSent(format!("no exchange with {server}: {e}"))),
        Err(_) => return Err(CallError::NotSent(format!("{server} did not open an exchange in time"))),
    };
    let status = resp.status();
    if status == reqwest::StatusCode::NOT_FOUND {
        return Ok(None);
    }
    if !status.is_success() {
        let body = resp.bytes().await.unwrap_or_default();
        return Err(match serde_json::from_slice::<writ_api::dto::ErrorBody>(&body) {
            Ok(err) => CallError::Rejected(Rejection::new(err.reason, err.message)),
            Err(_) => CallError::NotSent(format!("{server} answered HTTP {status} to an exchange")),
        });
    }
    let pending: Pending<T> = Arc::new(Mutex::new(Some(BTreeMap::new())));
    tokio::spawn(read_answers(resp, pending.clone(), server.clone()));
    Ok(Some(Exchange { frames, pending, next: AtomicU64::new(0), server, bounds }))
}

/// Hands each answer to its call; when the exchange ends, every call still waiting is
/// `Uncertain` (it was written, and may have been carried out).
async fn read_answers<T: DeserializeOwned>(resp: reqwest::Response, pending: Pending<T>, server: String) {
    let mut body = resp.bytes_stream();
    let mut frames = Frames::new(ANSWER_PAYLOAD_BYTES_MAX);
    let why = 'read: loop {
        let chunk = match body.next().await {
            Some(Ok(chunk)) => chunk,
            Some(Err(e)) => break format!("{e}"),
            None => break "the server ended it".to_string(),
        };
        frames.push(&chunk);
        loop {
            let (number, answer) = match frames.next_frame() {
                Ok(Some((number, payload))) => (number, writ_api::decode::<Result<T, Rejection>>(payload)),
                Ok(None) => break,
                Err(e) => break 'read e,
            };
            let Ok(answer) = answer else { break 'read format!("an undecodable answer to call {number}") };
            let waiting = pending.lock().expect("pending calls").as_mut().and_then(|p| p.remove(&number));
            if let Some(waiting) = waiting {
                let _ = waiting.send(answer.map_err(CallError::Rejected));
            }
        }
    };
    let orphans = pending.lock().expect("pending calls").take().unwrap_or_default();
    if !orphans.is_empty() {
        tracing::warn!(%server, unanswered = orphans.len(), reason = %why, "an exchange broke");
    }
    for (_, waiting) in orphans {
        let message = format!("the exchange with {server} broke before the answer: {why}");
        let _ = waiting.send(Err(CallError::Uncertain(message)));
    }
}

/// What `queued` receives, as many items as are waiting joined into one chunk of at most about
/// `bytes_max` bytes: one write for what is ready together.
fn coalesced(queued: mpsc::Receiver<Vec<u8>>, bytes_max: usize) -> impl Stream<Item = Vec<u8>> + Send + 'static {
    futures::stream::unfold(queued, move |mut queued| async move {
        let mut chunk = queued.recv().await?;
        while chunk.len() < bytes_max {
            match queued.try_recv() {
                Ok(more) => chunk.extend_from_slice(&more),
                Err(_) => break,
            }
        }
        Some((chunk, queued))
    })
}

/// The server's half: reads `body`'s frames (payloads of at most `payload_max` bytes), has
/// `answer` start each call (it decodes the payload and returns the work) and runs the work on
/// a task of its own, at most `in_flight_max` at once (beyond, the body is not read). Yields
/// the answers' frames, as many as are ready in one chunk. Ends once the body has ended (or
/// broken its framing) and every call read is answered.
pub fn serve<S, B, E, F, Fut, T>(
    body: S,
    payload_max: usize,
    in_flight_max: usize,
    answer: F,
) -> impl Stream<Item = Vec<u8>> + Send + 'static
where
    S: Stream<Item = Result<B, E>> + Send + 'static,
    B: AsRef<[u8]> + Send + 'static,
    E: std::fmt::Display + Send + 'static,
    F: Fn(&[u8]) -> Fut + Send + 'static,
    Fut: Future<Output = Result<T, Rejection>> + Send + 'static,
    T: Serialize + 'static,
{
    let (answers, ready) = mpsc::channel(in_flight_max);
    tokio::spawn(read_calls(Box::pin(body), payload_max, in_flight_max, answer, answers));
    coalesced(ready, CHUNK_BYTES_MAX)
}

async fn read_calls<S, B, E, F, Fut, T>(
    mut body: std::pin::Pin<Box<S>>,
    payload_max: usize,
    in_flight_max: usize,
    answer: F,
    answers: mpsc::Sender<Vec<u8>>,
) where
    S: Stream<Item = Result<B, E>>,
    B: AsRef<[u8]>,
    E: std::fmt::Display,
    F: Fn(&[u8]) -> Fut,
    Fut: Future<Output = Result<T, Rejection>> + Send + 'static,
    T: Serialize,
{
    let in_flight = Arc::new(tokio::sync::Semaphore::new(in_flight_max));
    let mut frames = Frames::new(payload_max);
    loop {
        match body.next().await {
            Some(Ok(chunk)) => frames.push(chunk.as_ref()),
            Some(Err(e)) => return tracing::debug!(error = %e, "an exchange's caller went away"),
            None => return,
        }
        loop {
            let (number, work) = match frames.next_frame() {
                Ok(Some((number, payload))) => (number, answer(payload)),
                Ok(None) => break,
                Err(e) => return tracing::warn!(error = %e, "an exchange broke its framing"),
            };
            let Ok(permit) = in_flight.clone().acquire_owned().await else { return };
            let answers = answers.clone();
            tokio::spawn(async move {
                let frame = encoded(&work.await);
                let _ = answers.send(numbered(number, &frame)).await;
                drop(permit);
            });
        }
    }
}

fn encoded<T: Serialize>(answer: &Result<T, Rejection>) -> Vec<u8> {
    writ_api::encode(answer).unwrap_or_else(|e| {
        let refusal: Result<(), Rejection> =
            Err(Rejection::new(ReasonCode::INTERNAL, format!("unencodable answer: {e}")));
        writ_api::encode(&refusal).expect("a rejection encodes")
    })
}
