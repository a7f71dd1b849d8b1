//! `writ node` configuration: raw TOML (unknown fields rejected) plus `WRIT_*` environment
//! overrides, validated once into [`NodeConfig`] with precise errors.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::ledger::RaftSettings;

/// Stands for the node's id in `advertise_url`, `data_dir` and `[tls]` `cert`/`key`.
pub const NODE_ID_PLACEHOLDER: &str = "{node_id}";

/// Shortest operator token accepted.
pub const OPERATOR_TOKEN_BYTES_MIN: usize = 16;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawNodeConfig {
    node_id: Option<u64>,
    listen: Option<String>,
    admin_listen: Option<String>,
    #[serde(default)]
    admin_require_client_certificate: bool,
    probe_listen: Option<String>,
    advertise_url: Option<String>,
    data_dir: Option<PathBuf>,
    operator_token: Option<String>,
    operator_token_file: Option<PathBuf>,
    #[serde(default)]
    bootstrap: bool,
    #[serde(default)]
    members: Vec<RawMember>,
    #[serde(default)]
    raft: RawRaft,
    tls: Option<RawTls>,
    #[serde(default)]
    authority: RawAuthority,
    /// Where spans go over OTLP/HTTP (the collector's base URL); absent: no export unless the
    /// `OTEL_EXPORTER_OTLP_*` environment names one.
    otlp_endpoint: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAuthority {
    signing_key_file: Option<PathBuf>,
    executor_ca_secret_file: Option<PathBuf>,
    token_audience: Option<String>,
    executor_cert_ttl_s: Option<u64>,
    edge_ca_files: Option<Vec<PathBuf>>,
    /// Read only to say where anonymous access went: the ledger records it now.
    anonymous: Option<toml::Value>,
}

/// Default `aud` of Writ-issued tokens when the config names none.
pub const TOKEN_AUDIENCE_DEFAULT: &str = "urn:writ:mcp";

/// Token signing: this node's key and the audience tokens are issued for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthorityConfig {
    /// Ed25519 PKCS#8 PEM private key; created (mode 0600) on first start when missing.
    /// Default: `<data_dir>/signing-key.pem`.
    pub signing_key_file: PathBuf,
    /// The secret this node derives its per-tenant executor CA keys from (32 random bytes, hex,
    /// created 0600 when missing): independent of the token-signing key.
    /// Default: `<data_dir>/executor-ca-secret`.
    pub executor_ca_secret_file: PathBuf,
    pub token_audience: String,
    /// Lifetime of the executor certificates this node issues (default 90 days; executors
    /// renew at about two thirds of it).
    pub executor_cert_ttl_s: u64,
    /// The CAs edges' executor endpoints chain to (PEM files): the enrollment tokens this node
    /// makes pin them, so an executor trusts no other CA an enrollment answer names. Default:
    /// the cluster CA (`[tls] ca`), which edges with cluster credentials present.
    pub edge_ca_files: Vec<PathBuf>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMember {
    id: u64,
    addr: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRaft {
    heartbeat_ms: Option<u64>,
    election_min_ms: Option<u64>,
    election_max_ms: Option<u64>,
    snapshot_every_entries: Option<u64>,
    keep_entries_behind_snapshot: Option<u64>,
    ledger_version_max: Option<u32>,
    min_free_disk_bytes: Option<u64>,
    data_quota_bytes: Option<u64>,
    snapshot_every_log_bytes: Option<u64>,
    snapshot_chunk_bytes: Option<u64>,
    rpc_body_bytes_max: Option<usize>,
    /// Refused with a pointer to the edges' `upstream_watch_s` (the edges watch upstreams).
    upstream_watch_s: Option<u64>,
    /// How often the leader fetches discovered issuers' keys again (seconds; 0: never).
    issuer_watch_s: Option<u64>,
    /// Seconds this node's ledger clock runs ahead of its wall clock (0): for rehearsing rules
    /// of ledger time (retention, expiry, purge) on a test cluster, as `writ dev
    /// --ledger-clock-ahead-s` does. Ledger time never goes back.
    ledger_clock_ahead_s: Option<u64>,
}

/// The most `[raft] ledger_clock_ahead_s` may be: a year.
pub const LEDGER_CLOCK_AHEAD_S_MAX: u64 = 366 * 24 * 3600;

pub use crate::pki::TlsConfig;

type RawTls = TlsConfig;

/// An `otlp_endpoint` setting (`crate::observe::otlp_endpoint`).
pub fn otlp_endpoint(raw: Option<String>) -> Result<Option<String>, ConfigError> {
    crate::observe::otlp_endpoint(raw).map_err(|message| ConfigError::Invalid { field: "otlp_endpoint", message })
}

/// A validated node configuration.
#[derive(Debug, Clone)]
pub struct NodeConfig {
    pub node_id: u64,
    /// The OTLP/HTTP collector spans go to (`writ_telemetry::Settings::endpoint`).
    pub otlp_endpoint: Option<String>,
    /// The peer listener: Raft and the ledger client API, mutual TLS with role identities.
    pub listen: SocketAddr,
    /// The admin API (`/v1`, HTTPS, operator token); `None`: served on `listen` (one-port mode).
    pub admin_listen: Option<SocketAddr>,
    /// The admin listener requires a client certificate from the cluster CA at the handshake:
    /// an operator's for every route (the operator token is still required too), an edge's for
    /// `/v1/enroll` only (the enrollments edges forward). Needs `admin_listen`.
    pub admin_require_client_certificate: bool,
    /// `/healthz`, `/readyz`, `/metrics` over plain HTTP, read-only; `None`: served on `listen`.
    /// With both set, the peer listener requires a client certificate at the handshake.
    pub probe_listen: Option<SocketAddr>,
    /// URL peers and clients use to reach this node; `None` means derive it from the bound address.
    pub advertise_url: Option<String>,
    pub data_dir: PathBuf,
    pub operator_token: String,
    /// Initialize the cluster with `members` if this node's log is empty.
    pub bootstrap: bool,
    pub members: BTreeMap<u64, String>,
    pub raft: RaftSettings,
    /// The node's credential (`urn:writ:node:<node_id>`) and the cluster CA: its listener
    /// always speaks TLS, and peers are told apart by the role their certificate names.
    pub tls: TlsConfig,
    pub authority: AuthorityConfig,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {message}")]
    Read { path: String, message: String },
    #[error("invalid config: {0}")]
    Parse(String),
    #[error("missing required setting `{0}` (set it in the file or as WRIT_{1})")]
    Missing(&'static str, &'static str),
    #[error("invalid value for `{field}`: {message}")]
    Invalid { field: &'static str, message: String },
    #[error("node_id must be at least 1")]
    NodeIdZero,
    #[error("listen address {listen} is not loopback: serve HTTPS ([tls] cert, key from `writ pki issue edge NAME --host …`) or name the TLS-terminating proxies allowed to connect (trusted_proxies)")]
    TlsRequiredOutsideLoopback { listen: SocketAddr },
    #[error("[tls] cert, key and ca are required: a node always serves TLS and tells peers apart by their certificates (create them with `writ pki init` and `writ pki issue node <id>`)")]
    TlsRequired,
    #[error("raft.election_min_ms ({election_min_ms}) must exceed 2 × raft.heartbeat_ms ({heartbeat_ms})")]
    ElectionTimeoutBelowHeartbeat { election_min_ms: u64, heartbeat_ms: u64 },
    #[error("raft.election_max_ms ({election_max_ms}) must exceed raft.election_min_ms ({election_min_ms})")]
    ElectionRangeEmpty { election_min_ms: u64, election_max_ms: u64 },
    #[error("operator token must be at least {OPERATOR_TOKEN_BYTES_MIN} characters")]
    OperatorTokenTooShort,
    #[error("bootstrap = true but this node ({node_id}) is not listed in [[members]]")]
    BootstrapWithoutSelf { node_id: u64 },
}

impl NodeConfig {
    /// Reads the TOML file, applies `WRIT_*` overrides from `env`, and validates.
    pub fn load(path: &Path, env: &dyn Fn(&str) -> Option<String>) -> Result<NodeConfig, ConfigError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| ConfigError::Read { path: path.display().to_string(), message: e.to_string() })?;
        Self::parse(&text, env)
    }

    pub fn parse(text: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<NodeConfig, ConfigError> {
        let mut raw: RawNodeConfig = toml::from_str(text).map_err(|e| ConfigError::Parse(e.to_string()))?;
        if let Some(v) = env("WRIT_NODE_ID") {
            raw.node_id =
                Some(v.parse().map_err(|_| ConfigError::Invalid {
                    field: "node_id",
                    message: format!("'{v}' is not a number"),
                })?);
        }
        if let Some(v) = env("WRIT_LISTEN") {
            raw.listen = Some(v);
        }
        if let Some(v) = env("WRIT_ADMIN_LISTEN") {
            raw.admin_listen = Some(v);
        }
        if let Some(v) = env("WRIT_PROBE_LISTEN") {
            raw.probe_listen = Some(v);
        }
        if let Some(v) = env("WRIT_OTLP_ENDPOINT") {
            raw.otlp_endpoint = Some(v);
        }
        if let Some(v) = env("WRIT_ADVERTISE_URL") {
            raw.advertise_url = Some(v);
        }
        if let Some(v) = env("WRIT_DATA_DIR") {
            raw.data_dir = Some(v.into());
        }
        if let Some(v) = env("WRIT_OPERATOR_TOKEN") {
            raw.operator_token = Some(v);
        }
        if let Some(v) = env("WRIT_TOKEN_AUDIENCE") {
            raw.authority.token_audience = Some(v);
        }
        validate(raw)
    }
}

/// Parses an `ip:port` setting.
pub fn socket_addr(field: &'static str, text: &str) -> Result<SocketAddr, ConfigError> {
    text.parse().map_err(|_| ConfigError::Invalid { field, message: format!("'{text}' is not ip:port") })
}

/// `authority.token_audience`, or the cluster's default audience.
fn token_audience(raw: Option<String>) -> Result<String, ConfigError> {
    let token_audience = raw.unwrap_or_else(|| TOKEN_AUDIENCE_DEFAULT.to_string());
    if token_audience.is_empty() || token_audience.len() > writ_api::token::ISSUER_BYTES_MAX {
        let message = "must be 1..=512 bytes".into();
        return Err(ConfigError::Invalid { field: "authority.token_audience", message });
    }
    Ok(token_audience)
}

/// Keys that moved elsewhere: refused with where they went.
fn moved_keys(raw: &RawNodeConfig) -> Result<(), ConfigError> {
    if raw.raft.upstream_watch_s.is_some() {
        return Err(ConfigError::Invalid {
            field: "raft.upstream_watch_s",
            message: "the edges watch upstreams now (the ledger never calls a tenant's URL): \
                      set upstream_watch_s in each edge's config instead"
                .into(),
        });
    }
    if raw.authority.anonymous.is_some() {
        return Err(ConfigError::Invalid {
            field: "authority.anonymous",
            message:
                "anonymous access is recorded in the ledger: `writ admin credential anonymous` (see docs/deploy.md)"
                    .into(),
        });
    }
    Ok(())
}

fn validate(raw: RawNodeConfig) -> Result<NodeConfig, ConfigError> {
    moved_keys(&raw)?;
    let node_id = raw.node_id.ok_or(ConfigError::Missing("node_id", "NODE_ID"))?;
    if node_id == 0 {
        return Err(ConfigError::NodeIdZero);
    }
    let listen_text = raw.listen.ok_or(ConfigError::Missing("listen", "LISTEN"))?;
    let listen = socket_addr("listen", &listen_text)?;
    let admin_listen = raw.admin_listen.map(|a| socket_addr("admin_listen", &a)).transpose()?;
    if raw.admin_require_client_certificate && admin_listen.is_none() {
        return Err(ConfigError::Invalid {
            field: "admin_require_client_certificate",
            message: "needs admin_listen: the admin API must have its own listener to require operator certificates"
                .into(),
        });
    }
    let probe_listen = raw.probe_listen.map(|a| socket_addr("probe_listen", &a)).transpose()?;
    // One config for every member of a StatefulSet: `{node_id}` in these settings is this
    // node's id (from WRIT_NODE_ID, e.g. the pod's ordinal).
    let id = node_id.to_string();
    let with_id = |p: PathBuf| PathBuf::from(p.to_string_lossy().replace(NODE_ID_PLACEHOLDER, &id));
    let tls = raw.tls.ok_or(ConfigError::TlsRequired)?;
    let tls = TlsConfig { cert: with_id(tls.cert), key: with_id(tls.key), ca: tls.ca };
    let data_dir = with_id(raw.data_dir.ok_or(ConfigError::Missing("data_dir", "DATA_DIR"))?);
    let advertise_url = raw.advertise_url.map(|u| u.replace(NODE_ID_PLACEHOLDER, &id));
    let operator_token = match (raw.operator_token, raw.operator_token_file) {
        (Some(t), _) => t,
        (None, Some(f)) => std::fs::read_to_string(&f)
            .map_err(|e| ConfigError::Read { path: f.display().to_string(), message: e.to_string() })?
            .trim()
            .to_string(),
        (None, None) => return Err(ConfigError::Missing("operator_token", "OPERATOR_TOKEN")),
    };
    if operator_token.len() < OPERATOR_TOKEN_BYTES_MIN {
        return Err(ConfigError::OperatorTokenTooShort);
    }
    let raft = raft_settings(&raw.raft)?;
    let mut members = BTreeMap::new();
    for m in raw.members {
        if m.id == 0 || !m.addr.starts_with("https://") {
            return Err(ConfigError::Invalid {
                field: "members",
                message: format!("member {} needs id > 0 and an https addr", m.id),
            });
        }
        members.insert(m.id, m.addr);
    }
    if raw.bootstrap && !members.contains_key(&node_id) {
        return Err(ConfigError::BootstrapWithoutSelf { node_id });
    }
    let authority = authority_config(raw.authority, &data_dir, &tls.ca)?;
    Ok(NodeConfig {
        node_id,
        otlp_endpoint: otlp_endpoint(raw.otlp_endpoint)?,
        listen,
        admin_listen,
        admin_require_client_certificate: raw.admin_require_client_certificate,
        probe_listen,
        advertise_url,
        authority,
        data_dir,
        operator_token,
        bootstrap: raw.bootstrap,
        members,
        raft,
        tls,
    })
}

/// The `[raft]` settings with their defaults, checked: elections wait longer than two
/// heartbeats, and the election range is not empty.
fn raft_settings(raw: &RawRaft) -> Result<RaftSettings, ConfigError> {
    let defaults = RaftSettings::default();
    let raft = RaftSettings {
        heartbeat_ms: raw.heartbeat_ms.unwrap_or(defaults.heartbeat_ms),
        election_min_ms: raw.election_min_ms.unwrap_or(defaults.election_min_ms),
        election_max_ms: raw.election_max_ms.unwrap_or(defaults.election_max_ms),
        snapshot_every_entries: raw.snapshot_every_entries.unwrap_or(defaults.snapshot_every_entries),
        keep_entries_behind_snapshot: raw.keep_entries_behind_snapshot.unwrap_or(defaults.keep_entries_behind_snapshot),
        clock_ahead_ms: raw.ledger_clock_ahead_s.unwrap_or(0).saturating_mul(1000),
        ledger_version_max: raw.ledger_version_max,
        min_free_disk_bytes: raw.min_free_disk_bytes.unwrap_or(defaults.min_free_disk_bytes),
        snapshot_every_log_bytes: raw.snapshot_every_log_bytes.unwrap_or(defaults.snapshot_every_log_bytes),
        snapshot_chunk_bytes: raw.snapshot_chunk_bytes.unwrap_or(defaults.snapshot_chunk_bytes),
        rpc_body_bytes_max: raw.rpc_body_bytes_max.unwrap_or(defaults.rpc_body_bytes_max),
        data_quota_bytes: raw.data_quota_bytes,
        issuer_watch_ms: raw.issuer_watch_s.map_or(defaults.issuer_watch_ms, |s| s.saturating_mul(1000)),
    };
    if raft.election_min_ms <= 2 * raft.heartbeat_ms {
        return Err(ConfigError::ElectionTimeoutBelowHeartbeat {
            election_min_ms: raft.election_min_ms,
            heartbeat_ms: raft.heartbeat_ms,
        });
    }
    if raft.election_max_ms <= raft.election_min_ms {
        return Err(ConfigError::ElectionRangeEmpty {
            election_min_ms: raft.election_min_ms,
            election_max_ms: raft.election_max_ms,
        });
    }
    if raw.ledger_clock_ahead_s.is_some_and(|s| s > LEDGER_CLOCK_AHEAD_S_MAX) {
        return Err(ConfigError::Invalid {
            field: "raft.ledger_clock_ahead_s",
            message: format!("at most {LEDGER_CLOCK_AHEAD_S_MAX} (a year)"),
        });
    }
    Ok(raft)
}

/// The `[authority]` settings with their defaults (keys under the data directory, the node's
/// own CA as the edges' CA), checked.
fn authority_config(
    raw: RawAuthority,
    data_dir: &std::path::Path,
    tls_ca: &std::path::Path,
) -> Result<AuthorityConfig, ConfigError> {
    let token_audience = token_audience(raw.token_audience.clone())?;
    let executor_cert_ttl_s = raw.executor_cert_ttl_s.unwrap_or(writ_tenant_admin::enroll::EXECUTOR_CERT_TTL_S);
    let ttl_bounds =
        writ_tenant_admin::enroll::EXECUTOR_CERT_TTL_MIN_S..=writ_tenant_admin::enroll::EXECUTOR_CERT_TTL_MAX_S;
    if !ttl_bounds.contains(&executor_cert_ttl_s) {
        return Err(ConfigError::Invalid {
            field: "authority.executor_cert_ttl_s",
            message: format!("must be {}..={} s", ttl_bounds.start(), ttl_bounds.end()),
        });
    }
    let authority = AuthorityConfig {
        signing_key_file: raw.signing_key_file.unwrap_or_else(|| data_dir.join("signing-key.pem")),
        executor_ca_secret_file: raw.executor_ca_secret_file.unwrap_or_else(|| data_dir.join("executor-ca-secret")),
        token_audience,
        executor_cert_ttl_s,
        edge_ca_files: raw.edge_ca_files.unwrap_or_else(|| vec![tls_ca.to_path_buf()]),
    };
    if authority.edge_ca_files.is_empty() || authority.edge_ca_files.len() > writ_api::executor::ENROLLMENT_PINS_MAX {
        return Err(ConfigError::Invalid {
            field: "authority.edge_ca_files",
            message: format!("1..={} files", writ_api::executor::ENROLLMENT_PINS_MAX),
        });
    }
    Ok(authority)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_env(_: &str) -> Option<String> {
        None
    }

    const BASE: &str = "node_id = 1\nlisten = \"127.0.0.1:7001\"\ndata_dir = \"/tmp/x\"\noperator_token = \"0123456789abcdef\"\n[tls]\ncert = \"n.pem\"\nkey = \"n-key.pem\"\nca = \"ca.pem\"\n";

    #[test]
    fn an_otlp_endpoint_is_an_http_url_of_bounded_length() {
        let with = |url: &str| NodeConfig::parse(&format!("otlp_endpoint = \"{url}\"\n{BASE}"), &no_env);
        assert_eq!(with("http://127.0.0.1:4318").unwrap().otlp_endpoint.as_deref(), Some("http://127.0.0.1:4318"));
        assert_eq!(NodeConfig::parse(BASE, &no_env).unwrap().otlp_endpoint, None, "off by default");
        let long = format!("https://{}", "a".repeat(3000));
        for bad in ["ftp://collector:4318", "collector:4318", long.as_str()] {
            assert!(matches!(with(bad), Err(ConfigError::Invalid { field: "otlp_endpoint", .. })), "{bad:.40}");
        }
    }

    #[test]
    fn valid_config_parses_and_env_overrides() {
        let c = NodeConfig::parse(BASE, &no_env).unwrap();
        assert_eq!(c.node_id, 1);
        let env = |k: &str| (k == "WRIT_NODE_ID").then(|| "7".to_string());
        assert_eq!(NodeConfig::parse(BASE, &env).unwrap().node_id, 7);
        let templated = BASE
            .replace("n.pem", "node-{node_id}.pem")
            .replace("/tmp/x", "/var/lib/writ/{node_id}")
            .replace("listen =", "advertise_url = \"https://writ-node-{node_id}.peer:7001\"\nlisten =");
        let c = NodeConfig::parse(&templated, &env).unwrap();
        assert_eq!(c.tls.cert, PathBuf::from("node-7.pem"));
        assert_eq!(c.data_dir, PathBuf::from("/var/lib/writ/7"));
        assert_eq!(c.advertise_url.as_deref(), Some("https://writ-node-7.peer:7001"));
    }

    #[test]
    fn errors_are_precise() {
        let cases: Vec<(String, ConfigError)> = vec![
            (BASE.replace("node_id = 1", "node_id = 0"), ConfigError::NodeIdZero),
            (BASE.split("[tls]").next().unwrap().to_string(), ConfigError::TlsRequired),
            (
                BASE.replace("[tls]", "[raft]\nheartbeat_ms = 300\n[tls]"),
                ConfigError::ElectionTimeoutBelowHeartbeat { election_min_ms: 120, heartbeat_ms: 300 },
            ),
            (BASE.replace("0123456789abcdef", "short"), ConfigError::OperatorTokenTooShort),
            (BASE.replace("[tls]", "bootstrap = true\n[tls]"), ConfigError::BootstrapWithoutSelf { node_id: 1 }),
            (BASE.replace("node_id = 1\n", ""), ConfigError::Missing("node_id", "NODE_ID")),
        ];
        for (text, want) in cases {
            assert_eq!(NodeConfig::parse(&text, &no_env).unwrap_err(), want, "{text}");
        }
        let ttl = |s: u64| NodeConfig::parse(&format!("{BASE}[authority]\nexecutor_cert_ttl_s = {s}\n"), &no_env);
        assert_eq!(ttl(3600).unwrap().authority.executor_cert_ttl_s, 3600);
        assert_eq!(
            NodeConfig::parse(BASE, &no_env).unwrap().authority.executor_cert_ttl_s,
            writ_tenant_admin::enroll::EXECUTOR_CERT_TTL_S
        );
        for bad in [1, 400 * 24 * 3600] {
            let e = ttl(bad).unwrap_err();
            assert!(matches!(e, ConfigError::Invalid { field: "authority.executor_cert_ttl_s", .. }), "{e}");
        }
        let unknown = NodeConfig::parse(&BASE.replace("[tls]", "colour = \"blue\"\n[tls]"), &no_env).unwrap_err();
        assert!(matches!(unknown, ConfigError::Parse(ref m) if m.contains("colour")), "{unknown}");
    }

    #[test]
    fn anonymous_access_in_the_config_says_where_it_went() {
        let entry = "[[authority.anonymous]]\nedge = \"e1\"\ntenant = \"demo\"\nprincipal = \"agent\"\n";
        let e = NodeConfig::parse(&format!("{BASE}{entry}"), &no_env).unwrap_err();
        assert!(matches!(e, ConfigError::Invalid { field: "authority.anonymous", .. }), "{e}");
        assert!(e.to_string().contains("credential anonymous"), "{e}");
    }

    #[test]
    fn the_ledger_clock_runs_ahead_only_when_asked_and_within_a_year() {
        let with = |s: u64| {
            NodeConfig::parse(&BASE.replace("[tls]", &format!("[raft]\nledger_clock_ahead_s = {s}\n[tls]")), &no_env)
        };
        assert_eq!(NodeConfig::parse(BASE, &no_env).unwrap().raft.clock_ahead_ms, 0);
        assert_eq!(with(86_400).unwrap().raft.clock_ahead_ms, 86_400_000);
        let e = with(LEDGER_CLOCK_AHEAD_S_MAX + 1).unwrap_err();
        assert!(matches!(e, ConfigError::Invalid { field: "raft.ledger_clock_ahead_s", .. }), "{e}");
    }

    #[test]
    fn the_upstream_watch_in_a_node_config_says_where_it_went() {
        let e = NodeConfig::parse(&BASE.replace("[tls]", "[raft]\nupstream_watch_s = 60\n[tls]"), &no_env).unwrap_err();
        assert!(matches!(e, ConfigError::Invalid { field: "raft.upstream_watch_s", .. }), "{e}");
        assert!(e.to_string().contains("each edge's config"), "{e}");
    }
}
