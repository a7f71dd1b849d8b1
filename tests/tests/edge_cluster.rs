//! Issue 4, must-show 2 and 3: two stateless `writ edge` processes in front of a three-node
//! ledger cluster. A real client (the official Python SDK, mode 2026-07-28) alternates between
//! the edges request by request — including an MRTR round started on one edge and finished on
//! the other — and authority and tenant isolation hold on both edges.

use std::time::{Duration, Instant};

use base64::Engine;
use serde_json::{json, Value};
use writ_tests::mcp::{builtin, meta, rpc, tenant};
use writ_tests::procs::{Cluster, EdgeProc};

/// A 3-node cluster and two edges sharing one canonical URL (edge 1's) and seal key.
async fn cluster_with_two_edges() -> (Cluster, tempfile::TempDir, EdgeProc, EdgeProc) {
    let cluster = Cluster::start(3).await;
    let urls = cluster.all_urls();
    let dir = tempfile::tempdir().unwrap();
    let e1 = EdgeProc::start(dir.path(), &urls, None).await;
    let e2 = EdgeProc::start(dir.path(), &urls, Some(&e1.url())).await;
    (cluster, dir, e1, e2)
}

type Frames = futures::stream::BoxStream<'static, reqwest::Result<axum::body::Bytes>>;

/// Reads an event stream into `seen` until it contains `want` (false: it ended or 5 s passed).
async fn read_until(frames: &mut Frames, seen: &mut String, want: &str) -> bool {
    let reading = async {
        while !seen.contains(want) {
            match futures::StreamExt::next(frames).await {
                Some(Ok(b)) => seen.push_str(&String::from_utf8_lossy(&b)),
                _ => return false,
            }
        }
        true
    };
    tokio::time::timeout(Duration::from_secs(5), reading).await.unwrap_or(false)
}

fn tool_names(list: &Value) -> Vec<String> {
    list["result"]["tools"].as_array().expect("tools").iter().map(|t| t["name"].as_str().unwrap().to_string()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_client_alternates_edges_and_authority_holds_on_both() {
    let (cluster, _dir, e1, e2) = cluster_with_two_edges().await;
    let (admin, url) = (cluster.admin.clone(), cluster.all_urls()[0].clone());
    let canonical = e1.url();
    let edges = [e1.url(), e2.url()];

    // Tenant A: a read tool, an MRTR tool, a tool outside the agent's scopes, and enough
    // filler that the tool list has a second page.
    let mut actions = vec![
        builtin("list_devices", "writ.devices", None),
        builtin("greet", "conformance.input_required_elicitation", None),
        builtin("audit_digest", "writ.devices", Some("audit:read")),
    ];
    actions.extend((0..100).map(|i| builtin(&format!("filler_{i:03}"), "conformance.simple_text", None)));
    tenant(&admin, &url, "alpha", actions.clone()).await;
    tenant(&admin, &url, "beta", vec![builtin("beta_devices", "writ.devices", None)]).await;
    let token = |t: &str| {
        let (admin, url, t, aud) = (admin.clone(), url.clone(), t.to_string(), canonical.clone());
        async move {
            let issued = admin
                .post_ok(&url, &format!("/v1/tenants/{t}/tokens"), json!({"principal": "agent", "audience": aud}))
                .await;
            issued["token"].as_str().unwrap().to_string()
        }
    };
    let (alpha, beta) = (token("alpha").await, token("beta").await);

    // Must-show 2: the Python SDK, requests alternating between the two edges.
    let script = format!("{}/python/mcp_client.py", env!("CARGO_MANIFEST_DIR"));
    let out = tokio::process::Command::new("python3")
        .args([&script, &canonical, &alpha, &e1.port.to_string(), &e2.port.to_string(), "list_devices", "greet"])
        .output()
        .await
        .expect("python3 runs (make pydeps installs mcp)");
    assert!(out.status.success(), "python client failed:\n{}", String::from_utf8_lossy(&out.stderr));
    let report: Value = serde_json::from_slice(&out.stdout).expect("client report");
    let tools: Vec<&str> = report["tools"].as_array().unwrap().iter().map(|t| t.as_str().unwrap()).collect();
    assert_eq!(tools.len(), 107, "both pages (with five operation tools), without the out-of-scope tool: {report}");
    assert!(tools.contains(&"greet") && tools.contains(&"list_devices") && !tools.contains(&"audit_digest"));
    assert_eq!(report["read"]["structured"]["devices"][0]["name"], "alpha-press", "{report}");
    assert_eq!(report["mrtr"]["text"], json!(["Hello, Ada!"]), "{report}");
    assert_eq!(report["mrtr"]["asked"], json!(["What is your name?"]));
    let served = report["served"].as_array().unwrap();
    let ports: Vec<u64> = served.iter().map(|s| s["port"].as_u64().unwrap()).collect();
    assert!(ports.windows(2).all(|w| w[0] != w[1]), "requests alternate between the edges: {served:?}");
    let greet: Vec<&Value> = served.iter().filter(|s| s["method"] == "tools/call").skip(1).collect();
    assert_eq!(greet.len(), 2, "{served:?}");
    assert_eq!((greet[0]["round"].as_bool(), greet[1]["round"].as_bool()), (Some(false), Some(true)));
    assert_ne!(greet[0]["port"], greet[1]["port"], "the MRTR round was finished by the other edge");

    // Must-show 3, on both edges. No token: 401 with the RFC 9728 challenge.
    for edge in &edges {
        let (status, challenge, _) = rpc(edge, None, "tools/list", json!({})).await;
        assert_eq!(status, 401);
        assert!(challenge.contains("resource_metadata=") && challenge.contains("scope="), "{challenge}");
    }
    // Expired (a token of the tenant's own issuer, expired a minute ago): 401 AUTH_TOKEN_EXPIRED.
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ED25519).unwrap();
    let x = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(key.public_key_raw());
    let jwks = json!({"keys": [{"kty": "OKP", "crv": "Ed25519", "x": x, "kid": "k1", "alg": "EdDSA"}]});
    let issuer = json!({"issuer": "https://idp.alpha.example", "audience": canonical, "jwks": jwks.to_string()});
    let (code, body) =
        admin.send(reqwest::Method::PUT, &format!("{url}/v1/tenants/alpha/issuers"), Some(issuer)).await.unwrap();
    assert_eq!(code, 200, "{body}");
    let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::EdDSA);
    header.kid = Some("k1".into());
    let now = writ_client::now_ms() / 1000;
    let claims = json!({"iss": "https://idp.alpha.example", "sub": "agent", "aud": canonical, "exp": now - 60, "scope": "tools:list"});
    let signing = jsonwebtoken::EncodingKey::from_ed_pem(key.serialize_pem().as_bytes()).unwrap();
    let expired = jsonwebtoken::encode(&header, &claims, &signing).unwrap();
    for edge in &edges {
        let expired = expired.clone();
        let body = writ_tests::eventually("the issuer at the edge", Duration::from_secs(5), || async {
            let (status, _, body) = rpc(edge, Some(&expired), "tools/list", json!({})).await;
            (status == 401 && body["error"]["data"]["reason"] == "AUTH_TOKEN_EXPIRED").then_some(body)
        })
        .await;
        assert_eq!(body["error"]["code"], -32001);
    }
    // Revoked: refused on both edges within a second of the revocation.
    let doomed = token("alpha").await;
    for edge in &edges {
        assert_eq!(rpc(edge, Some(&doomed), "tools/list", json!({})).await.0, 200);
    }
    let jti = writ_api::auth::segment(&doomed, 1).and_then(|c| c["jti"].as_str().map(str::to_string)).expect("jti");
    let revoked_at = Instant::now();
    admin.post_ok(&url, &format!("/v1/tenants/alpha/tokens/{jti}/revoke"), json!({})).await;
    for edge in &edges {
        writ_tests::eventually("revocation at the edge", Duration::from_secs(1), || async {
            let (status, _, body) = rpc(edge, Some(&doomed), "tools/list", json!({})).await;
            (status == 401 && body["error"]["data"]["reason"] == "AUTH_TOKEN_REVOKED").then_some(())
        })
        .await;
    }
    println!("revocation refused on both edges {} ms after the revoke call", revoked_at.elapsed().as_millis());
    // Each edge exports its request metrics.
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    let metrics = http.get(edges[0].replace("/mcp", "/metrics")).send().await.unwrap().text().await.unwrap();
    assert!(metrics.contains("writ_edge_requests_total") && metrics.contains("writ_edge_request_seconds"), "{metrics}");
    // Latencies are Prometheus histograms (buckets add up across edges), never summaries.
    assert!(metrics.contains("writ_edge_request_seconds_bucket{") && !metrics.contains("quantile="), "{metrics}");
    for name in ["writ_verifier_staleness_seconds", "writ_verifier_revision", "writ_build_info{role=\"edge\""] {
        assert!(metrics.contains(name), "{name} missing from:\n{metrics}");
    }
    // The edges' submits (their audit records among them) reach the nodes over submit streams,
    // not a request each.
    let mut streamed = 0.0;
    for node in cluster.all_urls() {
        let text =
            admin.client(&node).send(reqwest::Method::GET, "/metrics", None).await.unwrap().text().await.unwrap();
        let value = text.lines().find_map(|l| l.strip_prefix("writ_node_submits_total{transport=\"stream\"} "));
        streamed += value.and_then(|v| v.trim().parse::<f64>().ok()).unwrap_or(0.0);
    }
    assert!(streamed > 0.0, "no submit arrived over a submit stream");

    // subscriptions/listen on edge 2: a catalog published through the admin API reaches the
    // stream as tools/list_changed; revoking the listener's token ends the stream.
    let listener = token("alpha").await;
    let mut params = json!({"notifications": {"toolsListChanged": true}});
    params["_meta"] = meta();
    let stream = reqwest::Client::builder()
        .no_proxy()
        .build()
        .unwrap()
        .post(&edges[1])
        .bearer_auth(&listener)
        .header("MCP-Protocol-Version", "2026-07-28")
        .header("Mcp-Method", "subscriptions/listen")
        .json(&json!({"jsonrpc": "2.0", "id": "sub-1", "method": "subscriptions/listen", "params": params}))
        .send()
        .await
        .unwrap();
    assert_eq!(stream.headers()["content-type"], "text/event-stream");
    let mut frames: Frames = futures::StreamExt::boxed(stream.bytes_stream());
    let mut seen = String::new();
    assert!(read_until(&mut frames, &mut seen, "notifications/subscriptions/acknowledged").await);
    actions.push(builtin("list_devices_again", "writ.devices", None));
    admin.post_ok(&url, "/v1/tenants/alpha/catalogs", json!({"actions": actions})).await;
    assert!(read_until(&mut frames, &mut seen, "notifications/tools/list_changed").await, "{seen}");
    assert!(seen.contains("\"io.modelcontextprotocol/subscriptionId\":\"sub-1\""), "{seen}");
    let jti = writ_api::auth::segment(&listener, 1).and_then(|c| c["jti"].as_str().map(str::to_string)).unwrap();
    admin.post_ok(&url, &format!("/v1/tenants/alpha/tokens/{jti}/revoke"), json!({})).await;
    let ended = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            match futures::StreamExt::next(&mut frames).await {
                Some(Ok(_)) => continue,
                _ => return,
            }
        }
    })
    .await;
    assert!(ended.is_ok(), "the stream of a revoked token ends");

    // Out of scope = does not exist; the audit knows the difference.
    let (s1, _, hidden) = rpc(&edges[0], Some(&alpha), "tools/call", json!({"name": "audit_digest"})).await;
    let (s2, _, missing) = rpc(&edges[1], Some(&alpha), "tools/call", json!({"name": "no_such_tool"})).await;
    assert_eq!(s1, s2);
    let strip = |v: &Value, name: &str| v["error"].to_string().replace(name, "NAME");
    assert_eq!(strip(&hidden, "audit_digest"), strip(&missing, "no_such_tool"), "{hidden} vs {missing}");
    let denied = admin.get(&url, "/v1/tenants/alpha/audit?domain=request&outcome=denied").await.unwrap();
    let record = denied["records"].as_array().unwrap().iter().find(|r| r.to_string().contains("audit_digest"));
    assert_eq!(record.map(|r| r["reason_code"].clone()), Some(json!("APP_SCOPE_FORBIDDEN")), "{denied}");

    // Tenant B sees nothing of tenant A: tools, resources, cursors, error texts.
    let (_, _, a_page) = rpc(&edges[0], Some(&alpha), "tools/list", json!({})).await;
    let a_cursor = a_page["result"]["nextCursor"].as_str().expect("a second page").to_string();
    for edge in &edges {
        let (_, _, list) = rpc(edge, Some(&beta), "tools/list", json!({})).await;
        let expected = [
            "beta_devices",
            "context.search",
            "observation.capture",
            "operation.execute",
            "operation.propose",
            "operation.readback",
        ];
        assert_eq!(tool_names(&list), expected);
        let (_, _, res) = rpc(edge, Some(&beta), "resources/list", json!({})).await;
        assert!(!res.to_string().contains("alpha"), "{res}");
        let (_, _, read) = rpc(edge, Some(&beta), "resources/read", json!({"uri": "writ://devices/alpha-press"})).await;
        assert_eq!(read["error"]["data"]["reason"], "RESOURCE_NOT_FOUND", "{read}");
        let (_, _, call) = rpc(edge, Some(&beta), "tools/call", json!({"name": "list_devices"})).await;
        assert_eq!(call["error"]["data"]["reason"], "TOOL_NOT_FOUND", "{call}");
        let (_, _, stolen) = rpc(edge, Some(&beta), "tools/list", json!({"cursor": a_cursor})).await;
        assert_eq!(stolen["error"]["data"]["reason"], "REQUEST_STATE_INVALID", "{stolen}");
        assert!(!stolen.to_string().contains("alpha"), "{stolen}");
        // A's device and tool read exactly like ones that exist nowhere (the name aside).
        let (_, _, nowhere) = rpc(edge, Some(&beta), "resources/read", json!({"uri": "writ://devices/zz-none"})).await;
        assert_eq!(strip(&read, "alpha-press"), strip(&nowhere, "zz-none"));
        let (_, _, no_tool) = rpc(edge, Some(&beta), "tools/call", json!({"name": "zz_none"})).await;
        assert_eq!(strip(&call, "list_devices"), strip(&no_tool, "zz_none"));
        let (_, _, called) = rpc(edge, Some(&beta), "tools/call", json!({"name": "beta_devices"})).await;
        assert_eq!(called["result"]["structuredContent"]["devices"][0]["name"], "beta-press", "{called}");
    }
    // Issue 21: a deleted tenant's tokens are refused at every edge within a second.
    let deleted_at = Instant::now();
    let (status, tenant) = admin
        .send(reqwest::Method::DELETE, &format!("{url}/v1/tenants/beta"), Some(json!({"note": "offboarded"})))
        .await
        .unwrap();
    assert_eq!((status, tenant["state"].as_str()), (200, Some("deleted")), "{tenant}");
    for edge in &edges {
        writ_tests::eventually("deletion at the edge", Duration::from_secs(1), || async {
            let (status, _, body) = rpc(edge, Some(&beta), "tools/list", json!({})).await;
            (status == 410 && body["error"]["data"]["reason"] == "TENANT_DELETED").then_some(())
        })
        .await;
    }
    println!("deletion refused on both edges {} ms after the delete call", deleted_at.elapsed().as_millis());
    let (status, again) = admin.send(reqwest::Method::DELETE, &format!("{url}/v1/tenants/beta"), None).await.unwrap();
    assert_eq!((status, again["reason"].as_str()), (410, Some("TENANT_DELETED")), "{again}");
    // Alpha is untouched.
    let (status, _, _) = rpc(&edges[0], Some(&alpha), "tools/list", json!({})).await;
    assert_eq!(status, 200);
}

/// Fires `n` `tools/list` requests alternating between `edges`; returns (admitted, refused
/// bodies with their Retry-After).
async fn burst(edges: &[String], token: &str, n: usize) -> (usize, Vec<(Value, String)>) {
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    let (mut admitted, mut refused) = (0, Vec::new());
    for i in 0..n {
        let body = json!({"jsonrpc": "2.0", "id": i, "method": "tools/list", "params": {"_meta": meta()}});
        let r = http
            .post(&edges[i % edges.len()])
            .bearer_auth(token)
            .header("MCP-Protocol-Version", "2026-07-28")
            .header("Mcp-Method", "tools/list")
            .json(&body)
            .send()
            .await
            .expect("edge");
        match r.status().as_u16() {
            200 => admitted += 1,
            429 => {
                let after =
                    r.headers().get("retry-after").and_then(|v| v.to_str().ok()).unwrap_or_default().to_string();
                refused.push((r.json().await.unwrap(), after));
            }
            other => panic!("unexpected status {other}: {}", r.text().await.unwrap_or_default()),
        }
    }
    (admitted, refused)
}

/// Granted requests per quota window for `principal_id`, from the ledger's audit trail.
async fn grants_per_window(
    admin: &writ_tests::procs::Admin,
    url: &str,
    tenant: &str,
) -> std::collections::BTreeMap<u64, u64> {
    let page = admin.get(url, &format!("/v1/tenants/{tenant}/audit?domain=quota&limit=1000")).await.unwrap();
    let mut windows = std::collections::BTreeMap::new();
    for r in page["records"].as_array().unwrap() {
        let detail: Value = serde_json::from_str(r["detail"].as_str().unwrap()).unwrap();
        *windows.entry(detail["window"].as_u64().unwrap()).or_default() += detail["granted"].as_u64().unwrap();
    }
    windows
}

/// SPEC D9: per-tenant and per-principal request quotas hold across both edges (slices leased
/// from the ledger, never more granted per window than the limit), refusals are 429
/// QUOTA_EXCEEDED with a retry hint and on the audit record.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_quotas_hold_across_edges() {
    let (cluster, _dir, e1, e2) = cluster_with_two_edges().await;
    let (admin, url) = (cluster.admin.clone(), cluster.all_urls()[0].clone());
    let canonical = e1.url();
    let edges = [e1.url(), e2.url()];
    tenant(&admin, &url, "gamma", vec![builtin("list_devices", "writ.devices", None)]).await;
    let slow = json!({"name": "slow", "kind": "agent", "preset": "readOnly"});
    admin.post_ok(&url, "/v1/tenants/gamma/principals", slow).await;
    let issue = |who: &str| {
        let (admin, url, who, aud) = (admin.clone(), url.clone(), who.to_string(), canonical.clone());
        async move {
            let t = admin.post_ok(&url, "/v1/tenants/gamma/tokens", json!({"principal": who, "audience": aud})).await;
            t["token"].as_str().unwrap().to_string()
        }
    };
    let (agent, slow) = (issue("agent").await, issue("slow").await);

    // Tenant limit 20/min.
    let (code, body) = admin
        .send(
            reqwest::Method::PATCH,
            &format!("{url}/v1/tenants/gamma/settings"),
            Some(json!({"quotas": {"requests_per_minute": 20}})),
        )
        .await
        .unwrap();
    assert_eq!(code, 200, "{body}");
    // Principal limit 3/min for `slow`, through the CLI.
    let (code, out, err) = writ_tests::procs::run_cli(
        &url,
        &["principal", "quotas", "--tenant", "gamma", "slow", "--requests-per-minute", "3"],
    );
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains('3'), "{out}");
    // Both edges see the limits (watch-fed) before the burst.
    let revision = cluster.revision().await;
    for edge in &edges {
        writ_tests::procs::edge_at_revision(edge, revision).await;
    }

    // `slow`: 3 per window of its own while its tenant still has plenty.
    let (admitted, refused) = burst(&edges, &slow, 10).await;
    assert!(admitted <= 6 && refused.len() >= 4, "admitted {admitted}");

    // 60 requests span at most two windows: at most 40 admitted.
    let (admitted, refused) = burst(&edges, &agent, 60).await;
    let windows = grants_per_window(&admin, &url, "gamma").await;
    assert!(windows.values().all(|g| *g <= 20), "a window granted more than the limit: {windows:?}");
    assert!(admitted as u64 <= windows.values().sum::<u64>(), "admitted {admitted}, granted {windows:?}");
    assert!(admitted <= 40 && !refused.is_empty(), "admitted {admitted}");
    let (first, retry_after) = &refused[0];
    assert_eq!(first["error"]["data"]["reason"], "QUOTA_EXCEEDED", "{first}");
    assert!(first["error"]["data"]["retry_after_ms"].as_u64().is_some_and(|ms| ms <= 60_000), "{first}");
    assert!(retry_after.parse::<u64>().is_ok_and(|s| (1..=61).contains(&s)), "Retry-After: {retry_after}");
    let denied = admin.get(&url, "/v1/tenants/gamma/audit?domain=request&outcome=denied").await.unwrap();
    assert!(denied.to_string().contains("QUOTA_EXCEEDED"), "{denied}");
}
