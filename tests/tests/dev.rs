//! `writ dev` as a new user meets it: one process serving the ledger, the admin API and the MCP
//! edge, with a demo tenant whose token lists the demo catalog through the edge.

use serde_json::{json, Value};
use writ_tests::mcp::rpc;
use writ_tests::procs::DevProcess;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writ_dev_serves_the_edge_with_a_demo_token() {
    let dev = DevProcess::start(&[]).await;
    let (mcp, token) = (dev.var("WRIT_MCP_URL"), dev.var("WRIT_DEMO_TOKEN"));
    assert!(mcp.starts_with("http://127.0.0.1:") && mcp.ends_with("/mcp"), "{mcp}");
    let (_, _, list) = rpc(mcp, Some(token), "tools/list", json!({})).await;
    let names: Vec<&str> =
        list["result"]["tools"].as_array().expect("tools").iter().filter_map(|t| t["name"].as_str()).collect();
    assert_eq!(
        names,
        vec![
            "context.search",
            "home_press",
            "list_devices",
            "move_press",
            "observation.capture",
            "operation.execute",
            "operation.propose",
            "operation.readback"
        ],
        "{list}"
    );
    // The read tool answers right away with the demo tenant's device.
    let (_, _, answer) = rpc(mcp, Some(token), "tools/call", json!({"name": "list_devices"})).await;
    let devices = &answer["result"]["structuredContent"]["devices"];
    assert_eq!((&devices[0]["name"], &devices[0]["site"]), (&json!("demo-press"), &json!("demo-site")), "{answer}");
    // context.search: what this principal may act on, from the edge's replica.
    let (_, _, found) =
        rpc(mcp, Some(token), "tools/call", json!({"name": "context.search", "arguments": {"query": "press"}})).await;
    let ctx = &found["result"]["structuredContent"];
    let actions: Vec<&str> = ctx["actions"].as_array().unwrap().iter().filter_map(|a| a["id"].as_str()).collect();
    assert_eq!(actions, vec!["home_press", "move_press"], "{found}");
    assert_eq!(ctx["devices"][0]["name"], "demo-press", "{found}");
    // The simulated demo executor performs an operation on the demo device right away.
    let args = json!({"action": "home_press", "input": {}, "device": "demo-press", "idempotency_key": "first"});
    let (_, _, executed) =
        rpc(mcp, Some(token), "tools/call", json!({"name": "operation.execute", "arguments": args})).await;
    assert_eq!(executed["result"]["isError"], Value::Null, "{executed}");
    let read = json!({"name": "operation.readback", "arguments": {"idempotency_key": "first"}});
    let op = writ_tests::eventually("the demo operation's effect", std::time::Duration::from_secs(20), || async {
        let (_, _, r) = rpc(mcp, Some(token), "tools/call", read.clone()).await;
        let op = r["result"]["structuredContent"].clone();
        (op["state"] == "effect_reported").then_some(op)
    })
    .await;
    assert_eq!((op["attempts"].as_u64(), op["evidence"].as_array().map(Vec::len)), (Some(1), Some(1)), "{op}");
}
