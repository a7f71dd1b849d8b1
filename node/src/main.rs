//! `writ`: ledger node, dev mode and admin CLI in one binary.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[cfg(feature = "server")]
#[global_allocator]
static GLOBAL: writ_node::alloc::Chosen = writ_node::alloc::Chosen;
#[cfg(feature = "server")]
use writ_node::config::NodeConfig;

#[derive(Parser)]
#[command(name = "writ", version, about = "Writ: the control plane that lets AI agents act in the real world safely")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// One process: single-node ledger + admin API on loopback (the embedded default).
    #[cfg(feature = "server")]
    Dev(writ_node::dev::DevArgs),
    /// A ledger node of a cluster.
    #[cfg(feature = "server")]
    #[command(args_conflicts_with_subcommands = true)]
    Node {
        #[command(subcommand)]
        action: Option<NodeCmd>,
        /// TOML configuration (WRIT_* environment variables override it).
        #[arg(long, required = false)]
        config: Option<PathBuf>,
        /// Only validate the configuration (with the environment applied) and exit.
        #[arg(long)]
        check: bool,
    },
    /// A stateless MCP edge replica in front of a ledger cluster.
    #[cfg(feature = "server")]
    Edge {
        /// TOML configuration (WRIT_EDGE_* environment variables override it).
        #[arg(long)]
        config: PathBuf,
        /// Only validate the configuration (with the environment applied) and exit.
        #[arg(long)]
        check: bool,
    },
    /// Operate a cluster through its admin API.
    Admin(Box<writ_admin_cli::AdminArgs>),
    /// A site executor: enroll with a token, then serve dispatched operations.
    Executor(writ_executor::ExecutorArgs),
    /// The cluster PKI, offline: create the CA, issue node, edge and operator credentials.
    #[command(subcommand)]
    Pki(PkiCmd),
}

#[cfg(feature = "server")]
#[derive(Subcommand)]
enum NodeCmd {
    /// Seed a new node's data directory from a backup (`writ admin backup`), as `etcdutl
    /// snapshot restore` does: start that node with `bootstrap = true` to found a new cluster
    /// holding the backup's ledger (its membership from the node's configuration), then add the
    /// other members as usual. A directory that holds a node's data is refused.
    Restore {
        /// The backup file.
        #[arg(long)]
        from: PathBuf,
        /// The new node's data directory (its configuration's `data_dir`).
        #[arg(long)]
        data_dir: PathBuf,
    },
    /// Grow a stopped cluster's ledger by finished operations in bulk, for benchmarks: each is
    /// an agent's submission, its dispatch and an executor's start and effect report, applied
    /// by the state machine's own apply to tenant `--tenant` (created the first time), ending
    /// in a snapshot the node restarts from. `--copy-to` gives each other stopped member the
    /// same store as hard links (one filesystem). Not for a ledger anyone relies on.
    Seed {
        /// The stopped node's data directory.
        #[arg(long)]
        data_dir: PathBuf,
        /// Finished operations to add.
        #[arg(long)]
        operations: u64,
        #[arg(long, default_value = "seed")]
        tenant: String,
        /// How many audit records the tenant keeps (its `audit_max_events`), set before the
        /// operations are added; the tenant's own setting when left out.
        #[arg(long, value_parser = clap::value_parser!(u64).range(1..=writ_api::settings::AUDIT_MAX_EVENTS_MAX))]
        audit_max_events: Option<u64>,
        /// Another stopped member's data directory (repeatable): replaced by the grown store.
        #[arg(long)]
        copy_to: Vec<PathBuf>,
    },
    /// What a stopped node's Raft log holds, by command kind: entries, bytes, bytes per
    /// submitted operation (a batch's commands counted one by one, wrappers apart).
    LogStats {
        /// The node's data directory (its configuration's `data_dir`).
        #[arg(long)]
        data_dir: PathBuf,
    },
}

#[derive(Subcommand)]
enum PkiCmd {
    /// Create the cluster CA (`ca.pem`, `ca-key.pem` 0600) in DIR.
    Init {
        #[arg(long)]
        dir: PathBuf,
    },
    /// Issue a credential `<role>-<id>.pem` + `<role>-<id>-key.pem` (0600) naming
    /// `urn:writ:<role>:<id>`, signed by DIR's CA.
    Issue(CredentialArgs),
    /// Replace an issued credential with a new key and certificate, atomically: running
    /// processes pick it up from their next handshake, no restart.
    Renew(CredentialArgs),
    /// Every certificate in DIR with its identity, serial and expiry (soonest first).
    List {
        #[arg(long)]
        dir: PathBuf,
    },
}

/// What `writ pki issue` and `writ pki renew` take.
#[derive(clap::Args)]
struct CredentialArgs {
    /// node, edge or operator.
    role: String,
    /// A node's id (a number), or an edge's or operator's name.
    id: String,
    #[arg(long)]
    dir: PathBuf,
    /// A host name or IP address the credential serves under (repeatable).
    #[arg(long = "host")]
    hosts: Vec<String>,
    /// Validity in days.
    #[arg(long, default_value_t = writ_node::pki::LEAF_VALIDITY_DAYS_DEFAULT)]
    days: u32,
}

fn identity_arg(role: &str, id: &str) -> Option<writ_api::role::Identity> {
    let identity = writ_api::role::Role::parse(role).and_then(|r| writ_api::role::Identity::new(r, id));
    if identity.is_none() {
        eprintln!(
            "error: '{role} {id}' is not an identity: the role is node, edge or operator; the id is 1-64 of [A-Za-z0-9._-] (a number for a node)"
        );
    }
    identity
}

fn pki_list(dir: &std::path::Path) -> Result<String, std::io::Error> {
    let mut rows = writ_node::pki::list(dir)?;
    rows.sort_by_key(|r| r.not_after);
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64);
    let mut out = format!("{:<28} {:<32} {:<12} {}", "FILE", "IDENTITY", "EXPIRES IN", "SERIAL");
    for r in rows {
        let left = r.not_after - now;
        let expires =
            if left <= 0 { "EXPIRED".to_string() } else { format!("{}d {}h", left / 86_400, left % 86_400 / 3600) };
        let who = r.identity.map_or_else(|| "(cluster CA)".to_string(), |i| i.to_string());
        out.push_str(&format!("\n{:<28} {:<32} {:<12} {}", r.file, who, expires, r.serial));
    }
    Ok(out)
}

fn pki(cmd: PkiCmd) -> ExitCode {
    let done = match cmd {
        PkiCmd::Init { dir } => writ_node::pki::init(&dir).map(|p| format!("created the cluster CA {}", p.display())),
        PkiCmd::Issue(a) => {
            let Some(identity) = identity_arg(&a.role, &a.id) else { return ExitCode::from(2) };
            writ_node::pki::issue(&a.dir, &identity, &a.hosts, a.days)
                .map(|t| format!("issued {} for {identity} (key {})", t.cert.display(), t.key.display()))
        }
        PkiCmd::Renew(a) => {
            let Some(identity) = identity_arg(&a.role, &a.id) else { return ExitCode::from(2) };
            writ_node::pki::renew(&a.dir, &identity, &a.hosts, a.days)
                .map(|t| format!("renewed {} for {identity} (valid {} days)", t.cert.display(), a.days))
        }
        PkiCmd::List { dir } => pki_list(&dir),
    };
    match done {
        Ok(line) => {
            println!("{line}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(1)
        }
    }
}

fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("WRIT_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,openraft=warn"));
    let json = std::env::var("WRIT_LOG_FORMAT").is_ok_and(|f| f == "json");
    // Colours only on a terminal: a log file or the journal gets plain text.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_ansi(ansi);
    if json {
        builder.json().init();
    } else {
        builder.init();
    }
}

/// `writ node seed`: grows the stopped node's ledger and says what it did.
#[cfg(feature = "server")]
async fn seed_node(
    data_dir: &std::path::Path,
    tenant: &str,
    operations: u64,
    audit_max_events: Option<u64>,
    copies: &[PathBuf],
) -> ExitCode {
    let started = std::time::Instant::now();
    match writ_node::seed::seed(data_dir, tenant, operations, audit_max_events, copies).await {
        Ok(grown) => {
            println!(
                "seeded {operations} finished operations into tenant {tenant} of {}: {} requests applied, last index {}, {:.1} s",
                data_dir.display(),
                grown.requests,
                grown.last_index,
                started.elapsed().as_secs_f64()
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: seed {}: {e}", data_dir.display());
            ExitCode::from(1)
        }
    }
}

fn main() -> ExitCode {
    // What this process creates is its own: ledger data, snapshots, keys, logs (0600 files,
    // 0700 directories, whatever umask it was started with).
    #[cfg(feature = "server")]
    rustix::process::umask(rustix::fs::Mode::from_raw_mode(0o077));
    // Before the runtime starts its threads (each would take a glibc arena of its own).
    #[cfg(feature = "server")]
    writ_node::alloc::prepare();
    let cli = Cli::parse();
    // Before any token is decoded: a token presented again is not checked again by signature.
    writ_api::signatures::install();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    runtime.block_on(async move {
        match cli.cmd {
            Cmd::Pki(cmd) => pki(cmd),
            Cmd::Admin(args) => ExitCode::from(writ_admin_cli::run(*args).await as u8),
            Cmd::Executor(args) => {
                init_tracing();
                ExitCode::from(writ_executor::run_cli(args, writ_node::wait_for_shutdown_signal()).await)
            }
            #[cfg(feature = "server")]
            Cmd::Dev(args) => {
                init_tracing();
                match writ_node::dev::run(args).await {
                    Ok(()) => ExitCode::SUCCESS,
                    Err(e) => {
                        eprintln!("error: writ dev: {e}");
                        ExitCode::from(1)
                    }
                }
            }
            #[cfg(feature = "server")]
            Cmd::Edge { config, check: true } => {
                match writ_node::edge::EdgeFileConfig::load(&config, &|k| std::env::var(k).ok()) {
                    Ok(_) => {
                        println!("{}: valid edge configuration", config.display());
                        ExitCode::SUCCESS
                    }
                    Err(e) => {
                        eprintln!("error: {}: {e}", config.display());
                        ExitCode::from(2)
                    }
                }
            }
            #[cfg(feature = "server")]
            Cmd::Edge { config, check: false } => {
                init_tracing();
                match writ_node::edge::run(&config).await {
                    Ok(()) => ExitCode::SUCCESS,
                    Err(e) => {
                        eprintln!("error: {e}");
                        ExitCode::from(2)
                    }
                }
            }
            #[cfg(feature = "server")]
            Cmd::Node { action: Some(NodeCmd::Restore { from, data_dir }), .. } => {
                let restored = std::fs::File::open(&from)
                    .and_then(|file| writ_raft_store::backup::restore(&data_dir, file));
                match restored {
                    Ok(s) => {
                        println!(
                            "restored {} into {}: revision {}, {} audit records, {} evidence blobs, {} events, state digest {}",
                            from.display(),
                            data_dir.display(),
                            s.manifest.revision,
                            s.audit_records,
                            s.evidence_blobs,
                            s.events,
                            s.manifest.state_digest
                        );
                        ExitCode::SUCCESS
                    }
                    Err(e) => {
                        eprintln!("error: restore {} into {}: {e}", from.display(), data_dir.display());
                        ExitCode::from(1)
                    }
                }
            }
            #[cfg(feature = "server")]
            Cmd::Node { action: Some(NodeCmd::LogStats { data_dir }), .. } => {
                match writ_raft_store::log_stats::read(&data_dir) {
                    Ok((log, applied)) => {
                        print!("{}{}", log.render(), applied.render(log.operations()));
                        ExitCode::SUCCESS
                    }
                    Err(e) => {
                        eprintln!("error: log stats of {}: {e}", data_dir.display());
                        ExitCode::from(1)
                    }
                }
            }
            #[cfg(feature = "server")]
            Cmd::Node { action: Some(NodeCmd::Seed { data_dir, operations, tenant, audit_max_events, copy_to }), .. } => {
                seed_node(&data_dir, &tenant, operations, audit_max_events, &copy_to).await
            }
            #[cfg(feature = "server")]
            Cmd::Node { config: None, .. } => {
                eprintln!("error: writ node needs --config FILE (or a subcommand: restore, seed, log-stats)");
                ExitCode::from(2)
            }
            #[cfg(feature = "server")]
            Cmd::Node { config: Some(config), check, action: None } => run_node(&config, check).await,
        }
    })
}

/// `writ node --config FILE [--check]`: serves until a shutdown signal, or exits at once on the
/// fatal path.
#[cfg(feature = "server")]
async fn run_node(config: &std::path::Path, check: bool) -> ExitCode {
    init_tracing();
    let cfg = match NodeConfig::load(config, &|k| std::env::var(k).ok()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {}: {e}", config.display());
            return ExitCode::from(2);
        }
    };
    if check {
        println!("{}: valid configuration of node {}", config.display(), cfg.node_id);
        return ExitCode::SUCCESS;
    }
    match writ_node::start_node(&cfg).await {
        Ok(running) => {
            // What a supervisor or test reads to learn the bound address (the
            // config may say port 0).
            println!("Writ node {} serving at {}", cfg.node_id, running.url);
            println!("Writ node {} admin API at {}", cfg.node_id, running.admin_url);
            println!("Writ node {} probes at {}", cfg.node_id, running.probe_url);
            let node = running.node.clone();
            tokio::select! {
                _ = writ_node::wait_for_shutdown_signal() => {
                    running.shutdown().await;
                    ExitCode::SUCCESS
                }
                cause = node.stopped() => {
                    // Fatal path (SPEC L7): never serve or apply past corruption.
                    tracing::error!(%cause, "node stops");
                    eprintln!("fatal: node {}: {cause}", cfg.node_id);
                    // At once: no orderly teardown of a store found corrupt.
                    std::process::exit(i32::from(writ_node::EXIT_FATAL))
                }
            }
        }
        Err(e) => {
            eprintln!("error: node {}: {e}", cfg.node_id);
            ExitCode::from(1)
        }
    }
}
