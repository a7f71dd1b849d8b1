//! How a request's answer travels: a single `application/json` response when the handler has
//! nothing to say before its result, or a per-request `text/event-stream` (notifications first,
//! the response last) once it emits a progress or log notification and the client accepts SSE.
//! A handler that may stream (the client accepts SSE and asked for progress or log messages)
//! runs in its own task; any other runs within the request, with nothing to spawn. Either way,
//! when the client goes away (closes the stream or drops the connection) the handler is
//! dropped — that is cancellation in stateless MCP.

use std::convert::Infallible;
use std::future::Future;

use axum::http::{header, HeaderMap, HeaderValue};
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use futures::FutureExt;
use serde_json::{json, Value};
use tokio::sync::mpsc;

use crate::jsonrpc::{self, RpcError};

/// A handler's final answer: a result object or an error.
pub type Outcome = Result<Value, RpcError>;

enum Msg {
    Notification(Value),
    Done(Outcome),
}

/// Log levels of MCP (RFC 5424 names), least severe first.
pub(crate) const LEVELS: &[&str] = &["debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"];

/// Lets a handler stream notifications for its request: progress only when the request
/// carried a `progressToken`, log messages only at or above the request's `logLevel` (none
/// when it set none).
#[derive(Clone)]
pub struct Notifier {
    /// None when nothing listens (a request answered with JSON): notifications are dropped.
    tx: Option<mpsc::Sender<Msg>>,
    progress_token: Option<Value>,
    log_level: Option<usize>,
}

impl Notifier {
    pub async fn progress(&self, progress: f64, total: Option<f64>, message: &str) {
        let Some(token) = &self.progress_token else { return };
        let mut params = json!({"progressToken": token, "progress": progress, "message": message});
        if let Some(t) = total {
            params["total"] = json!(t);
        }
        self.send(jsonrpc::notification("notifications/progress", params)).await;
    }

    pub async fn log(&self, level: &str, data: Value) {
        self.log_as(level, "writ-edge", data).await
    }

    /// A log message of `logger` (e.g. a relayed upstream's), at or above the request's level.
    pub async fn log_as(&self, level: &str, logger: &str, data: Value) {
        let wanted = LEVELS.iter().position(|l| *l == level).unwrap_or(0);
        if self.log_level.is_some_and(|min| wanted >= min) {
            let params = json!({"level": level, "logger": logger, "data": data});
            self.send(jsonrpc::notification("notifications/message", params)).await;
        }
    }

    async fn send(&self, notification: Value) {
        if let Some(tx) = &self.tx {
            let _ = tx.send(Msg::Notification(notification)).await;
        }
    }

    /// The least severe level the request asked log messages for, if it asked for any.
    pub fn log_level(&self) -> Option<&'static str> {
        self.log_level.and_then(|i| LEVELS.get(i).copied())
    }
}

/// Aborts the handler task when the response (or its stream) is dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Whether the client accepts an event stream for this request.
pub fn accepts_sse(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.split(',').any(|t| t.trim().starts_with("text/event-stream")))
}

/// Runs `handler` for request `id` and answers as JSON or SSE (see the module docs). The
/// request's `_meta` gives the progress token and log level.
pub async fn run<F, Fut>(id: &Option<Value>, meta: Option<&Value>, sse: bool, handler: F) -> Response
where
    F: FnOnce(Notifier) -> Fut,
    Fut: Future<Output = Outcome> + Send + 'static,
{
    let progress_token = meta.and_then(|m| m.get("progressToken")).filter(|t| t.is_string() || t.is_number());
    let log_level = meta
        .and_then(|m| m.get(jsonrpc::META_LOG_LEVEL))
        .and_then(Value::as_str)
        .and_then(|l| LEVELS.iter().position(|x| *x == l));
    let mut notifier = Notifier { tx: None, progress_token: progress_token.cloned(), log_level };
    if !sse || (notifier.progress_token.is_none() && notifier.log_level.is_none()) {
        // Its answer is one JSON response whatever it does: run it here (boxed, so the
        // request's future does not grow by the handler's).
        return inline(id, Box::pin(handler(notifier))).await;
    }
    let (tx, mut rx) = mpsc::channel(64);
    notifier.tx = Some(tx.clone());
    let work = writ_client::trace::resume(writ_client::trace::current(), handler(notifier));
    let guard = AbortOnDrop(tokio::spawn(async move {
        let outcome = work.await;
        let _ = tx.send(Msg::Done(outcome)).await;
    }));
    // A first notification makes the answer a stream; a result before any, plain JSON.
    let early = match rx.recv().await {
        Some(Msg::Done(outcome)) => return json_answer(id, outcome),
        Some(Msg::Notification(n)) => vec![n],
        None => return stopped(id),
    };
    let id = id.clone();
    let frames = futures::stream::unfold((early, Some(rx), guard), move |(mut queued, rx, guard)| {
        let id = id.clone();
        async move {
            if let Some(n) = queued.pop() {
                return Some((n, (queued, rx, guard)));
            }
            let mut rx = rx?;
            match rx.recv().await {
                Some(Msg::Notification(n)) => Some((n, (queued, Some(rx), guard))),
                Some(Msg::Done(outcome)) => {
                    let last = jsonrpc::response(&id, outcome.as_ref().map(Clone::clone));
                    Some((last, (queued, None, guard)))
                }
                None => None,
            }
        }
    });
    let events = futures::StreamExt::map(frames, |msg| {
        Ok::<_, Infallible>(Event::default().event("message").data(msg.to_string()))
    });
    let mut response = Sse::new(events).into_response();
    response.headers_mut().insert("x-accel-buffering", HeaderValue::from_static("no"));
    response
}

/// Runs a handler that cannot stream within the request; a panic in it is answered as a
/// handler that stopped, as in its own task.
async fn inline(id: &Option<Value>, work: impl Future<Output = Outcome>) -> Response {
    match std::panic::AssertUnwindSafe(work).catch_unwind().await {
        Ok(outcome) => json_answer(id, outcome),
        Err(_) => stopped(id),
    }
}

fn stopped(id: &Option<Value>) -> Response {
    RpcError::new(axum::http::StatusCode::INTERNAL_SERVER_ERROR, jsonrpc::INTERNAL_ERROR, "the handler stopped")
        .with_id(id)
        .into_response()
}

fn json_answer(id: &Option<Value>, outcome: Outcome) -> Response {
    match outcome {
        Ok(result) => jsonrpc::result(id, result),
        Err(e) => e.with_id(id).into_response(),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    use futures::StreamExt;
    use serde_json::json;

    use super::*;

    /// Sets its flag when dropped: the handler future was dropped (aborted or finished).
    struct Dropped(Arc<AtomicBool>);

    impl Drop for Dropped {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }

    async fn until_set(flag: &AtomicBool) -> bool {
        for _ in 0..100 {
            if flag.load(Ordering::SeqCst) {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        false
    }

    /// Closing the event stream cancels the handler (stateless MCP has no other cancel).
    #[tokio::test]
    async fn closing_the_stream_cancels_the_handler() {
        let dropped = Arc::new(AtomicBool::new(false));
        let guard = Dropped(dropped.clone());
        let meta = json!({"progressToken": "p1"});
        let response = run(&Some(json!(1)), Some(&meta), true, move |notify| async move {
            let _guard = guard;
            notify.progress(1.0, Some(2.0), "started").await;
            tokio::time::sleep(Duration::from_secs(60)).await;
            Ok(json!({}))
        })
        .await;
        assert_eq!(response.headers()[header::CONTENT_TYPE], "text/event-stream");
        let mut body = response.into_body().into_data_stream();
        let first = body.next().await.expect("a frame").expect("bytes");
        assert!(String::from_utf8_lossy(&first).contains("notifications/progress"));
        assert!(!dropped.load(Ordering::SeqCst), "still running while the client listens");
        drop(body);
        assert!(until_set(&dropped).await, "the handler outlived its stream");
    }

    /// Without notifications the answer is plain JSON, and a client that goes away while it
    /// waits cancels the handler too.
    #[tokio::test]
    async fn a_dropped_json_request_cancels_the_handler() {
        let quick = run(&Some(json!(2)), None, true, |_| async { Ok(json!({"ok": true})) }).await;
        assert_eq!(quick.headers()[header::CONTENT_TYPE], "application/json");
        let dropped = Arc::new(AtomicBool::new(false));
        let guard = Dropped(dropped.clone());
        let id = Some(json!(3));
        let waiting = run(&id, None, false, move |_| async move {
            let _guard = guard;
            tokio::time::sleep(Duration::from_secs(60)).await;
            Ok(json!({}))
        });
        assert!(tokio::time::timeout(Duration::from_millis(50), waiting).await.is_err());
        assert!(until_set(&dropped).await, "the handler outlived its request");
    }

    /// A handler whose answer cannot stream runs within the request (no task of its own), drops
    /// its notifications rather than waiting for a reader, and a panic in it is still answered.
    #[tokio::test]
    async fn a_handler_that_cannot_stream_runs_within_the_request() {
        let here = tokio::task::try_id();
        let task_of = |sse: bool, meta: Value| async move {
            let seen = Arc::new(std::sync::Mutex::new(None));
            let s = seen.clone();
            let response = run(&Some(json!(4)), Some(&meta), sse, move |notify| async move {
                *s.lock().unwrap() = Some(tokio::task::try_id());
                // More than the stream's buffer: a notifier nobody reads must not block.
                for i in 0..100 {
                    notify.progress(f64::from(i), None, "step").await;
                }
                Ok(json!({"ok": true}))
            })
            .await;
            let task = seen.lock().unwrap().take().expect("the handler ran");
            (task, response)
        };
        let (task, json_only) = task_of(false, json!({"progressToken": "p"})).await;
        assert_eq!(task, here, "a JSON-only request's handler runs in the request's task");
        assert_eq!(json_only.headers()[header::CONTENT_TYPE], "application/json");
        let (task, _) = task_of(true, json!({})).await;
        assert_eq!(task, here, "a handler asked for no notifications runs in the request's task");
        let (task, streamed) = task_of(true, json!({"progressToken": "p"})).await;
        assert_ne!(task, here, "a handler that may stream runs in a task of its own");
        assert_eq!(streamed.headers()[header::CONTENT_TYPE], "text/event-stream");
        let panicked = run(&Some(json!(5)), None, false, |_| async { panic!("a bug") }).await;
        assert_eq!(panicked.status(), axum::http::StatusCode::INTERNAL_SERVER_ERROR);
    }
}
