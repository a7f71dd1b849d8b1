//! `writ admin <noun> <verb>`: the operator CLI over the admin API.
//!
//! Endpoint, token and CA come from flags, then the environment (`WRIT_ADMIN_URL`,
//! `WRIT_ADMIN_TOKEN`, `WRIT_CA_FILE`, e.g. from `source .writ/dev/env`). Exit codes scripts can trust:
//! 0 success, 1 rejected by the server (the reason code is printed), 2 usage error,
//! 3 cluster unreachable or unavailable, 4 authentication failed.

use clap::{Args, Parser, Subcommand, ValueEnum};
use serde::Serialize;
use serde_json::Value;
use writ_api::audit::AuditFilter;
use writ_api::catalog::CatalogVersion;
use writ_api::device::{Device, Site};
use writ_api::dto::{
    AddLearnerRequest, ClusterStatus, CreateDeviceRequest, CreateEnrollmentRequest, CreatePrincipalRequest,
    CreateSiteRequest, CreateTenantRequest, CredentialsView, DecisionRequest, DelegateTokenRequest, ExecutorList,
    InspectTokenRequest, IssueTokenRequest, IssuedToken, MembershipRequest, RemoveIssuerRequest, ResolveRequest,
    RevokeCertificateRequest, RevokeIssuerTokenRequest, RevokePrincipalRequest, RevokeScopeRequest, RevokedToken,
    SuspendTenantRequest, TenantList,
};
use writ_api::ledger::Tenant;
use writ_api::principal::{Principal, PrincipalKind, RolePreset};
use writ_api::quota::PrincipalQuotasV2;
use writ_api::settings::TenantSettingsPatch;
use writ_api::token::{TenantIssuer, TenantIssuerV1, Token};
use writ_client::admin::Page;
use writ_client::{AdminClient, AdminError};

/// Prints a line on stdout. A reader that went away (`writ admin … | head`) ends the command
/// quietly with success, as Unix filters do, instead of panicking on the closed pipe.
macro_rules! say {
    () => {
        $crate::write_stdout(format_args!(""))
    };
    ($($arg:tt)*) => {
        $crate::write_stdout(format_args!($($arg)*))
    };
}

pub(crate) fn write_stdout(line: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_fmt(line).and_then(|()| out.write_all(b"\n")) {
        write_failed(e);
    }
}

/// A failed write to the output: a closed pipe ends the process quietly (exit 0); anything
/// else is the command's failure.
fn write_failed(e: std::io::Error) -> Failure {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        std::process::exit(0);
    }
    Failure { exit: EXIT_UNAVAILABLE, message: format!("write failed: {e}") }
}

pub const EXIT_REJECTED: i32 = 1;
pub const EXIT_USAGE: i32 = 2;
pub const EXIT_UNAVAILABLE: i32 = 3;
pub const EXIT_AUTH: i32 = 4;

pub mod client_config;
pub mod context;
mod oauth;
mod operator;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Default)]
pub enum Output {
    #[default]
    Table,
    Json,
}

#[derive(Debug, Parser)]
#[command(about = "Operate a Writ cluster through its admin API")]
pub struct AdminArgs {
    /// The context to use (`writ admin context list`); default: the config file's current one.
    #[arg(long, env = "WRIT_CONTEXT", global = true)]
    pub context: Option<String>,
    /// Admin API base URL; several separated by commas are tried in turn when one cannot be
    /// reached. Overrides the context's.
    #[arg(long, env = "WRIT_ADMIN_URL", global = true)]
    pub url: Option<String>,
    /// Operator bearer token.
    #[arg(long, env = "WRIT_ADMIN_TOKEN", global = true, hide_env_values = true)]
    pub token: Option<String>,
    /// The cluster CA (PEM) the admin API's certificate must chain to; nodes always serve TLS.
    #[arg(long, env = "WRIT_CA_FILE", global = true)]
    pub ca: Option<std::path::PathBuf>,
    /// The operator's certificate (PEM, `writ pki issue operator NAME`), for admin listeners
    /// that require one; with --key. Overrides the context's.
    #[arg(long, env = "WRIT_CERT_FILE", global = true, requires = "key")]
    pub cert: Option<std::path::PathBuf>,
    /// The operator certificate's private key (PEM).
    #[arg(long, env = "WRIT_KEY_FILE", global = true, requires = "cert")]
    pub key: Option<std::path::PathBuf>,
    /// Output format.
    #[arg(long, short, value_enum, default_value_t = Output::Table, global = true)]
    pub output: Output,
    #[command(subcommand)]
    pub noun: Noun,
}

#[derive(Debug, Subcommand)]
pub enum Noun {
    /// Named clusters in the CLI's config file (`$WRIT_CONFIG` or ~/.config/writ/config.toml).
    #[command(subcommand)]
    Context(ContextCmd),
    /// Cluster membership and health.
    #[command(subcommand)]
    Cluster(ClusterCmd),
    /// Tenants.
    #[command(subcommand)]
    Tenant(TenantCmd),
    /// Principals (humans, agents, devices, services) of a tenant.
    #[command(subcommand)]
    Principal(PrincipalCmd),
    /// Sites (plants, labs, warehouses) of a tenant.
    #[command(subcommand)]
    Site(SiteCmd),
    /// Devices at a tenant's sites.
    #[command(subcommand)]
    Device(DeviceCmd),
    /// Writ-issued bearer tokens: issue, delegate, revoke, show, inspect.
    #[command(subcommand)]
    Token(TokenCmd),
    /// A tenant's own token issuers (issuer + audience + inline JWKS).
    #[command(subcommand)]
    Issuer(IssuerCmd),
    /// The tenant's own OAuth authorization server: its clients and the requests operators approve.
    #[command(subcommand)]
    Oauth(oauth::OAuthCmd),
    /// The named people who run Writ: roles (viewer, operator, approver, admin), sessions.
    #[command(subcommand)]
    Operator(operator::OperatorCmd),
    /// Signing keys, role certificates and executor CAs: show, retire, revoke.
    #[command(subcommand)]
    Credential(CredentialCmd),
    /// Versioned action catalogs of a tenant.
    #[command(subcommand)]
    Catalog(CatalogCmd),
    /// A tenant's upstream MCP servers: their tools, pinned after review, serve catalog
    /// actions whose execution names them; each edge's fuse stops calls after 3 failures.
    #[command(subcommand)]
    Upstream(UpstreamCmd),
    /// A tenant's audit trail.
    #[command(subcommand)]
    Audit(AuditCmd),
    /// Site executors: one-time enrollment tokens, enrolled executors, revocation.
    #[command(subcommand)]
    Executor(ExecutorCmd),
    /// Operations: list (the queue), show, cancel before the attempt, accept/reject a reported
    /// effect, resolve an unknown effect.
    #[command(subcommand)]
    Operation(OperationCmd),
    /// Work items: the durable business state operations are made against, each with a
    /// gap-free revision and an approved scope (actions, devices, cost ceiling).
    #[command(subcommand)]
    Work(WorkCmd),
    /// What an agent host's configuration must contain to reach a principal through an edge:
    /// the MCP URL, the bearer header and the CA note, in that host's own format
    /// (docs/clients.md: which protocol era and auth each host speaks).
    ClientConfig {
        #[arg(long)]
        tenant: String,
        /// Principal id or name.
        #[arg(long)]
        principal: String,
        #[arg(long, value_enum)]
        host: crate::client_config::Host,
        /// The edge's MCP URL (default: $WRIT_MCP_URL, which `writ dev` writes to its env file).
        #[arg(long = "mcp-url", env = "WRIT_MCP_URL")]
        mcp_url: String,
        /// Issue a token for the principal now (audience: the URL) and put it in the
        /// configuration, shown once; without it the configuration reads --token-env.
        #[arg(long)]
        issue_token: bool,
        /// Lifetime of the issued token, e.g. `8h` (clamped to the tenant's bounds).
        #[arg(long, value_parser = parse_duration_s)]
        ttl: Option<u64>,
        /// The environment variable the host reads the token from.
        #[arg(long, default_value = "WRIT_TOKEN")]
        token_env: String,
        /// The CA file the host must trust when the edge's certificate is private.
        #[arg(long)]
        ca_file: Option<std::path::PathBuf>,
        /// The server's name in the host's configuration.
        #[arg(long, default_value = "writ")]
        name: String,
    },
    /// A consistent backup of the ledger (state, audit, evidence, events) from the node the
    /// admin URL names, streamed to --out and checked (its digest) before it is kept; restore
    /// it with `writ node restore`.
    Backup {
        #[arg(long)]
        out: std::path::PathBuf,
    },
}

#[derive(Debug, Subcommand)]
pub enum WorkCmd {
    /// Create a work item (revision 1, open).
    Create {
        #[arg(long)]
        tenant: String,
        /// Its id (what operations name as work_ref.id).
        id: String,
        #[arg(long)]
        title: String,
        /// Who answers for it.
        #[arg(long)]
        owner: String,
        /// An action the work allows (repeat).
        #[arg(long = "action", required = true)]
        actions: Vec<String>,
        /// A device (id or name) the work allows (repeat).
        #[arg(long = "device")]
        devices: Vec<String>,
        /// Cost units all its operations may use together.
        #[arg(long)]
        cost_ceiling: Option<u64>,
    },
    /// Change a work item (its next revision) or close it (`--state completed|cancelled`).
    Update {
        #[arg(long)]
        tenant: String,
        id: String,
        /// Refused with STALE_REVISION unless the item is still at this revision.
        #[arg(long)]
        expected_revision: Option<u64>,
        #[arg(long)]
        title: Option<String>,
        #[arg(long)]
        owner: Option<String>,
        /// Replace the approved actions (repeat); devices and ceiling with --device/--cost-ceiling.
        #[arg(long = "action")]
        actions: Vec<String>,
        #[arg(long = "device")]
        devices: Vec<String>,
        #[arg(long)]
        cost_ceiling: Option<u64>,
        #[arg(long, value_parser = ["completed", "cancelled"])]
        state: Option<String>,
        #[arg(long)]
        note: Option<String>,
    },
    /// Show a work item.
    Show {
        #[arg(long)]
        tenant: String,
        id: String,
    },
    /// List a tenant's work items (`--state open|completed|cancelled`).
    List {
        #[arg(long)]
        tenant: String,
        #[arg(long, value_parser = ["open", "completed", "cancelled"])]
        state: Option<String>,
        #[arg(long)]
        after: Option<String>,
        #[arg(long, default_value_t = 100)]
        limit: u32,
    },
}

async fn work_cmd(c: &AdminClient, out: Output, cmd: &WorkCmd) -> Result<(), Failure> {
    use writ_api::work::WorkScopeV1;
    let item = match cmd {
        WorkCmd::Create { tenant, id, title, owner, actions, devices, cost_ceiling } => {
            let scope = WorkScopeV1 { actions: actions.clone(), devices: devices.clone(), cost_ceiling: *cost_ceiling };
            let request =
                writ_api::dto::CreateWorkRequest { id: id.clone(), title: title.clone(), owner: owner.clone(), scope };
            c.create_work(tenant, &request).await
        }
        WorkCmd::Update {
            tenant,
            id,
            expected_revision,
            title,
            owner,
            actions,
            devices,
            cost_ceiling,
            state,
            note,
        } => {
            let scope = if actions.is_empty() && devices.is_empty() && cost_ceiling.is_none() {
                None
            } else if actions.is_empty() {
                return Err(usage(
                    "a new scope names its actions (--action), as well as any --device or --cost-ceiling",
                ));
            } else {
                Some(WorkScopeV1 { actions: actions.clone(), devices: devices.clone(), cost_ceiling: *cost_ceiling })
            };
            let state = match state {
                Some(s) => Some(parsed("state", Value::from(s.as_str()))?),
                None => None,
            };
            let request = writ_api::dto::ReviseWorkRequest {
                expected_revision: *expected_revision,
                title: title.clone(),
                owner: owner.clone(),
                scope,
                state,
                note: note.clone(),
            };
            c.revise_work(tenant, id, &request).await
        }
        WorkCmd::Show { tenant, id } => c.work(tenant, id).await,
        WorkCmd::List { tenant, state, after, limit } => {
            let state = match state {
                Some(s) => Some(parsed("state", Value::from(s.as_str()))?),
                None => None,
            };
            let page = Page { after: after.clone(), limit: Some(*limit) };
            let list = c.list_work(tenant, state, &page).await.map_err(failed)?;
            return show(out, &list, |l| print_work(&l.work));
        }
    }
    .map_err(failed)?;
    show(out, &item, |w| print_work(std::slice::from_ref(w)))
}

fn print_work(items: &[writ_api::work::WorkItem]) {
    let rows = items
        .iter()
        .map(|w| {
            vec![
                w.id.clone(),
                w.revision.to_string(),
                w.state.as_str().to_string(),
                w.owner.clone(),
                w.scope.actions.join(" "),
                w.operations.len().to_string(),
                match w.scope.cost_ceiling {
                    Some(c) => format!("{}/{c}", w.cost_used),
                    None => w.cost_used.to_string(),
                },
                w.title.clone(),
            ]
        })
        .collect();
    print_table(&["ID", "REVISION", "STATE", "OWNER", "ACTIONS", "OPERATIONS", "COST", "TITLE"], rows);
}

#[derive(Debug, Subcommand)]
pub enum OperationCmd {
    /// List a tenant's operations, filtered; `--needs-attention`: what waits for a human
    /// (unknown effects to resolve, reported effects to accept or reject).
    List {
        #[arg(long)]
        tenant: String,
        /// proposed, verified, reserved, dispatched, attempting, effect_reported, accepted,
        /// rejected, expired, failed, cancelled, unknown_effect.
        #[arg(long)]
        state: Option<String>,
        /// Device id or name.
        #[arg(long)]
        device: Option<String>,
        /// Principal id or name.
        #[arg(long)]
        principal: Option<String>,
        /// Work item id.
        #[arg(long)]
        work: Option<String>,
        /// Recorded at or after this ledger time (ms since the epoch).
        #[arg(long)]
        since_ms: Option<u64>,
        /// Recorded before this ledger time (ms since the epoch).
        #[arg(long)]
        until_ms: Option<u64>,
        #[arg(long)]
        needs_attention: bool,
        #[arg(long)]
        after: Option<String>,
        #[arg(long, default_value_t = 100)]
        limit: u32,
    },
    /// Show an operation.
    Show {
        #[arg(long)]
        tenant: String,
        operation: String,
    },
    /// Show an operation's transitions (from, to, reason, cause, time, trace).
    History {
        #[arg(long)]
        tenant: String,
        operation: String,
    },
    /// Cancel an operation no attempt has started for.
    Cancel {
        #[arg(long)]
        tenant: String,
        operation: String,
    },
    /// Accept a reported effect (the ledger requires an independent observation).
    Accept {
        #[arg(long)]
        tenant: String,
        operation: String,
        #[arg(long, default_value = "")]
        note: String,
    },
    /// Reject a reported effect.
    Reject {
        #[arg(long)]
        tenant: String,
        operation: String,
        #[arg(long, default_value = "")]
        note: String,
    },
    /// Resolve an unknown effect after reconciling it (`effect` or `no-effect`).
    Resolve {
        #[arg(long)]
        tenant: String,
        operation: String,
        #[arg(long, value_parser = ["effect", "no-effect"])]
        outcome: String,
        #[arg(long, default_value = "")]
        note: String,
    },
}

async fn operation_cmd(c: &AdminClient, out: Output, cmd: &OperationCmd) -> Result<(), Failure> {
    let op = match cmd {
        OperationCmd::List {
            tenant,
            state,
            device,
            principal,
            work,
            since_ms,
            until_ms,
            needs_attention,
            after,
            limit,
        } => {
            let state = match state {
                Some(s) => Some(parsed("state", Value::from(s.replace('-', "_")))?),
                None => None,
            };
            let filter = writ_api::dto::OperationFilter {
                state,
                device_id: device.clone(),
                principal_id: principal.clone(),
                work_id: work.clone(),
                since_ms: *since_ms,
                until_ms: *until_ms,
                needs_attention: *needs_attention,
            };
            let page = Page { after: after.clone(), limit: Some(*limit) };
            let list = c.list_operations(tenant, &filter, &page).await.map_err(failed)?;
            return show(out, &list, |l| print_operations(&l.operations));
        }
        OperationCmd::Show { tenant, operation } => c.operation(tenant, operation).await,
        OperationCmd::History { tenant, operation } => {
            let history = c.operation_history(tenant, operation).await.map_err(failed)?;
            return show(out, &history, |h| {
                let rows = h
                    .transitions
                    .iter()
                    .map(|t| {
                        vec![
                            t.revision.to_string(),
                            t.at_ms.to_string(),
                            t.from.map_or("-", |f| f.as_str()).to_string(),
                            t.to.as_str().to_string(),
                            t.reason.map_or("-", |r| r.as_str()).to_string(),
                            t.trace_id.clone(),
                            t.cause.clone(),
                        ]
                    })
                    .collect();
                print_table(&["REVISION", "AT_MS", "FROM", "TO", "REASON", "TRACE", "CAUSE"], rows);
            });
        }
        OperationCmd::Cancel { tenant, operation } => c.cancel_operation(tenant, operation).await,
        OperationCmd::Accept { tenant, operation, note } => {
            c.accept_operation(tenant, operation, &DecisionRequest { note: note.clone() }).await
        }
        OperationCmd::Reject { tenant, operation, note } => {
            c.reject_operation(tenant, operation, &DecisionRequest { note: note.clone() }).await
        }
        OperationCmd::Resolve { tenant, operation, outcome, note } => {
            let outcome = parsed("outcome", Value::from(outcome.replace('-', "_")))?;
            c.resolve_operation(tenant, operation, &ResolveRequest { outcome, note: note.clone() }).await
        }
    }
    .map_err(failed)?;
    show(out, &op, |op| print_operations(std::slice::from_ref(op)))
}

fn print_tokens(tokens: &[Token]) {
    let rows = tokens
        .iter()
        .map(|t| {
            let r = &t.record;
            let state = match (&t.revoked_at_ms, &t.revoked_via) {
                (Some(_), Some(via)) if *via != r.jti => format!("revoked (via {via})"),
                (Some(_), _) => "revoked".to_string(),
                (None, _) => "active".to_string(),
            };
            vec![
                r.jti.clone(),
                r.principal_id.clone(),
                state,
                r.depth.to_string(),
                r.parent_jti.clone().unwrap_or_default(),
                r.expires_at_ms.to_string(),
                r.scopes.iter().cloned().collect::<Vec<_>>().join(" "),
            ]
        })
        .collect();
    print_table(&["JTI", "PRINCIPAL", "STATE", "DEPTH", "PARENT", "EXPIRES_MS", "SCOPES"], rows);
}

fn print_operations(ops: &[writ_api::operation::Operation]) {
    let rows = ops
        .iter()
        .map(|op| {
            vec![
                op.spec.operation_id.clone(),
                op.state.as_str().to_string(),
                op.spec.action.clone(),
                op.spec.device_id.clone().unwrap_or_else(|| "-".into()),
                op.attempts.to_string(),
                op.observations.len().to_string(),
            ]
        })
        .collect();
    print_table(&["OPERATION", "STATE", "ACTION", "DEVICE", "ATTEMPTS", "OBSERVATIONS"], rows);
}

#[derive(Debug, Subcommand)]
pub enum ExecutorCmd {
    /// Create a one-time, expiring enrollment token for an executor of a site (shown once).
    EnrollToken {
        #[arg(long)]
        tenant: String,
        /// Site id or name.
        #[arg(long)]
        site: String,
        /// A device (id or name) at that site the executor serves (repeatable).
        #[arg(long = "device")]
        devices: Vec<String>,
        /// Token lifetime, e.g. `1h` (at most 7d).
        #[arg(long, value_parser = parse_duration_s)]
        ttl: Option<u64>,
    },
    List {
        #[arg(long)]
        tenant: String,
    },
    /// Revoke an executor: its certificate stops being accepted.
    Revoke {
        #[arg(long)]
        tenant: String,
        executor: String,
    },
}

/// `ms` since the epoch as an RFC 3339 UTC time (to the second).
fn utc(ms: u64) -> String {
    match time::OffsetDateTime::from_unix_timestamp((ms / 1000) as i64) {
        Ok(t) => format!(
            "{}-{:02}-{:02}T{:02}:{:02}:{:02}Z",
            t.year(),
            t.month() as u8,
            t.day(),
            t.hour(),
            t.minute(),
            t.second()
        ),
        Err(_) => format!("{ms} ms"),
    }
}

async fn executor_cmd(c: &AdminClient, out: Output, cmd: &ExecutorCmd) -> Result<(), Failure> {
    let print_executors = |l: &ExecutorList| {
        let rows = l
            .executors
            .iter()
            .map(|x| {
                vec![
                    x.id.clone(),
                    x.site_id.clone(),
                    if x.revoked_at_ms.is_some() { "revoked" } else { "active" }.to_string(),
                    x.cert.serial.clone(),
                    x.cert.fingerprint.chars().take(16).collect(),
                    utc(x.cert.not_after_ms),
                    x.device_ids.iter().cloned().collect::<Vec<_>>().join(" "),
                ]
            })
            .collect();
        print_table(&["EXECUTOR", "SITE", "STATE", "SERIAL", "FINGERPRINT", "EXPIRES", "DEVICES"], rows);
    };
    match cmd {
        ExecutorCmd::EnrollToken { tenant, site, devices, ttl } => {
            let request = CreateEnrollmentRequest { site: site.clone(), devices: devices.clone(), ttl_s: *ttl };
            let created = c.create_enrollment(tenant, &request).await.map_err(failed)?;
            show(out, &created, |e| {
                say!(
                    "enrollment {} for site {} expires at {} ms",
                    e.enrollment.id,
                    e.enrollment.site_id,
                    e.enrollment.expires_at_ms
                );
                say!("\ntoken (shown once; give it to the executor):\n{}", e.token);
            })
        }
        ExecutorCmd::List { tenant } => show(out, &c.list_executors(tenant).await.map_err(failed)?, print_executors),
        ExecutorCmd::Revoke { tenant, executor } => {
            show(out, &c.revoke_executor(tenant, executor).await.map_err(failed)?, print_executors)
        }
    }
}

#[derive(Debug, Args)]
pub struct AuditFilterArgs {
    #[arg(long)]
    pub tenant: String,
    /// Only records after this sequence number (a cursor from a previous page).
    #[arg(long)]
    pub after: Option<u64>,
    #[arg(long)]
    pub domain: Option<String>,
    #[arg(long)]
    pub operation: Option<String>,
    /// applied, rejected, allowed or denied.
    #[arg(long)]
    pub outcome: Option<String>,
    /// Principal id.
    #[arg(long)]
    pub principal: Option<String>,
    /// Reason code, e.g. DELEGATION_DEPTH_EXCEEDED.
    #[arg(long)]
    pub reason: Option<String>,
    /// Trace id: a request's records and those of every command it submitted.
    #[arg(long)]
    pub trace: Option<String>,
}

impl AuditFilterArgs {
    fn filter(&self) -> Result<AuditFilter, Failure> {
        Ok(AuditFilter {
            domain: self.domain.clone(),
            operation: self.operation.clone(),
            outcome: self.outcome.clone(),
            principal_id: self.principal.clone(),
            reason_code: self.reason.as_ref().map(|r| parsed("reason", Value::from(r.as_str()))).transpose()?,
            since_ms: None,
            trace_id: self.trace.clone(),
        })
    }
}

#[derive(Debug, Subcommand)]
pub enum AuditCmd {
    /// One page of records, oldest first.
    List {
        #[command(flatten)]
        filter: AuditFilterArgs,
        #[arg(long, default_value_t = 100)]
        limit: u32,
    },
    /// Every matching record as NDJSON (to --out or stdout); progress on a terminal.
    Export {
        #[command(flatten)]
        filter: AuditFilterArgs,
        #[arg(long)]
        out: Option<std::path::PathBuf>,
    },
}

async fn audit_cmd(c: &AdminClient, out: Output, cmd: &AuditCmd) -> Result<(), Failure> {
    match cmd {
        AuditCmd::List { filter, limit } => {
            let page = c.audit(&filter.tenant, &filter.filter()?, filter.after, Some(*limit)).await.map_err(failed)?;
            show(out, &page, |p| {
                let rows = p
                    .records
                    .iter()
                    .map(|r| {
                        vec![
                            r.seq.to_string(),
                            r.at_ms.to_string(),
                            r.domain.clone(),
                            r.operation.clone(),
                            r.outcome.clone(),
                            r.reason_code.map(|c| c.to_string()).unwrap_or_default(),
                            r.principal_id.clone().unwrap_or_default(),
                            r.token_id.clone().unwrap_or_default(),
                            r.authority.as_ref().map(|a| a.summary()).unwrap_or_default(),
                        ]
                    })
                    .collect();
                let columns =
                    ["SEQ", "AT_MS", "DOMAIN", "OPERATION", "OUTCOME", "REASON", "PRINCIPAL", "TOKEN", "AUTHORITY"];
                print_table(&columns, rows);
                if let Some(next) = p.next_cursor {
                    say!("(more: --after {next})");
                }
            })
        }
        AuditCmd::Export { filter, out: path } => {
            let unavailable = |e: String| Failure { exit: EXIT_UNAVAILABLE, message: e };
            let resp = c.audit_export(&filter.tenant, &filter.filter()?, filter.after).await.map_err(failed)?;
            let mut sink: Box<dyn std::io::Write> = match path {
                Some(p) => Box::new(std::io::BufWriter::new(
                    std::fs::File::create(p)
                        .map_err(|e| Failure { exit: EXIT_USAGE, message: format!("{}: {e}", p.display()) })?,
                )),
                None => Box::new(std::io::BufWriter::new(std::io::stdout().lock())),
            };
            let progress = Progress::new();
            let mut resp = resp;
            let mut failed = None;
            // Whole lines only: a chunk may end mid-line. An error line (the server could not
            // finish) is reported, not written.
            let mut pending: Vec<u8> = Vec::new();
            while let Some(chunk) = writ_client::admin::next_chunk(&mut resp)
                .await
                .map_err(|e| unavailable(format!("export interrupted: {e}")))?
            {
                pending.extend_from_slice(chunk.as_ref());
                while let Some(nl) = pending.iter().position(|b| *b == b'\n') {
                    let line: Vec<u8> = pending.drain(..=nl).collect();
                    if line.starts_with(b"{\"error\"") {
                        failed = Some(String::from_utf8_lossy(&line).trim().to_string());
                        continue;
                    }
                    sink.write_all(&line).map_err(write_failed)?;
                    progress.tick();
                }
            }
            if !pending.is_empty() {
                failed = Some("the stream ended mid-record".into());
            }
            sink.flush().map_err(write_failed)?;
            progress.done();
            match failed {
                Some(line) => Err(unavailable(format!("export ended early: {line}"))),
                None => Ok(()),
            }
        }
    }
}

/// `writ admin backup --out FILE`: the stream goes to `FILE.partial`, is read back and checked
/// (`writ_api::backup::read_backup`: digest, state against manifest), and only then becomes
/// `FILE`; nothing is left behind when it fails.
async fn backup(c: &AdminClient, out: Output, path: &std::path::Path) -> Result<(), Failure> {
    let partial = path.with_extension("partial");
    let written = async {
        let mut resp = c.backup().await.map_err(failed)?;
        let unavailable = |e: String| Failure { exit: EXIT_UNAVAILABLE, message: e };
        let create = std::fs::File::create(&partial);
        let file = create.map_err(|e| Failure { exit: EXIT_USAGE, message: format!("{}: {e}", partial.display()) })?;
        let mut sink = std::io::BufWriter::new(file);
        while let Some(chunk) = writ_client::admin::next_chunk(&mut resp)
            .await
            .map_err(|e| unavailable(format!("backup interrupted: {e}")))?
        {
            std::io::Write::write_all(&mut sink, chunk.as_ref()).map_err(write_failed)?;
        }
        sink.into_inner().map_err(|e| write_failed(e.into_error()))?.sync_all().map_err(write_failed)?;
        let file = std::fs::File::open(&partial).map_err(write_failed)?;
        let (summary, _) = writ_api::backup::read_backup(std::io::BufReader::new(file), |_, _, _| Ok(()))
            .map_err(|e| unavailable(format!("the backup is not whole: {e}")))?;
        std::fs::rename(&partial, path).map_err(write_failed)?;
        Ok(summary)
    }
    .await;
    let summary = written.inspect_err(|_| {
        let _ = std::fs::remove_file(&partial);
    })?;
    show(out, &summary, |s| {
        say!(
            "backup {}: revision {} (log index {}), {} audit records, {} evidence blobs, {} events, {} bytes, sha256 {}",
            path.display(),
            s.manifest.revision,
            s.manifest.last_applied_index,
            s.audit_records,
            s.evidence_blobs,
            s.events,
            s.bytes,
            s.sha256
        );
    })
}

/// A progress line on stderr, only when stderr is a terminal.
struct Progress {
    on: bool,
    start: std::time::Instant,
    count: std::cell::Cell<u64>,
    shown: std::cell::Cell<std::time::Instant>,
}

impl Progress {
    fn new() -> Progress {
        use std::io::IsTerminal;
        let now = std::time::Instant::now();
        Progress { on: std::io::stderr().is_terminal(), start: now, count: 0.into(), shown: now.into() }
    }

    fn tick(&self) {
        self.count.set(self.count.get() + 1);
        if self.on && self.shown.get().elapsed() >= std::time::Duration::from_millis(200) {
            self.shown.set(std::time::Instant::now());
            self.show();
        }
    }

    fn show(&self) {
        let secs = self.start.elapsed().as_secs_f64().max(1e-3);
        eprint!("\rexported {} records ({:.0}/s)   ", self.count.get(), self.count.get() as f64 / secs);
    }

    fn done(&self) {
        if self.on {
            self.show();
            eprintln!();
        }
    }
}

#[derive(Debug, Subcommand)]
pub enum CatalogCmd {
    /// Publish a catalog file (JSON, or YAML when named *.yaml / *.yml) as the next version.
    Publish {
        #[arg(long)]
        tenant: String,
        file: std::path::PathBuf,
    },
    /// Versions kept by the ledger, newest first.
    List {
        #[arg(long)]
        tenant: String,
    },
    /// One version (default: the newest).
    Show {
        #[arg(long)]
        tenant: String,
        #[arg(default_value = "latest")]
        version: String,
    },
    /// What changed from version FROM to version TO (default: the newest): actions added,
    /// removed, and changed by field.
    Diff {
        #[arg(long)]
        tenant: String,
        from: String,
        #[arg(default_value = "latest")]
        to: String,
    },
}

/// Reads a catalog file as JSON; YAML files are converted to the same JSON value.
fn read_catalog_file(path: &std::path::Path) -> Result<Value, Failure> {
    let usage = |m: String| Failure { exit: EXIT_USAGE, message: format!("{}: {m}", path.display()) };
    let text = std::fs::read_to_string(path).map_err(|e| usage(e.to_string()))?;
    let yaml = path.extension().and_then(|e| e.to_str()).is_some_and(|e| e == "yaml" || e == "yml");
    if yaml {
        serde_yaml_ng::from_str::<Value>(&text).map_err(|e| usage(format!("not valid YAML: {e}")))
    } else {
        serde_json::from_str::<Value>(&text).map_err(|e| usage(format!("not valid JSON: {e}")))
    }
}

async fn catalog_cmd(c: &AdminClient, out: Output, cmd: &CatalogCmd) -> Result<(), Failure> {
    let print_version = |v: &CatalogVersion| {
        print_table(
            &["VERSION", "DIGEST", "ACTIONS", "REVISION"],
            vec![vec![
                v.version.to_string(),
                v.catalog.digest.clone(),
                v.catalog.actions.len().to_string(),
                v.revision.to_string(),
            ]],
        );
        say!();
        let rows = v
            .catalog
            .actions
            .iter()
            .map(|a| {
                vec![
                    a.id.clone(),
                    format!("{:?}", a.risk).to_lowercase(),
                    a.execution.label(),
                    a.scope.clone(),
                    a.title.clone(),
                ]
            })
            .collect();
        print_table(&["ACTION", "RISK", "EXECUTION", "SCOPE", "TITLE"], rows);
    };
    match cmd {
        CatalogCmd::Publish { tenant, file } => {
            let doc = read_catalog_file(file)?;
            show(out, &c.publish_catalog(tenant, &doc).await.map_err(failed)?, print_version)
        }
        CatalogCmd::List { tenant } => show(out, &c.list_catalogs(tenant).await.map_err(failed)?, |l| {
            let rows = l
                .catalogs
                .iter()
                .map(|c| vec![c.version.to_string(), c.digest.clone(), c.actions.to_string(), c.revision.to_string()])
                .collect();
            print_table(&["VERSION", "DIGEST", "ACTIONS", "REVISION"], rows);
        }),
        CatalogCmd::Show { tenant, version } => {
            show(out, &c.catalog(tenant, catalog_version(version)?).await.map_err(failed)?, print_version)
        }
        CatalogCmd::Diff { tenant, from, to } => {
            let diff = c.diff_catalogs(tenant, catalog_version(from)?, catalog_version(to)?).await.map_err(failed)?;
            show(out, &diff, |d| {
                let mut rows: Vec<Vec<String>> = Vec::new();
                rows.extend(d.added.iter().map(|id| vec![id.clone(), "added".into(), String::new()]));
                rows.extend(d.removed.iter().map(|id| vec![id.clone(), "removed".into(), String::new()]));
                rows.extend(d.changed.iter().map(|c| vec![c.id.clone(), "changed".into(), c.fields.join(" ")]));
                say!("version {} → {}", d.from, d.to);
                print_table(&["ACTION", "CHANGE", "FIELDS"], rows);
            })
        }
    }
}

/// An upstream's configuration flags (absent: the default on add, unchanged on set).
#[derive(Debug, Args)]
pub struct UpstreamFlags {
    /// The upstream's MCP endpoint: https://…, or http:// on a literal loopback address. (Not
    /// `--url`/`--ca`: those name the admin API and its CA for every `writ admin` command.)
    #[arg(long)]
    mcp_url: Option<String>,
    /// Where the bearer token for the upstream comes from: none, env:WRIT_UPSTREAM_<TENANT>__… or
    /// file:/…/<tenant>/upstream-… (resolved on the nodes and edges that call it; never stored).
    #[arg(long, conflicts_with = "oauth_token_url")]
    auth: Option<String>,
    /// OAuth 2.0 client credentials instead of --auth: the token endpoint (its access tokens are
    /// asked for by the nodes and edges that call the upstream, and kept until they expire).
    #[arg(long, requires_all = ["oauth_client_id", "oauth_secret"])]
    oauth_token_url: Option<String>,
    /// The OAuth client id.
    #[arg(long, requires = "oauth_token_url")]
    oauth_client_id: Option<String>,
    /// The OAuth client secret's reference: env:WRIT_UPSTREAM_<TENANT>__… or file:/…/<tenant>/upstream-….
    #[arg(long, requires = "oauth_token_url")]
    oauth_secret: Option<String>,
    /// The OAuth scope to ask for.
    #[arg(long, requires = "oauth_token_url")]
    oauth_scope: Option<String>,
    /// A PEM file of the CA certificates to trust for the upstream (instead of the system's).
    #[arg(long)]
    mcp_ca: Option<std::path::PathBuf>,
    /// 2026-07-28, 2025-11-25 or auto.
    #[arg(long)]
    protocol: Option<String>,
    #[arg(long)]
    connect_timeout_ms: Option<u64>,
    #[arg(long)]
    call_timeout_ms: Option<u64>,
}

impl UpstreamFlags {
    fn body(&self, name: Option<&str>) -> Result<writ_api::upstream::UpstreamBody, Failure> {
        let ca_pem = match &self.mcp_ca {
            Some(path) => Some(std::fs::read_to_string(path).map_err(|e| usage(format!("{}: {e}", path.display())))?),
            None => None,
        };
        Ok(writ_api::upstream::UpstreamBody {
            name: name.map(str::to_string),
            url: self.mcp_url.clone(),
            auth: self.auth.clone(),
            oauth: self.oauth_token_url.as_ref().map(|token_url| writ_api::upstream::OauthBody {
                token_url: token_url.clone(),
                client_id: self.oauth_client_id.clone().unwrap_or_default(),
                secret: self.oauth_secret.clone().unwrap_or_default(),
                scope: self.oauth_scope.clone(),
            }),
            ca_pem,
            protocol: self.protocol.clone(),
            connect_timeout_ms: self.connect_timeout_ms,
            call_timeout_ms: self.call_timeout_ms,
        })
    }
}

#[derive(Debug, Subcommand)]
pub enum UpstreamCmd {
    /// Add an upstream (nothing of it is served until its tools are synced and approved).
    Add {
        #[arg(long)]
        tenant: String,
        name: String,
        #[command(flatten)]
        flags: UpstreamFlags,
    },
    List {
        #[arg(long)]
        tenant: String,
    },
    /// Its configuration, pinned tools, pending diff and every edge's fuse.
    Show {
        #[arg(long)]
        tenant: String,
        name: String,
    },
    /// Change its configuration (closes every edge's fuse of it).
    Set {
        #[arg(long)]
        tenant: String,
        name: String,
        #[command(flatten)]
        flags: UpstreamFlags,
    },
    Remove {
        #[arg(long)]
        tenant: String,
        name: String,
    },
    /// List the upstream's tools now and show what differs from the pinned set (recorded as
    /// pending); with --approve, pin exactly the set just listed.
    Sync {
        #[arg(long)]
        tenant: String,
        name: String,
        #[arg(long)]
        approve: bool,
    },
}

fn print_upstream(u: &writ_api::upstream::UpstreamV1) {
    let digest = |t: &Option<writ_api::upstream::UpstreamToolsV1>| {
        t.as_ref().map_or("-".to_string(), |t| format!("{} ({} tools)", t.digest, t.tools.len()))
    };
    print_table(
        &["NAME", "URL", "PROTOCOL", "AUTH", "CONFIG", "PINNED", "PENDING"],
        vec![vec![
            u.name.clone(),
            u.spec.url.clone(),
            u.spec.protocol.as_str().to_string(),
            u.spec.auth.label(),
            u.config_version.to_string(),
            digest(&u.pinned),
            digest(&u.pending),
        ]],
    );
    if let Some(pinned) = &u.pinned {
        say!();
        let rows = pinned
            .tools
            .iter()
            .map(|t| vec![t.name.clone(), if t.retry_safe() { "yes" } else { "no" }.into(), t.description.clone()])
            .collect();
        print_table(&["TOOL", "RETRY-SAFE", "DESCRIPTION"], rows);
    }
    say!();
    let rows = u
        .fuses
        .iter()
        .map(|(edge, f)| {
            vec![
                edge.clone(),
                if f.open { "open" } else { "closed" }.into(),
                f.failures.to_string(),
                f.config_version.to_string(),
                f.changed_at_ms.to_string(),
                f.reason.clone(),
            ]
        })
        .collect();
    print_table(&["EDGE", "FUSE", "FAILURES", "CONFIG", "CHANGED_MS", "REASON"], rows);
}

fn print_tools_diff(d: &writ_api::upstream::ToolsDiff) {
    let mut rows: Vec<Vec<String>> = Vec::new();
    rows.extend(d.added.iter().map(|n| vec![n.clone(), "added".into(), String::new()]));
    rows.extend(d.removed.iter().map(|n| vec![n.clone(), "removed".into(), String::new()]));
    rows.extend(d.changed.iter().map(|c| vec![c.id.clone(), "changed".into(), c.fields.join(" ")]));
    print_table(&["TOOL", "CHANGE", "FIELDS"], rows);
}

async fn upstream_cmd(c: &AdminClient, out: Output, cmd: &UpstreamCmd) -> Result<(), Failure> {
    match cmd {
        UpstreamCmd::Add { tenant, name, flags } => {
            show(out, &c.add_upstream(tenant, &flags.body(Some(name))?).await.map_err(failed)?, print_upstream)
        }
        UpstreamCmd::List { tenant } => show(out, &c.list_upstreams(tenant).await.map_err(failed)?, |l| {
            let rows = l
                .iter()
                .map(|u| {
                    vec![
                        u.name.clone(),
                        u.url.clone(),
                        u.protocol.as_str().to_string(),
                        u.config_version.to_string(),
                        u.pinned_tools.to_string(),
                        u.pending_digest.clone().unwrap_or_else(|| "-".into()),
                        u.open_fuses.to_string(),
                    ]
                })
                .collect();
            print_table(&["NAME", "URL", "PROTOCOL", "CONFIG", "PINNED", "PENDING", "OPEN_FUSES"], rows);
        }),
        UpstreamCmd::Show { tenant, name } => show(out, &c.upstream(tenant, name).await.map_err(failed)?, |v| {
            print_upstream(&v.upstream);
            if let Some(d) = &v.pending_diff {
                say!();
                say!("pending (approve with `writ admin upstream sync --approve`):");
                print_tools_diff(d);
            }
        }),
        UpstreamCmd::Set { tenant, name, flags } => {
            show(out, &c.set_upstream(tenant, name, &flags.body(None)?).await.map_err(failed)?, print_upstream)
        }
        UpstreamCmd::Remove { tenant, name } => {
            show(out, &c.remove_upstream(tenant, name).await.map_err(failed)?, |_| say!("removed {name}"))
        }
        UpstreamCmd::Sync { tenant, name, approve } => {
            let report = c.sync_upstream(tenant, name).await.map_err(failed)?;
            let approved = match (*approve, report.pending) {
                (true, true) => Some(c.approve_upstream(tenant, name, &report.observed_digest).await.map_err(failed)?),
                _ => None,
            };
            let both = serde_json::json!({"sync": report, "approved": approved});
            show(out, &both, |_| {
                say!(
                    "{} tools listed over MCP {} (digest {})",
                    report.tools,
                    report.protocol_version.as_deref().unwrap_or("?"),
                    report.observed_digest
                );
                print_tools_diff(&report.diff);
                match (&approved, report.pending) {
                    (Some(u), _) => {
                        say!("approved: configuration {} now pins {}", u.config_version, report.observed_digest)
                    }
                    (None, true) => say!("pending: review, then `writ admin upstream sync --approve`"),
                    (None, false) => say!("the pinned tool set is current"),
                }
            })
        }
    }
}

/// A catalog version argument: a number or `latest` (`None`).
fn catalog_version(v: &str) -> Result<Option<u64>, Failure> {
    match v {
        "latest" => Ok(None),
        v => v.parse().map(Some).map_err(|_| usage(format!("version must be a number or 'latest', not '{v}'"))),
    }
}

#[derive(Debug, Subcommand)]
pub enum ContextCmd {
    /// Every context, the current one marked.
    List,
    /// Make NAME the current context.
    Use { name: String },
    /// Create or replace a context.
    Set {
        name: String,
        /// An admin API endpoint (repeatable; tried in turn).
        #[arg(long = "endpoint", required = true)]
        endpoints: Vec<String>,
        /// The cluster CA file.
        #[arg(long = "ca-file")]
        ca_file: Option<std::path::PathBuf>,
        /// A file holding the operator token (keep it 0600).
        #[arg(long)]
        token_file: Option<std::path::PathBuf>,
        /// The operator's certificate, for admin listeners that require one (with --key-file).
        #[arg(long, requires = "key_file")]
        cert_file: Option<std::path::PathBuf>,
        /// The operator certificate's private key.
        #[arg(long, requires = "cert_file")]
        key_file: Option<std::path::PathBuf>,
    },
    /// Remove a context.
    Remove { name: String },
}

fn context_cmd(cmd: &ContextCmd, out: Output) -> Result<(), Failure> {
    use crate::context::{path, Context, ContextFile};
    let file_path =
        path(&|k| std::env::var(k).ok()).ok_or_else(|| usage("no config file location: set WRIT_CONFIG or HOME"))?;
    let mut file = ContextFile::load(&file_path).map_err(usage)?;
    match cmd {
        ContextCmd::List => {
            if out == Output::Json {
                print_json(&file);
                return Ok(());
            }
            let rows: Vec<Vec<String>> = file
                .contexts
                .iter()
                .map(|(name, c)| {
                    let current = if file.current.as_deref() == Some(name) { "*" } else { "" };
                    let ca = c.ca.as_ref().map_or(String::new(), |p| p.display().to_string());
                    vec![current.to_string(), name.clone(), c.urls.join(","), ca]
                })
                .collect();
            print_table(&["CURRENT", "NAME", "ENDPOINTS", "CA"], rows);
            return Ok(());
        }
        ContextCmd::Use { name } => {
            if !file.contexts.contains_key(name) {
                return Err(usage(format!("no context named '{name}'")));
            }
            file.current = Some(name.clone());
        }
        ContextCmd::Set { name, endpoints, ca_file, token_file, cert_file, key_file } => {
            let context = Context {
                urls: endpoints.clone(),
                ca: ca_file.clone(),
                token_file: token_file.clone(),
                cert_file: cert_file.clone(),
                key_file: key_file.clone(),
            };
            file.contexts.insert(name.clone(), context);
            if file.current.is_none() {
                file.current = Some(name.clone());
            }
        }
        ContextCmd::Remove { name } => {
            if file.contexts.remove(name).is_none() {
                return Err(usage(format!("no context named '{name}'")));
            }
            if file.current.as_deref() == Some(name) {
                file.current = None;
            }
        }
    }
    file.save(&file_path).map_err(usage)?;
    println!("{}", file_path.display());
    Ok(())
}

#[derive(Debug, Subcommand)]
pub enum TokenCmd {
    /// Issue a token to a principal; the token is printed once and not stored by Writ.
    Issue {
        #[arg(long)]
        tenant: String,
        /// Principal id or name.
        principal: String,
        /// A scope (repeatable); default: all of the principal's.
        #[arg(long = "scope")]
        scopes: Vec<String>,
        /// Lifetime, e.g. `15m` (clamped to the tenant's bounds).
        #[arg(long, value_parser = parse_duration_s)]
        ttl: Option<u64>,
        #[arg(long)]
        audience: Option<String>,
    },
    /// Mint a child of a token (scopes ⊆ the parent's, within the delegation depth limit).
    Delegate {
        #[arg(long)]
        tenant: String,
        /// The parent token's id (`jti`).
        parent: String,
        /// Principal the child is for (default: the parent's).
        #[arg(long)]
        principal: Option<String>,
        #[arg(long = "scope")]
        scopes: Vec<String>,
        #[arg(long, value_parser = parse_duration_s)]
        ttl: Option<u64>,
        #[arg(long)]
        audience: Option<String>,
    },
    /// Revoke a token and every token delegated from it.
    Revoke {
        #[arg(long)]
        tenant: String,
        jti: String,
    },
    /// The ledger's record of a token.
    Show {
        #[arg(long)]
        tenant: String,
        jti: String,
    },
    /// The ledger's token records (never the tokens: Writ does not keep them), by `jti`.
    List {
        #[arg(long)]
        tenant: String,
        /// Only this principal's (id or name).
        #[arg(long)]
        principal: Option<String>,
        #[arg(long)]
        after: Option<String>,
        #[arg(long, default_value_t = 100)]
        limit: u32,
    },
    /// Verify a bearer token as an edge would; exit 1 when it does not verify.
    Inspect {
        /// The bearer token (JWT).
        #[arg(value_name = "TOKEN")]
        bearer: String,
        #[arg(long)]
        audience: Option<String>,
    },
}

#[derive(Debug, Subcommand)]
pub enum IssuerCmd {
    /// Register (or replace) an issuer whose tokens authenticate the tenant's principals.
    Set {
        #[arg(long)]
        tenant: String,
        /// The `iss` value.
        issuer: String,
        /// The `aud` its tokens must carry.
        #[arg(long)]
        audience: String,
        /// A file holding the JWKS (`{"keys":[...]}`).
        #[arg(long)]
        jwks_file: std::path::PathBuf,
    },
    /// Register (or replace) an issuer by its URL: its keys are fetched through OpenID / RFC
    /// 8414 discovery (and fetched again by the ledger's leader while it leads).
    Discover {
        #[arg(long)]
        tenant: String,
        /// The issuer's URL (`https://…`).
        issuer: String,
        /// The `aud` its tokens must carry: the tenant's MCP URL (`…/t/<tenant>/mcp`).
        #[arg(long)]
        audience: String,
        /// Let the issuer and its key set live at loopback or private addresses (an IdP
        /// inside your network); `http://` only to a loopback address.
        #[arg(long)]
        allow_private_network: bool,
    },
    List {
        #[arg(long)]
        tenant: String,
    },
    Remove {
        #[arg(long)]
        tenant: String,
        issuer: String,
    },
    /// Revoke one token id (`jti`) of the issuer: its tokens are refused until every token
    /// carrying it has expired.
    RevokeToken {
        #[arg(long)]
        tenant: String,
        issuer: String,
        #[arg(long)]
        jti: String,
    },
}

#[derive(Debug, Subcommand)]
pub enum CredentialCmd {
    /// Registered and retired signing keys, revoked role certificates; with --tenant, its
    /// executor CAs and revoked issuer token ids.
    Show {
        #[arg(long)]
        tenant: Option<String>,
    },
    /// Retire a token-signing key: every token it signed is refused; its node makes a new key.
    RetireKey { kid: String },
    /// Revoke a role certificate of the cluster PKI: every node refuses it at once.
    RevokeCert {
        /// The certificate (PEM) to revoke.
        #[arg(long, conflicts_with_all = ["serial", "identity", "not_after_ms"])]
        cert: Option<std::path::PathBuf>,
        /// Or its serial (hex, as `writ pki list` prints it) ...
        #[arg(long, requires_all = ["identity", "not_after_ms"])]
        serial: Option<String>,
        /// ... the identity it names (`edge:a`) ...
        #[arg(long)]
        identity: Option<String>,
        /// ... and its notAfter (ms since the epoch).
        #[arg(long)]
        not_after_ms: Option<u64>,
    },
    /// Retire an executor CA of a tenant: executors it certified are refused and enroll again;
    /// the nodes issue from a new CA.
    RetireCa {
        #[arg(long)]
        tenant: String,
        fingerprint: String,
    },
    /// Let an edge (its certificate's id) act without a token as one principal of the tenant
    /// — the anonymous mode of a loopback edge — or, with --remove, take that away.
    Anonymous {
        #[arg(long)]
        tenant: String,
        edge: String,
        #[arg(long, required_unless_present = "remove", conflicts_with = "remove")]
        principal: Option<String>,
        #[arg(long)]
        remove: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum SiteCmd {
    Create {
        #[arg(long)]
        tenant: String,
        name: String,
        #[arg(long)]
        display_name: Option<String>,
    },
    List {
        #[arg(long)]
        tenant: String,
        #[arg(long)]
        after: Option<String>,
        #[arg(long, default_value_t = 100)]
        limit: u32,
    },
}

#[derive(Debug, Subcommand)]
pub enum DeviceCmd {
    Create {
        #[arg(long)]
        tenant: String,
        /// Site id or name.
        #[arg(long)]
        site: String,
        name: String,
        /// Device class, e.g. `robot-arm.v2`.
        #[arg(long)]
        class: String,
    },
    List {
        #[arg(long)]
        tenant: String,
        /// Only devices of this site (id or name).
        #[arg(long)]
        site: Option<String>,
        #[arg(long)]
        after: Option<String>,
        #[arg(long, default_value_t = 100)]
        limit: u32,
    },
}

#[derive(Debug, Subcommand)]
pub enum PrincipalCmd {
    /// Create a principal with a role preset and/or explicit scopes.
    Create {
        #[arg(long)]
        tenant: String,
        name: String,
        #[arg(long, value_enum)]
        kind: KindArg,
        #[arg(long, value_enum)]
        preset: Option<PresetArg>,
        /// An explicit scope (repeatable), e.g. `tools:call:move_arm`.
        #[arg(long = "scope")]
        scopes: Vec<String>,
        /// Metadata `key=value` (repeatable).
        #[arg(long = "meta", value_parser = parse_key_value)]
        metadata: Vec<(String, String)>,
        /// Create it without the default quotas of its own (set them with `principal quotas`).
        #[arg(long)]
        no_quotas: bool,
    },
    List {
        #[arg(long)]
        tenant: String,
        #[arg(long)]
        after: Option<String>,
        #[arg(long, default_value_t = 100)]
        limit: u32,
    },
    Show {
        #[arg(long)]
        tenant: String,
        principal: String,
    },
    /// Revoke the principal: all its credentials stop working.
    Revoke {
        #[arg(long)]
        tenant: String,
        principal: String,
        #[arg(long)]
        note: Option<String>,
    },
    /// Take one scope away from the principal.
    RevokeScope {
        #[arg(long)]
        tenant: String,
        principal: String,
        scope: String,
    },
    /// Grant one more scope to the principal (new tokens may carry it).
    GrantScope {
        #[arg(long)]
        tenant: String,
        principal: String,
        scope: String,
    },
    /// Show or set the principal's own quotas (its tenant's apply on top).
    Quotas {
        #[arg(long)]
        tenant: String,
        principal: String,
        /// Requests per minute across all edges.
        #[arg(long, conflicts_with = "clear")]
        requests_per_minute: Option<u64>,
        /// Operations recorded per minute.
        #[arg(long, conflicts_with = "clear")]
        operations_per_minute: Option<u64>,
        /// Cost units of recorded operations per day.
        #[arg(long, conflicts_with = "clear")]
        cost_units_per_day: Option<u64>,
        /// Operations waiting or attempting at once.
        #[arg(long, conflicts_with = "clear")]
        concurrent_operations: Option<u64>,
        /// Remove the principal's own limits.
        #[arg(long)]
        clear: bool,
    },
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum KindArg {
    Human,
    Agent,
    Device,
    Service,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum PresetArg {
    #[value(name = "readOnly")]
    ReadOnly,
    Full,
    Delegate,
}

fn parse_key_value(text: &str) -> Result<(String, String), String> {
    text.split_once('=')
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .ok_or_else(|| format!("'{text}' is not key=value"))
}

#[derive(Debug, Subcommand)]
pub enum ClusterCmd {
    /// Every member's role, term, log position and state digest.
    Status,
    /// Every member's ledger version and the cluster's (the oldest: commands newer than it are
    /// refused with LEDGER_VERSION_GATED until every node is upgraded).
    Version,
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
    /// Delete a tenant: final (a tombstone); its tokens, executors and changes are refused at
    /// once with TENANT_DELETED, and its name stays taken.
    Delete {
        tenant: String,
        #[arg(long)]
        note: Option<String>,
    },
    /// Purge a deleted tenant's data (its views, audit trail and evidence; its name is free
    /// again): refused until 30 days of ledger time have passed since its deletion.
    Purge {
        tenant: String,
    },
    /// What the ledger keeps of a tenant: operations, bindings, keys, tokens, enrollments,
    /// audit records, evidence, bytes, and when retention next drops something.
    Storage {
        tenant: String,
    },
    /// Each tool of the tenant's catalog as a state (connected, degraded, fused, unreachable)
    /// with why: connected executors, pinned and fused upstreams.
    Health {
        tenant: String,
    },
    /// Change settings; only the flags given change.
    Set(SetArgs),
}

#[derive(Debug, Args)]
pub struct SetArgs {
    pub tenant: String,
    /// Audit events retained (FIFO beyond it).
    #[arg(long)]
    pub audit_max_events: Option<u64>,
    /// Oldest audit event retained, e.g. `90d`.
    #[arg(long, value_parser = parse_duration_s)]
    pub audit_max_age: Option<u64>,
    #[arg(long, value_enum)]
    pub audit_mode: Option<AuditModeArg>,
    /// How long idempotency records are kept (at least 24h), e.g. `48h`.
    #[arg(long, value_parser = parse_duration_s)]
    pub idempotency_retention: Option<u64>,
    #[arg(long, value_parser = parse_duration_s)]
    pub token_ttl_min: Option<u64>,
    #[arg(long, value_parser = parse_duration_s)]
    pub token_ttl_max: Option<u64>,
    /// Replaces the allowed origins (repeat the flag); `--allowed-origin ''` clears them.
    #[arg(long = "allowed-origin")]
    pub allowed_origins: Option<Vec<String>>,
    #[arg(long)]
    pub requests_per_minute: Option<u64>,
    #[arg(long)]
    pub operations_per_minute: Option<u64>,
    #[arg(long)]
    pub cost_units_per_day: Option<u64>,
    #[arg(long)]
    pub concurrent_operations: Option<u64>,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum AuditModeArg {
    Standard,
    Strict,
}

/// Parses `90`, `90s`, `15m`, `12h` or `30d` into seconds.
pub fn parse_duration_s(text: &str) -> Result<u64, String> {
    let (digits, unit) = match text.char_indices().find(|(_, c)| !c.is_ascii_digit()) {
        Some((i, _)) => text.split_at(i),
        None => (text, "s"),
    };
    let n: u64 = digits.parse().map_err(|_| format!("'{text}' is not a duration like 90s, 15m, 12h or 30d"))?;
    let scale = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => return Err(format!("'{text}': unit must be s, m, h or d")),
    };
    n.checked_mul(scale).ok_or_else(|| format!("'{text}' is too large"))
}

impl SetArgs {
    /// The JSON patch: only the flags given.
    fn patch(&self) -> Value {
        let mut p = serde_json::Map::new();
        let mut put = |k: &str, v: Value| {
            p.insert(k.to_string(), v);
        };
        if let Some(v) = self.audit_max_events {
            put("audit_max_events", v.into());
        }
        if let Some(v) = self.audit_max_age {
            put("audit_max_age_s", v.into());
        }
        if let Some(v) = self.audit_mode {
            put("audit_mode", if matches!(v, AuditModeArg::Strict) { "strict" } else { "standard" }.into());
        }
        if let Some(v) = self.idempotency_retention {
            put("idempotency_retention_s", v.into());
        }
        if let Some(v) = self.token_ttl_min {
            put("token_ttl_min_s", v.into());
        }
        if let Some(v) = self.token_ttl_max {
            put("token_ttl_max_s", v.into());
        }
        if let Some(o) = &self.allowed_origins {
            let o: Vec<&String> = o.iter().filter(|s| !s.is_empty()).collect();
            put("allowed_origins", serde_json::json!(o));
        }
        let quotas = [
            ("requests_per_minute", self.requests_per_minute),
            ("operations_per_minute", self.operations_per_minute),
            ("cost_units_per_day", self.cost_units_per_day),
            ("concurrent_operations", self.concurrent_operations),
        ];
        if quotas.iter().any(|(_, v)| v.is_some()) {
            let q: serde_json::Map<String, Value> =
                quotas.iter().filter_map(|(k, v)| v.map(|v| (k.to_string(), v.into()))).collect();
            put("quotas", Value::Object(q));
        }
        Value::Object(p)
    }
}

#[derive(Debug, Args)]
pub struct CreateArgs {
    /// Unique name: a-z, 0-9 and '-'.
    pub name: String,
    #[arg(long)]
    pub display_name: Option<String>,
    /// Create the tenant without the default quotas (set limits later with `tenant set`).
    #[arg(long)]
    pub no_quotas: bool,
}

/// A failed call, already mapped to an exit code and a message.
struct Failure {
    exit: i32,
    message: String,
}

/// A failed admin call as the command's failure: its exit code (4 authentication, 3 nothing
/// could answer, 1 a rejection) and message (the reason code first).
fn failed(e: AdminError) -> Failure {
    let exit = match e.status() {
        Some(401 | 403) => EXIT_AUTH,
        _ if e.is_unavailable() => EXIT_UNAVAILABLE,
        _ => EXIT_REJECTED,
    };
    Failure { exit, message: e.to_string() }
}

/// A usage error.
fn usage(message: impl Into<String>) -> Failure {
    Failure { exit: EXIT_USAGE, message: message.into() }
}

/// A flag's value as the wire type `T` (e.g. a reason code or an outcome), or a usage error.
fn parsed<T: serde::de::DeserializeOwned>(what: &str, value: Value) -> Result<T, Failure> {
    serde_json::from_value(value.clone()).map_err(|_| usage(format!("{what}: {value} is not a valid value")))
}

/// Runs one admin command and returns the process exit code.
/// Where and as whom a command calls the admin API.
struct Endpoint {
    url: String,
    token: String,
    ca: Option<std::path::PathBuf>,
    /// The operator's certificate and key, if one is presented.
    identity: Option<(std::path::PathBuf, std::path::PathBuf)>,
}

/// The endpoint, token, CA and certificate of a command: flags and their environment variables
/// first, then the chosen (or current) context.
fn endpoint(args: &AdminArgs) -> Result<Endpoint, String> {
    use crate::context::{path, ContextFile};
    let file = match path(&|k| std::env::var(k).ok()) {
        Some(p) => ContextFile::load(&p)?,
        None => ContextFile::default(),
    };
    let context = file.pick(args.context.as_deref())?.map(|(_, c)| c);
    let url = args.url.clone().or_else(|| context.map(|c| c.urls.join(",")));
    let token = match (&args.token, context) {
        (Some(t), _) => Some(t.clone()),
        (None, Some(c)) => c.token()?,
        (None, None) => None,
    };
    let ca = args.ca.clone().or_else(|| context.and_then(|c| c.ca.clone()));
    let identity = match (&args.cert, &args.key) {
        (Some(cert), Some(key)) => Some((cert.clone(), key.clone())),
        _ => context.and_then(|c| c.cert_file.clone().zip(c.key_file.clone())),
    };
    match (url, token) {
        (Some(url), Some(token)) => Ok(Endpoint { url, token, ca, identity }),
        _ => Err("no admin endpoint: pass --url and --token, set WRIT_ADMIN_URL and WRIT_ADMIN_TOKEN (e.g. `source .writ/dev/env`), or use a context (`writ admin context set`)".into()),
    }
}

pub async fn run(args: AdminArgs) -> i32 {
    if let Noun::Context(cmd) = &args.noun {
        return match context_cmd(cmd, args.output) {
            Ok(()) => 0,
            Err(f) => {
                eprintln!("error: {}", f.message);
                f.exit
            }
        };
    }
    let e = match endpoint(&args) {
        Ok(e) => e,
        Err(e) => {
            eprintln!("error: {e}");
            return EXIT_USAGE;
        }
    };
    let tls = match (&e.ca, &e.identity) {
        (Some(ca), Some((cert, key))) => writ_client::ClientTls::with_identity(ca, cert, key).map(Some),
        (Some(ca), None) => writ_client::ClientTls::trusting(ca).map(Some),
        (None, Some(_)) => Err("an operator certificate needs the cluster CA (--ca)".to_string()),
        (None, None) => Ok(None),
    };
    let tls = match tls {
        Ok(t) => t,
        Err(err) => {
            eprintln!("error: --ca/--cert/--key: {err}");
            return EXIT_USAGE;
        }
    };
    let client = AdminClient::with_tls(e.url, e.token, tls.as_ref());
    match execute(&client, &args).await {
        Ok(()) => 0,
        Err(f) => {
            eprintln!("error: {}", f.message);
            f.exit
        }
    }
}

/// `writ admin cluster version`: each member's ledger version, the cluster's, and the one in
/// force (the newest any member has applied: the leader raises it once every member runs it).
async fn cluster_version(c: &AdminClient, out: Output) -> Result<(), Failure> {
    let status = c.cluster_status().await.map_err(failed)?;
    let nodes: std::collections::BTreeMap<u64, Option<u32>> =
        status.members.iter().map(|m| (m.node_id, m.status.as_ref().map(|s| s.ledger_version))).collect();
    // A member that does not answer holds the cluster at the oldest version.
    let cluster = nodes.values().map(|v| v.unwrap_or(1)).min().unwrap_or(1);
    let in_force = status.members.iter().filter_map(|m| m.status.as_ref()).map(|s| s.ledger_version_in_force).max();
    let newest = writ_api::ledger::LEDGER_VERSION;
    let view =
        serde_json::json!({"cluster": cluster, "in_force": in_force.unwrap_or(0), "newest": newest, "nodes": nodes});
    show(out, &view, |v| {
        let rows = nodes
            .iter()
            .map(|(id, ver)| vec![id.to_string(), ver.map_or("unreachable".into(), |v| v.to_string())])
            .collect();
        print_table(&["NODE", "LEDGER_VERSION"], rows);
        say!("cluster version {}, in force {} (this build's newest: {})", v["cluster"], v["in_force"], v["newest"]);
    })
}

async fn execute(c: &AdminClient, args: &AdminArgs) -> Result<(), Failure> {
    let out = args.output;
    match &args.noun {
        // Handled in `run`: contexts need no endpoint.
        Noun::Context(cmd) => context_cmd(cmd, out),
        Noun::Backup { out: path } => backup(c, out, path).await,
        Noun::ClientConfig { .. } => client_config(c, &args.noun).await,
        Noun::Cluster(cmd) => cluster_cmd(c, out, cmd).await,
        Noun::Principal(cmd) => principal_cmd(c, out, cmd).await,
        Noun::Site(cmd) => site_cmd(c, out, cmd).await,
        Noun::Device(cmd) => device_cmd(c, out, cmd).await,
        Noun::Token(cmd) => token_cmd(c, out, cmd).await,
        Noun::Issuer(cmd) => issuer_cmd(c, out, cmd).await,
        Noun::Oauth(cmd) => oauth::oauth_cmd(c, out, cmd).await,
        Noun::Operator(cmd) => operator::operator_cmd(c, out, cmd).await,
        Noun::Credential(cmd) => credential_cmd(c, out, cmd).await,
        Noun::Catalog(cmd) => catalog_cmd(c, out, cmd).await,
        Noun::Upstream(cmd) => upstream_cmd(c, out, cmd).await,
        Noun::Audit(cmd) => audit_cmd(c, out, cmd).await,
        Noun::Executor(cmd) => executor_cmd(c, out, cmd).await,
        Noun::Operation(cmd) => operation_cmd(c, out, cmd).await,
        Noun::Work(cmd) => work_cmd(c, out, cmd).await,
        Noun::Tenant(cmd) => tenant_cmd(c, out, cmd).await,
    }
}

/// `cluster …`: status, version, membership, snapshots and log purges.
async fn cluster_cmd(c: &AdminClient, out: Output, cmd: &ClusterCmd) -> Result<(), Failure> {
    let node = match cmd {
        ClusterCmd::Status => return show(out, &c.cluster_status().await.map_err(failed)?, print_cluster),
        ClusterCmd::Version => return cluster_version(c, out).await,
        ClusterCmd::AddLearner { node_id, addr } => {
            c.add_learner(&AddLearnerRequest { node_id: *node_id, addr: addr.clone() }).await
        }
        ClusterCmd::Membership { voters } => c.change_membership(&MembershipRequest { voters: voters.clone() }).await,
        ClusterCmd::Snapshot => c.snapshot().await,
        ClusterCmd::Purge => c.purge_log().await,
    };
    print_json(&node.map_err(failed)?);
    Ok(())
}

/// `principal …`: create, list, show, revoke, scopes and quotas.
async fn principal_cmd(c: &AdminClient, out: Output, cmd: &PrincipalCmd) -> Result<(), Failure> {
    let principal = match cmd {
        PrincipalCmd::Create { tenant, name, kind, preset, scopes, metadata, no_quotas } => {
            let request = CreatePrincipalRequest {
                name: name.clone(),
                kind: match kind {
                    KindArg::Human => PrincipalKind::Human,
                    KindArg::Agent => PrincipalKind::Agent,
                    KindArg::Device => PrincipalKind::Device,
                    KindArg::Service => PrincipalKind::Service,
                },
                preset: preset.map(|p| match p {
                    PresetArg::ReadOnly => RolePreset::ReadOnly,
                    PresetArg::Full => RolePreset::Full,
                    PresetArg::Delegate => RolePreset::Delegate,
                }),
                scopes: scopes.clone(),
                metadata: metadata.iter().cloned().collect(),
                quotas: no_quotas.then(Default::default),
            };
            c.create_principal(tenant, &request).await
        }
        PrincipalCmd::List { tenant, after, limit } => {
            let page = Page { after: after.clone(), limit: Some(*limit) };
            let list = c.list_principals(tenant, &page).await.map_err(failed)?;
            return show(out, &list, |l| {
                print_principals(&l.principals);
                if let Some(next) = &l.next_cursor {
                    say!("(more: --after {next})");
                }
            });
        }
        PrincipalCmd::Show { tenant, principal } => c.principal(tenant, principal).await,
        PrincipalCmd::Revoke { tenant, principal, note } => {
            c.revoke_principal(tenant, principal, &RevokePrincipalRequest { note: note.clone() }).await
        }
        PrincipalCmd::GrantScope { tenant, principal, scope } => {
            c.grant_scope(tenant, principal, &RevokeScopeRequest { scope: scope.clone() }).await
        }
        PrincipalCmd::RevokeScope { tenant, principal, scope } => {
            c.revoke_scope(tenant, principal, &RevokeScopeRequest { scope: scope.clone() }).await
        }
        PrincipalCmd::Quotas {
            tenant,
            principal,
            requests_per_minute,
            operations_per_minute,
            cost_units_per_day,
            concurrent_operations,
            clear,
        } => {
            let given = [requests_per_minute, operations_per_minute, cost_units_per_day, concurrent_operations];
            // A change replaces the principal's limits: the flags given are the new set.
            let view = if *clear || given.iter().any(|g| g.is_some()) {
                let quotas = PrincipalQuotasV2 {
                    requests_per_minute: *requests_per_minute,
                    operations_per_minute: *operations_per_minute,
                    cost_units_per_day: *cost_units_per_day,
                    concurrent_operations: *concurrent_operations,
                };
                c.set_principal_quotas(tenant, principal, &quotas).await
            } else {
                c.principal_quotas(tenant, principal).await
            };
            return show(out, &view.map_err(failed)?, |q| {
                let show = |v: Option<u64>| v.map_or("-".to_string(), |n| n.to_string());
                let quotas = &q.quotas;
                print_table(
                    &["PRINCIPAL", "REQUESTS/MIN", "OPERATIONS/MIN", "COST/DAY", "CONCURRENT"],
                    vec![vec![
                        q.principal_id.clone(),
                        show(quotas.requests_per_minute),
                        show(quotas.operations_per_minute),
                        show(quotas.cost_units_per_day),
                        show(quotas.concurrent_operations),
                    ]],
                );
            });
        }
    };
    show(out, &principal.map_err(failed)?, |p| print_principals(std::slice::from_ref(p)))
}

/// `site …`: create and list.
async fn site_cmd(c: &AdminClient, out: Output, cmd: &SiteCmd) -> Result<(), Failure> {
    match cmd {
        SiteCmd::Create { tenant, name, display_name } => {
            let request = CreateSiteRequest { name: name.clone(), display_name: display_name.clone() };
            show(out, &c.create_site(tenant, &request).await.map_err(failed)?, |s| print_sites(std::slice::from_ref(s)))
        }
        SiteCmd::List { tenant, after, limit } => {
            let page = Page { after: after.clone(), limit: Some(*limit) };
            show(out, &c.list_sites(tenant, &page).await.map_err(failed)?, |l| print_sites(&l.sites))
        }
    }
}

/// `device …`: create and list.
async fn device_cmd(c: &AdminClient, out: Output, cmd: &DeviceCmd) -> Result<(), Failure> {
    match cmd {
        DeviceCmd::Create { tenant, site, name, class } => {
            let request = CreateDeviceRequest { name: name.clone(), site: site.clone(), device_class: class.clone() };
            show(out, &c.create_device(tenant, &request).await.map_err(failed)?, |d| {
                print_devices(std::slice::from_ref(d))
            })
        }
        DeviceCmd::List { tenant, site, after, limit } => {
            let page = Page { after: after.clone(), limit: Some(*limit) };
            let list = c.list_devices(tenant, site.as_deref(), &page).await.map_err(failed)?;
            show(out, &list, |l| print_devices(&l.devices))
        }
    }
}

/// `tenant …`: the lifecycle and settings of tenants.
async fn tenant_cmd(c: &AdminClient, out: Output, cmd: &TenantCmd) -> Result<(), Failure> {
    match cmd {
        TenantCmd::Create(a) => {
            let settings =
                a.no_quotas.then(|| TenantSettingsPatch { quotas: Some(Default::default()), ..Default::default() });
            let request = CreateTenantRequest { name: a.name.clone(), display_name: a.display_name.clone(), settings };
            show(out, &c.create_tenant(&request).await.map_err(failed)?, |t| print_tenants(std::slice::from_ref(t)))
        }
        TenantCmd::List { after, limit } => {
            list_tenants(c, out, Page { after: after.clone(), limit: Some(*limit) }).await
        }
        TenantCmd::Show { tenant } => show(out, &c.tenant(tenant).await.map_err(failed)?, print_settings),
        TenantCmd::Purge { tenant } => {
            c.purge_tenant(tenant).await.map_err(failed)?;
            say!("purged {tenant}");
            Ok(())
        }
        TenantCmd::Storage { tenant } => show(out, &c.tenant_storage(tenant).await.map_err(failed)?, print_storage),
        TenantCmd::Health { tenant } => show(out, &c.tenant_health(tenant).await.map_err(failed)?, print_health),
        TenantCmd::Delete { tenant, note } => {
            let deleted = c.delete_tenant(tenant, &SuspendTenantRequest { note: note.clone() }).await;
            show(out, &deleted.map_err(failed)?, |t| print_tenants(std::slice::from_ref(t)))
        }
        TenantCmd::Suspend { tenant, note } => {
            let suspended = c.suspend_tenant(tenant, &SuspendTenantRequest { note: note.clone() }).await;
            show(out, &suspended.map_err(failed)?, |t| print_tenants(std::slice::from_ref(t)))
        }
        TenantCmd::Set(a) => {
            let patch: TenantSettingsPatch = parsed("settings", a.patch())?;
            show(out, &c.set_tenant_settings(&a.tenant, &patch).await.map_err(failed)?, print_settings)
        }
        TenantCmd::Resume { tenant } => {
            show(out, &c.resume_tenant(tenant).await.map_err(failed)?, |t| print_tenants(std::slice::from_ref(t)))
        }
    }
}

/// `client-config`: checks the principal (or issues its token), then prints the host's
/// configuration.
async fn client_config(c: &AdminClient, noun: &Noun) -> Result<(), Failure> {
    use crate::client_config::{render, Bearer};
    let Noun::ClientConfig { tenant, principal, host, mcp_url: url, issue_token, ttl, token_env, ca_file, name } = noun
    else {
        unreachable!("called for client-config only")
    };
    let issued = if *issue_token {
        let request = IssueTokenRequest {
            principal: principal.clone(),
            scopes: Vec::new(),
            ttl_s: *ttl,
            audience: Some(url.clone()),
        };
        Some(c.issue_token(tenant, &request).await.map_err(failed)?.token)
    } else {
        c.principal(tenant, principal).await.map_err(failed)?;
        None
    };
    let bearer = match &issued {
        Some(token) => Bearer::Literal(token),
        None => Bearer::Env(token_env),
    };
    print!("{}", render(*host, name, url, &bearer, ca_file.as_deref()));
    Ok(())
}

async fn token_cmd(c: &AdminClient, out: Output, cmd: &TokenCmd) -> Result<(), Failure> {
    match cmd {
        TokenCmd::Issue { tenant, principal, scopes, ttl, audience } => {
            let request = IssueTokenRequest {
                principal: principal.clone(),
                scopes: scopes.clone(),
                ttl_s: *ttl,
                audience: audience.clone(),
            };
            show(out, &c.issue_token(tenant, &request).await.map_err(failed)?, print_issued)
        }
        TokenCmd::Delegate { tenant, parent, principal, scopes, ttl, audience } => {
            let request = DelegateTokenRequest {
                principal: principal.clone(),
                scopes: scopes.clone(),
                ttl_s: *ttl,
                audience: audience.clone(),
            };
            show(out, &c.delegate_token(tenant, parent, &request).await.map_err(failed)?, print_issued)
        }
        TokenCmd::Revoke { tenant, jti } => {
            show(out, &c.revoke_token(tenant, jti).await.map_err(failed)?, |r: &RevokedToken| {
                say!("revoked {}", r.jti);
                for j in &r.cascade {
                    say!("revoked {j} (delegated from it)");
                }
            })
        }
        TokenCmd::Show { tenant, jti } => {
            show(out, &c.token(tenant, jti).await.map_err(failed)?, |t: &Token| print_tokens(std::slice::from_ref(t)))
        }
        TokenCmd::List { tenant, principal, after, limit } => {
            let page = Page { after: after.clone(), limit: Some(*limit) };
            let list = c.list_tokens(tenant, principal.as_deref(), &page).await.map_err(failed)?;
            show(out, &list, |l| print_tokens(&l.tokens))
        }
        TokenCmd::Inspect { bearer, audience } => {
            let request = InspectTokenRequest { token: bearer.clone(), audience: audience.clone() };
            let verdict = c.inspect_token(&request).await.map_err(failed)?;
            match out {
                Output::Json => print_json(&verdict),
                Output::Table => match &verdict.authority {
                    Some(a) => {
                        let rows = vec![
                            vec!["tenant".into(), a.tenant_id.clone()],
                            vec!["principal".into(), format!("{} ({})", a.principal_name, a.principal_id)],
                            vec!["issuer".into(), a.issuer.clone()],
                            vec!["token".into(), a.token_id.clone().unwrap_or_default()],
                            vec!["chain".into(), a.chain.join(" > ")],
                            vec!["scopes".into(), a.scopes.iter().cloned().collect::<Vec<_>>().join(" ")],
                            vec!["expires_at_ms".into(), a.expires_at_ms.to_string()],
                        ];
                        print_table(&["VALID", "yes"], rows);
                    }
                    None => say!(
                        "invalid: {}: {}",
                        verdict.reason.map(|r| r.to_string()).unwrap_or_default(),
                        verdict.message.clone().unwrap_or_default()
                    ),
                },
            }
            if verdict.valid {
                Ok(())
            } else {
                Err(Failure { exit: EXIT_REJECTED, message: "the token does not verify".into() })
            }
        }
    }
}

async fn issuer_cmd(c: &AdminClient, out: Output, cmd: &IssuerCmd) -> Result<(), Failure> {
    let print_issuers = |list: &[TenantIssuer]| {
        let rows =
            list.iter().map(|i| vec![i.spec.issuer.clone(), i.spec.audience.clone(), i.revision.to_string()]).collect();
        print_table(&["ISSUER", "AUDIENCE", "REVISION"], rows);
    };
    match cmd {
        IssuerCmd::Set { tenant, issuer, audience, jwks_file } => {
            let jwks = std::fs::read_to_string(jwks_file).map_err(|e| Failure {
                exit: EXIT_USAGE,
                message: format!("cannot read {}: {e}", jwks_file.display()),
            })?;
            let spec = TenantIssuerV1 { issuer: issuer.clone(), audience: audience.clone(), jwks };
            let set = c.set_issuer(tenant, &spec).await.map_err(failed)?;
            show(out, &set, |i| print_issuers(std::slice::from_ref(i)))
        }
        IssuerCmd::Discover { tenant, issuer, audience, allow_private_network } => {
            let source = writ_api::token::IssuerSourceV1 {
                issuer: issuer.clone(),
                audience: audience.clone(),
                allow_private_network: *allow_private_network,
            };
            show(out, &c.discover_issuer(tenant, &source).await.map_err(failed)?, |s| {
                say!("issuer {} registered; keys from {} (revision {})", s.spec.issuer, s.jwks_uri, s.revision)
            })
        }
        IssuerCmd::List { tenant } => {
            show(out, &c.list_issuers(tenant).await.map_err(failed)?, |l| print_issuers(&l.issuers))
        }
        IssuerCmd::Remove { tenant, issuer } => {
            c.remove_issuer(tenant, &RemoveIssuerRequest { issuer: issuer.clone() }).await.map_err(failed)?;
            say!("removed issuer {issuer}");
            Ok(())
        }
        IssuerCmd::RevokeToken { tenant, issuer, jti } => {
            let request = RevokeIssuerTokenRequest { issuer: issuer.clone(), jti: jti.clone() };
            show(out, &c.revoke_issuer_token(tenant, &request).await.map_err(failed)?, |r| {
                say!("revoked token id {} of {} (kept until {} ms)", r.jti, r.issuer, r.until_ms)
            })
        }
    }
}

async fn credential_cmd(c: &AdminClient, out: Output, cmd: &CredentialCmd) -> Result<(), Failure> {
    let view = match cmd {
        CredentialCmd::Show { tenant } => c.credentials(tenant.as_deref()).await,
        CredentialCmd::RetireKey { kid } => c.retire_signing_key(kid).await,
        CredentialCmd::RevokeCert { cert, serial, identity, not_after_ms } => {
            let request = match (cert, serial, identity, not_after_ms) {
                (Some(path), ..) => {
                    let pem = std::fs::read(path).map_err(|e| Failure {
                        exit: EXIT_USAGE,
                        message: format!("cannot read {}: {e}", path.display()),
                    })?;
                    let r = writ_client::tls::revocation_of(&pem)
                        .map_err(|e| Failure { exit: EXIT_USAGE, message: format!("{}: {e}", path.display()) })?;
                    RevokeCertificateRequest { serial: r.serial, identity: r.identity, not_after_ms: r.not_after_ms }
                }
                (None, Some(serial), Some(identity), Some(not_after_ms)) => RevokeCertificateRequest {
                    serial: serial.clone(),
                    identity: identity.clone(),
                    not_after_ms: *not_after_ms,
                },
                _ => {
                    return Err(Failure {
                        exit: EXIT_USAGE,
                        message: "name the certificate: --cert FILE, or --serial, --identity and --not-after-ms".into(),
                    })
                }
            };
            c.revoke_certificate(&request).await
        }
        CredentialCmd::RetireCa { tenant, fingerprint } => c.retire_executor_ca(tenant, fingerprint).await,
        CredentialCmd::Anonymous { tenant, edge, principal, .. } => {
            c.set_anonymous(tenant, edge, principal.as_deref()).await
        }
    };
    show(out, &view.map_err(failed)?, print_credentials)
}

fn print_credentials(v: &CredentialsView) {
    let mut rows: Vec<Vec<String>> =
        v.signing_keys.iter().map(|k| vec!["signing key".into(), k.clone(), "active".into()]).collect();
    rows.extend(
        v.retired_signing_keys.iter().map(|(k, at)| vec!["signing key".into(), k.clone(), format!("retired at {at}")]),
    );
    rows.extend(v.revoked_certificates.iter().map(|r| {
        vec![format!("certificate {}", r.identity), r.serial.clone(), format!("revoked until {}", r.not_after_ms)]
    }));
    if let Some(t) = &v.tenant {
        rows.extend(t.executor_cas.iter().map(|f| vec!["executor CA".into(), f.clone(), "active".into()]));
        rows.extend(
            t.retired_executor_cas
                .iter()
                .map(|(f, at)| vec!["executor CA".into(), f.clone(), format!("retired at {at}")]),
        );
        rows.extend(
            t.anonymous.iter().map(|(edge, p)| vec![format!("anonymous edge {edge}"), p.clone(), "allowed".into()]),
        );
        for (issuer, jtis) in &t.revoked_issuer_tokens {
            rows.extend(jtis.iter().map(|(jti, until)| {
                vec![format!("token id of {issuer}"), jti.clone(), format!("revoked until {until}")]
            }));
        }
    }
    print_table(&["KIND", "ID", "STATE"], rows);
}

fn print_issued(t: &IssuedToken) {
    let rows = vec![vec![
        t.jti.clone(),
        t.principal_id.clone(),
        t.parent_jti.clone().unwrap_or_default(),
        t.expires_at_ms.to_string(),
        t.scopes.join(" "),
    ]];
    print_table(&["JTI", "PRINCIPAL", "PARENT", "EXPIRES_MS", "SCOPES"], rows);
    say!("\ntoken (shown once):\n{}", t.token);
}

fn print_json<T: Serialize>(v: &T) {
    match serde_json::to_string_pretty(v) {
        Ok(s) => say!("{s}"),
        Err(e) => eprintln!("error: {e}"),
    }
}

/// Prints `v` as JSON or, as a table, with `table`.
fn show<T: Serialize>(out: Output, v: &T, table: impl Fn(&T)) -> Result<(), Failure> {
    match out {
        Output::Json => print_json(v),
        Output::Table => table(v),
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
        say!("{}", padded.join("  ").trim_end());
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

fn print_sites(sites: &[Site]) {
    let rows =
        sites.iter().map(|s| vec![s.name.clone(), s.id.clone(), s.display_name.clone().unwrap_or_default()]).collect();
    print_table(&["NAME", "ID", "DISPLAY NAME"], rows);
}

fn print_devices(devices: &[Device]) {
    let rows =
        devices.iter().map(|d| vec![d.name.clone(), d.id.clone(), d.device_class.clone(), d.site_id.clone()]).collect();
    print_table(&["NAME", "ID", "CLASS", "SITE"], rows);
}

fn print_principals(principals: &[Principal]) {
    let rows = principals
        .iter()
        .map(|p| {
            vec![
                p.name.clone(),
                p.id.clone(),
                format!("{:?}", p.kind).to_lowercase(),
                format!("{:?}", p.state).to_lowercase(),
                p.scopes.iter().cloned().collect::<Vec<_>>().join(" "),
            ]
        })
        .collect();
    print_table(&["NAME", "ID", "KIND", "STATE", "SCOPES"], rows);
}

fn print_settings(t: &Tenant) {
    print_tenants(std::slice::from_ref(t));
    let s = &t.settings;
    let opt = |v: Option<u64>| v.map_or("unlimited".to_string(), |v| v.to_string());
    let rows = vec![
        vec!["audit_max_events".into(), s.audit_max_events.to_string()],
        vec!["audit_max_age_s".into(), opt(s.audit_max_age_s)],
        vec!["audit_mode".into(), format!("{:?}", s.audit_mode).to_lowercase()],
        vec!["idempotency_retention_s".into(), s.idempotency_retention_s.to_string()],
        vec!["token_ttl_s".into(), format!("{}..={}", s.token_ttl_min_s, s.token_ttl_max_s)],
        vec!["allowed_origins".into(), s.allowed_origins.join(" ")],
        vec!["requests_per_minute".into(), opt(s.quotas.requests_per_minute)],
        vec!["operations_per_minute".into(), opt(s.quotas.operations_per_minute)],
        vec!["cost_units_per_day".into(), opt(s.quotas.cost_units_per_day)],
        vec!["concurrent_operations".into(), opt(s.quotas.concurrent_operations)],
    ];
    say!();
    print_table(&["SETTING", "VALUE"], rows);
}

/// `tenant list`: one page of tenants, and the cursor of the next.
async fn list_tenants(c: &AdminClient, out: Output, page: Page) -> Result<(), Failure> {
    show(out, &c.list_tenants(&page).await.map_err(failed)?, |l: &TenantList| {
        print_tenants(&l.tenants);
        if let Some(next) = &l.next_cursor {
            say!("(more: --after {next})");
        }
    })
}

fn print_health(h: &writ_api::health::TenantHealth) {
    let rows = h.tools.iter().map(|t| vec![t.tool.clone(), t.state.as_str().to_string(), t.why.clone()]).collect();
    print_table(&["TOOL", "STATE", "WHY"], rows);
}

fn print_storage(s: &writ_api::retention::TenantStorageV1) {
    let next = s.next_retention_ms.map_or("nothing due".to_string(), |at| format!("ledger time {at} ms"));
    let rows = vec![
        vec!["operations".into(), format!("{} ({} live)", s.operations, s.operations_live)],
        vec!["bindings".into(), s.bindings.to_string()],
        vec!["idempotency_keys".into(), s.idempotency_keys.to_string()],
        vec!["transitions".into(), s.transitions.to_string()],
        vec!["tokens".into(), s.tokens.to_string()],
        vec!["enrollments".into(), s.enrollments.to_string()],
        vec!["work_items".into(), s.work_items.to_string()],
        vec!["proposals".into(), s.proposals.to_string()],
        vec!["audit_records".into(), s.audit_records.to_string()],
        vec!["evidence".into(), format!("{} blobs, {} bytes", s.evidence_blobs, s.evidence_bytes)],
        vec!["state_bytes".into(), s.state_bytes.to_string()],
        vec!["retention_horizon_s".into(), s.retention_horizon_s.to_string()],
        vec!["next_retention".into(), next],
    ];
    print_table(&["RECORDS", "HELD"], rows);
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

#[cfg(test)]
mod tests {
    use super::parse_duration_s;

    #[test]
    fn durations() {
        assert_eq!(parse_duration_s("90"), Ok(90));
        assert_eq!(parse_duration_s("15m"), Ok(900));
        assert_eq!(parse_duration_s("48h"), Ok(172_800));
        assert_eq!(parse_duration_s("30d"), Ok(2_592_000));
        assert!(parse_duration_s("3w").is_err());
        assert!(parse_duration_s("h").is_err());
    }

    #[test]
    fn expiry_times_print_as_utc() {
        assert_eq!(super::utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(super::utc(1_700_000_000_999), "2023-11-14T22:13:20Z");
    }
}
