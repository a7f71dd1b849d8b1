//! The audit trail (SPEC D10): the records each event of a tenant's stream produces — one, or
//! one per request decision of a batch — [`records_for`], a pure function, so every replica
//! hashes byte-identical records, and the only place records are built, so nothing unredacted
//! is ever stored. A node stores a record as its position in its event while the event is in
//! its event log and renders it again when it is listed ([`record_at`]): what these functions
//! make of a stored event is part of the stored format, and a change to them must leave the
//! records of every event already written as they were. (The record types, redaction and
//! retention index are `crate::audit`; this module sits above `crate::ledger`.)

use serde_json::Value;

use crate::audit::{redact, AuditRecord, AuditedEvent, AuthorityChainV1, RequestDecisionV1};
use crate::ledger::{Event, EventEnvelope};

/// The records an event of a tenant stream produces, from sequence `first_seq` on: one per
/// decision of a batch of request decisions, else one. Redaction happens here, so no
/// unredacted secret is ever stored or listed.
pub fn records_for(env: &EventEnvelope, tenant_id: &str, first_seq: u64) -> Vec<AuditRecord> {
    (0..).map_while(|i| record_at(env, tenant_id, first_seq + u64::from(i), i)).collect()
}

/// How many records `env` produces ([`records_for`]'s length), without building them.
pub fn record_count(env: &EventEnvelope) -> usize {
    match &env.event {
        Event::RequestsDecidedV1 { decisions, .. } => decisions.len(),
        Event::RequestsDecidedV2 { decisions, .. } => decisions.len(),
        Event::ExecutorPresenceV1 { changed: false, .. } => 0,
        _ => 1,
    }
}

/// The records of the events `audited` names, rendered from `events` (what a node lists).
pub fn records_of(events: &[EventEnvelope], audited: &[AuditedEvent]) -> Vec<AuditRecord> {
    audited
        .iter()
        .filter_map(|a| events.iter().find(|e| e.revision == a.revision).map(|e| (a, e)))
        .flat_map(|(a, env)| records_for(env, &a.tenant_id, a.first_seq))
        .collect()
}

/// The record at sequence `seq` that is the `index`-th of those `env` produces
/// ([`records_for`]), if it produces that many: also what a stored row that points at its
/// event renders as. A connection confirmed every few minutes would flood the trail: only
/// changes of presence are kept.
pub fn record_at(env: &EventEnvelope, tenant_id: &str, seq: u64, index: u32) -> Option<AuditRecord> {
    let i = index as usize;
    match &env.event {
        Event::RequestDecidedV1 { decision, .. } => {
            (i == 0).then(|| decision_record(env, decision, None, tenant_id, seq))
        }
        Event::RequestsDecidedV1 { decisions, .. } => {
            decisions.get(i).map(|d| decision_record(env, d, None, tenant_id, seq))
        }
        Event::RequestsDecidedV2 { decisions, .. } => {
            decisions.get(i).map(|d| decision_record(env, &d.decision, Some(&d.authority), tenant_id, seq))
        }
        Event::ExecutorPresenceV1 { changed: false, .. } => None,
        _ => (i == 0).then(|| record_for(env, tenant_id, seq)),
    }
}

/// The record of one request decision (its own trace id; the event's time and revision), with
/// the authority chain it was decided under when the event carries one.
fn decision_record(
    env: &EventEnvelope,
    d: &RequestDecisionV1,
    authority: Option<&AuthorityChainV1>,
    tenant_id: &str,
    seq: u64,
) -> AuditRecord {
    #[derive(serde::Serialize)]
    struct Detail<'a> {
        method: &'a str,
        name: Option<&'a str>,
    }
    // The keys are not secret-like; the values (a resource's URI may carry `?token=…`) are
    // redacted as text, without building a JSON value per decision.
    let method = crate::audit::redact_str(&d.method);
    let name = d.name.as_deref().map(|n| crate::audit::redact_str(n).unwrap_or_else(|| n.to_string()));
    let detail = Detail { method: method.as_deref().unwrap_or(&d.method), name: name.as_deref() };
    let detail = serde_json::to_string(&detail).unwrap_or_default();
    AuditRecord {
        seq,
        at_ms: env.at_ms,
        revision: env.revision,
        trace_id: d.trace_id.clone(),
        tenant_id: tenant_id.to_string(),
        domain: "request".into(),
        operation: d.method.clone(),
        outcome: d.outcome.clone(),
        reason_code: d.reason,
        principal_id: Some(d.principal_id.clone()),
        token_id: d.token_id.clone(),
        parent_token_id: d.parent_token_id.clone(),
        detail,
        authority: authority.map(redacted_client),
    }
}

/// The chain with the client's own texts redacted like a request's (they are what the client
/// chose to send); the ledger's fields are ids and digests.
fn redacted_client(chain: &AuthorityChainV1) -> AuthorityChainV1 {
    let clean = |t: &Option<String>| t.as_deref().map(|t| crate::audit::redact_str(t).unwrap_or_else(|| t.to_string()));
    AuthorityChainV1 {
        client_name: clean(&chain.client_name),
        client_version: clean(&chain.client_version),
        protocol_version: clean(&chain.protocol_version),
        ..chain.clone()
    }
}

/// The record of any other event of a tenant stream, at sequence `seq`.
fn record_for(env: &EventEnvelope, tenant_id: &str, seq: u64) -> AuditRecord {
    let (domain, principal_id, token_id, parent_token_id) = subject(&env.event);
    let (operation, outcome, reason_code) = match &env.event {
        Event::CommandRejectedV1 { command, reason, .. } | Event::CommandRejectedV2 { command, reason, .. } => {
            (command.clone(), "rejected", Some(*reason))
        }
        // An executor's refusal is applied (the operation failed) and says why.
        Event::OperationRefusedV1 { reason, .. } => (env.event.kind().to_string(), "applied", Some(*reason)),
        e => (e.kind().to_string(), "applied", None),
    };
    // The variant's fields, without the enum tag.
    let mut detail = match serde_json::to_value(&env.event) {
        Ok(Value::Object(mut tagged)) if tagged.len() == 1 => {
            tagged.values_mut().next().map(Value::take).unwrap_or_default()
        }
        Ok(other) => other,
        Err(_) => Value::Null,
    };
    redact(&mut detail);
    AuditRecord {
        seq,
        at_ms: env.at_ms,
        revision: env.revision,
        trace_id: env.trace_id.clone(),
        tenant_id: tenant_id.to_string(),
        domain: domain.to_string(),
        operation,
        outcome: outcome.to_string(),
        reason_code,
        principal_id,
        token_id,
        parent_token_id,
        detail: detail.to_string(),
        authority: None,
    }
}

type Subject = (&'static str, Option<String>, Option<String>, Option<String>);

fn subject(event: &Event) -> Subject {
    match event {
        Event::TenantCreatedV1 { .. }
        | Event::TenantSuspendedV1 { .. }
        | Event::TenantResumedV1 { .. }
        | Event::TenantSettingsChangedV1 { .. }
        | Event::TenantDeletedV1 { .. }
        | Event::TenantPurgedV1 { .. } => ("tenant", None, None, None),
        Event::CommandRejectedV1 { command, .. } => (domain_of_command(command), None, None, None),
        Event::CommandRejectedV2 { command, subject: s, .. } => {
            (domain_of_command(command), s.principal_id.clone(), s.token_id.clone(), s.parent_token_id.clone())
        }
        Event::PrincipalCreatedV1 { spec, .. } => ("principal", Some(spec.principal_id.clone()), None, None),
        Event::AnonymousAccessSetV1 { principal_id, .. } => ("principal", principal_id.clone(), None, None),
        Event::SessionStateSetV1 { session, .. } => ("session", Some(session.principal_id.clone()), None, None),
        Event::PrincipalRevokedV1 { principal_id, .. }
        | Event::ScopeRevokedV1 { principal_id, .. }
        | Event::ScopeGrantedV1 { principal_id, .. } => ("principal", Some(principal_id.clone()), None, None),
        Event::TokenIssuedV1 { token, .. } => {
            ("token", Some(token.principal_id.clone()), Some(token.jti.clone()), token.parent_jti.clone())
        }
        Event::TokenRevokedV1 { jti, .. } | Event::IssuerTokenRevokedV1 { jti, .. } => {
            ("token", None, Some(jti.clone()), None)
        }
        Event::SiteCreatedV1 { .. } => ("site", None, None, None),
        Event::DeviceCreatedV1 { .. } => ("device", None, None, None),
        Event::SigningKeyRegisteredV1 { .. } | Event::SigningKeyRetiredV1 { .. } => ("signing_key", None, None, None),
        Event::RoleCertificateRevokedV1 { .. } => ("certificate", None, None, None),
        Event::LedgerVersionRaisedV1 { .. } => ("ledger", None, None, None),
        Event::TenantIssuerSetV1 { .. } | Event::TenantIssuerRemovedV1 { .. } | Event::IssuerSourceSetV1 { .. } => {
            ("issuer", None, None, None)
        }
        Event::CatalogPublishedV1 { .. } => ("catalog", None, None, None),
        Event::OAuthClientSetV1 { client, .. } => ("oauth", Some(client.principal_id.clone()), None, None),
        Event::OAuthClientRemovedV1 { .. } | Event::OAuthGrantV1 { .. } | Event::OAuthSettingsSetV1 { .. } => {
            ("oauth", None, None, None)
        }
        Event::OperatorSetV1 { .. }
        | Event::OperatorRemovedV1 { .. }
        | Event::OperatorSessionOpenedV1 { .. }
        | Event::OperatorSessionsClosedV1 { .. }
        | Event::ConsoleSignInSetV1 { .. }
        | Event::OperatorSessionUsedV1 { .. } => ("operator", None, None, None),
        // The person who acted, as a search by principal finds them.
        Event::OperatorActedV1 { operator, .. } => {
            ("operator", Some(crate::operator::actor_name(operator)), None, None)
        }
        Event::EnrollmentCreatedV1 { .. }
        | Event::ExecutorEnrolledV1 { .. }
        | Event::ExecutorRevokedV1 { .. }
        | Event::ExecutorCaRegisteredV1 { .. }
        | Event::ExecutorCertRenewedV1 { .. }
        | Event::ExecutorCaRetiredV1 { .. }
        | Event::ExecutorPresenceV1 { .. } => ("executor", None, None, None),
        Event::RequestDecidedV1 { .. } | Event::RequestsDecidedV1 { .. } | Event::RequestsDecidedV2 { .. } => {
            ("request", None, None, None)
        }
        Event::PrincipalQuotasSetV1 { principal_id, .. } | Event::PrincipalQuotasSetV2 { principal_id, .. } => {
            ("principal", Some(principal_id.clone()), None, None)
        }
        Event::RequestQuotaLeasedV1 { principal_id, .. } => ("quota", Some(principal_id.clone()), None, None),
        Event::OperationSubmittedV1 { spec, .. } => {
            ("operation", Some(spec.principal_id.clone()), Some(spec.authority_ref.clone()), None)
        }
        Event::DeviceReservedV1 { .. }
        | Event::DeviceReleasedV1 { .. }
        | Event::OperationDispatchedV1 { .. }
        | Event::OperationTransitionedV1 { .. }
        | Event::AttemptLeaseExtendedV1 { .. }
        | Event::EvidenceReportedV1 { .. }
        | Event::OperationUpstreamBoundV1 { .. } => ("operation", None, None, None),
        Event::OperationInputsAnsweredV1 { .. } | Event::ProposalUsedV1 { .. } => ("operation", None, None, None),
        Event::OperationProposedV1 { proposal, .. } => ("operation", Some(proposal.principal_id.clone()), None, None),
        Event::OperationCancelRequestedV1 { by_principal_id, .. } => {
            ("operation", Some(by_principal_id.clone()), None, None)
        }
        Event::ObservationRecordedV1 { observation, .. } => {
            ("operation", Some(observation.observer_id.clone()), None, None)
        }
        Event::OperationRefusedV1 { .. } => ("operation", None, None, None),
        Event::WorkCreatedV1 { .. } | Event::WorkRevisedV1 { .. } => ("work", None, None, None),
        Event::EvidenceExpiredV1 { .. } => ("operation", None, None, None),
        Event::OperationsCompactedV1 { .. }
        | Event::BindingsReleasedV1 { .. }
        | Event::CredentialsRetiredV1 { .. }
        | Event::WorksRetiredV1 { .. } => ("retention", None, None, None),
        Event::UpstreamSetV1 { .. }
        | Event::UpstreamRemovedV1 { .. }
        | Event::UpstreamToolsObservedV1 { .. }
        | Event::UpstreamToolsApprovedV1 { .. }
        | Event::UpstreamFuseChangedV1 { .. } => ("upstream", None, None, None),
        Event::EvidenceStoredV1 { blob, .. } => match &blob.by {
            crate::evidence::Uploader::Principal { principal_id } => {
                ("operation", Some(principal_id.clone()), None, None)
            }
            crate::evidence::Uploader::Executor { .. } => ("operation", None, None, None),
        },
    }
}

fn domain_of_command(command: &str) -> &'static str {
    const DOMAINS: &[(&str, &str)] = &[
        ("operator", "operator"),
        ("upstream", "upstream"),
        ("quota", "quota"),
        ("retention", "retention"),
        ("work", "work"),
        ("evidence", "operation"),
        ("operation", "operation"),
        ("attempt", "operation"),
        ("observation", "operation"),
        ("unknown_effect", "operation"),
        ("expire_due", "operation"),
        ("anonymous", "principal"),
        ("session", "session"),
        ("tenant", "tenant"),
        ("principal", "principal"),
        ("scope", "principal"),
        ("token", "token"),
        ("site", "site"),
        ("device", "device"),
        ("issuer", "issuer"),
        ("catalog", "catalog"),
        ("signing_key", "signing_key"),
        ("role_certificate", "certificate"),
        ("enrollment", "executor"),
        ("executor", "executor"),
    ];
    DOMAINS.iter().find(|(needle, _)| command.contains(needle)).map_or("ledger", |(_, d)| d)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decided(method: &str, name: Option<&str>) -> AuditRecord {
        let decision = RequestDecisionV1::allowed("tr", "p", method, name);
        let event = Event::RequestsDecidedV1 { tenant_id: "t".into(), decisions: vec![decision] };
        let env = EventEnvelope { revision: 7, stream: "t".into(), seq: 3, at_ms: 5, trace_id: "x".into(), event };
        records_for(&env, "t", 1).remove(0)
    }

    #[test]
    fn decision_details_are_the_redacted_json_of_method_and_name() {
        // The direct path writes exactly what the redacting one would.
        let uri = Some("writ://cam/1?access_token=t-9");
        for (method, name) in
            [("tools/list", None), ("tools/call", Some("gr\"eet\u{1F600}")), ("x", Some("a}")), ("resources/read", uri)]
        {
            let mut expected = serde_json::json!({"method": method, "name": name});
            redact(&mut expected);
            assert_eq!(decided(method, name).detail, expected.to_string());
        }
        assert!(!decided("resources/read", uri).detail.contains("t-9"), "a secret in a URI's query");
        // A name holding a JSON document is redacted inside.
        let detail = decided("tools/call", Some(r#"{"api_key":"s3cret","n":1}"#)).detail;
        assert!(!detail.contains("s3cret") && detail.contains(crate::audit::REDACTED), "{detail}");
    }

    #[test]
    fn a_clients_own_texts_in_a_chain_are_redacted() {
        let decision = RequestDecisionV1 {
            trace_id: "tr".into(),
            principal_id: "p".into(),
            token_id: None,
            parent_token_id: None,
            method: "tools/list".into(),
            name: None,
            outcome: "allowed".into(),
            reason: None,
        };
        let authority = AuthorityChainV1 {
            client_name: Some("host?access_token=t-9".into()),
            client_version: Some("1.0".into()),
            principal_kind: Some("agent".into()),
            ..Default::default()
        };
        let decisions = vec![crate::audit::RequestDecisionV2 { decision, authority }];
        let event = Event::RequestsDecidedV2 { tenant_id: "t".into(), decisions };
        let env = EventEnvelope { revision: 7, stream: "t".into(), seq: 3, at_ms: 5, trace_id: "x".into(), event };
        let chain = records_for(&env, "t", 1).remove(0).authority.expect("a chain");
        let name = chain.client_name.expect("a name");
        assert!(!name.contains("t-9") && name.starts_with("host?access_token="), "{name}");
        assert_eq!((chain.client_version.as_deref(), chain.principal_kind.as_deref()), (Some("1.0"), Some("agent")));
    }
}
