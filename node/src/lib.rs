//! The `writ` binary's library: a ledger node (Raft member + client API + admin API) and the
//! single-process dev mode. `main.rs` only parses arguments and calls in here.
//!
//! Architecture invariant: the clock and the peer transport of a node are injected
//! ([`ledger::Clock`], [`ledger::Peers`], the openraft network factory), so the deterministic
//! simulation harness in `tests/` drives the same `LedgerNode` code as production.

pub mod config;
pub mod dev;
pub mod edge;
pub mod executor;
pub mod executor_tls;
pub mod http;
pub mod keys;
pub mod ledger;
pub mod network;
pub mod pki;
pub mod tls;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use metrics_exporter_prometheus::PrometheusHandle;
use tokio::net::TcpListener;
use writ_client::Ledger;

use crate::config::NodeConfig;
use crate::ledger::{LedgerNode, SystemClock};
use crate::network::{HttpPeers, HttpRaftNetwork};

/// Exit status of a node that stopped on a fatal error (corrupt storage, a failed fsync, a
/// panic while applying): a supervisor must not restart it blindly (systemd:
/// `RestartPreventExitStatus=3`); an operator restores the node from its peers (wipe, rejoin).
pub const EXIT_FATAL: u8 = 3;

/// Connect timeout for node-to-node HTTP.
const PEER_CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// A node serving on its listener.
pub struct RunningNode {
    pub node: Arc<LedgerNode>,
    pub local_addr: SocketAddr,
    pub url: String,
    server: tokio::task::JoinHandle<()>,
}

impl RunningNode {
    /// Stops Raft and the listener.
    pub async fn shutdown(self) {
        let _ = self.node.raft.shutdown().await;
        self.server.abort();
    }
}

/// Installs the Prometheus recorder once per process and returns its handle.
pub fn install_metrics() -> Option<PrometheusHandle> {
    static HANDLE: std::sync::OnceLock<Option<PrometheusHandle>> = std::sync::OnceLock::new();
    HANDLE.get_or_init(|| metrics_exporter_prometheus::PrometheusBuilder::new().install_recorder().ok()).clone()
}

/// Binds, starts the Raft member and serves Raft, client and admin APIs on one TLS listener.
pub async fn start_node(cfg: &NodeConfig) -> std::io::Result<RunningNode> {
    let listener = TcpListener::bind(cfg.listen).await?;
    let local_addr = listener.local_addr()?;
    let tls = tls::TlsMaterial::load(&cfg.tls)?;
    let own = tls.identity().map_err(|e| std::io::Error::other(format!("{}: {e}", cfg.tls.cert.display())))?;
    if own != writ_api::role::Identity::new(writ_api::role::Role::Node, &cfg.node_id.to_string()).expect("node id ≥ 1")
    {
        return Err(std::io::Error::other(format!(
            "{} names {own}, not node:{} (issue it with `writ pki issue node {}`)",
            cfg.tls.cert.display(),
            cfg.node_id,
            cfg.node_id
        )));
    }
    let url = cfg.advertise_url.clone().unwrap_or_else(|| format!("https://{local_addr}"));
    // Every peer call has a deadline: this default, or the one set per Raft RPC. Raft RPCs and
    // client calls share one connection per peer over HTTP/2 (ALPN), presenting this node's
    // credential; heartbeats never queue behind a snapshot.
    let http = reqwest::Client::builder()
        .no_proxy()
        .connect_timeout(PEER_CONNECT_TIMEOUT)
        .timeout(writ_client::LEDGER_CALL_TIMEOUT)
        .pool_idle_timeout(Duration::from_secs(30))
        .use_preconfigured_tls(tls.client_config()?)
        .build()
        .map_err(std::io::Error::other)?;
    std::fs::create_dir_all(&cfg.data_dir)?;
    let node = LedgerNode::start(
        cfg.node_id,
        url.clone(),
        &cfg.data_dir,
        &cfg.raft,
        HttpRaftNetwork::new(cfg.node_id, http.clone()),
        Arc::new(SystemClock),
        Arc::new(HttpPeers::new(http)),
    )
    .await?;
    node.start_reaper();
    let keys = keys::load_or_create_signer(&cfg.authority.signing_key_file)?;
    // Executor CA keys come from their own secret, never from the token-signing key.
    let ca_secret =
        edge::load_or_create_secret(&cfg.authority.executor_ca_secret_file).map_err(std::io::Error::other)?;
    let admin = writ_tenant_admin::router(
        node.clone() as Arc<dyn Ledger>,
        writ_tenant_admin::AdminConfig {
            operator_token: cfg.operator_token.clone(),
            signer: Arc::new(keys.signer),
            token_audience: cfg.authority.token_audience.clone(),
            ca_secret,
        },
    );
    let app = http::router(node.clone(), install_metrics(), admin);
    let server = tokio::spawn(tls::serve(listener, app, tls.server_config()?));
    if cfg.bootstrap {
        let mut members = cfg.members.clone();
        // A member listed with port 0 (tests, dev) is this node at its bound URL.
        members.insert(cfg.node_id, url.clone());
        if let Err(e) = node.initialize(&members).await {
            tracing::warn!(error = %e, "cluster initialization failed");
        }
    }
    tracing::info!(node_id = cfg.node_id, %url, "node serving");
    Ok(RunningNode { node, local_addr, url, server })
}

/// Resolves on Ctrl-C or SIGTERM.
pub async fn wait_for_shutdown_signal() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term => {}
    }
}
