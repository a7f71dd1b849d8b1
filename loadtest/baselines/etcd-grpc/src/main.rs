//! `etcd-grpc-load`: etcd's put-if-absent transaction (`create_revision == 0`, then a put of a
//! value as long as a Writ operation's input) over the native gRPC API, with writ-loadtest's
//! engine, options and summary — the P1 anchor at its best (the gateway costs etcd 25–40 %).
//! `--verify` reads every acknowledged key back (linearizable count-only range).
//!
//! `--workflow` runs the whole operation instead (`workflow.rs`): idempotent submission, a
//! worker's claim and report, the client waiting for the report — the anchor for one Writ
//! operation. `--cacert/--cert/--key` connect over TLS with a client certificate, as Writ's
//! clients and executors do.

mod workflow;

use std::process::ExitCode;
use std::sync::{Arc, Mutex};

use clap::Parser;
use etcd_client::{
    Certificate, Client, Compare, CompareOp, ConnectOptions, GetOptions, Identity, KvClient, TlsOptions, Txn, TxnOp,
};
use writ_loadtest::cli::{list, LoadArgs};
use writ_loadtest::engine::{Outcome, Workload};

#[derive(Parser)]
#[command(name = "etcd-grpc-load", about = "etcd put-if-absent transactions over gRPC, measured like writ-loadtest")]
struct Cli {
    #[command(flatten)]
    load: LoadArgs,
    /// Client URLs of the etcd members (each connection balances over all of them).
    #[arg(long, env = "WRIT_ETCD_URLS")]
    endpoints: String,
    /// gRPC connections the clients share (HTTP/2 multiplexes the requests over them).
    #[arg(long, default_value_t = 4)]
    connections: usize,
    /// Value size in bytes (the same as a Writ operation's input).
    #[arg(long, default_value_t = 128)]
    payload_bytes: usize,
    /// Read every acknowledged key back afterwards; exit 1 if one is missing.
    #[arg(long)]
    verify: bool,
    /// Run whole operations (submit, a worker's claim and report, the client waiting for it).
    #[arg(long)]
    workflow: bool,
    /// Longest a workflow client waits for its operation's report, in seconds.
    #[arg(long, default_value_t = 30.0)]
    report_wait_s: f64,
    /// CA certificate (PEM) of the members' TLS certificates (with https endpoints).
    #[arg(long, requires_all = ["cert", "key"])]
    cacert: Option<std::path::PathBuf>,
    /// Client certificate (PEM) the members check.
    #[arg(long, requires = "cacert")]
    cert: Option<std::path::PathBuf>,
    /// Its private key (PEM).
    #[arg(long, requires = "cacert")]
    key: Option<std::path::PathBuf>,
}

impl Cli {
    fn options(&self) -> Result<Option<ConnectOptions>, String> {
        let (Some(ca), Some(cert), Some(key)) = (&self.cacert, &self.cert, &self.key) else { return Ok(None) };
        let read = |p: &std::path::PathBuf| std::fs::read(p).map_err(|e| format!("{}: {e}", p.display()));
        let tls = TlsOptions::new()
            .ca_certificate(Certificate::from_pem(read(ca)?))
            .identity(Identity::from_pem(read(cert)?, read(key)?));
        Ok(Some(ConnectOptions::new().with_tls(tls)))
    }

    async fn connect(&self, endpoints: &[String]) -> Result<Client, String> {
        Client::connect(endpoints, self.options()?).await.map_err(|e| format!("connect {endpoints:?}: {e}"))
    }
}

struct GrpcLoad {
    kv: Vec<KvClient>,
    run_id: String,
    value: String,
    acked: Mutex<Vec<String>>,
}

/// The gRPC status of a failed call, as the summary counts it (e.g. `ETCD_GRPC_Unavailable`
/// during an election).
pub(crate) fn reason(e: etcd_client::Error) -> String {
    match e {
        etcd_client::Error::GRpcStatus(s) => format!("ETCD_GRPC_{:?}", s.code()),
        other => format!("ETCD_CLIENT: {other}"),
    }
}

impl Workload for GrpcLoad {
    async fn call(&self, n: u64) -> Outcome {
        let key = format!("loadtest/{}/{n}", self.run_id);
        let txn = Txn::new()
            .when([Compare::create_revision(key.as_str(), CompareOp::Equal, 0)])
            .and_then([TxnOp::put(key.as_str(), self.value.as_str(), None)]);
        let mut kv = self.kv[n as usize % self.kv.len()].clone();
        match kv.txn(txn).await {
            Ok(r) if r.succeeded() => {
                self.acked.lock().expect("acked lock").push(key);
                Outcome::ok("txn")
            }
            Ok(_) => Outcome::err("txn", "KEY_EXISTS"),
            Err(e) => Outcome::err("txn", reason(e)),
        }
    }
}

async fn run(cli: Cli) -> Result<ExitCode, String> {
    let endpoints = list(&cli.endpoints);
    if endpoints.is_empty() {
        return Err("no etcd endpoint (--endpoints or WRIT_ETCD_URLS)".into());
    }
    let mut clients = Vec::new();
    for _ in 0..cli.connections.max(1) {
        clients.push(cli.connect(&endpoints).await?);
    }
    let kv: Vec<KvClient> = clients.iter().map(Client::kv_client).collect();
    let run_id = uuid::Uuid::new_v4().simple().to_string()[..12].to_string();
    if cli.workflow {
        let worker = cli.connect(&endpoints).await?;
        let wait = std::time::Duration::from_secs_f64(cli.report_wait_s);
        let value = "x".repeat(cli.payload_bytes);
        let load = Arc::new(workflow::Workflow::start(kv, &clients[0], worker, &run_id, value, wait).await?);
        let mut summary = cli.load.measure("etcd-workflow", load.clone()).await?;
        summary.setup = setup(&cli);
        if cli.verify {
            let keys = load.acked.lock().expect("acked lock").clone();
            let reported = |i: usize, key: String| {
                let mut kv = load.kv(i);
                async move {
                    let r = kv.get(key, None).await.ok()?;
                    Some(r.kvs().first().is_some_and(|kv| workflow::reported(kv.value())))
                }
            };
            summary.verify = Some(writ_loadtest::etcd::verify_keys(keys, reported).await);
        }
        return cli.load.finish(&summary);
    }
    let load = Arc::new(GrpcLoad { kv, run_id, value: "x".repeat(cli.payload_bytes), acked: Mutex::new(Vec::new()) });
    let mut summary = cli.load.measure("etcd-grpc", load.clone()).await?;
    summary.setup = setup(&cli);
    if cli.verify {
        let keys = load.acked.lock().expect("acked lock").clone();
        let present = |i: usize, key: String| {
            let mut kv = load.kv[i % load.kv.len()].clone();
            async move {
                let r = kv.get(key, Some(GetOptions::new().with_count_only())).await.ok()?;
                Some(r.count() == 1)
            }
        };
        summary.verify = Some(writ_loadtest::etcd::verify_keys(keys, present).await);
    }
    cli.load.finish(&summary)
}

fn setup(cli: &Cli) -> serde_json::Value {
    serde_json::json!({"payload_bytes": cli.payload_bytes, "connections": cli.connections,
                       "workflow": cli.workflow, "tls": cli.cacert.is_some()})
}

#[tokio::main]
async fn main() -> ExitCode {
    run(Cli::parse()).await.unwrap_or_else(|e| {
        eprintln!("etcd-grpc-load: {e}");
        ExitCode::from(2)
    })
}
