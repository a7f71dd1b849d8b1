//! The admin API under `/v1`, authenticated with the operator token, written against the
//! [`Ledger`] trait so it runs inside a node or against a remote cluster alike.

use std::sync::Arc;

use axum::extract::{DefaultBodyLimit, Path, Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use sha2::{Digest, Sha256};
use writ_api::device::{Device, Site};
use writ_api::dto::PrincipalQuotasView;
use writ_api::dto::{
    ClusterChange, ClusterStatus, Consistency, CreatePrincipalRequest, CreateTenantRequest, NodeStatus, PrincipalList,
    Query as LedgerQuery, RevokePrincipalRequest, RevokeScopeRequest, SubmitRequest, SuspendTenantRequest, TenantList,
    PAGE_LIMIT_DEFAULT,
};
use writ_api::dto::{CreateDeviceRequest, CreateSiteRequest, DeviceList, SiteList};
use writ_api::ledger::{Command, Outcome, Tenant};
use writ_api::principal::{Principal, PrincipalSpecV1};
use writ_api::quota::PrincipalQuotasV2;
use writ_api::retention::TenantStorageV1;
use writ_api::settings::TenantSettingsPatch;
use writ_api::{ReasonCode, Rejection};
use writ_client::verifier::{StateView, Verifier};
use writ_client::{Ledger, TRACE_HEADER};

use crate::error::{method_not_allowed, not_found, ApiError, ValidJson, ValidQuery};

/// Largest admin request body accepted.
pub const ADMIN_BODY_BYTES_MAX: usize = 64 * 1024;

/// What the admin API needs besides the ledger.
pub struct AdminConfig {
    /// The operator bearer token (non-empty; checked by config).
    pub operator_token: String,
    /// This node's token-signing key (replaced when the ledger retires it).
    pub signing_keys: crate::signing::SigningKeys,
    /// Default `aud` of issued tokens (the edge's canonical URI).
    pub token_audience: String,
    /// This node's secret for deriving its per-tenant executor CA keys.
    pub ca_secret: [u8; 32],
    /// Lifetime of the executor certificates this node issues (enrollment and renewal).
    pub executor_cert_ttl_s: u64,
    /// sha256 (hex) of the CAs edges' executor endpoints chain to: the enrollment tokens this
    /// node makes pin them (`writ_api::executor::EnrollmentToken`).
    pub edge_ca_pins: Vec<String>,
    /// The ledger state the admin API reads (token inspection, keys, CAs, certificates): the
    /// node's own applied state. `None`: a verifier that follows `ledger` (a second copy).
    pub state: Option<Arc<dyn StateView>>,
    /// Where `GET /v1/cluster/backup` reads from (the serving node's store); `None`: no backups
    /// here (the route answers NOT_FOUND).
    pub backup: Option<Arc<dyn BackupSource>>,
}

/// The bytes of a backup (`writ_api::backup`) as they are read, in order; an `Err` item ends a
/// backup that could not be finished.
pub type BackupChunks = tokio::sync::mpsc::Receiver<std::io::Result<Vec<u8>>>;

/// A node that can write a backup of its store.
pub trait BackupSource: Send + Sync {
    /// Starts a backup that holds every write acknowledged before the call.
    fn backup(&self) -> futures::future::BoxFuture<'_, Result<BackupChunks, Rejection>>;
}

pub(crate) struct AdminState {
    pub(crate) ledger: Arc<dyn Ledger>,
    backup: Option<Arc<dyn BackupSource>>,
    /// sha256 of the operator token: compared in constant time, never kept in clear.
    operator_token_sha256: [u8; 32],
    pub(crate) signing_keys: crate::signing::SigningKeys,
    pub(crate) token_audience: String,
    /// The ledger state `token inspect` is answered from exactly as an edge would (and where
    /// this node's signing key, executor CAs and certificates are looked up).
    pub(crate) view: Arc<dyn StateView>,
    pub(crate) ca_secret: [u8; 32],
    pub(crate) executor_cert_ttl_s: u64,
    pub(crate) edge_ca_pins: Vec<String>,
    /// Refusals (authorization servers' steps, operators' acts), recorded without flooding.
    pub(crate) refusals: crate::refusals::Refusals,
}

pub(crate) type Shared = Arc<AdminState>;

/// Builds the `/v1` router. Must be called inside a Tokio runtime (it starts the verifier feed).
pub fn router(ledger: Arc<dyn Ledger>, config: AdminConfig) -> Router {
    let state = Arc::new(AdminState {
        view: config.state.unwrap_or_else(|| Arc::new(Verifier::follow(ledger.clone(), config.token_audience.clone()))),
        ledger,
        backup: config.backup,
        operator_token_sha256: Sha256::digest(config.operator_token.as_bytes()).into(),
        signing_keys: config.signing_keys,
        token_audience: config.token_audience,
        ca_secret: config.ca_secret,
        executor_cert_ttl_s: config.executor_cert_ttl_s,
        edge_ca_pins: config.edge_ca_pins,
        refusals: Default::default(),
    });
    let api = Router::new()
        .route("/v1/cluster/status", get(cluster_status))
        .route("/v1/cluster/learners", post(add_learner))
        .route("/v1/cluster/membership", post(change_membership))
        .route("/v1/cluster/snapshot", post(snapshot))
        .route("/v1/cluster/purge", post(purge))
        .route("/v1/cluster/backup", get(backup))
        .route("/v1/tenants", post(create_tenant).get(list_tenants))
        .route("/v1/tenants/{tenant}", get(show_tenant).delete(delete_tenant))
        .route("/v1/tenants/{tenant}/suspend", post(suspend_tenant))
        .route("/v1/tenants/{tenant}/resume", post(resume_tenant))
        .route("/v1/tenants/{tenant}/purge", post(purge_tenant))
        .route("/v1/tenants/{tenant}/storage", get(tenant_storage))
        .route("/v1/tenants/{tenant}/settings", axum::routing::patch(set_tenant_settings))
        .route("/v1/tenants/{tenant}/sites", post(create_site).get(list_sites))
        .route("/v1/tenants/{tenant}/sites/{site}", get(show_site))
        .route("/v1/tenants/{tenant}/devices", post(create_device).get(list_devices))
        .route("/v1/tenants/{tenant}/devices/{device}", get(show_device))
        .route("/v1/tenants/{tenant}/principals", post(create_principal).get(list_principals))
        .route("/v1/tenants/{tenant}/principals/{principal}", get(show_principal))
        .route("/v1/tenants/{tenant}/principals/{principal}/revoke", post(revoke_principal))
        .route("/v1/tenants/{tenant}/principals/{principal}/scopes/revoke", post(revoke_scope))
        .route("/v1/tenants/{tenant}/principals/{principal}/scopes/grant", post(grant_scope))
        .route("/v1/tenants/{tenant}/principals/{principal}/quotas", get(get_quotas).put(set_quotas))
        .merge(crate::tokens::routes())
        .merge(crate::oauth::routes())
        .merge(crate::credentials::routes())
        .merge(crate::catalogs::routes())
        .merge(crate::upstreams::routes())
        .merge(crate::health::routes())
        .merge(crate::audit::routes())
        .merge(crate::enroll::operator_routes())
        .merge(crate::operations::routes())
        .merge(crate::work::routes())
        .merge(crate::operators::routes())
        .route_layer(middleware::from_fn_with_state(state.clone(), require_operator))
        .merge(crate::enroll::public_routes())
        .merge(crate::tokens::public_routes())
        .merge(crate::oauth::public_routes())
        .route("/v1/openapi.json", get(openapi))
        .merge(crate::console::routes())
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(ADMIN_BODY_BYTES_MAX))
        .with_state(state);
    api.fallback(not_found)
}

/// Authenticates the caller — the shared operator token (break-glass) or a named operator's
/// session — and lets a named operator through only to what its role and scope allow here:
/// reads and cluster changes (acts that become ledger commands are checked by the ledger, see
/// [`submit`]). A refusal of a tenant's operator is recorded in that tenant's trail.
async fn require_operator(State(st): State<Shared>, req: Request, next: Next) -> Response {
    let actor = match authenticate(&st, req.headers()).await {
        Ok(actor) => actor,
        Err(resp) => return resp,
    };
    if let Err(refusal) = crate::operators::permit(&st, &actor, req.method(), req.uri().path()).await {
        return ApiError::from(refusal).into_response();
    }
    let trace = request_trace(req.headers());
    let mut resp = TRACE.scope(trace.clone(), ACTOR.scope(actor, next.run(req))).await;
    if let Ok(v) = HeaderValue::from_str(&trace) {
        resp.headers_mut().insert(TRACE_HEADER, v);
    }
    resp
}

/// Who the bearer credential of an admin request is.
async fn authenticate(st: &AdminState, headers: &axum::http::HeaderMap) -> Result<Actor, Response> {
    let presented =
        headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()).and_then(|v| v.strip_prefix("Bearer "));
    let Some(token) = presented.map(str::trim) else {
        return Err(unauthorized(ReasonCode::AUTH_TOKEN_MISSING, "an operator bearer token is required"));
    };
    if token.starts_with(writ_api::operator::SESSION_PREFIX) {
        let session = crate::operators::session_actor(st, token).await;
        return session.map_err(|r| unauthorized(r.reason, &r.message));
    }
    let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
    if !crate::operators::same_digest(&digest, &st.operator_token_sha256) {
        return Err(unauthorized(ReasonCode::AUTH_TOKEN_INVALID, "the operator token is not valid"));
    }
    Ok(Actor::BreakGlass)
}

/// Who an admin request acts as.
#[derive(Debug, Clone)]
pub(crate) enum Actor {
    /// The shared operator token: the break-glass path, the cluster's admin, recorded as
    /// `break-glass`.
    BreakGlass,
    /// A named operator's session.
    Operator { session_id: String, operator: writ_api::operator::OperatorV1 },
}

impl Actor {
    /// The name this actor's acts are recorded under (operation histories, work, approvals).
    pub(crate) fn name(&self) -> String {
        match self {
            Actor::BreakGlass => "break-glass".into(),
            Actor::Operator { operator, .. } => operator.actor(),
        }
    }
}

/// Runs `work` as `actor`, under a new trace id (a console request's acts).
pub(crate) async fn acting<F: std::future::Future>(actor: Actor, work: F) -> F::Output {
    TRACE.scope(uuid::Uuid::new_v4().to_string(), ACTOR.scope(actor, work)).await
}

/// Who the admin request being served acts as (the break-glass actor outside a request).
pub(crate) fn actor() -> Actor {
    ACTOR.try_with(Clone::clone).unwrap_or(Actor::BreakGlass)
}

tokio::task_local! {
    /// The trace id of the admin request being served: every ledger command it submits carries
    /// it, and the response's `x-writ-trace-id` names it.
    static TRACE: String;
    /// Who the admin request being served acts as.
    static ACTOR: Actor;
}

/// Longest trace id taken from a caller.
const TRACE_ID_BYTES_MAX: usize = 64;

/// The caller's `x-writ-trace-id` when it is a plain id (at most [`TRACE_ID_BYTES_MAX`] bytes
/// of letters, digits, `-` and `_`: it is echoed and stored), else a new one.
fn request_trace(headers: &axum::http::HeaderMap) -> String {
    headers
        .get(TRACE_HEADER)
        .and_then(|v| v.to_str().ok())
        .filter(|t| {
            !t.is_empty()
                && t.len() <= TRACE_ID_BYTES_MAX
                && t.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
        .map(str::to_string)
        .unwrap_or_else(|| uuid::Uuid::new_v4().to_string())
}

fn unauthorized(reason: ReasonCode, message: &str) -> Response {
    let mut resp = ApiError::new(reason, message).into_response();
    resp.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer realm=\"writ-admin\""));
    resp
}

/// The trace id of the admin request being served (a new one outside a request).
pub(crate) fn trace_id() -> String {
    TRACE.try_with(Clone::clone).unwrap_or_else(|_| uuid::Uuid::new_v4().to_string())
}

async fn cluster_status(State(st): State<Shared>) -> Result<Json<ClusterStatus>, ApiError> {
    Ok(Json(st.ledger.cluster_status().await?))
}

async fn add_learner(
    State(st): State<Shared>,
    ValidJson(b): ValidJson<writ_api::dto::AddLearnerRequest>,
) -> Result<Json<NodeStatus>, ApiError> {
    if b.node_id == 0 || !(b.addr.starts_with("http://") || b.addr.starts_with("https://")) {
        return Err(ApiError::new(ReasonCode::INPUT_INVALID, "node_id must be > 0 and addr an http(s) URL"));
    }
    Ok(Json(st.ledger.cluster_change(ClusterChange::AddLearner { node_id: b.node_id, addr: b.addr }).await?))
}

async fn change_membership(
    State(st): State<Shared>,
    ValidJson(b): ValidJson<writ_api::dto::MembershipRequest>,
) -> Result<Json<NodeStatus>, ApiError> {
    Ok(Json(st.ledger.cluster_change(ClusterChange::ChangeMembership { voters: b.voters }).await?))
}

async fn snapshot(State(st): State<Shared>) -> Result<Json<NodeStatus>, ApiError> {
    Ok(Json(st.ledger.cluster_change(ClusterChange::Snapshot).await?))
}

async fn purge(State(st): State<Shared>) -> Result<Json<NodeStatus>, ApiError> {
    Ok(Json(st.ledger.cluster_change(ClusterChange::PurgeLog).await?))
}

/// Submits a command and turns a rejection outcome into an error.
/// Submits `command`; while a member cannot read it (`LEDGER_VERSION_GATED`: an older build,
/// or one not reachable to ask), its older form entry by entry (`Command::older_form`), so
/// creating a tenant or principal stays available through an upgrade or an outage.
async fn submit_compatible(st: &AdminState, command: Command) -> Result<(), Rejection> {
    match submit(st, command.clone()).await {
        Err(e) if e.reason == ReasonCode::LEDGER_VERSION_GATED => {
            for older in command.older_form().ok_or(e)? {
                submit(st, older).await?;
            }
            Ok(())
        }
        other => other.map(|_| ()),
    }
}

/// Submits `command` as the request's actor: a named operator's inside `Command::ByOperator`,
/// so every replica checks the session, role and scope and records who acted.
pub(crate) async fn submit(
    st: &AdminState,
    command: Command,
) -> Result<Vec<writ_api::ledger::EventEnvelope>, Rejection> {
    let command = match ACTOR.try_with(Clone::clone) {
        Ok(Actor::Operator { session_id, .. }) => Command::ByOperator { session_id, command: Box::new(command) },
        _ => command,
    };
    submit_plain(st, command).await
}

/// Submits `command` as it is (the node's own act, or one already attributed).
pub(crate) async fn submit_plain(
    st: &AdminState,
    command: Command,
) -> Result<Vec<writ_api::ledger::EventEnvelope>, Rejection> {
    let resp = st.ledger.submit(SubmitRequest::new(trace_id(), command)).await?;
    match resp.outcome {
        Outcome::Applied { events, .. } => Ok(events),
        Outcome::Rejected { reason, message, .. } => Err(Rejection::new(reason, message)),
        Outcome::Internal | Outcome::Batch(_) => Err(Rejection::new(ReasonCode::INTERNAL, "unexpected ledger outcome")),
    }
}

async fn create_tenant(
    State(st): State<Shared>,
    ValidJson(b): ValidJson<CreateTenantRequest>,
) -> Result<(StatusCode, Json<Tenant>), ApiError> {
    // Fail fast with the same rule the ledger applies (the ledger stays authoritative).
    writ_api::rejection::validate_tenant_name(&b.name)?;
    let tenant_id = format!("t-{}", uuid::Uuid::new_v4().simple());
    let mut settings = b.settings.unwrap_or_default();
    settings.quotas.get_or_insert_with(writ_api::settings::QuotasV1::fresh_tenant);
    let create = Command::CreateTenantWith {
        tenant_id: tenant_id.clone(),
        name: b.name,
        display_name: b.display_name,
        settings,
    };
    submit_compatible(&st, create).await?;
    // Answer with the tenant as the ledger holds it (one source of truth for the view).
    Ok((StatusCode::CREATED, Json(find_tenant(&st, tenant_id).await?)))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ListParams {
    after: Option<String>,
    limit: Option<u32>,
    #[serde(default)]
    stale: bool,
}

fn consistency(stale: bool) -> Consistency {
    if stale {
        Consistency::Stale
    } else {
        Consistency::Linearizable
    }
}

async fn list_tenants(
    State(st): State<Shared>,
    ValidQuery(p): ValidQuery<ListParams>,
) -> Result<Json<TenantList>, ApiError> {
    let query = LedgerQuery::ListTenants { after: p.after, limit: p.limit.unwrap_or(PAGE_LIMIT_DEFAULT) };
    Ok(Json(self::query(&st, query, p.stale).await?))
}

pub(crate) async fn find_tenant(st: &AdminState, tenant: String) -> Result<Tenant, Rejection> {
    query(st, LedgerQuery::GetTenant { tenant }, false).await
}

async fn show_tenant(State(st): State<Shared>, Path(tenant): Path<String>) -> Result<Json<Tenant>, ApiError> {
    Ok(Json(find_tenant(&st, tenant).await?))
}

type OptionalBody = Result<axum::body::Bytes, axum::extract::rejection::BytesRejection>;

/// A change of a tenant's lifecycle with an optional `{"note": …}` body; answers the tenant.
async fn tenant_lifecycle(
    st: &AdminState,
    tenant: String,
    body: OptionalBody,
    command: impl FnOnce(String, Option<String>) -> Command,
) -> Result<Json<Tenant>, ApiError> {
    let note = optional_json::<SuspendTenantRequest>(body)?.note;
    let t = find_tenant(st, tenant).await?;
    submit(st, command(t.id.clone(), note)).await?;
    Ok(Json(find_tenant(st, t.id).await?))
}

async fn suspend_tenant(
    State(st): State<Shared>,
    Path(tenant): Path<String>,
    body: OptionalBody,
) -> Result<Json<Tenant>, ApiError> {
    tenant_lifecycle(&st, tenant, body, |tenant_id, note| Command::SuspendTenant { tenant_id, note }).await
}

/// `DELETE /v1/tenants/{tenant}` (optional body `{"note": …}`): a tombstone, final.
async fn delete_tenant(
    State(st): State<Shared>,
    Path(tenant): Path<String>,
    body: OptionalBody,
) -> Result<Json<Tenant>, ApiError> {
    tenant_lifecycle(&st, tenant, body, |tenant_id, note| Command::DeleteTenant { tenant_id, note }).await
}

/// `POST /v1/tenants/{tenant}/purge`: a deleted tenant's data, once its retention has passed
/// (`TENANT_PURGE_AFTER_MS`); answers 204.
async fn purge_tenant(State(st): State<Shared>, Path(tenant): Path<String>) -> Result<StatusCode, ApiError> {
    let t = find_tenant(&st, tenant).await?;
    submit(&st, Command::PurgeTenant { tenant_id: t.id }).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `GET /v1/cluster/backup`: a consistent backup of the serving node's ledger (state, audit
/// records, evidence, events; `writ_api::backup`), streamed as it is read.
async fn backup(State(st): State<Shared>) -> Result<Response, ApiError> {
    let source = st
        .backup
        .as_ref()
        .ok_or_else(|| ApiError::new(ReasonCode::NOT_FOUND, "this admin API serves no store to back up"))?;
    let rx = source.backup().await?;
    let body = axum::body::Body::from_stream(futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (item.map(axum::body::Bytes::from), rx))
    }));
    Ok(([(header::CONTENT_TYPE, "application/octet-stream")], body).into_response())
}

/// `GET /v1/tenants/{t}/storage`: what the ledger keeps of the tenant and when retention next
/// drops something (`writ_api::retention`).
async fn tenant_storage(
    State(st): State<Shared>,
    Path(tenant): Path<String>,
) -> Result<Json<TenantStorageV1>, ApiError> {
    let t = find_tenant(&st, tenant).await?;
    Ok(Json(query(&st, LedgerQuery::GetTenantStorage { tenant_id: t.id }, false).await?))
}

async fn resume_tenant(State(st): State<Shared>, Path(tenant): Path<String>) -> Result<Json<Tenant>, ApiError> {
    let t = find_tenant(&st, tenant).await?;
    submit(&st, Command::ResumeTenant { tenant_id: t.id.clone() }).await?;
    Ok(Json(find_tenant(&st, t.id).await?))
}

/// An optional JSON body: empty means the default, anything else must parse strictly.
pub(crate) fn optional_json<T: Default + serde::de::DeserializeOwned>(
    body: Result<axum::body::Bytes, axum::extract::rejection::BytesRejection>,
) -> Result<T, ApiError> {
    let bytes = body.map_err(|e| {
        if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::new(ReasonCode::PAYLOAD_TOO_LARGE, "request body exceeds the size limit")
        } else {
            ApiError::new(ReasonCode::INPUT_INVALID, e.body_text())
        }
    })?;
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    serde_json::from_slice(&bytes)
        .map_err(|e| ApiError::new(ReasonCode::INPUT_INVALID, format!("invalid JSON body: {e}")))
}

async fn set_tenant_settings(
    State(st): State<Shared>,
    Path(tenant): Path<String>,
    ValidJson(patch): ValidJson<TenantSettingsPatch>,
) -> Result<Json<Tenant>, ApiError> {
    let t = find_tenant(&st, tenant).await?;
    submit(&st, Command::SetTenantSettings { tenant_id: t.id.clone(), patch }).await?;
    Ok(Json(find_tenant(&st, t.id).await?))
}

pub(crate) async fn find_principal(
    st: &AdminState,
    tenant_id: String,
    principal: String,
) -> Result<Principal, Rejection> {
    query(st, LedgerQuery::GetPrincipal { tenant_id, principal }, false).await
}

async fn create_principal(
    State(st): State<Shared>,
    Path(tenant): Path<String>,
    ValidJson(b): ValidJson<CreatePrincipalRequest>,
) -> Result<(StatusCode, Json<Principal>), ApiError> {
    let t = find_tenant(&st, tenant).await?;
    let spec = PrincipalSpecV1 {
        principal_id: format!("p-{}", uuid::Uuid::new_v4().simple()),
        name: b.name,
        kind: b.kind,
        preset: b.preset,
        scopes: b.scopes.into_iter().collect(),
        metadata: b.metadata,
    };
    // Fail fast with the ledger's own rules (the ledger stays authoritative).
    spec.validate()?;
    let quotas = b.quotas.unwrap_or_else(writ_api::quota::PrincipalQuotasV2::fresh_principal);
    quotas.validate()?;
    let principal_id = spec.principal_id.clone();
    submit_compatible(&st, Command::CreatePrincipalWith { tenant_id: t.id.clone(), spec, quotas }).await?;
    Ok((StatusCode::CREATED, Json(find_principal(&st, t.id, principal_id).await?)))
}

async fn list_principals(
    State(st): State<Shared>,
    Path(tenant): Path<String>,
    ValidQuery(p): ValidQuery<ListParams>,
) -> Result<Json<PrincipalList>, ApiError> {
    let t = find_tenant(&st, tenant).await?;
    let query =
        LedgerQuery::ListPrincipals { tenant_id: t.id, after: p.after, limit: p.limit.unwrap_or(PAGE_LIMIT_DEFAULT) };
    Ok(Json(self::query(&st, query, p.stale).await?))
}

async fn show_principal(
    State(st): State<Shared>,
    Path((tenant, principal)): Path<(String, String)>,
) -> Result<Json<Principal>, ApiError> {
    let t = find_tenant(&st, tenant).await?;
    Ok(Json(find_principal(&st, t.id, principal).await?))
}

async fn revoke_principal(
    State(st): State<Shared>,
    Path((tenant, principal)): Path<(String, String)>,
    body: Result<axum::body::Bytes, axum::extract::rejection::BytesRejection>,
) -> Result<Json<Principal>, ApiError> {
    let note = optional_json::<RevokePrincipalRequest>(body)?.note;
    let t = find_tenant(&st, tenant).await?;
    let p = find_principal(&st, t.id.clone(), principal).await?;
    submit(&st, Command::RevokePrincipal { tenant_id: t.id.clone(), principal_id: p.id.clone(), note }).await?;
    Ok(Json(find_principal(&st, t.id, p.id).await?))
}

async fn revoke_scope(
    State(st): State<Shared>,
    Path((tenant, principal)): Path<(String, String)>,
    ValidJson(b): ValidJson<RevokeScopeRequest>,
) -> Result<Json<Principal>, ApiError> {
    let t = find_tenant(&st, tenant).await?;
    let p = find_principal(&st, t.id.clone(), principal).await?;
    submit(&st, Command::RevokeScope { tenant_id: t.id.clone(), principal_id: p.id.clone(), scope: b.scope }).await?;
    Ok(Json(find_principal(&st, t.id, p.id).await?))
}

/// `POST …/principals/{p}/scopes/grant`: one more scope (the body is a [`RevokeScopeRequest`]'s
/// shape: `{"scope": …}`).
async fn grant_scope(
    State(st): State<Shared>,
    Path((tenant, principal)): Path<(String, String)>,
    ValidJson(b): ValidJson<RevokeScopeRequest>,
) -> Result<Json<Principal>, ApiError> {
    let t = find_tenant(&st, tenant).await?;
    let p = find_principal(&st, t.id.clone(), principal).await?;
    submit(&st, Command::GrantScope { tenant_id: t.id.clone(), principal_id: p.id.clone(), scope: b.scope }).await?;
    Ok(Json(find_principal(&st, t.id, p.id).await?))
}

async fn find_quotas(st: &AdminState, tenant_id: String, principal: String) -> Result<PrincipalQuotasView, ApiError> {
    Ok(query(st, LedgerQuery::GetPrincipalQuotas { tenant_id, principal }, false).await?)
}

/// `GET …/principals/{p}/quotas`: the principal's own limits (its tenant's apply on top).
async fn get_quotas(
    State(st): State<Shared>,
    Path((tenant, principal)): Path<(String, String)>,
) -> Result<Json<PrincipalQuotasView>, ApiError> {
    let t = find_tenant(&st, tenant).await?;
    Ok(Json(find_quotas(&st, t.id, principal).await?))
}

/// `PUT …/principals/{p}/quotas`: replaces the principal's own limits (`{}` clears them).
async fn set_quotas(
    State(st): State<Shared>,
    Path((tenant, principal)): Path<(String, String)>,
    ValidJson(quotas): ValidJson<PrincipalQuotasV2>,
) -> Result<Json<PrincipalQuotasView>, ApiError> {
    let t = find_tenant(&st, tenant).await?;
    quotas.validate()?;
    let p = find_principal(&st, t.id.clone(), principal).await?;
    submit(&st, Command::SetPrincipalQuotasV2 { tenant_id: t.id.clone(), principal: p.id.clone(), quotas }).await?;
    Ok(Json(find_quotas(&st, t.id, p.id).await?))
}

/// Runs `query` (stale reads only when asked) and takes out the answer of type `T`.
pub(crate) async fn query<T: writ_api::dto::Answer>(
    st: &AdminState,
    query: LedgerQuery,
    stale: bool,
) -> Result<T, Rejection> {
    writ_client::query_as(st.ledger.as_ref(), query, consistency(stale)).await
}

async fn find_site(st: &AdminState, tenant_id: String, site: String) -> Result<Site, ApiError> {
    Ok(query(st, LedgerQuery::GetSite { tenant_id, site }, false).await?)
}

pub(crate) async fn find_device(st: &AdminState, tenant_id: String, device: String) -> Result<Device, ApiError> {
    Ok(query(st, LedgerQuery::GetDevice { tenant_id, device }, false).await?)
}

async fn create_site(
    State(st): State<Shared>,
    Path(tenant): Path<String>,
    ValidJson(b): ValidJson<CreateSiteRequest>,
) -> Result<(StatusCode, Json<Site>), ApiError> {
    let t = find_tenant(&st, tenant).await?;
    let site_id = format!("s-{}", uuid::Uuid::new_v4().simple());
    writ_api::device::validate_site(&site_id, &b.name, b.display_name.as_deref())?;
    let cmd = Command::CreateSite {
        tenant_id: t.id.clone(),
        site_id: site_id.clone(),
        name: b.name,
        display_name: b.display_name,
    };
    submit(&st, cmd).await?;
    Ok((StatusCode::CREATED, Json(find_site(&st, t.id, site_id).await?)))
}

async fn list_sites(
    State(st): State<Shared>,
    Path(tenant): Path<String>,
    ValidQuery(p): ValidQuery<ListParams>,
) -> Result<Json<SiteList>, ApiError> {
    let t = find_tenant(&st, tenant).await?;
    let q = LedgerQuery::ListSites { tenant_id: t.id, after: p.after, limit: p.limit.unwrap_or(PAGE_LIMIT_DEFAULT) };
    Ok(Json(query(&st, q, p.stale).await?))
}

async fn show_site(
    State(st): State<Shared>,
    Path((tenant, site)): Path<(String, String)>,
) -> Result<Json<Site>, ApiError> {
    let t = find_tenant(&st, tenant).await?;
    Ok(Json(find_site(&st, t.id, site).await?))
}

async fn create_device(
    State(st): State<Shared>,
    Path(tenant): Path<String>,
    ValidJson(b): ValidJson<CreateDeviceRequest>,
) -> Result<(StatusCode, Json<Device>), ApiError> {
    let t = find_tenant(&st, tenant).await?;
    let site = find_site(&st, t.id.clone(), b.site).await?;
    let device_id = format!("d-{}", uuid::Uuid::new_v4().simple());
    writ_api::device::validate_device(&device_id, &b.name, &b.device_class)?;
    let cmd = Command::CreateDevice {
        tenant_id: t.id.clone(),
        device_id: device_id.clone(),
        site_id: site.id,
        name: b.name,
        device_class: b.device_class,
    };
    submit(&st, cmd).await?;
    Ok((StatusCode::CREATED, Json(find_device(&st, t.id, device_id).await?)))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DeviceListParams {
    site: Option<String>,
    after: Option<String>,
    limit: Option<u32>,
    #[serde(default)]
    stale: bool,
}

async fn list_devices(
    State(st): State<Shared>,
    Path(tenant): Path<String>,
    ValidQuery(p): ValidQuery<DeviceListParams>,
) -> Result<Json<DeviceList>, ApiError> {
    let t = find_tenant(&st, tenant).await?;
    let site_id = match p.site {
        Some(site) => Some(find_site(&st, t.id.clone(), site).await?.id),
        None => None,
    };
    let q = LedgerQuery::ListDevices {
        tenant_id: t.id,
        site_id,
        after: p.after,
        limit: p.limit.unwrap_or(PAGE_LIMIT_DEFAULT),
    };
    Ok(Json(query(&st, q, p.stale).await?))
}

async fn show_device(
    State(st): State<Shared>,
    Path((tenant, device)): Path<(String, String)>,
) -> Result<Json<Device>, ApiError> {
    let t = find_tenant(&st, tenant).await?;
    Ok(Json(find_device(&st, t.id, device).await?))
}

async fn openapi() -> Json<serde_json::Value> {
    Json(crate::openapi::document())
}
