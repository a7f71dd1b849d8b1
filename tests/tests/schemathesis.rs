//! Schemathesis (issue 3 "must show" 6) against `/v1/openapi.json` of a real node: a bounded,
//! seeded run that must find no 5xx and no response violating the documented schema.
//! `make test` installs the pinned schemathesis (`make pydeps`).

use std::process::Command;

use serde_json::json;
use writ_tests::procs::{single_node, Admin, TEST_OPERATOR_TOKEN};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_api_conforms_to_its_openapi_document() {
    let (node, dir) = single_node().await;
    let url = node.url.clone();
    // The objects the document's path examples name, so that generated calls reach them.
    let admin = Admin::new();
    admin.post_ok(&url, "/v1/tenants", json!({"name": "acme"})).await;
    admin
        .post_ok(&url, "/v1/tenants/acme/principals", json!({"name": "agent-1", "kind": "agent", "preset": "delegate"}))
        .await;
    admin.post_ok(&url, "/v1/tenants/acme/sites", json!({"name": "plant-1"})).await;
    admin
        .post_ok(
            &url,
            "/v1/tenants/acme/devices",
            json!({"name": "press-1", "site": "plant-1", "device_class": "press.v1"}),
        )
        .await;
    let bin = std::env::var("WRIT_SCHEMATHESIS").unwrap_or_else(|_| "schemathesis".into());
    let schema = format!("{url}/v1/openapi.json");
    // Schemathesis keeps a cache in its working directory: keep it out of the checkout.
    let workdir = dir.path().to_path_buf();
    // The node serves TLS from the test CA.
    let ca = writ_tests::pki::ca_file();
    let out = tokio::task::spawn_blocking(move || {
        Command::new(&bin)
            .current_dir(&workdir)
            .args(["run", &schema, "--header", &format!("Authorization: Bearer {TEST_OPERATOR_TOKEN}")])
            .arg("--tls-verify")
            .arg(&ca)
            .args(["--checks", "not_a_server_error,response_schema_conformance"])
            // One worker: with two threads, CPython 3.11.7's `ast.parse` (hypothesis describing a
            // filter lambda) intermittently raises "AST constructor recursion depth mismatch".
            .args(["--phases", "examples,coverage,fuzzing", "--max-examples", "8", "--seed", "1", "--workers", "1"])
            .env("NO_COLOR", "1")
            .output()
            .unwrap_or_else(|e| panic!("cannot run {bin} ({e}); `make test` installs it (make pydeps)"))
    })
    .await
    .expect("join");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "schemathesis found failures:\n{text}");
    assert!(text.contains("passed"), "{text}");
    node.shutdown().await;
}
