//! openraft storage on RocksDB for the Writ ledger: a group-committed log store and the
//! event-sourced state machine, both in one RocksDB instance with separate column families.
//!
//! Architecture invariant: this crate does no networking and knows nothing of HTTP.

pub mod backup;
mod codec;
pub mod log_store;
pub mod snapshot;
pub mod state_machine;

use std::io;
use std::path::Path;
use std::sync::Arc;

use rocksdb::{ColumnFamilyDescriptor, Options, DB};

pub use log_store::LogStore;
pub use snapshot::SnapshotHandle;
pub use state_machine::StateMachine;

openraft::declare_raft_types!(
    /// Raft type configuration of the Writ ledger.
    pub TypeConfig:
        D = writ_api::ledger::LedgerRequest,
        R = writ_api::ledger::Outcome,
        Node = openraft::BasicNode,
);

/// The Raft handle type used by nodes.
pub type Raft = openraft::Raft<TypeConfig, StateMachine>;

pub(crate) const CF_LOGS: &str = "logs";
pub(crate) const CF_META: &str = "meta";
pub(crate) const CF_EVENTS: &str = "events";
pub(crate) const CF_AUDIT: &str = "audit";
/// Evidence blobs by `writ_api::evidence::blob_key` (their records are in the state).
pub(crate) const CF_EVIDENCE: &str = "evidence";

/// Opens (creating if missing) the node's RocksDB under `dir/db` and snapshots under
/// `dir/snapshots`, returning the log store and the state machine that share it. A directory
/// restored from a backup starts from its seed state (`backup`).
pub fn open(dir: &Path) -> io::Result<(LogStore, StateMachine)> {
    let db = Arc::new(open_db(&dir.join("db"))?);
    let seed = backup::read_seed(dir)?;
    Ok((LogStore::new(db.clone())?, StateMachine::new(db, dir.join("snapshots"), seed)?))
}

/// Opens (creating if missing) a RocksDB with the node's column families at `path`.
pub(crate) fn open_db(path: &Path) -> io::Result<DB> {
    let mut opts = Options::default();
    opts.create_if_missing(true);
    opts.create_missing_column_families(true);
    // Corruption must stop the node rather than be skipped.
    opts.set_paranoid_checks(true);
    let cfs = [CF_LOGS, CF_META, CF_EVENTS, CF_AUDIT, CF_EVIDENCE]
        .map(|name| ColumnFamilyDescriptor::new(name, Options::default()));
    DB::open_cf_descriptors(&opts, path, cfs).map_err(io::Error::other)
}
