//! `writ dev`: the embedded default — one process with a single-node ledger and the admin
//! API on loopback, data under `.writ/dev/`, and an `env` file for `writ admin`.

use std::path::{Path, PathBuf};

use clap::Args;

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
}

/// The demo tenant's catalog: one read action and one device action, so that `tools/list`
/// shows what a principal's scopes allow.
const DEMO_CATALOG: &str = r#"{"actions": [
  {"id": "read_status", "title": "Read the line status", "description": "Current state of the demo line.",
   "input_schema": {"type": "object", "properties": {"line": {"type": "string"}}}, "risk": "low", "execution": "read"},
  {"id": "move_press", "title": "Move the press", "description": "Move the demo press to a position (a durable operation).",
   "input_schema": {"type": "object", "required": ["position_mm"], "properties": {"position_mm": {"type": "number", "minimum": 0, "maximum": 500}}},
   "risk": "high", "execution": "operation", "dry_run": true, "device_class": "press.v1", "cost_units": 1}
]}"#;

/// Provisions the demo tenant (idempotent: what exists is kept) and issues a fresh demo token
/// for the edge's audience.
async fn provision_demo(admin_url: &str, operator_token: &str, audience: &str) -> Result<String, String> {
    let http = reqwest::Client::builder().no_proxy().build().map_err(|e| e.to_string())?;
    let call = |method: reqwest::Method, path: &str, body: serde_json::Value| {
        http.request(method, format!("{admin_url}{path}")).bearer_auth(operator_token).json(&body).send()
    };
    let post = reqwest::Method::POST;
    // 201 or 409 (already there) are both fine.
    let steps = [
        ("/v1/tenants", serde_json::json!({"name": "demo", "display_name": "Writ demo"})),
        ("/v1/tenants/demo/principals", serde_json::json!({"name": "demo-agent", "kind": "agent", "preset": "full"})),
        ("/v1/tenants/demo/sites", serde_json::json!({"name": "demo-site"})),
        (
            "/v1/tenants/demo/devices",
            serde_json::json!({"name": "demo-press", "site": "demo-site", "device_class": "press.v1"}),
        ),
    ];
    for (path, body) in steps {
        let r = call(post.clone(), path, body).await.map_err(|e| e.to_string())?;
        if !(r.status().is_success() || r.status() == reqwest::StatusCode::CONFLICT) {
            return Err(format!("{path}: HTTP {}", r.status()));
        }
    }
    let catalog: serde_json::Value = serde_json::from_str(DEMO_CATALOG).map_err(|e| e.to_string())?;
    let r = call(post.clone(), "/v1/tenants/demo/catalogs", catalog).await.map_err(|e| e.to_string())?;
    if !r.status().is_success() {
        return Err(format!("demo catalog: HTTP {}", r.status()));
    }
    let body = serde_json::json!({"principal": "demo-agent", "audience": audience, "ttl_s": 24 * 3600});
    let r = call(post, "/v1/tenants/demo/tokens", body).await.map_err(|e| e.to_string())?;
    let issued: serde_json::Value = r.json().await.map_err(|e| e.to_string())?;
    issued["token"].as_str().map(str::to_string).ok_or_else(|| format!("demo token: {issued}"))
}

/// Reads the dev operator token, creating a random one on first start.
fn operator_token(dir: &Path) -> std::io::Result<String> {
    let path = dir.join("operator-token");
    if let Ok(t) = std::fs::read_to_string(&path) {
        if !t.trim().is_empty() {
            return Ok(t.trim().to_string());
        }
    }
    let token = format!("writ-dev-{}", hex::encode(rand::random::<[u8; 24]>()));
    write_private(&path, &format!("{token}\n"))?;
    Ok(token)
}

fn write_private(path: &Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new().create(true).write(true).truncate(true).mode(0o600).open(path)?;
    f.write_all(text.as_bytes())
}

/// Starts dev mode and serves until Ctrl-C.
pub async fn run(args: DevArgs) -> std::io::Result<()> {
    if !args.listen.ip().is_loopback() {
        return Err(std::io::Error::other("writ dev only binds loopback addresses"));
    }
    std::fs::create_dir_all(&args.data_dir)?;
    let token = operator_token(&args.data_dir)?;
    let cfg = NodeConfig {
        node_id: 1,
        listen: args.listen,
        advertise_url: None,
        data_dir: args.data_dir.join("node"),
        operator_token: token.clone(),
        bootstrap: true,
        members: Default::default(),
        raft: RaftSettings { heartbeat_ms: 50, election_min_ms: 300, election_max_ms: 600, ..RaftSettings::default() },
        tls: None,
        authority: crate::config::AuthorityConfig {
            signing_key_file: args.data_dir.join("signing-key.pem"),
            token_audience: crate::config::TOKEN_AUDIENCE_DEFAULT.to_string(),
        },
    };
    if !args.edge_listen.ip().is_loopback() {
        return Err(std::io::Error::other("writ dev only binds loopback addresses"));
    }
    let running = crate::start_node(&cfg).await?;
    let edge = crate::edge::start_edge(
        args.edge_listen,
        None,
        running.node.clone() as std::sync::Arc<dyn writ_api::client::Ledger>,
        Vec::new(),
        Vec::new(),
    )
    .await?;
    // The node elects itself within a second; provisioning waits for it.
    let mut demo = Err(String::new());
    for _ in 0..50 {
        demo = provision_demo(&running.url, &token, &edge.url).await;
        if demo.is_ok() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    let demo_token = demo.map_err(|e| std::io::Error::other(format!("demo tenant: {e}")))?;
    let env_path = args.data_dir.join("env");
    write_private(
        &env_path,
        &format!(
            "export WRIT_ADMIN_URL={}\nexport WRIT_ADMIN_TOKEN={token}\nexport WRIT_MCP_URL={}\nexport WRIT_DEMO_TOKEN={demo_token}\n",
            running.url, edge.url
        ),
    )?;
    let exe = std::env::current_exe().ok().and_then(|p| {
        let cwd = std::env::current_dir().ok()?;
        Some(p.strip_prefix(&cwd).map(|r| r.display().to_string()).unwrap_or_else(|_| p.display().to_string()))
    });
    let writ = exe.unwrap_or_else(|| "writ".into());
    println!(
        "\nWrit dev is running: single-node ledger, admin API and MCP edge on loopback.\n\
         \n  MCP edge   {mcp}   (bearer: $WRIT_DEMO_TOKEN, tenant `demo`, principal `demo-agent`)\
         \n  admin API  {url}/v1   (OpenAPI: {url}/v1/openapi.json)\
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
        url = running.url,
        mcp = edge.url,
        data = args.data_dir.display(),
        env = env_path.display(),
    );
    crate::wait_for_shutdown_signal().await;
    edge.shutdown().await;
    running.shutdown().await;
    Ok(())
}
