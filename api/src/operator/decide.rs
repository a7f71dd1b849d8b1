//! Named operators: who they are, their role and scope, their sessions, and what their acts
//! (`Command::ByOperator`, unwrapped in `LedgerState::execute`) may be: [`check`].

use crate::decide::prelude::*;
use crate::operator::{
    validate, validate_session, OperatorAct, OperatorSessionV1, OperatorV1, Operators, OPERATORS_MAX,
};

pub(crate) fn decide(state: &LedgerState, cmd: &Command, now: u64) -> Result<Vec<Event>, Rejection> {
    match cmd {
        Command::SetOperator { operator } => {
            validate(operator)?;
            if let Some(tenant) = &operator.tenant_id {
                existing(state, tenant)?;
            }
            let known = &state.operators.operators;
            if !known.contains_key(&operator.name) && known.len() >= OPERATORS_MAX {
                return Err(Rejection::new(ReasonCode::QUOTA_EXCEEDED, format!("at most {OPERATORS_MAX} operators")));
            }
            let twin = operator
                .sign_in
                .as_ref()
                .and_then(|s| known.values().find(|o| o.name != operator.name && o.sign_in.as_ref() == Some(s)));
            if let Some(twin) = twin {
                let msg = format!("operator '{}' already signs in as this subject of this issuer", twin.name);
                return Err(Rejection::new(ReasonCode::INPUT_INVALID, msg));
            }
            Ok(vec![Event::OperatorSetV1 { operator: operator.clone() }])
        }
        Command::RemoveOperator { name } => {
            known(state, name)?;
            Ok(vec![Event::OperatorRemovedV1 { name: name.clone() }])
        }
        Command::OpenOperatorSession { session } => {
            known(state, &session.operator)?;
            validate_session(session)?;
            if state.operators.sessions.contains_key(&session.session_id) {
                return Err(Rejection::new(ReasonCode::INPUT_INVALID, "this session id is taken"));
            }
            // Opened at ledger time, so every replica expires it alike.
            let lifetime = session.expires_at_ms - session.opened_at_ms;
            let session = OperatorSessionV1 {
                opened_at_ms: now,
                expires_at_ms: now + lifetime,
                last_used_at_ms: now,
                ..session.clone()
            };
            Ok(vec![Event::OperatorSessionOpenedV1 { session }])
        }
        Command::UseOperatorSession { session_id } => {
            state.operators.session(session_id, now)?;
            Ok(vec![Event::OperatorSessionUsedV1 { session_id: session_id.clone(), at_ms: now }])
        }
        Command::SetConsoleSignIn { sign_in } => {
            if let Some(sign_in) = sign_in {
                sign_in.validate()?;
            }
            Ok(vec![Event::ConsoleSignInSetV1 { sign_in: sign_in.clone() }])
        }
        Command::CloseOperatorSessions { operator, session_id } => {
            known(state, operator)?;
            Ok(vec![Event::OperatorSessionsClosedV1 { operator: operator.clone(), session_id: session_id.clone() }])
        }
        _ => Err(misrouted(cmd)),
    }
}

fn known(state: &LedgerState, name: &str) -> Result<(), Rejection> {
    if state.operators.operators.contains_key(name) {
        Ok(())
    } else {
        let name = crate::audit::truncated(name, 128);
        Err(Rejection::new(ReasonCode::OPERATOR_NOT_FOUND, format!("no operator '{name}'")))
    }
}

/// What `Command::ByOperator` checks on every replica before its command is decided: the
/// session stands at ledger time `now`, its operator's role allows the command's act, a
/// tenant's operator acts only on that tenant, an operator closes only its own sessions unless
/// it administers, and a command that names who acts names this operator. Answers the
/// operator.
pub fn check<'a>(
    operators: &'a Operators,
    session_id: &str,
    command: &Command,
    now: u64,
) -> Result<&'a OperatorV1, Rejection> {
    let (_, operator) = operators.session(session_id, now)?;
    let act = act_of(command);
    // Signing oneself out is every operator's, whatever its role and scope.
    if matches!(command, Command::CloseOperatorSessions { operator: o, .. } if *o == operator.name) {
        return Ok(operator);
    }
    if !operator.role.may(act) {
        let msg = format!(
            "operator '{}' ({}) may not {} ({})",
            operator.name,
            operator.role.as_str(),
            act.as_str(),
            command.kind()
        );
        return Err(Rejection::new(ReasonCode::OPERATOR_ROLE_REQUIRED, msg));
    }
    if let Some(tenant) = &operator.tenant_id {
        let stream = command.stream();
        if stream != tenant.as_str() || stream == CLUSTER_STREAM {
            let msg = format!("operator '{}' works on tenant '{tenant}' only", operator.name);
            return Err(Rejection::new(ReasonCode::OPERATOR_SCOPE_VIOLATION, msg));
        }
    }
    if let Some(named) = acting_name(command).filter(|n| *n != operator.actor()) {
        let msg = format!("the act names '{named}', but operator '{}' makes it", operator.name);
        return Err(Rejection::new(ReasonCode::OPERATOR_SCOPE_VIOLATION, msg));
    }
    Ok(operator)
}

/// A command made without an operator's session may not name an operator as the one who acts:
/// an operator's name in a command is always that operator's own act.
pub fn unattributed(command: &Command) -> Result<(), Rejection> {
    match acting_name(command).filter(|n| n.starts_with(crate::operator::ACTOR_PREFIX)) {
        Some(named) => {
            let msg = format!("the act names '{named}', but no session of that operator makes it");
            Err(Rejection::new(ReasonCode::OPERATOR_SCOPE_VIOLATION, msg))
        }
        None => Ok(()),
    }
}

/// Who a command says acts, where it says so.
fn acting_name(command: &Command) -> Option<&str> {
    use crate::oauth::GrantStepV1;
    match command {
        Command::AnswerInputs { by_principal_id, .. }
        | Command::DecideOperation { by_principal_id, .. }
        | Command::ResolveUnknownEffect { by_principal_id, .. }
        | Command::CancelOperation { by_principal_id, .. } => Some(by_principal_id),
        Command::CreateWork { by, .. } | Command::ReviseWork { by, .. } => Some(by),
        Command::OAuthGrant { step: GrantStepV1::Decide { operator, .. }, .. } => Some(operator),
        _ => None,
    }
}

/// The act a command is (an exhaustive reading of the commands an operator submits; a
/// command no operator submits counts as administering).
pub fn act_of(command: &Command) -> OperatorAct {
    use crate::oauth::GrantStepV1;
    match command.innermost() {
        Command::CancelOperation { .. } => OperatorAct::Cancel,
        Command::DecideOperation { .. }
        | Command::ResolveUnknownEffect { .. }
        | Command::AnswerInputs { .. }
        | Command::ApproveUpstreamTools { .. }
        | Command::OAuthGrant { step: GrantStepV1::Decide { .. }, .. } => OperatorAct::Decide,
        Command::CreateTenant { .. }
        | Command::CreateTenantWith { .. }
        | Command::SuspendTenant { .. }
        | Command::ResumeTenant { .. }
        | Command::DeleteTenant { .. }
        | Command::PurgeTenant { .. }
        | Command::RegisterSigningKey { .. }
        | Command::RetireSigningKey { .. }
        | Command::RevokeRoleCertificate { .. }
        | Command::ApplyRetention { .. }
        | Command::ApplyRetentionV2 { .. }
        | Command::SetOperator { .. }
        | Command::RemoveOperator { .. }
        | Command::OpenOperatorSession { .. }
        | Command::CloseOperatorSessions { .. }
        | Command::SetConsoleSignIn { .. }
        | Command::UseOperatorSession { .. }
        | Command::Batch { .. } => OperatorAct::Administer,
        _ => OperatorAct::Configure,
    }
}
