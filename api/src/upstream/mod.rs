//! Upstream MCP servers (SPEC F1; issue "Federation"): a tenant's own MCP servers as governed
//! tool sources. The ledger holds each upstream's configuration, the tool set an operator
//! approved (pinned: names, schemas, descriptions and annotations, digested), the tool set last
//! observed when it differs (the pending diff), and every edge's fuse. Catalog actions name an
//! upstream tool as their execution (`{"upstream": "<upstream>/<tool>"}`); edges call it only
//! while it is pinned, validating against the pinned schemas.
//!
//! Credentials are never stored: an upstream's `auth` is a *reference* (`env:WRIT_UPSTREAM_<TENANT>__…`
//! or `file:/…/<tenant>/upstream-…`, the tenant's own: [`UpstreamAuthV1::owned_by`]) resolved where
//! the call is made (the edge, and the node serving the admin API for `sync`), so events,
//! snapshots, backups and audit hold only the reference.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::reason::ReasonCode;
use crate::rejection::Rejection;

/// Most upstreams one tenant may configure.
pub const UPSTREAMS_PER_TENANT_MAX: usize = 32;
/// Most tools one upstream's pinned (or pending) set may hold.
pub const UPSTREAM_TOOLS_MAX: usize = 256;
/// Largest canonical tool set (bytes): names, descriptions, schemas and annotations.
pub const UPSTREAM_TOOLS_BYTES_MAX: usize = 1024 * 1024;
pub const UPSTREAM_URL_BYTES_MAX: usize = 2048;
/// Largest CA bundle an upstream may name (PEM text).
pub const UPSTREAM_CA_BYTES_MAX: usize = 64 * 1024;
/// Longest credential reference (`env:VAR`, `file:PATH`).
pub const UPSTREAM_AUTH_REF_BYTES_MAX: usize = 512;
/// What an `env:` reference's variable name starts with, and a `file:` reference's file name:
/// a reference can only name a credential put there for upstreams — never another secret of
/// the process or host (the operator token, a seal key, a private key), which would otherwise
/// leave as a bearer token to whatever URL the upstream names.
pub const UPSTREAM_ENV_PREFIX: &str = "WRIT_UPSTREAM_";
pub const UPSTREAM_FILE_PREFIX: &str = "upstream-";
/// Connect timeout bounds and default (ms).
pub const CONNECT_TIMEOUT_MS_MIN: u64 = 100;
pub const CONNECT_TIMEOUT_MS_MAX: u64 = 30_000;
pub const CONNECT_TIMEOUT_MS_DEFAULT: u64 = 5_000;
/// Call timeout bounds and default (ms); a call also ends at the request's own deadline.
pub const CALL_TIMEOUT_MS_MIN: u64 = 100;
pub const CALL_TIMEOUT_MS_MAX: u64 = 300_000;
pub const CALL_TIMEOUT_MS_DEFAULT: u64 = 30_000;
/// Consecutive failures that open an edge's fuse of an upstream (Nimi case 9).
pub const FUSE_FAILURES: u32 = 3;
/// The first half-open probe waits this long after the fuse opens; each failed probe doubles
/// the wait, up to [`FUSE_BACKOFF_MAX_MS`] (each wait jittered by up to a fifth).
pub const FUSE_BACKOFF_MIN_MS: u64 = 1_000;
pub const FUSE_BACKOFF_MAX_MS: u64 = 60_000;
/// Largest result an upstream call may return (bytes of JSON); more is `OUTPUT_INVALID`.
pub const UPSTREAM_RESULT_BYTES_MAX: usize = 1024 * 1024;
/// Fuses kept per upstream: beyond this, the oldest closed one makes room.
pub const FUSES_KEPT: usize = 64;
/// Longest fuse reason kept in the ledger.
pub const FUSE_REASON_BYTES_MAX: usize = 512;

/// The MCP protocol era spoken to the upstream: the stateless 2026-07-28 wire, the 2025-11-25
/// wire (`initialize`, session id), or `auto` (discover first, fall back to `initialize`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UpstreamProtocol {
    #[serde(rename = "2026-07-28")]
    V2026_07_28,
    #[serde(rename = "2025-11-25")]
    V2025_11_25,
    Auto,
}

impl UpstreamProtocol {
    pub fn parse(s: &str) -> Result<UpstreamProtocol, Rejection> {
        match s {
            "2026-07-28" => Ok(UpstreamProtocol::V2026_07_28),
            "2025-11-25" => Ok(UpstreamProtocol::V2025_11_25),
            "auto" => Ok(UpstreamProtocol::Auto),
            other => Err(invalid(format!("protocol '{other}' is not one of 2026-07-28, 2025-11-25, auto"))),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            UpstreamProtocol::V2026_07_28 => "2026-07-28",
            UpstreamProtocol::V2025_11_25 => "2025-11-25",
            UpstreamProtocol::Auto => "auto",
        }
    }
}

/// Where the bearer token sent to the upstream comes from: nowhere, an environment variable of
/// the calling process, a file on the calling host, or an OAuth 2.0 token endpoint the calling
/// process asks with client credentials (RFC 6749 §4.4) whose secret is such a reference. Never
/// a token or a secret itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UpstreamAuthV1 {
    None,
    BearerEnv {
        var: String,
    },
    BearerFile {
        path: String,
    },
    OauthClientCredentials {
        /// The authorization server's token endpoint (the upstream's URL rules).
        token_url: String,
        client_id: String,
        /// The client secret's reference: `env:WRIT_UPSTREAM_…` or `file:/…/upstream-…`.
        secret: String,
        /// The scope asked for, if any.
        scope: Option<String>,
    },
}

/// Bytes of an OAuth client id and of a scope, at most.
pub const OAUTH_CLIENT_ID_BYTES_MAX: usize = 256;
pub const OAUTH_SCOPE_BYTES_MAX: usize = 1024;

/// `POST …/upstreams` and `PATCH …/upstreams/{name}`: OAuth 2.0 client credentials instead of
/// a bearer reference (`auth`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OauthBody {
    pub token_url: String,
    pub client_id: String,
    /// `env:WRIT_UPSTREAM_…` or `file:/…/upstream-…`.
    pub secret: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
}

impl UpstreamAuthV1 {
    /// `none`, `env:WRIT_UPSTREAM_…` or `file:/absolute/path/upstream-…`.
    pub fn parse(s: &str) -> Result<UpstreamAuthV1, Rejection> {
        if s.len() > UPSTREAM_AUTH_REF_BYTES_MAX {
            return Err(invalid(format!("auth reference exceeds {UPSTREAM_AUTH_REF_BYTES_MAX} bytes")));
        }
        let auth = match s.split_once(':') {
            None if s == "none" => UpstreamAuthV1::None,
            Some(("env", var)) => UpstreamAuthV1::BearerEnv { var: var.to_string() },
            Some(("file", path)) => UpstreamAuthV1::BearerFile { path: path.to_string() },
            _ => {
                return Err(invalid(
                    "auth must be 'none', 'env:WRIT_UPSTREAM_…' or 'file:/…/upstream-…' (a reference to the token, never the token)",
                ))
            }
        };
        auth.validate()?;
        Ok(auth)
    }

    fn validate(&self) -> Result<(), Rejection> {
        match self {
            UpstreamAuthV1::None => Ok(()),
            UpstreamAuthV1::OauthClientCredentials { token_url, client_id, secret, scope } => {
                validate_url("token_url", token_url)?;
                let id_ok = (1..=OAUTH_CLIENT_ID_BYTES_MAX).contains(&client_id.len())
                    && client_id.bytes().all(|b| b.is_ascii_alphanumeric() || b"._~-".contains(&b));
                if !id_ok {
                    return Err(invalid(format!(
                        "client_id must be 1..={OAUTH_CLIENT_ID_BYTES_MAX} of [A-Za-z0-9._~-]"
                    )));
                }
                if !matches!(
                    UpstreamAuthV1::parse(secret),
                    Ok(UpstreamAuthV1::BearerEnv { .. } | UpstreamAuthV1::BearerFile { .. })
                ) {
                    return Err(invalid(
                        "the client secret must be a reference: env:WRIT_UPSTREAM_… or file:/…/upstream-…",
                    ));
                }
                let scope_ok = scope.as_ref().is_none_or(|s| {
                    (1..=OAUTH_SCOPE_BYTES_MAX).contains(&s.len())
                        && s.bytes().all(|b| (0x20..0x7f).contains(&b) && b != b'"' && b != b'\\')
                });
                scope_ok.then_some(()).ok_or_else(|| {
                    invalid(format!(
                        "scope must be 1..={OAUTH_SCOPE_BYTES_MAX} printable ASCII bytes (no quote or backslash)"
                    ))
                })
            }
            UpstreamAuthV1::BearerEnv { var } => {
                let ok = var.len() > UPSTREAM_ENV_PREFIX.len()
                    && var.len() <= 128
                    && var.starts_with(UPSTREAM_ENV_PREFIX)
                    && var.bytes().all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_');
                ok.then_some(()).ok_or_else(|| {
                    invalid(format!("auth env:VAR must name a variable {UPSTREAM_ENV_PREFIX}[A-Z0-9_]+"))
                })
            }
            UpstreamAuthV1::BearerFile { path } => {
                let name = path.rsplit('/').next().unwrap_or_default();
                let ok = path.starts_with('/')
                    && path.len() <= UPSTREAM_AUTH_REF_BYTES_MAX
                    && !path.contains('\0')
                    && !path.split('/').any(|part| part == "..")
                    && name.len() > UPSTREAM_FILE_PREFIX.len()
                    && name.starts_with(UPSTREAM_FILE_PREFIX);
                ok.then_some(()).ok_or_else(|| {
                    invalid(format!("auth file:PATH must be an absolute path to a file named {UPSTREAM_FILE_PREFIX}…"))
                })
            }
        }
    }

    /// Whether the reference names a credential of the tenant named `tenant_name`: an `env:`
    /// variable `WRIT_UPSTREAM_<TENANT>__<NAME>` (the tenant name upper-cased, `-` as `_`; the
    /// name part without `__` or a leading `_`, so the split is unambiguous) or a `file:` in a
    /// directory named after the tenant (`/…/<tenant>/upstream-…`). One tenant's operator
    /// cannot then send another tenant's credential to a URL of their choosing.
    pub fn owned_by(&self, tenant_name: &str) -> Result<(), Rejection> {
        let ok = match self {
            UpstreamAuthV1::None => true,
            UpstreamAuthV1::BearerEnv { var } => {
                let tenant = tenant_name.to_ascii_uppercase().replace('-', "_");
                let split = var.strip_prefix(UPSTREAM_ENV_PREFIX).and_then(|rest| rest.rsplit_once("__"));
                split.is_some_and(|(t, name)| t == tenant && !name.is_empty() && !name.starts_with('_'))
            }
            UpstreamAuthV1::BearerFile { path } => {
                let mut parts = path.rsplit('/');
                parts.next();
                parts.next() == Some(tenant_name)
            }
            UpstreamAuthV1::OauthClientCredentials { secret, .. } => {
                return UpstreamAuthV1::parse(secret)?.owned_by(tenant_name)
            }
        };
        ok.then_some(()).ok_or_else(|| {
            let env = tenant_name.to_ascii_uppercase().replace('-', "_");
            invalid(format!(
                "{} is not a credential of tenant '{tenant_name}': use env:{UPSTREAM_ENV_PREFIX}{env}__… or \
                 file:/…/{tenant_name}/{UPSTREAM_FILE_PREFIX}…",
                self.label()
            ))
        })
    }

    /// The reference as written (`none`, `env:VAR`, `file:PATH`).
    pub fn label(&self) -> String {
        match self {
            UpstreamAuthV1::None => "none".into(),
            UpstreamAuthV1::BearerEnv { var } => format!("env:{var}"),
            UpstreamAuthV1::BearerFile { path } => format!("file:{path}"),
            UpstreamAuthV1::OauthClientCredentials { token_url, client_id, secret, .. } => {
                format!("oauth client credentials: {client_id} at {token_url}, secret {secret}")
            }
        }
    }
}

/// A URL Writ calls on a tenant's behalf (`what` names the field): `https://`, or plain
/// `http://` only to a literal loopback address; a host, no user info, no spaces.
fn validate_url(what: &str, url: &str) -> Result<(), Rejection> {
    if url.len() > UPSTREAM_URL_BYTES_MAX {
        return Err(invalid(format!("{what} exceeds {UPSTREAM_URL_BYTES_MAX} bytes")));
    }
    let (scheme, rest) = url.split_once("://").ok_or_else(|| invalid(format!("{what} '{url}' has no scheme")))?;
    let host = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let host_only = host.rsplit_once(':').filter(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok());
    let host_name = host_only.map_or(host, |(h, _)| h);
    if host_name.is_empty() || host.contains('@') || url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(invalid(format!("{what} '{url}' must name a host (no user info, no spaces)")));
    }
    // A literal loopback address, parsed: a name like `127.example.com` is no address.
    let literal = host_name.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(host_name);
    let loopback = literal.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback());
    match scheme {
        "https" => Ok(()),
        "http" if loopback => Ok(()),
        "http" => Err(invalid(format!("{what} must be https:// (plain http only to a literal loopback address)"))),
        other => Err(invalid(format!("{what} scheme '{other}' is not https"))),
    }
}

/// What an operator configures for an upstream.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UpstreamSpecV1 {
    /// The upstream's MCP endpoint: `https://…`, or `http://` on a literal loopback address.
    pub url: String,
    pub auth: UpstreamAuthV1,
    /// PEM certificates trusted for the upstream's TLS instead of the system roots.
    pub ca_pem: Option<String>,
    pub protocol: UpstreamProtocol,
    pub connect_timeout_ms: u64,
    pub call_timeout_ms: u64,
}

impl UpstreamSpecV1 {
    pub fn new(url: &str) -> UpstreamSpecV1 {
        UpstreamSpecV1 {
            url: url.to_string(),
            auth: UpstreamAuthV1::None,
            ca_pem: None,
            protocol: UpstreamProtocol::Auto,
            connect_timeout_ms: CONNECT_TIMEOUT_MS_DEFAULT,
            call_timeout_ms: CALL_TIMEOUT_MS_DEFAULT,
        }
    }

    /// Every field's rule (UPSTREAM_INVALID names the field).
    pub fn validate(&self) -> Result<(), Rejection> {
        validate_url("url", &self.url)?;
        self.auth.validate()?;
        if let Some(ca) = &self.ca_pem {
            if ca.len() > UPSTREAM_CA_BYTES_MAX {
                return Err(invalid(format!("ca exceeds {UPSTREAM_CA_BYTES_MAX} bytes")));
            }
            if crate::pem::blocks(ca, "CERTIFICATE").is_empty() {
                return Err(invalid("ca holds no PEM CERTIFICATE block"));
            }
        }
        if !(CONNECT_TIMEOUT_MS_MIN..=CONNECT_TIMEOUT_MS_MAX).contains(&self.connect_timeout_ms) {
            return Err(invalid(format!(
                "connect_timeout_ms must be {CONNECT_TIMEOUT_MS_MIN}..={CONNECT_TIMEOUT_MS_MAX}"
            )));
        }
        if !(CALL_TIMEOUT_MS_MIN..=CALL_TIMEOUT_MS_MAX).contains(&self.call_timeout_ms) {
            return Err(invalid(format!("call_timeout_ms must be {CALL_TIMEOUT_MS_MIN}..={CALL_TIMEOUT_MS_MAX}")));
        }
        Ok(())
    }
}

/// One upstream tool as pinned: the MCP `Tool` fields that shape what agents see and send,
/// as canonical JSON text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UpstreamToolV1 {
    pub name: String,
    pub title: Option<String>,
    pub description: String,
    pub input_schema: String,
    pub output_schema: Option<String>,
    pub annotations: Option<String>,
}

impl UpstreamToolV1 {
    /// Reads an MCP `Tool` object as the upstream listed it; schemas must compile as JSON
    /// Schema 2020-12 with no reference outside themselves (as catalog schemas).
    pub fn from_mcp(tool: &Value) -> Result<UpstreamToolV1, Rejection> {
        let name = tool.get("name").and_then(Value::as_str).unwrap_or_default().to_string();
        if name.is_empty() || name.len() > 128 || !name.bytes().all(|b| b.is_ascii_graphic() && b != b'/') {
            return Err(invalid(format!("upstream tool name '{name}' must be 1..=128 visible characters, no '/'")));
        }
        let at = |m: String| invalid(format!("upstream tool '{name}': {m}"));
        let text = |k: &str| tool.get(k).and_then(Value::as_str).map(str::to_string);
        let description = text("description").unwrap_or_default();
        if description.len() > crate::catalog::DESCRIPTION_BYTES_MAX {
            return Err(at(format!("description exceeds {} bytes", crate::catalog::DESCRIPTION_BYTES_MAX)));
        }
        let title = text("title").filter(|t| !t.is_empty());
        if title.as_ref().is_some_and(|t| t.len() > crate::catalog::TITLE_BYTES_MAX) {
            return Err(at(format!("title exceeds {} bytes", crate::catalog::TITLE_BYTES_MAX)));
        }
        let input = tool.get("inputSchema").cloned().unwrap_or(serde_json::json!({"type": "object"}));
        if input.get("type").and_then(Value::as_str) != Some("object") {
            return Err(at("inputSchema must have \"type\": \"object\"".into()));
        }
        let input_schema = crate::catalog::compile_schema(&input).map_err(|e| at(e.message))?;
        let output_schema = match tool.get("outputSchema").filter(|v| !v.is_null()) {
            Some(s) => Some(crate::catalog::compile_schema(s).map_err(|e| at(e.message))?),
            None => None,
        };
        let annotations = tool.get("annotations").filter(|v| v.is_object()).map(Value::to_string);
        Ok(UpstreamToolV1 { name, title, description, input_schema, output_schema, annotations })
    }

    /// Whether the upstream marks the tool read-only and idempotent (what makes a retry safe).
    pub fn retry_safe(&self) -> bool {
        let annotations: Value =
            self.annotations.as_deref().and_then(|a| serde_json::from_str(a).ok()).unwrap_or(Value::Null);
        annotations.get("readOnlyHint") == Some(&Value::Bool(true))
            && annotations.get("idempotentHint") == Some(&Value::Bool(true))
    }
}

/// A tool set with its digest: sha256 over the canonical JSON of the tools, sorted by name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UpstreamToolsV1 {
    pub tools: Vec<UpstreamToolV1>,
    pub digest: String,
    pub observed_at_ms: u64,
}

impl UpstreamToolsV1 {
    /// The canonical set of `tools` (any order; a name listed twice is refused).
    pub fn new(mut tools: Vec<UpstreamToolV1>, observed_at_ms: u64) -> Result<UpstreamToolsV1, Rejection> {
        tools.sort_by(|a, b| a.name.cmp(&b.name));
        if let Some(w) = tools.windows(2).find(|w| w[0].name == w[1].name) {
            return Err(invalid(format!("the upstream lists tool '{}' twice", w[0].name)));
        }
        let mut set = UpstreamToolsV1 { tools, digest: String::new(), observed_at_ms };
        set.digest = set.computed_digest();
        set.check()?;
        Ok(set)
    }

    fn computed_digest(&self) -> String {
        crate::sha256_hex(&serde_json::to_vec(&self.tools).expect("tools serialize"))
    }

    /// The cheap checks every replica repeats: order, uniqueness, ceilings and the digest.
    pub fn check(&self) -> Result<(), Rejection> {
        if self.tools.len() > UPSTREAM_TOOLS_MAX {
            return Err(invalid(format!("{} tools exceed the ceiling of {UPSTREAM_TOOLS_MAX}", self.tools.len())));
        }
        if self.tools.windows(2).any(|w| w[0].name >= w[1].name) {
            return Err(invalid("tools must be sorted by name and unique"));
        }
        let bytes = serde_json::to_vec(&self.tools).expect("tools serialize").len();
        if bytes > UPSTREAM_TOOLS_BYTES_MAX {
            return Err(invalid(format!("the tool set is {bytes} bytes, over {UPSTREAM_TOOLS_BYTES_MAX}")));
        }
        if self.computed_digest() != self.digest {
            return Err(invalid("tool set digest does not match its tools"));
        }
        Ok(())
    }

    pub fn tool(&self, name: &str) -> Option<&UpstreamToolV1> {
        self.tools.binary_search_by(|t| t.name.as_str().cmp(name)).ok().map(|i| &self.tools[i])
    }
}

/// What changed from the pinned set to an observed one: tools added, removed, and changed with
/// the names of the fields that differ.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolsDiff {
    pub added: Vec<String>,
    pub removed: Vec<String>,
    pub changed: Vec<crate::catalog::ActionChange>,
}

impl ToolsDiff {
    pub fn between(pinned: Option<&UpstreamToolsV1>, observed: &UpstreamToolsV1) -> ToolsDiff {
        let old = pinned.map_or(&[][..], |p| &p.tools).iter().map(|t| (t.name.as_str(), t));
        let new = observed.tools.iter().map(|t| (t.name.as_str(), t));
        let (added, removed, changed) =
            crate::catalog::keyed_diff(old, new, |a: &UpstreamToolV1, b: &UpstreamToolV1| {
                crate::catalog::differing(&[
                    ("title", a.title != b.title),
                    ("description", a.description != b.description),
                    ("input_schema", a.input_schema != b.input_schema),
                    ("output_schema", a.output_schema != b.output_schema),
                    ("annotations", a.annotations != b.annotations),
                ])
            });
        ToolsDiff { added, removed, changed }
    }

    pub fn is_empty(&self) -> bool {
        self.added.is_empty() && self.removed.is_empty() && self.changed.is_empty()
    }
}

/// One edge's fuse of an upstream, as the edge last recorded it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FuseV1 {
    pub open: bool,
    /// Consecutive failures when it changed.
    pub failures: u32,
    /// The last failure (when open) or what closed it.
    pub reason: String,
    /// The upstream configuration version the fuse was about.
    pub config_version: u64,
    pub changed_at_ms: u64,
}

/// An upstream as the ledger holds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UpstreamV1 {
    pub name: String,
    pub spec: UpstreamSpecV1,
    /// Raised by every configuration change (1 at creation): an edge's fuse closes when it
    /// sees a newer version.
    pub config_version: u64,
    pub created_at_ms: u64,
    pub updated_at_ms: u64,
    /// The approved tool set: the only tools edges call.
    pub pinned: Option<UpstreamToolsV1>,
    /// The last observed tool set, when it differs from the pinned one.
    pub pending: Option<UpstreamToolsV1>,
    /// Fuses by edge id.
    pub fuses: BTreeMap<String, FuseV1>,
}

impl UpstreamV1 {
    /// What a listing shows (no tools, no fuse details).
    pub fn summary(&self) -> UpstreamSummary {
        UpstreamSummary {
            name: self.name.clone(),
            url: self.spec.url.clone(),
            protocol: self.spec.protocol,
            config_version: self.config_version,
            pinned_digest: self.pinned.as_ref().map(|p| p.digest.clone()),
            pinned_tools: self.pinned.as_ref().map_or(0, |p| p.tools.len()),
            pending_digest: self.pending.as_ref().map(|p| p.digest.clone()),
            open_fuses: self.fuses.values().filter(|f| f.open).count(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UpstreamSummary {
    pub name: String,
    pub url: String,
    pub protocol: UpstreamProtocol,
    pub config_version: u64,
    pub pinned_digest: Option<String>,
    pub pinned_tools: usize,
    pub pending_digest: Option<String>,
    pub open_fuses: usize,
}

/// `POST /v1/tenants/{t}/upstreams` and `PATCH …/upstreams/{name}`: the fields to set
/// (absent: the default on add, unchanged on set; `ca_pem: ""` removes the CA on set).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpstreamBody {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// `none`, `env:WRIT_UPSTREAM_…` or `file:/…/upstream-…`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth: Option<String>,
    /// OAuth 2.0 client credentials instead of `auth`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oauth: Option<OauthBody>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_pem: Option<String>,
    /// `2026-07-28`, `2025-11-25` or `auto`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connect_timeout_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_timeout_ms: Option<u64>,
}

impl UpstreamBody {
    /// `base` with this body's fields applied, checked.
    pub fn apply(&self, mut base: UpstreamSpecV1) -> Result<UpstreamSpecV1, Rejection> {
        if let Some(url) = &self.url {
            base.url = url.clone();
        }
        match (&self.auth, &self.oauth) {
            (Some(_), Some(_)) => return Err(invalid("give auth or oauth, not both")),
            (Some(auth), None) => base.auth = UpstreamAuthV1::parse(auth)?,
            (None, Some(o)) => {
                base.auth = UpstreamAuthV1::OauthClientCredentials {
                    token_url: o.token_url.clone(),
                    client_id: o.client_id.clone(),
                    secret: o.secret.clone(),
                    scope: o.scope.clone(),
                }
            }
            (None, None) => {}
        }
        if let Some(ca) = &self.ca_pem {
            base.ca_pem = (!ca.is_empty()).then(|| ca.clone());
        }
        if let Some(p) = &self.protocol {
            base.protocol = UpstreamProtocol::parse(p)?;
        }
        base.connect_timeout_ms = self.connect_timeout_ms.unwrap_or(base.connect_timeout_ms);
        base.call_timeout_ms = self.call_timeout_ms.unwrap_or(base.call_timeout_ms);
        base.validate()?;
        Ok(base)
    }
}

/// `GET …/upstreams/{name}`: the record and what its pending set would change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UpstreamView {
    pub upstream: UpstreamV1,
    pub pending_diff: Option<ToolsDiff>,
}

impl UpstreamView {
    pub fn of(upstream: UpstreamV1) -> UpstreamView {
        let pending_diff = upstream.pending.as_ref().map(|p| ToolsDiff::between(upstream.pinned.as_ref(), p));
        UpstreamView { upstream, pending_diff }
    }
}

/// `POST …/upstreams/{name}/sync`: what the upstream lists now against the pinned set.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SyncReport {
    /// The protocol version the upstream spoke.
    pub protocol_version: Option<String>,
    pub observed_digest: String,
    pub tools: usize,
    pub diff: ToolsDiff,
    /// Whether an approval is now pending (`approve` with `observed_digest`).
    pub pending: bool,
}

pub use crate::catalog::{parse_upstream_target as parse_target, validate_upstream_name as validate_name};

fn invalid(message: impl Into<String>) -> Rejection {
    Rejection::new(ReasonCode::UPSTREAM_INVALID, message)
}

pub mod decide;
mod fold;
mod query;

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn specs_refuse_plain_http_off_loopback_and_bad_references() {
        let spec = |url: &str| UpstreamSpecV1::new(url).validate();
        assert!(spec("https://mcp.example.com/mcp").is_ok());
        assert!(spec("http://127.0.0.1:9000/mcp").is_ok());
        assert!(spec("http://[::1]:9000/mcp").is_ok());
        for bad in [
            "http://mcp.example.com/mcp",
            "http://127.evil.example/mcp",
            "http://127.0.0.1.nip.example:80/mcp",
            "ftp://x/y",
            "https://user@host/mcp",
            "https:///mcp",
            "nourl",
        ] {
            assert_eq!(spec(bad).unwrap_err().reason, ReasonCode::UPSTREAM_INVALID, "{bad}");
        }
        assert!(UpstreamAuthV1::parse("env:WRIT_UPSTREAM_WEATHER").is_ok());
        assert!(UpstreamAuthV1::parse("file:/etc/writ/upstream-weather.token").is_ok());
        // Only credentials put there for upstreams: never another secret of the process or host.
        for bad in [
            "Bearer abc",
            "env:WRIT_OPERATOR_TOKEN",
            "env:WRIT_UPSTREAM_",
            "env:",
            "file:relative/upstream-x",
            "file:/etc/writ/pki/node.key",
            "file:/etc/writ/seal.key",
            "file:/etc/writ/upstream-x/../seal.key",
        ] {
            assert!(UpstreamAuthV1::parse(bad).is_err(), "{bad}");
        }
        // Only the tenant's own: by name prefix for variables, by directory for files.
        let owned = |r: &str| UpstreamAuthV1::parse(r).unwrap().owned_by("plant-a").is_ok();
        for mine in [
            "none",
            "env:WRIT_UPSTREAM_PLANT_A__MES",
            "env:WRIT_UPSTREAM_PLANT_A__MES_TOKEN",
            "file:/etc/writ/plant-a/upstream-mes",
        ] {
            assert!(owned(mine), "{mine}");
        }
        for theirs in [
            "env:WRIT_UPSTREAM_PLANT_A___MES",
            "env:WRIT_UPSTREAM_PLANT__A__MES",
            "env:WRIT_UPSTREAM_PLANT_A",
            "env:WRIT_UPSTREAM_PLANT__A_MES",
            "env:WRIT_UPSTREAM_PLANT_A__",
            "file:/etc/writ/upstream-mes",
            "file:/etc/writ/plant/upstream-mes",
            "file:/etc/writ/plant-a/x/upstream-mes",
        ] {
            assert!(!owned(theirs), "{theirs}");
        }
        // Tenant `plant` cannot name `plant-a`'s variable.
        let var = UpstreamAuthV1::parse("env:WRIT_UPSTREAM_PLANT_A__MES").unwrap();
        assert!(var.owned_by("plant").is_err() && var.owned_by("plant-a").is_ok());
        let mut s = UpstreamSpecV1::new("https://h/mcp");
        s.call_timeout_ms = 10;
        assert!(s.validate().unwrap_err().message.contains("call_timeout_ms"));
        s.call_timeout_ms = CALL_TIMEOUT_MS_DEFAULT;
        s.ca_pem = Some("not pem".into());
        assert!(s.validate().unwrap_err().message.contains("ca"));
    }

    #[test]
    fn oauth_client_credentials_name_their_secret_by_reference_only() {
        let body = |token_url: &str, client_id: &str, secret: &str, scope: Option<&str>| UpstreamBody {
            oauth: Some(OauthBody {
                token_url: token_url.into(),
                client_id: client_id.into(),
                secret: secret.into(),
                scope: scope.map(str::to_string),
            }),
            ..Default::default()
        };
        let base = UpstreamSpecV1::new("https://mcp.example.com/mcp");
        let ok = body("https://auth.example.com/token", "writ-edge", "env:WRIT_UPSTREAM_SHOP_SECRET", Some("tools"));
        let spec = ok.apply(base.clone()).unwrap();
        assert!(matches!(spec.auth, UpstreamAuthV1::OauthClientCredentials { .. }));
        assert!(spec.auth.label().contains("env:WRIT_UPSTREAM_SHOP_SECRET"), "{}", spec.auth.label());
        for (bad, why) in [
            (body("http://auth.example.com/token", "writ", "env:WRIT_UPSTREAM_S", None), "token_url"),
            (body("https://auth.example.com/token", "a b", "env:WRIT_UPSTREAM_S", None), "client_id"),
            (body("https://auth.example.com/token", "writ", "s3cr3t", None), "reference"),
            (body("https://auth.example.com/token", "writ", "none", None), "reference"),
            (body("https://auth.example.com/token", "writ", "env:WRIT_OPERATOR_TOKEN", None), "reference"),
            (body("https://auth.example.com/token", "writ", "env:WRIT_UPSTREAM_S", Some("a\nb")), "scope"),
        ] {
            let e = bad.apply(base.clone()).unwrap_err();
            assert!(e.message.contains(why), "{why}: {}", e.message);
        }
        let both = UpstreamBody { auth: Some("none".into()), ..ok };
        assert!(both.apply(base).unwrap_err().message.contains("not both"));
    }

    #[test]
    fn tool_sets_are_canonical_and_diffs_name_fields() {
        let tool = |name: &str, desc: &str, props: Value| {
            UpstreamToolV1::from_mcp(&json!({"name": name, "description": desc,
                "inputSchema": {"type": "object", "properties": props}}))
            .unwrap()
        };
        let a = UpstreamToolsV1::new(vec![tool("b", "B", json!({})), tool("a", "A", json!({}))], 1).unwrap();
        let b = UpstreamToolsV1::new(vec![tool("a", "A", json!({})), tool("b", "B", json!({}))], 2).unwrap();
        assert_eq!(a.digest, b.digest, "order and observation time do not change the digest");
        assert_eq!(a.tools[0].name, "a");
        let changed =
            UpstreamToolsV1::new(vec![tool("a", "A2", json!({"x": {"type": "string"}})), tool("c", "C", json!({}))], 3)
                .unwrap();
        let diff = ToolsDiff::between(Some(&a), &changed);
        assert_eq!(diff.added, vec!["c"]);
        assert_eq!(diff.removed, vec!["b"]);
        assert_eq!(diff.changed[0].fields, vec!["description", "input_schema"]);
        assert!(ToolsDiff::between(Some(&a), &b).is_empty());
        assert!(UpstreamToolsV1::new(vec![tool("a", "", json!({})), tool("a", "", json!({}))], 0).is_err());
        let mut tampered = a.clone();
        tampered.tools[0].description = "other".into();
        assert!(tampered.check().is_err());
        let remote = json!({"name": "r", "inputSchema": {"type": "object", "$ref": "https://evil/schema"}});
        assert!(UpstreamToolV1::from_mcp(&remote).is_err());
        assert!(UpstreamToolV1::from_mcp(&json!({"name": "s", "inputSchema": {"type": "string"}})).is_err());
    }

    #[test]
    fn targets_name_an_upstream_and_a_tool() {
        assert_eq!(parse_target("weather/get_forecast").unwrap(), ("weather", "get_forecast"));
        for bad in ["weather", "Weather/x", "w/", "w/a/b"] {
            assert!(parse_target(bad).is_err(), "{bad}");
        }
    }
}
