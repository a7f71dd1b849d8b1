//! The MCP Tasks extension (`io.modelcontextprotocol/tasks`, SEP-2663) served over operations:
//! a task is an operation of the ledger, its id the operation id, so any edge answers for any
//! task and nothing lives in the edge. A client that declares the extension (in the request's
//! `_meta` client capabilities) gets `resultType: "task"` from `operation.execute` and from
//! direct calls of operation actions; `tasks/get` reads the operation (its result inlined once
//! settled), `tasks/update` answers the operation's input requests (`AnswerInputs`), and
//! `tasks/cancel` cancels it (before the attempt at once; during an attempt the executor is
//! asked to stop and the true outcome is reported). Tasks belong to the principal that made
//! them: for anyone else they do not exist.

use std::collections::BTreeMap;

use serde_json::{json, Value};
use writ_api::dto::Query;
use writ_api::ledger::Command;
use writ_api::operation::{Operation, OperationState};
use writ_api::{ReasonCode, Rejection};

use crate::jsonrpc::{RpcError, INVALID_PARAMS, META_CLIENT_CAPABILITIES};
use crate::serve::Call;

/// The extension's identifier (in `capabilities.extensions`).
pub const EXTENSION: &str = "io.modelcontextprotocol/tasks";
/// How long a task stays readable: operations are kept at least the idempotency retention
/// (24 h minimum).
pub const TTL_MS: u64 = 24 * 3600 * 1000;
/// How often a client should poll `tasks/get`.
pub const POLL_INTERVAL_MS: u64 = 250;

/// Whether the request declares the extension (per request: the edge keeps no session).
pub fn negotiated(c: &Call<'_>) -> bool {
    c.req
        .meta(META_CLIENT_CAPABILITIES)
        .and_then(|caps| caps.get("extensions"))
        .and_then(|e| e.get(EXTENSION))
        .is_some_and(Value::is_object)
}

/// -32021: the request needs the extension.
pub fn extension_missing(what: &str) -> RpcError {
    RpcError::reason(ReasonCode::CLIENT_CAPABILITY_MISSING, format!("{what} needs the {EXTENSION} extension"))
        .with_detail("requiredCapabilities", json!({"extensions": {EXTENSION: {}}}))
}

/// ISO-8601 UTC with milliseconds, from ms since the epoch.
pub fn iso8601(ms: u64) -> String {
    let (secs, millis) = (ms / 1000, ms % 1000);
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{millis:03}Z", rem / 3600, rem % 3600 / 60, rem % 60)
}

/// The input requests of `op` not answered yet.
pub fn pending_inputs(op: &Operation) -> BTreeMap<String, Value> {
    op.spec
        .input_requests
        .iter()
        .filter(|(k, _)| !op.answers.contains_key(*k))
        .map(|(k, v)| (k.clone(), serde_json::from_str(v).unwrap_or(Value::Null)))
        .collect()
}

/// The task status of an operation, and a message saying where it is.
fn status(op: &Operation) -> (&'static str, String) {
    use OperationState::*;
    match op.state {
        Proposed => ("input_required", "waiting for your input".into()),
        Verified | Reserved | Dispatched | Attempting if op.cancel_requested => {
            ("working", "cancellation requested; waiting for the executor's outcome".into())
        }
        Verified | Reserved => ("working", format!("{:?}: waiting for an executor", op.state).to_lowercase()),
        Dispatched => ("working", "dispatched to an executor".into()),
        Attempting => ("working", "the executor is attempting it".into()),
        UnknownEffect => ("working", "unknown effect: the outcome was lost and awaits reconciliation".into()),
        EffectReported | Accepted | Rejected => ("completed", op.cause.clone()),
        Failed if op.attempts > 0 => ("completed", op.cause.clone()),
        Failed | Expired => ("failed", op.cause.clone()),
        Cancelled => ("cancelled", op.cause.clone()),
    }
}

fn envelope(op: &Operation) -> Value {
    let (status, message) = status(op);
    json!({
        "taskId": op.spec.operation_id,
        "status": status,
        "statusMessage": message,
        "createdAt": iso8601(op.created_at_ms),
        "lastUpdatedAt": iso8601(op.updated_at_ms),
        "ttlMs": TTL_MS,
        "pollIntervalMs": POLL_INTERVAL_MS,
    })
}

/// `CreateTaskResult`: the flat task envelope (no result, error or input requests).
pub fn created(op: &Operation) -> Value {
    let mut v = envelope(op);
    v["resultType"] = json!("task");
    v
}

/// The tool result a settled operation inlines: the executor's output (its last evidence
/// summary), `isError` when the attempt ran but had no effect or the effect was rejected.
fn result(op: &Operation) -> Value {
    let text = op.evidence.last().map(|e| e.summary.clone()).unwrap_or_else(|| op.cause.clone());
    let is_error = matches!(op.state, OperationState::Failed | OperationState::Rejected);
    let structured = json!({"operation_id": op.spec.operation_id, "state": op.state, "attempts": op.attempts,
                            "evidence": op.evidence, "cause": op.cause});
    let mut r = json!({"content": [{"type": "text", "text": text}], "structuredContent": structured});
    if is_error {
        r["isError"] = json!(true);
    }
    r
}

/// `tasks/get`'s `DetailedTask`.
pub fn detailed(op: &Operation) -> Value {
    let mut v = envelope(op);
    v["resultType"] = json!("complete");
    match v["status"].as_str() {
        Some("completed") => v["result"] = result(op),
        Some("failed") => {
            let reason = if op.state == OperationState::Expired {
                ReasonCode::DEADLINE_EXCEEDED
            } else {
                ReasonCode::EXECUTOR_UNAVAILABLE
            };
            v["error"] = json!({"code": reason.jsonrpc_code(), "message": op.cause,
                                "data": {"reason": reason, "operation_id": op.spec.operation_id}});
        }
        Some("input_required") => v["inputRequests"] = json!(pending_inputs(op)),
        _ => {}
    }
    v
}

/// The caller's task `taskId` (-32602 for an unknown one, or another principal's).
async fn find(c: &Call<'_>) -> Result<Operation, RpcError> {
    let id = c.req.params()["taskId"].as_str().unwrap_or_default().to_string();
    let unknown = || {
        RpcError::new(axum::http::StatusCode::OK, INVALID_PARAMS, format!("unknown task '{id}'"))
            .with_data(json!({"reason": ReasonCode::OPERATION_NOT_FOUND, "taskId": id}))
    };
    if id.is_empty() {
        return Err(unknown());
    }
    let q = Query::GetOperation { tenant_id: c.authority.tenant_id.clone(), operation_id: id.clone() };
    match crate::operations::query(c, q).await? {
        Ok(op) if op.spec.principal_id == c.authority.principal_id => Ok(op),
        _ => Err(unknown()),
    }
}

fn ack() -> Value {
    json!({"resultType": "complete"})
}

/// `tasks/get`.
pub async fn get(c: &Call<'_>) -> Result<Value, RpcError> {
    Ok(detailed(&find(c).await?))
}

/// An answer as the ledger records it: a `confirm` request is accepted only with
/// `confirm: true` (anything else declines it).
fn normalized(request: &Value, answer: &Value) -> Value {
    let asks_confirm = request["params"]["requestedSchema"]["properties"]["confirm"]["type"] == "boolean";
    if asks_confirm && answer["action"] == "accept" && answer["content"]["confirm"] != true {
        return json!({"action": "decline", "content": answer["content"]});
    }
    answer.clone()
}

/// `tasks/update`: delivers `inputResponses` (those matching a pending request; the rest is
/// ignored) and acks; the task's new state shows on the next `tasks/get`.
pub async fn update(c: &Call<'_>) -> Result<Value, RpcError> {
    let responses = match c.req.params().get("inputResponses") {
        Some(Value::Object(m)) => m.clone(),
        _ => return Err(RpcError::new(axum::http::StatusCode::OK, INVALID_PARAMS, "inputResponses must be an object")),
    };
    let op = find(c).await?;
    let pending = pending_inputs(&op);
    let answers: BTreeMap<String, String> = responses
        .iter()
        .filter(|(k, v)| pending.contains_key(*k) && v.is_object())
        .map(|(k, v)| (k.clone(), writ_api::operation::canonical_json(&normalized(&pending[k], v))))
        .collect();
    if op.state != OperationState::Proposed || answers.is_empty() {
        return Ok(ack());
    }
    let command = Command::AnswerInputs {
        tenant_id: c.authority.tenant_id.clone(),
        operation_id: op.spec.operation_id.clone(),
        by_principal_id: c.authority.principal_id.clone(),
        answers,
    };
    match crate::operations::submit_act(c, command).await? {
        Ok(()) => Ok(ack()),
        Err(e) => Err(RpcError::rejected(&e).in_band()),
    }
}

/// `tasks/cancel`: an empty ack, also for a task already settled (idempotent); the outcome
/// shows on the next `tasks/get`.
pub async fn cancel(c: &Call<'_>) -> Result<Value, RpcError> {
    let op = find(c).await?;
    if op.state.is_terminal() || op.cancel_requested {
        return Ok(ack());
    }
    let command = Command::CancelOperation {
        tenant_id: c.authority.tenant_id.clone(),
        operation_id: op.spec.operation_id.clone(),
        by_principal_id: c.authority.principal_id.clone(),
    };
    match crate::operations::submit_act(c, command).await? {
        // It moved on meanwhile (e.g. settled): the next tasks/get shows the true state.
        Ok(()) | Err(Rejection { reason: ReasonCode::OPERATION_STATE_CONFLICT, .. }) => Ok(ack()),
        Err(e) => Err(RpcError::rejected(&e).in_band()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iso8601_is_utc_with_millis() {
        assert_eq!(iso8601(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(iso8601(951_782_400_000), "2000-02-29T00:00:00.000Z");
        assert_eq!(iso8601(1_796_019_625_279), "2026-11-30T06:20:25.279Z");
    }

    #[test]
    fn a_confirmation_without_confirm_true_declines() {
        let request = json!({"method": "elicitation/create", "params": {"requestedSchema":
            {"type": "object", "properties": {"confirm": {"type": "boolean"}}}}});
        let no = normalized(&request, &json!({"action": "accept", "content": {"confirm": false}}));
        assert_eq!(no["action"], "decline");
        let yes = normalized(&request, &json!({"action": "accept", "content": {"confirm": true}}));
        assert_eq!(yes["action"], "accept");
        let other = json!({"method": "elicitation/create", "params": {"requestedSchema":
            {"type": "object", "properties": {"name": {"type": "string"}}}}});
        assert_eq!(normalized(&other, &json!({"action": "accept", "content": {"name": "x"}}))["action"], "accept");
    }
}
