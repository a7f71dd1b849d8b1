//! The stateless MCP Streamable HTTP edge (SPEC §4, protocol 2026-07-28). Any replica serves
//! any request: there are no sessions, and everything a request needs is in the request and in
//! the edge's watch-fed replica of the ledger state ([`Verifier`]).
//!
//! Request path (SPEC E2), in this order: Host / Origin → body limit → JSON-RPC decode and the
//! protocol checks of 2026-07-28 (`_meta`, `MCP-Protocol-Version`, `Mcp-Method`, `Mcp-Name`,
//! known method) → bearer token verified to a bounded principal (RFC 9728 challenges) →
//! authorization on the decoded operation → input validation → execution → output validation
//! (`serve`). Unauthorized tools are filtered out exactly like missing ones.
//!
//! Anonymous mode (SPEC E3) serves requests without a token as one configured principal; it
//! exists only on literal loopback (`127.0.0.1`, `[::1]`), and building it otherwise fails.
//!
//! Architecture invariant: `mcp-edge` never opens RocksDB; it reaches the ledger only through
//! `writ_api` (the `Ledger` trait and the verifier).

pub mod admission;
pub mod audit;
mod authorize;
mod builtin;
pub mod caps;
pub mod drift;
pub mod executors;
pub mod fixtures;
pub mod jsonrpc;
mod legacy;
pub mod oauth;
mod operations;
mod reply;
pub mod seal;
mod serve;
pub mod session;
mod surfaces;
mod tasks;
mod trace;
mod upstream;

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use base64::Engine;
use serde_json::{json, Value};
use writ_api::audit::RequestDecisionV1;
use writ_api::auth::Authority;
use writ_api::settings::AuditMode;
use writ_api::{ReasonCode, Rejection};
use writ_client::egress::split_origin;
use writ_client::verifier::Verifier;

use crate::audit::AuditSink;
use crate::jsonrpc::{
    Request, RpcError, HEADER_MISMATCH, INVALID_PARAMS, INVALID_REQUEST, META_CLIENT_CAPABILITIES,
    META_PROTOCOL_VERSION, METHOD_NOT_FOUND, PARSE_ERROR, PROTOCOL_VERSION, UNSUPPORTED_PROTOCOL_VERSION,
};
use crate::seal::SealKey;
pub use crate::serve::LIST_SCOPE;

/// Largest request body the edge reads.
pub const BODY_BYTES_MAX_DEFAULT: usize = 1024 * 1024;

/// Who an unauthenticated request is, on a loopback-only edge.
#[derive(Debug, Clone)]
pub struct AnonymousAccess {
    /// Tenant name (or id).
    pub tenant: String,
    /// Principal name (or id) in that tenant.
    pub principal: String,
}

/// How an edge is reached and what it accepts.
#[derive(Debug, Clone)]
pub struct EdgeConfig {
    /// The canonical URI of the MCP endpoint, e.g. `https://edge.example/mcp`: the audience
    /// Writ tokens must carry and the `resource` of the protected-resource metadata.
    pub canonical_url: String,
    /// Authorization servers the shared MCP URL's protected-resource metadata names (none by
    /// default: each tenant's URL names its own).
    pub authorization_servers: Vec<String>,
    /// Host names (without port) accepted in `Host` and `Origin`.
    pub allowed_hosts: Vec<String>,
    /// Full origins (`scheme://host[:port]`) accepted in addition to the allowed hosts.
    pub allowed_origins: Vec<String>,
    pub body_bytes_max: usize,
    /// Key for MRTR `requestState` and list cursors: the same on every replica, so that any
    /// replica continues what another started.
    pub seal_key: SealKey,
    /// Loopback-only anonymous access (E3); `None` requires a bearer token on every request.
    pub anonymous: Option<AnonymousAccess>,
    /// The tenant (name or id) that sees the conformance resources and prompts.
    pub fixtures_tenant: Option<String>,
    /// This edge's name in the ledger's records of its upstream fuses (default: the canonical
    /// URL's host and port).
    pub edge_id: String,
    /// Where the other replicas reach this one's MCP endpoint: a client's response to a server
    /// request of the 2025 wire that lands on another replica is forwarded here, to the call
    /// waiting for it. `None`: such responses are refused on other replicas.
    pub peer_url: Option<String>,
}

impl EdgeConfig {
    /// The defaults for an edge at `canonical_url`: its own host (and the loopback names when it
    /// is on loopback), Writ as the authorization server.
    pub fn for_url(canonical_url: &str, seal_key: SealKey) -> EdgeConfig {
        let host = host_of(canonical_url).unwrap_or_default();
        let mut allowed_hosts = vec![host.clone()];
        if is_loopback_name(&host) {
            allowed_hosts.extend(["localhost", "127.0.0.1", "[::1]"].map(String::from));
        }
        allowed_hosts.sort();
        allowed_hosts.dedup();
        EdgeConfig {
            canonical_url: canonical_url.to_string(),
            authorization_servers: Vec::new(),
            allowed_hosts,
            allowed_origins: Vec::new(),
            body_bytes_max: BODY_BYTES_MAX_DEFAULT,
            seal_key,
            anonymous: None,
            fixtures_tenant: None,
            edge_id: split_origin(canonical_url).0.split_once("://").map_or(canonical_url, |(_, a)| a).to_string(),
            peer_url: None,
        }
    }

    /// Serves unauthenticated requests as `access`. Only the literal loopback addresses stay
    /// allowed hosts (`localhost` is a name any resolver may point elsewhere).
    pub fn with_anonymous(mut self, access: AnonymousAccess) -> EdgeConfig {
        self.allowed_hosts.retain(|h| is_literal_loopback(h));
        self.anonymous = Some(access);
        self
    }

    /// Where the protected-resource metadata of this endpoint lives (RFC 9728 §3: the
    /// well-known path, then the resource's path).
    pub fn resource_metadata_url(&self) -> String {
        let (origin, path) = split_origin(&self.canonical_url);
        format!("{origin}/.well-known/oauth-protected-resource{path}")
    }

    /// One tenant's MCP URL, `{origin}/t/{tenant}{MCP path}`: where its agents connect, the
    /// `resource` of its protected-resource metadata, and the audience its own issuers' tokens
    /// carry. A path rather than a host name per tenant: one certificate and one DNS name serve
    /// every tenant, and loopback and private deployments work unchanged.
    pub fn tenant_url(&self, tenant: &str) -> String {
        writ_api::token::tenant_url(&self.canonical_url, tenant)
    }

    /// The issuer of tenant `tenant`'s own authorization server, `{origin}/t/{tenant}` (its RFC
    /// 8414 metadata at `{origin}/.well-known/oauth-authorization-server/t/{tenant}`).
    pub fn tenant_issuer(&self, tenant: &str) -> String {
        format!("{}/t/{tenant}", split_origin(&self.canonical_url).0)
    }

    /// Where the protected-resource metadata of the endpoint a request came in on lives: the
    /// tenant's, when it came through a tenant's MCP URL ([`URL_TENANT_HEADER`]).
    pub fn resource_metadata_url_for(&self, headers: &HeaderMap) -> String {
        match url_tenant(headers) {
            Some(tenant) => {
                let (origin, path) = split_origin(&self.canonical_url);
                format!("{origin}/.well-known/oauth-protected-resource/t/{tenant}{path}")
            }
            None => self.resource_metadata_url(),
        }
    }

    /// The path of the MCP endpoint (`/mcp`).
    pub fn mcp_path(&self) -> String {
        let (_, path) = split_origin(&self.canonical_url);
        if path.is_empty() {
            "/".into()
        } else {
            path.to_string()
        }
    }

    /// The start-up checks: anonymous mode only with a literal-loopback canonical URL, allowed
    /// hosts and origins.
    pub fn check(&self) -> Result<(), String> {
        if self.anonymous.is_none() {
            return Ok(());
        }
        let url_host = host_of(&self.canonical_url).unwrap_or_default();
        if !is_literal_loopback(&url_host) {
            return Err(format!("anonymous mode needs a literal loopback URL, not '{}'", self.canonical_url));
        }
        if let Some(h) = self.allowed_hosts.iter().find(|h| !is_literal_loopback(h)) {
            return Err(format!("anonymous mode allows only literal loopback hosts; '{h}' is not one"));
        }
        if let Some(o) = self.allowed_origins.iter().find(|o| !host_of(o).is_some_and(|h| is_literal_loopback(&h))) {
            return Err(format!("anonymous mode allows only literal loopback origins; '{o}' is not one"));
        }
        Ok(())
    }
}

/// The host name of a URL or `Host` header value, without port (IPv6 keeps its brackets).
fn host_of(url_or_host: &str) -> Option<String> {
    let rest = url_or_host.split_once("://").map_or(url_or_host, |(_, r)| r);
    let authority = rest.split('/').next()?;
    let host = if authority.starts_with('[') {
        authority.split_inclusive(']').next()?.to_string()
    } else {
        authority.split(':').next()?.to_string()
    };
    (!host.is_empty()).then(|| host.to_ascii_lowercase())
}

fn is_loopback_name(host: &str) -> bool {
    host == "localhost" || is_literal_loopback(host)
}

/// `127.0.0.0/8` or `[::1]`, written as an address.
pub fn is_literal_loopback(host: &str) -> bool {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    bare.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

pub(crate) struct Edge {
    config: EdgeConfig,
    /// The ledger, for what the replica does not hold (audit record bodies).
    ledger: Arc<dyn writ_client::Ledger>,
    verifier: Verifier,
    audit: AuditSink,
    admission: admission::Admission,
    validators: serve::Validators,
    /// List changes announced on this edge, for its `subscriptions/listen` streams.
    changes: tokio::sync::broadcast::Sender<builtin::ListChange>,
    /// Open `subscriptions/listen` streams per principal.
    listens: caps::StreamCaps,
    /// `tools/list` entries rendered once per catalog and scope set.
    tool_lists: serve::ToolLists,
    /// Connections to, and fuses of, tenants' upstream MCP servers.
    upstreams: upstream::Upstreams,
    /// Server requests of the 2025 wire waiting for the client's response.
    pending: legacy::Pending,
    /// Forwards such responses to the replica whose call waits for them.
    peers: reqwest::Client,
    /// When this edge last asked the ledger to fetch each discovered issuer's keys again.
    issuer_refreshes: std::sync::Mutex<std::collections::HashMap<String, std::time::Instant>>,
    /// A node's admin API, where tenants' token endpoints forward their exchanges (`None`: no
    /// token endpoint is served).
    admin: Option<executors::AdminForward>,
}

/// The header that carries, inside the edge, the tenant of the MCP URL a request came in on
/// (`/t/{tenant}/mcp`). Whatever a client sends under this name is dropped first.
pub(crate) const URL_TENANT_HEADER: &str = "x-writ-url-tenant";

/// The tenant of the MCP URL a request came in on, if it came through one.
pub(crate) fn url_tenant(headers: &HeaderMap) -> Option<&str> {
    headers.get(URL_TENANT_HEADER).and_then(|v| v.to_str().ok())
}

/// The MCP endpoint's checks of a request's URL and headers, in one layer:
/// [`mark_url_tenant`], then [`bound_headers`].
async fn endpoint_headers(mut req: axum::extract::Request, next: axum::middleware::Next) -> Response {
    match mark_url_tenant(&mut req).or_else(|| bound_headers(&req)) {
        Some(refused) => refused,
        None => next.run(req).await,
    }
}

/// Drops a client's [`URL_TENANT_HEADER`] and sets it from the path of a tenant's MCP URL;
/// the refusal of a tenant URL that names no valid tenant.
fn mark_url_tenant(req: &mut axum::extract::Request) -> Option<Response> {
    req.headers_mut().remove(URL_TENANT_HEADER);
    let tenant = req.uri().path().strip_prefix("/t/").and_then(|rest| rest.split('/').next());
    let value = tenant.filter(|t| writ_api::rejection::validate_tenant_name(t).is_ok());
    match (req.uri().path().starts_with("/t/"), value.map(HeaderValue::from_str)) {
        (false, _) => {}
        (true, Some(Ok(v))) => {
            req.headers_mut().insert(URL_TENANT_HEADER, v);
        }
        (true, _) => {
            let e = Rejection::new(ReasonCode::TENANT_NOT_FOUND, "the URL names no valid tenant");
            return Some(RpcError::rejected(&e).into_response());
        }
    }
    None
}

/// The least time between two requests of this edge for one issuer's keys.
const ISSUER_REFRESH_INTERVAL_MIN: std::time::Duration = std::time::Duration::from_secs(30);
/// How long a request waits for the edge's replica to hold keys the ledger just recorded.
const ISSUER_REFRESH_WAIT: std::time::Duration = std::time::Duration::from_secs(2);
/// Most issuers whose last refresh an edge remembers (older entries are forgotten first).
const ISSUER_REFRESHES_KEPT_MAX: usize = 1024;

/// The edge's router: the MCP endpoint and the protected-resource metadata. `ledger` is where
/// decisions are recorded and quota slices leased (through `audit`, which must be flushed on
/// shutdown); `verifier` follows the ledger for tokens, catalogs and limits. Fails when the
/// configuration breaks a start-up rule ([`EdgeConfig::check`]).
pub fn router(
    ledger: Arc<dyn writ_client::Ledger>,
    verifier: Verifier,
    audit: AuditSink,
    config: EdgeConfig,
) -> Result<Router, String> {
    router_with(ledger, verifier, audit, config, None)
}

/// [`router`], with each tenant's token endpoint (`/t/{tenant}/oauth/token`, `oauth`) forwarding
/// to a node's admin API through `admin`.
pub fn router_with(
    ledger: Arc<dyn writ_client::Ledger>,
    verifier: Verifier,
    audit: AuditSink,
    config: EdgeConfig,
    admin: Option<executors::AdminForward>,
) -> Result<Router, String> {
    config.check()?;
    let mcp = config.mcp_path();
    let prm = format!("/.well-known/oauth-protected-resource{}", if mcp == "/" { "" } else { mcp.as_str() });
    let limit = config.body_bytes_max;
    let admission = admission::Admission::new(ledger.clone());
    let changes = tokio::sync::broadcast::channel(256).0;
    let validators = Default::default();
    let listens = Default::default();
    let tool_lists = Default::default();
    let upstreams = Default::default();
    let edge = Arc::new(Edge {
        config,
        ledger,
        verifier,
        audit,
        admission,
        validators,
        changes,
        listens,
        tool_lists,
        upstreams,
        pending: Default::default(),
        peers: reqwest::Client::builder()
            .no_proxy()
            .timeout(std::time::Duration::from_secs(10))
            .build()
            .map_err(|e| format!("the peer client: {e}"))?,
        issuer_refreshes: Default::default(),
        admin,
    });
    let endpoint =
        || get(mcp_session).delete(mcp_session).post(mcp_post).layer(axum::middleware::from_fn(endpoint_headers));
    let tenant_mcp = format!("/t/{{tenant}}{}", if mcp == "/" { "" } else { mcp.as_str() });
    let tenant_prm = format!("/.well-known/oauth-protected-resource{tenant_mcp}");
    let mut r = Router::new()
        .route(&mcp, endpoint())
        .route(&tenant_mcp, endpoint())
        .route(&prm, get(resource_metadata))
        .route(&tenant_prm, get(tenant_resource_metadata))
        .route(oauth::TOKEN_PATH, oauth::token_route())
        .route(oauth::REVOKE_PATH, oauth::revoke_route())
        .merge(authorize::routes());
    if prm != "/.well-known/oauth-protected-resource" {
        r = r.route("/.well-known/oauth-protected-resource", get(resource_metadata));
    }
    let probes = probes(edge.verifier.clone());
    Ok(r.layer(DefaultBodyLimit::max(limit)).with_state(edge).merge(probes))
}

/// `route` served only to requests whose `Host` (and `Origin`, when sent) this edge serves, as
/// `/mcp` is: a page a browser loaded from another site cannot read it through a DNS name
/// rebound to the edge's address.
pub fn host_checked<S: Clone + Send + Sync + 'static>(
    route: axum::routing::MethodRouter<S>,
    config: &EdgeConfig,
) -> axum::routing::MethodRouter<S> {
    let config = Arc::new(config.clone());
    route.layer(axum::middleware::from_fn(move |req: axum::extract::Request, next: axum::middleware::Next| {
        let config = config.clone();
        async move {
            match check_host_and_origin(&config, req.headers()) {
                Ok(()) => next.run(req).await,
                Err(e) => e.into_response(),
            }
        }
    }))
}

/// `/healthz` and `/readyz` (ready while the edge's replica of the ledger is current): served
/// on the MCP listener and, where configured, on the edge's own probe listener.
pub fn probes(verifier: Verifier) -> Router {
    Router::new().route("/healthz", get(|| async { "ok\n" })).route("/readyz", get(readyz)).with_state(verifier)
}

/// Longest value of an `Mcp-*` request header (bytes): a method, a tool or prompt name or a
/// resource URI, base64-encoded or not. Longer ones are refused before the body is read.
pub const MCP_HEADER_BYTES_MAX: usize = 4096;

/// The refusal of a request with an oversized `Mcp-*` header (431 HEADER_TOO_LARGE): nothing
/// of it reaches a metric label or the audit trail.
fn bound_headers(req: &axum::extract::Request) -> Option<Response> {
    let oversized =
        req.headers().iter().find(|(n, v)| n.as_str().starts_with("mcp-") && v.len() > MCP_HEADER_BYTES_MAX);
    if let Some((name, _)) = oversized {
        metrics::counter!("writ_edge_requests_refused_total", "reason" => ReasonCode::HEADER_TOO_LARGE.as_str())
            .increment(1);
        let message = format!("the {name} header exceeds {MCP_HEADER_BYTES_MAX} bytes");
        return Some(RpcError::reason(ReasonCode::HEADER_TOO_LARGE, message).into_response());
    }
    None
}

/// The `method` member of a JSON-RPC body, if the body is one (empty otherwise).
fn body_method(body: &[u8]) -> String {
    #[derive(serde::Deserialize)]
    struct Method {
        method: String,
    }
    serde_json::from_slice::<Method>(body).map(|m| m.method).unwrap_or_default()
}

/// The `method` label of a request's metrics: a method this edge knows, else `other` (a label
/// never takes client text verbatim).
fn method_label(method: &str) -> &'static str {
    const KNOWN: &[&str] = &[
        "server/discover",
        "tools/list",
        "tools/call",
        "resources/list",
        "resources/read",
        "resources/templates/list",
        "subscriptions/listen",
        "tasks/get",
        "tasks/update",
        "tasks/cancel",
        "prompts/list",
        "prompts/get",
        "completion/complete",
        "initialize",
        "ping",
        "logging/setLevel",
        "resources/subscribe",
        "resources/unsubscribe",
        "GET",
        "DELETE",
    ];
    KNOWN.iter().find(|k| **k == method).copied().unwrap_or("other")
}

/// Header of `/readyz` naming the ledger revision the edge's replica has applied (a deploy or
/// a test can wait for an edge to have seen a change).
pub const REVISION_HEADER: &str = "x-writ-revision";

/// Ready when the edge's replica of the ledger is current (else every request would fail
/// closed with LEDGER_UNAVAILABLE).
async fn readyz(State(verifier): State<Verifier>) -> Response {
    let mut response = if verifier.is_current() {
        (StatusCode::OK, "ready\n").into_response()
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready: no current replica of the ledger\n").into_response()
    };
    response.headers_mut().insert(REVISION_HEADER, HeaderValue::from(verifier.revision()));
    response
}

/// 2026-07-28 has no GET stream and no sessions to delete (the 2025 wire's need a session).
fn not_allowed_response() -> Response {
    let mut r = StatusCode::METHOD_NOT_ALLOWED.into_response();
    r.headers_mut().insert(header::ALLOW, HeaderValue::from_static("POST"));
    r
}

async fn resource_metadata(State(edge): State<Arc<Edge>>, headers: HeaderMap) -> Response {
    if let Err(e) = check_host_and_origin(&edge.config, &headers) {
        return e.into_response();
    }
    let mut prm = json!({
        "resource": edge.config.canonical_url,
        "scopes_supported": writ_api::principal::RolePreset::Delegate.scopes(),
        "bearer_methods_supported": ["header"],
    });
    // The shared URL serves every tenant: no one authorization server is its own (clients
    // that get tokens by themselves connect to their tenant's URL).
    if !edge.config.authorization_servers.is_empty() {
        prm["authorization_servers"] = json!(edge.config.authorization_servers);
    }
    Json(prm).into_response()
}

/// The protected-resource metadata (RFC 9728) of one tenant's MCP URL: its own issuers known
/// by their URL as its authorization servers; where it has none, its own authorization server on
/// this edge (`{origin}/t/{tenant}`; none where the edge forwards to no admin API).
async fn tenant_resource_metadata(
    State(edge): State<Arc<Edge>>,
    axum::extract::Path(tenant): axum::extract::Path<String>,
    headers: HeaderMap,
) -> Response {
    if let Err(e) = check_host_and_origin(&edge.config, &headers) {
        return e.into_response();
    }
    let found = edge.verifier.with_state(|s| {
        let t = url_tenant_of(s, &tenant)?;
        let own = s.issuer_sources.values().filter(|src| src.tenant_id == t.id);
        Some((own.map(|src| src.spec.issuer.clone()).collect::<Vec<_>>(), scopes_of(s, t)))
    });
    let Some((mut servers, scopes)) = found else {
        let e = Rejection::new(ReasonCode::TENANT_NOT_FOUND, format!("no tenant '{tenant}' is served here"));
        return RpcError::rejected(&e).into_response();
    };
    if servers.is_empty() && edge.admin.is_some() {
        // No IdP of its own: the tenant's own authorization server on this edge.
        servers.push(edge.config.tenant_issuer(&tenant));
    }
    Json(json!({
        "resource": edge.config.tenant_url(&tenant),
        "authorization_servers": servers,
        "scopes_supported": scopes,
        "bearer_methods_supported": ["header"],
        "resource_name": format!("Writ: tenant {tenant}"),
    }))
    .into_response()
}

/// Most scopes a tenant's challenge and metadata name (a larger catalog names `tools:call:*`).
const TENANT_SCOPES_MAX: usize = 32;

/// The tenant a tenant MCP URL names (by its name, as the URL is built), if it is served.
fn url_tenant_of<'a>(s: &'a writ_api::state::LedgerState, name: &str) -> Option<&'a writ_api::ledger::Tenant> {
    s.tenant(name).filter(|t| t.name == name && t.closed().is_none())
}

/// The scopes a session on tenant `t`'s MCP URL uses: `tools:list` and its current catalog's
/// action scopes (sorted).
fn scopes_of(s: &writ_api::state::LedgerState, t: &writ_api::ledger::Tenant) -> Vec<String> {
    let mut scopes: Vec<String> =
        s.catalog(&t.id, None).map(|c| c.catalog.actions.iter().map(|a| a.scope.clone()).collect()).unwrap_or_default();
    scopes.sort();
    scopes.dedup();
    if scopes.len() > TENANT_SCOPES_MAX {
        scopes = vec!["tools:call:*".to_string()];
    }
    scopes.insert(0, LIST_SCOPE.to_string());
    scopes
}

/// DNS-rebinding protection: `Host` must be an allowed host; an `Origin`, when present, must be
/// allowed too.
fn check_host_and_origin(config: &EdgeConfig, headers: &HeaderMap) -> Result<(), RpcError> {
    let forbidden =
        |what: &str| RpcError::new(StatusCode::FORBIDDEN, INVALID_REQUEST, format!("{what} is not allowed"));
    let host = headers.get(header::HOST).and_then(|v| v.to_str().ok()).and_then(host_of);
    if !host.is_some_and(|h| config.allowed_hosts.contains(&h)) {
        return Err(forbidden("the Host header"));
    }
    if let Some(origin) = headers.get(header::ORIGIN) {
        let origin = origin.to_str().map_err(|_| forbidden("the Origin header"))?;
        let ok = config.allowed_origins.iter().any(|o| o == origin)
            || host_of(origin).is_some_and(|h| config.allowed_hosts.contains(&h));
        if !ok {
            return Err(forbidden("the Origin header"));
        }
    }
    Ok(())
}

/// The tenant's own browser policy (`settings.allowed_origins`), after authentication told
/// whose request it is: when the tenant lists origins, a request with an `Origin` must come from
/// one of them (`ORIGIN_NOT_ALLOWED`, audited as a denial). An empty list leaves the edge's own
/// Host/Origin check ([`check_host_and_origin`]) as the only one; requests without `Origin`
/// (not from a browser) are not affected.
fn tenant_origin(edge: &Edge, authority: &Authority, headers: &HeaderMap) -> Result<(), Rejection> {
    let Some(origin) = headers.get(header::ORIGIN) else { return Ok(()) };
    let origin = origin.to_str().unwrap_or_default();
    let allowed = edge.verifier.with_state(|s| {
        s.tenants.get(&authority.tenant_id).is_none_or(|t| {
            t.settings.allowed_origins.is_empty() || t.settings.allowed_origins.iter().any(|o| o == origin)
        })
    });
    if allowed {
        Ok(())
    } else {
        Err(Rejection::new(
            ReasonCode::ORIGIN_NOT_ALLOWED,
            format!("origin '{}' is not one of this tenant's allowed origins", writ_api::audit::truncated(origin, 256)),
        ))
    }
}

/// A header value with SEP-2243 encoding undone: `=?base64?…?=` is decoded strictly (padding
/// and alphabet checked; `None` when it does not decode to UTF-8); other values are literal.
fn header_value(headers: &HeaderMap, name: &str) -> Option<String> {
    let raw = headers.get(name)?.to_str().ok()?.trim();
    match raw.strip_prefix("=?base64?").and_then(|r| r.strip_suffix("?=")) {
        Some(b64) => base64::engine::general_purpose::STANDARD.decode(b64).ok().and_then(|b| String::from_utf8(b).ok()),
        None => Some(raw.to_string()),
    }
}

/// Methods of the 2026-07-28 wire this edge serves (prompts and completion only with the
/// conformance fixtures).
fn served(config: &EdgeConfig, method: &str) -> bool {
    match method {
        "server/discover"
        | "tools/list"
        | "tools/call"
        | "resources/list"
        | "resources/read"
        | "resources/templates/list"
        | "subscriptions/listen"
        | "tasks/get"
        | "tasks/update"
        | "tasks/cancel" => true,
        "prompts/list" | "prompts/get" | "completion/complete" => config.fixtures_tenant.is_some(),
        _ => false,
    }
}

/// The protocol checks of 2026-07-28, in the order the specification gives (each error echoes
/// the request id): `_meta` → header version equals `_meta` → supported version → method and
/// name headers → known method.
fn check_protocol(config: &EdgeConfig, req: &Request, headers: &HeaderMap) -> Result<(), RpcError> {
    let bad = |status, code, msg: String| Err(RpcError::new(status, code, msg).with_id(&req.id));
    let version = req.meta(META_PROTOCOL_VERSION).and_then(Value::as_str);
    let caps = req.meta(META_CLIENT_CAPABILITIES).filter(|c| c.is_object());
    let (Some(version), Some(_)) = (version, caps) else {
        return bad(
            StatusCode::BAD_REQUEST,
            INVALID_PARAMS,
            format!("params._meta must carry {META_PROTOCOL_VERSION} and {META_CLIENT_CAPABILITIES}"),
        );
    };
    if header_value(headers, "mcp-protocol-version").as_deref() != Some(version) {
        return bad(
            StatusCode::BAD_REQUEST,
            HEADER_MISMATCH,
            "MCP-Protocol-Version must equal the _meta protocol version".into(),
        );
    }
    if version != PROTOCOL_VERSION {
        return Err(RpcError::new(
            StatusCode::BAD_REQUEST,
            UNSUPPORTED_PROTOCOL_VERSION,
            format!("unsupported protocol version {version}"),
        )
        .with_data(json!({"supported": [PROTOCOL_VERSION], "requested": version}))
        .with_id(&req.id));
    }
    if header_value(headers, "mcp-method").as_deref() != Some(req.method.as_str()) {
        return bad(StatusCode::BAD_REQUEST, HEADER_MISMATCH, "Mcp-Method must equal the request method".into());
    }
    let name_field = match req.method.as_str() {
        "tools/call" | "prompts/get" => Some("name"),
        "resources/read" => Some("uri"),
        "tasks/get" | "tasks/update" | "tasks/cancel" => Some("taskId"),
        _ => None,
    };
    if let Some(field) = name_field {
        let body = req.params().get(field).and_then(Value::as_str);
        if body.is_none() || header_value(headers, "mcp-name").as_deref() != body {
            return bad(StatusCode::BAD_REQUEST, HEADER_MISMATCH, format!("Mcp-Name must equal params.{field}"));
        }
    }
    if !served(config, &req.method) {
        return bad(StatusCode::NOT_FOUND, METHOD_NOT_FOUND, format!("method {} is not served", req.method));
    }
    Ok(())
}

/// An admission refusal: 429 with `Retry-After` for QUOTA_EXCEEDED, 503 when the ledger could
/// not grant a slice.
fn refused_response(id: &Option<Value>, refused: &admission::Refused) -> Response {
    let mut e = RpcError::rejected(&refused.rejection).with_id(id);
    if let Some(after) = refused.retry_after {
        e = e.with_detail("retry_after_ms", json!(after.as_millis() as u64));
    }
    let mut r = e.into_response();
    if let Some(after) = refused.retry_after {
        if let Ok(v) = HeaderValue::from_str(&(after.as_secs() + 1).to_string()) {
            r.headers_mut().insert(header::RETRY_AFTER, v);
        }
    }
    r
}

/// A bearer-auth failure as an HTTP answer with its RFC 6750 / RFC 9728 challenge.
pub(crate) fn challenge(
    config: &EdgeConfig,
    headers: &HeaderMap,
    status: StatusCode,
    reason: ReasonCode,
    message: &str,
    scope: &str,
) -> Response {
    let error = match status {
        StatusCode::FORBIDDEN => "insufficient_scope",
        _ => "invalid_token",
    };
    let mut value =
        format!("Bearer resource_metadata=\"{}\", scope=\"{scope}\"", config.resource_metadata_url_for(headers));
    if reason != ReasonCode::AUTH_TOKEN_MISSING {
        value = format!("{value}, error=\"{error}\", error_description=\"{}\"", message.replace('"', "'"));
    }
    let mut r = RpcError::new(status, reason.jsonrpc_code() as i64, message)
        .with_data(json!({"reason": reason}))
        .into_response();
    if let Ok(v) = HeaderValue::from_str(&value) {
        r.headers_mut().insert(header::WWW_AUTHENTICATE, v);
    }
    r
}

pub(crate) fn bearer(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer ").or_else(|| v.strip_prefix("bearer ")))
        .map(str::trim)
}

/// The credential a request was admitted under: its bearer token, or the anonymous credential
/// of a loopback edge. The node verifies it with every act the request makes and as the
/// voucher of its decision.
pub(crate) fn credential(headers: &HeaderMap) -> writ_api::grant::Credential {
    match bearer(headers) {
        Some(token) => writ_api::grant::Credential::Bearer(token.to_string()),
        None => writ_api::grant::Credential::Anonymous,
    }
}

/// Who the request is ([`verified`]); on a tenant's MCP URL, only that tenant's principals.
async fn authenticate(edge: &Edge, headers: &HeaderMap) -> Result<Authority, Response> {
    let authority = verified(edge, headers).await?;
    let Some(tenant) = url_tenant(headers) else { return Ok(authority) };
    if edge.verifier.with_state(|s| url_tenant_of(s, tenant).is_some_and(|t| t.id == authority.tenant_id)) {
        return Ok(authority);
    }
    let message = format!("this is the MCP URL of tenant '{tenant}': the credential is another tenant's");
    let e = Rejection::new(ReasonCode::AUTH_TENANT_MISMATCH, message);
    // On the credential's own tenant's record (a denial: once per window, then counted).
    let method = method_label(&header_value(headers, "mcp-method").unwrap_or_default());
    let trace_id = uuid::Uuid::new_v4().to_string();
    let client = audit::client_of_headers(headers);
    let decision = audit::request_decision(&trace_id, &authority, &client, method, None, Some(e.reason));
    if let Err(fail) = edge.audit.commit_denial(&authority.tenant_id, decision, Some(credential(headers))).await {
        return Err(RpcError::rejected(&fail).into_response());
    }
    Err(auth_failed(edge, headers, e))
}

/// An authentication failure: 401 with its challenge, or the reason's own status. On a
/// tenant's MCP URL the challenge asks for what a session there needs: listing, and calling
/// the tenant's catalog actions (a client asks for the scopes a 401 names, and tools it may
/// not call are hidden, never a 403 to step up from); on `/mcp`, for listing.
fn auth_failed(edge: &Edge, headers: &HeaderMap, e: Rejection) -> Response {
    let status = writ_client::http_status(e.reason);
    if status == StatusCode::UNAUTHORIZED {
        let scopes =
            url_tenant(headers).and_then(|t| edge.verifier.with_state(|s| Some(scopes_of(s, url_tenant_of(s, t)?))));
        let scope = scopes.map_or_else(|| LIST_SCOPE.to_string(), |s| s.join(" "));
        challenge(&edge.config, headers, status, e.reason, &e.message, &scope)
    } else {
        RpcError::rejected(&e).into_response()
    }
}

/// The authority of the request's bearer token (or of the anonymous access), before the tenant
/// of the URL is compared with it.
async fn verified(edge: &Edge, headers: &HeaderMap) -> Result<Authority, Response> {
    let failed = |e: Rejection| auth_failed(edge, headers, e);
    match (bearer(headers), &edge.config.anonymous) {
        (Some(token), _) => match verify_token(edge, token).await {
            Ok(a) => Ok(a),
            Err(e) if e.reason == ReasonCode::TENANT_SUSPENDED => {
                // The token is authentic (the tenant gate comes after the signature): the
                // suspended tenant's audit gets the denial before the client hears of it.
                if let Err(fail) = audit_suspended(edge, headers, token, &e).await {
                    return Err(RpcError::rejected(&fail).into_response());
                }
                Err(failed(e))
            }
            Err(e) => Err(failed(e)),
        },
        (None, Some(anon)) => edge.verifier.anonymous(&anon.tenant, &anon.principal).await.map_err(failed),
        (None, None) => Err(failed(Rejection::new(ReasonCode::AUTH_TOKEN_MISSING, "a bearer token is required"))),
    }
}

/// Verifies a bearer token; one of an issuer known by its URL that names a key the ledger does
/// not hold (the issuer rotated its keys) has the ledger fetch the issuer's keys again — at
/// most once per [`ISSUER_REFRESH_INTERVAL_MIN`] per issuer from this edge, the nodes limiting
/// their fetches too — and is verified once more against what the ledger then recorded.
async fn verify_token(edge: &Edge, token: &str) -> Result<Authority, Rejection> {
    let first = edge.verifier.verify(token).await;
    if first.is_ok() {
        return first;
    }
    let Some(issuer) = unknown_discovered_key(edge, token) else { return first };
    if !may_refresh(edge, &issuer) {
        return first;
    }
    match edge.ledger.refresh_issuer(&issuer).await {
        Ok(Some(revision)) if edge.verifier.wait_for(revision, ISSUER_REFRESH_WAIT).await => {
            edge.verifier.verify(token).await
        }
        Ok(_) => first,
        Err(e) => {
            tracing::warn!(%issuer, reason = %e.reason, message = %e.message, "issuer keys could not be refreshed");
            first
        }
    }
}

/// The issuer of `token` when it is one known by its URL and the token names a key id the
/// ledger does not hold for it.
fn unknown_discovered_key(edge: &Edge, token: &str) -> Option<String> {
    let (header, claims) = (writ_api::auth::segment(token, 0)?, writ_api::auth::segment(token, 1)?);
    let (iss, kid) = (claims["iss"].as_str()?, header["kid"].as_str()?);
    let unknown = edge.verifier.with_state(|s| {
        let held = s.issuers.get(iss).and_then(|i| i.keys()).is_some_and(|keys| keys.find(kid).is_some());
        s.issuer_sources.contains_key(iss) && !held
    });
    unknown.then(|| iss.to_string())
}

/// Whether this edge may ask for `issuer`'s keys now (and remembers that it did).
fn may_refresh(edge: &Edge, issuer: &str) -> bool {
    let mut asked = edge.issuer_refreshes.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let now = std::time::Instant::now();
    if asked.get(issuer).is_some_and(|at| now.duration_since(*at) < ISSUER_REFRESH_INTERVAL_MIN) {
        return false;
    }
    if asked.len() >= ISSUER_REFRESHES_KEPT_MAX {
        asked.retain(|_, at| now.duration_since(*at) < ISSUER_REFRESH_INTERVAL_MIN);
        if asked.len() >= ISSUER_REFRESHES_KEPT_MAX {
            return false;
        }
    }
    asked.insert(issuer.to_string(), now);
    true
}

/// Records a TENANT_SUSPENDED denial for a verified token's tenant and principal.
async fn audit_suspended(edge: &Edge, headers: &HeaderMap, token: &str, e: &Rejection) -> Result<(), Rejection> {
    let Some(claims) = writ_api::auth::segment(token, 1) else { return Ok(()) };
    let subject = edge.verifier.with_state(|s| {
        let iss = claims["iss"].as_str()?;
        let tenant_id = if iss == writ_api::token::WRIT_ISSUER {
            claims["tid"].as_str()?.to_string()
        } else {
            s.issuers.get(iss)?.tenant_id.clone()
        };
        let principal_id = s.principal(&tenant_id, claims["sub"].as_str()?)?.id.clone();
        Some((tenant_id, principal_id))
    });
    let Some((tenant_id, principal_id)) = subject else { return Ok(()) };
    let decision = RequestDecisionV1 {
        trace_id: uuid::Uuid::new_v4().to_string(),
        principal_id,
        token_id: claims["jti"].as_str().map(str::to_string),
        parent_token_id: None,
        method: writ_api::audit::truncated(
            &header_value(headers, "mcp-method").unwrap_or_default(),
            writ_api::audit::DECISION_FIELD_BYTES_MAX,
        ),
        name: None,
        outcome: "denied".into(),
        reason: Some(e.reason),
    };
    let client = audit::client_of_headers(headers);
    let decision = writ_api::audit::RequestDecisionV2 { decision, authority: client };
    edge.audit.commit(&tenant_id, decision, Some(credential(headers))).await
}

/// Decodes the body as one JSON-RPC request and runs the protocol checks; `Ok(None)` for a
/// notification (nothing to answer in a stateless server).
fn decode(config: &EdgeConfig, body: &[u8], headers: &HeaderMap) -> Result<Option<Request>, RpcError> {
    let value: Value = serde_json::from_slice(body)
        .map_err(|e| RpcError::new(StatusCode::BAD_REQUEST, PARSE_ERROR, format!("invalid JSON: {e}")))?;
    if value.is_array() {
        return Err(RpcError::new(StatusCode::BAD_REQUEST, INVALID_REQUEST, "batches are not supported"));
    }
    let req: Request = serde_json::from_value(value)
        .map_err(|e| RpcError::new(StatusCode::BAD_REQUEST, INVALID_REQUEST, format!("not a JSON-RPC request: {e}")))?;
    if req.jsonrpc != "2.0" {
        return Err(RpcError::new(StatusCode::BAD_REQUEST, INVALID_REQUEST, "jsonrpc must be \"2.0\"").with_id(&req.id));
    }
    if req.id.is_none() {
        return Ok(None);
    }
    check_protocol(config, &req, headers)?;
    Ok(Some(req))
}

/// The reason a protocol error is audited with.
fn protocol_reason(e: &RpcError) -> ReasonCode {
    match e.code {
        HEADER_MISMATCH => ReasonCode::PROTOCOL_HEADER_MISMATCH,
        UNSUPPORTED_PROTOCOL_VERSION => ReasonCode::PROTOCOL_VERSION_UNSUPPORTED,
        METHOD_NOT_FOUND => ReasonCode::NOT_FOUND,
        _ => ReasonCode::INPUT_INVALID,
    }
}

/// What every request to `/mcp` passes before its method: Host/Origin, then authentication
/// (its own answer when either fails).
async fn gate(edge: &Edge, headers: &HeaderMap) -> Result<Authority, Response> {
    check_host_and_origin(&edge.config, headers).map_err(IntoResponse::into_response)?;
    authenticate(edge, headers).await
}

/// `POST /mcp`, in the order of SPEC E2: Host/Origin → body limit → authenticate → the tenant's
/// allowed origins → admission → the wire (2025 with a session or `initialize`, see `legacy`;
/// else 2026-07-28: decode and protocol checks) → the method (`serve`: authorize, validate,
/// execute, validate). Every authenticated request ends as an audit decision.
async fn mcp_post(
    State(edge): State<Arc<Edge>>,
    headers: HeaderMap,
    body: Result<Bytes, axum::extract::rejection::BytesRejection>,
) -> Response {
    if let Err(e) = check_host_and_origin(&edge.config, &headers) {
        return e.into_response();
    }
    let body = match body {
        Ok(b) => b,
        Err(e) if e.status() == StatusCode::PAYLOAD_TOO_LARGE => {
            let limit = edge.config.body_bytes_max;
            return RpcError::reason(ReasonCode::PAYLOAD_TOO_LARGE, format!("the request body exceeds {limit} bytes"))
                .into_response();
        }
        Err(e) => return RpcError::reason(ReasonCode::INPUT_INVALID, e.body_text()).into_response(),
    };
    let authority = match authenticate(&edge, &headers).await {
        Ok(a) => a,
        Err(r) => return r,
    };
    let mut span = trace::server_span(trace::incoming(&headers, &body));
    let trace_id = span.context().trace_hex();
    let started = std::time::Instant::now();
    // The method as the decoded request names it; for a request refused before (or at) its
    // decoding, as the body names it — never the header's free text. Audited and counted only
    // as one of the known methods, or `other`.
    let mut method = None;
    let mut id = None;
    let mut protocol = headers.get("mcp-protocol-version").and_then(|v| v.to_str().ok()).map(str::to_string);
    let recorded = std::sync::atomic::AtomicBool::new(false);
    let mut client = audit::client_of_headers(&headers);
    let admitted = match tenant_origin(&edge, &authority, &headers) {
        Err(refused) => Err(admission::Refused::from(refused)),
        Ok(()) => edge.admission.admit(&edge.verifier, &authority, &trace_id).await,
    };
    let handled = match admitted {
        Err(refused) => serve::Handled::refused(refused_response(&None, &refused), None, refused.rejection),
        Ok(()) if legacy::is_legacy_post(&headers, &body) => {
            let x = legacy::Exchange {
                edge: &edge,
                headers: &headers,
                authority: &authority,
                trace_id: &trace_id,
                recorded: &recorded,
            };
            let posted = writ_client::trace::within(span.context(), Box::pin(legacy::post(&x, &body))).await;
            if posted.quiet {
                return posted.handled.response;
            }
            (method, id, client) = (posted.method, posted.id, posted.client);
            posted.handled
        }
        Ok(()) => match decode(&edge.config, &body, &headers) {
            Ok(None) => return StatusCode::ACCEPTED.into_response(),
            Err(e) => {
                let denied = Rejection::new(protocol_reason(&e), e.message.clone());
                serve::Handled::refused(e.into_response(), None, denied)
            }
            Ok(Some(req)) => {
                method = Some(req.method.clone());
                id = req.id.clone();
                let meta = &req.params()["_meta"][jsonrpc::META_PROTOCOL_VERSION];
                protocol = meta.as_str().map(str::to_string).or(protocol);
                client = audit::client_of(&req, &headers);
                let call = serve::Call {
                    edge: &edge,
                    req: &req,
                    headers: &headers,
                    authority: &authority,
                    trace_id: &trace_id,
                    recorded: &recorded,
                };
                // Boxed, as the 2025 wire's: a method's future is large, and kept inline it
                // would make this handler's future as large, copied at every layer it passes.
                writ_client::trace::within(span.context(), Box::pin(serve::handle(call))).await
            }
        },
    };
    let label = method_label(&method.unwrap_or_else(|| body_method(&body)));
    let elapsed = started.elapsed().as_secs_f64();
    metrics::histogram!("writ_edge_request_seconds", "method" => label).record(elapsed);
    metrics::histogram!("mcp_server_operation_duration_seconds", "mcp_method_name" => label).record(elapsed);
    let finished = trace::Finished {
        method: label,
        target: handled.name.as_deref(),
        id: id.as_ref(),
        protocol: protocol.as_deref(),
        tenant: &authority.tenant_id,
        principal: &authority.principal_id,
        denied: handled.denied.as_ref().map(|r| r.reason),
    };
    trace::finish(&mut span, finished);
    span.end();
    if let Err(fail) = record(&edge, &authority, &headers, &trace_id, label, &handled.verdict(client), &recorded).await
    {
        return RpcError::rejected(&fail).with_id(&id).into_response();
    }
    traced(handled.response, &trace_id)
}

fn traced(mut response: Response, trace_id: &str) -> Response {
    if let Ok(v) = HeaderValue::from_str(trace_id) {
        response.headers_mut().insert(writ_client::TRACE_HEADER, v);
    }
    response
}

/// Counts a handled request and records its decision in the tenant's audit. Denials (and strict
/// tenants' decisions) are on the record before the client hears of them; allowed reads are
/// group-committed within the flush window. A decision that went to the ledger with the command
/// the request made (`recorded`, `Command::Audited`) is on the record already.
async fn record(
    edge: &Edge,
    authority: &Authority,
    headers: &HeaderMap,
    trace_id: &str,
    method: &str,
    handled: &serve::Verdict,
    recorded: &std::sync::atomic::AtomicBool,
) -> Result<(), Rejection> {
    let outcome = if handled.denied.is_some() { "denied" } else { "allowed" };
    let label = method_label(method);
    // A refusal Writ is to blame for (a 5xx reason: the ledger unreachable, storage full, an
    // internal fault) is the error ratio's numerator, apart from the caller's refusals.
    let fault = handled.denied.is_some_and(|r| r.http_status() >= 500);
    let counted = if fault { "failed" } else { outcome };
    metrics::counter!("writ_edge_requests_total", "method" => label, "outcome" => counted).increment(1);
    let decision =
        audit::request_decision(trace_id, authority, &handled.client, label, handled.name.as_deref(), handled.denied);
    let strict = handled.denied.is_some()
        || handled.effectful
        || edge.verifier.with_state(|s| {
            s.tenants.get(&authority.tenant_id).is_some_and(|t| t.settings.audit_mode == AuditMode::Strict)
        });
    if recorded.load(std::sync::atomic::Ordering::Acquire) {
        Ok(())
    } else if handled.denied.is_some() {
        edge.audit.commit_denial(&authority.tenant_id, decision, Some(credential(headers))).await
    } else if strict {
        edge.audit.commit(&authority.tenant_id, decision, Some(credential(headers))).await
    } else {
        edge.audit.buffer(&authority.tenant_id, decision, Some(credential(headers))).await;
        Ok(())
    }
}

/// `GET /mcp` (the 2025 wire's stream of server notifications for a session) and `DELETE /mcp`
/// (ends the session the request names); 405 without a session, as on the 2026 wire.
async fn mcp_session(State(edge): State<Arc<Edge>>, method: axum::http::Method, headers: HeaderMap) -> Response {
    if !headers.contains_key(legacy::SESSION_HEADER) {
        return not_allowed_response();
    }
    let authority = match gate(&edge, &headers).await {
        Ok(a) => a,
        Err(r) => return r,
    };
    let trace_id = uuid::Uuid::new_v4().to_string();
    let (handled, label) = if method == axum::http::Method::DELETE {
        (legacy::delete(&edge, &headers, &authority, &trace_id).await, "DELETE")
    } else {
        (legacy::get_stream(&edge, &headers, &authority, &trace_id).await, "GET")
    };
    let unrecorded = std::sync::atomic::AtomicBool::new(false);
    let client = legacy::session_client(&edge, &authority, &headers);
    if let Err(fail) =
        record(&edge, &authority, &headers, &trace_id, label, &handled.verdict(client), &unrecorded).await
    {
        return RpcError::rejected(&fail).into_response();
    }
    traced(handled.response, &trace_id)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn anonymous(url: &str) -> EdgeConfig {
        EdgeConfig::for_url(url, SealKey::random())
            .with_anonymous(AnonymousAccess { tenant: "t".into(), principal: "p".into() })
    }

    /// SPEC E3: anonymous mode exists only on literal loopback; anything else fails at start-up.
    #[test]
    fn anonymous_mode_is_literal_loopback_only() {
        assert!(anonymous("http://127.0.0.1:8080/mcp").check().is_ok());
        assert!(anonymous("http://[::1]:8080/mcp").check().is_ok());
        let local = anonymous("http://127.0.0.1:8080/mcp");
        assert!(!local.allowed_hosts.contains(&"localhost".to_string()), "{:?}", local.allowed_hosts);
        assert!(anonymous("http://localhost:8080/mcp").check().is_err());
        assert!(anonymous("https://edge.example/mcp").check().is_err());
        let mut extra_host = anonymous("http://127.0.0.1:8080/mcp");
        extra_host.allowed_hosts.push("edge.example".into());
        assert!(extra_host.check().unwrap_err().contains("edge.example"));
        let mut extra_origin = anonymous("http://127.0.0.1:8080/mcp");
        extra_origin.allowed_origins.push("https://app.example".into());
        assert!(extra_origin.check().is_err());
        // Without anonymous access any URL is fine.
        assert!(EdgeConfig::for_url("https://edge.example/mcp", SealKey::random()).check().is_ok());
    }

    #[test]
    fn header_values_decode_strict_base64() {
        let mut h = HeaderMap::new();
        h.insert("mcp-name", HeaderValue::from_static("=?base64?SGVsbG8=?="));
        assert_eq!(header_value(&h, "mcp-name").as_deref(), Some("Hello"));
        h.insert("mcp-name", HeaderValue::from_static("=?base64?SGVsbG8?="));
        assert_eq!(header_value(&h, "mcp-name"), None, "missing padding");
        h.insert("mcp-name", HeaderValue::from_static("=?base64?SGVs!!!bG8=?="));
        assert_eq!(header_value(&h, "mcp-name"), None, "bad alphabet");
        h.insert("mcp-name", HeaderValue::from_static("=?base64?SGVsbG8="));
        assert_eq!(header_value(&h, "mcp-name").as_deref(), Some("=?base64?SGVsbG8="), "no suffix: literal");
    }
}
