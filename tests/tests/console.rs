//! The operations desk, through `writ dev` and a real browser: operators sign in through a real
//! OpenID provider (the npm `oidc-provider`), see an authorization request arrive without
//! reloading (server-sent events from the ledger), approve it as themselves; a viewer is
//! refused by the server, not by a hidden button; axe-core finds no serious or critical
//! violation on any page. Debian's chromium and chromedriver, driven by Selenium
//! (`make browserdeps`, `make pydeps`). And the bad inputs at the HTTP boundary: forged
//! changes, strangers, a callback this browser did not start.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::Duration;

use serde_json::{json, Value};
use writ_tests::idp::OpenIdProvider;
use writ_tests::procs::{run_cli_as, DevProcess};

/// Where the demo host's browser is sent back to (nothing listens).
const REDIRECT: &str = "http://127.0.0.1:1/callback";

/// `writ admin ARGS` against `dev` with `credential`.
fn cli(dev: &DevProcess, credential: &str, args: &[&str]) -> String {
    let ca = std::path::Path::new(dev.var("WRIT_CA_FILE"));
    let (code, out, err) = run_cli_as(dev.var("WRIT_ADMIN_URL"), credential, ca, args);
    assert_eq!(code, 0, "writ admin {args:?}: {out}{err}");
    out
}

/// `writ dev` (with `extra` arguments) with a sign-in provider, operators `ann` (approver) and
/// `vic` (viewer) who sign in there, and a client of the demo tenant's own authorization server.
async fn desk(extra: &[&str]) -> (DevProcess, OpenIdProvider) {
    let dev = DevProcess::start(extra).await;
    let callback = format!("{}/console/callback", dev.var("WRIT_ADMIN_URL"));
    let client = ["agent", "agent-secret", "openid"];
    let idp = OpenIdProvider::start(0, "k1", &client, &["https://unused.example/mcp"], Some(&callback)).await;
    let token = dev.var("WRIT_ADMIN_TOKEN").to_string();
    let provider = ["operator", "provider", "set", "--issuer", &idp.issuer, "--client-id", "writ-console"];
    cli(&dev, &token, &[&provider[..], &["--allow-private-network"]].concat());
    for (name, role) in [("ann", "approver"), ("vic", "viewer")] {
        let sign_in = ["--sign-in-issuer", idp.issuer.as_str(), "--sign-in-subject", name];
        cli(&dev, &token, &[&["operator", "set", name, "--role", role][..], &sign_in].concat());
    }
    let client = ["oauth", "client", "set", "--tenant", "demo", "host-1", "--principal", "demo-agent"];
    cli(&dev, &token, &[&client[..], &["--redirect-uri", REDIRECT]].concat());
    (dev, idp)
}

/// A browser's authorization request to the demo tenant's server, left waiting: its id.
async fn request(dev: &DevProcess) -> String {
    let edge = dev.var("WRIT_MCP_URL").trim_end_matches("/mcp").to_string();
    let challenge = writ_api::oauth::s256_challenge(&"v".repeat(43));
    let query = serde_urlencoded::to_string([
        ("response_type", "code"),
        ("client_id", "host-1"),
        ("redirect_uri", REDIRECT),
        ("code_challenge", challenge.as_str()),
        ("code_challenge_method", "S256"),
        ("state", "s-1"),
    ])
    .unwrap();
    let http = reqwest::Client::builder().no_proxy().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    let made = http.get(format!("{edge}/t/demo/oauth/authorize?{query}")).send().await.expect("the edge answers");
    assert_eq!(made.status(), 303, "the request waits for an operator");
    let at = made.headers()["location"].to_str().unwrap().to_string();
    at.split("request=").nth(1).expect("the waiting page names the request").to_string()
}

/// The demo tenant's authorization request `id` as the admin API lists it.
async fn listed(dev: &DevProcess, id: &str) -> Value {
    let token = dev.var("WRIT_ADMIN_TOKEN").to_string();
    let out = cli(dev, &token, &["--output", "json", "oauth", "request", "list", "--tenant", "demo"]);
    let list: Value = serde_json::from_str(&out).expect("JSON");
    list["requests"].as_array().unwrap().iter().find(|r| r["request_id"] == id).cloned().unwrap_or(Value::Null)
}

/// The demo agent's call of a critical action (published for it), verified and waiting for
/// another person's approval: its operation id.
async fn critical_call(dev: &DevProcess) -> String {
    let (url, mcp, agent) = (dev.var("WRIT_ADMIN_URL"), dev.var("WRIT_MCP_URL"), dev.var("WRIT_DEMO_TOKEN"));
    let admin =
        writ_tests::procs::Admin::trusting(std::path::Path::new(dev.var("WRIT_CA_FILE")), dev.var("WRIT_ADMIN_TOKEN"));
    let catalog = json!({"actions": [
        {"id": "crush", "title": "Crush", "description": "Crushes with the press.", "input_schema": {"type": "object"},
         "risk": "critical", "execution": "operation", "device_class": "press.v1", "cost_units": 1}]});
    admin.post_ok(url, "/v1/tenants/demo/catalogs", catalog).await;
    let tool = |name: &'static str, arguments: Value| async move {
        writ_tests::mcp::rpc(mcp, Some(agent), "tools/call", json!({"name": name, "arguments": arguments})).await.2
    };
    let call = json!({"action": "crush", "input": {}, "device": "demo-press"});
    let proposed = writ_tests::eventually("the critical call proposed", Duration::from_secs(20), || async {
        let r = tool("operation.propose", call.clone()).await;
        r["result"]["structuredContent"]["proposal"].as_str().map(str::to_string)
    })
    .await;
    let mut args = call.clone();
    (args["idempotency_key"], args["deadline_s"], args["proposal"]) = (json!("crush-1"), json!(600), json!(proposed));
    let called = tool("operation.execute", args).await;
    assert_eq!(called["result"]["structuredContent"]["state"], "proposed", "{called}");
    called["result"]["structuredContent"]["operation_id"].as_str().expect("id").to_string()
}

/// The browser script (`tests/python/console_browser.py`): one JSON command, one JSON answer.
struct Browser {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Browser {
    fn start(origin: &str, shots: &std::path::Path) -> Browser {
        let axe = writ_tests::tools::dir().join("axe/node_modules/axe-core/axe.min.js");
        assert!(axe.exists(), "axe-core is not installed: run `make nodedeps`");
        let script = format!("{}/python/console_browser.py", env!("CARGO_MANIFEST_DIR"));
        let mut child = Command::new("python3")
            .arg(script)
            .arg(origin)
            .arg(axe)
            .arg(shots)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("the browser script starts (make pydeps browserdeps)");
        let (stdin, stdout) = (child.stdin.take().unwrap(), BufReader::new(child.stdout.take().unwrap()));
        Browser { child, stdin, stdout }
    }

    /// Sends `command`, answers what the browser saw (blocking: run off the runtime's threads
    /// only where the runtime must serve meanwhile).
    fn send(&mut self, command: Value) -> Value {
        writeln!(self.stdin, "{command}").expect("the browser script reads");
        let mut line = String::new();
        self.stdout.read_line(&mut line).expect("the browser script answers");
        let answer: Value = serde_json::from_str(&line).unwrap_or_else(|_| panic!("not JSON: {line}"));
        assert!(answer["error"].is_null(), "{command}: {answer}");
        answer
    }

    /// axe-core on the current page: it ran its rules, and found no serious or critical
    /// violation.
    fn accessible(&mut self, page: &str) {
        let found = self.send(json!({"do": "axe"}));
        assert!(found["passes"].as_u64().unwrap_or(0) > 0, "{page}: axe ran no rule: {found}");
        let bad: Vec<&Value> = found["violations"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|v| matches!(v["impact"].as_str(), Some("serious" | "critical") | None))
            .collect();
        assert!(bad.is_empty(), "{page}: {bad:?}");
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = writeln!(self.stdin, "{}", json!({"do": "quit"}));
        let _ = self.child.wait();
    }
}

#[tokio::test]
async fn operators_sign_in_and_decide_at_the_desk_in_a_real_browser() {
    let (dev, _idp) = desk(&[]).await;
    let shots = std::env::var_os("WRIT_CONSOLE_SHOTS")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join("writ-console-shots"));
    std::fs::create_dir_all(&shots).unwrap();
    let mut browser = Browser::start(dev.var("WRIT_ADMIN_URL"), &shots);

    // Ann signs in at the provider and lands on the desk: nothing waits yet.
    let signed = browser.send(json!({"do": "sign_in", "login": "ann"}));
    assert!(signed["bar"].as_str().unwrap().contains("operator:ann (approver)"), "{signed}");
    browser.accessible("now, empty");
    // A request arrives while she looks: pushed, not reloaded.
    let first = request(&dev).await;
    let row = browser.send(json!({"do": "wait_row", "prefix": "request-"}));
    assert_eq!(
        (row["id"].as_str(), row["reloaded"].as_bool()),
        (Some(format!("request-{first}").as_str()), Some(false))
    );
    browser.send(json!({"do": "screenshot", "name": "now"}));
    browser.accessible("now, a request waiting");
    let decided = browser.send(json!({"do": "decide", "row": format!("request-{first}"), "button": "Approve"}));
    assert!(decided["url"].as_str().unwrap().ends_with("/console"), "{decided}");
    let first = listed(&dev, &first).await;
    assert_eq!((first["status"].as_str(), first["decided_by"].as_str()), (Some("approved"), Some("operator:ann")));
    // The demo executor reports a reading: the operation waits for a verdict, pushed to the
    // desk; its page shows the call and its timeline, and Ann rejects it as herself.
    let (_, _, reading) = writ_tests::mcp::rpc(
        dev.var("WRIT_MCP_URL"),
        Some(dev.var("WRIT_DEMO_TOKEN")),
        "tools/call",
        json!({"name": "read_press"}),
    )
    .await;
    let operation =
        reading["result"]["_meta"]["writ/operation"]["operation_id"].as_str().expect("an operation").to_string();
    let row = browser.send(json!({"do": "wait_row", "prefix": "operation-"}));
    assert_eq!(row["id"].as_str(), Some(format!("operation-{operation}").as_str()), "{row}");
    let shown = browser.send(json!({"do": "open", "path": format!("/console/operations/demo/{operation}")}));
    assert!(shown["text"].as_str().unwrap().contains("effect_reported"), "{shown}");
    browser.send(json!({"do": "screenshot", "name": "operation"}));
    browser.accessible("operation");
    let rejected = browser.send(json!({"do": "click", "button": "Reject"}));
    assert!(rejected["text"].as_str().unwrap().contains("rejected by 'operator:ann'"), "{rejected}");
    // A critical call waits for a second person: it arrives at the desk, and Ann approves
    // exactly that call from its page (the ledger records her as its approver).
    browser.send(json!({"do": "open", "path": "/console"}));
    let id = critical_call(&dev).await;
    browser.send(json!({"do": "wait_row", "prefix": format!("operation-{id}")}));
    // The agent that asked cannot approve its own call.
    let own = json!({"name": "operation.approve", "arguments": {"operation_id": id, "approve": true}});
    let (_, _, own) =
        writ_tests::mcp::rpc(dev.var("WRIT_MCP_URL"), Some(dev.var("WRIT_DEMO_TOKEN")), "tools/call", own).await;
    let refused = own["error"]["data"]["reason"].as_str().or(own["result"]["_meta"]["writ/reason"].as_str());
    assert!(matches!(refused, Some("TOOL_NOT_FOUND" | "APP_SCOPE_FORBIDDEN")), "self-approval refused: {own}");
    let shown = browser.send(json!({"do": "open", "path": format!("/console/operations/demo/{id}")}));
    assert!(shown["text"].as_str().unwrap().contains("crush"), "{shown}");
    browser.send(json!({"do": "screenshot", "name": "approval"}));
    browser.accessible("approval");
    let approved = browser.send(json!({"do": "click", "button": "Approve this call"}));
    assert!(!approved["text"].as_str().unwrap().contains("Approve this call"), "{approved}");
    let admin =
        writ_tests::procs::Admin::trusting(std::path::Path::new(dev.var("WRIT_CA_FILE")), dev.var("WRIT_ADMIN_TOKEN"));
    let op = admin.get(dev.var("WRIT_ADMIN_URL"), &format!("/v1/tenants/demo/operations/{id}")).await.unwrap();
    assert!(op["answers"]["approval"].as_str().unwrap().contains("\"approver\":\"operator:ann\""), "{op}");
    assert_ne!(op["state"], "proposed", "{op}");
    // The press crushes, and its camera's frame comes back as evidence: the operation's page
    // shows the image as the browser decoded it, beside the report's own evidence.
    let path = format!("/v1/tenants/demo/operations/{id}");
    writ_tests::eventually("the press reports with its evidence", Duration::from_secs(30), || async {
        let op = admin.get(dev.var("WRIT_ADMIN_URL"), &path).await.ok()?;
        (!op["evidence"].as_array()?.is_empty()).then_some(())
    })
    .await;
    let shown = browser.send(json!({"do": "open", "path": format!("/console/operations/demo/{id}")}));
    let text = shown["text"].as_str().unwrap();
    assert!(text.contains("image/png"), "{shown}");
    assert!(text.contains("Audit records") && text.contains("operation_submitted"), "its trail: {text}");
    let images = browser.send(json!({"do": "images"}));
    let image = &images["images"][0];
    assert_eq!((image["width"].as_u64(), image["height"].as_u64()), (Some(96), Some(64)), "{images}");
    assert!(image["alt"].as_str().unwrap().starts_with("Evidence image"), "{images}");
    browser.send(json!({"do": "screenshot", "name": "evidence"}));
    browser.accessible("evidence");
    // The trail names her: the audit page finds her acts, and so does its export.
    let audit = browser.send(json!({"do": "open", "path": "/console/audit?tenant=demo&principal=operator:ann"}));
    assert!(audit["text"].as_str().unwrap().contains("\"operator\":\"ann\""), "{audit}");
    browser.send(json!({"do": "screenshot", "name": "audit"}));
    browser.accessible("audit");
    // The tenant's page: settings against what it holds, principals, tokens, devices. Ann
    // approves but does not configure: revoking a token is refused to her by the server.
    let tenant = browser.send(json!({"do": "open", "path": "/console/tenants/demo"}));
    assert!(tenant["text"].as_str().unwrap().contains("demo-press"), "{tenant}");
    assert!(tenant["text"].as_str().unwrap().contains("enrolled"), "its executor: {tenant}");
    let text = tenant["text"].as_str().unwrap();
    assert!(text.contains("connected to edge") && text.contains(&format!("{id} ")), "liveness, last dispatch: {text}");
    assert!(text.contains("Catalog versions") && text.contains("+crush"), "the catalog's change: {text}");
    browser.send(json!({"do": "screenshot", "name": "tenant"}));
    browser.accessible("tenant");
    let refused = browser.send(json!({"do": "click", "button": "Revoke"}));
    assert!(refused["text"].as_str().unwrap().contains("OPERATOR_ROLE_REQUIRED"), "{refused}");
    let cluster = browser.send(json!({"do": "open", "path": "/console/cluster"}));
    assert!(cluster["text"].as_str().unwrap().contains("leader"), "{cluster}");
    browser.send(json!({"do": "screenshot", "name": "cluster"}));
    browser.accessible("cluster");
    let signed_out = browser.send(json!({"do": "sign_out"}));
    assert!(signed_out["url"].as_str().unwrap().ends_with("/console/sign-in"), "{signed_out}");
    browser.send(json!({"do": "screenshot", "name": "sign-in"}));
    browser.accessible("sign-in");

    // Vic, a viewer, sees the next request but the server refuses his approval.
    browser.send(json!({"do": "sign_in", "login": "vic"}));
    let second = request(&dev).await;
    browser.send(json!({"do": "wait_row", "prefix": "request-"}));
    let refused = browser.send(json!({"do": "decide", "row": format!("request-{second}"), "button": "Approve"}));
    assert!(refused["text"].as_str().unwrap().contains("OPERATOR_ROLE_REQUIRED"), "{refused}");
    browser.send(json!({"do": "screenshot", "name": "refused"}));
    browser.accessible("refused");
    assert_eq!(listed(&dev, &second).await["status"], "pending", "nothing changed");
}

/// A form posted to `url` with `cookie`, from `origin`.
async fn post_form(http: &reqwest::Client, url: &str, cookie: &str, origin: &str, body: String) -> reqwest::Response {
    let request = http.post(url).header("origin", origin).header("content-type", "application/x-www-form-urlencoded");
    let request = if cookie.is_empty() { request } else { request.header("cookie", cookie) };
    request.body(body).send().await.expect("the console answers")
}

/// An HTTP client of the admin listener that trusts the dev CA and follows no redirect.
fn admin_http(dev: &DevProcess) -> reqwest::Client {
    let trust = writ_client::ClientTls::trusting(std::path::Path::new(dev.var("WRIT_CA_FILE"))).expect("dev CA");
    trust
        .apply(reqwest::Client::builder().no_proxy().redirect(reqwest::redirect::Policy::none()))
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap()
}

#[tokio::test]
async fn the_desk_refuses_forged_changes_and_strangers() {
    // The demo executor's certificate lives an hour: an alarm on the desk.
    let (dev, _idp) = desk(&["--executor-cert-ttl-s", "3600"]).await;
    let (origin, http) = (dev.var("WRIT_ADMIN_URL").to_string(), admin_http(&dev));
    let token = dev.var("WRIT_ADMIN_TOKEN").to_string();
    let ann = cli(&dev, &token, &["operator", "session", "ann", "--ttl", "10m"]).trim().to_string();
    let session = format!("writ_session={ann}");

    // Without a session, or with a forged one: the sign-in page, nothing else.
    for cookie in ["", "writ_session=wos_1.0123456789abcdef0123456789abcdef.guess"] {
        let r = http.get(format!("{origin}/console")).header("cookie", cookie).send().await.unwrap();
        assert_eq!((r.status().as_u16(), r.headers()["location"].to_str().unwrap()), (303, "/console/sign-in"));
    }
    // The desk: strict headers, no inline script, the session's CSRF token in its forms.
    let id = request(&dev).await;
    let page = http.get(format!("{origin}/console")).header("cookie", &session).send().await.unwrap();
    let csp = page.headers()["content-security-policy"].to_str().unwrap().to_string();
    assert!(csp.contains("script-src 'self'") && csp.contains("frame-ancestors 'none'"), "{csp}");
    assert_eq!(page.headers()["x-frame-options"], "DENY");
    let html = page.text().await.unwrap();
    assert!(!html.contains("<script>") && html.contains(&format!("request-{id}")), "{html}");
    assert!(html.contains("its certificate expires"), "the executor's certificate is an alarm: {html}");
    let csrf = writ_tests::desk::hidden(&html, "csrf");

    // Forged changes: no token, a wrong one, another origin. Each refused, nothing changed.
    let approve = format!("{origin}/console/oauth/demo/{id}/approve");
    let host_origin = origin.clone();
    for (form, from) in [
        ("", host_origin.as_str()),
        ("csrf=0000", host_origin.as_str()),
        (&*format!("csrf={csrf}"), "https://evil.example"),
    ] {
        let r = post_form(&http, &approve, &session, from, form.to_string()).await;
        assert_eq!(r.status(), 403, "{form} from {from}");
        assert!(r.text().await.unwrap().contains("CONSOLE_REQUEST_FORGED"));
    }
    assert_eq!(listed(&dev, &id).await["status"], "pending");
    // `writ dev`'s first operator signs in with the credential its env file holds, from this
    // origin only; a made-up credential signs nobody in.
    assert!(dev.var("WRIT_CONSOLE_URL").ends_with("/console"));
    let credential_url = format!("{origin}/console/sign-in/credential");
    let sign_in = |credential: String, from: String| {
        let (http, url) = (http.clone(), credential_url.clone());
        let form = serde_urlencoded::to_string([("credential", credential)]).unwrap();
        async move { post_form(&http, &url, "", &from, form).await }
    };
    let first = dev.var("WRIT_CONSOLE_CREDENTIAL").to_string();
    let r = sign_in(first.clone(), "https://evil.example".into()).await;
    assert!(r.status() == 403 && r.text().await.unwrap().contains("CONSOLE_REQUEST_FORGED"));
    let r = sign_in(format!("{first}x"), origin.clone()).await;
    assert!(r.status() == 401 && r.text().await.unwrap().contains("OPERATOR_SESSION_INVALID"));
    let r = sign_in(first, origin.clone()).await;
    assert_eq!((r.status().as_u16(), r.headers()["location"].to_str().unwrap()), (303, "/console"));
    let cookie = r.headers()["set-cookie"].to_str().unwrap();
    assert!(cookie.contains("HttpOnly") && cookie.contains("Secure") && cookie.contains("SameSite=Strict"), "{cookie}");
    // The audit export: NDJSON of the search, for the signed-in operator only.
    let export = format!("{origin}/console/audit/export?tenant=demo&operation=tenant_created");
    let r = http.get(&export).header("cookie", &session).send().await.unwrap();
    assert_eq!(r.headers()["content-type"], "application/x-ndjson");
    let lines: Vec<Value> = r.text().await.unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert!(lines.len() == 1 && lines[0]["operation"] == "tenant_created", "{lines:?}");
    assert_eq!(http.get(&export).send().await.unwrap().status(), 303, "signed out: the sign-in page");
    // Searches by trace and time: bounded and well formed, or refused by name.
    let long = "t".repeat(65);
    for bad in [format!("trace={long}"), "since=yesterday".to_string(), "since=2026-02-30".to_string()] {
        let r = http.get(format!("{origin}/console/audit?tenant=demo&{bad}")).header("cookie", &session).send().await;
        let r = r.unwrap();
        assert!(r.status() == 400 && r.text().await.unwrap().contains("INPUT_INVALID"), "{bad}");
    }
    let since = format!("{origin}/console/audit?tenant=demo&operation=tenant_created&since=2000-01-01");
    let r = http.get(&since).header("cookie", &session).send().await.unwrap().text().await.unwrap();
    assert!(r.contains("tenant_created</td>"), "{r}");
    let later = since.replace("2000-01-01", "2999-01-01");
    let r = http.get(&later).header("cookie", &session).send().await.unwrap().text().await.unwrap();
    assert!(r.contains("No record matches."), "{r}");
    // A callback this browser did not start.
    let r = http.get(format!("{origin}/console/callback?code=c&state=s")).send().await.unwrap();
    assert_eq!(r.status(), 401);
    assert!(r.text().await.unwrap().contains("OPERATOR_SIGN_IN_FAILED"));
    // The real change goes through, as ann.
    let r = post_form(&http, &approve, &session, &origin, format!("csrf={csrf}")).await;
    assert_eq!(r.status(), 303);
    assert_eq!(listed(&dev, &id).await["decided_by"], "operator:ann");

    // An operator of another tenant sees none of this one: not its pages, its operations, its
    // trail or the cluster.
    cli(&dev, &token, &["tenant", "create", "acme"]);
    cli(&dev, &token, &["operator", "set", "tina", "--role", "operator", "--tenant", "acme"]);
    let tina = cli(&dev, &token, &["operator", "session", "tina", "--ttl", "10m"]).trim().to_string();
    let as_tina =
        |path: &str| http.get(format!("{origin}{path}")).header("cookie", format!("writ_session={tina}")).send();
    let blob = format!("/console/operations/demo/{id}/evidence/{}", "0".repeat(64));
    for path in ["/console/tenants/demo", &format!("/console/operations/demo/{id}"), &blob, "/console/cluster"] {
        let r = as_tina(path).await.unwrap();
        assert_eq!(r.status(), 403, "{path}");
        assert!(r.text().await.unwrap().contains("OPERATOR_SCOPE_VIOLATION"), "{path}");
    }
    // Evidence the tenant does not hold: refused by name, for its own operators too.
    let r = http.get(format!("{origin}{blob}")).header("cookie", &session).send().await.unwrap();
    assert!(r.status() == 404 && r.text().await.unwrap().contains("EVIDENCE_NOT_FOUND"));
    let r = as_tina("/console/audit?tenant=demo").await.unwrap();
    assert!(r.status() == 404 && r.text().await.unwrap().contains("TENANT_NOT_FOUND"));
    let now = as_tina("/console").await.unwrap().text().await.unwrap();
    assert!(!now.contains(&format!("request-{id}")) && now.contains("operator:tina"), "{now}");
    // Signing out everywhere ends every session of the operator, on every browser.
    let other = cli(&dev, &token, &["operator", "session", "tina", "--ttl", "10m"]).trim().to_string();
    let page = as_tina("/console").await.unwrap().text().await.unwrap();
    let csrf_tina = writ_tests::desk::hidden(&page, "csrf");
    let everywhere = format!("{origin}/console/sign-out/everywhere");
    let r = post_form(&http, &everywhere, &format!("writ_session={tina}"), &origin, format!("csrf={csrf_tina}")).await;
    assert_eq!(r.status(), 303);
    for gone in [&tina, &other] {
        let r = http.get(format!("{origin}/console")).header("cookie", format!("writ_session={gone}")).send().await;
        assert_eq!(r.unwrap().status(), 303, "signed out everywhere");
    }
    // A session past its lifetime, or unused past its idle limit (long before its 10 minutes),
    // is no session: the desk sends its browser to sign in again.
    let brief = cli(&dev, &token, &["operator", "session", "tina", "--ttl", "1s"]);
    let idle = cli(&dev, &token, &["operator", "session", "tina", "--ttl", "10m", "--idle", "1s"]);
    for (what, credential) in [("expires", brief.trim()), ("goes idle", idle.trim())] {
        writ_tests::eventually(&format!("the session {what}"), Duration::from_secs(20), || async {
            let cookie = format!("writ_session={credential}");
            let r = http.get(format!("{origin}/console")).header("cookie", cookie).send().await;
            (r.ok()?.status() == 303).then_some(())
        })
        .await;
    }

    // An admin revokes the demo agent's token from the tenant's page; the edge refuses it then.
    let desk = writ_tests::desk::Desk::sign_in(&dev).await;
    let token = dev.var("WRIT_DEMO_TOKEN");
    let jti = writ_api::auth::segment(token, 1).and_then(|c| c["jti"].as_str().map(str::to_string)).unwrap();
    let (status, page) = desk.get("/console/tenants/demo").await;
    assert!(status == 200 && page.contains(&format!("token-{jti}")), "{page}");
    let csrf = writ_tests::desk::hidden(&page, "csrf");
    let (status, back) = desk.post(&format!("/console/tenants/demo/tokens/{jti}/revoke"), &[("csrf", &csrf)]).await;
    assert_eq!((status, back.as_str()), (303, "/console/tenants/demo"));
    let (status, _, _) = writ_tests::mcp::rpc(dev.var("WRIT_MCP_URL"), Some(token), "tools/list", json!({})).await;
    assert_eq!(status, 401, "a revoked token");
}
