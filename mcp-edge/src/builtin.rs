//! Handlers built into the edge, named by catalog actions (`"execution": {"builtin": …}`; the
//! list is `writ_api::catalog::BUILTIN_HANDLERS`). They have no effect outside the edge: the
//! `conformance.*` handlers reproduce the reference everything-server's tools, `writ.*` read
//! the caller's tenant from the edge's replica of the ledger.

use serde_json::{json, Map, Value};
use writ_api::ReasonCode;
use writ_client::verifier::Verifier;

use crate::fixtures::{PNG_BASE64, WAV_BASE64};
use crate::jsonrpc::{RpcError, MISSING_CLIENT_CAPABILITY};
use crate::reply::Notifier;

/// One `tools/call` as a handler sees it (after authorization and input validation).
pub struct ToolCall {
    pub tenant_id: String,
    pub args: Value,
    /// The client's declared capabilities (`_meta`).
    pub client_caps: Value,
    /// The client's `inputResponses` (only object values; others count as missing).
    pub inputs: Map<String, Value>,
    /// The handler's data from the previous round's `requestState` (already verified).
    pub state: Option<Value>,
    pub verifier: Verifier,
    /// Announces list changes to this edge's `subscriptions/listen` streams.
    pub changes: tokio::sync::broadcast::Sender<ListChange>,
}

/// A list that changed for a tenant (delivered to its open listen streams).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListChange {
    pub tenant_id: String,
    pub list: ChangedList,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangedList {
    Tools,
    Prompts,
}

/// A handler's answer.
pub enum ToolAnswer {
    /// A `CallToolResult` (without `resultType`).
    Complete(Value),
    /// MRTR: the client must answer `requests` and retry; `state` comes back sealed.
    InputRequired { requests: Value, state: Value },
}

fn text(t: impl Into<String>) -> ToolAnswer {
    ToolAnswer::Complete(json!({"content": [{"type": "text", "text": t.into()}]}))
}

fn elicit(message: &str, field: &str, kind: &str) -> Value {
    json!({"method": "elicitation/create", "params": {"message": message,
        "requestedSchema": {"type": "object", "properties": {field: {"type": kind}}, "required": [field]}}})
}

fn sample(prompt: &str, max_tokens: u32) -> Value {
    json!({"method": "sampling/createMessage", "params": {
        "messages": [{"role": "user", "content": {"type": "text", "text": prompt}}], "maxTokens": max_tokens}})
}

fn roots() -> Value {
    json!({"method": "roots/list", "params": {}})
}

/// `content.<field>` of an accepted elicitation response.
fn elicited<'a>(inputs: &'a Map<String, Value>, key: &str, field: &str) -> Option<&'a str> {
    inputs.get(key)?.get("content")?.get(field)?.as_str()
}

fn has_cap(caps: &Value, cap: &str) -> bool {
    caps.get(cap).is_some_and(Value::is_object)
}

/// -32021 unless the client declared every capability in `needed`.
fn require_caps(caps: &Value, needed: &[&str]) -> Result<(), RpcError> {
    let missing: Map<String, Value> =
        needed.iter().filter(|c| !has_cap(caps, c)).map(|c| (c.to_string(), json!({}))).collect();
    if missing.is_empty() {
        return Ok(());
    }
    let names: Vec<&String> = missing.keys().collect();
    Err(RpcError::reason(
        ReasonCode::CLIENT_CAPABILITY_MISSING,
        format!("this tool needs the client capabilities {names:?}"),
    )
    .with_detail("requiredCapabilities", Value::Object(missing)))
}

/// Asks the client (elicitation) for `schema`, then reports its answer as `<label>: action=…,
/// content=…`.
fn elicited_reply(c: &ToolCall, label: &str, message: &str, schema: Value) -> Result<ToolAnswer, RpcError> {
    require_caps(&c.client_caps, &["elicitation"])?;
    Ok(match c.inputs.get("input") {
        Some(r) => text(format!(
            "{label}: action={}, content={}",
            r["action"].as_str().unwrap_or("unknown"),
            r.get("content").cloned().unwrap_or(json!({}))
        )),
        None => ToolAnswer::InputRequired {
            requests: json!({"input": {"method": "elicitation/create",
                                       "params": {"message": message, "requestedSchema": schema}}}),
            state: Value::Null,
        },
    })
}

fn announce(c: &ToolCall, list: ChangedList) -> ToolAnswer {
    // No open stream is not an error: nobody was listening.
    let _ = c.changes.send(ListChange { tenant_id: c.tenant_id.clone(), list });
    text("Mutation triggered")
}

/// Runs built-in handler `name`.
pub async fn call(name: &str, c: ToolCall, notify: Notifier) -> Result<ToolAnswer, RpcError> {
    debug_assert_eq!(MISSING_CLIENT_CAPABILITY, ReasonCode::CLIENT_CAPABILITY_MISSING.jsonrpc_code() as i64);
    if let Some(answer) = content_tool(name, &c, &notify).await? {
        return Ok(answer);
    }
    if let Some(answer) = input_required_tool(name, &c)? {
        return Ok(answer);
    }
    if let Some(answer) = client_request_tool(name, &c)? {
        return Ok(answer);
    }
    Ok(match name {
        "conformance.trigger_tool_change" => announce(&c, ChangedList::Tools),
        "conformance.trigger_prompt_change" => announce(&c, ChangedList::Prompts),
        "writ.devices" => {
            let devices = c.verifier.with_state(|s| {
                let sites = s.sites.get(&c.tenant_id);
                s.devices
                    .get(&c.tenant_id)
                    .map(|ds| {
                        ds.values()
                            .map(|d| {
                                let site = sites.and_then(|m| m.get(&d.site_id)).map(|s| s.name.clone());
                                json!({"name": d.name, "id": d.id, "site": site, "device_class": d.device_class})
                            })
                            .collect::<Vec<_>>()
                    })
                    .unwrap_or_default()
            });
            let structured = json!({"devices": devices});
            ToolAnswer::Complete(json!({
                "content": [{"type": "text", "text": structured.to_string()}],
                "structuredContent": structured,
            }))
        }
        other => {
            return Err(RpcError::reason(
                ReasonCode::INTERNAL,
                format!("built-in handler '{other}' is not implemented"),
            ))
        }
    })
}

/// The conformance tools that answer with content, progress or log messages.
async fn content_tool(name: &str, c: &ToolCall, notify: &Notifier) -> Result<Option<ToolAnswer>, RpcError> {
    Ok(Some(match name {
        "conformance.simple_text" => text("This is a simple text response for testing."),
        "conformance.greet" => text(format!("Hello, {}!", c.args["name"].as_str().unwrap_or("World"))),
        "conformance.image_content" => {
            ToolAnswer::Complete(json!({"content": [{"type": "image", "data": PNG_BASE64, "mimeType": "image/png"}]}))
        }
        "conformance.audio_content" => {
            ToolAnswer::Complete(json!({"content": [{"type": "audio", "data": WAV_BASE64, "mimeType": "audio/wav"}]}))
        }
        "conformance.embedded_resource" => ToolAnswer::Complete(json!({"content": [{"type": "resource", "resource": {
            "uri": "test://embedded-resource", "mimeType": "text/plain", "text": "This is an embedded resource content."}}]})),
        "conformance.multiple_content_types" => ToolAnswer::Complete(json!({"content": [
            {"type": "text", "text": "Multiple content types test:"},
            {"type": "image", "data": PNG_BASE64, "mimeType": "image/png"},
            {"type": "resource", "resource": {"uri": "test://mixed-content-resource", "mimeType": "application/json",
                                               "text": json!({"test": "data", "value": 123}).to_string()}}]})),
        "conformance.tool_with_progress" => {
            for (i, step) in [0.0, 50.0, 100.0].into_iter().enumerate() {
                if i > 0 {
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                }
                notify.progress(step, Some(100.0), &format!("Completed step {step} of 100")).await;
            }
            text("progress reported")
        }
        "conformance.error_handling" => ToolAnswer::Complete(json!({"isError": true, "content": [
            {"type": "text", "text": "This tool intentionally returns an error for testing"}]})),
        "conformance.missing_capability" => {
            require_caps(&c.client_caps, &["sampling"])?;
            text("Success")
        }
        "conformance.streaming_elicitation" => {
            require_caps(&c.client_caps, &["elicitation"])?;
            notify.progress(50.0, Some(100.0), "halfway").await;
            text("Streaming complete")
        }
        "conformance.logging_tool" => {
            notify.log("info", json!("Diagnostic trace logging activated")).await;
            text("Logging evaluated")
        }
        "conformance.json_schema_2020_12" => text(format!("JSON Schema 2020-12 tool called with: {}", c.args)),
        "conformance.custom_header" => text(format!("value: {}", c.args["value"].as_str().unwrap_or_default())),
        "conformance.tool_with_logging" => {
            for (i, message) in
                ["Tool execution started", "Tool processing data", "Tool execution completed"].into_iter().enumerate()
            {
                if i > 0 {
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                }
                notify.log("info", json!(message)).await;
            }
            text("Tool with logging executed successfully")
        }
        _ => return Ok(None),
    }))
}

/// The conformance tools of multi-round tool calls (`InputRequired` until the client answers).
fn input_required_tool(name: &str, c: &ToolCall) -> Result<Option<ToolAnswer>, RpcError> {
    Ok(Some(match name {
        "conformance.input_required_elicitation" => {
            require_caps(&c.client_caps, &["elicitation"])?;
            match elicited(&c.inputs, "user_name", "name") {
                Some(name) => text(format!("Hello, {name}!")),
                None => ToolAnswer::InputRequired {
                    requests: json!({"user_name": elicit("What is your name?", "name", "string")}),
                    state: Value::Null,
                },
            }
        }
        "conformance.input_required_sampling" => {
            require_caps(&c.client_caps, &["sampling"])?;
            match c.inputs.values().next() {
                Some(r) => text(format!(
                    "Sampling result: {}",
                    r.get("content").and_then(|t| t.get("text")).and_then(Value::as_str).unwrap_or("no response")
                )),
                None => ToolAnswer::InputRequired {
                    requests: json!({"capital_question": sample("What is the capital of France?", 100)}),
                    state: Value::Null,
                },
            }
        }
        "conformance.input_required_list_roots" => {
            require_caps(&c.client_caps, &["roots"])?;
            match c.inputs.values().next() {
                Some(r) => {
                    text(format!("Found {} root(s)", r.get("roots").and_then(Value::as_array).map_or(0, Vec::len)))
                }
                None => ToolAnswer::InputRequired { requests: json!({"client_roots": roots()}), state: Value::Null },
            }
        }
        "conformance.input_required_request_state" => {
            require_caps(&c.client_caps, &["elicitation"])?;
            let confirmed = c.inputs.get("confirm").and_then(|r| r.get("content")).and_then(|v| v.get("ok"));
            match (&c.state, confirmed) {
                (Some(s), Some(Value::Bool(true))) if s["kind"] == "request-state" => {
                    text("state-ok: requestState validated")
                }
                _ => ToolAnswer::InputRequired {
                    requests: json!({"confirm": elicit("Please confirm", "ok", "boolean")}),
                    state: json!({"kind": "request-state"}),
                },
            }
        }
        "conformance.input_required_multiple_inputs" => {
            require_caps(&c.client_caps, &["elicitation", "sampling", "roots"])?;
            let name = elicited(&c.inputs, "user_name", "name");
            let greeting = c.inputs.get("greeting").and_then(|g| g.get("content")?.get("text")?.as_str());
            let roots_n = c.inputs.get("client_roots").and_then(|r| r.get("roots")?.as_array().map(Vec::len));
            match (&c.state, name, roots_n) {
                (Some(s), Some(name), Some(n))
                    if s["kind"] == "multiple-inputs" && c.inputs.contains_key("greeting") =>
                {
                    text(format!("Name: {name}; Greeting: {}; Roots: {n}", greeting.unwrap_or("Hello there!")))
                }
                _ => ToolAnswer::InputRequired {
                    requests: json!({
                        "user_name": elicit("What is your name?", "name", "string"),
                        "greeting": sample("Generate a greeting", 50),
                        "client_roots": roots(),
                    }),
                    state: json!({"kind": "multiple-inputs"}),
                },
            }
        }
        "conformance.input_required_multi_round" => {
            require_caps(&c.client_caps, &["elicitation"])?;
            let round = c.state.as_ref().and_then(|s| s["round"].as_u64()).unwrap_or(0);
            let step1 = || ToolAnswer::InputRequired {
                requests: json!({"step1": elicit("Step 1: What is your name?", "name", "string")}),
                state: json!({"round": 1}),
            };
            match (round, elicited(&c.inputs, "step1", "name"), elicited(&c.inputs, "step2", "color")) {
                (1, Some(name), _) => ToolAnswer::InputRequired {
                    requests: json!({"step2": elicit("Step 2: What is your favorite color?", "color", "string")}),
                    state: json!({"round": 2, "name": name}),
                },
                (2, _, Some(color)) => text(format!(
                    "Multi-round complete for {} who likes {color}",
                    c.state.as_ref().and_then(|s| s["name"].as_str()).unwrap_or("friend")
                )),
                _ => step1(),
            }
        }
        "conformance.input_required_tampered_state" => {
            require_caps(&c.client_caps, &["elicitation"])?;
            match (&c.state, c.inputs.contains_key("confirm")) {
                (Some(s), true) if s["kind"] == "tamper-test" => text("integrity-ok: state verified"),
                _ => ToolAnswer::InputRequired {
                    requests: json!({"confirm": elicit("Please confirm", "ok", "boolean")}),
                    state: json!({"kind": "tamper-test"}),
                },
            }
        }
        _ => return Ok(None),
    }))
}

/// The conformance tools that ask the client to sample or elicit.
fn client_request_tool(name: &str, c: &ToolCall) -> Result<Option<ToolAnswer>, RpcError> {
    Ok(Some(match name {
        "conformance.sampling" => {
            require_caps(&c.client_caps, &["sampling"])?;
            match c.inputs.get("sampling") {
                Some(r) => text(format!(
                    "LLM response: {}",
                    r.get("content").and_then(|t| t.get("text")).and_then(Value::as_str).unwrap_or("no response")
                )),
                None => ToolAnswer::InputRequired {
                    requests: json!({"sampling": sample(c.args["prompt"].as_str().unwrap_or_default(), 100)}),
                    state: Value::Null,
                },
            }
        }
        "conformance.elicitation" => {
            let schema = json!({"type": "object", "required": ["username", "email"], "properties": {
                "username": {"type": "string", "description": "User's response"},
                "email": {"type": "string", "description": "User's email address"}}});
            let message = c.args["message"].as_str().unwrap_or_default();
            elicited_reply(c, "User response", message, schema)?
        }
        "conformance.elicitation_sep1034_defaults" => {
            let schema = json!({"type": "object", "properties": {
                "name": {"type": "string", "default": "John Doe"},
                "age": {"type": "integer", "default": 30},
                "score": {"type": "number", "default": 95.5},
                "status": {"type": "string", "enum": ["active", "inactive", "pending"], "default": "active"},
                "verified": {"type": "boolean", "default": true}}});
            elicited_reply(
                c,
                "Elicitation completed",
                "Please review and update the form fields with defaults",
                schema,
            )?
        }
        "conformance.elicitation_sep1330_enums" => {
            let titled = |prefix: &str, title: &str| {
                (1..=3)
                    .map(|i| json!({"const": format!("{prefix}{i}"), "title": format!("{title} {i}")}))
                    .collect::<Vec<_>>()
            };
            let schema = json!({"type": "object", "properties": {
                "untitledSingle": {"type": "string", "enum": ["option1", "option2", "option3"]},
                "titledSingle": {"type": "string", "oneOf": titled("value", "Option")},
                "legacyEnum": {"type": "string", "enum": ["opt1", "opt2", "opt3"],
                               "enumNames": ["Option One", "Option Two", "Option Three"]},
                "untitledMulti": {"type": "array", "items": {"type": "string", "enum": ["option1", "option2", "option3"]}},
                "titledMulti": {"type": "array", "items": {"anyOf": titled("value", "Choice")}}}});
            elicited_reply(c, "Elicitation completed", "Please select options from the enum fields", schema)?
        }
        "conformance.input_required_capabilities" => {
            let mut requests = Map::new();
            if has_cap(&c.client_caps, "elicitation") {
                requests.insert("elicit_input".into(), elicit("Elicitation input", "value", "string"));
            }
            if has_cap(&c.client_caps, "sampling") {
                requests.insert("sample_input".into(), sample("Sample request", 50));
            }
            if !c.inputs.is_empty() {
                let keys: Vec<&String> = c.inputs.keys().collect();
                text(format!(
                    "capabilities-ok: received {}",
                    keys.iter().map(|k| k.as_str()).collect::<Vec<_>>().join(",")
                ))
            } else if requests.is_empty() {
                text("No supported capabilities declared")
            } else {
                ToolAnswer::InputRequired {
                    requests: Value::Object(requests),
                    state: json!({"kind": "capabilities-test"}),
                }
            }
        }
        _ => return Ok(None),
    }))
}

#[cfg(test)]
mod tests {
    /// Every handler a catalog may name has its arm in `call` (publication refuses other names).
    #[test]
    fn every_listed_handler_is_implemented() {
        let source = include_str!("builtin.rs");
        for name in writ_api::catalog::BUILTIN_HANDLERS {
            assert!(source.contains(&format!("\"{name}\" =>")), "{name} has no arm in builtin::call");
        }
    }
}
