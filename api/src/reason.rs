//! The stable reason-code catalog (SPEC D11): every rejection anywhere in Writ carries one.
//!
//! Numbers are never reused or renumbered: a new reason is appended with the next number.
//! `docs/reasons.md` is generated from [`ReasonCode::ALL`] and pinned by a test.

use serde::{Deserialize, Serialize};

macro_rules! reason_catalog {
    ($( $variant:ident = $num:literal, $http:literal, $rpc:literal, $desc:literal; )*) => {
        /// A stable, machine-readable reason for a rejection.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[allow(non_camel_case_types)]
        pub enum ReasonCode { $( $variant, )* }

        impl ReasonCode {
            /// Every reason, in catalog (number) order.
            pub const ALL: &'static [ReasonCode] = &[ $( ReasonCode::$variant, )* ];

            /// The code string clients match on (e.g. `"TENANT_SUSPENDED"`).
            pub fn as_str(self) -> &'static str {
                match self { $( ReasonCode::$variant => stringify!($variant), )* }
            }

            /// The stable number; never reused.
            pub fn number(self) -> u16 {
                match self { $( ReasonCode::$variant => $num, )* }
            }

            /// The HTTP status this reason maps to at HTTP boundaries.
            pub fn http_status(self) -> u16 {
                match self { $( ReasonCode::$variant => $http, )* }
            }

            /// The JSON-RPC error code this reason maps to at the MCP boundary.
            pub fn jsonrpc_code(self) -> i32 {
                match self { $( ReasonCode::$variant => $rpc, )* }
            }

            /// One line saying what the reason means.
            pub fn description(self) -> &'static str {
                match self { $( ReasonCode::$variant => $desc, )* }
            }

            /// Parses a code string back into a reason.
            pub fn parse(code: &str) -> Option<ReasonCode> {
                match code { $( stringify!($variant) => Some(ReasonCode::$variant), )* _ => None }
            }
        }
    };
}

reason_catalog! {
    AUTH_TOKEN_MISSING = 1, 401, -32001, "No bearer token was presented.";
    AUTH_TOKEN_INVALID = 2, 401, -32001, "The bearer token is malformed, has a bad signature, or is not for this audience.";
    AUTH_TOKEN_EXPIRED = 3, 401, -32001, "The bearer token has expired.";
    AUTH_TOKEN_REVOKED = 4, 401, -32001, "The bearer token (or an ancestor in its delegation chain) was revoked.";
    TENANT_SUSPENDED = 5, 403, -32003, "The tenant is suspended; nothing is allowed until it is resumed.";
    APP_SCOPE_FORBIDDEN = 6, 403, -32003, "The principal lacks a scope the operation needs.";
    APP_SCOPE_REVOKED = 7, 403, -32003, "A scope the operation needs was revoked.";
    DELEGATION_DEPTH_EXCEEDED = 8, 403, -32003, "Minting this child token would exceed the delegation depth limit.";
    QUOTA_EXCEEDED = 9, 429, -32005, "A request, operation, cost or concurrency quota is exhausted; retry after the hint.";
    COST_CEILING_EXCEEDED = 10, 422, -32006, "The operation's cost exceeds its ceiling.";
    IDEMPOTENCY_KEY_REUSED = 11, 409, -32009, "The idempotency key was already used with a different payload.";
    VERIFY_REQUIRED = 12, 428, -32007, "The action requires a proposal (dry-run and verify) before execution.";
    PROPOSAL_EXPIRED = 13, 410, -32007, "The proposal reference has expired.";
    DEADLINE_EXCEEDED = 14, 408, -32008, "The operation's deadline passed before it could start.";
    DEVICE_RESERVED = 15, 409, -32009, "The device is reserved by another operation; retry after the hint.";
    PRECONDITION_FAILED = 16, 412, -32009, "A local-state precondition does not hold.";
    STALE_REVISION = 17, 409, -32009, "The work item has moved past the revision the request was made against.";
    UNKNOWN_EFFECT_UNRESOLVED = 18, 409, -32009, "A prior attempt's effect is unknown and must be reconciled first.";
    EXECUTOR_UNAVAILABLE = 19, 503, -32010, "No enrolled executor can take the operation.";
    LEDGER_UNAVAILABLE = 20, 503, -32010, "The ledger could not be reached or the commit outcome is uncertain; nothing was done.";
    INPUT_INVALID = 21, 400, -32602, "The request body or arguments are malformed or fail validation.";
    OUTPUT_INVALID = 22, 502, -32603, "A handler produced output that fails its declared schema.";
    PAYLOAD_TOO_LARGE = 23, 413, -32600, "The request body exceeds the size limit.";
    TENANT_NOT_FOUND = 24, 404, -32602, "No such tenant.";
    TENANT_ALREADY_EXISTS = 25, 409, -32009, "A tenant with this name already exists.";
    TENANT_STATE_CONFLICT = 26, 409, -32009, "The tenant is not in a state that allows this change.";
    NOT_FOUND = 27, 404, -32601, "No such route or resource.";
    METHOD_NOT_ALLOWED = 28, 405, -32601, "The HTTP method is not allowed on this route.";
    REVISION_COMPACTED = 29, 410, -32602, "The requested revision is no longer retained on this node; resume from a later one.";
    CLUSTER_CHANGE_INVALID = 30, 400, -32602, "The membership change is not valid for the current cluster.";
    INTERNAL = 31, 500, -32603, "An internal error; the cause is in the server log.";
    PRINCIPAL_NOT_FOUND = 32, 404, -32602, "No such principal in this tenant.";
    PRINCIPAL_ALREADY_EXISTS = 33, 409, -32009, "A principal with this name already exists in the tenant.";
    PRINCIPAL_STATE_CONFLICT = 34, 409, -32009, "The principal is not in a state that allows this change.";
    TOKEN_NOT_FOUND = 35, 404, -32602, "No token with this id in the tenant.";
    TOKEN_ALREADY_REVOKED = 36, 409, -32009, "The token is already revoked.";
    SITE_NOT_FOUND = 37, 404, -32602, "No such site in this tenant.";
    SITE_ALREADY_EXISTS = 38, 409, -32009, "A site with this name already exists in the tenant.";
    DEVICE_NOT_FOUND = 39, 404, -32602, "No such device in this tenant.";
    DEVICE_ALREADY_EXISTS = 40, 409, -32009, "A device with this name already exists in the tenant.";
    AUTH_TOKEN_NOT_YET_VALID = 41, 401, -32001, "The bearer token's not-before time has not been reached.";
    SIGNING_KEY_CONFLICT = 42, 409, -32009, "A different signing key is already registered under this key id.";
    ISSUER_CONFLICT = 43, 409, -32009, "The token issuer is reserved or registered for another tenant.";
    ISSUER_NOT_FOUND = 44, 404, -32602, "No such token issuer registered for this tenant.";
    CATALOG_INVALID = 45, 400, -32602, "The catalog document is malformed or breaks a field rule.";
    CATALOG_SCHEMA_INVALID = 46, 400, -32602, "An action schema is not valid JSON Schema 2020-12.";
    CATALOG_REF_REMOTE = 47, 400, -32602, "A schema reference points outside the catalog (network or file); only local references are allowed.";
    CATALOG_REF_UNRESOLVED = 48, 400, -32602, "A local schema reference does not resolve.";
    CATALOG_DUPLICATE_ACTION = 49, 400, -32602, "Two actions of the catalog have the same id.";
    CATALOG_TOO_LARGE = 50, 413, -32602, "The catalog exceeds the action-count or byte ceiling.";
    CATALOG_NOT_FOUND = 51, 404, -32602, "The tenant has no such catalog version.";
    ENROLLMENT_TOKEN_INVALID = 52, 401, -32001, "The enrollment token is malformed or unknown.";
    ENROLLMENT_TOKEN_EXPIRED = 53, 401, -32001, "The enrollment token has expired.";
    ENROLLMENT_TOKEN_USED = 54, 409, -32009, "The enrollment token was already used; enrollment tokens work once.";
    ENROLLMENT_CSR_INVALID = 55, 400, -32602, "The certificate signing request is malformed, unsigned or uses an unsupported key.";
    EXECUTOR_NOT_FOUND = 56, 404, -32602, "No such executor in this tenant.";
    EXECUTOR_STATE_CONFLICT = 57, 409, -32009, "The executor is not in a state that allows this change.";
    TOOL_NOT_FOUND = 58, 404, -32602, "No such tool for this principal (an action it may not call is reported the same way).";
    REQUEST_STATE_INVALID = 59, 400, -32602, "The requestState or cursor is tampered, expired, or bound to another principal or request.";
    RESOURCE_NOT_FOUND = 60, 404, -32602, "No such resource for this principal.";
    PROMPT_NOT_FOUND = 61, 404, -32602, "No such prompt for this principal.";
    CLIENT_CAPABILITY_MISSING = 62, 400, -32021, "The request needs a client capability the client did not declare.";
    PROTOCOL_HEADER_MISMATCH = 63, 400, -32020, "A transport header is missing or does not match the request body.";
    PROTOCOL_VERSION_UNSUPPORTED = 64, 400, -32022, "The requested MCP protocol version is not served.";
    OPERATION_NOT_FOUND = 65, 404, -32602, "No such operation in this tenant.";
    OPERATION_STATE_CONFLICT = 66, 409, -32009, "The operation is not in a state that allows this step.";
    FENCING_TOKEN_STALE = 67, 409, -32009, "The fencing token is not the device's current one: the command is stale.";
    OBSERVATION_REQUIRED = 68, 409, -32009, "Acceptance needs an observation by another principal than the requester.";
    EXECUTOR_CERT_REFUSED = 69, 401, -32001, "The executor certificate is unknown, self-signed, expired or not issued by a Writ executor CA.";
    EXECUTOR_REVOKED = 70, 403, -32003, "The executor was revoked; its certificate is no longer accepted.";
    PROPOSAL_INVALID = 71, 400, -32602, "The proposal was used, never made, or made for another call or principal.";
    PEER_UNAUTHENTICATED = 72, 401, -32001, "The route needs a client certificate from the cluster CA naming a Writ role (node or edge); none was presented.";
    PEER_FORBIDDEN = 73, 403, -32003, "The caller's role (from its certificate) may not call this route, submit this command or run this query.";
    HEADER_TOO_LARGE = 74, 431, -32600, "A request header (Mcp-Method, Mcp-Name, …) exceeds its size limit.";
    CREDENTIAL_RETIRED = 75, 403, -32003, "The signing key, executor CA or certificate was retired or revoked: it is refused, and cannot be registered or retired again.";
    ORIGIN_NOT_ALLOWED = 76, 403, -32003, "The request's Origin is not one of the tenant's allowed origins (settings.allowed_origins).";
    WORK_NOT_FOUND = 77, 404, -32602, "No such work item in this tenant.";
    WORK_ALREADY_EXISTS = 78, 409, -32009, "A work item with this id already exists in the tenant.";
    WORK_STATE_CONFLICT = 79, 409, -32009, "The work item is closed (completed or cancelled): it takes no operations or changes.";
    WORK_SCOPE_EXCEEDED = 80, 403, -32003, "The action or device is outside the work item's approved scope.";
    TENANT_DELETED = 81, 410, -32003, "The tenant was deleted: its tokens, executors and changes are refused; its data waits for purge.";
    EVIDENCE_NOT_FOUND = 82, 404, -32602, "No such evidence blob of this operation in the tenant.";
    LEDGER_VERSION_GATED = 83, 409, -32009, "A cluster member runs an older ledger version that cannot read this command: upgrade every node first (writ admin cluster version).";
    STORAGE_FULL = 84, 507, -32010, "A ledger node is short of disk space (its storage alarm is on): writes are refused, reads go on; retry once space is freed.";
    UPSTREAM_NOT_FOUND = 85, 404, -32602, "No such upstream MCP server in this tenant.";
    UPSTREAM_ALREADY_EXISTS = 86, 409, -32009, "An upstream with this name already exists in the tenant (use `upstream set` to change it).";
    UPSTREAM_INVALID = 87, 400, -32602, "The upstream's configuration is invalid (name, URL, credential reference, CA or timeouts); the message names the field.";
    UPSTREAM_UNAVAILABLE = 88, 503, -32010, "The upstream's fuse is open after consecutive failures: calls fail fast until a probe succeeds or its configuration changes.";
    UPSTREAM_FAILED = 89, 502, -32603, "The call to the upstream MCP server failed (connect, timeout, protocol or its own error); counted by its fuse.";
    UPSTREAM_TOOL_NOT_PINNED = 90, 409, -32009, "The upstream tool is not in the upstream's approved (pinned) tool set: sync and approve it first.";
    UPSTREAM_DIGEST_MISMATCH = 91, 409, -32009, "The upstream is not as the request saw it: nothing is pending to approve, the pending tool set has another digest than the one named, or a fuse record names an older configuration. Sync again and approve what was shown.";
    SESSION_NOT_FOUND = 92, 404, -32001, "The Mcp-Session-Id (2025 wire) is unknown, forged, expired or ended, or was opened by another tenant, principal or credential: initialize a new session.";
    SESSION_INVALID = 93, 400, -32600, "The 2025 session wire was misused: a request without Mcp-Session-Id, initialize inside a session, an oversized clientInfo or capabilities, or a response nothing waits for.";
    SESSION_PEER_UNREACHABLE = 94, 503, -32010, "The edge replica whose call waits for this client response (2025 wire) could not be reached: the call times out and can be made again.";
    ISSUER_DISCOVERY_FAILED = 95, 502, -32603, "A tenant issuer's discovery document or key set could not be fetched or was refused: unreachable, slow, too large, redirected, at a private address the operator did not allow, or not naming the issuer.";
    AUTH_TENANT_MISMATCH = 96, 401, -32001, "The bearer token belongs to another tenant than the tenant-scoped MCP URL it was presented at.";
    OAUTH_CLIENT_UNKNOWN = 97, 401, -32001, "The OAuth client is not registered with this tenant's authorization server, or its assertion (private_key_jwt) did not verify against its registered keys.";
    OAUTH_GRANT_INVALID = 98, 400, -32602, "The authorization code or refresh token is unknown, expired, already used, or belongs to another client or redirect URI.";
    OAUTH_PKCE_INVALID = 99, 400, -32602, "PKCE is missing or wrong: only S256 challenges are accepted, and the verifier must match the request's challenge.";
    OAUTH_REDIRECT_INVALID = 100, 400, -32602, "The redirect URI is not one the client registered (exact match).";
    OAUTH_RESOURCE_INVALID = 101, 400, -32602, "The resource (RFC 8707) is not this tenant's MCP URL.";
    OAUTH_ACCESS_DENIED = 102, 403, -32003, "An operator denied the authorization request, or it is not approved yet.";
    OAUTH_CLIENT_METADATA_FAILED = 103, 502, -32603, "A client ID metadata document could not be fetched or was refused: unreachable, slow, too large, redirected, at a private address the operator did not allow, or not naming its own URL as client_id.";
    OPERATOR_SESSION_INVALID = 104, 401, -32001, "The operator session is unknown, expired, signed out, or its operator was removed: sign in again.";
    OPERATOR_ROLE_REQUIRED = 105, 403, -32003, "The operator's role does not allow this act (viewer reads; operator configures and cancels; approver decides operations; admin does everything).";
    OPERATOR_SCOPE_VIOLATION = 106, 403, -32003, "The act is outside the operator's scope: another tenant than the operator's, the cluster, or naming another person as the one who acts.";
    OPERATOR_NOT_FOUND = 107, 404, -32602, "No such operator.";
    OPERATOR_SIGN_IN_FAILED = 108, 401, -32001, "Console sign-in failed: no provider is set, the provider refused or could not be reached, the answer did not verify (state, nonce, signature, issuer, client), or no operator signs in as that subject.";
    CONSOLE_REQUEST_FORGED = 109, 403, -32003, "A console change without its session's CSRF token, or sent from another origin: nothing was changed.";
}

impl std::fmt::Display for ReasonCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Renders `docs/reasons.md` from the catalog.
pub fn reasons_markdown() -> String {
    let mut out = String::from(
        "# Reason codes\n\n\
         Generated from `api/src/reason.rs` (`make docs`); do not edit by hand.\n\
         Numbers are stable and never reused.\n\n\
         | # | code | HTTP | JSON-RPC | meaning |\n|---|---|---|---|---|\n",
    );
    for r in ReasonCode::ALL {
        out.push_str(&format!(
            "| {} | `{}` | {} | {} | {} |\n",
            r.number(),
            r.as_str(),
            r.http_status(),
            r.jsonrpc_code(),
            r.description()
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_unique_and_dense() {
        for (i, r) in ReasonCode::ALL.iter().enumerate() {
            assert_eq!(r.number() as usize, i + 1, "{r} is out of order");
            assert_eq!(ReasonCode::parse(r.as_str()), Some(*r));
        }
    }

    #[test]
    fn reasons_doc_is_current() {
        // Runtime, not `env!`: a test binary shared through a common target dir may have been
        // compiled in another checkout.
        let path = format!("{}/../docs/reasons.md", std::env::var("CARGO_MANIFEST_DIR").expect("run by cargo"));
        let want = reasons_markdown();
        if std::env::var_os("WRIT_BLESS").is_some() {
            std::fs::write(&path, &want).expect("write docs/reasons.md");
        }
        let have = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(have == want, "docs/reasons.md is stale: run `make docs`");
    }
}
