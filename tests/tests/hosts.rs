//! Writ across hosts (SPEC H1, H2): a node's listeners by purpose, the edge over HTTPS, and
//! certificates rotated on disk while requests keep flowing.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio_rustls::TlsConnector;
use writ_api::role::{Identity, Role};
use writ_client::tls::{read_certs, ClientTls, CredentialFiles};
use writ_client::{HttpLedger, Ledger, NodeHttp};
use writ_tests::procs::{node_config, start_ready, TEST_OPERATOR_TOKEN};
use writ_tests::{eventually, pki};

fn client(tls: &ClientTls) -> reqwest::Client {
    // No pooled connections: every request makes a new handshake, so it sees the certificate
    // served right now.
    tls.apply(reqwest::Client::builder().no_proxy().pool_max_idle_per_host(0).timeout(Duration::from_secs(10)))
        .build()
        .expect("client")
}

/// The leaf certificate the server at `addr` presents in a handshake (trusting `ca`).
async fn served_leaf(addr: std::net::SocketAddr, ca: &Path) -> Vec<u8> {
    let config = ClientTls::trusting(ca).expect("ca").config().expect("config");
    let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").expect("name");
    let tls = TlsConnector::from(Arc::new(config)).connect(name, tcp).await.expect("handshake");
    tls.get_ref().1.peer_certificates().expect("server certificate")[0].to_vec()
}

fn leaf_in(file: &Path) -> Vec<u8> {
    read_certs(file).expect("cert")[0].to_vec()
}

/// Node 1 with its admin API and probes on listeners of their own (ports chosen at start).
fn split_node_config(dir: &Path) -> writ_node::config::NodeConfig {
    let mut cfg = node_config(dir, 1, pki::credential(Role::Node, "1"));
    cfg.admin_listen = Some("127.0.0.1:0".parse().unwrap());
    cfg.probe_listen = Some("127.0.0.1:0".parse().unwrap());
    cfg
}

/// Must show 2: probes and metrics need no client certificate (plain HTTP, their own address);
/// the peer listener refuses any handshake without a node or edge certificate; the admin
/// listener refuses a request without operator credentials; each serves only its routes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_serves_peers_operators_and_probes_on_separate_listeners() {
    writ_tests::init_test_log();
    let dir = tempfile::tempdir().expect("dir");
    let cfg = split_node_config(dir.path());
    let node = start_ready(&cfg).await;
    assert!(node.probe_url.starts_with("http://") && node.admin_url.starts_with("https://"));
    assert!(node.admin_url != node.url && node.probe_url != node.url);

    // Probes: plain HTTP, no certificate, read-only.
    let plain = reqwest::Client::builder().no_proxy().build().unwrap();
    for path in ["/healthz", "/readyz"] {
        let r = plain.get(format!("{}{path}", node.probe_url)).send().await.expect("probe");
        assert!(r.status().is_success(), "{path}: {}", r.status());
    }
    let metrics = plain.get(format!("{}/metrics", node.probe_url)).send().await.unwrap().text().await.unwrap();
    assert!(metrics.contains("writ_raft_term"), "{metrics}");
    let r = plain.get(format!("{}/client/status", node.probe_url)).send().await.unwrap();
    assert_eq!(r.status(), 404, "the probe listener serves no ledger API");
    let r = plain.post(format!("{}/v1/tenants", node.probe_url)).body("{}").send().await.unwrap();
    assert_eq!(r.status(), 404, "nor the admin API");

    // Peer listener: no certificate → no handshake; an operator certificate → refused by role.
    let anonymous = pki::http(None).get(format!("{}/client/status", node.url)).send().await;
    assert!(anonymous.is_err(), "a client without a certificate is refused at the handshake: {anonymous:?}");
    let healthz = pki::http(None).get(format!("{}/healthz", node.url)).send().await;
    assert!(healthz.is_err(), "probes are not on the peer listener once they have their own");
    let edge = pki::http(Some((Role::Edge, pki::HARNESS_EDGE)));
    let r = edge.get(format!("{}/client/status", node.url)).send().await.expect("edge status");
    assert!(r.status().is_success(), "{}", r.status());
    let r = pki::http(Some((Role::Operator, "ops"))).get(format!("{}/client/status", node.url)).send().await.unwrap();
    assert_eq!(r.status(), 403);
    let body: serde_json::Value = r.json().await.unwrap();
    assert_eq!(body["reason"], "PEER_FORBIDDEN");
    let r = edge.get(format!("{}/v1/tenants", node.url)).bearer_auth(TEST_OPERATOR_TOKEN).send().await.unwrap();
    assert!([403, 404].contains(&r.status().as_u16()), "the admin API is not on the peer listener: {}", r.status());

    // Admin listener: HTTPS; the operator token is required; no ledger client API.
    let admin = pki::http(None);
    let r = admin.get(format!("{}/v1/tenants", node.admin_url)).send().await.unwrap();
    assert_eq!(r.status(), 401);
    let body: serde_json::Value = r.json().await.unwrap();
    assert!(body["reason"].as_str().is_some_and(|r| !r.is_empty()), "{body}");
    let r = admin.get(format!("{}/v1/tenants", node.admin_url)).bearer_auth(TEST_OPERATOR_TOKEN).send().await.unwrap();
    assert!(r.status().is_success(), "{}", r.status());
    let r = edge.get(format!("{}/client/status", node.admin_url)).send().await.unwrap();
    assert_eq!(r.status(), 404, "the ledger client API is not on the admin listener");
    let r = plain.get(format!("http://{}/v1/tenants", node.admin_url.trim_start_matches("https://"))).send().await;
    assert!(r.map(|r| !r.status().is_success()).unwrap_or(true), "no plain HTTP on the admin listener");
    node.shutdown().await;
}

/// Must show 3 (files part): the node's and the edge's certificates are renewed on disk
/// (`writ pki renew`) while a client keeps making fresh connections to both; each serves its
/// new certificate from the next handshake, the edge's ledger client presents its own renewed
/// certificate, and no request fails in that window.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificates_rotate_on_disk_without_a_failed_request() {
    writ_tests::init_test_log();
    let dir = tempfile::tempdir().expect("dir");
    let pki_dir = dir.path().join("pki");
    writ_node::pki::init(&pki_dir).unwrap();
    let hosts = vec!["127.0.0.1".to_string(), "localhost".to_string()];
    let node_id = Identity::new(Role::Node, "7").unwrap();
    let edge_id = Identity::new(Role::Edge, "rotating").unwrap();
    let node_files = writ_node::pki::issue(&pki_dir, &node_id, &hosts, 30).unwrap();
    let edge_files = writ_node::pki::issue(&pki_dir, &edge_id, &hosts, 30).unwrap();
    let ca = node_files.ca.clone();

    let node = start_ready(&node_config(dir.path(), 7, node_files.clone())).await;
    let edge_tls = ClientTls::with_identity(&ca, &edge_files.cert, &edge_files.key).unwrap();
    let ledger = Arc::new(HttpLedger::with_http(vec![node.url.clone()], NodeHttp::with_tls(Some(&edge_tls))));
    let seal = writ_mcp_edge::seal::SealKey::random();
    let mut options = writ_node::edge::EdgeOptions::new("127.0.0.1:0".parse().unwrap(), seal);
    options.tls = Some(CredentialFiles::load(&edge_files.cert, &edge_files.key, None).unwrap());
    options.cluster_ca_pem = Some(std::fs::read_to_string(&ca).unwrap());
    let edge = writ_node::edge::start_edge(options, ledger.clone() as Arc<dyn Ledger>).await.expect("edge");
    assert!(edge.url.starts_with("https://"), "{}", edge.url);
    let edge_ready = edge.url.replace("/mcp", "/readyz");
    let http = client(&edge_tls);
    eventually("the HTTPS edge to be ready", Duration::from_secs(20), || async {
        http.get(&edge_ready).send().await.ok()?.status().is_success().then_some(())
    })
    .await;

    // Fresh connections to both, all the time, until told to stop.
    let (ok, failed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let traffic = {
        let (ok, failed, stop, http) = (ok.clone(), failed.clone(), stop.clone(), http.clone());
        let urls = [format!("{}/client/status", node.url), edge_ready.clone()];
        tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                for url in &urls {
                    match http.get(url).send().await {
                        Ok(r) if r.status().is_success() => ok.fetch_add(1, Ordering::Relaxed),
                        other => {
                            eprintln!("failed during rotation: {url}: {other:?}");
                            failed.fetch_add(1, Ordering::Relaxed)
                        }
                    };
                }
            }
        })
    };
    let edge_addr = edge.local_addr;
    assert_eq!(served_leaf(node.local_addr, &ca).await, leaf_in(&node_files.cert));
    assert_eq!(served_leaf(edge_addr, &ca).await, leaf_in(&edge_files.cert));
    let before = ok.load(Ordering::Relaxed);

    writ_node::pki::renew(&pki_dir, &node_id, &hosts, 2).unwrap();
    writ_node::pki::renew(&pki_dir, &edge_id, &hosts, 2).unwrap();
    let (new_node, new_edge) = (leaf_in(&node_files.cert), leaf_in(&edge_files.cert));
    eventually("both listeners to serve their renewed certificates", Duration::from_secs(20), || async {
        (served_leaf(node.local_addr, &ca).await == new_node && served_leaf(edge_addr, &ca).await == new_edge)
            .then_some(())
    })
    .await;
    // The node sees the edge's renewed client certificate on a fresh connection: its identity
    // still names the edge, so the client API keeps answering (counted by the traffic loop).
    let after_rotation = ok.load(Ordering::Relaxed);
    eventually("traffic after the rotation", Duration::from_secs(20), || async {
        (ok.load(Ordering::Relaxed) > after_rotation + 20).then_some(())
    })
    .await;
    stop.store(true, Ordering::Relaxed);
    traffic.await.unwrap();
    assert_eq!(failed.load(Ordering::Relaxed), 0, "no request failed while the certificates rotated");
    assert!(ok.load(Ordering::Relaxed) > before + 20);

    // A certificate naming another node is never taken up: the node keeps its own. (Key first:
    // the pair in between does not match; the final one names node:8, refused as "identity".)
    let other = Identity::new(Role::Node, "8").unwrap();
    let stranger = writ_node::pki::issue(&pki_dir, &other, &hosts, 30).unwrap();
    std::fs::copy(&stranger.key, &node_files.key).unwrap();
    std::fs::copy(&stranger.cert, &node_files.cert).unwrap();
    let metrics_url = format!("{}/metrics", node.probe_url);
    let probe = client(&ClientTls::trusting(&ca).unwrap());
    eventually("the node to refuse a certificate naming node:8", Duration::from_secs(20), || async {
        let text = probe.get(&metrics_url).send().await.ok()?.text().await.ok()?;
        text.lines()
            .any(|l| l.starts_with("writ_tls_credential_reload_refused_total{reason=\"identity\"}"))
            .then_some(())
    })
    .await;
    assert_eq!(served_leaf(node.local_addr, &ca).await, new_node, "node 7 still serves its own certificate");
    edge.shutdown().await;
    node.shutdown().await;
}

/// A token issued by `writ admin token issue` without `--audience` carries the cluster's
/// audience (`urn:writ:mcp`), which every edge accepts beside its canonical URL; so does a child
/// delegated from a token issued for the edge's URL. Another audience is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_issued_by_the_cli_work_at_the_edge_by_default() {
    let dev = writ_tests::procs::DevProcess::start(&[]).await;
    let mcp = dev.var("WRIT_MCP_URL").to_string();
    let (code, _, err) =
        dev.cli(&["principal", "create", "--tenant", "demo", "lead-agent", "--kind", "agent", "--preset", "delegate"]);
    assert_eq!(code, 0, "{err}");
    let issue = |extra: &[&str]| {
        let mut args = vec!["token", "issue", "--tenant", "demo", "lead-agent", "-o", "json"];
        args.extend_from_slice(extra);
        let (code, out, err) = dev.cli(&args);
        assert_eq!(code, 0, "{err}");
        serde_json::from_str::<serde_json::Value>(&out).expect("issued token JSON")
    };
    let list = |token: String| {
        let mcp = mcp.clone();
        async move { writ_tests::mcp::rpc(&mcp, Some(&token), "tools/list", serde_json::json!({})).await }
    };
    let plain = issue(&[]);
    assert_eq!(plain["audience"], "urn:writ:mcp");
    let (status, _, body) = list(plain["token"].as_str().unwrap().to_string()).await;
    assert_eq!(status, 200, "{body}");
    assert!(body["result"]["tools"].is_array(), "{body}");

    let for_edge = issue(&["--audience", &mcp]);
    let (code, out, err) =
        dev.cli(&["token", "delegate", "--tenant", "demo", for_edge["jti"].as_str().unwrap(), "-o", "json"]);
    assert_eq!(code, 0, "{err}");
    let child: serde_json::Value = serde_json::from_str(&out).unwrap();
    let (status, _, body) = list(child["token"].as_str().unwrap().to_string()).await;
    assert_eq!(status, 200, "a delegated child works at the edge its parent was issued for: {body}");

    let elsewhere = issue(&["--audience", "https://other.example/mcp"]);
    let (status, _, body) = list(elsewhere["token"].as_str().unwrap().to_string()).await;
    assert_eq!(status, 401, "{body}");

    // `writ admin token list` (issue 21): the principal's records, by name, without a secret.
    let (code, out, err) = dev.cli(&["token", "list", "--tenant", "demo", "--principal", "lead-agent", "-o", "json"]);
    assert_eq!(code, 0, "{err}");
    let listed: serde_json::Value = serde_json::from_str(&out).expect("token list JSON");
    let mut jtis: Vec<&str> =
        listed["tokens"].as_array().unwrap().iter().map(|t| t["record"]["jti"].as_str().unwrap()).collect();
    jtis.sort_unstable();
    let mut issued: Vec<&str> =
        [&plain, &for_edge, &child, &elsewhere].iter().map(|t| t["jti"].as_str().unwrap()).collect();
    issued.sort_unstable();
    assert_eq!(jtis, issued, "{listed}");
    for t in [&plain, &child] {
        assert!(!out.contains(t["token"].as_str().unwrap()), "a listed record carries no token");
    }
    let (code, _, err) = dev.cli(&["token", "list", "--tenant", "demo", "--principal", "nobody"]);
    assert_eq!(code, 1, "an unknown principal is refused: {err}");
}

/// `writ admin` contexts: a config file names a cluster's endpoints, CA and token file; the CLI
/// uses the current (or `--context`) one, tries endpoints in turn when one cannot be reached
/// (as `etcdctl --endpoints` does), and flags or their environment variables override it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_contexts_fail_over_between_endpoints() {
    let (node, dir) = writ_tests::procs::single_node().await;
    let config = dir.path().join("writ-config.toml");
    let token_file = dir.path().join("operator-token");
    std::fs::write(&token_file, TEST_OPERATOR_TOKEN).unwrap();
    let cli = |args: &[&str], env: &[(&str, &str)]| {
        let mut cmd = std::process::Command::new(writ_tests::procs::writ_bin());
        cmd.arg("admin").args(args).env("WRIT_CONFIG", &config);
        for k in ["WRIT_ADMIN_URL", "WRIT_ADMIN_TOKEN", "WRIT_CA_FILE", "WRIT_CONTEXT"] {
            cmd.env_remove(k);
        }
        for (k, v) in env {
            cmd.env(k, v);
        }
        let out = cmd.output().unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).to_string(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        )
    };
    let (code, _, err) = cli(&["tenant", "list"], &[]);
    assert_eq!(code, 2, "no context, no endpoint: a usage error: {err}");
    assert!(err.contains("context"), "{err}");

    // The first endpoint is dead (nothing listens there): the CLI goes on to the node.
    let ca = pki::ca_file();
    let (ca, token_file) = (ca.to_str().unwrap(), token_file.to_str().unwrap());
    let set = ["context", "set", "lab", "--endpoint", "https://127.0.0.1:1", "--endpoint", &node.admin_url];
    let (code, _, err) = cli(&[&set[..], &["--ca-file", ca, "--token-file", token_file]].concat(), &[]);
    assert_eq!(code, 0, "{err}");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(std::fs::metadata(&config).unwrap().permissions().mode() & 0o777, 0o600);
    let (code, out, err) = cli(&["context", "list"], &[]);
    assert_eq!(code, 0, "{err}");
    assert!(out.lines().any(|l| l.starts_with('*') && l.contains("lab")), "the first context becomes current: {out}");
    let (code, out, err) = cli(&["tenant", "create", "ctx-tenant", "-o", "json"], &[]);
    assert_eq!(code, 0, "through the second endpoint: {err}");
    assert!(out.contains("ctx-tenant"), "{out}");

    // A second context; --context picks it, `context use` makes it current.
    let (code, _, err) = cli(
        &["context", "set", "dead", "--endpoint", "https://127.0.0.1:1", "--ca-file", ca, "--token-file", token_file],
        &[],
    );
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = cli(&["--context", "dead", "tenant", "list"], &[]);
    assert_ne!(code, 0, "an unreachable cluster fails: {err}");
    assert!(err.contains("cannot reach"), "{err}");
    let (code, _, _) = cli(&["context", "use", "dead"], &[]);
    assert_eq!(code, 0);
    let (code, _, _) = cli(&["tenant", "list"], &[]);
    assert_ne!(code, 0, "the current context is now the dead one");
    // The environment overrides the context.
    let (code, out, err) = cli(&["tenant", "list", "-o", "json"], &[("WRIT_ADMIN_URL", &node.admin_url)]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("ctx-tenant"), "{out}");
    let (code, _, err) = cli(&["--context", "nope", "tenant", "list"], &[]);
    assert_eq!(code, 2, "{err}");
    node.shutdown().await;
}

/// Operator certificates (SPEC S1, H1): with `admin_require_client_certificate` the admin
/// listener refuses any handshake without a certificate from the cluster CA, admits an
/// operator's to every route (its token still required) and an edge's only to `/v1/enroll`
/// and `/v1/renew`;
/// `writ admin` presents the operator's certificate from `--cert`/`--key` or its context.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_listener_can_require_operator_certificates() {
    writ_tests::init_test_log();
    let dir = tempfile::tempdir().expect("dir");
    let mut cfg = split_node_config(dir.path());
    cfg.admin_require_client_certificate = true;
    let node = start_ready(&cfg).await;
    let tenants = format!("{}/v1/tenants", node.admin_url);

    let anonymous = pki::http(None).get(&tenants).bearer_auth(TEST_OPERATOR_TOKEN).send().await;
    assert!(anonymous.is_err(), "no certificate: no handshake: {anonymous:?}");
    let operator = pki::http(Some((Role::Operator, "alice")));
    let r = operator.get(&tenants).bearer_auth(TEST_OPERATOR_TOKEN).send().await.unwrap();
    assert!(r.status().is_success(), "{}", r.status());
    let r = operator.get(&tenants).send().await.unwrap();
    assert_eq!(r.status(), 401, "the certificate does not replace the operator token");
    let edge = pki::http(Some((Role::Edge, pki::HARNESS_EDGE)));
    let r = edge.get(&tenants).bearer_auth(TEST_OPERATOR_TOKEN).send().await.unwrap();
    assert_eq!(r.status(), 403, "an edge is no operator, whatever token it holds");
    let body: serde_json::Value = r.json().await.unwrap();
    assert_eq!(body["reason"], "PEER_FORBIDDEN", "{body}");
    // Edges forward enrollments: that route passes the role gate (and meets its own rules).
    for forwarded in ["enroll", "renew"] {
        let url = format!("{}/v1/{forwarded}", node.admin_url);
        let r = edge.post(url).json(&serde_json::json!({})).send().await.unwrap();
        assert_ne!(r.status(), 403, "an edge may forward an executor's {forwarded}");
    }
    let node_cert = pki::http(Some((Role::Node, "2")));
    let r = node_cert.post(format!("{}/v1/enroll", node.admin_url)).json(&serde_json::json!({})).send().await.unwrap();
    assert_eq!(r.status(), 403, "nor may a node");

    // The CLI: without the operator's certificate it cannot connect; with it, it works.
    let alice = pki::credential(Role::Operator, "alice");
    let cli = |extra: &[&str]| {
        let out = std::process::Command::new(writ_tests::procs::writ_bin())
            .args(["admin", "--url", &node.admin_url, "--token", TEST_OPERATOR_TOKEN])
            .args(["--ca", pki::ca_file().to_str().unwrap()])
            .args(extra)
            .args(["tenant", "list", "-o", "json"])
            .env("WRIT_CONFIG", dir.path().join("no-config.toml"))
            .output()
            .unwrap();
        (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stderr).to_string())
    };
    let (code, err) = cli(&[]);
    assert_eq!(code, 3, "unreachable without a certificate: {err}");
    let (code, err) = cli(&["--cert", alice.cert.to_str().unwrap(), "--key", alice.key.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    node.shutdown().await;
}

/// A CA rotation reaches running clients (SPEC H2): a client's CA bundle file gains the new CA
/// and the same client object trusts a server whose certificate comes from it within a reload
/// period, with no restart; a changed bundle that does not parse leaves the previous roots.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_follow_their_ca_bundle_through_a_rotation() {
    writ_tests::init_test_log();
    let dir = tempfile::tempdir().expect("dir");
    let (old, new) = (dir.path().join("old-ca"), dir.path().join("new-ca"));
    writ_node::pki::init(&old).unwrap();
    writ_node::pki::init(&new).unwrap();
    let hosts = vec!["127.0.0.1".to_string(), "localhost".to_string()];
    let node_id = Identity::new(Role::Node, "1").unwrap();
    let node_files = writ_node::pki::issue(&new, &node_id, &hosts, 30).unwrap();
    let node = start_ready(&node_config(&dir.path().join("n1"), 1, node_files)).await;

    // The client trusts only the old CA: the node's certificate is refused.
    let bundle = dir.path().join("bundle.pem");
    let old_ca = std::fs::read_to_string(old.join("ca.pem")).unwrap();
    let new_ca = std::fs::read_to_string(new.join("ca.pem")).unwrap();
    writ_client::files::replace(&bundle, &old_ca, false).unwrap();
    let trust = ClientTls::trusting(&bundle).unwrap();
    let http = client(&trust);
    let healthz = format!("{}/healthz", node.url);
    assert!(http.get(&healthz).send().await.is_err(), "a certificate from an untrusted CA");

    // The bundle gains the new CA: the same client trusts the node from the next handshake on.
    writ_client::files::replace(&bundle, &format!("{old_ca}{new_ca}"), false).unwrap();
    eventually("the client to trust the new CA", Duration::from_secs(10), || async {
        http.get(&healthz).send().await.ok().filter(|r| r.status().is_success())
    })
    .await;
    // A broken bundle is refused (once it is looked at, by a handshake); the previous roots
    // stay in use throughout.
    writ_client::files::replace(&bundle, "not a certificate", false).unwrap();
    eventually("the broken bundle to be refused", Duration::from_secs(10), || async {
        let r = http.get(&healthz).send().await.expect("still trusted");
        assert!(r.status().is_success());
        (trust.ca().refusals() == 1).then_some(())
    })
    .await;
    node.shutdown().await;
}
