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

/// Every panel query of the dashboards under `deploy/grafana/`: (dashboard, panel, PromQL).
pub fn dashboard_queries() -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/grafana");
    let mut files: Vec<std::path::PathBuf> =
        std::fs::read_dir(&dir).expect("deploy/grafana").flatten().map(|e| e.path()).collect();
    files.sort();
    for file in files.iter().filter(|f| f.extension().is_some_and(|e| e == "json")) {
        let d: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(file).unwrap()).expect("dashboard JSON");
        for panel in d["panels"].as_array().expect("panels") {
            for target in panel["targets"].as_array().expect("targets") {
                let expr = target["expr"].as_str().expect("expr").to_string();
                out.push((
                    d["title"].as_str().unwrap().to_string(),
                    panel["title"].as_str().unwrap().to_string(),
                    expr,
                ));
            }
        }
    }
    out
}
