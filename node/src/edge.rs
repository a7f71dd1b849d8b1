//! `writ edge --config edge.toml`: a stateless MCP edge replica in front of a ledger cluster,
//! and the embedded edge of `writ dev`. Any number of edges can serve the same cluster; each
//! follows the ledger through its watch stream (see `writ_client::verifier`).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use tokio::net::TcpListener;
use writ_client::verifier::Verifier;
use writ_client::{HttpLedger, Ledger};
use writ_mcp_edge::audit::AuditSink;
use writ_mcp_edge::seal::SealKey;
use writ_mcp_edge::{AnonymousAccess, EdgeConfig};

use crate::config::ConfigError;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEdgeConfig {
    listen: Option<String>,
    /// Where spans go over OTLP/HTTP (the collector's base URL).
    otlp_endpoint: Option<String>,
    /// Seconds between this edge's looks at every upstream MCP server's tools (drift recorded
    /// as pending; `writ_mcp_edge::drift`); 0: never. Default 300.
    upstream_watch_s: Option<u64>,
    /// `/healthz`, `/readyz`, `/metrics` over plain HTTP on their own address (optional).
    probe_listen: Option<String>,
    /// The canonical URI clients use (and tokens name as audience); default
    /// `https://<listen>/mcp` with `[tls]`, `http://<listen>/mcp` without.
    canonical_url: Option<String>,
    /// Where the other edge replicas reach this one's `/mcp` (default: the listen address,
    /// unless it is unspecified): a client response of the 2025 wire that lands on another
    /// replica is forwarded here, to the call waiting for it.
    peer_url: Option<String>,
    /// The MCP listener's certificate (`writ pki issue edge NAME --host …`): `/mcp` over HTTPS.
    tls: Option<RawCertKey>,
    /// The audiences Writ tokens may name here (default: the canonical URL and the cluster's
    /// audience `urn:writ:mcp`, so a token issued without `--audience` works at every edge).
    token_audiences: Option<Vec<String>>,
    /// Plain HTTP off loopback, behind a TLS-terminating proxy: only these addresses may
    /// connect, and only their `X-Forwarded-Host` is honoured.
    #[serde(default)]
    trusted_proxies: Vec<String>,
    /// Ledger node URLs (client API, https).
    #[serde(default)]
    ledger: Vec<String>,
    /// Node admin API URLs, where executor enrollments are forwarded (default: `ledger`, for
    /// nodes serving `/v1` on their peer listener).
    admin: Option<Vec<String>>,
    /// This edge's credential toward the nodes (`writ pki issue edge NAME`) and the cluster CA.
    ledger_tls: Option<crate::config::TlsConfig>,
    #[serde(default)]
    allowed_hosts: Vec<String>,
    #[serde(default)]
    allowed_origins: Vec<String>,
    /// The key file for MRTR request state and cursors (hex, created 0600 when missing): every
    /// edge replica of a deployment must use the same key.
    seal_key_file: Option<String>,
    /// Loopback-only anonymous access: requests without a token act as this principal.
    anonymous: Option<RawAnonymous>,
    /// The mutual-TLS endpoint for site executors.
    executor: Option<RawExecutorEndpoint>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawExecutorEndpoint {
    listen: String,
    /// Read only to say it is gone: the endpoint serves with the edge's cluster credential.
    tls_secret_file: Option<String>,
    /// Host names and IPs in the endpoint's certificate (default: the listen IP, `localhost`).
    #[serde(default)]
    hosts: Vec<String>,
    /// The URL executors use (default `https://<listen>`).
    url: Option<String>,
    /// Seconds over which handshakes refused at TLS are audited as one aggregate per claimed
    /// tenant (default 60).
    refusal_window_s: Option<u64>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawCertKey {
    pub cert: PathBuf,
    pub key: PathBuf,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAnonymous {
    tenant: String,
    principal: String,
}

/// A validated edge configuration.
#[derive(Debug, Clone)]
pub struct EdgeFileConfig {
    pub listen: SocketAddr,
    pub otlp_endpoint: Option<String>,
    pub upstream_watch: Duration,
    pub token_audiences: Option<Vec<String>>,
    pub probe_listen: Option<SocketAddr>,
    pub tls: Option<RawCertKey>,
    pub trusted_proxies: Vec<std::net::IpAddr>,
    pub canonical_url: Option<String>,
    pub peer_url: Option<String>,
    pub ledger: Vec<String>,
    pub admin: Vec<String>,
    pub ledger_tls: crate::config::TlsConfig,
    pub allowed_hosts: Vec<String>,
    pub allowed_origins: Vec<String>,
    pub seal_key_file: PathBuf,
    pub anonymous: Option<AnonymousAccess>,
    pub executor: Option<ExecutorEndpointOptions>,
}

/// Where and how an edge serves executors.
#[derive(Debug, Clone)]
pub struct ExecutorEndpointOptions {
    pub listen: SocketAddr,
    /// See `RawExecutorEndpoint::tls_secret_file`; `None` with the edge's cluster credential.
    pub tls_secret_file: Option<PathBuf>,
    pub hosts: Vec<String>,
    pub url: Option<String>,
    /// Audit window of TLS refusals ([`writ_mcp_edge::executors::TLS_REFUSAL_WINDOW`] by default).
    pub refusal_window: std::time::Duration,
}

impl EdgeFileConfig {
    pub fn load(path: &Path, env: &dyn Fn(&str) -> Option<String>) -> Result<EdgeFileConfig, ConfigError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| ConfigError::Read { path: path.display().to_string(), message: e.to_string() })?;
        Self::parse(&text, env)
    }

    pub fn parse(text: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<EdgeFileConfig, ConfigError> {
        let mut raw: RawEdgeConfig = toml::from_str(text).map_err(|e| ConfigError::Parse(e.to_string()))?;
        if let Some(v) = env("WRIT_EDGE_LISTEN") {
            raw.listen = Some(v);
        }
        if let Some(v) = env("WRIT_EDGE_URL") {
            raw.canonical_url = Some(v);
        }
        if let Some(v) = env("WRIT_EDGE_PROBE_LISTEN") {
            raw.probe_listen = Some(v);
        }
        if let Some(v) = env("WRIT_OTLP_ENDPOINT") {
            raw.otlp_endpoint = Some(v);
        }
        let listen_text = raw.listen.ok_or(ConfigError::Missing("listen", "EDGE_LISTEN"))?;
        let listen = crate::config::socket_addr("listen", &listen_text)?;
        let probe_listen = raw.probe_listen.map(|a| crate::config::socket_addr("probe_listen", &a)).transpose()?;
        let mut trusted_proxies = Vec::new();
        for p in &raw.trusted_proxies {
            trusted_proxies.push(p.parse().map_err(|_| ConfigError::Invalid {
                field: "trusted_proxies",
                message: format!("'{p}' is not an IP address"),
            })?);
        }
        if !listen.ip().is_loopback() && raw.tls.is_none() && trusted_proxies.is_empty() {
            return Err(ConfigError::TlsRequiredOutsideLoopback { listen });
        }
        if raw.ledger.is_empty() || raw.ledger.iter().any(|u| !u.starts_with("https://")) {
            return Err(ConfigError::Invalid { field: "ledger", message: "list at least one https node URL".into() });
        }
        let admin = raw.admin.unwrap_or_else(|| raw.ledger.clone());
        if admin.is_empty() || admin.iter().any(|u| !u.starts_with("https://")) {
            return Err(ConfigError::Invalid { field: "admin", message: "list at least one https admin URL".into() });
        }
        let ledger_tls = raw.ledger_tls.ok_or_else(|| ConfigError::Invalid {
            field: "ledger_tls",
            message: "[ledger_tls] cert, key and ca are required: nodes serve their client API only to a certificate naming an edge (`writ pki issue edge NAME`)".into(),
        })?;
        for (field, url) in [("canonical_url", &raw.canonical_url), ("peer_url", &raw.peer_url)] {
            if url.as_ref().is_some_and(|u| !(u.starts_with("http://") || u.starts_with("https://"))) {
                return Err(ConfigError::Invalid { field, message: "must be an http(s) URL".into() });
            }
        }
        if let Some(v) = env("WRIT_EDGE_SEAL_KEY_FILE") {
            raw.seal_key_file = Some(v);
        }
        let seal_key_file = raw.seal_key_file.ok_or(ConfigError::Missing("seal_key_file", "EDGE_SEAL_KEY_FILE"))?;
        let executor = match raw.executor {
            None => None,
            Some(x) if x.tls_secret_file.is_some() => {
                return Err(ConfigError::Invalid {
                    field: "executor.tls_secret_file",
                    message: "no longer read: the endpoint serves with the edge's cluster credential ([tls], else \
                              [ledger_tls]), whose CA enrollment tokens pin; remove the setting"
                        .into(),
                })
            }
            Some(x) => Some(ExecutorEndpointOptions {
                listen: x.listen.parse().map_err(|_| ConfigError::Invalid {
                    field: "executor.listen",
                    message: format!("'{}' is not ip:port", x.listen),
                })?,
                tls_secret_file: None,
                hosts: x.hosts,
                url: x.url,
                refusal_window: x
                    .refusal_window_s
                    .map_or(writ_mcp_edge::executors::TLS_REFUSAL_WINDOW, std::time::Duration::from_secs),
            }),
        };
        if let Some(a) = &raw.token_audiences {
            if a.is_empty() || a.iter().any(|a| a.is_empty() || a.len() > writ_api::token::ISSUER_BYTES_MAX) {
                return Err(ConfigError::Invalid {
                    field: "token_audiences",
                    message: "list 1 or more audiences of 1..=512 bytes".into(),
                });
            }
        }
        Ok(EdgeFileConfig {
            listen,
            otlp_endpoint: crate::config::otlp_endpoint(raw.otlp_endpoint)?,
            upstream_watch: Duration::from_secs(raw.upstream_watch_s.unwrap_or(writ_mcp_edge::drift::WATCH_S_DEFAULT)),
            token_audiences: raw.token_audiences,
            probe_listen,
            tls: raw.tls,
            trusted_proxies,
            canonical_url: raw.canonical_url,
            peer_url: raw.peer_url,
            ledger: raw.ledger,
            admin,
            ledger_tls,
            allowed_hosts: raw.allowed_hosts,
            allowed_origins: raw.allowed_origins,
            seal_key_file: PathBuf::from(seal_key_file),
            anonymous: raw.anonymous.map(|a| AnonymousAccess { tenant: a.tenant, principal: a.principal }),
            executor,
        })
    }
}

/// An edge serving on its listener.
pub struct RunningEdge {
    pub url: String,
    pub local_addr: SocketAddr,
    /// Where `/healthz`, `/readyz`, `/metrics` are served on their own listener, if configured.
    pub probe_url: Option<String>,
    /// The executor endpoint's URL and the CA its certificate chains to (PEM), when served.
    pub executor_endpoint: Option<(String, String)>,
    drain: crate::tls::Drain,
    servers: Vec<tokio::task::JoinHandle<()>>,
    audit: AuditSink,
}

impl RunningEdge {
    /// An orderly stop: no new connections, in-flight requests finish (up to
    /// [`crate::DRAIN_DEADLINE`]), then the request decisions still buffered are committed.
    pub async fn shutdown(self) {
        self.drain.start();
        for s in self.servers {
            let _ = s.await;
        }
        self.audit.flush(writ_mcp_edge::audit::SHUTDOWN_FLUSH_MAX).await;
    }
}

/// What an edge serves besides its defaults.
#[derive(Debug, Clone)]
pub struct EdgeOptions {
    pub listen: SocketAddr,
    /// Audiences Writ tokens may name; `None`: the canonical URL and
    /// [`crate::config::TOKEN_AUDIENCE_DEFAULT`].
    pub token_audiences: Option<Vec<String>>,
    pub probe_listen: Option<SocketAddr>,
    /// `/mcp` over HTTPS with this credential (also the executor endpoint's certificate);
    /// `cluster_ca_pem` is what executors are told to trust then.
    pub tls: Option<Arc<writ_client::tls::CredentialFiles>>,
    /// The edge's cluster credential (`[ledger_tls]`): the executor endpoint's certificate when
    /// `/mcp` has none of its own, so executors always trust the cluster CA, which the nodes'
    /// enrollment tokens pin.
    pub ledger_credential: Option<Arc<writ_client::tls::CredentialFiles>>,
    pub cluster_ca_pem: Option<String>,
    /// Plain HTTP behind these TLS-terminating proxies only.
    pub trusted_proxies: Vec<std::net::IpAddr>,
    pub canonical_url: Option<String>,
    /// See `RawEdgeConfig::peer_url`.
    pub peer_url: Option<String>,
    pub allowed_hosts: Vec<String>,
    pub allowed_origins: Vec<String>,
    pub seal_key: SealKey,
    pub anonymous: Option<AnonymousAccess>,
    /// The tenant that sees the conformance resources and prompts.
    pub fixtures_tenant: Option<String>,
    /// This edge's name in the ledger's upstream fuse records: its certificate's edge id under
    /// `writ edge`; by default the address it listens on (unique per replica).
    pub edge_id: Option<String>,
    pub executor: Option<ExecutorEndpointOptions>,
    /// Admin API base URLs of ledger nodes, where executor enrollments are forwarded.
    pub admin_urls: Vec<String>,
    /// Between the looks at every upstream's tools (`writ_mcp_edge::drift`); zero: never.
    pub upstream_watch: Duration,
    /// How the enrollment forwarder reaches them (the cluster CA; this edge's credential).
    pub admin_tls: Option<writ_client::ClientTls>,
}

impl EdgeOptions {
    pub fn new(listen: SocketAddr, seal_key: SealKey) -> EdgeOptions {
        EdgeOptions {
            listen,
            token_audiences: None,
            probe_listen: None,
            tls: None,
            ledger_credential: None,
            cluster_ca_pem: None,
            trusted_proxies: Vec::new(),
            canonical_url: None,
            peer_url: None,
            allowed_hosts: Vec::new(),
            allowed_origins: Vec::new(),
            seal_key,
            anonymous: None,
            fixtures_tenant: None,
            edge_id: None,
            executor: None,
            admin_urls: Vec::new(),
            upstream_watch: Duration::from_secs(writ_mcp_edge::drift::WATCH_S_DEFAULT),
            admin_tls: None,
        }
    }
}

/// Reads a 32-byte hex secret shared by the edges of a deployment, creating a random one (0600)
/// on first use.
pub fn load_or_create_secret(path: &Path) -> Result<[u8; 32], String> {
    let parse = |text: &str| -> Result<[u8; 32], String> {
        let bytes = hex::decode(text.trim()).map_err(|e| format!("{}: {e}", path.display()))?;
        bytes.try_into().map_err(|_| format!("{}: the secret must be 32 bytes (64 hex digits)", path.display()))
    };
    match std::fs::read_to_string(path) {
        Ok(text) if !text.trim().is_empty() => parse(&text),
        Ok(_) => {
            // A replica that won the create race has not written yet.
            std::thread::sleep(std::time::Duration::from_millis(50));
            parse(&std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            use std::io::Write;
            use std::os::unix::fs::OpenOptionsExt;
            let bytes: [u8; 32] = rand::random();
            // create_new: when two replicas start at once, the second reads the first one's secret.
            match std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(path) {
                Ok(mut f) => {
                    f.write_all(format!("{}\n", writ_api::hex(&bytes)).as_bytes())
                        .map_err(|e| format!("{}: {e}", path.display()))?;
                    Ok(bytes)
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    std::thread::sleep(std::time::Duration::from_millis(50));
                    load_or_create_secret(path)
                }
                Err(e) => Err(format!("{}: {e}", path.display())),
            }
        }
        Err(e) => Err(format!("{}: {e}", path.display())),
    }
}

/// Reads the edge's seal key, creating a random one (0600) on first use.
pub fn load_or_create_seal_key(path: &Path) -> Result<SealKey, String> {
    load_or_create_secret(path).map(SealKey::new)
}

/// Longest an edge holds its first connections while its replica of the ledger loads.
const REPLICA_WAIT_MAX: std::time::Duration = std::time::Duration::from_secs(10);

/// Deadline of one forwarded enrollment or renewal.
const ADMIN_FORWARD_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// Ledger nodes' admin API base URLs and the client that reaches them (the cluster CA; this
/// edge's credential): where executor enrollments and renewals are forwarded.
struct AdminForwarder {
    urls: Vec<String>,
    http: reqwest::Client,
}

fn unavailable_response(msg: String) -> axum::response::Response {
    use axum::response::IntoResponse;
    writ_tenant_admin::error::ApiError(writ_client::unavailable(msg)).into_response()
}

impl AdminForwarder {
    /// POSTs `body` to `path` of the first node that answers: its answer (a reason-coded
    /// refusal goes back as it is), or `LEDGER_UNAVAILABLE` when none does.
    async fn post(&self, path: &str, body: axum::body::Bytes) -> Result<axum::body::Bytes, axum::response::Response> {
        use axum::response::IntoResponse;
        let mut last = String::from("no ledger node is configured");
        for base in &self.urls {
            let sent = self
                .http
                .post(format!("{base}{path}"))
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(body.clone())
                .send()
                .await;
            let r = match sent {
                Ok(r) => r,
                Err(e) => {
                    last = e.to_string();
                    continue;
                }
            };
            let status =
                axum::http::StatusCode::from_u16(r.status().as_u16()).unwrap_or(axum::http::StatusCode::BAD_GATEWAY);
            let bytes = r.bytes().await.unwrap_or_default();
            if !status.is_success() {
                return Err((status, [(axum::http::header::CONTENT_TYPE, "application/json")], bytes).into_response());
            }
            return Ok(bytes);
        }
        Err(unavailable_response(format!("no ledger node answered: {last}")))
    }
}

/// `POST /executor/v1/enroll` on the MCP listener: forwards the enrollment (token + CSR; no key
/// ever) to a ledger node's admin API and adds where the executor endpoint is and which CA its
/// certificate chains to.
async fn forward_enrollment(
    admin: Arc<AdminForwarder>,
    endpoint: Option<(String, String)>,
    body: axum::body::Bytes,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let Some((executor_url, edge_ca)) = endpoint else {
        let refused = writ_api::Rejection::new(
            writ_api::ReasonCode::EXECUTOR_UNAVAILABLE,
            "this edge serves no executor endpoint",
        );
        return writ_tenant_admin::error::ApiError(refused).into_response();
    };
    let bytes = match admin.post(writ_api::executor::ADMIN_ENROLL_PATH, body).await {
        Ok(bytes) => bytes,
        Err(refused) => return refused,
    };
    match serde_json::from_slice::<writ_api::dto::EnrollResponse>(&bytes) {
        Ok(enrolled) => axum::Json(writ_api::executor::ExecutorEnrollment {
            enrolled,
            executor_urls: vec![executor_url],
            edge_ca_certificate: edge_ca,
        })
        .into_response(),
        Err(e) => unavailable_response(format!("unexpected enrollment answer: {e}")),
    }
}

/// Binds and serves an edge following `ledger`.
pub async fn start_edge(options: EdgeOptions, ledger: Arc<dyn Ledger>) -> std::io::Result<RunningEdge> {
    if options.anonymous.is_some() && !options.listen.ip().is_loopback() {
        return Err(std::io::Error::other("anonymous mode binds only loopback addresses"));
    }
    if !options.listen.ip().is_loopback() && options.tls.is_none() && options.trusted_proxies.is_empty() {
        return Err(std::io::Error::other(
            "off loopback an edge serves HTTPS, or plain HTTP only behind trusted proxies",
        ));
    }
    let listener = TcpListener::bind(options.listen).await?;
    let local_addr = listener.local_addr()?;
    writ_client::egress::register_own_listener(local_addr);
    let scheme = if options.tls.is_some() { "https" } else { "http" };
    let url = options.canonical_url.unwrap_or_else(|| format!("{scheme}://{local_addr}/mcp"));
    let mut config = EdgeConfig::for_url(&url, options.seal_key);
    config.allowed_hosts.extend(options.allowed_hosts.into_iter().map(|h| h.to_ascii_lowercase()));
    config.allowed_origins = options.allowed_origins;
    if let Some(anon) = options.anonymous {
        config = config.with_anonymous(anon);
    }
    config.fixtures_tenant = options.fixtures_tenant;
    config.edge_id = options.edge_id.unwrap_or_else(|| local_addr.to_string());
    config.peer_url = options.peer_url.or_else(|| {
        let path = config.mcp_path();
        (!local_addr.ip().is_unspecified()).then(|| format!("{scheme}://{local_addr}{path}"))
    });
    let audiences =
        options.token_audiences.unwrap_or_else(|| vec![url.clone(), crate::config::TOKEN_AUDIENCE_DEFAULT.to_string()]);
    let verifier = Verifier::follow_with(ledger.clone(), audiences, writ_client::verifier::STALENESS_MAX_DEFAULT);
    let audit = AuditSink::start(ledger.clone());
    let metrics = crate::observe::start_server_metrics();
    let drain = crate::tls::Drain::default();
    let drain_handle = drain.clone();
    let mut servers = Vec::new();
    let mut http = reqwest::Client::builder().no_proxy().timeout(ADMIN_FORWARD_TIMEOUT);
    if let Some(t) = &options.admin_tls {
        http = t.apply(http);
    }
    let admin =
        Arc::new(AdminForwarder { urls: options.admin_urls, http: http.build().map_err(std::io::Error::other)? });
    let to_admin = admin_forward(admin.clone());
    let executor_endpoint = match &options.executor {
        None => None,
        Some(x) => {
            let credential = options.tls.as_ref().or(options.ledger_credential.as_ref());
            let tls = executor_endpoint_tls(credential, options.cluster_ca_pem.as_ref(), x)?;
            let listener = TcpListener::bind(x.listen).await?;
            let addr = listener.local_addr()?;
            writ_client::egress::register_own_listener(addr);
            let executor_url = x.url.clone().unwrap_or_else(|| format!("https://{addr}"));
            let gate = writ_mcp_edge::executors::ExecutorGate::new(
                ledger.clone(),
                verifier.clone(),
                audit.clone(),
                (config.edge_id.clone(), x.refusal_window),
                Some(to_admin.clone()),
            );
            let ca_pem = tls.ca_pem.clone();
            servers.push(tokio::spawn(crate::executor_tls::serve(listener, tls, gate, drain.clone())));
            tracing::info!(url = %executor_url, "executor endpoint serving (mutual TLS)");
            Some((executor_url, ca_pem))
        }
    };
    let endpoint = executor_endpoint.clone();
    let lagging = verifier.clone();
    let metrics_route = axum::routing::get(move || {
        let metrics = metrics.clone();
        crate::observe::build_info("edge");
        metrics::gauge!("writ_verifier_revision").set(lagging.revision() as f64);
        let held = lagging.with_state(|s| s.operations.values().map(|m| m.len()).sum::<usize>());
        metrics::gauge!("writ_verifier_operations").set(held as f64);
        let staleness = lagging.staleness().map_or(f64::INFINITY, |d| d.as_secs_f64());
        metrics::gauge!("writ_verifier_staleness_seconds").set(staleness);
        async move { metrics.map(|h| h.render()).unwrap_or_default() }
    });
    let probe_url = match options.probe_listen {
        None => None,
        Some(addr) => {
            let probes = writ_mcp_edge::probes(verifier.clone()).route("/metrics", metrics_route.clone());
            let accept = crate::tls::Accept::plain("edge-probe");
            let (bound, task) = crate::tls::spawn(addr, probes, accept, &drain, crate::DRAIN_DEADLINE).await?;
            servers.push(task);
            Some(format!("http://{bound}"))
        }
    };
    let replica = verifier.clone();
    let drift = writ_mcp_edge::drift::watch(verifier.clone(), ledger.clone(), options.upstream_watch, drain.started());
    servers.push(tokio::spawn(drift));
    // Beside `/mcp`, under the same Host and Origin rules.
    let metrics_route = writ_mcp_edge::host_checked(metrics_route, &config);
    let enroll_route = writ_mcp_edge::host_checked(
        axum::routing::post(move |body: axum::body::Bytes| forward_enrollment(admin.clone(), endpoint.clone(), body)),
        &config,
    );
    let app = writ_mcp_edge::router_with(ledger, verifier, audit.clone(), config, Some(to_admin))
        .map_err(std::io::Error::other)?
        .route("/metrics", metrics_route)
        .route(writ_api::executor::ENROLL_PATH, enroll_route);
    let accept = crate::tls::Accept {
        tls: match options.tls {
            Some(credential) => Some(
                crate::tls::ServerTls::new(credential, None, crate::tls::ClientAuth::None)
                    .map_err(std::io::Error::other)?,
            ),
            None => None,
        },
        trusted_proxies: (!options.trusted_proxies.is_empty()).then(|| Arc::new(options.trusted_proxies)),
        name: "mcp",
    };
    // Connections are accepted once the replica of the ledger has loaded (up to
    // REPLICA_WAIT_MAX; they wait in the listen backlog meanwhile), so a restarted edge answers
    // its first requests instead of refusing them as not current.
    servers.push(tokio::spawn(async move {
        replica.loaded(REPLICA_WAIT_MAX).await;
        crate::tls::serve(listener, app, accept, drain, crate::DRAIN_DEADLINE).await
    }));
    crate::alloc::start_releasing_free_memory();
    tracing::info!(%url, allocator = crate::alloc::in_use(), "edge serving");
    Ok(RunningEdge { url, local_addr, probe_url, executor_endpoint, drain: drain_handle, servers, audit })
}

/// The executor endpoint's server TLS: the edge's cluster credential and CA when it has them,
/// else a certificate derived from the endpoint's own secret for its host names.
fn executor_endpoint_tls(
    credential: Option<&Arc<writ_client::tls::CredentialFiles>>,
    cluster_ca_pem: Option<&String>,
    x: &ExecutorEndpointOptions,
) -> std::io::Result<crate::executor_tls::EdgeTls> {
    Ok(match (credential, cluster_ca_pem) {
        (Some(credential), Some(ca)) => crate::executor_tls::EdgeTls::cluster(credential.clone(), ca.clone()),
        _ => {
            let mut hosts = x.hosts.clone();
            if hosts.is_empty() {
                hosts = vec![x.listen.ip().to_string(), "localhost".to_string()];
            }
            let secret = x.tls_secret_file.as_ref().ok_or_else(|| {
                std::io::Error::other("executor.tls_secret_file is required without the edge's cluster credential")
            })?;
            crate::executor_tls::EdgeTls::derived(secret, &hosts).map_err(std::io::Error::other)?
        }
    })
}

/// What the executor API forwards to the nodes' admin API (enrollments, renewals), answered
/// with the node's JSON or its refusal.
fn admin_forward(forwarder: Arc<AdminForwarder>) -> writ_mcp_edge::executors::AdminForward {
    Arc::new(move |path: &'static str, body: axum::body::Bytes| {
        let forwarder = forwarder.clone();
        Box::pin(async move {
            use axum::response::IntoResponse;
            match forwarder.post(path, body).await {
                Ok(bytes) => ([(axum::http::header::CONTENT_TYPE, "application/json")], bytes).into_response(),
                Err(refused) => refused,
            }
        })
    })
}

/// `writ edge --config FILE`.
pub async fn run(config: &Path) -> Result<(), String> {
    let cfg =
        EdgeFileConfig::load(config, &|k| std::env::var(k).ok()).map_err(|e| format!("{}: {e}", config.display()))?;
    let t = &cfg.ledger_tls;
    let tls = writ_client::ClientTls::with_identity(&t.ca, &t.cert, &t.key)?;
    let identity = writ_client::tls::read_certs(&t.cert)
        .and_then(|c| crate::pki::identity_of(&c[0]))
        .map_err(|e| format!("{}: {e}", t.cert.display()))?;
    crate::observe::start_telemetry(cfg.otlp_endpoint.as_deref(), "edge", &identity.id);
    if identity.role != writ_api::role::Role::Edge {
        return Err(format!("{}: names {identity}, not an edge (`writ pki issue edge NAME`)", t.cert.display()));
    }
    let ledger = Arc::new(HttpLedger::with_http(cfg.ledger.clone(), writ_client::NodeHttp::with_tls(Some(&tls))))
        as Arc<dyn Ledger>;
    let server_tls = match &cfg.tls {
        Some(c) => Some(writ_client::tls::CredentialFiles::load(&c.cert, &c.key, None)?),
        None => None,
    };
    let cluster_ca_pem = std::fs::read_to_string(&t.ca).map_err(|e| format!("{}: {e}", t.ca.display()))?;
    let options = EdgeOptions {
        listen: cfg.listen,
        token_audiences: cfg.token_audiences,
        probe_listen: cfg.probe_listen,
        tls: server_tls,
        ledger_credential: Some(writ_client::tls::CredentialFiles::load(&t.cert, &t.key, None)?),
        cluster_ca_pem: Some(cluster_ca_pem),
        trusted_proxies: cfg.trusted_proxies,
        canonical_url: cfg.canonical_url,
        peer_url: cfg.peer_url,
        allowed_hosts: cfg.allowed_hosts,
        allowed_origins: cfg.allowed_origins,
        seal_key: load_or_create_seal_key(&cfg.seal_key_file)?,
        anonymous: cfg.anonymous,
        fixtures_tenant: None,
        edge_id: Some(identity.id.clone()),
        executor: cfg.executor,
        admin_urls: cfg.admin.clone(),
        upstream_watch: cfg.upstream_watch,
        admin_tls: Some(tls),
    };
    let edge = start_edge(options, ledger).await.map_err(|e| format!("edge: {e}"))?;
    // What a supervisor or test reads to learn the bound addresses (the config may say port 0).
    let scheme = if cfg.tls.is_some() { "https" } else { "http" };
    println!("Writ edge listening on {scheme}://{}", edge.local_addr);
    if let Some(p) = &edge.probe_url {
        println!("Writ edge probes at {p}");
    }
    println!("Writ edge serving MCP at {}", edge.url);
    if let Some((executor_url, _)) = &edge.executor_endpoint {
        println!("Writ edge serving executors at {executor_url}");
    }
    crate::wait_for_shutdown_signal().await;
    edge.shutdown().await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_env(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn config_rules() {
        let tls = "[ledger_tls]\ncert = \"e.pem\"\nkey = \"e-key.pem\"\nca = \"ca.pem\"\n";
        let ok = EdgeFileConfig::parse(
            &format!(
                "listen = \"127.0.0.1:8080\"\nledger = [\"https://127.0.0.1:7700\"]\nseal_key_file = \"k\"\n{tls}"
            ),
            &no_env,
        )
        .unwrap();
        assert_eq!(ok.listen.port(), 8080);
        assert_eq!(ok.upstream_watch, Duration::from_secs(writ_mcp_edge::drift::WATCH_S_DEFAULT));
        let watch = "listen = \"127.0.0.1:8080\"\nupstream_watch_s = 0\nledger = [\"https://127.0.0.1:7700\"]\n";
        let watched = EdgeFileConfig::parse(&format!("{watch}seal_key_file = \"k\"\n{tls}"), &no_env).unwrap();
        assert!(watched.upstream_watch.is_zero(), "0: the edge never watches");
        let open = EdgeFileConfig::parse("listen = \"0.0.0.0:8080\"\nledger = [\"https://127.0.0.1:7700\"]\n", &no_env);
        assert!(matches!(open, Err(ConfigError::TlsRequiredOutsideLoopback { .. })));
        let base = "ledger = [\"https://10.0.0.1:7700\"]\nseal_key_file = \"k\"\n";
        let https = EdgeFileConfig::parse(
            &format!("listen = \"0.0.0.0:8443\"\n{base}[tls]\ncert = \"e.pem\"\nkey = \"e-key.pem\"\n{tls}"),
            &no_env,
        )
        .unwrap();
        assert!(https.tls.is_some() && https.trusted_proxies.is_empty());
        // Executors are served with the edge's cluster credential, with or without [tls]; a
        // derived CA is no longer configurable (enrollment tokens pin the cluster CA).
        let endpoint = "[executor]\nlisten = \"127.0.0.1:9444\"\n";
        let served = EdgeFileConfig::parse(
            &format!("listen = \"0.0.0.0:8443\"\n{base}[tls]\ncert = \"e.pem\"\nkey = \"e-key.pem\"\n{tls}{endpoint}"),
            &no_env,
        )
        .unwrap();
        assert!(served.executor.is_some_and(|x| x.tls_secret_file.is_none()));
        let plain = EdgeFileConfig::parse(&format!("listen = \"127.0.0.1:8080\"\n{base}{tls}{endpoint}"), &no_env);
        assert!(plain.unwrap().executor.is_some());
        let secret = format!("listen = \"127.0.0.1:8080\"\n{base}{tls}{endpoint}tls_secret_file = \"s\"\n");
        let derived = EdgeFileConfig::parse(&secret, &no_env);
        assert!(matches!(derived, Err(ConfigError::Invalid { field: "executor.tls_secret_file", .. })));
        let proxied = EdgeFileConfig::parse(
            &format!("listen = \"0.0.0.0:8080\"\ntrusted_proxies = [\"10.0.0.5\"]\n{base}{tls}"),
            &no_env,
        )
        .unwrap();
        assert_eq!(proxied.trusted_proxies, vec!["10.0.0.5".parse::<std::net::IpAddr>().unwrap()]);
        let bad_proxy = EdgeFileConfig::parse(
            &format!("listen = \"0.0.0.0:8080\"\ntrusted_proxies = [\"proxy\"]\n{base}{tls}"),
            &no_env,
        );
        assert!(matches!(bad_proxy, Err(ConfigError::Invalid { field: "trusted_proxies", .. })));
        let plain = EdgeFileConfig::parse(
            &format!("listen = \"127.0.0.1:8080\"\nledger = [\"http://127.0.0.1:7700\"]\nseal_key_file = \"k\"\n{tls}"),
            &no_env,
        );
        assert!(matches!(plain, Err(ConfigError::Invalid { field: "ledger", .. })));
        let anonymous = EdgeFileConfig::parse(
            "listen = \"127.0.0.1:8080\"\nledger = [\"https://127.0.0.1:7700\"]\nseal_key_file = \"k\"\n",
            &no_env,
        );
        assert!(matches!(anonymous, Err(ConfigError::Invalid { field: "ledger_tls", .. })));
        let none = EdgeFileConfig::parse("listen = \"127.0.0.1:8080\"\n", &no_env);
        assert!(matches!(none, Err(ConfigError::Invalid { field: "ledger", .. })));
        let unknown = EdgeFileConfig::parse("listen = \"127.0.0.1:1\"\nledger = [\"http://x\"]\ncolour = 1\n", &no_env);
        assert!(matches!(unknown, Err(ConfigError::Parse(ref m)) if m.contains("colour")));
    }
}
