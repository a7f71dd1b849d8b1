//! The desk's pages: *Now* — what needs a human (authorization requests waiting for an
//! operator, operations whose effect is unknown or awaits a verdict) in the operator's scope —
//! its live updates, and the changes made from it.

use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::extract::{Form, Path, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{Html, IntoResponse, Response};
use serde::Deserialize;
use writ_api::ledger::Command;
use writ_api::oauth::AuthStatusV1;
use writ_api::operation::OperationState;
use writ_api::state::LedgerState;
use writ_api::{ReasonCode, Rejection};
use writ_client::now_ms;

use super::{check_change, desk, esc, page, refusal, Desk, SESSION_COOKIE};
use crate::service::{acting, submit, Actor, Shared};

/// Most items of each kind the *Now* page lists.
const ITEMS_MAX: usize = 100;
/// Most event streams the console serves at once (each waits on the replica).
const STREAMS_MAX: usize = 256;
/// How often an idle event stream checks that its session still stands.
const STREAM_CHECK: Duration = Duration::from_secs(15);

static STREAMS: AtomicUsize = AtomicUsize::new(0);

/// A change's form: only its CSRF token (a missing one is refused like a wrong one).
#[derive(Deserialize)]
pub(crate) struct ChangeForm {
    #[serde(default)]
    csrf: String,
}

impl ChangeForm {
    pub(crate) fn csrf(&self) -> &str {
        &self.csrf
    }
}

pub(crate) async fn now(State(st): State<Shared>, desk: Desk) -> Response {
    let body = format!("<section id=\"now\" aria-live=\"polite\">{}</section>", now_html(&st, &desk).await);
    Html(page("Now", Some(&desk), &body)).into_response()
}

/// The *Now* section alone (what the script swaps in when the ledger moved).
pub(crate) async fn now_fragment(State(st): State<Shared>, headers: HeaderMap) -> Response {
    match desk(&st, &headers).await {
        Ok(desk) => Html(now_html(&st, &desk).await).into_response(),
        Err(_) => StatusCode::UNAUTHORIZED.into_response(),
    }
}

/// Whether the desk's operator works on tenant `tenant_id` (a cluster operator: every tenant).
pub(crate) fn in_scope(desk: &Desk, tenant_id: &str) -> bool {
    match &desk.actor {
        Actor::Operator { operator, .. } => operator.tenant_id.as_deref().is_none_or(|t| t == tenant_id),
        Actor::BreakGlass => true,
    }
}

/// The tenants (id, name) the desk's operator works on.
fn tenants_in_scope(s: &LedgerState, desk: &Desk) -> Vec<(String, String)> {
    s.tenants.values().filter(|t| in_scope(desk, &t.id)).map(|t| (t.id.clone(), t.name.clone())).collect()
}

async fn now_html(st: &Shared, desk: &Desk) -> String {
    let now = now_ms();
    let storage = storage_alarms(st, desk).await;
    st.view.with_state(|s| {
        let tenants = tenants_in_scope(s, desk);
        let requests = requests_html(s, &tenants, desk, now);
        let operations = operations_html(s, &tenants);
        let alarms = alarms_html(s, &tenants, now, storage);
        format!(
            "<h2>Authorization requests waiting for an operator</h2>{requests}\
             <h2>Operations that need a human</h2>{operations}<h2>Alarms</h2>{alarms}"
        )
    })
}

fn requests_html(s: &LedgerState, tenants: &[(String, String)], desk: &Desk, now: u64) -> String {
    let mut rows = Vec::new();
    for (id, name) in tenants {
        let Some(oauth) = s.oauth.get(id) else { continue };
        let waiting = oauth.requests.values().filter(|r| r.expires_at_ms > now && r.status == AuthStatusV1::Pending);
        for r in waiting.take(ITEMS_MAX.saturating_sub(rows.len())) {
            let client = oauth.clients.get(&r.request.client_id);
            let principal = client
                .and_then(|c| s.principals.get(id).and_then(|p| p.get(&c.principal_id)))
                .map_or("?", |p| p.name.as_str());
            let scopes: Vec<&str> = r.request.scopes.iter().map(String::as_str).collect();
            let action = |decision: &str, label: &str| {
                format!(
                    "<form method=\"post\" action=\"/console/oauth/{}/{}/{decision}\"><input type=\"hidden\" \
                     name=\"csrf\" value=\"{}\"><button type=\"submit\">{label}</button></form>",
                    esc(name),
                    esc(&r.request.request_id),
                    esc(&desk.csrf)
                )
            };
            rows.push(format!(
                "<tr id=\"request-{}\"><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"acts\">{}{}</td></tr>",
                esc(&r.request.request_id),
                esc(name),
                esc(&r.request.client_id),
                esc(principal),
                esc(&scopes.join(" ")),
                action("approve", "Approve"),
                action("deny", "Deny")
            ));
        }
    }
    table(&["Tenant", "Client", "Acts as", "Scopes", "Decide"], &rows, "No authorization request is waiting.")
}

fn operations_html(s: &LedgerState, tenants: &[(String, String)]) -> String {
    let mut rows = Vec::new();
    for (id, name) in tenants {
        // Live ones awaiting approval, and the queue of effects to reconcile or decide.
        let queue = writ_api::operation::OperationFilter { needs_attention: true, ..Default::default() };
        let (waiting, _) = s.list_operations(id, &queue, None, ITEMS_MAX);
        let live = s.operations.get(id).into_iter().flat_map(|m| m.values()).cloned();
        let ops: std::collections::BTreeMap<String, _> =
            live.chain(waiting).map(|o| (o.spec.operation_id.clone(), o)).collect();
        let attention = ops.values().filter_map(|o| needs_human(o).map(|why| (o, why)));
        for (op, why) in attention.take(ITEMS_MAX.saturating_sub(rows.len())) {
            rows.push(format!(
                "<tr id=\"operation-{}\"><td>{}</td><td><a href=\"/console/operations/{}/{}\"><code>{}</code></a></td>\
                 <td>{}</td><td>{}</td><td>{}</td></tr>",
                esc(&op.spec.operation_id),
                esc(name),
                esc(name),
                esc(&op.spec.operation_id),
                esc(&op.spec.operation_id),
                esc(&op.spec.action),
                esc(why),
                esc(&op.cause)
            ));
        }
    }
    table(&["Tenant", "Operation", "Action", "Needs", "Why"], &rows, "No operation needs a human.")
}

/// How soon an executor certificate's expiry is an alarm.
const CERT_WARNING_MS: u64 = 7 * 24 * 3_600_000;

/// The cluster's storage alarms as the serving node knows them (its own, and the members that
/// last said they were short of space), for cluster-wide operators: rows of the alarm table.
async fn storage_alarms(st: &Shared, desk: &Desk) -> Vec<String> {
    let cluster_wide = match &desk.actor {
        Actor::Operator { operator, .. } => operator.tenant_id.is_none(),
        Actor::BreakGlass => true,
    };
    if !cluster_wide {
        return Vec::new();
    }
    let status = match st.ledger.node_status().await {
        Ok(s) => s,
        Err(r) => return vec![alarm_row("cluster", &format!("this node's status is unknown: {}", r.message))],
    };
    let mut short = status.short_members.clone();
    if status.storage_alarm {
        short.insert(0, status.node_id);
    }
    let why = "its data directory is short of space: the cluster refuses writes (STORAGE_FULL) until it is freed";
    short.iter().map(|id| alarm_row("cluster", &format!("storage alarm on node {id}: {why}"))).collect()
}

fn alarm_row(scope: &str, what: &str) -> String {
    format!("<tr><td>{}</td><td>{}</td></tr>", esc(scope), esc(what))
}

/// What else needs an operator's eye: the cluster's storage alarms (`storage`, rows), upstream
/// tools that changed and wait for review, executor certificates that expire within a week,
/// executor connections their edge stopped confirming.
fn alarms_html(s: &LedgerState, tenants: &[(String, String)], now: u64, storage: Vec<String>) -> String {
    let mut rows = storage;
    for (id, name) in tenants {
        for u in s.upstreams.get(id).into_iter().flat_map(|m| m.values()).filter(|u| u.pending.is_some()) {
            let what = format!("upstream '{}': its tools changed and wait for review", u.name);
            rows.push(alarm_row(name, &what));
        }
        let executors = s.executors.get(id).into_iter().flat_map(|m| m.values());
        for x in executors.filter(|x| x.revoked_at_ms.is_none() && x.cert.not_after_ms < now + CERT_WARNING_MS) {
            let what = format!("executor '{}': its certificate expires {} UTC", x.id, super::utc(x.cert.not_after_ms));
            rows.push(alarm_row(name, &what));
        }
        let stale = |p: &&writ_api::device::ExecutorPresenceV1| {
            p.connected && now.saturating_sub(p.confirmed_at_ms) > writ_api::device::PRESENCE_STALE_MS
        };
        for (x, p) in s.executor_presence.get(id).into_iter().flat_map(|m| m.iter()).filter(|(_, p)| stale(p)) {
            rows.push(alarm_row(name, &format!("executor '{x}': {}", p.liveness(now))));
        }
        if rows.len() >= ITEMS_MAX {
            break;
        }
    }
    rows.truncate(ITEMS_MAX);
    table(&["Tenant", "What"], &rows, "No alarm.")
}

/// What a human must do about `op`, if anything: approve a critical call, reconcile an unknown
/// effect, give a verdict on a reported one.
pub(crate) fn needs_human(op: &writ_api::operation::Operation) -> Option<&'static str> {
    use writ_api::operation::APPROVAL_REQUEST;
    match op.state {
        OperationState::Proposed
            if op.spec.input_requests.contains_key(APPROVAL_REQUEST) && !op.answers.contains_key(APPROVAL_REQUEST) =>
        {
            Some("awaiting approval")
        }
        OperationState::UnknownEffect => Some("unknown effect"),
        OperationState::EffectReported => Some("awaiting a verdict"),
        _ => None,
    }
}

/// A table of `rows` under `heads`, or `empty` when there is none.
pub(crate) fn table(heads: &[&str], rows: &[String], empty: &str) -> String {
    if rows.is_empty() {
        return format!("<p class=\"empty\">{}</p>", esc(empty));
    }
    let heads: String = heads.iter().map(|h| format!("<th scope=\"col\">{}</th>", esc(h))).collect();
    format!("<table><thead><tr>{heads}</tr></thead><tbody>{}</tbody></table>", rows.concat())
}

/// Server-sent events: `change` each time this node's replica moves, while the session stands.
pub(crate) async fn events(State(st): State<Shared>, headers: HeaderMap) -> Response {
    let credential = match desk(&st, &headers).await {
        Ok(_) => writ_client::cookie(&headers, SESSION_COOKIE).unwrap_or_default().to_string(),
        Err(_) => return StatusCode::UNAUTHORIZED.into_response(),
    };
    if STREAMS.fetch_add(1, Ordering::SeqCst) >= STREAMS_MAX {
        STREAMS.fetch_sub(1, Ordering::SeqCst);
        let busy = Rejection::new(ReasonCode::QUOTA_EXCEEDED, "too many console streams are open on this node");
        return refusal(None, &busy);
    }
    let revision = st.view.with_state(|s| s.revision);
    let state = (st, credential, revision, StreamSlot);
    let stream = futures::stream::unfold(state, |(st, credential, seen, slot)| async move {
        loop {
            let moved = st.view.wait_for(seen + 1, STREAM_CHECK).await;
            crate::operators::session_actor(&st, &credential).await.ok()?;
            if moved {
                let revision = st.view.with_state(|s| s.revision);
                let event = SseEvent::default().event("change").data(revision.to_string());
                return Some((Ok::<_, Infallible>(event), (st, credential, revision, slot)));
            }
        }
    });
    Sse::new(stream).keep_alive(KeepAlive::default()).into_response()
}

/// One of the [`STREAMS_MAX`] event streams, given back when its stream ends.
struct StreamSlot;

impl Drop for StreamSlot {
    fn drop(&mut self) {
        STREAMS.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Approves or denies an authorization request, as the signed-in operator.
pub(crate) async fn decide_request(
    State(st): State<Shared>,
    Path((tenant, request, decision)): Path<(String, String, String)>,
    desk: Desk,
    headers: HeaderMap,
    Form(form): Form<ChangeForm>,
) -> Response {
    let approve = match decision.as_str() {
        "approve" => true,
        "deny" => false,
        _ => return refusal(Some(&desk), &Rejection::new(ReasonCode::NOT_FOUND, "no such decision")),
    };
    if let Err(r) = check_change(&desk, &headers, &form.csrf) {
        return refusal(Some(&desk), &r);
    }
    match acting(desk.actor.clone(), crate::oauth::decide(&st, tenant, request, approve)).await {
        Ok(_) => (StatusCode::SEE_OTHER, [(header::LOCATION, "/console")]).into_response(),
        Err(e) => refusal(Some(&desk), &e.0),
    }
}

/// Signs this session out (the others of the operator stay).
pub(crate) async fn sign_out(
    State(st): State<Shared>,
    desk: Desk,
    headers: HeaderMap,
    Form(form): Form<ChangeForm>,
) -> Response {
    signed_out(&st, desk, &headers, &form, false).await
}

/// Signs the operator out of every session, on every browser and node.
pub(crate) async fn sign_out_everywhere(
    State(st): State<Shared>,
    desk: Desk,
    headers: HeaderMap,
    Form(form): Form<ChangeForm>,
) -> Response {
    signed_out(&st, desk, &headers, &form, true).await
}

async fn signed_out(st: &Shared, desk: Desk, headers: &HeaderMap, form: &ChangeForm, everywhere: bool) -> Response {
    if let Err(r) = check_change(&desk, headers, &form.csrf) {
        return refusal(Some(&desk), &r);
    }
    let Actor::Operator { operator, .. } = &desk.actor else { return refusal(Some(&desk), &unexpected()) };
    let session_id = (!everywhere).then(|| desk.session_id.clone());
    let close = Command::CloseOperatorSessions { operator: operator.name.clone(), session_id };
    if let Err(r) = acting(desk.actor.clone(), submit(st, close)).await {
        return refusal(Some(&desk), &r);
    }
    super::to_sign_in()
}

fn unexpected() -> Rejection {
    Rejection::new(ReasonCode::INTERNAL, "a console session is a named operator's")
}
