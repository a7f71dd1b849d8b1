//! Writ across hosts (SPEC H1, issue "multi-host", must show 1): `deploy/netns-cluster.sh`
//! puts 3 nodes, 2 edges and an executor in network namespaces of their own, each with its own
//! address on a bridge, TLS everywhere and non-loopback binds. From the root namespace: the
//! Python MCP SDK through an edge's HTTPS URL with certificate verification, and
//! `writ-loadtest --verify` while partitions are made inside the namespaces (the leader
//! isolated; an edge cut from every node, which then fails closed; an asymmetric cut), its
//! invariants holding and the nodes' digests equal after each heal. Only namespaces this test
//! created are touched, and all of them are removed at the end.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::Value;
use writ_tests::eventually;
use writ_tests::procs::writ_bin;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The cluster of one test run: a prefix and subnet of its own; `down` on drop.
struct NetnsCluster {
    prefix: String,
    subnet: String,
    dir: tempfile::TempDir,
}

impl NetnsCluster {
    fn script(&self, args: &[&str]) -> (bool, String) {
        let out = Command::new(root().join("deploy/netns-cluster.sh"))
            .args(args)
            .env("WRIT_NETNS_PREFIX", &self.prefix)
            .env("WRIT_NETNS_SUBNET", &self.subnet)
            .env("WRIT_NETNS_DIR", self.dir.path())
            .env("WRIT_BIN", writ_bin())
            .output()
            .expect("deploy/netns-cluster.sh runs");
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        (out.status.success(), text)
    }

    fn up() -> NetnsCluster {
        let pid = std::process::id();
        let cluster = NetnsCluster {
            prefix: format!("wt{}", pid % 100_000),
            subnet: format!("10.{}.{}", 200 + pid % 50, (pid / 50) % 250),
            dir: tempfile::tempdir().expect("dir"),
        };
        let (ok, out) = cluster.script(&["up"]);
        assert!(
            ok,
            "netns-cluster.sh up (needs root and iproute2; `make deps` installs iproute2):\n{out}\n{}",
            cluster.logs()
        );
        cluster
    }

    fn env(&self) -> std::collections::BTreeMap<String, String> {
        let text = std::fs::read_to_string(self.dir.path().join("env")).expect("env file");
        text.lines()
            .filter_map(|l| l.strip_prefix("export ")?.split_once('='))
            .map(|(k, v)| (k.to_string(), v.trim_matches('"').to_string()))
            .collect()
    }

    fn addr(&self, host: &str) -> String {
        let (kind, n) = host.split_at(1);
        let octet = match kind {
            "n" => 10,
            "e" => 20,
            _ => 30,
        } + n.parse::<u32>().unwrap();
        format!("{}.{octet}", self.subnet)
    }

    fn admin(&self, args: &[&str]) -> (bool, String) {
        let env = self.env();
        let out = Command::new(writ_bin())
            .arg("admin")
            .args(args)
            .env("WRIT_ADMIN_URL", &env["WRIT_ADMIN_URL"])
            .env("WRIT_ADMIN_TOKEN", &env["WRIT_ADMIN_TOKEN"])
            .env("WRIT_CA_FILE", &env["WRIT_CA_FILE"])
            .output()
            .expect("writ admin");
        (
            out.status.success(),
            format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)),
        )
    }

    fn logs(&self) -> String {
        let mut all = String::new();
        for h in ["n1", "n2", "n3", "e1", "e2", "x1"] {
            for name in ["node.log", "edge.log", "executor.log"] {
                if let Ok(text) = std::fs::read_to_string(self.dir.path().join(h).join(name)) {
                    let tail: Vec<&str> = text.lines().rev().take(15).collect();
                    all +=
                        &format!("---- {h}/{name} ----\n{}\n", tail.into_iter().rev().collect::<Vec<_>>().join("\n"));
                }
            }
        }
        all
    }

    /// Every node reports the same applied index and state digest (asked through the admin API).
    async fn converged(&self) -> (u64, String) {
        eventually("the three nodes at one applied index and digest", Duration::from_secs(60), || async {
            let (ok, out) = self.admin(&["cluster", "status", "-o", "json"]);
            let v: Value = serde_json::from_str(ok.then_some(out)?.as_str()).ok()?;
            let seen: Vec<(u64, String)> = v["members"]
                .as_array()?
                .iter()
                .map(|m| {
                    Some((
                        m["status"]["last_applied_index"].as_u64()?,
                        m["status"]["state_digest"].as_str()?.to_string(),
                    ))
                })
                .collect::<Option<_>>()?;
            (seen.len() == 3 && seen.iter().all(|s| *s == seen[0])).then(|| seen[0].clone())
        })
        .await
    }

    /// `writ-loadtest writ --verify` for `duration_s` from the root namespace through both HTTPS
    /// edges, running `fault` (a shell command) 3 s in; returns its JSON summary.
    fn load_with_fault(&self, label: &str, duration_s: u32, fault: &str) -> Value {
        let env = self.env();
        let json = self.dir.path().join(format!("{label}.json"));
        let out = Command::new(writ_bin().with_file_name("writ-loadtest"))
            .args(["writ", "--duration", &duration_s.to_string()])
            .args(["--concurrency", "6", "--verify", "--quiet", "--audience", "urn:writ:mcp"])
            .args(["--admin-urls", &env["WRIT_NODE_URLS"], "--edges", &env["WRIT_MCP_URLS"]])
            .args(["--executor-urls", &env["WRIT_EXECUTOR_URLS"], "--prefix", label, "--kill-after", "3"])
            .args(["--kill-cmd", fault, "--writ-bin"])
            .arg(writ_bin())
            .arg("--work-dir")
            .arg(self.dir.path().join("loadtest"))
            .arg("--json")
            .arg(&json)
            .env("WRIT_ADMIN_TOKEN", &env["WRIT_ADMIN_TOKEN"])
            .env("WRIT_CA_FILE", &env["WRIT_CA_FILE"])
            .env("WRIT_NETNS_PREFIX", &self.prefix)
            .env("WRIT_NETNS_SUBNET", &self.subnet)
            .env("WRIT_NETNS_DIR", self.dir.path())
            .env("WRIT_BIN", writ_bin())
            .current_dir(root())
            .output()
            .expect("writ-loadtest runs");
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success(), "{label}: writ-loadtest --verify failed:\n{text}\n{}", self.logs());
        eprintln!("{label}:\n{text}");
        let summary: Value = serde_json::from_slice(&std::fs::read(&json).expect("summary")).expect("summary JSON");
        let checks = summary["verify"]["checks"].as_array().expect("verify checks");
        assert!(checks.iter().all(|c| c["ok"] == true), "{label}: {checks:?}");
        assert_eq!(summary["verify"]["acknowledged_lost"], 0, "{label}");
        assert!(summary["ok"].as_u64().unwrap_or(0) > 0, "{label}: nothing succeeded: {text}");
        summary
    }
}

impl Drop for NetnsCluster {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("{}", self.logs());
        }
        let (ok, out) = self.script(&["down"]);
        if !ok {
            eprintln!("netns-cluster.sh down: {out}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_across_network_namespaces_survives_partitions() {
    let cluster = NetnsCluster::up();
    let env = cluster.env();
    let mcp: Vec<&str> = env["WRIT_MCP_URLS"].split(' ').collect();
    assert_eq!(mcp.len(), 2);
    for url in &mcp {
        assert!(url.starts_with(&format!("https://{}.", cluster.subnet)), "non-loopback HTTPS edges: {url}");
    }
    let (ok, status) = cluster.script(&["status"]);
    assert!(ok && status.lines().filter(|l| l.contains("running")).count() == 6, "{status}");

    // The Python SDK through each edge's HTTPS URL, verifying against the cluster CA only.
    let (ok, out) = cluster.admin(&[
        "principal",
        "create",
        "--tenant",
        "netns-site",
        "agent",
        "--kind",
        "agent",
        "--preset",
        "full",
    ]);
    assert!(ok, "{out}");
    let (ok, out) = cluster.admin(&["token", "issue", "--tenant", "netns-site", "agent", "-o", "json"]);
    assert!(ok, "{out}");
    let token = serde_json::from_str::<Value>(&out).unwrap()["token"].as_str().unwrap().to_string();
    let script = root().join("tests/python/mcp_https.py");
    for url in &mcp {
        let out = Command::new("python3")
            .arg(&script)
            .args([*url, token.as_str(), env["WRIT_CA_FILE"].as_str()])
            .output()
            .unwrap();
        assert!(out.status.success(), "{url}: {}", String::from_utf8_lossy(&out.stderr));
        let report: Value = serde_json::from_slice(&out.stdout).unwrap();
        let tools: Vec<&str> = report["tools"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
        assert!(tools.contains(&"operation.execute"), "{report}");
    }
    // Verification is real: the system's roots do not vouch for the edge's certificate.
    let out = Command::new("python3")
        .arg(&script)
        .args([mcp[0], token.as_str(), "/etc/ssl/certs/ca-certificates.crt"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("CERTIFICATE_VERIFY_FAILED"));
    let before = cluster.converged().await;

    // 1. The leader isolated from every host for 4 s: a new leader, nothing acknowledged lost.
    let script = root().join("deploy/netns-cluster.sh").display().to_string();
    let leader =
        cluster.load_with_fault("leader", 12, &format!("{script} partition leader && sleep 4 && {script} heal"));
    eprintln!("leader isolated: failover {}", leader["failover"]);
    let after_leader = cluster.converged().await;
    assert!(after_leader.0 > before.0);

    // 2. Edge 1 cut from every node: it fails closed (its readiness turns 503: no current replica,
    // so it serves no authenticated request) while edge 2 keeps serving.
    let closed = cluster.dir.path().join("e1-closed");
    let probe = format!("http://{}:9101/readyz", cluster.addr("e1"));
    let fault = format!(
        "{script} partition edge 1 && for i in $(seq 80); do \
           [ \"$(curl -s -o /dev/null -w '%{{http_code}}' -m 1 {probe})\" = 503 ] && touch {closed} && break; sleep 0.25; done; \
         {script} heal",
        closed = closed.display()
    );
    let edge = cluster.load_with_fault("edge", 12, &fault);
    assert!(closed.exists(), "edge 1 did not fail closed while cut from the nodes: {}", edge["errors"]);
    cluster.converged().await;
    eventually("edge 1 ready again after the heal", Duration::from_secs(30), || async {
        let r = reqwest::Client::new().get(&probe).send().await.ok()?;
        r.status().is_success().then_some(())
    })
    .await;

    // 3. An asymmetric cut: the leader can no longer send to one follower (which still reaches it).
    let (ok, out) = cluster.admin(&["cluster", "status", "-o", "json"]);
    assert!(ok, "{out}");
    let leader_id = serde_json::from_str::<Value>(&out).unwrap()["leader"].as_u64().expect("a leader");
    let follower = (1..=3).find(|i| *i != leader_id).unwrap();
    let asym = cluster.load_with_fault(
        "asym",
        12,
        &format!("{script} partition asym n{leader_id} n{follower} && sleep 4 && {script} heal"),
    );
    eprintln!("asymmetric cut: failover {}", asym["failover"]);
    cluster.converged().await;

    // 4. A rolling restart of all three nodes and both edges (SIGTERM: a leader hands over,
    // listeners drain; then the same process starts again), one after another, under load.
    let rolling = cluster.load_with_fault("rolling", 45, &format!("{script} rolling"));
    eprintln!("rolling restart: {} ok, {} errors, failover {}", rolling["ok"], rolling["errors"], rolling["failover"]);
    assert!(rolling["failover"]["longest_error_window_ms"].is_u64(), "{}", rolling["failover"]);
    let (index, digest) = cluster.converged().await;
    eprintln!("converged at index {index}, digest {digest}");

    // Torn down: no namespace of this run is left.
    let prefix = cluster.prefix.clone();
    drop(cluster);
    let list = Command::new("ip").args(["netns", "list"]).output().unwrap();
    assert!(!String::from_utf8_lossy(&list.stdout).contains(&format!("{prefix}-")), "namespaces left behind");
}
