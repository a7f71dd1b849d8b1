//! `writ admin <noun> <verb>`: the operator CLI over the admin API.
//!
//! Endpoint and token come from flags, then the environment (`WRIT_ADMIN_URL`,
//! `WRIT_ADMIN_TOKEN`, e.g. from `source .writ/dev/env`). Exit codes scripts can trust:
//! 0 success, 1 rejected by the server (the reason code is printed), 2 usage error,
//! 3 cluster unreachable or unavailable, 4 authentication failed.

use clap::{Args, Parser, Subcommand, ValueEnum};
use serde::Serialize;
use serde_json::Value;
use writ_api::dto::{ClusterStatus, ErrorBody, TenantList};
use writ_api::ledger::Tenant;

pub const EXIT_REJECTED: i32 = 1;
pub const EXIT_USAGE: i32 = 2;
pub const EXIT_UNAVAILABLE: i32 = 3;
pub const EXIT_AUTH: i32 = 4;

#[derive(Debug, Clone, Copy, ValueEnum, Default)]
pub enum Output {
    #[default]
    Table,
    Json,
}

#[derive(Debug, Parser)]
#[command(about = "Operate a Writ cluster through its admin API")]
pub struct AdminArgs {
    /// Admin API base URL.
    #[arg(long, env = "WRIT_ADMIN_URL", global = true)]
    pub url: Option<String>,
    /// Operator bearer token.
    #[arg(long, env = "WRIT_ADMIN_TOKEN", global = true, hide_env_values = true)]
    pub token: Option<String>,
    /// Output format.
    #[arg(long, short, value_enum, default_value_t = Output::Table, global = true)]
    pub output: Output,
    #[command(subcommand)]
    pub noun: Noun,
}

#[derive(Debug, Subcommand)]
pub enum Noun {
    /// Cluster membership and health.
    #[command(subcommand)]
    Cluster(ClusterCmd),
    /// Tenants.
    #[command(subcommand)]
    Tenant(TenantCmd),
}

#[derive(Debug, Subcommand)]
pub enum ClusterCmd {
    /// Every member's role, term, log position and state digest.
    Status,
    /// Add a learner (non-voting member) and wait until it has caught up.
    AddLearner {
        #[arg(long)]
        node_id: u64,
        #[arg(long)]
        addr: String,
    },
    /// Set the voters (comma-separated node ids); members not listed are removed.
    Membership {
        #[arg(long, value_delimiter = ',', required = true)]
        voters: Vec<u64>,
    },
    /// Build a snapshot on the node serving the request.
    Snapshot,
    /// Purge that node's log up to its snapshot.
    Purge,
}

#[derive(Debug, Subcommand)]
pub enum TenantCmd {
    Create(CreateArgs),
    List {
        #[arg(long)]
        after: Option<String>,
        #[arg(long, default_value_t = 100)]
        limit: u32,
    },
    Show {
        tenant: String,
    },
    Suspend {
        tenant: String,
        #[arg(long)]
        note: Option<String>,
    },
    Resume {
        tenant: String,
    },
}

#[derive(Debug, Args)]
pub struct CreateArgs {
    /// Unique name: a-z, 0-9 and '-'.
    pub name: String,
    #[arg(long)]
    pub display_name: Option<String>,
}

struct Client {
    base: String,
    token: String,
    http: reqwest::Client,
}

/// A failed call, already mapped to an exit code and a message.
struct Failure {
    exit: i32,
    message: String,
}

impl Client {
    async fn call(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Result<Value, Failure> {
        let url = format!("{}{}", self.base.trim_end_matches('/'), path);
        let mut rb = self.http.request(method, &url).bearer_auth(&self.token);
        if let Some(b) = body {
            rb = rb.json(&b);
        }
        let resp = rb
            .send()
            .await
            .map_err(|e| Failure { exit: EXIT_UNAVAILABLE, message: format!("cannot reach {url}: {e}") })?;
        let status = resp.status();
        let bytes = resp.bytes().await.map_err(|e| Failure { exit: EXIT_UNAVAILABLE, message: e.to_string() })?;
        if status.is_success() {
            return serde_json::from_slice(&bytes)
                .map_err(|e| Failure { exit: EXIT_UNAVAILABLE, message: format!("undecodable response: {e}") });
        }
        let exit = match status.as_u16() {
            401 | 403 => EXIT_AUTH,
            500.. => EXIT_UNAVAILABLE,
            _ => EXIT_REJECTED,
        };
        let message = match serde_json::from_slice::<ErrorBody>(&bytes) {
            Ok(e) => format!("{}: {}", e.reason, e.message),
            Err(_) => format!("HTTP {status}"),
        };
        Err(Failure { exit, message })
    }
}

/// Runs one admin command and returns the process exit code.
pub async fn run(args: AdminArgs) -> i32 {
    let (Some(base), Some(token)) = (args.url.clone(), args.token.clone()) else {
        eprintln!("error: no admin endpoint: pass --url and --token, or set WRIT_ADMIN_URL and WRIT_ADMIN_TOKEN (e.g. `source .writ/dev/env`)");
        return EXIT_USAGE;
    };
    let http = match reqwest::Client::builder().no_proxy().timeout(std::time::Duration::from_secs(30)).build() {
        Ok(h) => h,
        Err(e) => {
            eprintln!("error: {e}");
            return EXIT_UNAVAILABLE;
        }
    };
    let client = Client { base, token, http };
    match execute(&client, &args).await {
        Ok(()) => 0,
        Err(f) => {
            eprintln!("error: {}", f.message);
            f.exit
        }
    }
}

async fn execute(c: &Client, args: &AdminArgs) -> Result<(), Failure> {
    use reqwest::Method;
    let out = args.output;
    match &args.noun {
        Noun::Cluster(cmd) => {
            let (method, path, body) = match cmd {
                ClusterCmd::Status => (Method::GET, "/v1/cluster/status", None),
                ClusterCmd::AddLearner { node_id, addr } => {
                    (Method::POST, "/v1/cluster/learners", Some(serde_json::json!({"node_id": node_id, "addr": addr})))
                }
                ClusterCmd::Membership { voters } => {
                    (Method::POST, "/v1/cluster/membership", Some(serde_json::json!({"voters": voters})))
                }
                ClusterCmd::Snapshot => (Method::POST, "/v1/cluster/snapshot", None),
                ClusterCmd::Purge => (Method::POST, "/v1/cluster/purge", None),
            };
            let v = c.call(method.clone(), path, body).await?;
            if matches!(cmd, ClusterCmd::Status) {
                print_as::<ClusterStatus>(out, v, print_cluster)
            } else {
                print_json(&v);
                Ok(())
            }
        }
        Noun::Tenant(cmd) => match cmd {
            TenantCmd::Create(a) => {
                let body = serde_json::json!({"name": a.name, "display_name": a.display_name});
                let v = c.call(Method::POST, "/v1/tenants", Some(body)).await?;
                print_as::<Tenant>(out, v, |t| print_tenants(std::slice::from_ref(t)))
            }
            TenantCmd::List { after, limit } => {
                let mut path = format!("/v1/tenants?limit={limit}");
                if let Some(a) = after {
                    path.push_str(&format!("&after={}", urlencode(a)));
                }
                let v = c.call(Method::GET, &path, None).await?;
                print_as::<TenantList>(out, v, |l| {
                    print_tenants(&l.tenants);
                    if let Some(next) = &l.next_cursor {
                        println!("(more: --after {next})");
                    }
                })
            }
            TenantCmd::Show { tenant } => {
                let v = c.call(Method::GET, &format!("/v1/tenants/{}", urlencode(tenant)), None).await?;
                print_as::<Tenant>(out, v, |t| print_tenants(std::slice::from_ref(t)))
            }
            TenantCmd::Suspend { tenant, note } => {
                let body = serde_json::json!({"note": note});
                let v = c.call(Method::POST, &format!("/v1/tenants/{}/suspend", urlencode(tenant)), Some(body)).await?;
                print_as::<Tenant>(out, v, |t| print_tenants(std::slice::from_ref(t)))
            }
            TenantCmd::Resume { tenant } => {
                let v = c.call(Method::POST, &format!("/v1/tenants/{}/resume", urlencode(tenant)), None).await?;
                print_as::<Tenant>(out, v, |t| print_tenants(std::slice::from_ref(t)))
            }
        },
    }
}

fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn print_json<T: Serialize>(v: &T) {
    match serde_json::to_string_pretty(v) {
        Ok(s) => println!("{s}"),
        Err(e) => eprintln!("error: {e}"),
    }
}

fn print_as<T: serde::de::DeserializeOwned>(out: Output, v: Value, table: impl Fn(&T)) -> Result<(), Failure> {
    match out {
        Output::Json => print_json(&v),
        Output::Table => {
            let typed: T = serde_json::from_value(v)
                .map_err(|e| Failure { exit: EXIT_UNAVAILABLE, message: format!("unexpected response: {e}") })?;
            table(&typed);
        }
    }
    Ok(())
}

/// Prints rows as left-aligned columns.
fn print_table(header: &[&str], rows: Vec<Vec<String>>) {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for r in &rows {
        for (w, cell) in widths.iter_mut().zip(r) {
            *w = (*w).max(cell.len());
        }
    }
    let line = |cells: Vec<String>| {
        let padded: Vec<String> = cells.iter().zip(&widths).map(|(c, w)| format!("{c:<w$}")).collect();
        println!("{}", padded.join("  ").trim_end());
    };
    line(header.iter().map(|h| h.to_string()).collect());
    for r in rows {
        line(r);
    }
}

fn print_tenants(tenants: &[Tenant]) {
    let rows = tenants
        .iter()
        .map(|t| {
            vec![
                t.name.clone(),
                t.id.clone(),
                format!("{:?}", t.state).to_lowercase(),
                t.display_name.clone().unwrap_or_default(),
                t.revision.to_string(),
            ]
        })
        .collect();
    print_table(&["NAME", "ID", "STATE", "DISPLAY NAME", "REVISION"], rows);
}

fn print_cluster(c: &ClusterStatus) {
    let opt = |v: Option<u64>| v.map_or("-".to_string(), |v| v.to_string());
    let rows = c
        .members
        .iter()
        .map(|m| match &m.status {
            Some(s) => vec![
                m.node_id.to_string(),
                m.addr.clone(),
                format!("{:?}", s.role).to_lowercase(),
                s.term.to_string(),
                opt(s.leader),
                opt(s.last_log_index),
                opt(s.last_applied_index),
                s.state_digest.chars().take(16).collect(),
            ],
            None => vec![
                m.node_id.to_string(),
                m.addr.clone(),
                "unreachable".into(),
                "-".into(),
                "-".into(),
                "-".into(),
                "-".into(),
                m.error.clone().unwrap_or_default(),
            ],
        })
        .collect();
    print_table(&["NODE", "ADDR", "ROLE", "TERM", "LEADER", "LAST LOG", "APPLIED", "DIGEST"], rows);
}
