//! Issue 5, must-shows 3, 4, 5, 7 and 8 through real processes: `writ dev` (ledger, admin API,
//! MCP edge and its mutual-TLS executor endpoint) and `writ executor run` processes enrolled with
//! `writ executor enroll` — agents speak MCP, executors speak the executor wire with the
//! certificates they enrolled for, operators use the admin API and CLI.

use std::time::Duration;

use serde_json::{json, Value};
use writ_tests::eventually;
use writ_tests::mcp::rpc;
use writ_tests::procs::{mtls_client, Admin, DevProcess, ExecutorProc};

/// The dev process plus what the tests provision in its demo tenant.
struct World {
    dev: DevProcess,
    admin: Admin,
    dir: tempfile::TempDir,
}

impl World {
    async fn start() -> World {
        World::start_with(&[]).await
    }

    async fn start_with(extra: &[&str]) -> World {
        // Refused handshakes are audited as one aggregate per second here (60 s by default).
        let args: Vec<&str> = ["--executor-refusal-window-s", "1"].iter().chain(extra).copied().collect();
        let dev = DevProcess::start(&args).await;
        let ca = std::path::Path::new(dev.var("WRIT_CA_FILE"));
        let admin = Admin::trusting(ca, dev.var("WRIT_ADMIN_TOKEN"));
        World { dev, admin, dir: tempfile::tempdir().unwrap() }
    }

    fn admin_url(&self) -> &str {
        self.dev.var("WRIT_ADMIN_URL")
    }

    fn mcp(&self) -> &str {
        self.dev.var("WRIT_MCP_URL")
    }

    async fn device(&self, name: &str) {
        let body = json!({"name": name, "site": "demo-site", "device_class": "press.v1"});
        self.admin.post_ok(self.admin_url(), "/v1/tenants/demo/devices", body).await;
    }

    /// A principal of the demo tenant and a token for it.
    async fn principal(&self, name: &str, scopes: &[&str]) -> String {
        let body = if scopes.is_empty() {
            json!({"name": name, "kind": "agent", "preset": "full"})
        } else {
            json!({"name": name, "kind": "agent", "scopes": scopes})
        };
        self.admin.post_ok(self.admin_url(), "/v1/tenants/demo/principals", body).await;
        let t = self
            .admin
            .post_ok(self.admin_url(), "/v1/tenants/demo/tokens", json!({"principal": name, "audience": self.mcp()}))
            .await;
        t["token"].as_str().unwrap().to_string()
    }

    /// Enrolls an executor for `devices` (not started).
    async fn executor(&self, name: &str, devices: &[&str], handler: &str) -> ExecutorProc {
        ExecutorProc::enroll(
            &self.admin.client(self.admin_url()),
            "demo",
            "demo-site",
            devices,
            self.mcp(),
            &self.dir.path().join(name),
            handler,
        )
        .await
    }

    async fn tool(&self, token: &str, name: &str, args: Value) -> Value {
        let (_, _, r) = rpc(self.mcp(), Some(token), "tools/call", json!({"name": name, "arguments": args})).await;
        r["result"].clone()
    }

    async fn execute(&self, token: &str, args: Value) -> Value {
        self.tool(token, "operation.execute", args).await
    }

    async fn readback(&self, token: &str, id: &str) -> Value {
        self.tool(token, "operation.readback", json!({"operation_id": id})).await["structuredContent"].clone()
    }

    /// Waits for the operation to reach `state`.
    async fn wait_state(&self, token: &str, id: &str, state: &str) -> Value {
        eventually(&format!("operation {id} to be {state}"), Duration::from_secs(20), || async {
            let op = self.readback(token, id).await;
            (op["state"] == state).then_some(op)
        })
        .await
    }

    async fn audit(&self) -> Vec<Value> {
        let page = self.admin.get(self.admin_url(), "/v1/tenants/demo/audit?limit=1000").await.unwrap();
        page["records"].as_array().cloned().unwrap_or_default()
    }
}

fn reason(result: &Value) -> String {
    result["_meta"]["writ/reason"].as_str().unwrap_or_default().to_string()
}

fn op_id(result: &Value) -> String {
    result["structuredContent"]["operation_id"].as_str().unwrap_or_else(|| panic!("no operation: {result}")).to_string()
}

fn press(device: &str, key: &str) -> Value {
    json!({"action": "home_press", "input": {}, "device": device, "idempotency_key": key})
}

/// Reads NDJSON frames of a dispatch stream until one satisfies `want`.
async fn next_frame(
    body: &mut (impl futures::Stream<Item = reqwest::Result<axum::body::Bytes>> + Unpin),
    buf: &mut String,
    want: impl Fn(&Value) -> bool,
) -> Value {
    let reading = async {
        loop {
            while let Some(nl) = buf.find('\n') {
                let line: String = buf.drain(..=nl).collect();
                let frame: Value = serde_json::from_str(&line).expect("frame");
                if want(&frame) {
                    return frame;
                }
            }
            let chunk = futures::StreamExt::next(body).await.expect("stream open").expect("chunk");
            buf.push_str(&String::from_utf8_lossy(&chunk));
        }
    };
    tokio::time::timeout(Duration::from_secs(15), reading).await.expect("a frame in time")
}

/// Must-shows 3 and 4: one holder per device, stale fencing tokens refused at the executor
/// endpoint, deadlines passing while queued expire the operation before any attempt, and an
/// executor refuses dispatches it must not run (deadline too close, precondition not met).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reservations_fencing_deadlines_and_refusals() {
    let w = World::start().await;
    for d in ["press-a", "press-b", "press-c"] {
        w.device(d).await;
    }
    let agent = w.principal("agent-1", &[]).await;
    let rival = w.principal("agent-2", &[]).await;

    // 3. Two agents at once on press-a: exactly one holds it; the other gets DEVICE_RESERVED
    // with a retry hint.
    let (a, b) =
        tokio::join!(w.execute(&agent, press("press-a", "race-1")), w.execute(&rival, press("press-a", "race-2")));
    let (winner, loser) = if a["isError"] == Value::Null { (a, b) } else { (b, a) };
    assert_eq!(winner["isError"], Value::Null, "{winner}");
    assert_eq!(reason(&loser), "DEVICE_RESERVED", "{loser}");
    assert!(loser["content"][0]["text"].as_str().unwrap().contains("retry after"), "{loser}");

    // The device's executor is played by hand with its enrolled certificate: the operation
    // reaches it on the dispatch stream; cancelled, the device is reserved anew with the next
    // fencing token, and the old token is refused.
    let manual = w.executor("manual", &["press-a"], "kind = \"simulated\"").await;
    let client = manual.mtls_client();
    let endpoint = std::fs::read_to_string(manual.dir.join("executor.toml")).unwrap();
    let endpoint = endpoint.split('"').find(|s| s.starts_with("https://")).expect("edge url").to_string();
    let first = op_id(&winner);
    let stream = client.get(format!("{endpoint}/executor/v1/dispatch")).send().await.unwrap();
    assert_eq!(stream.status(), 200);
    let mut body = stream.bytes_stream();
    let mut buf = String::new();
    let frame = next_frame(&mut body, &mut buf, |f| f["type"] == "dispatch").await;
    assert_eq!(frame["dispatch"]["operation_id"], first.as_str(), "{frame}");
    assert_eq!(frame["dispatch"]["fencing_token"], 1);
    w.dev.cli(&["operation", "cancel", "--tenant", "demo", &first]);
    let second = op_id(&w.execute(&rival, press("press-a", "race-3")).await);
    let frame = next_frame(&mut body, &mut buf, |f| f["type"] == "dispatch").await;
    assert_eq!(
        (frame["dispatch"]["operation_id"].as_str(), frame["dispatch"]["fencing_token"].as_u64()),
        (Some(second.as_str()), Some(2))
    );
    let start = |token: u64| {
        client
            .post(format!("{endpoint}/executor/v1/operations/{second}/start"))
            .json(&json!({"fencing_token": token, "lease_ms": 5000}))
            .send()
    };
    let stale = start(1).await.unwrap();
    assert_eq!(stale.status(), 409);
    assert_eq!(stale.json::<Value>().await.unwrap()["reason"], "FENCING_TOKEN_STALE");
    let ok = start(2).await.unwrap();
    assert_eq!(ok.status(), 200);
    assert_eq!(ok.json::<Value>().await.unwrap()["state"], "attempting");

    // 4. A deadline that passes while the operation waits (press-b's executor is not running):
    // expired, never attempted — and the executor, started afterwards, never sees it.
    let mut late = w.executor("late", &["press-b"], "kind = \"simulated\"\nattempts_file = \"attempts.log\"").await;
    let queued = op_id(&w.execute(&agent, json!({"action": "home_press", "input": {}, "device": "press-b", "idempotency_key": "q-1", "deadline_s": 1})).await);
    let expired = w.wait_state(&agent, &queued, "expired").await;
    assert_eq!(expired["attempts"], 0);
    late.start();
    let next = op_id(&w.execute(&agent, press("press-b", "q-2")).await);
    w.wait_state(&agent, &next, "effect_reported").await;
    assert_eq!(late.attempts(), vec![next.clone()], "the expired operation never reached the device");

    // An executor refuses what it must not start: a deadline closer than it needs, and a local
    // precondition its device does not meet; both fail without an attempt.
    let mut careful = w
        .executor(
            "careful",
            &["press-c"],
            "kind = \"simulated\"\nattempts_file = \"attempts.log\"\nstate = { door = \"open\" }",
        )
        .await;
    let toml = careful.dir.join("executor.toml");
    let text = std::fs::read_to_string(&toml)
        .unwrap()
        .replace("lease_ms = 5000", "lease_ms = 5000\ndeadline_margin_ms = 20000");
    std::fs::write(&toml, text).unwrap();
    careful.start();
    let hurried = op_id(&w.execute(&agent, json!({"action": "home_press", "input": {}, "device": "press-c", "idempotency_key": "c-1", "deadline_s": 10})).await);
    let failed = w.wait_state(&agent, &hurried, "failed").await;
    assert_eq!(failed["attempts"], 0, "{failed}");
    assert_eq!(failed["reason"], "DEADLINE_EXCEEDED", "the executor's refusal says why: {failed}");
    // Issue 21: a precondition refusal reaches the agent as PRECONDITION_FAILED — in the answer
    // of a call that waits, in the readback, and in the operation resource's history.
    let closed = json!({"action": "home_press", "input": {}, "device": "press-c", "idempotency_key": "c-2",
                        "preconditions": {"door": "closed"}, "wait_s": 20});
    let answer = w.execute(&agent, closed).await;
    let unmet = op_id(&answer);
    assert_eq!(
        (answer["structuredContent"]["state"].as_str(), reason(&answer).as_str()),
        (Some("failed"), "PRECONDITION_FAILED"),
        "{answer}"
    );
    let read = w.readback(&agent, &unmet).await;
    assert_eq!(read["reason"], "PRECONDITION_FAILED", "{read}");
    let steps: Vec<(String, String)> = read["history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| (t["to"].as_str().unwrap().to_string(), t["reason"].as_str().unwrap_or("-").to_string()))
        .collect();
    let want = [("verified", "-"), ("reserved", "-"), ("dispatched", "-"), ("failed", "PRECONDITION_FAILED")];
    assert_eq!(steps, want.map(|(a, b)| (a.to_string(), b.to_string())), "{read}");
    let (_, _, resource) =
        rpc(w.mcp(), Some(&agent), "resources/read", json!({"uri": format!("writ://operations/{unmet}")})).await;
    let text = resource["result"]["contents"][0]["text"].as_str().unwrap_or_else(|| panic!("{resource}"));
    let shown: Value = serde_json::from_str(text).unwrap();
    assert_eq!(shown["operation"]["state"], "failed");
    let transitions = shown["transitions"].as_array().unwrap();
    assert_eq!(transitions.len(), 4, "{shown}");
    assert!(transitions.iter().all(|t| t["at_ms"].as_u64() > Some(0) && !t["trace_id"].as_str().unwrap().is_empty()));
    assert!(transitions[3]["cause"].as_str().unwrap().contains("precondition door=closed not met"), "{shown}");
    // Without ops:read the resource does not exist for the caller.
    let reader = w.principal("reader", &["resources:read"]).await;
    let (_, _, hidden) =
        rpc(w.mcp(), Some(&reader), "resources/read", json!({"uri": format!("writ://operations/{unmet}")})).await;
    assert_eq!(hidden["error"]["data"]["reason"], "RESOURCE_NOT_FOUND", "{hidden}");
    let open = json!({"action": "home_press", "input": {}, "device": "press-c", "idempotency_key": "c-3", "preconditions": {"door": "open"}});
    let met = op_id(&w.execute(&agent, open).await);
    w.wait_state(&agent, &met, "effect_reported").await;
    assert_eq!(careful.attempts(), vec![met], "refused dispatches are never attempted");
    let shown = w.admin.get(w.admin_url(), &format!("/v1/tenants/demo/operations/{unmet}")).await.unwrap();
    assert_eq!(shown["state"], "failed", "{shown}");
    let history = w.audit().await;
    let causes: Vec<String> = history
        .iter()
        .filter(|r| r["domain"] == "operation")
        .map(|r| r["detail"].as_str().unwrap_or_default().to_string())
        .collect();
    assert!(causes.iter().any(|c| c.contains("precondition door=closed not met")), "{causes:?}");
    assert!(causes.iter().any(|c| c.contains("deadline too close")), "{causes:?}");
}

/// Must-shows 5 and 7: the executor dies mid-attempt → `unknown_effect` when its lease runs
/// out; retries return that state and cause no attempt; the device stays held until an operator
/// resolves it, then a new operation proceeds. An effect is accepted only after an observation
/// by another principal than the requester; the executor's evidence alone cannot accept it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_effect_reconciliation_and_independent_acceptance() {
    let w = World::start().await;
    w.device("press-e").await;
    let agent = w.principal("agent-1", &[]).await;
    let observer = w.principal("camera", &["observe:capture"]).await;
    let owner = w.principal("owner", &["ops:accept", "ops:read"]).await;
    let mut x = w
        .executor(
            "crashy",
            &["press-e"],
            "kind = \"simulated\"\nattempts_file = \"attempts.log\"\nfailure = \"crash_mid_attempt\"",
        )
        .await;
    let toml = x.dir.join("executor.toml");
    let text = std::fs::read_to_string(&toml).unwrap().replace("lease_ms = 5000", "lease_ms = 1000");
    std::fs::write(&toml, text).unwrap();
    x.start();

    let first = w.execute(&agent, press("press-e", "e-1")).await;
    let id = op_id(&first);
    for _ in 0..150 {
        if x.exited() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(x.exited(), "the executor crashed mid-attempt");
    let unknown = w.wait_state(&agent, &id, "unknown_effect").await;
    assert_eq!(unknown["attempts"], 1);
    for _ in 0..3 {
        let again = w.execute(&agent, press("press-e", "e-1")).await;
        assert_eq!(again["structuredContent"]["state"], "unknown_effect", "{again}");
        assert_eq!(again["structuredContent"]["replayed"], true);
    }
    let blocked = w.execute(&agent, press("press-e", "e-2")).await;
    assert_eq!(reason(&blocked), "UNKNOWN_EFFECT_UNRESOLVED", "the device may still be moving: {blocked}");
    // The operator's queue (issue 21) shows it as needing attention, by device name too.
    let queue = |extra: &[&str]| {
        let mut args = vec!["--output", "json", "operation", "list", "--tenant", "demo"];
        args.extend_from_slice(extra);
        let (code, out, err) = w.dev.cli(&args);
        assert_eq!(code, 0, "{out}{err}");
        let list: Value = serde_json::from_str(&out).expect("json");
        list["operations"]
            .as_array()
            .expect("operations")
            .iter()
            .map(|o| o["spec"]["operation_id"].clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(queue(&["--needs-attention"]), vec![json!(id)]);
    assert_eq!(queue(&["--state", "unknown_effect", "--device", "press-e"]), vec![json!(id)]);
    assert_eq!(queue(&["--state", "accepted"]), Vec::<Value>::new());
    x.set_handler("kind = \"simulated\"\nattempts_file = \"attempts.log\"", None);
    x.start();

    // At the desk: it is among what needs a human; its page offers to resolve it, bound to the
    // call it shows (a stale page changes nothing), and the person who resolved it is recorded.
    let desk = writ_tests::desk::Desk::sign_in(&w.dev).await;
    let (status, now) = desk.get("/console").await;
    assert!(status == 200 && now.contains(&format!("operation-{id}")), "{now}");
    let page = format!("/console/operations/demo/{id}");
    let (status, shown) = desk.get(&page).await;
    assert!(status == 200 && shown.contains("unknown_effect") && shown.contains("Resolve"), "{shown}");
    let (csrf, digest) = (writ_tests::desk::hidden(&shown, "csrf"), writ_tests::desk::hidden(&shown, "digest"));
    let resolve = format!("{page}/resolve");
    let other_call = "0".repeat(64);
    let stale = [("csrf", csrf.as_str()), ("digest", other_call.as_str()), ("outcome", "no_effect")];
    let (status, refused) = desk.post(&resolve, &stale).await;
    assert!(status == 409 && refused.contains("OPERATION_STATE_CONFLICT"), "{status} {refused}");
    let form = [
        ("csrf", csrf.as_str()),
        ("digest", digest.as_str()),
        ("outcome", "no_effect"),
        ("note", "press found at home"),
    ];
    let (status, back) = desk.post(&resolve, &form).await;
    assert_eq!((status, back.as_str()), (303, page.as_str()));
    assert_eq!(w.readback(&agent, &id).await["state"], "failed");
    let (_, timeline) = desk.get(&page).await;
    assert!(timeline.contains("resolved by &#39;operator:dev-admin&#39;"), "{timeline}");
    // The CLI's resolution of it now is a conflict, with its reason.
    let (code, _, err) = w.dev.cli(&["operation", "resolve", "--tenant", "demo", &id, "--outcome", "no-effect"]);
    assert!(code != 0 && err.contains("OPERATION_STATE_CONFLICT"), "{err}");
    assert_eq!(queue(&["--needs-attention"]), Vec::<Value>::new(), "resolved: nothing waits for a human");
    let next = op_id(&w.execute(&agent, press("press-e", "e-3")).await);
    let reported = w.wait_state(&agent, &next, "effect_reported").await;
    // The restarted executor did not retry the unknown effect: its attempt log holds the first
    // attempt and then this one (a retry would stand between them).
    assert_eq!(x.attempts(), vec![id, next.clone()], "a restarted executor does not retry an unknown effect");

    // 7. Independent acceptance.
    assert_eq!(reported["evidence"].as_array().map(Vec::len), Some(1), "{reported}");
    let decide = json!({"operation_id": next, "verdict": "accept", "note": "looks right"});
    let early = w.tool(&owner, "operation.decide", decide.clone()).await;
    assert_eq!(reason(&early), "OBSERVATION_REQUIRED", "{early}");
    let evidence = json!({"operation_id": next, "content_hash": "ab".repeat(32),
                          "evidence_return_ref": "camera://frames/1", "summary": "press at home"});
    let own = w.tool(&agent, "observation.capture", evidence.clone()).await;
    assert_eq!(own["isError"], true, "the requester cannot observe its own operation: {own}");
    let seen = w.tool(&observer, "observation.capture", evidence).await;
    assert_eq!(seen["isError"], Value::Null, "{seen}");
    let accepted = w.tool(&owner, "operation.decide", decide).await;
    assert_eq!(accepted["structuredContent"]["state"], "accepted", "{accepted}");
}

/// Must-show 8: executor identity. A revoked executor's certificate is refused at mapping; a
/// self-signed certificate and one from a CA Writ never registered are refused at the TLS layer;
/// another tenant's executor sees nothing of this tenant. Every refusal is audited.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn executor_certificates_are_checked_and_refusals_audited() {
    let w = World::start().await;
    w.device("press-f").await;
    let agent = w.principal("agent-1", &[]).await;
    let revoked = w.executor("revoked", &["press-f"], "kind = \"simulated\"").await;
    let endpoint = std::fs::read_to_string(revoked.dir.join("executor.toml")).unwrap();
    let endpoint = endpoint.split('"').find(|s| s.starts_with("https://")).expect("edge url").to_string();
    let dispatch = format!("{endpoint}/executor/v1/dispatch");
    let before = revoked.mtls_client().get(&dispatch).send().await.unwrap();
    assert_eq!(before.status(), 200, "an enrolled executor connects");
    drop(before);
    let list = w.admin.get(w.admin_url(), "/v1/tenants/demo/executors").await.unwrap();
    assert!(list["executors"].as_array().unwrap().iter().any(|x| x["id"] == revoked.executor_id.as_str()));
    w.admin
        .post_ok(w.admin_url(), &format!("/v1/tenants/demo/executors/{}/revoke", revoked.executor_id), json!({}))
        .await;
    let after = eventually("the revocation at the edge", Duration::from_secs(5), || async {
        let r = revoked.mtls_client().get(&dispatch).send().await.ok()?;
        (r.status() == 403).then_some(r)
    })
    .await;
    assert_eq!(after.json::<Value>().await.unwrap()["reason"], "EXECUTOR_REVOKED");
    // Forty more requests of the revoked executor are counted, not committed one by one.
    for _ in 0..40 {
        let r = revoked.mtls_client().get(&dispatch).send().await.unwrap();
        assert_eq!(r.status(), 403);
    }
    let revoked_records = w.audit().await.iter().filter(|r| r["reason_code"] == "EXECUTOR_REVOKED").count();
    assert!((1..=3).contains(&revoked_records), "{revoked_records} records for 41 refusals");

    // Another tenant's enrolled executor: its identity is its own tenant's.
    w.admin.post_ok(w.admin_url(), "/v1/tenants", json!({"name": "other"})).await;
    w.admin.post_ok(w.admin_url(), "/v1/tenants/other/sites", json!({"name": "o-site"})).await;
    let dev = json!({"name": "o-press", "site": "o-site", "device_class": "press.v1"});
    w.admin.post_ok(w.admin_url(), "/v1/tenants/other/devices", dev).await;
    let foreign = ExecutorProc::enroll(
        &w.admin.client(w.admin_url()),
        "other",
        "o-site",
        &["o-press"],
        w.mcp(),
        &w.dir.path().join("foreign"),
        "kind = \"simulated\"",
    )
    .await;
    let ours = op_id(&w.execute(&agent, press("press-f", "f-1")).await);
    let fc = foreign.mtls_client();
    let peek = fc.get(format!("{endpoint}/executor/v1/operations/{ours}")).send().await.unwrap();
    assert_eq!(peek.status(), 404);
    let grab = fc
        .post(format!("{endpoint}/executor/v1/operations/{ours}/start"))
        .json(&json!({"fencing_token": 1, "lease_ms": 1000}))
        .send()
        .await
        .unwrap();
    assert_eq!(grab.json::<Value>().await.unwrap()["reason"], "OPERATION_NOT_FOUND");
    // Forty starts of operations that are not its own, each naming another: a bounded number
    // of records in its tenant's trail.
    for i in 0..40 {
        let r = fc
            .post(format!("{endpoint}/executor/v1/operations/op-not-yours-{i}/start"))
            .json(&json!({"fencing_token": 1, "lease_ms": 1000}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.json::<Value>().await.unwrap()["reason"], "OPERATION_NOT_FOUND");
    }
    let trail = w.admin.get(w.admin_url(), "/v1/tenants/other/audit?limit=1000").await.unwrap();
    let refused_starts = trail["records"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["reason_code"] == "OPERATION_NOT_FOUND" && r["operation"] == "executor/start")
        .count();
    let bound = writ_mcp_edge::audit::DENIAL_NAMES_MAX + 2;
    assert!(refused_starts <= bound, "{refused_starts} records for 41 refused starts (at most {bound})");

    // Certificates Writ never issued, claiming this tenant: refused during the handshake.
    let tenant_id = w.admin.get(w.admin_url(), "/v1/tenants/demo").await.unwrap()["id"].as_str().unwrap().to_string();
    let san = format!("urn:writ:executor:{tenant_id}:s-x:x-forged");
    let forged = |signer: Option<(&rcgen::CertificateParams, &rcgen::KeyPair)>| {
        let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ED25519).unwrap();
        let mut p = rcgen::CertificateParams::default();
        p.subject_alt_names = vec![rcgen::SanType::URI(san.clone().try_into().unwrap())];
        p.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
        let cert = match signer {
            None => p.self_signed(&key).unwrap(),
            Some((ca, ca_key)) => p.signed_by(&key, &rcgen::Issuer::from_params(ca, ca_key)).unwrap(),
        };
        (cert.pem(), key.serialize_pem())
    };
    let rogue_key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ED25519).unwrap();
    let mut rogue = rcgen::CertificateParams::default();
    rogue.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    for (label, (cert, key)) in [("self-signed", forged(None)), ("rogue CA", forged(Some((&rogue, &rogue_key))))] {
        let d = w.dir.path().join(label);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("c.pem"), cert).unwrap();
        std::fs::write(d.join("k.pem"), key).unwrap();
        let client = mtls_client(&d.join("c.pem"), &d.join("k.pem"), &revoked.dir.join("edge-ca.crt"));
        let r = client.get(&dispatch).send().await;
        assert!(r.is_err() || r.as_ref().is_ok_and(|r| !r.status().is_success()), "{label}: {r:?}");
    }
    let refusals = eventually("the refusals in the audit trail", Duration::from_secs(10), || async {
        let refusals: Vec<Value> = w
            .audit()
            .await
            .into_iter()
            .filter(|r| r["operation"].as_str().is_some_and(|o| o.starts_with("executor/")) && r["outcome"] == "denied")
            .collect();
        let reasons: Vec<&str> = refusals.iter().filter_map(|r| r["reason_code"].as_str()).collect();
        // The handshakes refused at TLS arrive as the window's aggregate, not one record each.
        let aggregated = refusals.iter().any(|r| {
            r["reason_code"] == "EXECUTOR_CERT_REFUSED"
                && r["principal_id"] == "unauthenticated"
                && r["detail"].as_str().is_some_and(|d| d.contains("handshakes refused at TLS"))
        });
        (reasons.contains(&"EXECUTOR_REVOKED") && aggregated).then_some(refusals.clone())
    })
    .await;
    assert!(!refusals.is_empty());
}

/// `operation.propose`: a dry-run action executes only with a proposal made by the same
/// principal for the exact payload, once; the proposal previews the call and is recorded as a
/// proposal, never as an operation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dry_run_action_executes_only_with_its_proposal() {
    let w = World::start().await;
    let agent = w.principal("agent-1", &[]).await;
    let other = w.principal("agent-2", &[]).await;
    let call = json!({"action": "move_press", "input": {"position_mm": 120}, "device": "demo-press"});
    let mut execute = call.clone();
    execute["idempotency_key"] = json!("m-1");
    let unproposed = w.execute(&agent, execute.clone()).await;
    assert_eq!(reason(&unproposed), "VERIFY_REQUIRED", "{unproposed}");

    let proposed = w.tool(&agent, "operation.propose", call.clone()).await;
    let p = &proposed["structuredContent"];
    assert_eq!(
        (p["policy"]["allowed"].as_bool(), p["preview"]["device"].as_str()),
        (Some(true), Some("demo-press")),
        "{proposed}"
    );
    assert_eq!(p["preview"]["risk"], "high");
    let proposal = p["proposal"].as_str().unwrap().to_string();
    let ops = w.admin.get(w.admin_url(), "/v1/tenants/demo/audit?limit=1000").await.unwrap();
    let records = ops["records"].as_array().unwrap();
    assert!(!records.iter().any(|r| r["operation"] == "operation_submitted"), "a proposal records no operation");
    assert!(records.iter().any(|r| r["operation"] == "operation_proposed"), "it records the proposal");

    let mut changed = execute.clone();
    changed["input"] = json!({"position_mm": 300});
    changed["proposal"] = json!(proposal);
    assert_eq!(reason(&w.execute(&agent, changed).await), "PROPOSAL_INVALID", "bound to the payload");
    let mut stolen = execute.clone();
    stolen["proposal"] = json!(proposal);
    stolen["idempotency_key"] = json!("m-2");
    assert_eq!(reason(&w.execute(&other, stolen).await), "PROPOSAL_INVALID", "bound to the principal");
    let mut tampered = execute.clone();
    tampered["proposal"] = json!(format!("{proposal}x"));
    assert_eq!(reason(&w.execute(&agent, tampered).await), "PROPOSAL_INVALID");

    execute["proposal"] = json!(proposal);
    let done = w.execute(&agent, execute.clone()).await;
    assert_eq!(done["isError"], Value::Null, "{done}");
    w.wait_state(&agent, &op_id(&done), "effect_reported").await;
    execute["idempotency_key"] = json!("m-3");
    assert_eq!(reason(&w.execute(&agent, execute).await), "PROPOSAL_INVALID", "a proposal is used once");
}

/// Direct calls of catalog actions (SPEC E5): a low-risk one runs the operation pipeline in one
/// call (retry-safe with `_meta["io.writ/idempotencyKey"]`); a high-risk one first answers
/// `input_required` with the preview and records the operation only on a confirmed, untampered
/// request state — a repeated confirmation replays it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn direct_calls_run_low_risk_actions_and_confirm_high_risk_ones() {
    let w = World::start().await;
    let agent = w.principal("agent-1", &[]).await;
    let direct = |name: &str, args: Value, meta: Value, extra: Value| {
        let mut params = json!({"name": name, "arguments": args, "_meta": meta});
        if let Value::Object(m) = extra {
            for (k, v) in m {
                params[k] = v;
            }
        }
        let (mcp, token) = (w.mcp().to_string(), agent.clone());
        async move { rpc(&mcp, Some(&token), "tools/call", params).await.2 }
    };
    let keyed = json!({"io.writ/idempotencyKey": "home-1"});
    let first = direct("home_press", json!({"speed": "slow"}), keyed.clone(), json!({})).await;
    let id =
        first["result"]["structuredContent"]["operation_id"].as_str().unwrap_or_else(|| panic!("{first}")).to_string();
    let again = direct("home_press", json!({"speed": "slow"}), keyed, json!({})).await;
    assert_eq!(again["result"]["structuredContent"]["operation_id"], id.as_str(), "{again}");
    assert_eq!(again["result"]["structuredContent"]["replayed"], true);
    w.wait_state(&agent, &id, "effect_reported").await;

    let args = json!({"position_mm": 100});
    let no_caps = direct("move_press", args.clone(), json!({}), json!({})).await;
    assert_eq!(no_caps["error"]["data"]["reason"], "CLIENT_CAPABILITY_MISSING", "{no_caps}");
    let caps = json!({"io.modelcontextprotocol/clientCapabilities": {"elicitation": {}}});
    let ask = direct("move_press", args.clone(), caps.clone(), json!({})).await;
    assert_eq!(ask["result"]["resultType"], "input_required", "{ask}");
    let message = ask["result"]["inputRequests"]["confirm"]["params"]["message"].as_str().unwrap();
    assert!(message.contains("demo-press") && message.contains("position_mm"), "the preview: {message}");
    let state = ask["result"]["requestState"].as_str().unwrap().to_string();
    let answer = |yes: bool| json!({"confirm": {"action": "accept", "content": {"confirm": yes}}});

    let declined = direct(
        "move_press",
        args.clone(),
        caps.clone(),
        json!({"requestState": state, "inputResponses": answer(false)}),
    )
    .await;
    assert_eq!(declined["result"]["structuredContent"]["confirmed"], false, "{declined}");
    let tampered = direct(
        "move_press",
        args.clone(),
        caps.clone(),
        json!({"requestState": format!("{state}x"), "inputResponses": answer(true)}),
    )
    .await;
    assert_eq!(tampered["error"]["data"]["reason"], "REQUEST_STATE_INVALID", "{tampered}");
    let other = direct(
        "move_press",
        json!({"position_mm": 400}),
        caps.clone(),
        json!({"requestState": state, "inputResponses": answer(true)}),
    )
    .await;
    assert_eq!(other["error"]["data"]["reason"], "REQUEST_STATE_INVALID", "bound to the arguments: {other}");
    let ops = w.admin.get(w.admin_url(), "/v1/tenants/demo/audit?limit=1000").await.unwrap();
    let submitted =
        ops["records"].as_array().unwrap().iter().filter(|r| r["operation"] == "operation_submitted").count();
    assert_eq!(submitted, 1, "nothing recorded before the confirmation (only home_press)");

    let done = direct(
        "move_press",
        args.clone(),
        caps.clone(),
        json!({"requestState": state, "inputResponses": answer(true)}),
    )
    .await;
    let moved =
        done["result"]["structuredContent"]["operation_id"].as_str().unwrap_or_else(|| panic!("{done}")).to_string();
    let repeat = direct("move_press", args, caps, json!({"requestState": state, "inputResponses": answer(true)})).await;
    assert_eq!(
        repeat["result"]["structuredContent"]["operation_id"],
        moved.as_str(),
        "a repeated confirmation replays: {repeat}"
    );
    w.wait_state(&agent, &moved, "effect_reported").await;
}

/// Operation quotas (SPEC D9) are consumed by the ledger command that records the operation:
/// with `--cost-units-per-day 2`, a third operation of cost 1 is refused with QUOTA_EXCEEDED
/// while replays of recorded ones still answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operation_quotas_hold_at_the_edge() {
    let w = World::start().await;
    let agent = w.principal("agent-1", &[]).await;
    let (code, out, err) = w.dev.cli(&["tenant", "set", "demo", "--cost-units-per-day", "2"]);
    assert_eq!(code, 0, "{out}{err}");
    for key in ["q-1", "q-2"] {
        let id = op_id(&w.execute(&agent, press("demo-press", key)).await);
        w.wait_state(&agent, &id, "effect_reported").await;
    }
    let refused = w.execute(&agent, press("demo-press", "q-3")).await;
    assert_eq!(reason(&refused), "QUOTA_EXCEEDED", "{refused}");
    assert!(refused["content"][0]["text"].as_str().unwrap().contains("cost_units_per_day"), "{refused}");
    let replay = w.execute(&agent, press("demo-press", "q-1")).await;
    assert_eq!(replay["structuredContent"]["replayed"], true, "{replay}");

    // A principal's own limit, set by an operator with the CLI, on top of the tenant's.
    let (code, out, err) = w.dev.cli(&["tenant", "set", "demo", "--cost-units-per-day", "100"]);
    assert_eq!(code, 0, "{out}{err}");
    let other = w.principal("agent-2", &[]).await;
    let args = ["principal", "quotas", "--tenant", "demo", "agent-2", "--cost-units-per-day", "1", "-o", "json"];
    let (code, out, err) = w.dev.cli(&args);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("\"cost_units_per_day\": 1"), "{out}");
    let first = op_id(&w.execute(&other, press("demo-press", "p-1")).await);
    w.wait_state(&other, &first, "effect_reported").await;
    let limited = w.execute(&other, press("demo-press", "p-2")).await;
    assert_eq!(reason(&limited), "QUOTA_EXCEEDED", "{limited}");
    assert!(limited["content"][0]["text"].as_str().unwrap().contains("the principal's cost_units_per_day"));
    let id = op_id(&w.execute(&agent, press("demo-press", "q-4")).await);
    assert!(!id.is_empty(), "agent-1 has no limit of its own");
}

/// Operations served through the MCP Tasks extension: `operation.execute` and direct calls
/// answer a task whose id is the operation id; `tasks/get` inlines the executor's output once
/// the effect is reported; a high-risk action waits in `input_required` for the confirmation
/// given with `tasks/update` (declined: cancelled); `tasks/cancel` during the attempt asks the
/// executor, whose device stops before its effect (cancelled, one attempt). Tasks belong to
/// their principal, and need the extension declared.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operations_are_served_as_mcp_tasks() {
    let w = World::start().await;
    let agent = w.principal("agent-1", &[]).await;
    let other = w.principal("agent-2", &[]).await;
    let call = |token: &str, method: &str, mut params: Value, declare: bool| {
        if declare {
            params["_meta"] = json!({"io.modelcontextprotocol/clientCapabilities":
                {"elicitation": {}, "extensions": {"io.modelcontextprotocol/tasks": {}}}});
        }
        let (mcp, token, method) = (w.mcp().to_string(), token.to_string(), method.to_string());
        async move { rpc(&mcp, Some(&token), &method, params).await.2 }
    };
    let get = |token: &str, id: &str| call(token, "tasks/get", json!({"taskId": id}), true);
    let settle = |id: String, want: &'static str| {
        let (token, get) = (agent.clone(), &get);
        async move {
            eventually(&format!("task {id} {want}"), Duration::from_secs(20), || async {
                let t = get(&token, &id).await["result"].clone();
                (t["status"] == want).then_some(t)
            })
            .await
        }
    };

    // operation.execute → a task; the result is inlined once the effect is reported.
    let execute = json!({"name": "operation.execute", "arguments":
        {"action": "home_press", "device": "demo-press", "idempotency_key": "task-1"}});
    let created = call(&agent, "tools/call", execute.clone(), true).await["result"].clone();
    assert_eq!(created["resultType"], "task", "{created}");
    let id = created["taskId"].as_str().expect("taskId").to_string();
    assert!(id.starts_with("op-") && created.get("result").is_none(), "{created}");
    assert!(created["createdAt"].as_str().unwrap().ends_with('Z') && created["ttlMs"].as_u64() > Some(0));
    let done = settle(id.clone(), "completed").await;
    assert_eq!(done["result"]["structuredContent"]["state"], "effect_reported", "{done}");
    assert!(done["result"]["content"][0]["text"].as_str().unwrap().contains("\"done\":true"), "{done}");
    let replay = call(&agent, "tools/call", execute.clone(), true).await["result"].clone();
    assert_eq!(replay["taskId"], id.as_str(), "a retry is the same task");
    let foreign = get(&other, &id).await;
    assert_eq!(foreign["error"]["code"], -32602, "another principal's task does not exist for it: {foreign}");
    let undeclared = call(&agent, "tasks/get", json!({"taskId": id, "_meta": {}}), false).await;
    assert_eq!(undeclared["error"]["code"], -32021, "{undeclared}");
    let sync = call(&agent, "tools/call", execute, false).await["result"].clone();
    assert_eq!(sync["structuredContent"]["operation_id"], id.as_str(), "without the extension: the operation");

    // A high-risk action as a task waits for its confirmation (no MRTR round).
    let direct = |args: Value| call(&agent, "tools/call", json!({"name": "move_press", "arguments": args}), true);
    let waiting = direct(json!({"position_mm": 10})).await["result"].clone();
    let wid = waiting["taskId"].as_str().unwrap_or_else(|| panic!("{waiting}")).to_string();
    let asked = settle(wid.clone(), "input_required").await;
    assert_eq!(asked["inputRequests"]["confirm"]["method"], "elicitation/create", "{asked}");
    assert_eq!(w.readback(&agent, &wid).await["state"], "proposed", "nothing reserved while it waits");
    let yes = json!({"taskId": wid, "inputResponses": {"confirm": {"action": "accept", "content": {"confirm": true}}}});
    let ack = call(&agent, "tasks/update", yes, true).await["result"].clone();
    assert_eq!(ack["_meta"]["writ/trace_id"].as_str().map(str::len), Some(32), "an ack names its trace: {ack}");
    assert_eq!(bare(ack), json!({"resultType": "complete"}));
    settle(wid, "completed").await;
    let declined = direct(json!({"position_mm": 20})).await["result"]["taskId"].as_str().unwrap().to_string();
    let no =
        json!({"taskId": declined, "inputResponses": {"confirm": {"action": "accept", "content": {"confirm": false}}}});
    call(&agent, "tasks/update", no, true).await;
    let cancelled = settle(declined.clone(), "cancelled").await;
    assert_eq!(w.readback(&agent, &declined).await["attempts"], 0, "{cancelled}");

    // Cancelling during the attempt: the executor is asked and stops before the effect.
    w.device("press-t").await;
    let mut slow = w.executor("slow", &["press-t"], "kind = \"simulated\"\nlatency_ms = 30000").await;
    slow.start();
    let long = json!({"name": "operation.execute", "arguments":
        {"action": "home_press", "device": "press-t", "idempotency_key": "task-2"}});
    let lid = call(&agent, "tools/call", long, true).await["result"]["taskId"].as_str().unwrap().to_string();
    w.wait_state(&agent, &lid, "attempting").await;
    let ack = call(&agent, "tasks/cancel", json!({"taskId": lid}), true).await["result"].clone();
    assert_eq!(bare(ack), json!({"resultType": "complete"}));
    let over = settle(lid.clone(), "cancelled").await;
    let op = w.readback(&agent, &lid).await;
    assert_eq!((op["state"].as_str(), op["attempts"].as_u64()), (Some("cancelled"), Some(1)), "{over}");
    let again = call(&agent, "tasks/cancel", json!({"taskId": lid}), true).await["result"].clone();
    assert_eq!(bare(again), json!({"resultType": "complete"}), "cancelling a settled task is an idempotent ack");
    let unknown = call(&agent, "tasks/cancel", json!({"taskId": "op-nope"}), true).await;
    assert_eq!(unknown["error"]["code"], -32602);
}

/// `operation.execute` with `wait_s` answers once the operation settles, and streams each state
/// it reaches as progress (SSE, with the request's progressToken); waiting is bounded: an
/// operation nobody can attempt is answered with its state when the wait is over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn execute_waits_for_the_outcome_and_streams_progress() {
    let w = World::start().await;
    let agent = w.principal("agent-1", &[]).await;
    let args = |key: &str, device: &str, wait_s: u64| json!({"action": "home_press", "device": device, "idempotency_key": key, "wait_s": wait_s});
    let done = w.execute(&agent, args("w-1", "demo-press", 20)).await;
    assert_eq!(done["structuredContent"]["state"], "effect_reported", "{done}");

    let body = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {
        "name": "operation.execute", "arguments": args("w-2", "demo-press", 20),
        "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                  "io.modelcontextprotocol/clientCapabilities": {}, "progressToken": "p-1"}}});
    let r = reqwest::Client::builder()
        .no_proxy()
        .build()
        .unwrap()
        .post(w.mcp())
        .bearer_auth(&agent)
        .header("MCP-Protocol-Version", "2026-07-28")
        .header("Mcp-Method", "tools/call")
        .header("Mcp-Name", "operation.execute")
        .header("Accept", "application/json, text/event-stream")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert!(r.headers()["content-type"].to_str().unwrap().starts_with("text/event-stream"));
    let text = r.text().await.unwrap();
    let events: Vec<Value> = text
        .lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .filter_map(|d| serde_json::from_str(d.trim()).ok())
        .collect();
    let progress: Vec<&str> = events
        .iter()
        .filter(|e| e["method"] == "notifications/progress")
        .map(|e| e["params"]["message"].as_str().unwrap_or_default())
        .collect();
    assert!(progress.len() >= 2 && progress.last() == Some(&"effect_reported"), "{progress:?}");
    let last = events.last().expect("the answer");
    assert_eq!(
        (last["id"].as_u64(), &last["result"]["structuredContent"]["state"]),
        (Some(7), &json!("effect_reported"))
    );

    w.device("press-idle").await; // no executor serves it
    let waited = w.execute(&agent, args("w-3", "press-idle", 1)).await;
    assert_eq!(waited["structuredContent"]["state"], "reserved", "{waited}");
}

/// One trace id follows an operation from the agent's MCP request through every ledger event
/// of the operation to the executor's start and report (and their audit records).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_trace_id_from_the_agent_call_to_the_executor_report() {
    let w = World::start().await;
    let token = w.principal("tracer", &[]).await;
    let executed = w.execute(&token, press("demo-press", "traced")).await;
    let id = op_id(&executed);
    w.wait_state(&token, &id, "effect_reported").await;
    let records = w.audit().await;
    let about: Vec<&Value> =
        records.iter().filter(|r| r["detail"].as_str().is_some_and(|d| d.contains(id.as_str()))).collect();
    let submitted = about.iter().find(|r| r["operation"] == "operation_submitted").expect("submitted record");
    let trace = submitted["trace_id"].as_str().expect("trace id").to_string();
    let request = records
        .iter()
        .rev()
        .find(|r| r["domain"] == "request" && r["detail"].as_str().is_some_and(|d| d.contains("operation.execute")))
        .expect("the agent's request decision");
    assert_eq!(request["trace_id"], trace.as_str(), "the agent's request and its operation share a trace: {request}");
    for kind in ["operation_submitted", "operation_dispatched", "operation_transitioned", "evidence_reported"] {
        assert!(about.iter().any(|r| r["operation"] == kind), "no {kind} record about {id}: {about:#?}");
    }
    let from_executor: Vec<&&Value> =
        about.iter().filter(|r| r["principal_id"].as_str().is_some_and(|p| p.starts_with("executor:"))).collect();
    assert!(from_executor.len() >= 2, "the executor's start and report are audited: {about:#?}");
    for r in &about {
        assert_eq!(r["trace_id"], trace.as_str(), "every record about {id} carries the request's trace: {r}");
    }
}

/// The executor's certificate as the ledger records it now.
async fn recorded_cert(w: &World, executor_id: &str) -> Value {
    let list = w.admin.get(w.admin_url(), "/v1/tenants/demo/executors").await.unwrap();
    let x = list["executors"].as_array().unwrap().iter().find(|x| x["id"] == executor_id).cloned();
    x.expect("the executor is listed")["cert"].clone()
}

/// Issue 16, must-show 3 (executor part): a running executor renews its short-lived
/// certificate through the edge at about two thirds of its lifetime, with a new key proven by
/// the current one, and serves every operation across the renewal and past the old
/// certificate's expiry. The replaced certificate works until it expires; a proof by another
/// key is refused; a revoked executor cannot renew.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_executor_renews_its_certificate_while_serving() {
    const TTL_S: u64 = 15;
    let w = World::start_with(&["--executor-cert-ttl-s", &TTL_S.to_string()]).await;
    w.device("press-r").await;
    let agent = w.principal("agent-r", &[]).await;
    let mut x = w.executor("renewing", &["press-r"], "kind = \"simulated\"").await;
    let first = recorded_cert(&w, &x.executor_id).await;
    let old = w.dir.path().join("old");
    std::fs::create_dir_all(&old).unwrap();
    for f in ["executor.crt", "executor.key", "edge-ca.crt"] {
        std::fs::copy(x.dir.join(f), old.join(f)).unwrap();
    }
    let old_client = mtls_client(&old.join("executor.crt"), &old.join("executor.key"), &old.join("edge-ca.crt"));
    let endpoint = std::fs::read_to_string(x.dir.join("executor.toml")).unwrap();
    let endpoint = endpoint.split('"').find(|s| s.starts_with("https://")).expect("edge url").to_string();

    // A proof made with another key than the certificate's is refused.
    let other = rcgen::KeyPair::generate_for(&rcgen::PKCS_ED25519).unwrap();
    let csr = rcgen::CertificateParams::default().serialize_request(&other).unwrap();
    let fingerprint = first["fingerprint"].as_str().unwrap();
    let now = writ_client::now_ms();
    let message = writ_api::executor::renewal_message(fingerprint, now, csr.der());
    let forged = json!({"csr": csr.pem().unwrap(), "issued_at_ms": now,
        "proof": base64::Engine::encode(&base64::engine::general_purpose::STANDARD,
                                        rcgen::SigningKey::sign(&other, &message).unwrap())});
    let r = old_client.post(format!("{endpoint}/executor/v1/renew")).json(&forged).send().await.unwrap();
    assert_eq!(r.status(), 401);
    assert_eq!(r.json::<Value>().await.unwrap()["reason"], "EXECUTOR_CERT_REFUSED");
    assert_eq!(recorded_cert(&w, &x.executor_id).await, first, "nothing was renewed");
    // Input has a named bound at the edge (and the node bounds each PEM).
    let huge = json!({"csr": "x".repeat(20_000), "issued_at_ms": now, "proof": ""});
    let r = old_client.post(format!("{endpoint}/executor/v1/renew")).json(&huge).send().await.unwrap();
    assert_eq!(r.status(), 400);
    assert_eq!(r.json::<Value>().await.unwrap()["reason"], "INPUT_INVALID");

    x.start();
    let started = std::time::Instant::now();
    let mut n = 0;
    let mut renewed_at = None;
    // Operations one after another until the old certificate has expired (with a margin).
    while started.elapsed() < Duration::from_secs(TTL_S + 3) || renewed_at.is_none() {
        assert!(started.elapsed() < Duration::from_secs(TTL_S * 3), "no renewal: {}", x.log());
        n += 1;
        let args =
            json!({"action": "home_press", "device": "press-r", "idempotency_key": format!("r-{n}"), "wait_s": 10});
        let done = w.execute(&agent, args).await;
        assert_eq!(done["structuredContent"]["state"], "effect_reported", "operation {n}: {done}\n{}", x.log());
        if renewed_at.is_none() && recorded_cert(&w, &x.executor_id).await["fingerprint"] != first["fingerprint"] {
            renewed_at = Some(started.elapsed());
            // The replaced certificate is still good until it expires.
            if writ_client::now_ms() + 1_000 < first["not_after_ms"].as_u64().unwrap() {
                let r = old_client.get(format!("{endpoint}/executor/v1/dispatch")).send().await.unwrap();
                assert_eq!(r.status(), 200, "the replaced certificate until it expires");
            }
        }
    }
    let renewed_at = renewed_at.unwrap();
    assert!(renewed_at < Duration::from_secs(TTL_S), "renewed before expiry: {renewed_at:?}");
    assert!(n >= 5, "operations across the renewal: {n}");
    let now = recorded_cert(&w, &x.executor_id).await;
    let on_disk = std::fs::read_to_string(x.dir.join("executor.crt")).unwrap();
    let leaf = writ_api::sha256_hex(&writ_tests::procs::pem_blocks(on_disk.as_bytes(), "CERTIFICATE")[0]);
    assert_eq!(now["fingerprint"].as_str().unwrap(), leaf, "the executor uses what the ledger recorded");
    assert!(!x.dir.join("executor.key.renewing").exists(), "no renewal left half-done");
    assert!(x.log().contains("certificate renewed"), "{}", x.log());
    // Past its expiry, the replaced certificate is refused.
    let r = old_client.get(format!("{endpoint}/executor/v1/dispatch")).send().await;
    assert!(r.is_err() || r.is_ok_and(|r| !r.status().is_success()));

    // A revoked executor cannot renew.
    x.kill();
    w.admin.post_ok(w.admin_url(), &format!("/v1/tenants/demo/executors/{}/revoke", x.executor_id), json!({})).await;
    let out = std::process::Command::new(writ_tests::procs::writ_bin())
        .args(["executor", "renew", "--config"])
        .arg(x.dir.join("executor.toml"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && stderr.contains("EXECUTOR_REVOKED"), "{stderr}");
    assert!(!x.dir.join("executor.key.renewing").exists());
}

/// A renewal request signed by the executor's key, for a new key of its own.
fn renewal_request(x: &ExecutorProc, fingerprint: &str) -> Value {
    let current = rcgen::KeyPair::from_pem(&std::fs::read_to_string(x.dir.join("executor.key")).unwrap()).unwrap();
    let next = rcgen::KeyPair::generate_for(&rcgen::PKCS_ED25519).unwrap();
    let csr = rcgen::CertificateParams::default().serialize_request(&next).unwrap();
    let now = writ_client::now_ms();
    let message = writ_api::executor::renewal_message(fingerprint, now, csr.der());
    let proof = rcgen::SigningKey::sign(&current, &message).unwrap();
    json!({"csr": csr.pem().unwrap(), "issued_at_ms": now,
           "proof": base64::Engine::encode(&base64::engine::general_purpose::STANDARD, proof)})
}

/// A captured renewal replayed (within the proof's freshness window) answers the certificate
/// the first one got and changes nothing: it cannot replace the executor's current certificate
/// and so lock the executor out. A new renewal from the same certificate (one whose answer was
/// lost) still renews.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replayed_renewal_changes_nothing() {
    let w = World::start().await;
    w.device("press-rr").await;
    let x = w.executor("replayed", &["press-rr"], "kind = \"simulated\"").await;
    let first = recorded_cert(&w, &x.executor_id).await;
    let endpoint = std::fs::read_to_string(x.dir.join("executor.toml")).unwrap();
    let endpoint = endpoint.split('"').find(|s| s.starts_with("https://")).expect("edge url").to_string();
    let renew_url = format!("{endpoint}/executor/v1/renew");
    let request = renewal_request(&x, first["fingerprint"].as_str().unwrap());
    let answer = |r: reqwest::Response| async move {
        assert_eq!(r.status(), 200);
        r.json::<Value>().await.unwrap()
    };
    let renewed = answer(x.mtls_client().post(&renew_url).json(&request).send().await.unwrap()).await;
    assert_eq!(recorded_cert(&w, &x.executor_id).await["fingerprint"], renewed["fingerprint"]);
    let replayed = answer(x.mtls_client().post(&renew_url).json(&request).send().await.unwrap()).await;
    assert_eq!(replayed["certificate"], renewed["certificate"], "the replay gets the same certificate");
    assert_eq!(recorded_cert(&w, &x.executor_id).await["fingerprint"], renewed["fingerprint"], "still current");

    let retried = renewal_request(&x, first["fingerprint"].as_str().unwrap());
    let again = answer(x.mtls_client().post(&renew_url).json(&retried).send().await.unwrap()).await;
    assert_ne!(again["fingerprint"], renewed["fingerprint"]);
    assert_eq!(recorded_cert(&w, &x.executor_id).await["fingerprint"], again["fingerprint"], "a new request renews");
}

/// Retiring a tenant's executor CA (SPEC S1): executors it certified are refused at once (their
/// next handshake or request), the CA can never come back, and the next enrollment gets a
/// certificate from a new CA that works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retired_executor_ca_cuts_off_its_executors_and_enrollment_moves_to_a_new_ca() {
    let w = World::start().await;
    w.device("press-ca").await;
    let before = w.executor("before", &["press-ca"], "kind = \"simulated\"").await;
    let endpoint = std::fs::read_to_string(before.dir.join("executor.toml")).unwrap();
    let endpoint = endpoint.split('"').find(|s| s.starts_with("https://")).expect("edge url").to_string();
    let dispatch = format!("{endpoint}/executor/v1/dispatch");
    let connects = |x: &ExecutorProc| {
        let request = x.mtls_client().get(&dispatch);
        async move { request.send().await.is_ok_and(|r| r.status() == 200) }
    };
    assert!(connects(&before).await, "an enrolled executor connects");
    let old_ca = recorded_cert(&w, &before.executor_id).await["ca_fingerprint"].as_str().unwrap().to_string();

    let (code, out, err) = w.dev.cli(&["credential", "retire-ca", "--tenant", "demo", &old_ca, "-o", "json"]);
    assert_eq!(code, 0, "{out}{err}");
    let shown: Value = serde_json::from_str(&out).unwrap();
    assert!(shown["tenant"]["retired_executor_cas"][&old_ca].is_u64(), "{shown}");
    eventually("the retired CA's executor refused", Duration::from_secs(10), || async {
        (!connects(&before).await).then_some(())
    })
    .await;
    let (code, _, err) = w.dev.cli(&["credential", "retire-ca", "--tenant", "demo", &old_ca]);
    assert_ne!(code, 0);
    assert!(err.contains("CREDENTIAL_RETIRED"), "{err}");

    let after = w.executor("after", &["press-ca"], "kind = \"simulated\"").await;
    let new_ca = recorded_cert(&w, &after.executor_id).await["ca_fingerprint"].as_str().unwrap().to_string();
    assert_ne!(new_ca, old_ca, "enrollment moved to a new CA");
    eventually("the new CA's executor connects", Duration::from_secs(10), || async {
        connects(&after).await.then_some(())
    })
    .await;
    assert!(!connects(&before).await, "the old executor stays refused");
}

/// The start journal (found by the operation simulation): an executor never starts what an
/// earlier run of it may have started. After a crash, an unanswered start's status ("attempting,
/// attempt 1, this executor") cannot tell the earlier run's start from the new one, so a retry
/// could act on the device twice; such an operation is left to end as an unknown effect.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_executor_never_starts_what_an_earlier_run_started() {
    let w = World::start().await;
    w.device("press-j").await;
    w.device("press-k").await;
    let agent = w.principal("agent-j", &[]).await;
    let mut x = w.executor("journal", &["press-j", "press-k"], "kind = \"simulated\"").await;
    let earlier = op_id(&w.execute(&agent, press("press-j", "j-1")).await);
    // An earlier run sent a start for it (its journal says so), then died.
    std::fs::write(x.dir.join("starts.journal"), format!("{earlier} {}\n", u64::MAX)).unwrap();
    x.start();
    eventually("the executor to pass over the operation", Duration::from_secs(20), || async {
        x.log().contains("an earlier run of this executor started this operation").then_some(())
    })
    .await;
    // The same executor still attempts what it never started.
    let fresh = op_id(&w.execute(&agent, press("press-k", "k-1")).await);
    w.wait_state(&agent, &fresh, "effect_reported").await;
    let attempts = x.attempts();
    assert!(attempts.iter().all(|a| !a.contains(&earlier)), "{attempts:?}");
    assert_eq!(w.readback(&agent, &earlier).await["state"], "reserved", "never started");
    let journal = std::fs::read_to_string(x.dir.join("starts.journal")).unwrap();
    assert!(journal.contains(&earlier) && journal.contains(&fresh), "{journal}");
}

/// `writ executor run` with `probe_listen` (issue 19): `/healthz` at once, `/readyz` once its
/// dispatch stream is open (503 before), and `/metrics` counting its dispatches and reports in
/// the Prometheus text format — on port 0, the address read from its log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_executor_serves_health_readiness_and_metrics() {
    let w = World::start().await;
    let agent = w.principal("agent-1", &[]).await;
    w.device("press-probed").await;
    let mut x = w.executor("probed", &["press-probed"], "kind = \"simulated\"").await;
    let config = x.dir.join("executor.toml");
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(&config, format!("probe_listen = \"127.0.0.1:0\"\n{text}")).unwrap();
    x.start();
    let url = eventually("the executor's probe address in its log", Duration::from_secs(20), || async {
        let log = x.log();
        let at = log.find("probes listening")?;
        let url = log[at..].split("url=").nth(1)?.split_whitespace().next()?.trim_matches('"').to_string();
        Some(url)
    })
    .await;
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    let get = |path: &str| {
        let request = http.get(format!("{url}{path}"));
        async move {
            let r = request.send().await.expect("probe");
            (r.status().as_u16(), r.text().await.unwrap_or_default())
        }
    };
    assert_eq!(get("/healthz").await.0, 200);
    eventually("the executor ready (dispatch stream open)", Duration::from_secs(20), || async {
        (get("/readyz").await.0 == 200).then_some(())
    })
    .await;
    let done = w.execute(&agent, press("press-probed", "probe-1")).await;
    w.wait_state(&agent, &op_id(&done), "effect_reported").await;
    // A call that waits reads the end of its operation from the edge's replica, which kept it
    // for the wait when it let the operation go (no read from the ledger).
    let mut waited = press("press-probed", "probe-2");
    waited["wait_s"] = json!(20);
    let waited = w.execute(&agent, waited).await;
    assert_eq!(waited["structuredContent"]["state"], "effect_reported", "{waited}");
    let (status, metrics) = get("/metrics").await;
    assert_eq!(status, 200);
    for line in [
        "writ_executor_dispatch_stream_open 1",
        "writ_executor_dispatches_total",
        "writ_executor_reports_total{outcome=\"effect\"} 2",
        "writ_build_info{role=\"executor\"",
    ] {
        assert!(metrics.contains(line), "{line} missing from:\n{metrics}");
    }
    // The edge side: how long the operation waited before it was offered.
    let trusted = writ_client::ClientTls::trusting(std::path::Path::new(w.dev.var("WRIT_CA_FILE"))).unwrap();
    let edge_metrics = trusted.apply(reqwest::Client::builder().no_proxy()).build().unwrap();
    let text = edge_metrics.get(format!("{}/metrics", w.admin_url())).send().await.unwrap().text().await.unwrap();
    assert!(text.contains("writ_edge_dispatch_lag_seconds_bucket{"), "{text}");
    assert!(text.contains("writ_edge_operation_ends_total{read=\"replica\"} 1"), "{text}");
    assert!(!text.contains("writ_edge_operation_ends_total{read=\"ledger\"}"), "{text}");
    // The executor's attempt calls reached the edge over its call stream, none as a request.
    assert!(text.contains("writ_edge_executor_calls_total{transport=\"stream\"}"), "{text}");
    assert!(!text.contains("writ_edge_executor_calls_total{transport=\"request\"}"), "{text}");
    // The node side: the operation counted by state and tenant class (a standard tenant).
    for line in [
        "writ_operations_by_state{state=\"effect_reported\",tenant_class=\"standard\"} 2",
        "writ_operations_by_state{state=\"effect_reported\",tenant_class=\"strict\"} 0",
    ] {
        assert!(text.contains(line), "{line} missing from:\n{text}");
    }
    x.kill();
}

/// Issue 21: work items through the CLI, operations held to a work item's revision and approved
/// scope at the agent's MCP boundary, the item read by agents as a resource, and closing it
/// recorded with its operations.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn work_items_hold_operations_to_their_revision_and_scope() {
    let w = World::start().await;
    for d in ["press-w1", "press-w2"] {
        w.device(d).await;
    }
    let mut x = w
        .executor("worker-x", &["press-w1", "press-w2"], "kind = \"simulated\"\nattempts_file = \"attempts.log\"")
        .await;
    x.start();
    let (code, out, err) = w.dev.cli(&[
        "work",
        "create",
        "--tenant",
        "demo",
        "wo-7",
        "--title",
        "Re-home line 2",
        "--owner",
        "line 2 lead",
        "--action",
        "home_press",
        "--device",
        "press-w1",
        "--cost-ceiling",
        "2",
    ]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("wo-7") && out.contains("open"), "{out}");
    let scopes = [
        "tools:list",
        "tools:call:*",
        "devices:use:*",
        "ops:execute",
        "ops:read",
        "context:read",
        "resources:read",
        "work:read",
    ];
    let agent = w.principal("worker", &scopes).await;
    let mcp = w.mcp().to_string();
    let read_work = |token: String| {
        let mcp = mcp.clone();
        async move { rpc(&mcp, Some(&token), "resources/read", json!({"uri": "writ://work/wo-7"})).await.2 }
    };
    let item = read_work(agent.clone()).await;
    let item: Value = serde_json::from_str(item["result"]["contents"][0]["text"].as_str().expect("work text")).unwrap();
    assert_eq!((item["revision"].as_u64(), item["state"].as_str()), (Some(1), Some("open")), "{item}");
    let blind = w.principal("blind", &[]).await; // the full preset holds no work:read
    let hidden = read_work(blind.clone()).await;
    assert_eq!(hidden["error"]["data"]["reason"], "RESOURCE_NOT_FOUND", "{hidden}");
    // An operator grants the scope to the existing principal: its new tokens read the work (its
    // old token carries what it was issued with).
    let (code, out, err) = w.dev.cli(&["principal", "grant-scope", "--tenant", "demo", "blind", "work:read"]);
    assert_eq!(code, 0, "{out}{err}");
    let token = w
        .admin
        .post_ok(w.admin_url(), "/v1/tenants/demo/tokens", json!({"principal": "blind", "audience": w.mcp()}))
        .await;
    let seen = read_work(token["token"].as_str().unwrap().to_string()).await;
    assert!(seen["result"]["contents"][0]["text"].as_str().is_some_and(|t| t.contains("wo-7")), "{seen}");
    assert_eq!(read_work(blind).await["error"]["data"]["reason"], "RESOURCE_NOT_FOUND");

    let call = |device: &str, key: &str, revision: u64| {
        json!({"action": "home_press", "input": {}, "device": device, "idempotency_key": key,
               "work_ref": {"id": "wo-7", "revision": revision}, "wait_s": 20})
    };
    let first = w.execute(&agent, call("press-w1", "w-1", 1)).await;
    assert_eq!(first["structuredContent"]["state"], "effect_reported", "{first}");
    // The work moves on: a call decided on revision 1 is stale; on revision 2 it is accepted.
    let (code, out, err) =
        w.dev.cli(&["work", "update", "--tenant", "demo", "wo-7", "--expected-revision", "1", "--owner", "night lead"]);
    assert_eq!(code, 0, "{out}{err}");
    let (code, _, err) =
        w.dev.cli(&["work", "update", "--tenant", "demo", "wo-7", "--expected-revision", "1", "--title", "x"]);
    assert!(code != 0 && err.contains("STALE_REVISION"), "{err}");
    assert_eq!(reason(&w.execute(&agent, call("press-w1", "w-2", 1)).await), "STALE_REVISION");
    let second = w.execute(&agent, call("press-w1", "w-3", 2)).await;
    assert_eq!(second["structuredContent"]["state"], "effect_reported", "{second}");
    // Outside the approved scope: another device, another action (proposed), beyond the ceiling.
    assert_eq!(reason(&w.execute(&agent, call("press-w2", "w-4", 2)).await), "WORK_SCOPE_EXCEEDED");
    let moved = w
        .tool(
            &agent,
            "operation.propose",
            json!({"action": "move_press", "input": {"position_mm": 5},
              "device": "press-w1", "work_ref": {"id": "wo-7", "revision": 2}}),
        )
        .await;
    assert_eq!(reason(&moved), "WORK_SCOPE_EXCEEDED", "{moved}");
    assert_eq!(reason(&w.execute(&agent, call("press-w1", "w-5", 2)).await), "COST_CEILING_EXCEEDED");
    assert_eq!(x.attempts().len(), 2, "refused calls never reach the executor");
    // Closing records its operations; a closed item takes no more.
    let (code, out, err) =
        w.dev.cli(&["work", "update", "--tenant", "demo", "wo-7", "--state", "completed", "--note", "done"]);
    assert_eq!(code, 0, "{out}{err}");
    let (_, shown, _) = w.dev.cli(&["--output", "json", "work", "show", "--tenant", "demo", "wo-7"]);
    let shown: Value = serde_json::from_str(&shown).unwrap_or_else(|e| panic!("{e}: {shown}"));
    assert_eq!(
        (shown["state"].as_str(), shown["revision"].as_u64(), shown["cost_used"].as_u64()),
        (Some("completed"), Some(3), Some(2))
    );
    assert_eq!(shown["operations"].as_array().unwrap().len(), 2, "{shown}");
    assert_eq!(reason(&w.execute(&agent, call("press-w1", "w-6", 3)).await), "WORK_STATE_CONFLICT");
    let (_, listed, _) = w.dev.cli(&["operation", "list", "--tenant", "demo", "--work", "wo-7"]);
    assert_eq!(listed.lines().filter(|l| l.contains("effect_reported")).count(), 2, "{listed}");
    // A principal holding work:write creates and changes work items through MCP (the ledger
    // re-checks the scope on its behalf); one without it does not see the tools.
    let planner = w.principal("planner", &["tools:list", "work:read", "work:write"]).await;
    let wo8 = json!({"id": "wo-8", "title": "Inspect the press", "owner": "planner",
                     "scope": {"actions": ["home_press"], "devices": ["press-w2"]}});
    let created = w.tool(&planner, "work.create", wo8.clone()).await;
    assert_eq!(created["structuredContent"]["revision"], 1, "{created}");
    assert_ne!(created["structuredContent"]["updated_by"], "operator", "made by the principal: {created}");
    assert_eq!(reason(&w.tool(&planner, "work.create", wo8).await), "WORK_ALREADY_EXISTS");
    let stale = w.tool(&planner, "work.update", json!({"id": "wo-8", "expected_revision": 2, "owner": "x"})).await;
    assert_eq!(reason(&stale), "STALE_REVISION", "{stale}");
    let moved =
        w.tool(&planner, "work.update", json!({"id": "wo-8", "expected_revision": 1, "owner": "night shift"})).await;
    assert_eq!(
        (moved["structuredContent"]["revision"].as_u64(), moved["structuredContent"]["owner"].as_str()),
        (Some(2), Some("night shift"))
    );
    let nowhere = w
        .tool(&planner, "work.create", json!({"id": "wo-9", "title": "t", "owner": "o", "scope": {"actions": ["home_press"], "devices": ["nope"]}}))
        .await;
    assert_eq!(reason(&nowhere), "DEVICE_NOT_FOUND");
    let (_, _, hidden) =
        rpc(w.mcp(), Some(&agent), "tools/call", json!({"name": "work.create", "arguments": {}})).await;
    assert_eq!(hidden["error"]["data"]["reason"], "TOOL_NOT_FOUND", "{hidden}");

    let audit = w.audit().await;
    let closed =
        audit.iter().find(|r| r["operation"] == "work_revised" && r["detail"].as_str().unwrap().contains("completed"));
    let closed = closed.expect("closing is audited");
    assert!(closed["detail"].as_str().unwrap().contains(&op_id(&first)), "{closed}");
    assert!(audit.iter().any(|r| r["reason_code"] == "STALE_REVISION"), "refusals are audited");
}

/// An executor's output is evidence, and secrets a handler prints never leave the executor:
/// not in the stored blob, the summary an agent reads, nor the audit. A camera frame the
/// handler leaves in its evidence directory is stored too, typed by its bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_in_an_executors_output_are_redacted_before_they_leave_it() {
    let w = World::start().await;
    w.device("press-s").await;
    let script = "cat >/dev/null; echo 'homed'; echo 'Authorization: Bearer k-SECRET-1'; \
                  echo 'GET /cam?user=ann&access_token=k-SECRET-2'; \
                  printf '\\377\\330\\377\\340frame' > \"$WRIT_EVIDENCE_DIR/cam.jpg\"";
    let handler = format!("kind = \"command\"\nprogram = \"/bin/sh\"\nargs = [\"-c\", {script:?}]");
    let mut x = w.executor("sec-x", &["press-s"], &handler).await;
    x.start();
    let agent = w.principal("sec-agent", &[]).await;
    let mut call = press("press-s", "sec-1");
    call["wait_s"] = json!(20);
    let done = w.execute(&agent, call).await;
    assert_eq!(done["structuredContent"]["state"], "effect_reported", "{done}\n{}", x.log());
    let evidence = &done["structuredContent"]["evidence"][0];
    let summary = evidence["summary"].as_str().unwrap_or_default();
    assert!(summary.contains("homed") && summary.contains("user=ann"), "the output is the evidence: {done}");
    let uri = evidence["evidence_return_ref"].as_str().unwrap().to_string();
    let blob = rpc(w.mcp(), Some(&agent), "resources/read", json!({"uri": uri})).await.2;
    let text = blob["result"]["contents"][0]["text"].as_str().unwrap_or_else(|| panic!("{blob}")).to_string();
    assert!(text.contains("Authorization: [REDACTED]"), "{text}");
    let audit = serde_json::to_string(&w.audit().await).unwrap();
    for leaked in [done.to_string(), text, audit] {
        assert!(!leaked.contains("k-SECRET"), "a secret left the executor: {leaked}");
    }
    let frame = writ_api::sha256_hex(b"\xff\xd8\xff\xe0frame");
    let uri = writ_api::evidence::evidence_uri(&op_id(&done), &frame);
    let blob = rpc(w.mcp(), Some(&agent), "resources/read", json!({"uri": uri})).await.2;
    assert_eq!(blob["result"]["contents"][0]["mimeType"], "image/jpeg", "{blob}\n{}", x.log());
}

/// Issue 21: the evidence store. The executor stores its attempt's output; the agent reads it
/// back by hash through MCP with `ops:read`; without the scope, or from another tenant, it does
/// not exist; an observer uploads its own capture with its observation; a blob whose hash
/// does not match is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evidence_is_stored_and_read_back_by_hash_within_its_tenant() {
    let w = World::start().await;
    w.device("press-e").await;
    let mut x = w.executor("ev-x", &["press-e"], "kind = \"simulated\"").await;
    x.start();
    let agent = w.principal("ev-agent", &[]).await;
    let mut call = press("press-e", "ev-1");
    call["wait_s"] = json!(20);
    let done = w.execute(&agent, call).await;
    let id = op_id(&done);
    assert_eq!(done["structuredContent"]["state"], "effect_reported", "{done}");
    let evidence = &done["structuredContent"]["evidence"][0];
    let (hash, uri) = (evidence["content_hash"].as_str().unwrap(), evidence["evidence_return_ref"].as_str().unwrap());
    assert_eq!(uri, format!("writ://operations/{id}/evidence/{hash}"), "{done}");
    let read = |token: String, uri: String| {
        let mcp = w.mcp().to_string();
        async move { rpc(&mcp, Some(&token), "resources/read", json!({"uri": uri})).await.2 }
    };
    let blob = read(agent.clone(), uri.to_string()).await;
    let content = &blob["result"]["contents"][0];
    let text = content["text"].as_str().unwrap_or_else(|| panic!("{blob}"));
    assert_eq!(writ_api::sha256_hex(text.as_bytes()), hash, "the bytes are the ones hashed");
    assert!(content["mimeType"].as_str().is_some_and(|m| m == "application/json" || m == "text/plain"), "{blob}");
    // Without ops:read, or from another tenant, the blob does not exist.
    let reader = w.principal("ev-reader", &["resources:read"]).await;
    assert_eq!(read(reader, uri.to_string()).await["error"]["data"]["reason"], "RESOURCE_NOT_FOUND");
    w.admin.post_ok(w.admin_url(), "/v1/tenants", json!({"name": "ev-other"})).await;
    w.admin
        .post_ok(
            w.admin_url(),
            "/v1/tenants/ev-other/principals",
            json!({"name": "spy", "kind": "agent", "preset": "full"}),
        )
        .await;
    let spy = w
        .admin
        .post_ok(w.admin_url(), "/v1/tenants/ev-other/tokens", json!({"principal": "spy", "audience": w.mcp()}))
        .await;
    let spied = read(spy["token"].as_str().unwrap().to_string(), uri.to_string()).await;
    assert_eq!(spied["error"]["data"]["reason"], "RESOURCE_NOT_FOUND", "{spied}");
    // An observer stores its own capture with its observation.
    let observer = w.principal("ev-observer", &[]).await;
    let photo = b"\x89PNG\r\n\x1a\n fake photo of the press at home";
    let photo_hash = writ_api::sha256_hex(photo);
    let b64 = writ_api::evidence::to_base64(photo);
    let observed = w
        .tool(
            &observer,
            "observation.capture",
            json!({"operation_id": id, "content_hash": photo_hash,
              "content_base64": b64, "mime_type": "image/png", "summary": "press at home"}),
        )
        .await;
    let observations = &observed["structuredContent"]["observations"];
    let photo_uri = format!("writ://operations/{id}/evidence/{photo_hash}");
    assert_eq!(observations[0]["evidence"]["evidence_return_ref"], photo_uri.as_str(), "{observed}");
    let png = read(agent.clone(), photo_uri).await;
    assert_eq!(png["result"]["contents"][0]["blob"], b64.as_str(), "binary evidence is a base64 blob: {png}");
    assert_eq!(png["result"]["contents"][0]["mimeType"], "image/png");
    let forged = w
        .tool(
            &observer,
            "observation.capture",
            json!({"operation_id": id, "content_hash": "ab".repeat(32),
              "content_base64": b64, "mime_type": "image/png"}),
        )
        .await;
    assert_eq!(reason(&forged), "INPUT_INVALID", "{forged}");
    let audit = w.audit().await;
    assert_eq!(audit.iter().filter(|r| r["operation"] == "evidence_stored").count(), 2, "each blob stored is audited");
}

/// A result without its `_meta` (which names the request's trace).
fn bare(mut result: Value) -> Value {
    if let Some(fields) = result.as_object_mut() {
        fields.remove("_meta");
    }
    result
}
