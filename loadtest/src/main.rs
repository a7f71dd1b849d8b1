//! `writ-loadtest writ|etcd|mcp`: see `--help` and docs/performance.md.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use clap::{Args, Parser, Subcommand};
use serde_json::json;
use writ_loadtest::cli::{list, LoadArgs};
use writ_loadtest::writ::{self, Admin, Mix, Setup, WritLoad};
use writ_loadtest::{etcd, mcp, verify};

#[derive(Parser)]
#[command(name = "writ-loadtest", version, about = "Load through Writ's public edge, with invariant checks")]
struct Cli {
    #[command(subcommand)]
    system: System,
}

#[derive(Subcommand)]
enum System {
    /// A Writ cluster: setup through the admin API, agents through the MCP edges.
    Writ(Box<WritArgs>),
    /// An etcd cluster's v3 HTTP/JSON gateway: put-if-absent transactions.
    Etcd(EtcdArgs),
    /// A bare MCP server without auth (the rmcp baseline): tools/list and its `greet` tool.
    Mcp(McpArgs),
}

#[derive(Args)]
struct WritArgs {
    #[command(flatten)]
    load: LoadArgs,
    /// Admin API URLs, tried in turn (every node serves it).
    #[arg(long, env = "WRIT_NODE_URLS")]
    admin_urls: String,
    #[arg(long, env = "WRIT_ADMIN_TOKEN", hide_env_values = true)]
    admin_token: String,
    /// The cluster CA (PEM) the admin API's certificate chains to.
    #[arg(long, env = "WRIT_CA_FILE")]
    ca: Option<std::path::PathBuf>,
    /// MCP edge URLs; requests are spread over all of them.
    #[arg(long, env = "WRIT_MCP_URLS")]
    edges: String,
    /// The agents' token audience: the edges' canonical URL, or `urn:writ:mcp` (every edge).
    #[arg(long, env = "WRIT_MCP_URL")]
    audience: String,
    /// Executor endpoints for the simulated executors (default: what enrollment answers).
    #[arg(long, env = "WRIT_EXECUTOR_URLS", default_value = "")]
    executor_urls: String,
    /// Tenants the agents act in, each with its own executor.
    #[arg(long, default_value_t = 1)]
    tenants: usize,
    /// Extra tenants provisioned but idle (P4).
    #[arg(long, default_value_t = 0)]
    idle_tenants: usize,
    /// An upstream MCP server (its URL, protocol 2026-07-28) whose `greet` tool answers the
    /// tenants' `greet` action (P5: the cost of a call through Writ to an upstream).
    #[arg(long)]
    upstream: Option<String>,
    /// The MCP wire the agents speak: `2026-07-28` (stateless, `_meta`), or `2025-11-25` (one
    /// session per tenant opened with `initialize`, continued on every edge).
    #[arg(long, default_value = "2026-07-28", value_parser = ["2026-07-28", "2025-11-25"])]
    wire: String,
    /// Tenant name prefix; existing tenants of that name are reused.
    #[arg(long, default_value = "lt")]
    prefix: String,
    /// Simulated devices per tenant.
    #[arg(long, default_value_t = 4)]
    devices: usize,
    /// Request mix by weight: discover, read, propose, execute, readback.
    #[arg(long, default_value = "execute=1")]
    mix: String,
    /// Share of executes that retry an acknowledged key (same payload: same operation).
    #[arg(long, default_value_t = 0.0)]
    duplicate_share: f64,
    /// Share of executes that reuse an acknowledged key with a changed payload (refused).
    #[arg(long, default_value_t = 0.0)]
    changed_share: f64,
    /// Share of fresh executes that drive a device (reservations) instead of a device-less action.
    #[arg(long, default_value_t = 0.0)]
    device_share: f64,
    /// Size of each operation's input in bytes.
    #[arg(long, default_value_t = 128)]
    payload_bytes: usize,
    /// The agents' operation quota per minute (then `--verify` checks it is never overshot).
    #[arg(long)]
    operations_per_minute: Option<u64>,
    #[arg(long)]
    concurrent_operations: Option<u64>,
    /// Audit events each loaded tenant retains.
    #[arg(long, default_value_t = 10_000_000)]
    audit_max_events: u64,
    /// The `writ` binary (default: next to this one).
    #[arg(long)]
    writ_bin: Option<PathBuf>,
    /// Where executor keys, configs and logs are kept between runs.
    #[arg(long, default_value = ".writ/loadtest")]
    work_dir: PathBuf,
    /// Check the invariants from the ledger afterwards; exit 1 if one is violated.
    #[arg(long)]
    verify: bool,
    /// Longest wait for acknowledged operations to settle before verifying.
    #[arg(long, default_value_t = 120.0)]
    drain: f64,
    /// Each fresh execute waits up to this many seconds for its operation's effect report
    /// (`wait_s`) and counts only when it saw it (0: answered once recorded).
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=60))]
    wait_s: u64,
    /// The simulated devices upload no camera frame per effect (each operation is then its
    /// submission, dispatch and report).
    #[arg(long)]
    no_camera: bool,
}

#[derive(Args)]
struct EtcdArgs {
    #[command(flatten)]
    load: LoadArgs,
    /// Gateway URLs of the etcd members (writes spread over all).
    #[arg(long, env = "WRIT_ETCD_URLS")]
    endpoints: String,
    /// Value size in bytes (the same as a Writ operation's input).
    #[arg(long, default_value_t = 128)]
    payload_bytes: usize,
    /// Read every acknowledged key back afterwards; exit 1 if one is missing.
    #[arg(long)]
    verify: bool,
}

#[derive(Args)]
struct McpArgs {
    #[command(flatten)]
    load: LoadArgs,
    #[arg(long)]
    url: String,
    /// discover and/or read weights.
    #[arg(long, default_value = "read=1")]
    mix: String,
}

fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

fn run_id() -> String {
    uuid::Uuid::new_v4().simple().to_string()[..12].to_string()
}

async fn writ_run(a: WritArgs) -> Result<ExitCode, String> {
    let mix = Mix::parse(&a.mix)?;
    let edges = list(&a.edges);
    if edges.is_empty() {
        return Err("no MCP edge URL (--edges or WRIT_MCP_URLS)".into());
    }
    let writ_bin = match a.writ_bin.clone() {
        Some(b) => b,
        None => std::env::current_exe().map_err(|e| e.to_string())?.with_file_name("writ"),
    };
    let tls = a.ca.as_deref().map(writ_client::ClientTls::trusting).transpose()?;
    let admin = Admin::new(list(&a.admin_urls), a.admin_token.clone(), tls.as_ref());
    let setup = Setup {
        tenants: a.tenants.max(1),
        idle_tenants: a.idle_tenants,
        upstream: a.upstream.clone(),
        prefix: a.prefix.clone(),
        devices: a.devices,
        operations_per_minute: a.operations_per_minute,
        concurrent_operations: a.concurrent_operations,
        audit_max_events: a.audit_max_events,
        // An hour past the run and its drain, within a tenant's default bound (a day).
        token_ttl_s: (a.load.duration + a.drain + 3600.0).clamp(3600.0, 86_400.0) as u64,
        audience: a.audience.trim_end_matches('/').to_string(),
        enroll_edge: edges[0].clone(),
        executor_urls: list(&a.executor_urls),
        writ_bin: writ_bin.clone(),
        work_dir: a.work_dir.clone(),
        ca: a.ca.clone(),
        camera: !a.no_camera,
    };
    let provisioning = std::time::Instant::now();
    let tenants = writ::provision(&admin, &setup).await?;
    let setup_s = provisioning.elapsed().as_secs_f64();
    let executors: Vec<writ::Executor> =
        tenants.iter().map(|t| writ::start_executor(&writ_bin, t)).collect::<Result<_, _>>()?;
    // The executors connect their dispatch streams while the first requests are decided.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let run_id = run_id();
    let http = a.load.http(tls.as_ref());
    let mut sessions = std::collections::HashMap::new();
    if a.wire == mcp::SESSION_PROTOCOL_VERSION {
        for t in &tenants {
            let sid = mcp::initialize(&http, &edges[0], Some(&t.token)).await?;
            sessions.insert(t.token.clone(), sid);
        }
    }
    let load = Arc::new(WritLoad {
        http,
        edges,
        tenants: tenants.clone(),
        mix,
        duplicate_share: a.duplicate_share,
        changed_share: a.changed_share,
        device_share: a.device_share,
        pad: "x".repeat(a.payload_bytes.saturating_sub(30)),
        wait_s: a.wait_s,
        run_id: run_id.clone(),
        seen: Mutex::new(writ::Seen::default()),
        tools_listed: Default::default(),
        sessions,
    });
    let since_ms = now_ms();
    // The executors' CPU and memory are Writ's too.
    let executor_pids: Vec<u32> = executors.iter().filter_map(writ::Executor::pid).collect();
    let mut summary = a.load.measure_with("writ", load.clone(), &executor_pids).await?;
    summary.setup = json!({"run_id": run_id, "tenants": setup.tenants, "idle_tenants": setup.idle_tenants,
                           "upstream": setup.upstream, "wire": a.wire,
                           "setup_s": (setup_s * 10.0).round() / 10.0, "payload_bytes": a.payload_bytes,
                           "mix": a.mix, "duplicate_share": a.duplicate_share, "changed_share": a.changed_share,
                           "device_share": a.device_share, "wait_s": a.wait_s, "camera": !a.no_camera,
                           "executors": executor_pids.len(),
                           "tools_listed": load.tools_listed.load(std::sync::atomic::Ordering::Relaxed)});
    if a.verify {
        let seen = std::mem::take(&mut *load.seen.lock().expect("seen lock"));
        let drain = Duration::from_secs_f64(a.drain);
        let v = verify::verify(&admin, &tenants, &seen, &run_id, since_ms, a.operations_per_minute, drain).await?;
        summary.verify = Some(v);
    }
    drop(executors);
    a.load.finish(&summary)
}

async fn etcd_run(a: EtcdArgs) -> Result<ExitCode, String> {
    let endpoints = list(&a.endpoints);
    if endpoints.is_empty() {
        return Err("no etcd endpoint (--endpoints or WRIT_ETCD_URLS)".into());
    }
    let load = Arc::new(etcd::EtcdLoad {
        http: a.load.http(None),
        endpoints,
        run_id: run_id(),
        value: "x".repeat(a.payload_bytes),
        acked: Mutex::new(Vec::new()),
    });
    let mut summary = a.load.measure("etcd", load.clone()).await?;
    summary.setup = json!({"payload_bytes": a.payload_bytes});
    if a.verify {
        summary.verify = Some(etcd::verify(&load).await);
    }
    a.load.finish(&summary)
}

async fn mcp_run(a: McpArgs) -> Result<ExitCode, String> {
    let load = Arc::new(mcp::BareMcpLoad { http: a.load.http(None), url: a.url.clone(), mix: Mix::parse(&a.mix)? });
    let mut summary = a.load.measure("mcp", load).await?;
    summary.setup = json!({"mix": a.mix});
    a.load.finish(&summary)
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.system {
        System::Writ(a) => writ_run(*a).await,
        System::Etcd(a) => etcd_run(a).await,
        System::Mcp(a) => mcp_run(a).await,
    };
    result.unwrap_or_else(|e| {
        eprintln!("writ-loadtest: {e}");
        ExitCode::from(2)
    })
}
