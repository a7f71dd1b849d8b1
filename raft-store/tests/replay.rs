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
            .map(|(i, (command, stamp))| LedgerRequest { stamp_ms: stamp, trace_id: format!("tr-{i}"), command })
            .collect();
        let split = split.min(reqs.len());

        let mut live = LedgerState::default();
        let mut events = Vec::new();
        let mut snapshot = None;
        for (i, r) in reqs.iter().enumerate() {
            if i == split {
                snapshot = Some(live.encode());
            }
            events.extend(live.execute(r).1);
        }
        let snapshot = snapshot.unwrap_or_else(|| live.encode());

        // Snapshot + the rest of the log.
        let mut restored: LedgerState = writ_api::decode(&snapshot).unwrap();
        for r in &reqs[split..] {
            restored.execute(r);
        }
        prop_assert_eq!(restored.digest(), live.digest());

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
