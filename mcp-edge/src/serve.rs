//! The MCP methods, after the transport checks and authentication: authorization on the decoded
//! operation first (an unauthorized tool, resource or prompt is answered exactly like a missing
//! one), then input validation, execution (JSON or SSE, see `reply`), output validation.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Map, Value};
use writ_api::auth::Authority;
use writ_api::catalog::{CatalogActionV1, Execution};
use writ_api::{ReasonCode, Rejection};
use writ_client::now_ms;

use crate::builtin::{self, ToolAnswer, ToolCall};
use crate::fixtures;
use crate::jsonrpc::{self, Request, RpcError, HEADER_MISMATCH, META_CLIENT_CAPABILITIES};
use crate::operations;
use crate::reply;
use crate::seal::{self, Binding};
use crate::surfaces;
use crate::tasks;
use crate::Edge;

/// How long an MRTR `requestState` stays valid.
pub const REQUEST_STATE_TTL_MS: u64 = 10 * 60 * 1000;
/// How long a list cursor stays valid.
pub const CURSOR_TTL_MS: u64 = 60 * 60 * 1000;
/// Items per page of a list.
pub const PAGE_SIZE: usize = 100;
/// Compiled input/output validators kept per edge.
const VALIDATORS_MAX: usize = 4096;

/// The scope a principal needs to list tools.
pub const LIST_SCOPE: &str = "tools:list";
/// The scope for resources.
pub const RESOURCES_SCOPE: &str = "resources:read";
/// The scope for prompts and completion.
pub const PROMPTS_SCOPE: &str = "context:read";

/// One authenticated request.
pub struct Call<'a> {
    pub edge: &'a Arc<Edge>,
    pub req: &'a Request,
    pub headers: &'a HeaderMap,
    pub authority: &'a Authority,
    /// The request's trace id: on its audit record, every ledger command it submits (and so
    /// their events), and the response's `x-writ-trace-id`.
    pub trace_id: &'a str,
    /// Set once the request's decision went to the ledger with the command it made
    /// (`Command::Audited`): the request path then records nothing more.
    pub recorded: &'a std::sync::atomic::AtomicBool,
}

impl Call<'_> {
    /// A submit of `command` — a principal's act of this request — with the credential the
    /// request was admitted under: its bearer token, or the anonymous credential of a loopback
    /// edge. The node verifies it before the act reaches the log.
    pub fn submit_request(&self, command: writ_api::ledger::Command) -> writ_api::dto::SubmitRequest {
        writ_api::dto::SubmitRequest::acting(self.trace_id, command, crate::credential(self.headers))
    }
}

/// The answer and what the audit records about it.
pub struct Handled {
    pub response: Response,
    /// The tool, resource or prompt the request named.
    pub name: Option<String>,
    /// Set when the request was refused on authority (committed before the response).
    pub denied: Option<Rejection>,
    /// An effectful call: its decision is committed before the response, like a denial.
    pub effectful: bool,
}

/// What the audit records of a handled request.
pub struct Verdict {
    pub name: Option<String>,
    pub denied: Option<ReasonCode>,
    pub effectful: bool,
    /// The client the request came from (`crate::audit::client`).
    pub client: writ_api::audit::AuthorityChainV1,
}

impl Handled {
    /// What the audit records of this answer to a request from `client`.
    pub(crate) fn verdict(&self, client: writ_api::audit::AuthorityChainV1) -> Verdict {
        let denied = self.denied.as_ref().map(|r| r.reason);
        Verdict { name: self.name.clone(), denied, effectful: self.effectful, client }
    }

    pub(crate) fn allowed(response: Response, name: Option<String>) -> Handled {
        Handled { response, name, denied: None, effectful: false }
    }

    pub(crate) fn refused(response: Response, name: Option<String>, denied: Rejection) -> Handled {
        Handled { response, name, denied: Some(denied), effectful: false }
    }
}

/// Compiled schema validators, by catalog digest and action id and which schema.
#[derive(Default)]
pub struct Validators(Mutex<HashMap<(String, String, bool), Arc<jsonschema::Validator>>>);

impl Validators {
    pub(crate) fn get(
        &self,
        digest: &str,
        action: &CatalogActionV1,
        output: bool,
    ) -> Result<Option<Arc<jsonschema::Validator>>, RpcError> {
        let text = if output { action.output_schema.as_deref() } else { Some(action.input_schema.as_str()) };
        let Some(text) = text else { return Ok(None) };
        let key = (digest.to_string(), action.id.clone(), output);
        if let Some(v) = self.0.lock().expect("validators").get(&key) {
            return Ok(Some(v.clone()));
        }
        let schema: Value = serde_json::from_str(text).map_err(|_| internal("a stored schema is not JSON"))?;
        let v = Arc::new(writ_api::catalog::validator(&schema).map_err(|e| internal(&e.message))?);
        let mut cache = self.0.lock().expect("validators");
        if cache.len() >= VALIDATORS_MAX {
            cache.clear();
        }
        cache.insert(key, v.clone());
        Ok(Some(v))
    }
}

fn internal(message: &str) -> RpcError {
    RpcError::reason(ReasonCode::INTERNAL, message.to_string())
}

/// Answers one request whose method the edge serves.
pub async fn handle(call: Call<'_>) -> Handled {
    let c = &call;
    let id = &c.req.id;
    let done = |outcome: Result<Value, RpcError>| match outcome {
        Ok(v) => jsonrpc::result(id, v),
        Err(e) => e.with_id(id).into_response(),
    };
    match c.req.method.as_str() {
        "server/discover" => Handled::allowed(done(Ok(surfaces::discover(&c.edge.config))), None),
        "tools/list" => guarded(c, LIST_SCOPE, None, |c| match list_tools(c) {
            Ok(result_json) => jsonrpc::raw_result(id, &result_json),
            Err(e) => e.with_id(id).into_response(),
        }),
        "tools/call" => call_tool(c).await,
        "resources/list" => guarded(c, RESOURCES_SCOPE, None, |c| done(list_resources(c))),
        "resources/templates/list" => guarded(c, RESOURCES_SCOPE, None, |c| done(Ok(resource_templates(c)))),
        "resources/read" => {
            let uri = c.req.params()["uri"].as_str().unwrap_or_default().to_string();
            if let Some(scope) = resource_scope(&uri) {
                return match c.authority.require(scope).and(c.authority.require(RESOURCES_SCOPE)) {
                    Ok(()) => Handled::allowed(done(read_scoped(c, &uri).await), Some(uri)),
                    // Without the scope the resource does not exist for the caller.
                    Err(e) => Handled::refused(done(Err(resource_not_found(&uri))), Some(uri), e),
                };
            }
            guarded(c, RESOURCES_SCOPE, Some(uri), |c| done(read_resource(c)))
        }
        "prompts/list" => guarded(c, PROMPTS_SCOPE, None, |c| done(Ok(list_prompts(c)))),
        "prompts/get" => {
            let name = c.req.params()["name"].as_str().map(str::to_string);
            guarded(c, PROMPTS_SCOPE, name, |c| done(get_prompt(c)))
        }
        "completion/complete" => guarded(c, PROMPTS_SCOPE, None, |c| done(complete(c))),
        "subscriptions/listen" => match c.authority.require(LIST_SCOPE) {
            Err(e) => scope_refused(c, LIST_SCOPE, None, e),
            Ok(()) => capped_listen(c),
        },
        "tasks/get" | "tasks/update" | "tasks/cancel" => task_method(c).await,
        other => Handled::allowed(
            RpcError::new(StatusCode::NOT_FOUND, jsonrpc::METHOD_NOT_FOUND, format!("{other} is not served"))
                .with_id(id)
                .into_response(),
            None,
        ),
    }
}

/// `tasks/get|update|cancel` (the tasks extension over operations, see `crate::tasks`): only
/// for requests declaring the extension (-32021 otherwise); a task the caller may not read or
/// act on is reported like an unknown one.
async fn task_method(c: &Call<'_>) -> Handled {
    let id = &c.req.id;
    let method = c.req.method.as_str();
    let name = c.req.params()["taskId"].as_str().map(str::to_string);
    if !tasks::negotiated(c) {
        return Handled::allowed(tasks::extension_missing(method).with_id(id).into_response(), name);
    }
    let scope = match method {
        "tasks/get" => operations::READ_SCOPE,
        "tasks/update" => operations::EXECUTE_SCOPE,
        _ => operations::CANCEL_SCOPE,
    };
    if let Err(denied) = c.authority.require(scope) {
        let e = RpcError::new(StatusCode::OK, jsonrpc::INVALID_PARAMS, "unknown task")
            .with_data(json!({"reason": ReasonCode::OPERATION_NOT_FOUND}));
        return Handled::refused(e.with_id(id).into_response(), name, denied);
    }
    let outcome = match method {
        "tasks/get" => tasks::get(c).await,
        "tasks/update" => tasks::update(c).await,
        _ => tasks::cancel(c).await,
    };
    let response = match outcome {
        Ok(v) => jsonrpc::result(id, v),
        Err(e) => e.with_id(id).into_response(),
    };
    Handled { response, name, denied: None, effectful: method != "tasks/get" }
}

/// A whole surface needs `scope`: without it, 403 with an `insufficient_scope` challenge.
fn guarded(c: &Call<'_>, scope: &str, name: Option<String>, f: impl FnOnce(&Call<'_>) -> Response) -> Handled {
    match c.authority.require(scope) {
        Ok(()) => Handled::allowed(f(c), name),
        Err(e) => scope_refused(c, scope, name, e),
    }
}

/// A caller without `scope`: 403 with the challenge naming it.
fn scope_refused(c: &Call<'_>, scope: &str, name: Option<String>, e: Rejection) -> Handled {
    Handled::refused(
        crate::challenge(&c.edge.config, c.headers, StatusCode::FORBIDDEN, e.reason, &e.message, scope),
        name,
        e,
    )
}

/// `subscriptions/listen` within the principal's cap of open streams on this edge
/// ([`crate::caps::LISTEN_STREAMS_PER_PRINCIPAL`]); one more is QUOTA_EXCEEDED.
fn capped_listen(c: &Call<'_>) -> Handled {
    let key = format!("{}/{}", c.authority.tenant_id, c.authority.principal_id);
    let max = crate::caps::LISTEN_STREAMS_PER_PRINCIPAL;
    match c.edge.listens.try_acquire(key, max) {
        Some(permit) => Handled::allowed(listen(c, permit), None),
        None => {
            let message = format!("at most {max} open subscriptions/listen streams per principal on this edge");
            let r = Rejection::new(ReasonCode::QUOTA_EXCEEDED, message);
            Handled::refused(RpcError::rejected(&r).with_id(&c.req.id).into_response(), None, r)
        }
    }
}

fn is_fixture_tenant(c: &Call<'_>) -> bool {
    c.edge
        .config
        .fixtures_tenant
        .as_deref()
        .is_some_and(|t| c.edge.verifier.with_state(|s| s.tenant(t).is_some_and(|t| t.id == c.authority.tenant_id)))
}

fn binding(c: &Call<'_>, purpose: String) -> Binding {
    Binding { tenant_id: c.authority.tenant_id.clone(), principal_id: c.authority.principal_id.clone(), purpose }
}

fn invalid(message: impl Into<String>) -> RpcError {
    RpcError::reason(ReasonCode::INPUT_INVALID, message).in_band()
}

/// One page of `items` (already in their deterministic order, each with a unique `key`) after
/// the request's cursor; the cursor is sealed to the principal and the list.
fn page(c: &Call<'_>, list: &str, items: Vec<Value>, key: &str) -> Result<(Vec<Value>, Option<String>), RpcError> {
    let keys: Vec<&str> = items.iter().map(|i| i[key].as_str().unwrap_or_default()).collect();
    let (range, next) = page_range(c, list, &keys)?;
    Ok((items.into_iter().skip(range.start).take(range.len()).collect(), next))
}

/// The positions in `keys` (sorted, unique) of the page after the request's cursor, and the
/// cursor of the next page (sealed to the principal and the list) when there is one.
fn page_range(c: &Call<'_>, list: &str, keys: &[&str]) -> Result<(std::ops::Range<usize>, Option<String>), RpcError> {
    let bind = binding(c, format!("{list} cursor"));
    let after = match c.req.params().get("cursor") {
        None | Some(Value::Null) => None,
        Some(Value::String(cursor)) => {
            let data = seal::open(&c.edge.config.seal_key, &bind, now_ms(), cursor).map_err(|_| {
                RpcError::reason(ReasonCode::REQUEST_STATE_INVALID, "the cursor is invalid or expired").in_band()
            })?;
            data["after"].as_str().map(str::to_string)
        }
        Some(_) => return Err(invalid("cursor must be a string")),
    };
    let start = after.map_or(0, |a| keys.iter().take_while(|k| **k <= a.as_str()).count());
    let end = keys.len().min(start + PAGE_SIZE);
    let next = (keys.len() > end).then(|| {
        let last = keys[end - 1];
        seal::seal(&c.edge.config.seal_key, &bind, now_ms() + CURSOR_TTL_MS, json!({"after": last}))
    });
    Ok((start..end, next))
}

fn listed(mut result: Value, next: Option<String>, ttl_ms: u64) -> Value {
    result["resultType"] = json!("complete");
    result["ttlMs"] = json!(ttl_ms);
    result["cacheScope"] = json!("private");
    if let Some(n) = next {
        result["nextCursor"] = json!(n);
    }
    result
}

/// Most rendered `tools/list` sets an edge keeps (a full cache starts over).
pub const TOOL_LISTS_MAX: usize = 1024;

/// The `tools/list` entries of a catalog as a scope set sees them, sorted by name and rendered
/// to JSON once ([`ToolLists`]): a request only pages and seals its cursor.
struct ToolList {
    names: Vec<String>,
    rendered: Vec<String>,
}

/// Rendered tool lists by (tenant, catalog digest, scopes, revoked scopes): everything
/// `surfaces::tools_for` and `operations::tools` decide on, so a principal's list is the same
/// whichever entry it comes from; a new catalog is a new digest, a changed grant a new scope set.
#[derive(Default)]
pub(crate) struct ToolLists {
    entries: std::sync::Mutex<HashMap<String, Arc<ToolList>>>,
}

impl ToolLists {
    fn get_or_render(&self, key: String, render: impl FnOnce() -> Vec<Value>) -> Arc<ToolList> {
        let lock = || self.entries.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(found) = lock().get(&key) {
            return found.clone();
        }
        let mut tools = render();
        tools.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
        let list = Arc::new(ToolList {
            names: tools.iter().map(|t| t["name"].as_str().unwrap_or_default().to_string()).collect(),
            rendered: tools.iter().map(Value::to_string).collect(),
        });
        let mut entries = lock();
        if entries.len() >= TOOL_LISTS_MAX {
            entries.clear();
        }
        entries.insert(key, list.clone());
        list
    }
}

/// `tools/list`: the page after the request's cursor, as the result's JSON text.
fn list_tools(c: &Call<'_>) -> Result<String, RpcError> {
    let a = c.authority;
    let list = c.edge.verifier.with_state(|s| {
        let digest = s.catalog(&a.tenant_id, None).map_or("", |v| v.catalog.digest.as_str());
        let mut key = format!("{}\n{digest}\n", a.tenant_id);
        // Upstream actions show their pinned tools' descriptions: a new approval is a new list.
        for u in s.upstreams.get(&a.tenant_id).into_iter().flat_map(|m| m.values()) {
            key.push_str(u.pinned.as_ref().map_or("-", |p| p.digest.as_str()));
            key.push('\n');
        }
        for scope in &a.scopes {
            key.push_str(scope);
            key.push('\n');
        }
        key.push('\u{0}');
        for scope in &a.revoked_scopes {
            key.push_str(scope);
            key.push('\n');
        }
        c.edge.tool_lists.get_or_render(key, || {
            let mut tools = surfaces::tools_for(s, a);
            tools.extend(operations::tools(a));
            tools
        })
    });
    let names: Vec<&str> = list.names.iter().map(String::as_str).collect();
    let (range, next) = page_range(c, "tools/list", &names)?;
    let mut out = String::from("{\"tools\":[");
    out.push_str(&list.rendered[range].join(","));
    out.push_str(&format!(
        "],\"resultType\":\"complete\",\"ttlMs\":{},\"cacheScope\":\"private\"",
        surfaces::TOOLS_TTL_MS
    ));
    if let Some(next) = next {
        out.push_str(&format!(",\"nextCursor\":{}", Value::String(next)));
    }
    out.push('}');
    Ok(out)
}

/// The tool `name` if it exists for this principal: `Err(None)` when it does not exist,
/// `Err(Some(refusal))` when it exists outside the principal's scopes — which the client is told
/// exactly like a missing tool (the refusal goes to the audit).
fn find_tool(c: &Call<'_>, name: &str) -> Result<(CatalogActionV1, String), Option<Rejection>> {
    let found = c.edge.verifier.with_state(|s| {
        let v = s.catalog(&c.authority.tenant_id, None)?;
        let a = v.catalog.actions.iter().find(|a| a.id == name)?;
        Some((a.clone(), v.catalog.digest.clone()))
    });
    let (action, digest) = found.ok_or(None)?;
    c.authority.require(&action.scope).map_err(Some)?;
    Ok((action, digest))
}

/// SEP-2243: every argument whose schema property carries `x-mcp-header: X` is mirrored in
/// the `Mcp-Param-X` header; a missing, undecodable or different header is refused.
fn check_param_headers(schema: &Value, args: &Value, headers: &HeaderMap) -> Result<(), RpcError> {
    let Some(props) = schema.get("properties").and_then(Value::as_object) else { return Ok(()) };
    for (param, def) in props {
        let Some(suffix) = def.get("x-mcp-header").and_then(Value::as_str) else { continue };
        let Some(value) = args.get(param).filter(|v| !v.is_null()) else { continue };
        let expected = match value {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        let header = format!("mcp-param-{}", suffix.to_ascii_lowercase());
        let mismatch =
            |what: &str| RpcError::reason(ReasonCode::PROTOCOL_HEADER_MISMATCH, format!("Mcp-Param-{suffix} {what}"));
        if !headers.contains_key(header.as_str()) {
            return Err(mismatch("is missing"));
        }
        match crate::header_value(headers, &header) {
            Some(v) if v == expected => {}
            Some(_) => return Err(mismatch(&format!("must equal arguments.{param}"))),
            None => return Err(mismatch("is not valid (bad base64 encoding?)")),
        }
    }
    debug_assert_eq!(HEADER_MISMATCH, ReasonCode::PROTOCOL_HEADER_MISMATCH.jsonrpc_code() as i64);
    Ok(())
}

/// `inputResponses` as the handlers see them: an object (absent = empty); values that are not
/// objects count as not answered. Anything else is a protocol error.
fn input_responses(params: &Value) -> Result<Map<String, Value>, RpcError> {
    match params.get("inputResponses") {
        None => Ok(Map::new()),
        Some(Value::Object(m)) => {
            Ok(m.iter().filter(|(_, v)| v.is_object()).map(|(k, v)| (k.clone(), v.clone())).collect())
        }
        Some(_) => Err(invalid("inputResponses must be an object")),
    }
}

/// The handler data sealed in `requestState`, if the request carries one.
fn request_state(c: &Call<'_>, bind: &Binding) -> Result<Option<Value>, RpcError> {
    match c.req.params().get("requestState") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => match seal::open(&c.edge.config.seal_key, bind, now_ms(), s) {
            Ok(v) => Ok(Some(v)),
            Err(why) => {
                tracing::info!(?why, "requestState refused");
                Err(RpcError::reason(
                    ReasonCode::REQUEST_STATE_INVALID,
                    "requestState failed its integrity check, expired, or belongs to another request",
                )
                .in_band())
            }
        },
        Some(_) => Err(invalid("requestState must be a string")),
    }
}

fn input_required(c: &Call<'_>, bind: &Binding, requests: Value, state: Value) -> Value {
    let sealed = seal::seal(&c.edge.config.seal_key, bind, now_ms() + REQUEST_STATE_TTL_MS, state);
    json!({"resultType": "input_required", "inputRequests": requests, "requestState": sealed})
}

/// The `operation.*` and `work.*` tools every tenant has (answered by `operation_tool`).
const OPERATION_TOOLS: [&str; 9] = [
    operations::SEARCH,
    operations::PROPOSE,
    operations::EXECUTE,
    operations::READBACK,
    operations::OBSERVE,
    operations::DECIDE,
    operations::APPROVE,
    operations::WORK_CREATE,
    operations::WORK_UPDATE,
];

/// A catalog tool's call, checked: the action, its arguments (valid against its schema), the
/// client's input responses and the request state sealed to this call.
struct ToolRequest {
    name: String,
    action: CatalogActionV1,
    digest: String,
    args: Value,
    inputs: Map<String, Value>,
    state: Option<Value>,
    bind: Binding,
}

async fn call_tool(c: &Call<'_>) -> Handled {
    let name = c.req.params()["name"].as_str().unwrap_or_default().to_string();
    if OPERATION_TOOLS.contains(&name.as_str()) {
        return operation_tool(c, &name).await;
    }
    let t = match tool_request(c, name) {
        Ok(t) => t,
        Err(handled) => return *handled,
    };
    match t.action.execution.clone() {
        Execution::Upstream(_) => call_upstream(c, t).await,
        Execution::Builtin(handler) => call_builtin(c, t, handler).await,
        _ => call_action(c, t).await,
    }
}

/// A refusal of the call of tool `name`.
fn refused_call(c: &Call<'_>, name: &str, e: RpcError, denied: Option<Rejection>) -> Box<Handled> {
    Box::new(Handled {
        response: e.with_id(&c.req.id).into_response(),
        name: Some(name.to_string()),
        denied,
        effectful: false,
    })
}

/// Finds the tool and checks its call: arguments an object matching the tool's parameter
/// headers and input schema (a mismatch is the model's to correct: a tool execution error),
/// input responses, request state.
fn tool_request(c: &Call<'_>, name: String) -> Result<ToolRequest, Box<Handled>> {
    let (params, id) = (c.req.params(), &c.req.id);
    let (action, digest) = find_tool(c, &name).map_err(|denied| {
        let e = RpcError::reason(ReasonCode::TOOL_NOT_FOUND, format!("unknown tool '{name}'"))
            .in_band()
            .with_detail("name", json!(name));
        refused_call(c, &name, e, denied)
    })?;
    let args = match params.get("arguments") {
        None | Some(Value::Null) => json!({}),
        Some(v @ Value::Object(_)) => v.clone(),
        Some(_) => return Err(refused_call(c, &name, invalid("arguments must be an object"), None)),
    };
    // Only a schema that names parameter headers is read for them (not parsed per call).
    if action.input_schema.contains("x-mcp-header") {
        let schema: Value = serde_json::from_str(&action.input_schema).unwrap_or(Value::Null);
        check_param_headers(&schema, &args, c.headers).map_err(|e| refused_call(c, &name, e, None))?;
    }
    let validator = c.edge.validators.get(&digest, &action, false).map_err(|e| refused_call(c, &name, e, None))?;
    if let Some(v) = validator {
        let errors = crate::operations::schema_errors(&v, &args);
        if !errors.is_empty() {
            let text =
                format!("INPUT_INVALID: the arguments do not match the tool's input schema: {}", errors.join("; "));
            let result = json!({"resultType": "complete", "isError": true, "content": [{"type": "text", "text": text}],
                                "_meta": {"writ/reason": "INPUT_INVALID", "writ/errors": errors}});
            return Err(Box::new(Handled::allowed(jsonrpc::result(id, result), Some(name))));
        }
    }
    let inputs = input_responses(params).map_err(|e| refused_call(c, &name, e, None))?;
    let bind = binding(c, format!("tools/call {name} {}", writ_api::sha256_hex(args.to_string().as_bytes())));
    let state = request_state(c, &bind).map_err(|e| refused_call(c, &name, e, None))?;
    Ok(ToolRequest { name, action, digest, args, inputs, state, bind })
}

/// A tool answered by a tenant's upstream MCP server, called in the reply's task (progress
/// relayed over SSE; cancelled with the request).
async fn call_upstream(c: &Call<'_>, t: ToolRequest) -> Handled {
    let ToolRequest { name, action, args, .. } = t;
    let prepared = match c.edge.upstreams.prepare(c.edge, &c.authority.tenant_id, &action, &args) {
        Ok(p) => p,
        // Arguments the pinned schema refuses are the model's to correct, like the action's.
        Err(r) if r.reason == ReasonCode::INPUT_INVALID => {
            return Handled::allowed(jsonrpc::result(&c.req.id, crate::upstream::refusal_result(&r)), Some(name));
        }
        Err(r) => return *refused_call(c, &name, RpcError::rejected(&r).in_band(), Some(r)),
    };
    let (edge, failure) = (c.edge.clone(), Arc::new(std::sync::Mutex::new(None::<Rejection>)));
    let seen = failure.clone();
    let sse = reply::accepts_sse(c.headers);
    let response = reply::run(&c.req.id, c.req.params().get("_meta"), sse, move |notify| async move {
        match edge.upstreams.call(&edge, prepared, &action, args, notify).await {
            Ok(mut result) => {
                result["resultType"] = json!("complete");
                Ok(result)
            }
            Err(r) => {
                let e = RpcError::rejected(&r).in_band();
                *seen.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(r);
                Err(e)
            }
        }
    })
    .await;
    // A failure known before the response (JSON, or SSE before any notification) is a
    // denial with its reason; one after streamed progress is in the stream only.
    let denied = failure.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take();
    Handled { response, name: Some(name), denied, effectful: false }
}

/// An action the ledger records as an operation (or confirms first).
async fn call_action(c: &Call<'_>, t: ToolRequest) -> Handled {
    let id = &c.req.id;
    let ToolRequest { name, action, args, inputs, state, bind, .. } = t;
    // The conformance fixtures' task tools: extra input requests, or an MRTR round first.
    let (mut args, mut asks) = (args, serde_json::Map::new());
    if is_fixture_tenant(c) {
        match fixtures::task_prelude(&name, args, &inputs) {
            fixtures::Prelude::Ask(requests) => {
                let result = input_required(c, &bind, requests, json!({}));
                return Handled::allowed(jsonrpc::result(id, result), Some(name));
            }
            fixtures::Prelude::Run { args: a, input_requests } => (args, asks) = (a, input_requests),
        }
    }
    let response = match operations::direct(c, &action, args, &inputs, state, asks).await {
        Ok(operations::Direct::Complete(result)) => jsonrpc::result(id, result),
        Ok(operations::Direct::Confirm { requests, state }) => {
            jsonrpc::result(id, input_required(c, &bind, requests, state))
        }
        Ok(operations::Direct::Perform(pending)) => perform_upstream(c, *pending).await,
        Err(e) => e.with_id(id).into_response(),
    };
    Handled { response, name: Some(name), denied: None, effectful: true }
}

/// A handler built into the edge, run in the reply's task; its result is checked against the
/// tool's output schema, and an `InputRequired` answer's state is sealed to this call.
async fn call_builtin(c: &Call<'_>, t: ToolRequest, handler: String) -> Handled {
    let ToolRequest { name, action, digest, args, inputs, state, bind } = t;
    let tool_call = ToolCall {
        tenant_id: c.authority.tenant_id.clone(),
        args,
        client_caps: c.req.meta(META_CLIENT_CAPABILITIES).cloned().unwrap_or(Value::Null),
        inputs,
        state,
        verifier: c.edge.verifier.clone(),
        changes: c.edge.changes.clone(),
    };
    let output = match c.edge.validators.get(&digest, &action, true) {
        Ok(v) => v,
        Err(e) => return *refused_call(c, &name, e, None),
    };
    let key = c.edge.config.seal_key.clone();
    let sse = reply::accepts_sse(c.headers);
    let response = reply::run(&c.req.id, c.req.params().get("_meta"), sse, move |notify| async move {
        match builtin::call(&handler, tool_call, notify).await? {
            ToolAnswer::Complete(mut result) => {
                if let (Some(v), false) = (&output, result["isError"] == json!(true)) {
                    if !result.get("structuredContent").is_some_and(|s| v.is_valid(s)) {
                        let msg = "the tool's result does not match its output schema";
                        return Err(RpcError::reason(ReasonCode::OUTPUT_INVALID, msg).in_band());
                    }
                }
                result["resultType"] = json!("complete");
                Ok(result)
            }
            ToolAnswer::InputRequired { requests, state } => {
                let sealed = seal::seal(&key, &bind, now_ms() + REQUEST_STATE_TTL_MS, state);
                Ok(json!({"resultType": "input_required", "inputRequests": requests, "requestState": sealed}))
            }
        }
    })
    .await;
    Handled::allowed(response, Some(name))
}

/// Performs a recorded upstream operation in the request's reply task: the upstream's progress
/// and log messages stream to the caller (SSE when it accepts it) before the answer.
async fn perform_upstream(c: &Call<'_>, pending: operations::Pending) -> axum::response::Response {
    let (edge, trace_id) = (c.edge.clone(), c.trace_id.to_string());
    reply::run(&c.req.id, c.req.params().get("_meta"), reply::accepts_sse(c.headers), move |notify| {
        operations::perform(edge, trace_id, pending, notify)
    })
    .await
}

/// The tenant's recent audit records, for principals holding `audit:read`.
pub const AUDIT_URI: &str = "writ://audit/recent";
pub const AUDIT_SCOPE: &str = "audit:read";
/// Records `writ://audit/recent` shows (newest last).
pub const AUDIT_RECENT: u64 = 50;

fn resource_not_found(uri: &str) -> RpcError {
    RpcError::reason(ReasonCode::RESOURCE_NOT_FOUND, format!("unknown resource '{uri}'"))
        .in_band()
        .with_detail("uri", json!(uri))
}

/// An operation with its transition history (`ops:read`), read from the ledger.
pub const OPERATIONS_URI: &str = "writ://operations/";
/// A work item (`work:read`), read from the edge's replica.
pub const WORK_URI: &str = "writ://work/";

/// The scope a resource needs beyond `resources:read`, if it needs one: without it the
/// resource does not exist for the caller (the refusal is audited like any other).
pub(crate) fn resource_scope(uri: &str) -> Option<&'static str> {
    if uri == AUDIT_URI {
        Some(AUDIT_SCOPE)
    } else if uri.starts_with(OPERATIONS_URI) {
        Some(operations::READ_SCOPE)
    } else if uri.starts_with(WORK_URI) {
        Some(writ_api::work::WORK_READ_SCOPE)
    } else {
        None
    }
}

/// Reads a resource [`resource_scope`] guards (the caller holds its scope).
async fn read_scoped(c: &Call<'_>, uri: &str) -> Result<Value, RpcError> {
    let json_contents = |text: String| {
        Ok(listed(json!({"contents": [{"uri": uri, "mimeType": "application/json", "text": text}]}), None, 0))
    };
    if let Some((id, hash)) = uri.strip_prefix(OPERATIONS_URI).and_then(|rest| rest.split_once("/evidence/")) {
        return read_evidence(c, uri, id, hash).await;
    }
    if let Some(id) = uri.strip_prefix(OPERATIONS_URI) {
        let tenant_id = c.authority.tenant_id.clone();
        let query = writ_api::dto::Query::GetOperationHistory { tenant_id, operation_id: id.to_string() };
        let found: Result<writ_api::dto::OperationHistory, _> =
            writ_client::query_as(c.edge.ledger.as_ref(), query, Default::default()).await;
        return match found {
            Ok(h) => json_contents(serde_json::to_string(&h).map_err(|_| internal("an operation does not serialize"))?),
            Err(e) if e.reason == ReasonCode::OPERATION_NOT_FOUND => Err(resource_not_found(uri)),
            Err(e) => Err(RpcError::rejected(&e)),
        };
    }
    if let Some(id) = uri.strip_prefix(WORK_URI) {
        let item = c.edge.verifier.with_state(|s| s.work(&c.authority.tenant_id, id).map(|w| w.into_owned()));
        let item = item.ok_or_else(|| resource_not_found(uri))?;
        return json_contents(serde_json::to_string(&item).map_err(|_| internal("a work item does not serialize"))?);
    }
    read_audit(c).await
}

/// `writ://operations/{id}/evidence/{hash}`: the blob from the ledger's store, as text for
/// text and JSON (when it is UTF-8), else as base64 `blob`, with its media type.
async fn read_evidence(c: &Call<'_>, uri: &str, operation_id: &str, hash: &str) -> Result<Value, RpcError> {
    let query = writ_api::dto::Query::GetEvidence {
        tenant_id: c.authority.tenant_id.clone(),
        operation_id: operation_id.to_string(),
        content_hash: hash.to_string(),
    };
    let found: Result<writ_api::dto::EvidenceContent, _> =
        writ_client::query_as(c.edge.ledger.as_ref(), query, Default::default()).await;
    let content = match found {
        Ok(content) => content,
        Err(e) if e.reason == ReasonCode::EVIDENCE_NOT_FOUND => return Err(resource_not_found(uri)),
        Err(e) => return Err(RpcError::rejected(&e)),
    };
    let mime = content.blob.mime_type.as_str();
    let texty = mime.starts_with("text/") || mime == "application/json";
    let text =
        texty.then(|| String::from_utf8(writ_api::evidence::from_base64(&content.content_base64)?).ok()).flatten();
    let item = match text {
        Some(text) => json!({"uri": uri, "mimeType": mime, "text": text}),
        None => json!({"uri": uri, "mimeType": mime, "blob": content.content_base64}),
    };
    let meta = json!({"size": content.blob.size, "uploadedBy": content.blob.by, "atMs": content.blob.at_ms});
    Ok(listed(json!({"contents": [item], "_meta": {"writ/evidence": meta}}), None, 0))
}

/// `writ://audit/recent`: read from the ledger (the replica keeps no audit trail).
async fn read_audit(c: &Call<'_>) -> Result<Value, RpcError> {
    let tenant_id = c.authority.tenant_id.clone();
    let query = writ_api::dto::Query::RecentAudit { tenant_id, limit: AUDIT_RECENT as u32 };
    let page: writ_api::dto::AuditPage = writ_client::query_as(c.edge.ledger.as_ref(), query, Default::default())
        .await
        .map_err(|e| RpcError::rejected(&e))?;
    let records = page.records;
    let text = serde_json::to_string(&records).map_err(|_| internal("audit records do not serialize"))?;
    Ok(listed(json!({"contents": [{"uri": AUDIT_URI, "mimeType": "application/json", "text": text}]}), None, 0))
}

/// `operation.execute` / `operation.readback`: the principal's scope first (without it the tool
/// does not exist), the tool's input schema, then the ledger.
async fn operation_tool(c: &Call<'_>, name: &str) -> Handled {
    let id = &c.req.id;
    let Some(tool) = operations::tool(c.authority, name) else {
        let scope = match name {
            operations::EXECUTE => operations::EXECUTE_SCOPE,
            operations::SEARCH | operations::PROPOSE => operations::SEARCH_SCOPE,
            operations::OBSERVE => operations::OBSERVE_SCOPE,
            operations::DECIDE => operations::DECIDE_SCOPE,
            operations::APPROVE => writ_api::operation::APPROVE_SCOPE,
            operations::WORK_CREATE | operations::WORK_UPDATE => operations::WORK_WRITE_SCOPE,
            _ => operations::READ_SCOPE,
        };
        let denied = c.authority.require(scope).err();
        let e = RpcError::reason(ReasonCode::TOOL_NOT_FOUND, format!("unknown tool '{name}'"))
            .in_band()
            .with_detail("name", json!(name));
        return Handled { response: e.with_id(id).into_response(), name: Some(name.into()), denied, effectful: false };
    };
    let args = c.req.params().get("arguments").cloned().unwrap_or_else(|| json!({}));
    let errors = tool.input_errors(&args);
    let outcome = if !errors.is_empty() {
        let text = format!("INPUT_INVALID: {}", errors.join("; "));
        Ok(json!({"resultType": "complete", "isError": true, "content": [{"type": "text", "text": text}],
                  "_meta": {"writ/reason": "INPUT_INVALID"}}))
    } else {
        match name {
            operations::EXECUTE => match operations::execute(c, &args).await {
                Ok(operations::Executed::Follow { op, replayed, wait, watch }) => {
                    // Waiting streams progress (SSE when the client accepts it).
                    let (verifier, ledger) = (c.edge.verifier.clone(), c.edge.ledger.clone());
                    let meta = c.req.params().get("_meta");
                    let response = reply::run(id, meta, reply::accepts_sse(c.headers), move |notify| {
                        operations::follow(verifier, watch, ledger, *op, replayed, wait, notify)
                    })
                    .await;
                    return Handled { response, name: Some(name.into()), denied: None, effectful: true };
                }
                Ok(operations::Executed::Perform(pending)) => {
                    let response = perform_upstream(c, *pending).await;
                    return Handled { response, name: Some(name.into()), denied: None, effectful: true };
                }
                Ok(operations::Executed::Now(v)) => Ok(v),
                Err(e) => Err(e),
            },
            operations::PROPOSE => operations::propose(c, &args).await,
            operations::SEARCH => Ok(operations::search(c, &args)),
            operations::OBSERVE => operations::observe(c, &args).await,
            operations::DECIDE => operations::decide(c, &args).await,
            operations::APPROVE => operations::approve(c, &args).await,
            operations::WORK_CREATE | operations::WORK_UPDATE => operations::work(c, name, &args).await,
            _ => operations::readback(c, &args).await,
        }
    };
    let response = match outcome {
        Ok(v) => jsonrpc::result(id, v),
        Err(e) => e.with_id(id).into_response(),
    };
    Handled {
        response,
        name: Some(name.into()),
        denied: None,
        effectful: ![operations::READBACK, operations::PROPOSE, operations::SEARCH].contains(&name),
    }
}

fn device_resources(c: &Call<'_>) -> Vec<Value> {
    c.edge.verifier.with_state(|s| {
        s.devices.get(&c.authority.tenant_id).map_or_else(Vec::new, |ds| {
            let mut v: Vec<Value> = ds
                .values()
                .map(|d| {
                    json!({"uri": format!("writ://devices/{}", d.name), "name": d.name,
                           "description": format!("Device '{}' ({})", d.name, d.device_class), "mimeType": "application/json"})
                })
                .collect();
            v.sort_by(|a, b| a["uri"].as_str().cmp(&b["uri"].as_str()));
            v
        })
    })
}

fn list_resources(c: &Call<'_>) -> Result<Value, RpcError> {
    let mut items = device_resources(c);
    if c.authority.require(AUDIT_SCOPE).is_ok() {
        items.push(json!({"uri": AUDIT_URI, "name": "audit", "mimeType": "application/json",
                          "description": format!("The tenant's {AUDIT_RECENT} most recent audit records")}));
    }
    if c.authority.require(writ_api::work::WORK_READ_SCOPE).is_ok() {
        c.edge.verifier.with_state(|s| {
            let all = writ_api::work::WORK_ITEMS_PER_TENANT_MAX;
            for w in s.list_work(&c.authority.tenant_id, None, None, all).0 {
                items.push(json!({"uri": format!("{WORK_URI}{}", w.id), "name": w.id, "mimeType": "application/json",
                    "description": format!("Work item '{}' ({}, revision {})", w.title, w.state.as_str(), w.revision)}));
            }
        });
    }
    if is_fixture_tenant(c) {
        items.extend(fixtures::resources());
    }
    items.sort_by(|a, b| a["uri"].as_str().cmp(&b["uri"].as_str()));
    let (items, next) = page(c, "resources/list", items, "uri")?;
    Ok(listed(json!({"resources": items}), next, 0))
}

fn resource_templates(c: &Call<'_>) -> Value {
    let mut templates = vec![json!({"uriTemplate": "writ://devices/{name}", "name": "device",
        "description": "A device of your tenant: its site and class", "mimeType": "application/json"})];
    if c.authority.require(operations::READ_SCOPE).is_ok() {
        templates.push(json!({"uriTemplate": format!("{OPERATIONS_URI}{{id}}"), "name": "operation",
            "description": "An operation of your tenant with every transition (cause, reason, time, trace id)",
            "mimeType": "application/json"}));
        templates.push(json!({"uriTemplate": format!("{OPERATIONS_URI}{{id}}/evidence/{{hash}}"), "name": "evidence",
            "description": format!("An evidence blob of an operation by its sha256 (at most {} bytes)",
                writ_api::evidence::EVIDENCE_BYTES_MAX)}));
    }
    if c.authority.require(writ_api::work::WORK_READ_SCOPE).is_ok() {
        templates.push(json!({"uriTemplate": format!("{WORK_URI}{{id}}"), "name": "work",
            "description": "A work item of your tenant: revision, state, owner, approved scope, operations",
            "mimeType": "application/json"}));
    }
    if is_fixture_tenant(c) {
        templates.extend(fixtures::resource_templates());
    }
    listed(json!({"resourceTemplates": templates}), None, 0)
}

fn read_resource(c: &Call<'_>) -> Result<Value, RpcError> {
    let uri = c.req.params()["uri"].as_str().unwrap_or_default();
    let not_found = || resource_not_found(uri);
    let contents = if let Some(name) = uri.strip_prefix("writ://devices/") {
        let device = c.edge.verifier.with_state(|s| {
            let id = s.device_names.get(&c.authority.tenant_id)?.get(name)?;
            let d = s.devices.get(&c.authority.tenant_id)?.get(id)?;
            let site = s.sites.get(&c.authority.tenant_id).and_then(|m| m.get(&d.site_id)).map(|s| s.name.clone());
            Some(json!({"name": d.name, "id": d.id, "site": site, "device_class": d.device_class, "revision": d.revision}))
        });
        let device = device.ok_or_else(not_found)?;
        json!({"contents": [{"uri": uri, "mimeType": "application/json", "text": device.to_string()}]})
    } else if is_fixture_tenant(c) {
        fixtures::read_resource(uri).ok_or_else(not_found)?
    } else {
        return Err(not_found());
    };
    Ok(listed(contents, None, 0))
}

fn list_prompts(c: &Call<'_>) -> Value {
    let prompts = if is_fixture_tenant(c) { fixtures::prompts() } else { Vec::new() };
    listed(json!({"prompts": prompts}), None, 0)
}

fn get_prompt(c: &Call<'_>) -> Result<Value, RpcError> {
    let params = c.req.params();
    let name = params["name"].as_str().unwrap_or_default();
    if !is_fixture_tenant(c) {
        return Err(RpcError::reason(ReasonCode::PROMPT_NOT_FOUND, format!("unknown prompt '{name}'")).in_band());
    }
    let args = params.get("arguments").cloned().unwrap_or_else(|| json!({}));
    let inputs = input_responses(params)?;
    let bind = binding(c, format!("prompts/get {name} {}", writ_api::sha256_hex(args.to_string().as_bytes())));
    request_state(c, &bind)?;
    match fixtures::get_prompt(name, &args, &inputs)? {
        fixtures::PromptAnswer::Messages(messages) => Ok(json!({"resultType": "complete", "messages": messages})),
        fixtures::PromptAnswer::InputRequired(requests) => {
            if !c
                .req
                .meta(META_CLIENT_CAPABILITIES)
                .and_then(|caps| caps.get("elicitation"))
                .is_some_and(Value::is_object)
            {
                return Err(RpcError::reason(ReasonCode::CLIENT_CAPABILITY_MISSING, "this prompt needs elicitation")
                    .with_detail("requiredCapabilities", json!({"elicitation": {}})));
            }
            Ok(input_required(c, &bind, requests, Value::Null))
        }
    }
}

/// `completion/complete`: prompt arguments and resource-template variables. The fixture
/// prompts take free text, so there is nothing to suggest (an empty, complete list).
fn complete(c: &Call<'_>) -> Result<Value, RpcError> {
    let params = c.req.params();
    let r = &params["ref"];
    let known = match r["type"].as_str() {
        Some("ref/prompt") => is_fixture_tenant(c) && fixtures::prompts().iter().any(|p| p["name"] == r["name"]),
        Some("ref/resource") => r["uri"].as_str().is_some(),
        _ => return Err(invalid("ref must be a ref/prompt or ref/resource")),
    };
    if !known {
        return Err(RpcError::reason(ReasonCode::PROMPT_NOT_FOUND, "unknown prompt").in_band());
    }
    if !params["argument"]["name"].is_string() {
        return Err(invalid("argument.name is required"));
    }
    Ok(json!({"resultType": "complete", "completion": {"values": [], "total": 0, "hasMore": false}}))
}

/// The `_meta` key tagging every notification of a listen stream.
pub const META_SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";
/// Longest a listen stream stays open (the client reopens it).
pub const LISTEN_MAX: std::time::Duration = std::time::Duration::from_secs(3600);

/// `subscriptions/listen`: an event stream that starts with the acknowledgment and then carries
/// `notifications/tools/list_changed` when the tenant's catalog changes (any replica sees it
/// through its ledger replica) and the fixture hooks' announcements on this edge — only the
/// kinds the client asked for, each tagged with the subscription id (the request id). The
/// stream ends when the caller's authority lapses (revoked, expired, suspended) or after
/// [`LISTEN_MAX`].
fn listen(c: &Call<'_>, permit: crate::caps::StreamPermit) -> Response {
    use axum::response::sse::{Event, KeepAlive, Sse};
    use builtin::ChangedList;
    let asked = &c.req.params()["notifications"];
    let tools = asked["toolsListChanged"] == json!(true);
    let prompts = asked["promptsListChanged"] == json!(true) && c.edge.config.fixtures_tenant.is_some();
    let sub_id = c.req.id.clone().unwrap_or(Value::Null);
    let mut honored = Map::new();
    if tools {
        honored.insert("toolsListChanged".into(), json!(true));
    }
    if prompts {
        honored.insert("promptsListChanged".into(), json!(true));
    }
    let frame = move |method: &str, mut params: Value| {
        params["_meta"] = json!({META_SUBSCRIPTION_ID: sub_id});
        jsonrpc::notification(method, params)
    };
    let ack = frame("notifications/subscriptions/acknowledged", json!({"notifications": honored}));
    let edge = c.edge.clone();
    let tenant_id = c.authority.tenant_id.clone();
    let bearer = crate::bearer(c.headers).map(str::to_string);
    let catalog_version =
        |edge: &Edge, tenant: &str| edge.verifier.with_state(|s| s.catalog(tenant, None).map(|v| v.version));
    let mut seen_version = catalog_version(&edge, &tenant_id);
    let mut revisions = edge.verifier.revisions();
    let mut changes = edge.changes.subscribe();
    let deadline = tokio::time::Instant::now() + LISTEN_MAX;
    let (tx, rx) = tokio::sync::mpsc::channel::<Value>(16);
    tokio::spawn(async move {
        // The principal's slot is held as long as the stream runs.
        let _permit = permit;
        if tx.send(ack).await.is_err() {
            return;
        }
        loop {
            let list = tokio::select! {
                _ = tx.closed() => return,
                _ = tokio::time::sleep_until(deadline) => return,
                changed = revisions.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    // The caller's authority is re-checked as the ledger moves.
                    let still = match (&bearer, &edge.config.anonymous) {
                        (Some(b), _) => edge.verifier.verify(b).await.is_ok(),
                        (None, Some(a)) => edge.verifier.anonymous(&a.tenant, &a.principal).await.is_ok(),
                        (None, None) => false,
                    };
                    if !still {
                        return;
                    }
                    let now = catalog_version(&edge, &tenant_id);
                    if now == seen_version {
                        continue;
                    }
                    seen_version = now;
                    ChangedList::Tools
                }
                announced = changes.recv() => match announced {
                    Ok(change) if change.tenant_id == tenant_id => change.list,
                    Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
                    Err(_) => return,
                },
            };
            let method = match list {
                ChangedList::Tools if tools => "notifications/tools/list_changed",
                ChangedList::Prompts if prompts => "notifications/prompts/list_changed",
                _ => continue,
            };
            if tx.send(frame(method, json!({}))).await.is_err() {
                return;
            }
        }
    });
    let events = futures::stream::unfold(rx, |mut rx| async move {
        let msg = rx.recv().await?;
        Some((Ok::<_, std::convert::Infallible>(Event::default().event("message").data(msg.to_string())), rx))
    });
    Sse::new(events).keep_alive(KeepAlive::default()).into_response()
}
