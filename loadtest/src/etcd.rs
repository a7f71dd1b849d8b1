//! etcd as the system under load, for comparison (SPEC P1): the v3 HTTP/JSON gateway's
//! `/v3/kv/txn` doing put-if-absent (`create_revision == 0`) on a fresh key with a value as
//! long as an operation's input. `--verify` reads every acknowledged key back.

use std::sync::Mutex;

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use futures::StreamExt;
use serde_json::{json, Value};

use crate::engine::{Outcome, Workload};
use crate::verify::Verification;

pub struct EtcdLoad {
    pub http: reqwest::Client,
    pub endpoints: Vec<String>,
    pub run_id: String,
    pub value: String,
    pub acked: Mutex<Vec<String>>,
}

async fn post(http: &reqwest::Client, url: String, body: Value) -> Result<Value, String> {
    let r = http.post(url).json(&body).send().await.map_err(crate::mcp::transport)?;
    let status = r.status();
    let v: Value = r.json().await.map_err(|_| format!("HTTP_{}", status.as_u16()))?;
    if !status.is_success() {
        // The gateway's gRPC status code, e.g. 14 (unavailable) during an election.
        return Err(format!("ETCD_{}", v["code"].as_u64().unwrap_or(status.as_u16() as u64)));
    }
    Ok(v)
}

impl EtcdLoad {
    /// Posts to endpoint `i` (mod the count), moving on to the next one when a member cannot
    /// be connected to at all, as etcd's own client balancer does.
    async fn post_any(&self, i: usize, path: &str, body: Value) -> Result<Value, String> {
        let n = self.endpoints.len();
        let mut last = String::new();
        for k in 0..n {
            let url = format!("{}{path}", self.endpoints[(i + k) % n]);
            match post(&self.http, url, body.clone()).await {
                Err(e) if e == "CONNECT" => last = e,
                other => return other,
            }
        }
        Err(last)
    }
}

impl Workload for EtcdLoad {
    async fn call(&self, n: u64) -> Outcome {
        let key = format!("loadtest/{}/{n}", self.run_id);
        let k = B64.encode(&key);
        let body = json!({
            "compare": [{"key": k, "result": "EQUAL", "target": "CREATE", "create_revision": "0"}],
            "success": [{"request_put": {"key": k, "value": B64.encode(&self.value)}}],
        });
        match self.post_any(n as usize, "/v3/kv/txn", body).await {
            Ok(v) if v["succeeded"] == json!(true) => {
                self.acked.lock().expect("acked lock").push(key);
                Outcome::ok("txn")
            }
            Ok(_) => Outcome::err("txn", "KEY_EXISTS"),
            Err(reason) => Outcome::err("txn", reason),
        }
    }
}

/// Every acknowledged key is readable (linearizable range) from the cluster.
pub async fn verify(load: &EtcdLoad) -> Verification {
    let keys = load.acked.lock().expect("acked lock").clone();
    verify_keys(keys, |i, key| async move {
        let body = json!({"key": B64.encode(&key), "count_only": true});
        load.post_any(i, "/v3/kv/range", body).await.ok().map(|v| v["count"] == json!("1"))
    })
    .await
}

/// Reads every acknowledged key back with `present(attempt, key)` — `Some(found)`, or `None`
/// when the read itself failed (tried 5 times, 500 ms apart, moving to the next member) — and
/// reports the keys that are missing or unreadable as acknowledged and lost. Shared by every
/// etcd driver (this gateway one and the gRPC baseline).
pub async fn verify_keys<F, Fut>(keys: Vec<String>, present: F) -> Verification
where
    F: Fn(usize, String) -> Fut,
    Fut: std::future::Future<Output = Option<bool>>,
{
    let started = std::time::Instant::now();
    let present = &present;
    let missing: Vec<String> = futures::stream::iter(keys.iter().enumerate())
        .map(|(i, key)| async move {
            for attempt in 0..5 {
                match present(i + attempt, key.clone()).await {
                    Some(true) => return None,
                    Some(false) => return Some(key.clone()),
                    None => tokio::time::sleep(std::time::Duration::from_millis(500)).await,
                }
            }
            Some(format!("{key} (unreadable)"))
        })
        .buffer_unordered(32)
        .filter_map(|m| async move { m })
        .collect()
        .await;
    let mut v = Verification { acknowledged_lost: missing.len() as u64, ..Default::default() };
    let ok = missing.is_empty();
    v.checks.push(crate::verify::Check {
        name: "every acknowledged key is in etcd",
        ok,
        detail: if ok {
            format!("{} acknowledged, all present", keys.len())
        } else {
            format!("{} missing, e.g. {:?}", missing.len(), missing.iter().take(5).collect::<Vec<_>>())
        },
    });
    v.drain_s = started.elapsed().as_secs_f64();
    v
}
