//! Real `writ node` processes on loopback for cluster and fault tests.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{json, Value};

use crate::eventually;

pub use writ_tests_fast::TEST_OPERATOR_TOKEN;

/// The `writ` binary built by `cargo build -p writ-node` (what `make test` does first).
pub fn writ_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("WRIT_BIN") {
        return PathBuf::from(p);
    }
    // target/<profile>/deps/<test-exe> → target/<profile>/writ
    let exe = std::env::current_exe().expect("test executable path");
    let bin = exe.parent().and_then(Path::parent).map(|d| d.join("writ")).expect("target dir");
    assert!(
        bin.exists(),
        "{} is missing: run `cargo build --workspace --bins` first (`make test` does)",
        bin.display()
    );
    bin
}

/// The stdout of a child process, copied line by line to `log` by a thread and announced on
/// a channel: how a test learns what the process reports (e.g. the address it bound when its
/// config said port 0) by waiting for the line itself.
pub struct Reports {
    lines: std::sync::mpsc::Receiver<String>,
}

impl Reports {
    /// Takes over `child`'s piped stdout; every line goes on to `log` for as long as it runs.
    pub fn follow(child: &mut Child, mut log: std::fs::File) -> Reports {
        use std::io::{BufRead, Write};
        let stdout = child.stdout.take().expect("stdout is piped");
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = writeln!(log, "{line}");
                let _ = tx.send(line);
            }
        });
        Reports { lines }
    }

    /// The rest of the first line (from now on) that starts with `prefix`. Panics when the
    /// process closes its stdout (it exited) first, or after 30 s.
    pub fn wait_for(&self, prefix: &str) -> String {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    if let Some(rest) = line.strip_prefix(prefix) {
                        return rest.trim().to_string();
                    }
                }
                Err(e) => panic!("no '{prefix}' line from the process ({e}); see its log"),
            }
        }
    }
}

/// The port of a reported `http(s)://host:port[/path]` URL.
fn port_of(url: &str) -> u16 {
    url.rsplit_once(':')
        .and_then(|(_, rest)| rest.split('/').next()?.parse().ok())
        .unwrap_or_else(|| panic!("no port in reported URL {url}"))
}

/// A free loopback port (bound then released). Only for configurations that must name their
/// ports before anything starts (static memberships, `local-cluster.sh`); processes the tests
/// start bind port 0 and report their address instead.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).expect("free port")
}

/// A base port with the next two also free (for `deploy/local-cluster.sh`'s numbered ports).
pub fn three_free_ports() -> u16 {
    for _ in 0..50 {
        let base = free_port();
        if base < 65_000 && (1..3).all(|i| std::net::TcpListener::bind(("127.0.0.1", base + i)).is_ok()) {
            return base;
        }
    }
    panic!("no three consecutive free ports");
}

/// A `deploy/local-cluster.sh` cluster in a temp dir, taken down on drop (also when the test
/// fails), so no node or edge outlives its test.
pub struct ScriptCluster {
    pub dir: tempfile::TempDir,
    /// Base ports of the nodes, the edges and the edges' executor endpoints.
    pub ports: [u16; 3],
}

impl ScriptCluster {
    pub fn run(&self, verb: &str) -> std::process::Output {
        let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy/local-cluster.sh");
        Command::new("bash")
            .arg(script)
            .arg(verb)
            .env("WRIT_CLUSTER_DIR", self.dir.path())
            .env("WRIT_CLUSTER_BASE_PORT", self.ports[0].to_string())
            .env("WRIT_CLUSTER_EDGE_BASE_PORT", self.ports[1].to_string())
            .env("WRIT_CLUSTER_EXECUTOR_BASE_PORT", self.ports[2].to_string())
            .env("WRIT_BIN", writ_bin())
            .output()
            .expect("run local-cluster.sh")
    }

    pub fn up() -> ScriptCluster {
        let c = ScriptCluster {
            dir: tempfile::tempdir().expect("tempdir"),
            ports: [three_free_ports(), three_free_ports(), three_free_ports()],
        };
        let up = c.run("up");
        assert!(up.status.success(), "up failed: {}", String::from_utf8_lossy(&up.stderr));
        c
    }

    /// The variables the script wrote to its env file.
    pub fn env(&self) -> BTreeMap<String, String> {
        std::fs::read_to_string(self.dir.path().join("env"))
            .expect("env file")
            .lines()
            .filter_map(|l| l.strip_prefix("export ")?.split_once('='))
            .map(|(k, v)| (k.to_string(), v.trim_matches('"').to_string()))
            .collect()
    }
}

impl Drop for ScriptCluster {
    fn drop(&mut self) {
        self.run("down");
    }
}

/// Waits until the edge serving `mcp_url` has applied ledger revision `revision` (its `/readyz`
/// names the revision of its replica).
pub async fn edge_at_revision(mcp_url: &str, revision: u64) {
    let http = reqwest::Client::builder().no_proxy().build().expect("http");
    let ready = mcp_url.replace("/mcp", "/readyz");
    eventually(&format!("{mcp_url} at revision {revision}"), Duration::from_secs(30), || async {
        let r = http.get(&ready).send().await.ok()?;
        let at: u64 = r.headers().get("x-writ-revision")?.to_str().ok()?.parse().ok()?;
        (at >= revision).then_some(())
    })
    .await;
}

/// One `writ node` process. It binds port 0 on its first start and reports its address; a
/// restart reuses that port (its peers know the member by it).
pub struct NodeProc {
    pub id: u64,
    /// 0 until the first start has reported the bound port.
    pub port: u16,
    pub dir: PathBuf,
    /// More `[raft]` settings for its next start (e.g. `ledger_version_max = 1`; a
    /// `snapshot_every_entries` here replaces the harness's 100,000).
    pub raft_extra: String,
    /// More environment variables of its process (e.g. `SSL_CERT_FILE` to trust a test CA for
    /// what it fetches).
    pub env: Vec<(String, String)>,
    child: Option<Child>,
}

impl NodeProc {
    pub fn url(&self) -> String {
        format!("https://127.0.0.1:{}", self.port)
    }

    fn config_text(&self, bootstrap: bool) -> String {
        let tls = crate::pki::credential(writ_api::role::Role::Node, &self.id.to_string());
        format!(
            "node_id = {id}\nlisten = \"127.0.0.1:{port}\"\ndata_dir = \"{dir}\"\noperator_token = \"{TEST_OPERATOR_TOKEN}\"\n\
             bootstrap = {bootstrap}\n[[members]]\nid = {id}\naddr = \"https://127.0.0.1:{port}\"\n\
             [raft]\nheartbeat_ms = 100\nelection_min_ms = 800\nelection_max_ms = 1600\n{snapshots}\
             keep_entries_behind_snapshot = 0\n{extra}\n[tls]\ncert = \"{cert}\"\nkey = \"{key}\"\nca = \"{ca}\"\n",
            extra = self.raft_extra,
            // The harness's default unless the test sets its own.
            snapshots = if self.raft_extra.contains("snapshot_every_entries") {
                ""
            } else {
                "snapshot_every_entries = 100000\n"
            },
            id = self.id,
            port = self.port,
            dir = self.dir.join("data").display(),
            cert = tls.cert.display(),
            key = tls.key.display(),
            ca = tls.ca.display(),
        )
    }

    /// Starts (or restarts) the process with the same id, port and data dir.
    pub fn start(&mut self, bootstrap: bool) {
        assert!(self.child.is_none(), "node {} already running", self.id);
        std::fs::create_dir_all(&self.dir).expect("node dir");
        let cfg = self.dir.join("node.toml");
        std::fs::write(&cfg, self.config_text(bootstrap)).expect("write config");
        let log = std::fs::OpenOptions::new().create(true).append(true).open(self.dir.join("node.log")).expect("log");
        let mut child = Command::new(writ_bin())
            .args(["node", "--config"])
            .arg(&cfg)
            .env("WRIT_LOG", "info,openraft=warn")
            .env("RUST_BACKTRACE", "0")
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(log.try_clone().expect("log"))
            .spawn()
            .expect("spawn writ node");
        let reports = Reports::follow(&mut child, log);
        if self.port == 0 {
            self.port = port_of(&reports.wait_for(&format!("Writ node {} serving at ", self.id)));
        }
        self.child = Some(child);
    }

    /// `kill -9`.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Removes all of the node's data (it must be stopped).
    pub fn wipe(&self) {
        assert!(self.child.is_none(), "wipe a running node");
        let _ = std::fs::remove_dir_all(self.dir.join("data"));
    }

    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// The process id while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// The exit status once the process has exited on its own (without being killed).
    pub fn exit_status(&mut self) -> Option<std::process::ExitStatus> {
        let status = self.child.as_mut()?.try_wait().ok()??;
        self.child = None;
        Some(status)
    }

    /// What the process wrote to its log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("node.log")).unwrap_or_default()
    }
}

impl Drop for NodeProc {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A cluster of real processes in a temp dir; killed on drop.
pub struct Cluster {
    pub nodes: Vec<NodeProc>,
    pub admin: Admin,
    _root: tempfile::TempDir,
}

impl Cluster {
    /// Starts `n` nodes: node 1 bootstraps alone, then the others join as learners and are
    /// promoted to voters through the admin API (the production path for new members).
    pub async fn start(n: u64) -> Cluster {
        Cluster::start_with(n, |_| {}).await
    }

    /// [`Cluster::start`] with `prepare` run on each node before its first start (its settings;
    /// node 1's data directory restored from a backup before it bootstraps).
    pub async fn start_with(n: u64, mut prepare: impl FnMut(&mut NodeProc)) -> Cluster {
        crate::init_test_log();
        let root = tempfile::tempdir().expect("tempdir");
        let mut nodes: Vec<NodeProc> = (1..=n)
            .map(|id| NodeProc {
                id,
                port: 0,
                dir: root.path().join(format!("n{id}")),
                raft_extra: String::new(),
                env: Vec::new(),
                child: None,
            })
            .collect();
        for node in nodes.iter_mut() {
            prepare(node);
        }
        nodes[0].start(true);
        for node in nodes.iter_mut().skip(1) {
            node.start(false);
        }
        let admin = Admin::new();
        let c = Cluster { nodes, admin, _root: root };
        let first = c.nodes[0].url();
        eventually("node 1 to lead", Duration::from_secs(30), || async {
            let s = c.admin.get(&first, "/client/status").await.ok()?;
            (s["role"] == "leader").then_some(())
        })
        .await;
        for node in c.nodes.iter().skip(1) {
            eventually("learner listener", Duration::from_secs(30), || async {
                c.admin.get(&node.url(), "/healthz").await.ok().map(|_| ())
            })
            .await;
            let body = json!({"node_id": node.id, "addr": node.url()});
            c.admin.post_ok(&first, "/v1/cluster/learners", body).await;
        }
        let voters: Vec<u64> = c.nodes.iter().map(|n| n.id).collect();
        c.admin.post_ok(&first, "/v1/cluster/membership", json!({"voters": voters})).await;
        c
    }

    /// The newest event revision any running node has applied (every acknowledged write is
    /// at or below it).
    pub async fn revision(&self) -> u64 {
        let mut newest = 0;
        for url in self.running_urls() {
            if let Ok(s) = self.admin.get(&url, "/client/status").await {
                newest = newest.max(s["revision"].as_u64().unwrap_or(0));
            }
        }
        newest
    }

    pub fn all_urls(&self) -> Vec<String> {
        self.nodes.iter().map(NodeProc::url).collect()
    }

    pub fn running_urls(&self) -> Vec<String> {
        self.nodes.iter().filter(|n| n.is_running()).map(NodeProc::url).collect()
    }

    /// The id of the leader that a majority of running nodes agree on.
    pub async fn leader(&self, limit: Duration) -> u64 {
        eventually("a leader", limit, || async {
            for url in self.running_urls() {
                if let Ok(s) = self.admin.get(&url, "/client/status").await {
                    if s["role"] == "leader" {
                        return s["node_id"].as_u64();
                    }
                }
            }
            None
        })
        .await
    }

    pub fn node_mut(&mut self, id: u64) -> &mut NodeProc {
        self.nodes.iter_mut().find(|n| n.id == id).expect("node id")
    }

    /// Waits until every running node reports the same applied index and state digest, and
    /// returns (index, digest).
    pub async fn converged(&self, limit: Duration) -> (u64, String) {
        eventually("all running nodes at one applied index and digest", limit, || async {
            let mut seen = Vec::new();
            for url in self.running_urls() {
                let s = self.admin.get(&url, "/client/status").await.ok()?;
                seen.push((s["last_applied_index"].as_u64()?, s["state_digest"].as_str()?.to_string()));
            }
            let first = seen.first()?.clone();
            seen.iter().all(|s| *s == first).then_some(first)
        })
        .await
    }
}

impl Drop for Cluster {
    /// On a failing test, show the tail of every node's log before the temp dir goes away.
    fn drop(&mut self) {
        if !std::thread::panicking() {
            return;
        }
        for n in &mut self.nodes {
            n.kill();
            let log = std::fs::read_to_string(n.dir.join("node.log")).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(40).collect();
            eprintln!("---- node {} log (last {} lines) ----", n.id, tail.len());
            for line in tail.iter().rev() {
                eprintln!("{line}");
            }
        }
    }
}

/// The tests' admin client: [`writ_client::AdminClient`] for any node, plus raw requests (with
/// untyped bodies, as tests of bad input need) through the same client. It trusts the test CA
/// and presents the harness's edge credential, so it may also read `/client/status`.
#[derive(Clone)]
pub struct Admin {
    http: reqwest::Client,
    pub token: String,
}

impl Default for Admin {
    fn default() -> Self {
        Self::new()
    }
}

/// `scheme://host:port` and the rest of a URL.
fn split_url(url: &str) -> (&str, &str) {
    let after_scheme = url.find("://").map_or(0, |i| i + 3);
    let at = url[after_scheme..].find('/').map_or(url.len(), |i| after_scheme + i);
    url.split_at(at)
}

impl Admin {
    /// An operator of another cluster (e.g. `writ dev`'s): trusts its CA file, presents no
    /// certificate, uses its operator token.
    pub fn trusting(ca: &Path, token: &str) -> Admin {
        let tls = writ_client::ClientTls::trusting(ca).expect("CA file");
        let http = tls.apply(reqwest::Client::builder().no_proxy().timeout(Duration::from_secs(20))).build();
        Admin { http: http.expect("client"), token: token.into() }
    }

    pub fn new() -> Admin {
        Admin {
            http: crate::pki::http(Some((writ_api::role::Role::Edge, crate::pki::HARNESS_EDGE))),
            token: TEST_OPERATOR_TOKEN.into(),
        }
    }

    /// The typed client of the admin API at `base`.
    pub fn client(&self, base: &str) -> writ_client::AdminClient {
        writ_client::AdminClient::with_http(base, self.token.clone(), self.http.clone())
    }

    /// Sends a request and returns (status, JSON body or Null).
    pub async fn send(&self, method: reqwest::Method, url: &str, body: Option<Value>) -> Result<(u16, Value), String> {
        let (base, path) = split_url(url);
        let resp = self.client(base).send(method, path, body.as_ref()).await.map_err(|e| e.to_string())?;
        let status = resp.status().as_u16();
        let bytes = resp.bytes().await.map_err(|e| e.to_string())?;
        Ok((status, serde_json::from_slice(&bytes).unwrap_or(Value::Null)))
    }

    pub async fn get(&self, base: &str, path: &str) -> Result<Value, String> {
        match self.send(reqwest::Method::GET, &format!("{base}{path}"), None).await? {
            (200, v) => Ok(v),
            (s, v) => Err(format!("HTTP {s}: {v}")),
        }
    }

    pub async fn post(&self, base: &str, path: &str, body: Value) -> Result<(u16, Value), String> {
        self.send(reqwest::Method::POST, &format!("{base}{path}"), Some(body)).await
    }

    pub async fn post_ok(&self, base: &str, path: &str, body: Value) -> Value {
        match self.post(base, path, body).await {
            Ok((s, v)) if (200..300).contains(&s) => v,
            other => panic!("POST {base}{path} failed: {other:?}"),
        }
    }

    /// Creates a tenant; Ok(true) when acknowledged, Ok(false) when it already existed.
    pub async fn create_tenant(&self, base: &str, name: &str) -> Result<bool, String> {
        let request = writ_api::dto::CreateTenantRequest { name: name.into(), display_name: None, settings: None };
        match self.client(base).create_tenant(&request).await {
            Ok(_) => Ok(true),
            Err(e) if e.reason() == writ_api::ReasonCode::TENANT_ALREADY_EXISTS => Ok(false),
            Err(e) => Err(e.to_string()),
        }
    }

    /// Every tenant name, through linearizable paged reads.
    pub async fn all_tenant_names(&self, base: &str) -> Result<Vec<String>, String> {
        let client = self.client(base);
        let mut names = Vec::new();
        let mut page = writ_client::admin::Page { after: None, limit: Some(writ_api::dto::PAGE_LIMIT_MAX) };
        loop {
            let list = client.list_tenants(&page).await.map_err(|e| e.to_string())?;
            names.extend(list.tenants.into_iter().map(|t| t.name));
            match list.next_cursor {
                Some(next) => page.after = Some(next),
                None => return Ok(names),
            }
        }
    }
}

/// The configuration of an in-process single-node ledger `id` (bootstrapping itself) with its
/// data under `dir` and the credential `tls`, on loopback port 0, one-port mode.
pub fn node_config(dir: &Path, id: u64, tls: writ_node::config::TlsConfig) -> writ_node::config::NodeConfig {
    let edge_ca = tls.ca.clone();
    writ_node::config::NodeConfig {
        otlp_endpoint: None,
        node_id: id,
        listen: "127.0.0.1:0".parse().expect("addr"),
        admin_listen: None,
        admin_require_client_certificate: false,
        probe_listen: None,
        advertise_url: None,
        data_dir: dir.join("data"),
        operator_token: TEST_OPERATOR_TOKEN.into(),
        bootstrap: true,
        members: Default::default(),
        raft: writ_node::ledger::RaftSettings {
            heartbeat_ms: 50,
            election_min_ms: 200,
            election_max_ms: 400,
            ..Default::default()
        },
        tls,
        authority: writ_node::config::AuthorityConfig {
            signing_key_file: dir.join("signing-key.pem"),
            executor_ca_secret_file: dir.join("executor-ca-secret"),
            token_audience: writ_node::config::TOKEN_AUDIENCE_DEFAULT.into(),
            executor_cert_ttl_s: writ_tenant_admin::enroll::EXECUTOR_CERT_TTL_S,
            edge_ca_files: vec![edge_ca],
        },
    }
}

/// Starts the node of `cfg` and waits until it is ready (its probes answer at `probe_url`).
pub async fn start_ready(cfg: &writ_node::config::NodeConfig) -> writ_node::RunningNode {
    let node = writ_node::start_node(cfg).await.expect("start node");
    let url = node.probe_url.clone();
    let trust = writ_client::ClientTls::trusting(&cfg.tls.ca).expect("the node's CA");
    let http = trust.apply(reqwest::Client::builder().no_proxy()).build().expect("client");
    crate::eventually("node ready", Duration::from_secs(20), || {
        let (url, http) = (url.clone(), http.clone());
        async move {
            let r = http.get(format!("{url}/readyz")).send().await.ok()?;
            r.status().is_success().then_some(())
        }
    })
    .await;
    node
}

/// An in-process single-node ledger (bootstrapped, ready) on a loopback port, in a temp dir.
pub async fn single_node() -> (writ_node::RunningNode, tempfile::TempDir) {
    crate::init_test_log();
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = node_config(dir.path(), 1, crate::pki::credential(writ_api::role::Role::Node, "1"));
    (start_ready(&cfg).await, dir)
}

/// Runs `writ admin ARGS` against `url` with the test operator token: (exit code, stdout, stderr).
pub fn run_cli(url: &str, args: &[&str]) -> (i32, String, String) {
    run_cli_as(url, TEST_OPERATOR_TOKEN, &crate::pki::ca_file(), args)
}

/// `writ node restore --from BACKUP --data-dir DIR`: (exit code, stdout, stderr).
pub fn restore_node(backup: &Path, data_dir: &Path) -> (i32, String, String) {
    run_node_cli(&[
        "restore".as_ref(),
        "--from".as_ref(),
        backup.as_os_str(),
        "--data-dir".as_ref(),
        data_dir.as_os_str(),
    ])
}

/// `writ node log-stats --data-dir DIR`: (exit code, stdout, stderr).
pub fn node_log_stats(data_dir: &Path) -> (i32, String, String) {
    run_node_cli(&["log-stats".as_ref(), "--data-dir".as_ref(), data_dir.as_os_str()])
}

/// `writ node seed --data-dir DIR --operations N [--copy-to COPY]...`: (exit code, stdout, stderr).
pub fn seed_node(data_dir: &Path, operations: u64, copies: &[PathBuf]) -> (i32, String, String) {
    let count = operations.to_string();
    let mut args: Vec<&std::ffi::OsStr> =
        vec!["seed".as_ref(), "--data-dir".as_ref(), data_dir.as_os_str(), "--operations".as_ref(), count.as_ref()];
    for copy in copies {
        args.extend(["--copy-to".as_ref(), copy.as_os_str()]);
    }
    run_node_cli(&args)
}

/// `writ node ARGS`: (exit code, stdout, stderr).
fn run_node_cli(args: &[&std::ffi::OsStr]) -> (i32, String, String) {
    let out = std::process::Command::new(writ_bin()).arg("node").args(args).output().expect("run writ node");
    let text = |b: &[u8]| String::from_utf8_lossy(b).to_string();
    (out.status.code().unwrap_or(-1), text(&out.stdout), text(&out.stderr))
}

/// `writ admin <args>` with an operator token, trusting the CA in `ca`.
pub fn run_cli_as(url: &str, token: &str, ca: &Path, args: &[&str]) -> (i32, String, String) {
    let out = std::process::Command::new(writ_bin())
        .arg("admin")
        .args(args)
        .env("WRIT_ADMIN_URL", url)
        .env("WRIT_ADMIN_TOKEN", token)
        .env("WRIT_CA_FILE", ca)
        .output()
        .expect("run writ admin");
    let text = |b: &[u8]| String::from_utf8_lossy(b).to_string();
    (out.status.code().unwrap_or(-1), text(&out.stdout), text(&out.stderr))
}

/// A `writ dev` process in a temp dir on free loopback ports, killed on drop.
pub struct DevProcess {
    child: Child,
    /// The variables of its env file (`WRIT_MCP_URL`, `WRIT_DEMO_TOKEN`, `WRIT_ADMIN_URL`, …).
    pub env: BTreeMap<String, String>,
    _dir: tempfile::TempDir,
}

impl DevProcess {
    /// Starts `writ dev` with `extra` arguments and waits for its env file.
    pub async fn start(extra: &[&str]) -> DevProcess {
        let dir = tempfile::tempdir().expect("temp dir");
        let child = DevProcess::spawn(&dir.path().join("dev"), "127.0.0.1:0", extra);
        let mut dev = DevProcess { child, env: Default::default(), _dir: dir };
        dev.read_env().await;
        dev
    }

    fn spawn(data: &Path, edge_listen: &str, extra: &[&str]) -> Child {
        Command::new(writ_bin())
            .args(["dev", "--listen", "127.0.0.1:0", "--edge-listen", edge_listen, "--executor-listen", "127.0.0.1:0"])
            .arg("--data-dir")
            .arg(data)
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start writ dev")
    }

    /// Waits for a fresh env file (the previous one, if any, is removed first by the caller).
    async fn read_env(&mut self) {
        let data = self.data_dir();
        let text = eventually("the dev env file", Duration::from_secs(30), || async {
            let text = std::fs::read_to_string(data.join("env")).ok()?;
            text.contains("WRIT_DEMO_TOKEN").then_some(text)
        })
        .await;
        self.env = text
            .lines()
            .filter_map(|l| l.strip_prefix("export ")?.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
    }

    /// Stops it and starts it again on the same data directory and MCP port (so tokens issued
    /// for its MCP URL still name it), with `extra` arguments.
    pub async fn restart(&mut self, extra: &[&str]) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let edge = self.var("WRIT_MCP_URL").trim_start_matches("http://").trim_end_matches("/mcp").to_string();
        let _ = std::fs::remove_file(self.data_dir().join("env"));
        self.child = DevProcess::spawn(&self.data_dir(), &edge, extra);
        self.read_env().await;
    }

    pub fn var(&self, key: &str) -> &str {
        self.env.get(key).unwrap_or_else(|| panic!("{key} is not in the dev env file"))
    }

    /// Its `--data-dir`.
    pub fn data_dir(&self) -> PathBuf {
        self._dir.path().join("dev")
    }

    /// `writ admin ARGS` as its env file sets it up (URL, operator token, dev CA).
    pub fn cli(&self, args: &[&str]) -> (i32, String, String) {
        let ca = Path::new(self.var("WRIT_CA_FILE"));
        run_cli_as(self.var("WRIT_ADMIN_URL"), self.var("WRIT_ADMIN_TOKEN"), ca, args)
    }
}

impl Drop for DevProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A `writ edge` process following a cluster, killed on drop. Edges of one deployment share
/// the canonical URL (the token audience, as behind a load balancer) and the seal key file.
pub struct EdgeProc {
    pub port: u16,
    /// Port of its executor endpoint (mutual TLS).
    pub executor_port: u16,
    child: Child,
}

impl EdgeProc {
    /// Starts an edge on port 0 (and its executor endpoint on port 0) and waits until it is
    /// ready; `canonical_url` defaults to its own `/mcp` URL.
    pub async fn start(dir: &Path, ledger: &[String], canonical_url: Option<&str>) -> EdgeProc {
        static STARTED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = STARTED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let config = dir.join(format!("edge-{n}.toml"));
        let ledger: Vec<String> = ledger.iter().map(|u| format!("\"{u}\"")).collect();
        let canonical = canonical_url.map(|c| format!("canonical_url = \"{c}\"\n")).unwrap_or_default();
        let tls = crate::pki::credential(writ_api::role::Role::Edge, &format!("e{n}"));
        let text = format!(
            "listen = \"127.0.0.1:0\"\n{canonical}ledger = [{}]\nseal_key_file = \"{}\"\n\
             [executor]\nlisten = \"127.0.0.1:0\"\n\
             [ledger_tls]\ncert = \"{}\"\nkey = \"{}\"\nca = \"{}\"\n",
            ledger.join(", "),
            dir.join("edge-seal-key").display(),
            tls.cert.display(),
            tls.key.display(),
            tls.ca.display(),
        );
        std::fs::write(&config, text).expect("edge config");
        let log = std::fs::File::create(dir.join(format!("edge-{n}.log"))).expect("edge log");
        let mut child = Command::new(writ_bin())
            .args(["edge", "--config"])
            .arg(&config)
            .stdout(Stdio::piped())
            .stderr(log.try_clone().expect("edge log"))
            .spawn()
            .expect("start writ edge");
        let reports = Reports::follow(&mut child, log);
        // The listener's own address (the canonical URL may name another edge); the edge
        // prints it before the executor endpoint's.
        let port = port_of(&reports.wait_for("Writ edge listening on "));
        let executor_port = port_of(&reports.wait_for("Writ edge serving executors at "));
        let edge = EdgeProc { port, executor_port, child };
        let http = reqwest::Client::builder().no_proxy().build().expect("http");
        let ready = format!("http://127.0.0.1:{port}/readyz");
        eventually("the edge to be ready", Duration::from_secs(30), || async {
            let r = http.get(&ready).send().await.ok()?;
            r.status().is_success().then_some(())
        })
        .await;
        edge
    }

    /// This edge's own `/mcp` URL.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/mcp", self.port)
    }

    /// Its executor endpoint.
    pub fn executor_url(&self) -> String {
        format!("https://127.0.0.1:{}", self.executor_port)
    }

    /// Kills it with SIGKILL (no shutdown of any kind).
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for EdgeProc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A `writ executor run` process enrolled through an edge, killed on drop.
pub struct ExecutorProc {
    pub dir: PathBuf,
    pub executor_id: String,
    child: Option<Child>,
}

impl ExecutorProc {
    /// Creates an enrollment for (tenant, site, devices) through `admin`, enrolls with
    /// `writ executor enroll --edge`, and sets the handler (TOML after `[handler]`), the lease
    /// and the edges to use (default: the one enrolled through).
    #[allow(clippy::too_many_arguments)]
    pub async fn enroll(
        admin: &writ_client::AdminClient,
        tenant: &str,
        site: &str,
        devices: &[&str],
        edge_url: &str,
        dir: &Path,
        handler: &str,
    ) -> ExecutorProc {
        let request = writ_api::dto::CreateEnrollmentRequest {
            site: site.into(),
            devices: devices.iter().map(|d| d.to_string()).collect(),
            ttl_s: None,
        };
        let created = admin.create_enrollment(tenant, &request).await.expect("enrollment");
        let token = created.token.as_str();
        let out = Command::new(writ_bin())
            .args(["executor", "enroll", "--edge", edge_url, "--token", token, "--out"])
            .arg(dir)
            .output()
            .expect("run writ executor enroll");
        assert!(out.status.success(), "enroll failed: {}", String::from_utf8_lossy(&out.stderr));
        let stdout = String::from_utf8_lossy(&out.stdout).to_string();
        let executor_id = stdout
            .split_whitespace()
            .find(|w| w.starts_with("x-"))
            .unwrap_or_else(|| panic!("no executor id in {stdout}"))
            .to_string();
        let x = ExecutorProc { dir: dir.to_path_buf(), executor_id, child: None };
        x.set_handler(handler, None);
        x
    }

    /// Rewrites the handler section (and optionally the edges) of its `executor.toml`.
    pub fn set_handler(&self, handler: &str, edges: Option<&[String]>) {
        let path = self.dir.join("executor.toml");
        let text = std::fs::read_to_string(&path).expect("executor.toml");
        let head = text.split("\n[handler]").next().unwrap_or_default().to_string() + "\n";
        let head = match edges {
            Some(edges) => {
                let list: Vec<String> = edges.iter().map(|e| format!("{e:?}")).collect();
                head.lines()
                    .map(|l| {
                        if l.starts_with("edges = ") {
                            format!("edges = [{}]", list.join(", "))
                        } else {
                            l.to_string()
                        }
                    })
                    .collect::<Vec<_>>()
                    .join("\n")
                    + "\n"
            }
            None => head,
        };
        std::fs::write(&path, format!("{head}[handler]\n{handler}\n")).expect("write executor.toml");
    }

    /// Starts (or restarts) `writ executor run`.
    pub fn start(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("executor.log"))
            .expect("executor log");
        let child = Command::new(writ_bin())
            .args(["executor", "run", "--config"])
            .arg(self.dir.join("executor.toml"))
            .env("WRIT_LOG", "info")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start writ executor run");
        self.child = Some(child);
    }

    /// SIGKILL.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Whether the process has exited (e.g. a simulated crash).
    pub fn exited(&mut self) -> bool {
        self.child.as_mut().is_none_or(|c| matches!(c.try_wait(), Ok(Some(_))))
    }

    /// Operation ids in the simulated device's attempt counter, in attempt order.
    pub fn attempts(&self) -> Vec<String> {
        std::fs::read_to_string(self.dir.join("attempts.log"))
            .map(|t| t.lines().map(str::to_string).collect())
            .unwrap_or_default()
    }

    /// An HTTP client presenting this executor's certificate and trusting the edges' CA (to
    /// play the executor by hand).
    pub fn mtls_client(&self) -> reqwest::Client {
        mtls_client(&self.dir.join("executor.crt"), &self.dir.join("executor.key"), &self.dir.join("edge-ca.crt"))
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("executor.log")).unwrap_or_default()
    }
}

impl Drop for ExecutorProc {
    fn drop(&mut self) {
        self.kill();
    }
}

/// An HTTP client with a client certificate (PEM chain + key) that trusts `ca`.
pub fn mtls_client(cert: &Path, key: &Path, ca: &Path) -> reqwest::Client {
    let certs = std::fs::read(cert).expect("cert");
    let key = std::fs::read(key).expect("key");
    let mut roots = rustls::RootCertStore::empty();
    for der in rustls_pem_certs(&std::fs::read(ca).expect("ca")) {
        roots.add(der).expect("ca cert");
    }
    let key = rustls::pki_types::PrivateKeyDer::try_from(pem_der(&key, "PRIVATE KEY")).expect("key der");
    let tls =
        rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(rustls::crypto::aws_lc_rs::default_provider()))
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_root_certificates(roots)
            .with_client_auth_cert(rustls_pem_certs(&certs), key)
            .expect("client auth");
    reqwest::Client::builder()
        .no_proxy()
        .use_preconfigured_tls(tls)
        .timeout(Duration::from_secs(20))
        .build()
        .expect("mtls client")
}

fn pem_der(pem: &[u8], label: &str) -> Vec<u8> {
    pem_blocks(pem, label).into_iter().next().unwrap_or_else(|| panic!("no {label} block"))
}

/// The DER contents of every PEM block labelled `label`, in order.
pub fn pem_blocks(pem: &[u8], label: &str) -> Vec<Vec<u8>> {
    writ_api::pem::blocks(&String::from_utf8_lossy(pem), label)
}

fn rustls_pem_certs(pem: &[u8]) -> Vec<rustls::pki_types::CertificateDer<'static>> {
    pem_blocks(pem, "CERTIFICATE").into_iter().map(rustls::pki_types::CertificateDer::from).collect()
}

/// A listener on loopback that answers every request with `status`, `headers` and `body`, and
/// counts the requests it got.
pub async fn canned(
    status: u16,
    headers: Vec<(&'static str, String)>,
    body: impl Into<String>,
) -> (u16, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    let hits = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let (seen, body) = (hits.clone(), body.into());
    let app = axum::Router::new().fallback(move || {
        let (headers, seen, body) = (headers.clone(), seen.clone(), body.clone());
        async move {
            seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let mut r = axum::response::Response::new(axum::body::Body::from(body));
            *r.status_mut() = axum::http::StatusCode::from_u16(status).unwrap();
            for (name, value) in headers {
                r.headers_mut().insert(name, value.parse().unwrap());
            }
            r
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (port, hits)
}
