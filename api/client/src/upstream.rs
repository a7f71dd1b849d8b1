//! The outbound MCP client of a tenant's upstream servers (`writ_api::upstream`), on the
//! official Rust SDK's client (rmcp): the edge calls pinned tools through it and the admin
//! API lists tools through it for `upstream sync`. Either protocol era: 2026-07-28 (stateless,
//! `server/discover`), 2025-11-25 (`initialize`, a session), or `auto` (discover, then fall
//! back). Every wait is bounded by the upstream's timeouts; every failure is
//! `UPSTREAM_FAILED` with what went wrong (never the credential).

use std::time::Duration;

use rmcp::handler::client::progress::ProgressDispatcher;
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, ClientCapabilities, ClientConfig, ClientRequest, Implementation,
    ProgressNotificationParam, ProtocolVersion, ServerResult,
};
use rmcp::service::{MaybeSendFuture, NotificationContext, PeerRequestOptions, RequestHandle, RunningService};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::{ClientLifecycleMode, ClientServiceExt, RoleClient};
use serde_json::Value;
use writ_api::upstream::{
    UpstreamAuthV1, UpstreamProtocol, UpstreamSpecV1, UPSTREAM_RESULT_BYTES_MAX, UPSTREAM_TOOLS_MAX,
};
use writ_api::{ReasonCode, Rejection};

/// Calls in flight on one connection at most (rmcp's `max_concurrent_requests`; more wait).
const CALLS_IN_FLIGHT_MAX: usize = 64;

/// Pages of `tools/list` read at most (each page bounded by the response size limit).
const LIST_PAGES_MAX: usize = 64;

/// Why an upstream call failed; whether it counts against the upstream's fuse: the upstream
/// could not be reached, timed out, broke the protocol or failed internally (counts), or
/// refused the arguments as invalid (an answer, does not count); and whether it is
/// `unanswered`: the request may have reached the upstream and no answer says what came of it
/// (a timeout, a connection lost during the call, an answer too large to read) — for a call
/// with an effect, the effect is unknown.
#[derive(Debug, Clone)]
pub struct UpstreamError {
    pub rejection: Rejection,
    pub counts: bool,
    pub unanswered: bool,
}

/// Longest failure message kept of an upstream (what it answered is quoted only this far).
pub const UPSTREAM_ERROR_BYTES_MAX: usize = 1024;

impl UpstreamError {
    fn failed(message: impl Into<String>) -> UpstreamError {
        let message = writ_api::rejection::truncated(&message.into(), UPSTREAM_ERROR_BYTES_MAX);
        UpstreamError {
            rejection: Rejection::new(ReasonCode::UPSTREAM_FAILED, message),
            counts: true,
            unanswered: false,
        }
    }

    /// A failure after the request went out, with no answer.
    fn unanswered(mut self) -> UpstreamError {
        self.unanswered = true;
        self
    }
}

impl From<Rejection> for UpstreamError {
    fn from(rejection: Rejection) -> UpstreamError {
        let counts = rejection.reason == ReasonCode::UPSTREAM_FAILED;
        UpstreamError { rejection, counts, unanswered: false }
    }
}

/// Whether the response was refused for its size (the upstream answered: its output is
/// invalid, which does not count against its fuse).
fn too_large(e: &rmcp::ServiceError) -> bool {
    use rmcp::transport::streamable_http_client::StreamableHttpError;
    let mut next: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = next {
        if let Some(StreamableHttpError::ResponseBodyTooLarge { .. }) =
            err.downcast_ref::<StreamableHttpError<reqwest::Error>>()
        {
            return true;
        }
        next = err.source();
    }
    false
}

/// The request `_meta` key asking a 2026-07-28 server for the request's log messages.
const META_LOG_LEVEL: &str = "io.modelcontextprotocol/logLevel";

/// One progress notification of an upstream call, as it is relayed to the caller.
#[derive(Debug, Clone, PartialEq)]
pub struct Progress {
    pub progress: f64,
    pub total: Option<f64>,
    pub message: Option<String>,
}

/// One log message of an upstream call (`notifications/message`), as it is relayed.
#[derive(Debug, Clone, PartialEq)]
pub struct LogMessage {
    pub level: String,
    pub logger: Option<String>,
    pub data: Value,
}

/// Log messages queued for the caller at most (more are dropped: a chatty upstream cannot
/// hold the call up).
const LOGS_QUEUED_MAX: usize = 64;

/// The client side of the connection: Writ's client info, and the progress notifications
/// routed to the calls that asked for them (by the progress token rmcp gave each request).
#[derive(Clone)]
struct Relay {
    info: ClientConfig,
    progress: ProgressDispatcher,
}

/// The transport of a connection opened for one call that asked for logs
/// ([`connect_for_logs`]): it hands each log message to the call as it arrives, in the order
/// the upstream sent them and before the answer that follows them (rmcp's handlers run each
/// notification in a task of its own, which would not keep that order).
struct LogTap<T> {
    inner: T,
    logs: tokio::sync::mpsc::Sender<LogMessage>,
}

impl<T: rmcp::transport::Transport<RoleClient>> rmcp::transport::Transport<RoleClient> for LogTap<T> {
    type Error = T::Error;

    fn send(
        &mut self,
        item: rmcp::service::TxJsonRpcMessage<RoleClient>,
    ) -> impl std::future::Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.inner.send(item)
    }

    #[allow(deprecated)] // MCP logging is deprecated (SEP-2577), still what upstreams send
    async fn receive(&mut self) -> Option<rmcp::service::RxJsonRpcMessage<RoleClient>> {
        let message = self.inner.receive().await?;
        if let rmcp::model::JsonRpcMessage::Notification(n) = &message {
            if let rmcp::model::ServerNotification::LoggingMessageNotification(m) = &n.notification {
                let p = &m.params;
                let level = serde_json::to_value(p.level).ok().and_then(|v| v.as_str().map(str::to_string));
                let log =
                    LogMessage { level: level.unwrap_or_default(), logger: p.logger.clone(), data: p.data.clone() };
                let _ = self.logs.try_send(log);
            }
        }
        Some(message)
    }

    fn close(&mut self) -> impl std::future::Future<Output = Result<(), Self::Error>> + Send {
        self.inner.close()
    }
}

impl rmcp::ClientHandler for Relay {
    fn get_info(&self) -> ClientConfig {
        self.info.clone()
    }

    fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) -> impl std::future::Future<Output = ()> + MaybeSendFuture + '_ {
        self.progress.handle_notification(params)
    }
}

/// Cancels the request upstream (a `notifications/cancelled`, which ends its stream) unless
/// it completed: what a call that timed out or whose caller went away leaves behind.
struct CancelOnDrop(Option<RequestHandle<RoleClient>>);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if let Some(handle) = self.0.take() {
            tokio::spawn(async move {
                let _ = handle.cancel(Some("the caller stopped waiting".into())).await;
            });
        }
    }
}

/// One live client of one upstream configuration.
pub struct Connection {
    service: RunningService<RoleClient, Relay>,
    progress: ProgressDispatcher,
    call_timeout: Duration,
    /// The log level its calls ask for (a connection of [`connect_for_logs`]).
    log_level: Option<String>,
    /// When its OAuth access token is due for renewal: from then on it counts as closed, so its
    /// holder connects again with a fresh token.
    renew_at: Option<std::time::Instant>,
}

/// Resolves a credential reference on this host: the bearer token, or why it cannot be read
/// (the message names the reference, never the token).
pub fn resolve(auth: &UpstreamAuthV1) -> Result<Option<String>, Rejection> {
    let unreadable = |m: String| Rejection::new(ReasonCode::UPSTREAM_FAILED, m);
    let token = match auth {
        UpstreamAuthV1::None => return Ok(None),
        UpstreamAuthV1::BearerEnv { var } => {
            std::env::var(var).map_err(|_| unreadable(format!("auth env:{var} is not set here")))?
        }
        UpstreamAuthV1::OauthClientCredentials { .. } => {
            return Err(unreadable("an OAuth access token is asked for, not read (connect does)".into()))
        }
        UpstreamAuthV1::BearerFile { path } => {
            // The file itself, never what a link named like it points at (another secret).
            let real = std::fs::canonicalize(path).map_err(|e| unreadable(format!("auth file:{path}: {e}")))?;
            if real != std::path::Path::new(path) {
                return Err(unreadable(format!("auth file:{path} resolves through a symbolic link: refused")));
            }
            let meta = std::fs::metadata(path).map_err(|e| unreadable(format!("auth file:{path}: {e}")))?;
            if meta.len() > AUTH_FILE_BYTES_MAX {
                return Err(unreadable(format!("auth file:{path} exceeds {AUTH_FILE_BYTES_MAX} bytes")));
            }
            std::fs::read_to_string(path).map_err(|e| unreadable(format!("auth file:{path}: {e}")))?
        }
    };
    let token = token.trim().to_string();
    if token.is_empty() || !token.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(unreadable(format!("{} holds no token (empty, or not printable ASCII)", auth.label())));
    }
    Ok(Some(token))
}

/// Largest credential file read (bytes).
const AUTH_FILE_BYTES_MAX: u64 = 16 * 1024;

/// OAuth 2.0 client credentials (RFC 6749 §4.4): the access token is asked of the token
/// endpoint with the client id and the referenced secret (HTTP Basic, form-encoded as §2.3.1
/// says), and kept — by endpoint, client, scope and secret — until shortly before it expires.
/// Neither the secret nor a token ever appears in an error.
mod oauth {
    use std::collections::HashMap;
    use std::sync::{LazyLock, Mutex};
    use std::time::{Duration, Instant};

    use super::{resolve, UpstreamError};
    use writ_api::upstream::{UpstreamAuthV1, UpstreamSpecV1};

    /// Tokens kept at most (then the cache starts over).
    const TOKENS_KEPT_MAX: usize = 1024;
    /// Bytes of a token endpoint's answer read at most.
    const ANSWER_BYTES_MAX: usize = 64 * 1024;
    /// Bytes of an access token at most.
    const TOKEN_BYTES_MAX: usize = 8 * 1024;
    /// A token's lifetime when the endpoint names none, and the longest one trusted.
    const LIFETIME_DEFAULT_S: u64 = 300;
    const LIFETIME_MAX_S: u64 = 24 * 3600;

    struct Kept {
        token: String,
        renew_at: Instant,
    }

    static TOKENS: LazyLock<Mutex<HashMap<String, Kept>>> = LazyLock::new(Mutex::default);

    fn key(spec: &UpstreamSpecV1) -> Option<String> {
        let UpstreamAuthV1::OauthClientCredentials { token_url, client_id, secret, scope } = &spec.auth else {
            return None;
        };
        let secret = resolve(&UpstreamAuthV1::parse(secret).ok()?).ok()??;
        let text = format!("{token_url}\n{client_id}\n{}\n{secret}", scope.as_deref().unwrap_or(""));
        Some(writ_api::sha256_hex(text.as_bytes()))
    }

    /// Forgets the kept token of `spec` (the upstream refused the connection it was used for).
    pub(super) fn forget(spec: &UpstreamSpecV1) {
        if let Some(key) = key(spec) {
            TOKENS.lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(&key);
        }
    }

    /// `application/x-www-form-urlencoded` of one value.
    fn form(value: &str) -> String {
        value
            .bytes()
            .map(|b| match b {
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'*' => (b as char).to_string(),
                b' ' => "+".into(),
                _ => format!("%{b:02X}"),
            })
            .collect()
    }

    /// An access token for `spec`'s client credentials and when to renew it.
    pub(super) async fn token(
        spec: &UpstreamSpecV1,
        http: &reqwest::Client,
    ) -> Result<(String, Instant), UpstreamError> {
        let UpstreamAuthV1::OauthClientCredentials { token_url, client_id, secret, scope } = &spec.auth else {
            return Err(UpstreamError::failed("not OAuth client credentials"));
        };
        let secret_value = resolve(&UpstreamAuthV1::parse(secret)?)?
            .ok_or_else(|| UpstreamError::failed(format!("the client secret {secret} holds nothing")))?;
        let key = key(spec).unwrap_or_default();
        if let Some(kept) = TOKENS.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get(&key) {
            if Instant::now() < kept.renew_at {
                return Ok((kept.token.clone(), kept.renew_at));
            }
        }
        crate::egress::check_url(token_url).await?;
        let mut body = "grant_type=client_credentials".to_string();
        if let Some(scope) = scope {
            body.push_str(&format!("&scope={}", form(scope)));
        }
        let unreachable = |e: reqwest::Error| {
            UpstreamError::failed(format!("the token endpoint {token_url} did not answer: {}", e.without_url()))
        };
        let mut answer = http
            .post(token_url)
            .basic_auth(form(client_id), Some(form(&secret_value)))
            .header(reqwest::header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .header(reqwest::header::ACCEPT, "application/json")
            .body(body)
            .timeout(Duration::from_millis(spec.connect_timeout_ms.saturating_mul(2)))
            .send()
            .await
            .map_err(unreachable)?;
        let status = answer.status();
        let mut bytes = Vec::new();
        while let Some(chunk) = answer.chunk().await.map_err(unreachable)? {
            if bytes.len() + chunk.len() > ANSWER_BYTES_MAX {
                return Err(UpstreamError::failed(format!(
                    "the token endpoint's answer exceeds {ANSWER_BYTES_MAX} bytes"
                )));
            }
            bytes.extend_from_slice(&chunk);
        }
        let json: serde_json::Value = serde_json::from_slice(&bytes).unwrap_or_default();
        if !status.is_success() {
            // RFC 6749 §5.2: `error` (and a description), bounded; never the request.
            let error: String = json["error"].as_str().unwrap_or("no error code").chars().take(64).collect();
            return Err(UpstreamError::failed(format!(
                "the token endpoint {token_url} refused client '{client_id}': HTTP {} {error}",
                status.as_u16()
            )));
        }
        let token = json["access_token"].as_str().unwrap_or_default();
        let bearer = json["token_type"].as_str().is_some_and(|t| t.eq_ignore_ascii_case("bearer"));
        if token.is_empty() || token.len() > TOKEN_BYTES_MAX || !token.bytes().all(|b| b.is_ascii_graphic()) || !bearer
        {
            return Err(UpstreamError::failed(format!(
                "the token endpoint {token_url} answered no bearer access_token (at most {TOKEN_BYTES_MAX} printable bytes)"
            )));
        }
        // A number of seconds (some servers write it as a decimal or a string).
        let expires_in = match &json["expires_in"] {
            serde_json::Value::String(text) => text.parse::<f64>().ok(),
            other => other.as_f64(),
        };
        let lifetime_ms = (expires_in.unwrap_or(LIFETIME_DEFAULT_S as f64) * 1000.0)
            .clamp(1000.0, LIFETIME_MAX_S as f64 * 1000.0) as u64;
        // Renewed a tenth of its life (at most a minute) before it runs out.
        let early = (lifetime_ms / 10).min(60_000);
        let renew_at = Instant::now() + Duration::from_millis(lifetime_ms - early);
        let mut kept = TOKENS.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if kept.len() >= TOKENS_KEPT_MAX {
            kept.clear();
        }
        kept.insert(key, Kept { token: token.to_string(), renew_at });
        Ok((token.to_string(), renew_at))
    }
}

/// The HTTP client for `spec`: its CA bundle alone, if it names one; bounded connects.
fn http_client(spec: &UpstreamSpecV1) -> Result<reqwest::Client, UpstreamError> {
    // Idle connections kept for reuse: as many as calls may be in flight at once, so a busy
    // edge does not reconnect per call.
    // Redirects are never followed and names resolve to public addresses only (`egress`).
    let mut builder = reqwest::Client::builder()
        .connect_timeout(Duration::from_millis(spec.connect_timeout_ms))
        .pool_max_idle_per_host(CALLS_IN_FLIGHT_MAX)
        .redirect(reqwest::redirect::Policy::none())
        .dns_resolver(std::sync::Arc::new(crate::egress::PublicResolver));
    if let Some(ca) = &spec.ca_pem {
        let certs = reqwest::Certificate::from_pem_bundle(ca.as_bytes())
            .map_err(|e| UpstreamError::failed(format!("the upstream's CA bundle does not parse: {e}")))?;
        builder = builder.tls_certs_only(certs);
    }
    builder.build().map_err(|e| UpstreamError::failed(format!("HTTP client: {e}")))
}

/// Lists the upstream's tools over a connection of its own (closed afterwards), as the tool
/// set a sync or a watch records, with the protocol version spoken.
pub async fn observe(
    spec: &UpstreamSpecV1,
) -> Result<(writ_api::upstream::UpstreamToolsV1, Option<String>), Rejection> {
    let connection = connect(spec).await.map_err(|e| e.rejection)?;
    let listed = connection.list_tools().await.map_err(|e| e.rejection);
    let version = connection.protocol_version();
    connection.close().await;
    let tools = listed?.iter().map(writ_api::upstream::UpstreamToolV1::from_mcp).collect::<Result<Vec<_>, _>>()?;
    Ok((writ_api::upstream::UpstreamToolsV1::new(tools, crate::now_ms())?, version))
}

/// Connects to the upstream (`server/discover` or `initialize`, as its protocol says) within
/// its connect timeout.
pub async fn connect(spec: &UpstreamSpecV1) -> Result<Connection, UpstreamError> {
    connect_with(spec, None).await
}

/// A connection for one call that asks for the upstream's log messages at `level` and above
/// (an MCP level name), which go to the receiver: MCP ties a message to no request, so only a
/// connection of its own tells whose it is. Its calls carry the level in `_meta` (2026-07-28);
/// a 2025-11-25 session is set to it with `logging/setLevel`.
pub async fn connect_for_logs(
    spec: &UpstreamSpecV1,
    level: &str,
) -> Result<(Connection, tokio::sync::mpsc::Receiver<LogMessage>), UpstreamError> {
    let (tx, rx) = tokio::sync::mpsc::channel(LOGS_QUEUED_MAX);
    let mut connection = connect_with(spec, Some(tx)).await?;
    #[allow(deprecated)] // MCP logging is deprecated (SEP-2577), still what upstreams send
    if connection.protocol_version().as_deref() == Some("2025-11-25") {
        let level: rmcp::model::LoggingLevel = serde_json::from_value(Value::String(level.to_string()))
            .map_err(|_| UpstreamError::failed(format!("'{level}' is no log level")))?;
        let params = rmcp::model::SetLevelRequestParams::new(level);
        let set = tokio::time::timeout(connection.call_timeout, connection.service.peer().set_level(params));
        // An upstream that does not log still serves the call.
        let _ = set.await;
    }
    connection.log_level = Some(level.to_string());
    Ok((connection, rx))
}

async fn connect_with(
    spec: &UpstreamSpecV1,
    logs: Option<tokio::sync::mpsc::Sender<LogMessage>>,
) -> Result<Connection, UpstreamError> {
    crate::egress::check_url(&spec.url).await?;
    let http = http_client(spec)?;
    let (bearer, renew_at) = match &spec.auth {
        UpstreamAuthV1::OauthClientCredentials { .. } => {
            let (token, renew_at) = oauth::token(spec, &http).await?;
            (Some(token), Some(renew_at))
        }
        reference => (resolve(reference)?, None),
    };
    let mut config = StreamableHttpClientTransportConfig::with_uri(spec.url.clone());
    config.allow_stateless = true;
    config.max_json_response_size = UPSTREAM_RESULT_BYTES_MAX;
    config.max_sse_event_size = UPSTREAM_RESULT_BYTES_MAX;
    config.reinit_on_expired_session = true;
    config.max_concurrent_requests = CALLS_IN_FLIGHT_MAX;
    if let Some(token) = bearer {
        config = config.auth_header(token);
    }
    let transport = StreamableHttpClientTransport::with_client(http, config);
    let modern = vec![ProtocolVersion::V_2026_07_28];
    let lifecycle = match spec.protocol {
        UpstreamProtocol::V2026_07_28 => ClientLifecycleMode::Discover { preferred_versions: modern },
        UpstreamProtocol::V2025_11_25 => ClientLifecycleMode::Initialize,
        UpstreamProtocol::Auto => ClientLifecycleMode::Auto {
            preferred_versions: modern,
            legacy_version: Some(ProtocolVersion::V_2025_11_25),
        },
    };
    let info =
        ClientConfig::new(ClientCapabilities::default(), Implementation::new("writ-edge", env!("CARGO_PKG_VERSION")))
            .with_protocol_version(ProtocolVersion::V_2025_11_25);
    let progress = ProgressDispatcher::new();
    let relay = Relay { info, progress: progress.clone() };
    // `auto` may wait for a discover answer before it falls back: bound the whole handshake.
    let handshake = Duration::from_millis(spec.connect_timeout_ms.saturating_mul(2));
    let serving = async {
        match logs {
            Some(logs) => relay.serve_with_lifecycle(LogTap { inner: transport, logs }, lifecycle).await,
            None => relay.serve_with_lifecycle(transport, lifecycle).await,
        }
    };
    let service = tokio::time::timeout(handshake, serving)
        .await
        .map_err(|_| UpstreamError::failed(format!("no handshake with the upstream within {handshake:?}")))?
        .map_err(|e| {
            // A token the upstream no longer takes is not asked for again from the cache.
            oauth::forget(spec);
            UpstreamError::failed(format!("handshake with the upstream failed: {e}"))
        })?;
    let call_timeout = Duration::from_millis(spec.call_timeout_ms);
    Ok(Connection { service, progress, call_timeout, log_level: None, renew_at })
}

impl Connection {
    /// The protocol version the upstream and Writ agreed on.
    pub fn protocol_version(&self) -> Option<String> {
        self.service.peer_info().map(|i| i.protocol_version.to_string())
    }

    /// Whether the connection is gone (its worker ended) or its access token is due for
    /// renewal: it must be replaced.
    pub fn is_closed(&self) -> bool {
        self.service.is_closed() || self.renew_at.is_some_and(|at| std::time::Instant::now() >= at)
    }

    /// Every tool the upstream lists (as MCP `Tool` JSON objects), following cursors, at most
    /// [`UPSTREAM_TOOLS_MAX`] tools and [`LIST_PAGES_MAX`] pages.
    pub async fn list_tools(&self) -> Result<Vec<Value>, UpstreamError> {
        let work = async {
            let mut tools = Vec::new();
            let mut cursor = None;
            for _ in 0..LIST_PAGES_MAX {
                let params = cursor.take().map(|c| rmcp::model::PaginatedRequestParams::default().with_cursor(Some(c)));
                let page = self
                    .service
                    .peer()
                    .list_tools(params)
                    .await
                    .map_err(|e| UpstreamError::failed(format!("tools/list failed: {e}")))?;
                for tool in &page.tools {
                    tools.push(serde_json::to_value(tool).map_err(|e| UpstreamError::failed(e.to_string()))?);
                }
                if tools.len() > UPSTREAM_TOOLS_MAX {
                    return Err(Rejection::new(
                        ReasonCode::UPSTREAM_INVALID,
                        format!("the upstream lists more than {UPSTREAM_TOOLS_MAX} tools"),
                    )
                    .into());
                }
                match page.next_cursor {
                    Some(c) if !c.is_empty() => cursor = Some(c),
                    _ => return Ok(tools),
                }
            }
            Err(UpstreamError::failed(format!("tools/list did not end within {LIST_PAGES_MAX} pages")))
        };
        tokio::time::timeout(self.call_timeout, work)
            .await
            .map_err(|_| UpstreamError::failed(format!("tools/list took longer than {:?}", self.call_timeout)))?
    }

    /// Calls `tool` with `arguments` (and `meta` as the request's `_meta`), within the call
    /// timeout and `deadline` (the request's own), and returns the `CallToolResult` as JSON;
    /// the upstream's progress notifications go to `progress` as they come. A result that asks
    /// for input or becomes a task is not relayed (a failure of the upstream, for now). A call
    /// cut off by its timeout, or dropped by its caller, is cancelled upstream.
    pub async fn call(
        &self,
        tool: &str,
        arguments: serde_json::Map<String, Value>,
        meta: Option<serde_json::Map<String, Value>>,
        deadline: Option<Duration>,
        progress: Option<tokio::sync::mpsc::Sender<Progress>>,
    ) -> Result<Value, UpstreamError> {
        let limit = deadline.map_or(self.call_timeout, |d| d.min(self.call_timeout));
        let mut params = CallToolRequestParams::new(tool.to_string()).with_arguments(arguments);
        let mut meta = meta.unwrap_or_default();
        if let Some(level) = &self.log_level {
            meta.insert(META_LOG_LEVEL.into(), Value::String(level.clone()));
        }
        if !meta.is_empty() {
            params.meta = Some(rmcp::model::RequestMetaObject(rmcp::model::MetaObject(meta)));
        }
        let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
        let mut handle = self
            .service
            .peer()
            .send_request_with_option(request, PeerRequestOptions::no_options())
            .await
            .map_err(|e| UpstreamError::failed(format!("tools/call could not be sent: {e}")))?;
        let rx = std::mem::replace(&mut handle.rx, tokio::sync::oneshot::channel().1);
        let mut subscribed = match &progress {
            Some(_) => Some(self.progress.subscribe(handle.progress_token.clone()).await),
            None => None,
        };
        let mut pending = CancelOnDrop(Some(handle));
        let relay = async {
            let mut rx = rx;
            loop {
                let next = async {
                    match subscribed.as_mut() {
                        Some(s) => futures::StreamExt::next(s).await,
                        None => std::future::pending().await,
                    }
                };
                tokio::select! {
                    answer = &mut rx => return answer,
                    Some(p) = next => {
                        if let Some(tx) = &progress {
                            let _ = tx.try_send(Progress { progress: p.progress, total: p.total, message: p.message });
                        }
                    }
                }
            }
        };
        let answer = tokio::time::timeout(limit, relay)
            .await
            .map_err(|_| UpstreamError::failed(format!("the upstream did not answer within {limit:?}")).unanswered())?;
        // Answered (or the connection ended): nothing to cancel.
        pending.0 = None;
        let answer =
            answer.map_err(|_| UpstreamError::failed("the upstream connection closed during the call").unanswered())?;
        match answer {
            Ok(ServerResult::CallToolResult(result)) => {
                serde_json::to_value(&result).map_err(|e| UpstreamError::failed(e.to_string()))
            }
            Ok(ServerResult::InputRequiredResult(_)) => {
                Err(UpstreamError::failed("the upstream asked for client input, which Writ does not relay yet"))
            }
            Ok(ServerResult::CreateTaskResult(_)) => Err(UpstreamError::failed("the upstream answered with a task")),
            Ok(_) => Err(UpstreamError::failed("the upstream answered tools/call with another kind of result")),
            Err(rmcp::ServiceError::McpError(e)) => {
                let counts = e.code != rmcp::model::ErrorCode::INVALID_PARAMS;
                let message = format!("the upstream answered error {}: {}", e.code.0, e.message);
                Err(UpstreamError {
                    rejection: Rejection::new(ReasonCode::UPSTREAM_FAILED, message),
                    counts,
                    unanswered: false,
                })
            }
            Err(e) if too_large(&e) => Err(UpstreamError {
                rejection: Rejection::new(
                    ReasonCode::OUTPUT_INVALID,
                    format!("the upstream's result exceeds {UPSTREAM_RESULT_BYTES_MAX} bytes"),
                ),
                counts: false,
                unanswered: true,
            }),
            // A transport failure after the request was handed over.
            Err(e) => Err(UpstreamError::failed(format!("tools/call failed: {e}")).unanswered()),
        }
    }

    /// Ends the connection (a 2025-11-25 session is closed by dropping the transport).
    pub async fn close(self) {
        let _ = self.service.cancel().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credential_references_resolve_here_and_errors_never_hold_the_token() {
        assert_eq!(resolve(&UpstreamAuthV1::None).unwrap(), None);
        let file = tempfile_path("upstream-token");
        std::fs::write(&file, "s3cr3t-token\n").unwrap();
        let by_file = UpstreamAuthV1::BearerFile { path: file.display().to_string() };
        assert_eq!(resolve(&by_file).unwrap().as_deref(), Some("s3cr3t-token"));
        std::fs::write(&file, "two words").unwrap();
        let refused = resolve(&by_file).unwrap_err();
        assert_eq!(refused.reason, ReasonCode::UPSTREAM_FAILED);
        assert!(!refused.message.contains("two words"), "{}", refused.message);
        std::fs::remove_file(&file).unwrap();
        assert!(resolve(&by_file).unwrap_err().message.contains(&file.display().to_string()));
        let unset = UpstreamAuthV1::BearerEnv { var: "WRIT_UPSTREAM_TEST_UNSET".into() };
        assert!(resolve(&unset).unwrap_err().message.contains("env:WRIT_UPSTREAM_TEST_UNSET"));
    }

    fn tempfile_path(name: &str) -> std::path::PathBuf {
        std::env::temp_dir().join(format!("{name}-{}", std::process::id()))
    }
}
