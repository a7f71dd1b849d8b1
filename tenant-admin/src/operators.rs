//! Named operators on the admin API: who they are (`/v1/operators`), their sessions (a
//! credential handed out once, kept in the ledger as a digest), and what a session lets its
//! operator reach here ([`permit`]); what it lets them change is checked by the ledger
//! (`writ_api::operator::decide::check`, through `Command::ByOperator`).

use axum::extract::{Path, State};
use axum::http::Method;
use axum::routing::{get, post};
use axum::{Json, Router};
use writ_api::dto::{
    CloseOperatorSessionsRequest, OpenOperatorSessionRequest, OperatorList, OperatorSessionAnswer, OperatorWhoAmI,
    SetOperatorRequest,
};
use writ_api::ledger::{Command, Event};
use writ_api::operator::{
    ConsoleSignInV1, OperatorAct, OperatorRole, OperatorSessionV1, OperatorV1, SESSION_TTL_MAX_MS,
};
use writ_api::{ReasonCode, Rejection};
use writ_client::now_ms;

use crate::error::{ApiError, ValidJson};
use crate::service::{actor, find_tenant, submit, Actor, AdminState, Shared};

/// Default lifetime of a session handed out on the admin API.
const SESSION_TTL_DEFAULT_S: u64 = 8 * 3600;
/// How long a node waits to hold the revision a session was recorded at.
const SESSION_WAIT: std::time::Duration = std::time::Duration::from_secs(2);
/// The method name refusals of the admin API are recorded under.
const ADMIN_METHOD: &str = "admin";

pub(crate) fn routes() -> Router<Shared> {
    Router::new()
        .route("/v1/operators", get(list).put(set))
        .route("/v1/operators/me", get(who_am_i))
        .route("/v1/operators/{name}", get(show).delete(remove))
        .route("/v1/operators/{name}/sessions", post(open_session))
        .route("/v1/operators/{name}/sessions/close", post(close_sessions))
        .route("/v1/console/sign-in", get(show_provider).put(set_provider))
}

/// The OpenID provider operators sign in to the console with.
async fn show_provider(State(st): State<Shared>) -> Result<Json<ConsoleSignInV1>, ApiError> {
    let provider = st.view.with_state(|s| s.operators.console_sign_in.clone());
    Ok(Json(provider.ok_or_else(|| Rejection::new(ReasonCode::NOT_FOUND, "no sign-in provider is set"))?))
}

/// Sets the console's sign-in provider, once its discovery answers.
async fn set_provider(
    State(st): State<Shared>,
    ValidJson(b): ValidJson<ConsoleSignInV1>,
) -> Result<Json<ConsoleSignInV1>, ApiError> {
    b.validate()?;
    writ_client::discovery::sign_in_provider(&b.issuer, b.allow_private_network).await?;
    let events = submit(&st, Command::SetConsoleSignIn { sign_in: Some(b.clone()) }).await?;
    caught_up(&st, &events).await;
    Ok(Json(b))
}

/// What the admin API checks itself of a named operator's request: reads and cluster changes
/// need the role, a tenant's operator stays on its tenant's routes. Changes that become
/// ledger commands are the ledger's to check. A refusal is recorded in the operator's own
/// tenant's trail (without flooding) and counted.
pub(crate) async fn permit(st: &AdminState, actor: &Actor, method: &Method, path: &str) -> Result<(), Rejection> {
    let Actor::Operator { operator, .. } = actor else { return Ok(()) };
    if path == "/v1/operators/me" || is_own_sign_out(operator, path) {
        return Ok(());
    }
    let refusal = match checked_here(method, path).filter(|act| !operator.role.may(*act)) {
        Some(act) => Some(Rejection::new(
            ReasonCode::OPERATOR_ROLE_REQUIRED,
            format!("operator '{}' ({}) may not {} here", operator.name, operator.role.as_str(), act.as_str()),
        )),
        None => out_of_scope(st, operator, path).await,
    };
    let Some(refusal) = refusal else { return Ok(()) };
    metrics::counter!("writ_admin_refused_total", "reason" => refusal.reason.as_str()).increment(1);
    if let Some(tenant) = &operator.tenant_id {
        let name = Some(format!("{method} {}", writ_api::audit::truncated(path, 256)));
        crate::refusals::record(st, tenant, operator.actor(), name, ADMIN_METHOD, refusal.reason).await;
    }
    Err(refusal)
}

/// The act a route is checked for here: cluster changes, backups and operator changes
/// administer, reads read; `None` for a change the ledger checks.
fn checked_here(method: &Method, path: &str) -> Option<OperatorAct> {
    let administers = path == "/v1/cluster/backup"
        || (method != Method::GET
            && ["/v1/cluster/", "/v1/operators", "/v1/console/"].iter().any(|p| path.starts_with(p)));
    if administers {
        Some(OperatorAct::Administer)
    } else {
        (method == Method::GET).then_some(OperatorAct::Read)
    }
}

fn is_own_sign_out(operator: &OperatorV1, path: &str) -> bool {
    path == format!("/v1/operators/{}/sessions/close", operator.name)
}

/// A tenant's operator on anything but `/v1/tenants/<its tenant, by id or name>/…`.
async fn out_of_scope(st: &AdminState, operator: &OperatorV1, path: &str) -> Option<Rejection> {
    let tenant_id = operator.tenant_id.as_ref()?;
    let named = path.strip_prefix("/v1/tenants/").and_then(|rest| rest.split('/').next()).filter(|t| !t.is_empty());
    let ours = match named {
        Some(t) => find_tenant(st, t.to_string()).await.is_ok_and(|t| &t.id == tenant_id),
        None => false,
    };
    (!ours).then(|| {
        Rejection::new(
            ReasonCode::OPERATOR_SCOPE_VIOLATION,
            format!("operator '{}' works on tenant '{tenant_id}' only", operator.name),
        )
    })
}

/// The named operator a session credential (`wos_…`) stands for, if its session stands now.
pub(crate) async fn session_actor(st: &AdminState, credential: &str) -> Result<Actor, Rejection> {
    let invalid = || Rejection::new(ReasonCode::OPERATOR_SESSION_INVALID, "the operator session is not valid");
    let (revision, session_id, secret) = writ_api::operator::parse_credential(credential).ok_or_else(invalid)?;
    st.view.wait_for(revision, SESSION_WAIT).await;
    let digest = writ_api::oauth::digest(secret);
    let now = now_ms();
    let (actor, record_use) = st.view.with_state(|s| {
        let (session, operator) = s.operators.session(session_id, now)?;
        if !same_digest(session.secret_sha256.as_bytes(), digest.as_bytes()) {
            return Err(invalid());
        }
        let actor = Actor::Operator { session_id: session_id.to_string(), operator: operator.clone() };
        Ok((actor, session.use_worth_recording(now)))
    })?;
    if record_use {
        // The node's own act: its idle limit is every replica's to count.
        let used = Command::UseOperatorSession { session_id: session_id.to_string() };
        if let Err(e) = crate::service::submit_plain(st, used).await {
            tracing::warn!(reason = %e.reason, message = %e.message, "a session's use could not be recorded");
        }
    }
    Ok(actor)
}

/// Compares two digests in constant time.
pub(crate) fn same_digest(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn operators(st: &AdminState) -> Vec<OperatorV1> {
    st.view.with_state(|s| s.operators.operators.values().cloned().collect())
}

async fn list(State(st): State<Shared>) -> Json<OperatorList> {
    Json(OperatorList { operators: operators(&st) })
}

fn find(st: &AdminState, name: &str) -> Result<OperatorV1, Rejection> {
    st.view.with_state(|s| s.operators.operators.get(name).cloned()).ok_or_else(|| {
        let name = writ_api::audit::truncated(name, 128);
        Rejection::new(ReasonCode::OPERATOR_NOT_FOUND, format!("no operator '{name}'"))
    })
}

async fn show(State(st): State<Shared>, Path(name): Path<String>) -> Result<Json<OperatorV1>, ApiError> {
    Ok(Json(find(&st, &name)?))
}

/// Waits (briefly) for this node's view to hold what `events` recorded.
async fn caught_up(st: &AdminState, events: &[writ_api::ledger::EventEnvelope]) {
    if let Some(last) = events.last() {
        st.view.wait_for(last.revision, SESSION_WAIT).await;
    }
}

async fn set(
    State(st): State<Shared>,
    ValidJson(b): ValidJson<SetOperatorRequest>,
) -> Result<Json<OperatorV1>, ApiError> {
    let tenant_id = match b.tenant {
        Some(t) => Some(find_tenant(&st, t).await?.id),
        None => None,
    };
    let operator =
        OperatorV1 { name: b.name, role: b.role, tenant_id, display_name: b.display_name, sign_in: b.sign_in };
    let events = submit(&st, Command::SetOperator { operator: operator.clone() }).await?;
    caught_up(&st, &events).await;
    Ok(Json(operator))
}

async fn remove(State(st): State<Shared>, Path(name): Path<String>) -> Result<Json<OperatorV1>, ApiError> {
    let operator = find(&st, &name)?;
    let events = submit(&st, Command::RemoveOperator { name }).await?;
    caught_up(&st, &events).await;
    Ok(Json(operator))
}

/// Opens a session of operator `name` and hands its credential out once.
async fn open_session(
    State(st): State<Shared>,
    Path(name): Path<String>,
    ValidJson(b): ValidJson<OpenOperatorSessionRequest>,
) -> Result<Json<OperatorSessionAnswer>, ApiError> {
    let ttl_s = b.ttl_s.unwrap_or(SESSION_TTL_DEFAULT_S);
    if ttl_s == 0 || ttl_s > SESSION_TTL_MAX_MS / 1000 {
        let msg = format!("ttl_s must be 1..={}", SESSION_TTL_MAX_MS / 1000);
        return Err(Rejection::new(ReasonCode::INPUT_INVALID, msg).into());
    }
    let idle_ms = b.idle_s.unwrap_or(0).saturating_mul(1000);
    let (answer, _) = open(&st, &name, ttl_s * 1000, idle_ms).await?;
    Ok(Json(answer))
}

/// Records a new session of `operator` living `ttl_ms`, ending after `idle_ms` unused (0: no
/// idle limit): its answer (with the credential) and the session as recorded.
pub(crate) async fn open(
    st: &AdminState,
    operator: &str,
    ttl_ms: u64,
    idle_ms: u64,
) -> Result<(OperatorSessionAnswer, OperatorSessionV1), Rejection> {
    let session_id = uuid::Uuid::new_v4().simple().to_string();
    let secret = format!("{}{}", uuid::Uuid::new_v4().simple(), uuid::Uuid::new_v4().simple());
    let now = now_ms();
    let session = OperatorSessionV1 {
        session_id: session_id.clone(),
        operator: operator.to_string(),
        secret_sha256: writ_api::oauth::digest(&secret),
        opened_at_ms: now,
        expires_at_ms: now + ttl_ms,
        idle_timeout_ms: idle_ms,
        last_used_at_ms: now,
    };
    let events = submit(st, Command::OpenOperatorSession { session }).await?;
    let recorded = events.iter().find_map(|e| match &e.event {
        Event::OperatorSessionOpenedV1 { session } => Some((e.revision, session.clone())),
        _ => None,
    });
    let (revision, session) =
        recorded.ok_or_else(|| Rejection::new(ReasonCode::INTERNAL, "the session was not recorded"))?;
    caught_up(st, &events).await;
    let answer = OperatorSessionAnswer {
        operator: operator.to_string(),
        session_id: session_id.clone(),
        credential: writ_api::operator::credential(revision, &session_id, &secret),
        expires_at_ms: session.expires_at_ms,
    };
    Ok((answer, session))
}

/// Closes one session of `name`, or all of them: an operator signs itself out, an admin anyone.
async fn close_sessions(
    State(st): State<Shared>,
    Path(name): Path<String>,
    ValidJson(b): ValidJson<CloseOperatorSessionsRequest>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let events =
        submit(&st, Command::CloseOperatorSessions { operator: name.clone(), session_id: b.session_id }).await?;
    caught_up(&st, &events).await;
    Ok(Json(serde_json::json!({"operator": name, "closed": true})))
}

async fn who_am_i() -> Json<OperatorWhoAmI> {
    let me = actor();
    let name = me.name();
    Json(match me {
        Actor::BreakGlass => {
            OperatorWhoAmI { actor: name, role: OperatorRole::Admin, tenant_id: None, session_id: None }
        }
        Actor::Operator { session_id, operator } => OperatorWhoAmI {
            actor: name,
            role: operator.role,
            tenant_id: operator.tenant_id,
            session_id: Some(session_id),
        },
    })
}
