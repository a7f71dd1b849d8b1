//! How each domain's events change the views: [`LedgerState::fold_views`] checks an event's
//! place in the log and hands it to its domain's fold here (operations, work items and
//! retention have theirs beside the state).

use super::*;

impl LedgerState {
    /// Tenants: created, their settings, suspended, resumed, deleted, purged.
    pub(super) fn fold_tenant(&mut self, env: &EventEnvelope) -> Result<(), CorruptEvent> {
        match &env.event {
            Event::TenantCreatedV1 { tenant_id, name, display_name } => {
                self.tenant_names.insert(name.clone(), tenant_id.clone());
                self.tenants.insert(
                    tenant_id.clone(),
                    Tenant {
                        id: tenant_id.clone(),
                        name: name.clone(),
                        display_name: display_name.clone(),
                        state: TenantState::Active,
                        created_at_ms: env.at_ms,
                        updated_at_ms: env.at_ms,
                        revision: env.revision,
                        settings: TenantSettingsV1::default(),
                    },
                );
            }
            Event::TenantSettingsChangedV1 { tenant_id, settings } => {
                let tenant = self.tenants.get_mut(tenant_id).ok_or_else(|| unknown(env, "tenant", tenant_id))?;
                tenant.settings = settings.clone();
                tenant.updated_at_ms = env.at_ms;
                tenant.revision = env.revision;
            }
            Event::TenantSuspendedV1 { tenant_id, .. } => {
                self.set_tenant_state(tenant_id, TenantState::Suspended, env)?
            }
            Event::TenantResumedV1 { tenant_id } => self.set_tenant_state(tenant_id, TenantState::Active, env)?,
            Event::TenantDeletedV1 { tenant_id, .. } => self.set_tenant_state(tenant_id, TenantState::Deleted, env)?,
            Event::TenantPurgedV1 { tenant_id, name } => self.purge_tenant(tenant_id, name),
            _ => return Err(CorruptEvent::new(env, "an event of another domain")),
        }
        Ok(())
    }

    /// Principals: created, revoked, their scopes, the edges that act as one without a token, their MCP sessions.
    pub(super) fn fold_principal(&mut self, env: &EventEnvelope) -> Result<(), CorruptEvent> {
        match &env.event {
            Event::PrincipalCreatedV1 { tenant_id, spec } => {
                let p = Principal::from_spec(tenant_id, spec, env.at_ms, env.revision);
                self.principal_names.entry(tenant_id.clone()).or_default().insert(p.name.clone(), p.id.clone());
                self.principals.entry(tenant_id.clone()).or_default().insert(p.id.clone(), p);
            }
            Event::PrincipalRevokedV1 { tenant_id, principal_id, .. } => {
                let p = self.principal_mut(tenant_id, principal_id, env)?;
                p.state = PrincipalState::Revoked;
                p.updated_at_ms = env.at_ms;
                p.revision = env.revision;
            }
            Event::ScopeGrantedV1 { tenant_id, principal_id, scope } => {
                let p = self.principal_mut(tenant_id, principal_id, env)?;
                p.scopes.insert(scope.clone());
                p.revoked_scopes.remove(scope);
                p.updated_at_ms = env.at_ms;
                p.revision = env.revision;
            }
            Event::ScopeRevokedV1 { tenant_id, principal_id, scope } => {
                let p = self.principal_mut(tenant_id, principal_id, env)?;
                p.scopes.remove(scope);
                p.revoked_scopes.insert(scope.clone());
                p.updated_at_ms = env.at_ms;
                p.revision = env.revision;
            }
            Event::AnonymousAccessSetV1 { tenant_id, edge_id, principal_id } => {
                let edges = self.anonymous.entry(tenant_id.clone()).or_default();
                match principal_id {
                    Some(p) => edges.insert(edge_id.clone(), p.clone()),
                    None => edges.remove(edge_id),
                };
                if edges.is_empty() {
                    self.anonymous.remove(tenant_id);
                }
            }
            Event::SessionStateSetV1 { tenant_id, session_id, session } => {
                let sessions = self.sessions.entry(tenant_id.clone()).or_default();
                sessions.retain(|_, s| s.expires_at_ms > env.at_ms);
                sessions.insert(session_id.clone(), session.clone());
            }
            _ => return Err(CorruptEvent::new(env, "an event of another domain")),
        }
        Ok(())
    }

    /// Credentials: token records and their revocation, signing keys, tenant issuers, revoked role certificates.
    pub(super) fn fold_credential(&mut self, env: &EventEnvelope) -> Result<(), CorruptEvent> {
        match &env.event {
            Event::TokenIssuedV1 { tenant_id, token } => {
                if let Some(parent) = &token.parent_jti {
                    self.token_children
                        .entry(tenant_id.clone())
                        .or_default()
                        .entry(parent.clone())
                        .or_default()
                        .insert(token.jti.clone());
                }
                let view = Token {
                    tenant_id: tenant_id.clone(),
                    record: token.clone(),
                    revoked_at_ms: None,
                    revoked_via: None,
                };
                self.tokens.entry(tenant_id.clone()).or_default().insert(token.jti.clone(), view);
                let expiry = (token.expires_at_ms, token.jti.clone());
                self.index.token_expiry.entry(tenant_id.clone()).or_default().insert(expiry);
            }
            Event::TokenRevokedV1 { tenant_id, jti, cascade } => {
                let tokens = self.tokens.get_mut(tenant_id).ok_or_else(|| unknown(env, "token", jti))?;
                for id in std::iter::once(jti).chain(cascade) {
                    let t = tokens.get_mut(id).ok_or_else(|| unknown(env, "token", id))?;
                    t.revoked_at_ms = Some(env.at_ms);
                    t.revoked_via = Some(jti.clone());
                }
            }
            Event::SigningKeyRegisteredV1 { key } => {
                self.signing_keys.insert(key.kid.clone(), key.clone());
            }
            Event::TenantIssuerSetV1 { tenant_id, issuer } => {
                let view = TenantIssuer::new(tenant_id.clone(), issuer.clone(), env.revision);
                self.issuers.insert(issuer.issuer.clone(), view);
            }
            Event::TenantIssuerRemovedV1 { issuer, .. } => {
                self.issuers.remove(issuer);
                self.issuer_sources.remove(issuer);
            }
            Event::IssuerSourceSetV1 { tenant_id, source, jwks_uri } => {
                let view = crate::token::IssuerSource {
                    tenant_id: tenant_id.clone(),
                    spec: source.clone(),
                    jwks_uri: jwks_uri.clone(),
                    revision: env.revision,
                };
                self.issuer_sources.insert(source.issuer.clone(), view);
            }
            Event::IssuerTokenRevokedV1 { issuer, jti, until_ms, .. } => {
                let revoked = self.revocations.issuer_tokens.entry(issuer.clone()).or_default();
                revoked.retain(|_, until| *until > env.at_ms);
                revoked.insert(jti.clone(), *until_ms);
            }
            Event::SigningKeyRetiredV1 { kid } => {
                self.signing_keys.remove(kid);
                self.revocations.signing_keys.insert(kid.clone(), env.at_ms);
            }
            Event::RoleCertificateRevokedV1 { certificate } => {
                let revoked = &mut self.revocations.role_certificates;
                revoked.retain(|_, r| r.not_after_ms > env.at_ms);
                revoked.insert(certificate.serial.clone(), certificate.clone());
            }
            _ => return Err(CorruptEvent::new(env, "an event of another domain")),
        }
        Ok(())
    }

    /// The tenants' own authorization servers.
    pub(super) fn fold_oauth(&mut self, env: &EventEnvelope) -> Result<(), CorruptEvent> {
        match &env.event {
            Event::OAuthClientSetV1 { tenant_id, client } => {
                let oauth = self.oauth.entry(tenant_id.clone()).or_default();
                oauth.clients.insert(client.client_id.clone(), client.clone());
            }
            Event::OAuthClientRemovedV1 { tenant_id, client_id } => {
                if let Some(oauth) = self.oauth.get_mut(tenant_id) {
                    oauth.remove_client(client_id);
                }
            }
            Event::OAuthSettingsSetV1 { tenant_id, settings } => {
                self.oauth.entry(tenant_id.clone()).or_default().settings = settings.clone();
            }
            Event::OAuthGrantV1 { tenant_id, change, at_ms } => {
                self.oauth.entry(tenant_id.clone()).or_default().apply(change, *at_ms);
            }
            _ => return Err(CorruptEvent::new(env, "an event of another domain")),
        }
        Ok(())
    }

    /// Named operators and their sessions.
    pub(super) fn fold_operator(&mut self, env: &EventEnvelope) -> Result<(), CorruptEvent> {
        match &env.event {
            Event::OperatorSetV1 { operator } => {
                self.operators.operators.insert(operator.name.clone(), operator.clone());
            }
            Event::OperatorRemovedV1 { name } => self.operators.remove(name),
            Event::OperatorSessionOpenedV1 { session } => self.operators.open(session.clone()),
            Event::OperatorSessionsClosedV1 { operator, session_id } => {
                self.operators.close(operator, session_id.as_deref());
            }
            Event::ConsoleSignInSetV1 { sign_in } => self.operators.console_sign_in = sign_in.clone(),
            Event::OperatorSessionUsedV1 { session_id, at_ms } => self.operators.used(session_id, *at_ms),
            Event::OperatorActedV1 { .. } => {}
            _ => return Err(CorruptEvent::new(env, "an event of another domain")),
        }
        Ok(())
    }

    /// Sites and devices.
    pub(super) fn fold_site(&mut self, env: &EventEnvelope) -> Result<(), CorruptEvent> {
        match &env.event {
            Event::SiteCreatedV1 { tenant_id, site_id, name, display_name } => {
                self.site_names.entry(tenant_id.clone()).or_default().insert(name.clone(), site_id.clone());
                let site = Site {
                    id: site_id.clone(),
                    tenant_id: tenant_id.clone(),
                    name: name.clone(),
                    display_name: display_name.clone(),
                    created_at_ms: env.at_ms,
                    revision: env.revision,
                };
                self.sites.entry(tenant_id.clone()).or_default().insert(site_id.clone(), site);
            }
            Event::DeviceCreatedV1 { tenant_id, device_id, site_id, name, device_class } => {
                self.device_names.entry(tenant_id.clone()).or_default().insert(name.clone(), device_id.clone());
                let device = Device {
                    id: device_id.clone(),
                    tenant_id: tenant_id.clone(),
                    site_id: site_id.clone(),
                    name: name.clone(),
                    device_class: device_class.clone(),
                    created_at_ms: env.at_ms,
                    revision: env.revision,
                };
                self.devices.entry(tenant_id.clone()).or_default().insert(device_id.clone(), device);
            }
            _ => return Err(CorruptEvent::new(env, "an event of another domain")),
        }
        Ok(())
    }

    /// Catalog versions (the newest `CATALOG_VERSIONS_KEPT`).
    pub(super) fn fold_catalog(&mut self, env: &EventEnvelope) -> Result<(), CorruptEvent> {
        match &env.event {
            Event::CatalogPublishedV1 { tenant_id, version, catalog } => {
                let versions = self.catalogs.entry(tenant_id.clone()).or_default();
                versions.insert(
                    *version,
                    CatalogVersion {
                        tenant_id: tenant_id.clone(),
                        version: *version,
                        published_at_ms: env.at_ms,
                        revision: env.revision,
                        catalog: catalog.clone(),
                    },
                );
                while versions.len() > CATALOG_VERSIONS_KEPT {
                    versions.pop_first();
                }
            }
            _ => return Err(CorruptEvent::new(env, "an event of another domain")),
        }
        Ok(())
    }

    /// Executors: enrollments, enrolled executors and their certificates, executor CAs.
    pub(super) fn fold_executor(&mut self, env: &EventEnvelope) -> Result<(), CorruptEvent> {
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

    /// Operations (`fold_operation`), their proposals and evidence.
    pub(super) fn fold_operation(&mut self, env: &EventEnvelope) -> Result<(), CorruptEvent> {
        match &env.event {
            Event::OperationProposedV1 { tenant_id, proposal } => {
                let live = self.proposals.entry(tenant_id.clone()).or_default();
                live.retain(|_, p| p.expires_at_ms > env.at_ms);
                live.insert(proposal.proposal_id.clone(), proposal.clone());
            }
            Event::ProposalUsedV1 { tenant_id, proposal_id, .. } => {
                let live = self.proposals.get_mut(tenant_id).and_then(|m| m.remove(proposal_id).map(|_| m.is_empty()));
                match live {
                    Some(true) => {
                        self.proposals.remove(tenant_id);
                    }
                    Some(false) => {}
                    None => return Err(CorruptEvent::new(env, format!("unknown proposal '{proposal_id}'"))),
                }
            }
            Event::OperationSubmittedV1 { .. }
            | Event::DeviceReservedV1 { .. }
            | Event::DeviceReleasedV1 { .. }
            | Event::OperationDispatchedV1 { .. }
            | Event::OperationTransitionedV1 { .. }
            | Event::AttemptLeaseExtendedV1 { .. }
            | Event::EvidenceReportedV1 { .. }
            | Event::ObservationRecordedV1 { .. }
            | Event::OperationInputsAnsweredV1 { .. }
            | Event::OperationCancelRequestedV1 { .. }
            | Event::OperationRefusedV1 { .. } => {
                if let Event::OperationDispatchedV1 { tenant_id, operation_id, executor_id } = &env.event {
                    // Kept only for executors an edge has said something of (ledger version 13
                    // on), so a replay of older entries folds to the same state.
                    let presence = self.executor_presence.get_mut(tenant_id).and_then(|m| m.get_mut(executor_id));
                    if let Some(p) = presence {
                        p.last_dispatch = Some((operation_id.clone(), env.at_ms));
                    }
                }
                fold_operation(self, env)?
            }
            Event::EvidenceStoredV1 { tenant_id, blob } => {
                *self.index.evidence_bytes.entry(tenant_id.clone()).or_default() += blob.size;
                let slot = evidence_slot(&blob.operation_id, &blob.content_hash);
                self.index.evidence_by_time.entry(tenant_id.clone()).or_default().insert((blob.at_ms, slot.clone()));
                self.evidence.entry(tenant_id.clone()).or_default().insert(slot, blob.clone());
            }
            Event::EvidenceExpiredV1 { tenant_id, blobs } => {
                for r in blobs {
                    let slot = evidence_slot(&r.operation_id, &r.content_hash);
                    let gone = self.evidence.get_mut(tenant_id).and_then(|m| m.remove(&slot));
                    let gone = gone.ok_or_else(|| CorruptEvent::new(env, format!("unknown evidence '{slot}'")))?;
                    if let Some(n) = self.index.evidence_bytes.get_mut(tenant_id) {
                        *n -= gone.size;
                    }
                    if let Some(by_time) = self.index.evidence_by_time.get_mut(tenant_id) {
                        by_time.remove(&(gone.at_ms, slot));
                    }
                }
                if self.evidence.get(tenant_id).is_some_and(|m| m.is_empty()) {
                    self.evidence.remove(tenant_id);
                    self.index.evidence_bytes.remove(tenant_id);
                    self.index.evidence_by_time.remove(tenant_id);
                }
            }
            _ => return Err(CorruptEvent::new(env, "an event of another domain")),
        }
        Ok(())
    }

    /// Quotas: principals' own, and the request-quota grants of the current window.
    pub(super) fn fold_quota(&mut self, env: &EventEnvelope) -> Result<(), CorruptEvent> {
        match &env.event {
            Event::PrincipalQuotasSetV1 { tenant_id, principal_id, quotas } => {
                self.set_principal_quotas(tenant_id, principal_id, quotas.clone().into())
            }
            Event::PrincipalQuotasSetV2 { tenant_id, principal_id, quotas } => {
                self.set_principal_quotas(tenant_id, principal_id, quotas.clone())
            }
            Event::RequestQuotaLeasedV1 { tenant_id, principal_id, window, granted, .. } => {
                let w = self.quota_windows.entry(tenant_id.clone()).or_default();
                if w.window != *window {
                    *w = QuotaWindow { window: *window, ..Default::default() };
                }
                w.tenant_granted += granted;
                *w.principal_granted.entry(principal_id.clone()).or_default() += granted;
            }
            _ => return Err(CorruptEvent::new(env, "an event of another domain")),
        }
        Ok(())
    }

    /// Upstream MCP servers, their tools and fuses, and operations bound to one.
    pub(super) fn fold_upstream(&mut self, env: &EventEnvelope) -> Result<(), CorruptEvent> {
        match &env.event {
            Event::UpstreamSetV1 { tenant_id, upstream } => {
                self.upstreams.entry(tenant_id.clone()).or_default().insert(upstream.name.clone(), upstream.clone());
            }
            Event::UpstreamRemovedV1 { tenant_id, name } => {
                let gone = self.upstreams.get_mut(tenant_id).and_then(|m| m.remove(name));
                gone.ok_or_else(|| CorruptEvent::new(env, format!("unknown upstream '{name}'")))?;
                if self.upstreams.get(tenant_id).is_some_and(|m| m.is_empty()) {
                    self.upstreams.remove(tenant_id);
                }
            }
            Event::UpstreamToolsObservedV1 { tenant_id, name, pending } => {
                self.upstream_mut(tenant_id, name, env)?.pending = pending.clone();
            }
            Event::UpstreamToolsApprovedV1 { tenant_id, name, digest } => {
                let u = self.upstream_mut(tenant_id, name, env)?;
                let pending = u.pending.take().filter(|p| &p.digest == digest);
                u.pinned = Some(pending.ok_or_else(|| CorruptEvent::new(env, format!("no pending tools {digest}")))?);
                u.updated_at_ms = env.at_ms;
            }
            Event::UpstreamFuseChangedV1 { tenant_id, name, edge_id, fuse } => {
                let fuses = &mut self.upstream_mut(tenant_id, name, env)?.fuses;
                fuses.insert(edge_id.clone(), fuse.clone());
                // Bounded: an edge that went away leaves its closed fuse until newer ones need room.
                if fuses.len() > crate::upstream::FUSES_KEPT {
                    let oldest = fuses
                        .iter()
                        .filter(|(_, f)| !f.open)
                        .min_by_key(|(id, f)| (f.changed_at_ms, (*id).clone()))
                        .map(|(id, _)| id.clone());
                    if let Some(id) = oldest {
                        fuses.remove(&id);
                    }
                }
            }
            Event::OperationUpstreamBoundV1 { tenant_id, operation_id, target } => {
                if !self.operations.get(tenant_id).is_some_and(|m| m.contains_key(operation_id)) {
                    return Err(CorruptEvent::new(env, format!("unknown operation '{operation_id}'")));
                }
                self.upstream_operations
                    .entry(tenant_id.clone())
                    .or_default()
                    .insert(operation_id.clone(), target.clone());
            }
            _ => return Err(CorruptEvent::new(env, "an event of another domain")),
        }
        Ok(())
    }
}
