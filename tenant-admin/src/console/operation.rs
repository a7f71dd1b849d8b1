//! The desk's operation page: the call (action, device, input, who asked), its state and
//! why, its evidence and its timeline of transitions, and what a human may do now — resolve an
//! unknown effect, accept or reject a reported one, cancel a live one. Every change is bound to
//! the call digest the page showed: if the call is not that call any more, nothing changes.

use axum::extract::{Form, Path, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use serde::Deserialize;
use writ_api::dto::{OperationHistory, Query as LedgerQuery};
use writ_api::ledger::Command;
use writ_api::operation::{AttemptOutcome, Operation, OperationState, Verdict, APPROVAL_REQUEST};
use writ_api::{ReasonCode, Rejection};

use super::pages::in_scope;
use super::{check_change, esc, page, refusal, Desk};
use crate::service::{acting, query, submit, AdminState, Shared};

/// Longest input shown on the page (the rest is cut, marked so).
const INPUT_SHOWN_BYTES_MAX: usize = 4096;

/// The tenant id of `tenant` (id or name) when it is in the desk's scope.
pub(crate) fn tenant_id(st: &AdminState, desk: &Desk, tenant: &str) -> Result<String, Rejection> {
    let found = st.view.with_state(|s| s.tenant(tenant).map(|t| t.id.clone()));
    let id = found.ok_or_else(|| Rejection::new(ReasonCode::TENANT_NOT_FOUND, "no such tenant"))?;
    if !in_scope(desk, &id) {
        return Err(Rejection::new(ReasonCode::OPERATOR_SCOPE_VIOLATION, "this tenant is not yours"));
    }
    Ok(id)
}

async fn history(st: &AdminState, tenant_id: &str, operation: &str) -> Result<OperationHistory, Rejection> {
    let q = LedgerQuery::GetOperationHistory { tenant_id: tenant_id.into(), operation_id: operation.into() };
    query(st, q, false).await
}

pub(crate) async fn show(
    State(st): State<Shared>,
    Path((tenant, operation)): Path<(String, String)>,
    desk: Desk,
) -> Response {
    let found = match tenant_id(&st, &desk, &tenant) {
        Ok(id) => history(&st, &id, &operation).await,
        Err(r) => Err(r),
    };
    let trail = match &found {
        Ok(h) => audit_html(&st, &tenant, h).await,
        Err(_) => String::new(),
    };
    match found {
        Ok(h) => {
            let (names, evidence) = st
                .view
                .with_state(|s| (named(s, &h.operation), super::evidence::evidence_html(s, &tenant, &h.operation)));
            let call = call_html(&h.operation, names);
            let actions = actions_html(&tenant, &h.operation, &desk);
            let body = format!("{call}{evidence}{actions}{}{trail}", timeline_html(&h));
            Html(page(&format!("Operation {}", h.operation.spec.operation_id), Some(&desk), &body)).into_response()
        }
        Err(r) => refusal(Some(&desk), &r),
    }
}

/// The names of the operation's device and principal (their ids when gone).
fn named(s: &writ_api::state::LedgerState, op: &Operation) -> (String, String) {
    let tenant = &op.tenant_id;
    let device = op.spec.device_id.as_ref().map_or("—".to_string(), |d| {
        s.devices.get(tenant).and_then(|m| m.get(d)).map_or(d.clone(), |d| d.name.clone())
    });
    let principal = &op.spec.principal_id;
    let principal =
        s.principals.get(tenant).and_then(|m| m.get(principal)).map_or(principal.clone(), |p| p.name.clone());
    (device, principal)
}

fn call_html(op: &Operation, (device, principal): (String, String)) -> String {
    let spec = &op.spec;
    let mut input = spec.input.clone();
    if input.len() > INPUT_SHOWN_BYTES_MAX {
        let cut = (0..=INPUT_SHOWN_BYTES_MAX).rev().find(|i| input.is_char_boundary(*i)).unwrap_or(0);
        input.truncate(cut);
        input.push_str(" … (cut)");
    }
    let rows = [
        ("Action", spec.action.clone()),
        ("Device", device),
        ("Asked by", principal),
        ("State", op.state.as_str().to_string()),
        ("Why", op.cause.clone()),
        ("Attempts", op.attempts.to_string()),
        ("Trace", spec.trace_id.clone()),
        ("Call digest", spec.call_digest()),
    ];
    let rows: String = rows.iter().map(|(k, v)| format!("<dt>{k}</dt><dd><code>{}</code></dd>", esc(v))).collect();
    format!("<dl>{rows}</dl><h2>Input</h2><pre>{}</pre>", esc(&input))
}

/// What a human may do with the operation in its state, as forms bound to its call digest.
fn actions_html(tenant: &str, op: &Operation, desk: &Desk) -> String {
    let form = |act: &str, label: &str, extra: &str| {
        format!(
            "<form method=\"post\" action=\"/console/operations/{}/{}/{act}\"><input type=\"hidden\" name=\"csrf\" \
             value=\"{}\"><input type=\"hidden\" name=\"digest\" value=\"{}\">{extra}\
             <label for=\"note-{act}\">Note</label><input type=\"text\" id=\"note-{act}\" name=\"note\" maxlength=\"500\">\
             <button type=\"submit\">{label}</button></form>",
            esc(tenant),
            esc(&op.spec.operation_id),
            esc(&desk.csrf),
            esc(&op.spec.call_digest())
        )
    };
    let approval = super::pages::needs_human(op) == Some("awaiting approval");
    let forms = match op.state {
        OperationState::Proposed if approval => {
            format!("{}{}", form("approve", "Approve this call", ""), form("decline", "Decline", ""))
        }
        OperationState::UnknownEffect => form(
            "resolve",
            "Resolve",
            "<label for=\"outcome\">What happened</label><select id=\"outcome\" name=\"outcome\">\
             <option value=\"no_effect\">No effect</option><option value=\"effect\">The effect happened</option></select>",
        ),
        OperationState::EffectReported => format!("{}{}", form("accept", "Accept", ""), form("reject", "Reject", "")),
        s if !s.is_terminal() => form("cancel", "Cancel", ""),
        _ => String::new(),
    };
    if forms.is_empty() {
        return String::new();
    }
    format!("<h2>Decide</h2>{forms}")
}

/// Traces whose audit records an operation's page shows (its call's, then its transitions').
const TRACES_SHOWN: usize = 8;
/// Records shown per trace.
const RECORDS_PER_TRACE: u32 = 50;

/// The audit records of the operation's traces — the call that made it and each command that
/// moved it — oldest first, with a search of each trace.
async fn audit_html(st: &AdminState, tenant: &str, h: &OperationHistory) -> String {
    let mut traces = vec![h.operation.spec.trace_id.clone()];
    for t in &h.transitions {
        if !traces.contains(&t.trace_id) {
            traces.push(t.trace_id.clone());
        }
    }
    traces.truncate(TRACES_SHOWN);
    let mut records = Vec::new();
    for trace in &traces {
        let filter = writ_api::audit::AuditFilter { trace_id: Some(trace.clone()), ..Default::default() };
        let tenant_id = h.operation.tenant_id.clone();
        let q = LedgerQuery::ListAudit { tenant_id, after: None, limit: RECORDS_PER_TRACE, filter };
        match query::<writ_api::dto::AuditPage>(st, q, false).await {
            Ok(page) => records.extend(page.records),
            Err(r) => return format!("<h2>Audit records</h2><p>Not read: {}</p>", esc(&r.message)),
        }
    }
    records.sort_by_key(|r| r.seq);
    let links: String = traces
        .iter()
        .map(|t| {
            let q = serde_urlencoded::to_string([("tenant", tenant), ("trace", t.as_str())]).unwrap_or_default();
            format!("<li><a href=\"/console/audit?{}\">Trace <code>{}</code></a></li>", esc(&q), esc(t))
        })
        .collect();
    format!("<h2>Audit records</h2>{}<ul>{links}</ul>", super::audit::records_html(&records))
}

fn timeline_html(h: &OperationHistory) -> String {
    let rows: String = h
        .transitions
        .iter()
        .map(|t| {
            let from = t.from.map_or("—", |s| s.as_str());
            let reason = t.reason.map_or(String::new(), |r| r.as_str().to_string());
            format!(
                "<tr><td>{}</td><td>{from} → {}</td><td>{}</td><td>{reason}</td><td>{}</td></tr>",
                super::utc(t.at_ms),
                t.to.as_str(),
                esc(&t.cause),
                t.revision
            )
        })
        .collect();
    format!(
        "<h2>Timeline</h2><table><thead><tr><th scope=\"col\">At (UTC)</th><th scope=\"col\">Transition</th>\
         <th scope=\"col\">Cause</th><th scope=\"col\">Reason</th><th scope=\"col\">Revision</th></tr></thead>\
         <tbody>{rows}</tbody></table>"
    )
}

#[derive(Deserialize)]
pub(crate) struct DecisionForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    digest: String,
    #[serde(default)]
    note: String,
    outcome: Option<AttemptOutcome>,
}

/// A human's decision on the operation, as the signed-in operator, if the call is still the
/// one the page showed.
pub(crate) async fn decide(
    State(st): State<Shared>,
    Path((tenant, operation, act)): Path<(String, String, String)>,
    desk: Desk,
    headers: HeaderMap,
    Form(form): Form<DecisionForm>,
) -> Response {
    let done = async {
        check_change(&desk, &headers, &form.csrf)?;
        let id = tenant_id(&st, &desk, &tenant)?;
        let op = history(&st, &id, &operation).await?.operation;
        if op.spec.call_digest() != form.digest {
            let msg = "the call is not the one the page showed: reload it before deciding";
            return Err(Rejection::new(ReasonCode::OPERATION_STATE_CONFLICT, msg));
        }
        let command = command(&desk, &op, &act, &form)?;
        acting(desk.actor.clone(), submit(&st, command)).await.map(|_| ())
    };
    match done.await {
        Ok(()) => {
            let back = format!("/console/operations/{}/{}", urlencode(&tenant), urlencode(&operation));
            (StatusCode::SEE_OTHER, [(header::LOCATION, back)]).into_response()
        }
        Err(r) => refusal(Some(&desk), &r),
    }
}

fn command(desk: &Desk, op: &Operation, act: &str, form: &DecisionForm) -> Result<Command, Rejection> {
    let (tenant_id, operation_id) = (op.tenant_id.clone(), op.spec.operation_id.clone());
    let payload_hash = op.spec.payload_hash.clone();
    let (by_principal_id, note) = (desk.actor.name(), form.note.clone());
    let verdict = |verdict| Command::DecideOperation {
        tenant_id: tenant_id.clone(),
        operation_id: operation_id.clone(),
        by_principal_id: by_principal_id.clone(),
        verdict,
        note: note.clone(),
    };
    Ok(match act {
        "accept" => verdict(Verdict::Accept),
        "reject" => verdict(Verdict::Reject),
        "cancel" => Command::CancelOperation { tenant_id, operation_id, by_principal_id },
        "approve" | "decline" => {
            let answer = match act {
                "approve" => serde_json::json!({"action": "accept", "content": {"payload_hash": payload_hash}}),
                _ => serde_json::json!({"action": "decline", "content": {"note": note}}),
            };
            let answers = [(APPROVAL_REQUEST.to_string(), answer.to_string())].into();
            Command::AnswerInputs { tenant_id, operation_id, by_principal_id, answers }
        }
        "resolve" => {
            let outcome = form.outcome.ok_or_else(|| Rejection::new(ReasonCode::INPUT_INVALID, "say what happened"))?;
            Command::ResolveUnknownEffect { tenant_id, operation_id, by_principal_id, outcome, note }
        }
        _ => return Err(Rejection::new(ReasonCode::NOT_FOUND, "no such decision")),
    })
}

/// `text` as one path segment.
fn urlencode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}
