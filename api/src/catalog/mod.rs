//! Tenant action catalogs (SPEC D4): what a tenant's agents may call. A catalog is published
//! as a JSON (or YAML, converted by the CLI) document, checked and compiled here — offline,
//! before it reaches the ledger — and stored as a versioned, canonical, digested value.
//!
//! Checks, each with its own reason: shape and field rules (CATALOG_INVALID), count and byte
//! ceilings (CATALOG_TOO_LARGE), duplicate action ids (CATALOG_DUPLICATE_ACTION), `$ref`s that
//! leave the schema document (CATALOG_REF_REMOTE) or point nowhere inside it
//! (CATALOG_REF_UNRESOLVED), and schemas that do not compile as JSON Schema 2020-12
//! (CATALOG_SCHEMA_INVALID). Descriptions and schemas are untrusted data: they grant nothing.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::principal::validate_scope;
use crate::reason::ReasonCode;
use crate::rejection::Rejection;

/// Most actions in one catalog.
pub const CATALOG_ACTIONS_MAX: usize = 1000;
/// Largest canonical catalog (bytes).
pub const CATALOG_BYTES_MAX: usize = 1024 * 1024;
/// Largest canonical schema of one action (bytes).
pub const SCHEMA_BYTES_MAX: usize = 64 * 1024;
pub const TITLE_BYTES_MAX: usize = 200;
pub const DESCRIPTION_BYTES_MAX: usize = 4000;
/// Catalog versions a tenant keeps in the ledger's state (older ones stay in the event log).
pub const CATALOG_VERSIONS_KEPT: usize = 16;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Risk {
    Low,
    Medium,
    High,
    /// Runs only once another principal than its requester, holding
    /// [`crate::operation::APPROVE_SCOPE`], approves the exact call (SPEC S3): the ledger adds
    /// the approval request to every such operation, so no edge can skip it.
    Critical,
}

/// How a call runs: `read` answers directly and changes nothing; `operation` goes through the
/// durable operation flow (propose → execute → readback); `{"builtin": "<handler>"}` is answered
/// by a handler built into the edge (one of [`BUILTIN_HANDLERS`]), with no effect outside it;
/// `task` is an operation that runs long: called as a tool it is served only as an MCP task
/// (clients must declare the tasks extension), never by waiting in the call;
/// `{"upstream": "<upstream>/<tool>"}` is answered by a tool of one of the tenant's upstream
/// MCP servers, called by the edge while that tool is pinned (`crate::upstream`), as a read;
/// `{"upstream_operation": "<upstream>/<tool>"}` names an upstream tool with an effect: each call
/// is a durable operation (idempotency key, at most one attempt, `unknown_effect` when the
/// upstream may have acted without saying so, readback) that the edge serving it performs by
/// calling the tool, passing the operation's idempotency key (`crate::upstream`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Execution {
    Read,
    Operation,
    Builtin(String),
    Task,
    Upstream(String),
    UpstreamOperation(String),
}

impl Execution {
    /// `read`, `operation`, `task`, `builtin:<handler>` or `upstream:<upstream>/<tool>`, for listings.
    pub fn label(&self) -> String {
        match self {
            Execution::Read => "read".into(),
            Execution::Operation => "operation".into(),
            Execution::Builtin(h) => format!("builtin:{h}"),
            Execution::Task => "task".into(),
            Execution::Upstream(target) => format!("upstream:{target}"),
            Execution::UpstreamOperation(target) => format!("upstream_operation:{target}"),
        }
    }

    /// Whether calls become durable operations (`operation`, `task`, `upstream_operation`, and
    /// `read`: a read of a site or device answered by its executor is recorded, dispatched and
    /// evidenced like any operation; its dispatch says it is a read, so nothing is effected).
    pub fn is_operation(&self) -> bool {
        matches!(self, Execution::Operation | Execution::Task | Execution::UpstreamOperation(_) | Execution::Read)
    }

    /// The upstream tool (`<upstream>/<tool>`) a call is answered by, read or operation.
    pub fn upstream_target(&self) -> Option<&str> {
        match self {
            Execution::Upstream(t) | Execution::UpstreamOperation(t) => Some(t),
            _ => None,
        }
    }
}

/// Handlers built into the edge that a catalog action may name. `conformance.*` are the MCP
/// conformance fixtures (the reference everything-server's tools); `writ.*` read the tenant's
/// own state. The edge has one implementation per name (a test checks the two lists agree).
pub const BUILTIN_HANDLERS: &[&str] = &[
    "conformance.audio_content",
    "conformance.custom_header",
    "conformance.embedded_resource",
    "conformance.elicitation",
    "conformance.elicitation_sep1034_defaults",
    "conformance.elicitation_sep1330_enums",
    "conformance.error_handling",
    "conformance.greet",
    "conformance.image_content",
    "conformance.input_required_capabilities",
    "conformance.input_required_elicitation",
    "conformance.input_required_list_roots",
    "conformance.input_required_multi_round",
    "conformance.input_required_multiple_inputs",
    "conformance.input_required_request_state",
    "conformance.input_required_sampling",
    "conformance.input_required_tampered_state",
    "conformance.json_schema_2020_12",
    "conformance.logging_tool",
    "conformance.missing_capability",
    "conformance.multiple_content_types",
    "conformance.sampling",
    "conformance.simple_text",
    "conformance.streaming_elicitation",
    "conformance.tool_with_logging",
    "conformance.tool_with_progress",
    "conformance.trigger_prompt_change",
    "conformance.trigger_tool_change",
    "writ.devices",
];

/// The document a publisher writes.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CatalogDoc {
    actions: Vec<ActionDoc>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ActionDoc {
    id: String,
    title: String,
    #[serde(default)]
    description: String,
    input_schema: Value,
    #[serde(default)]
    output_schema: Option<Value>,
    risk: Risk,
    execution: Execution,
    #[serde(default)]
    dry_run: bool,
    #[serde(default)]
    idempotent: bool,
    #[serde(default)]
    device_class: Option<String>,
    #[serde(default)]
    cost_units: u64,
    /// Default: `tools:call:<id>`.
    #[serde(default)]
    scope: Option<String>,
}

/// One action as stored: schemas kept as canonical JSON text (sorted keys, no whitespace).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CatalogActionV1 {
    pub id: String,
    pub title: String,
    pub description: String,
    pub input_schema: String,
    pub output_schema: Option<String>,
    pub risk: Risk,
    pub execution: Execution,
    pub dry_run: bool,
    pub idempotent: bool,
    pub device_class: Option<String>,
    pub cost_units: u64,
    pub scope: String,
}

impl CatalogActionV1 {
    /// Whether an operation of this action is recorded only after its requester verified it
    /// (SPEC E5): a dry run it asked for (`dry_run`), or — for high and critical risk — its
    /// confirmation. The ledger holds every submission to this (`decide`): a recorded proposal
    /// of the same call, or a confirmation request its requester must accept first.
    pub fn demands_verification(&self) -> bool {
        self.dry_run || self.risk >= Risk::High
    }
}

/// A checked catalog: actions sorted by id, plus the sha256 of its canonical JSON.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CatalogV1 {
    pub actions: Vec<CatalogActionV1>,
    pub digest: String,
}

/// A published version as the ledger holds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CatalogVersion {
    pub tenant_id: String,
    pub version: u64,
    pub published_at_ms: u64,
    pub revision: u64,
    pub catalog: CatalogV1,
}

/// What changed from one catalog version to another (`writ admin catalog diff`): actions added,
/// removed, and changed with the names of the fields that differ.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CatalogDiff {
    pub from: u64,
    pub to: u64,
    pub added: Vec<String>,
    pub removed: Vec<String>,
    pub changed: Vec<ActionChange>,
}

/// One action present in both versions whose `fields` differ.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActionChange {
    pub id: String,
    pub fields: Vec<String>,
}

/// What differs between two sets keyed by id (each sorted by id): ids added, removed, and
/// changed with the names of the fields `differing` reports — the one diff of catalog versions
/// and of upstream tool sets.
pub(crate) fn keyed_diff<'a, T: 'a>(
    old: impl IntoIterator<Item = (&'a str, &'a T)>,
    new: impl IntoIterator<Item = (&'a str, &'a T)>,
    differing: impl Fn(&T, &T) -> Vec<&'static str>,
) -> (Vec<String>, Vec<String>, Vec<ActionChange>) {
    let old: std::collections::BTreeMap<&str, &T> = old.into_iter().collect();
    let new: std::collections::BTreeMap<&str, &T> = new.into_iter().collect();
    let added = new.keys().filter(|id| !old.contains_key(*id)).map(|id| id.to_string()).collect();
    let removed = old.keys().filter(|id| !new.contains_key(*id)).map(|id| id.to_string()).collect();
    let changed = old
        .iter()
        .filter_map(|(id, a)| {
            let fields: Vec<String> = differing(a, new.get(id)?).into_iter().map(str::to_string).collect();
            (!fields.is_empty()).then(|| ActionChange { id: id.to_string(), fields })
        })
        .collect();
    (added, removed, changed)
}

/// The names of the fields whose pair differs.
pub(crate) fn differing(fields: &[(&'static str, bool)]) -> Vec<&'static str> {
    fields.iter().filter(|(_, differs)| *differs).map(|(name, _)| *name).collect()
}

impl CatalogDiff {
    /// The difference from `from` to `to`, actions in id order.
    pub fn between(from: &CatalogVersion, to: &CatalogVersion) -> CatalogDiff {
        let (old, new) = (&from.catalog.actions, &to.catalog.actions);
        let (old, new) = (old.iter().map(|a| (a.id.as_str(), a)), new.iter().map(|a| (a.id.as_str(), a)));
        let (added, removed, changed) = keyed_diff(old, new, |a: &CatalogActionV1, b: &CatalogActionV1| {
            differing(&[
                ("title", a.title != b.title),
                ("description", a.description != b.description),
                ("input_schema", a.input_schema != b.input_schema),
                ("output_schema", a.output_schema != b.output_schema),
                ("risk", a.risk != b.risk),
                ("execution", a.execution != b.execution),
                ("dry_run", a.dry_run != b.dry_run),
                ("idempotent", a.idempotent != b.idempotent),
                ("device_class", a.device_class != b.device_class),
                ("cost_units", a.cost_units != b.cost_units),
                ("scope", a.scope != b.scope),
            ])
        });
        CatalogDiff { from: from.version, to: to.version, added, removed, changed }
    }
}

/// A version without its actions, for listings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CatalogSummary {
    pub version: u64,
    pub digest: String,
    pub actions: usize,
    pub published_at_ms: u64,
    pub revision: u64,
}

impl CatalogVersion {
    pub fn summary(&self) -> CatalogSummary {
        CatalogSummary {
            version: self.version,
            digest: self.catalog.digest.clone(),
            actions: self.catalog.actions.len(),
            published_at_ms: self.published_at_ms,
            revision: self.revision,
        }
    }
}

/// An upstream's name (`crate::upstream`): `^[a-z][a-z0-9_-]{0,31}$`.
pub fn validate_upstream_name(name: &str) -> Result<(), Rejection> {
    let b = name.as_bytes();
    let ok = !b.is_empty()
        && b.len() <= 32
        && b[0].is_ascii_lowercase()
        && b.iter().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, b'_' | b'-'));
    ok.then_some(())
        .ok_or_else(|| upstream_invalid(format!("upstream name '{name}' must match ^[a-z][a-z0-9_-]{{0,31}}$")))
}

/// Splits a catalog action's upstream execution `<upstream>/<tool>`.
pub fn parse_upstream_target(target: &str) -> Result<(&str, &str), Rejection> {
    let (upstream, tool) = target
        .split_once('/')
        .ok_or_else(|| upstream_invalid(format!("upstream execution '{target}' must be '<upstream>/<tool>'")))?;
    validate_upstream_name(upstream)?;
    if tool.is_empty() || tool.len() > 128 || !tool.bytes().all(|b| b.is_ascii_graphic() && b != b'/') {
        return Err(upstream_invalid(format!("upstream tool '{tool}' must be 1..=128 visible characters, no '/'")));
    }
    Ok((upstream, tool))
}

fn upstream_invalid(message: impl Into<String>) -> Rejection {
    reject(ReasonCode::UPSTREAM_INVALID, message)
}

fn reject(reason: ReasonCode, message: impl Into<String>) -> Rejection {
    Rejection::new(reason, message)
}

fn invalid(message: impl Into<String>) -> Rejection {
    reject(ReasonCode::CATALOG_INVALID, message)
}

fn valid_id(id: &str) -> bool {
    let b = id.as_bytes();
    !b.is_empty()
        && b.len() <= 64
        && b[0].is_ascii_lowercase()
        && b.iter().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, b'_' | b'.' | b'-'))
}

/// Parses, checks and compiles a catalog document (JSON text). The result is canonical: the
/// same actions in any order and formatting give the same value and digest.
pub fn compile(json: &[u8]) -> Result<CatalogV1, Rejection> {
    if json.len() > CATALOG_BYTES_MAX * 4 {
        return Err(reject(ReasonCode::CATALOG_TOO_LARGE, format!("catalog exceeds {CATALOG_BYTES_MAX} bytes")));
    }
    let doc: CatalogDoc = serde_json::from_slice(json).map_err(|e| invalid(format!("not a catalog document: {e}")))?;
    if doc.actions.len() > CATALOG_ACTIONS_MAX {
        return Err(reject(
            ReasonCode::CATALOG_TOO_LARGE,
            format!("{} actions exceed the ceiling of {CATALOG_ACTIONS_MAX}", doc.actions.len()),
        ));
    }
    let mut seen = BTreeSet::new();
    let mut actions = Vec::with_capacity(doc.actions.len());
    for a in doc.actions {
        if !valid_id(&a.id) {
            return Err(invalid(format!("action id '{}' must match ^[a-z][a-z0-9_.-]{{0,63}}$", a.id)));
        }
        if !seen.insert(a.id.clone()) {
            return Err(reject(ReasonCode::CATALOG_DUPLICATE_ACTION, format!("action id '{}' appears twice", a.id)));
        }
        actions.push(compile_action(a)?);
    }
    actions.sort_by(|x, y| x.id.cmp(&y.id));
    let mut catalog = CatalogV1 { actions, digest: String::new() };
    let canonical = canonical_bytes(&catalog);
    if canonical.len() > CATALOG_BYTES_MAX {
        return Err(reject(
            ReasonCode::CATALOG_TOO_LARGE,
            format!("catalog is {} bytes, over the ceiling of {CATALOG_BYTES_MAX}", canonical.len()),
        ));
    }
    catalog.digest = crate::sha256_hex(&canonical);
    Ok(catalog)
}

/// The canonical JSON of the actions (what the digest covers).
fn canonical_bytes(c: &CatalogV1) -> Vec<u8> {
    serde_json::to_vec(&c.actions).expect("catalog actions serialize")
}

/// The cheap part of the checks, repeated by the ledger on every replica: order, uniqueness,
/// ceilings and the digest. (Schema compilation happened at publication.)
pub fn check_stored(c: &CatalogV1) -> Result<(), Rejection> {
    if c.actions.len() > CATALOG_ACTIONS_MAX {
        return Err(reject(ReasonCode::CATALOG_TOO_LARGE, "too many actions"));
    }
    if c.actions.windows(2).any(|w| w[0].id >= w[1].id) {
        return Err(invalid("actions must be sorted by id and unique"));
    }
    let canonical = canonical_bytes(c);
    if canonical.len() > CATALOG_BYTES_MAX {
        return Err(reject(ReasonCode::CATALOG_TOO_LARGE, "catalog over the byte ceiling"));
    }
    if crate::sha256_hex(&canonical) != c.digest {
        return Err(invalid("catalog digest does not match its actions"));
    }
    Ok(())
}

fn compile_action(a: ActionDoc) -> Result<CatalogActionV1, Rejection> {
    let at = |m: String| format!("action '{}': {m}", a.id);
    if a.title.is_empty() || a.title.len() > TITLE_BYTES_MAX {
        return Err(invalid(at(format!("title must be 1..={TITLE_BYTES_MAX} bytes"))));
    }
    if a.description.len() > DESCRIPTION_BYTES_MAX {
        return Err(invalid(at(format!("description exceeds {DESCRIPTION_BYTES_MAX} bytes"))));
    }
    if let Some(dc) = &a.device_class {
        crate::device::validate_device("d-check", "check", dc).map_err(|e| invalid(at(e.message)))?;
    }
    if !a.execution.is_operation() && a.device_class.is_some() {
        return Err(invalid(at("only an operation can target a device class".into())));
    }
    if let Execution::Builtin(handler) = &a.execution {
        if !BUILTIN_HANDLERS.contains(&handler.as_str()) {
            return Err(invalid(at(format!("'{handler}' is not a built-in handler"))));
        }
    }
    if let Some(target) = a.execution.upstream_target() {
        parse_upstream_target(target).map_err(|e| invalid(at(e.message)))?;
    }
    if matches!(a.execution, Execution::UpstreamOperation(_)) && a.device_class.is_some() {
        // The edge performs it by calling the upstream: no executor, so no device to reserve.
        return Err(invalid(at("an upstream operation targets no device class".into())));
    }
    let scope = a.scope.clone().unwrap_or_else(|| format!("tools:call:{}", a.id));
    validate_scope(&scope).map_err(|e| invalid(at(e.message)))?;
    let input_schema = compile_schema(&a.input_schema)
        .map_err(|e| Rejection::new(e.reason, at(format!("input_schema: {}", e.message))))?;
    if a.input_schema.get("type").and_then(Value::as_str) != Some("object") {
        return Err(reject(
            ReasonCode::CATALOG_SCHEMA_INVALID,
            at("input_schema must have \"type\": \"object\"".into()),
        ));
    }
    let output_schema = match &a.output_schema {
        Some(s) => {
            Some(compile_schema(s).map_err(|e| Rejection::new(e.reason, at(format!("output_schema: {}", e.message))))?)
        }
        None => None,
    };
    Ok(CatalogActionV1 {
        id: a.id,
        title: a.title,
        description: a.description,
        input_schema,
        output_schema,
        risk: a.risk,
        execution: a.execution,
        dry_run: a.dry_run,
        idempotent: a.idempotent,
        device_class: a.device_class,
        cost_units: a.cost_units,
        scope,
    })
}

/// Checks references, compiles as 2020-12, and returns the canonical text.
pub(crate) fn compile_schema(schema: &Value) -> Result<String, Rejection> {
    let text = serde_json::to_string(schema).expect("json value serializes");
    if text.len() > SCHEMA_BYTES_MAX {
        return Err(reject(ReasonCode::CATALOG_TOO_LARGE, format!("schema exceeds {SCHEMA_BYTES_MAX} bytes")));
    }
    if !schema.is_object() && !schema.is_boolean() {
        return Err(reject(ReasonCode::CATALOG_SCHEMA_INVALID, "a schema must be an object or a boolean"));
    }
    check_refs(schema, schema)?;
    validator(schema)?;
    Ok(text)
}

/// Compiled validators of stored schemas, by their canonical text ([`stored_validator`]).
static VALIDATORS: std::sync::Mutex<std::collections::BTreeMap<String, std::sync::Arc<jsonschema::Validator>>> =
    std::sync::Mutex::new(std::collections::BTreeMap::new());

/// Most validators [`stored_validator`] keeps compiled (a process's catalogs' schemas).
pub const VALIDATORS_CACHED: usize = 256;

/// The validator of a stored schema (an action's `input_schema` as published, a tool's input
/// schema as JSON text), compiled once per process: every node checks every submission
/// against it, and compiling cost more than validating. The cache changes what an answer
/// costs, never the answer.
pub fn stored_validator(text: &str) -> Result<std::sync::Arc<jsonschema::Validator>, Rejection> {
    let cache = || VALIDATORS.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(v) = cache().get(text) {
        return Ok(v.clone());
    }
    let schema: Value =
        serde_json::from_str(text).map_err(|_| Rejection::new(ReasonCode::INTERNAL, "a stored schema is not JSON"))?;
    let v = std::sync::Arc::new(validator(&schema)?);
    let mut cached = cache();
    if cached.len() >= VALIDATORS_CACHED {
        cached.pop_first();
    }
    cached.insert(text.to_string(), v.clone());
    Ok(v)
}

/// Compiles a schema (already published, or being published) into a validator.
pub fn validator(schema: &Value) -> Result<jsonschema::Validator, Rejection> {
    jsonschema::draft202012::options()
        .should_validate_formats(true)
        .build(schema)
        .map_err(|e| reject(ReasonCode::CATALOG_SCHEMA_INVALID, format!("not a valid JSON Schema 2020-12: {e}")))
}

/// Every `$ref`/`$dynamicRef` must be a fragment of this same document and resolve in it;
/// `$id` may not rebase the document elsewhere.
fn check_refs(root: &Value, node: &Value) -> Result<(), Rejection> {
    match node {
        Value::Object(map) => {
            for (k, v) in map {
                match (k.as_str(), v) {
                    ("$ref" | "$dynamicRef", Value::String(r)) => check_ref(root, r)?,
                    ("$id", Value::String(id)) if !id.starts_with('#') => {
                        return Err(reject(
                            ReasonCode::CATALOG_REF_REMOTE,
                            format!("\"$id\": \"{id}\" would resolve references outside the catalog"),
                        ));
                    }
                    _ => check_refs(root, v)?,
                }
            }
            Ok(())
        }
        Value::Array(items) => items.iter().try_for_each(|v| check_refs(root, v)),
        _ => Ok(()),
    }
}

fn check_ref(root: &Value, r: &str) -> Result<(), Rejection> {
    let Some(fragment) = r.strip_prefix('#') else {
        return Err(reject(
            ReasonCode::CATALOG_REF_REMOTE,
            format!("\"$ref\": \"{r}\" points outside the schema; only local references (#...) are allowed"),
        ));
    };
    let found = if fragment.is_empty() {
        true
    } else if fragment.starts_with('/') {
        let pointer = percent_decode(fragment);
        root.pointer(&pointer).is_some()
    } else {
        has_anchor(root, fragment)
    };
    if found {
        Ok(())
    } else {
        Err(reject(ReasonCode::CATALOG_REF_UNRESOLVED, format!("\"$ref\": \"{r}\" does not resolve within the schema")))
    }
}

fn has_anchor(node: &Value, name: &str) -> bool {
    match node {
        Value::Object(map) => {
            map.get("$anchor").and_then(Value::as_str) == Some(name)
                || map.get("$dynamicAnchor").and_then(Value::as_str) == Some(name)
                || map.values().any(|v| has_anchor(v, name))
        }
        Value::Array(items) => items.iter().any(|v| has_anchor(v, name)),
        _ => false,
    }
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            if let Ok(b) = u8::from_str_radix(&s[i + 1..i + 3], 16) {
                out.push(b);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

pub mod decide;
mod fold;
mod query;

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_diff_names_added_removed_and_changed_fields() {
        let version = |v: u64, doc: Value| CatalogVersion {
            tenant_id: "t".into(),
            version: v,
            published_at_ms: 0,
            revision: v,
            catalog: compile_value(doc).unwrap(),
        };
        let v1 = version(
            1,
            json!({"actions": [action("a", json!({"type": "object"})), action("b", json!({"type": "object"}))]}),
        );
        let mut changed = action("a", json!({"type": "object", "required": ["x"]}));
        changed["risk"] = json!("high");
        let v2 = version(2, json!({"actions": [changed, action("c", json!({"type": "object"}))]}));
        let diff = CatalogDiff::between(&v1, &v2);
        assert_eq!((diff.added, diff.removed), (vec!["c".to_string()], vec!["b".to_string()]));
        assert_eq!(diff.changed, [ActionChange { id: "a".into(), fields: vec!["input_schema".into(), "risk".into()] }]);
        assert_eq!(CatalogDiff::between(&v1, &v1).changed, []);
    }

    fn action(id: &str, input: Value) -> Value {
        json!({"id": id, "title": "T", "input_schema": input, "risk": "low", "execution": "read"})
    }

    fn compile_value(v: Value) -> Result<CatalogV1, Rejection> {
        compile(&serde_json::to_vec(&v).unwrap())
    }

    fn reason(v: Value) -> ReasonCode {
        compile_value(v).unwrap_err().reason
    }

    #[test]
    fn order_and_formatting_do_not_change_the_digest() {
        let a = action("b_read", json!({"type": "object", "properties": {"x": {"type": "integer"}}}));
        let b = action(
            "a_read",
            json!({"properties": {"y": {"$ref": "#/$defs/s"}}, "type": "object", "$defs": {"s": {"type": "string"}}}),
        );
        let one = compile_value(json!({"actions": [a.clone(), b.clone()]})).unwrap();
        let two = compile(serde_json::to_string_pretty(&json!({"actions": [b, a]})).unwrap().as_bytes()).unwrap();
        assert_eq!(one, two);
        assert_eq!(one.actions[0].id, "a_read");
        assert_eq!(one.actions[1].scope, "tools:call:b_read");
        check_stored(&one).unwrap();
    }

    #[test]
    fn each_failure_has_its_own_reason() {
        let obj = json!({"type": "object"});
        assert_eq!(
            reason(
                json!({"actions": [action("a", json!({"type": "object", "properties": {"x": {"$ref": "https://evil.example/s.json"}}}))]})
            ),
            ReasonCode::CATALOG_REF_REMOTE
        );
        assert_eq!(
            reason(
                json!({"actions": [action("a", json!({"type": "object", "properties": {"x": {"$ref": "#/$defs/missing"}}}))]})
            ),
            ReasonCode::CATALOG_REF_UNRESOLVED
        );
        assert_eq!(
            reason(
                json!({"actions": [action("a", json!({"type": "object", "properties": {"x": {"$ref": "#nowhere"}}}))]})
            ),
            ReasonCode::CATALOG_REF_UNRESOLVED
        );
        assert_eq!(
            reason(json!({"actions": [action("a", obj.clone()), action("a", obj.clone())]})),
            ReasonCode::CATALOG_DUPLICATE_ACTION
        );
        assert_eq!(
            reason(json!({"actions": [action("a", json!({"type": "object", "minimum": "five"}))]})),
            ReasonCode::CATALOG_SCHEMA_INVALID
        );
        assert_eq!(reason(json!({"actions": [action("Bad Id", obj.clone())]})), ReasonCode::CATALOG_INVALID);
        assert_eq!(reason(json!({"actions": [], "extra": 1})), ReasonCode::CATALOG_INVALID);
        let many: Vec<Value> = (0..=CATALOG_ACTIONS_MAX).map(|i| action(&format!("a{i}"), obj.clone())).collect();
        assert_eq!(reason(json!({"actions": many})), ReasonCode::CATALOG_TOO_LARGE);
        let long = "x".repeat(3000);
        let big: Vec<Value> =
            (0..400).map(|i| action(&format!("a{i}"), json!({"type": "object", "description": long}))).collect();
        assert_eq!(reason(json!({"actions": big})), ReasonCode::CATALOG_TOO_LARGE);
    }

    #[test]
    fn builtin_execution_names_a_known_handler() {
        let with = |execution: Value, device_class: Option<&str>| {
            let a = json!({"id": "t", "title": "t", "input_schema": {"type": "object"}, "risk": "low",
                           "execution": execution, "device_class": device_class});
            compile(json!({"actions": [a]}).to_string().as_bytes())
        };
        let ok = with(json!({"builtin": "writ.devices"}), None).unwrap();
        assert_eq!(ok.actions[0].execution, Execution::Builtin("writ.devices".into()));
        assert_eq!(ok.actions[0].execution.label(), "builtin:writ.devices");
        assert_eq!(with(json!({"builtin": "shell.exec"}), None).unwrap_err().reason, ReasonCode::CATALOG_INVALID);
        assert_eq!(
            with(json!({"builtin": "writ.devices"}), Some("press.v1")).unwrap_err().reason,
            ReasonCode::CATALOG_INVALID
        );
        assert_eq!(with(json!("operation"), Some("press.v1")).unwrap().actions[0].execution, Execution::Operation);
        let upstream = with(json!({"upstream": "weather/get_forecast"}), None).unwrap();
        assert_eq!(upstream.actions[0].execution.label(), "upstream:weather/get_forecast");
        assert!(with(json!({"upstream": "weather"}), None).unwrap_err().message.contains("<upstream>/<tool>"));
        assert!(with(json!({"upstream": "w/t"}), Some("press.v1")).is_err(), "only operations target devices");
        let effectful = with(json!({"upstream_operation": "shop/place_order"}), None).unwrap();
        assert_eq!(effectful.actions[0].execution, Execution::UpstreamOperation("shop/place_order".into()));
        assert!(effectful.actions[0].execution.is_operation());
        assert_eq!(effectful.actions[0].execution.upstream_target(), Some("shop/place_order"));
        assert!(with(json!({"upstream_operation": "shop"}), None).is_err());
        let devices = with(json!({"upstream_operation": "shop/t"}), Some("press.v1")).unwrap_err();
        assert!(devices.message.contains("no device class"), "{}", devices.message);
    }

    #[test]
    fn compiled_schemas_validate_instances() {
        let c = compile_value(json!({"actions": [action("a", json!({"type": "object", "required": ["n"], "properties": {"n": {"type": "integer", "maximum": 3}}}))]})).unwrap();
        let schema: Value = serde_json::from_str(&c.actions[0].input_schema).unwrap();
        let v = validator(&schema).unwrap();
        assert!(v.is_valid(&json!({"n": 2})));
        assert!(!v.is_valid(&json!({"n": 4})));
        assert!(!v.is_valid(&json!({})));
    }

    #[test]
    fn a_stored_schema_is_compiled_once_and_the_cache_stays_bounded() {
        let text = r#"{"type":"object","required":["only-in-this-test"]}"#;
        let first = stored_validator(text).unwrap();
        assert!(std::sync::Arc::ptr_eq(&first, &stored_validator(text).unwrap()), "compiled once");
        assert!(!first.is_valid(&json!({})) && first.is_valid(&json!({"only-in-this-test": 1})));
        for i in 0..VALIDATORS_CACHED + 10 {
            stored_validator(&format!(r#"{{"type":"object","title":"t-{i}"}}"#)).unwrap();
        }
        assert!(VALIDATORS.lock().unwrap().len() <= VALIDATORS_CACHED);
        assert_eq!(stored_validator("{").unwrap_err().reason, ReasonCode::INTERNAL);
    }
}
