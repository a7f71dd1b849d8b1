//! The OpenAPI 3.1 document served at `/v1/openapi.json`.

use serde_json::{json, Value};

fn error_responses() -> Value {
    json!({
        "400": {"$ref": "#/components/responses/Error"},
        "401": {"$ref": "#/components/responses/Error"},
        "403": {"$ref": "#/components/responses/Error"},
        "404": {"$ref": "#/components/responses/Error"},
        "409": {"$ref": "#/components/responses/Error"},
        "410": {"$ref": "#/components/responses/Error"},
        "413": {"$ref": "#/components/responses/Error"},
        "503": {"$ref": "#/components/responses/Error"}
    })
}

fn op(summary: &str, body: Option<&str>, ok: &str) -> Value {
    op_status(summary, body, ok, "200")
}

/// An operation that creates something and answers 201.
fn created(summary: &str, body: Option<&str>, ok: &str) -> Value {
    op_status(summary, body, ok, "201")
}

/// Path parameters, each a string (`{tenant}` takes an id or a name).
fn params(names: &[&str]) -> Value {
    Value::Array(
        names
            .iter()
            .map(|n| {
                // Examples name the resources of the quickstart (`acme`, …) so that tools that
                // exercise the API from this document reach real objects.
                let example = match *n {
                    "tenant" => "acme",
                    "principal" => "agent-1",
                    "site" => "plant-1",
                    "device" => "press-1",
                    "work" => "wo-1",
                    "version" | "to" => "latest",
                    "upstream" => "weather",
                    _ => "unknown",
                };
                json!({"name": n, "in": "path", "required": true, "description": format!("{n} id or name"),
                    "schema": {"type": "string"}, "example": example})
            })
            .collect(),
    )
}

/// Query parameters of audit list (with `limit`) and export.
fn audit_params(with_limit: bool) -> Value {
    let mut p = vec![
        json!({"name": "after", "in": "query", "schema": {"type": "integer", "minimum": 0}}),
        json!({"name": "domain", "in": "query", "schema": {"type": "string"}}),
        json!({"name": "operation", "in": "query", "schema": {"type": "string"}}),
        json!({"name": "outcome", "in": "query", "schema": {"enum": ["applied", "rejected", "allowed", "denied"]}}),
        json!({"name": "principal", "in": "query", "schema": {"type": "string"}}),
        json!({"name": "reason", "in": "query", "schema": {"type": "string", "pattern": "^[A-Z_]+$"}}),
        json!({"name": "since_ms", "in": "query", "schema": {"type": "integer", "minimum": 0}}),
        json!({"name": "trace", "in": "query", "schema": {"type": "string", "maxLength": 64}}),
    ];
    if with_limit {
        p.push(json!({"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 1, "maximum": 1000}}));
    }
    Value::Array(p)
}

/// A 200 with `schema`, or an error.
fn ok_or_errors(schema: &str) -> Value {
    let mut r = error_responses();
    r["200"] = json!({"description": "OK", "content": {"application/json": {"schema": {"$ref": format!("#/components/schemas/{schema}")}}}});
    r
}

fn op_status(summary: &str, body: Option<&str>, ok: &str, status: &str) -> Value {
    let mut responses = error_responses();
    responses[status] = json!({"description": "OK", "content": {"application/json": {"schema": {"$ref": format!("#/components/schemas/{ok}")}}}});
    let mut o = json!({"summary": summary, "responses": responses});
    if let Some(b) = body {
        o["requestBody"] = json!({"required": true, "content": {"application/json": {"schema": {"$ref": format!("#/components/schemas/{b}")}}}});
    }
    o
}

pub fn document() -> Value {
    json!({
        "openapi": "3.1.0",
        "info": {"title": "Writ admin API", "version": env!("CARGO_PKG_VERSION")},
        "security": [{"operator": []}],
        "paths": merged(merged(paths(), operator_paths()), health_paths()),
        "components": {
            "securitySchemes": {"operator": {"type": "http", "scheme": "bearer"}},
            "responses": {"Error": {"description": "Rejected", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}},
            "schemas": merged(merged(merged(schemas(), operator_schemas()), health_schemas()), audit_schemas())
        }
    })
}

/// `a` with the members of `b` (both objects).
fn merged(mut a: Value, b: Value) -> Value {
    if let (Some(a), Value::Object(b)) = (a.as_object_mut(), b) {
        a.extend(b);
    }
    a
}

/// The named operators and their sessions.
/// A tenant's tools' health (`writ_api::health`).
fn health_paths() -> Value {
    json!({"/v1/tenants/{tenant}/health": {"parameters": params(&["tenant"]), "get": op(
        "Each tool of the tenant's catalog as a state (connected, degraded, fused, unreachable) with why", None, "TenantHealth")}})
}

fn health_schemas() -> Value {
    json!({"TenantHealth": {"type": "object", "required": ["catalog_version", "tools"], "properties": {
        "catalog_version": {"type": ["integer", "null"]},
        "tools": {"type": "array", "items": {"type": "object", "required": ["tool", "state", "why"], "properties": {
            "tool": {"type": "string"}, "state": {"enum": ["connected", "degraded", "fused", "unreachable"]},
            "why": {"type": "string"}}}}}}})
}

/// An audit record and the authority chain it carries.
fn audit_schemas() -> Value {
    json!({
        "AuditRecord": {"type": "object", "required": ["seq", "at_ms", "revision", "trace_id", "tenant_id", "domain", "operation", "outcome", "reason_code", "principal_id", "token_id", "parent_token_id", "detail", "authority"], "properties": {
            "seq": {"type": "integer"}, "at_ms": {"type": "integer"}, "revision": {"type": "integer"},
            "trace_id": {"type": "string"}, "tenant_id": {"type": "string"}, "domain": {"type": "string"},
            "operation": {"type": "string"}, "outcome": {"type": "string"}, "reason_code": {"type": ["string", "null"]},
            "principal_id": {"type": ["string", "null"]}, "token_id": {"type": ["string", "null"]},
            "parent_token_id": {"type": ["string", "null"]}, "detail": {"type": "string"},
            "authority": {"oneOf": [{"type": "null"}, {"$ref": "#/components/schemas/AuthorityChain"}]}}},
        "AuthorityChain": {"type": "object", "description": "Who acted and through what: the client's fields as it reported them, the rest from the ledger's state.", "properties": {
            "client_name": {"type": ["string", "null"]}, "client_version": {"type": ["string", "null"]},
            "protocol_version": {"type": ["string", "null"]}, "principal_kind": {"type": ["string", "null"]},
            "delegation": {"type": "array", "maxItems": 16, "items": {"type": "string"}},
            "catalog_version": {"type": ["integer", "null"]}, "policy_digest": {"type": ["string", "null"]},
            "upstream": {"type": ["string", "null"]}, "upstream_tool": {"type": ["string", "null"]},
            "operation_id": {"type": ["string", "null"]}, "attempt_id": {"type": ["string", "null"]}}}
    })
}

fn operator_paths() -> Value {
    json!({
        "/v1/operators": {
            "get": op("The named operators", None, "OperatorList"),
            "put": op("Create or change an operator (admin)", Some("SetOperator"), "Operator")},
        "/v1/operators/me": {"get": op("Who the caller's credential is", None, "OperatorWhoAmI")},
        "/v1/operators/{name}": {"parameters": params(&["name"]),
            "get": op("One operator", None, "Operator"),
            "delete": op("Remove an operator and close its sessions (admin)", None, "Operator")},
        "/v1/operators/{name}/sessions": {"parameters": params(&["name"]),
            "post": op("Open a session for an operator; its credential is shown once (admin)", Some("OpenOperatorSession"), "OperatorSession")},
        "/v1/console/sign-in": {
            "get": op("The OpenID provider operators sign in to the console with", None, "ConsoleSignIn"),
            "put": op("Set the console's sign-in provider (admin; its discovery must answer)", Some("ConsoleSignIn"), "ConsoleSignIn")},
        "/v1/operators/{name}/sessions/close": {"parameters": params(&["name"]),
            "post": op("Close one session of an operator, or all of them (the operator itself, or an admin)", Some("CloseOperatorSessions"), "OperatorSignOut")}
    })
}

fn operator_schemas() -> Value {
    let role = json!({"enum": ["viewer", "operator", "approver", "admin"]});
    let sign_in = json!({"type": ["object", "null"], "additionalProperties": false, "required": ["issuer", "subject"],
        "properties": {"issuer": {"type": "string"}, "subject": {"type": "string"}}});
    json!({
        "SetOperator": {"type": "object", "additionalProperties": false, "required": ["name", "role"], "properties": {
            "name": {"type": "string", "pattern": "^[a-z0-9._@-]{1,128}$"}, "role": role,
            "tenant": {"type": ["string", "null"]}, "display_name": {"type": ["string", "null"], "maxLength": 200},
            "sign_in": sign_in}},
        "Operator": {"type": "object", "required": ["name", "role"], "properties": {
            "name": {"type": "string"}, "role": role, "tenant_id": {"type": ["string", "null"]},
            "display_name": {"type": ["string", "null"]}, "sign_in": sign_in}},
        "OperatorList": {"type": "object", "required": ["operators"], "properties": {
            "operators": {"type": "array", "items": {"$ref": "#/components/schemas/Operator"}}}},
        "OperatorWhoAmI": {"type": "object", "required": ["actor", "role"], "properties": {
            "actor": {"type": "string"}, "role": role, "tenant_id": {"type": ["string", "null"]},
            "session_id": {"type": ["string", "null"]}}},
        "OpenOperatorSession": {"type": "object", "additionalProperties": false, "properties": {
            "ttl_s": {"type": ["integer", "null"], "minimum": 1, "maximum": 43200},
            "idle_s": {"type": ["integer", "null"], "minimum": 0, "maximum": 43200}}},
        "OperatorSession": {"type": "object", "required": ["operator", "session_id", "credential", "expires_at_ms"], "properties": {
            "operator": {"type": "string"}, "session_id": {"type": "string"}, "credential": {"type": "string"},
            "expires_at_ms": {"type": "integer"}}},
        "CloseOperatorSessions": {"type": "object", "additionalProperties": false, "properties": {
            "session_id": {"type": ["string", "null"]}}},
        "ConsoleSignIn": {"type": "object", "additionalProperties": false, "required": ["issuer", "client_id"], "properties": {
            "issuer": {"type": "string"}, "client_id": {"type": "string", "minLength": 1, "maxLength": 512},
            "allow_private_network": {"type": "boolean"}}},
        "OperatorSignOut": {"type": "object", "required": ["operator", "closed"], "properties": {
            "operator": {"type": "string"}, "closed": {"type": "boolean"}}}
    })
}

fn paths() -> Value {
    let tenant_param = params(&["tenant"]);
    json!({
            "/v1/cluster/status": {"get": op("Every member's Raft position, membership and state digest", None, "ClusterStatus")},
            "/v1/cluster/learners": {"post": op("Add a learner and wait until it caught up", Some("AddLearner"), "NodeStatus")},
            "/v1/cluster/membership": {"post": op("Set the voter set", Some("Membership"), "NodeStatus")},
            "/v1/cluster/snapshot": {"post": op("Build a snapshot on the serving node", None, "NodeStatus")},
            "/v1/cluster/purge": {"post": op("Purge the serving node's log up to its snapshot", None, "NodeStatus")},
            "/v1/cluster/backup": {"get": {"summary": "A consistent backup of the serving node's ledger (state, audit records, evidence, events), holding every write acknowledged before the request, streamed in the Writ backup format (restore with `writ node restore`)",
                "responses": {"200": {"description": "The backup", "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}}},
                    "401": {"$ref": "#/components/responses/Error"}, "404": {"$ref": "#/components/responses/Error"}, "503": {"$ref": "#/components/responses/Error"}}}},
            "/v1/tenants": {
                "post": created("Create a tenant", Some("CreateTenant"), "Tenant"),
                "get": {"summary": "List tenants by name", "parameters": [
                    {"name": "after", "in": "query", "schema": {"type": "string"}},
                    {"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 1, "maximum": 1000}},
                    {"name": "stale", "in": "query", "schema": {"type": "boolean"}}],
                    "responses": {"200": {"description": "OK", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/TenantList"}}}}}}
            },
            "/v1/tenants/{tenant}": {"parameters": tenant_param, "get": op("Show a tenant", None, "Tenant"),
                "delete": {"summary": "Delete a tenant (a final tombstone): its tokens, executors and changes are refused with TENANT_DELETED",
                    "requestBody": {"required": false, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/SuspendTenant"}}}},
                    "responses": ok_or_errors("Tenant")}},
            "/v1/tenants/{tenant}/purge": {"parameters": tenant_param, "post": {"summary": "Purge a deleted tenant's data once 30 days of ledger time have passed since its deletion (TENANT_STATE_CONFLICT before)",
                "responses": {"204": {"description": "Purged"}, "401": {"$ref": "#/components/responses/Error"}, "404": {"$ref": "#/components/responses/Error"}, "409": {"$ref": "#/components/responses/Error"}, "503": {"$ref": "#/components/responses/Error"}}}},
            "/v1/tenants/{tenant}/storage": {"parameters": tenant_param, "get": op("What the ledger keeps of a tenant (record counts, bytes) and when retention next drops something", None, "TenantStorage")},
            "/v1/tenants/{tenant}/suspend": {"parameters": tenant_param, "post": op("Suspend a tenant", Some("SuspendTenant"), "Tenant")},
            "/v1/tenants/{tenant}/resume": {"parameters": tenant_param, "post": op("Resume a tenant", None, "Tenant")},
    "/v1/tenants/{tenant}/sites": {"parameters": tenant_param,
                "post": created("Create a site", Some("CreateSite"), "Site"),
                "get": {"summary": "List a tenant's sites by name", "responses": {"200": {"description": "OK"}}}},
            "/v1/tenants/{tenant}/sites/{site}": {"parameters": params(&["tenant", "site"]), "get": op("Show a site (id or name)", None, "Site")},
            "/v1/tenants/{tenant}/devices": {"parameters": tenant_param,
                "post": created("Create a device at a site", Some("CreateDevice"), "Device"),
                "get": {"summary": "List a tenant's devices by name", "parameters": [
                    {"name": "site", "in": "query", "schema": {"type": "string"}}],
                    "responses": {"200": {"description": "OK"}}}},
            "/v1/tenants/{tenant}/devices/{device}": {"parameters": params(&["tenant", "device"]), "get": op("Show a device (id or name)", None, "Device")},
            "/v1/tenants/{tenant}/principals": {"parameters": tenant_param,
                "post": created("Create a principal", Some("CreatePrincipal"), "Principal"),
                "get": {"summary": "List a tenant's principals by name", "parameters": [
                    {"name": "after", "in": "query", "schema": {"type": "string"}},
                    {"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 1, "maximum": 1000}}],
                    "responses": {"200": {"description": "OK"}}}},
            "/v1/tenants/{tenant}/principals/{principal}": {"parameters": params(&["tenant", "principal"]), "get": op("Show a principal (id or name)", None, "Principal")},
            "/v1/tenants/{tenant}/principals/{principal}/revoke": {"parameters": params(&["tenant", "principal"]), "post": op("Revoke a principal", None, "Principal")},
            "/v1/tenants/{tenant}/principals/{principal}/scopes/revoke": {"parameters": params(&["tenant", "principal"]), "post": op("Revoke one scope of a principal", Some("RevokeScope"), "Principal")},
            "/v1/tenants/{tenant}/principals/{principal}/scopes/grant": {"parameters": params(&["tenant", "principal"]), "post": op("Grant one more scope to a principal (lifts its revocation; a broader revocation stays)", Some("RevokeScope"), "Principal")},
            "/v1/tenants/{tenant}/principals/{principal}/quotas": {"parameters": params(&["tenant", "principal"]),
                "get": op("A principal's own quotas (its tenant's apply on top)", None, "PrincipalQuotas"),
                "put": op("Replace a principal's own quotas ({} clears them)", Some("PrincipalQuotasSpec"), "PrincipalQuotas")},
            "/v1/tenants/{tenant}/settings": {"parameters": tenant_param, "patch": op("Change tenant settings (only the fields given)", Some("TenantSettingsPatch"), "Tenant")},
            "/v1/tenants/{tenant}/tokens": {"parameters": tenant_param,
                "post": created("Issue a Writ token to a principal", Some("IssueToken"), "IssuedToken"),
                "get": {"summary": "List token records by jti (no secrets: Writ never keeps a token)", "parameters": [
                    {"name": "principal", "in": "query", "schema": {"type": "string"}},
                    {"name": "after", "in": "query", "schema": {"type": "string"}},
                    {"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 1, "maximum": 1000}},
                    {"name": "stale", "in": "query", "schema": {"type": "boolean"}}],
                    "responses": {"200": {"description": "OK"}, "404": {"description": "No such tenant or principal"}}}},
            "/v1/tenants/{tenant}/tokens/{jti}": {"parameters": params(&["tenant", "jti"]), "get": op("The ledger's record of a token", None, "Token")},
            "/v1/tenants/{tenant}/tokens/{jti}/delegate": {"parameters": params(&["tenant", "jti"]), "post": created("Mint a child token (scopes ⊆ parent, depth-limited)", Some("DelegateToken"), "IssuedToken")},
            "/v1/tenants/{tenant}/tokens/{jti}/revoke": {"parameters": params(&["tenant", "jti"]), "post": op("Revoke a token and its descendants", None, "RevokedToken")},
            "/v1/tokens/inspect": {"post": op("Verify a bearer token as an edge would", Some("InspectToken"), "TokenInspection")},
            "/v1/tenants/{tenant}/issuers": {"parameters": tenant_param,
                "get": op("A tenant's own token issuers", None, "IssuerList"),
                "put": op("Register or replace a tenant token issuer", Some("TenantIssuer"), "Object")},
            "/v1/tenants/{tenant}/catalogs": {"parameters": tenant_param,
                "get": op("Catalog versions kept, newest first", None, "CatalogList"),
                "post": created("Publish a catalog as the next version (200 when identical to the newest)", Some("CatalogDocument"), "CatalogVersion")},
            "/v1/tenants/{tenant}/catalogs/{version}": {"parameters": params(&["tenant", "version"]), "get": op("One catalog version (a number or `latest`)", None, "CatalogVersion")},
            "/v1/tenants/{tenant}/catalogs/{version}/diff/{to}": {"parameters": params(&["tenant", "version", "to"]), "get": op("What changed from one catalog version to another (numbers or `latest`): actions added, removed, changed by field", None, "CatalogDiff")},
            "/v1/tenants/{tenant}/upstreams": {"parameters": tenant_param,
                "get": op("The tenant's upstream MCP servers", None, "UpstreamList"),
                "post": created("Add an upstream MCP server (nothing served until its tools are synced and approved)", Some("UpstreamBody"), "Upstream")},
            "/v1/tenants/{tenant}/upstreams/{upstream}": {"parameters": params(&["tenant", "upstream"]),
                "get": op("An upstream: configuration, pinned tools, pending diff, every edge's fuse", None, "UpstreamView"),
                "patch": op("Change an upstream's configuration (closes every edge's fuse of it)", Some("UpstreamBody"), "Upstream"),
                "delete": op("Remove an upstream", None, "Object")},
            "/v1/tenants/{tenant}/upstreams/{upstream}/sync": {"parameters": params(&["tenant", "upstream"]),
                "post": op("List the upstream's tools now (from this node) and record what differs from the pinned set as pending", None, "SyncReport")},
            "/v1/tenants/{tenant}/upstreams/{upstream}/approve": {"parameters": params(&["tenant", "upstream"]),
                "post": op("Pin the pending tool set whose digest is given", Some("ApproveUpstream"), "Upstream")},
            "/v1/tenants/{tenant}/audit": {"parameters": tenant_param, "get": {"summary": "A page of audit records, oldest first (stable cursors)",
                "parameters": audit_params(true), "responses": ok_or_errors("AuditPage")}},
            "/v1/tenants/{tenant}/audit/export": {"parameters": tenant_param, "get": {"summary": "Every matching audit record as streamed NDJSON",
                "parameters": audit_params(false), "responses": {"200": {"description": "NDJSON, one AuditRecord per line", "content": {"application/x-ndjson": {"schema": {"type": "string"}}}},
                    "400": {"$ref": "#/components/responses/Error"}, "401": {"$ref": "#/components/responses/Error"}, "404": {"$ref": "#/components/responses/Error"}, "503": {"$ref": "#/components/responses/Error"}}}},
            "/v1/tenants/{tenant}/executors": {"parameters": tenant_param, "get": op("Enrolled executors", None, "ExecutorList")},
            "/v1/tenants/{tenant}/executors/enrollments": {"parameters": tenant_param, "post": created("Create a one-time executor enrollment token", Some("CreateEnrollment"), "CreatedEnrollment")},
            "/v1/tenants/{tenant}/executors/{executor}/revoke": {"parameters": params(&["tenant", "executor"]), "post": op("Revoke an executor", None, "ExecutorList")},
            "/v1/cluster/credentials": {"get": {"summary": "Signing keys and revocations (with ?tenant=, its executor CAs and revoked issuer token ids)",
                "parameters": [{"name": "tenant", "in": "query", "schema": {"type": "string"}}], "responses": ok_or_errors("Credentials")}},
            "/v1/cluster/signing-keys/{kid}/retire": {"parameters": params(&["kid"]), "post": op("Retire a token-signing key: its tokens are refused, its node makes a new key", None, "Credentials")},
            "/v1/cluster/certificates/revoke": {"post": op("Revoke a role certificate of the cluster PKI: every node refuses it", Some("RevokeCertificate"), "Credentials")},
            "/v1/tenants/{tenant}/executor-cas/{fingerprint}/retire": {"parameters": params(&["tenant", "fingerprint"]), "post": op("Retire an executor CA: executors it certified enroll again", None, "Credentials")},
            "/v1/token-exchange": {"post": {"summary": "RFC 8693 token exchange forwarded by an edge: a narrower child of the subject token (authenticated by the subject token, not the operator token)",
                "security": [], "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/TokenExchange"}}}},
                "responses": ok_or_errors("IssuedToken")}},
            "/v1/tenants/{tenant}/issuers/discover": {"parameters": tenant_param, "post": op("Register or replace a tenant issuer by its URL (keys fetched through discovery)", Some("IssuerSource"), "IssuerSourceView")},
            "/v1/tenants/{tenant}/oauth/clients": {"parameters": tenant_param,
                "get": op("The clients of the tenant's own authorization server", None, "OAuthClientList"),
                "put": op("Register or replace a client bound to a principal (an https client id without redirect URIs or keys is read from its client ID metadata document)", Some("OAuthClientRequest"), "OAuthClient")},
            "/v1/tenants/{tenant}/oauth/clients/remove": {"parameters": tenant_param, "post": op("Remove a client with its open requests and refresh tokens", Some("RemoveOAuthClient"), "OAuthDecision")},
            "/v1/tenants/{tenant}/oauth/settings": {"parameters": tenant_param,
                "get": op("The tenant's delegation depth and principal claim", None, "OAuthSettings"),
                "put": op("Set the tenant's delegation depth and principal claim", Some("OAuthSettings"), "OAuthSettings")},
            "/v1/tenants/{tenant}/oauth/requests": {"parameters": tenant_param, "get": op("Open authorization requests, for an operator to decide", None, "AuthRequestList")},
            "/v1/tenants/{tenant}/oauth/requests/{request}/approve": {"parameters": params(&["tenant", "request"]), "post": op("Approve an authorization request: the browser that made it collects its code", None, "OAuthDecision")},
            "/v1/tenants/{tenant}/oauth/requests/{request}/deny": {"parameters": params(&["tenant", "request"]), "post": op("Deny an authorization request: the client is told access_denied", None, "OAuthDecision")},
            "/v1/oauth/grant": {"post": {"summary": "A grant step of a tenant's own authorization server, forwarded by an edge (authenticated by what it carries: a registered client and redirect URI, the browser's binding, a code and its PKCE verifier, a refresh token, a client assertion)",
                "security": [], "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/OAuthGrant"}}}},
                "responses": ok_or_errors("OAuthGrantAnswer")}},
            "/v1/tenants/{tenant}/issuers/revoke-token": {"parameters": tenant_param, "post": op("Revoke a token id of a tenant issuer", Some("RevokeIssuerToken"), "IssuerTokenRevocation")},
            "/v1/tenants/{tenant}/anonymous/{edge}": {"parameters": params(&["tenant", "edge"]),
                "put": op("Let an edge (its certificate's id) act without a token as one principal", Some("AnonymousAccess"), "Credentials"),
                "delete": op("Take an edge's anonymous access away", None, "Credentials")},
            "/v1/tenants/{tenant}/operations": {"parameters": tenant_param,
                "get": {"summary": "The operator's queue: a tenant's operations by id, filtered (needs_attention: unknown effects and reported effects awaiting a verdict)", "parameters": [
                    {"name": "state", "in": "query", "schema": {"type": "string", "enum": ["proposed", "verified", "reserved", "dispatched", "attempting", "effect_reported", "accepted", "rejected", "expired", "failed", "cancelled", "unknown_effect"]}},
                    {"name": "device", "in": "query", "schema": {"type": "string"}},
                    {"name": "principal", "in": "query", "schema": {"type": "string"}},
                    {"name": "work", "in": "query", "schema": {"type": "string"}},
                    {"name": "since_ms", "in": "query", "schema": {"type": "integer", "minimum": 0}},
                    {"name": "until_ms", "in": "query", "schema": {"type": "integer", "minimum": 0}},
                    {"name": "needs_attention", "in": "query", "schema": {"type": "boolean"}},
                    {"name": "after", "in": "query", "schema": {"type": "string"}},
                    {"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 1, "maximum": 1000}},
                    {"name": "stale", "in": "query", "schema": {"type": "boolean"}}],
                    "responses": {"200": {"description": "OK"}, "404": {"description": "No such tenant, device or principal"}}}},
            "/v1/tenants/{tenant}/operations/{operation}": {"parameters": params(&["tenant", "operation"]), "get": op("Show an operation", None, "Operation")},
            "/v1/tenants/{tenant}/operations/{operation}/history": {"parameters": params(&["tenant", "operation"]), "get": op("An operation with its transitions, oldest first (cause, reason code, ledger time, revision, trace id)", None, "OperationHistory")},
            "/v1/tenants/{tenant}/work": {"parameters": tenant_param,
                "post": created("Create a work item (revision 1, open) with its approved scope", Some("CreateWork"), "WorkItem"),
                "get": {"summary": "A tenant's work items by id", "parameters": [
                    {"name": "state", "in": "query", "schema": {"type": "string", "enum": ["open", "completed", "cancelled"]}},
                    {"name": "after", "in": "query", "schema": {"type": "string"}},
                    {"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 1, "maximum": 1000}},
                    {"name": "stale", "in": "query", "schema": {"type": "boolean"}}],
                    "responses": ok_or_errors("WorkList")}},
            "/v1/tenants/{tenant}/work/{work}": {"parameters": params(&["tenant", "work"]),
                "get": op("Show a work item", None, "WorkItem"),
                "patch": op("Change a work item (its next revision; STALE_REVISION unless at expected_revision) or close it", Some("ReviseWork"), "WorkItem")},
            "/v1/tenants/{tenant}/operations/{operation}/cancel": {"parameters": params(&["tenant", "operation"]), "post": op("Cancel an operation no attempt has started for", None, "Operation")},
            "/v1/tenants/{tenant}/operations/{operation}/accept": {"parameters": params(&["tenant", "operation"]), "post": op("Accept a reported effect (needs an independent observation)", Some("OperationDecision"), "Operation")},
            "/v1/tenants/{tenant}/operations/{operation}/reject": {"parameters": params(&["tenant", "operation"]), "post": op("Reject a reported effect", Some("OperationDecision"), "Operation")},
            "/v1/tenants/{tenant}/operations/{operation}/resolve": {"parameters": params(&["tenant", "operation"]), "post": op("Resolve an unknown effect after reconciling it", Some("OperationResolution"), "Operation")},
            "/v1/enroll": {"post": {"summary": "Enroll an executor: token + CSR → certificate (no operator token)", "security": [],
                "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Enroll"}}}},
                "responses": ok_or_errors("EnrollResponse")}},
            "/v1/renew": {"post": {"summary": "Renew an executor certificate: the current certificate, a CSR for a new key and the current key's signature → certificate (no operator token)", "security": [],
                "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Renew"}}}},
                "responses": ok_or_errors("EnrollResponse")}},
            "/v1/tenants/{tenant}/issuers/remove": {"parameters": tenant_param, "post": {"summary": "Remove a tenant token issuer",
                "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/RemoveIssuer"}}}},
                "responses": {"204": {"description": "Removed"}, "400": {"$ref": "#/components/responses/Error"}, "401": {"$ref": "#/components/responses/Error"}, "404": {"$ref": "#/components/responses/Error"}, "503": {"$ref": "#/components/responses/Error"}}}}
        })
}

fn schemas() -> Value {
    json!({
        "Error": {"type": "object", "required": ["reason", "code", "message"], "properties": {
            "reason": {"type": "string", "description": "stable reason code, see docs/reasons.md"},
            "code": {"type": "integer"}, "message": {"type": "string"}}},
        "CreateTenant": {"type": "object", "additionalProperties": false, "required": ["name"], "properties": {
            "name": {"type": "string", "pattern": "^[a-z0-9][a-z0-9-]{0,62}$"},
            "display_name": {"type": ["string", "null"], "maxLength": 200},
            "settings": {"$ref": "#/components/schemas/TenantSettingsPatch",
                         "description": "without quotas the tenant gets the default limits; \"quotas\": {} means none"}}},
        "SuspendTenant": {"type": "object", "additionalProperties": false, "properties": {"note": {"type": ["string", "null"], "maxLength": 500}}},
        "AddLearner": {"type": "object", "additionalProperties": false, "required": ["node_id", "addr"], "properties": {"node_id": {"type": "integer", "minimum": 1}, "addr": {"type": "string"}}},
        "Membership": {"type": "object", "additionalProperties": false, "required": ["voters"], "properties": {"voters": {"type": "array", "items": {"type": "integer"}}}},
        "Tenant": {"type": "object", "properties": {
            "id": {"type": "string"}, "name": {"type": "string"}, "display_name": {"type": ["string", "null"]},
            "state": {"enum": ["active", "suspended", "deleted"]}, "created_at_ms": {"type": "integer"},
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
            "scopes": {"type": "array", "items": {"type": "string"}, "description": "tools:list, context:read, resources:read, ops:read, ops:execute, ops:cancel, ops:accept, ops:approve, observe:capture, audit:read, tokens:delegate, tools:call:<action|*>, devices:use:<device|*>"},
            "metadata": {"type": "object", "additionalProperties": {"type": "string"}}}},
        "PrincipalQuotasSpec": {"type": "object", "additionalProperties": false, "properties": {
            "requests_per_minute": {"type": ["integer", "null"], "minimum": 1, "description": "requests per minute across all edges"},
            "operations_per_minute": {"type": ["integer", "null"], "minimum": 1, "description": "operations recorded per minute"},
            "cost_units_per_day": {"type": ["integer", "null"], "minimum": 1, "description": "cost units of recorded operations per day"},
            "concurrent_operations": {"type": ["integer", "null"], "minimum": 1, "description": "operations waiting or attempting at once"}}},
        "PrincipalQuotas": {"type": "object", "required": ["principal_id", "quotas"], "properties": {
            "principal_id": {"type": "string"}, "quotas": {"$ref": "#/components/schemas/PrincipalQuotasSpec"}}},
        "OperationDecision": {"type": "object", "additionalProperties": false, "properties": {"note": {"type": "string"}}},
        "OperationResolution": {"type": "object", "additionalProperties": false, "required": ["outcome"], "properties": {
            "outcome": {"enum": ["effect", "no_effect"]}, "note": {"type": "string"}}},
        "Operation": {"type": "object", "required": ["tenant_id", "spec", "state"], "properties": {
            "tenant_id": {"type": "string"}, "spec": {"type": "object"}, "state": {"type": "string"}}},
        "OperationHistory": {"type": "object", "required": ["operation", "transitions"], "properties": {
            "operation": {"$ref": "#/components/schemas/Operation"}, "transitions": {"type": "array", "items": {"type": "object", "required": ["to", "cause", "at_ms", "revision", "trace_id"], "properties": {
                "from": {"type": ["string", "null"]}, "to": {"type": "string"}, "cause": {"type": "string"}, "reason": {"type": ["string", "null"]},
                "at_ms": {"type": "integer"}, "revision": {"type": "integer"}, "trace_id": {"type": "string"}}}}}},
        "WorkScope": {"type": "object", "additionalProperties": false, "required": ["actions"], "properties": {
            "actions": {"type": "array", "minItems": 1, "maxItems": 64, "items": {"type": "string", "minLength": 1, "maxLength": 128}},
            "devices": {"type": "array", "maxItems": 64, "items": {"type": "string", "minLength": 1, "maxLength": 128}, "description": "device ids or names"},
            "cost_ceiling": {"type": ["integer", "null"], "minimum": 0}}},
        "CreateWork": {"type": "object", "additionalProperties": false, "required": ["id", "title", "owner", "scope"], "properties": {
            "id": {"type": "string", "pattern": "^[A-Za-z0-9._:-]{1,64}$"}, "title": {"type": "string", "minLength": 1, "maxLength": 200},
            "owner": {"type": "string", "minLength": 1, "maxLength": 200}, "scope": {"$ref": "#/components/schemas/WorkScope"}}},
        "ReviseWork": {"type": "object", "additionalProperties": false, "properties": {
            "expected_revision": {"type": ["integer", "null"], "minimum": 1}, "title": {"type": ["string", "null"], "minLength": 1, "maxLength": 200},
            "owner": {"type": ["string", "null"], "minLength": 1, "maxLength": 200}, "scope": {"$ref": "#/components/schemas/WorkScope"},
            "state": {"enum": ["completed", "cancelled", null]}, "note": {"type": ["string", "null"], "maxLength": 500}}},
        "WorkItem": {"type": "object", "required": ["id", "revision", "state", "scope", "operations"], "properties": {
            "id": {"type": "string"}, "revision": {"type": "integer"}, "state": {"enum": ["open", "completed", "cancelled"]},
            "title": {"type": "string"}, "owner": {"type": "string"}, "scope": {"type": "object"}, "cost_used": {"type": "integer"},
            "operations": {"type": "array", "items": {"type": "string"}}}},
        "TenantStorage": {"type": "object", "required": ["operations", "bindings", "idempotency_keys", "tokens", "enrollments", "audit_records", "evidence_bytes", "state_bytes", "retention_horizon_s"], "properties": {
            "operations": {"type": "integer"}, "operations_live": {"type": "integer"}, "bindings": {"type": "integer"},
            "idempotency_keys": {"type": "integer"}, "transitions": {"type": "integer"}, "tokens": {"type": "integer"},
            "enrollments": {"type": "integer"}, "work_items": {"type": "integer"}, "proposals": {"type": "integer"},
            "audit_records": {"type": "integer"}, "evidence_blobs": {"type": "integer"}, "evidence_bytes": {"type": "integer"},
            "state_bytes": {"type": "integer"}, "retention_horizon_s": {"type": "integer"}, "next_retention_ms": {"type": ["integer", "null"]}}},
        "CatalogDiff": {"type": "object", "required": ["from", "to", "added", "removed", "changed"], "properties": {
            "from": {"type": "integer"}, "to": {"type": "integer"},
            "added": {"type": "array", "items": {"type": "string"}}, "removed": {"type": "array", "items": {"type": "string"}},
            "changed": {"type": "array", "items": {"type": "object", "required": ["id", "fields"], "properties": {
                "id": {"type": "string"}, "fields": {"type": "array", "items": {"type": "string"}}}}}}},
        "WorkList": {"type": "object", "required": ["work"], "properties": {"work": {"type": "array", "items": {"$ref": "#/components/schemas/WorkItem"}},
            "next_cursor": {"type": ["string", "null"]}}},
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
        "Object": {"type": "object"},
        "AuditPage": {"type": "object", "required": ["records"], "properties": {
            "records": {"type": "array", "items": {"$ref": "#/components/schemas/AuditRecord"}},
            "next_cursor": {"type": ["integer", "null"]}}},
        "CatalogList": {"type": "object", "properties": {"catalogs": {"type": "array", "items": {"type": "object"}}}},
        "CatalogVersion": {"type": "object", "required": ["version", "catalog"], "properties": {"version": {"type": "integer"}, "catalog": {"type": "object"}}},
        "CatalogDocument": {"type": "object", "additionalProperties": false, "required": ["actions"], "properties": {"actions": {"type": "array", "maxItems": 1000, "items": {
            "type": "object", "additionalProperties": false, "required": ["id", "title", "input_schema", "risk", "execution"], "properties": {
                "id": {"type": "string", "pattern": "^[a-z][a-z0-9_.-]{0,63}$"}, "title": {"type": "string"}, "description": {"type": "string"},
                "input_schema": {"type": "object"}, "output_schema": {"type": ["object", "null"]},
                "risk": {"enum": ["low", "medium", "high"]}, "execution": {"oneOf": [{"enum": ["read", "operation", "task"]}, {"type": "object", "additionalProperties": false, "required": ["builtin"], "properties": {"builtin": {"enum": writ_api::catalog::BUILTIN_HANDLERS}}},
                    {"type": "object", "additionalProperties": false, "required": ["upstream"], "properties": {"upstream": {"type": "string", "pattern": "^[a-z][a-z0-9_-]{0,31}/[!-.0-~]{1,128}$"}}},
                    {"type": "object", "additionalProperties": false, "required": ["upstream_operation"], "properties": {"upstream_operation": {"type": "string", "pattern": "^[a-z][a-z0-9_-]{0,31}/[!-.0-~]{1,128}$"}}}]},
                "dry_run": {"type": "boolean"}, "idempotent": {"type": "boolean"}, "device_class": {"type": ["string", "null"]},
                "cost_units": {"type": "integer", "minimum": 0}, "scope": {"type": ["string", "null"]}}}}}},
        "UpstreamBody": {"type": "object", "additionalProperties": false, "properties": {
            "name": {"type": "string", "pattern": "^[a-z][a-z0-9_-]{0,31}$"},
            "url": {"type": "string", "maxLength": 2048, "description": "https://…, or http:// on a literal loopback address"},
            "auth": {"type": "string", "maxLength": 512, "description": "none, env:WRIT_UPSTREAM_<TENANT>__… or file:/…/<tenant>/upstream-… (the tenant's own) — a reference, never the token"},
            "oauth": {"type": "object", "additionalProperties": false, "required": ["token_url", "client_id", "secret"],
                "description": "OAuth 2.0 client credentials instead of auth (RFC 6749 §4.4)", "properties": {
                "token_url": {"type": "string", "maxLength": 2048}, "client_id": {"type": "string", "pattern": "^[A-Za-z0-9._~-]{1,256}$"},
                "secret": {"type": "string", "maxLength": 512, "description": "env:WRIT_UPSTREAM_<TENANT>__… or file:/…/<tenant>/upstream-… (the tenant's own) — a reference, never the secret"},
                "scope": {"type": "string", "maxLength": 1024}}},
            "ca_pem": {"type": "string", "maxLength": 65536},
            "protocol": {"enum": ["2026-07-28", "2025-11-25", "auto"]},
            "connect_timeout_ms": {"type": "integer", "minimum": 100, "maximum": 30000},
            "call_timeout_ms": {"type": "integer", "minimum": 100, "maximum": 300000}}},
        "Upstream": {"type": "object", "required": ["name", "spec", "config_version", "fuses"]},
        "UpstreamList": {"type": "object", "required": ["upstreams"], "properties": {"upstreams": {"type": "array", "items": {"type": "object"}}}},
        "UpstreamView": {"type": "object", "required": ["upstream"], "properties": {"upstream": {"$ref": "#/components/schemas/Upstream"}, "pending_diff": {"type": ["object", "null"]}}},
        "SyncReport": {"type": "object", "required": ["observed_digest", "tools", "diff", "pending"]},
        "ApproveUpstream": {"type": "object", "additionalProperties": false, "required": ["digest"], "properties": {"digest": {"type": "string"}}},
        "ExecutorList": {"type": "object", "properties": {"executors": {"type": "array", "items": {"type": "object"}}}},
        "CreateEnrollment": {"type": "object", "additionalProperties": false, "required": ["site"], "properties": {
            "site": {"type": "string"}, "devices": {"type": "array", "items": {"type": "string"}},
            "ttl_s": {"type": ["integer", "null"], "minimum": 1, "maximum": 604800}}},
        "CreatedEnrollment": {"type": "object", "required": ["token", "enrollment"], "properties": {"token": {"type": "string"}, "enrollment": {"type": "object"}}},
        "Enroll": {"type": "object", "additionalProperties": false, "required": ["token", "csr"], "properties": {
            "token": {"type": "string"}, "csr": {"type": "string", "description": "PEM CERTIFICATE REQUEST"}}},
        "Renew": {"type": "object", "additionalProperties": false, "required": ["certificate", "renewal"], "properties": {
            "certificate": {"type": "string", "maxLength": 8192, "description": "PEM: the executor's current certificate"},
            "renewal": {"type": "object", "additionalProperties": false, "required": ["csr", "issued_at_ms", "proof"], "properties": {
                "csr": {"type": "string", "maxLength": 8192, "description": "PEM CERTIFICATE REQUEST of the new key"},
                "issued_at_ms": {"type": "integer", "minimum": 0},
                "proof": {"type": "string", "maxLength": 1024, "description": "base64 signature of the current key over writ/executor-renew/v1\\0<fingerprint>\\0<issued_at_ms>\\0<sha256 of the CSR DER, hex>"}}}}},
        "EnrollResponse": {"type": "object", "required": ["executor_id", "certificate", "ca_certificate", "fingerprint", "serial"], "properties": {
            "executor_id": {"type": "string"}, "tenant_id": {"type": "string"}, "site_id": {"type": "string"},
            "device_ids": {"type": "array", "items": {"type": "string"}}, "certificate": {"type": "string"},
            "ca_certificate": {"type": "string"}, "fingerprint": {"type": "string"}, "serial": {"type": "string"},
            "not_after_ms": {"type": "integer"}}},
        "IssueToken": {"type": "object", "additionalProperties": false, "required": ["principal"], "properties": {
            "principal": {"type": "string"}, "scopes": {"type": "array", "items": {"type": "string"}},
            "ttl_s": {"type": ["integer", "null"], "minimum": 0}, "audience": {"type": ["string", "null"]}}},
        "DelegateToken": {"type": "object", "additionalProperties": false, "properties": {
            "principal": {"type": ["string", "null"]}, "scopes": {"type": "array", "items": {"type": "string"}},
            "ttl_s": {"type": ["integer", "null"], "minimum": 0}, "audience": {"type": ["string", "null"]}}},
        "IssuedToken": {"type": "object", "required": ["token", "jti", "tenant_id", "principal_id", "scopes", "expires_at_ms"], "properties": {
            "token": {"type": "string"}, "jti": {"type": "string"}, "tenant_id": {"type": "string"},
            "principal_id": {"type": "string"}, "scopes": {"type": "array", "items": {"type": "string"}},
            "audience": {"type": "string"}, "expires_at_ms": {"type": "integer"},
            "parent_jti": {"type": ["string", "null"]}, "depth": {"type": "integer"}, "revision": {"type": "integer"}}},
        "Token": {"type": "object"},
        "RevokedToken": {"type": "object", "properties": {"jti": {"type": "string"}, "cascade": {"type": "array", "items": {"type": "string"}}, "revision": {"type": "integer"}}},
        "InspectToken": {"type": "object", "additionalProperties": false, "required": ["token"], "properties": {
            "token": {"type": "string", "maxLength": 16384}, "audience": {"type": ["string", "null"], "maxLength": 512}}},
        "TokenInspection": {"type": "object", "required": ["valid"], "properties": {"valid": {"type": "boolean"}, "reason": {"type": ["string", "null"]}}},
        "TenantIssuer": {"type": "object", "additionalProperties": false, "required": ["issuer", "audience", "jwks"], "properties": {
            "issuer": {"type": "string"}, "audience": {"type": "string"}, "jwks": {"type": "string", "description": "JWKS JSON text"}}},
        "TokenExchange": {"type": "object", "additionalProperties": false, "required": ["tenant", "subject_token"], "properties": {
            "tenant": {"type": "string"}, "subject_token": {"type": "string"},
            "scopes": {"type": "array", "items": {"type": "string"}}, "ttl_s": {"type": "integer", "minimum": 0}}},
        "IssuerSource": {"type": "object", "additionalProperties": false, "required": ["issuer", "audience"], "properties": {
            "issuer": {"type": "string", "maxLength": 512}, "audience": {"type": "string", "maxLength": 512},
            "allow_private_network": {"type": "boolean", "default": false}}},
        "IssuerSourceView": {"type": "object", "required": ["tenant_id", "spec", "jwks_uri", "revision"], "properties": {
            "tenant_id": {"type": "string"}, "spec": {"$ref": "#/components/schemas/IssuerSource"},
            "jwks_uri": {"type": "string"}, "revision": {"type": "integer"}}},
        "IssuerList": {"type": "object", "properties": {"issuers": {"type": "array", "items": {"type": "object"}}}},
        "RemoveIssuer": {"type": "object", "additionalProperties": false, "required": ["issuer"], "properties": {"issuer": {"type": "string"}}},
        "OAuthClientRequest": {"type": "object", "additionalProperties": false, "required": ["client_id", "principal"], "properties": {
            "client_id": {"type": "string", "maxLength": 512}, "principal": {"type": "string"},
            "scopes": {"type": "array", "items": {"type": "string"}}, "redirect_uris": {"type": "array", "maxItems": 8, "items": {"type": "string"}},
            "jwks": {"type": "string"}, "name": {"type": "string", "maxLength": 512}, "allow_private_network": {"type": "boolean", "default": false}}},
        "OAuthClient": {"type": "object", "required": ["client_id", "principal_id"], "properties": {
            "client_id": {"type": "string"}, "principal_id": {"type": "string"}, "scopes": {"type": "array", "items": {"type": "string"}},
            "redirect_uris": {"type": "array", "items": {"type": "string"}}, "jwks": {"type": ["string", "null"]}, "name": {"type": ["string", "null"]}}},
        "OAuthClientList": {"type": "object", "properties": {"clients": {"type": "array", "items": {"$ref": "#/components/schemas/OAuthClient"}}}},
        "RemoveOAuthClient": {"type": "object", "additionalProperties": false, "required": ["client_id"], "properties": {"client_id": {"type": "string"}}},
        "OAuthSettings": {"type": "object", "additionalProperties": false, "properties": {
            "delegation_depth_max": {"type": "integer", "minimum": 0, "maximum": 8}, "principal_claim": {"type": ["string", "null"], "maxLength": 64}}},
        "AuthRequestList": {"type": "object", "properties": {"requests": {"type": "array", "items": {"type": "object"}}}},
        "OAuthDecision": {"type": "object"},
        "OAuthGrant": {"type": "object", "required": ["step"], "properties": {"step": {"type": "string", "enum": ["authorize", "code", "token"]}}},
        "OAuthGrantAnswer": {"type": "object", "properties": {"request_id": {"type": ["string", "null"]}, "code": {"type": ["string", "null"]},
            "revision": {"type": "integer", "minimum": 0}, "token": {"type": ["object", "null"]}, "refresh_token": {"type": ["string", "null"]}}},
        "RevokeIssuerToken": {"type": "object", "additionalProperties": false, "required": ["issuer", "jti"], "properties": {
            "issuer": {"type": "string"}, "jti": {"type": "string", "minLength": 1, "maxLength": 256}}},
        "IssuerTokenRevocation": {"type": "object", "required": ["issuer", "jti", "until_ms"], "properties": {
            "issuer": {"type": "string"}, "jti": {"type": "string"}, "until_ms": {"type": "integer"}}},
        "RevokeCertificate": {"type": "object", "additionalProperties": false, "required": ["serial", "identity", "not_after_ms"], "properties": {
            "serial": {"type": "string", "description": "hex, as `writ pki list` prints it"}, "identity": {"type": "string", "description": "role:id, e.g. edge:a"},
            "not_after_ms": {"type": "integer", "minimum": 0}}},
        "Credentials": {"type": "object", "required": ["signing_keys", "retired_signing_keys", "revoked_certificates"], "properties": {
            "signing_keys": {"type": "array", "items": {"type": "string"}}, "retired_signing_keys": {"type": "object"},
            "revoked_certificates": {"type": "array", "items": {"type": "object"}}, "tenant": {"type": "object"}}},
        "AnonymousAccess": {"type": "object", "additionalProperties": false, "required": ["principal"], "properties": {
            "principal": {"type": "string", "maxLength": 64}}},
        "ClusterStatus": {"type": "object"}
    })
}

#[cfg(test)]
mod tests {
    use super::document;
    use serde_json::Value;

    fn refs(v: &Value, out: &mut Vec<String>) {
        match v {
            Value::Object(m) => {
                if let Some(Value::String(r)) = m.get("$ref") {
                    out.push(r.clone());
                }
                m.values().for_each(|x| refs(x, out));
            }
            Value::Array(a) => a.iter().for_each(|x| refs(x, out)),
            _ => {}
        }
    }

    #[test]
    fn every_reference_resolves() {
        let doc = document();
        let mut all = Vec::new();
        refs(&doc, &mut all);
        assert!(all.len() > 20);
        for r in all {
            let pointer = r.strip_prefix('#').expect("local reference");
            assert!(doc.pointer(pointer).is_some(), "unresolved {r}");
        }
    }
}
