//! The MCP conformance fixtures (the tools, resources and prompts of the official reference
//! everything-server, `modelcontextprotocol/conformance`). The tools are an ordinary catalog
//! ([`CONFORMANCE_CATALOG`]) published to the fixture tenant through the admin API, whose actions
//! name built-in handlers (`crate::builtin`); the resources and prompts are served by the edge
//! to the fixture tenant only (`writ dev --conformance-fixtures`).

use serde_json::{json, Value};

use crate::jsonrpc::RpcError;
use writ_api::ReasonCode;

/// 1×1 PNG.
pub const PNG_BASE64: &str =
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==";
/// A tiny WAV file.
pub const WAV_BASE64: &str = "UklGRiYAAABXQVZFZm10IBAAAAABAAEAQB8AAAB9AAACABAAZGF0YQIAAAA=";

/// The fixture tools as a Writ catalog document (published like any tenant's catalog).
pub fn conformance_catalog() -> Value {
    let empty = json!({"type": "object", "properties": {}});
    let tool = |id: &str, handler: &str, description: &str| {
        json!({"id": id, "title": id, "description": description, "input_schema": empty,
               "risk": "low", "execution": {"builtin": format!("conformance.{handler}")}})
    };
    let mut actions = vec![
        tool("test_simple_text", "simple_text", "Tests simple text content response"),
        tool("test_image_content", "image_content", "Tests image content response"),
        tool("test_audio_content", "audio_content", "Tests audio content response"),
        tool("test_embedded_resource", "embedded_resource", "Tests embedded resource content response"),
        tool(
            "test_multiple_content_types",
            "multiple_content_types",
            "Tests response with multiple content types (text, image, resource)",
        ),
        tool("test_tool_with_progress", "tool_with_progress", "Tests tool that reports progress notifications"),
        tool("test_error_handling", "error_handling", "Tests error response handling"),
        tool("test_missing_capability", "missing_capability", "Test tool requiring sampling"),
        tool(
            "test_streaming_elicitation",
            "streaming_elicitation",
            "Diagnostic tool validating response progress streams",
        ),
        tool("test_logging_tool", "logging_tool", "Diagnostic logging validator tool"),
        tool(
            "test_input_required_result_elicitation",
            "input_required_elicitation",
            "MRTR: returns InputRequiredResult with elicitation request",
        ),
        tool(
            "test_input_required_result_sampling",
            "input_required_sampling",
            "MRTR: returns InputRequiredResult with sampling request",
        ),
        tool(
            "test_input_required_result_list_roots",
            "input_required_list_roots",
            "MRTR: returns InputRequiredResult with roots/list request",
        ),
        tool(
            "test_input_required_result_request_state",
            "input_required_request_state",
            "MRTR: returns InputRequiredResult with requestState",
        ),
        tool(
            "test_input_required_result_multiple_inputs",
            "input_required_multiple_inputs",
            "MRTR: returns InputRequiredResult with multiple input requests",
        ),
        tool(
            "test_input_required_result_multi_round",
            "input_required_multi_round",
            "MRTR: multi-round InputRequiredResult workflow",
        ),
        tool(
            "test_input_required_result_tampered_state",
            "input_required_tampered_state",
            "MRTR: integrity-protected requestState",
        ),
        tool(
            "test_input_required_result_capabilities",
            "input_required_capabilities",
            "MRTR: respects client capabilities in inputRequests",
        ),
        tool(
            "test_trigger_tool_change",
            "trigger_tool_change",
            "Announces a tool-list change to this edge's open subscriptions/listen streams",
        ),
        tool(
            "test_trigger_prompt_change",
            "trigger_prompt_change",
            "Announces a prompt-list change to this edge's open subscriptions/listen streams",
        ),
    ];
    actions.push(json!({
        "id": "json_schema_2020_12_tool", "title": "json_schema_2020_12_tool",
        "description": "Tool with JSON Schema 2020-12 features for conformance testing (SEP-1613)",
        "risk": "low", "execution": {"builtin": "conformance.json_schema_2020_12"},
        "input_schema": {
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "$defs": {"address": {"$anchor": "addressDef", "type": "object",
                                  "properties": {"street": {"type": "string"}, "city": {"type": "string"}}}},
            "properties": {
                "name": {"type": "string"},
                "address": {"$ref": "#/$defs/address"},
                "contactMethod": {"type": "string", "enum": ["phone", "email"]},
                "phone": {"type": "string"},
                "email": {"type": "string"}
            },
            "allOf": [{"anyOf": [{"required": ["phone"]}, {"required": ["email"]}]}],
            "if": {"properties": {"contactMethod": {"const": "phone"}}, "required": ["contactMethod"]},
            "then": {"required": ["phone"]},
            "else": {"required": ["email"]},
            "additionalProperties": false
        }
    }));
    actions.push(json!({
        "id": "greet", "title": "greet", "description": "Sync-only: returns Hello, {name}!",
        "risk": "low", "execution": {"builtin": "conformance.greet"},
        "input_schema": {"type": "object", "properties": {"name": {"type": "string"}}}
    }));
    // The 2025 wire's tools that ask the client for input (`elicitation/create`,
    // `sampling/createMessage`): they answer with input requests like every MRTR tool, which the
    // 2025 wire carries as requests on the call's event stream (`crate::legacy`).
    let with_args = |id: &str, handler: &str, description: &str, properties: Value, required: Value| {
        json!({"id": id, "title": id, "description": description, "risk": "low",
               "execution": {"builtin": format!("conformance.{handler}")},
               "input_schema": {"type": "object", "properties": properties, "required": required}})
    };
    actions.push(tool("test_tool_with_logging", "tool_with_logging", "Tests tool that emits log messages"));
    actions.push(with_args(
        "test_sampling",
        "sampling",
        "Tests server-initiated sampling (LLM completion request)",
        json!({"prompt": {"type": "string", "description": "The prompt to send to the LLM"}}),
        json!(["prompt"]),
    ));
    actions.push(with_args(
        "test_elicitation",
        "elicitation",
        "Tests server-initiated elicitation (user input request)",
        json!({"message": {"type": "string", "description": "The message to show the user"}}),
        json!(["message"]),
    ));
    actions.push(tool(
        "test_elicitation_sep1034_defaults",
        "elicitation_sep1034_defaults",
        "Tests elicitation with default values per SEP-1034",
    ));
    actions.push(tool(
        "test_elicitation_sep1330_enums",
        "elicitation_sep1330_enums",
        "Tests elicitation with enum schema improvements per SEP-1330",
    ));
    // The tasks fixtures are real operations of the fixture tenant, performed by the dev
    // server's fixture executor (`writ executor` handler `conformance_fixtures`).
    let task = |id: &str, execution: &str, risk: &str, description: &str, properties: Value| {
        json!({"id": id, "title": id, "description": description, "risk": risk, "execution": execution,
               "input_schema": {"type": "object", "properties": properties}})
    };
    actions.push(task(
        "slow_compute",
        "operation",
        "low",
        "Task-supporting: sleeps `seconds`, then answers; cancellable while it runs",
        json!({"seconds": {"type": "number", "minimum": 0, "maximum": 300}, "label": {"type": "string"}}),
    ));
    actions.push(task(
        "failing_job",
        "task",
        "low",
        "Task-only: reports a tool execution error after about a second",
        json!({}),
    ));
    actions.push(task(
        "protocol_error_job",
        "operation",
        "low",
        "Task-supporting: its handler fails before running (a protocol-level error)",
        json!({}),
    ));
    actions.push(task(
        "confirm_delete",
        "operation",
        "high",
        "Task-supporting, high risk: asks for a confirmation, then deletes `filename`",
        json!({"filename": {"type": "string"}}),
    ));
    actions.push(task(
        "multi_input",
        "operation",
        "low",
        "Task-supporting: asks for two inputs at once before it runs",
        json!({}),
    ));
    actions.push(task(
        "test_tool_with_task",
        "task",
        "low",
        "MRTR then task: asks for user_name in a first round, then runs as a task that greets it",
        json!({"user_name": {"type": "string"}}),
    ));
    actions.push(json!({
        "id": "test_custom_header", "title": "test_custom_header",
        "description": "Echoes a parameter mirrored in the Mcp-Param-Value header (SEP-2243)",
        "risk": "low", "execution": {"builtin": "conformance.custom_header"},
        "input_schema": {"type": "object", "required": ["value"],
                         "properties": {"value": {"type": "string", "x-mcp-header": "Value"}}}
    }));
    json!({"actions": actions})
}

/// `resources/list` of the fixture tenant.
pub fn resources() -> Vec<Value> {
    vec![
        json!({"uri": "test://static-text", "name": "static-text", "title": "Static Text Resource",
               "description": "A static text resource for testing", "mimeType": "text/plain"}),
        json!({"uri": "test://static-binary", "name": "static-binary", "title": "Static Binary Resource",
               "description": "A static binary resource (image) for testing", "mimeType": "image/png"}),
    ]
}

/// `resources/templates/list` of the fixture tenant.
pub fn resource_templates() -> Vec<Value> {
    vec![json!({"uriTemplate": "test://template/{id}/data", "name": "template", "title": "Resource Template",
                "description": "A resource template with parameter substitution", "mimeType": "application/json"})]
}

/// `resources/read` of a fixture URI (`None`: not a fixture resource).
pub fn read_resource(uri: &str) -> Option<Value> {
    let content = match uri {
        "test://static-text" => {
            json!({"uri": uri, "mimeType": "text/plain", "text": "This is the content of the static text resource."})
        }
        "test://static-binary" => json!({"uri": uri, "mimeType": "image/png", "blob": PNG_BASE64}),
        _ => {
            let id = uri.strip_prefix("test://template/")?.strip_suffix("/data")?;
            if id.is_empty() || id.contains('/') {
                return None;
            }
            let text = json!({"id": id, "templateTest": true, "data": format!("Data for ID: {id}")}).to_string();
            json!({"uri": uri, "mimeType": "application/json", "text": text})
        }
    };
    Some(json!({"contents": [content]}))
}

/// `prompts/list` of the fixture tenant.
pub fn prompts() -> Vec<Value> {
    let arg = |name: &str, description: &str| json!({"name": name, "description": description, "required": true});
    vec![
        json!({"name": "test_simple_prompt", "title": "Simple Test Prompt", "description": "A simple prompt without arguments"}),
        json!({"name": "test_prompt_with_arguments", "title": "Prompt With Arguments",
               "description": "A prompt with required arguments",
               "arguments": [arg("arg1", "First test argument"), arg("arg2", "Second test argument")]}),
        json!({"name": "test_prompt_with_embedded_resource", "title": "Prompt With Embedded Resource",
               "description": "A prompt that includes an embedded resource",
               "arguments": [arg("resourceUri", "URI of the resource to embed")]}),
        json!({"name": "test_prompt_with_image", "title": "Prompt With Image", "description": "A prompt that includes image content"}),
        json!({"name": "test_input_required_result_prompt", "description": "MRTR: prompt that requires elicitation input"}),
    ]
}

/// What `prompts/get` of a fixture prompt needs from the client before it can answer.
pub enum PromptAnswer {
    Messages(Value),
    /// MRTR: ask for these inputs first.
    InputRequired(Value),
}

/// `prompts/get` of the fixture tenant. `inputs` are the client's `inputResponses` (objects
/// only).
pub fn get_prompt(name: &str, args: &Value, inputs: &serde_json::Map<String, Value>) -> Result<PromptAnswer, RpcError> {
    let text = |t: String| json!({"role": "user", "content": {"type": "text", "text": t}});
    let arg = |k: &str| -> Result<String, RpcError> {
        args.get(k).and_then(Value::as_str).map(str::to_string).ok_or_else(|| {
            RpcError::reason(ReasonCode::INPUT_INVALID, format!("prompt '{name}' needs the string argument '{k}'"))
                .in_band()
        })
    };
    let messages = match name {
        "test_simple_prompt" => vec![text("This is a simple prompt for testing.".into())],
        "test_prompt_with_arguments" => {
            vec![text(format!("Prompt with arguments: arg1='{}', arg2='{}'", arg("arg1")?, arg("arg2")?))]
        }
        "test_prompt_with_embedded_resource" => vec![
            json!({"role": "user", "content": {"type": "resource", "resource": {
                "uri": arg("resourceUri")?, "mimeType": "text/plain", "text": "Embedded resource content for testing."}}}),
            text("Please process the embedded resource above.".into()),
        ],
        "test_prompt_with_image" => vec![
            json!({"role": "user", "content": {"type": "image", "data": PNG_BASE64, "mimeType": "image/png"}}),
            text("Please analyze the image above.".into()),
        ],
        "test_input_required_result_prompt" => match inputs.get("user_context").and_then(|r| r.get("content")) {
            Some(content) => {
                let context = content.get("context").and_then(Value::as_str).unwrap_or("unknown");
                vec![text(format!("Prompt with context: {context}"))]
            }
            None => {
                return Ok(PromptAnswer::InputRequired(json!({"user_context": {
                    "method": "elicitation/create",
                    "params": {"message": "What context should the prompt use?",
                               "requestedSchema": {"type": "object", "properties": {"context": {"type": "string"}},
                                                   "required": ["context"]}}}})))
            }
        },
        _ => {
            return Err(RpcError::reason(ReasonCode::PROMPT_NOT_FOUND, format!("unknown prompt '{name}'"))
                .in_band()
                .with_detail("name", json!(name)))
        }
    };
    Ok(PromptAnswer::Messages(json!(messages)))
}

/// What a fixture task tool needs before its operation is recorded.
pub enum Prelude {
    /// An MRTR round first: ask for these inputs (no task yet).
    Ask(Value),
    /// Record the operation with these arguments, waiting for these input requests.
    Run { args: Value, input_requests: serde_json::Map<String, Value> },
}

fn elicit(message: &str, property: &str, schema: Value) -> Value {
    json!({"method": "elicitation/create", "params": {"message": message, "requestedSchema":
        {"type": "object", "properties": {property: schema}, "required": [property]}}})
}

/// The reference server's task fixtures that gather input: `multi_input` parks its task on two
/// input requests at once; `test_tool_with_task` asks for `user_name` through MRTR and then
/// runs as a task with it. Any other tool runs as called.
pub fn task_prelude(tool: &str, args: Value, inputs: &serde_json::Map<String, Value>) -> Prelude {
    let mut input_requests = serde_json::Map::new();
    match tool {
        "multi_input" => {
            input_requests.insert("name".into(), elicit("Which name?", "name", json!({"type": "string"})));
            input_requests.insert("confirm".into(), elicit("Go ahead?", "confirm", json!({"type": "boolean"})));
        }
        "test_tool_with_task" => {
            let content = inputs.get("user_name").filter(|r| r["action"] == "accept").map(|r| &r["content"]);
            let Some(name) = content.and_then(|c| c.get("name").or_else(|| c.get("user_name"))).and_then(Value::as_str)
            else {
                return Prelude::Ask(
                    json!({"user_name": elicit("What is your name?", "name", json!({"type": "string"}))}),
                );
            };
            return Prelude::Run { args: json!({"user_name": name}), input_requests };
        }
        _ => {}
    }
    Prelude::Run { args, input_requests }
}
