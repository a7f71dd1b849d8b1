//! Serving Writ's HTTP listeners (one place for all of them): HTTPS with rustls or plain HTTP,
//! a per-listener client-certificate rule, certificates that follow their files on disk, an
//! address allowlist for plain listeners behind a TLS-terminating proxy, and a graceful drain.
//!
//! With TLS, a client certificate (when the listener takes one) must chain to the cluster CA;
//! the role identity it names ([`crate::pki::identity_of`]) travels with every request of the
//! connection as a [`PeerIdentity`], which `http` checks before reading any body, and the
//! certificate itself as an [`ExecutorPeer`] (the executor gate maps it to an executor).

use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::service::TowerToHyperService;
use rustls::server::WebPkiClientVerifier;
use rustls::ServerConfig;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_rustls::TlsAcceptor;
use writ_client::tls::{alpn, provider, read_roots, CredentialFiles, Followed};
use writ_mcp_edge::executors::ExecutorPeer;

/// Deadline for a TLS handshake on an accepted connection.
const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The role identity of the connection's client certificate and the certificate's serial
/// (normalized, for the revocation check), or `None`: no certificate, or one naming no Writ
/// role.
#[derive(Debug, Clone)]
pub struct PeerIdentity(pub Option<(writ_api::role::Identity, String)>);

/// Whether a TLS listener asks its clients for a certificate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientAuth {
    /// No client certificates (the edge's MCP listener: agents authenticate by token).
    None,
    /// Optional at the handshake, verified when presented (a node's single listener in
    /// one-port mode, which also carries probes and the admin API).
    Optional,
    /// Required at the handshake (a node's peer listener once admin and probes have their own).
    Required,
}

/// A TLS server's configuration, rebuilt when its CA bundle changes on disk; its certificate
/// comes from a [`CredentialFiles`], which follows its own files.
pub struct ServerTls {
    config: Followed<Arc<ServerConfig>>,
}

impl ServerTls {
    /// `ca` is required unless `auth` is [`ClientAuth::None`].
    pub fn new(
        credential: Arc<CredentialFiles>,
        ca: Option<&Path>,
        auth: ClientAuth,
    ) -> Result<Arc<ServerTls>, String> {
        let ca = ca.map(Path::to_path_buf);
        let paths = ca.iter().cloned().collect();
        let config = Followed::new("CA bundle", paths, move || {
            Self::build(&credential, ca.as_deref(), auth).map_err(|e| ("unusable", e))
        })?;
        Ok(Arc::new(ServerTls { config }))
    }

    fn build(
        credential: &Arc<CredentialFiles>,
        ca: Option<&Path>,
        auth: ClientAuth,
    ) -> Result<Arc<ServerConfig>, String> {
        let builder = ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?;
        let builder = match (auth, ca) {
            (ClientAuth::None, _) => builder.with_no_client_auth(),
            (_, None) => return Err("a listener that verifies client certificates needs the CA bundle".into()),
            (auth, Some(ca)) => {
                let verifier = WebPkiClientVerifier::builder_with_provider(read_roots(ca)?, provider());
                let verifier = if auth == ClientAuth::Optional { verifier.allow_unauthenticated() } else { verifier };
                builder.with_client_cert_verifier(verifier.build().map_err(|e| e.to_string())?)
            }
        };
        let mut cfg = builder.with_cert_resolver(credential.clone());
        cfg.alpn_protocols = alpn();
        Ok(Arc::new(cfg))
    }

    /// The configuration for the next handshake.
    pub fn config(&self) -> Arc<ServerConfig> {
        self.config.current()
    }
}

/// Where a TLS listener gets the configuration for each handshake.
pub trait ServerConfigSource: Send + Sync {
    fn config(&self) -> Result<Arc<ServerConfig>, String>;
}

impl ServerConfigSource for ServerTls {
    fn config(&self) -> Result<Arc<ServerConfig>, String> {
        Ok(ServerTls::config(self))
    }
}

/// How a listener accepts connections.
#[derive(Clone)]
pub struct Accept {
    /// HTTPS when set; plain HTTP otherwise.
    pub tls: Option<Arc<dyn ServerConfigSource>>,
    /// Plain listeners behind a TLS-terminating proxy: only these peer addresses may connect,
    /// and only their `X-Forwarded-Host` is honoured. Everywhere else `X-Forwarded-*` headers
    /// are removed before routing.
    pub trusted_proxies: Option<Arc<Vec<IpAddr>>>,
    /// Counter label of refusals at this listener.
    pub name: &'static str,
}

impl Accept {
    pub fn tls(tls: Arc<dyn ServerConfigSource>, name: &'static str) -> Accept {
        Accept { tls: Some(tls), trusted_proxies: None, name }
    }

    pub fn plain(name: &'static str) -> Accept {
        Accept { tls: None, trusted_proxies: None, name }
    }
}

/// Tells listeners to drain: stop accepting, let in-flight requests finish.
#[derive(Clone)]
pub struct Drain(watch::Sender<bool>);

impl Default for Drain {
    fn default() -> Self {
        Drain(watch::channel(false).0)
    }
}

impl Drain {
    pub fn start(&self) {
        let _ = self.0.send(true);
    }

    fn watch(&self) -> watch::Receiver<bool> {
        self.0.subscribe()
    }

    /// Whether the drain has started.
    pub fn is_started(&self) -> bool {
        *self.0.borrow()
    }

    /// Resolves once the drain has started (for streams that must end so their connection can).
    pub fn started(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        drained(self.watch())
    }
}

async fn drained(mut rx: watch::Receiver<bool>) {
    let _ = rx.wait_for(|d| *d).await;
}

/// Largest request body (by its `Content-Length`) whose unread rest is read and dropped after
/// the answer ([`drain_unread_body`]).
const DRAINED_BODY_BYTES: u64 = 1024 * 1024;
/// How long reading that rest may take.
const DRAIN_BODY_TIMEOUT: Duration = Duration::from_secs(5);

/// What every listener does to each request: [`forwarded_headers`], then the route, then
/// [`drain_unread_body`] — one layer, so a request pays for one boxed middleware future.
async fn request_hygiene(
    trusted: bool,
    mut req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    forwarded_headers(trusted, &mut req);
    drain_unread_body(req, next).await
}

/// Reads and drops what a route left unread of the request body (at most
/// [`DRAINED_BODY_BYTES`], within [`DRAIN_BODY_TIMEOUT`]) once it has answered. A route that
/// answers without reading the whole body — the credential check's refusal, a body over the
/// route's bound, an unknown path — would otherwise leave it unread, and HTTP/1.1 then closes
/// the connection: a client still sending its body, or one that had picked the connection for
/// its next request, gets a broken connection instead of the answer. Nothing is kept of the
/// bytes, and no route reads a body before its credential check. A body the route read to its
/// end costs no more than a lock per frame.
async fn drain_unread_body(req: axum::extract::Request, next: axum::middleware::Next) -> axum::response::Response {
    use http_body::Body as _;
    let length =
        req.headers().get(axum::http::header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    // HTTP/2 resets the one stream, never the connection (Raft's traffic between nodes).
    let http1 = req.version() < axum::http::Version::HTTP_2;
    if !http1 || !length.is_some_and(|n| n > 0 && n <= DRAINED_BODY_BYTES) {
        return next.run(req).await;
    }
    let (parts, body) = req.into_parts();
    let shared = SharedBody(Arc::new(std::sync::Mutex::new(body)));
    let response = next.run(axum::extract::Request::from_parts(parts, axum::body::Body::new(shared.clone()))).await;
    let mut rest = std::mem::take(&mut *shared.lock());
    if !rest.is_end_stream() {
        let _ = tokio::time::timeout(DRAIN_BODY_TIMEOUT, async {
            while let Some(Ok(_)) = std::future::poll_fn(|cx| std::pin::Pin::new(&mut rest).poll_frame(cx)).await {}
        })
        .await;
    }
    response
}

/// A request body the route reads through a handle while the middleware keeps another: what
/// the route leaves unread stays reachable after it has dropped its handle.
#[derive(Clone)]
struct SharedBody(Arc<std::sync::Mutex<axum::body::Body>>);

impl SharedBody {
    fn lock(&self) -> std::sync::MutexGuard<'_, axum::body::Body> {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl http_body::Body for SharedBody {
    type Data = axum::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        std::pin::Pin::new(&mut *self.lock()).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.lock().is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.lock().size_hint()
    }
}

/// `X-Forwarded-*` handling: honoured (Host only) from trusted proxies, removed elsewhere. An
/// HTTP/2 request names its host in `:authority` (the URI), not `Host`: it becomes the `Host`
/// header here, so every route checks one header whatever the protocol.
fn forwarded_headers(trusted: bool, req: &mut axum::extract::Request) {
    use axum::http::header::HOST;
    if !req.headers().contains_key(HOST) {
        let authority = req.uri().authority().and_then(|a| axum::http::HeaderValue::from_str(a.as_str()).ok());
        if let Some(authority) = authority {
            req.headers_mut().insert(HOST, authority);
        }
    }
    let forwarded = |k: &axum::http::HeaderName| k.as_str().starts_with("x-forwarded-");
    if !req.headers().keys().any(forwarded) {
        return;
    }
    let host = req.headers().get("x-forwarded-host").cloned();
    let names: Vec<_> = req.headers().keys().filter(|k| forwarded(k)).cloned().collect();
    for k in names {
        req.headers_mut().remove(k);
    }
    if let (true, Some(h)) = (trusted, host) {
        req.headers_mut().insert(HOST, h);
    }
}

/// Serves `app` on `listener` until `drain` starts; then stops accepting and returns once every
/// open connection has finished its in-flight requests (HTTP/1.1 keep-alive and HTTP/2 are
/// closed gracefully), or at `deadline` after the drain began, whichever is first.
pub async fn serve(listener: TcpListener, app: Router, accept: Accept, drain: Drain, deadline: Duration) {
    let trusted = accept.trusted_proxies.is_some();
    let app = app.layer(axum::middleware::from_fn(move |req, next| request_hygiene(trusted, req, next)));
    let mut connections = tokio::task::JoinSet::new();
    let stop = drain.watch();
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = drained(stop.clone()) => break,
            // Reap finished connections as we go (the set holds only live ones).
            Some(_) = connections.join_next(), if !connections.is_empty() => continue,
        };
        let (tcp, peer) = match accepted {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(error = %e, "accept failed");
                continue;
            }
        };
        if let Some(proxies) = &accept.trusted_proxies {
            if !proxies.contains(&peer.ip()) {
                metrics::counter!("writ_listener_refused_total", "listener" => accept.name, "reason" => "untrusted_proxy")
                    .increment(1);
                continue;
            }
        }
        let _ = tcp.set_nodelay(true);
        let (accept, app, stop) = (accept.clone(), app.clone(), stop.clone());
        connections.spawn(async move {
            match accept.tls {
                None => {
                    let app = app.layer(axum::Extension(PeerIdentity(None)));
                    connection(tcp, peer, app, stop, PUBLIC_RESET_STREAMS_MAX).await
                }
                Some(tls) => {
                    let acceptor = match tls.config() {
                        Ok(c) => TlsAcceptor::from(c),
                        Err(e) => {
                            tracing::error!(listener = accept.name, error = %e, "TLS configuration");
                            return;
                        }
                    };
                    let stream = match tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                        Ok(Ok(s)) => s,
                        Ok(Err(e)) => {
                            // Counted, never audited: an unauthenticated party writes to no trail.
                            metrics::counter!("writ_node_tls_refused_total", "listener" => accept.name).increment(1);
                            tracing::debug!(%peer, error = %e, "TLS handshake refused");
                            return;
                        }
                        Err(_) => {
                            metrics::counter!("writ_node_tls_refused_total", "listener" => accept.name).increment(1);
                            return;
                        }
                    };
                    let cert = stream.get_ref().1.peer_certificates().and_then(|c| c.first()).cloned();
                    let identity = match cert.as_ref().map(|c| writ_client::tls::role_certificate(c)) {
                        None => None,
                        Some(Ok(id)) => Some(id),
                        Some(Err(e)) => {
                            // An executor's certificate (executor endpoint) names no cluster role.
                            tracing::debug!(%peer, error = %e, "client certificate names no Writ role");
                            None
                        }
                    };
                    // A cluster member (a role certificate) may reset more streams than the
                    // public: Raft drops a heartbeat it stops waiting for, which resets its stream.
                    let resets = if identity.is_some() { MEMBER_RESET_STREAMS_MAX } else { PUBLIC_RESET_STREAMS_MAX };
                    let mut app = app.layer(axum::Extension(PeerIdentity(identity)));
                    if let Some(cert) = cert {
                        app = app.layer(axum::Extension(ExecutorPeer(Arc::new(cert.to_vec()))));
                    }
                    connection(stream, peer, app, stop, resets).await
                }
            }
        });
    }
    drop(listener);
    let _ = tokio::time::timeout(deadline, async { while connections.join_next().await.is_some() {} }).await;
    connections.abort_all();
}

/// HTTP/2 streams a client may reset before this server took them up, after which the
/// connection is closed (hyper's guard against rapid-reset floods; its default is 20). The
/// public keeps the default.
const PUBLIC_RESET_STREAMS_MAX: usize = 20;
/// The same for a peer with a cluster role certificate. Raft gives up on a heartbeat after one
/// heartbeat interval and drops it (an h2 reset); on a loaded machine twenty of those closed
/// the whole node-to-node connection with every append in flight, and the followers, cut off,
/// started elections under P1.
const MEMBER_RESET_STREAMS_MAX: usize = 4096;

/// One HTTP/1.1 or HTTP/2 connection, closed gracefully when the drain starts.
async fn connection<S>(io: S, peer: SocketAddr, app: Router, stop: watch::Receiver<bool>, resets: usize)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let mut builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
    builder.http2().max_pending_accept_reset_streams(resets);
    let conn = builder.serve_connection_with_upgrades(TokioIo::new(io), TowerToHyperService::new(app));
    tokio::pin!(conn);
    tokio::select! {
        r = conn.as_mut() => {
            if let Err(e) = r {
                tracing::debug!(%peer, error = %e, "connection ended");
            }
            return;
        }
        _ = drained(stop) => conn.as_mut().graceful_shutdown(),
    }
    if let Err(e) = conn.await {
        tracing::debug!(%peer, error = %e, "connection ended while draining");
    }
}

/// Binds `addr` and serves `app` in a task; returns the bound address and the task.
pub async fn spawn(
    addr: SocketAddr,
    app: Router,
    accept: Accept,
    drain: &Drain,
    deadline: Duration,
) -> std::io::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let listener = TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    writ_client::egress::register_own_listener(local);
    Ok((local, tokio::spawn(serve(listener, app, accept, drain.clone(), deadline))))
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    use axum::body::Body;
    use axum::http::{header, Request, StatusCode};
    use futures::StreamExt;
    use tower::ServiceExt;

    /// A route that refuses without reading the body still has it read to its end, so the
    /// connection it came on stays open for the client's next request.
    #[tokio::test]
    async fn an_unread_body_is_read_to_its_end_after_a_refusal() {
        let refuse = axum::Router::new().route("/v1/x", axum::routing::post(|| async { StatusCode::UNAUTHORIZED }));
        let app = refuse.clone().layer(axum::middleware::from_fn(super::drain_unread_body));
        for (app, read_whole) in [(app, true), (refuse, false)] {
            let ended = Arc::new(AtomicBool::new(false));
            let seen = ended.clone();
            let chunks = futures::stream::iter([Ok::<_, std::io::Error>(axum::body::Bytes::from_static(b"{\"a\":"))])
                .chain(futures::stream::once(async move {
                    seen.store(true, Ordering::SeqCst);
                    Ok(axum::body::Bytes::from_static(b"1}"))
                }));
            let req = Request::post("/v1/x")
                .header(header::CONTENT_LENGTH, "7")
                .body(Body::from_stream(chunks.boxed()))
                .unwrap();
            let response = app.oneshot(req).await.unwrap();
            assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
            assert_eq!(ended.load(Ordering::SeqCst), read_whole, "read whole: {read_whole}");
        }
        // A route that reads the body gets all of it.
        let echo = axum::Router::new().route("/v1/x", axum::routing::post(|body: String| async move { body }));
        let app = echo.layer(axum::middleware::from_fn(super::drain_unread_body));
        let req = Request::post("/v1/x").header(header::CONTENT_LENGTH, "7").body(Body::from("{\"a\":1}")).unwrap();
        let response = app.oneshot(req).await.unwrap();
        let body = axum::body::to_bytes(response.into_body(), 64).await.unwrap();
        assert_eq!(&body[..], b"{\"a\":1}");
    }
}
