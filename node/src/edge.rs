//! `writ edge --config edge.toml`: a stateless MCP edge replica in front of a ledger cluster,
//! and the embedded edge of `writ dev`. Any number of edges can serve the same cluster; each
//! follows the ledger through its watch stream (see `writ_api::verifier`).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Deserialize;
use tokio::net::TcpListener;
use writ_api::client::{HttpLedger, Ledger};
use writ_api::verifier::Verifier;
use writ_mcp_edge::audit::AuditSink;
use writ_mcp_edge::seal::SealKey;
use writ_mcp_edge::{AnonymousAccess, EdgeConfig};

use crate::config::ConfigError;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEdgeConfig {
    listen: Option<String>,
    /// The canonical URI clients use (and tokens name as audience); default `http://<listen>/mcp`.
    canonical_url: Option<String>,
    /// Ledger node URLs (client API).
    #[serde(default)]
    ledger: Vec<String>,
    #[serde(default)]
    allowed_hosts: Vec<String>,
    #[serde(default)]
    allowed_origins: Vec<String>,
    /// The key file for MRTR request state and cursors (hex, created 0600 when missing): every
    /// edge replica of a deployment must use the same key.
    seal_key_file: Option<String>,
    /// Loopback-only anonymous access: requests without a token act as this principal.
    anonymous: Option<RawAnonymous>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAnonymous {
    tenant: String,
    principal: String,
}

/// A validated edge configuration.
#[derive(Debug, Clone)]
pub struct EdgeFileConfig {
    pub listen: SocketAddr,
    pub canonical_url: Option<String>,
    pub ledger: Vec<String>,
    pub allowed_hosts: Vec<String>,
    pub allowed_origins: Vec<String>,
    pub seal_key_file: PathBuf,
    pub anonymous: Option<AnonymousAccess>,
}

impl EdgeFileConfig {
    pub fn load(path: &Path, env: &dyn Fn(&str) -> Option<String>) -> Result<EdgeFileConfig, ConfigError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| ConfigError::Read { path: path.display().to_string(), message: e.to_string() })?;
        Self::parse(&text, env)
    }

    pub fn parse(text: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<EdgeFileConfig, ConfigError> {
        let mut raw: RawEdgeConfig = toml::from_str(text).map_err(|e| ConfigError::Parse(e.to_string()))?;
        if let Some(v) = env("WRIT_EDGE_LISTEN") {
            raw.listen = Some(v);
        }
        if let Some(v) = env("WRIT_EDGE_URL") {
            raw.canonical_url = Some(v);
        }
        let listen_text = raw.listen.ok_or(ConfigError::Missing("listen", "EDGE_LISTEN"))?;
        let listen: SocketAddr = listen_text.parse().map_err(|_| ConfigError::Invalid {
            field: "listen",
            message: format!("'{listen_text}' is not ip:port"),
        })?;
        if !listen.ip().is_loopback() {
            // TLS termination for edges lands with the executor endpoint (mTLS); until then an
            // edge only binds loopback (put a TLS proxy in front).
            return Err(ConfigError::TlsRequiredOutsideLoopback { listen });
        }
        if raw.ledger.is_empty() || raw.ledger.iter().any(|u| !(u.starts_with("http://") || u.starts_with("https://")))
        {
            return Err(ConfigError::Invalid { field: "ledger", message: "list at least one http(s) node URL".into() });
        }
        if let Some(u) = &raw.canonical_url {
            if !(u.starts_with("http://") || u.starts_with("https://")) {
                return Err(ConfigError::Invalid { field: "canonical_url", message: "must be an http(s) URL".into() });
            }
        }
        if let Some(v) = env("WRIT_EDGE_SEAL_KEY_FILE") {
            raw.seal_key_file = Some(v);
        }
        let seal_key_file = raw.seal_key_file.ok_or(ConfigError::Missing("seal_key_file", "EDGE_SEAL_KEY_FILE"))?;
        Ok(EdgeFileConfig {
            listen,
            canonical_url: raw.canonical_url,
            ledger: raw.ledger,
            allowed_hosts: raw.allowed_hosts,
            allowed_origins: raw.allowed_origins,
            seal_key_file: PathBuf::from(seal_key_file),
            anonymous: raw.anonymous.map(|a| AnonymousAccess { tenant: a.tenant, principal: a.principal }),
        })
    }
}

/// An edge serving on its listener.
pub struct RunningEdge {
    pub url: String,
    pub local_addr: SocketAddr,
    server: tokio::task::JoinHandle<()>,
    audit: AuditSink,
}

impl RunningEdge {
    /// Stops serving, then commits the request decisions still buffered.
    pub async fn shutdown(self) {
        self.server.abort();
        self.audit.flush().await;
    }
}

/// What an edge serves besides its defaults.
#[derive(Debug, Clone)]
pub struct EdgeOptions {
    pub listen: SocketAddr,
    pub canonical_url: Option<String>,
    pub allowed_hosts: Vec<String>,
    pub allowed_origins: Vec<String>,
    pub seal_key: SealKey,
    pub anonymous: Option<AnonymousAccess>,
    /// The tenant that sees the conformance resources and prompts.
    pub fixtures_tenant: Option<String>,
}

impl EdgeOptions {
    pub fn new(listen: SocketAddr, seal_key: SealKey) -> EdgeOptions {
        EdgeOptions {
            listen,
            canonical_url: None,
            allowed_hosts: Vec::new(),
            allowed_origins: Vec::new(),
            seal_key,
            anonymous: None,
            fixtures_tenant: None,
        }
    }
}

/// Reads the edge's seal key, creating a random one (0600) on first use.
pub fn load_or_create_seal_key(path: &Path) -> Result<SealKey, String> {
    match std::fs::read_to_string(path) {
        Ok(text) => SealKey::from_hex(&text).map_err(|e| format!("{}: {e}", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            use std::io::Write;
            use std::os::unix::fs::OpenOptionsExt;
            let bytes: [u8; writ_mcp_edge::seal::KEY_BYTES] = rand::random();
            // create_new: when two replicas start at once, the second reads the first one's key.
            match std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(path) {
                Ok(mut f) => {
                    f.write_all(format!("{}\n", hex::encode(bytes)).as_bytes())
                        .map_err(|e| format!("{}: {e}", path.display()))?;
                    Ok(SealKey::new(bytes))
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    std::thread::sleep(std::time::Duration::from_millis(50));
                    load_or_create_seal_key(path)
                }
                Err(e) => Err(format!("{}: {e}", path.display())),
            }
        }
        Err(e) => Err(format!("{}: {e}", path.display())),
    }
}

/// Binds and serves an edge following `ledger`.
pub async fn start_edge(options: EdgeOptions, ledger: Arc<dyn Ledger>) -> std::io::Result<RunningEdge> {
    if options.anonymous.is_some() && !options.listen.ip().is_loopback() {
        return Err(std::io::Error::other("anonymous mode binds only loopback addresses"));
    }
    let listener = TcpListener::bind(options.listen).await?;
    let local_addr = listener.local_addr()?;
    let url = options.canonical_url.unwrap_or_else(|| format!("http://{local_addr}/mcp"));
    let mut config = EdgeConfig::for_url(&url, options.seal_key);
    config.allowed_hosts.extend(options.allowed_hosts.into_iter().map(|h| h.to_ascii_lowercase()));
    config.allowed_origins = options.allowed_origins;
    if let Some(anon) = options.anonymous {
        config = config.with_anonymous(anon);
    }
    config.fixtures_tenant = options.fixtures_tenant;
    let verifier = Verifier::follow(ledger.clone(), url.clone());
    let audit = AuditSink::start(ledger.clone());
    let metrics = crate::install_metrics();
    let app = writ_mcp_edge::router(ledger, verifier, audit.clone(), config).map_err(std::io::Error::other)?.route(
        "/metrics",
        axum::routing::get(move || {
            let metrics = metrics.clone();
            async move { metrics.map(|h| h.render()).unwrap_or_default() }
        }),
    );
    let server = tokio::spawn(async move {
        use axum::serve::ListenerExt;
        let listener = listener.tap_io(|tcp| {
            let _ = tcp.set_nodelay(true);
        });
        if let Err(e) = axum::serve(listener, app).await {
            tracing::error!(error = %e, "edge server stopped");
        }
    });
    tracing::info!(%url, "edge serving");
    Ok(RunningEdge { url, local_addr, server, audit })
}

/// `writ edge --config FILE`.
pub async fn run(config: &Path) -> Result<(), String> {
    let cfg =
        EdgeFileConfig::load(config, &|k| std::env::var(k).ok()).map_err(|e| format!("{}: {e}", config.display()))?;
    let ledger = Arc::new(HttpLedger::new(cfg.ledger.clone())) as Arc<dyn Ledger>;
    let options = EdgeOptions {
        listen: cfg.listen,
        canonical_url: cfg.canonical_url,
        allowed_hosts: cfg.allowed_hosts,
        allowed_origins: cfg.allowed_origins,
        seal_key: load_or_create_seal_key(&cfg.seal_key_file)?,
        anonymous: cfg.anonymous,
        fixtures_tenant: None,
    };
    let edge = start_edge(options, ledger).await.map_err(|e| format!("edge: {e}"))?;
    println!("Writ edge serving MCP at {}", edge.url);
    crate::wait_for_shutdown_signal().await;
    edge.shutdown().await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_env(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn config_rules() {
        let ok = EdgeFileConfig::parse(
            "listen = \"127.0.0.1:8080\"\nledger = [\"http://127.0.0.1:7700\"]\nseal_key_file = \"k\"\n",
            &no_env,
        )
        .unwrap();
        assert_eq!(ok.listen.port(), 8080);
        let open = EdgeFileConfig::parse("listen = \"0.0.0.0:8080\"\nledger = [\"http://127.0.0.1:7700\"]\n", &no_env);
        assert!(matches!(open, Err(ConfigError::TlsRequiredOutsideLoopback { .. })));
        let none = EdgeFileConfig::parse("listen = \"127.0.0.1:8080\"\n", &no_env);
        assert!(matches!(none, Err(ConfigError::Invalid { field: "ledger", .. })));
        let unknown = EdgeFileConfig::parse("listen = \"127.0.0.1:1\"\nledger = [\"http://x\"]\ncolour = 1\n", &no_env);
        assert!(matches!(unknown, Err(ConfigError::Parse(ref m)) if m.contains("colour")));
    }
}
