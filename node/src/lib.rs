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

/// Binds, starts the Raft member and serves Raft, client and admin APIs on one listener.
pub async fn start_node(cfg: &NodeConfig) -> std::io::Result<RunningNode> {
    let listener = TcpListener::bind(cfg.listen).await?;
    let local_addr = listener.local_addr()?;
    let tls = cfg.tls.as_ref().map(tls::TlsMaterial::load).transpose()?;
    let scheme = if tls.is_some() { "https" } else { "http" };
    let url = cfg.advertise_url.clone().unwrap_or_else(|| format!("{scheme}://{local_addr}"));
    // Every peer call has a deadline: this default, or the one set per Raft RPC.
    let mut http = reqwest::Client::builder()
        .no_proxy()
        .connect_timeout(PEER_CONNECT_TIMEOUT)
        .timeout(writ_client::LEDGER_CALL_TIMEOUT)
        .pool_idle_timeout(Duration::from_secs(30));
    // Raft RPCs and client calls share one connection per peer over HTTP/2: negotiated by ALPN
    // under TLS, prior knowledge (h2c) on loopback. Heartbeats never queue behind a snapshot.
    http = match &tls {
        Some(t) => http.use_preconfigured_tls(t.client_config()?),
        None => http.http2_prior_knowledge(),
    };
    let http = http.build().map_err(std::io::Error::other)?;
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
    let admin = writ_tenant_admin::router(
        node.clone() as Arc<dyn Ledger>,
        writ_tenant_admin::AdminConfig {
            operator_token: cfg.operator_token.clone(),
            signer: Arc::new(keys.signer),
            token_audience: cfg.authority.token_audience.clone(),
            ca_secret: keys.ca_secret,
        },
    );
    let app = http::router(node.clone(), install_metrics(), admin);
    let server = match tls {
        None => tokio::spawn(async move {
            use axum::serve::ListenerExt;
            // Small request/response frames: disable Nagle or they wait for delayed ACKs.
            let listener = listener.tap_io(|tcp| {
                let _ = tcp.set_nodelay(true);
            });
            if let Err(e) = axum::serve(listener, app).await {
                tracing::error!(error = %e, "node server stopped");
            }
        }),
        Some(t) => tokio::spawn(tls::serve(listener, app, t.server_config()?)),
    };
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
