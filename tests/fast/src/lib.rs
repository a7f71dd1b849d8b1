//! Helpers of the fast tier, shared with the cluster tier: the routers on an in-memory ledger,
//! the operator token every test deployment uses, bounded polling and the test log.

pub mod routers;

/// The operator token of every test deployment (in-memory routers and real nodes alike).
pub const TEST_OPERATOR_TOKEN: &str = "test-operator-token-0123456789";

use std::time::{Duration, Instant};

/// Polls `check` every 50 ms until it returns `Some`, or panics with `what` after `limit`.
pub async fn eventually<T, F, Fut>(what: &str, limit: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(start.elapsed() < limit, "timed out after {limit:?} waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Installs a test log subscriber once (quiet unless WRIT_TEST_LOG is set).
pub fn init_test_log() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let filter = std::env::var("WRIT_TEST_LOG").unwrap_or_else(|_| "error".into());
        let _ = tracing_subscriber::fmt().with_env_filter(filter).with_test_writer().try_init();
    });
}
