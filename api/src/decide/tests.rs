//! Decide tables: each domain's rules, command by command, on the pure state.

use super::*;
use crate::principal::*;
use crate::principal::{PrincipalKind, PrincipalSpecV1, RolePreset};
use crate::settings::TenantSettingsPatch;
use crate::state::*;
use crate::token::TokenRequestV1;

fn req(stamp_ms: u64, command: Command) -> LedgerRequest {
    LedgerRequest { stamp_ms, trace_id: "t".into(), command: command.into() }
}

fn create(id: &str, name: &str) -> Command {
    Command::CreateTenant { tenant_id: id.into(), name: name.into(), display_name: None }
}

#[test]
fn decide_table() {
    let mut st = LedgerState::default();
    assert!(matches!(st.execute(&req(10, create("a", "acme"))).0, Outcome::Applied { .. }));
    let cases: Vec<(Command, Option<ReasonCode>)> = vec![
        (create("b", "acme"), Some(ReasonCode::TENANT_ALREADY_EXISTS)),
        (create("a", "other"), Some(ReasonCode::TENANT_ALREADY_EXISTS)),
        (create("c", "Bad Name"), Some(ReasonCode::INPUT_INVALID)),
        (create("c", ""), Some(ReasonCode::INPUT_INVALID)),
        (create("c", "-x"), Some(ReasonCode::INPUT_INVALID)),
        (create(CLUSTER_STREAM, "x"), Some(ReasonCode::INPUT_INVALID)),
        (Command::ResumeTenant { tenant_id: "a".into() }, Some(ReasonCode::TENANT_STATE_CONFLICT)),
        (Command::SuspendTenant { tenant_id: "zz".into(), note: None }, Some(ReasonCode::TENANT_NOT_FOUND)),
        (
            Command::SuspendTenant { tenant_id: "a".into(), note: Some("x".repeat(501)) },
            Some(ReasonCode::INPUT_INVALID),
        ),
        (Command::SuspendTenant { tenant_id: "a".into(), note: None }, None),
        (Command::SuspendTenant { tenant_id: "a".into(), note: None }, Some(ReasonCode::TENANT_STATE_CONFLICT)),
        (Command::ResumeTenant { tenant_id: "a".into() }, None),
        (
            Command::SetTenantSettings {
                tenant_id: "a".into(),
                patch: TenantSettingsPatch { idempotency_retention_s: Some(60), ..Default::default() },
            },
            Some(ReasonCode::INPUT_INVALID),
        ),
        (
            Command::SetTenantSettings { tenant_id: "zz".into(), patch: TenantSettingsPatch::default() },
            Some(ReasonCode::TENANT_NOT_FOUND),
        ),
        (
            Command::SetTenantSettings {
                tenant_id: "a".into(),
                patch: TenantSettingsPatch { audit_max_events: Some(500), ..Default::default() },
            },
            None,
        ),
    ];
    for (cmd, want) in cases {
        let got = decide(&st, &cmd, 0).err().map(|r| r.reason);
        assert_eq!(got, want, "{cmd:?}");
        st.execute(&req(11, cmd));
    }
}

fn spec(id: &str, name: &str, scopes: &[&str]) -> PrincipalSpecV1 {
    PrincipalSpecV1 {
        principal_id: id.into(),
        name: name.into(),
        kind: PrincipalKind::Agent,
        preset: Some(RolePreset::ReadOnly),
        scopes: scopes.iter().map(|s| s.to_string()).collect(),
        metadata: Default::default(),
    }
}

#[test]
fn principal_rules() {
    let mut st = LedgerState::default();
    st.execute(&req(1, create("a", "acme")));
    let cp = |tenant: &str, s: PrincipalSpecV1| Command::CreatePrincipal { tenant_id: tenant.into(), spec: s };
    let grant = |p: &str, scope: &str| Command::GrantScope {
        tenant_id: "a".into(),
        principal_id: p.into(),
        scope: scope.into(),
    };
    let cases: Vec<(Command, Option<ReasonCode>)> = vec![
        (cp("zz", spec("p1", "bot", &[])), Some(ReasonCode::TENANT_NOT_FOUND)),
        (cp("a", spec("p1", "bot", &["admin:everything"])), Some(ReasonCode::INPUT_INVALID)),
        (cp("a", spec("p1", "Bad Name", &[])), Some(ReasonCode::INPUT_INVALID)),
        (cp("a", spec("p1", "bot", &["tools:call:move_arm"])), None),
        (cp("a", spec("p2", "bot", &[])), Some(ReasonCode::PRINCIPAL_ALREADY_EXISTS)),
        (cp("a", spec("p1", "other", &[])), Some(ReasonCode::PRINCIPAL_ALREADY_EXISTS)),
        (
            Command::RevokeScope { tenant_id: "a".into(), principal_id: "p1".into(), scope: "ops:execute".into() },
            Some(ReasonCode::INPUT_INVALID),
        ),
        (
            Command::RevokeScope {
                tenant_id: "a".into(),
                principal_id: "p1".into(),
                scope: "tools:call:move_arm".into(),
            },
            None,
        ),
        // A scope granted back lifts its revocation; one under a broader revocation is refused;
        // a scope held already is no change; a malformed one is refused.
        (grant("p1", "tools:call:move_arm"), None),
        (grant("p1", "tools:call:move_arm"), None),
        (grant("p1", "work:read"), None),
        (grant("p1", "nope:x"), Some(ReasonCode::INPUT_INVALID)),
        (grant("nope", "work:read"), Some(ReasonCode::PRINCIPAL_NOT_FOUND)),
        (grant("p1", "tools:call:*"), None),
        (Command::RevokeScope { tenant_id: "a".into(), principal_id: "p1".into(), scope: "tools:call:*".into() }, None),
        (grant("p1", "tools:call:lift"), Some(ReasonCode::PRINCIPAL_STATE_CONFLICT)),
        (
            Command::RevokePrincipal { tenant_id: "a".into(), principal_id: "nope".into(), note: None },
            Some(ReasonCode::PRINCIPAL_NOT_FOUND),
        ),
        (Command::RevokePrincipal { tenant_id: "a".into(), principal_id: "p1".into(), note: None }, None),
        (
            Command::RevokePrincipal { tenant_id: "a".into(), principal_id: "p1".into(), note: None },
            Some(ReasonCode::PRINCIPAL_STATE_CONFLICT),
        ),
    ];
    for (cmd, want) in cases {
        assert_eq!(decide(&st, &cmd, 0).err().map(|r| r.reason), want, "{cmd:?}");
        st.execute(&req(2, cmd));
    }
    let p = st.principal("a", "bot").expect("principal by name");
    assert_eq!(p.state, PrincipalState::Revoked);
    assert!(p.scopes.contains("ops:read"), "preset scopes are granted");
    assert!(p.scopes.contains("tools:call:move_arm") && !p.revoked_scopes.contains("tools:call:move_arm"));
    assert!(p.scopes.contains("work:read") && p.revoked_scopes.contains("tools:call:*"));
    assert!(!p.scopes.contains("tools:call:lift"));
    assert!(st.principal("zz", "bot").is_none(), "principals never leak across tenants");
}

fn issue(jti: &str, principal: &str, scopes: &[&str], ttl_s: u64, parent: Option<&str>) -> Command {
    Command::IssueToken {
        tenant_id: "a".into(),
        request: TokenRequestV1 {
            jti: jti.into(),
            principal_id: principal.into(),
            scopes: scopes.iter().map(|s| s.to_string()).collect(),
            ttl_s,
            parent_jti: parent.map(str::to_string),
        },
    }
}

/// Tenant `a` with `p-del` ("planner", preset delegate), at `t0`.
fn with_planner(t0: u64) -> LedgerState {
    let mut st = LedgerState::default();
    st.execute(&req(t0, create("a", "acme")));
    let mut delegate = spec("p-del", "planner", &[]);
    delegate.preset = Some(RolePreset::Delegate);
    st.execute(&req(t0, Command::CreatePrincipal { tenant_id: "a".into(), spec: delegate }));
    st
}

/// The Nimi authority cases that live in the ledger: TTL clamping, scope subsets, revoked
/// scopes, delegation depth, cascade revocation, and the domain gate before the scope gate.
#[test]
fn token_rules() {
    let t0 = 1_000_000;
    let mut st = with_planner(t0);
    st.execute(&req(
        t0,
        Command::CreatePrincipal { tenant_id: "a".into(), spec: spec("p-ro", "viewer", &["tools:call:scan"]) },
    ));
    st.execute(&req(
        t0,
        Command::RevokeScope { tenant_id: "a".into(), principal_id: "p-ro".into(), scope: "tools:call:scan".into() },
    ));
    let revoke = |jti: &str| Command::RevokeToken { tenant_id: "a".into(), jti: jti.into() };
    let cases: Vec<(Command, Option<ReasonCode>)> = vec![
        (issue("root", "p-del", &[], 10, None), None),
        (issue("root", "p-del", &[], 600, None), Some(ReasonCode::INPUT_INVALID)),
        (issue("x1", "p-ro", &["ops:execute"], 600, None), Some(ReasonCode::APP_SCOPE_FORBIDDEN)),
        (issue("x2", "p-ro", &["tools:call:scan"], 600, None), Some(ReasonCode::APP_SCOPE_REVOKED)),
        (issue("x3", "p-ro", &["nope:x"], 600, None), Some(ReasonCode::INPUT_INVALID)),
        (issue("x4", "ghost", &[], 600, None), Some(ReasonCode::PRINCIPAL_NOT_FOUND)),
        (issue("ro", "p-ro", &[], 600, None), None),
        (issue("child", "p-ro", &["ops:read", "tools:call:move"], 600, Some("root")), None),
        (issue("grandchild", "p-ro", &["ops:read"], 600, Some("child")), Some(ReasonCode::DELEGATION_DEPTH_EXCEEDED)),
        (issue("c2", "p-ro", &["audit:read"], 600, Some("root")), Some(ReasonCode::APP_SCOPE_FORBIDDEN)),
        (issue("c3", "p-ro", &["ops:read"], 600, Some("ro")), Some(ReasonCode::APP_SCOPE_FORBIDDEN)),
        (issue("c4", "p-ro", &["ops:read"], 600, Some("missing")), Some(ReasonCode::AUTH_TOKEN_INVALID)),
        (revoke("root"), None),
        (revoke("child"), Some(ReasonCode::TOKEN_ALREADY_REVOKED)),
        (revoke("nope"), Some(ReasonCode::TOKEN_NOT_FOUND)),
        (issue("c5", "p-ro", &["ops:read"], 600, Some("root")), Some(ReasonCode::AUTH_TOKEN_REVOKED)),
    ];
    for (cmd, want) in cases {
        assert_eq!(decide(&st, &cmd, t0).err().map(|r| r.reason), want, "{cmd:?}");
        st.execute(&req(t0, cmd));
    }
    // TTL clamped up to the tenant minimum (60 s); the child never outlives its parent.
    let root = st.token("a", "root").expect("root");
    assert_eq!(root.record.expires_at_ms, t0 + 60_000);
    let child = st.token("a", "child").expect("child");
    assert_eq!(child.record.depth, 1);
    assert_eq!(child.record.expires_at_ms, root.record.expires_at_ms);
    // Revoking the parent revoked the child with it.
    assert_eq!(child.revoked_via.as_deref(), Some("root"));
    assert!(st.token("a", "ro").is_some_and(|t| t.revoked_at_ms.is_none()));
    // Records list in pages, in the order of their rows, filtered by principal.
    let pages = |principal: Option<&str>| {
        let (mut seen, mut after) = (Vec::new(), None::<String>);
        for _ in 0..10 {
            let (page, next) = st.list_tokens("a", principal, after.as_deref(), 1);
            seen.extend(page.into_iter().map(|t| t.record.jti));
            let Some(next) = next else { return seen };
            after = Some(next);
        }
        panic!("no last page");
    };
    assert_eq!(pages(None), ["ro", "root", "child"]);
    assert_eq!(pages(Some("p-ro")), ["ro", "child"]);
    // Format 19 kept the records in its `token` section: decoding it moves them to the same
    // rows a fold writes (the digest covers them), revocations and links included.
    let v19 = st.encode_format_19();
    assert_eq!(crate::format::unwrap(crate::format::STATE_MAGIC, &v19).map(|(v, _)| v), Ok(19));
    let upgraded = LedgerState::decode_versioned(&v19).expect("format 19");
    assert!(upgraded.tokens.is_empty() && upgraded.token_children.is_empty());
    assert_eq!(upgraded.digest(), st.digest());
    assert_eq!(upgraded.token("a", "child"), st.token("a", "child"));
    assert_eq!(upgraded.cold.token_children("a", "root", 10), ["child"]);
    assert_eq!(upgraded.cold.tenants["a"].tokens, 3);
    // A depth violation left a rejection event in the tenant's stream (audit evidence).
    let (outcome, events) = st.execute(&req(t0, issue("g2", "p-ro", &["ops:read"], 600, Some("child"))));
    assert!(matches!(outcome, Outcome::Rejected { .. }));
    assert_eq!(events[0].stream, "a");

    // Expired parent: ledger time has passed its expiry.
    st.execute(&req(t0, issue("short", "p-del", &[], 60, None)));
    let later = t0 + 61_000;
    let cmd = issue("late", "p-ro", &["ops:read"], 600, Some("short"));
    assert_eq!(decide(&st, &cmd, later).err().map(|r| r.reason), Some(ReasonCode::AUTH_TOKEN_EXPIRED));

    // Domain gate first: a suspended tenant answers TENANT_SUSPENDED even for a bad request.
    st.execute(&req(later, Command::SuspendTenant { tenant_id: "a".into(), note: None }));
    let bad = issue("s1", "ghost", &["nope:x"], 600, None);
    assert_eq!(decide(&st, &bad, later).err().map(|r| r.reason), Some(ReasonCode::TENANT_SUSPENDED));

    // A deleted tenant (a tombstone, final): its tokens and every change are refused.
    let delete = || Command::DeleteTenant { tenant_id: "a".into(), note: Some("contract ended".into()) };
    assert!(matches!(st.execute(&req(later, delete())).0, Outcome::Applied { .. }));
    assert_eq!(st.tenants["a"].state, TenantState::Deleted);
    let refused = |cmd: Command| decide(&st, &cmd, later).err().map(|r| r.reason);
    assert_eq!(refused(delete()), Some(ReasonCode::TENANT_DELETED));
    assert_eq!(refused(Command::ResumeTenant { tenant_id: "a".into() }), Some(ReasonCode::TENANT_DELETED));
    assert_eq!(refused(issue("d1", "p-del", &[], 60, None)), Some(ReasonCode::TENANT_DELETED));
    let principal = Command::CreatePrincipal { tenant_id: "a".into(), spec: spec("p-new", "late", &[]) };
    assert_eq!(refused(principal), Some(ReasonCode::TENANT_DELETED));
    let tenant = st.tenants["a"].clone();
    assert_eq!(tenant.closed().map(|r| r.reason), Some(ReasonCode::TENANT_DELETED));
}

#[test]
fn site_and_device_rules() {
    let mut st = LedgerState::default();
    st.execute(&req(1, create("a", "acme")));
    st.execute(&req(1, create("b", "beta")));
    let site = |t: &str, id: &str, name: &str| Command::CreateSite {
        tenant_id: t.into(),
        site_id: id.into(),
        name: name.into(),
        display_name: None,
    };
    let device = |t: &str, id: &str, site: &str, name: &str, class: &str| Command::CreateDevice {
        tenant_id: t.into(),
        device_id: id.into(),
        site_id: site.into(),
        name: name.into(),
        device_class: class.into(),
    };
    let cases: Vec<(Command, Option<ReasonCode>)> = vec![
        (site("zz", "s1", "plant"), Some(ReasonCode::TENANT_NOT_FOUND)),
        (site("a", "s1", "Plant 1"), Some(ReasonCode::INPUT_INVALID)),
        (site("a", "s1", "plant"), None),
        (site("a", "s2", "plant"), Some(ReasonCode::SITE_ALREADY_EXISTS)),
        (site("b", "s9", "plant"), None),
        (device("a", "d1", "s9", "press", "press.v1"), Some(ReasonCode::SITE_NOT_FOUND)),
        (device("a", "d1", "s1", "press", "bad class!"), Some(ReasonCode::INPUT_INVALID)),
        (device("a", "d1", "s1", "press", "press.v1"), None),
        (device("a", "d2", "s1", "press", "press.v1"), Some(ReasonCode::DEVICE_ALREADY_EXISTS)),
        (device("a", "d3", "s1", "arm", "robot-arm.v2"), None),
    ];
    for (cmd, want) in cases {
        assert_eq!(decide(&st, &cmd, 0).err().map(|r| r.reason), want, "{cmd:?}");
        st.execute(&req(2, cmd));
    }
    assert_eq!(st.device("a", "press").map(|d| d.site_id.as_str()), Some("s1"));
    let (devices, _) = st.list_devices("a", Some("s1"), None, 10);
    assert_eq!(devices.iter().map(|d| d.name.as_str()).collect::<Vec<_>>(), ["arm", "press"]);
    assert!(st.list_devices("a", Some("s9"), None, 10).0.is_empty(), "another tenant's site shows nothing");
    assert!(st.site("b", "s1").is_none(), "sites never leak across tenants");
}

#[test]
fn settings_change_is_applied() {
    let mut st = LedgerState::default();
    st.execute(&req(1, create("a", "acme")));
    assert_eq!(st.tenant("a").map(|t| t.settings.audit_max_events), Some(20_000));
    let patch = TenantSettingsPatch { audit_max_events: Some(7), ..Default::default() };
    st.execute(&req(2, Command::SetTenantSettings { tenant_id: "a".into(), patch }));
    assert_eq!(st.tenant("a").map(|t| t.settings.audit_max_events), Some(7));
}

#[test]
fn clock_is_monotonic_and_streams_are_gap_free() {
    let mut st = LedgerState::default();
    st.execute(&req(100, create("a", "acme")));
    // A leader with a slower clock cannot move ledger time backwards.
    st.execute(&req(50, Command::SuspendTenant { tenant_id: "a".into(), note: None }));
    assert_eq!(st.clock_ms, 100);
    st.execute(&req(200, Command::ResumeTenant { tenant_id: "zz".into() }));
    assert_eq!(st.revision, 3);
    assert_eq!(st.stream_seq.get("a"), Some(&2));
    assert_eq!(st.stream_seq.get(CLUSTER_STREAM), Some(&1));
    assert_eq!(st.tenant("acme").map(|t| t.state), Some(TenantState::Suspended));
    assert_eq!(st.tenant("acme").map(|t| t.updated_at_ms), Some(100));
}

#[test]
fn list_pages_by_name() {
    let mut st = LedgerState::default();
    for (i, n) in ["c", "a", "b", "d"].iter().enumerate() {
        st.execute(&req(1, create(&i.to_string(), n)));
    }
    let (p1, next) = st.list_tenants(None, 3);
    assert_eq!(p1.iter().map(|t| t.name.as_str()).collect::<Vec<_>>(), ["a", "b", "c"]);
    let (p2, next2) = st.list_tenants(next.as_deref(), 3);
    assert_eq!(p2.iter().map(|t| t.name.as_str()).collect::<Vec<_>>(), ["d"]);
    assert_eq!(next2, None);
}

/// Certificate renewal (SPEC X1): a renewal makes the new certificate current and keeps the one
/// it was renewed from until it expires; older ones are forgotten (two per executor at most);
/// only a certificate the ledger still maps to the executor renews it, never after revocation.
#[test]
fn executor_certificates_renew_from_a_mapped_certificate_until_revoked() {
    use crate::device::{EnrollmentV1, ExecutorCaV1, ExecutorCertV1};
    let mut st = LedgerState::default();
    let ok = |st: &mut LedgerState, cmd: Command| {
        let outcome = st.execute(&req(1_000, cmd)).0;
        assert!(matches!(outcome, Outcome::Applied { .. }), "{outcome:?}");
    };
    ok(&mut st, create("a", "acme"));
    ok(
        &mut st,
        Command::CreateSite { tenant_id: "a".into(), site_id: "s".into(), name: "plant".into(), display_name: None },
    );
    let ca = ExecutorCaV1 { fingerprint: crate::sha256_hex(b"ca"), cert_der: b"ca".to_vec() };
    ok(&mut st, Command::RegisterExecutorCa { tenant_id: "a".into(), ca: ca.clone() });
    let enrollment = EnrollmentV1 {
        enrollment_id: "e".into(),
        site_id: "s".into(),
        device_ids: Default::default(),
        token_sha256: "00".repeat(32),
        ttl_s: 60,
    };
    ok(&mut st, Command::CreateEnrollment { tenant_id: "a".into(), enrollment });
    let cert = |n: u8| ExecutorCertV1 {
        executor_id: "x".into(),
        fingerprint: format!("{n:02x}").repeat(32),
        serial: format!("{n:02x}"),
        not_after_ms: 1_000_000,
        ca_fingerprint: ca.fingerprint.clone(),
    };
    ok(
        &mut st,
        Command::CompleteEnrollment {
            tenant_id: "a".into(),
            enrollment_id: "e".into(),
            token_sha256: "00".repeat(32),
            cert: cert(1),
        },
    );
    let renew = |from: u8, to: ExecutorCertV1| Command::RenewExecutorCertificate {
        tenant_id: "a".into(),
        executor_id: "x".into(),
        from_fingerprint: format!("{from:02x}").repeat(32),
        cert: to,
    };
    let mapped = |st: &LedgerState| -> Vec<String> { st.executor_certs.keys().map(|k| k[..2].to_string()).collect() };
    ok(&mut st, renew(1, cert(2)));
    assert_eq!(st.executors["a"]["x"].cert, cert(2));
    assert_eq!(mapped(&st), ["01", "02"], "the certificate renewed from stays until it expires");
    ok(&mut st, renew(2, cert(3)));
    assert_eq!(mapped(&st), ["02", "03"], "older ones are forgotten");
    let refused = |st: &LedgerState, cmd: Command| decide(st, &cmd, 1_000).err().map(|r| r.reason);
    assert_eq!(refused(&st, renew(1, cert(4))), Some(ReasonCode::EXECUTOR_CERT_REFUSED), "a forgotten certificate");
    // A renewal whose answer was lost: the executor still holds 2 and renews from it again.
    ok(&mut st, renew(2, cert(4)));
    assert_eq!(mapped(&st), ["02", "04"]);
    // The same renewal replayed (the same certificate, byte for byte) changes nothing.
    assert_eq!(decide(&st, &renew(2, cert(4)), 1_000).map(|e| e.len()), Ok(0), "a replay is a no-op");
    assert_eq!((mapped(&st), &st.executors["a"]["x"].cert), (vec!["02".to_string(), "04".to_string()], &cert(4)));
    assert_eq!(refused(&st, renew(4, cert(2))), Some(ReasonCode::INPUT_INVALID), "a certificate is never reused");
    let expired = ExecutorCertV1 { not_after_ms: 1_000, ..cert(5) };
    assert_eq!(refused(&st, renew(4, expired)), Some(ReasonCode::INPUT_INVALID));
    let foreign_ca = ExecutorCertV1 { ca_fingerprint: "ff".repeat(32), ..cert(5) };
    assert_eq!(refused(&st, renew(4, foreign_ca)), Some(ReasonCode::INPUT_INVALID));
    executor_presence_is_what_its_edges_say(&mut st);
    ok(&mut st, Command::RevokeExecutor { tenant_id: "a".into(), executor_id: "x".into() });
    assert_eq!(refused(&st, renew(4, cert(5))), Some(ReasonCode::EXECUTOR_REVOKED));
    let reconnect = presence("x", "e1", true);
    assert_eq!(refused(&st, reconnect), Some(ReasonCode::EXECUTOR_REVOKED), "a revoked executor connects no more");
}

/// A tool an executor performs is connected while an executor of it is connected and
/// confirmed, degraded once its edge stopped confirming it, unreachable once disconnected.
fn tool_health_follows_presence(st: &mut LedgerState, confirmed_at: u64) {
    use crate::health::{tenant_health, ToolState};
    let action = crate::catalog::CatalogActionV1 {
        id: "job".into(),
        title: "Job".into(),
        description: "A task".into(),
        input_schema: "{}".into(),
        output_schema: None,
        risk: crate::catalog::Risk::Low,
        execution: crate::catalog::Execution::Task,
        dry_run: false,
        idempotent: false,
        device_class: None,
        cost_units: 1,
        scope: "tools:call:job".into(),
    };
    let catalog = crate::catalog::CatalogV1 { actions: vec![action], digest: "d".into() };
    let version =
        crate::catalog::CatalogVersion { tenant_id: "a".into(), version: 1, published_at_ms: 0, revision: 1, catalog };
    st.catalogs.entry("a".into()).or_default().insert(1, version);
    let state = |st: &LedgerState, at: u64| tenant_health(st, "a", at).tools[0].state;
    assert_eq!(state(st, confirmed_at), ToolState::Connected);
    let stale = confirmed_at + crate::device::PRESENCE_STALE_MS + 1;
    assert_eq!(state(st, stale), ToolState::Degraded, "its edge stopped confirming it");
    let mut gone = st.clone();
    gone.execute(&req(confirmed_at + 1, presence("x", "e1", false)));
    assert_eq!(state(&gone, confirmed_at + 1), ToolState::Unreachable);
    st.catalogs.remove("a");
}

fn presence(executor: &str, edge: &str, connected: bool) -> Command {
    Command::SetExecutorPresence {
        tenant_id: "a".into(),
        executor_id: executor.into(),
        edge_id: edge.into(),
        connected,
    }
}

/// Edges say when executor `x` of tenant `a` opens and closes its dispatch stream: a change is
/// audited, a confirmation is kept at most once per half period and not audited, and a late
/// close from an edge the executor has left changes nothing.
fn executor_presence_is_what_its_edges_say(st: &mut LedgerState) {
    use crate::device::PRESENCE_CONFIRM_MS;
    let reason = |st: &LedgerState, cmd: Command| decide(st, &cmd, 10_000).err().map(|r| r.reason);
    assert_eq!(reason(st, presence("y", "e1", true)), Some(ReasonCode::EXECUTOR_NOT_FOUND));
    assert_eq!(reason(st, presence("x", "", true)), Some(ReasonCode::INPUT_INVALID));
    assert_eq!(reason(st, presence("x", "e\n1", true)), Some(ReasonCode::INPUT_INVALID));
    let audited = |st: &LedgerState| st.audit["a"].next_seq;
    let before = audited(st);
    st.execute(&req(10_000, presence("x", "e1", true)));
    let now = |st: &LedgerState| st.executor_presence["a"]["x"].clone();
    assert_eq!((now(st).connected, now(st).since_ms, audited(st)), (true, 10_000, before + 1));
    let soon = 10_000 + PRESENCE_CONFIRM_MS / 2 - 1;
    assert_eq!(decide(st, &presence("x", "e1", true), soon).map(|e| e.len()), Ok(0), "confirmed just now");
    let later = 10_000 + PRESENCE_CONFIRM_MS;
    st.execute(&req(later, presence("x", "e1", true)));
    assert_eq!((now(st).since_ms, now(st).confirmed_at_ms, audited(st)), (10_000, later, before + 1), "not audited");
    tool_health_follows_presence(st, later);
    st.execute(&req(later + 1, presence("x", "e2", true)));
    assert_eq!((now(st).edge_id.as_str(), now(st).since_ms, audited(st)), ("e2", later + 1, before + 2));
    assert_eq!(decide(st, &presence("x", "e1", false), later + 2).map(|e| e.len()), Ok(0), "e1's late close");
    st.execute(&req(later + 3, presence("x", "e2", false)));
    assert_eq!((now(st).connected, now(st).since_ms), (false, later + 3));
    assert!(now(st).liveness(later + 5_003).starts_with("disconnected from edge e2 5 s ago"), "{:?}", now(st));
    assert!(crate::role::Role::Edge.may_submit(&presence("x", "e2", true)));
    // A replica reading the state's encoding has the same connections.
    let copy = LedgerState::decode_versioned(&st.encode_versioned()).unwrap();
    assert_eq!((copy.digest(), &copy.executor_presence), (st.digest(), &st.executor_presence));
}

/// Revocations and retirements (SPEC S1): each refused twice with its reason, bounded, dropped
/// once what it names has expired; a retired key or CA never comes back, and retiring a CA cuts
/// off the executors it certified.
#[test]
fn credentials_are_revoked_and_retired_for_good() {
    use crate::device::{EnrollmentV1, ExecutorCaV1, ExecutorCertV1};
    use crate::revocation::{RevokedRoleCertificateV1, ISSUER_REVOCATIONS_MAX};
    use crate::token::{SigningKeyV1, TenantIssuerV1};
    let mut st = LedgerState::default();
    let at = |st: &mut LedgerState, now: u64, cmd: Command| -> Option<ReasonCode> {
        match st.execute(&req(now, cmd)).0 {
            Outcome::Applied { .. } => None,
            Outcome::Rejected { reason, .. } => Some(reason),
            other => panic!("not one command's outcome: {other:?}"),
        }
    };
    assert_eq!(at(&mut st, 1_000, create("a", "acme")), None);

    // A signing key: retired once, never registered again.
    let key = SigningKeyV1 { kid: "k".into(), alg: "EdDSA".into(), public_key: vec![7; 32] };
    assert_eq!(at(&mut st, 3_000, Command::RetireSigningKey { kid: "k".into() }), Some(ReasonCode::NOT_FOUND));
    assert_eq!(at(&mut st, 3_000, Command::RegisterSigningKey { key: key.clone() }), None);
    assert_eq!(at(&mut st, 3_000, Command::RetireSigningKey { kid: "k".into() }), None);
    assert!(!st.signing_keys.contains_key("k") && st.revocations.signing_keys.contains_key("k"));
    assert_eq!(at(&mut st, 3_000, Command::RetireSigningKey { kid: "k".into() }), Some(ReasonCode::CREDENTIAL_RETIRED));
    assert_eq!(at(&mut st, 3_000, Command::RegisterSigningKey { key }), Some(ReasonCode::CREDENTIAL_RETIRED));

    // A role certificate: the serial in its one spelling, a live certificate, dropped after it expires.
    let cert = |serial: &str, not_after_ms: u64| Command::RevokeRoleCertificate {
        certificate: RevokedRoleCertificateV1 { serial: serial.into(), identity: "edge:a".into(), not_after_ms },
    };
    assert_eq!(at(&mut st, 4_000, cert("00ab", 10_000)), Some(ReasonCode::INPUT_INVALID), "not normalized");
    assert_eq!(at(&mut st, 4_000, cert("ab", 4_000)), Some(ReasonCode::INPUT_INVALID), "expired already");
    let bad_identity = Command::RevokeRoleCertificate {
        certificate: RevokedRoleCertificateV1 {
            serial: "ab".into(),
            identity: "executor:x".into(),
            not_after_ms: 10_000,
        },
    };
    assert_eq!(at(&mut st, 4_000, bad_identity), Some(ReasonCode::INPUT_INVALID));
    assert_eq!(at(&mut st, 4_000, cert("ab", 10_000)), None);
    assert!(st.revocations.role_certificate_revoked("ab"));
    assert_eq!(at(&mut st, 4_000, cert("ab", 10_000)), Some(ReasonCode::CREDENTIAL_RETIRED));
    assert_eq!(at(&mut st, 10_001, cert("cd", 20_000)), None);
    assert!(!st.revocations.role_certificate_revoked("ab"), "dropped after its notAfter");

    // An executor CA: its executors lose their certificates; it cannot come back.
    assert_eq!(
        at(
            &mut st,
            5_000,
            Command::CreateSite {
                tenant_id: "a".into(),
                site_id: "s".into(),
                name: "plant".into(),
                display_name: None
            }
        ),
        None
    );
    let ca = ExecutorCaV1 { fingerprint: crate::sha256_hex(b"ca"), cert_der: b"ca".to_vec() };
    let other = ExecutorCaV1 { fingerprint: crate::sha256_hex(b"ca2"), cert_der: b"ca2".to_vec() };
    for c in [&ca, &other] {
        assert_eq!(at(&mut st, 5_000, Command::RegisterExecutorCa { tenant_id: "a".into(), ca: c.clone() }), None);
    }
    for (n, c) in [(1u8, &ca), (2u8, &other)] {
        let enrollment = EnrollmentV1 {
            enrollment_id: format!("e{n}"),
            site_id: "s".into(),
            device_ids: Default::default(),
            token_sha256: "00".repeat(32),
            ttl_s: 60,
        };
        assert_eq!(at(&mut st, 5_000, Command::CreateEnrollment { tenant_id: "a".into(), enrollment }), None);
        let cert = ExecutorCertV1 {
            executor_id: format!("x{n}"),
            fingerprint: format!("{n:02x}").repeat(32),
            serial: format!("{n:02x}"),
            not_after_ms: 1_000_000,
            ca_fingerprint: c.fingerprint.clone(),
        };
        let complete = Command::CompleteEnrollment {
            tenant_id: "a".into(),
            enrollment_id: format!("e{n}"),
            token_sha256: "00".repeat(32),
            cert,
        };
        assert_eq!(at(&mut st, 5_000, complete), None);
    }
    let retire =
        |fingerprint: &str| Command::RetireExecutorCa { tenant_id: "a".into(), fingerprint: fingerprint.into() };
    assert_eq!(at(&mut st, 6_000, retire(&"ee".repeat(32))), Some(ReasonCode::NOT_FOUND));
    assert_eq!(at(&mut st, 6_000, retire(&ca.fingerprint)), None);
    let mapped: Vec<&str> = st.executor_certs.values().map(|(_, x)| x.as_str()).collect();
    assert_eq!(mapped, ["x2"], "only the executor of the other CA keeps its certificate");
    assert!(!st.executor_cas["a"].contains_key(&ca.fingerprint));
    assert_eq!(at(&mut st, 6_000, retire(&ca.fingerprint)), Some(ReasonCode::CREDENTIAL_RETIRED));
    let again = Command::RegisterExecutorCa { tenant_id: "a".into(), ca: ca.clone() };
    assert_eq!(at(&mut st, 6_000, again), Some(ReasonCode::CREDENTIAL_RETIRED));

    // A tenant issuer's token id: kept for the tenant's longest token lifetime (+ skew).
    let jwks = r#"{"keys":[{"kty":"OKP","crv":"Ed25519","x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo","kid":"k1","alg":"EdDSA"}]}"#;
    let issuer = TenantIssuerV1 { issuer: "https://idp".into(), audience: "writ".into(), jwks: jwks.into() };
    assert_eq!(at(&mut st, 1_000, Command::SetTenantIssuer { tenant_id: "a".into(), issuer }), None);
    let revoke =
        |jti: &str| Command::RevokeIssuerToken { tenant_id: "a".into(), issuer: "https://idp".into(), jti: jti.into() };
    assert_eq!(at(&mut st, 20_000, revoke("j1")), None);
    let until = st.revocations.issuer_tokens["https://idp"]["j1"];
    let ttl_max_ms = st.tenants["a"].settings.token_ttl_max_s * 1000;
    assert_eq!(until, 20_000 + ttl_max_ms + crate::auth::CLOCK_SKEW_MS);
    assert!(st.revocations.issuer_token_revoked("https://idp", "j1"));
    assert_eq!(at(&mut st, 20_000, revoke("j1")), Some(ReasonCode::TOKEN_ALREADY_REVOKED));
    assert_eq!(at(&mut st, 20_000, revoke("")), Some(ReasonCode::INPUT_INVALID));
    assert_eq!(at(&mut st, 20_000, revoke(&"j".repeat(257))), Some(ReasonCode::INPUT_INVALID));
    let foreign = Command::RevokeIssuerToken { tenant_id: "a".into(), issuer: "https://other".into(), jti: "j".into() };
    assert_eq!(at(&mut st, 20_000, foreign), Some(ReasonCode::ISSUER_NOT_FOUND));
    // The next revocation after `until` drops the expired one.
    assert_eq!(at(&mut st, until + 1, revoke("j2")), None);
    assert!(!st.revocations.issuer_token_revoked("https://idp", "j1"), "dropped once its tokens expired");
    // Bounded: a full set refuses more until entries expire.
    let full: std::collections::BTreeMap<String, u64> =
        (0..ISSUER_REVOCATIONS_MAX).map(|i| (format!("f{i}"), u64::MAX)).collect();
    st.revocations.issuer_tokens.insert("https://idp".into(), full);
    assert_eq!(at(&mut st, until + 2, revoke("one-more")), Some(ReasonCode::QUOTA_EXCEEDED));
    st.revocations.issuer_tokens.clear();

    // All of it survives the state's encoding (format 2) and is in the digest.
    let decoded = LedgerState::decode_versioned(&st.encode_versioned()).expect("decodes");
    assert_eq!(decoded, st);
    let mut without = st.clone();
    without.revocations = Default::default();
    assert_ne!(without.digest(), st.digest(), "revocations are part of the digest");
}

#[test]
fn a_batch_of_decisions_is_one_event_and_one_audit_record_per_decision() {
    let mut st = LedgerState::default();
    st.execute(&req(1, create("a", "acme")));
    let patch = TenantSettingsPatch { audit_max_events: Some(3), ..Default::default() };
    st.execute(&req(2, Command::SetTenantSettings { tenant_id: "a".into(), patch }));
    st.execute(&req(2, Command::CreatePrincipal { tenant_id: "a".into(), spec: spec("p", "agent", &[]) }));
    let decision = |n: u32| crate::audit::RequestDecisionV1::allowed(&format!("tr-{n}"), "p", "tools/list", None);
    let command = Command::RecordDecisions { tenant_id: "a".into(), decisions: (1..=4).map(decision).collect() };
    let (outcome, events, audited) = st.execute_audited(&req(3, command));
    let records = crate::trail::records_of(&events, &audited);
    // Its recorder reads only that it applied: the answer does not copy the batch's event.
    assert!(matches!(&outcome, Outcome::Applied { events, operation: None } if events.is_empty()), "{outcome:?}");
    assert_eq!(events.len(), 1, "one event for the batch");
    assert!(matches!(&events[0].event, Event::RequestsDecidedV1 { decisions, .. } if decisions.len() == 4));
    // One record per decision, in order, each with its own trace id, on consecutive sequences.
    let traces: Vec<(u64, &str)> = records.iter().map(|r| (r.seq, r.trace_id.as_str())).collect();
    assert_eq!(traces, [(4, "tr-1"), (5, "tr-2"), (6, "tr-3"), (7, "tr-4")]);
    assert!(records.iter().all(|r| r.domain == "request" && r.revision == events[0].revision));
    // Retention counts records, not events: 3 kept of the 7 written.
    let index = &st.audit["a"];
    assert_eq!((index.first_seq, index.next_seq), (5, 8));
}

#[test]
fn a_deleted_tenant_is_purged_only_after_its_retention_and_then_leaves_no_trace() {
    use crate::ledger::TENANT_PURGE_AFTER_MS;
    let mut st = LedgerState::default();
    let t = "t-purge-me";
    st.execute(&req(1, create(t, "doomed")));
    st.execute(&req(1, Command::CreatePrincipal { tenant_id: t.into(), spec: spec("p-doomed", "bot", &[]) }));
    st.execute(&req(
        1,
        Command::CreateSite {
            tenant_id: t.into(),
            site_id: "s-doomed".into(),
            name: "plant".into(),
            display_name: None,
        },
    ));
    let work = Command::CreateWork {
        tenant_id: t.into(),
        work_id: "wo-1".into(),
        title: "t".into(),
        owner: "o".into(),
        scope: crate::work::WorkScopeV1 { actions: vec!["a".into()], ..Default::default() },
        by: "operator".into(),
    };
    assert!(matches!(st.execute(&req(1, work)).0, Outcome::Applied { .. }));
    assert!(!st.audit[t].is_empty(), "the tenant has an audit trail");
    let purge = || Command::PurgeTenant { tenant_id: t.into() };
    assert_eq!(
        decide(&st, &purge(), 2).err().map(|r| r.reason),
        Some(ReasonCode::TENANT_STATE_CONFLICT),
        "not deleted"
    );
    st.execute(&req(1_000, Command::DeleteTenant { tenant_id: t.into(), note: None }));
    let early = 1_000 + TENANT_PURGE_AFTER_MS - 1;
    assert_eq!(decide(&st, &purge(), early).err().map(|r| r.reason), Some(ReasonCode::TENANT_STATE_CONFLICT));
    let (outcome, events) = st.execute(&req(1_000 + TENANT_PURGE_AFTER_MS, purge()));
    assert!(matches!(outcome, Outcome::Applied { .. }), "{outcome:?}");
    assert_eq!(events[0].stream, CLUSTER_STREAM, "a purge is recorded outside the purged stream");
    // Nothing of the tenant is left but its stream's last sequence (ids are never reused).
    let mut scrubbed = st.clone();
    scrubbed.stream_seq.remove(t);
    let bytes = scrubbed.encode();
    assert!(!bytes.windows(t.len()).any(|w| w == t.as_bytes()), "the tenant id is gone from every view");
    assert!(!bytes.windows(6).any(|w| w == b"doomed"), "its name too");
    let later = 2_000 + TENANT_PURGE_AFTER_MS;
    assert_eq!(decide(&st, &purge(), later).err().map(|r| r.reason), Some(ReasonCode::TENANT_NOT_FOUND));
    // Its name is free again.
    assert!(matches!(st.execute(&req(later, create("t-new", "doomed"))).0, Outcome::Applied { .. }));
}

#[test]
fn upstream_rules() {
    use crate::upstream::{FuseV1, UpstreamSpecV1, UpstreamToolV1, UpstreamToolsV1};
    let mut st = LedgerState::default();
    st.execute(&req(1, create("a", "acme")));
    let put = |name: &str, url: &str, create: bool| Command::PutUpstream {
        tenant_id: "a".into(),
        name: name.into(),
        spec: UpstreamSpecV1::new(url),
        create,
    };
    let tools = |desc: &str| {
        let t = UpstreamToolV1 {
            name: "forecast".into(),
            title: None,
            description: desc.into(),
            input_schema: r#"{"type":"object"}"#.into(),
            output_schema: None,
            annotations: None,
        };
        UpstreamToolsV1::new(vec![t], 5).unwrap()
    };
    let observe =
        |desc: &str| Command::ObserveUpstreamTools { tenant_id: "a".into(), name: "w".into(), tools: tools(desc) };
    let approve = |digest: String| Command::ApproveUpstreamTools { tenant_id: "a".into(), name: "w".into(), digest };
    let fuse = |config_version: u64| Command::SetUpstreamFuse {
        tenant_id: "a".into(),
        name: "w".into(),
        edge_id: "edge-1".into(),
        fuse: FuseV1 { open: true, failures: 3, reason: "down".into(), config_version, changed_at_ms: 0 },
    };
    let mut tampered = tools("v1");
    tampered.tools[0].description = "other".into();
    let cases: Vec<(Command, Option<ReasonCode>)> = vec![
        (put("w", "http://mcp.example.com/mcp", true), Some(ReasonCode::UPSTREAM_INVALID)),
        (put("W", "https://mcp.example.com/mcp", true), Some(ReasonCode::UPSTREAM_INVALID)),
        (put("w", "https://mcp.example.com/mcp", false), Some(ReasonCode::UPSTREAM_NOT_FOUND)),
        (put("w", "https://mcp.example.com/mcp", true), None),
        (put("w", "https://mcp.example.com/mcp", true), Some(ReasonCode::UPSTREAM_ALREADY_EXISTS)),
        (approve(tools("v1").digest), Some(ReasonCode::UPSTREAM_DIGEST_MISMATCH)),
        (
            Command::ObserveUpstreamTools { tenant_id: "a".into(), name: "w".into(), tools: tampered },
            Some(ReasonCode::UPSTREAM_INVALID),
        ),
        (observe("v1"), None),
        (approve(tools("v2").digest), Some(ReasonCode::UPSTREAM_DIGEST_MISMATCH)),
        (approve(tools("v1").digest), None),
        (fuse(2), Some(ReasonCode::UPSTREAM_DIGEST_MISMATCH)),
        (fuse(1), None),
        (put("w", "https://other.example.com/mcp", false), None),
        (fuse(1), Some(ReasonCode::UPSTREAM_DIGEST_MISMATCH)),
        (Command::RemoveUpstream { tenant_id: "a".into(), name: "x".into() }, Some(ReasonCode::UPSTREAM_NOT_FOUND)),
    ];
    for (cmd, want) in cases {
        let got = decide(&st, &cmd, 0).err().map(|r| r.reason);
        assert_eq!(got, want, "{cmd:?}");
        st.execute(&req(11, cmd));
    }
    let u = st.upstream("a", "w").unwrap();
    assert_eq!((u.config_version, u.pinned.as_ref().map(|p| p.digest.clone())), (2, Some(tools("v1").digest)));
    assert!(u.pending.is_none() && u.fuses["edge-1"].open, "{u:?}");
    // The pinned set observed again leaves nothing pending; a changed one is pending, not pinned.
    st.execute(&req(12, observe("v2")));
    let u = st.upstream("a", "w").unwrap();
    assert_eq!(u.pending.as_ref().map(|p| p.digest.clone()), Some(tools("v2").digest));
    assert_eq!(u.pinned.as_ref().unwrap().tools[0].description, "v1");
    st.execute(&req(13, observe("v1")));
    assert!(st.upstream("a", "w").unwrap().pending.is_none());
    // A replica replaying the state's encoding reads the same upstreams.
    let copy = LedgerState::decode_versioned(&st.encode_versioned()).unwrap();
    assert_eq!(copy.digest(), st.digest());
    assert_eq!(copy.upstreams, st.upstreams);
    // Edges may record their fuses and nothing else of an upstream.
    use crate::role::Role;
    assert!(Role::Edge.may_submit(&fuse(2)));
    assert!(!Role::Edge.may_submit(&put("w", "https://x.example.com/mcp", false)));
    assert!(!Role::Edge.may_submit(&approve(tools("v1").digest)));
    st.execute(&req(14, Command::RemoveUpstream { tenant_id: "a".into(), name: "w".into() }));
    assert!(st.upstreams.is_empty());
}

/// `Command::Verified` on every replica: the grant a node recorded is re-checked at ledger time
/// and narrows the act to the credential's own scopes, principal, tenant and lifetime, before the
/// act itself is decided.
#[test]
fn a_verified_act_is_decided_on_its_grant_at_ledger_time() {
    use crate::grant::GrantV1;
    let mut st = LedgerState::default();
    let t0 = 1_000_000;
    st.execute(&req(t0, create("a", "acme")));
    let p = spec("p-1", "agent", &["ops:cancel", "ops:read"]);
    st.execute(&req(t0, Command::CreatePrincipal { tenant_id: "a".into(), spec: p }));
    st.execute(&req(t0, Command::CreatePrincipal { tenant_id: "a".into(), spec: spec("p-2", "other", &[]) }));
    st.execute(&req(t0, issue("j-1", "p-1", &["ops:cancel"], 3600, None)));
    let anonymous = |principal: Option<&str>| Command::SetAnonymousAccess {
        tenant_id: "a".into(),
        edge_id: "e".into(),
        principal_id: principal.map(str::to_string),
    };
    assert!(matches!(st.execute(&req(t0, anonymous(Some("p-1")))).0, Outcome::Applied { .. }));
    let cancel = |by: &str, authority_ref: &str| Command::OnBehalfOf {
        authority_ref: authority_ref.into(),
        command: Box::new(Command::CancelOperation {
            tenant_id: "a".into(),
            operation_id: "op-1".into(),
            by_principal_id: by.into(),
        }),
    };
    let grant = |issuer: &str, scopes: &[&str], expires_at_ms: u64| GrantV1 {
        tenant_id: "a".into(),
        principal_id: "p-1".into(),
        issuer: issuer.into(),
        token_id: (issuer == crate::token::WRIT_ISSUER).then(|| "j-1".to_string()),
        scopes: scopes.iter().map(|s| s.to_string()).collect(),
        expires_at_ms,
        verified_by: "node:1".into(),
        edge_id: "e".into(),
    };
    let anon = crate::auth::ANONYMOUS_ISSUER;
    let writ = crate::token::WRIT_ISSUER;
    let far = t0 + 3_600_000;
    let verified = |g: GrantV1, c: Command| Command::Verified { grant: g, command: Box::new(c) };
    let cases = [
        // Reaching the act itself: the grant stands and covers it.
        (verified(grant(anon, &["ops:cancel"], far), cancel("p-1", anon)), ReasonCode::OPERATION_NOT_FOUND),
        (verified(grant(writ, &["ops:cancel"], far), cancel("p-1", "j-1")), ReasonCode::OPERATION_NOT_FOUND),
        // The principal holds ops:cancel, the credential did not grant it.
        (verified(grant(anon, &["ops:read"], far), cancel("p-1", anon)), ReasonCode::APP_SCOPE_FORBIDDEN),
        // Another principal, another authority than the grant's, a lapsed or unknown issuer.
        (verified(grant(anon, &["ops:cancel"], far), cancel("p-2", anon)), ReasonCode::AUTH_TOKEN_INVALID),
        (verified(grant(anon, &["ops:cancel"], far), cancel("p-1", "j-1")), ReasonCode::AUTH_TOKEN_INVALID),
        (verified(grant(anon, &["ops:cancel"], t0), cancel("p-1", anon)), ReasonCode::AUTH_TOKEN_EXPIRED),
        (
            verified(grant("https://idp.example", &["ops:cancel"], far), cancel("p-1", "https://idp.example")),
            ReasonCode::AUTH_TOKEN_INVALID,
        ),
    ];
    for (command, want) in cases {
        match st.execute(&req(t0, command.clone())).0 {
            Outcome::Rejected { reason, .. } => assert_eq!(reason, want, "{command:?}"),
            other => panic!("{command:?} was not refused: {other:?}"),
        }
    }
    // Anonymous access taken away after the node verified an act under it: refused too.
    st.execute(&req(t0, anonymous(None)));
    let late = verified(grant(anon, &["ops:cancel"], far), cancel("p-1", anon));
    assert!(matches!(st.execute(&req(t0, late)).0, Outcome::Rejected { reason: ReasonCode::AUTH_TOKEN_MISSING, .. }));
    // A token revoked after the node verified it: the entry is refused on every replica.
    st.execute(&req(t0, Command::RevokeToken { tenant_id: "a".into(), jti: "j-1".into() }));
    let late = verified(grant(writ, &["ops:cancel"], far), cancel("p-1", "j-1"));
    assert!(matches!(st.execute(&req(t0, late)).0, Outcome::Rejected { reason: ReasonCode::AUTH_TOKEN_REVOKED, .. }));
}

/// Anonymous access is the tenant's record: one active principal per edge, bounded per tenant,
/// a repeat is a no-op, removal empties it, and only an edge it names is granted anything.
#[test]
fn anonymous_access_is_recorded_per_edge_for_one_active_principal() {
    use crate::credential::ANONYMOUS_EDGES_PER_TENANT_MAX;
    let mut st = LedgerState::default();
    st.execute(&req(1, create("a", "acme")));
    st.execute(&req(1, Command::CreatePrincipal { tenant_id: "a".into(), spec: spec("p-1", "agent", &[]) }));
    st.execute(&req(1, Command::CreatePrincipal { tenant_id: "a".into(), spec: spec("p-2", "gone", &[]) }));
    st.execute(&req(1, Command::RevokePrincipal { tenant_id: "a".into(), principal_id: "p-2".into(), note: None }));
    let set = |edge: &str, p: Option<&str>| Command::SetAnonymousAccess {
        tenant_id: "a".into(),
        edge_id: edge.into(),
        principal_id: p.map(str::to_string),
    };
    let refused = |st: &LedgerState, cmd: Command| decide(st, &cmd, 1).err().map(|r| r.reason);
    assert_eq!(refused(&st, set("e", Some("ghost"))), Some(ReasonCode::PRINCIPAL_NOT_FOUND));
    assert_eq!(refused(&st, set("e", Some("p-2"))), Some(ReasonCode::PRINCIPAL_STATE_CONFLICT));
    assert_eq!(refused(&st, set(&"e".repeat(200), Some("p-1"))), Some(ReasonCode::INPUT_INVALID));
    assert!(matches!(st.execute(&req(1, set("e", Some("p-1")))).0, Outcome::Applied { .. }));
    assert_eq!(decide(&st, &set("e", Some("p-1")), 1).map(|e| e.len()), Ok(0), "a repeat is a no-op");
    for n in 1..ANONYMOUS_EDGES_PER_TENANT_MAX {
        assert!(matches!(st.execute(&req(1, set(&format!("e{n}"), Some("p-1")))).0, Outcome::Applied { .. }));
    }
    assert_eq!(refused(&st, set("one-too-many", Some("p-1"))), Some(ReasonCode::INPUT_INVALID));
    assert_eq!(st.anonymous["a"]["e"], "p-1");
    st.execute(&req(1, set("e", None)));
    assert!(!st.anonymous["a"].contains_key("e"));
    // The state keeps it across its encoding.
    let back = LedgerState::decode_versioned(&st.encode_versioned()).unwrap();
    assert_eq!(back.anonymous, st.anonymous);
}

/// Decisions an edge records name principals only with a voucher: here the anonymous
/// credential of the edge the tenant lets act as that principal (tokens: the trust test).
#[test]
fn recorded_decisions_about_a_principal_need_a_voucher() {
    use crate::grant::{vouched, Credential, Presenter};
    let mut st = LedgerState::default();
    st.execute(&req(1, create("a", "acme")));
    st.execute(&req(1, Command::CreatePrincipal { tenant_id: "a".into(), spec: spec("p-1", "agent", &[]) }));
    let access =
        Command::SetAnonymousAccess { tenant_id: "a".into(), edge_id: "e".into(), principal_id: Some("p-1".into()) };
    st.execute(&req(1, access));
    let about = |principal: &str| Command::RecordDecisions {
        tenant_id: "a".into(),
        decisions: vec![crate::audit::RequestDecisionV1::allowed("t", principal, "tools/list", None)],
    };
    let at = |edge_id: &'static str| Presenter { edge_id, node: "node:1" };
    let anonymous = [Credential::Anonymous];
    assert_eq!(vouched(&st, &about("p-1"), &anonymous, &at("e"), 1), Ok(()));
    let refused = |r: Result<(), Rejection>| r.err().map(|r| r.reason);
    assert_eq!(refused(vouched(&st, &about("p-1"), &anonymous, &at("f"), 1)), Some(ReasonCode::AUTH_TOKEN_MISSING));
    assert_eq!(refused(vouched(&st, &about("p-1"), &[], &at("e"), 1)), Some(ReasonCode::AUTH_TOKEN_MISSING));
    let forged = [Credential::Bearer("e30.e30.sig".into())];
    assert_eq!(refused(vouched(&st, &about("p-1"), &forged, &at("e"), 1)), Some(ReasonCode::AUTH_TOKEN_MISSING));
    // Callers that are no principal need none (the ledger checks who they may be).
    assert_eq!(vouched(&st, &about("unauthenticated"), &[], &at("e"), 1), Ok(()));
}

/// A command's older form (`Command::older_form`, what the admin API submits while a member
/// cannot read the command) leaves the same state as the command itself.
#[test]
fn an_older_form_leaves_the_state_the_command_would() {
    let tenant = Command::CreateTenantWith {
        tenant_id: "a".into(),
        name: "acme".into(),
        display_name: None,
        settings: crate::settings::TenantSettingsPatch {
            quotas: Some(crate::settings::QuotasV1::fresh_tenant()),
            ..Default::default()
        },
    };
    let principal = Command::CreatePrincipalWith {
        tenant_id: "a".into(),
        spec: spec("p-1", "agent", &[]),
        quotas: crate::quota::PrincipalQuotasV2::fresh_principal(),
    };
    let (mut once, mut older) = (LedgerState::default(), LedgerState::default());
    for command in [tenant, principal] {
        assert!(matches!(once.execute(&req(1, command.clone())).0, Outcome::Applied { .. }));
        for part in command.older_form().expect("an older form") {
            assert!(matches!(older.execute(&req(1, part)).0, Outcome::Applied { .. }));
        }
    }
    assert_eq!((&once.tenants, &once.principals), (&older.tenants, &older.principals));
    assert_eq!(once.principal_quotas, older.principal_quotas);
    assert_eq!(Command::ResumeTenant { tenant_id: "a".into() }.older_form(), None);
}

/// An MCP session's record is its principal's: bounded, final once ended, a repeat a no-op,
/// and kept across the state's encoding; expired records go as the tenant's next is folded.
#[test]
fn session_records_belong_to_their_principal_and_end_for_good() {
    use crate::session::McpSessionV1;
    let mut st = LedgerState::default();
    st.execute(&req(1, create("a", "acme")));
    st.execute(&req(1, Command::CreatePrincipal { tenant_id: "a".into(), spec: spec("p-1", "agent", &[]) }));
    st.execute(&req(1, Command::CreatePrincipal { tenant_id: "a".into(), spec: spec("p-2", "other", &[]) }));
    let id = |n: u8| format!("{n:032x}");
    let record =
        |p: &str, expires: u64| McpSessionV1 { principal_id: p.into(), expires_at_ms: expires, ..Default::default() };
    let set =
        |n: u8, s: McpSessionV1| Command::SetSessionState { tenant_id: "a".into(), session_id: id(n), session: s };
    let refused = |st: &LedgerState, cmd: Command| decide(st, &cmd, 1_000).err().map(|r| r.reason);
    let info = McpSessionV1 { log_level: Some("info".into()), ..record("p-1", 50_000) };
    assert!(matches!(st.execute(&req(1_000, set(1, info.clone()))).0, Outcome::Applied { .. }));
    assert_eq!(decide(&st, &set(1, info.clone()), 1_000).map(|e| e.len()), Ok(0), "a repeat is a no-op");
    assert_eq!(refused(&st, set(1, record("p-2", 50_000))), Some(ReasonCode::SESSION_NOT_FOUND), "another's");
    assert_eq!(refused(&st, set(2, record("ghost", 50_000))), Some(ReasonCode::PRINCIPAL_NOT_FOUND));
    assert_eq!(refused(&st, set(2, record("p-1", 500))), Some(ReasonCode::SESSION_NOT_FOUND), "expired");
    let mut loud = record("p-1", 50_000);
    loud.log_level = Some("shout".into());
    assert_eq!(refused(&st, set(2, loud)), Some(ReasonCode::INPUT_INVALID));
    let ended = McpSessionV1 { ended: true, ..info.clone() };
    assert!(matches!(st.execute(&req(1_000, set(1, ended))).0, Outcome::Applied { .. }));
    assert_eq!(refused(&st, set(1, info)), Some(ReasonCode::SESSION_NOT_FOUND), "ended is final");
    assert!(st.sessions["a"][&id(1)].ended);
    let back = LedgerState::decode_versioned(&st.encode_versioned()).unwrap();
    assert_eq!(back.sessions, st.sessions);
    // Through an edge: the principal's act under its token (which needs `tools:list`).
    let tokened = |jti: &str, scopes: &[&str]| {
        let mut st = st.clone();
        st.execute(&req(1_000, issue(jti, "p-1", scopes, 3600, None)));
        st
    };
    let act = |n: u8, jti: &str| Command::OnBehalfOf {
        authority_ref: jti.into(),
        command: Box::new(set(n, McpSessionV1 { log_level: Some("debug".into()), ..record("p-1", 50_000) })),
    };
    let listing = tokened("j-1", &["tools:list"]);
    assert_eq!(decide(&listing, &act(4, "j-1"), 1_000).map(|e| e.len()), Ok(1));
    let unscoped = tokened("j-2", &["ops:read"]);
    assert_eq!(decide(&unscoped, &act(4, "j-2"), 1_000).err().map(|r| r.reason), Some(ReasonCode::APP_SCOPE_FORBIDDEN));
    // Folding a later record drops the expired one.
    assert!(matches!(st.execute(&req(60_000, set(3, record("p-1", 90_000)))).0, Outcome::Applied { .. }));
    assert_eq!(st.sessions["a"].keys().cloned().collect::<Vec<_>>(), vec![id(3)]);
}

/// An issuer known by its URL: registered with the keys fetched at registration, refreshed by
/// the keys a node observes (a no-op when unchanged), never replaced inline, gone with the
/// issuer; its URLs must be https (loopback http only when private networks are allowed).
#[test]
fn an_issuer_known_by_its_url_takes_the_keys_observed_from_it() {
    use crate::token::{IssuerKeysV1, IssuerSourceV1, TenantIssuerV1};
    let mut st = LedgerState::default();
    st.execute(&req(1, create("a", "acme")));
    st.execute(&req(1, create("b", "bolt")));
    let jwks = |x: &str, kid: &str| format!(r#"{{"keys":[{{"kty":"OKP","crv":"Ed25519","x":"{x}","kid":"{kid}"}}]}}"#);
    let key1 = jwks("11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo", "k1");
    let key2 = jwks("3p7bfXt9wbTTW2HC7OQ1Nz-DQ8hbeGdNrfx-FG-IK08", "k2");
    let keys = |jwks: &str| IssuerKeysV1 { jwks_uri: "https://idp.example/jwks".into(), jwks: jwks.into() };
    let source = |issuer: &str, allow: bool| IssuerSourceV1 {
        issuer: issuer.into(),
        audience: "https://edge.example/t/acme/mcp".into(),
        allow_private_network: allow,
    };
    let set = |tenant: &str, s: IssuerSourceV1, k: IssuerKeysV1| Command::SetIssuerSource {
        tenant_id: tenant.into(),
        source: s,
        keys: k,
    };
    let observe = |k: IssuerKeysV1| Command::ObserveIssuerKeys {
        tenant_id: "a".into(),
        issuer: "https://idp.example".into(),
        keys: k,
    };
    let refused = |st: &LedgerState, cmd: Command| decide(st, &cmd, 1).err().map(|r| r.reason);
    for bad in ["http://idp.example", "http://127.0.0.1:9", "https://u:p@idp.example", "https://idp.example/?q", "idp"]
    {
        assert_eq!(refused(&st, set("a", source(bad, false), keys(&key1))), Some(ReasonCode::INPUT_INVALID), "{bad}");
    }
    assert_eq!(decide(&st, &set("a", source("http://127.0.0.1:9", true), keys(&key1)), 1).map(|e| e.len()), Ok(2));
    assert_eq!(
        refused(&st, set("a", source("https://idp.example", false), keys("{}"))),
        Some(ReasonCode::INPUT_INVALID)
    );
    assert_eq!(refused(&st, observe(keys(&key1))), Some(ReasonCode::ISSUER_NOT_FOUND), "not registered yet");

    assert!(matches!(
        st.execute(&req(1, set("a", source("https://idp.example", false), keys(&key1)))).0,
        Outcome::Applied { .. }
    ));
    assert_eq!(st.issuers["https://idp.example"].spec.jwks, key1);
    assert_eq!(st.issuer_sources["https://idp.example"].jwks_uri, "https://idp.example/jwks");
    assert_eq!(
        refused(&st, set("b", source("https://idp.example", false), keys(&key1))),
        Some(ReasonCode::ISSUER_CONFLICT)
    );
    let inline = TenantIssuerV1 { issuer: "https://idp.example".into(), audience: "x".into(), jwks: key2.clone() };
    let inline = Command::SetTenantIssuer { tenant_id: "a".into(), issuer: inline };
    assert_eq!(refused(&st, inline), Some(ReasonCode::ISSUER_CONFLICT), "its keys come from discovery");

    assert_eq!(decide(&st, &observe(keys(&key1)), 1).map(|e| e.len()), Ok(0), "unchanged keys: nothing");
    assert!(matches!(st.execute(&req(2, observe(keys(&key2)))).0, Outcome::Applied { .. }));
    assert_eq!(st.issuers["https://idp.example"].spec.jwks, key2, "the observed keys replace the old ones");
    let moved = IssuerKeysV1 { jwks_uri: "https://idp.example/v2/jwks".into(), jwks: key2.clone() };
    assert_eq!(decide(&st, &observe(moved), 1).map(|e| e.len()), Ok(1), "a moved jwks_uri alone");
    let private = IssuerKeysV1 { jwks_uri: "http://127.0.0.1:9/jwks".into(), jwks: key2.clone() };
    assert_eq!(refused(&st, observe(private)), Some(ReasonCode::INPUT_INVALID), "a jwks_uri the source may not use");
    let back = LedgerState::decode_versioned(&st.encode_versioned()).unwrap();
    assert_eq!(back.issuer_sources, st.issuer_sources);

    let remove = Command::RemoveTenantIssuer { tenant_id: "a".into(), issuer: "https://idp.example".into() };
    assert!(matches!(st.execute(&req(3, remove)).0, Outcome::Applied { .. }));
    assert!(st.issuer_sources.is_empty() && !st.issuers.contains_key("https://idp.example"));
}

/// Token exchange: a principal's own act narrows the token it presents into a child — with
/// `tokens:delegate`, scopes within the parent's, never from another of its tokens.
#[test]
fn a_principal_delegates_only_from_the_token_it_presents() {
    let t0 = 1_000_000;
    let mut st = with_planner(t0);
    st.execute(&req(t0, issue("root", "p-del", &[], 600, None)));
    st.execute(&req(t0, issue("other", "p-del", &[], 600, None)));
    st.execute(&req(t0, issue("plain", "p-del", &["ops:read"], 600, None)));
    let exchange = |via: &str, child: &str, parent: &str, scopes: &[&str]| Command::OnBehalfOf {
        authority_ref: via.into(),
        command: Box::new(issue(child, "p-del", scopes, 60, Some(parent))),
    };
    let refused = |st: &LedgerState, cmd: &Command| decide(st, cmd, t0).err().map(|r| r.reason);
    assert_eq!(exchange("root", "c", "root", &[]).ledger_version(), 10, "gated to members that know the act");
    assert_eq!(refused(&st, &exchange("root", "c", "other", &["ops:read"])), Some(ReasonCode::INPUT_INVALID));
    assert_eq!(refused(&st, &exchange("plain", "c", "plain", &["ops:read"])), Some(ReasonCode::APP_SCOPE_FORBIDDEN));
    assert_eq!(refused(&st, &exchange("root", "c", "root", &["nope:x"])), Some(ReasonCode::INPUT_INVALID));
    let ok = exchange("root", "c", "root", &["ops:read", "tokens:delegate"]);
    assert!(matches!(st.execute(&req(t0, ok)).0, Outcome::Applied { .. }));
    let child = st.token("a", "c").expect("the child");
    assert_eq!((child.record.depth, child.record.parent_jti.as_deref()), (1, Some("root")));
    assert!(child.record.scopes.iter().eq(["ops:read", "tokens:delegate"].iter()));
    // Its own child would exceed the depth limit; revoking the parent cascades.
    assert_eq!(refused(&st, &exchange("c", "g", "c", &["ops:read"])), Some(ReasonCode::DELEGATION_DEPTH_EXCEEDED));
    st.execute(&req(t0, Command::RevokeToken { tenant_id: "a".into(), jti: "root".into() }));
    assert_eq!(st.token("a", "c").and_then(|t| t.revoked_via.clone()).as_deref(), Some("root"));
}

/// A tenant's authorization server: a code only for the approved request of the browser that
/// asked, redeemed once with the right verifier; refresh tokens rotate and bind to their client;
/// an assertion is used once; removing the client ends its grants.
#[test]
fn authorization_grants_are_single_use_and_bound() {
    use crate::oauth::*;
    let mut st = LedgerState::default();
    st.execute(&req(1, create("a", "acme")));
    let planner = spec("p", "planner", &["tools:list", "tools:call:read_press"]);
    st.execute(&req(1, Command::CreatePrincipal { tenant_id: "a".into(), spec: planner }));
    let client = OAuthClientV1 {
        client_id: "https://host.example/client.json".into(),
        principal_id: "p".into(),
        scopes: ["tools:list".to_string()].into(),
        redirect_uris: vec!["http://127.0.0.1:9/cb".into()],
        jwks: None,
        name: None,
    };
    let run = |st: &mut LedgerState, at: u64, cmd: Command| match st.execute(&req(at, cmd)).0 {
        Outcome::Applied { .. } => None,
        Outcome::Rejected { reason, .. } => Some(reason),
        other => panic!("{other:?}"),
    };
    let too_wide = OAuthClientV1 { scopes: ["audit:read".to_string()].into(), ..client.clone() };
    let set = |c: OAuthClientV1| Command::SetOAuthClient { tenant_id: "a".into(), client: c };
    assert_eq!(run(&mut st, 2, set(too_wide)), Some(ReasonCode::APP_SCOPE_FORBIDDEN));
    assert_eq!(run(&mut st, 2, set(client.clone())), None);
    let step = |s: GrantStepV1| Command::OAuthGrant { tenant_id: "a".into(), step: s };
    let verifier = "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk";
    let request = AuthRequestV1 {
        request_id: "r1".into(),
        client_id: client.client_id.clone(),
        redirect_uri: "http://127.0.0.1:9/cb".into(),
        code_challenge: s256_challenge(verifier),
        scopes: ["tools:list".to_string()].into(),
        audience: "https://e/t/acme/mcp".into(),
        state: None,
        browser_digest: digest("browser"),
    };
    let elsewhere = AuthRequestV1 { redirect_uri: "http://127.0.0.1:9/other".into(), ..request.clone() };
    assert_eq!(run(&mut st, 3, step(GrantStepV1::Request(elsewhere))), Some(ReasonCode::OAUTH_REDIRECT_INVALID));
    let plain = AuthRequestV1 { code_challenge: "plain".into(), ..request.clone() };
    assert_eq!(run(&mut st, 3, step(GrantStepV1::Request(plain))), Some(ReasonCode::OAUTH_PKCE_INVALID));
    assert_eq!(run(&mut st, 3, step(GrantStepV1::Request(request.clone()))), None);
    let code = |browser: &str| {
        step(GrantStepV1::Code {
            request_id: "r1".into(),
            browser_digest: digest(browser),
            code_digest: digest("code"),
        })
    };
    assert_eq!(run(&mut st, 4, code("browser")), Some(ReasonCode::OAUTH_ACCESS_DENIED), "not approved yet");
    let approve = step(GrantStepV1::Decide { request_id: "r1".into(), approve: true, operator: "ops".into() });
    assert_eq!(run(&mut st, 4, approve.clone()), None);
    assert_eq!(run(&mut st, 4, approve), Some(ReasonCode::OAUTH_GRANT_INVALID), "decided once");
    assert_eq!(run(&mut st, 5, code("another")), Some(ReasonCode::OAUTH_GRANT_INVALID));
    assert_eq!(run(&mut st, 5, code("browser")), None);
    let token = |jti: &str| TokenRequestV1 {
        jti: jti.into(),
        principal_id: "p".into(),
        scopes: ["tools:list".to_string()].into(),
        ttl_s: 600,
        parent_jti: None,
    };
    let redeem = |proof: GrantProofV1, jti: &str, refresh: Option<&str>| {
        step(GrantStepV1::Redeem {
            client_id: client.client_id.clone(),
            proof,
            token: token(jti),
            refresh: refresh
                .map(|id| NewRefreshV1 { refresh_id: id.into(), secret_digest: digest(&format!("secret-{id}")) }),
        })
    };
    let by_code = |v: &str| GrantProofV1::Code {
        code_digest: digest("code"),
        verifier: v.into(),
        redirect_uri: "http://127.0.0.1:9/cb".into(),
    };
    let wrong = "x".repeat(43);
    assert_eq!(run(&mut st, 6, redeem(by_code(&wrong), "j1", Some("rt1"))), Some(ReasonCode::OAUTH_PKCE_INVALID));
    assert_eq!(run(&mut st, 6, redeem(by_code(verifier), "j1", Some("rt1"))), None);
    assert_eq!(st.token("a", "j1").map(|t| t.record.principal_id), Some("p".to_string()), "a ledger token record");
    assert_eq!(
        run(&mut st, 6, redeem(by_code(verifier), "j2", Some("rt2"))),
        Some(ReasonCode::OAUTH_GRANT_INVALID),
        "a code is redeemed once"
    );
    let by_refresh =
        |id: &str| GrantProofV1::Refresh { refresh_id: id.into(), secret_digest: digest(&format!("secret-{id}")) };
    assert_eq!(run(&mut st, 7, redeem(by_refresh("rt1"), "j3", Some("rt3"))), None);
    assert_eq!(
        run(&mut st, 7, redeem(by_refresh("rt1"), "j4", Some("rt4"))),
        Some(ReasonCode::OAUTH_GRANT_INVALID),
        "a refresh token is replaced when used"
    );
    let aud = || "https://e/t/acme/mcp".to_string();
    let assertion = || GrantProofV1::Assertion { jti: "a1".into(), expires_at_ms: 60_000, audience: aud() };
    assert_eq!(run(&mut st, 8, redeem(assertion(), "j5", None)), None);
    assert_eq!(run(&mut st, 8, redeem(assertion(), "j6", None)), Some(ReasonCode::OAUTH_CLIENT_UNKNOWN), "replayed");
    let late =
        GrantProofV1::Assertion { jti: "a2".into(), expires_at_ms: 8 + ASSERTION_LIFETIME_MAX_MS + 1, audience: aud() };
    assert_eq!(run(&mut st, 8, redeem(late, "j7", None)), Some(ReasonCode::OAUTH_CLIENT_UNKNOWN), "too long-lived");
    let revoke = |id: &str, by: &str| {
        step(GrantStepV1::Revoke {
            client_id: by.into(),
            refresh_id: id.into(),
            secret_digest: digest(&format!("secret-{id}")),
        })
    };
    assert_eq!(run(&mut st, 8, revoke("rt3", "someone-else")), Some(ReasonCode::OAUTH_GRANT_INVALID));
    assert_eq!(run(&mut st, 8, revoke("rt3", &client.client_id)), None);
    assert_eq!(run(&mut st, 8, redeem(by_refresh("rt3"), "j9", Some("rt9"))), Some(ReasonCode::OAUTH_GRANT_INVALID));
    let remove = Command::RemoveOAuthClient { tenant_id: "a".into(), client_id: client.client_id.clone() };
    assert_eq!(run(&mut st, 9, remove), None);
    assert!(st.oauth["a"].refresh_tokens.is_empty() && st.oauth["a"].clients.is_empty());
    assert_eq!(run(&mut st, 9, redeem(by_refresh("rt3"), "j8", None)), Some(ReasonCode::OAUTH_CLIENT_UNKNOWN));
}

/// The delegation depth is the tenant's setting (1 unless it says otherwise, at most 8).
#[test]
fn a_tenant_sets_how_deep_its_principals_delegate() {
    use crate::oauth::OAuthSettingsV1;
    let mut st = LedgerState::default();
    st.execute(&req(1, create("a", "acme")));
    let planner = spec("p", "planner", &["tools:list", "tokens:delegate"]);
    st.execute(&req(1, Command::CreatePrincipal { tenant_id: "a".into(), spec: planner }));
    let issue = |jti: &str, parent: Option<&str>| Command::IssueToken {
        tenant_id: "a".into(),
        request: TokenRequestV1 {
            jti: jti.into(),
            principal_id: "p".into(),
            scopes: ["tools:list".to_string(), "tokens:delegate".to_string()].into(),
            ttl_s: 600,
            parent_jti: parent.map(str::to_string),
        },
    };
    let refused = |st: &mut LedgerState, cmd: Command| match st.execute(&req(2, cmd)).0 {
        Outcome::Rejected { reason, .. } => Some(reason),
        _ => None,
    };
    assert_eq!(refused(&mut st, issue("j0", None)), None);
    assert_eq!(refused(&mut st, issue("j1", Some("j0"))), None);
    assert_eq!(refused(&mut st, issue("j2", Some("j1"))), Some(ReasonCode::DELEGATION_DEPTH_EXCEEDED));
    let set = |depth: u32| Command::SetOAuthSettings {
        tenant_id: "a".into(),
        settings: OAuthSettingsV1 { delegation_depth_max: depth, principal_claim: None },
    };
    assert_eq!(refused(&mut st, set(9)), Some(ReasonCode::INPUT_INVALID));
    assert_eq!(refused(&mut st, set(2)), None);
    assert_eq!(refused(&mut st, issue("j2", Some("j1"))), None);
    assert_eq!(refused(&mut st, issue("j3", Some("j2"))), Some(ReasonCode::DELEGATION_DEPTH_EXCEEDED));
    let bad_claim = OAuthSettingsV1 { delegation_depth_max: 1, principal_claim: Some("a b".into()) };
    let bad_claim = Command::SetOAuthSettings { tenant_id: "a".into(), settings: bad_claim };
    assert_eq!(refused(&mut st, bad_claim), Some(ReasonCode::INPUT_INVALID));
}

#[test]
fn named_operators_act_within_their_role_and_scope() {
    use crate::operator::{OperatorRole, OperatorSessionV1, OperatorV1};
    let mut st = LedgerState::default();
    st.execute(&req(1, create("a", "acme")));
    st.execute(&req(1, create("b", "beta")));
    let op = |name: &str, role, tenant: Option<&str>| Command::SetOperator {
        operator: OperatorV1 {
            name: name.into(),
            role,
            tenant_id: tenant.map(str::to_string),
            display_name: None,
            sign_in: None,
        },
    };
    let session = |c: char, name: &str| Command::OpenOperatorSession {
        session: OperatorSessionV1 {
            session_id: c.to_string().repeat(32),
            operator: name.into(),
            secret_sha256: "0".repeat(64),
            opened_at_ms: 0,
            expires_at_ms: 1_000,
            idle_timeout_ms: 0,
            last_used_at_ms: 0,
        },
    };
    let by = |c: char, command: Command| Command::ByOperator {
        session_id: c.to_string().repeat(32),
        command: Box::new(command),
    };
    let site = |t: &str, id: &str| Command::CreateSite {
        tenant_id: t.into(),
        site_id: id.into(),
        name: id.into(),
        display_name: None,
    };
    for setup in [
        op("vic", OperatorRole::Viewer, None),
        op("otto", OperatorRole::Operator, Some("a")),
        op("ann", OperatorRole::Approver, Some("a")),
        session('1', "vic"),
        session('2', "otto"),
        session('3', "ann"),
    ] {
        assert!(matches!(st.execute(&req(10, setup)).0, Outcome::Applied { .. }));
    }
    let cancel = |who: &str| Command::CancelOperation {
        tenant_id: "a".into(),
        operation_id: "op-1".into(),
        by_principal_id: who.into(),
    };
    let cases: Vec<(Command, Option<ReasonCode>)> = vec![
        (op("Bad Name", OperatorRole::Viewer, None), Some(ReasonCode::INPUT_INVALID)),
        (op("zed", OperatorRole::Viewer, Some("zz")), Some(ReasonCode::TENANT_NOT_FOUND)),
        (session('4', "nobody"), Some(ReasonCode::OPERATOR_NOT_FOUND)),
        (by('1', site("a", "s1")), Some(ReasonCode::OPERATOR_ROLE_REQUIRED)),
        (by('3', site("a", "s1")), Some(ReasonCode::OPERATOR_ROLE_REQUIRED)),
        (by('2', site("b", "s1")), Some(ReasonCode::OPERATOR_SCOPE_VIOLATION)),
        (by('2', op("otto", OperatorRole::Admin, None)), Some(ReasonCode::OPERATOR_ROLE_REQUIRED)),
        (by('2', cancel("operator:ann")), Some(ReasonCode::OPERATOR_SCOPE_VIOLATION)),
        (by('2', cancel("operator:otto")), Some(ReasonCode::OPERATION_NOT_FOUND)),
        (by('9', site("a", "s1")), Some(ReasonCode::OPERATOR_SESSION_INVALID)),
        (by('2', site("a", "s1")), None),
    ];
    for (cmd, want) in cases {
        let (outcome, events) = st.execute(&req(20, cmd.clone()));
        let got = match outcome {
            Outcome::Rejected { reason, .. } => Some(reason),
            _ => None,
        };
        assert_eq!(got, want, "{cmd:?}");
        if want.is_none() {
            // Who acted comes first, on the tenant's stream, then the act itself.
            assert!(matches!(&events[0].event, Event::OperatorActedV1 { operator, tenant_id, .. }
                if operator == "otto" && tenant_id == "a"));
            assert!(matches!(&events[1].event, Event::SiteCreatedV1 { .. }));
        }
    }
    // A viewer signs itself out (no other change), and its session is gone on every replica.
    let own = Command::CloseOperatorSessions { operator: "vic".into(), session_id: None };
    assert!(matches!(st.execute(&req(30, by('1', own))).0, Outcome::Applied { .. }));
    let after = by('1', Command::CloseOperatorSessions { operator: "vic".into(), session_id: None });
    let (outcome, _) = st.execute(&req(31, after));
    assert!(matches!(outcome, Outcome::Rejected { reason: ReasonCode::OPERATOR_SESSION_INVALID, .. }));
    // Past its lifetime (ledger time), a session acts no more; removing an operator ends its own.
    let (outcome, _) = st.execute(&req(2_000, by('3', cancel("operator:ann"))));
    assert!(matches!(outcome, Outcome::Rejected { reason: ReasonCode::OPERATOR_SESSION_INVALID, .. }));
    st.execute(&req(2_001, session('5', "otto")));
    st.execute(&req(2_002, Command::RemoveOperator { name: "otto".into() }));
    let (outcome, _) = st.execute(&req(2_003, by('5', site("a", "s2"))));
    assert!(matches!(outcome, Outcome::Rejected { reason: ReasonCode::OPERATOR_SESSION_INVALID, .. }));
    // A recorded use: stamped at ledger time on every replica; an ended session takes none.
    let (outcome, events) = st.execute(&req(2_004, Command::UseOperatorSession { session_id: "2".repeat(32) }));
    assert!(matches!(outcome, Outcome::Rejected { reason: ReasonCode::OPERATOR_SESSION_INVALID, .. }), "{events:?}");
    st.execute(&req(2_005, session('6', "ann")));
    let used = st.execute(&req(2_006, Command::UseOperatorSession { session_id: "6".repeat(32) })).1;
    assert!(matches!(&used[0].event, Event::OperatorSessionUsedV1 { at_ms: 2_006, .. }), "{used:?}");
    assert_eq!(st.operators.sessions[&"6".repeat(32)].last_used_at_ms, 2_006);
    // The operators survive an encode and decode (state format 14).
    let back = LedgerState::decode_versioned(&st.encode_versioned()).expect("decodes");
    assert_eq!(back.operators, st.operators);
    assert_eq!(back.digest(), st.digest());
}

/// A decision's authority chain: the ledger keeps the client fields the edge reported and
/// fills every other field from its own state — the principal's kind, the token's delegation,
/// the catalog and the upstream the tool runs on — whatever the edge claimed; the audit record
/// carries the chain, and an unbounded one is refused.
#[test]
fn a_decision_records_the_authority_chain_the_ledger_knows() {
    use crate::audit::{AuthorityChainV1, RequestDecisionV1, RequestDecisionV2};
    let mut st = LedgerState::default();
    st.execute(&req(1, create("a", "acme")));
    let planner = spec("p", "planner", &["tools:list", "tokens:delegate"]);
    st.execute(&req(1, Command::CreatePrincipal { tenant_id: "a".into(), spec: planner }));
    for (jti, parent) in [("j0", None), ("j1", Some("j0"))] {
        let request = TokenRequestV1 {
            jti: jti.into(),
            principal_id: "p".into(),
            scopes: ["tools:list".to_string(), "tokens:delegate".to_string()].into(),
            ttl_s: 600,
            parent_jti: parent.map(str::to_string),
        };
        let issued = st.execute(&req(2, Command::IssueToken { tenant_id: "a".into(), request })).0;
        assert!(matches!(issued, Outcome::Applied { .. }), "{issued:?}");
    }
    let doc = r#"{"actions": [{"id": "order", "title": "Order", "input_schema": {"type": "object"},
        "risk": "low", "execution": {"upstream_operation": "shop/place_order"}}]}"#;
    let catalog = crate::catalog::compile(doc.as_bytes()).expect("catalog");
    let digest = catalog.digest.clone();
    st.execute(&req(3, Command::PublishCatalog { tenant_id: "a".into(), catalog }));
    let decision = RequestDecisionV1 {
        trace_id: "tr-1".into(),
        principal_id: "p".into(),
        token_id: Some("j1".into()),
        parent_token_id: Some("j0".into()),
        method: "tools/call".into(),
        name: Some("order".into()),
        outcome: "allowed".into(),
        reason: None,
    };
    // The edge claims more than the client told it: only the client fields stand.
    let reported = AuthorityChainV1 {
        client_name: Some("claude-code".into()),
        client_version: Some("2.1.0".into()),
        protocol_version: Some("2025-11-25".into()),
        principal_kind: Some("human".into()),
        delegation: vec!["forged".into()],
        catalog_version: Some(99),
        ..Default::default()
    };
    let record = |authority: AuthorityChainV1| Command::RecordDecisionsV2 {
        tenant_id: "a".into(),
        decisions: vec![RequestDecisionV2 { decision: decision.clone(), authority }],
    };
    let (outcome, events, audited) = st.execute_audited(&req(4, record(reported)));
    let records = crate::trail::records_of(&events, &audited);
    assert!(matches!(outcome, Outcome::Applied { .. }), "{outcome:?}");
    let expected = AuthorityChainV1 {
        client_name: Some("claude-code".into()),
        client_version: Some("2.1.0".into()),
        protocol_version: Some("2025-11-25".into()),
        principal_kind: Some("agent".into()),
        delegation: vec!["j0".into(), "j1".into()],
        catalog_version: Some(1),
        policy_digest: Some(digest),
        upstream: Some("shop".into()),
        upstream_tool: Some("place_order".into()),
        operation_id: None,
        attempt_id: None,
    };
    assert!(
        matches!(&events[0].event, Event::RequestsDecidedV2 { decisions, .. } if decisions[0].authority == expected),
        "{events:?}"
    );
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].authority.as_ref(), Some(&expected), "the record carries the chain");
    let unbounded = AuthorityChainV1 { client_name: Some("c".repeat(300)), ..Default::default() };
    let refused = st.execute(&req(5, record(unbounded))).0;
    assert!(matches!(refused, Outcome::Rejected { reason: ReasonCode::INPUT_INVALID, .. }), "{refused:?}");
    // A gated cluster records the same decisions without chains.
    let plain = record(AuthorityChainV1::default()).without_authority_chains();
    assert!(matches!(&plain, Command::RecordDecisions { decisions, .. } if decisions == &vec![decision.clone()]));
    assert_eq!((record(AuthorityChainV1::default()).ledger_version(), plain.ledger_version()), (14, 1));
}

/// The ledger version in force only rises, survives the state's encoding, and from 16 on a
/// tenant's audit chain covers each event's bytes once, without building its records: the
/// records listed from the events are those an older version builds and chains one by one.
#[test]
fn from_ledger_version_16_the_audit_chain_covers_each_event_once() {
    let raise = |version: u32| Command::RaiseLedgerVersion { version };
    let decision = |n: u32| {
        crate::audit::RequestDecisionV1::allowed(
            &format!("tr-{n}"),
            "p",
            "tools/call",
            Some(&format!("https://x/?token=s3cret-{n}")),
        )
    };
    let trail = |st: &mut LedgerState| {
        let mut events = Vec::new();
        let mut audited = Vec::new();
        for command in [
            create("a", "acme"),
            Command::CreatePrincipal { tenant_id: "a".into(), spec: spec("p", "agent", &[]) },
            Command::RecordDecisions { tenant_id: "a".into(), decisions: (1..=3).map(decision).collect() },
        ] {
            let (outcome, evs, at) = st.execute_audited(&req(5, command));
            assert!(matches!(outcome, Outcome::Applied { .. }), "{outcome:?}");
            events.extend(evs);
            audited.extend(at);
        }
        (events, audited)
    };
    let mut before = LedgerState::default();
    let mut after = LedgerState::default();
    assert!(matches!(after.execute(&req(1, raise(16))).0, Outcome::Applied { .. }));
    assert_eq!(after.ledger_version, 16);
    for lower in [16, 15] {
        let (outcome, _) = after.execute(&req(2, raise(lower)));
        assert!(matches!(outcome, Outcome::Rejected { reason: ReasonCode::INPUT_INVALID, .. }), "{outcome:?}");
    }
    assert_eq!(LedgerState::decode_versioned(&after.encode_versioned()).expect("decodes").ledger_version, 16);

    let (old_events, old_audited) = trail(&mut before);
    let (new_events, new_audited) = trail(&mut after);
    let old_records = crate::trail::records_of(&old_events, &old_audited);
    let new_records = crate::trail::records_of(&new_events, &new_audited);
    assert_eq!(new_records.len(), 5, "the tenant, the principal, one per decision");
    assert!(!new_records[2].detail.contains("s3cret"), "redacted: {:?}", new_records[2]);
    let strip = |r: &crate::audit::AuditRecord| crate::audit::AuditRecord { revision: 0, ..r.clone() };
    assert_eq!(old_records.iter().map(strip).collect::<Vec<_>>(), new_records.iter().map(strip).collect::<Vec<_>>());

    let chained = |links: Vec<Vec<u8>>| {
        links.iter().fold(String::new(), |head, link| crate::sha256_hex(&[head.as_bytes(), link].concat()))
    };
    let by_record = chained(old_records.iter().map(crate::audit::AuditRecord::stored).collect());
    assert_eq!(before.audit["a"].head, by_record, "before 16: each record's stored bytes");
    let by_event = chained(new_events.iter().filter(|e| e.stream == "a").map(|e| crate::encode(e).unwrap()).collect());
    assert_eq!(after.audit["a"].head, by_event, "from 16: each event's bytes, once");
    assert_eq!((after.audit["a"].first_seq, after.audit["a"].next_seq), (1, 6));
}

/// From ledger version 17 on, a tenant's audit index keeps each record's time rounded up to the
/// whole second: the records of one second share a run (before, each ledger entry's time made
/// one), and retention by age keeps a record at least `audit_max_age_s`, at most a second more.
#[test]
fn from_ledger_version_17_audit_times_are_whole_seconds() {
    let decide_at = |st: &mut LedgerState, at: u64| {
        let decisions = vec![crate::audit::RequestDecisionV1::allowed(&format!("tr-{at}"), "p", "tools/list", None)];
        let (outcome, _) = st.execute(&req(at, Command::RecordDecisions { tenant_id: "a".into(), decisions }));
        assert!(matches!(outcome, Outcome::Applied { .. }), "{outcome:?}");
    };
    let runs = |version: u32| {
        let mut st = LedgerState::default();
        st.execute(&req(1, Command::RaiseLedgerVersion { version }));
        st.execute(&req(1_000, create("a", "acme")));
        st.execute(&req(1_000, Command::CreatePrincipal { tenant_id: "a".into(), spec: spec("p", "agent", &[]) }));
        // Five entries in one second, then one in the next.
        for at in [5_001, 5_200, 5_400, 5_999, 6_000, 6_001] {
            decide_at(&mut st, at);
        }
        (st.audit["a"].at_ms.runs(), st)
    };
    assert_eq!(runs(16).0, 7, "a run per entry time: 1,000 and the six decisions");
    let (whole_seconds, mut st) = runs(17);
    assert_eq!(whole_seconds, 3, "1,000, the second up to 6,000, then 7,000");

    // Kept for at least a second: the decision at 6,001 counts as 7,000.
    let patch = TenantSettingsPatch { audit_max_age_s: Some(1), ..Default::default() };
    st.execute(&req(7_000, Command::SetTenantSettings { tenant_id: "a".into(), patch }));
    let oldest = |st: &LedgerState| st.audit["a"].at_ms.oldest();
    assert_eq!(oldest(&st), Some(6_000), "at 7,000 the records of 6,000 are a second old, not older");
    decide_at(&mut st, 7_001);
    assert_eq!(oldest(&st), Some(7_000), "at 7,001 they are older");
    decide_at(&mut st, 8_000);
    assert_eq!(oldest(&st), Some(7_000), "6,001 (as 7,000) is kept until past 8,000");
    decide_at(&mut st, 8_001);
    assert_eq!(oldest(&st), Some(8_000));
}
