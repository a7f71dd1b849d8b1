//! `writ edge --config edge.toml`: a stateless MCP edge replica in front of a ledger cluster,
//! and the embedded edge of `writ dev`. Any number of edges can serve the same cluster; each
//! follows the ledger through its watch stream (see `writ_api::verifier`).

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use serde::Deserialize;
use tokio::net::TcpListener;
use writ_api::client::{HttpLedger, Ledger};
use writ_api::verifier::Verifier;
use writ_mcp_edge::audit::AuditSink;
use writ_mcp_edge::EdgeConfig;

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
}

/// A validated edge configuration.
#[derive(Debug, Clone)]
pub struct EdgeFileConfig {
    pub listen: SocketAddr,
    pub canonical_url: Option<String>,
    pub ledger: Vec<String>,
    pub allowed_hosts: Vec<String>,
    pub allowed_origins: Vec<String>,
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
        Ok(EdgeFileConfig {
            listen,
            canonical_url: raw.canonical_url,
            ledger: raw.ledger,
            allowed_hosts: raw.allowed_hosts,
            allowed_origins: raw.allowed_origins,
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

/// Binds and serves an edge following `ledger`.
pub async fn start_edge(
    listen: SocketAddr,
    canonical_url: Option<String>,
    ledger: Arc<dyn Ledger>,
    allowed_hosts: Vec<String>,
    allowed_origins: Vec<String>,
) -> std::io::Result<RunningEdge> {
    let listener = TcpListener::bind(listen).await?;
    let local_addr = listener.local_addr()?;
    let url = canonical_url.unwrap_or_else(|| format!("http://{local_addr}/mcp"));
    let mut config = EdgeConfig::for_url(&url);
    config.allowed_hosts.extend(allowed_hosts.into_iter().map(|h| h.to_ascii_lowercase()));
    config.allowed_origins = allowed_origins;
    let verifier = Verifier::follow(ledger.clone(), url.clone());
    let audit = AuditSink::start(ledger);
    let app = writ_mcp_edge::router(verifier, audit.clone(), config);
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
    let edge = start_edge(cfg.listen, cfg.canonical_url, ledger, cfg.allowed_hosts, cfg.allowed_origins)
        .await
        .map_err(|e| format!("edge: {e}"))?;
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
        let ok = EdgeFileConfig::parse("listen = \"127.0.0.1:8080\"\nledger = [\"http://127.0.0.1:7700\"]\n", &no_env)
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
