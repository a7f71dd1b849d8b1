//! Queries (the ledger client API's reads) answered from a [`LedgerState`]: one place for the
//! node and the in-memory ledger alike. Audit pages are the exception: their bodies live in the
//! node's store (`ListAudit` is answered there).

use crate::dto::{PrincipalQuotasView, Query, QueryResult, PAGE_LIMIT_MAX};
use crate::reason::ReasonCode;
use crate::rejection::Rejection;
use std::borrow::Cow;

use crate::state::LedgerState;

/// A page size within `1..=PAGE_LIMIT_MAX`.
pub fn page_limit(limit: u32) -> Result<usize, Rejection> {
    if limit == 0 || limit > PAGE_LIMIT_MAX {
        return Err(Rejection::new(ReasonCode::INPUT_INVALID, format!("limit must be 1..={PAGE_LIMIT_MAX}")));
    }
    Ok(limit as usize)
}

/// Answers `query` from `state`.
pub fn answer(state: &LedgerState, query: Query) -> Result<QueryResult, Rejection> {
    match query {
        // Audit bodies are not in the state: the node reads them from its store.
        Query::ListAudit { .. } | Query::RecentAudit { .. } | Query::GetEvidence { .. } => {
            Err(Rejection::new(ReasonCode::INTERNAL, "audit pages and evidence are answered from the store"))
        }
        q @ (Query::ListTenants { .. }
        | Query::ListPrincipals { .. }
        | Query::GetPrincipal { .. }
        | Query::ListSites { .. }
        | Query::GetSite { .. }
        | Query::GetTenantStorage { .. }
        | Query::ListDevices { .. }
        | Query::GetDevice { .. }
        | Query::GetPrincipalQuotas { .. }
        | Query::GetTenant { .. }) => answer_tenancy(state, q),
        q @ (Query::ListTokens { .. }
        | Query::GetToken { .. }
        | Query::ListIssuers { .. }
        | Query::ListExecutors { .. }
        | Query::GetEnrollment { .. }
        | Query::ListExecutorCas { .. }
        | Query::Credentials { .. }) => answer_credentials(state, q),
        q @ (Query::ListOperations { .. }
        | Query::GetWork { .. }
        | Query::ListWork { .. }
        | Query::GetOperationHistory { .. }
        | Query::GetOperation { .. }
        | Query::GetOperationByKey { .. }
        | Query::ListUpstreams { .. }
        | Query::GetUpstream { .. }
        | Query::ListCatalogs { .. }
        | Query::GetCatalog { .. }) => answer_work(state, q),
    }
}

/// Tenants, principals and their quotas, sites, devices, storage.
fn answer_tenancy(state: &LedgerState, query: Query) -> Result<QueryResult, Rejection> {
    match query {
        Query::ListTenants { after, limit } => {
            let (tenants, next_cursor) = state.list_tenants(after.as_deref(), page_limit(limit)?);
            Ok(QueryResult::Tenants { tenants, next_cursor })
        }
        Query::ListPrincipals { tenant_id, after, limit } => {
            let (principals, next_cursor) = state.list_principals(&tenant_id, after.as_deref(), page_limit(limit)?);
            Ok(QueryResult::Principals { principals, next_cursor })
        }
        Query::GetPrincipal { tenant_id, principal } => state
            .principal(&tenant_id, &principal)
            .cloned()
            .map(|principal| QueryResult::Principal { principal })
            .ok_or_else(|| Rejection::new(ReasonCode::PRINCIPAL_NOT_FOUND, format!("no principal '{principal}'"))),
        Query::ListSites { tenant_id, after, limit } => {
            let (sites, next_cursor) = state.list_sites(&tenant_id, after.as_deref(), page_limit(limit)?);
            Ok(QueryResult::Sites { sites, next_cursor })
        }
        Query::GetSite { tenant_id, site } => state
            .site(&tenant_id, &site)
            .cloned()
            .map(|site| QueryResult::Site { site })
            .ok_or_else(|| Rejection::new(ReasonCode::SITE_NOT_FOUND, format!("no site '{site}'"))),
        Query::GetTenantStorage { tenant_id } => {
            if !state.tenants.contains_key(&tenant_id) {
                return Err(Rejection::new(ReasonCode::TENANT_NOT_FOUND, format!("no tenant '{tenant_id}'")));
            }
            Ok(QueryResult::Storage(Box::new(crate::retention::storage(state, &tenant_id))))
        }
        Query::ListDevices { tenant_id, site_id, after, limit } => {
            let (devices, next_cursor) =
                state.list_devices(&tenant_id, site_id.as_deref(), after.as_deref(), page_limit(limit)?);
            Ok(QueryResult::Devices { devices, next_cursor })
        }
        Query::GetDevice { tenant_id, device } => state
            .device(&tenant_id, &device)
            .cloned()
            .map(|device| QueryResult::Device { device })
            .ok_or_else(|| Rejection::new(ReasonCode::DEVICE_NOT_FOUND, format!("no device '{device}'"))),
        Query::GetPrincipalQuotas { tenant_id, principal } => {
            let p = state.principal(&tenant_id, &principal).ok_or_else(|| {
                Rejection::new(ReasonCode::PRINCIPAL_NOT_FOUND, format!("no principal '{principal}'"))
            })?;
            let quotas = state.principal_quotas.get(&tenant_id).and_then(|m| m.get(&p.id)).cloned().unwrap_or_default();
            Ok(QueryResult::PrincipalQuotas(PrincipalQuotasView { principal_id: p.id.clone(), quotas }))
        }
        Query::GetTenant { tenant } => state
            .tenant(&tenant)
            .cloned()
            .map(|tenant| QueryResult::Tenant { tenant })
            .ok_or_else(|| Rejection::new(ReasonCode::TENANT_NOT_FOUND, format!("no tenant '{tenant}'"))),
        other => Err(Rejection::new(ReasonCode::INTERNAL, format!("{other:?} is answered elsewhere"))),
    }
}

/// Tokens, issuers, executors and their enrollments and CAs, signing keys and revocations.
fn answer_credentials(state: &LedgerState, query: Query) -> Result<QueryResult, Rejection> {
    match query {
        Query::ListTokens { tenant_id, principal_id, after, limit } => {
            let (tokens, next_cursor) =
                state.list_tokens(&tenant_id, principal_id.as_deref(), after.as_deref(), page_limit(limit)?);
            Ok(QueryResult::Tokens { tokens, next_cursor })
        }
        Query::GetToken { tenant_id, jti } => state
            .token(&tenant_id, &jti)
            .map(|token| QueryResult::Token { token })
            .ok_or_else(|| Rejection::new(ReasonCode::TOKEN_NOT_FOUND, format!("no token '{jti}'"))),
        Query::ListIssuers { tenant_id } => Ok(QueryResult::Issuers {
            issuers: state.issuers.values().filter(|i| i.tenant_id == tenant_id).cloned().collect(),
        }),
        Query::ListExecutors { tenant_id } => Ok(QueryResult::Executors {
            executors: state.executors.get(&tenant_id).map(|m| m.values().cloned().collect()).unwrap_or_default(),
        }),
        Query::GetEnrollment { tenant_id, enrollment_id } => state
            .enrollments
            .get(&tenant_id)
            .and_then(|m| m.get(&enrollment_id))
            .cloned()
            .map(|enrollment| QueryResult::Enrollment { enrollment })
            .ok_or_else(|| Rejection::new(ReasonCode::ENROLLMENT_TOKEN_INVALID, "unknown enrollment token")),
        Query::ListExecutorCas { tenant_id } => Ok(QueryResult::ExecutorCas {
            cas: state.executor_cas.get(&tenant_id).map(|m| m.values().cloned().collect()).unwrap_or_default(),
        }),
        Query::Credentials { tenant_id } => {
            let r = &state.revocations;
            let tenant = match tenant_id {
                None => None,
                Some(id) => {
                    let t = state
                        .tenant(&id)
                        .ok_or_else(|| Rejection::new(ReasonCode::TENANT_NOT_FOUND, format!("no tenant '{id}'")))?;
                    let issuers: Vec<&String> =
                        state.issuers.iter().filter(|(_, i)| i.tenant_id == t.id).map(|(iss, _)| iss).collect();
                    Some(crate::dto::TenantCredentials {
                        executor_cas: state
                            .executor_cas
                            .get(&t.id)
                            .map(|m| m.keys().cloned().collect())
                            .unwrap_or_default(),
                        retired_executor_cas: r.executor_cas.get(&t.id).cloned().unwrap_or_default(),
                        revoked_issuer_tokens: issuers
                            .into_iter()
                            .filter_map(|iss| Some((iss.clone(), r.issuer_tokens.get(iss)?.clone())))
                            .collect(),
                        anonymous: state.anonymous.get(&t.id).cloned().unwrap_or_default(),
                        tenant_id: t.id.clone(),
                    })
                }
            };
            Ok(QueryResult::Credentials(Box::new(crate::dto::CredentialsView {
                signing_keys: state.signing_keys.keys().cloned().collect(),
                retired_signing_keys: r.signing_keys.clone(),
                revoked_certificates: r.role_certificates.values().cloned().collect(),
                tenant,
            })))
        }
        other => Err(Rejection::new(ReasonCode::INTERNAL, format!("{other:?} is answered elsewhere"))),
    }
}

/// Operations and their histories, work items, catalogs, upstreams.
fn answer_work(state: &LedgerState, query: Query) -> Result<QueryResult, Rejection> {
    match query {
        Query::ListOperations { tenant_id, filter, after, limit } => {
            let (operations, next_cursor) =
                state.list_operations(&tenant_id, &filter, after.as_deref(), page_limit(limit)?);
            Ok(QueryResult::Operations { operations, next_cursor })
        }
        Query::GetWork { tenant_id, work_id } => state
            .work(&tenant_id, &work_id)
            .map(|w| QueryResult::Work(Box::new(w.into_owned())))
            .ok_or_else(|| Rejection::new(ReasonCode::WORK_NOT_FOUND, format!("no work item '{work_id}'"))),
        Query::ListWork { tenant_id, state: in_state, after, limit } => {
            let (work, next_cursor) = state.list_work(&tenant_id, in_state, after.as_deref(), page_limit(limit)?);
            Ok(QueryResult::Works { work, next_cursor })
        }
        Query::GetOperationHistory { tenant_id, operation_id } => {
            let operation = state.operation(&tenant_id, &operation_id).map(Cow::into_owned).ok_or_else(|| {
                Rejection::new(ReasonCode::OPERATION_NOT_FOUND, format!("no operation '{operation_id}'"))
            })?;
            let transitions = state.operation_history(&tenant_id, &operation_id);
            Ok(QueryResult::History(Box::new(crate::dto::OperationHistory { operation, transitions })))
        }
        Query::GetOperation { tenant_id, operation_id } => state
            .operation(&tenant_id, &operation_id)
            .map(Cow::into_owned)
            .map(|op| QueryResult::Operation(Box::new(op)))
            .ok_or_else(|| Rejection::new(ReasonCode::OPERATION_NOT_FOUND, format!("no operation '{operation_id}'"))),
        Query::GetOperationByKey { tenant_id, principal_id, idempotency_key } => state
            .bound_operation(&tenant_id, &principal_id, &idempotency_key)
            .and_then(|id| state.operation(&tenant_id, &id).map(Cow::into_owned))
            .map(|op| QueryResult::Operation(Box::new(op)))
            .ok_or_else(|| Rejection::new(ReasonCode::OPERATION_NOT_FOUND, "no operation under this idempotency key")),
        Query::ListUpstreams { tenant_id } => Ok(QueryResult::Upstreams {
            upstreams: state
                .upstreams
                .get(&tenant_id)
                .map(|m| m.values().map(|u| u.summary()).collect())
                .unwrap_or_default(),
        }),
        Query::GetUpstream { tenant_id, name } => state
            .upstream(&tenant_id, &name)
            .cloned()
            .map(|u| QueryResult::Upstream(Box::new(u)))
            .ok_or_else(|| Rejection::new(ReasonCode::UPSTREAM_NOT_FOUND, format!("no upstream '{name}'"))),
        Query::ListCatalogs { tenant_id } => Ok(QueryResult::Catalogs {
            catalogs: state
                .catalogs
                .get(&tenant_id)
                .map(|v| v.values().rev().map(|c| c.summary()).collect())
                .unwrap_or_default(),
        }),
        Query::GetCatalog { tenant_id, version } => state
            .catalog(&tenant_id, version)
            .cloned()
            .map(|catalog| QueryResult::Catalog { catalog })
            .ok_or_else(|| Rejection::new(ReasonCode::CATALOG_NOT_FOUND, "no such catalog version")),
        other => Err(Rejection::new(ReasonCode::INTERNAL, format!("{other:?} is answered elsewhere"))),
    }
}
