//! How a client gets a token by itself, from nothing but a tenant's MCP URL.
//!
//! A tenant's own IdP, by its URL: a real OpenID provider (the npm `oidc-provider`, installed
//! by `make nodedeps`) issues JWT access tokens; Writ discovers its keys, names it in the
//! tenant's protected-resource metadata, and a headless agent — the TypeScript SDK 1.x client
//! with its client-credentials provider — gets a token by itself, and so does a host that opens
//! a browser (the SDK's authorization code flow with PKCE, the sign-in played by the test). The
//! provider's key rotation reaches every verifier through the ledger; tokens of one tenant are
//! refused at another's URL and tokens for another resource anywhere; registration refuses
//! private addresses the operator did not allow.
//!
//! A tenant without an IdP: Writ's own authorization server. The SDK's code flow with a client
//! ID metadata document (served over HTTPS here), the browser waiting until an operator
//! approves through the CLI; refresh tokens; the SDK's `private_key_jwt` provider for a
//! headless agent; and the bad inputs (PKCE, redirect URIs, resources, replayed codes and
//! assertions, guesses that must not flood the audit). Token exchange and the tenant's
//! delegation depth.

use std::time::Duration;

use serde_json::{json, Value};
use writ_tests::mcp::{builtin, rpc, tenant};
use writ_tests::procs::{Cluster, EdgeProc};

const CLIENT: &str = "agent";
const SECRET: &str = "agent-secret";
const SCOPES: &str = "tools:list tools:call:list_devices";

/// The OpenID provider of these tests: clients `agent` (client credentials) and `host`.
struct Idp(writ_tests::idp::OpenIdProvider);

impl std::ops::Deref for Idp {
    type Target = writ_tests::idp::OpenIdProvider;
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl Idp {
    /// Starts the provider on `port` (0: any) signing with key id `kid`, for `resources`.
    async fn start(port: u16, kid: &str, resources: &[&str]) -> Idp {
        Idp(writ_tests::idp::OpenIdProvider::start(port, kid, &[CLIENT, SECRET, SCOPES], resources, None).await)
    }

    /// A client-credentials token for `resource`, straight from the provider.
    async fn token(&self, resource: &str) -> String {
        let form = [("grant_type", "client_credentials"), ("scope", SCOPES), ("resource", resource)];
        let r = reqwest::Client::builder().no_proxy().build().unwrap();
        let body: Vec<String> = form.iter().map(|(k, v)| format!("{k}={}", form_encoded(v))).collect();
        let r = r
            .post(format!("{}/token", self.issuer))
            .basic_auth(CLIENT, Some(SECRET))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body.join("&"));
        let body: Value = r.send().await.expect("provider reachable").json().await.expect("JSON");
        body["access_token"].as_str().unwrap_or_else(|| panic!("a token: {body}")).to_string()
    }

    async fn stop(self) {
        self.0.stop().await;
    }
}

/// `application/x-www-form-urlencoded` encoding of one value.
fn form_encoded(v: &str) -> String {
    v.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => (b as char).to_string(),
            b' ' => "+".into(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// A one-node cluster, one edge, tenants `alpha` (agent `agent` may list devices) and `beta`.
/// The node trusts the test CA for what it fetches (the HTTPS documents some tests serve).
async fn deployment() -> (Cluster, tempfile::TempDir, EdgeProc) {
    let ca = writ_tests::pki::ca_file().display().to_string();
    let cluster = Cluster::start_with(1, |n| n.env.push(("SSL_CERT_FILE".into(), ca.clone()))).await;
    let dir = tempfile::tempdir().unwrap();
    let urls = cluster.all_urls();
    let edge = EdgeProc::start(dir.path(), &urls, None).await;
    for name in ["alpha", "beta"] {
        tenant(&cluster.admin, &urls[0], name, vec![builtin("list_devices", "writ.devices", None)]).await;
    }
    (cluster, dir, edge)
}

/// `edge`'s MCP URL for `tenant`.
fn tenant_url(edge: &EdgeProc, tenant: &str) -> String {
    format!("http://127.0.0.1:{}/t/{tenant}/mcp", edge.port)
}

async fn get_json(url: &str) -> (u16, Value) {
    let r = reqwest::Client::builder().no_proxy().build().unwrap().get(url).send().await.expect("reachable");
    (r.status().as_u16(), r.json().await.unwrap_or(Value::Null))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_headless_agent_gets_its_token_from_the_tenants_own_idp_by_itself() {
    let (cluster, _dir, edge) = deployment().await;
    let urls = cluster.all_urls();
    let admin = &urls[0];
    let alpha = tenant_url(&edge, "alpha");
    let idp = Idp::start(0, "k1", &[&alpha, "https://elsewhere.example/mcp"]).await;
    let discover = |allow: bool| json!({"issuer": idp.issuer, "audience": alpha, "allow_private_network": allow});

    // Registration: a loopback issuer only with the operator's consent.
    let (status, body) =
        cluster.admin.post(admin, "/v1/tenants/alpha/issuers/discover", discover(false)).await.unwrap();
    assert_eq!((status, body["reason"].as_str()), (400, Some("INPUT_INVALID")), "http to loopback, unallowed: {body}");
    let https = json!({"issuer": idp.issuer.replace("http://", "https://"), "audience": alpha});
    let (status, body) = cluster.admin.post(admin, "/v1/tenants/alpha/issuers/discover", https).await.unwrap();
    assert_eq!((status, body["reason"].as_str()), (502, Some("ISSUER_DISCOVERY_FAILED")), "{body}");
    assert!(body["message"].as_str().unwrap().contains("not a public address"), "{body}");
    let source = cluster.admin.post_ok(admin, "/v1/tenants/alpha/issuers/discover", discover(true)).await;
    assert_eq!(source["jwks_uri"], format!("{}/jwks", idp.issuer), "{source}");

    // The tenant's protected-resource metadata names its IdP; the challenge points at it.
    let prm_url = format!("http://127.0.0.1:{}/.well-known/oauth-protected-resource/t/alpha/mcp", edge.port);
    let prm = writ_tests::eventually("the edge names the IdP", Duration::from_secs(10), || async {
        let (status, prm) = get_json(&prm_url).await;
        (status == 200 && prm["authorization_servers"] == json!([idp.issuer])).then_some(prm)
    })
    .await;
    assert_eq!(prm["resource"], alpha, "RFC 9728: the resource is the URL the client uses");
    assert_eq!(prm["bearer_methods_supported"], json!(["header"]));
    assert_eq!(prm["scopes_supported"], json!(["tools:list", "tools:call:list_devices"]), "{prm}");
    let (status, challenge, _) = rpc(&alpha, None, "tools/list", json!({})).await;
    assert_eq!(status, 401);
    assert!(challenge.contains(&format!("resource_metadata=\"{prm_url}\"")), "{challenge}");
    assert!(challenge.contains(&format!("scope=\"{SCOPES}\"")), "{challenge}");
    let (status, body) =
        get_json(&format!("http://127.0.0.1:{}/.well-known/oauth-protected-resource/t/nobody/mcp", edge.port)).await;
    assert_eq!((status, body["error"]["data"]["reason"].as_str()), (404, Some("TENANT_NOT_FOUND")), "{body}");

    // The SDK's own OAuth flow from the MCP URL alone, through to a tool's answer.
    let sdk = writ_tests::tools::dir().join("mcp-ts1/node_modules/@modelcontextprotocol/sdk");
    let script = format!("{}/node/oauth_client.mjs", env!("CARGO_MANIFEST_DIR"));
    let out = tokio::process::Command::new(writ_tests::tools::node())
        .arg(script)
        .arg(&sdk)
        .args([&alpha, CLIENT, SECRET, SCOPES, "list_devices"])
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(120), out).await.expect("the SDK client ends").expect("it runs");
    let report: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|_| {
        panic!("{}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
    });
    assert!(report["error"].is_null(), "{report}");
    assert!(report["tools"].as_array().unwrap().contains(&json!("list_devices")), "{report}");
    assert_eq!(report["read"]["devices"][0]["name"], "alpha-press", "{report}");
    let urls: Vec<&str> = report["requests"].as_array().unwrap().iter().map(|r| r["url"].as_str().unwrap()).collect();
    assert!(urls.contains(&prm_url.as_str()), "the client read the metadata: {urls:?}");
    assert!(urls.iter().any(|u| u.starts_with(&idp.issuer)), "and asked the IdP: {urls:?}");
    let token = report["token"].as_str().expect("the token it got").to_string();

    // A host that opens a browser: the SDK's authorization code flow with PKCE (S256) and the
    // resource indicator, the user's sign-in and consent played against the provider's pages.
    let script = format!("{}/node/oauth_code_client.mjs", env!("CARGO_MANIFEST_DIR"));
    let out = tokio::process::Command::new(writ_tests::tools::node())
        .arg(script)
        .arg(&sdk)
        .args([&alpha, "host", "http://127.0.0.1:1/callback", CLIENT, "list_devices"])
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(120), out).await.expect("the SDK client ends").expect("it runs");
    let code_flow: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|_| {
        panic!("{}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
    });
    assert!(code_flow["error"].is_null(), "{code_flow}");
    let asked = &code_flow["authorization"];
    assert_eq!(
        (asked["code_challenge_method"].as_str(), asked["resource"].as_str()),
        (Some("S256"), Some(alpha.as_str())),
        "{asked}"
    );
    assert_eq!(asked["scope"], SCOPES, "the scopes the challenge named: listing and the catalog's actions");
    assert_eq!(code_flow["read"]["devices"][0]["name"], "alpha-press", "{code_flow}");
    let claims = writ_api::auth::segment(code_flow["token"].as_str().unwrap(), 1).unwrap();
    assert_eq!((claims["aud"].as_str(), claims["sub"].as_str()), (Some(alpha.as_str()), Some(CLIENT)), "{claims}");

    // Its token is alpha's: refused at beta's URL, a denial on alpha's record.
    let (status, challenge, body) = rpc(&tenant_url(&edge, "beta"), Some(&token), "tools/list", json!({})).await;
    assert_eq!((status, body["error"]["data"]["reason"].as_str()), (401, Some("AUTH_TENANT_MISMATCH")), "{body}");
    assert!(challenge.contains("/.well-known/oauth-protected-resource/t/beta/mcp"), "{challenge}");
    let audit = cluster.admin.get(admin, "/v1/tenants/alpha/audit?outcome=denied").await.unwrap();
    let reasons: Vec<&Value> = audit["records"].as_array().unwrap().iter().map(|r| &r["reason_code"]).collect();
    assert!(reasons.contains(&&json!("AUTH_TENANT_MISMATCH")), "{audit}");
    // A token the IdP issued for another resource is refused at alpha's URL.
    let elsewhere = idp.token("https://elsewhere.example/mcp").await;
    let (status, _, body) = rpc(&alpha, Some(&elsewhere), "tools/list", json!({})).await;
    assert_eq!((status, body["error"]["data"]["reason"].as_str()), (401, Some("AUTH_TOKEN_INVALID")), "{body}");

    // The IdP rotates its key (restarted with another key id): the first token signed by the
    // new key has the ledger fetch the keys again, and is accepted.
    let port = idp.port();
    idp.stop().await;
    let idp = Idp::start(port, "k2", &[&alpha]).await;
    let rotated = idp.token(&alpha).await;
    let (status, _, body) = rpc(&alpha, Some(&rotated), "tools/list", json!({})).await;
    assert_eq!(status, 200, "{body}");
    let keys = cluster.admin.get(admin, "/v1/tenants/alpha/issuers").await.unwrap();
    assert!(keys["issuers"][0]["spec"]["jwks"].as_str().unwrap().contains("\"k2\""), "{keys}");
    // A key id changing on every token costs no fetch per token: the next unknown one within
    // the refresh interval is refused without asking the ledger again.
    idp.stop().await;
    let idp = Idp::start(port, "k3", &[&alpha]).await;
    let again = idp.token(&alpha).await;
    let (status, _, body) = rpc(&alpha, Some(&again), "tools/list", json!({})).await;
    assert_eq!((status, body["error"]["data"]["reason"].as_str()), (401, Some("AUTH_TOKEN_INVALID")), "{body}");
    idp.stop().await;
}

/// A hostile "issuer" on loopback: each path is one way a discovery can go wrong.
async fn hostile_issuer() -> String {
    use axum::response::Redirect;
    use axum::routing::get;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let b = base.clone();
    let doc = |name: &str, jwks_uri: String| json!({"issuer": format!("{b}/{name}"), "jwks_uri": jwks_uri}).to_string();
    let app = axum::Router::new()
        .route("/redirect/.well-known/openid-configuration", get(|| async { Redirect::temporary("/elsewhere") }))
        .route("/huge/.well-known/openid-configuration", {
            let d = doc("huge", format!("{b}/huge/jwks"));
            get(move || async move { d })
        })
        .route("/huge/jwks", get(|| async { format!("{{\"keys\":[],\"pad\":\"{}\"}}", "x".repeat(200_000)) }))
        .route(
            "/slow/.well-known/openid-configuration",
            // Never answers: only the fetch's own timeout ends the request.
            get(std::future::pending::<String>),
        )
        .route(
            "/impostor/.well-known/openid-configuration",
            get(|| async {
                json!({"issuer": "https://idp.example", "jwks_uri": "https://idp.example/jwks"}).to_string()
            }),
        )
        .route("/metadata/.well-known/openid-configuration", {
            let d = doc("metadata", "http://169.254.169.254/latest/meta-data".into());
            get(move || async move { d })
        });
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    base
}

/// Bad issuers refused at registration, each with its reason, nothing registered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discovery_refuses_hostile_issuers_and_registers_nothing() {
    let cluster = Cluster::start(1).await;
    let urls = cluster.all_urls();
    let admin = &urls[0];
    tenant(&cluster.admin, admin, "alpha", vec![builtin("list_devices", "writ.devices", None)]).await;
    let base = hostile_issuer().await;
    let cases = [
        ("redirect", "redirects"),
        ("huge", "larger than"),
        ("slow", "timed out"),
        ("impostor", "names issuer"),
        ("metadata", "INPUT_INVALID"),
        ("absent", "serves no discovery document"),
    ];
    for (name, why) in cases {
        let body = json!({"issuer": format!("{base}/{name}"), "audience": "http://127.0.0.1:1/t/alpha/mcp",
                          "allow_private_network": true});
        let (status, answer) = cluster.admin.post(admin, "/v1/tenants/alpha/issuers/discover", body).await.unwrap();
        let text = answer.to_string();
        assert!(status == 502 || status == 400, "{name}: {status} {text}");
        assert!(text.contains(why), "{name}: {text}");
    }
    let listed = cluster.admin.get(admin, "/v1/tenants/alpha/issuers").await.unwrap();
    assert_eq!(listed["issuers"], json!([]), "nothing registered: {listed}");
}

/// `POST /t/{tenant}/oauth/token` with a form.
async fn token_endpoint(edge: &EdgeProc, tenant: &str, pairs: &[(&str, &str)]) -> (u16, Value) {
    let body: Vec<String> = pairs.iter().map(|(k, v)| format!("{k}={}", form_encoded(v))).collect();
    let r = reqwest::Client::builder().no_proxy().build().unwrap();
    let r = r
        .post(format!("http://127.0.0.1:{}/t/{tenant}/oauth/token", edge.port))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(body.join("&"))
        .send()
        .await
        .expect("edge reachable");
    assert_eq!(r.headers().get("cache-control").and_then(|v| v.to_str().ok()), Some("no-store"));
    (r.status().as_u16(), r.json().await.unwrap_or(Value::Null))
}

/// RFC 8693 at the tenant's token endpoint: a principal holding `tokens:delegate` narrows its
/// own token into a child without an operator; more than the parent, another tenant's
/// endpoint, a second hop and a bad form are refused with their reasons; revoking the parent
/// revokes the child on the edge.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_principal_exchanges_its_token_for_a_narrower_child_without_an_operator() {
    const EXCHANGE: &str = "urn:ietf:params:oauth:grant-type:token-exchange";
    const ACCESS: &str = "urn:ietf:params:oauth:token-type:access_token";
    let (cluster, _dir, edge) = deployment().await;
    let urls = cluster.all_urls();
    let admin = &urls[0];
    let planner = json!({"name": "planner", "kind": "agent", "preset": "delegate"});
    cluster.admin.post_ok(admin, "/v1/tenants/alpha/principals", planner).await;
    let issued = cluster
        .admin
        .post_ok(admin, "/v1/tenants/alpha/tokens", json!({"principal": "planner", "audience": edge.url()}))
        .await;
    let (parent, parent_jti) =
        (issued["token"].as_str().unwrap().to_string(), issued["jti"].as_str().unwrap().to_string());
    let edge = &edge;
    let exchange = |subject: &str, scope: &str| {
        let (subject, scope) = (subject.to_string(), scope.to_string());
        async move {
            let pairs = [
                ("grant_type", EXCHANGE),
                ("subject_token", &subject),
                ("subject_token_type", ACCESS),
                ("scope", &scope),
            ];
            token_endpoint(edge, "alpha", &pairs).await
        }
    };

    let (status, answer) = exchange(&parent, "tools:list tokens:delegate").await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!((answer["token_type"].as_str(), answer["issued_token_type"].as_str()), (Some("Bearer"), Some(ACCESS)));
    assert_eq!(answer["scope"], "tokens:delegate tools:list");
    assert!(answer["expires_in"].as_u64().is_some_and(|s| s > 0 && s <= 3600), "{answer}");
    let child = answer["access_token"].as_str().unwrap().to_string();
    let claims = writ_api::auth::segment(&child, 1).unwrap();
    assert_eq!((claims["sub"].clone(), claims["aud"].clone()), (issued["principal_id"].clone(), json!(edge.url())));
    let (status, _, body) = rpc(&edge.url(), Some(&child), "tools/list", json!({})).await;
    assert_eq!(status, 200, "the child lists tools: {body}");
    let call = json!({"name": "list_devices", "arguments": {}});
    let (_, _, body) = rpc(&edge.url(), Some(&child), "tools/call", call.clone()).await;
    assert_eq!(body["error"]["data"]["reason"], "TOOL_NOT_FOUND", "it cannot call what it was not given: {body}");
    let (_, _, body) = rpc(&edge.url(), Some(&parent), "tools/call", call).await;
    assert!(body["error"].is_null(), "its parent can: {body}");

    // More than the parent holds; a second hop; another tenant's endpoint; a bad form.
    let (status, answer) = exchange(&parent, "audit:read").await;
    assert_eq!(
        (status, answer["error"].as_str(), answer["reason"].as_str()),
        (400, Some("invalid_scope"), Some("APP_SCOPE_FORBIDDEN")),
        "{answer}"
    );
    let (status, answer) = exchange(&child, "tools:list").await;
    assert_eq!((status, answer["reason"].as_str()), (400, Some("DELEGATION_DEPTH_EXCEEDED")), "{answer}");
    // The depth is the tenant's setting: at 2, the child may narrow itself once more.
    let (code, out, err) = cli(admin, &["oauth", "settings", "--tenant", "alpha", "--delegation-depth-max", "2"]).await;
    assert_eq!(code, 0, "{out}{err}");
    let (status, answer) = writ_tests::eventually("a second hop at depth 2", Duration::from_secs(10), || async {
        let (status, answer) = exchange(&child, "tools:list").await;
        (status == 200).then_some((status, answer))
    })
    .await;
    let grandchild = answer["access_token"].as_str().unwrap().to_string();
    assert_eq!((status, answer["scope"].as_str()), (200, Some("tools:list")), "{answer}");
    let pairs = [("grant_type", EXCHANGE), ("subject_token", parent.as_str()), ("subject_token_type", ACCESS)];
    let (status, answer) = token_endpoint(edge, "beta", &pairs).await;
    assert_eq!(
        (status, answer["error"].as_str(), answer["reason"].as_str()),
        (400, Some("invalid_grant"), Some("AUTH_TENANT_MISMATCH")),
        "{answer}"
    );
    let (status, answer) = token_endpoint(edge, "alpha", &[("grant_type", "password")]).await;
    assert_eq!((status, answer["error"].as_str()), (400, Some("unsupported_grant_type")), "{answer}");
    let elsewhere = [&pairs[..], &[("resource", "https://elsewhere.example/mcp")]].concat();
    let (status, answer) = token_endpoint(edge, "alpha", &elsewhere).await;
    assert_eq!((status, answer["error"].as_str()), (400, Some("invalid_target")), "{answer}");

    // Each exchange is one of the principal's requests: past its request quota, refused.
    let quota = json!({"requests_per_minute": 1});
    let path = format!("{admin}/v1/tenants/alpha/principals/planner/quotas");
    let (status, body) = cluster.admin.send(reqwest::Method::PUT, &path, Some(quota)).await.unwrap();
    assert!(status < 300, "{status} {body}");
    let refused = writ_tests::eventually("an exchange past the quota", Duration::from_secs(20), || async {
        let (status, answer) = exchange(&parent, "tools:list").await;
        (status == 429).then_some(answer)
    })
    .await;
    assert_eq!(
        (refused["error"].as_str(), refused["reason"].as_str()),
        (Some("temporarily_unavailable"), Some("QUOTA_EXCEEDED")),
        "{refused}"
    );

    // The operator revokes the parent: the child is refused on the edge too.
    cluster.admin.post_ok(admin, &format!("/v1/tenants/alpha/tokens/{parent_jti}/revoke"), json!({})).await;
    writ_tests::eventually("the child revoked with its parent", Duration::from_secs(10), || async {
        let (status, _, body) = rpc(&edge.url(), Some(&child), "tools/list", json!({})).await;
        (status == 401 && body["error"]["data"]["reason"] == "AUTH_TOKEN_REVOKED").then_some(())
    })
    .await;
    let (status, _, body) = rpc(&edge.url(), Some(&grandchild), "tools/list", json!({})).await;
    assert_eq!(
        (status, body["error"]["data"]["reason"].as_str()),
        (401, Some("AUTH_TOKEN_REVOKED")),
        "the cascade: {body}"
    );
}

/// Where the test host's browser is sent back to (nothing listens: the code is read from the
/// redirect itself).
const REDIRECT: &str = "http://127.0.0.1:1/callback";

/// `writ admin ARGS` against `url`, off the runtime's threads (the node may be fetching from a
/// server this process runs).
async fn cli(url: &str, args: &[&str]) -> (i32, String, String) {
    let (url, args): (String, Vec<String>) = (url.into(), args.iter().map(|a| a.to_string()).collect());
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        writ_tests::procs::run_cli(&url, &args)
    })
    .await
    .expect("the CLI runs")
}

/// `writ admin ARGS` with `credential` (a named operator's session) against `url`.
async fn cli_as(url: &str, credential: &str, args: &[&str]) -> (i32, String, String) {
    let (url, credential) = (url.to_string(), credential.to_string());
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        writ_tests::procs::run_cli_as(&url, &credential, &writ_tests::pki::ca_file(), &args)
    })
    .await
    .expect("the CLI runs")
}

/// An operator of tenant `alpha` with `role`, made and handed a session through the CLI (with
/// the break-glass token): the session's credential.
async fn operator_session(admin: &str, name: &str, role: &str) -> String {
    let (code, out, err) = cli(admin, &["operator", "set", name, "--role", role, "--tenant", "alpha"]).await;
    assert_eq!(code, 0, "{out}{err}");
    let (code, out, err) = cli(admin, &["operator", "session", name, "--ttl", "10m"]).await;
    assert_eq!(code, 0, "{out}{err}");
    let credential = out.trim().to_string();
    let (code, me, err) = cli_as(admin, &credential, &["operator", "whoami"]).await;
    assert!(code == 0 && me.contains(&format!("operator:{name} ({role})")), "{me}{err}");
    credential
}

/// Client ID metadata documents over HTTPS (the test CA): `host.json` names itself and
/// [`REDIRECT`]; the others are ways a document goes wrong. Its base URL.
async fn client_documents() -> String {
    use axum::http::HeaderMap;
    use axum::response::Redirect;
    use axum::routing::get;
    let own = |headers: &HeaderMap, name: &str| {
        let host = headers.get("host").and_then(|h| h.to_str().ok()).unwrap_or_default().to_string();
        format!("https://{host}/{name}")
    };
    let app = axum::Router::new()
        .route(
            "/host.json",
            get(move |h: HeaderMap| async move {
                axum::Json(json!({"client_id": own(&h, "host.json"), "client_name": "writ-test-host",
                    "redirect_uris": [REDIRECT], "grant_types": ["authorization_code", "refresh_token"],
                    "response_types": ["code"], "token_endpoint_auth_method": "none"}))
            }),
        )
        .route(
            "/impostor.json",
            get(|| async {
                axum::Json(json!({"client_id": "https://elsewhere.example/c.json", "redirect_uris": [REDIRECT]}))
            }),
        )
        .route("/huge.json", get(|| async { format!("{{\"pad\":\"{}\"}}", "x".repeat(200_000)) }))
        .route("/redirect.json", get(|| async { Redirect::temporary("/host.json") }))
        // Never answers: only the fetch's own timeout ends the request.
        .route("/slow.json", get(std::future::pending::<String>));
    format!("https://127.0.0.1:{}", writ_tests::pki::serve_https(app).await)
}

fn no_redirects() -> reqwest::Client {
    reqwest::Client::builder().no_proxy().redirect(reqwest::redirect::Policy::none()).build().unwrap()
}

/// The `Location` of a redirect and its query parameters.
fn location(r: &reqwest::Response) -> (String, std::collections::HashMap<String, String>) {
    let at = r.headers().get("location").and_then(|v| v.to_str().ok()).unwrap_or_default().to_string();
    let query = at.split_once('?').map(|(_, q)| q).unwrap_or_default();
    (at.clone(), serde_urlencoded::from_str(query).unwrap_or_default())
}

/// Writ's own authorization server for a tenant without an IdP: a client known by its client
/// ID metadata document (registered through the CLI; bad documents refused), RFC 8414 metadata
/// named by the tenant's protected-resource metadata, and the TypeScript SDK's own code flow
/// with PKCE from the MCP URL alone — the browser waiting until an operator approves the
/// request through the CLI — then refresh tokens that rotate and die with their client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_signs_in_at_writs_own_authorization_server_with_an_operators_approval() {
    let (cluster, _dir, edge) = deployment().await;
    let admin = cluster.all_urls()[0].clone();
    let alpha = tenant_url(&edge, "alpha");
    let docs = client_documents().await;
    let host = format!("{docs}/host.json");

    // Registration reads the document: bad ones are refused, nothing is registered.
    let set = |id: &str, allow: bool| {
        let mut args = vec!["oauth", "client", "set", "--tenant", "alpha", id, "--principal", "agent"];
        args.extend(["--scope", "tools:list", "--scope", "tools:call:list_devices"]);
        if allow {
            args.push("--allow-private-network");
        }
        args.into_iter().map(String::from).collect::<Vec<_>>()
    };
    for (name, why) in [
        ("impostor.json", "names client_id"),
        ("huge.json", "larger than"),
        ("redirect.json", "redirects"),
        ("slow.json", "timed out"),
    ] {
        let args = set(&format!("{docs}/{name}"), true);
        let (code, _, err) = cli(&admin, &args.iter().map(String::as_str).collect::<Vec<_>>()).await;
        assert!(code != 0 && err.contains("OAUTH_CLIENT_METADATA_FAILED") && err.contains(why), "{name}: {err}");
    }
    let (code, _, err) = cli(&admin, &set(&host, false).iter().map(String::as_str).collect::<Vec<_>>()).await;
    assert!(code != 0 && err.contains("not a public address"), "loopback needs the operator's consent: {err}");
    let (code, out, err) = cli(&admin, &set(&host, true).iter().map(String::as_str).collect::<Vec<_>>()).await;
    assert_eq!(code, 0, "{out}{err}");

    // RFC 9728 names the tenant's own authorization server; its RFC 8414 metadata is complete.
    let origin = format!("http://127.0.0.1:{}", edge.port);
    let issuer = format!("{origin}/t/alpha");
    let (status, prm) = get_json(&format!("{origin}/.well-known/oauth-protected-resource/t/alpha/mcp")).await;
    assert_eq!((status, &prm["authorization_servers"]), (200, &json!([issuer])), "{prm}");
    let (status, meta) = get_json(&format!("{origin}/.well-known/oauth-authorization-server/t/alpha")).await;
    assert_eq!(status, 200, "{meta}");
    assert_eq!(meta["issuer"], issuer, "RFC 8414 §3.3: the issuer is the one the document is at");
    for required in ["authorization_endpoint", "token_endpoint", "response_types_supported"] {
        assert!(!meta[required].is_null(), "RFC 8414 §2 requires {required}: {meta}");
    }
    assert_eq!(meta["code_challenge_methods_supported"], json!(["S256"]));
    assert_eq!(meta["client_id_metadata_document_supported"], true);
    let (status, _) = get_json(&format!("{origin}/.well-known/oauth-authorization-server/t/nobody")).await;
    assert_eq!(status, 404);

    // The SDK's code flow; the browser waits until an operator approves through the CLI.
    let sdk = writ_tests::tools::dir().join("mcp-ts1/node_modules/@modelcontextprotocol/sdk");
    let script = format!("{}/node/oauth_code_client.mjs", env!("CARGO_MANIFEST_DIR"));
    let flow = tokio::process::Command::new(writ_tests::tools::node())
        .arg(script)
        .arg(&sdk)
        .args([&alpha, &host, REDIRECT, "-", "list_devices"])
        .kill_on_drop(true)
        .output();
    let flow = tokio::spawn(flow);
    let pending = writ_tests::eventually("the request waits for an operator", Duration::from_secs(60), || async {
        let list = cluster.admin.get(&admin, "/v1/tenants/alpha/oauth/requests").await.ok()?;
        let r = list["requests"].as_array()?.iter().find(|r| r["status"] == "pending")?.clone();
        Some(r)
    })
    .await;
    assert_eq!(
        (pending["client_id"].as_str(), pending["audience"].as_str()),
        (Some(host.as_str()), Some(alpha.as_str()))
    );
    let id = pending["request_id"].as_str().unwrap();
    // A named approver of the tenant decides, with a session an admin handed out; the trail
    // names her, and a viewer could not have.
    let ann = operator_session(&admin, "ann", "approver").await;
    let viewer = operator_session(&admin, "vic", "viewer").await;
    let (code, _, err) = cli_as(&admin, &viewer, &["oauth", "request", "approve", "--tenant", "alpha", id]).await;
    assert!(code != 0 && err.contains("OPERATOR_ROLE_REQUIRED"), "{err}");
    let (code, out, err) = cli_as(&admin, &ann, &["oauth", "request", "approve", "--tenant", "alpha", id]).await;
    assert_eq!(code, 0, "{out}{err}");
    let acted = cluster.admin.get(&admin, "/v1/tenants/alpha/audit?operation=operator_acted").await.unwrap();
    let acted = acted["records"].as_array().unwrap();
    assert!(acted.iter().any(|r| r["detail"].as_str().unwrap_or_default().contains("\"ann\"")), "{acted:?}");
    let out =
        tokio::time::timeout(Duration::from_secs(120), flow).await.expect("the SDK client ends").unwrap().unwrap();
    let report: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|_| {
        panic!("{}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
    });
    assert!(report["error"].is_null(), "{report}");
    assert_eq!(
        (report["authorization"]["client_id"].as_str(), report["authorization"]["code_challenge_method"].as_str()),
        (Some(host.as_str()), Some("S256")),
        "{report}"
    );
    assert_eq!(report["read"]["devices"][0]["name"], "alpha-press", "{report}");
    let claims = writ_api::auth::segment(report["token"].as_str().unwrap(), 1).unwrap();
    assert_eq!(claims["aud"], alpha, "RFC 8707: the token is for the tenant's MCP URL");
    let jti = claims["jti"].as_str().unwrap();
    let record = cluster.admin.get(&admin, &format!("/v1/tenants/alpha/tokens/{jti}")).await.unwrap();
    assert_eq!(record["record"]["jti"], jti, "every issued token is a ledger record");

    // Refresh tokens rotate: the new one works, the used one is refused.
    let refresh = report["refresh_token"].as_str().expect("a refresh token").to_string();
    let by_refresh = |r: &str| {
        [("grant_type", "refresh_token"), ("client_id", host.as_str()), ("refresh_token", r)]
            .map(|(k, v)| (k, v.to_string()))
    };
    let pairs = by_refresh(&refresh);
    let (status, answer) =
        token_endpoint(&edge, "alpha", &pairs.iter().map(|(k, v)| (*k, v.as_str())).collect::<Vec<_>>()).await;
    assert_eq!(status, 200, "{answer}");
    let (status, _, body) = rpc(&alpha, answer["access_token"].as_str(), "tools/list", json!({})).await;
    assert_eq!(status, 200, "{body}");
    let (status, again) =
        token_endpoint(&edge, "alpha", &pairs.iter().map(|(k, v)| (*k, v.as_str())).collect::<Vec<_>>()).await;
    assert_eq!(
        (status, again["error"].as_str(), again["reason"].as_str()),
        (400, Some("invalid_grant"), Some("OAUTH_GRANT_INVALID"))
    );

    let other = bad_authorization_requests(&cluster, &edge, &host).await;

    // The client revokes a refresh token (RFC 7009): it is refused from then on; an unknown one
    // is no error; an access token is not revoked here.
    let next = answer["refresh_token"].as_str().unwrap().to_string();
    let revoke = |token: &str| {
        let pairs = [("token", token.to_string()), ("client_id", host.clone())];
        let body = serde_urlencoded::to_string(pairs).unwrap();
        let url = format!("http://127.0.0.1:{}/t/alpha/oauth/revoke", edge.port);
        async move {
            let r = reqwest::Client::builder().no_proxy().build().unwrap();
            let r = r.post(url).header("content-type", "application/x-www-form-urlencoded").body(body).send();
            let r = r.await.expect("edge reachable");
            (r.status().as_u16(), r.json::<Value>().await.unwrap_or(Value::Null))
        }
    };
    assert_eq!(revoke(&next).await.0, 200);
    assert_eq!(revoke("1.unknown.token").await.0, 200, "RFC 7009 §2.2: an invalid token is no error");
    let (status, body) = revoke(answer["access_token"].as_str().unwrap()).await;
    assert_eq!((status, body["error"].as_str()), (400, Some("unsupported_token_type")), "{body}");
    let pairs = by_refresh(&next);
    let (status, refused) =
        token_endpoint(&edge, "alpha", &pairs.iter().map(|(k, v)| (*k, v.as_str())).collect::<Vec<_>>()).await;
    assert_eq!((status, refused["reason"].as_str()), (400, Some("OAUTH_GRANT_INVALID")), "revoked: {refused}");

    // Removing the client ends its refresh tokens.
    let next = other;
    let (code, out, err) = cli(&admin, &["oauth", "client", "remove", "--tenant", "alpha", &host]).await;
    assert_eq!(code, 0, "{out}{err}");
    let pairs = by_refresh(&next);
    let refused = writ_tests::eventually("the removed client's refresh refused", Duration::from_secs(10), || async {
        let (status, answer) =
            token_endpoint(&edge, "alpha", &pairs.iter().map(|(k, v)| (*k, v.as_str())).collect::<Vec<_>>()).await;
        (status == 401).then_some(answer)
    })
    .await;
    assert_eq!(
        (refused["error"].as_str(), refused["reason"].as_str()),
        (Some("invalid_client"), Some("OAUTH_CLIENT_UNKNOWN"))
    );
}

/// The authorization endpoint's bad inputs, by hand: nothing redirected before the client and
/// redirect URI are known; PKCE and the resource refused back to the client; a code redeemed
/// with a wrong verifier, then once; another browser's and a denied request; guesses at the
/// token endpoint refused before the ledger and audited without flooding. Its answer: the refresh
/// token of the code it redeemed.
async fn bad_authorization_requests(cluster: &Cluster, edge: &EdgeProc, host: &str) -> String {
    let admin = cluster.all_urls()[0].clone();
    let http = no_redirects();
    let authorize = format!("http://127.0.0.1:{}/t/alpha/oauth/authorize", edge.port);
    let verifier = "v".repeat(43);
    let challenge = writ_api::oauth::s256_challenge(&verifier);
    let ask = |extra: &[(&str, &str)]| {
        let mut q: std::collections::BTreeMap<&str, &str> = [
            ("response_type", "code"),
            ("client_id", host),
            ("redirect_uri", REDIRECT),
            ("code_challenge_method", "S256"),
            ("state", "s-1"),
        ]
        .into();
        q.extend(extra.iter().copied());
        http.get(format!("{authorize}?{}", serde_urlencoded::to_string(&q).unwrap())).send()
    };
    let r =
        ask(&[("code_challenge", challenge.as_str()), ("client_id", "https://unknown.example/c.json")]).await.unwrap();
    assert_eq!(r.status(), 401, "an unregistered client: a page, no redirect");
    assert!(r.headers().get("location").is_none() && r.text().await.unwrap().contains("OAUTH_CLIENT_UNKNOWN"));
    let r =
        ask(&[("code_challenge", challenge.as_str()), ("redirect_uri", "http://127.0.0.1:2/elsewhere")]).await.unwrap();
    assert_eq!(r.status(), 400);
    assert!(r.headers().get("location").is_none() && r.text().await.unwrap().contains("OAUTH_REDIRECT_INVALID"));
    for (case, extra, error, reason) in [
        ("no challenge", vec![], "invalid_request", "OAUTH_PKCE_INVALID"),
        (
            "plain",
            vec![("code_challenge", challenge.as_str()), ("code_challenge_method", "plain")],
            "invalid_request",
            "OAUTH_PKCE_INVALID",
        ),
        (
            "another resource",
            vec![("code_challenge", challenge.as_str()), ("resource", "https://elsewhere.example/mcp")],
            "invalid_target",
            "OAUTH_RESOURCE_INVALID",
        ),
    ] {
        let r = ask(&extra).await.unwrap();
        let (at, q) = location(&r);
        assert!(r.status() == 302 && at.starts_with(REDIRECT), "{case}: {} {at}", r.status());
        assert_eq!(
            (q["error"].as_str(), q["error_description"].as_str(), q["state"].as_str()),
            (error, reason, "s-1"),
            "{case}"
        );
    }

    // A request made properly, approved through the admin API; its page needs its browser's cookie.
    let made = ask(&[("code_challenge", challenge.as_str())]).await.unwrap();
    assert_eq!(made.status(), 303);
    let wait = format!("http://127.0.0.1:{}{}", edge.port, location(&made).0);
    let cookie = made.headers()["set-cookie"].to_str().unwrap().split(';').next().unwrap().to_string();
    let id = wait.split("request=").nth(1).unwrap().to_string();
    let page = http.get(&wait).send().await.unwrap();
    assert_eq!(page.status(), 400, "without the cookie of the browser that asked");
    let page = http.get(&wait).header("cookie", &cookie).send().await.unwrap();
    assert!(page.status() == 200 && page.text().await.unwrap().contains("http-equiv=\"refresh\""), "it waits");
    cluster.admin.post_ok(&admin, &format!("/v1/tenants/alpha/oauth/requests/{id}/approve"), json!({})).await;
    let code = writ_tests::eventually("the code comes back", Duration::from_secs(10), || async {
        let r = http.get(&wait).header("cookie", &cookie).send().await.ok()?;
        let (at, q) = location(&r);
        (r.status() == 302 && at.starts_with(REDIRECT)).then(|| q["code"].clone())
    })
    .await;
    let redeem = |v: &str| {
        let pairs = [
            ("grant_type", "authorization_code"),
            ("client_id", host),
            ("code", code.as_str()),
            ("redirect_uri", REDIRECT),
            ("code_verifier", v),
        ];
        let pairs: Vec<(String, String)> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        async move {
            token_endpoint(edge, "alpha", &pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect::<Vec<_>>())
                .await
        }
    };
    let (status, answer) = redeem(&"w".repeat(43)).await;
    assert_eq!(
        (status, answer["error"].as_str(), answer["reason"].as_str()),
        (400, Some("invalid_grant"), Some("OAUTH_PKCE_INVALID")),
        "{answer}"
    );
    let (status, answer) = redeem(&verifier).await;
    assert_eq!(status, 200, "{answer}");
    let refresh = answer["refresh_token"].as_str().expect("a refresh token").to_string();
    let (status, answer) = redeem(&verifier).await;
    assert_eq!(
        (status, answer["reason"].as_str()),
        (400, Some("OAUTH_GRANT_INVALID")),
        "a code is used once: {answer}"
    );

    // A denied request sends the client access_denied.
    let made = ask(&[("code_challenge", challenge.as_str())]).await.unwrap();
    let wait = format!("http://127.0.0.1:{}{}", edge.port, location(&made).0);
    let cookie = made.headers()["set-cookie"].to_str().unwrap().split(';').next().unwrap().to_string();
    let id = wait.split("request=").nth(1).unwrap().to_string();
    let (code, out, err) = cli(&admin, &["oauth", "request", "deny", "--tenant", "alpha", &id]).await;
    assert_eq!(code, 0, "{out}{err}");
    let denied = writ_tests::eventually("the denial comes back", Duration::from_secs(10), || async {
        let r = http.get(&wait).header("cookie", &cookie).send().await.ok()?;
        (r.status() == 302).then(|| location(&r).1)
    })
    .await;
    assert_eq!((denied["error"].as_str(), denied["state"].as_str()), ("access_denied", "s-1"));

    // Guesses at the token endpoint are refused before the ledger, and audited without
    // flooding: at most one record per kind of refusal in a window, whatever their number.
    let audit = || async {
        let path = "/v1/tenants/alpha/audit?outcome=denied&limit=1000";
        cluster.admin.get(&admin, path).await.unwrap()["records"].as_array().unwrap().clone()
    };
    let before = audit().await.len();
    for i in 0..20 {
        let guess = format!("{i}.not-a-code");
        let pairs = [
            ("grant_type", "authorization_code"),
            ("client_id", host),
            ("code", guess.as_str()),
            ("redirect_uri", REDIRECT),
            ("code_verifier", verifier.as_str()),
        ];
        let (status, answer) = token_endpoint(edge, "alpha", &pairs).await;
        assert_eq!((status, answer["reason"].as_str()), (400, Some("OAUTH_GRANT_INVALID")), "{answer}");
    }
    let records = audit().await;
    assert!(records.len() <= before + 1, "20 guesses, at most one record: {} → {}", before, records.len());
    assert!(
        records
            .iter()
            .any(|r| r["reason_code"] == "OAUTH_GRANT_INVALID" && r["detail"].to_string().contains("oauth/token")),
        "the refusal is on the tenant's record: {records:?}"
    );
    let pairs =
        [("grant_type", "authorization_code"), ("client_id", host), ("code", "1.x"), ("redirect_uri", REDIRECT)];
    let (status, answer) = token_endpoint(edge, "alpha", &pairs).await;
    assert_eq!((status, answer["reason"].as_str()), (400, Some("OAUTH_PKCE_INVALID")), "no verifier: {answer}");
    refresh
}

/// A headless agent of a tenant without an IdP: the SDK's private_key_jwt provider gets a token
/// from the tenant's own authorization server with nothing but its key and the MCP URL; an
/// assertion is used once, and one signed by another key is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_headless_agent_authenticates_with_its_private_key_at_writs_own_server() {
    let (cluster, dir, edge) = deployment().await;
    let admin = cluster.all_urls()[0].clone();
    let alpha = tenant_url(&edge, "alpha");
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    let raw = key.public_key_raw();
    let b64 = |b: &[u8]| {
        use base64::Engine;
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b)
    };
    let jwks = json!({"keys": [{"kty": "EC", "crv": "P-256", "x": b64(&raw[1..33]), "y": b64(&raw[33..65]),
                                "kid": "k1", "alg": "ES256", "use": "sig"}]});
    let (key_file, jwks_file) = (dir.path().join("agent.pem"), dir.path().join("agent.jwks"));
    std::fs::write(&key_file, key.serialize_pem()).unwrap();
    std::fs::write(&jwks_file, jwks.to_string()).unwrap();
    let jwks_arg = jwks_file.display().to_string();
    let args = [
        "oauth",
        "client",
        "set",
        "--tenant",
        "alpha",
        "ci-agent",
        "--principal",
        "agent",
        "--jwks-file",
        &jwks_arg,
        "--scope",
        "tools:list",
        "--scope",
        "tools:call:list_devices",
    ];
    let (code, out, err) = cli(&admin, &args).await;
    assert_eq!(code, 0, "{out}{err}");

    let sdk = writ_tests::tools::dir().join("mcp-ts1/node_modules/@modelcontextprotocol/sdk");
    let script = format!("{}/node/oauth_client.mjs", env!("CARGO_MANIFEST_DIR"));
    let key_arg = format!("key:{}", key_file.display());
    let out = tokio::process::Command::new(writ_tests::tools::node())
        .arg(script)
        .arg(&sdk)
        .args([&alpha, "ci-agent", &key_arg, SCOPES, "list_devices"])
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(120), out).await.expect("the SDK client ends").expect("it runs");
    let report: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|_| {
        panic!("{}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
    });
    assert!(report["error"].is_null(), "{report}");
    assert_eq!(report["read"]["devices"][0]["name"], "alpha-press", "{report}");
    let issuer = format!("http://127.0.0.1:{}/t/alpha", edge.port);
    let urls: Vec<&str> = report["requests"].as_array().unwrap().iter().map(|r| r["url"].as_str().unwrap()).collect();
    assert!(urls.contains(&format!("{issuer}/oauth/token").as_str()), "it found the token endpoint itself: {urls:?}");

    // An assertion is used once; another key's is refused.
    let assertion = |key_pem: &str, jti: &str| {
        let claims = json!({"iss": "ci-agent", "sub": "ci-agent", "aud": issuer, "jti": jti,
                            "exp": writ_client::now_ms() / 1000 + 60});
        let key = jsonwebtoken::EncodingKey::from_ec_pem(key_pem.as_bytes()).unwrap();
        jsonwebtoken::encode(&jsonwebtoken::Header::new(jsonwebtoken::Algorithm::ES256), &claims, &key).unwrap()
    };
    let by = |a: &str| {
        [
            ("grant_type", "client_credentials"),
            ("client_assertion_type", "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"),
            ("client_assertion", a),
            ("scope", "tools:list"),
        ]
        .map(|(k, v)| (k, v.to_string()))
    };
    let once = by(&assertion(&key.serialize_pem(), "replayed"));
    let once: Vec<(&str, &str)> = once.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let (status, answer) = token_endpoint(&edge, "alpha", &once).await;
    assert_eq!(status, 200, "{answer}");
    assert!(answer["refresh_token"].is_null(), "client credentials get no refresh token");
    let (status, answer) = token_endpoint(&edge, "alpha", &once).await;
    assert_eq!(
        (status, answer["error"].as_str(), answer["reason"].as_str()),
        (401, Some("invalid_client"), Some("OAUTH_CLIENT_UNKNOWN")),
        "{answer}"
    );
    let other = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    let forged = by(&assertion(&other.serialize_pem(), "forged"));
    let forged: Vec<(&str, &str)> = forged.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let (status, answer) = token_endpoint(&edge, "alpha", &forged).await;
    assert_eq!((status, answer["reason"].as_str()), (401, Some("OAUTH_CLIENT_UNKNOWN")), "{answer}");
    // And its token is alpha's: refused at beta's URL.
    let (status, _, body) = rpc(&tenant_url(&edge, "beta"), report["token"].as_str(), "tools/list", json!({})).await;
    assert_eq!((status, body["error"]["data"]["reason"].as_str()), (401, Some("AUTH_TENANT_MISMATCH")), "{body}");
}
