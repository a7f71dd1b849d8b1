//! Catalog publication (SPEC D4, issue 3 "must show" 4) through the admin API and CLI of a
//! real node: precise rejections, versions, and a digest that depends only on the content.

use serde_json::{json, Value};
use writ_tests::procs::{run_cli, single_node, Admin};

fn action(id: &str, input: Value) -> Value {
    json!({"id": id, "title": format!("Action {id}"), "input_schema": input, "risk": "low", "execution": "read"})
}

fn obj() -> Value {
    json!({"type": "object", "properties": {"n": {"type": "integer"}}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publish_checks_versions_and_digests() {
    let (node, dir) = single_node().await;
    let url = node.url.clone();
    let admin = Admin::new();
    let mut tenants = Vec::new();
    for name in ["cat-a", "cat-b"] {
        let (code, t) = admin.post(&url, "/v1/tenants", json!({"name": name})).await.unwrap();
        assert_eq!(code, 201, "{t}");
        tenants.push(t["id"].as_str().unwrap().to_string());
    }
    let path = |t: &str| format!("/v1/tenants/{t}/catalogs");
    let catalog = json!({"actions": [action("read_temp", obj()), action("list_jobs", json!({"type": "object", "$defs": {"id": {"type": "string"}}, "properties": {"job": {"$ref": "#/$defs/id"}}}))]});
    let (code, v1) = admin.post(&url, &path(&tenants[0]), catalog.clone()).await.unwrap();
    assert_eq!(code, 201, "{v1}");
    assert_eq!(v1["version"], 1);
    assert_eq!(v1["catalog"]["actions"][0]["id"], "list_jobs", "deterministic order");
    // The same content again (other order): no new version, same digest — also in another tenant.
    let reordered = json!({"actions": [catalog["actions"][1].clone(), catalog["actions"][0].clone()]});
    let (code, again) = admin.post(&url, &path(&tenants[0]), reordered.clone()).await.unwrap();
    assert_eq!((code, &again["version"], &again["catalog"]["digest"]), (200, &json!(1), &v1["catalog"]["digest"]));
    let (code, other) = admin.post(&url, &path(&tenants[1]), reordered).await.unwrap();
    assert_eq!((code, &other["catalog"]["digest"]), (201, &v1["catalog"]["digest"]));
    // A change is a new version with a new digest.
    let changed = json!({"actions": [action("read_temp", obj())]});
    let (code, v2) = admin.post(&url, &path(&tenants[0]), changed).await.unwrap();
    assert_eq!((code, &v2["version"]), (201, &json!(2)));
    assert_ne!(v2["catalog"]["digest"], v1["catalog"]["digest"]);

    // Each failure has its own reason, and nothing is published.
    let cases = [
        (
            json!({"actions": [action("a", json!({"type": "object", "properties": {"x": {"$ref": "https://schemas.example/x.json"}}}))]}),
            400,
            "CATALOG_REF_REMOTE",
        ),
        (
            json!({"actions": [action("a", json!({"type": "object", "properties": {"x": {"$ref": "#/$defs/nope"}}}))]}),
            400,
            "CATALOG_REF_UNRESOLVED",
        ),
        (json!({"actions": [action("a", obj()), action("a", obj())]}), 400, "CATALOG_DUPLICATE_ACTION"),
        (json!({"actions": [action("a", json!({"type": "object", "maxLength": -1}))]}), 400, "CATALOG_SCHEMA_INVALID"),
        (json!({"actions": [action("a", obj())], "unexpected": true}), 400, "CATALOG_INVALID"),
    ];
    for (doc, status, reason) in cases {
        let (code, body) = admin.post(&url, &path(&tenants[0]), doc).await.unwrap();
        assert_eq!((code, body["reason"].as_str()), (status, Some(reason)), "{body}");
    }
    let long = "x".repeat(3000);
    let big: Vec<Value> =
        (0..500).map(|i| action(&format!("a{i}"), json!({"type": "object", "description": long}))).collect();
    let (code, body) = admin.post(&url, &path(&tenants[0]), json!({"actions": big})).await.unwrap();
    assert_eq!((code, body["reason"].as_str()), (413, Some("CATALOG_TOO_LARGE")), "{}", body["message"]);
    let huge: Vec<Value> =
        (0..1500).map(|i| action(&format!("a{i}"), json!({"type": "object", "description": long}))).collect();
    let (code, body) = admin.post(&url, &path(&tenants[0]), json!({"actions": huge})).await.unwrap();
    assert_eq!((code, body["reason"].as_str()), (413, Some("CATALOG_TOO_LARGE")), "{}", body["message"]);
    let latest = admin.get(&url, &format!("{}/latest", path(&tenants[0]))).await.unwrap();
    assert_eq!(latest["version"], 2, "rejected publications leave the catalog alone");

    // The CLI publishes YAML and lists versions.
    let yaml = dir.path().join("catalog.yaml");
    std::fs::write(
        &yaml,
        "actions:\n  - id: move_arm\n    title: Move the arm\n    risk: high\n    execution: operation\n    device_class: robot-arm.v2\n    dry_run: true\n    input_schema:\n      type: object\n      required: [x]\n      properties:\n        x: {type: number}\n",
    )
    .unwrap();
    let (code, out, err) = run_cli(&url, &["catalog", "publish", "--tenant", "cat-a", yaml.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("move_arm") && out.contains("tools:call:move_arm"), "{out}");
    let (code, out, _) = run_cli(&url, &["catalog", "list", "--tenant", "cat-a", "-o", "json"]);
    assert_eq!(code, 0);
    let list: Value = serde_json::from_str(&out).unwrap();
    let versions: Vec<u64> =
        list["catalogs"].as_array().unwrap().iter().map(|c| c["version"].as_u64().unwrap()).collect();
    assert_eq!(versions, vec![3, 2, 1]);
    let (code, _, err) = run_cli(&url, &["catalog", "show", "--tenant", "cat-a", "9"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("CATALOG_NOT_FOUND"), "{err}");
    // Issue 21: what changed between versions — v1 → v2 dropped list_jobs; v2 → v3 (the newest)
    // replaced read_temp by move_arm; v1 → v1 is no change.
    let (code, out, err) = run_cli(&url, &["catalog", "diff", "--tenant", "cat-a", "1", "2", "-o", "json"]);
    assert_eq!(code, 0, "{err}");
    let diff: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(diff, json!({"from": 1, "to": 2, "added": [], "removed": ["list_jobs"], "changed": []}));
    let (code, out, err) = run_cli(&url, &["catalog", "diff", "--tenant", "cat-a", "2"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("version 2 → 3") && out.contains("move_arm") && out.contains("added"), "{out}");
    assert!(out.contains("read_temp") && out.contains("removed"), "{out}");
    let same = admin.get(&url, &format!("{}/1/diff/1", path(&tenants[0]))).await.unwrap();
    assert_eq!(same["changed"], json!([]), "{same}");
    let (code, _, err) = run_cli(&url, &["catalog", "diff", "--tenant", "cat-a", "9"]);
    assert!(code == 1 && err.contains("CATALOG_NOT_FOUND"), "{err}");
    node.shutdown().await;
}
