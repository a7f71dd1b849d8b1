//! Serving a ledger node: its Raft member and its listeners by purpose (feature `server`).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use writ_client::Ledger;

use crate::config::NodeConfig;
use crate::ledger::{LedgerNode, SystemClock};
use crate::network::{HttpPeers, HttpRaftNetwork};
use crate::{edge, http, pki, tls};

/// Exit status of a node that stopped on a fatal error (corrupt storage, a failed fsync, a
/// panic while applying): a supervisor must not restart it blindly (systemd:
/// `RestartPreventExitStatus=3`); an operator restores the node from its peers (wipe, rejoin).
pub const EXIT_FATAL: u8 = 3;

/// Connect timeout for node-to-node HTTP.
const PEER_CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// How long a stopping process lets in-flight requests finish.
pub const DRAIN_DEADLINE: Duration = Duration::from_secs(10);
/// How long a stopping leader waits for a successor to take over.
const HANDOFF_DEADLINE: Duration = Duration::from_secs(3);

/// A node serving on its listeners.
pub struct RunningNode {
    pub node: Arc<LedgerNode>,
    /// The peer listener's bound address.
    pub local_addr: SocketAddr,
    /// The peer listener's URL (advertised to peers).
    pub url: String,
    /// Where `/v1` is served (the peer listener's URL in one-port mode).
    pub admin_url: String,
    /// Where `/healthz`, `/readyz`, `/metrics` are served.
    pub probe_url: String,
    drain: tls::Drain,
    servers: Vec<tokio::task::JoinHandle<()>>,
}

impl RunningNode {
    /// An orderly stop: a leader hands leadership to the most caught-up voter first (no
    /// election timeout for the others to sit out), then the listeners drain their in-flight
    /// requests, then Raft stops.
    pub async fn shutdown(self) {
        self.node.hand_off_leadership(HANDOFF_DEADLINE).await;
        self.drain.start();
        for s in self.servers {
            let _ = s.await;
        }
        let _ = self.node.raft.shutdown().await;
    }
}

/// Binds, starts the Raft member and serves its listeners by purpose: the peer listener (Raft
/// and the ledger client API, mutual TLS), the admin API (HTTPS) and the probes (plain HTTP),
/// the last two on the peer listener unless they have their own addresses.
pub async fn start_node(cfg: &NodeConfig) -> std::io::Result<RunningNode> {
    let id = cfg.node_id.to_string();
    crate::observe::start_telemetry(cfg.otlp_endpoint.as_deref(), "node", &id);
    let credential = node_credential(cfg)?;
    let split = cfg.admin_listen.is_some() && cfg.probe_listen.is_some();
    let auth = if split { tls::ClientAuth::Required } else { tls::ClientAuth::Optional };
    let peer_tls = tls::ServerTls::new(credential.clone(), Some(&cfg.tls.ca), auth).map_err(std::io::Error::other)?;
    let listener = TcpListener::bind(cfg.listen).await?;
    let local_addr = listener.local_addr()?;
    writ_client::egress::register_own_listener(local_addr);
    let url = cfg.advertise_url.clone().unwrap_or_else(|| format!("https://{local_addr}"));
    let http = peer_client(cfg, &credential)?;
    std::fs::create_dir_all(&cfg.data_dir)?;
    if cfg.raft.clock_ahead_ms > 0 {
        tracing::warn!(
            ahead_ms = cfg.raft.clock_ahead_ms,
            "the ledger clock runs ahead of the wall clock ([raft] ledger_clock_ahead_s)"
        );
    }
    let network = HttpRaftNetwork::new(cfg.node_id, http.clone(), cfg.raft.snapshot_chunk_bytes)
        .with_body_bytes_max(cfg.raft.rpc_body_bytes_max);
    let node = LedgerNode::start(
        cfg.node_id,
        url.clone(),
        &cfg.data_dir,
        &cfg.raft,
        |log: &writ_raft_store::LogStore| network.with_log_bytes(log.log_bytes()),
        Arc::new(SystemClock { ahead_ms: cfg.raft.clock_ahead_ms }),
        Arc::new(HttpPeers::new(http)),
    )
    .await?;
    node.start_reaper();
    node.start_storage_watch();
    node.start_snapshot_by_log_size();
    node.start_failure_detector();
    node.start_version_watch();
    node.start_issuer_watch(Duration::from_millis(cfg.raft.issuer_watch_ms));
    let admin = admin_router(cfg, &node)?;
    let drain = tls::Drain::default();
    let probes = http::probe_router(node.clone(), crate::observe::start_server_metrics(), drain.clone());
    // After the metrics recorder is installed: the thread sets the allocator's gauges at once.
    crate::alloc::start_releasing_free_memory();
    let mut servers = Vec::new();
    let mut peer_app = http::peer_router(node.clone(), drain.clone());
    let admin_url = match cfg.admin_listen {
        Some(addr) => {
            let (auth, admin) = if cfg.admin_require_client_certificate {
                (tls::ClientAuth::Required, http::with_operator_certificates(admin, node.clone()))
            } else {
                (tls::ClientAuth::Optional, admin)
            };
            let admin_tls =
                tls::ServerTls::new(credential.clone(), Some(&cfg.tls.ca), auth).map_err(std::io::Error::other)?;
            let (bound, task) =
                tls::spawn(addr, admin, tls::Accept::tls(admin_tls, "admin"), &drain, DRAIN_DEADLINE).await?;
            servers.push(task);
            format!("https://{bound}")
        }
        None => {
            peer_app = peer_app.merge(admin);
            url.clone()
        }
    };
    let probe_url = match cfg.probe_listen {
        Some(addr) => {
            let (bound, task) = tls::spawn(addr, probes, tls::Accept::plain("probe"), &drain, DRAIN_DEADLINE).await?;
            servers.push(task);
            format!("http://{bound}")
        }
        None => {
            peer_app = peer_app.merge(probes);
            url.clone()
        }
    };
    servers.push(tokio::spawn(tls::serve(
        listener,
        peer_app,
        tls::Accept::tls(peer_tls, "peer"),
        drain.clone(),
        DRAIN_DEADLINE,
    )));
    if cfg.bootstrap {
        let mut members = cfg.members.clone();
        // A member listed with port 0 (tests, dev) is this node at its bound URL.
        members.insert(cfg.node_id, url.clone());
        if let Err(e) = node.initialize(&members).await {
            tracing::warn!(error = %e, "cluster initialization failed");
        }
    }
    tracing::info!(node_id = cfg.node_id, %url, %admin_url, %probe_url, "node serving");
    Ok(RunningNode { node, local_addr, url, admin_url, probe_url, drain, servers })
}

/// The node's credential, followed on disk: a rotated certificate must still name this node.
fn node_credential(cfg: &NodeConfig) -> std::io::Result<Arc<writ_client::tls::CredentialFiles>> {
    let id = cfg.node_id.to_string();
    let check_own = writ_api::role::Identity::new(writ_api::role::Role::Node, &id).expect("node id ≥ 1");
    writ_client::tls::CredentialFiles::load(
        &cfg.tls.cert,
        &cfg.tls.key,
        Some(Arc::new(move |cert| match pki::identity_of(cert) {
            Ok(id) if id == check_own => Ok(()),
            Ok(named) => Err(format!("names {named}, not {check_own} (issue it with `writ pki issue node {id}`)")),
            Err(e) => Err(e),
        })),
    )
    .map_err(std::io::Error::other)
}

/// The client of peer calls: every call has a deadline (this default, or the one set per Raft
/// RPC); Raft RPCs and client calls share one connection per peer over HTTP/2 (ALPN),
/// presenting this node's credential, so heartbeats never queue behind a snapshot.
fn peer_client(
    cfg: &NodeConfig,
    credential: &Arc<writ_client::tls::CredentialFiles>,
) -> std::io::Result<reqwest::Client> {
    let client_tls =
        writ_client::ClientTls::with_credential(&cfg.tls.ca, credential.clone()).map_err(std::io::Error::other)?;
    client_tls
        .apply(reqwest::Client::builder())
        .no_proxy()
        .connect_timeout(PEER_CONNECT_TIMEOUT)
        .timeout(writ_client::LEDGER_CALL_TIMEOUT)
        .pool_idle_timeout(Duration::from_secs(30))
        .build()
        .map_err(std::io::Error::other)
}

/// The admin API of this node: its token-signing keys and executor CA secret (each its own
/// file), answered from the node's ledger, state and backups.
fn admin_router(cfg: &NodeConfig, node: &Arc<LedgerNode>) -> std::io::Result<axum::Router> {
    let signing_keys = writ_tenant_admin::signing::SigningKeys::load_or_create(&cfg.authority.signing_key_file)?;
    // Executor CA keys come from their own secret, never from the token-signing key.
    let ca_secret =
        edge::load_or_create_secret(&cfg.authority.executor_ca_secret_file).map_err(std::io::Error::other)?;
    Ok(writ_tenant_admin::router(
        node.clone() as Arc<dyn Ledger>,
        writ_tenant_admin::AdminConfig {
            operator_token: cfg.operator_token.clone(),
            signing_keys,
            token_audience: cfg.authority.token_audience.clone(),
            ca_secret,
            executor_cert_ttl_s: cfg.authority.executor_cert_ttl_s,
            edge_ca_pins: edge_ca_pins(&cfg.authority.edge_ca_files)?,
            state: Some(node.clone() as Arc<dyn writ_client::verifier::StateView>),
            backup: Some(node.clone() as Arc<dyn writ_tenant_admin::BackupSource>),
        },
    ))
}

/// sha256 (hex) of the first certificate of each PEM file: the edge CAs enrollment tokens pin.
fn edge_ca_pins(files: &[std::path::PathBuf]) -> std::io::Result<Vec<String>> {
    files
        .iter()
        .map(|f| {
            let pem = std::fs::read_to_string(f).map_err(|e| std::io::Error::other(format!("{}: {e}", f.display())))?;
            let der = writ_api::pem::first(&pem, "CERTIFICATE")
                .ok_or_else(|| std::io::Error::other(format!("{}: no PEM certificate", f.display())))?;
            Ok(writ_api::sha256_hex(&der))
        })
        .collect()
}
