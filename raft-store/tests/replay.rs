//! Replay: state rebuilt from a snapshot plus the rest of the log, or from the event stream
//! alone, equals the live state (same digest), for arbitrary command sequences.

use proptest::prelude::*;
use writ_api::ledger::{Command, LedgerRequest};
use writ_api::state::LedgerState;

fn command() -> impl Strategy<Value = Command> {
    // A small id/name space so that duplicates, conflicts and unknown tenants are common.
    let id = (0u8..6).prop_map(|i| format!("t-{i}"));
    let name = prop_oneof![(0u8..6).prop_map(|i| format!("name-{i}")), Just("Bad Name".to_string())];
    prop_oneof![
        (id.clone(), name, proptest::option::of("[a-z ]{0,12}"))
            .prop_map(|(tenant_id, name, display_name)| { Command::CreateTenant { tenant_id, name, display_name } }),
        (id.clone(), proptest::option::of("[a-z]{0,8}"))
            .prop_map(|(tenant_id, note)| Command::SuspendTenant { tenant_id, note }),
        id.clone().prop_map(|tenant_id| Command::ResumeTenant { tenant_id }),
        (id.clone(), 0u8..4, prop_oneof![Just("ops:read"), Just("tools:call:x"), Just("bad:scope")]).prop_map(
            |(tenant_id, p, scope)| Command::CreatePrincipal {
                tenant_id,
                spec: writ_api::principal::PrincipalSpecV1 {
                    principal_id: format!("p-{p}"),
                    name: format!("agent-{p}"),
                    kind: writ_api::principal::PrincipalKind::Agent,
                    preset: None,
                    scopes: [scope.to_string()].into_iter().collect(),
                    metadata: Default::default(),
                },
            }
        ),
        (id.clone(), 0u8..4, prop_oneof![Just("ops:read"), Just("tools:call:x")]).prop_map(|(tenant_id, p, scope)| {
            Command::RevokeScope { tenant_id, principal_id: format!("p-{p}"), scope: scope.to_string() }
        }),
        (id.clone(), 0u8..4).prop_map(|(tenant_id, p)| Command::RevokePrincipal {
            tenant_id,
            principal_id: format!("p-{p}"),
            note: None
        }),
        (id.clone(), 0u8..4, 0u8..6, proptest::option::of(0u8..6), 0u64..100_000).prop_map(
            |(tenant_id, p, j, parent, ttl_s)| {
                Command::IssueToken {
                    tenant_id,
                    request: writ_api::token::TokenRequestV1 {
                        jti: format!("j-{j}"),
                        principal_id: format!("p-{p}"),
                        scopes: Default::default(),
                        ttl_s,
                        parent_jti: parent.map(|x| format!("j-{x}")),
                    },
                }
            }
        ),
        (id.clone(), 0u8..6).prop_map(|(tenant_id, j)| Command::RevokeToken { tenant_id, jti: format!("j-{j}") }),
        (id.clone(), 0u8..3).prop_map(|(tenant_id, s)| Command::CreateSite {
            tenant_id,
            site_id: format!("s-{s}"),
            name: format!("site-{s}"),
            display_name: None
        }),
        (id.clone(), 0u8..4, 0u8..3).prop_map(|(tenant_id, d, s)| Command::CreateDevice {
            tenant_id,
            device_id: format!("d-{d}"),
            site_id: format!("s-{s}"),
            name: format!("dev-{d}"),
            device_class: "press.v1".into()
        }),
        // Revocations: dropped by later ones once expired, so replays must agree on when.
        (0u8..4, 0u64..6_000).prop_map(|(s, not_after_ms)| Command::RevokeRoleCertificate {
            certificate: writ_api::revocation::RevokedRoleCertificateV1 {
                serial: format!("{:02x}", s + 1),
                identity: "edge:e".into(),
                not_after_ms,
            },
        }),
        (id.clone(), 0u8..4).prop_map(|(tenant_id, j)| Command::RevokeIssuerToken {
            tenant_id,
            issuer: "https://idp".into(),
            jti: format!("j-{j}"),
        }),
        (id, proptest::option::of(0u64..50_000), proptest::option::of(0u64..200_000)).prop_map(
            |(tenant_id, audit_max_events, idempotency_retention_s)| Command::SetTenantSettings {
                tenant_id,
                patch: writ_api::settings::TenantSettingsPatch {
                    audit_max_events,
                    idempotency_retention_s,
                    ..Default::default()
                },
            }
        ),
    ]
}

proptest! {
    #[test]
    fn snapshot_plus_log_and_event_replay_equal_live_state(
        cmds in proptest::collection::vec((command(), 0u64..5_000), 1..80),
        split in 0usize..80,
    ) {
        let reqs: Vec<LedgerRequest> = cmds
            .into_iter()
            .enumerate()
            .map(|(i, (command, stamp))| LedgerRequest { stamp_ms: stamp, trace_id: format!("tr-{i}"), command: command.into() })
            .collect();
        let split = split.min(reqs.len());

        let mut live = LedgerState::default();
        let mut events = Vec::new();
        let mut snapshot = None;
        for (i, r) in reqs.iter().enumerate() {
            if i == split {
                snapshot = Some(live.encode_versioned());
            }
            events.extend(live.execute(r).1);
        }
        let snapshot = snapshot.unwrap_or_else(|| live.encode_versioned());

        // Snapshot + the rest of the log.
        let mut restored = LedgerState::decode_versioned(&snapshot).unwrap();
        for r in &reqs[split..] {
            restored.execute(r);
        }
        prop_assert_eq!(restored.digest(), live.digest());
        prop_assert_eq!(&restored, &live, "the indexes too");

        // Event stream alone.
        let mut rebuilt = LedgerState::default();
        for e in &events {
            rebuilt.apply_event(e);
        }
        prop_assert_eq!(&rebuilt, &live);

        // Gap-free revisions.
        for (i, e) in events.iter().enumerate() {
            prop_assert_eq!(e.revision, i as u64 + 1);
        }
    }
}

/// One step of the retention property: time passes, settings change, or a record is written.
#[derive(Debug, Clone)]
enum Step {
    Wait(u64),
    Limit { max_events: u64, max_age_s: Option<u64> },
    Record,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        (0u64..10).prop_map(|k| Step::Wait(k * 250)),
        (1u64..8, proptest::option::of(1u64..4))
            .prop_map(|(max_events, max_age_s)| Step::Limit { max_events, max_age_s }),
        Just(Step::Record),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Retention keeps exactly the records that are among the newest `max_events` and not
    /// older than `max_age_s` at each write — a record once dropped never comes back — and
    /// state rebuilt from the event stream retains the same ones.
    #[test]
    fn audit_retention_keeps_exactly_the_expected_records(steps in proptest::collection::vec(step(), 1..80)) {
        let t = "t-r".to_string();
        let mut now = 1_000_000u64;
        let mut st = LedgerState::default();
        let mut events = Vec::new();
        let mut run = |st: &mut LedgerState, now: u64, command: Command| {
            let (_, evs, audited) = st.execute_audited(&LedgerRequest { stamp_ms: now, trace_id: "p".into(), command: command.into() });
            let records = writ_api::trail::records_of(&evs, &audited);
            events.extend(evs);
            records
        };
        // Model: every record written (seq, time), and the set currently retained.
        let mut written: Vec<(u64, u64)> = Vec::new();
        let mut kept: std::collections::BTreeSet<u64> = Default::default();
        let (mut max_events, mut max_age_s) = (writ_api::settings::AUDIT_MAX_EVENTS_DEFAULT, None::<u64>);
        let apply_model = |written: &mut Vec<(u64, u64)>, kept: &mut std::collections::BTreeSet<u64>, records: Vec<writ_api::audit::AuditRecord>, max_events: u64, max_age_s: Option<u64>| {
            for r in records {
                written.push((r.seq, r.at_ms));
                kept.insert(r.seq);
                let newest: Vec<u64> = kept.iter().rev().take(max_events as usize).copied().collect();
                let cutoff = max_age_s.map_or(0, |a| r.at_ms.saturating_sub(a * 1000));
                kept.retain(|s| newest.contains(s) && written[(*s - 1) as usize].1 >= cutoff);
            }
        };
        let records = run(&mut st, now, Command::CreateTenant { tenant_id: t.clone(), name: "r".into(), display_name: None });
        apply_model(&mut written, &mut kept, records, max_events, max_age_s);
        let mut n = 0u32;
        for s in steps {
            match s {
                Step::Wait(ms) => now += ms,
                Step::Limit { max_events: m, max_age_s: a } => {
                    let patch = writ_api::settings::TenantSettingsPatch { audit_max_events: Some(m), audit_max_age_s: a, ..Default::default() };
                    // The change itself is a record, written under the new settings.
                    max_events = m;
                    if a.is_some() { max_age_s = a; }
                    let records = run(&mut st, now, Command::SetTenantSettings { tenant_id: t.clone(), patch });
                    apply_model(&mut written, &mut kept, records, max_events, max_age_s);
                }
                Step::Record => {
                    n += 1;
                    let command = Command::SuspendTenant { tenant_id: t.clone(), note: Some(format!("n{n}")) };
                    let records = run(&mut st, now, command);
                    apply_model(&mut written, &mut kept, records, max_events, max_age_s);
                }
            }
        }
        let index = st.audit.get(&t).cloned().unwrap_or_default();
        let retained: Vec<u64> = (index.first_seq..index.next_seq).collect();
        prop_assert_eq!(retained, kept.iter().copied().collect::<Vec<_>>());
        prop_assert_eq!(index.at_ms.records(), index.len());
        let mut rebuilt = LedgerState::default();
        for e in &events {
            rebuilt.apply_event(e);
        }
        prop_assert_eq!(rebuilt.digest(), st.digest());
    }
}
