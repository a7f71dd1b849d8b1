//! `writ dev` as a new user meets it: one process serving the ledger, the admin API and the MCP
//! edge, with a demo tenant whose token lists the demo catalog through the edge.

use std::time::Duration;

use serde_json::{json, Value};
use writ_tests::procs::writ_bin;

struct Child(std::process::Child);

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writ_dev_serves_the_edge_with_a_demo_token() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("dev");
    let _child = Child(
        std::process::Command::new(writ_bin())
            .args(["dev", "--listen", "127.0.0.1:0", "--edge-listen", "127.0.0.1:0", "--data-dir"])
            .arg(&data)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("start writ dev"),
    );
    let env = writ_tests::eventually("the dev env file", Duration::from_secs(30), || async {
        let text = std::fs::read_to_string(data.join("env")).ok()?;
        text.contains("WRIT_DEMO_TOKEN").then_some(text)
    })
    .await;
    let var = |k: &str| env.lines().find_map(|l| l.strip_prefix(&format!("export {k}="))).map(str::to_string).expect(k);
    let (mcp, token) = (var("WRIT_MCP_URL"), var("WRIT_DEMO_TOKEN"));
    assert!(mcp.starts_with("http://127.0.0.1:") && mcp.ends_with("/mcp"), "{mcp}");
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}}}});
    let list: Value = reqwest::Client::builder()
        .no_proxy()
        .build()
        .unwrap()
        .post(&mcp)
        .bearer_auth(&token)
        .header("MCP-Protocol-Version", "2026-07-28")
        .header("Mcp-Method", "tools/list")
        .json(&body)
        .send()
        .await
        .expect("edge")
        .json()
        .await
        .expect("json");
    let names: Vec<&str> =
        list["result"]["tools"].as_array().expect("tools").iter().filter_map(|t| t["name"].as_str()).collect();
    assert_eq!(names, vec!["move_press", "read_status"], "{list}");
}
