//! `writ dev` as a new user meets it: one process serving the ledger, the admin API and the MCP
//! edge, with a demo tenant whose token lists the demo catalog through the edge.

use std::time::Duration;

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
            "operation.readback",
            "read_press"
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
    assert_eq!(actions, vec!["home_press", "move_press", "read_press"], "{found}");
    // A catalog read: the executor's reading of the device, as the call's answer.
    let (_, _, reading) = rpc(mcp, Some(token), "tools/call", json!({"name": "read_press"})).await;
    let result = &reading["result"];
    assert_eq!(result["isError"], Value::Null, "{reading}");
    assert_eq!(result["structuredContent"]["device"], "demo-press", "{reading}");
    assert_eq!(result["_meta"]["writ/operation"]["state"], "effect_reported", "{reading}");
    // The same read through the 2025 wire (a session opened by initialize).
    let session = writ_tests::mcp::LegacySession::open(mcp, token).await;
    let call =
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "read_press", "arguments": {}}});
    let legacy = session.call(call).await;
    assert_eq!(legacy["result"]["structuredContent"]["device"], "demo-press", "{legacy}");
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

/// Issue 21: rules ledger time drives, through real processes, with `writ dev
/// --ledger-clock-ahead-s` (restarted on the same data directory and MCP URL): a proposal made
/// before is refused as PROPOSAL_EXPIRED once its 5 minutes of ledger time have passed, and a
/// deleted tenant is purged only after its 30 days.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn time_driven_rules_with_ledger_time_ahead() {
    let mut dev = DevProcess::start(&[]).await;
    let (mcp, token) = (dev.var("WRIT_MCP_URL").to_string(), dev.var("WRIT_DEMO_TOKEN").to_string());
    let tool = |name: &str, arguments: Value| {
        let (mcp, token, name) = (mcp.clone(), token.clone(), name.to_string());
        async move { rpc(&mcp, Some(&token), "tools/call", json!({"name": name, "arguments": arguments})).await.2 }
    };
    let call = json!({"action": "move_press", "input": {"position_mm": 5}, "device": "demo-press"});
    let proposed = tool("operation.propose", call.clone()).await;
    let proposal = proposed["result"]["structuredContent"]["proposal"].as_str().expect("a proposal").to_string();
    assert_eq!(dev.cli(&["tenant", "create", "leaving"]).0, 0);
    assert_eq!(dev.cli(&["tenant", "delete", "leaving"]).0, 0);
    // An operation the demo executor refuses (its precondition is not met) finishes as failed.
    let refused = json!({"action": "home_press", "input": {}, "device": "demo-press", "idempotency_key": "door-1",
                         "preconditions": {"door": "open"}});
    tool("operation.execute", refused.clone()).await;
    let read = json!({"idempotency_key": "door-1"});
    let failed = writ_tests::eventually("the refused operation fails", Duration::from_secs(20), || async {
        let op = tool("operation.readback", read.clone()).await["result"]["structuredContent"].clone();
        (op["state"] == "failed").then_some(op)
    })
    .await;
    let storage = |dev: &DevProcess| -> Value {
        let (code, out, err) = dev.cli(&["tenant", "storage", "demo", "-o", "json"]);
        assert_eq!(code, 0, "{err}");
        serde_json::from_str(&out).expect("storage figures")
    };
    let fresh = storage(&dev);
    assert_eq!((fresh["bindings"].as_u64(), fresh["retention_horizon_s"].as_u64()), (Some(0), Some(24 * 3600)));
    let (code, _, err) = dev.cli(&["tenant", "purge", "leaving"]);
    assert!(code == 1 && err.contains("TENANT_STATE_CONFLICT"), "kept for its retention: {err}");

    // Ledger time 6 minutes on: the proposal has expired (the token, issued at wall-clock time
    // for this MCP URL, still holds).
    dev.restart(&["--ledger-clock-ahead-s", "360"]).await;
    let mut execute = call.clone();
    execute["idempotency_key"] = json!("late-1");
    execute["proposal"] = json!(proposal);
    let late = tool("operation.execute", execute).await;
    assert_eq!(late["result"]["_meta"]["writ/reason"], "PROPOSAL_EXPIRED", "{late}");
    let (code, _, err) = dev.cli(&["tenant", "purge", "leaving"]);
    assert!(code == 1 && err.contains("kept until"), "6 minutes are not 30 days: {err}");
    // Each start issues a fresh demo token: what one token record adds to the state's bytes.
    let one_more = storage(&dev);
    assert_eq!(one_more["tokens"].as_u64(), fresh["tokens"].as_u64().map(|t| t + 1), "{one_more}");
    let token_bytes = one_more["state_bytes"].as_u64().unwrap() - fresh["state_bytes"].as_u64().unwrap();
    // A work item closed now: retired with the rest one horizon on, its id free again.
    let create_work = ["work", "create", "--tenant", "demo", "wo-done", "--title", "Press job", "--owner", "line 2"];
    let create_work = [&create_work[..], &["--action", "move_press"]].concat();
    assert_eq!(dev.cli(&create_work).0, 0);
    assert_eq!(dev.cli(&["work", "update", "--tenant", "demo", "wo-done", "--state", "completed"]).0, 0);
    let work_items = storage(&dev)["work_items"].as_u64().expect("a count");

    // 25 hours on (past the demo tenant's idempotency retention of 24 h): the leader's reaper
    // compacts the failed operation to its binding; a retry with the same key and payload
    // still answers with the original outcome, another payload is still refused.
    dev.restart(&["--ledger-clock-ahead-s", &(25 * 3600).to_string()]).await;
    let compacted = writ_tests::eventually("the finished operation compacted", Duration::from_secs(30), || async {
        let s = storage(&dev);
        (s["bindings"].as_u64() >= Some(1) && s["work_items"].as_u64() == Some(work_items - 1)).then_some(s)
    })
    .await;
    let (code, _, err) = dev.cli(&["work", "show", "--tenant", "demo", "wo-done"]);
    assert!(code == 1 && err.contains("WORK_NOT_FOUND"), "retired: {err}");
    assert_eq!(dev.cli(&create_work).0, 0, "the id is free again");
    assert!(compacted["operations"].as_u64() < fresh["operations"].as_u64(), "{compacted} vs {fresh}");
    let tokens_added = compacted["tokens"].as_u64().unwrap() - fresh["tokens"].as_u64().unwrap();
    let bound = fresh["state_bytes"].as_u64().unwrap() + tokens_added * token_bytes;
    assert!(compacted["state_bytes"].as_u64().unwrap() < bound, "{compacted} vs {fresh} and {tokens_added} tokens");
    let replayed = tool("operation.execute", refused.clone()).await["result"].clone();
    let view = &replayed["structuredContent"];
    assert_eq!(
        (&view["operation_id"], &view["state"], &view["replayed"]),
        (&failed["operation_id"], &json!("failed"), &json!(true)),
        "{replayed}"
    );
    let mut changed = refused.clone();
    changed["preconditions"] = json!({"door": "closed"});
    let reused = tool("operation.execute", changed).await;
    assert_eq!(reused["result"]["_meta"]["writ/reason"], "IDEMPOTENCY_KEY_REUSED", "{reused}");
    let (code, out, err) = dev.cli(&["audit", "list", "--tenant", "demo", "--domain", "retention"]);
    assert!(code == 0 && out.contains("operations_compacted"), "retention is audited: {out}{err}");
    assert!(out.contains("works_retired"), "{out}");

    // 31 days on: the deleted tenant is purged, and its name is free again.
    let node_status = |dev: &DevProcess| -> Value {
        let (code, out, err) = dev.cli(&["cluster", "status", "-o", "json"]);
        assert_eq!(code, 0, "{err}");
        serde_json::from_str::<Value>(&out).expect("cluster status")["members"][0]["status"].clone()
    };
    let before = node_status(&dev);
    assert_eq!(before["event_floor"], 1, "nothing is a week old yet: {before}");
    dev.restart(&["--ledger-clock-ahead-s", &(31 * 24 * 3600).to_string()]).await;
    let (code, out, err) = dev.cli(&["tenant", "purge", "leaving"]);
    assert_eq!(code, 0, "{out}{err}");
    let (code, _, err) = dev.cli(&["tenant", "show", "leaving"]);
    assert!(code == 1 && err.contains("TENANT_NOT_FOUND"), "{err}");
    assert_eq!(dev.cli(&["tenant", "create", "leaving"]).0, 0, "the name is free again");
    // The event log keeps a week of ledger time: every event from before is gone from it.
    let revision = before["revision"].as_u64().expect("a revision");
    writ_tests::eventually("the event log trimmed", Duration::from_secs(30), || async {
        (node_status(&dev)["event_floor"].as_u64() > Some(revision)).then_some(())
    })
    .await;
    // And the binding is released (48 h after the operation finished): the key is free.
    writ_tests::eventually("the binding released", Duration::from_secs(30), || async {
        (storage(&dev)["bindings"].as_u64() == Some(0)).then_some(())
    })
    .await;
}
