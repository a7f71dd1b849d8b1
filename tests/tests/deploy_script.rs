//! `deploy/local-cluster.sh` brings up a working 3-node cluster and takes it down again: every
//! process it started has exited when `down` returns (edges first, each within its SIGTERM
//! grace period).

use std::process::Command;
use std::time::Duration;

use writ_tests::procs::{writ_bin, ScriptCluster};

fn pid_alive(pid: &str) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
        && !std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| s.contains(") Z "))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_cluster_script_up_status_down() {
    let cluster = ScriptCluster::up();
    let env = cluster.env();
    let var = |name: &str| env.get(name).cloned().unwrap_or_else(|| panic!("{name} missing from env file: {env:?}"));
    let (url, token, ca) = (var("WRIT_ADMIN_URL"), var("WRIT_ADMIN_TOKEN"), var("WRIT_CA_FILE"));
    assert_eq!(var("WRIT_NODE_URLS").split(' ').count(), 3);
    // It holds the operator token: owner-only, like every key file the script makes.
    use std::os::unix::fs::PermissionsExt;
    for secret in ["env", "operator-token", "pki/ca-key.pem", "pki/node-1-key.pem", "pki/edge-e1-key.pem"] {
        let mode = std::fs::metadata(cluster.dir.path().join(secret)).expect(secret).permissions().mode();
        assert_eq!(mode & 0o077, 0, "{secret} is readable by others");
    }
    assert_eq!(var("WRIT_NODE_PIDS").split(' ').count(), 3);

    let status = writ_tests::eventually("3 members agreeing on a leader", Duration::from_secs(30), || {
        let (url, token, ca) = (url.clone(), token.clone(), ca.clone());
        async move {
            let out = Command::new(writ_bin())
                .args(["admin", "cluster", "status", "--output", "json", "--url", &url, "--token", &token, "--ca", &ca])
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
    assert_eq!(var("WRIT_MCP_URL"), format!("http://127.0.0.1:{}/mcp", cluster.ports[1]));
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    for mcp in mcp_urls.split(' ') {
        let readyz = mcp.replace("/mcp", "/readyz");
        writ_tests::eventually("the edge to be ready", Duration::from_secs(30), || async {
            http.get(&readyz).send().await.ok()?.status().is_success().then_some(())
        })
        .await;
    }

    let down = cluster.run("down");
    let said = String::from_utf8_lossy(&down.stdout);
    assert!(down.status.success(), "down failed: {}", String::from_utf8_lossy(&down.stderr));
    assert!(!said.contains("killed"), "every process exits on SIGTERM:\n{said}");
    for pid in var("WRIT_NODE_PIDS").split(' ').chain(var("WRIT_EDGE_PIDS").split(' ')) {
        assert!(!pid_alive(pid), "process {pid} outlived `down`:\n{said}");
    }
    for id in 1..=3 {
        assert!(!cluster.dir.path().join(format!("n{id}/pid")).exists());
    }
    for e in 1..=2 {
        assert!(!cluster.dir.path().join(format!("e{e}/pid")).exists());
    }
}
