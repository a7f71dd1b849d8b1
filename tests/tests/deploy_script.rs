//! `deploy/local-cluster.sh` brings up a working 3-node cluster and takes it down again.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use writ_tests::procs::{three_free_ports, writ_bin};

fn script() -> PathBuf {
    PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("run by cargo")).join("../deploy/local-cluster.sh")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_cluster_script_up_status_down() {
    let dir = tempfile::tempdir().expect("tempdir");
    let base = three_free_ports();
    let edge_base = three_free_ports();
    let executor_base = three_free_ports();
    let run = |verb: &str| {
        Command::new("bash")
            .arg(script())
            .arg(verb)
            .env("WRIT_CLUSTER_DIR", dir.path())
            .env("WRIT_CLUSTER_BASE_PORT", base.to_string())
            .env("WRIT_CLUSTER_EDGE_BASE_PORT", edge_base.to_string())
            .env("WRIT_CLUSTER_EXECUTOR_BASE_PORT", executor_base.to_string())
            .env("WRIT_BIN", writ_bin())
            .output()
            .expect("run local-cluster.sh")
    };
    let up = run("up");
    assert!(up.status.success(), "up failed: {}", String::from_utf8_lossy(&up.stderr));
    let env = std::fs::read_to_string(dir.path().join("env")).expect("env file");
    let var = |name: &str| {
        env.lines()
            .find_map(|l| l.strip_prefix(&format!("export {name}=")))
            .map(|v| v.trim_matches('"').to_string())
            .unwrap_or_else(|| panic!("{name} missing from env file:\n{env}"))
    };
    let (url, token) = (var("WRIT_ADMIN_URL"), var("WRIT_ADMIN_TOKEN"));
    assert_eq!(var("WRIT_NODE_URLS").split(' ').count(), 3);
    assert_eq!(var("WRIT_NODE_PIDS").split(' ').count(), 3);

    let status = writ_tests::eventually("3 members agreeing on a leader", Duration::from_secs(30), || {
        let (url, token) = (url.clone(), token.clone());
        async move {
            let out = Command::new(writ_bin())
                .args(["admin", "cluster", "status", "--output", "json", "--url", &url, "--token", &token])
                .output()
                .ok()?;
            let v: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
            let members = v["members"].as_array()?;
            let leader = v["leader"].as_u64()?;
            (members.len() == 3 && members.iter().all(|m| m["status"]["leader"].as_u64() == Some(leader))).then_some(v)
        }
    })
    .await;
    assert!(status["leader"].as_u64().is_some());

    // Both edges follow the cluster; the canonical URL (token audience) is edge 1's.
    let mcp_urls = var("WRIT_MCP_URLS");
    assert_eq!(mcp_urls.split(' ').count(), 2);
    assert_eq!(var("WRIT_MCP_URL"), format!("http://127.0.0.1:{edge_base}/mcp"));
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    for mcp in mcp_urls.split(' ') {
        let readyz = mcp.replace("/mcp", "/readyz");
        writ_tests::eventually("the edge to be ready", Duration::from_secs(30), || async {
            http.get(&readyz).send().await.ok()?.status().is_success().then_some(())
        })
        .await;
    }

    let down = run("down");
    assert!(down.status.success(), "down failed: {}", String::from_utf8_lossy(&down.stderr));
    for id in 1..=3 {
        assert!(!dir.path().join(format!("n{id}/pid")).exists());
    }
    for e in 1..=2 {
        assert!(!dir.path().join(format!("e{e}/pid")).exists());
    }
}
