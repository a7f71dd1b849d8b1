//! `writ dev` as a new user meets it: one process serving the ledger, the admin API and the MCP
//! edge, with a demo tenant whose token lists the demo catalog through the edge.

use serde_json::{json, Value};
use writ_tests::procs::DevProcess;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writ_dev_serves_the_edge_with_a_demo_token() {
    let dev = DevProcess::start(&[]).await;
    let (mcp, token) = (dev.var("WRIT_MCP_URL"), dev.var("WRIT_DEMO_TOKEN"));
    assert!(mcp.starts_with("http://127.0.0.1:") && mcp.ends_with("/mcp"), "{mcp}");
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}}}});
    let list: Value = reqwest::Client::builder()
        .no_proxy()
        .build()
        .unwrap()
        .post(mcp)
        .bearer_auth(token)
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
    assert_eq!(names, vec!["list_devices", "move_press"], "{list}");
    // The read tool answers right away with the demo tenant's device.
    let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "list_devices", "_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}}}});
    let answer: Value = reqwest::Client::builder()
        .no_proxy()
        .build()
        .unwrap()
        .post(mcp)
        .bearer_auth(token)
        .header("MCP-Protocol-Version", "2026-07-28")
        .header("Mcp-Method", "tools/call")
        .header("Mcp-Name", "list_devices")
        .json(&call)
        .send()
        .await
        .expect("edge")
        .json()
        .await
        .expect("json");
    let devices = &answer["result"]["structuredContent"]["devices"];
    assert_eq!((&devices[0]["name"], &devices[0]["site"]), (&json!("demo-press"), &json!("demo-site")), "{answer}");
}
