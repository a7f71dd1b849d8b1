//! Golden encodings of persisted types: a changed encoding of an existing command or event
//! fails here. Add a new `V2` variant instead; bless new samples with `WRIT_BLESS=1`.

use writ_api::audit::RequestDecisionV1;
use writ_api::catalog::{CatalogActionV1, CatalogV1, Execution, Risk};
use writ_api::device::{EnrollmentV1, ExecutorCaV1, ExecutorCertV1};
use writ_api::evidence::{EvidenceBlobV1, EvidenceContentV1, EvidenceRefV1, Uploader};
use writ_api::ledger::{Command, Event, EventEnvelope, LedgerRequest, Outcome, RejectionSubject};
use writ_api::operation::{
    AttemptOutcome, EvidenceV1, ObservationV1, OperationSpecV1, OperationState, ProposalV1, Verdict, WorkRef,
};
use writ_api::principal::{PrincipalKind, PrincipalSpecV1, RolePreset};
use writ_api::quota::{PrincipalQuotasV1, PrincipalQuotasV2};
use writ_api::revocation::RevokedRoleCertificateV1;
use writ_api::settings::{AuditMode, QuotasV1, TenantSettingsPatch, TenantSettingsV1};
use writ_api::token::{SigningKeyV1, TenantIssuerV1, TokenRecordV1, TokenRequestV1};
use writ_api::work::{WorkChangeV1, WorkOperationV1, WorkScopeV1, WorkState};
use writ_api::ReasonCode;

fn samples() -> Vec<(&'static str, LedgerRequest, Option<EventEnvelope>)> {
    let req = |command: Command| LedgerRequest {
        stamp_ms: 1_700_000_000_000,
        trace_id: "trace-1".into(),
        command: command.into(),
    };
    let env = |revision, seq, event| EventEnvelope {
        revision,
        stream: "t-1".into(),
        seq,
        at_ms: 1_700_000_000_000,
        trace_id: "trace-1".into(),
        event,
    };
    vec![
        (
            "tenant_created_v1",
            req(Command::CreateTenant {
                tenant_id: "t-1".into(),
                name: "acme".into(),
                display_name: Some("Acme".into()),
            }),
            Some(env(
                1,
                1,
                Event::TenantCreatedV1 {
                    tenant_id: "t-1".into(),
                    name: "acme".into(),
                    display_name: Some("Acme".into()),
                },
            )),
        ),
        (
            "tenant_suspended_v1",
            req(Command::SuspendTenant { tenant_id: "t-1".into(), note: Some("billing".into()) }),
            Some(env(2, 2, Event::TenantSuspendedV1 { tenant_id: "t-1".into(), note: Some("billing".into()) })),
        ),
        (
            "tenant_resumed_v1",
            req(Command::ResumeTenant { tenant_id: "t-1".into() }),
            Some(env(3, 3, Event::TenantResumedV1 { tenant_id: "t-1".into() })),
        ),
        (
            "command_rejected_v1",
            req(Command::ResumeTenant { tenant_id: "t-9".into() }),
            Some(env(
                4,
                1,
                Event::CommandRejectedV1 {
                    command: "resume_tenant".into(),
                    reason: ReasonCode::TENANT_NOT_FOUND,
                    message: "no tenant 't-9'".into(),
                },
            )),
        ),
        (
            "tenant_settings_changed_v1",
            req(Command::SetTenantSettings {
                tenant_id: "t-1".into(),
                patch: TenantSettingsPatch {
                    audit_max_events: Some(500),
                    audit_mode: Some(AuditMode::Strict),
                    allowed_origins: Some(vec!["https://app.example".into()]),
                    quotas: Some(QuotasV1 { requests_per_minute: Some(600), ..Default::default() }),
                    ..Default::default()
                },
            }),
            Some(env(
                5,
                4,
                Event::TenantSettingsChangedV1 {
                    tenant_id: "t-1".into(),
                    settings: TenantSettingsV1 {
                        audit_max_events: 500,
                        audit_mode: AuditMode::Strict,
                        allowed_origins: vec!["https://app.example".into()],
                        quotas: QuotasV1 { requests_per_minute: Some(600), ..Default::default() },
                        ..Default::default()
                    },
                },
            )),
        ),
        (
            "principal_created_v1",
            req(Command::CreatePrincipal { tenant_id: "t-1".into(), spec: principal_spec() }),
            Some(env(6, 5, Event::PrincipalCreatedV1 { tenant_id: "t-1".into(), spec: principal_spec() })),
        ),
        (
            "scope_revoked_v1",
            req(Command::RevokeScope {
                tenant_id: "t-1".into(),
                principal_id: "p-1".into(),
                scope: "ops:execute".into(),
            }),
            Some(env(
                7,
                6,
                Event::ScopeRevokedV1 {
                    tenant_id: "t-1".into(),
                    principal_id: "p-1".into(),
                    scope: "ops:execute".into(),
                },
            )),
        ),
        (
            "principal_revoked_v1",
            req(Command::RevokePrincipal {
                tenant_id: "t-1".into(),
                principal_id: "p-1".into(),
                note: Some("left".into()),
            }),
            Some(env(
                8,
                7,
                Event::PrincipalRevokedV1 {
                    tenant_id: "t-1".into(),
                    principal_id: "p-1".into(),
                    note: Some("left".into()),
                },
            )),
        ),
        (
            "token_issued_v1",
            req(Command::IssueToken { tenant_id: "t-1".into(), request: token_request() }),
            Some(env(9, 8, Event::TokenIssuedV1 { tenant_id: "t-1".into(), token: token_record() })),
        ),
        (
            "token_revoked_v1",
            req(Command::RevokeToken { tenant_id: "t-1".into(), jti: "j-1".into() }),
            Some(env(
                10,
                9,
                Event::TokenRevokedV1 { tenant_id: "t-1".into(), jti: "j-1".into(), cascade: vec!["j-2".into()] },
            )),
        ),
        (
            "site_created_v1",
            req(Command::CreateSite {
                tenant_id: "t-1".into(),
                site_id: "s-1".into(),
                name: "plant".into(),
                display_name: None,
            }),
            Some(env(
                11,
                10,
                Event::SiteCreatedV1 {
                    tenant_id: "t-1".into(),
                    site_id: "s-1".into(),
                    name: "plant".into(),
                    display_name: None,
                },
            )),
        ),
        (
            "device_created_v1",
            req(Command::CreateDevice {
                tenant_id: "t-1".into(),
                device_id: "d-1".into(),
                site_id: "s-1".into(),
                name: "press".into(),
                device_class: "press.v1".into(),
            }),
            Some(env(
                12,
                11,
                Event::DeviceCreatedV1 {
                    tenant_id: "t-1".into(),
                    device_id: "d-1".into(),
                    site_id: "s-1".into(),
                    name: "press".into(),
                    device_class: "press.v1".into(),
                },
            )),
        ),
        (
            "signing_key_registered_v1",
            req(Command::RegisterSigningKey { key: signing_key() }),
            Some(env(13, 1, Event::SigningKeyRegisteredV1 { key: signing_key() })),
        ),
        (
            "tenant_issuer_set_v1",
            req(Command::SetTenantIssuer { tenant_id: "t-1".into(), issuer: tenant_issuer() }),
            Some(env(14, 12, Event::TenantIssuerSetV1 { tenant_id: "t-1".into(), issuer: tenant_issuer() })),
        ),
        (
            "tenant_issuer_removed_v1",
            req(Command::RemoveTenantIssuer { tenant_id: "t-1".into(), issuer: "https://idp.example".into() }),
            Some(env(
                15,
                13,
                Event::TenantIssuerRemovedV1 { tenant_id: "t-1".into(), issuer: "https://idp.example".into() },
            )),
        ),
        (
            "catalog_published_v1",
            req(Command::PublishCatalog { tenant_id: "t-1".into(), catalog: catalog() }),
            Some(env(16, 14, Event::CatalogPublishedV1 { tenant_id: "t-1".into(), version: 1, catalog: catalog() })),
        ),
        (
            "enrollment_created_v1",
            req(Command::CreateEnrollment { tenant_id: "t-1".into(), enrollment: enrollment() }),
            Some(env(17, 15, Event::EnrollmentCreatedV1 { tenant_id: "t-1".into(), enrollment: enrollment() })),
        ),
        (
            "executor_enrolled_v1",
            req(Command::CompleteEnrollment {
                tenant_id: "t-1".into(),
                enrollment_id: "e-1".into(),
                token_sha256: "ab".repeat(32),
                cert: executor_cert(),
            }),
            Some(env(
                18,
                16,
                Event::ExecutorEnrolledV1 {
                    tenant_id: "t-1".into(),
                    enrollment_id: "e-1".into(),
                    cert: executor_cert(),
                },
            )),
        ),
        (
            "executor_revoked_v1",
            req(Command::RevokeExecutor { tenant_id: "t-1".into(), executor_id: "x-1".into() }),
            Some(env(19, 17, Event::ExecutorRevokedV1 { tenant_id: "t-1".into(), executor_id: "x-1".into() })),
        ),
        (
            "executor_ca_registered_v1",
            req(Command::RegisterExecutorCa { tenant_id: "t-1".into(), ca: executor_ca() }),
            Some(env(20, 18, Event::ExecutorCaRegisteredV1 { tenant_id: "t-1".into(), ca: executor_ca() })),
        ),
        (
            "request_decided_v1",
            req(Command::RecordDecisions { tenant_id: "t-1".into(), decisions: vec![decision()] }),
            Some(env(21, 19, Event::RequestDecidedV1 { tenant_id: "t-1".into(), decision: decision() })),
        ),
        (
            "principal_quotas_set_v1",
            req(Command::SetPrincipalQuotas {
                tenant_id: "t-1".into(),
                principal: "planner".into(),
                quotas: PrincipalQuotasV1 { requests_per_minute: Some(120) },
            }),
            Some(env(
                22,
                20,
                Event::PrincipalQuotasSetV1 {
                    tenant_id: "t-1".into(),
                    principal_id: "p-1".into(),
                    quotas: PrincipalQuotasV1 { requests_per_minute: Some(120) },
                },
            )),
        ),
        (
            "request_quota_leased_v1",
            req(Command::LeaseRequestQuota { tenant_id: "t-1".into(), principal_id: "p-1".into(), wanted: 12 }),
            Some(env(
                23,
                21,
                Event::RequestQuotaLeasedV1 {
                    tenant_id: "t-1".into(),
                    principal_id: "p-1".into(),
                    window: 29_000_000,
                    granted: 12,
                    window_ends_at_ms: 1_740_000_060_000,
                },
            )),
        ),
        (
            "operation_submitted_v1",
            req(Command::SubmitOperation { tenant_id: "t-1".into(), spec: operation_spec() }),
            Some(env(24, 22, Event::OperationSubmittedV1 { tenant_id: "t-1".into(), spec: operation_spec() })),
        ),
        (
            "device_reserved_v1",
            req(Command::ExpireDue { tenant_id: "t-1".into() }),
            Some(env(
                25,
                23,
                Event::DeviceReservedV1 {
                    tenant_id: "t-1".into(),
                    device_id: "d-1".into(),
                    operation_id: "op-1".into(),
                    fencing_token: 7,
                    expires_at_ms: 1_700_000_060_000,
                },
            )),
        ),
        (
            "operation_dispatched_v1",
            req(Command::DispatchOperation {
                tenant_id: "t-1".into(),
                operation_id: "op-1".into(),
                executor_id: "x-1".into(),
            }),
            Some(env(
                26,
                24,
                Event::OperationDispatchedV1 {
                    tenant_id: "t-1".into(),
                    operation_id: "op-1".into(),
                    executor_id: "x-1".into(),
                },
            )),
        ),
        (
            "operation_transitioned_v1",
            req(Command::StartAttempt {
                tenant_id: "t-1".into(),
                operation_id: "op-1".into(),
                executor_id: "x-1".into(),
                fencing_token: 7,
                lease_ms: 30_000,
            }),
            Some(env(
                27,
                25,
                Event::OperationTransitionedV1 {
                    tenant_id: "t-1".into(),
                    operation_id: "op-1".into(),
                    from: OperationState::Dispatched,
                    to: OperationState::Attempting,
                    cause: "attempt 1 started".into(),
                },
            )),
        ),
        (
            "attempt_lease_extended_v1",
            req(Command::RenewAttemptLease {
                tenant_id: "t-1".into(),
                operation_id: "op-1".into(),
                fencing_token: 7,
                lease_ms: 30_000,
            }),
            Some(env(
                28,
                26,
                Event::AttemptLeaseExtendedV1 {
                    tenant_id: "t-1".into(),
                    device_id: Some("d-1".into()),
                    operation_id: "op-1".into(),
                    expires_at_ms: 1_700_000_030_000,
                },
            )),
        ),
        (
            "evidence_reported_v1",
            req(Command::ReportAttempt {
                tenant_id: "t-1".into(),
                operation_id: "op-1".into(),
                fencing_token: 7,
                outcome: AttemptOutcome::Effect,
                evidence: Some(evidence()),
            }),
            Some(env(
                29,
                27,
                Event::EvidenceReportedV1 {
                    tenant_id: "t-1".into(),
                    operation_id: "op-1".into(),
                    evidence: evidence(),
                },
            )),
        ),
        (
            "observation_recorded_v1",
            req(Command::RecordObservation {
                tenant_id: "t-1".into(),
                operation_id: "op-1".into(),
                observer_id: "p-2".into(),
                evidence: evidence(),
            }),
            Some(env(
                30,
                28,
                Event::ObservationRecordedV1 {
                    tenant_id: "t-1".into(),
                    operation_id: "op-1".into(),
                    observation: ObservationV1 {
                        observer_id: "p-2".into(),
                        evidence: evidence(),
                        at_ms: 1_700_000_001_000,
                    },
                },
            )),
        ),
        (
            "device_released_v1",
            req(Command::DecideOperation {
                tenant_id: "t-1".into(),
                operation_id: "op-1".into(),
                by_principal_id: "p-2".into(),
                verdict: Verdict::Accept,
                note: "seen".into(),
            }),
            Some(env(
                31,
                29,
                Event::DeviceReleasedV1 {
                    tenant_id: "t-1".into(),
                    device_id: "d-1".into(),
                    operation_id: "op-1".into(),
                },
            )),
        ),
        (
            "resolve_unknown_effect",
            req(Command::ResolveUnknownEffect {
                tenant_id: "t-1".into(),
                operation_id: "op-1".into(),
                by_principal_id: "p-2".into(),
                outcome: AttemptOutcome::NoEffect,
                note: "no motion".into(),
            }),
            None,
        ),
        (
            "cancel_operation",
            req(Command::CancelOperation {
                tenant_id: "t-1".into(),
                operation_id: "op-1".into(),
                by_principal_id: "p-1".into(),
            }),
            None,
        ),
        (
            "refuse_dispatch",
            req(Command::RefuseDispatch {
                tenant_id: "t-1".into(),
                operation_id: "op-1".into(),
                executor_id: "x-1".into(),
                fencing_token: 7,
                reason: "precondition door=closed not met".into(),
            }),
            None,
        ),
        (
            "answer_inputs",
            req(Command::AnswerInputs {
                tenant_id: "t-1".into(),
                operation_id: "op-1".into(),
                by_principal_id: "p-1".into(),
                answers: [("confirm".to_string(), r#"{"action":"accept","content":{"confirm":true}}"#.to_string())]
                    .into_iter()
                    .collect(),
            }),
            Some(env(
                33,
                31,
                Event::OperationInputsAnsweredV1 {
                    tenant_id: "t-1".into(),
                    operation_id: "op-1".into(),
                    answers: [("confirm".to_string(), r#"{"action":"accept"}"#.to_string())].into_iter().collect(),
                },
            )),
        ),
        (
            "cancel_requested",
            req(Command::CancelOperation {
                tenant_id: "t-1".into(),
                operation_id: "op-2".into(),
                by_principal_id: "p-1".into(),
            }),
            Some(env(
                34,
                32,
                Event::OperationCancelRequestedV1 {
                    tenant_id: "t-1".into(),
                    operation_id: "op-2".into(),
                    by_principal_id: "p-1".into(),
                },
            )),
        ),
        (
            "principal_quotas_set_v2",
            req(Command::SetPrincipalQuotasV2 {
                tenant_id: "t-1".into(),
                principal: "p-1".into(),
                quotas: PrincipalQuotasV2 {
                    requests_per_minute: Some(120),
                    operations_per_minute: Some(10),
                    cost_units_per_day: None,
                    concurrent_operations: Some(2),
                },
            }),
            Some(env(
                35,
                33,
                Event::PrincipalQuotasSetV2 {
                    tenant_id: "t-1".into(),
                    principal_id: "p-1".into(),
                    quotas: PrincipalQuotasV2 { operations_per_minute: Some(10), ..Default::default() },
                },
            )),
        ),
        (
            "command_rejected_v2",
            req(Command::IssueToken { tenant_id: "t-1".into(), request: token_request() }),
            Some(env(
                32,
                30,
                Event::CommandRejectedV2 {
                    command: "issue_token".into(),
                    reason: ReasonCode::DELEGATION_DEPTH_EXCEEDED,
                    message: "delegation depth 2 exceeds the limit of 1".into(),
                    subject: RejectionSubject {
                        principal_id: Some("p-1".into()),
                        token_id: Some("j-3".into()),
                        parent_token_id: Some("j-2".into()),
                    },
                },
            )),
        ),
        ("on_behalf_of", req(cancel_on_behalf_of()), None),
        (
            "executor_cert_renewed_v1",
            req(Command::RenewExecutorCertificate {
                tenant_id: "t-1".into(),
                executor_id: "x-1".into(),
                from_fingerprint: "cd".repeat(32),
                cert: ExecutorCertV1 { fingerprint: "ce".repeat(32), serial: "0b".into(), ..executor_cert() },
            }),
            Some(env(
                36,
                34,
                Event::ExecutorCertRenewedV1 {
                    tenant_id: "t-1".into(),
                    executor_id: "x-1".into(),
                    from_fingerprint: "cd".repeat(32),
                    cert: ExecutorCertV1 { fingerprint: "ce".repeat(32), serial: "0b".into(), ..executor_cert() },
                },
            )),
        ),
        (
            "audited",
            req(Command::Audited {
                decision: decision(),
                command: Box::new(Command::StartAttempt {
                    tenant_id: "t-1".into(),
                    operation_id: "op-1".into(),
                    executor_id: "x-1".into(),
                    fencing_token: 1,
                    lease_ms: 30_000,
                }),
            }),
            None,
        ),
        (
            "issuer_token_revoked_v1",
            req(Command::RevokeIssuerToken {
                tenant_id: "t-1".into(),
                issuer: "https://idp.example".into(),
                jti: "tok-7".into(),
            }),
            Some(env(
                40,
                38,
                Event::IssuerTokenRevokedV1 {
                    tenant_id: "t-1".into(),
                    issuer: "https://idp.example".into(),
                    jti: "tok-7".into(),
                    until_ms: 1_700_003_660_000,
                },
            )),
        ),
        (
            "signing_key_retired_v1",
            req(Command::RetireSigningKey { kid: signing_key().kid }),
            Some(env(41, 2, Event::SigningKeyRetiredV1 { kid: signing_key().kid })),
        ),
        (
            "executor_ca_retired_v1",
            req(Command::RetireExecutorCa { tenant_id: "t-1".into(), fingerprint: executor_ca().fingerprint }),
            Some(env(
                42,
                39,
                Event::ExecutorCaRetiredV1 { tenant_id: "t-1".into(), fingerprint: executor_ca().fingerprint },
            )),
        ),
        (
            "role_certificate_revoked_v1",
            req(Command::RevokeRoleCertificate { certificate: revoked_role_certificate() }),
            Some(env(43, 3, Event::RoleCertificateRevokedV1 { certificate: revoked_role_certificate() })),
        ),
        (
            "operation_proposed_v1",
            req(Command::ProposeOperation { tenant_id: "t-1".into(), spec: operation_spec() }),
            Some(env(
                44,
                40,
                Event::OperationProposedV1 {
                    tenant_id: "t-1".into(),
                    proposal: ProposalV1 {
                        proposal_id: "prop-1".into(),
                        principal_id: "p-1".into(),
                        action: "move_press".into(),
                        call_digest: "ab".repeat(32),
                        payload_hash: "ef".repeat(32),
                        expires_at_ms: 1_700_000_300_000,
                    },
                },
            )),
        ),
        (
            "proposal_used_v1",
            req(Command::SubmitProposed {
                tenant_id: "t-1".into(),
                proposal_id: "prop-1".into(),
                spec: operation_spec(),
            }),
            Some(env(
                45,
                41,
                Event::ProposalUsedV1 {
                    tenant_id: "t-1".into(),
                    proposal_id: "prop-1".into(),
                    operation_id: "op-1".into(),
                },
            )),
        ),
        (
            "requests_decided_v1",
            req(Command::RecordDecisions {
                tenant_id: "t-1".into(),
                decisions: vec![decision(), RequestDecisionV1 { trace_id: "tr-2".into(), ..decision() }],
            }),
            Some(env(
                46,
                42,
                Event::RequestsDecidedV1 {
                    tenant_id: "t-1".into(),
                    decisions: vec![decision(), RequestDecisionV1 { trace_id: "tr-2".into(), ..decision() }],
                },
            )),
        ),
        (
            "work_created_v1",
            req(Command::CreateWork {
                tenant_id: "t-1".into(),
                work_id: "wo-9".into(),
                title: "Replace the press tool".into(),
                owner: "line 2 maintenance".into(),
                scope: work_scope(),
                by: "operator".into(),
            }),
            Some(env(
                47,
                43,
                Event::WorkCreatedV1 {
                    tenant_id: "t-1".into(),
                    work_id: "wo-9".into(),
                    title: "Replace the press tool".into(),
                    owner: "line 2 maintenance".into(),
                    scope: work_scope(),
                    by: "operator".into(),
                },
            )),
        ),
        (
            "work_revised_v1",
            req(Command::ReviseWork {
                tenant_id: "t-1".into(),
                work_id: "wo-9".into(),
                expected_revision: Some(1),
                change: WorkChangeV1 {
                    state: Some(WorkState::Completed),
                    note: Some("done".into()),
                    ..Default::default()
                },
                by: "operator".into(),
            }),
            Some(env(
                48,
                44,
                Event::WorkRevisedV1 {
                    tenant_id: "t-1".into(),
                    work_id: "wo-9".into(),
                    revision: 2,
                    change: WorkChangeV1 {
                        state: Some(WorkState::Completed),
                        note: Some("done".into()),
                        ..Default::default()
                    },
                    by: "operator".into(),
                    operations: vec![WorkOperationV1 { operation_id: "op-1".into(), state: OperationState::Failed }],
                },
            )),
        ),
        (
            "operation_refused_v1",
            req(Command::RefuseDispatchV2 {
                tenant_id: "t-1".into(),
                operation_id: "op-1".into(),
                executor_id: "x-1".into(),
                fencing_token: 7,
                reason: ReasonCode::PRECONDITION_FAILED,
                message: "precondition door=closed not met".into(),
            }),
            Some(env(
                49,
                45,
                Event::OperationRefusedV1 {
                    tenant_id: "t-1".into(),
                    operation_id: "op-1".into(),
                    executor_id: "x-1".into(),
                    reason: ReasonCode::PRECONDITION_FAILED,
                    cause: "refused by executor 'x-1' before any attempt: PRECONDITION_FAILED: door".into(),
                },
            )),
        ),
        (
            "scope_granted_v1",
            req(Command::GrantScope { tenant_id: "t-1".into(), principal_id: "p-1".into(), scope: "work:read".into() }),
            Some(env(
                50,
                46,
                Event::ScopeGrantedV1 {
                    tenant_id: "t-1".into(),
                    principal_id: "p-1".into(),
                    scope: "work:read".into(),
                },
            )),
        ),
        (
            "tenant_deleted_v1",
            req(Command::DeleteTenant { tenant_id: "t-1".into(), note: Some("offboarded".into()) }),
            Some(env(51, 47, Event::TenantDeletedV1 { tenant_id: "t-1".into(), note: Some("offboarded".into()) })),
        ),
        (
            "evidence_stored_v1",
            req(Command::StoreEvidence {
                tenant_id: "t-1".into(),
                operation_id: "op-1".into(),
                mime_type: "text/plain".into(),
                content_hash: writ_api::sha256_hex(b"moved"),
                content_base64: "bW92ZWQ=".into(),
                by: Uploader::Executor { executor_id: "x-1".into() },
            }),
            Some(env(52, 48, Event::EvidenceStoredV1 { tenant_id: "t-1".into(), blob: evidence_blob() })),
        ),
        (
            "tenant_purged_v1",
            req(Command::PurgeTenant { tenant_id: "t-1".into() }),
            Some(env(53, 49, Event::TenantPurgedV1 { tenant_id: "t-1".into(), name: "acme".into() })),
        ),
        (
            "evidence_expired_v1",
            req(Command::ExpireDue { tenant_id: "t-1".into() }),
            Some(env(
                54,
                50,
                Event::EvidenceExpiredV1 {
                    tenant_id: "t-1".into(),
                    blobs: vec![EvidenceRefV1 {
                        operation_id: "op-1".into(),
                        content_hash: writ_api::sha256_hex(b"moved"),
                    }],
                },
            )),
        ),
        (
            "report_attempt_v2",
            req(Command::ReportAttemptV2 {
                tenant_id: "t-1".into(),
                operation_id: "op-1".into(),
                fencing_token: 7,
                outcome: AttemptOutcome::Effect,
                evidence: evidence(),
                content: EvidenceContentV1 { mime_type: "text/plain".into(), content_base64: "bW92ZWQ=".into() },
            }),
            None,
        ),
        (
            "operations_compacted_v1",
            req(Command::ApplyRetention { tenant_id: "t-1".into() }),
            Some(env(
                55,
                51,
                Event::OperationsCompactedV1 { tenant_id: "t-1".into(), operation_ids: vec!["op-1".into()] },
            )),
        ),
        (
            "bindings_released_v1",
            req(Command::ApplyRetention { tenant_id: "t-1".into() }),
            Some(env(
                56,
                52,
                Event::BindingsReleasedV1 { tenant_id: "t-1".into(), operation_ids: vec!["op-1".into()] },
            )),
        ),
        (
            "credentials_retired_v1",
            req(Command::ApplyRetention { tenant_id: "t-1".into() }),
            Some(env(
                57,
                53,
                Event::CredentialsRetiredV1 {
                    tenant_id: "t-1".into(),
                    jtis: vec!["j-2".into()],
                    enrollments: vec!["e-1".into()],
                },
            )),
        ),
        (
            "upstream_set_v1",
            req(Command::PutUpstream {
                tenant_id: "t-1".into(),
                name: "weather".into(),
                spec: upstream_spec(),
                create: true,
            }),
            Some(env(58, 54, Event::UpstreamSetV1 { tenant_id: "t-1".into(), upstream: upstream() })),
        ),
        (
            "upstream_tools_observed_v1",
            req(Command::ObserveUpstreamTools {
                tenant_id: "t-1".into(),
                name: "weather".into(),
                tools: upstream_tools(),
            }),
            Some(env(
                59,
                55,
                Event::UpstreamToolsObservedV1 {
                    tenant_id: "t-1".into(),
                    name: "weather".into(),
                    pending: Some(upstream_tools()),
                },
            )),
        ),
        (
            "upstream_tools_approved_v1",
            req(Command::ApproveUpstreamTools {
                tenant_id: "t-1".into(),
                name: "weather".into(),
                digest: upstream_tools().digest,
            }),
            Some(env(
                60,
                56,
                Event::UpstreamToolsApprovedV1 {
                    tenant_id: "t-1".into(),
                    name: "weather".into(),
                    digest: upstream_tools().digest,
                },
            )),
        ),
        (
            "upstream_fuse_changed_v1",
            req(Command::SetUpstreamFuse {
                tenant_id: "t-1".into(),
                name: "weather".into(),
                edge_id: "edge-1:8443".into(),
                fuse: fuse(),
            }),
            Some(env(
                61,
                57,
                Event::UpstreamFuseChangedV1 {
                    tenant_id: "t-1".into(),
                    name: "weather".into(),
                    edge_id: "edge-1:8443".into(),
                    fuse: fuse(),
                },
            )),
        ),
        (
            "upstream_removed_v1",
            req(Command::RemoveUpstream { tenant_id: "t-1".into(), name: "old".into() }),
            Some(env(62, 58, Event::UpstreamRemovedV1 { tenant_id: "t-1".into(), name: "old".into() })),
        ),
        (
            "catalog_published_v1_upstream",
            req(Command::PublishCatalog { tenant_id: "t-1".into(), catalog: upstream_catalog() }),
            None,
        ),
        (
            "operation_upstream_bound_v1",
            req(Command::SubmitOperation { tenant_id: "t-1".into(), spec: operation_spec() }),
            Some(env(
                63,
                59,
                Event::OperationUpstreamBoundV1 {
                    tenant_id: "t-1".into(),
                    operation_id: "op-1".into(),
                    target: "shop/place_order".into(),
                },
            )),
        ),
        (
            "catalog_published_v1_upstream_operation",
            req(Command::PublishCatalog { tenant_id: "t-1".into(), catalog: upstream_operation_catalog() }),
            None,
        ),
        (
            "batch",
            req(Command::Batch {
                commands: vec![
                    writ_api::ledger::BatchedCommand {
                        trace_id: "trace-2".into(),
                        command: Command::ResumeTenant { tenant_id: "t-1".into() },
                    },
                    writ_api::ledger::BatchedCommand {
                        trace_id: "trace-3".into(),
                        command: Command::ExpireDue { tenant_id: "t-1".into() },
                    },
                ],
            }),
            None,
        ),
        (
            "verified",
            req(Command::Verified {
                grant: writ_api::grant::GrantV1 {
                    tenant_id: "t-1".into(),
                    principal_id: "p-1".into(),
                    issuer: writ_api::token::WRIT_ISSUER.into(),
                    token_id: Some("j-1".into()),
                    scopes: ["ops:cancel".to_string()].into(),
                    expires_at_ms: 1_800_000_000_000,
                    verified_by: "node:1".into(),
                    edge_id: "edge-a".into(),
                },
                command: Box::new(cancel_on_behalf_of()),
            }),
            None,
        ),
        (
            "anonymous_access_set_v1",
            req(Command::SetAnonymousAccess {
                tenant_id: "t-1".into(),
                edge_id: "edge-a".into(),
                principal_id: Some("p-1".into()),
            }),
            Some(env(
                70,
                66,
                Event::AnonymousAccessSetV1 {
                    tenant_id: "t-1".into(),
                    edge_id: "edge-a".into(),
                    principal_id: Some("p-1".into()),
                },
            )),
        ),
        (
            "create_tenant_with",
            req(Command::CreateTenantWith {
                tenant_id: "t-2".into(),
                name: "beta".into(),
                display_name: None,
                settings: writ_api::settings::TenantSettingsPatch {
                    quotas: Some(writ_api::settings::QuotasV1::fresh_tenant()),
                    ..Default::default()
                },
            }),
            None,
        ),
        (
            "create_principal_with",
            req(Command::CreatePrincipalWith {
                tenant_id: "t-2".into(),
                spec: writ_api::principal::PrincipalSpecV1 {
                    principal_id: "p-9".into(),
                    name: "planner".into(),
                    kind: writ_api::principal::PrincipalKind::Agent,
                    preset: None,
                    scopes: Default::default(),
                    metadata: Default::default(),
                },
                quotas: writ_api::quota::PrincipalQuotasV2::fresh_principal(),
            }),
            None,
        ),
        (
            "session_state_set_v1",
            req(Command::SetSessionState {
                tenant_id: "t-1".into(),
                session_id: SESSION_ID.into(),
                session: mcp_session(),
            }),
            Some(env(
                71,
                67,
                Event::SessionStateSetV1 {
                    tenant_id: "t-1".into(),
                    session_id: SESSION_ID.into(),
                    session: mcp_session(),
                },
            )),
        ),
        (
            "issuer_source_set_v1",
            req(Command::SetIssuerSource { tenant_id: "t-1".into(), source: issuer_source(), keys: issuer_keys() }),
            Some(env(
                72,
                68,
                Event::IssuerSourceSetV1 {
                    tenant_id: "t-1".into(),
                    source: issuer_source(),
                    jwks_uri: issuer_keys().jwks_uri,
                },
            )),
        ),
        (
            "observe_issuer_keys",
            req(Command::ObserveIssuerKeys {
                tenant_id: "t-1".into(),
                issuer: issuer_source().issuer,
                keys: issuer_keys(),
            }),
            None,
        ),
        (
            "oauth_client_set_v1",
            req(Command::SetOAuthClient { tenant_id: "t-1".into(), client: oauth_client() }),
            Some(env(73, 69, Event::OAuthClientSetV1 { tenant_id: "t-1".into(), client: oauth_client() })),
        ),
        (
            "oauth_client_removed_v1",
            req(Command::RemoveOAuthClient { tenant_id: "t-1".into(), client_id: oauth_client().client_id }),
            Some(env(
                74,
                70,
                Event::OAuthClientRemovedV1 { tenant_id: "t-1".into(), client_id: oauth_client().client_id },
            )),
        ),
        (
            "oauth_grant_v1_requested",
            req(Command::OAuthGrant {
                tenant_id: "t-1".into(),
                step: writ_api::oauth::GrantStepV1::Request(auth_request().request),
            }),
            Some(env(
                75,
                71,
                Event::OAuthGrantV1 {
                    tenant_id: "t-1".into(),
                    change: writ_api::oauth::GrantChangeV1::Requested(auth_request()),
                    at_ms: 1_700_000_000_000,
                },
            )),
        ),
        (
            "oauth_grant_v1_redeemed",
            req(Command::OAuthGrant {
                tenant_id: "t-1".into(),
                step: writ_api::oauth::GrantStepV1::Redeem {
                    client_id: oauth_client().client_id,
                    proof: writ_api::oauth::GrantProofV1::Code {
                        redirect_uri: "http://127.0.0.1:8123/callback".into(),
                        code_digest: "c".repeat(64),
                        verifier: "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk".into(),
                    },
                    token: token_request(),
                    refresh: Some(writ_api::oauth::NewRefreshV1 {
                        refresh_id: "rt-1".into(),
                        secret_digest: "d".repeat(64),
                    }),
                },
            }),
            Some(env(
                76,
                72,
                Event::OAuthGrantV1 {
                    tenant_id: "t-1".into(),
                    change: writ_api::oauth::GrantChangeV1::Redeemed {
                        client_id: oauth_client().client_id,
                        used: writ_api::oauth::UsedProofV1::Code { request_id: "req-1".into() },
                        refresh: Some(refresh_token()),
                        audience: "https://edge.example/t/acme/mcp".into(),
                    },
                    at_ms: 1_700_000_000_000,
                },
            )),
        ),
        (
            "oauth_settings_set_v1",
            req(Command::SetOAuthSettings { tenant_id: "t-1".into(), settings: oauth_settings() }),
            Some(env(77, 73, Event::OAuthSettingsSetV1 { tenant_id: "t-1".into(), settings: oauth_settings() })),
        ),
        (
            "oauth_grant_v1_decided",
            req(Command::OAuthGrant {
                tenant_id: "t-1".into(),
                step: writ_api::oauth::GrantStepV1::Decide {
                    request_id: "req-1".into(),
                    approve: true,
                    operator: "operator".into(),
                },
            }),
            Some(env(
                78,
                74,
                Event::OAuthGrantV1 {
                    tenant_id: "t-1".into(),
                    change: writ_api::oauth::GrantChangeV1::Decided {
                        request_id: "req-1".into(),
                        status: writ_api::oauth::AuthStatusV1::CodeIssued {
                            by: "operator".into(),
                            code_digest: "c".repeat(64),
                            expires_at_ms: 1_700_000_060_000,
                        },
                    },
                    at_ms: 1_700_000_000_000,
                },
            )),
        ),
        (
            "oauth_grant_v1_code",
            req(Command::OAuthGrant {
                tenant_id: "t-1".into(),
                step: writ_api::oauth::GrantStepV1::Code {
                    request_id: "req-1".into(),
                    browser_digest: "b".repeat(64),
                    code_digest: "c".repeat(64),
                },
            }),
            None,
        ),
        (
            "oauth_grant_v1_assertion",
            req(Command::OAuthGrant {
                tenant_id: "t-1".into(),
                step: writ_api::oauth::GrantStepV1::Redeem {
                    client_id: "agent".into(),
                    proof: writ_api::oauth::GrantProofV1::Assertion {
                        jti: "j-1".into(),
                        expires_at_ms: 1_700_000_300_000,
                        audience: "https://edge.example/t/acme/mcp".into(),
                    },
                    token: token_request(),
                    refresh: None,
                },
            }),
            Some(env(
                79,
                75,
                Event::OAuthGrantV1 {
                    tenant_id: "t-1".into(),
                    change: writ_api::oauth::GrantChangeV1::Redeemed {
                        client_id: "agent".into(),
                        used: writ_api::oauth::UsedProofV1::Assertion {
                            jti: "j-1".into(),
                            expires_at_ms: 1_700_000_300_000,
                        },
                        refresh: None,
                        audience: "https://edge.example/t/acme/mcp".into(),
                    },
                    at_ms: 1_700_000_000_000,
                },
            )),
        ),
        (
            "oauth_grant_v1_refresh_revoked",
            req(Command::OAuthGrant {
                tenant_id: "t-1".into(),
                step: writ_api::oauth::GrantStepV1::Revoke {
                    client_id: oauth_client().client_id,
                    refresh_id: "rt-1".into(),
                    secret_digest: "d".repeat(64),
                },
            }),
            Some(env(
                80,
                76,
                Event::OAuthGrantV1 {
                    tenant_id: "t-1".into(),
                    change: writ_api::oauth::GrantChangeV1::Revoked { refresh_id: "rt-1".into() },
                    at_ms: 1_700_000_000_000,
                },
            )),
        ),
        (
            "oauth_grant_v1_refreshed",
            req(Command::OAuthGrant {
                tenant_id: "t-1".into(),
                step: writ_api::oauth::GrantStepV1::Redeem {
                    client_id: oauth_client().client_id,
                    proof: writ_api::oauth::GrantProofV1::Refresh {
                        refresh_id: "rt-1".into(),
                        secret_digest: "d".repeat(64),
                    },
                    token: token_request(),
                    refresh: Some(writ_api::oauth::NewRefreshV1 {
                        refresh_id: "rt-2".into(),
                        secret_digest: "e".repeat(64),
                    }),
                },
            }),
            None,
        ),
        (
            "operator_set_v1",
            req(Command::SetOperator { operator: operator() }),
            Some(env(81, 1, Event::OperatorSetV1 { operator: operator() })),
        ),
        (
            "operator_session_opened_v1",
            req(Command::OpenOperatorSession { session: operator_session() }),
            Some(env(82, 2, Event::OperatorSessionOpenedV1 { session: operator_session() })),
        ),
        (
            "operator_acted_v1",
            req(Command::ByOperator {
                session_id: operator_session().session_id,
                command: Box::new(Command::CreateSite {
                    tenant_id: "t-1".into(),
                    site_id: "s-2".into(),
                    name: "plant-2".into(),
                    display_name: None,
                }),
            }),
            Some(env(
                83,
                77,
                Event::OperatorActedV1 {
                    tenant_id: "t-1".into(),
                    operator: "ann".into(),
                    role: writ_api::operator::OperatorRole::Approver,
                    command: "create_site".into(),
                },
            )),
        ),
        (
            "operator_sessions_closed_v1",
            req(Command::CloseOperatorSessions { operator: "ann".into(), session_id: Some("f".repeat(32)) }),
            Some(env(
                84,
                3,
                Event::OperatorSessionsClosedV1 { operator: "ann".into(), session_id: Some("f".repeat(32)) },
            )),
        ),
        (
            "operator_removed_v1",
            req(Command::RemoveOperator { name: "zed".into() }),
            Some(env(85, 4, Event::OperatorRemovedV1 { name: "zed".into() })),
        ),
        (
            "operator_session_used_v1",
            req(Command::UseOperatorSession { session_id: operator_session().session_id }),
            Some(env(
                87,
                6,
                Event::OperatorSessionUsedV1 { session_id: operator_session().session_id, at_ms: 1_700_000_000_000 },
            )),
        ),
        (
            "console_sign_in_set_v1",
            req(Command::SetConsoleSignIn { sign_in: Some(console_sign_in()) }),
            Some(env(86, 5, Event::ConsoleSignInSetV1 { sign_in: Some(console_sign_in()) })),
        ),
        (
            "executor_presence_v1",
            req(Command::SetExecutorPresence {
                tenant_id: "t-1".into(),
                executor_id: "x-1".into(),
                edge_id: "edge-1:8443".into(),
                connected: true,
            }),
            Some(env(
                88,
                91,
                Event::ExecutorPresenceV1 {
                    tenant_id: "t-1".into(),
                    executor_id: "x-1".into(),
                    edge_id: "edge-1:8443".into(),
                    connected: true,
                    changed: true,
                    at_ms: 1_700_000_000_000,
                },
            )),
        ),
        (
            "requests_decided_v2",
            req(Command::RecordDecisionsV2 { tenant_id: "t-1".into(), decisions: vec![chained_decision()] }),
            Some(env(
                89,
                92,
                Event::RequestsDecidedV2 { tenant_id: "t-1".into(), decisions: vec![chained_decision()] },
            )),
        ),
        (
            "audited_v2",
            req(Command::AuditedV2 {
                decision: chained_decision(),
                command: Box::new(Command::StartAttempt {
                    tenant_id: "t-1".into(),
                    operation_id: "op-1".into(),
                    executor_id: "x-1".into(),
                    fencing_token: 1,
                    lease_ms: 30_000,
                }),
            }),
            None,
        ),
        ("apply_retention_v2", req(Command::ApplyRetentionV2 { tenant_id: "t-1".into() }), None),
        (
            "raise_ledger_version",
            req(Command::RaiseLedgerVersion { version: 16 }),
            Some(env(90, 9, Event::LedgerVersionRaisedV1 { version: 16 })),
        ),
        (
            "raise_ledger_version_17",
            req(Command::RaiseLedgerVersion { version: 17 }),
            Some(env(91, 10, Event::LedgerVersionRaisedV1 { version: 17 })),
        ),
        (
            "raise_ledger_version_18",
            req(Command::RaiseLedgerVersion { version: 18 }),
            Some(env(92, 11, Event::LedgerVersionRaisedV1 { version: 18 })),
        ),
        (
            "raise_ledger_version_19",
            req(Command::RaiseLedgerVersion { version: 19 }),
            Some(env(93, 12, Event::LedgerVersionRaisedV1 { version: 19 })),
        ),
        (
            "works_retired_v1",
            req(Command::ApplyRetentionV2 { tenant_id: "t-1".into() }),
            Some(env(94, 93, Event::WorksRetiredV1 { tenant_id: "t-1".into(), work_ids: vec!["wo-9".into()] })),
        ),
        (
            "store_evidence_v2",
            req(Command::StoreEvidenceV2 {
                tenant_id: "t-1".into(),
                operation_id: "op-1".into(),
                mime_type: "text/plain".into(),
                content_hash: writ_api::sha256_hex(b"moved"),
                content: b"moved".to_vec(),
                by: Uploader::Executor { executor_id: "x-1".into() },
            }),
            None,
        ),
        (
            "report_attempt_v3",
            req(Command::ReportAttemptV3 {
                tenant_id: "t-1".into(),
                operation_id: "op-1".into(),
                fencing_token: 7,
                outcome: AttemptOutcome::Effect,
                evidence: evidence(),
                content: writ_api::evidence::EvidenceBytesV1 {
                    mime_type: "text/plain".into(),
                    bytes: b"moved".to_vec(),
                },
            }),
            None,
        ),
    ]
}

/// A decision with every field of its authority chain.
fn chained_decision() -> writ_api::audit::RequestDecisionV2 {
    writ_api::audit::RequestDecisionV2 { decision: decision(), authority: authority_chain() }
}

fn authority_chain() -> writ_api::audit::AuthorityChainV1 {
    writ_api::audit::AuthorityChainV1 {
        client_name: Some("claude-desktop".into()),
        client_version: Some("1.4.2".into()),
        protocol_version: Some("2025-11-25".into()),
        principal_kind: Some("agent".into()),
        delegation: vec!["jti-root".into(), "jti-1".into()],
        catalog_version: Some(3),
        policy_digest: Some("ab".repeat(32)),
        upstream: Some("shop".into()),
        upstream_tool: Some("place_order".into()),
        operation_id: Some("op-1".into()),
        attempt_id: Some("op-1/7".into()),
    }
}

/// An audit record as a node stores it: a record without an authority chain keeps the bytes
/// of `AuditRecordV1` (so the hash chain over records written before chains existed holds);
/// one with a chain has its own pinned form; both read back.
#[test]
fn stored_audit_records_are_pinned() {
    use writ_api::audit::{AuditRecord, AuditRecordV1};
    let v1 = AuditRecordV1 {
        seq: 7,
        at_ms: 1_700_000_000_000,
        revision: 42,
        trace_id: "tr-1".into(),
        tenant_id: "t-1".into(),
        domain: "request".into(),
        operation: "tools/call".into(),
        outcome: "allowed".into(),
        reason_code: None,
        principal_id: Some("p-1".into()),
        token_id: Some("jti-1".into()),
        parent_token_id: Some("jti-root".into()),
        detail: r#"{"method":"tools/call","name":"press.move"}"#.into(),
    };
    let plain = AuditRecord::from(v1.clone());
    assert_eq!(plain.stored(), writ_api::encode(&v1).unwrap(), "a chain-less record is stored as before");
    check("audit_record_v1", &plain.stored());
    let chained = AuditRecord { authority: Some(authority_chain()), ..plain.clone() };
    check("audit_record_with_authority", &chained.stored());
    for record in [plain, chained] {
        assert_eq!(AuditRecord::from_stored(&record.stored()).unwrap(), record);
    }
}

/// A node renders a record again from its stored event when it lists it, so the records each
/// sample event makes (`trail::records_for`, redaction included) are part of the stored format:
/// pinned by the sha256 of their stored bytes, one line per sample. A stored position (the
/// event's revision, the record's index) is pinned by its bytes.
#[test]
fn the_records_of_stored_events_are_pinned() {
    use sha2::Digest;
    use writ_api::audit::StoredRow;
    let lines: String = samples()
        .into_iter()
        .filter_map(|(name, _, env)| env.map(|env| (name, env)))
        .map(|(name, env)| {
            let mut digest = sha2::Sha256::new();
            let records = writ_api::trail::records_for(&env, &env.stream, 7);
            for record in &records {
                digest.update(record.stored());
            }
            assert_eq!(writ_api::trail::record_count(&env), records.len(), "{name}: counted as built");
            format!("{name} {} {}\n", records.len(), hex::encode(digest.finalize()))
        })
        .collect();
    pin("audit_records_of_events.txt", &lines, "a stored event would list other audit records than it was hashed as");
    let row = StoredRow::at_event(42, 3);
    check("audit_row_at_event", &row);
    assert_eq!(StoredRow::parse(&row).unwrap(), StoredRow::AtEvent { revision: 42, index: 3 });
}

fn operator() -> writ_api::operator::OperatorV1 {
    writ_api::operator::OperatorV1 {
        name: "ann".into(),
        role: writ_api::operator::OperatorRole::Approver,
        tenant_id: None,
        display_name: Some("Ann".into()),
        sign_in: Some(writ_api::operator::SignInV1 {
            issuer: "https://login.acme.example".into(),
            subject: "248289761001".into(),
        }),
    }
}

fn console_sign_in() -> writ_api::operator::ConsoleSignInV1 {
    writ_api::operator::ConsoleSignInV1 {
        issuer: "https://login.acme.example".into(),
        client_id: "writ-console".into(),
        allow_private_network: false,
    }
}

fn operator_session() -> writ_api::operator::OperatorSessionV1 {
    writ_api::operator::OperatorSessionV1 {
        session_id: "a".repeat(32),
        operator: "ann".into(),
        secret_sha256: "b".repeat(64),
        opened_at_ms: 1_700_000_000_000,
        expires_at_ms: 1_700_003_600_000,
        idle_timeout_ms: 1_800_000,
        last_used_at_ms: 1_700_000_000_000,
    }
}

fn oauth_settings() -> writ_api::oauth::OAuthSettingsV1 {
    writ_api::oauth::OAuthSettingsV1 { delegation_depth_max: 2, principal_claim: Some("client_id".into()) }
}

fn oauth_client() -> writ_api::oauth::OAuthClientV1 {
    writ_api::oauth::OAuthClientV1 {
        client_id: "https://host.example/writ-client.json".into(),
        principal_id: "p-1".into(),
        scopes: ["tools:list".to_string()].into(),
        redirect_uris: vec!["http://127.0.0.1:8123/callback".into()],
        jwks: None,
        name: Some("host".into()),
    }
}

fn auth_request() -> writ_api::oauth::AuthRequest {
    writ_api::oauth::AuthRequest {
        request: writ_api::oauth::AuthRequestV1 {
            request_id: "req-1".into(),
            client_id: oauth_client().client_id,
            redirect_uri: "http://127.0.0.1:8123/callback".into(),
            code_challenge: "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM".into(),
            scopes: ["tools:list".to_string()].into(),
            audience: "https://edge.example/t/acme/mcp".into(),
            state: Some("xyz".into()),
            browser_digest: "b".repeat(64),
        },
        status: writ_api::oauth::AuthStatusV1::Pending,
        requested_at_ms: 1_700_000_000_000,
        expires_at_ms: 1_700_000_600_000,
    }
}

fn refresh_token() -> writ_api::oauth::RefreshTokenV1 {
    writ_api::oauth::RefreshTokenV1 {
        refresh_id: "rt-1".into(),
        secret_digest: "d".repeat(64),
        client_id: oauth_client().client_id,
        principal_id: "p-1".into(),
        scopes: ["tools:list".to_string()].into(),
        audience: "https://edge.example/t/acme/mcp".into(),
        expires_at_ms: 1_702_592_000_000,
    }
}

fn issuer_source() -> writ_api::token::IssuerSourceV1 {
    writ_api::token::IssuerSourceV1 {
        issuer: "https://login.acme.example".into(),
        audience: "https://edge.example/t/acme/mcp".into(),
        allow_private_network: false,
    }
}

fn issuer_keys() -> writ_api::token::IssuerKeysV1 {
    writ_api::token::IssuerKeysV1 {
        jwks_uri: "https://login.acme.example/jwks".into(),
        jwks:
            r#"{"keys":[{"kty":"OKP","crv":"Ed25519","x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo","kid":"d1"}]}"#
                .into(),
    }
}

const SESSION_ID: &str = "0123456789abcdef0123456789abcdef";

fn mcp_session() -> writ_api::session::McpSessionV1 {
    writ_api::session::McpSessionV1 {
        principal_id: "p-1".into(),
        expires_at_ms: 1_800_000_000_000,
        log_level: Some("info".into()),
        subscriptions: vec!["writ://audit/recent".into()],
        ended: false,
    }
}

/// A cancel of `op-1` by `p-1` under the token `j-1`, as an edge submits it.
fn cancel_on_behalf_of() -> Command {
    let cancel = Command::CancelOperation {
        tenant_id: "t-1".into(),
        operation_id: "op-1".into(),
        by_principal_id: "p-1".into(),
    };
    Command::OnBehalfOf { authority_ref: "j-1".into(), command: Box::new(cancel) }
}

fn upstream_operation_catalog() -> CatalogV1 {
    let mut c = upstream_catalog();
    c.actions[0].execution = Execution::UpstreamOperation("shop/place_order".into());
    c
}

fn upstream_spec() -> writ_api::upstream::UpstreamSpecV1 {
    writ_api::upstream::UpstreamSpecV1 {
        url: "https://mcp.example.com/mcp".into(),
        auth: writ_api::upstream::UpstreamAuthV1::BearerEnv { var: "WRIT_UPSTREAM_WEATHER".into() },
        ca_pem: None,
        protocol: writ_api::upstream::UpstreamProtocol::Auto,
        connect_timeout_ms: 5_000,
        call_timeout_ms: 30_000,
    }
}

fn upstream() -> writ_api::upstream::UpstreamV1 {
    writ_api::upstream::UpstreamV1 {
        name: "weather".into(),
        spec: upstream_spec(),
        config_version: 1,
        created_at_ms: 1_700_000_000_000,
        updated_at_ms: 1_700_000_000_000,
        pinned: None,
        pending: None,
        fuses: Default::default(),
    }
}

fn upstream_tools() -> writ_api::upstream::UpstreamToolsV1 {
    let tool = writ_api::upstream::UpstreamToolV1 {
        name: "forecast".into(),
        title: None,
        description: "Today's forecast.".into(),
        input_schema: r#"{"type":"object"}"#.into(),
        output_schema: None,
        annotations: Some(r#"{"readOnlyHint":true}"#.into()),
    };
    writ_api::upstream::UpstreamToolsV1::new(vec![tool], 1_700_000_000_000).expect("a valid tool set")
}

fn fuse() -> writ_api::upstream::FuseV1 {
    writ_api::upstream::FuseV1 {
        open: true,
        failures: 3,
        reason: "connection refused".into(),
        config_version: 1,
        changed_at_ms: 1_700_000_000_000,
    }
}

fn upstream_catalog() -> CatalogV1 {
    let mut c = catalog();
    c.actions[0].execution = Execution::Upstream("weather/forecast".into());
    c.actions[0].device_class = None;
    c
}

fn evidence_blob() -> EvidenceBlobV1 {
    EvidenceBlobV1 {
        content_hash: writ_api::sha256_hex(b"moved"),
        operation_id: "op-1".into(),
        mime_type: "text/plain".into(),
        size: 5,
        by: Uploader::Principal { principal_id: "p-1".into() },
        at_ms: 1_700_000_000_000,
    }
}

fn work_scope() -> WorkScopeV1 {
    WorkScopeV1 { actions: vec!["move_press".into()], devices: vec!["d-1".into()], cost_ceiling: Some(10) }
}

fn revoked_role_certificate() -> RevokedRoleCertificateV1 {
    RevokedRoleCertificateV1 { serial: "7f01".into(), identity: "edge:a".into(), not_after_ms: 1_800_000_000_000 }
}

fn operation_spec() -> OperationSpecV1 {
    OperationSpecV1 {
        operation_id: "op-1".into(),
        principal_id: "p-1".into(),
        authority_ref: "j-1".into(),
        action: "move_press".into(),
        payload_hash: "ef".repeat(32),
        input: r#"{"position_mm":120}"#.into(),
        idempotency_key: "k-1".into(),
        deadline_ms: 1_700_000_060_000,
        cost_units: 2,
        cost_ceiling: Some(5),
        device_id: Some("d-1".into()),
        work_ref: Some(WorkRef { id: "wo-9".into(), revision: 3 }),
        preconditions: [("door".to_string(), "closed".to_string())].into_iter().collect(),
        trace_id: "trace-1".into(),
        input_requests: [("confirm".to_string(), r#"{"method":"elicitation/create"}"#.to_string())]
            .into_iter()
            .collect(),
    }
}

fn evidence() -> EvidenceV1 {
    EvidenceV1 { content_hash: "cd".repeat(32), evidence_return_ref: "s3://ev/1".into(), summary: "moved".into() }
}

fn decision() -> RequestDecisionV1 {
    RequestDecisionV1 {
        trace_id: "tr-1".into(),
        principal_id: "p-1".into(),
        token_id: Some("j-1".into()),
        parent_token_id: None,
        method: "tools/list".into(),
        name: None,
        outcome: "denied".into(),
        reason: Some(ReasonCode::APP_SCOPE_FORBIDDEN),
    }
}

fn enrollment() -> EnrollmentV1 {
    EnrollmentV1 {
        enrollment_id: "e-1".into(),
        site_id: "s-1".into(),
        device_ids: ["d-1".to_string()].into_iter().collect(),
        token_sha256: "ab".repeat(32),
        ttl_s: 3600,
    }
}

fn executor_cert() -> ExecutorCertV1 {
    ExecutorCertV1 {
        executor_id: "x-1".into(),
        fingerprint: "cd".repeat(32),
        serial: "01".repeat(16),
        not_after_ms: 1_800_000_000_000,
        ca_fingerprint: "ef".repeat(32),
    }
}

fn executor_ca() -> ExecutorCaV1 {
    ExecutorCaV1 { fingerprint: "ef".repeat(32), cert_der: vec![0x30, 0x03, 0x02, 0x01, 0x01] }
}

fn catalog() -> CatalogV1 {
    CatalogV1 {
        actions: vec![CatalogActionV1 {
            id: "move_arm".into(),
            title: "Move the arm".into(),
            description: "".into(),
            input_schema: r#"{"type":"object"}"#.into(),
            output_schema: None,
            risk: Risk::High,
            execution: Execution::Operation,
            dry_run: true,
            idempotent: false,
            device_class: Some("robot-arm.v2".into()),
            cost_units: 3,
            scope: "tools:call:move_arm".into(),
        }],
        digest: "00".repeat(32),
    }
}

fn signing_key() -> SigningKeyV1 {
    SigningKeyV1 { kid: "0123456789abcdef".into(), alg: "EdDSA".into(), public_key: vec![7; 32] }
}

fn tenant_issuer() -> TenantIssuerV1 {
    TenantIssuerV1 {
        issuer: "https://idp.example".into(),
        audience: "writ-prod".into(),
        jwks: r#"{"keys":[{"kty":"OKP","crv":"Ed25519","x":"AAAA","kid":"k1"}]}"#.into(),
    }
}

fn token_request() -> TokenRequestV1 {
    TokenRequestV1 {
        jti: "j-2".into(),
        principal_id: "p-1".into(),
        scopes: ["ops:read".to_string()].into_iter().collect(),
        ttl_s: 3600,
        parent_jti: Some("j-1".into()),
    }
}

fn token_record() -> TokenRecordV1 {
    TokenRecordV1 {
        jti: "j-2".into(),
        principal_id: "p-1".into(),
        scopes: ["ops:read".to_string()].into_iter().collect(),
        issued_at_ms: 1_700_000_000_000,
        expires_at_ms: 1_700_003_600_000,
        parent_jti: Some("j-1".into()),
        depth: 1,
    }
}

fn principal_spec() -> PrincipalSpecV1 {
    PrincipalSpecV1 {
        principal_id: "p-1".into(),
        name: "planner".into(),
        kind: PrincipalKind::Agent,
        preset: Some(RolePreset::Full),
        scopes: ["tools:call:move_arm".to_string()].into_iter().collect(),
        metadata: [("team".to_string(), "lab".to_string())].into_iter().collect(),
    }
}

fn check(name: &str, bytes: &[u8]) {
    pin(&format!("{name}.hex"), &hex::encode(bytes), "persisted data would no longer decode");
}

/// `text` against the golden file `file` (written by `WRIT_BLESS=1` when it does not exist yet).
fn pin(file: &str, text: &str, why: &str) {
    let path = format!("{}/tests/golden/{file}", std::env::var("CARGO_MANIFEST_DIR").expect("run by cargo"));
    if std::env::var_os("WRIT_BLESS").is_some() && !std::path::Path::new(&path).exists() {
        std::fs::write(&path, format!("{}\n", text.trim_end())).expect("bless golden file");
    }
    let pinned = std::fs::read_to_string(&path)
        .unwrap_or_else(|_| panic!("missing golden file {path}: bless new samples with WRIT_BLESS=1"));
    assert_eq!(pinned.trim_end(), text.trim_end(), "{file} changed: {why}");
}

/// The version gate, derived from the samples: the ledger version each sample command needs is
/// pinned (a command whose version fell would be proposed to members that cannot decode it),
/// and the newest version this build advertises is the newest a sample needs — raising
/// `LEDGER_VERSION` takes a sample of what it adds, and a sample beyond it fails.
#[test]
fn the_ledger_version_gate_is_pinned_by_the_samples() {
    let needs: Vec<(&str, u32)> =
        samples().iter().map(|(name, req, _)| (*name, req.command.ledger_version())).collect();
    let table: String = needs.iter().map(|(name, v)| format!("{name} {v}\n")).collect();
    pin("ledger_versions.txt", &table, "a command's ledger version moved; a new command needs a new variant");
    let newest = needs.iter().map(|(_, v)| *v).max();
    assert_eq!(newest, Some(writ_api::ledger::LEDGER_VERSION), "the newest version a sample needs");
    for v in 1..=writ_api::ledger::LEDGER_VERSION {
        assert!(needs.iter().any(|(_, n)| *n == v), "no sample of what ledger version {v} added");
    }
}

#[test]
fn persisted_encodings_are_pinned() {
    for (name, req, env) in samples() {
        let bytes = writ_api::encode(&req).unwrap();
        check(&format!("{name}.command"), &bytes);
        assert_eq!(writ_api::decode::<LedgerRequest>(&bytes).unwrap(), req);
        if let Some(env) = env {
            let bytes = writ_api::encode(&env).unwrap();
            check(&format!("{name}.event"), &bytes);
            assert_eq!(writ_api::decode::<EventEnvelope>(&bytes).unwrap(), env);
        }
    }
    let outcome = Outcome::Rejected { reason: ReasonCode::TENANT_ALREADY_EXISTS, message: "dup".into(), revision: 9 };
    check("outcome_rejected", &writ_api::encode(&outcome).unwrap());
}

#[test]
fn trailing_bytes_are_rejected() {
    let mut bytes = writ_api::encode(&ReasonCode::INTERNAL).unwrap();
    bytes.push(0);
    assert!(writ_api::decode::<ReasonCode>(&bytes).is_err());
}

/// A state built by every sample command (applied or rejected): it touches most views.
/// Samples added while state format N was the newest, after its state sample
/// (`ledger_state_v<N>`) was pinned: they pin their own encodings and stay out of the state
/// samples of format N and older — so each pinned state, and the check that its old bytes
/// still decode, stays as it was.
const ADDED_AFTER_THE_STATE_SAMPLE: &[(u32, &[&str])] = &[
    (
        1,
        &[
            "on_behalf_of",
            "executor_cert_renewed_v1",
            "audited",
            "issuer_token_revoked_v1",
            "signing_key_retired_v1",
            "executor_ca_retired_v1",
            "role_certificate_revoked_v1",
        ],
    ),
    (2, &["operation_proposed_v1", "proposal_used_v1"]),
    (3, &["requests_decided_v1", "work_created_v1", "work_revised_v1", "operation_refused_v1", "scope_granted_v1"]),
    (4, &["evidence_stored_v1"]),
    (5, &["tenant_deleted_v1", "tenant_purged_v1", "evidence_expired_v1", "report_attempt_v2"]),
    (6, &["operations_compacted_v1", "bindings_released_v1", "credentials_retired_v1"]),
    // Upstreams came with state format 7: out of the older states' samples, in 7's.
    (
        6,
        &[
            "upstream_set_v1",
            "upstream_tools_observed_v1",
            "upstream_tools_approved_v1",
            "upstream_fuse_changed_v1",
            "upstream_removed_v1",
            "catalog_published_v1_upstream",
        ],
    ),
    // Upstream operations came with state format 8.
    (7, &["operation_upstream_bound_v1", "catalog_published_v1_upstream_operation"]),
    // Batch entries came after state format 8, verified ones after 9 (neither changes a
    // state format); anonymous access came with state format 10.
    (8, &["batch"]),
    (9, &["verified", "create_tenant_with", "anonymous_access_set_v1"]),
    // Principals created with their quotas came after state format 10 was pinned; session records
    // came with state format 11.
    (10, &["create_principal_with", "session_state_set_v1"]),
    // Issuers known by their URL came with state format 12.
    (11, &["issuer_source_set_v1", "observe_issuer_keys"]),
    // The tenants' authorization servers came with state format 13.
    (
        12,
        &[
            "oauth_client_set_v1",
            "oauth_client_removed_v1",
            "oauth_grant_v1_requested",
            "oauth_grant_v1_redeemed",
            "oauth_settings_set_v1",
            "oauth_grant_v1_decided",
            "oauth_grant_v1_code",
            "oauth_grant_v1_assertion",
            "oauth_grant_v1_refresh_revoked",
            "oauth_grant_v1_refreshed",
        ],
    ),
    // Named operators came with state format 14.
    (
        13,
        &[
            "operator_set_v1",
            "operator_session_opened_v1",
            "operator_acted_v1",
            "operator_sessions_closed_v1",
            "operator_removed_v1",
            "console_sign_in_set_v1",
            "operator_session_used_v1",
        ],
    ),
    // Executor presence came with state format 15.
    (14, &["executor_presence_v1"]),
    // Decisions with their authority chains came after state format 15 (no state change).
    (15, &["requests_decided_v2", "audited_v2"]),
    (16, &["apply_retention_v2"]),
    // The ledger version in force came with state format 19.
    (18, &["raise_ledger_version"]),
    // Audit times in whole seconds, then smaller retention entries, came after state format 19
    // (no state change).
    (19, &["raise_ledger_version_17", "raise_ledger_version_18"]),
    // Retention of closed work items and blobs as bytes came after state format 21 (the same
    // layout).
    (21, &["raise_ledger_version_19", "works_retired_v1", "store_evidence_v2", "report_attempt_v3"]),
];

/// The state every sample command of state format `format` builds (applied or rejected).
fn sample_state(format: u32) -> writ_api::state::LedgerState {
    let later: Vec<&str> = ADDED_AFTER_THE_STATE_SAMPLE
        .iter()
        .filter(|(since, _)| *since >= format)
        .flat_map(|(_, names)| names.iter().copied())
        .collect();
    let mut state = writ_api::state::LedgerState::default();
    for (_, req, _) in samples().into_iter().filter(|(name, ..)| !later.contains(name)) {
        state.execute(&req);
    }
    if format >= 4 {
        // The sample submissions are refused (their authority is no live token), so the
        // history of one is pinned as written.
        let step = writ_api::operation::TransitionV1 {
            from: Some(OperationState::Dispatched),
            to: OperationState::Failed,
            cause: "refused".into(),
            reason: Some(ReasonCode::PRECONDITION_FAILED),
            at_ms: 1_700_000_000_000,
            revision: 49,
            trace_id: "trace-1".into(),
        };
        state.history.entry("t-1".into()).or_default().insert("op-1".into(), vec![step]);
    }
    if format >= 5 {
        // Likewise a stored blob's record.
        let slot = writ_api::state::evidence_slot("op-1", &evidence_blob().content_hash);
        state.evidence.entry("t-1".into()).or_default().insert(slot, evidence_blob());
        state.rebuild_index();
    }
    if format >= 6 {
        // And a compacted operation's binding.
        let op = writ_api::operation::Operation {
            tenant_id: "t-1".into(),
            spec: operation_spec(),
            state: OperationState::Failed,
            executor_id: Some("x-1".into()),
            fencing_token: Some(7),
            attempts: 1,
            lease_expires_at_ms: None,
            evidence: vec![evidence()],
            observations: vec![],
            answers: Default::default(),
            cancel_requested: false,
            cause: "refused".into(),
            created_at_ms: 1_700_000_000_000,
            updated_at_ms: 1_700_000_001_000,
            revision: 49,
        };
        state.compacted.entry("t-1".into()).or_default().insert("op-1".into(), op.binding());
        state.rebuild_index();
    }
    if format >= 8 {
        // And an upstream operation waiting for its attempt.
        state.upstream_operations.entry("t-1".into()).or_default().insert("op-2".into(), "shop/place_order".into());
    }
    if format >= 11 {
        // And an MCP session's record.
        state.sessions.entry("t-1".into()).or_default().insert(SESSION_ID.into(), mcp_session());
    }
    if format >= 12 {
        // And an issuer known by its URL (its tenant is deleted by then, so set as written).
        let source = writ_api::token::IssuerSource {
            tenant_id: "t-1".into(),
            spec: issuer_source(),
            jwks_uri: issuer_keys().jwks_uri,
            revision: 72,
        };
        state.issuer_sources.insert(source.spec.issuer.clone(), source);
    }
    if format >= 13 {
        // And a tenant's authorization server (set as written, its tenant being deleted).
        let oauth = state.oauth.entry("t-1".into()).or_default();
        oauth.settings = oauth_settings();
        oauth.clients.insert(oauth_client().client_id, oauth_client());
        oauth.requests.insert("req-1".into(), auth_request());
        oauth.refresh_tokens.insert("rt-1".into(), refresh_token());
        oauth.assertions.insert(writ_api::oauth::assertion_key("agent", "j-1"), 1_700_000_300_000);
    }
    if format >= 15 {
        // And an executor's connection (set as written, its tenant being deleted).
        let presence = writ_api::device::ExecutorPresenceV1 {
            edge_id: "edge-1:8443".into(),
            connected: true,
            since_ms: 1_700_000_000_000,
            confirmed_at_ms: 1_700_000_120_000,
            last_dispatch: Some(("op-1".into(), 1_700_000_060_000)),
        };
        state.executor_presence.entry("t-1".into()).or_default().insert("x-1".into(), presence);
    }
    if format >= 20 {
        // And token records (as issued, the root revoked with its child): cold rows from
        // format 20 on, where the move below puts them.
        let record = |jti: &str, parent: Option<&str>, depth| writ_api::token::TokenRecordV1 {
            jti: jti.into(),
            principal_id: "p-1".into(),
            scopes: ["ops:read".to_string()].into(),
            issued_at_ms: 1_700_000_000_000,
            expires_at_ms: 1_700_003_600_000,
            parent_jti: parent.map(Into::into),
            depth,
        };
        let token = |record: writ_api::token::TokenRecordV1| writ_api::token::Token {
            tenant_id: "t-1".into(),
            record,
            revoked_at_ms: Some(1_700_000_060_000),
            revoked_via: Some("j-root".into()),
        };
        let tokens = state.tokens.entry("t-1".into()).or_default();
        tokens.insert("j-root".into(), token(record("j-root", None, 0)));
        tokens.insert("j-child".into(), token(record("j-child", Some("j-root"), 1)));
        let children = state.token_children.entry("t-1".into()).or_default();
        children.entry("j-root".into()).or_default().insert("j-child".into());
    }
    // What a decode does to a state of any format: what is now kept as cold rows moves there.
    state.cool();
    state
}

/// A decoded state as text, to pin (`ledger_state_v<N>.decoded.txt`): every view as `Debug`
/// renders it, then each cold row the state holds (key, revision, value). Each older format's
/// decoded form is frozen this way when its bytes are, so what decoding and upgrading it makes
/// is checked against what it made then — not only against a state today's rules build.
fn frozen(state: &writ_api::state::LedgerState) -> String {
    let mut out = format!("{state:#?}\n");
    for (key, row) in state.cold.pending_rows() {
        let value = row.value.as_deref().map_or_else(|| "deleted".to_string(), hex::encode);
        out.push_str(&format!("row {} @{} {value}\n", hex::encode(key), row.revision));
    }
    out
}

/// The whole-state encoding (snapshots, what edges load) is pinned too: a change to any view
/// fails here until `format::STATE_FORMAT_VERSION` is raised and the old layout is still read
/// or refused on purpose.
#[test]
fn the_state_format_is_versioned_and_pinned() {
    use writ_api::format::{self, FormatError, STATE_FORMAT_VERSION};
    use writ_api::state::LedgerState;
    let state = sample_state(STATE_FORMAT_VERSION);
    assert!(state.revision > 10, "the sample state holds events: {}", state.revision);
    assert!(
        !state.revocations.signing_keys.is_empty() && !state.revocations.role_certificates.is_empty(),
        "the sample state holds revocations"
    );
    assert!(
        state.work_count("t-1") > 0 && !state.history.is_empty(),
        "the sample state holds work items and histories"
    );
    assert!(state.cold.works("t-1", None, 1).len() == 1, "its closed work item is a cold row");
    let cold = state.cold.tenants.get("t-1").cloned().unwrap_or_default();
    assert!(cold.bindings > 0 && cold.evidence > 0, "the sample state holds evidence and bindings");
    assert!(!state.cold.pending_rows().is_empty(), "the sample state holds cold rows");
    assert!(!state.operators.sessions.is_empty(), "the sample state holds an operator and a session");
    assert!(state.operators.console_sign_in.is_some(), "the sample state holds the console's sign-in provider");
    assert!(!state.executor_presence.is_empty(), "the sample state holds an executor's connection");
    let versioned = state.encode_versioned();
    check(&format!("ledger_state_v{STATE_FORMAT_VERSION}"), &versioned);
    let decoded = LedgerState::decode_versioned(&versioned).expect("current version");
    pin(&format!("ledger_state_v{STATE_FORMAT_VERSION}.decoded.txt"), &frozen(&decoded), "decoding changed");
    assert_eq!(decoded, state);
    // Every older format's pinned bytes still decode, to the state its samples built.
    for format in 1..STATE_FORMAT_VERSION {
        let path = format!("{}/tests/golden/ledger_state_v{format}.hex", env!("CARGO_MANIFEST_DIR"));
        let old = hex::decode(std::fs::read_to_string(&path).expect("pinned state").trim()).expect("hex");
        let decoded = LedgerState::decode_versioned(&old).expect("an older format");
        pin(&format!("ledger_state_v{format}.decoded.txt"), &frozen(&decoded), "decoding the old bytes changed");
        assert_eq!(decoded, sample_state(format), "format {format}");
        // A backup or snapshot transfer file its build wrote reads back here (its digest is
        // over the bytes that build encoded).
        let mut backup = Vec::new();
        let w = writ_api::backup::BackupWriter::begin_encoded(&mut backup, 1, 9, &decoded, &old, 1 << 20);
        w.expect("backup of an older format").end().expect("backup written");
        let read = writ_api::backup::read_backup(&backup[..], |_, _, _| Ok(()));
        let (_, read) = read.unwrap_or_else(|e| panic!("format {format}: the backup reads back: {e}"));
        assert_eq!(read, decoded, "format {format}: restored");
        // Upgraded at its own revision, each tenant's rows are keyed as a fold keys them.
        for (id, tenant) in &decoded.tenants {
            assert_eq!(decoded.cold.tenants[id].incarnation, tenant.created_at_ms, "format {format}: {id}");
        }
    }
    // The layout written before versions existed (no header) is format 1's, and still decodes.
    let v1 = sample_state(1);
    assert_eq!(LedgerState::decode_versioned(&writ_api::encode(&v1).unwrap()).expect("pre-version layout"), v1);
    // A newer version is refused with a clear error, never misread.
    let mut newer = versioned.clone();
    newer[8..12].copy_from_slice(&(STATE_FORMAT_VERSION + 1).to_le_bytes());
    let refused = LedgerState::decode_versioned(&newer).expect_err("a newer format is refused");
    assert!(refused.contains("newer than this build reads"), "{refused}");
    assert_eq!(
        format::unwrap(format::SNAPSHOT_MAGIC, &format::wrap(format::SNAPSHOT_MAGIC, b"x")[..8]),
        Err(FormatError::Truncated),
        "a truncated header is refused"
    );
    assert!(matches!(
        format::unwrap(format::STATE_MAGIC, &newer),
        Err(FormatError::Newer { found, newest }) if found == STATE_FORMAT_VERSION + 1 && newest == STATE_FORMAT_VERSION
    ));
}
