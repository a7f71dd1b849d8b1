//! Writ as the system under load: setup through the admin API (tenants, principals, catalogs,
//! sites, devices, bearer tokens, enrolled executors with a simulated zero-latency device),
//! then agent traffic through the MCP edges only.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use futures::StreamExt;
use rand::Rng;
use serde_json::{json, Value};

use writ_api::audit::{AuditFilter, AuditRecord};
use writ_api::dto::{
    CreateDeviceRequest, CreateEnrollmentRequest, CreatePrincipalRequest, CreateSiteRequest, CreateTenantRequest,
    IssueTokenRequest,
};
use writ_api::operation::Operation;
use writ_api::principal::{PrincipalKind, RolePreset};
use writ_api::quota::PrincipalQuotasV2;
use writ_api::settings::{QuotasV1, TenantSettingsPatch};
use writ_api::upstream::UpstreamBody;
use writ_client::AdminError;

use crate::engine::{Outcome, Workload};
use crate::mcp;

/// The admin API of a cluster through [`writ_client::AdminClient`]: every node serves it, a
/// request goes to the first node that answers, and a call the cluster could not answer (a
/// killed node, an election) is asked again for up to [`ADMIN_RETRY`].
pub struct Admin {
    client: writ_client::AdminClient,
}

/// How long a call the cluster cannot answer is asked again.
pub const ADMIN_RETRY: Duration = Duration::from_secs(30);

impl Admin {
    /// An admin client of `urls`, trusting `tls`'s CA (nodes serve TLS from the cluster CA).
    pub fn new(urls: Vec<String>, token: String, tls: Option<&writ_client::ClientTls>) -> Admin {
        let mut b = reqwest::Client::builder().no_proxy().timeout(Duration::from_secs(60)).pool_max_idle_per_host(64);
        if let Some(t) = tls {
            b = t.apply(b);
        }
        let http = b.build().expect("HTTP client builds");
        Admin { client: writ_client::AdminClient::with_http(urls.join(","), token, http) }
    }

    /// `call`'s answer, asked again half a second later while the cluster cannot answer.
    async fn attempt<T, F: std::future::Future<Output = Result<T, AdminError>>>(
        &self,
        call: impl Fn() -> F,
    ) -> Result<T, AdminError> {
        let started = Instant::now();
        loop {
            match call().await {
                Err(e) if e.is_unavailable() && started.elapsed() < ADMIN_RETRY => {
                    tokio::time::sleep(Duration::from_millis(500)).await
                }
                answer => return answer,
            }
        }
    }

    /// `call`'s answer; an error names `what` failed.
    pub async fn ask<T, F: std::future::Future<Output = Result<T, AdminError>>>(
        &self,
        what: &str,
        call: impl Fn() -> F,
    ) -> Result<T, String> {
        self.attempt(call).await.map_err(|e| format!("{what}: {e}"))
    }

    /// `Some(created)`, or `None` when it already existed (`409`).
    pub async fn create<T, F: std::future::Future<Output = Result<T, AdminError>>>(
        &self,
        what: &str,
        call: impl Fn() -> F,
    ) -> Result<Option<T>, String> {
        self.none_on(409, what, call).await
    }

    /// `Some(found)`, or `None` when there is none (`404`).
    pub async fn found<T, F: std::future::Future<Output = Result<T, AdminError>>>(
        &self,
        what: &str,
        call: impl Fn() -> F,
    ) -> Result<Option<T>, String> {
        self.none_on(404, what, call).await
    }

    /// `call`'s answer, `None` for an answer of `status`; any other error names `what`.
    async fn none_on<T, F: std::future::Future<Output = Result<T, AdminError>>>(
        &self,
        status: u16,
        what: &str,
        call: impl Fn() -> F,
    ) -> Result<Option<T>, String> {
        match self.attempt(call).await {
            Ok(v) => Ok(Some(v)),
            Err(e) if e.status() == Some(status) => Ok(None),
            Err(e) => Err(format!("{what}: {e}")),
        }
    }

    /// The tenant's operation, or `None` when the ledger has none of that id.
    pub async fn operation(&self, tenant: &str, id: &str) -> Result<Option<Operation>, String> {
        self.found(&format!("operation {id}"), || self.client.operation(tenant, id)).await
    }

    /// The tenant's audit records matching `filter`, read from its NDJSON export.
    pub async fn audit(&self, tenant: &str, filter: &AuditFilter) -> Result<Vec<AuditRecord>, String> {
        let what = format!("audit export of {tenant}");
        let mut response = self.ask(&what, || self.client.audit_export(tenant, filter, None)).await?;
        let mut records = Vec::new();
        let mut buf = Vec::new();
        while let Some(chunk) =
            writ_client::admin::next_chunk(&mut response).await.map_err(|e| format!("{what}: {e}"))?
        {
            buf.extend_from_slice(chunk.as_ref());
            while let Some(i) = buf.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = buf.drain(..=i).collect();
                let v: Value = serde_json::from_slice(&line).map_err(|e| format!("{what}: {e}"))?;
                if let Some(err) = v.get("error") {
                    return Err(format!("{what}: export failed: {err}"));
                }
                records.push(serde_json::from_value(v).map_err(|e| format!("{what}: {e}"))?);
            }
        }
        Ok(records)
    }
}

/// How the load is set up.
#[derive(Debug, Clone)]
pub struct Setup {
    /// Tenants the agents act in (`{prefix}-0`, …), each with its own executor.
    pub tenants: usize,
    /// Extra tenants provisioned (tenant, principal, catalog) but not loaded (P4).
    pub idle_tenants: usize,
    /// An upstream MCP server whose `greet` answers the loaded tenants' `greet` (P5).
    pub upstream: Option<String>,
    pub prefix: String,
    /// Simulated devices per tenant (for device-driving executes).
    pub devices: usize,
    /// The agent principal's operation quotas (checked by `--verify`).
    pub operations_per_minute: Option<u64>,
    pub concurrent_operations: Option<u64>,
    /// Audit events each loaded tenant retains.
    pub audit_max_events: u64,
    /// Lifetime of the agents' tokens (the run and its verification fit in it).
    pub token_ttl_s: u64,
    /// The audience of the agents' tokens: the edges' canonical URL, or the cluster's
    /// `urn:writ:mcp` that every edge accepts.
    pub audience: String,
    /// The edge executors enroll through (its MCP URL).
    pub enroll_edge: String,
    /// Executor endpoints written into each executor's config (empty: what enrollment says).
    pub executor_urls: Vec<String>,
    /// The `writ` binary (for `writ executor enroll|run`).
    pub writ_bin: PathBuf,
    /// Executor state (keys, configs, logs), reused by later runs.
    pub work_dir: PathBuf,
    /// The cluster CA (edges serving HTTPS), passed to `writ executor enroll --ca`.
    pub ca: Option<PathBuf>,
    /// Whether each simulated effect also uploads a camera frame as evidence (a fourth
    /// consensus command per operation).
    pub camera: bool,
}

/// A loaded tenant.
#[derive(Debug, Clone)]
pub struct Tenant {
    pub name: String,
    pub token: String,
    pub devices: Vec<String>,
    pub executor_dir: PathBuf,
}

pub const AGENT: &str = "agent";
const SITE: &str = "site";
const DEVICE_CLASS: &str = "loadtest.sim.v1";

/// The upstream of P5, in every loaded tenant when `--upstream` is given.
const UPSTREAM: &str = "base";

fn catalog() -> Value {
    catalog_with(None)
}

/// The load catalog; `greet` is answered by `upstream`'s `greet` tool when one is named.
fn catalog_with(upstream: Option<&str>) -> Value {
    let greet = match upstream {
        Some(u) => json!({"upstream": format!("{u}/greet")}),
        None => json!({"builtin": "conformance.greet"}),
    };
    json!({"actions": [
        {"id": "log_entry", "title": "Append a log entry", "description": "Device-less durable operation",
         "input_schema": {"type": "object"}, "risk": "low", "execution": "operation", "cost_units": 1},
        {"id": "press", "title": "Press", "description": "Drives one simulated device",
         "input_schema": {"type": "object"}, "risk": "low", "execution": "operation", "cost_units": 1,
         "device_class": DEVICE_CLASS},
        {"id": "greet", "title": "greet", "description": "Read-only: returns Hello, {name}!",
         "input_schema": {"type": "object", "properties": {"name": {"type": "string"}}},
         "risk": "low", "execution": greet},
    ]})
}

/// Adds (or points) the tenant's upstream at `url`, pins its tools and publishes the catalog
/// whose `greet` it answers.
async fn provision_upstream(admin: &Admin, tenant: &str, url: &str) -> Result<(), String> {
    let body = UpstreamBody {
        name: Some(UPSTREAM.into()),
        url: Some(url.into()),
        protocol: Some("2026-07-28".into()),
        ..Default::default()
    };
    if admin.create("add upstream", || admin.client.add_upstream(tenant, &body)).await?.is_none() {
        let patch = UpstreamBody { name: None, ..body.clone() };
        admin.ask("set upstream", || admin.client.set_upstream(tenant, UPSTREAM, &patch)).await?;
    }
    let synced = admin.ask("sync upstream", || admin.client.sync_upstream(tenant, UPSTREAM)).await?;
    if synced.pending {
        let digest = synced.observed_digest.as_str();
        admin.ask("approve upstream", || admin.client.approve_upstream(tenant, UPSTREAM, digest)).await?;
    }
    let catalog = catalog_with(Some(UPSTREAM));
    admin.create("publish catalog", || admin.client.publish_catalog(tenant, &catalog)).await?;
    Ok(())
}

/// Creates the tenant with its catalog and agent principal (and, for a loaded tenant, its
/// site); `false` when it already existed. An existing tenant gets what it lacks of these: a
/// create whose answer was lost (a leader change) is retried and finds the tenant made but
/// nothing after it.
async fn create_tenant(
    admin: &Admin,
    name: &str,
    settings: Option<TenantSettingsPatch>,
    loaded: bool,
) -> Result<bool, String> {
    let request = CreateTenantRequest { name: name.into(), display_name: None, settings };
    let created = admin.create("create tenant", || admin.client.create_tenant(&request)).await?.is_some();
    let catalog_of = || admin.client.catalog(name, None);
    if created || admin.found("catalog", catalog_of).await?.is_none() {
        let catalog = catalog();
        admin.create("publish catalog", || admin.client.publish_catalog(name, &catalog)).await?;
    }
    let agent = CreatePrincipalRequest {
        name: AGENT.into(),
        kind: PrincipalKind::Agent,
        preset: Some(RolePreset::Full),
        scopes: Vec::new(),
        metadata: BTreeMap::new(),
        quotas: None,
    };
    admin.create("create principal", || admin.client.create_principal(name, &agent)).await?;
    if loaded {
        let site = CreateSiteRequest { name: SITE.into(), display_name: None };
        admin.create("create site", || admin.client.create_site(name, &site)).await?;
    }
    Ok(created)
}

/// A loaded tenant's settings, quotas, devices and agent token.
async fn configure(admin: &Admin, s: &Setup, name: &str, devices: &[String]) -> Result<String, String> {
    let settings = TenantSettingsPatch { audit_max_events: Some(s.audit_max_events), ..Default::default() };
    admin.ask("set tenant settings", || admin.client.set_tenant_settings(name, &settings)).await?;
    let quotas = PrincipalQuotasV2 {
        operations_per_minute: s.operations_per_minute,
        concurrent_operations: s.concurrent_operations,
        ..Default::default()
    };
    admin.ask("set principal quotas", || admin.client.set_principal_quotas(name, AGENT, &quotas)).await?;
    for d in devices {
        let device = CreateDeviceRequest { name: d.clone(), site: SITE.into(), device_class: DEVICE_CLASS.into() };
        admin.create("create device", || admin.client.create_device(name, &device)).await?;
    }
    let request = IssueTokenRequest {
        principal: AGENT.into(),
        scopes: Vec::new(),
        ttl_s: Some(s.token_ttl_s),
        audience: Some(s.audience.clone()),
    };
    Ok(admin.ask("issue token", || admin.client.issue_token(name, &request)).await?.token)
}

/// Provisions the loaded tenants (idempotently: existing ones are reused) and the idle ones.
pub async fn provision(admin: &Admin, s: &Setup) -> Result<Vec<Tenant>, String> {
    let mut tenants = Vec::new();
    for i in 0..s.tenants {
        let name = format!("{}-{i}", s.prefix);
        // The run sets its own limits (the agent's quotas below), not a fresh tenant's defaults.
        let settings = TenantSettingsPatch { quotas: Some(QuotasV1::default()), ..Default::default() };
        create_tenant(admin, &name, Some(settings), true).await?;
        let devices: Vec<String> = (0..s.devices).map(|d| format!("d{d}")).collect();
        let token = configure(admin, s, &name, &devices).await?;
        if let Some(url) = &s.upstream {
            provision_upstream(admin, &name, url).await?;
        }
        let executor_dir = s.work_dir.join(&name);
        enroll(admin, s, &name, &devices, &executor_dir).await?;
        tenants.push(Tenant { name, token, devices, executor_dir });
    }
    provision_idle(admin, s).await?;
    Ok(tenants)
}

/// Idle tenants, 32 at a time; returns once all exist.
async fn provision_idle(admin: &Admin, s: &Setup) -> Result<(), String> {
    if s.idle_tenants == 0 {
        return Ok(());
    }
    let started = Instant::now();
    let results: Vec<Result<bool, String>> = futures::stream::iter(0..s.idle_tenants)
        .map(|i| async move { create_tenant(admin, &format!("{}-idle-{i}", s.prefix), None, false).await })
        .buffer_unordered(32)
        .collect()
        .await;
    results.into_iter().collect::<Result<Vec<bool>, String>>()?;
    eprintln!("{} idle tenants provisioned in {:.1} s", s.idle_tenants, started.elapsed().as_secs_f64());
    Ok(())
}

/// Enrolls an executor for the tenant's site and devices once (its directory is reused), and
/// sets this run's edges and camera in its config.
async fn enroll(
    admin: &Admin,
    s: &Setup,
    tenant: &str,
    devices: &[String],
    dir: &std::path::Path,
) -> Result<(), String> {
    let config = dir.join("executor.toml");
    if !config.exists() {
        let request = CreateEnrollmentRequest { site: SITE.into(), devices: devices.to_vec(), ttl_s: None };
        let token = admin.ask("create enrollment", || admin.client.create_enrollment(tenant, &request)).await?.token;
        let out = tokio::process::Command::new(&s.writ_bin)
            .args(["executor", "enroll", "--edge", &s.enroll_edge, "--token", &token, "--out"])
            .arg(dir)
            .args(s.ca.iter().flat_map(|ca| [std::ffi::OsStr::new("--ca"), ca.as_os_str()]))
            .output()
            .await
            .map_err(|e| format!("{}: {e}", s.writ_bin.display()))?;
        if !out.status.success() {
            return Err(format!("writ executor enroll: {}", String::from_utf8_lossy(&out.stderr)));
        }
    }
    set_run_config(&config, s)
}

/// Sets this run's edges (when given) and camera in an executor's config.
fn set_run_config(config: &std::path::Path, s: &Setup) -> Result<(), String> {
    let text = std::fs::read_to_string(config).map_err(|e| e.to_string())?;
    let edges: Vec<String> = s.executor_urls.iter().map(|u| format!("{u:?}")).collect();
    let text: Vec<String> = text
        .lines()
        .map(|l| match l {
            l if l.starts_with("edges = ") && !edges.is_empty() => format!("edges = [{}]", edges.join(", ")),
            l if l.starts_with("camera = ") => format!("camera = {}", s.camera),
            l => l.to_string(),
        })
        .collect();
    std::fs::write(config, text.join("\n") + "\n").map_err(|e| e.to_string())
}

/// The tenant's executor process (`writ executor run`), stopped when dropped.
pub struct Executor(tokio::process::Child);

pub fn start_executor(writ_bin: &std::path::Path, t: &Tenant) -> Result<Executor, String> {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(t.executor_dir.join("executor.log"))
        .map_err(|e| e.to_string())?;
    let child = tokio::process::Command::new(writ_bin)
        .args(["executor", "run", "--config"])
        .arg(t.executor_dir.join("executor.toml"))
        .stdout(log.try_clone().map_err(|e| e.to_string())?)
        .stderr(log)
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("{}: {e}", writ_bin.display()))?;
    Ok(Executor(child))
}

impl Executor {
    pub fn pid(&self) -> Option<u32> {
        self.0.id()
    }
}

impl Drop for Executor {
    fn drop(&mut self) {
        let _ = self.0.start_kill();
    }
}

/// The request mix (relative weights).
#[derive(Debug, Clone, PartialEq)]
pub struct Mix(pub Vec<(Kind, f64)>);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Discover,
    Read,
    Propose,
    Execute,
    Readback,
}

impl Mix {
    /// `execute=8,discover=1,…`.
    pub fn parse(s: &str) -> Result<Mix, String> {
        let mut kinds = Vec::new();
        for part in s.split(',').filter(|p| !p.is_empty()) {
            let (k, w) = part.split_once('=').unwrap_or((part, "1"));
            let kind = match k.trim() {
                "discover" => Kind::Discover,
                "read" => Kind::Read,
                "propose" => Kind::Propose,
                "execute" => Kind::Execute,
                "readback" => Kind::Readback,
                other => {
                    return Err(format!("unknown request kind '{other}' (discover|read|propose|execute|readback)"))
                }
            };
            let w: f64 = w.trim().parse().map_err(|_| format!("weight of '{k}' is not a number"))?;
            if !(w >= 0.0 && w.is_finite()) {
                return Err(format!("weight of '{k}' must be ≥ 0"));
            }
            kinds.push((kind, w));
        }
        if kinds.iter().map(|(_, w)| w).sum::<f64>() <= 0.0 {
            return Err("the mix has no request kind with a positive weight".into());
        }
        Ok(Mix(kinds))
    }

    pub fn pick(&self, x: f64) -> Kind {
        let total: f64 = self.0.iter().map(|(_, w)| w).sum();
        let mut at = x * total;
        for (k, w) in &self.0 {
            if at < *w {
                return *k;
            }
            at -= w;
        }
        self.0.last().expect("non-empty mix").0
    }
}

/// An operation an edge acknowledged (answered with its id).
#[derive(Debug, Clone)]
pub struct Acked {
    pub tenant: usize,
    pub key: String,
    pub input: Value,
    pub device: Option<String>,
    pub operation_id: String,
}

/// What the agents saw, for `--verify`.
#[derive(Debug, Default)]
pub struct Seen {
    pub acked: Vec<Acked>,
    /// Indexes into `acked` by tenant.
    pub by_tenant: BTreeMap<usize, Vec<usize>>,
    /// Keys whose execute ended without an answer (timeout, connection lost): the operation may
    /// or may not exist; at most one may.
    pub uncertain: Vec<(usize, String)>,
    /// Answers that broke a guarantee at the moment they were given.
    pub violations: Vec<String>,
    /// Quota refusals seen by agents.
    pub quota_refusals: u64,
}

/// Agent traffic spread over the tenants and edges.
pub struct WritLoad {
    pub http: reqwest::Client,
    pub edges: Vec<String>,
    pub tenants: Vec<Tenant>,
    pub mix: Mix,
    /// Share of executes that retry an acknowledged key with the same payload.
    pub duplicate_share: f64,
    /// Share of executes that reuse an acknowledged key with a changed payload.
    pub changed_share: f64,
    /// Share of fresh executes that drive a device (`press`) instead of `log_entry`.
    pub device_share: f64,
    /// Filler making each operation's input about `payload_bytes` long.
    pub pad: String,
    /// Seconds a fresh execute waits for its effect report (0: answered once recorded).
    pub wait_s: u64,
    pub run_id: String,
    pub seen: Mutex<Seen>,
    /// Most tools one `tools/list` answered (the size of the list the edge renders; `make bench`
    /// starts an rmcp baseline with as many).
    pub tools_listed: std::sync::atomic::AtomicUsize,
    /// Sessions of the 2025 wire by token (`--wire 2025-11-25`; empty: the 2026-07-28 wire). A
    /// session continues on any edge.
    pub sessions: std::collections::HashMap<String, String>,
}

impl WritLoad {
    fn some_acked(&self, tenant: usize, x: f64) -> Option<Acked> {
        let seen = self.seen.lock().expect("seen lock");
        let mine = seen.by_tenant.get(&tenant).filter(|v| !v.is_empty())?;
        Some(seen.acked[mine[((x * mine.len() as f64) as usize).min(mine.len() - 1)]].clone())
    }

    /// One MCP request to the edge request `n` is spread to; a request that reached no edge
    /// (connection refused: the edge is restarting) goes to the next one, as a load balancer
    /// would send it. Nothing reached an edge, so nothing is sent twice.
    async fn call(&self, n: u64, token: &str, method: &str, params: Value) -> Result<Value, String> {
        self.call_as(n, token, method, params).await
    }

    /// [`Self::call`] with the result read as `T` ([`mcp::call_as`]).
    async fn call_as<T: mcp::Answer>(&self, n: u64, token: &str, method: &str, params: Value) -> Result<T, String> {
        let first = (n as usize / self.tenants.len().max(1)) % self.edges.len();
        let mut result = Err(String::new());
        for i in 0..self.edges.len() {
            let edge = &self.edges[(first + i) % self.edges.len()];
            let session = self.sessions.get(token).map(String::as_str);
            result = mcp::call_in(&self.http, edge, Some(token), session, method, params.clone()).await;
            if !matches!(&result, Err(reason) if reason == "CONNECT") {
                break;
            }
        }
        result
    }

    async fn tool(&self, n: u64, tenant: &Tenant, name: &str, args: Value) -> Result<Value, String> {
        self.call(n, &tenant.token, "tools/call", json!({"name": name, "arguments": args})).await
    }

    async fn execute(&self, n: u64, ti: usize) -> Outcome {
        let t = &self.tenants[ti];
        let (dice, pick) = {
            let mut r = rand::rng();
            (r.random::<f64>(), r.random::<f64>())
        };
        if dice < self.duplicate_share + self.changed_share {
            if let Some(prev) = self.some_acked(ti, pick) {
                let changed = dice >= self.duplicate_share;
                let mut input = prev.input.clone();
                if changed {
                    input["changed"] = json!(true);
                }
                let mut args = json!({"action": if prev.device.is_some() { "press" } else { "log_entry" },
                                      "input": input, "idempotency_key": prev.key});
                if let Some(d) = &prev.device {
                    args["device"] = json!(d);
                }
                let answer = self.tool(n, t, "operation.execute", args).await;
                return match (changed, answer) {
                    (false, Ok(r)) if r["structuredContent"]["operation_id"] == json!(prev.operation_id) => {
                        Outcome::ok("execute_retry")
                    }
                    (false, Ok(r)) => {
                        self.violation(format!(
                            "retry of key {} answered operation {} instead of {}",
                            prev.key, r["structuredContent"]["operation_id"], prev.operation_id
                        ));
                        Outcome::err("execute_retry", "RETRY_ANSWERED_ANOTHER_OPERATION")
                    }
                    (true, Err(reason)) if reason == "IDEMPOTENCY_KEY_REUSED" => Outcome::ok("execute_changed"),
                    (true, Ok(r)) => {
                        self.violation(format!(
                            "key {} reused with a changed payload was accepted: {}",
                            prev.key, r["structuredContent"]
                        ));
                        Outcome::err("execute_changed", "CHANGED_PAYLOAD_ACCEPTED")
                    }
                    (changed, Err(reason)) => {
                        Outcome::err(if changed { "execute_changed" } else { "execute_retry" }, reason)
                    }
                };
            }
        }
        let key = format!("{}-{n}", self.run_id);
        let input = json!({"n": n, "pad": self.pad});
        let device = (pick < self.device_share && !t.devices.is_empty())
            .then(|| t.devices[(n as usize) % t.devices.len()].clone());
        let mut args = json!({"action": if device.is_some() { "press" } else { "log_entry" },
                              "input": input, "idempotency_key": key});
        if let Some(d) = &device {
            args["device"] = json!(d);
        }
        if self.wait_s > 0 {
            args["wait_s"] = json!(self.wait_s);
        }
        match self.tool(n, t, "operation.execute", args).await {
            Ok(r) => match r["structuredContent"]["operation_id"].as_str() {
                Some(id) if self.wait_s > 0 && r["structuredContent"]["state"] != "effect_reported" => {
                    // Recorded, but not reported in time: the drain and verification follow it.
                    self.remember(Acked { tenant: ti, key, input, device, operation_id: id.to_string() });
                    Outcome::err("execute", "REPORT_NOT_SEEN")
                }
                Some(id) => {
                    self.remember(Acked { tenant: ti, key, input, device, operation_id: id.to_string() });
                    Outcome::ok("execute")
                }
                None => Outcome::err("execute", "NO_OPERATION_ID"),
            },
            Err(reason) => {
                let mut seen = self.seen.lock().expect("seen lock");
                match reason.as_str() {
                    "TIMEOUT" | "TRANSPORT" | "CONNECT" => seen.uncertain.push((ti, key)),
                    "QUOTA_EXCEEDED" => seen.quota_refusals += 1,
                    _ => {}
                }
                Outcome::err("execute", reason)
            }
        }
    }

    /// An operation the ledger acknowledged (the verification checks each).
    fn remember(&self, a: Acked) {
        let mut seen = self.seen.lock().expect("seen lock");
        let i = seen.acked.len();
        seen.by_tenant.entry(a.tenant).or_default().push(i);
        seen.acked.push(a);
    }

    fn violation(&self, v: String) {
        eprintln!("VIOLATION: {v}");
        self.seen.lock().expect("seen lock").violations.push(v);
    }
}

impl Workload for WritLoad {
    async fn call(&self, n: u64) -> Outcome {
        let ti = n as usize % self.tenants.len();
        let t = &self.tenants[ti];
        let x = rand::rng().random::<f64>();
        match self.mix.pick(x) {
            Kind::Discover => match self.call_as::<mcp::Listed>(n, &t.token, "tools/list", json!({})).await {
                Ok(r) if !r.tools.is_empty() => {
                    self.tools_listed.fetch_max(r.tools.len(), std::sync::atomic::Ordering::Relaxed);
                    Outcome::ok("discover")
                }
                Ok(_) => Outcome::err("discover", "NO_TOOLS"),
                Err(reason) => Outcome::err("discover", reason),
            },
            Kind::Read => match self
                .call_as::<mcp::Called>(
                    n,
                    &t.token,
                    "tools/call",
                    json!({"name": "greet", "arguments": {"name": "load"}}),
                )
                .await
            {
                Ok(_) => Outcome::ok("read"),
                Err(reason) => Outcome::err("read", reason),
            },
            Kind::Propose => {
                let args = json!({"action": "log_entry", "input": {"n": n, "pad": self.pad}});
                match self.tool(n, t, "operation.propose", args).await {
                    Ok(_) => Outcome::ok("propose"),
                    Err(reason) => Outcome::err("propose", reason),
                }
            }
            Kind::Execute => self.execute(n, ti).await,
            Kind::Readback => match self.some_acked(ti, x) {
                Some(a) => match self.tool(n, t, "operation.readback", json!({"operation_id": a.operation_id})).await {
                    Ok(_) => Outcome::ok("readback"),
                    Err(reason) => Outcome::err("readback", reason),
                },
                // Nothing to read back yet: a discovery instead keeps the request count honest.
                None => match self.call(0, &t.token, "tools/list", json!({})).await {
                    Ok(_) => Outcome::ok("discover"),
                    Err(reason) => Outcome::err("discover", reason),
                },
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mixes_parse_and_pick_by_weight() {
        let m = Mix::parse("execute=3,discover=1").unwrap();
        assert_eq!(m.pick(0.0), Kind::Execute);
        assert_eq!(m.pick(0.74), Kind::Execute);
        assert_eq!(m.pick(0.76), Kind::Discover);
        assert_eq!(Mix::parse("read").unwrap().pick(0.5), Kind::Read);
        assert!(Mix::parse("execute=0").is_err());
        assert!(Mix::parse("delete=1").unwrap_err().contains("unknown request kind"));
    }
}
