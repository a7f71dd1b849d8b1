//! A real Prometheus server (Debian `prometheus`, installed by `make test`) scrapes a `writ dev`
//! (issue 19): the histograms Writ exports aggregate in PromQL, and
//! `histogram_quantile(0.99, …)` over the scraped `writ_edge_request_seconds` buckets returns a
//! sane p99 for requests the test made, and every query of the dashboards that ship returns
//! data. The alert rules pass `promtool`'s check and their unit tests.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{json, Value};
use writ_tests::procs::{free_port, DevProcess};

/// Kills the Prometheus server when the test ends, however it ends.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_prometheus_scrapes_writ_and_computes_a_p99_from_its_histograms() {
    let dev = DevProcess::start(&[]).await;
    let (admin_url, mcp, token) = (dev.var("WRIT_ADMIN_URL"), dev.var("WRIT_MCP_URL"), dev.var("WRIT_DEMO_TOKEN"));
    let target = admin_url.trim_start_matches("https://").trim_end_matches('/').to_string();
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("prometheus.yml");
    // The node (its admin listener) and the edge (`/metrics` beside `/mcp`), as a deployment
    // scrapes both roles.
    let (edge_scheme, edge_rest) = mcp.split_once("://").expect("the edge's URL");
    let edge_target = edge_rest.trim_end_matches("/mcp");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: writ\n    scheme: https\n    \
             tls_config:\n      ca_file: {ca}\n    static_configs:\n      - targets: ['{target}']\n  \
             - job_name: writ-edge\n    scheme: {edge_scheme}\n    tls_config:\n      ca_file: {ca}\n    \
             static_configs:\n      - targets: ['{edge_target}']\n",
            ca = dev.var("WRIT_CA_FILE"),
        ),
    )
    .expect("prometheus.yml");
    // Prometheus cannot report a port it picked itself: give it a free one.
    let web = format!("127.0.0.1:{}", free_port());
    let log = std::fs::File::create(dir.path().join("prometheus.log")).expect("log");
    let _prometheus = Killed(
        Command::new("prometheus")
            .arg(format!("--config.file={}", config.display()))
            .arg(format!("--storage.tsdb.path={}", dir.path().join("data").display()))
            .arg(format!("--web.listen-address={web}"))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("prometheus (installed by `make test`: Debian package `prometheus`)"),
    );
    let http = reqwest::Client::builder().no_proxy().build().expect("http");
    let query = |promql: String| {
        let (http, web) = (http.clone(), web.clone());
        async move {
            let url =
                reqwest::Url::parse_with_params(&format!("http://{web}/api/v1/query"), &[("query", promql)]).ok()?;
            let r = http.get(url).send().await.ok()?;
            r.json::<Value>().await.ok()
        }
    };
    writ_tests::eventually("Prometheus scraping writ dev", Duration::from_secs(60), || async {
        let up = query("up{job=\"writ\"}".into()).await?;
        (up["data"]["result"][0]["value"][1] == "1").then_some(())
    })
    .await;
    // Requests through the edge, while Prometheus scrapes, until the p99 over its buckets exists.
    let p99 = "histogram_quantile(0.99, sum by (le) (rate(writ_edge_request_seconds_bucket[30s])))";
    let answer = writ_tests::eventually("a p99 from the scraped histogram", Duration::from_secs(60), || async {
        for _ in 0..20 {
            let (status, _, _) = writ_tests::mcp::rpc(mcp, Some(token), "tools/list", json!({})).await;
            assert_eq!(status, 200);
        }
        let r = query(p99.to_string()).await?;
        let value: f64 = r["data"]["result"][0]["value"][1].as_str()?.parse().ok()?;
        value.is_finite().then_some(value)
    })
    .await;
    assert!(answer > 0.0 && answer < 10.0, "a sane p99 in seconds: {answer}");
    // The edge's request counter is there too, with its bounded method label.
    let methods = query("sum by (method) (writ_edge_requests_total)".into()).await.expect("query");
    let listed =
        methods["data"]["result"].as_array().expect("result").iter().any(|r| r["metric"]["method"] == "tools/list");
    assert!(listed, "{methods}");
    // Every panel of the dashboards that ship (deploy/grafana) returns data for a `writ dev`
    // that served a read of the press (an operation its executor performed).
    let (_, _, read) = writ_tests::mcp::rpc(mcp, Some(token), "tools/call", json!({"name": "read_press"})).await;
    assert!(read["result"]["_meta"]["writ/operation"].is_object(), "{read}");
    for (dashboard, panel, expr) in writ_tests::dashboard_queries() {
        let (dashboard, panel, expr) = (&dashboard, &panel, &expr);
        let what = format!("{dashboard} / {panel}: {expr}");
        writ_tests::eventually(&format!("data for {what}"), Duration::from_secs(60), || async move {
            let r = query(expr.clone()).await?;
            assert_eq!(r["status"], "success", "{dashboard} / {panel}: {r}");
            r["data"]["result"].as_array().is_some_and(|rows| !rows.is_empty()).then_some(())
        })
        .await;
    }
}

/// The alert rules that ship pass `promtool check rules`, and their unit tests (series that
/// fire each alert and series that must not) pass `promtool test rules`.
#[test]
fn the_alert_rules_pass_promtool_and_their_unit_tests() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/prometheus");
    for args in [["check", "rules", "writ-alerts.yml"], ["test", "rules", "writ-alerts.test.yml"]] {
        let out = Command::new("promtool")
            .args(args)
            .current_dir(&dir)
            .output()
            .expect("promtool (installed by `make test`: Debian package `prometheus`)");
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success() && text.contains("SUCCESS"), "promtool {args:?}: {text}");
    }
}
