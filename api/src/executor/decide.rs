//! Executor enrollment (SPEC X1): one-time expiring enrollments, their atomic completion with a certificate record, revocation, and tenant executor CAs.

use crate::decide::prelude::*;
use crate::revocation::EXECUTOR_CA_RETIREMENTS_MAX;

pub(crate) fn decide(state: &LedgerState, cmd: &Command, now: u64) -> Result<Vec<Event>, Rejection> {
    match cmd {
        Command::CreateEnrollment { .. } => create_enrollment(state, cmd, now),
        Command::CompleteEnrollment { .. } => complete_enrollment(state, cmd, now),
        Command::RevokeExecutor { tenant_id, executor_id } => {
            existing(state, tenant_id)?;
            match state.executors.get(tenant_id).and_then(|m| m.get(executor_id)) {
                None => Err(Rejection::new(ReasonCode::EXECUTOR_NOT_FOUND, format!("no executor '{executor_id}'"))),
                Some(x) if x.revoked_at_ms.is_some() => {
                    Err(Rejection::new(ReasonCode::EXECUTOR_STATE_CONFLICT, "the executor is already revoked"))
                }
                Some(_) => Ok(vec![Event::ExecutorRevokedV1 {
                    tenant_id: tenant_id.clone(),
                    executor_id: executor_id.clone(),
                }]),
            }
        }
        Command::RegisterExecutorCa { .. } => register_executor_ca(state, cmd, now),
        Command::RenewExecutorCertificate { .. } => renew_executor_certificate(state, cmd, now),
        Command::RetireExecutorCa { .. } => retire_executor_ca(state, cmd, now),
        Command::SetExecutorPresence { .. } => set_presence(state, cmd, now),
        other => Err(misrouted(other)),
    }
}

/// An edge's word on an executor's dispatch stream. Nothing is recorded when it would change
/// nothing: a confirmation sooner than half the confirmation period after the last one, or a
/// disconnection from an edge the executor has since left (a late close must not hide the
/// newer connection).
fn set_presence(state: &LedgerState, cmd: &Command, now: u64) -> Result<Vec<Event>, Rejection> {
    use crate::device::PRESENCE_CONFIRM_MS;
    let Command::SetExecutorPresence { tenant_id, executor_id, edge_id, connected } = cmd else {
        return Err(misrouted(cmd));
    };
    existing(state, tenant_id)?;
    let edge_ok = !edge_id.is_empty()
        && edge_id.len() <= crate::upstream::decide::EDGE_ID_BYTES_MAX
        && edge_id.bytes().all(|b| b.is_ascii_graphic());
    if !edge_ok {
        let msg = format!("edge id must be 1..={} visible characters", crate::upstream::decide::EDGE_ID_BYTES_MAX);
        return Err(Rejection::new(ReasonCode::INPUT_INVALID, msg));
    }
    match state.executors.get(tenant_id).and_then(|m| m.get(executor_id)) {
        None => return Err(Rejection::new(ReasonCode::EXECUTOR_NOT_FOUND, format!("no executor '{executor_id}'"))),
        Some(x) if x.revoked_at_ms.is_some() && *connected => {
            return Err(Rejection::new(ReasonCode::EXECUTOR_REVOKED, "the executor is revoked"))
        }
        Some(_) => {}
    }
    let was = state.executor_presence.get(tenant_id).and_then(|m| m.get(executor_id));
    let same = was.is_some_and(|p| p.connected == *connected && p.edge_id == *edge_id);
    let recent = was.is_some_and(|p| now.saturating_sub(p.confirmed_at_ms) < PRESENCE_CONFIRM_MS / 2);
    let left = !*connected && was.is_some_and(|p| p.edge_id != *edge_id);
    if (same && recent) || left {
        return Ok(Vec::new());
    }
    Ok(vec![Event::ExecutorPresenceV1 {
        tenant_id: tenant_id.clone(),
        executor_id: executor_id.clone(),
        edge_id: edge_id.clone(),
        connected: *connected,
        changed: !same,
        at_ms: now,
    }])
}

/// A one-time, expiring enrollment for a site's devices.
fn create_enrollment(state: &LedgerState, cmd: &Command, _now: u64) -> Result<Vec<Event>, Rejection> {
    let Command::CreateEnrollment { tenant_id, enrollment: e } = cmd else { return Err(misrouted(cmd)) };
    active(state, tenant_id)?;
    let site = state
        .site(tenant_id, &e.site_id)
        .ok_or_else(|| Rejection::new(ReasonCode::SITE_NOT_FOUND, format!("no site '{}'", e.site_id)))?;
    for d in &e.device_ids {
        match state.devices.get(tenant_id).and_then(|m| m.get(d)) {
            Some(dev) if dev.site_id == site.id => {}
            Some(_) => {
                return Err(Rejection::new(
                    ReasonCode::INPUT_INVALID,
                    format!("device '{d}' is not at site '{}'", site.name),
                ))
            }
            None => return Err(Rejection::new(ReasonCode::DEVICE_NOT_FOUND, format!("no device '{d}'"))),
        }
    }
    let taken = state.enrollments.get(tenant_id).is_some_and(|m| m.contains_key(&e.enrollment_id));
    if e.enrollment_id.is_empty() || e.enrollment_id.len() > 64 || taken || e.token_sha256.len() != 64 {
        return Err(Rejection::new(
            ReasonCode::INPUT_INVALID,
            "enrollment id must be new and 1..=64 bytes, token hash sha256 hex",
        ));
    }
    if e.ttl_s == 0 || e.ttl_s > ENROLLMENT_TTL_MAX_S {
        return Err(Rejection::new(
            ReasonCode::INPUT_INVALID,
            format!("enrollment ttl must be 1..={ENROLLMENT_TTL_MAX_S} s"),
        ));
    }
    Ok(vec![Event::EnrollmentCreatedV1 { tenant_id: tenant_id.clone(), enrollment: e.clone() }])
}

/// An enrollment used once: the executor it enrolled and its certificate.
fn complete_enrollment(state: &LedgerState, cmd: &Command, now: u64) -> Result<Vec<Event>, Rejection> {
    let Command::CompleteEnrollment { tenant_id, enrollment_id, token_sha256, cert } = cmd else {
        return Err(misrouted(cmd));
    };
    active(state, tenant_id)?;
    let e = state
        .enrollments
        .get(tenant_id)
        .and_then(|m| m.get(enrollment_id))
        .filter(|e| e.token_sha256 == *token_sha256)
        .ok_or_else(|| Rejection::new(ReasonCode::ENROLLMENT_TOKEN_INVALID, "unknown enrollment token"))?;
    if e.used_at_ms.is_some() {
        return Err(Rejection::new(ReasonCode::ENROLLMENT_TOKEN_USED, "this enrollment token was already used"));
    }
    if e.expires_at_ms <= now {
        return Err(Rejection::new(ReasonCode::ENROLLMENT_TOKEN_EXPIRED, "this enrollment token has expired"));
    }
    let new_executor = !state.executors.get(tenant_id).is_some_and(|m| m.contains_key(&cert.executor_id));
    if !new_certificate(state, tenant_id, cert) || !new_executor {
        return Err(Rejection::new(ReasonCode::INPUT_INVALID, "certificate record is not new or names an unknown CA"));
    }
    Ok(vec![Event::ExecutorEnrolledV1 {
        tenant_id: tenant_id.clone(),
        enrollment_id: enrollment_id.clone(),
        cert: cert.clone(),
    }])
}

/// A tenant executor CA registered.
fn register_executor_ca(state: &LedgerState, cmd: &Command, _now: u64) -> Result<Vec<Event>, Rejection> {
    let Command::RegisterExecutorCa { tenant_id, ca } = cmd else { return Err(misrouted(cmd)) };
    existing(state, tenant_id)?;
    if ca.fingerprint != crate::sha256_hex(&ca.cert_der) {
        return Err(Rejection::new(ReasonCode::INPUT_INVALID, "CA fingerprint does not match its certificate"));
    }
    if state.revocations.executor_ca_retired(tenant_id, &ca.fingerprint) {
        return Err(Rejection::new(
            ReasonCode::CREDENTIAL_RETIRED,
            format!("executor CA {} of this tenant was retired", ca.fingerprint),
        ));
    }
    if state.executor_cas.get(tenant_id).is_some_and(|m| m.contains_key(&ca.fingerprint)) {
        return Ok(vec![]);
    }
    Ok(vec![Event::ExecutorCaRegisteredV1 { tenant_id: tenant_id.clone(), ca: ca.clone() }])
}

/// An executor's new certificate, proven by its current one.
fn renew_executor_certificate(state: &LedgerState, cmd: &Command, now: u64) -> Result<Vec<Event>, Rejection> {
    let Command::RenewExecutorCertificate { tenant_id, executor_id, from_fingerprint, cert } = cmd else {
        return Err(misrouted(cmd));
    };
    active(state, tenant_id)?;
    let x = state
        .executors
        .get(tenant_id)
        .and_then(|m| m.get(executor_id))
        .ok_or_else(|| Rejection::new(ReasonCode::EXECUTOR_NOT_FOUND, format!("no executor '{executor_id}'")))?;
    if x.revoked_at_ms.is_some() {
        return Err(Rejection::new(ReasonCode::EXECUTOR_REVOKED, "a revoked executor cannot renew"));
    }
    let mapped = state.executor_certs.get(from_fingerprint);
    if mapped.is_none_or(|(t, x)| t != tenant_id || x != executor_id) {
        return Err(Rejection::new(
            ReasonCode::EXECUTOR_CERT_REFUSED,
            "only a certificate of this executor the ledger still accepts renews it",
        ));
    }
    if x.cert == *cert {
        // The renewal that produced the current certificate, again: nothing to change.
        return Ok(vec![]);
    }
    if !new_certificate(state, tenant_id, cert) || cert.executor_id != *executor_id || cert.not_after_ms <= now {
        return Err(Rejection::new(
            ReasonCode::INPUT_INVALID,
            "the certificate record must be new, this executor's, unexpired and from a known CA",
        ));
    }
    Ok(vec![Event::ExecutorCertRenewedV1 {
        tenant_id: tenant_id.clone(),
        executor_id: executor_id.clone(),
        from_fingerprint: from_fingerprint.clone(),
        cert: cert.clone(),
    }])
}

/// A tenant executor CA retired: executors it certified enroll again (bounded per tenant).
fn retire_executor_ca(state: &LedgerState, cmd: &Command, _now: u64) -> Result<Vec<Event>, Rejection> {
    let Command::RetireExecutorCa { tenant_id, fingerprint } = cmd else { return Err(misrouted(cmd)) };
    existing(state, tenant_id)?;
    if state.revocations.executor_ca_retired(tenant_id, fingerprint) {
        return Err(Rejection::new(
            ReasonCode::CREDENTIAL_RETIRED,
            format!("executor CA {fingerprint} is already retired"),
        ));
    }
    if !state.executor_cas.get(tenant_id).is_some_and(|m| m.contains_key(fingerprint)) {
        return Err(Rejection::new(ReasonCode::NOT_FOUND, format!("no executor CA {fingerprint} in this tenant")));
    }
    let retired = state.revocations.executor_cas.get(tenant_id).map_or(0, |m| m.len());
    if retired >= EXECUTOR_CA_RETIREMENTS_MAX {
        return Err(Rejection::new(
            ReasonCode::QUOTA_EXCEEDED,
            format!("this tenant retired {EXECUTOR_CA_RETIREMENTS_MAX} executor CAs already"),
        ));
    }
    Ok(vec![Event::ExecutorCaRetiredV1 { tenant_id: tenant_id.clone(), fingerprint: fingerprint.clone() }])
}

/// Whether `cert` records a certificate the ledger has never mapped (a sha256 fingerprint),
/// signed by one of the tenant's executor CAs.
fn new_certificate(state: &LedgerState, tenant_id: &str, cert: &crate::device::ExecutorCertV1) -> bool {
    state.executor_cas.get(tenant_id).is_some_and(|m| m.contains_key(&cert.ca_fingerprint))
        && !state.executor_certs.contains_key(&cert.fingerprint)
        && cert.fingerprint.len() == 64
}
