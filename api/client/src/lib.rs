//! Writ's clients: everything that talks to a ledger node over the network or reads a clock.
//!
//! - [`ledger`]: the [`Ledger`] trait the edge and the admin service are written against, and
//!   [`HttpLedger`], its implementation over a node's client API, whose [`CallError`] says
//!   whether a failed request may have executed.
//! - [`verifier`]: token verification against a watch-fed replica of the ledger state.
//! - [`admin`]: [`AdminClient`], the one typed client of the admin API.
//! - [`tls`]: [`ClientTls`], the CA a client trusts and the role credential it presents.
//! - [`memory`]: [`MemoryLedger`], the ledger in one process (no Raft, no RocksDB) for router
//!   tests of whatever is written against [`Ledger`].
//!
//! The pure core (`writ-api`) stays free of IO; this crate is where IO meets it.

pub mod admin;
pub mod egress;
pub mod files;
pub mod ledger;
pub mod memory;
pub mod tls;
pub mod upstream;
pub mod verifier;

pub use admin::{AdminClient, AdminError};
pub use ledger::{
    query_as, unavailable, CallError, HttpLedger, Ledger, NodeHttp, WatchStream, FORWARDED_HEADER, LEDGER_CALL_TIMEOUT,
    TRACE_HEADER,
};
pub use memory::MemoryLedger;
pub use tls::ClientTls;
pub use verifier::Verifier;

/// Wall-clock milliseconds since the Unix epoch (0 if the clock is before it). The ledger never
/// calls this: the leader stamps commands, and `apply` uses the stamp.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}
