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
    let running = crate::start_node(&cfg).await?;
    let env_path = args.data_dir.join("env");
    write_private(&env_path, &format!("export WRIT_ADMIN_URL={}\nexport WRIT_ADMIN_TOKEN={token}\n", running.url))?;
    let exe = std::env::current_exe().ok().and_then(|p| {
        let cwd = std::env::current_dir().ok()?;
        Some(p.strip_prefix(&cwd).map(|r| r.display().to_string()).unwrap_or_else(|_| p.display().to_string()))
    });
    let writ = exe.unwrap_or_else(|| "writ".into());
    println!(
        "\nWrit dev is running: single-node ledger + admin API on loopback.\n\
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
         \n\nStop with Ctrl-C; data is kept in {data}.\n",
        url = running.url,
        data = args.data_dir.display(),
        env = env_path.display(),
    );
    crate::wait_for_shutdown_signal().await;
    running.shutdown().await;
    Ok(())
}
