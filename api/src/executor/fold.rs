//! How executors' events change the state: this domain's part of
//! [`LedgerState::fold_views`].

use std::collections::BTreeSet;

use crate::device::{Enrollment, Executor};
use crate::ledger::{Event, EventEnvelope};
use crate::state::{unknown, CorruptEvent, LedgerState};

impl LedgerState {
    /// Executors: enrollments, enrolled executors and their certificates, executor CAs.
    pub(crate) fn fold_executor(&mut self, env: &EventEnvelope) -> Result<(), CorruptEvent> {
        match &env.event {
            Event::EnrollmentCreatedV1 { tenant_id, enrollment: e } => {
                let view = Enrollment {
                    id: e.enrollment_id.clone(),
                    tenant_id: tenant_id.clone(),
                    site_id: e.site_id.clone(),
                    device_ids: e.device_ids.clone(),
                    token_sha256: e.token_sha256.clone(),
                    created_at_ms: env.at_ms,
                    expires_at_ms: env.at_ms.saturating_add(e.ttl_s.saturating_mul(1000)),
                    used_at_ms: None,
                    executor_id: None,
                };
                let expiry = (view.expires_at_ms, view.id.clone());
                self.index.enrollment_expiry.entry(tenant_id.clone()).or_default().insert(expiry);
                self.enrollments.entry(tenant_id.clone()).or_default().insert(e.enrollment_id.clone(), view);
            }
            Event::ExecutorEnrolledV1 { tenant_id, enrollment_id, cert } => {
                let e = self
                    .enrollments
                    .get_mut(tenant_id)
                    .and_then(|m| m.get_mut(enrollment_id))
                    .ok_or_else(|| unknown(env, "enrollment", enrollment_id))?;
                e.used_at_ms = Some(env.at_ms);
                e.executor_id = Some(cert.executor_id.clone());
                let executor = Executor {
                    id: cert.executor_id.clone(),
                    tenant_id: tenant_id.clone(),
                    site_id: e.site_id.clone(),
                    device_ids: e.device_ids.clone(),
                    enrollment_id: enrollment_id.clone(),
                    cert: cert.clone(),
                    enrolled_at_ms: env.at_ms,
                    revoked_at_ms: None,
                    revision: env.revision,
                };
                self.executor_certs.insert(cert.fingerprint.clone(), (tenant_id.clone(), cert.executor_id.clone()));
                self.executors.entry(tenant_id.clone()).or_default().insert(cert.executor_id.clone(), executor);
            }
            Event::ExecutorRevokedV1 { tenant_id, executor_id } => {
                let x = self
                    .executors
                    .get_mut(tenant_id)
                    .and_then(|m| m.get_mut(executor_id))
                    .ok_or_else(|| unknown(env, "executor", executor_id))?;
                x.revoked_at_ms = Some(env.at_ms);
                x.revision = env.revision;
            }
            Event::ExecutorCertRenewedV1 { tenant_id, executor_id, from_fingerprint, cert } => {
                let x = self
                    .executors
                    .get_mut(tenant_id)
                    .and_then(|m| m.get_mut(executor_id))
                    .ok_or_else(|| unknown(env, "executor", executor_id))?;
                x.cert = cert.clone();
                x.revision = env.revision;
                // The certificate renewed from stays mapped (valid until it expires); any other
                // of this executor is forgotten.
                self.executor_certs.retain(|fingerprint, (t, x)| {
                    fingerprint == from_fingerprint || !(t == tenant_id && x == executor_id)
                });
                self.executor_certs.insert(cert.fingerprint.clone(), (tenant_id.clone(), executor_id.clone()));
            }
            Event::ExecutorCaRegisteredV1 { tenant_id, ca } => {
                self.executor_cas.entry(tenant_id.clone()).or_default().insert(ca.fingerprint.clone(), ca.clone());
            }
            Event::ExecutorPresenceV1 { tenant_id, executor_id, edge_id, connected, changed, at_ms } => {
                let presence = self.executor_presence.entry(tenant_id.clone()).or_default();
                let was = presence.get(executor_id);
                let since_ms = if *changed { *at_ms } else { was.map_or(*at_ms, |p| p.since_ms) };
                let last_dispatch = was.and_then(|p| p.last_dispatch.clone());
                let now = crate::device::ExecutorPresenceV1 {
                    edge_id: edge_id.clone(),
                    connected: *connected,
                    since_ms,
                    confirmed_at_ms: *at_ms,
                    last_dispatch,
                };
                presence.insert(executor_id.clone(), now);
            }
            Event::ExecutorCaRetiredV1 { tenant_id, fingerprint } => {
                if let Some(cas) = self.executor_cas.get_mut(tenant_id) {
                    cas.remove(fingerprint);
                    if cas.is_empty() {
                        self.executor_cas.remove(tenant_id);
                    }
                }
                self.revocations
                    .executor_cas
                    .entry(tenant_id.clone())
                    .or_default()
                    .insert(fingerprint.clone(), env.at_ms);
                // Executors whose current certificate the CA signed lose every certificate
                // mapping: they enroll again.
                let cut_off: BTreeSet<&String> = self
                    .executors
                    .get(tenant_id)
                    .into_iter()
                    .flat_map(|m| m.values())
                    .filter(|x| x.cert.ca_fingerprint == *fingerprint)
                    .map(|x| &x.id)
                    .collect();
                self.executor_certs.retain(|_, (t, x)| !(t == tenant_id && cut_off.contains(x)));
            }
            _ => return Err(CorruptEvent::new(env, "an event of another domain")),
        }
        Ok(())
    }
}
