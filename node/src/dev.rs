//! `writ dev`: the embedded default — one process with a single-node ledger and the admin
//! API on loopback, data under `.writ/dev/`, and an `env` file for `writ admin`.

use std::path::{Path, PathBuf};

use clap::Args;

use writ_api::dto::{
    CreateDeviceRequest, CreateEnrollmentRequest, CreatePrincipalRequest, CreateSiteRequest, CreateTenantRequest,
    IssueTokenRequest,
};
use writ_api::principal::{PrincipalKind, RolePreset};
use writ_client::{AdminClient, AdminError};

use writ_api::role::{Identity, Role};

use crate::config::NodeConfig;
use crate::ledger::RaftSettings;

#[derive(Debug, Args)]
pub struct DevArgs {
    /// Where the dev ledger keeps its data and the env file.
    #[arg(long, default_value = ".writ/dev")]
    pub data_dir: PathBuf,
    /// Loopback address of the node (ledger client API + admin API).
    #[arg(long, default_value = "127.0.0.1:7700")]
    pub listen: std::net::SocketAddr,
    /// Loopback address of the MCP edge (`/mcp`).
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub edge_listen: std::net::SocketAddr,
    /// Loopback address of the edge's executor endpoint (mutual TLS); the simulated demo
    /// executor connects there.
    #[arg(long, default_value = "127.0.0.1:8443")]
    pub executor_listen: std::net::SocketAddr,
    /// Also serve the MCP conformance fixtures (the reference everything-server's tools,
    /// resources and prompts) to requests without a token, as principal `anonymous` of tenant
    /// `conformance` — loopback only.
    #[arg(long)]
    pub conformance_fixtures: bool,
    /// Seconds over which the executor endpoint audits refused handshakes as one aggregate per
    /// claimed tenant.
    #[arg(long, default_value_t = writ_mcp_edge::executors::TLS_REFUSAL_WINDOW.as_secs())]
    pub executor_refusal_window_s: u64,
    /// Lifetime of the executor certificates it issues (executors renew at about ⅔ of it).
    #[arg(long, default_value_t = writ_tenant_admin::enroll::EXECUTOR_CERT_TTL_S,
          value_parser = clap::value_parser!(u64).range(
              writ_tenant_admin::enroll::EXECUTOR_CERT_TTL_MIN_S..=writ_tenant_admin::enroll::EXECUTOR_CERT_TTL_MAX_S))]
    pub executor_cert_ttl_s: u64,
    /// Stamp ledger time this many seconds ahead of the wall clock, to see time-driven rules
    /// (a proposal's 5 minutes, a deleted tenant's 30 days before purge) without waiting. Ledger
    /// time never goes back: restarting without it leaves ledger time where it got to. Tokens
    /// issued while ahead are not yet valid at the edge until the wall clock catches up.
    #[arg(long, default_value_t = 0)]
    pub ledger_clock_ahead_s: u64,
    /// Seconds between the edge's looks at every upstream MCP server's tools (drift found
    /// without a sync; recorded as pending, served only once approved); 0: never.
    #[arg(long, default_value_t = writ_mcp_edge::drift::WATCH_S_DEFAULT)]
    pub upstream_watch_s: u64,
    /// Export spans to this OTLP/HTTP collector (base URL, e.g. `http://127.0.0.1:4318`); the
    /// standard `OTEL_EXPORTER_OTLP_*` variables work too.
    #[arg(long)]
    pub otlp_endpoint: Option<String>,
}

/// The tenant and principal of `--conformance-fixtures`.
pub const FIXTURE_TENANT: &str = "conformance";
pub const FIXTURE_PRINCIPAL: &str = "anonymous";
/// The fixture tenant's site, where the fixture executor runs its task tools.
const FIXTURE_SITE: &str = "conformance-site";

/// The demo tenant's catalog: a built-in read (answered by the edge), a read of the press
/// (answered by its executor) and two device actions, so that `tools/list` shows what a
/// principal's scopes allow.
const DEMO_CATALOG: &str = r#"{"actions": [
  {"id": "list_devices", "title": "List the devices", "description": "The demo tenant's devices, their sites and classes.",
   "input_schema": {"type": "object", "properties": {}, "additionalProperties": false}, "risk": "low",
   "execution": {"builtin": "writ.devices"}},
  {"id": "home_press", "title": "Home the press", "description": "Return the demo press to its home position (a durable operation, low risk).",
   "input_schema": {"type": "object", "properties": {"speed": {"enum": ["slow", "normal"]}}, "additionalProperties": false},
   "risk": "low", "execution": "operation", "device_class": "press.v1", "cost_units": 1},
  {"id": "move_press", "title": "Move the press", "description": "Move the demo press to a position (a durable operation).",
   "input_schema": {"type": "object", "required": ["position_mm"], "properties": {"position_mm": {"type": "number", "minimum": 0, "maximum": 500}}},
   "risk": "high", "execution": "operation", "dry_run": true, "device_class": "press.v1", "cost_units": 1},
  {"id": "read_press", "title": "Read the press", "description": "The demo press's state as its executor reads it (recorded and evidenced; nothing moves).",
   "input_schema": {"type": "object", "properties": {}, "additionalProperties": false},
   "risk": "low", "execution": "read", "device_class": "press.v1", "cost_units": 1}
]}"#;

/// Provisioning is idempotent: what already exists (409) is kept.
fn kept<T>(created: Result<T, AdminError>) -> Result<(), String> {
    match created {
        Ok(_) => Ok(()),
        Err(e) if e.status() == Some(409) => Ok(()),
        Err(e) => Err(e.to_string()),
    }
}

/// A principal of the full preset, as the demo and fixture tenants have.
fn full_agent(name: &str) -> CreatePrincipalRequest {
    CreatePrincipalRequest {
        name: name.into(),
        kind: PrincipalKind::Agent,
        preset: Some(RolePreset::Full),
        scopes: Vec::new(),
        metadata: Default::default(),
        quotas: None,
    }
}

/// Provisions the demo tenant (idempotent: what exists is kept) and issues a fresh demo token
/// for the edge's audience.
async fn provision_demo(admin: &AdminClient, audience: &str) -> Result<String, String> {
    let tenant = CreateTenantRequest { name: "demo".into(), display_name: Some("Writ demo".into()), settings: None };
    kept(admin.create_tenant(&tenant).await)?;
    kept(admin.create_principal("demo", &full_agent("demo-agent")).await)?;
    kept(admin.create_site("demo", &CreateSiteRequest { name: "demo-site".into(), display_name: None }).await)?;
    let press =
        CreateDeviceRequest { name: "demo-press".into(), site: "demo-site".into(), device_class: "press.v1".into() };
    kept(admin.create_device("demo", &press).await)?;
    let catalog: serde_json::Value = serde_json::from_str(DEMO_CATALOG).map_err(|e| e.to_string())?;
    admin.publish_catalog("demo", &catalog).await.map_err(|e| format!("demo catalog: {e}"))?;
    let token = IssueTokenRequest {
        principal: "demo-agent".into(),
        scopes: Vec::new(),
        ttl_s: Some(24 * 3600),
        audience: Some(audience.into()),
    };
    let issued = admin.issue_token("demo", &token).await.map_err(|e| format!("demo token: {e}"))?;
    Ok(issued.token)
}

/// Enrolls an executor of `tenant` at `site` for `devices` (once: its directory is kept) and
/// returns its configuration (the simulated device as handler, unless changed after).
async fn site_executor(
    admin: &AdminClient,
    edge_url: &str,
    dir: &Path,
    (tenant, site, devices): (&str, &str, &[&str]),
) -> Result<writ_executor::ExecutorConfig, String> {
    let config = dir.join("executor.toml");
    if !config.exists() {
        let request = CreateEnrollmentRequest {
            site: site.into(),
            devices: devices.iter().map(|d| d.to_string()).collect(),
            ttl_s: Some(600),
        };
        let created = admin.create_enrollment(tenant, &request).await.map_err(|e| format!("enrollment: {e}"))?;
        writ_executor::enroll(edge_url, &created.token, dir, None).await?;
    }
    writ_executor::ExecutorConfig::load(&config)
}

/// Provisions the conformance fixture tenant: its anonymous principal, its site and the fixture
/// catalog (published through the admin API like any catalog).
async fn provision_fixtures(admin: &AdminClient) -> Result<(), String> {
    let tenant = CreateTenantRequest {
        name: FIXTURE_TENANT.into(),
        display_name: Some("MCP conformance fixtures".into()),
        settings: None,
    };
    kept(admin.create_tenant(&tenant).await)?;
    kept(admin.create_principal(FIXTURE_TENANT, &full_agent(FIXTURE_PRINCIPAL)).await)?;
    let site = CreateSiteRequest { name: FIXTURE_SITE.into(), display_name: None };
    kept(admin.create_site(FIXTURE_TENANT, &site).await)?;
    kept(admin.publish_catalog(FIXTURE_TENANT, &writ_mcp_edge::fixtures::conformance_catalog()).await)?;
    Ok(())
}

/// Reads the dev operator token, creating a random one on first start.
fn operator_token(dir: &Path) -> std::io::Result<String> {
    let path = dir.join("operator-token");
    if let Ok(t) = std::fs::read_to_string(&path) {
        if !t.trim().is_empty() {
            return Ok(t.trim().to_string());
        }
    }
    let token = format!("writ-dev-{}", writ_api::hex(&rand::random::<[u8; 24]>()));
    writ_client::files::replace(&path, &format!("{token}\n"), true)?;
    Ok(token)
}

/// Starts dev mode and serves until Ctrl-C.
pub async fn run(args: DevArgs) -> std::io::Result<()> {
    if !args.listen.ip().is_loopback() {
        return Err(std::io::Error::other("writ dev only binds loopback addresses"));
    }
    std::fs::create_dir_all(&args.data_dir)?;
    let token = operator_token(&args.data_dir)?;
    // Loopback is not a trust boundary: the node serves TLS with a credential from the dev
    // cluster CA, and its client API answers only node and edge certificates.
    let pki = args.data_dir.join("pki");
    let node_identity = Identity::new(Role::Node, "1").expect("node 1");
    let hosts = vec![args.listen.ip().to_string(), "localhost".to_string()];
    crate::pki::ensure(&pki, std::slice::from_ref(&node_identity), &hosts)?;
    // The edge's executor endpoint derives its CA from this secret: enrollment tokens pin it.
    let edge_secret = args.data_dir.join("edge-executor-secret");
    let edge_ca = crate::executor_tls::EdgeTls::derived_ca_pem(&edge_secret).map_err(std::io::Error::other)?;
    let edge_ca_file = args.data_dir.join("edge-executor-ca.pem");
    std::fs::write(&edge_ca_file, edge_ca)?;
    let cfg = NodeConfig {
        node_id: 1,
        listen: args.listen,
        // One port: the dev node serves its admin API and probes on its TLS listener.
        admin_listen: None,
        admin_require_client_certificate: false,
        probe_listen: None,
        advertise_url: None,
        data_dir: args.data_dir.join("node"),
        otlp_endpoint: args.otlp_endpoint.clone(),
        operator_token: token.clone(),
        bootstrap: true,
        members: Default::default(),
        raft: RaftSettings {
            heartbeat_ms: 50,
            election_min_ms: 300,
            election_max_ms: 600,
            clock_ahead_ms: args.ledger_clock_ahead_s.saturating_mul(1000),
            ..RaftSettings::default()
        },
        tls: crate::pki::credential(&pki, &node_identity),
        authority: crate::config::AuthorityConfig {
            signing_key_file: args.data_dir.join("signing-key.pem"),
            executor_ca_secret_file: args.data_dir.join("executor-ca-secret"),
            token_audience: crate::config::TOKEN_AUDIENCE_DEFAULT.to_string(),
            executor_cert_ttl_s: args.executor_cert_ttl_s,
            edge_ca_files: vec![edge_ca_file],
        },
    };
    if !args.edge_listen.ip().is_loopback() {
        return Err(std::io::Error::other("writ dev only binds loopback addresses"));
    }
    crate::observe::start_telemetry(args.otlp_endpoint.as_deref(), "dev", "dev");
    let running = crate::start_node(&cfg).await?;
    let seal_key =
        crate::edge::load_or_create_seal_key(&args.data_dir.join("edge-seal-key")).map_err(std::io::Error::other)?;
    let mut options = crate::edge::EdgeOptions::new(args.edge_listen, seal_key);
    if args.conformance_fixtures {
        options.anonymous =
            Some(writ_mcp_edge::AnonymousAccess { tenant: FIXTURE_TENANT.into(), principal: FIXTURE_PRINCIPAL.into() });
        options.fixtures_tenant = Some(FIXTURE_TENANT.into());
    }
    options.executor = Some(crate::edge::ExecutorEndpointOptions {
        listen: args.executor_listen,
        tls_secret_file: Some(edge_secret),
        hosts: Vec::new(),
        url: None,
        refusal_window: std::time::Duration::from_secs(args.executor_refusal_window_s),
    });
    options.admin_urls = vec![running.url.clone()];
    options.upstream_watch = std::time::Duration::from_secs(args.upstream_watch_s);
    let ca_file = std::fs::canonicalize(pki.join(crate::pki::CA_CERT_FILE))?;
    let trust = writ_client::ClientTls::trusting(&ca_file).map_err(std::io::Error::other)?;
    options.admin_tls = Some(trust.clone());
    let admin = AdminClient::with_tls(running.url.clone(), token.clone(), Some(&trust));
    let edge =
        crate::edge::start_edge(options, running.node.clone() as std::sync::Arc<dyn writ_client::Ledger>).await?;
    let demo_token = provision_demo_once_elected(&admin, &edge.url).await?;
    let demo_site = ("demo", "demo-site", &["demo-press"][..]);
    let executor_cfg = site_executor(&admin, &edge.url, &args.data_dir.join("executor"), demo_site)
        .await
        .map_err(|e| std::io::Error::other(format!("demo executor: {e}")))?;
    let mut executors = vec![tokio::spawn(async move {
        if let Err(e) = writ_executor::run(executor_cfg).await {
            tracing::error!(error = %e, "demo executor stopped");
        }
    })];
    if args.conformance_fixtures {
        provision_fixtures(&admin).await.map_err(|e| std::io::Error::other(format!("conformance fixtures: {e}")))?;
        // The task fixtures are operations: an executor of the fixture tenant performs them.
        let dir = args.data_dir.join("fixture-executor");
        let mut cfg = site_executor(&admin, &edge.url, &dir, (FIXTURE_TENANT, FIXTURE_SITE, &[]))
            .await
            .map_err(|e| std::io::Error::other(format!("fixture executor: {e}")))?;
        cfg.handler = writ_executor::HandlerConfig::ConformanceFixtures;
        cfg.lease_ms = 1_500;
        executors.push(tokio::spawn(async move {
            if let Err(e) = writ_executor::run(cfg).await {
                tracing::error!(error = %e, "fixture executor stopped");
            }
        }));
    }
    let console =
        console_operator(&admin).await.map_err(|e| std::io::Error::other(format!("console operator: {e}")))?;
    let executor = edge.executor_endpoint.as_ref().map(|e| e.0.clone()).unwrap_or_else(|| "-".into());
    let links = Links { admin: &running.url, token: &token, ca_file: &ca_file, mcp: &edge.url, executor: &executor };
    announce(&args, &links, &demo_token, &console)?;
    let node = running.node.clone();
    let fatal = tokio::select! {
        _ = crate::wait_for_shutdown_signal() => None,
        cause = node.stopped() => Some(cause),
    };
    executors.iter().for_each(|x| x.abort());
    edge.shutdown().await;
    running.shutdown().await;
    // A node that stopped on a fatal error must not look like a clean exit (SPEC L7).
    fatal.map_or(Ok(()), |cause| Err(std::io::Error::other(format!("the ledger stopped: {cause}"))))
}

/// [`provision_demo`] once the node has elected itself (within a second; tried for ten).
async fn provision_demo_once_elected(admin: &AdminClient, edge_url: &str) -> std::io::Result<String> {
    let mut demo = Err(String::new());
    for _ in 0..50 {
        demo = provision_demo(admin, edge_url).await;
        if demo.is_ok() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    demo.map_err(|e| std::io::Error::other(format!("demo tenant: {e}")))
}

/// Where `writ dev` serves what.
struct Links<'a> {
    admin: &'a str,
    token: &'a str,
    ca_file: &'a std::path::Path,
    mcp: &'a str,
    executor: &'a str,
}

/// Writes the env file and tells the user what runs where.
fn announce(args: &DevArgs, links: &Links<'_>, demo_token: &str, console: &str) -> std::io::Result<()> {
    let env_path = args.data_dir.join("env");
    writ_client::files::replace(
        &env_path,
        &format!(
            "export WRIT_ADMIN_URL={}\nexport WRIT_ADMIN_TOKEN={}\nexport WRIT_CA_FILE={}\nexport WRIT_MCP_URL={}\nexport WRIT_DEMO_TOKEN={demo_token}\nexport WRIT_CONSOLE_URL={}/console\nexport WRIT_CONSOLE_CREDENTIAL={console}\n",
            links.admin,
            links.token,
            links.ca_file.display(),
            links.mcp,
            links.admin
        ),
        true,
    )?;
    let exe = std::env::current_exe().ok().and_then(|p| {
        let cwd = std::env::current_dir().ok()?;
        Some(p.strip_prefix(&cwd).map(|r| r.display().to_string()).unwrap_or_else(|_| p.display().to_string()))
    });
    let writ = exe.unwrap_or_else(|| "writ".into());
    println!(
        "\nWrit dev is running: single-node ledger, admin API and MCP edge on loopback.\n\
         \n  MCP edge   {mcp}   (bearer: $WRIT_DEMO_TOKEN, tenant `demo`, principal `demo-agent`){fixtures}\
         \n  executors  {executor}   (mutual TLS; the simulated demo executor drives `demo-press`)\
         \n  admin API  {url}/v1   (OpenAPI: {url}/v1/openapi.json; TLS from the dev CA $WRIT_CA_FILE)\
         \n  console    {url}/console   (operator `dev-admin`: sign in with $WRIT_CONSOLE_CREDENTIAL)\
         \n  health     {url}/healthz  {url}/readyz\
         \n  metrics    {url}/metrics\
         \n  data       {data}\
         \n  env file   {env}\
         \n\nNext, in another shell:\
         \n  source {env}\
         \n  {writ} admin tenant create acme --display-name \"Acme Labs\"\
         \n  {writ} admin tenant list\
         \n  {writ} admin cluster status\
         \n  curl -s $WRIT_MCP_URL -H \"Authorization: Bearer $WRIT_DEMO_TOKEN\" -H 'MCP-Protocol-Version: 2026-07-28' \\\
         \n    -H 'Mcp-Method: tools/list' -H 'Content-Type: application/json' -d '{{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\",\
         \n    \"params\":{{\"_meta\":{{\"io.modelcontextprotocol/protocolVersion\":\"2026-07-28\",\"io.modelcontextprotocol/clientCapabilities\":{{}}}}}}}}'\
         \n\nStop with Ctrl-C; data is kept in {data}.\n",
        url = links.admin,
        mcp = links.mcp,
        executor = links.executor,
        fixtures = if args.conformance_fixtures {
            "\n             without a token: conformance fixtures (tenant `conformance`, principal `anonymous`)"
        } else {
            ""
        },
        data = args.data_dir.display(),
        env = env_path.display(),
    );
    Ok(())
}

/// The first operator of a fresh `writ dev`, `dev-admin` (admin): a session credential to sign in
/// to the console with (a new one at each start).
async fn console_operator(admin: &AdminClient) -> Result<String, String> {
    let operator = writ_api::dto::SetOperatorRequest {
        name: "dev-admin".into(),
        role: writ_api::operator::OperatorRole::Admin,
        tenant: None,
        display_name: Some("writ dev's first operator".into()),
        sign_in: None,
    };
    let _: writ_api::operator::OperatorV1 =
        admin.call(reqwest::Method::PUT, "/v1/operators", Some(&operator)).await.map_err(|e| e.to_string())?;
    let session = writ_api::dto::OpenOperatorSessionRequest { ttl_s: None, idle_s: None };
    let opened: writ_api::dto::OperatorSessionAnswer = admin
        .call(reqwest::Method::POST, "/v1/operators/dev-admin/sessions", Some(&session))
        .await
        .map_err(|e| e.to_string())?;
    Ok(opened.credential)
}
