//! The operation tools of the edge (SPEC E5, first part): `operation.execute` records a durable
//! operation in the ledger — idempotency binding, deadline, cost ceiling and device reservation
//! are decided there, before anything is dispatched — and `operation.readback` reads one back.
//! `operation.propose` is the dry run: the same checks, a preview, and a short-lived proposal the
//! ledger records for the principal and the exact call; actions that demand verification
//! (`dry_run: true`, or high and critical risk) execute only with such a proposal
//! (VERIFY_REQUIRED without; PROPOSAL_INVALID for a used, foreign or mismatched one,
//! PROPOSAL_EXPIRED after its time) — the ledger holds the rule, the edge only answers early.

use serde_json::{json, Map, Value};
use writ_api::catalog::Execution;
use writ_api::dto::{Query, SubmitRequest, SubmitResponse};
use writ_api::ledger::{Command, Outcome};
use writ_api::operation::{
    canonical_json, payload_hash, Operation, OperationSpecV1, OperationState, Verdict, WorkRef, CONFIRM_REQUEST,
};
use writ_api::{ReasonCode, Rejection};

use crate::jsonrpc::RpcError;
use crate::serve::Call;

pub const SEARCH: &str = "context.search";
pub const SEARCH_SCOPE: &str = "context:read";
/// Most entries of each kind `context.search` returns.
pub const SEARCH_LIMIT_MAX: u64 = 50;
pub const PROPOSE: &str = "operation.propose";
pub const EXECUTE: &str = "operation.execute";
pub const READBACK: &str = "operation.readback";
pub const OBSERVE: &str = "observation.capture";
pub const DECIDE: &str = "operation.decide";
pub const APPROVE: &str = "operation.approve";
pub const WORK_CREATE: &str = "work.create";
pub const WORK_UPDATE: &str = "work.update";
pub use writ_api::operation::PROPOSAL_TTL_MS;
pub use writ_api::operation::{CANCEL_SCOPE, DECIDE_SCOPE, EXECUTE_SCOPE, OBSERVE_SCOPE, READ_SCOPE};
pub use writ_api::work::WORK_WRITE_SCOPE;
/// Default and longest deadline an agent may give (seconds from now).
pub const DEADLINE_S_DEFAULT: u64 = 60;
pub const DEADLINE_S_MAX: u64 = 24 * 3600;
/// Longest `operation.execute` waits for its operation to settle (`wait_s`).
pub const WAIT_S_MAX: u64 = 60;
/// Deadline of a task that first waits for its requester's input (a person may take a while).
pub const TASK_INPUT_DEADLINE_S: u64 = 3600;

/// The work item a call is decided on (`writ://work/{id}`) and the revision read.
fn work_ref_schema() -> Value {
    json!({"type": "object", "required": ["id", "revision"], "additionalProperties": false,
           "description": "the work item (writ://work/{id}) and the revision you decided on: refused with \
               STALE_REVISION once the work has moved on, WORK_SCOPE_EXCEEDED outside its approved scope",
           "properties": {"id": {"type": "string", "maxLength": writ_api::work::WORK_ID_BYTES_MAX},
                          "revision": {"type": "integer", "minimum": 1}}})
}

/// Every operation tool's `tools/list` entry, in listing order, with the scopes any one of
/// which lets an authority call it.
fn definitions() -> Vec<(&'static [&'static str], Value)> {
    let mut tools: Vec<(&'static [&'static str], Value)> = Vec::new();
    tools.push((&[EXECUTE_SCOPE], json!({
        "name": EXECUTE,
        "title": "Execute an operation",
        "description": "Records a durable operation for a catalog action: the idempotency key binds it to this exact \
            payload (a retry returns the same operation; the same key with another payload is refused), the ledger \
            checks the deadline and cost ceiling and reserves the device, then an executor attempts it once. \
            Returns the operation id and state (with wait_s, once it settles, streaming each state as progress); \
            read it back with operation.readback.",
        "inputSchema": {
            "type": "object", "additionalProperties": false,
            "required": ["action", "idempotency_key"],
            "properties": {
                "action": {"type": "string", "description": "the catalog action id"},
                "input": {"type": "object", "description": "the action's input (its input schema applies)"},
                "idempotency_key": {"type": "string", "minLength": 1, "maxLength": 200},
                "device": {"type": "string", "description": "device name, for actions that drive one"},
                "deadline_s": {"type": "integer", "minimum": 1, "maximum": DEADLINE_S_MAX,
                               "description": "no attempt starts after this many seconds (default 60)"},
                "cost_ceiling": {"type": "integer", "minimum": 0},
                "work_ref": work_ref_schema(),
                "preconditions": {"type": "object", "maxProperties": writ_api::operation::PRECONDITIONS_MAX,
                                  "additionalProperties": {"type": "string", "maxLength": writ_api::operation::PRECONDITION_BYTES_MAX}},
                "wait_s": {"type": "integer", "minimum": 0, "maximum": WAIT_S_MAX,
                           "description": "wait up to this long for the operation to settle (effect reported, \
                               failed, expired, unknown effect…), reporting each state it reaches as progress \
                               (with the request's progressToken); 0, the default, answers at once"},
                "proposal": {"type": "string", "maxLength": 200,
                             "description": "from operation.propose: needed for dry-run, high and critical risk actions"}
            }
        },
        "annotations": {"readOnlyHint": false, "destructiveHint": true, "idempotentHint": true},
    })));
    // A dry run only looks: readOnly principals (context:read) may preview too.
    tools.push((&[EXECUTE_SCOPE, SEARCH_SCOPE], json!({
        "name": PROPOSE,
        "title": "Propose an operation (dry run)",
        "description": "Checks an action call as operation.execute would (scopes, input schema, device) and previews \
            what would happen, executing nothing. The ledger records a proposal bound to you and to this exact call \
            for 5 minutes, usable once: dry-run, high- and critical-risk actions execute only with one. Without the \
            scopes to commit (e.g. a readOnly principal) the preview lists what is missing and carries no proposal.",
        "inputSchema": {
            "type": "object", "additionalProperties": false,
            "required": ["action"],
            "properties": {
                "action": {"type": "string", "description": "the catalog action id"},
                "input": {"type": "object", "description": "the action's input (its input schema applies)"},
                "device": {"type": "string", "description": "device name, for actions that drive one"},
                "work_ref": work_ref_schema(),
                "preconditions": {"type": "object", "maxProperties": writ_api::operation::PRECONDITIONS_MAX,
                                  "additionalProperties": {"type": "string", "maxLength": writ_api::operation::PRECONDITION_BYTES_MAX}}
            }
        },
        "annotations": {"readOnlyHint": true, "destructiveHint": false, "idempotentHint": true},
    })));
    tools.push((&[OBSERVE_SCOPE], json!({
        "name": OBSERVE,
        "title": "Record an observation of an operation",
        "description": "Links your own observation (content hash of what you captured, where it can be fetched, a \
            summary) to an attempted operation. An effect is accepted only with an observation by someone other \
            than the principal that asked for it.",
        "inputSchema": {"type": "object", "additionalProperties": false,
            "required": ["operation_id", "content_hash"],
            "oneOf": [{"required": ["evidence_return_ref"]}, {"required": ["content_base64"]}],
            "properties": {
                "operation_id": {"type": "string"},
                "content_hash": {"type": "string", "pattern": "^[0-9a-f]{64}$"},
                "evidence_return_ref": {"type": "string", "minLength": 1, "maxLength": 500},
                "content_base64": {"type": "string", "maxLength": writ_api::evidence::EVIDENCE_BYTES_MAX.div_ceil(3) * 4,
                    "description": "the captured content itself: Writ stores it and the observation points at \
                        writ://operations/{id}/evidence/{content_hash}"},
                "mime_type": {"enum": writ_api::evidence::EVIDENCE_MIME_TYPES},
                "summary": {"type": "string", "maxLength": 2000}
            }},
        "annotations": {"readOnlyHint": false, "destructiveHint": false, "idempotentHint": false},
    })));
    tools.push((
        &[writ_api::operation::APPROVE_SCOPE],
        json!({
            "name": APPROVE,
            "title": "Approve or refuse another principal's critical call",
            "description": "A critical-risk operation runs only once a principal other than its requester, holding \
                ops:approve, approves exactly that call. Read it with operation.readback first.",
            "inputSchema": {"type": "object", "additionalProperties": false, "required": ["operation_id", "approve"],
                "properties": {"operation_id": {"type": "string"}, "approve": {"type": "boolean"}}},
            "annotations": {"readOnlyHint": false, "destructiveHint": true, "idempotentHint": false},
        }),
    ));
    tools.push((&[DECIDE_SCOPE], json!({
        "name": DECIDE,
        "title": "Accept or reject a reported effect",
        "description": "The acceptance owner's verdict on an operation whose effect was reported. Accepting needs an \
            independent observation linked to the operation.",
        "inputSchema": {"type": "object", "additionalProperties": false, "required": ["operation_id", "verdict"],
            "properties": {"operation_id": {"type": "string"}, "verdict": {"enum": ["accept", "reject"]},
                           "note": {"type": "string", "maxLength": 2000}}},
        "annotations": {"readOnlyHint": false, "destructiveHint": false, "idempotentHint": false},
    })));
    tools.push((
        &[SEARCH_SCOPE],
        json!({
            "name": SEARCH,
            "title": "Search your context",
            "description": "What you may act on, fresh from the ledger: the catalog actions your scopes allow, the \
                devices you may use (and whether an operation holds them), and your operations in flight. \
                Optionally filtered by a case-insensitive text query.",
            "inputSchema": {"type": "object", "additionalProperties": false, "properties": {
                "query": {"type": "string", "maxLength": 200},
                "limit": {"type": "integer", "minimum": 1, "maximum": SEARCH_LIMIT_MAX}}},
            "annotations": {"readOnlyHint": true, "destructiveHint": false, "idempotentHint": true},
        }),
    ));
    let scope = json!({"type": "object", "additionalProperties": false, "required": ["actions"], "properties": {
        "actions": {"type": "array", "minItems": 1, "maxItems": writ_api::work::WORK_SCOPE_ENTRIES_MAX,
                    "items": {"type": "string", "minLength": 1, "maxLength": 128}},
        "devices": {"type": "array", "maxItems": writ_api::work::WORK_SCOPE_ENTRIES_MAX,
                    "items": {"type": "string", "minLength": 1, "maxLength": 128}, "description": "device names"},
        "cost_ceiling": {"type": "integer", "minimum": 0}}});
    tools.push((&[WORK_WRITE_SCOPE], json!({
        "name": WORK_CREATE,
        "title": "Create a work item",
        "description": "Creates a work item (revision 1, open): the durable business state operations are decided \
            on, with the actions, devices and cost it allows. Operations name it as work_ref {id, revision}.",
        "inputSchema": {"type": "object", "additionalProperties": false, "required": ["id", "title", "owner", "scope"],
            "properties": {
                "id": {"type": "string", "pattern": "^[A-Za-z0-9._:-]{1,64}$"},
                "title": {"type": "string", "minLength": 1, "maxLength": 200},
                "owner": {"type": "string", "minLength": 1, "maxLength": 200},
                "scope": scope.clone()}},
        "annotations": {"readOnlyHint": false, "destructiveHint": false, "idempotentHint": false},
    })));
    tools.push((&[WORK_WRITE_SCOPE], json!({
        "name": WORK_UPDATE,
        "title": "Change or close a work item",
        "description": "Moves a work item to its next revision with the fields given, or closes it (state completed \
            or cancelled, recording its operations). With expected_revision it is refused (STALE_REVISION) unless \
            the item is still there; operations decided on an older revision are refused the same way.",
        "inputSchema": {"type": "object", "additionalProperties": false, "required": ["id"],
            "properties": {
                "id": {"type": "string", "maxLength": 64},
                "expected_revision": {"type": "integer", "minimum": 1},
                "title": {"type": "string", "minLength": 1, "maxLength": 200},
                "owner": {"type": "string", "minLength": 1, "maxLength": 200},
                "scope": scope,
                "state": {"enum": ["completed", "cancelled"]},
                "note": {"type": "string", "maxLength": 500}}},
        "annotations": {"readOnlyHint": false, "destructiveHint": false, "idempotentHint": false},
    })));
    tools.push((
        &[READ_SCOPE],
        json!({
            "name": READBACK,
            "title": "Read an operation back",
            "description": "The operation's state, evidence, independent observations and every transition (cause, \
                reason code, ledger time, trace id), by id or by your idempotency key.",
            "inputSchema": {"type": "object", "additionalProperties": false, "properties": {
                "operation_id": {"type": "string"}, "idempotency_key": {"type": "string"}}},
            "annotations": {"readOnlyHint": true, "destructiveHint": false, "idempotentHint": true},
        }),
    ));
    tools
}

/// An operation tool as the edge serves it: its `tools/list` entry and its compiled input
/// schema, built once per process (the definitions are the same for every caller; an
/// authority's scopes only choose among them).
pub struct OperationTool {
    pub entry: Value,
    scopes: &'static [&'static str],
    validator: std::sync::Arc<jsonschema::Validator>,
}

impl OperationTool {
    fn allowed(&self, authority: &writ_api::auth::Authority) -> bool {
        self.scopes.iter().any(|scope| authority.require(scope).is_ok())
    }

    /// The errors of `args` against this tool's input schema.
    pub fn input_errors(&self, args: &Value) -> Vec<String> {
        schema_errors(&self.validator, args)
    }
}

/// The operation tools, built on first use.
fn table() -> &'static [OperationTool] {
    static TABLE: std::sync::LazyLock<Vec<OperationTool>> = std::sync::LazyLock::new(|| {
        definitions()
            .into_iter()
            .map(|(scopes, entry)| {
                // Compiled as every stored schema is (JSON Schema 2020-12, formats checked).
                let validator = writ_api::catalog::validator(&entry["inputSchema"]).unwrap_or_else(|e| {
                    panic!("operation tool {}: its input schema does not compile: {}", entry["name"], e.message)
                });
                OperationTool { entry, scopes, validator: std::sync::Arc::new(validator) }
            })
            .collect()
    });
    &TABLE
}

/// The operation tools `authority` may call, as `tools/list` entries.
pub fn tools(authority: &writ_api::auth::Authority) -> Vec<Value> {
    table().iter().filter(|t| t.allowed(authority)).map(|t| t.entry.clone()).collect()
}

/// The operation tool `name`, if `authority` may call it.
pub fn tool(authority: &writ_api::auth::Authority, name: &str) -> Option<&'static OperationTool> {
    table().iter().find(|t| t.entry["name"] == name && t.allowed(authority))
}

/// Most schema errors reported for one value, and the longest each may be: an error quotes the
/// value it is about, which is the client's (a 900 KB string), and an answer never echoes it.
pub const SCHEMA_ERRORS_MAX: usize = 20;
pub const SCHEMA_ERROR_BYTES_MAX: usize = 200;

/// Why `value` fails `validator` (where, and what), bounded by [`SCHEMA_ERRORS_MAX`] and
/// [`SCHEMA_ERROR_BYTES_MAX`].
pub fn schema_errors(validator: &jsonschema::Validator, value: &Value) -> Vec<String> {
    let bounded = |e: jsonschema::ValidationError| {
        writ_api::rejection::truncated(&format!("{}: {e}", e.instance_path()), SCHEMA_ERROR_BYTES_MAX)
    };
    validator.iter_errors(value).take(SCHEMA_ERRORS_MAX).map(bounded).collect()
}

/// A business refusal as a tool error the agent can act on (reason in `_meta`).
fn refused(r: &Rejection) -> Value {
    json!({"resultType": "complete", "isError": true,
           "content": [{"type": "text", "text": format!("{}: {}", r.reason, r.message)}],
           "_meta": {"writ/reason": r.reason}})
}

/// Why `op` failed, when an executor refused it with a reason (`PRECONDITION_FAILED`, …):
/// the reason of its last transition.
fn refusal(op: &Operation, steps: &[writ_api::operation::TransitionV1]) -> Option<ReasonCode> {
    (op.state == OperationState::Failed).then(|| steps.last().and_then(|t| t.reason)).flatten()
}

/// [`view`] with the reason an executor refused it, if it did (in `structuredContent.reason`
/// and `_meta["writ/reason"]`, where agents find every reason).
fn view_refused(op: &Operation, replayed: bool, reason: Option<ReasonCode>) -> Value {
    let mut v = view(op, replayed);
    if let Some(reason) = reason {
        v["structuredContent"]["reason"] = json!(reason);
        v["content"][0]["text"] = json!(v["structuredContent"].to_string());
        v["_meta"] = json!({"writ/reason": reason});
    }
    v
}

fn view(op: &Operation, replayed: bool) -> Value {
    let structured = json!({
        "operation_id": op.spec.operation_id,
        "state": op.state,
        "action": op.spec.action,
        "device_id": op.spec.device_id,
        "fencing_token": op.fencing_token,
        "deadline_ms": op.spec.deadline_ms,
        "attempts": op.attempts,
        "evidence": op.evidence,
        "observations": op.observations,
        "replayed": replayed,
    });
    json!({"resultType": "complete", "content": [{"type": "text", "text": structured.to_string()}],
           "structuredContent": structured})
}

pub(crate) async fn query(c: &Call<'_>, query: Query) -> Result<Result<Operation, Rejection>, RpcError> {
    match writ_client::query_as(c.edge.ledger.as_ref(), query, Default::default()).await {
        Ok(op) => Ok(Ok(op)),
        Err(e) if e.reason == ReasonCode::LEDGER_UNAVAILABLE || e.reason == ReasonCode::INTERNAL => {
            Err(RpcError::rejected(&e))
        }
        Err(e) => Ok(Err(e)),
    }
}

/// An action call checked against the catalog, the caller's scopes, the input schema and the
/// device: what `operation.propose` previews and `operation.execute` records.
struct Prepared {
    action: writ_api::catalog::CatalogActionV1,
    input: Value,
    device: Option<writ_api::device::Device>,
    work_ref: Option<WorkRef>,
    preconditions: std::collections::BTreeMap<String, String>,
    /// sha256 of the canonical payload the idempotency key and a proposal bind.
    payload_hash: String,
    /// Scopes a commit would need that the caller lacks (only a dry run gets this far with any).
    denied: Vec<String>,
}

/// Why an action call is checked: to commit it, or to preview it (a dry run may look at what
/// the caller could not commit when it holds `context:read`, and says what is missing).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Purpose {
    Commit,
    Preview,
}

/// The checks shared by propose and execute; a business refusal is `Ok(Err(tool error))`.
fn prepare(c: &Call<'_>, args: &Value, purpose: Purpose) -> Result<Result<Prepared, Value>, RpcError> {
    let a = c.authority;
    let looks = purpose == Purpose::Preview && a.require(SEARCH_SCOPE).is_ok();
    let mut denied = Vec::new();
    let mut need = |scope: &str| {
        let held = a.require(scope).is_ok();
        if !held && looks {
            denied.push(scope.to_string());
        }
        held || looks
    };
    let action_id = args["action"].as_str().unwrap_or_default();
    let found = c.edge.verifier.with_state(|s| {
        let catalog = s.catalog(&a.tenant_id, None)?;
        let action = catalog.catalog.actions.iter().find(|x| x.id == action_id)?.clone();
        Some((action, catalog.catalog.digest.clone()))
    });
    // An action the principal may not call is reported like a missing one.
    let Some((action, digest)) = found.filter(|(x, _)| x.execution.is_operation() && need(&x.scope)) else {
        return Ok(Err(refused(&Rejection::new(
            ReasonCode::TOOL_NOT_FOUND,
            format!("unknown operation action '{action_id}'"),
        ))));
    };
    let input = args.get("input").cloned().unwrap_or_else(|| json!({}));
    if let Some(v) = c.edge.validators.get(&digest, &action, false)? {
        let errors = schema_errors(&v, &input);
        if !errors.is_empty() {
            return Ok(Err(refused(&Rejection::new(ReasonCode::INPUT_INVALID, errors.join("; ")))));
        }
    }
    let device = match (&action.device_class, args["device"].as_str()) {
        (Some(class), Some(name)) => {
            let d = c.edge.verifier.with_state(|s| s.device(&a.tenant_id, name).cloned());
            match d {
                Some(d) if &d.device_class == class && need(&format!("devices:use:{}", d.name)) => Some(d),
                _ => {
                    let msg = format!("no device '{name}' of class {class} for you");
                    return Ok(Err(refused(&Rejection::new(ReasonCode::DEVICE_NOT_FOUND, msg))));
                }
            }
        }
        (Some(class), None) => {
            let msg = format!("'{action_id}' drives a {class} device: name it in 'device'");
            return Ok(Err(refused(&Rejection::new(ReasonCode::INPUT_INVALID, msg))));
        }
        (None, _) => None,
    };
    let work_ref = args
        .get("work_ref")
        .and_then(|w| Some(WorkRef { id: w["id"].as_str()?.to_string(), revision: w["revision"].as_u64()? }));
    let preconditions = args
        .get("preconditions")
        .and_then(Value::as_object)
        .map(|m| m.iter().filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string()))).collect())
        .unwrap_or_default();
    if let Err(r) = writ_api::operation::validate_preconditions(&preconditions) {
        return Ok(Err(refused(&r)));
    }
    // The payload the key binds: everything but the (relative) deadline.
    let payload = json!({"action": action_id, "input": input, "device": device.as_ref().map(|d| &d.id),
                         "work_ref": args.get("work_ref"), "preconditions": args.get("preconditions")});
    if purpose == Purpose::Preview {
        need(EXECUTE_SCOPE);
    }
    Ok(Ok(Prepared { payload_hash: payload_hash(&payload), action, input, device, work_ref, preconditions, denied }))
}

/// `operation.propose`: the dry run. Every check `operation.execute` makes before the ledger,
/// a preview of what would happen (device holder, cost, deadline rules), and — for a caller
/// who may commit it — a proposal the ledger records (after its own checks) for this principal
/// and exactly this call, usable once within [`PROPOSAL_TTL_MS`]. It executes nothing.
pub async fn propose(c: &Call<'_>, args: &Value) -> Result<Value, RpcError> {
    let p = match prepare(c, args, Purpose::Preview)? {
        Ok(p) => p,
        Err(refusal) => return Ok(refusal),
    };
    let a = c.authority;
    let holder = p.device.as_ref().and_then(|d| {
        c.edge.verifier.with_state(|s| s.device_leases.get(&a.tenant_id).and_then(|m| m.get(&d.id)).cloned())
    });
    // Nothing that could authorize a commit is recorded for a caller who may not commit.
    let allowed = p.denied.is_empty();
    let (proposal, expires_at_ms) = if allowed {
        match record_proposal(c, &p).await? {
            Ok((id, until)) => (Some(id), Some(until)),
            Err(refusal) => return Ok(refusal),
        }
    } else {
        (None, None)
    };
    let mut checks = vec![format!("scope {}", p.action.scope), "input schema".to_string()];
    if let Some(d) = &p.device {
        checks.push(format!("devices:use:{} (class {})", d.name, d.device_class));
    }
    let structured = json!({
        "proposal": proposal,
        "expires_at_ms": expires_at_ms,
        "payload_hash": p.payload_hash,
        "policy": {"allowed": allowed, "checks": checks, "denied": p.denied},
        "preview": {
            "action": p.action.id,
            "title": p.action.title,
            "risk": p.action.risk,
            "cost_units": p.action.cost_units,
            "input": p.input,
            "device": p.device.as_ref().map(|d| &d.name),
            "device_holder": holder.map(|l| json!({"operation_id": l.operation_id, "until_ms": l.expires_at_ms})),
            "preconditions": p.preconditions,
            "work_ref": p.work_ref,
            "effect": format!("an executor for {} would attempt '{}' once, before the deadline you give to \
                operation.execute", p.device.as_ref().map_or("this tenant", |d| d.name.as_str()), p.action.id),
        },
    });
    Ok(json!({"resultType": "complete", "content": [{"type": "text", "text": structured.to_string()}],
              "structuredContent": structured}))
}

/// What `operation.execute` answers: at once, or after following the operation (`wait_s`).
pub enum Executed {
    Now(Value),
    /// An upstream operation, recorded: the edge performs it next ([`perform`]).
    Perform(Box<Pending>),
    Follow {
        op: Box<Operation>,
        replayed: bool,
        wait: std::time::Duration,
        watch: writ_client::verifier::OperationWatch,
    },
}

/// Where an operation stays until someone acts: waiting for input, effect reported, unknown
/// effect, or finished.
fn settled(state: OperationState) -> bool {
    use OperationState::*;
    matches!(state, Proposed | EffectReported | UnknownEffect) || state.is_terminal()
}

/// What the edge knows of `known` now, if it moved past `known`'s revision: the replica's
/// record while the operation is live; once it left the replica (which holds live operations
/// only, so it has finished), the record `watch` kept of it then, or — when the watch opened
/// after that — the ledger's (one read). `None` while nothing moved, while the replica has not
/// yet applied `known`'s revision, or when the ledger could not answer.
pub async fn latest(
    watch: &writ_client::verifier::OperationWatch,
    ledger: &dyn writ_client::Ledger,
    known: &Operation,
) -> Option<(Operation, Option<ReasonCode>)> {
    let (tenant_id, id) = (&known.tenant_id, &known.spec.operation_id);
    let held = watch.with_state(|s| match s.operations.get(tenant_id).and_then(|m| m.get(id)) {
        // A live operation has no refusal: only a failed one does.
        Some(op) if op.revision <= known.revision => Some(None),
        Some(op) => Some(Some((op.clone(), refusal(op, &s.operation_history(tenant_id, id))))),
        None if s.revision >= known.revision => None,
        None => Some(None),
    });
    let found = match (held, watch.departed()) {
        (Some(found), _) => found,
        (None, Some(d)) => {
            metrics::counter!("writ_edge_operation_ends_total", "read" => "replica").increment(1);
            Some((d.op.clone(), refusal(&d.op, &d.history)))
        }
        (None, None) => {
            metrics::counter!("writ_edge_operation_ends_total", "read" => "ledger").increment(1);
            let q = Query::GetOperationHistory { tenant_id: tenant_id.clone(), operation_id: id.clone() };
            let h: writ_api::dto::OperationHistory = writ_client::query_as(ledger, q, Default::default()).await.ok()?;
            let reason = refusal(&h.operation, &h.transitions);
            Some((h.operation, reason))
        }
    };
    found.filter(|(op, _)| op.revision >= known.revision)
}

/// Follows `op` until it settles or `wait` passes ([`latest`]: on the edge's replica while it
/// is live), reporting each state it reaches as progress; answers with the operation as it
/// then is. The edge keeps nothing: a client that gives up reads it back (or executes again
/// with the same key) anywhere.
pub async fn follow(
    verifier: writ_client::verifier::Verifier,
    watch: writ_client::verifier::OperationWatch,
    ledger: std::sync::Arc<dyn writ_client::Ledger>,
    op: Operation,
    replayed: bool,
    wait: std::time::Duration,
    notify: crate::reply::Notifier,
) -> Result<Value, RpcError> {
    let until = tokio::time::Instant::now() + wait;
    let mut revisions = verifier.revisions();
    let (mut current, mut reported, mut step, mut reason) = (op, None, 0.0, None);
    loop {
        if let Some((newer, why)) = latest(&watch, ledger.as_ref(), &current).await {
            current = newer;
            reason = why;
        }
        if reported != Some(current.state) {
            step += 1.0;
            let state = serde_json::to_value(current.state).unwrap_or_default();
            notify.progress(step, None, state.as_str().unwrap_or_default()).await;
            reported = Some(current.state);
        }
        if settled(current.state) {
            break;
        }
        match tokio::time::timeout_at(until, revisions.changed()).await {
            Ok(Ok(())) => {}
            _ => break, // waited long enough (or the replica stopped): answer with what is known
        }
    }
    Ok(view_refused(&current, replayed, reason))
}

/// `operation.execute`. Errors are protocol/transport failures (fail closed); business
/// refusals come back as tool errors.
pub async fn execute(c: &Call<'_>, args: &Value) -> Result<Executed, RpcError> {
    let wait = std::time::Duration::from_secs(args["wait_s"].as_u64().unwrap_or(0).min(WAIT_S_MAX));
    let recorded = match execute_now(c, args).await? {
        Err(answer) => return Ok(Executed::Now(answer)),
        Ok(recorded) => recorded,
    };
    Ok(match recorded {
        Ok(Recorded { op, replayed, perform: Some(action), .. }) => {
            Executed::Perform(Box::new(Pending { op, replayed, action }))
        }
        Ok(Recorded { op, replayed, perform: None, watch }) if !wait.is_zero() && !crate::tasks::negotiated(c) => {
            Executed::Follow { op: Box::new(op), replayed, wait, watch }
        }
        other => Executed::Now(answer(c, other)?),
    })
}

/// The checks and the submission of `operation.execute`: `Err(answer)` when it is refused
/// before the ledger, else what the ledger recorded (or refused).
async fn execute_now(c: &Call<'_>, args: &Value) -> Result<Result<Result<Recorded, Value>, Value>, RpcError> {
    let action_id = args["action"].as_str().unwrap_or_default();
    let key = args["idempotency_key"].as_str().unwrap_or_default();
    let p = match prepare(c, args, Purpose::Commit)? {
        Ok(p) => p,
        Err(refusal) => return Ok(Err(refusal)),
    };
    // The ledger holds the verification rule; refusing here only saves the round trip.
    let proposal = args["proposal"].as_str();
    if p.action.demands_verification() && proposal.is_none() {
        return Ok(Err(refused(&Rejection::new(
            ReasonCode::VERIFY_REQUIRED,
            format!("'{action_id}' must be proposed first: call operation.propose and pass its proposal"),
        ))));
    }
    let deadline_s = args["deadline_s"].as_u64().unwrap_or(DEADLINE_S_DEFAULT).clamp(1, DEADLINE_S_MAX);
    let cost_ceiling = args["cost_ceiling"].as_u64();
    Ok(Ok(record(c, p, key, deadline_s, cost_ceiling, Map::new(), proposal).await?))
}

/// What a recorded call answers: the operation as a task for clients declaring the tasks
/// extension, else the operation itself.
fn answer(c: &Call<'_>, recorded: Result<Recorded, Value>) -> Result<Value, RpcError> {
    Ok(match recorded {
        Ok(Recorded { op, .. }) if crate::tasks::negotiated(c) => crate::tasks::created(&op),
        Ok(Recorded { op, replayed, .. }) => view(&op, replayed),
        Err(refusal) => refusal,
    })
}

/// A recorded direct call's answer, or — an upstream operation — what is left to perform.
fn finish(c: &Call<'_>, recorded: Result<Recorded, Value>) -> Result<Direct, RpcError> {
    match recorded {
        Ok(Recorded { op, replayed, perform: Some(action), .. }) => {
            Ok(Direct::Perform(Box::new(Pending { op, replayed, action })))
        }
        other => answer(c, other).map(Direct::Complete),
    }
}

/// A call the ledger recorded: the operation as it then was, whether the call replayed an
/// earlier one, — an upstream operation — the action the edge performs it as, and the watch
/// on it, opened before it was submitted (so its end is never missed on the replica).
struct Recorded {
    op: Operation,
    replayed: bool,
    perform: Option<writ_api::catalog::CatalogActionV1>,
    watch: writ_client::verifier::OperationWatch,
}

/// An upstream operation recorded and left for the edge to perform, in the request's reply
/// task (so the upstream's progress and log messages reach the caller).
pub struct Pending {
    op: Operation,
    replayed: bool,
    action: writ_api::catalog::CatalogActionV1,
}

/// Performs a recorded upstream operation (`crate::upstream::Upstreams::perform`) and answers
/// what came of it, relaying the upstream's progress and log messages through `notify`.
pub async fn perform(
    edge: std::sync::Arc<crate::Edge>,
    trace_id: String,
    pending: Pending,
    notify: crate::reply::Notifier,
) -> Result<Value, RpcError> {
    let Pending { op, replayed, action } = pending;
    let (trace, id) = (op.spec.trace_id.clone(), op.spec.operation_id.clone());
    let perform = edge.upstreams.perform(&edge, &trace_id, &action, op, Some(notify));
    let done = writ_client::trace::within_operation(&trace, &id, perform).await;
    Ok(performed_answer(&done, replayed))
}

/// The answer of an upstream operation: the upstream's result (or the refusal or failure),
/// with the operation in `_meta["writ/operation"]` — or, for one performed before (a replay),
/// the operation itself (its result is its evidence).
fn performed_answer(done: &crate::upstream::Performed, replayed: bool) -> Value {
    let operation = view(&done.op, replayed)["structuredContent"].take();
    let mut answer = match (&done.result, &done.refusal) {
        (Some(result), _) => {
            let mut result = result.clone();
            result["resultType"] = json!("complete");
            result
        }
        (None, Some(refusal)) => refused(refusal),
        (None, None) => return view(&done.op, replayed),
    };
    if !answer["_meta"].is_object() {
        answer["_meta"] = json!({});
    }
    answer["_meta"]["writ/operation"] = operation;
    answer
}

/// The operation spec of a prepared call (a proposal's: its id as the operation id and key).
fn spec_of(
    c: &Call<'_>,
    p: &Prepared,
    (operation_id, key): (String, &str),
    deadline_ms: u64,
    cost_ceiling: Option<u64>,
    input_requests: &Map<String, Value>,
) -> OperationSpecV1 {
    let a = c.authority;
    OperationSpecV1 {
        operation_id,
        principal_id: a.principal_id.clone(),
        authority_ref: a.reference(),
        action: p.action.id.clone(),
        payload_hash: p.payload_hash.clone(),
        input: canonical_json(&p.input),
        idempotency_key: key.to_string(),
        deadline_ms,
        cost_units: p.action.cost_units,
        cost_ceiling,
        device_id: p.device.as_ref().map(|d| d.id.clone()),
        work_ref: p.work_ref.clone(),
        preconditions: p.preconditions.clone(),
        trace_id: c.trace_id.to_string(),
        input_requests: input_requests.iter().map(|(k, v)| (k.clone(), canonical_json(v))).collect(),
    }
}

/// Submits `command` — a submission or proposal of the call being served — carrying the
/// request's decision (one log entry for both), resubmitting while the outcome is uncertain.
async fn submit_call(c: &Call<'_>, command: Command) -> Result<Outcome, RpcError> {
    let name = c.req.params()["name"].as_str();
    let client = crate::audit::client_of(c.req, c.headers);
    let decision = crate::audit::request_decision(c.trace_id, c.authority, &client, &c.req.method, name, None);
    let command = crate::audit::with_decision(decision, command);
    let req = c.submit_request(command);
    let submitted = submit_replayable(c.edge.ledger.as_ref(), req).await.map_err(|e| RpcError::rejected(&e))?;
    c.recorded.store(true, std::sync::atomic::Ordering::Release);
    Ok(submitted.outcome)
}

/// Records a proposal of the prepared call in the ledger: its id and expiry (ledger time), or
/// the ledger's refusal as a tool error.
async fn record_proposal(c: &Call<'_>, p: &Prepared) -> Result<Result<(String, u64), Value>, RpcError> {
    let id = format!("prop-{}", uuid::Uuid::new_v4().simple());
    let until = writ_client::now_ms() + PROPOSAL_TTL_MS;
    let spec = spec_of(c, p, (id.clone(), &id), until, None, &Map::new());
    let command = Command::ProposeOperation { tenant_id: c.authority.tenant_id.clone(), spec };
    match submit_call(c, command).await? {
        Outcome::Rejected { reason, message, .. } => Ok(Err(refused(&Rejection::new(reason, message)))),
        Outcome::Applied { events, .. } => {
            // The ledger's expiry; a resubmission that had landed applies nothing new.
            let recorded = events.iter().find_map(|e| match &e.event {
                writ_api::ledger::Event::OperationProposedV1 { proposal, .. } => Some(proposal.expires_at_ms),
                _ => None,
            });
            Ok(Ok((id, recorded.unwrap_or(until))))
        }
        _ => Err(RpcError::reason(ReasonCode::INTERNAL, "unexpected ledger outcome")),
    }
}

/// Submits a prepared call as an operation under `key` (waiting for `input_requests` first, if
/// any; using the proposal `proposal`, if named) and reads it back: the operation and whether
/// it was a replay of the prior one, or the ledger's refusal as a tool error.
async fn record(
    c: &Call<'_>,
    p: Prepared,
    key: &str,
    deadline_s: u64,
    cost_ceiling: Option<u64>,
    input_requests: Map<String, Value>,
    proposal: Option<&str>,
) -> Result<Result<Recorded, Value>, RpcError> {
    let id = format!("op-{}", uuid::Uuid::new_v4().simple());
    let deadline_ms = writ_client::now_ms() + deadline_s * 1000;
    let spec = spec_of(c, &p, (id, key), deadline_ms, cost_ceiling, &input_requests);
    let tenant_id = c.authority.tenant_id.clone();
    let mut watch = c.edge.verifier.watch_operation(&tenant_id, &spec.operation_id);
    let command = match proposal {
        Some(proposal_id) => {
            Command::SubmitProposed { tenant_id, proposal_id: proposal_id.to_string(), spec: spec.clone() }
        }
        None => Command::SubmitOperation { tenant_id, spec: spec.clone() },
    };
    // The submission's span has the id every later step of the operation derives from its
    // record (`writ_api::trace::operation_span_id`): the executor's attempt and an upstream's
    // call continue the trace under it.
    let span_id = writ_api::trace::operation_span_id(c.trace_id, &spec.operation_id);
    let submitted = match writ_client::trace::child(span_id) {
        Some(cx) => {
            let kind = opentelemetry::trace::SpanKind::Internal;
            let mut span = writ_telemetry::Span::start(cx, kind, || format!("writ.operation.submit {}", p.action.id));
            span.set("writ.operation.id", spec.operation_id.clone());
            span.set("writ.action", p.action.id.clone());
            let submitted = writ_client::trace::within(span.context(), submit_call(c, command)).await;
            if let Ok(Outcome::Rejected { reason, .. }) = &submitted {
                span.fail(reason.as_str());
            }
            span.end();
            submitted
        }
        None => submit_call(c, command).await,
    };
    match submitted? {
        Outcome::Rejected { reason, message, .. } => Ok(Err(refused(&Rejection::new(reason, message)))),
        // The operation as the submission left it (the prior one, for a replay).
        Outcome::Applied { operation: Some(op), .. } => {
            let replayed = op.spec.operation_id != spec.operation_id;
            if replayed {
                watch = c.edge.verifier.watch_operation(&op.tenant_id, &op.spec.operation_id);
            }
            // The edge performs an upstream operation next (a replay finds it attempted
            // already and answers it).
            let perform = matches!(p.action.execution, Execution::UpstreamOperation(_)).then(|| p.action.clone());
            Ok(Ok(Recorded { op: *op, replayed, perform, watch }))
        }
        _ => Err(RpcError::reason(ReasonCode::INTERNAL, "unexpected ledger outcome")),
    }
}

/// Pauses before each resubmission of a submission whose outcome was uncertain.
const RESUBMIT_BACKOFF_MS: [u64; 3] = [100, 250, 500];

/// Submits an operation, resubmitting it while the outcome is uncertain (LEDGER_UNAVAILABLE:
/// no leader during a failover, or a commit whose answer was lost) — safe because the
/// submission carries the operation's own idempotency key and id: one that landed is answered
/// as itself (not as a replay), one that did not lands now. Bounded by [`RESUBMIT_BACKOFF_MS`].
pub(crate) async fn submit_replayable(
    ledger: &dyn writ_client::Ledger,
    req: SubmitRequest,
) -> Result<SubmitResponse, Rejection> {
    let mut pauses = RESUBMIT_BACKOFF_MS.iter();
    loop {
        match ledger.submit(req.clone()).await {
            Err(e) if e.reason == ReasonCode::LEDGER_UNAVAILABLE => match pauses.next() {
                Some(ms) => {
                    tracing::debug!(message = %e.message, "submission outcome uncertain; resubmitting");
                    tokio::time::sleep(std::time::Duration::from_millis(*ms)).await;
                }
                None => return Err(e),
            },
            other => return other,
        }
    }
}

/// The `_meta` key under which a direct call may carry its idempotency key.
pub const META_IDEMPOTENCY_KEY: &str = "io.writ/idempotencyKey";

/// What a direct call of an operation action answers.
pub enum Direct {
    Complete(Value),
    /// Ask the client to confirm (MRTR): the requests and the state to seal.
    Confirm {
        requests: Value,
        state: Value,
    },
    /// An upstream operation, recorded: the edge performs it next ([`perform`]).
    Perform(Box<Pending>),
}

/// A catalog action that runs as an operation, called as its own tool (SPEC E5). The arguments
/// are the action's input; the device is the only one of its class the caller may use. Low and
/// medium risk: the operation pipeline in one call (idempotency key from
/// `_meta["io.writ/idempotencyKey"]`, else a fresh one: not retry-safe). High risk or dry-run
/// actions: a first round answers `input_required` with an elicitation showing the preview; the
/// confirmation round (untampered, unexpired `requestState`, bound to the same arguments)
/// records the operation under the key minted in the first round, so a repeated confirmation
/// replays it. A client declaring the tasks extension gets a task instead (the confirmation,
/// and any `asks`, become the operation's input requests, answered with `tasks/update`);
/// `task` actions are served only that way.
pub async fn direct(
    c: &Call<'_>,
    action: &writ_api::catalog::CatalogActionV1,
    input: Value,
    inputs: &serde_json::Map<String, Value>,
    state: Option<Value>,
    mut asks: Map<String, Value>,
) -> Result<Direct, RpcError> {
    let a = c.authority;
    // An upstream operation is performed in the call (the edge is its performer), not as a task.
    let as_task = crate::tasks::negotiated(c) && !matches!(action.execution, Execution::UpstreamOperation(_));
    if action.execution == Execution::Task && !as_task {
        return Err(crate::tasks::extension_missing(&format!("'{}' (a long-running task)", action.id)));
    }
    let mut call = json!({"action": action.id, "input": input});
    if let Some(class) = &action.device_class {
        let usable: Vec<String> = c.edge.verifier.with_state(|s| {
            s.devices
                .get(&a.tenant_id)
                .into_iter()
                .flat_map(|m| m.values())
                .filter(|d| &d.device_class == class && a.require(&format!("devices:use:{}", d.name)).is_ok())
                .map(|d| d.name.clone())
                .collect()
        });
        match usable.as_slice() {
            [one] => call["device"] = json!(one),
            [] => {
                let msg = format!("no {class} device for you");
                return Ok(Direct::Complete(refused(&Rejection::new(ReasonCode::DEVICE_NOT_FOUND, msg))));
            }
            several => {
                let msg = format!(
                    "several {class} devices ({}): call operation.execute and name one in 'device'",
                    several.join(", ")
                );
                return Ok(Direct::Complete(refused(&Rejection::new(ReasonCode::INPUT_INVALID, msg))));
            }
        }
    }
    let p = match prepare(c, &call, Purpose::Commit)? {
        Ok(p) => p,
        Err(refusal) => return Ok(Direct::Complete(refusal)),
    };
    let confirm = action.risk >= writ_api::catalog::Risk::High || action.dry_run;
    let key = || {
        c.req
            .params()
            .get("_meta")
            .and_then(|m| m.get(META_IDEMPOTENCY_KEY))
            .and_then(Value::as_str)
            .map_or_else(|| format!("direct-{}", uuid::Uuid::new_v4().simple()), str::to_string)
    };
    if as_task {
        if confirm {
            asks.insert(CONFIRM_REQUEST.into(), confirmation(action, &p));
        }
        let deadline_s = if asks.is_empty() { DEADLINE_S_DEFAULT } else { TASK_INPUT_DEADLINE_S };
        return answer(c, record(c, p, &key(), deadline_s, None, asks, None).await?).map(Direct::Complete);
    }
    if !confirm {
        let recorded = record(c, p, &key(), DEADLINE_S_DEFAULT, None, Map::new(), None).await?;
        return finish_call(c, action, recorded).await;
    }
    let Some(state) = state else {
        let caps = c.req.meta(crate::jsonrpc::META_CLIENT_CAPABILITIES);
        if !caps.and_then(|c| c.get("elicitation")).is_some_and(Value::is_object) {
            return Err(RpcError::reason(
                ReasonCode::CLIENT_CAPABILITY_MISSING,
                format!("'{}' needs a confirmation: declare the elicitation capability, or use operation.propose and operation.execute", action.id),
            )
            .with_data(json!({"reason": ReasonCode::CLIENT_CAPABILITY_MISSING, "requiredCapabilities": {"elicitation": {}}})));
        }
        // The preview the person confirms is recorded as a proposal: the confirmation round
        // submits the call with it, so the ledger holds the rule here too.
        let proposal = match record_proposal(c, &p).await? {
            Ok((id, _)) => id,
            Err(refusal) => return Ok(Direct::Complete(refusal)),
        };
        let requests = json!({CONFIRM_REQUEST: confirmation(action, &p)});
        let key = format!("direct-{}", uuid::Uuid::new_v4().simple());
        let state = json!({"key": key, "payload_hash": p.payload_hash, "proposal": proposal});
        return Ok(Direct::Confirm { requests, state });
    };
    if state["payload_hash"] != p.payload_hash.as_str() {
        return Ok(Direct::Complete(refused(&Rejection::new(
            ReasonCode::REQUEST_STATE_INVALID,
            "the call changed since it was confirmed (device or catalog): call it again",
        ))));
    }
    let reply = inputs.get(CONFIRM_REQUEST);
    let confirmed = reply.is_some_and(|r| r["action"] == "accept" && r["content"]["confirm"] == true);
    if !confirmed {
        return Ok(Direct::Complete(json!({"resultType": "complete",
            "content": [{"type": "text", "text": "Not confirmed: nothing was done."}],
            "structuredContent": {"confirmed": false}})));
    }
    let key = state["key"].as_str().unwrap_or_default().to_string();
    let proposal = state["proposal"].as_str();
    finish_call(c, action, record(c, p, &key, DEADLINE_S_DEFAULT, None, Map::new(), proposal).await?).await
}

/// How long a call of a catalog `read` waits for its executor's reading before it answers with
/// the operation instead (which the caller can follow: `operation.observe`, its resource).
pub const READ_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// A recorded direct call's answer: a `read` answers with what its executor read.
async fn finish_call(
    c: &Call<'_>,
    action: &writ_api::catalog::CatalogActionV1,
    recorded: Result<Recorded, Value>,
) -> Result<Direct, RpcError> {
    match recorded {
        Ok(r) if action.execution == Execution::Read => Ok(Direct::Complete(reading(c, r).await?)),
        other => finish(c, other),
    }
}

/// Waits (up to [`READ_WAIT`]) for a read's attempt to end on this edge's replica, then answers
/// with its evidence — the reading, as text and (a JSON object) as structured content — or, if
/// the read failed, its cause as a tool error.
async fn reading(c: &Call<'_>, recorded: Recorded) -> Result<Value, RpcError> {
    use writ_api::operation::OperationState as S;
    let mut revisions = c.edge.verifier.revisions();
    let watch = &recorded.watch;
    let waited = tokio::time::timeout(READ_WAIT, async {
        let mut known = recorded.op.clone();
        loop {
            if let Some((op, _)) = latest(watch, c.edge.ledger.as_ref(), &known).await {
                if !op.is_live() {
                    return Some(op);
                }
                known = op;
            }
            if revisions.changed().await.is_err() {
                return None;
            }
        }
    })
    .await;
    let Ok(Some(op)) = waited else { return Ok(view(&recorded.op, recorded.replayed)) };
    let meta = json!({"writ/operation": view(&op, recorded.replayed)["structuredContent"]});
    let Some(evidence) = op.evidence.last().filter(|_| matches!(op.state, S::EffectReported | S::Accepted)) else {
        let text = format!("the read ended {}: {}", op.state.as_str(), op.cause);
        return Ok(
            json!({"resultType": "complete", "isError": true, "content": [{"type": "text", "text": text}], "_meta": meta}),
        );
    };
    let query = writ_api::dto::Query::GetEvidence {
        tenant_id: op.tenant_id.clone(),
        operation_id: op.spec.operation_id.clone(),
        content_hash: evidence.content_hash.clone(),
    };
    let stored: Result<writ_api::dto::EvidenceContent, _> =
        writ_client::query_as(c.edge.ledger.as_ref(), query, Default::default()).await;
    let text = stored
        .ok()
        .and_then(|e| String::from_utf8(writ_api::evidence::from_base64(&e.content_base64)?).ok())
        .unwrap_or_else(|| evidence.summary.clone());
    let mut result = json!({"resultType": "complete", "content": [{"type": "text", "text": text}], "_meta": meta});
    if let Ok(object @ Value::Object(_)) = serde_json::from_str::<Value>(&text) {
        result["structuredContent"] = object;
    }
    Ok(result)
}

/// The elicitation asking the caller to confirm a high-risk (or dry-run) call, with its preview.
fn confirmation(action: &writ_api::catalog::CatalogActionV1, p: &Prepared) -> Value {
    let device = p.device.as_ref().map_or(String::new(), |d| format!(" on {}", d.name));
    let message = format!(
        "Confirm '{}'{device} ({:?} risk, {} cost units) with input {}? Nothing happens unless you confirm.",
        action.title,
        action.risk,
        action.cost_units,
        canonical_json(&p.input)
    );
    json!({"method": "elicitation/create", "params": {"message": message,
        "requestedSchema": {"type": "object", "properties": {"confirm": {"type": "boolean", "title": "Run it"}},
                            "required": ["confirm"]}}})
}

/// `context.search`: read from the edge's replica at one revision, filtered by the caller's
/// authority (nothing it may not see is counted or hinted at).
pub fn search(c: &Call<'_>, args: &Value) -> Value {
    let a = c.authority;
    let query = args["query"].as_str().unwrap_or_default().to_lowercase();
    let hit = |texts: &[&str]| query.is_empty() || texts.iter().any(|t| t.to_lowercase().contains(&query));
    let limit = args["limit"].as_u64().unwrap_or(20).clamp(1, SEARCH_LIMIT_MAX) as usize;
    let structured = c.edge.verifier.with_state(|s| {
        let actions: Vec<Value> = s
            .catalog(&a.tenant_id, None)
            .into_iter()
            .flat_map(|v| v.catalog.actions.iter())
            .filter(|x| a.require(&x.scope).is_ok() && hit(&[&x.id, &x.title, &x.description]))
            .take(limit)
            .map(|x| {
                json!({"id": x.id, "title": x.title, "description": x.description, "risk": x.risk,
                            "execution": x.execution.label(), "dry_run": x.dry_run, "device_class": x.device_class,
                            "cost_units": x.cost_units})
            })
            .collect();
        let leases = s.device_leases.get(&a.tenant_id);
        let devices: Vec<Value> = s
            .devices
            .get(&a.tenant_id)
            .into_iter()
            .flat_map(|m| m.values())
            .filter(|d| a.require(&format!("devices:use:{}", d.name)).is_ok())
            .filter(|d| hit(&[&d.name, &d.device_class]))
            .take(limit)
            .map(|d| {
                let site = s.site(&a.tenant_id, &d.site_id).map(|x| x.name.clone());
                let held = leases.and_then(|l| l.get(&d.id)).map(|l| l.operation_id.clone());
                json!({"name": d.name, "class": d.device_class, "site": site, "held_by_operation": held})
            })
            .collect();
        let ops = s.operations.get(&a.tenant_id);
        let operations: Vec<Value> = s
            .live_operations
            .get(&a.tenant_id)
            .into_iter()
            .flatten()
            .filter_map(|id| ops?.get(id))
            .filter(|op| op.spec.principal_id == a.principal_id && hit(&[&op.spec.action, &op.spec.operation_id]))
            .take(limit)
            .map(|op| {
                json!({"operation_id": op.spec.operation_id, "action": op.spec.action, "state": op.state,
                             "idempotency_key": op.spec.idempotency_key, "deadline_ms": op.spec.deadline_ms})
            })
            .collect();
        json!({"revision": s.revision, "actions": actions, "devices": devices, "operations_in_flight": operations})
    });
    json!({"resultType": "complete", "content": [{"type": "text", "text": structured.to_string()}],
           "structuredContent": structured})
}

/// `operation.readback`: by id, or by the caller's own idempotency key.
pub async fn readback(c: &Call<'_>, args: &Value) -> Result<Value, RpcError> {
    let a = c.authority;
    let q = match (args["operation_id"].as_str(), args["idempotency_key"].as_str()) {
        (Some(id), _) => Query::GetOperation { tenant_id: a.tenant_id.clone(), operation_id: id.to_string() },
        (None, Some(key)) => Query::GetOperationByKey {
            tenant_id: a.tenant_id.clone(),
            principal_id: a.principal_id.clone(),
            idempotency_key: key.to_string(),
        },
        (None, None) => {
            return Ok(refused(&Rejection::new(ReasonCode::INPUT_INVALID, "give operation_id or idempotency_key")))
        }
    };
    let op = match query(c, q).await? {
        Ok(op) => op,
        Err(e) => return Ok(refused(&e)),
    };
    // The operation again with its history (one read: they match).
    let q = Query::GetOperationHistory { tenant_id: a.tenant_id.clone(), operation_id: op.spec.operation_id };
    let h: writ_api::dto::OperationHistory =
        match writ_client::query_as(c.edge.ledger.as_ref(), q, Default::default()).await {
            Ok(h) => h,
            Err(e) => return Err(RpcError::rejected(&e)),
        };
    let mut v = view_refused(&h.operation, false, refusal(&h.operation, &h.transitions));
    v["structuredContent"]["history"] = json!(h.transitions);
    v["content"][0]["text"] = json!(v["structuredContent"].to_string());
    Ok(v)
}

/// Submits the caller's act on an operation (answer, cancel, observe, decide) wrapped in the
/// authority the request was admitted under, which the ledger re-checks
/// (`Command::OnBehalfOf`). The inner result is the ledger's refusal, if any.
pub async fn submit_act(c: &Call<'_>, act: Command) -> Result<Result<(), Rejection>, RpcError> {
    let command = Command::OnBehalfOf { authority_ref: c.authority.reference(), command: Box::new(act) };
    let submitted = c.edge.ledger.submit(c.submit_request(command)).await.map_err(|e| RpcError::rejected(&e))?;
    Ok(match submitted.outcome {
        Outcome::Applied { .. } => Ok(()),
        Outcome::Rejected { reason, message, .. } => Err(Rejection::new(reason, message)),
        Outcome::Internal | Outcome::Batch(_) => {
            return Err(RpcError::reason(ReasonCode::INTERNAL, "unexpected ledger outcome"))
        }
    })
}

/// Submits the caller's act and answers with the operation's new state (ledger refusals as
/// tool errors).
async fn act(c: &Call<'_>, operation_id: &str, command: Command) -> Result<Value, RpcError> {
    if let Err(refusal) = submit_act(c, command).await? {
        return Ok(refused(&refusal));
    }
    let q = Query::GetOperation { tenant_id: c.authority.tenant_id.clone(), operation_id: operation_id.to_string() };
    Ok(match query(c, q).await? {
        Ok(op) => view(&op, false),
        Err(e) => refused(&e),
    })
}

/// `observation.capture`: the caller's observation, linked to the operation.
pub async fn observe(c: &Call<'_>, args: &Value) -> Result<Value, RpcError> {
    let operation_id = args["operation_id"].as_str().unwrap_or_default();
    let content_hash = args["content_hash"].as_str().unwrap_or_default().to_string();
    // Content given: the ledger stores it, and the observation names where it is read.
    let stored = match args["content_base64"].as_str() {
        Some(content) => {
            let upload = Command::StoreEvidence {
                tenant_id: c.authority.tenant_id.clone(),
                operation_id: operation_id.to_string(),
                mime_type: args["mime_type"].as_str().unwrap_or("application/octet-stream").to_string(),
                content_hash: content_hash.clone(),
                content_base64: content.to_string(),
                by: writ_api::evidence::Uploader::Principal { principal_id: c.authority.principal_id.clone() },
            };
            if let Err(refusal) = submit_act(c, upload).await? {
                return Ok(refused(&refusal));
            }
            Some(writ_api::evidence::evidence_uri(operation_id, &content_hash))
        }
        None => None,
    };
    let given = args["evidence_return_ref"].as_str().unwrap_or_default().to_string();
    let evidence = writ_api::operation::EvidenceV1 {
        content_hash,
        evidence_return_ref: stored.unwrap_or(given),
        summary: args["summary"].as_str().unwrap_or_default().to_string(),
    };
    let command = Command::RecordObservation {
        tenant_id: c.authority.tenant_id.clone(),
        operation_id: operation_id.to_string(),
        observer_id: c.authority.principal_id.clone(),
        evidence,
    };
    act(c, operation_id, command).await
}

/// A work scope from a tool's arguments, its devices named by the caller resolved to ids on the
/// edge's replica (an unknown one is DEVICE_NOT_FOUND).
fn work_scope(c: &Call<'_>, v: &Value) -> Result<writ_api::work::WorkScopeV1, Rejection> {
    let mut scope: writ_api::work::WorkScopeV1 =
        serde_json::from_value(v.clone()).map_err(|e| Rejection::new(ReasonCode::INPUT_INVALID, e.to_string()))?;
    let names = std::mem::take(&mut scope.devices);
    scope.devices = c.edge.verifier.with_state(|s| {
        let known = s.device_names.get(&c.authority.tenant_id);
        names
            .iter()
            .map(|n| {
                known
                    .and_then(|m| m.get(n))
                    .cloned()
                    .ok_or_else(|| Rejection::new(ReasonCode::DEVICE_NOT_FOUND, format!("no device '{n}'")))
            })
            .collect::<Result<Vec<String>, Rejection>>()
    })?;
    Ok(scope)
}

/// `work.create` and `work.update`: the caller's change to a work item, on its behalf (the
/// ledger re-checks `work:write`), answered with the item as the ledger then holds it.
pub async fn work(c: &Call<'_>, name: &str, args: &Value) -> Result<Value, RpcError> {
    let work_id = args["id"].as_str().unwrap_or_default().to_string();
    let scope = match args.get("scope").map(|s| work_scope(c, s)).transpose() {
        Ok(scope) => scope,
        Err(e) => return Ok(refused(&e)),
    };
    let (tenant_id, by) = (c.authority.tenant_id.clone(), c.authority.principal_id.clone());
    let text = |k: &str| args[k].as_str().map(str::to_string);
    let command = if name == WORK_CREATE {
        Command::CreateWork {
            tenant_id: tenant_id.clone(),
            work_id: work_id.clone(),
            title: text("title").unwrap_or_default(),
            owner: text("owner").unwrap_or_default(),
            scope: scope.unwrap_or_default(),
            by,
        }
    } else {
        let state = match args["state"].as_str() {
            Some("completed") => Some(writ_api::work::WorkState::Completed),
            Some("cancelled") => Some(writ_api::work::WorkState::Cancelled),
            _ => None,
        };
        let change = writ_api::work::WorkChangeV1 {
            title: text("title"),
            owner: text("owner"),
            scope,
            state,
            note: text("note"),
        };
        Command::ReviseWork {
            tenant_id: tenant_id.clone(),
            work_id: work_id.clone(),
            expected_revision: args["expected_revision"].as_u64(),
            change,
            by,
        }
    };
    if let Err(refusal) = submit_act(c, command).await? {
        return Ok(refused(&refusal));
    }
    let q = Query::GetWork { tenant_id, work_id };
    let item: writ_api::work::WorkItem = writ_client::query_as(c.edge.ledger.as_ref(), q, Default::default())
        .await
        .map_err(|e| RpcError::rejected(&e))?;
    let structured =
        serde_json::to_value(&item).map_err(|_| RpcError::reason(ReasonCode::INTERNAL, "unserializable"))?;
    Ok(json!({"resultType": "complete", "content": [{"type": "text", "text": structured.to_string()}],
              "structuredContent": structured}))
}

/// `operation.approve`: the caller's approval (or refusal) of another principal's critical
/// operation, bound to its payload digest; the ledger checks who may give it.
pub async fn approve(c: &Call<'_>, args: &Value) -> Result<Value, RpcError> {
    let operation_id = args["operation_id"].as_str().unwrap_or_default();
    let q = Query::GetOperation { tenant_id: c.authority.tenant_id.clone(), operation_id: operation_id.to_string() };
    let op = match query(c, q).await? {
        Ok(op) => op,
        Err(e) => return Ok(refused(&e)),
    };
    let verdict = if args["approve"] == true { "accept" } else { "decline" };
    let answer = json!({"action": verdict, "content": {"payload_hash": op.spec.payload_hash}});
    let command = Command::AnswerInputs {
        tenant_id: c.authority.tenant_id.clone(),
        operation_id: operation_id.to_string(),
        by_principal_id: c.authority.principal_id.clone(),
        answers: [(writ_api::operation::APPROVAL_REQUEST.to_string(), answer.to_string())].into(),
    };
    act(c, operation_id, command).await
}

/// `operation.decide`: accept or reject a reported effect.
pub async fn decide(c: &Call<'_>, args: &Value) -> Result<Value, RpcError> {
    let operation_id = args["operation_id"].as_str().unwrap_or_default();
    let verdict = if args["verdict"] == "accept" { Verdict::Accept } else { Verdict::Reject };
    let command = Command::DecideOperation {
        tenant_id: c.authority.tenant_id.clone(),
        operation_id: operation_id.to_string(),
        by_principal_id: c.authority.principal_id.clone(),
        verdict,
        note: args["note"].as_str().unwrap_or_default().to_string(),
    };
    act(c, operation_id, command).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn holding(scopes: &[&str]) -> writ_api::auth::Authority {
        writ_api::auth::Authority {
            tenant_id: "t".into(),
            principal_id: "p".into(),
            principal_name: "p".into(),
            issuer: writ_api::token::WRIT_ISSUER.into(),
            token_id: None,
            parent_token_id: None,
            chain: Vec::new(),
            scopes: scopes.iter().map(|s| s.to_string()).collect(),
            revoked_scopes: Default::default(),
            expires_at_ms: u64::MAX,
        }
    }

    #[test]
    fn every_operation_tool_compiles_and_a_scope_chooses_among_them() {
        let all: Vec<&str> = table().iter().filter_map(|t| t.entry["name"].as_str()).collect();
        assert_eq!(all.len(), 9, "{all:?}");
        let reader = holding(&[READ_SCOPE]);
        assert_eq!(tools(&reader).iter().map(|t| t["name"].clone()).collect::<Vec<_>>(), [READBACK]);
        assert!(tool(&reader, EXECUTE).is_none(), "not without its scope");
        // A dry run needs either scope; the executor's scope lists execute before it.
        let searcher = holding(&[SEARCH_SCOPE]);
        assert!(tool(&searcher, PROPOSE).is_some() && tool(&searcher, EXECUTE).is_none());
        let executor = holding(&[EXECUTE_SCOPE]);
        let names: Vec<Value> = tools(&executor).iter().map(|t| t["name"].clone()).collect();
        assert_eq!(names, [EXECUTE, PROPOSE]);
        let errors = tool(&executor, EXECUTE).expect("listed").input_errors(&serde_json::json!({"wait_s": -1}));
        assert!(!errors.is_empty(), "the input schema is checked");
    }
}
