//! The OpenAPI 3.1 document served at `/v1/openapi.json`.

use serde_json::{json, Value};

fn error_responses() -> Value {
    json!({
        "400": {"$ref": "#/components/responses/Error"},
        "401": {"$ref": "#/components/responses/Error"},
        "404": {"$ref": "#/components/responses/Error"},
        "409": {"$ref": "#/components/responses/Error"},
        "413": {"$ref": "#/components/responses/Error"},
        "503": {"$ref": "#/components/responses/Error"}
    })
}

fn op(summary: &str, body: Option<&str>, ok: &str) -> Value {
    let mut responses = error_responses();
    responses["200"] = json!({"description": "OK", "content": {"application/json": {"schema": {"$ref": format!("#/components/schemas/{ok}")}}}});
    let mut o = json!({"summary": summary, "responses": responses});
    if let Some(b) = body {
        o["requestBody"] = json!({"required": true, "content": {"application/json": {"schema": {"$ref": format!("#/components/schemas/{b}")}}}});
    }
    o
}

pub fn document() -> Value {
    let tenant_param = json!([{"name": "tenant", "in": "path", "required": true, "description": "tenant id or name", "schema": {"type": "string"}}]);
    json!({
        "openapi": "3.1.0",
        "info": {"title": "Writ admin API", "version": env!("CARGO_PKG_VERSION")},
        "security": [{"operator": []}],
        "paths": {
            "/v1/cluster/status": {"get": op("Every member's Raft position, membership and state digest", None, "ClusterStatus")},
            "/v1/cluster/learners": {"post": op("Add a learner and wait until it caught up", Some("AddLearner"), "NodeStatus")},
            "/v1/cluster/membership": {"post": op("Set the voter set", Some("Membership"), "NodeStatus")},
            "/v1/cluster/snapshot": {"post": op("Build a snapshot on the serving node", None, "NodeStatus")},
            "/v1/cluster/purge": {"post": op("Purge the serving node's log up to its snapshot", None, "NodeStatus")},
            "/v1/tenants": {
                "post": op("Create a tenant", Some("CreateTenant"), "Tenant"),
                "get": {"summary": "List tenants by name", "parameters": [
                    {"name": "after", "in": "query", "schema": {"type": "string"}},
                    {"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 1, "maximum": 1000}},
                    {"name": "stale", "in": "query", "schema": {"type": "boolean"}}],
                    "responses": {"200": {"description": "OK", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/TenantList"}}}}}}
            },
            "/v1/tenants/{tenant}": {"parameters": tenant_param, "get": op("Show a tenant", None, "Tenant")},
            "/v1/tenants/{tenant}/suspend": {"parameters": tenant_param, "post": op("Suspend a tenant", Some("SuspendTenant"), "Tenant")},
            "/v1/tenants/{tenant}/resume": {"parameters": tenant_param, "post": op("Resume a tenant", None, "Tenant")},
    "/v1/tenants/{tenant}/sites": {"parameters": tenant_param,
                "post": op("Create a site", Some("CreateSite"), "Site"),
                "get": {"summary": "List a tenant's sites by name", "responses": {"200": {"description": "OK"}}}},
            "/v1/tenants/{tenant}/sites/{site}": {"get": op("Show a site (id or name)", None, "Site")},
            "/v1/tenants/{tenant}/devices": {"parameters": tenant_param,
                "post": op("Create a device at a site", Some("CreateDevice"), "Device"),
                "get": {"summary": "List a tenant's devices by name", "parameters": [
                    {"name": "site", "in": "query", "schema": {"type": "string"}}],
                    "responses": {"200": {"description": "OK"}}}},
            "/v1/tenants/{tenant}/devices/{device}": {"get": op("Show a device (id or name)", None, "Device")},
            "/v1/tenants/{tenant}/principals": {"parameters": tenant_param,
                "post": op("Create a principal", Some("CreatePrincipal"), "Principal"),
                "get": {"summary": "List a tenant's principals by name", "parameters": [
                    {"name": "after", "in": "query", "schema": {"type": "string"}},
                    {"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 1, "maximum": 1000}}],
                    "responses": {"200": {"description": "OK"}}}},
            "/v1/tenants/{tenant}/principals/{principal}": {"get": op("Show a principal (id or name)", None, "Principal")},
            "/v1/tenants/{tenant}/principals/{principal}/revoke": {"post": op("Revoke a principal", None, "Principal")},
            "/v1/tenants/{tenant}/principals/{principal}/scopes/revoke": {"post": op("Revoke one scope of a principal", Some("RevokeScope"), "Principal")},
            "/v1/tenants/{tenant}/settings": {"parameters": tenant_param, "patch": op("Change tenant settings (only the fields given)", Some("TenantSettingsPatch"), "Tenant")}
        },
        "components": {
            "securitySchemes": {"operator": {"type": "http", "scheme": "bearer"}},
            "responses": {"Error": {"description": "Rejected", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}},
            "schemas": {
                "Error": {"type": "object", "required": ["reason", "code", "message"], "properties": {
                    "reason": {"type": "string", "description": "stable reason code, see docs/reasons.md"},
                    "code": {"type": "integer"}, "message": {"type": "string"}}},
                "CreateTenant": {"type": "object", "additionalProperties": false, "required": ["name"], "properties": {
                    "name": {"type": "string", "pattern": "^[a-z0-9][a-z0-9-]{0,62}$"},
                    "display_name": {"type": ["string", "null"], "maxLength": 200}}},
                "SuspendTenant": {"type": "object", "additionalProperties": false, "properties": {"note": {"type": ["string", "null"], "maxLength": 500}}},
                "AddLearner": {"type": "object", "additionalProperties": false, "required": ["node_id", "addr"], "properties": {"node_id": {"type": "integer", "minimum": 1}, "addr": {"type": "string"}}},
                "Membership": {"type": "object", "additionalProperties": false, "required": ["voters"], "properties": {"voters": {"type": "array", "items": {"type": "integer"}}}},
                "Tenant": {"type": "object", "properties": {
                    "id": {"type": "string"}, "name": {"type": "string"}, "display_name": {"type": ["string", "null"]},
                    "state": {"enum": ["active", "suspended"]}, "created_at_ms": {"type": "integer"},
                    "updated_at_ms": {"type": "integer"}, "revision": {"type": "integer"}}},
                "TenantList": {"type": "object", "properties": {"tenants": {"type": "array", "items": {"$ref": "#/components/schemas/Tenant"}}, "next_cursor": {"type": ["string", "null"]}}},
                "TenantSettingsPatch": {"type": "object", "additionalProperties": false, "properties": {
                    "audit_max_events": {"type": "integer", "minimum": 1, "maximum": 10000000},
                    "audit_max_age_s": {"type": "integer", "minimum": 1},
                    "audit_mode": {"enum": ["standard", "strict"]},
                    "idempotency_retention_s": {"type": "integer", "minimum": 86400},
                    "token_ttl_min_s": {"type": "integer", "minimum": 1},
                    "token_ttl_max_s": {"type": "integer", "maximum": 2592000},
                    "allowed_origins": {"type": "array", "maxItems": 32, "items": {"type": "string"}},
                    "quotas": {"type": "object", "additionalProperties": false, "properties": {
                        "requests_per_minute": {"type": "integer", "minimum": 1},
                        "operations_per_minute": {"type": "integer", "minimum": 1},
                        "cost_units_per_day": {"type": "integer", "minimum": 1},
                        "concurrent_operations": {"type": "integer", "minimum": 1}}}}},
                "CreatePrincipal": {"type": "object", "additionalProperties": false, "required": ["name", "kind"], "properties": {
                    "name": {"type": "string", "pattern": "^[a-z0-9][a-z0-9-]{0,62}$"},
                    "kind": {"enum": ["human", "agent", "device", "service"]},
                    "preset": {"enum": ["readOnly", "full", "delegate"]},
                    "scopes": {"type": "array", "items": {"type": "string"}, "description": "tools:list, context:read, resources:read, ops:read, ops:execute, ops:cancel, ops:accept, observe:capture, audit:read, tokens:delegate, tools:call:<action|*>, devices:use:<device|*>"},
                    "metadata": {"type": "object", "additionalProperties": {"type": "string"}}}},
                "RevokeScope": {"type": "object", "additionalProperties": false, "required": ["scope"], "properties": {"scope": {"type": "string"}}},
                "Principal": {"type": "object"},
                "CreateSite": {"type": "object", "additionalProperties": false, "required": ["name"], "properties": {
                    "name": {"type": "string", "pattern": "^[a-z0-9][a-z0-9-]{0,62}$"}, "display_name": {"type": ["string", "null"]}}},
                "CreateDevice": {"type": "object", "additionalProperties": false, "required": ["name", "site", "device_class"], "properties": {
                    "name": {"type": "string", "pattern": "^[a-z0-9][a-z0-9-]{0,62}$"}, "site": {"type": "string"},
                    "device_class": {"type": "string", "pattern": "^[A-Za-z0-9_.-]{1,64}$"}}},
                "Site": {"type": "object"},
                "Device": {"type": "object"},
                "NodeStatus": {"type": "object"},
                "ClusterStatus": {"type": "object"}
            }
        }
    })
}
