//! `writ-loadtest` smoke (SPEC T1, T2): a few seconds of mixed agent load through both edges of
//! a `deploy/local-cluster.sh` cluster, then `--verify` from the ledger; a backup taken under
//! that load and restored into a new cluster (SPEC L10); and the etcd driver against a
//! one-member etcd. Figures come from `make bench`, never from here.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;
use writ_tests::procs::{free_port, writ_bin, ScriptCluster};

fn loadtest_bin() -> PathBuf {
    writ_bin().with_file_name("writ-loadtest")
}

fn run_loadtest(envs: &BTreeMap<String, String>, args: &[&str], json: &Path) -> (i32, Value, String) {
    let out =
        Command::new(loadtest_bin()).args(args).arg("--json").arg(json).envs(envs).output().expect("run writ-loadtest");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    let summary = std::fs::read_to_string(json).ok().and_then(|t| serde_json::from_str(&t).ok()).unwrap_or(Value::Null);
    (out.status.code().unwrap_or(-1), summary, text)
}

#[test]
fn mixed_load_through_both_edges_verifies_every_invariant() {
    let cluster = ScriptCluster::up();
    let env = cluster.env();
    let work = tempfile::tempdir().expect("tempdir");
    let json = work.path().join("summary.json");
    let work_dir = work.path().join("executors");
    let (code, s, text) = run_loadtest(
        &env,
        &[
            "writ",
            "--duration",
            "5",
            "--concurrency",
            "8",
            "--mix",
            "execute=6,discover=1,read=1,propose=1,readback=1",
            "--duplicate-share",
            "0.15",
            "--changed-share",
            "0.05",
            "--device-share",
            "0.3",
            // Low enough to be reached in seconds: the refusals must show and never overshoot.
            "--operations-per-minute",
            "20",
            "--kill-after",
            "1",
            "--kill-cmd",
            "true",
            "--watch-pids",
            &env["WRIT_NODE_PIDS"],
            "--verify",
            "--drain",
            "60",
            "--work-dir",
            work_dir.to_str().expect("utf-8 path"),
        ],
        &json,
    );
    assert_eq!(code, 0, "writ-loadtest failed:\n{text}");
    assert!(text.contains("verify: PASSED"), "{text}");
    let v = &s["verify"];
    assert!(v["checks"].as_array().expect("checks").len() >= 9, "{v}");
    for c in v["checks"].as_array().expect("checks") {
        assert_eq!(c["ok"], true, "{c}");
    }
    assert_eq!(v["acknowledged_lost"], 0);
    // Every kind of request ran, through the real edges.
    for kind in ["execute", "discover", "read", "propose"] {
        assert!(s["kinds"][kind]["ok"].as_u64().unwrap_or(0) > 0, "no successful {kind}:\n{text}");
    }
    assert!(s["kinds"]["execute_retry"]["ok"].as_u64().unwrap_or(0) > 0, "no retry:\n{text}");
    assert!(s["kinds"]["execute_changed"]["ok"].as_u64().unwrap_or(0) > 0, "no changed payload refused:\n{text}");
    // The only refusals are the quota's and a busy device's (reservations do not queue).
    let errors = s["errors"].as_object().expect("errors");
    assert!(errors.keys().all(|k| k == "QUOTA_EXCEEDED" || k == "DEVICE_RESERVED"), "unexpected errors: {errors:?}");
    assert!(
        errors.get("QUOTA_EXCEEDED").and_then(Value::as_u64).unwrap_or(0) > 0,
        "the quota was never reached:\n{text}"
    );
    let acked = s["verify"]["states"].as_object().expect("states").values().filter_map(Value::as_u64).sum::<u64>();
    assert!(acked > 0 && acked <= 40, "{acked} operations acknowledged under a quota of 20 per minute");
    // The summary carries the machine, the watched nodes and the fault.
    assert!(s["latency_ms"]["p99"].as_f64().unwrap_or(0.0) > 0.0);
    assert!(s["servers"]["rss_mb"].as_f64().unwrap_or(0.0) > 0.0, "{}", s["servers"]);
    assert_eq!(s["failover"]["killed_at_ms"].as_u64().map(|ms| ms >= 1000), Some(true));
    assert!(s["machine"]["cpus"].as_u64().unwrap_or(0) >= 1);

    // Two short runs of 2 clients for 2 s, reusing the executors' directory.
    let work = work_dir.to_str().expect("utf-8 path");
    let short = |args: &[&str]| {
        let mut all = vec!["writ", "--duration", "2", "--concurrency", "2", "--work-dir", work];
        all.extend_from_slice(args);
        run_loadtest(&env, &all, &json)
    };
    // The second run reuses the tenant and its enrolled executor.
    let (code, s, text) = short(&["--mix", "read=1"]);
    assert_eq!(code, 0, "{text}");
    assert!(s["kinds"]["read"]["ok"].as_u64().unwrap_or(0) > 0, "{text}");

    // A tenant whose create was applied but whose answer was lost (a leader change) has
    // nothing else: a run that finds it gets its catalog and agent made.
    let ca = Path::new(&env["WRIT_CA_FILE"]);
    let created = writ_tests::procs::run_cli_as(
        &env["WRIT_ADMIN_URL"],
        &env["WRIT_ADMIN_TOKEN"],
        ca,
        &["tenant", "create", "half-0"],
    );
    assert_eq!(created.0, 0, "{created:?}");
    let (code, s, text) = short(&["--mix", "execute=1", "--prefix", "half", "--no-camera"]);
    assert_eq!(code, 0, "{text}");
    assert!(s["kinds"]["execute"]["ok"].as_u64().unwrap_or(0) > 0, "{text}");

    // Executes that wait for their effect report count only when they saw it; the executor
    // the run started is measured with the servers.
    let (code, s, text) =
        short(&["--mix", "execute=1", "--wait-s", "20", "--prefix", "waited", "--no-camera", "--verify"]);
    assert_eq!(code, 0, "{text}");
    assert!(s["kinds"]["execute"]["ok"].as_u64().unwrap_or(0) > 0, "{text}");
    assert_eq!(s["errors"], serde_json::json!({}), "{text}");
    assert_eq!(s["setup"]["wait_s"], 20);
    assert_eq!(s["servers"]["pids"].as_array().map(Vec::len), Some(1), "the executor: {}", s["servers"]);
    assert!(s["servers"]["pss_mb"].as_f64().unwrap_or(0.0) > 0.0, "{}", s["servers"]);
    let config = std::fs::read_to_string(work_dir.join("waited-0/executor.toml")).expect("executor config");
    assert!(config.contains("\ncamera = false\n"), "{config}");
}

#[test]
fn bad_arguments_and_an_unreachable_cluster_are_reported() {
    let nowhere = "http://127.0.0.1:1";
    let run = |args: &[&str]| {
        Command::new(loadtest_bin())
            .args(args)
            .env("WRIT_NODE_URLS", nowhere)
            .env("WRIT_ADMIN_TOKEN", "t")
            .env("WRIT_MCP_URLS", format!("{nowhere}/mcp"))
            .env("WRIT_MCP_URL", format!("{nowhere}/mcp"))
            .output()
            .expect("run writ-loadtest")
    };
    let out = run(&["writ", "--mix", "delete=1"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown request kind 'delete'"));
    let out = run(&["writ", "--duration", "1"]);
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("127.0.0.1:1"), "the error names the node");
}

#[test]
fn etcd_driver_writes_put_if_absent_and_reads_every_key_back() {
    let etcd = which("etcd").expect("etcd is installed by `make test` (Debian etcd-server)");
    let dir = tempfile::tempdir().expect("tempdir");
    let (client, peer) = (free_port(), free_port());
    let mut child = Command::new(etcd)
        .args(["--name", "one", "--log-level", "error"])
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .args(["--listen-client-urls", &format!("http://127.0.0.1:{client}")])
        .args(["--advertise-client-urls", &format!("http://127.0.0.1:{client}")])
        .args(["--listen-peer-urls", &format!("http://127.0.0.1:{peer}")])
        .args(["--initial-advertise-peer-urls", &format!("http://127.0.0.1:{peer}")])
        .args(["--initial-cluster", &format!("one=http://127.0.0.1:{peer}")])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start etcd");
    let url = format!("http://127.0.0.1:{client}");
    let ready = (0..100).any(|_| {
        std::thread::sleep(std::time::Duration::from_millis(100));
        std::net::TcpStream::connect(("127.0.0.1", client)).is_ok()
    });
    assert!(ready, "etcd did not listen");
    let json = dir.path().join("etcd.json");
    let envs = BTreeMap::from([("WRIT_ETCD_URLS".to_string(), url)]);
    let (code, s, text) = run_loadtest(&envs, &["etcd", "--duration", "2", "--concurrency", "4", "--verify"], &json);
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(code, 0, "{text}");
    assert!(s["kinds"]["txn"]["ok"].as_u64().unwrap_or(0) > 0, "{text}");
    assert_eq!(s["verify"]["acknowledged_lost"], 0, "{text}");
    assert!(text.contains("every acknowledged key is in etcd"), "{text}");
}

fn which(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")?.to_str()?.split(':').map(|d| Path::new(d).join(name)).find(|p| p.exists())
}

/// The ids of the operations `tenant` recorded before ledger time `until_ms`, through the CLI.
fn operations_before(
    url: &str,
    token: &str,
    ca: &Path,
    tenant: &str,
    until_ms: u64,
) -> std::collections::BTreeSet<String> {
    let mut ids = std::collections::BTreeSet::new();
    let mut after: Option<String> = None;
    loop {
        let until = until_ms.to_string();
        let mut args =
            vec!["operation", "list", "--tenant", tenant, "--until-ms", &until, "--limit", "1000", "-o", "json"];
        if let Some(a) = after.as_deref() {
            args.extend(["--after", a]);
        }
        let (code, out, err) = writ_tests::procs::run_cli_as(url, token, ca, &args);
        assert_eq!(code, 0, "{err}");
        let page: Value = serde_json::from_str(&out).expect("a page");
        ids.extend(
            page["operations"]
                .as_array()
                .expect("operations")
                .iter()
                .filter_map(|o| o["spec"]["operation_id"].as_str().map(str::to_string)),
        );
        match page["next_cursor"].as_str() {
            Some(next) => after = Some(next.to_string()),
            None => return ids,
        }
    }
}

/// Issue 18, must show 3: `writ admin backup` taken while `writ-loadtest` drives agents through
/// both edges of a 3-node cluster, then `writ node restore` founds a new 3-node cluster from it:
/// every operation recorded before the backup point is there (the same set), the load's own
/// verification passes, and the new cluster's members agree on one digest.
#[test]
fn a_backup_under_loadtest_load_restores_every_operation_recorded_before_it() {
    let cluster = ScriptCluster::up();
    let env = cluster.env();
    let work = tempfile::tempdir().expect("tempdir");
    let json = work.path().join("summary.json");
    let work_dir = work.path().join("executors");
    let load = Command::new(loadtest_bin())
        .args([
            "writ",
            "--duration",
            "8",
            "--concurrency",
            "8",
            "--mix",
            "execute=6,read=1,readback=1",
            "--verify",
            "--drain",
            "60",
        ])
        .arg("--work-dir")
        .arg(&work_dir)
        .arg("--json")
        .arg(&json)
        .envs(&env)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run writ-loadtest");
    let (url, token, ca) = (&env["WRIT_ADMIN_URL"], &env["WRIT_ADMIN_TOKEN"], Path::new(&env["WRIT_CA_FILE"]));
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    // Once operations are being recorded, the backup is taken in the middle of the load.
    runtime.block_on(writ_tests::eventually("operations under load", std::time::Duration::from_secs(60), || async {
        let args = ["operation", "list", "--tenant", "lt-0", "--limit", "50", "-o", "json"];
        let (code, out, _) = writ_tests::procs::run_cli_as(url, token, ca, &args);
        let page: Value = serde_json::from_str(&out).ok()?;
        (code == 0 && page["operations"].as_array()?.len() >= 50).then_some(())
    }));
    let file = work.path().join("ledger.backup");
    let (code, out, err) =
        writ_tests::procs::run_cli_as(url, token, ca, &["backup", "--out", file.to_str().unwrap(), "-o", "json"]);
    assert_eq!(code, 0, "{out}{err}");
    let summary: Value = serde_json::from_str(&out).expect("summary");
    let load = load.wait_with_output().expect("writ-loadtest");
    let text = format!("{}{}", String::from_utf8_lossy(&load.stdout), String::from_utf8_lossy(&load.stderr));
    assert!(load.status.success() && text.contains("verify: PASSED"), "{text}");
    let point = summary["manifest"]["clock_ms"].as_u64().expect("the backup's ledger time");
    let before = operations_before(url, token, ca, "lt-0", point);
    assert!(before.len() >= 50, "{} operations before the backup", before.len());
    eprintln!("backup under load: {} operations recorded before it; {summary}", before.len());

    runtime.block_on(async {
        let fresh = writ_tests::procs::Cluster::start_with(3, |node| {
            if node.id == 1 {
                let (code, out, err) = writ_tests::procs::restore_node(&file, &node.dir.join("data"));
                assert_eq!(code, 0, "{out}{err}");
            }
        })
        .await;
        fresh.converged(std::time::Duration::from_secs(60)).await;
        let restored = operations_before(
            &fresh.nodes[2].url(),
            writ_tests::procs::TEST_OPERATOR_TOKEN,
            &writ_tests::pki::ca_file(),
            "lt-0",
            point,
        );
        assert_eq!(restored, before, "the operations recorded before the backup point");
    });
}
