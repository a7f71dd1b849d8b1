//! openraft's own storage test suite, run against the RocksDB log store and state machine.

use openraft::testing::log::{StoreBuilder, Suite};
use openraft::type_config::TypeConfigExt;
use openraft::StorageError;
use tempfile::TempDir;
use writ_raft_store::{LogStore, StateMachine, TypeConfig};

struct RocksBuilder;

impl StoreBuilder<TypeConfig, LogStore, StateMachine, TempDir> for RocksBuilder {
    async fn build(&self) -> Result<(TempDir, LogStore, StateMachine), StorageError<TypeConfig>> {
        let dir = TempDir::new().map_err(|e| StorageError::read(TypeConfig::err_from_error(&e)))?;
        let (log, sm) =
            writ_raft_store::open(dir.path()).map_err(|e| StorageError::read(TypeConfig::err_from_error(&e)))?;
        Ok((dir, log, sm))
    }
}

#[test]
fn openraft_storage_suite_passes_on_rocksdb() {
    TypeConfig::run(async {
        Suite::test_all(RocksBuilder).await.expect("openraft storage suite");
    });
}
