//! Admin routes for revoking and retiring credentials (SPEC S1): a tenant issuer's token ids,
//! the nodes' token-signing keys, a tenant's executor CAs and role certificates of the cluster
//! PKI; and the edges a tenant lets act without a token (anonymous access). The ledger decides each (bounded, reason-coded); every node and edge applies it from its
//! replica.

use axum::extract::{Path, State};
use axum::routing::{get, post, put};
use axum::{Json, Router};
use serde::Deserialize;
use writ_api::dto::{
    AnonymousAccessRequest, CredentialsView, IssuerTokenRevocation, Query as LedgerQuery, RevokeCertificateRequest,
    RevokeIssuerTokenRequest,
};
use writ_api::ledger::{Command, Event};
use writ_api::revocation::{normalize_serial, RevokedRoleCertificateV1, SERIAL_HEX_MAX};
use writ_api::{ReasonCode, Rejection};

use crate::error::{ApiError, ValidJson, ValidQuery};
use crate::service::{find_principal, find_tenant, query, submit, Shared};

pub(crate) fn routes() -> Router<Shared> {
    Router::new()
        .route("/v1/cluster/credentials", get(show))
        .route("/v1/cluster/signing-keys/{kid}/retire", post(retire_signing_key))
        .route("/v1/cluster/certificates/revoke", post(revoke_certificate))
        .route("/v1/tenants/{tenant}/executor-cas/{fingerprint}/retire", post(retire_executor_ca))
        .route("/v1/tenants/{tenant}/issuers/revoke-token", post(revoke_issuer_token))
        .route("/v1/tenants/{tenant}/anonymous/{edge}", put(allow_anonymous).delete(forbid_anonymous))
}

/// `PUT …/anonymous/{edge}`: the edge (its certificate's id) may act without a token as the
/// principal — the anonymous mode of a loopback edge. Answers the tenant's credentials.
async fn allow_anonymous(
    State(st): State<Shared>,
    Path((tenant, edge_id)): Path<(String, String)>,
    ValidJson(b): ValidJson<AnonymousAccessRequest>,
) -> Result<Json<CredentialsView>, ApiError> {
    let t = find_tenant(&st, tenant).await?;
    let p = find_principal(&st, t.id.clone(), b.principal).await?;
    submit(&st, Command::SetAnonymousAccess { tenant_id: t.id.clone(), edge_id, principal_id: Some(p.id) }).await?;
    Ok(Json(credentials(&st, Some(t.id)).await?))
}

/// `DELETE …/anonymous/{edge}`: the edge's acts need a token again.
async fn forbid_anonymous(
    State(st): State<Shared>,
    Path((tenant, edge_id)): Path<(String, String)>,
) -> Result<Json<CredentialsView>, ApiError> {
    let t = find_tenant(&st, tenant).await?;
    submit(&st, Command::SetAnonymousAccess { tenant_id: t.id.clone(), edge_id, principal_id: None }).await?;
    Ok(Json(credentials(&st, Some(t.id)).await?))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ShowParams {
    tenant: Option<String>,
}

async fn credentials(st: &Shared, tenant: Option<String>) -> Result<CredentialsView, ApiError> {
    let tenant_id = match tenant {
        Some(t) => Some(find_tenant(st, t).await?.id),
        None => None,
    };
    Ok(query(st, LedgerQuery::Credentials { tenant_id }, false).await?)
}

async fn show(
    State(st): State<Shared>,
    ValidQuery(p): ValidQuery<ShowParams>,
) -> Result<Json<CredentialsView>, ApiError> {
    Ok(Json(credentials(&st, p.tenant).await?))
}

async fn retire_signing_key(
    State(st): State<Shared>,
    Path(kid): Path<String>,
) -> Result<Json<CredentialsView>, ApiError> {
    submit(&st, Command::RetireSigningKey { kid }).await?;
    Ok(Json(credentials(&st, None).await?))
}

async fn revoke_certificate(
    State(st): State<Shared>,
    ValidJson(b): ValidJson<RevokeCertificateRequest>,
) -> Result<Json<CredentialsView>, ApiError> {
    let serial = normalize_serial(&b.serial).ok_or_else(|| {
        Rejection::new(ReasonCode::INPUT_INVALID, format!("serial must be 1..={SERIAL_HEX_MAX} hex digits"))
    })?;
    let certificate = RevokedRoleCertificateV1 { serial, identity: b.identity, not_after_ms: b.not_after_ms };
    submit(&st, Command::RevokeRoleCertificate { certificate }).await?;
    Ok(Json(credentials(&st, None).await?))
}

async fn retire_executor_ca(
    State(st): State<Shared>,
    Path((tenant, fingerprint)): Path<(String, String)>,
) -> Result<Json<CredentialsView>, ApiError> {
    let t = find_tenant(&st, tenant).await?;
    submit(&st, Command::RetireExecutorCa { tenant_id: t.id.clone(), fingerprint }).await?;
    Ok(Json(credentials(&st, Some(t.id)).await?))
}

async fn revoke_issuer_token(
    State(st): State<Shared>,
    Path(tenant): Path<String>,
    ValidJson(b): ValidJson<RevokeIssuerTokenRequest>,
) -> Result<Json<IssuerTokenRevocation>, ApiError> {
    let t = find_tenant(&st, tenant).await?;
    let command = Command::RevokeIssuerToken { tenant_id: t.id, issuer: b.issuer, jti: b.jti };
    let events = submit(&st, command).await?;
    match events.into_iter().next().map(|e| e.event) {
        Some(Event::IssuerTokenRevokedV1 { issuer, jti, until_ms, .. }) => {
            Ok(Json(IssuerTokenRevocation { issuer, jti, until_ms }))
        }
        _ => Err(ApiError::new(ReasonCode::INTERNAL, "the ledger reported no revocation")),
    }
}
