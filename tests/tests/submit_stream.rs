//! Submit streams (`POST /client/submit-stream`): many submits over one exchange between an
//! edge and a node. Against a real node: each submit is checked as one of its own, the
//! certificate's revocation too on a stream opened before it, and framing is bounded. Against
//! nodes that misbehave on purpose: the client keeps a submit's outcome rules (answers paired
//! by number, a broken stream leaves its submits uncertain and unretried, a node that serves
//! no streams gets requests, an unreachable one is passed over).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::routing::post;
use futures::StreamExt;
use reqwest::StatusCode;
use serde_json::Value;
use tokio::sync::mpsc;
use writ_api::dto::{SubmitRequest, SubmitResponse, BINARY_MEDIA_TYPE};
use writ_api::frames::{numbered, Frames, StreamedAnswer, StreamedSubmit, SUBMIT_STREAM_PATH};
use writ_api::ledger::{Command, Outcome};
use writ_api::role::Role;
use writ_api::ReasonCode;
use writ_client::Ledger;
use writ_tests::pki;

/// A submit stream opened by hand: frames go out as the test writes them.
struct RawStream {
    frames: mpsc::Sender<Vec<u8>>,
    answers: futures::stream::BoxStream<'static, reqwest::Result<Bytes>>,
    read: Frames,
}

impl RawStream {
    async fn open(http: &reqwest::Client, url: &str) -> Result<RawStream, (StatusCode, Value)> {
        let (frames, queued) = mpsc::channel::<Vec<u8>>(16);
        let body = futures::stream::unfold(queued, |mut q| async move { q.recv().await.map(|f| (f, q)) })
            .map(Ok::<_, std::convert::Infallible>);
        let resp = http
            .post(format!("{url}{SUBMIT_STREAM_PATH}"))
            .header(reqwest::header::CONTENT_TYPE, BINARY_MEDIA_TYPE)
            .body(reqwest::Body::wrap_stream(body))
            .send()
            .await
            .expect("open");
        if !resp.status().is_success() {
            return Err((resp.status(), resp.json().await.unwrap_or(Value::Null)));
        }
        Ok(RawStream { frames, answers: resp.bytes_stream().boxed(), read: Frames::new(1 << 26) })
    }

    async fn write(&self, frame: Vec<u8>) {
        self.frames.send(frame).await.expect("stream open");
    }

    async fn send(&self, number: u64, command: Command) {
        let request = SubmitRequest::new("stream-test", command);
        let submit = StreamedSubmit { traceparent: None, request: std::borrow::Cow::Owned(request) };
        self.write(numbered(number, &writ_api::encode(&submit).expect("encode"))).await;
    }

    /// The next answer (number, answer); `None` when the node ended the stream.
    async fn answer(&mut self) -> Option<(u64, StreamedAnswer)> {
        loop {
            if let Some((n, payload)) = self.read.next_frame().expect("answer framing") {
                return Some((n, writ_api::decode(payload).expect("answer")));
            }
            let chunk = tokio::time::timeout(Duration::from_secs(20), self.answers.next()).await.expect("in time");
            match chunk {
                Some(Ok(chunk)) => self.read.push(&chunk),
                _ => return None,
            }
        }
    }
}

/// The reason an answer carries: the refusal's, or that of the command the ledger rejected.
fn reason(answer: &StreamedAnswer) -> String {
    match answer {
        Err(r) => r.reason.to_string(),
        Ok(SubmitResponse { outcome: Outcome::Rejected { reason, .. }, .. }) => reason.to_string(),
        Ok(_) => String::new(),
    }
}

/// A start claimed for `claimant` of an operation of a missing tenant: the role gate passes it
/// for that edge, and the ledger rejects it.
fn start_as(claimant: &str) -> Command {
    Command::StartAttempt {
        tenant_id: "t-any".into(),
        operation_id: "op-missing".into(),
        executor_id: claimant.into(),
        fencing_token: 0,
        lease_ms: 1000,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_submit_stream_checks_each_submit_and_its_certificate_while_open() {
    let (node, _dir) = writ_tests::procs::single_node().await;
    let url = node.url.clone();
    // Without a certificate no stream opens.
    let (status, body) = RawStream::open(&pki::http(None), &url).await.err().expect("refused");
    assert_eq!((status, body["reason"].as_str()), (StatusCode::UNAUTHORIZED, Some("PEER_UNAUTHENTICATED")));

    let mut stream = RawStream::open(&pki::http(Some((Role::Edge, "streamer"))), &url).await.expect("open");
    // Pipelined: three submits written before any answer, each answered under its number, each
    // checked on its own (another edge's claim and a tenant's suspension are not an edge's).
    stream.send(7, start_as("edge:streamer")).await;
    stream.send(8, start_as("edge:another-edge")).await;
    stream.send(9, Command::SuspendTenant { tenant_id: "t-any".into(), note: None }).await;
    stream.write(numbered(10, b"not a submit")).await;
    let mut answers = std::collections::BTreeMap::new();
    for _ in 0..4 {
        let (n, answer) = stream.answer().await.expect("an answer");
        answers.insert(n, reason(&answer));
    }
    let expected = [(7, "TENANT_NOT_FOUND"), (8, "PEER_FORBIDDEN"), (9, "PEER_FORBIDDEN"), (10, "INPUT_INVALID")];
    let expected: std::collections::BTreeMap<u64, String> = expected.map(|(n, r)| (n, r.to_string())).into();
    assert_eq!(answers, expected);

    // The certificate is revoked while the stream is open: its next submit is refused on it.
    let cert = pki::credential(Role::Edge, "streamer").cert;
    let args = ["credential", "revoke-cert", "--cert", cert.to_str().expect("path")];
    let (code, out, err) = writ_tests::procs::run_cli(&url, &args);
    assert_eq!(code, 0, "{out}{err}");
    // Once the node has applied the revocation (a new request with the certificate is
    // refused), the next submit on the stream opened before it is refused too.
    let fresh = pki::http(Some((Role::Edge, "streamer")));
    writ_tests::eventually("the revocation applied", Duration::from_secs(10), || async {
        let r = fresh.get(format!("{url}/client/read-index")).send().await.ok()?;
        (r.status() == StatusCode::FORBIDDEN).then_some(())
    })
    .await;
    stream.send(100, start_as("edge:streamer")).await;
    let (answered, refused) = stream.answer().await.expect("an answer");
    assert_eq!((answered, reason(&refused).as_str()), (100, "CREDENTIAL_RETIRED"), "{refused:?}");
    assert!(refused.expect_err("refused").message.contains("revoked"));

    // A frame longer than a submit may be breaks the framing: the node ends the stream.
    let mut bounded = RawStream::open(&pki::http(Some((Role::Edge, "framer"))), &url).await.expect("open");
    let oversized = (writ_api::frames::SUBMIT_PAYLOAD_BYTES_MAX as u32 + 9).to_le_bytes();
    bounded.write([&oversized[..], &[0u8; 8]].concat()).await;
    assert!(bounded.answer().await.is_none(), "the stream ends");
    node.shutdown().await;
}

/// A stand-in node: its submit stream does what `answer` says with the frames it reads; the
/// streams it opens and the requests it takes are counted.
struct FakeNode {
    url: String,
    requests: Arc<AtomicUsize>,
}

/// What a stand-in node does with the submits read so far: `Some(frames)` to write, `None` to
/// break the stream.
type Answerer = fn(&[(u64, SubmitRequest)]) -> Option<Vec<Vec<u8>>>;

async fn fake_node(streams: bool, answer: Answerer) -> FakeNode {
    let requests = Arc::new(AtomicUsize::new(0));
    let counted = requests.clone();
    let stream = post(move |body: Body| async move {
        counted.fetch_add(1, Ordering::SeqCst);
        let (tx, rx) = mpsc::channel::<Result<Bytes, std::io::Error>>(16);
        tokio::spawn(async move {
            let (mut read, mut body, mut got) = (Frames::new(1 << 20), body.into_data_stream(), Vec::new());
            while let Some(Ok(chunk)) = body.next().await {
                read.push(&chunk);
                while let Some((n, payload)) = read.next_frame().expect("framing") {
                    let submit: StreamedSubmit = writ_api::decode(payload).expect("submit");
                    got.push((n, submit.request.into_owned()));
                }
                match answer(&got) {
                    Some(frames) => {
                        for f in frames {
                            let _ = tx.send(Ok(Bytes::from(f))).await;
                        }
                    }
                    None => {
                        let _ = tx.send(Err(std::io::Error::other("broken on purpose"))).await;
                        return;
                    }
                }
            }
        });
        let answers = futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|a| (a, rx)) });
        ([(axum::http::header::CONTENT_TYPE, BINARY_MEDIA_TYPE)], Body::from_stream(answers))
    });
    let counted = requests.clone();
    let request = post(move || async move {
        counted.fetch_add(1, Ordering::SeqCst);
        let applied = SubmitResponse { log_index: 1, outcome: Outcome::Internal, forwarded: false };
        ([(axum::http::header::CONTENT_TYPE, BINARY_MEDIA_TYPE)], writ_api::encode(&applied).expect("encode"))
    });
    let mut app = axum::Router::new().route("/client/submit", request);
    if streams {
        app = app.route(SUBMIT_STREAM_PATH, stream);
    }
    FakeNode { url: format!("https://127.0.0.1:{}", pki::serve_https(app).await), requests }
}

/// An answer frame: applied at the log index the submit's trace id names.
fn applied(number: u64, req: &SubmitRequest) -> Vec<u8> {
    let log_index = req.trace_id.parse().expect("a numbered trace id");
    let answer: StreamedAnswer = Ok(SubmitResponse { log_index, outcome: Outcome::Internal, forwarded: false });
    numbered(number, &writ_api::encode(&answer).expect("encode"))
}

fn submit(trace_id: &str) -> SubmitRequest {
    SubmitRequest::new(trace_id, start_as("edge:client"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_submit_stream_client_keeps_each_submits_outcome_rules() {
    // Answers come back in another order than the submits went: each caller gets its own.
    let reversed = fake_node(true, |got| {
        (got.len() == 2).then(|| got.iter().rev().map(|(n, req)| applied(*n, req)).collect()).or(Some(vec![]))
    })
    .await;
    let ledger = pki::edge_ledger(vec![reversed.url.clone()], "client");
    let (first, second) = tokio::join!(ledger.submit(submit("41")), ledger.submit(submit("42")));
    assert_eq!((first.expect("first").log_index, second.expect("second").log_index), (41, 42));
    assert_eq!(reversed.requests.load(Ordering::SeqCst), 1, "both went over one stream");

    // A stream that breaks after the submit was written: uncertain, and not sent to the next
    // node (it may have been committed).
    let breaking = fake_node(true, |_| None).await;
    let bystander = fake_node(true, |got| Some(got.iter().map(|(n, req)| applied(*n, req)).collect())).await;
    let ledger = pki::edge_ledger(vec![breaking.url.clone(), bystander.url.clone()], "client");
    let refused = ledger.submit(submit("43")).await.expect_err("uncertain");
    assert_eq!(refused.reason, ReasonCode::LEDGER_UNAVAILABLE, "{refused:?}");
    assert!(refused.message.contains("broke before the answer"), "{}", refused.message);
    assert_eq!(bystander.requests.load(Ordering::SeqCst), 0, "an uncertain submit is not retried elsewhere");

    // A node that serves no streams takes a request per submit.
    let old = fake_node(false, |_| None).await;
    let ledger = pki::edge_ledger(vec![old.url.clone()], "client");
    assert_eq!(ledger.submit(submit("44")).await.expect("applied").log_index, 1);
    assert_eq!(ledger.submit(submit("45")).await.expect("applied").log_index, 1);
    assert_eq!(old.requests.load(Ordering::SeqCst), 2, "a request each");

    // No stream can be opened at an unreachable node: nothing was sent, so the next is asked.
    let unreachable = {
        let socket = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        format!("https://{}", socket.local_addr().expect("addr"))
    };
    let ledger = pki::edge_ledger(vec![unreachable, bystander.url.clone()], "client");
    assert_eq!(ledger.submit(submit("46")).await.expect("the next node").log_index, 46);
}

/// A node that takes connections and never answers (a hung process, a black hole) is waited
/// for once: the callers queued behind that open are passed on to the next node at once, not
/// each made to wait for the silent one again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_node_is_waited_for_once_while_its_callers_go_on() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let silent = format!("https://{}", listener.local_addr().expect("addr"));
    let accepted = Arc::new(AtomicUsize::new(0));
    let counted = accepted.clone();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            counted.fetch_add(1, Ordering::SeqCst);
            held.push(socket);
        }
    });
    let next = fake_node(true, |got| Some(got.iter().map(|(n, req)| applied(*n, req)).collect())).await;
    let ledger = pki::edge_ledger(vec![silent, next.url.clone()], "client");
    let (first, second) = tokio::join!(ledger.submit(submit("51")), ledger.submit(submit("52")));
    assert_eq!((first.expect("first").log_index, second.expect("second").log_index), (51, 52));
    assert_eq!(accepted.load(Ordering::SeqCst), 1, "the silent node was tried once");
}

/// A node that opens a stream and then reads no more of it: the client's queue fills behind
/// the stream's HTTP/2 window, and every submit still ends within its deadline — those that
/// never got into the queue as not sent, those in it as uncertain.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_the_node_stops_reading_ends_each_submit_by_its_deadline() {
    let stalled = post(|body: Body| async move {
        // The request body is held, never read; the answers never come.
        let held = futures::stream::once(async move {
            std::future::pending::<()>().await;
            drop(body);
            Ok::<_, std::io::Error>(Bytes::new())
        });
        ([(axum::http::header::CONTENT_TYPE, BINARY_MEDIA_TYPE)], Body::from_stream(held))
    });
    let app = axum::Router::new().route(SUBMIT_STREAM_PATH, stalled);
    let url = format!("https://127.0.0.1:{}", pki::serve_https(app).await);
    let ledger = Arc::new(pki::edge_ledger(vec![url], "client"));
    // Submits of 20 KB each: the node's HTTP/2 window takes a few dozen, the client's queue
    // 1,024, and the rest wait for room.
    let calls = (0..1_500).map(|i| SubmitRequest::new(format!("{i}-{}", "x".repeat(20_000)), start_as("edge:client")));
    let calls = calls.map(|req| {
        let ledger = ledger.clone();
        tokio::spawn(async move { ledger.submit(req).await })
    });
    let ended = tokio::time::timeout(Duration::from_secs(60), futures::future::join_all(calls.collect::<Vec<_>>()))
        .await
        .expect("every submit ends by its deadline");
    let refused: Vec<_> = ended.into_iter().map(|r| r.expect("task").expect_err("no answer")).collect();
    assert!(refused.iter().all(|r| r.reason == ReasonCode::LEDGER_UNAVAILABLE), "{:?}", refused.first());
    // Those written are uncertain ("did not answer"), the rest not sent ("took no call").
    let mut kinds = std::collections::BTreeMap::<&str, usize>::new();
    for r in &refused {
        let kind = ["took no call", "did not answer"].into_iter().find(|k| r.message.contains(k));
        *kinds.entry(kind.unwrap_or(r.message.as_str())).or_default() += 1;
    }
    assert_eq!(kinds.keys().copied().collect::<Vec<_>>(), ["did not answer", "took no call"], "{kinds:?}");
}
