//! The `writ` binary's library: a ledger node (Raft member + client API + admin API), the MCP
//! edge, the single-process dev mode (feature `server`, the default), and what an operator's
//! laptop or a site PC needs (`writ admin`, `writ executor` from the `writ-executor` crate,
//! `writ pki`), which builds without RocksDB and openraft (`--no-default-features`: the slim
//! client binary). `main.rs` only
//! parses arguments and calls in here.
//!
//! Architecture invariant: the clock and the peer transport of a node are injected
//! ([`ledger::Clock`], [`ledger::Peers`], the openraft network factory), so the deterministic
//! simulation harness in `tests/` drives the same `LedgerNode` code as production.

#[cfg(feature = "server")]
pub mod alloc;
#[cfg(feature = "server")]
pub mod batcher;
#[cfg(feature = "server")]
pub mod config;
#[cfg(feature = "server")]
pub mod dev;
#[cfg(feature = "server")]
pub mod edge;
#[cfg(feature = "server")]
pub mod executor_tls;
#[cfg(feature = "server")]
pub mod http;
#[cfg(feature = "server")]
pub mod ledger;
#[cfg(feature = "server")]
pub mod network;
pub mod observe;
pub mod pki;
#[cfg(feature = "server")]
pub mod seed;
#[cfg(feature = "server")]
pub mod storage;
#[cfg(feature = "server")]
pub mod tls;

#[cfg(feature = "server")]
mod server;
#[cfg(feature = "server")]
pub use server::*;

pub use observe::install_metrics;

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
