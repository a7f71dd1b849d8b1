//! The operation Writ performs, built on etcd the way a user would build it: the client writes
//! the idempotency key and the operation record in one put-if-absent transaction, a worker
//! watching the operations claims each new one with a transaction on its revision, performs the
//! (null) effect and reports with a transaction on its claim; the client waits until a watch
//! shows the report. Three consensus writes per operation, as Writ's submit, dispatch and
//! report.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use etcd_client::{Client, Compare, CompareOp, EventType, KvClient, Txn, TxnOp, WatchOptions};
use tokio::sync::{oneshot, Semaphore};
use writ_loadtest::engine::{Outcome, Workload};

use crate::reason;

/// Operation records, one key per operation: `pending|…`, `claimed|…`, `reported|…`.
const PENDING: &str = "pending|";
const CLAIMED: &str = "claimed|";
const REPORTED: &str = "reported|";
/// Claims a worker has in flight at most (a bound on its tasks, not a tuning).
const WORKER_IN_FLIGHT: usize = 4096;

/// Whether an operation record says reported.
pub fn reported(record: &[u8]) -> bool {
    record.starts_with(REPORTED.as_bytes())
}

type Waiters = Arc<Mutex<HashMap<Vec<u8>, oneshot::Sender<()>>>>;

pub struct Workflow {
    kv: Vec<KvClient>,
    prefix: String,
    value: String,
    waiters: Waiters,
    wait: Duration,
    pub acked: Mutex<Vec<String>>,
}

impl Workflow {
    /// Starts the client's watch of the operation records (reports wake their waiting callers)
    /// and a worker on its own connection, then returns the workload.
    pub async fn start(
        kv: Vec<KvClient>,
        client: &Client,
        worker: Client,
        run_id: &str,
        value: String,
        wait: Duration,
    ) -> Result<Workflow, String> {
        let prefix = format!("wf/{run_id}/");
        let waiters: Waiters = Arc::default();
        watch_reports(client.clone(), format!("{prefix}op/"), waiters.clone()).await?;
        run_worker(worker, format!("{prefix}op/")).await?;
        Ok(Workflow { kv, prefix, value, waiters, wait, acked: Mutex::new(Vec::new()) })
    }

    pub fn op_key(&self, n: u64) -> String {
        format!("{}op/{n}", self.prefix)
    }

    pub fn kv(&self, i: usize) -> KvClient {
        self.kv[i % self.kv.len()].clone()
    }
}

impl Workload for Workflow {
    async fn call(&self, n: u64) -> Outcome {
        let (key, op) = (format!("{}key/{n}", self.prefix), self.op_key(n));
        let (tx, rx) = oneshot::channel();
        self.waiters.lock().expect("waiters lock").insert(op.clone().into_bytes(), tx);
        let txn = Txn::new().when([Compare::create_revision(key.as_str(), CompareOp::Equal, 0)]).and_then([
            TxnOp::put(key.as_str(), n.to_string(), None),
            TxnOp::put(op.as_str(), format!("{PENDING}{}", self.value), None),
        ]);
        let submitted = match self.kv(n as usize).txn(txn).await {
            Ok(r) if r.succeeded() => Ok(()),
            Ok(_) => Err("KEY_EXISTS".to_string()),
            Err(e) => Err(reason(e)),
        };
        if let Err(why) = submitted {
            self.waiters.lock().expect("waiters lock").remove(op.as_bytes());
            return Outcome::err("operation", why);
        }
        match tokio::time::timeout(self.wait, rx).await {
            Ok(Ok(())) => {
                self.acked.lock().expect("acked lock").push(op);
                Outcome::ok("operation")
            }
            _ => {
                self.waiters.lock().expect("waiters lock").remove(op.as_bytes());
                Outcome::err("operation", "REPORT_NOT_SEEN")
            }
        }
    }
}

/// Watches the operation records and wakes the caller waiting for each one reported.
async fn watch_reports(mut client: Client, prefix: String, waiters: Waiters) -> Result<(), String> {
    let (watcher, mut stream) =
        client.watch(prefix.as_str(), Some(WatchOptions::new().with_prefix())).await.map_err(|e| e.to_string())?;
    tokio::spawn(async move {
        let _keep = watcher;
        while let Ok(Some(resp)) = stream.message().await {
            for kv in resp.events().iter().filter(|e| e.event_type() == EventType::Put).filter_map(|e| e.kv()) {
                if reported(kv.value()) {
                    if let Some(tx) = waiters.lock().expect("waiters lock").remove(kv.key()) {
                        let _ = tx.send(());
                    }
                }
            }
        }
    });
    Ok(())
}

/// The worker: watches for pending operations, claims each with a transaction on the revision
/// it saw (another worker's claim makes it fail), performs the null effect and reports with a
/// transaction on its own claim.
async fn run_worker(mut client: Client, prefix: String) -> Result<(), String> {
    let (watcher, mut stream) =
        client.watch(prefix.as_str(), Some(WatchOptions::new().with_prefix())).await.map_err(|e| e.to_string())?;
    let kv = client.kv_client();
    let slots = Arc::new(Semaphore::new(WORKER_IN_FLIGHT));
    tokio::spawn(async move {
        let _keep = watcher;
        while let Ok(Some(resp)) = stream.message().await {
            for e in resp.events().iter().filter(|e| e.event_type() == EventType::Put) {
                let Some(rec) = e.kv().filter(|kv| kv.value().starts_with(PENDING.as_bytes())) else { continue };
                let (key, seen, value) =
                    (rec.key().to_vec(), rec.mod_revision(), rec.value()[PENDING.len()..].to_vec());
                let Ok(permit) = slots.clone().acquire_owned().await else { return };
                let kv = kv.clone();
                tokio::spawn(async move {
                    let _permit = permit;
                    if let Err(e) = perform(kv, key, seen, value).await {
                        eprintln!("etcd workflow worker: {e}");
                    }
                });
            }
        }
    });
    Ok(())
}

/// Claims the operation at revision `seen`, performs nothing, and reports.
async fn perform(mut kv: KvClient, key: Vec<u8>, seen: i64, input: Vec<u8>) -> Result<(), String> {
    let record = |state: &str| [state.as_bytes(), &input].concat();
    let claim = Txn::new().when([Compare::mod_revision(key.clone(), CompareOp::Equal, seen)]).and_then([TxnOp::put(
        key.clone(),
        record(CLAIMED),
        None,
    )]);
    let claimed = kv.txn(claim).await.map_err(reason)?;
    let Some(at) = claimed.succeeded().then(|| claimed.header().map(|h| h.revision())).flatten() else {
        return Ok(()); // another worker holds it
    };
    let report = Txn::new().when([Compare::mod_revision(key.clone(), CompareOp::Equal, at)]).and_then([TxnOp::put(
        key,
        record(REPORTED),
        None,
    )]);
    match kv.txn(report).await.map_err(reason)?.succeeded() {
        true => Ok(()),
        false => Err("the claim was lost before the report".into()),
    }
}
