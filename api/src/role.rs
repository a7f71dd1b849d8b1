//! Who may call the ledger's client API, by the role its certificate names (SPEC S1, S2).
//!
//! A peer's mutual-TLS certificate carries one SAN URI `urn:writ:<role>:<id>` issued by the
//! cluster CA (`writ pki issue`). This module is the one place that says what each role may
//! submit and read; the node's listener asks it before it reads a request body.

use crate::dto::Query;
use crate::ledger::Command;

/// Prefix of the SAN URI naming a role identity.
pub const IDENTITY_URI_PREFIX: &str = "urn:writ:";
/// Longest id a role identity may carry (node ids are numbers; edge and operator names).
pub const IDENTITY_ID_MAX: usize = 64;

/// A role of the cluster's PKI (executors have their own, per-tenant CAs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Role {
    /// A ledger node: Raft, and every client-API call (a node forwards its admin API's commands
    /// to the leader through it).
    Node,
    /// An MCP edge: the commands and reads serving agents and executors needs, nothing else.
    Edge,
    /// An operator (admin CLI, automation): the admin API only.
    Operator,
}

impl Role {
    pub const ALL: [Role; 3] = [Role::Node, Role::Edge, Role::Operator];

    pub fn as_str(self) -> &'static str {
        match self {
            Role::Node => "node",
            Role::Edge => "edge",
            Role::Operator => "operator",
        }
    }

    pub fn parse(text: &str) -> Option<Role> {
        Role::ALL.into_iter().find(|r| r.as_str() == text)
    }

    /// Whether this role may call the Raft RPCs (`/raft/*`).
    pub fn may_replicate(self) -> bool {
        self == Role::Node
    }

    /// Whether this role may follow the ledger (snapshot, watch, status, read index).
    pub fn may_follow(self) -> bool {
        matches!(self, Role::Node | Role::Edge)
    }

    /// Whether this role may change membership through the client API (`POST /client/cluster`):
    /// only a node forwarding an operator-authenticated admin request.
    pub fn may_change_membership(self) -> bool {
        self == Role::Node
    }

    /// Whether this role may submit `command`. Edges submit only what serving agents and
    /// executors needs: never tenancy, principals, tokens, issuers, signing keys, catalogs,
    /// enrollment or membership.
    pub fn may_submit(self, command: &Command) -> bool {
        match self {
            Role::Node => true,
            Role::Operator => false,
            Role::Edge => {
                matches!(
                    command,
                    Command::RecordDecisions { .. }
                        | Command::RecordDecisionsV2 { .. }
                        | Command::LeaseRequestQuota { .. }
                        | Command::SubmitOperation { .. }
                        | Command::ProposeOperation { .. }
                        | Command::SubmitProposed { .. }
                        | Command::StartAttempt { .. }
                        | Command::RenewAttemptLease { .. }
                        | Command::ReportAttempt { .. }
                        | Command::ReportAttemptV2 { .. }
                        | Command::ReportAttemptV3 { .. }
                        | Command::RefuseDispatch { .. }
                        | Command::RefuseDispatchV2 { .. }
                        | Command::StoreEvidence { by: crate::evidence::Uploader::Executor { .. }, .. }
                        | Command::StoreEvidenceV2 { by: crate::evidence::Uploader::Executor { .. }, .. }
                        | Command::SetUpstreamFuse { .. }
                        | Command::ObserveUpstreamTools { .. }
                        | Command::SetExecutorPresence { .. }
                ) || matches!(
                    // A principal's act only with the authority it was admitted under (the ledger
                    // re-checks it), never bare.
                    command,
                    Command::OnBehalfOf { command, .. } if command.principal_act().is_some()
                ) || matches!(
                    // What an edge may submit, with the decision of the request that made it.
                    command,
                    Command::Audited { command, .. } | Command::AuditedV2 { command, .. }
                        if !matches!(**command, Command::Audited { .. } | Command::AuditedV2 { .. })
                            && self.may_submit(command)
                )
            }
        }
    }

    /// Whether this role may call the admin API route `path` on a listener that requires client
    /// certificates: operators every route, edges only `/v1/enroll`, `/v1/renew`,
    /// `/v1/token-exchange` and `/v1/oauth/grant` (the enrollments, renewals, token exchanges
    /// and authorization steps they forward); the
    /// operator token (or the enrollment token, the renewal proof, the subject token) is checked
    /// after this, as everywhere.
    pub fn may_administer(self, path: &str) -> bool {
        match self {
            Role::Operator => true,
            Role::Edge => [
                crate::executor::ADMIN_ENROLL_PATH,
                crate::executor::ADMIN_RENEW_PATH,
                crate::dto::ADMIN_TOKEN_EXCHANGE_PATH,
                crate::dto::ADMIN_OAUTH_GRANT_PATH,
            ]
            .contains(&path),
            Role::Node => false,
        }
    }

    /// Whether this role may run `query`. Edges read operations (with their histories) and a tenant's recent audit
    /// (`audit/recent` resource); everything else they need comes from their replica.
    pub fn may_query(self, query: &Query) -> bool {
        match self {
            Role::Node => true,
            Role::Operator => false,
            Role::Edge => {
                matches!(
                    query,
                    Query::GetOperation { .. }
                        | Query::GetOperationByKey { .. }
                        | Query::GetOperationHistory { .. }
                        | Query::GetEvidence { .. }
                        | Query::GetWork { .. }
                        | Query::ListAudit { .. }
                        | Query::RecentAudit { .. }
                )
            }
        }
    }
}

/// A role identity as a certificate names it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Identity {
    pub role: Role,
    pub id: String,
}

impl Identity {
    /// The SAN URI that names this identity.
    pub fn uri(&self) -> String {
        format!("{IDENTITY_URI_PREFIX}{}:{}", self.role.as_str(), self.id)
    }

    /// Parses `urn:writ:<role>:<id>`; `None` for any other URI (an executor's
    /// `urn:writ:executor:…` included: executors are not cluster roles).
    pub fn from_uri(uri: &str) -> Option<Identity> {
        Identity::parse(uri.strip_prefix(IDENTITY_URI_PREFIX)?)
    }

    /// Parses the display form `<role>:<id>` (e.g. `edge:a`).
    pub fn parse(text: &str) -> Option<Identity> {
        let (role, id) = text.split_once(':')?;
        Identity::new(Role::parse(role)?, id)
    }

    /// An identity with a valid id: 1–64 of `[A-Za-z0-9._-]`; a node's id is a number ≥ 1.
    pub fn new(role: Role, id: &str) -> Option<Identity> {
        let valid = !id.is_empty()
            && id.len() <= IDENTITY_ID_MAX
            && id.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
        let node_ok = role != Role::Node || id.parse::<u64>().is_ok_and(|n| n >= 1);
        (valid && node_ok).then(|| Identity { role, id: id.to_string() })
    }
}

impl std::fmt::Display for Identity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.role.as_str(), self.id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identity_uris_round_trip_and_reject_everything_else() {
        let edge = Identity::new(Role::Edge, "e-1").unwrap();
        assert_eq!(Identity::from_uri(&edge.uri()), Some(edge));
        assert_eq!(Identity::from_uri("urn:writ:node:3").map(|i| i.role), Some(Role::Node));
        for bad in [
            "urn:writ:node:0",
            "urn:writ:node:x",
            "urn:writ:executor:t:e",
            "urn:writ:edge:",
            "urn:writ:edge:a/b",
            "urn:other:edge:a",
            "urn:writ:edge",
        ] {
            assert_eq!(Identity::from_uri(bad), None, "{bad}");
        }
        assert_eq!(Identity::new(Role::Operator, &"a".repeat(IDENTITY_ID_MAX + 1)), None);
    }

    #[test]
    fn edges_submit_only_serving_commands() {
        let issuer = Command::RemoveTenantIssuer { tenant_id: "t".into(), issuer: "i".into() };
        let lease = Command::LeaseRequestQuota { tenant_id: "t".into(), principal_id: "p".into(), wanted: 1 };
        assert!(Role::Node.may_submit(&issuer));
        assert!(!Role::Edge.may_submit(&issuer));
        assert!(Role::Edge.may_submit(&lease));
        assert!(!Role::Operator.may_submit(&lease));
        // Edges watch upstreams for drift: an observed set is only ever pending.
        let tools = crate::upstream::UpstreamToolsV1::new(Vec::new(), 0).expect("an empty set");
        let observed = Command::ObserveUpstreamTools { tenant_id: "t".into(), name: "u".into(), tools };
        assert!(Role::Edge.may_submit(&observed));
        assert!(!Role::Edge.may_replicate() && !Role::Edge.may_change_membership() && Role::Edge.may_follow());
        // A principal's act: only wrapped in the authority it was admitted under.
        let cancel =
            Command::CancelOperation { tenant_id: "t".into(), operation_id: "o".into(), by_principal_id: "p".into() };
        assert!(!Role::Edge.may_submit(&cancel) && Role::Node.may_submit(&cancel));
        let wrapped = |command: Command| Command::OnBehalfOf { authority_ref: "j".into(), command: Box::new(command) };
        assert!(Role::Edge.may_submit(&wrapped(cancel)));
        assert!(!Role::Edge.may_submit(&wrapped(issuer.clone())), "only acts on operations are wrapped");
        // A command with its request's decision: only what the edge may submit bare (or wrapped).
        let decision = crate::audit::RequestDecisionV1 {
            trace_id: "t".into(),
            principal_id: "p".into(),
            token_id: None,
            parent_token_id: None,
            method: "tools/call".into(),
            name: None,
            outcome: "allowed".into(),
            reason: None,
        };
        let audited = |command: Command| Command::Audited { decision: decision.clone(), command: Box::new(command) };
        assert!(Role::Edge.may_submit(&audited(lease.clone())));
        assert!(Role::Edge.may_submit(&audited(wrapped(Command::CancelOperation {
            tenant_id: "t".into(),
            operation_id: "o".into(),
            by_principal_id: "p".into(),
        }))));
        assert!(!Role::Edge.may_submit(&audited(issuer.clone())), "a decision does not widen what an edge submits");
        assert!(!Role::Edge.may_submit(&audited(audited(lease.clone()))));
        let chained = crate::audit::RequestDecisionV2 { decision: decision.clone(), authority: Default::default() };
        let audited_v2 =
            |command: Command| Command::AuditedV2 { decision: chained.clone(), command: Box::new(command) };
        assert!(Role::Edge.may_submit(&audited_v2(lease.clone())));
        assert!(!Role::Edge.may_submit(&audited_v2(issuer.clone())), "nor does a decision with its chain");
        assert!(!Role::Edge.may_submit(&audited_v2(audited(lease.clone()))));
        // An operator's act is formed by a node's admin API only, in any wrapping.
        let by_operator = |command: Command| Command::ByOperator { session_id: "s".into(), command: Box::new(command) };
        assert!(
            !Role::Edge.may_submit(&by_operator(lease.clone())) && Role::Node.may_submit(&by_operator(lease.clone()))
        );
        assert!(!Role::Edge.may_submit(&audited(by_operator(lease.clone()))));
        assert!(!Role::Edge.may_submit(&wrapped(by_operator(lease.clone()))));
        let dispatch =
            Command::DispatchOperation { tenant_id: "t".into(), operation_id: "o".into(), executor_id: "x".into() };
        assert!(!Role::Edge.may_submit(&dispatch), "an executor's start claims; edges no longer dispatch");
        let tenants = Query::ListTenants { after: None, limit: 1 };
        assert!(!Role::Edge.may_query(&tenants) && Role::Node.may_query(&tenants));
        // An executor's coded refusal goes through its edge; work items, grants and deletions
        // are the operator's.
        let refusal = Command::RefuseDispatchV2 {
            tenant_id: "t".into(),
            operation_id: "o".into(),
            executor_id: "x".into(),
            fencing_token: 1,
            reason: crate::ReasonCode::PRECONDITION_FAILED,
            message: "door open".into(),
        };
        assert!(Role::Edge.may_submit(&refusal));
        let operators = [
            Command::CreateWork {
                tenant_id: "t".into(),
                work_id: "w".into(),
                title: "t".into(),
                owner: "o".into(),
                scope: Default::default(),
                by: "p".into(),
            },
            Command::GrantScope { tenant_id: "t".into(), principal_id: "p".into(), scope: "ops:read".into() },
            Command::DeleteTenant { tenant_id: "t".into(), note: None },
        ];
        for command in operators {
            assert!(!Role::Edge.may_submit(&command) && Role::Node.may_submit(&command), "{command:?}");
        }
        let history = Query::GetOperationHistory { tenant_id: "t".into(), operation_id: "o".into() };
        assert!(Role::Edge.may_query(&history), "readback and the operation resource read the history");
    }
}
