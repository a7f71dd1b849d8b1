//! [`AdminClient`]: the one typed client of the admin API (`/v1`, as `/v1/openapi.json`
//! documents it), with the `writ_api::dto` types as request and response bodies. `writ admin`,
//! `writ dev`, the tests and `writ-loadtest` all speak to the admin API through it.
//!
//! Every failure is an [`AdminError`]: not reached (nothing was sent), the exchange was lost, or
//! the service answered with a reason code — so callers decide on kinds, never on messages.

use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;
use writ_api::audit::{AuditFilter, AuditRecord};
use writ_api::catalog::CatalogVersion;
use writ_api::device::{Device, Site};
use writ_api::dto::{
    AddLearnerRequest, AuditPage, CatalogList, ClusterStatus, CreateDeviceRequest, CreateEnrollmentRequest,
    CreatePrincipalRequest, CreateSiteRequest, CreateTenantRequest, CreatedEnrollment, CredentialsView,
    DecisionRequest, DelegateTokenRequest, DeviceList, EnrollRequest, EnrollResponse, ErrorBody, ExecutorList,
    InspectTokenRequest, IssueTokenRequest, IssuedToken, IssuerList, IssuerTokenRevocation, MembershipRequest,
    NodeStatus, PrincipalList, PrincipalQuotasView, RemoveIssuerRequest, ResolveRequest, RevokeCertificateRequest,
    RevokeIssuerTokenRequest, RevokePrincipalRequest, RevokeScopeRequest, RevokedToken, SiteList, SuspendTenantRequest,
    TenantList, TokenInspection,
};
use writ_api::ledger::Tenant;
use writ_api::operation::Operation;
use writ_api::principal::Principal;
use writ_api::quota::PrincipalQuotasV2;
use writ_api::reason::ReasonCode;
use writ_api::settings::TenantSettingsPatch;
use writ_api::token::{TenantIssuer, TenantIssuerV1, Token};

/// Deadline of one admin call (a learner's catch-up or a snapshot may take a while).
pub const ADMIN_CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// Deadline of a streamed answer as a whole (an audit export, a backup): what it carries bounds
/// it, not a call's deadline. Its reader bounds each wait for more bytes instead
/// ([`next_chunk`]).
pub const STREAM_DEADLINE: Duration = Duration::from_secs(24 * 3600);

/// The next bytes of a streamed answer ([`AdminClient::audit_export`], [`AdminClient::backup`]),
/// `None` at its end; an error when the connection broke or no bytes came for
/// [`ADMIN_CALL_TIMEOUT`].
pub async fn next_chunk(response: &mut reqwest::Response) -> Result<Option<impl AsRef<[u8]>>, String> {
    match tokio::time::timeout(ADMIN_CALL_TIMEOUT, response.chunk()).await {
        Ok(chunk) => chunk.map_err(|e| e.to_string()),
        Err(_) => Err(format!("no bytes for {} s", ADMIN_CALL_TIMEOUT.as_secs())),
    }
}

/// How an admin call failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AdminError {
    /// No connection was made: nothing was sent.
    NotReached(String),
    /// The request may have been sent but no whole answer came back (timeout, connection lost,
    /// an answer that is not the admin API's).
    Lost(String),
    /// The admin API answered with an error: its HTTP status, reason code and message.
    Rejected { status: u16, reason: ReasonCode, message: String },
}

impl AdminError {
    /// The reason code of a rejection (`LEDGER_UNAVAILABLE` when nothing answered).
    pub fn reason(&self) -> ReasonCode {
        match self {
            AdminError::Rejected { reason, .. } => *reason,
            AdminError::NotReached(_) | AdminError::Lost(_) => ReasonCode::LEDGER_UNAVAILABLE,
        }
    }

    /// The HTTP status of a rejection.
    pub fn status(&self) -> Option<u16> {
        match self {
            AdminError::Rejected { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// Whether the service could not answer (unreachable, lost, or a 5xx such as
    /// LEDGER_UNAVAILABLE while the cluster elects): worth retrying elsewhere or later.
    pub fn is_unavailable(&self) -> bool {
        match self {
            AdminError::Rejected { status, .. } => *status >= 500,
            AdminError::NotReached(_) | AdminError::Lost(_) => true,
        }
    }
}

impl std::fmt::Display for AdminError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AdminError::NotReached(m) | AdminError::Lost(m) => write!(f, "{m}"),
            AdminError::Rejected { reason, message, .. } => write!(f, "{reason}: {message}"),
        }
    }
}

impl std::error::Error for AdminError {}

/// Paging of a list: at most `limit` rows after the cursor `after`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Page {
    pub after: Option<String>,
    pub limit: Option<u32>,
}

/// The admin API of a cluster, as the operator token `token`. It has one or more endpoints
/// (every node serves the admin API): a request goes to the endpoint that answered last, and
/// to the next one only when it reached none (no connection: nothing can have been executed).
#[derive(Clone)]
pub struct AdminClient {
    bases: std::sync::Arc<Vec<String>>,
    preferred: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    token: String,
    http: reqwest::Client,
}

impl AdminClient {
    pub fn new(base: impl Into<String>, token: impl Into<String>) -> AdminClient {
        AdminClient::with_tls(base, token, None)
    }

    /// Over HTTPS trusting `tls`'s CA (and presenting its credential, if any).
    pub fn with_tls(base: impl Into<String>, token: impl Into<String>, tls: Option<&crate::ClientTls>) -> AdminClient {
        let mut b = reqwest::Client::builder().no_proxy().timeout(ADMIN_CALL_TIMEOUT);
        if let Some(t) = tls {
            b = t.apply(b);
        }
        AdminClient::with_http(base, token, b.build().unwrap_or_default())
    }

    /// With a configured HTTP client (TLS roots, client certificate, timeouts). `base` may list
    /// several endpoints separated by commas.
    pub fn with_http(base: impl Into<String>, token: impl Into<String>, http: reqwest::Client) -> AdminClient {
        let base = base.into();
        let bases: Vec<String> =
            base.split(',').map(|b| b.trim().trim_end_matches('/').to_string()).filter(|b| !b.is_empty()).collect();
        AdminClient {
            bases: std::sync::Arc::new(if bases.is_empty() { vec![base] } else { bases }),
            preferred: Default::default(),
            token: token.into(),
            http,
        }
    }

    /// The base URL of the endpoint requests go to first.
    pub fn base(&self) -> &str {
        &self.bases[self.preferred.load(std::sync::atomic::Ordering::Relaxed) % self.bases.len()]
    }

    /// Every endpoint, in the order given.
    pub fn endpoints(&self) -> &[String] {
        &self.bases
    }

    /// `method path` with an optional JSON body, as the operator; the raw answer. For tests of
    /// bad input and for routes whose body is not JSON (the audit export).
    pub async fn send(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<reqwest::Response, AdminError> {
        self.send_within(method, path, body, None).await
    }

    /// [`AdminClient::send`] with a deadline of its own instead of the client's.
    async fn send_within(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<&Value>,
        deadline: Option<Duration>,
    ) -> Result<reqwest::Response, AdminError> {
        use std::sync::atomic::Ordering;
        let n = self.bases.len();
        let start = self.preferred.load(Ordering::Relaxed);
        let mut not_reached = Vec::new();
        for i in 0..n {
            let at = (start + i) % n;
            let base = &self.bases[at];
            let mut rb = self.http.request(method.clone(), format!("{base}{path}")).bearer_auth(&self.token);
            if let Some(b) = body {
                rb = rb.json(b);
            }
            if let Some(d) = deadline {
                rb = rb.timeout(d);
            }
            match rb.send().await {
                Ok(r) => {
                    self.preferred.store(at, Ordering::Relaxed);
                    return Ok(r);
                }
                // Not connected: nothing was sent, so the next endpoint may be asked.
                Err(e) if e.is_connect() => not_reached.push(format!("cannot reach {base}: {e}")),
                Err(e) => return Err(AdminError::Lost(format!("no answer from {base}: {e}"))),
            }
        }
        Err(AdminError::NotReached(not_reached.join("; ")))
    }

    /// `method path` with a typed body; a success is decoded as `Resp`, an error body becomes
    /// its [`AdminError::Rejected`].
    pub async fn call<Req: Serialize + ?Sized, Resp: DeserializeOwned>(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<&Req>,
    ) -> Result<Resp, AdminError> {
        let body = body
            .map(serde_json::to_value)
            .transpose()
            .map_err(|e| AdminError::Lost(format!("request not encodable: {e}")))?;
        let response = self.send(method, path, body.as_ref()).await?;
        decode(response).await
    }

    async fn get<Resp: DeserializeOwned>(&self, path: &str) -> Result<Resp, AdminError> {
        self.call::<Value, Resp>(reqwest::Method::GET, path, None).await
    }

    async fn post<Req: Serialize + ?Sized, Resp: DeserializeOwned>(
        &self,
        path: &str,
        body: &Req,
    ) -> Result<Resp, AdminError> {
        self.call(reqwest::Method::POST, path, Some(body)).await
    }

    // Cluster.

    pub async fn cluster_status(&self) -> Result<ClusterStatus, AdminError> {
        self.get("/v1/cluster/status").await
    }

    pub async fn add_learner(&self, request: &AddLearnerRequest) -> Result<NodeStatus, AdminError> {
        self.post("/v1/cluster/learners", request).await
    }

    pub async fn change_membership(&self, request: &MembershipRequest) -> Result<NodeStatus, AdminError> {
        self.post("/v1/cluster/membership", request).await
    }

    pub async fn snapshot(&self) -> Result<NodeStatus, AdminError> {
        self.post("/v1/cluster/snapshot", &serde_json::json!({})).await
    }

    pub async fn purge_log(&self) -> Result<NodeStatus, AdminError> {
        self.post("/v1/cluster/purge", &serde_json::json!({})).await
    }

    // Tenants.

    pub async fn create_tenant(&self, request: &CreateTenantRequest) -> Result<Tenant, AdminError> {
        self.post("/v1/tenants", request).await
    }

    pub async fn list_tenants(&self, page: &Page) -> Result<TenantList, AdminError> {
        self.get(&paged("/v1/tenants", page, &[])).await
    }

    pub async fn tenant(&self, tenant: &str) -> Result<Tenant, AdminError> {
        self.get(&tenant_path(tenant, "")).await
    }

    pub async fn suspend_tenant(&self, tenant: &str, request: &SuspendTenantRequest) -> Result<Tenant, AdminError> {
        self.post(&tenant_path(tenant, "/suspend"), request).await
    }

    /// Deletes a tenant (a tombstone: its tokens and executors are refused at once).
    pub async fn delete_tenant(&self, tenant: &str, request: &SuspendTenantRequest) -> Result<Tenant, AdminError> {
        self.call(reqwest::Method::DELETE, &tenant_path(tenant, ""), Some(request)).await
    }

    /// Purges a deleted tenant's data (refused until its retention has passed).
    pub async fn purge_tenant(&self, tenant: &str) -> Result<(), AdminError> {
        self.post(&tenant_path(tenant, "/purge"), &serde_json::json!({})).await
    }

    /// What the ledger keeps of a tenant (`GET …/storage`).
    pub async fn tenant_storage(&self, tenant: &str) -> Result<writ_api::retention::TenantStorageV1, AdminError> {
        self.get(&tenant_path(tenant, "/storage")).await
    }

    pub async fn tenant_health(&self, tenant: &str) -> Result<writ_api::health::TenantHealth, AdminError> {
        self.get(&tenant_path(tenant, "/health")).await
    }

    pub async fn resume_tenant(&self, tenant: &str) -> Result<Tenant, AdminError> {
        self.post(&tenant_path(tenant, "/resume"), &serde_json::json!({})).await
    }

    pub async fn set_tenant_settings(&self, tenant: &str, patch: &TenantSettingsPatch) -> Result<Tenant, AdminError> {
        self.call(reqwest::Method::PATCH, &tenant_path(tenant, "/settings"), Some(patch)).await
    }

    // Principals.

    pub async fn create_principal(
        &self,
        tenant: &str,
        request: &CreatePrincipalRequest,
    ) -> Result<Principal, AdminError> {
        self.post(&tenant_path(tenant, "/principals"), request).await
    }

    pub async fn list_principals(&self, tenant: &str, page: &Page) -> Result<PrincipalList, AdminError> {
        self.get(&paged(&tenant_path(tenant, "/principals"), page, &[])).await
    }

    pub async fn principal(&self, tenant: &str, principal: &str) -> Result<Principal, AdminError> {
        self.get(&tenant_path(tenant, &format!("/principals/{}", encode(principal)))).await
    }

    pub async fn revoke_principal(
        &self,
        tenant: &str,
        principal: &str,
        request: &RevokePrincipalRequest,
    ) -> Result<Principal, AdminError> {
        self.post(&tenant_path(tenant, &format!("/principals/{}/revoke", encode(principal))), request).await
    }

    /// One more scope for an existing principal (`request` names it).
    pub async fn grant_scope(
        &self,
        tenant: &str,
        principal: &str,
        request: &RevokeScopeRequest,
    ) -> Result<Principal, AdminError> {
        self.post(&tenant_path(tenant, &format!("/principals/{}/scopes/grant", encode(principal))), request).await
    }

    pub async fn revoke_scope(
        &self,
        tenant: &str,
        principal: &str,
        request: &RevokeScopeRequest,
    ) -> Result<Principal, AdminError> {
        self.post(&tenant_path(tenant, &format!("/principals/{}/scopes/revoke", encode(principal))), request).await
    }

    pub async fn principal_quotas(&self, tenant: &str, principal: &str) -> Result<PrincipalQuotasView, AdminError> {
        self.get(&tenant_path(tenant, &format!("/principals/{}/quotas", encode(principal)))).await
    }

    pub async fn set_principal_quotas(
        &self,
        tenant: &str,
        principal: &str,
        quotas: &PrincipalQuotasV2,
    ) -> Result<PrincipalQuotasView, AdminError> {
        let path = tenant_path(tenant, &format!("/principals/{}/quotas", encode(principal)));
        self.call(reqwest::Method::PUT, &path, Some(quotas)).await
    }

    // Sites and devices.

    pub async fn create_site(&self, tenant: &str, request: &CreateSiteRequest) -> Result<Site, AdminError> {
        self.post(&tenant_path(tenant, "/sites"), request).await
    }

    pub async fn list_sites(&self, tenant: &str, page: &Page) -> Result<SiteList, AdminError> {
        self.get(&paged(&tenant_path(tenant, "/sites"), page, &[])).await
    }

    pub async fn site(&self, tenant: &str, site: &str) -> Result<Site, AdminError> {
        self.get(&tenant_path(tenant, &format!("/sites/{}", encode(site)))).await
    }

    pub async fn create_device(&self, tenant: &str, request: &CreateDeviceRequest) -> Result<Device, AdminError> {
        self.post(&tenant_path(tenant, "/devices"), request).await
    }

    pub async fn list_devices(&self, tenant: &str, site: Option<&str>, page: &Page) -> Result<DeviceList, AdminError> {
        let site: Vec<(&str, String)> = site.map(|s| ("site", s.to_string())).into_iter().collect();
        self.get(&paged(&tenant_path(tenant, "/devices"), page, &site)).await
    }

    pub async fn device(&self, tenant: &str, device: &str) -> Result<Device, AdminError> {
        self.get(&tenant_path(tenant, &format!("/devices/{}", encode(device)))).await
    }

    // Tokens and issuers.

    pub async fn issue_token(&self, tenant: &str, request: &IssueTokenRequest) -> Result<IssuedToken, AdminError> {
        self.post(&tenant_path(tenant, "/tokens"), request).await
    }

    /// Token records of `tenant` (of one principal, by id or name, if given).
    pub async fn list_tokens(
        &self,
        tenant: &str,
        principal: Option<&str>,
        page: &Page,
    ) -> Result<writ_api::dto::TokenList, AdminError> {
        let principal: Vec<(&str, String)> = principal.map(|p| ("principal", p.to_string())).into_iter().collect();
        self.get(&paged(&tenant_path(tenant, "/tokens"), page, &principal)).await
    }

    pub async fn token(&self, tenant: &str, jti: &str) -> Result<Token, AdminError> {
        self.get(&tenant_path(tenant, &format!("/tokens/{}", encode(jti)))).await
    }

    pub async fn delegate_token(
        &self,
        tenant: &str,
        jti: &str,
        request: &DelegateTokenRequest,
    ) -> Result<IssuedToken, AdminError> {
        self.post(&tenant_path(tenant, &format!("/tokens/{}/delegate", encode(jti))), request).await
    }

    pub async fn revoke_token(&self, tenant: &str, jti: &str) -> Result<RevokedToken, AdminError> {
        self.post(&tenant_path(tenant, &format!("/tokens/{}/revoke", encode(jti))), &serde_json::json!({})).await
    }

    pub async fn inspect_token(&self, request: &InspectTokenRequest) -> Result<TokenInspection, AdminError> {
        self.post("/v1/tokens/inspect", request).await
    }

    pub async fn list_issuers(&self, tenant: &str) -> Result<IssuerList, AdminError> {
        self.get(&tenant_path(tenant, "/issuers")).await
    }

    pub async fn set_issuer(&self, tenant: &str, issuer: &TenantIssuerV1) -> Result<TenantIssuer, AdminError> {
        self.call(reqwest::Method::PUT, &tenant_path(tenant, "/issuers"), Some(issuer)).await
    }

    /// Registers an issuer by its URL: the admin server fetches its keys through discovery.
    pub async fn discover_issuer(
        &self,
        tenant: &str,
        source: &writ_api::token::IssuerSourceV1,
    ) -> Result<writ_api::token::IssuerSource, AdminError> {
        self.post(&tenant_path(tenant, "/issuers/discover"), source).await
    }

    pub async fn remove_issuer(&self, tenant: &str, request: &RemoveIssuerRequest) -> Result<(), AdminError> {
        self.post(&tenant_path(tenant, "/issuers/remove"), request).await
    }

    /// Revokes a token id of a tenant issuer: its tokens are refused until `until_ms`.
    pub async fn revoke_issuer_token(
        &self,
        tenant: &str,
        request: &RevokeIssuerTokenRequest,
    ) -> Result<IssuerTokenRevocation, AdminError> {
        self.post(&tenant_path(tenant, "/issuers/revoke-token"), request).await
    }

    // Credentials: signing keys, role certificates, executor CAs.

    /// The cluster's signing keys and revocations (and with `tenant`, its executor CAs and
    /// revoked issuer token ids).
    pub async fn credentials(&self, tenant: Option<&str>) -> Result<CredentialsView, AdminError> {
        let params: Vec<(&str, String)> = tenant.map(|t| ("tenant", t.to_string())).into_iter().collect();
        self.get(&format!("/v1/cluster/credentials{}", query(&params))).await
    }

    pub async fn retire_signing_key(&self, kid: &str) -> Result<CredentialsView, AdminError> {
        self.post(&format!("/v1/cluster/signing-keys/{}/retire", encode(kid)), &serde_json::json!({})).await
    }

    pub async fn revoke_certificate(&self, request: &RevokeCertificateRequest) -> Result<CredentialsView, AdminError> {
        self.post("/v1/cluster/certificates/revoke", request).await
    }

    pub async fn retire_executor_ca(&self, tenant: &str, fingerprint: &str) -> Result<CredentialsView, AdminError> {
        let path = tenant_path(tenant, &format!("/executor-cas/{}/retire", encode(fingerprint)));
        self.post(&path, &serde_json::json!({})).await
    }

    /// Lets the edge `edge_id` act without a token as `principal` (`None`: takes that away).
    pub async fn set_anonymous(
        &self,
        tenant: &str,
        edge_id: &str,
        principal: Option<&str>,
    ) -> Result<CredentialsView, AdminError> {
        let path = tenant_path(tenant, &format!("/anonymous/{}", encode(edge_id)));
        match principal {
            Some(p) => {
                let body = writ_api::dto::AnonymousAccessRequest { principal: p.to_string() };
                self.call(reqwest::Method::PUT, &path, Some(&body)).await
            }
            None => self.call::<Value, CredentialsView>(reqwest::Method::DELETE, &path, None).await,
        }
    }

    // Catalogs.

    /// Publishes a catalog document (JSON; the service checks and compiles it).
    pub async fn publish_catalog(&self, tenant: &str, document: &Value) -> Result<CatalogVersion, AdminError> {
        self.post(&tenant_path(tenant, "/catalogs"), document).await
    }

    // Upstream MCP servers.

    pub async fn add_upstream(
        &self,
        tenant: &str,
        body: &writ_api::upstream::UpstreamBody,
    ) -> Result<writ_api::upstream::UpstreamV1, AdminError> {
        self.post(&tenant_path(tenant, "/upstreams"), body).await
    }

    pub async fn list_upstreams(&self, tenant: &str) -> Result<Vec<writ_api::upstream::UpstreamSummary>, AdminError> {
        #[derive(serde::Deserialize)]
        struct List {
            upstreams: Vec<writ_api::upstream::UpstreamSummary>,
        }
        let list: List = self.get(&tenant_path(tenant, "/upstreams")).await?;
        Ok(list.upstreams)
    }

    pub async fn upstream(&self, tenant: &str, name: &str) -> Result<writ_api::upstream::UpstreamView, AdminError> {
        self.get(&upstream_path(tenant, name, "")).await
    }

    pub async fn set_upstream(
        &self,
        tenant: &str,
        name: &str,
        body: &writ_api::upstream::UpstreamBody,
    ) -> Result<writ_api::upstream::UpstreamV1, AdminError> {
        self.call(reqwest::Method::PATCH, &upstream_path(tenant, name, ""), Some(body)).await
    }

    pub async fn remove_upstream(&self, tenant: &str, name: &str) -> Result<Value, AdminError> {
        self.call::<Value, Value>(reqwest::Method::DELETE, &upstream_path(tenant, name, ""), None).await
    }

    /// Lists the upstream's tools now (from the node) and records what differs as pending.
    pub async fn sync_upstream(&self, tenant: &str, name: &str) -> Result<writ_api::upstream::SyncReport, AdminError> {
        self.post(&upstream_path(tenant, name, "/sync"), &serde_json::json!({})).await
    }

    /// Pins the pending tool set with this digest.
    pub async fn approve_upstream(
        &self,
        tenant: &str,
        name: &str,
        digest: &str,
    ) -> Result<writ_api::upstream::UpstreamV1, AdminError> {
        self.post(&upstream_path(tenant, name, "/approve"), &serde_json::json!({"digest": digest})).await
    }

    pub async fn list_catalogs(&self, tenant: &str) -> Result<CatalogList, AdminError> {
        self.get(&tenant_path(tenant, "/catalogs")).await
    }

    /// A catalog version (`None`: the newest).
    pub async fn catalog(&self, tenant: &str, version: Option<u64>) -> Result<CatalogVersion, AdminError> {
        let version = version.map_or_else(|| "latest".to_string(), |v| v.to_string());
        self.get(&tenant_path(tenant, &format!("/catalogs/{version}"))).await
    }

    /// What changed from catalog version `from` to `to` (`None`: the newest).
    pub async fn diff_catalogs(
        &self,
        tenant: &str,
        from: Option<u64>,
        to: Option<u64>,
    ) -> Result<writ_api::catalog::CatalogDiff, AdminError> {
        let v = |v: Option<u64>| v.map_or_else(|| "latest".to_string(), |v| v.to_string());
        self.get(&tenant_path(tenant, &format!("/catalogs/{}/diff/{}", v(from), v(to)))).await
    }

    // Audit.

    /// One page of the tenant's audit records after the cursor `after`, matching `filter`.
    pub async fn audit(
        &self,
        tenant: &str,
        filter: &AuditFilter,
        after: Option<u64>,
        limit: Option<u32>,
    ) -> Result<AuditPage, AdminError> {
        self.get(&audit_path(tenant, "/audit", filter, after, limit)).await
    }

    /// Every audit record of the tenant matching `filter`, page by page.
    pub async fn audit_all(&self, tenant: &str, filter: &AuditFilter) -> Result<Vec<AuditRecord>, AdminError> {
        let mut records = Vec::new();
        let mut after = None;
        loop {
            let page = self.audit(tenant, filter, after, Some(writ_api::dto::PAGE_LIMIT_MAX)).await?;
            records.extend(page.records);
            match page.next_cursor {
                Some(next) => after = Some(next),
                None => return Ok(records),
            }
        }
    }

    /// The NDJSON export of the tenant's audit records after `after` matching `filter`, as a
    /// streaming response (an `{"error":…}` line means the service could not finish).
    pub async fn audit_export(
        &self,
        tenant: &str,
        filter: &AuditFilter,
        after: Option<u64>,
    ) -> Result<reqwest::Response, AdminError> {
        let path = audit_path(tenant, "/audit/export", filter, after, None);
        let response = self.send_within(reqwest::Method::GET, &path, None, Some(STREAM_DEADLINE)).await?;
        if response.status().is_success() {
            return Ok(response);
        }
        Err(rejection(response).await)
    }

    /// A backup of the serving node's ledger (`GET /v1/cluster/backup`), as a streaming response.
    pub async fn backup(&self) -> Result<reqwest::Response, AdminError> {
        let response =
            self.send_within(reqwest::Method::GET, "/v1/cluster/backup", None, Some(STREAM_DEADLINE)).await?;
        if response.status().is_success() {
            return Ok(response);
        }
        Err(rejection(response).await)
    }

    // Executors.

    pub async fn create_enrollment(
        &self,
        tenant: &str,
        request: &CreateEnrollmentRequest,
    ) -> Result<CreatedEnrollment, AdminError> {
        self.post(&tenant_path(tenant, "/executors/enrollments"), request).await
    }

    pub async fn list_executors(&self, tenant: &str) -> Result<ExecutorList, AdminError> {
        self.get(&tenant_path(tenant, "/executors")).await
    }

    pub async fn revoke_executor(&self, tenant: &str, executor: &str) -> Result<ExecutorList, AdminError> {
        let path = tenant_path(tenant, &format!("/executors/{}/revoke", encode(executor)));
        self.post(&path, &serde_json::json!({})).await
    }

    /// `POST /v1/enroll` (the enrollment token authenticates it; no operator token is needed).
    pub async fn enroll(&self, request: &EnrollRequest) -> Result<EnrollResponse, AdminError> {
        self.post("/v1/enroll", request).await
    }

    // Operations.

    /// The operator's queue: `tenant`'s operations matching `filter` (device and principal by
    /// id; the admin API also takes names).
    pub async fn list_operations(
        &self,
        tenant: &str,
        filter: &writ_api::dto::OperationFilter,
        page: &Page,
    ) -> Result<writ_api::dto::OperationList, AdminError> {
        let mut pairs: Vec<(&str, String)> = Vec::new();
        pairs.extend(filter.state.map(|s| ("state", s.as_str().to_string())));
        pairs.extend(filter.device_id.clone().map(|d| ("device", d)));
        pairs.extend(filter.principal_id.clone().map(|p| ("principal", p)));
        pairs.extend(filter.work_id.clone().map(|w| ("work", w)));
        pairs.extend(filter.since_ms.map(|t| ("since_ms", t.to_string())));
        pairs.extend(filter.until_ms.map(|t| ("until_ms", t.to_string())));
        if filter.needs_attention {
            pairs.push(("needs_attention", "true".into()));
        }
        self.get(&paged(&tenant_path(tenant, "/operations"), page, &pairs)).await
    }

    /// An operation's transitions, oldest first.
    pub async fn operation_history(
        &self,
        tenant: &str,
        operation: &str,
    ) -> Result<writ_api::dto::OperationHistory, AdminError> {
        self.get(&tenant_path(tenant, &format!("/operations/{}/history", encode(operation)))).await
    }

    // Work items.

    pub async fn create_work(
        &self,
        tenant: &str,
        request: &writ_api::dto::CreateWorkRequest,
    ) -> Result<writ_api::work::WorkItem, AdminError> {
        self.post(&tenant_path(tenant, "/work"), request).await
    }

    pub async fn revise_work(
        &self,
        tenant: &str,
        work: &str,
        request: &writ_api::dto::ReviseWorkRequest,
    ) -> Result<writ_api::work::WorkItem, AdminError> {
        self.call(reqwest::Method::PATCH, &tenant_path(tenant, &format!("/work/{}", encode(work))), Some(request)).await
    }

    pub async fn work(&self, tenant: &str, work: &str) -> Result<writ_api::work::WorkItem, AdminError> {
        self.get(&tenant_path(tenant, &format!("/work/{}", encode(work)))).await
    }

    pub async fn list_work(
        &self,
        tenant: &str,
        state: Option<writ_api::work::WorkState>,
        page: &Page,
    ) -> Result<writ_api::dto::WorkList, AdminError> {
        let pairs: Vec<(&str, String)> = state.map(|s| ("state", s.as_str().to_string())).into_iter().collect();
        self.get(&paged(&tenant_path(tenant, "/work"), page, &pairs)).await
    }

    pub async fn operation(&self, tenant: &str, operation: &str) -> Result<Operation, AdminError> {
        self.get(&tenant_path(tenant, &format!("/operations/{}", encode(operation)))).await
    }

    pub async fn cancel_operation(&self, tenant: &str, operation: &str) -> Result<Operation, AdminError> {
        let path = tenant_path(tenant, &format!("/operations/{}/cancel", encode(operation)));
        self.post(&path, &serde_json::json!({})).await
    }

    pub async fn accept_operation(
        &self,
        tenant: &str,
        operation: &str,
        request: &DecisionRequest,
    ) -> Result<Operation, AdminError> {
        self.post(&tenant_path(tenant, &format!("/operations/{}/accept", encode(operation))), request).await
    }

    pub async fn reject_operation(
        &self,
        tenant: &str,
        operation: &str,
        request: &DecisionRequest,
    ) -> Result<Operation, AdminError> {
        self.post(&tenant_path(tenant, &format!("/operations/{}/reject", encode(operation))), request).await
    }

    pub async fn resolve_operation(
        &self,
        tenant: &str,
        operation: &str,
        request: &ResolveRequest,
    ) -> Result<Operation, AdminError> {
        self.post(&tenant_path(tenant, &format!("/operations/{}/resolve", encode(operation))), request).await
    }
}

/// A success decoded as `Resp` (an empty body as JSON `null`), or the answer's rejection.
async fn decode<Resp: DeserializeOwned>(response: reqwest::Response) -> Result<Resp, AdminError> {
    if !response.status().is_success() {
        return Err(rejection(response).await);
    }
    let bytes = response.bytes().await.map_err(|e| AdminError::Lost(format!("answer lost: {e}")))?;
    let bytes: &[u8] = if bytes.is_empty() { b"null" } else { &bytes };
    serde_json::from_slice(bytes).map_err(|e| AdminError::Lost(format!("undecodable answer: {e}")))
}

/// An error answer as its rejection (an answer that is not the admin API's error body is lost).
async fn rejection(response: reqwest::Response) -> AdminError {
    let status = response.status().as_u16();
    let bytes = match response.bytes().await {
        Ok(b) => b,
        Err(e) => return AdminError::Lost(format!("answer lost: {e}")),
    };
    match serde_json::from_slice::<ErrorBody>(&bytes) {
        Ok(e) => AdminError::Rejected { status, reason: e.reason, message: e.message },
        Err(_) => AdminError::Lost(format!("HTTP {status} without a reason")),
    }
}

/// Percent-encodes one path segment or query value.
pub fn encode(segment: &str) -> String {
    let mut out = String::with_capacity(segment.len());
    for b in segment.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn tenant_path(tenant: &str, rest: &str) -> String {
    format!("/v1/tenants/{}{rest}", encode(tenant))
}

fn upstream_path(tenant: &str, name: &str, rest: &str) -> String {
    tenant_path(tenant, &format!("/upstreams/{}{rest}", encode(name)))
}

fn query(pairs: &[(&str, String)]) -> String {
    let joined: Vec<String> = pairs.iter().map(|(k, v)| format!("{k}={}", encode(v))).collect();
    if joined.is_empty() {
        String::new()
    } else {
        format!("?{}", joined.join("&"))
    }
}

fn paged(path: &str, page: &Page, extra: &[(&str, String)]) -> String {
    let mut pairs: Vec<(&str, String)> = Vec::new();
    if let Some(limit) = page.limit {
        pairs.push(("limit", limit.to_string()));
    }
    if let Some(after) = &page.after {
        pairs.push(("after", after.clone()));
    }
    pairs.extend(extra.iter().cloned());
    format!("{path}{}", query(&pairs))
}

fn audit_path(tenant: &str, rest: &str, filter: &AuditFilter, after: Option<u64>, limit: Option<u32>) -> String {
    let mut pairs: Vec<(&str, String)> = Vec::new();
    if let Some(after) = after {
        pairs.push(("after", after.to_string()));
    }
    if let Some(limit) = limit {
        pairs.push(("limit", limit.to_string()));
    }
    let text = [
        ("domain", &filter.domain),
        ("operation", &filter.operation),
        ("outcome", &filter.outcome),
        ("principal", &filter.principal_id),
        ("trace", &filter.trace_id),
    ];
    pairs.extend(text.iter().filter_map(|(k, v)| v.as_ref().map(|v| (*k, v.clone()))));
    if let Some(reason) = filter.reason_code {
        pairs.push(("reason", reason.to_string()));
    }
    if let Some(since) = filter.since_ms {
        pairs.push(("since_ms", since.to_string()));
    }
    format!("{}{}", tenant_path(tenant, rest), query(&pairs))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[test]
    fn paths_are_encoded() {
        assert_eq!(encode("a b/c"), "a%20b%2Fc");
        let page = Page { after: Some("x y".into()), limit: Some(5) };
        assert_eq!(
            paged("/v1/tenants", &page, &[("site", "s/1".into())]),
            "/v1/tenants?limit=5&after=x%20y&site=s%2F1"
        );
        let filter = AuditFilter {
            domain: Some("request".into()),
            reason_code: Some(ReasonCode::QUOTA_EXCEEDED),
            ..Default::default()
        };
        assert_eq!(
            audit_path("acme", "/audit", &filter, Some(3), None),
            "/v1/tenants/acme/audit?after=3&domain=request&reason=QUOTA_EXCEEDED"
        );
    }

    /// A streamed answer outlives the client's call deadline while its bytes keep coming: the
    /// client's deadline is 300 ms here, the export takes ~1 s.
    #[tokio::test]
    async fn an_export_streams_past_the_call_deadline() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let server = tokio::spawn(async move {
            let (mut conn, _) = listener.accept().await.unwrap();
            let mut head = [0u8; 4096];
            let _ = conn.read(&mut head).await.unwrap();
            conn.write_all(
                b"HTTP/1.1 200 OK\r\ncontent-type: application/x-ndjson\r\ntransfer-encoding: chunked\r\n\r\n",
            )
            .await
            .unwrap();
            for i in 0..10 {
                let line = format!("{{\"seq\":{i}}}\n");
                conn.write_all(format!("{:x}\r\n{line}\r\n", line.len()).as_bytes()).await.unwrap();
                // A slow source: each record ready a tenth of a second after the last.
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            conn.write_all(b"0\r\n\r\n").await.unwrap();
        });
        let http = reqwest::Client::builder().no_proxy().timeout(Duration::from_millis(300)).build().unwrap();
        let client = AdminClient::with_http(base, "t0ken", http);
        let mut response = client.audit_export("t", &AuditFilter::default(), None).await.expect("answered");
        let mut body = Vec::new();
        while let Some(chunk) = next_chunk(&mut response).await.expect("the stream goes on") {
            body.extend_from_slice(chunk.as_ref());
        }
        assert_eq!(String::from_utf8(body).unwrap().lines().count(), 10);
        server.await.unwrap();
    }
}
