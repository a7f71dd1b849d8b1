//! Audit (SPEC D10, issue 3 "must show" 3) on a 3-node cluster of real processes: minimum
//! fields on every record, no secret ever listed or exported, retention by count and by age
//! leaving exactly the expected records on every node, and equal state digests.

use std::time::Duration;

use serde_json::{json, Value};
use writ_tests::procs::{writ_bin, Cluster, TEST_OPERATOR_TOKEN};

const MIN_FIELDS: &[&str] = &[
    "seq",
    "at_ms",
    "trace_id",
    "tenant_id",
    "domain",
    "operation",
    "outcome",
    "reason_code",
    "principal_id",
    "token_id",
    "parent_token_id",
];

async fn all_records(c: &Cluster, url: &str, tenant: &str) -> Vec<Value> {
    let mut out = Vec::new();
    let mut after: Option<u64> = None;
    loop {
        let cursor = after.map(|a| format!("&after={a}")).unwrap_or_default();
        let page = c.admin.get(url, &format!("/v1/tenants/{tenant}/audit?limit=3{cursor}")).await.expect("audit page");
        out.extend(page["records"].as_array().expect("records").iter().cloned());
        match page["next_cursor"].as_u64() {
            Some(n) => after = Some(n),
            None => return out,
        }
    }
}

fn seqs(records: &[Value]) -> Vec<u64> {
    records.iter().map(|r| r["seq"].as_u64().expect("seq")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audit_fields_redaction_and_retention_agree_on_every_node() {
    let c = Cluster::start(3).await;
    let urls = c.all_urls();
    let leader = c.leader(Duration::from_secs(20)).await;
    let w = urls[(leader - 1) as usize].clone();
    let (code, t) = c.admin.post(&w, "/v1/tenants", json!({"name": "audited"})).await.unwrap();
    assert_eq!(code, 201, "{t}");
    let tenant = t["id"].as_str().unwrap().to_string();
    let principals = format!("/v1/tenants/{tenant}/principals");
    let body = json!({"name": "keeper", "kind": "service", "preset": "delegate",
        "metadata": {"api_key": "s3cr3t", "team": "ops"}});
    let (code, p) = c.admin.post(&w, &principals, body).await.unwrap();
    assert_eq!(code, 201, "{p}");
    let (code, parent) =
        c.admin.post(&w, &format!("/v1/tenants/{tenant}/tokens"), json!({"principal": "keeper"})).await.unwrap();
    assert_eq!(code, 201, "{parent}");
    let pj = parent["jti"].as_str().unwrap();
    let (code, child) =
        c.admin.post(&w, &format!("/v1/tenants/{tenant}/tokens/{pj}/delegate"), json!({})).await.unwrap();
    assert_eq!(code, 201, "{child}");
    let cj = child["jti"].as_str().unwrap();
    let (code, _) = c.admin.post(&w, &format!("/v1/tenants/{tenant}/tokens/{cj}/delegate"), json!({})).await.unwrap();
    assert_eq!(code, 403, "delegation beyond the depth limit");
    let secrets = [
        "s3cr3t".to_string(),
        parent["token"].as_str().unwrap().to_string(),
        child["token"].as_str().unwrap().to_string(),
    ];

    // Every record has the minimum fields; none holds a secret; all nodes list the same.
    c.converged(Duration::from_secs(30)).await;
    let on_leader = all_records(&c, &w, &tenant).await;
    // tenant_created and principal_created, each with its default quotas, token_issued ×2,
    // the rejected delegation.
    assert_eq!(on_leader.len(), 7, "{on_leader:#?}");
    for r in &on_leader {
        for f in MIN_FIELDS {
            assert!(r.get(*f).is_some(), "record lacks {f}: {r}");
        }
        assert!(!r["trace_id"].as_str().unwrap().is_empty(), "{r}");
        assert_eq!(r["tenant_id"], tenant.as_str());
    }
    let text = serde_json::to_string(&on_leader).unwrap();
    for s in &secrets {
        assert!(!text.contains(s.as_str()), "a secret is listed unredacted");
    }
    let issued = on_leader.iter().find(|r| r["operation"] == "token_issued" && r["parent_token_id"] == pj).unwrap();
    assert_eq!(issued["token_id"], cj);
    let denied = on_leader.iter().find(|r| r["outcome"] == "rejected").unwrap();
    assert_eq!((&denied["reason_code"], &denied["domain"]), (&json!("DELEGATION_DEPTH_EXCEEDED"), &json!("token")));
    for url in &urls {
        assert_eq!(all_records(&c, url, &tenant).await, on_leader, "node {url} lists other records");
    }
    let filtered = c.admin.get(&w, &format!("/v1/tenants/{tenant}/audit?outcome=rejected")).await.unwrap();
    assert_eq!(filtered["records"].as_array().unwrap().len(), 1, "{filtered}");

    // The streamed export (through the CLI) holds the same records, redacted.
    let out = std::process::Command::new(writ_bin())
        .args(["admin", "audit", "export", "--tenant", "audited"])
        .env("WRIT_CA_FILE", writ_tests::pki::ca_file())
        .env("WRIT_ADMIN_URL", &urls[(leader % 3) as usize])
        .env("WRIT_ADMIN_TOKEN", TEST_OPERATOR_TOKEN)
        .output()
        .expect("run export");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let exported: Vec<Value> =
        String::from_utf8(out.stdout).unwrap().lines().map(|l| serde_json::from_str(l).expect("ndjson")).collect();
    assert_eq!(exported, on_leader);
    // One request's records, found by its trace id (the CLI's `--trace`, the API's `trace`).
    let trace = denied["trace_id"].as_str().unwrap();
    let out = std::process::Command::new(writ_bin())
        .args(["admin", "--output", "json", "audit", "list", "--tenant", "audited", "--trace", trace])
        .env("WRIT_CA_FILE", writ_tests::pki::ca_file())
        .env("WRIT_ADMIN_URL", &urls[(leader % 3) as usize])
        .env("WRIT_ADMIN_TOKEN", TEST_OPERATOR_TOKEN)
        .output()
        .expect("run list");
    let listed: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|_| panic!("{out:?}"));
    assert_eq!(listed["records"], json!([denied]), "{listed}");

    // Retention by count: keep the newest 4 (the settings change itself is a record).
    let settings = format!("{w}/v1/tenants/{tenant}/settings");
    let (code, body) =
        c.admin.send(reqwest::Method::PATCH, &settings, Some(json!({"audit_max_events": 4}))).await.unwrap();
    assert_eq!(code, 200, "{body}");
    c.converged(Duration::from_secs(30)).await;
    let kept = all_records(&c, &w, &tenant).await;
    assert_eq!(seqs(&kept), vec![5, 6, 7, 8]);
    for url in &urls {
        assert_eq!(all_records(&c, url, &tenant).await, kept);
    }
    // Retention by age: records older than 1 s go when the next record is written. The index
    // keeps record times rounded up to the second, so a record goes once the clock is a second
    // past its time's next whole second.
    let (code, _) = c.admin.send(reqwest::Method::PATCH, &settings, Some(json!({"audit_max_age_s": 1}))).await.unwrap();
    assert_eq!(code, 200);
    c.converged(Duration::from_secs(30)).await;
    let newest = all_records(&c, &w, &tenant).await.iter().filter_map(|r| r["at_ms"].as_u64()).max().unwrap();
    let expires_ms = newest.div_ceil(1000) * 1000 + 1000;
    // The leader stamps entries with this machine's clock.
    let past = || async { (writ_client::now_ms() > expires_ms).then_some(()) };
    writ_tests::eventually("the clock past the newest record's age limit", Duration::from_secs(5), past).await;
    let (code, _) =
        c.admin.post(&w, &principals, json!({"name": "late", "kind": "agent", "preset": "readOnly"})).await.unwrap();
    assert_eq!(code, 201);
    let (_, digest) = c.converged(Duration::from_secs(30)).await;
    assert_eq!(digest.len(), 64);
    let kept = all_records(&c, &w, &tenant).await;
    // The principal and its quotas, one entry.
    assert_eq!(seqs(&kept), vec![10, 11], "only the records written after the pause survive: {kept:#?}");
    for url in &urls {
        assert_eq!(all_records(&c, url, &tenant).await, kept);
    }
}
