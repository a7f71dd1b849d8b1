//! A real Prometheus server (Debian `prometheus`, installed by `make test`) scrapes a `writ dev`
//! (issue 19): the histograms Writ exports aggregate in PromQL, and
//! `histogram_quantile(0.99, …)` over the scraped `writ_edge_request_seconds` buckets returns a
//! sane p99 for requests the test made.

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
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: writ\n    scheme: https\n    \
             tls_config:\n      ca_file: {ca}\n    static_configs:\n      - targets: ['{target}']\n",
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
}
