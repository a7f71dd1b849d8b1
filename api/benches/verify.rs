//! Token verification cost (issue 3 "measure"): `api::auth::verify` over a ledger state with a
//! Writ-issued token (EdDSA, delegation depth 0 and 1) and a tenant-issuer token (EdDSA via
//! inline JWKS); and what the ledger's re-check of an operation's authority adds to each
//! `SubmitOperation` (SPEC S3): re-deriving the authority from the records, and compiling and
//! running the action's input schema; and the credential check a node makes for every act an
//! edge submits (`grant::admit`: verify the token, bind the act, wrap it) and the grant's
//! re-check on every replica (`grant::granted`); and what every replica does with a batch of
//! request decisions (their events and audit records). Run with `cargo bench -p writ-api --bench verify`;
//! with `WRIT_BENCH_SIGNATURES_CACHED=1`, through the cache of verified signatures `writ`
//! installs (`writ_api::signatures`), so each token's signature is checked once.

use base64::Engine;
use criterion::{criterion_group, criterion_main, Criterion};
use writ_api::auth::{verify, Signer, WritClaims};
use writ_api::ledger::{Command, LedgerRequest};
use writ_api::principal::{PrincipalKind, PrincipalSpecV1, RolePreset};
use writ_api::state::LedgerState;
use writ_api::token::{SigningKeyV1, TenantIssuerV1, TokenRequestV1, WRIT_ISSUER};

const NOW: u64 = 1_900_000_000_000;
const AUD: &str = "urn:writ:mcp";

fn run(st: &mut LedgerState, command: Command) -> u64 {
    let (outcome, events) = st.execute(&LedgerRequest { stamp_ms: NOW, trace_id: "b".into(), command: command.into() });
    assert!(matches!(outcome, writ_api::ledger::Outcome::Applied { .. }), "{outcome:?}");
    events.last().map(|e| e.revision).unwrap_or(0)
}

fn setup() -> (LedgerState, String, String, String) {
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ED25519).unwrap();
    let signer = Signer::new(key.serialize_pem().as_bytes(), key.public_key_raw().to_vec()).unwrap();
    let mut st = LedgerState::default();
    let t = "t-1".to_string();
    run(&mut st, Command::CreateTenant { tenant_id: t.clone(), name: "bench".into(), display_name: None });
    run(&mut st, Command::RegisterSigningKey { key: signer.public_key().clone() });
    for (id, name) in [("p-1", "planner"), ("p-2", "worker")] {
        let spec = PrincipalSpecV1 {
            principal_id: id.into(),
            name: name.into(),
            kind: PrincipalKind::Agent,
            preset: Some(RolePreset::Delegate),
            scopes: Default::default(),
            metadata: Default::default(),
        };
        run(&mut st, Command::CreatePrincipal { tenant_id: t.clone(), spec });
    }
    let mut sign = |jti: &str, principal: &str, parent: Option<&str>| {
        let request = TokenRequestV1 {
            jti: jti.into(),
            principal_id: principal.into(),
            scopes: Default::default(),
            ttl_s: 3600,
            parent_jti: parent.map(str::to_string),
        };
        let rev = run(&mut st, Command::IssueToken { tenant_id: t.clone(), request });
        let claims = WritClaims {
            iss: WRIT_ISSUER.into(),
            sub: principal.into(),
            aud: AUD.into(),
            exp: NOW / 1000 + 3600,
            nbf: NOW / 1000,
            iat: NOW / 1000,
            jti: jti.into(),
            tid: t.clone(),
            scope: String::new(),
            rev,
        };
        signer.sign(&claims).unwrap()
    };
    let root = sign("j-1", "p-1", None);
    let child = sign("j-2", "p-2", Some("j-1"));
    // A tenant issuer with its own Ed25519 key.
    let idp = rcgen::KeyPair::generate_for(&rcgen::PKCS_ED25519).unwrap();
    let x = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(idp.public_key_raw());
    let jwks = format!(r#"{{"keys":[{{"kty":"OKP","crv":"Ed25519","x":"{x}","kid":"idp-1","alg":"EdDSA"}}]}}"#);
    let issuer = TenantIssuerV1 { issuer: "https://idp.example".into(), audience: "writ".into(), jwks };
    run(&mut st, Command::SetTenantIssuer { tenant_id: t.clone(), issuer });
    let mut h = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::EdDSA);
    h.kid = Some("idp-1".into());
    let claims = serde_json::json!({"iss": "https://idp.example", "sub": "worker", "aud": "writ", "exp": NOW / 1000 + 3600, "scope": "tools:list"});
    let tenant_token = jsonwebtoken::encode(
        &h,
        &claims,
        &jsonwebtoken::EncodingKey::from_ed_pem(idp.serialize_pem().as_bytes()).unwrap(),
    )
    .unwrap();
    let _: &SigningKeyV1 = signer.public_key();
    (st, root, child, tenant_token)
}

fn bench(c: &mut Criterion) {
    if std::env::var_os("WRIT_BENCH_SIGNATURES_CACHED").is_some() {
        assert!(writ_api::signatures::install(), "before any token is decoded");
    }
    let (st, root, child, tenant_token) = setup();
    let aud = [AUD.to_string()];
    let ignored = ["ignored".to_string()];
    verify(&st, &root, &aud, NOW + 1).unwrap();
    verify(&st, &child, &aud, NOW + 1).unwrap();
    verify(&st, &tenant_token, &ignored, NOW + 1).unwrap();
    c.bench_function("verify writ token (depth 0)", |b| b.iter(|| verify(&st, &root, &aud, NOW + 1).unwrap()));
    c.bench_function("verify writ token (depth 1)", |b| b.iter(|| verify(&st, &child, &aud, NOW + 1).unwrap()));
    c.bench_function("verify tenant-issuer token", |b| {
        b.iter(|| verify(&st, &tenant_token, &ignored, NOW + 1).unwrap())
    });
}

/// The parts of `decide`'s re-check of a `SubmitOperation` (`recheck_authority`).
fn recheck(c: &mut Criterion) {
    let (st, ..) = setup();
    let of_ref = writ_api::auth::authority_of_ref;
    of_ref(&st, "t-1", "p-2", "j-2", NOW + 1).unwrap();
    c.bench_function("recheck: authority of a delegated token", |b| {
        b.iter(|| of_ref(&st, "t-1", "p-2", "j-2", NOW + 1).unwrap())
    });
    c.bench_function("recheck: authority of a tenant issuer", |b| {
        b.iter(|| of_ref(&st, "t-1", "p-2", "https://idp.example", NOW + 1).unwrap())
    });
    // The demo catalog's move_press schema, compiled and applied per operation.
    let schema = serde_json::json!({"type": "object", "required": ["position_mm"],
        "properties": {"position_mm": {"type": "number", "minimum": 0, "maximum": 500}}});
    let input = serde_json::json!({"position_mm": 120});
    c.bench_function("recheck: compile and run an input schema", |b| {
        b.iter(|| writ_api::catalog::validator(&schema).unwrap().is_valid(&input))
    });
    // The verification rule's own work for a proposed call: the digest the proposal binds.
    let spec = writ_api::operation::OperationSpecV1 {
        operation_id: "op-1".into(),
        principal_id: "p-2".into(),
        authority_ref: "j-2".into(),
        action: "move_press".into(),
        payload_hash: "ab".repeat(32),
        input: input.to_string(),
        idempotency_key: "k-1".into(),
        deadline_ms: NOW + 60_000,
        cost_units: 1,
        cost_ceiling: None,
        device_id: Some("d-1".into()),
        work_ref: None,
        preconditions: Default::default(),
        trace_id: "tr".into(),
        input_requests: Default::default(),
    };
    c.bench_function("recheck: call digest of a proposed call", |b| b.iter(|| spec.call_digest()));
}

/// A node's check of the credential an edge sent with an act, and each replica's re-check.
fn credential(c: &mut Criterion) {
    let (st, _, child, _) = setup();
    let cancel = Command::OnBehalfOf {
        authority_ref: "j-2".into(),
        command: Box::new(Command::CancelOperation {
            tenant_id: "t-1".into(),
            operation_id: "op-1".into(),
            by_principal_id: "p-2".into(),
        }),
    };
    let bearer = writ_api::credential::Credential::Bearer(child);
    let presenter = writ_api::grant::Presenter { edge_id: "e", node: "node:1" };
    let admit = || writ_api::grant::admit(&st, cancel.clone(), Some(&bearer), &presenter, NOW + 1).unwrap();
    let Command::Verified { grant, .. } = admit() else { panic!("not wrapped") };
    c.bench_function("node: verify an act's credential (delegated token)", |b| b.iter(admit));
    c.bench_function("replica: re-check a grant", |b| {
        b.iter(|| writ_api::grant::granted(&st, &grant, NOW + 1).unwrap())
    });
    // A batch of request decisions about one principal, vouched for by its token.
    let decision = writ_api::audit::RequestDecisionV1 {
        trace_id: "tr".into(),
        principal_id: "p-2".into(),
        token_id: None,
        parent_token_id: None,
        method: "tools/list".into(),
        name: None,
        outcome: "allowed".into(),
        reason: None,
    };
    let decisions = Command::RecordDecisions { tenant_id: "t-1".into(), decisions: vec![decision; 100] };
    let vouchers = [bearer.clone()];
    c.bench_function("node: vouch for a batch of 100 decisions (one principal)", |b| {
        b.iter(|| writ_api::grant::vouched(&st, &decisions, &vouchers, &presenter, NOW + 1).unwrap())
    });
    record_decisions(c, &st);
}

/// What every replica does with a full batch of request decisions an edge recorded: decide it
/// (each decision's authority chain completed from the state), fold its event, and build,
/// encode and chain one audit record per decision (the store's writes are not in it).
fn record_decisions(c: &mut Criterion, st: &LedgerState) {
    let decision = writ_api::audit::RequestDecisionV2 {
        decision: writ_api::audit::RequestDecisionV1 {
            trace_id: "4bf92f3577b34da6a3ce929d0e0e4736".into(),
            principal_id: "p-2".into(),
            token_id: Some("j-2".into()),
            parent_token_id: Some("j-1".into()),
            method: "tools/call".into(),
            name: Some("greet".into()),
            outcome: "allowed".into(),
            reason: None,
        },
        authority: writ_api::audit::AuthorityChainV1 {
            client_name: Some("bench-client".into()),
            client_version: Some("1.0.0".into()),
            protocol_version: Some("2026-07-28".into()),
            ..Default::default()
        },
    };
    let n = writ_api::audit::DECISIONS_PER_COMMAND_MAX;
    let command = Command::RecordDecisionsV2 { tenant_id: "t-1".into(), decisions: vec![decision; n] };
    let request = LedgerRequest { stamp_ms: NOW + 1, trace_id: "b".into(), command: command.into() };
    c.bench_function("replica: apply a batch of 1000 request decisions", |b| {
        b.iter_batched(
            || st.clone(),
            |mut st| {
                let (outcome, _, audited) = st.execute_audited(&request);
                assert!(matches!(outcome, writ_api::ledger::Outcome::Applied { .. }) && audited[0].count as usize == n);
                st
            },
            criterion::BatchSize::LargeInput,
        )
    });
}

criterion_group!(benches, bench, recheck, credential);
criterion_main!(benches);
