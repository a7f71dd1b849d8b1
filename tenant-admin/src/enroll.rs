//! Executor enrollment (SPEC X1, D5). The operator creates a one-time, expiring enrollment for
//! (tenant, site, devices) and hands its token to the executor. The executor generates its key
//! locally and sends only a CSR with the token to `POST /v1/enroll`; this node checks the CSR's
//! self-signature, issues a client certificate signed by its executor CA for the tenant, and
//! the ledger records the certificate's fingerprint and serial — atomically using up the token.
//!
//! Each node derives its own CA key per tenant from its CA secret (so no private key is ever
//! replicated), registers the CA certificate in the ledger, and the ledger's set of CA
//! certificates is what executor certificates may chain to. A certificate the ledger did not
//! record (e.g. signed for a request that lost the race for the token) is never accepted,
//! because acceptance also requires its recorded fingerprint.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use rcgen::{
    CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair, KeyUsagePurpose, SanType,
    SerialNumber, SignatureAlgorithm,
};
use sha2::{Digest, Sha256};
use writ_api::device::{Enrollment, EnrollmentV1, ExecutorCaV1, ExecutorCertV1};
use writ_api::dto::{
    CreateEnrollmentRequest, CreatedEnrollment, EnrollRequest, EnrollResponse, ExecutorList, Query as LedgerQuery,
};
use writ_api::ledger::{Command, Tenant};
use writ_api::revocation::EXECUTOR_CA_RETIREMENTS_MAX;
use writ_api::{ReasonCode, Rejection};

use crate::error::{ApiError, ValidJson};
use crate::service::{find_tenant, query, submit, AdminState, Shared};

/// Default lifetime of an enrollment token.
pub const ENROLLMENT_TTL_DEFAULT_S: u64 = 3600;
/// Default lifetime of an executor certificate (`[authority] executor_cert_ttl_s`).
pub const EXECUTOR_CERT_TTL_S: u64 = 90 * 24 * 3600;
/// Shortest and longest configurable lifetimes (the shortest is for tests of renewal).
pub const EXECUTOR_CERT_TTL_MIN_S: u64 = 10;
pub const EXECUTOR_CERT_TTL_MAX_S: u64 = 397 * 24 * 3600;

/// Routes that need the operator token.
pub(crate) fn operator_routes() -> Router<Shared> {
    Router::new()
        .route("/v1/tenants/{tenant}/executors", get(list_executors))
        .route("/v1/tenants/{tenant}/executors/enrollments", post(create_enrollment))
        .route("/v1/tenants/{tenant}/executors/{executor}/revoke", post(revoke_executor))
}

/// `POST /v1/enroll`, authenticated by the enrollment token alone, and `POST /v1/renew`, by
/// the proof of the current certificate's key alone.
pub(crate) fn public_routes() -> Router<Shared> {
    Router::new()
        .route(writ_api::executor::ADMIN_ENROLL_PATH, post(enroll))
        .route(writ_api::executor::ADMIN_RENEW_PATH, post(renew))
}

fn token_hash(secret: &str) -> String {
    writ_api::hex(&Sha256::digest(secret.as_bytes()))
}

async fn create_enrollment(
    State(st): State<Shared>,
    Path(tenant): Path<String>,
    ValidJson(b): ValidJson<CreateEnrollmentRequest>,
) -> Result<(StatusCode, Json<CreatedEnrollment>), ApiError> {
    let t = find_tenant(&st, tenant).await?;
    let site: writ_api::device::Site =
        query(&st, LedgerQuery::GetSite { tenant_id: t.id.clone(), site: b.site }, false).await?;
    let mut device_ids = std::collections::BTreeSet::new();
    for d in b.devices {
        let device: writ_api::device::Device =
            query(&st, LedgerQuery::GetDevice { tenant_id: t.id.clone(), device: d }, false).await?;
        device_ids.insert(device.id);
    }
    let enrollment_id = format!("e-{}", uuid::Uuid::new_v4().simple());
    let secret = writ_api::hex(&rand_bytes::<32>());
    let token = writ_api::executor::EnrollmentToken::format(&t.id, &enrollment_id, &secret, &st.edge_ca_pins);
    let enrollment = EnrollmentV1 {
        enrollment_id: enrollment_id.clone(),
        site_id: site.id,
        device_ids,
        token_sha256: token_hash(&token),
        ttl_s: b.ttl_s.unwrap_or(ENROLLMENT_TTL_DEFAULT_S),
    };
    submit(&st, Command::CreateEnrollment { tenant_id: t.id.clone(), enrollment }).await?;
    let enrollment = find_enrollment(&st, &t.id, &enrollment_id).await?;
    Ok((StatusCode::CREATED, Json(CreatedEnrollment { token, enrollment })))
}

fn rand_bytes<const N: usize>() -> [u8; N] {
    // uuid v4 is backed by the OS CSPRNG; two of them give 32 random bytes.
    let mut out = [0u8; N];
    for chunk in out.chunks_mut(16) {
        let u = uuid::Uuid::new_v4();
        chunk.copy_from_slice(&u.as_bytes()[..chunk.len()]);
    }
    out
}

async fn find_enrollment(st: &AdminState, tenant_id: &str, enrollment_id: &str) -> Result<Enrollment, Rejection> {
    let q = LedgerQuery::GetEnrollment { tenant_id: tenant_id.into(), enrollment_id: enrollment_id.into() };
    query(st, q, false).await
}

async fn list_executors(State(st): State<Shared>, Path(tenant): Path<String>) -> Result<Json<ExecutorList>, ApiError> {
    let t = find_tenant(&st, tenant).await?;
    Ok(Json(query(&st, LedgerQuery::ListExecutors { tenant_id: t.id }, false).await?))
}

async fn revoke_executor(
    State(st): State<Shared>,
    Path((tenant, executor)): Path<(String, String)>,
) -> Result<Json<ExecutorList>, ApiError> {
    let t = find_tenant(&st, tenant).await?;
    submit(&st, Command::RevokeExecutor { tenant_id: t.id.clone(), executor_id: executor }).await?;
    list_executors(State(st), Path(t.id)).await
}

fn bad_token() -> Rejection {
    Rejection::new(ReasonCode::ENROLLMENT_TOKEN_INVALID, "unknown enrollment token")
}

async fn enroll(
    State(st): State<Shared>,
    ValidJson(b): ValidJson<EnrollRequest>,
) -> Result<Json<EnrollResponse>, ApiError> {
    let parsed = writ_api::executor::EnrollmentToken::parse(&b.token).ok_or_else(bad_token)?;
    let (tenant_id, enrollment_id) = (parsed.tenant_id, parsed.enrollment_id);
    let token_sha256 = token_hash(&b.token);
    // Fast, read-only checks first; the ledger decides atomically below.
    let enrollment = find_enrollment(&st, tenant_id, enrollment_id).await.map_err(|_| bad_token())?;
    if enrollment.token_sha256 != token_sha256 {
        return Err(bad_token().into());
    }
    if enrollment.used_at_ms.is_some() {
        return Err(ApiError::new(ReasonCode::ENROLLMENT_TOKEN_USED, "this enrollment token was already used"));
    }
    if enrollment.expires_at_ms <= writ_client::now_ms() {
        return Err(ApiError::new(ReasonCode::ENROLLMENT_TOKEN_EXPIRED, "this enrollment token has expired"));
    }
    let csr = Csr::from_pem(&b.csr)?;
    let tenant = find_tenant(&st, tenant_id.to_string()).await?;
    let executor_id = format!("x-{}", uuid::Uuid::new_v4().simple());
    let at = IssueAt { serial: rand_bytes::<16>(), now_ms: writ_client::now_ms() };
    let issued = issue_certificate(&st, &csr, &tenant, &enrollment.site_id, &executor_id, at).await?;
    submit(
        &st,
        Command::CompleteEnrollment {
            tenant_id: tenant.id.clone(),
            enrollment_id: enrollment.id.clone(),
            token_sha256,
            cert: issued.record.clone(),
        },
    )
    .await?;
    Ok(Json(issued.answer(tenant.id, enrollment.site_id, enrollment.device_ids)))
}

/// An executor certificate this node issued, before or after the ledger recorded it.
struct Issued {
    record: ExecutorCertV1,
    certificate: String,
    ca_certificate: String,
}

/// Issues the certificate of `executor_id` at `site_id` for the key of `csr`, from this node's
/// current CA for `tenant` (registered in the ledger first), valid for the configured lifetime.
/// A certificate's serial and issue time.
struct IssueAt {
    serial: [u8; 16],
    now_ms: u64,
}

impl IssueAt {
    /// The serial and time of the certificate a renewal request yields, derived from the
    /// request itself: the same request (a replay) yields the same certificate, byte for byte
    /// (the tenant CA signs deterministically), which the ledger then accepts as a no-op.
    fn renewal(from_fingerprint: &str, issued_at_ms: u64, csr_der: &[u8]) -> IssueAt {
        let digest: [u8; 32] = Sha256::new()
            .chain_update(b"writ/renewal-serial/v1\0")
            .chain_update(writ_api::executor::renewal_message(from_fingerprint, issued_at_ms, csr_der))
            .finalize()
            .into();
        let mut serial: [u8; 16] = digest[..16].try_into().expect("16 bytes");
        serial[0] &= 0x7f;
        IssueAt { serial, now_ms: issued_at_ms }
    }
}

async fn issue_certificate(
    st: &AdminState,
    csr: &Csr,
    tenant: &Tenant,
    site_id: &str,
    executor_id: &str,
    at: IssueAt,
) -> Result<Issued, Rejection> {
    let ca = current_ca(st, tenant).await?;
    let IssueAt { serial, now_ms: now } = at;
    let not_after_ms = now + st.executor_cert_ttl_s * 1000;
    let cert = ca.issue(csr, &tenant.id, site_id, executor_id, &serial, now, not_after_ms)?;
    let record = ExecutorCertV1 {
        executor_id: executor_id.to_string(),
        fingerprint: writ_api::sha256_hex(cert.der()),
        serial: writ_api::hex(&serial),
        not_after_ms,
        ca_fingerprint: ca.fingerprint.clone(),
    };
    Ok(Issued { record, certificate: cert.pem(), ca_certificate: ca.pem() })
}

impl Issued {
    /// The answer to the executor (enrollment or renewal).
    fn answer(
        self,
        tenant_id: String,
        site_id: String,
        device_ids: std::collections::BTreeSet<String>,
    ) -> EnrollResponse {
        EnrollResponse {
            executor_id: self.record.executor_id,
            tenant_id,
            site_id,
            device_ids: device_ids.into_iter().collect(),
            certificate: self.certificate,
            ca_certificate: self.ca_certificate,
            fingerprint: self.record.fingerprint,
            serial: self.record.serial,
            not_after_ms: self.record.not_after_ms,
        }
    }
}

fn renewal_refused(message: impl Into<String>) -> Rejection {
    Rejection::new(ReasonCode::EXECUTOR_CERT_REFUSED, message)
}

/// `POST /v1/renew` (SPEC X1): a new certificate for an executor's new key. The request is
/// trusted for nothing: the certificate must be one the ledger maps to an executor and within
/// its validity, the proof must verify under that certificate's key over
/// [`writ_api::executor::renewal_message`] and be fresh, and the ledger re-checks the executor
/// (not revoked, the certificate still its own) when it records the new one. The same request
/// sent again (a replay within the proof's freshness window) yields the same certificate and
/// changes nothing, so a captured renewal cannot replace the executor's current certificate.
async fn renew(
    State(st): State<Shared>,
    ValidJson(b): ValidJson<writ_api::executor::ForwardedRenewal>,
) -> Result<Json<EnrollResponse>, ApiError> {
    use writ_api::executor::{renewal_message, RENEW_PEM_MAX_BYTES, RENEW_PROOF_MAX_BYTES, RENEW_PROOF_SKEW_MS};
    if b.certificate.len() > RENEW_PEM_MAX_BYTES
        || b.renewal.csr.len() > RENEW_PEM_MAX_BYTES
        || b.renewal.proof.len() > RENEW_PROOF_MAX_BYTES
    {
        return Err(ApiError::new(
            ReasonCode::INPUT_INVALID,
            format!(
                "certificate and CSR are at most {RENEW_PEM_MAX_BYTES} bytes of PEM, the proof {RENEW_PROOF_MAX_BYTES}"
            ),
        ));
    }
    let current = writ_api::pem::first(&b.certificate, "CERTIFICATE")
        .ok_or_else(|| renewal_refused("expected the current certificate as PEM"))?;
    let fingerprint = writ_api::sha256_hex(&current);
    let now = writ_client::now_ms();
    if b.renewal.issued_at_ms.abs_diff(now) > RENEW_PROOF_SKEW_MS {
        return Err(renewal_refused(format!(
            "the proof's time is more than {} s from this node's clock",
            RENEW_PROOF_SKEW_MS / 1000
        ))
        .into());
    }
    let found = st.view.with_state(|s| s.executor_certs.get(&fingerprint).cloned());
    let (tenant_id, executor_id) =
        found.ok_or_else(|| renewal_refused("this certificate was not issued by a Writ enrollment"))?;
    let listed: ExecutorList = query(&st, LedgerQuery::ListExecutors { tenant_id: tenant_id.clone() }, false).await?;
    let executor = listed
        .executors
        .into_iter()
        .find(|x| x.id == executor_id)
        .ok_or_else(|| renewal_refused("unknown executor"))?;
    if executor.revoked_at_ms.is_some() {
        return Err(ApiError::new(ReasonCode::EXECUTOR_REVOKED, "a revoked executor cannot renew"));
    }
    let (_, parsed) = x509_parser::parse_x509_certificate(&current)
        .map_err(|_| renewal_refused("the certificate is not valid DER"))?;
    let validity = parsed.validity();
    let second = |t: x509_parser::time::ASN1Time| u64::try_from(t.timestamp()).unwrap_or(0).saturating_mul(1000);
    if !(second(validity.not_before) <= now && now < second(validity.not_after)) {
        return Err(renewal_refused("the certificate is outside its validity").into());
    }
    let csr_der = writ_api::pem::first(&b.renewal.csr, "CERTIFICATE REQUEST")
        .ok_or_else(|| csr_error("expected a PEM CERTIFICATE REQUEST"))?;
    let proof = {
        use base64::Engine;
        base64::engine::general_purpose::STANDARD
            .decode(b.renewal.proof.trim())
            .map_err(|_| renewal_refused("the proof is not base64"))?
    };
    let message = renewal_message(&fingerprint, b.renewal.issued_at_ms, &csr_der);
    if !signed_by_key(parsed.tbs_certificate.subject_pki.raw, &message, &proof)? {
        return Err(renewal_refused("the proof does not verify under the current certificate's key").into());
    }
    let csr = Csr::from_der(&csr_der)?;
    let tenant = find_tenant(&st, tenant_id.clone()).await?;
    let at = IssueAt::renewal(&fingerprint, b.renewal.issued_at_ms, &csr_der);
    let issued = issue_certificate(&st, &csr, &tenant, &executor.site_id, &executor_id, at).await?;
    submit(
        &st,
        Command::RenewExecutorCertificate {
            tenant_id: tenant.id.clone(),
            executor_id,
            from_fingerprint: fingerprint,
            cert: issued.record.clone(),
        },
    )
    .await?;
    Ok(Json(issued.answer(tenant.id, executor.site_id, executor.device_ids)))
}

/// `(algorithm identifier content, key bits)` of the SubjectPublicKeyInfo at the start of
/// `input`.
fn spki(input: &[u8]) -> Result<(&[u8], &[u8]), Rejection> {
    let (spki, _) = expect(input, 0x30)?;
    let (key_alg, rest) = expect(spki.content, 0x30)?;
    let (key_bits, _) = expect(rest, 0x03)?;
    Ok((key_alg.content, bit_string(key_bits.content)?))
}

fn bit_string(b: &[u8]) -> Result<&[u8], Rejection> {
    match b.split_first() {
        Some((0, rest)) => Ok(rest),
        _ => Err(csr_error("unexpected unused bits in a BIT STRING")),
    }
}

/// Whether `signature` over `message` verifies under the key of the SubjectPublicKeyInfo
/// `spki_der` with any algorithm rustls accepts for that key type (Ed25519, ECDSA P-256/P-384
/// with their hashes).
fn signed_by_key(spki_der: &[u8], message: &[u8], signature: &[u8]) -> Result<bool, Rejection> {
    let (key_alg, key) = spki(spki_der).map_err(|_| renewal_refused("the certificate's key is not valid DER"))?;
    Ok(rustls::crypto::aws_lc_rs::default_provider()
        .signature_verification_algorithms
        .all
        .iter()
        .filter(|a| a.public_key_alg_id().as_ref() == key_alg)
        .any(|a| a.verify_signature(key, message, signature).is_ok()))
}

/// A node's executor CA for one tenant: an Ed25519 key derived from the node's CA secret and
/// the tenant id, and a self-signed certificate that is byte-identical every time it is built
/// (fixed validity and serial, deterministic Ed25519 signatures).
struct TenantCa {
    key: KeyPair,
    params: CertificateParams,
    der: Vec<u8>,
    fingerprint: String,
}

/// PKCS#8 v1 prefix of an Ed25519 private key (RFC 8410): the 32-byte seed follows.
const ED25519_PKCS8_PREFIX: [u8; 16] =
    [0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04, 0x20];

fn csr_error(message: impl Into<String>) -> Rejection {
    Rejection::new(ReasonCode::ENROLLMENT_CSR_INVALID, message)
}

fn internal(e: impl std::fmt::Display) -> Rejection {
    Rejection::new(ReasonCode::INTERNAL, format!("certificate issuance failed: {e}"))
}

/// A CA whose Ed25519 key is derived from `secret` under a domain `label` (and `context`), with
/// a self-signed certificate that is byte-identical every time it is built (fixed validity and
/// serial, deterministic Ed25519 signatures): every holder of the secret builds the same CA and
/// no private key is ever stored or replicated.
pub struct DerivedCa {
    pub key: KeyPair,
    pub params: CertificateParams,
    pub der: Vec<u8>,
}

impl DerivedCa {
    pub fn derive(label: &str, secret: &[u8], context: &str, common_name: &str) -> Result<DerivedCa, String> {
        let mut h = Sha256::new();
        h.update(label.as_bytes());
        h.update([0u8]);
        h.update(secret);
        h.update(context.as_bytes());
        let seed = h.finalize();
        let mut pkcs8 = ED25519_PKCS8_PREFIX.to_vec();
        pkcs8.extend_from_slice(&seed);
        let key = KeyPair::try_from(pkcs8.as_slice()).map_err(|e| e.to_string())?;
        let mut params = CertificateParams::default();
        let mut dn = DistinguishedName::new();
        dn.push(DnType::OrganizationName, "Writ");
        dn.push(DnType::CommonName, common_name);
        params.distinguished_name = dn;
        params.is_ca = IsCa::Ca(rcgen::BasicConstraints::Constrained(0));
        params.key_usages =
            vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
        params.not_before = rcgen::date_time_ymd(2024, 1, 1);
        params.not_after = rcgen::date_time_ymd(2100, 1, 1);
        // Deterministic (every holder of the secret builds the same certificate) but never
        // key material: the serial is a separate hash of the seed.
        let serial: [u8; 32] = Sha256::new().chain_update(b"writ/ca-serial/v1\0").chain_update(seed).finalize().into();
        let mut serial: [u8; 16] = serial[..16].try_into().expect("16 bytes");
        serial[0] &= 0x7f;
        params.serial_number = Some(SerialNumber::from_slice(&serial));
        let der = params.self_signed(&key).map_err(|e| e.to_string())?.der().to_vec();
        Ok(DerivedCa { key, params, der })
    }

    /// The CA certificate as PEM.
    pub fn pem(&self) -> String {
        writ_api::pem::encode("CERTIFICATE", &self.der)
    }
}

/// This node's CA for `tenant`, registered in the ledger: the first of its derived CAs the
/// ledger has not retired (`writ admin credential retire-ca`). Retirements are bounded
/// ([`EXECUTOR_CA_RETIREMENTS_MAX`]), so the search is.
async fn current_ca(st: &AdminState, tenant: &Tenant) -> Result<TenantCa, Rejection> {
    for generation in 0..=EXECUTOR_CA_RETIREMENTS_MAX as u32 {
        let ca = TenantCa::derive(&st.ca_secret, tenant, generation)?;
        if st.view.with_state(|s| s.revocations.executor_ca_retired(&tenant.id, &ca.fingerprint)) {
            continue;
        }
        match submit(st, Command::RegisterExecutorCa { tenant_id: tenant.id.clone(), ca: ca.record() }).await {
            Ok(_) => return Ok(ca),
            // Retired, and this node's replica did not know yet.
            Err(r) if r.reason == ReasonCode::CREDENTIAL_RETIRED => continue,
            Err(r) => return Err(r),
        }
    }
    Err(Rejection::new(ReasonCode::QUOTA_EXCEEDED, "every executor CA this node can derive for the tenant is retired"))
}

impl TenantCa {
    /// Generation 0 is the CA nodes derived before retirement existed (same bytes); each
    /// retirement moves a node to the next generation.
    fn derive(secret: &[u8; 32], tenant: &Tenant, generation: u32) -> Result<TenantCa, Rejection> {
        let context = match generation {
            0 => tenant.id.clone(),
            n => format!("{}#{n}", tenant.id),
        };
        let DerivedCa { key, params, der } =
            DerivedCa::derive("writ/executor-ca/v1", secret, &context, &format!("Writ executor CA {}", tenant.id))
                .map_err(internal)?;
        let fingerprint = writ_api::sha256_hex(&der);
        Ok(TenantCa { key, params, der, fingerprint })
    }

    fn record(&self) -> ExecutorCaV1 {
        ExecutorCaV1 { fingerprint: self.fingerprint.clone(), cert_der: self.der.clone() }
    }

    fn pem(&self) -> String {
        writ_api::pem::encode("CERTIFICATE", &self.der)
    }

    #[allow(clippy::too_many_arguments)]
    fn issue(
        &self,
        csr: &Csr,
        tenant_id: &str,
        site_id: &str,
        executor_id: &str,
        serial: &[u8],
        now_ms: u64,
        not_after_ms: u64,
    ) -> Result<rcgen::Certificate, Rejection> {
        let mut params = CertificateParams::default();
        let mut dn = DistinguishedName::new();
        dn.push(DnType::OrganizationName, tenant_id);
        dn.push(DnType::CommonName, executor_id);
        params.distinguished_name = dn;
        let uri = format!("urn:writ:executor:{tenant_id}:{site_id}:{executor_id}");
        params.subject_alt_names = vec![SanType::URI(uri.try_into().map_err(internal)?)];
        params.is_ca = IsCa::ExplicitNoCa;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        params.use_authority_key_identifier_extension = true;
        params.serial_number = Some(SerialNumber::from_slice(serial));
        let at = |ms: u64| time::OffsetDateTime::from_unix_timestamp((ms / 1000) as i64).map_err(internal);
        params.not_before = at(now_ms.saturating_sub(writ_api::executor::CERT_BACKDATE_MS))?;
        params.not_after = at(not_after_ms)?;
        let issuer = rcgen::Issuer::from_params(&self.params, &self.key);
        params.signed_by(csr, &issuer).map_err(internal)
    }
}

/// A parsed, signature-checked PKCS#10 request: only its public key is used (the identity in
/// the certificate is Writ's, never the requester's subject).
struct Csr {
    public_key: Vec<u8>,
    alg: &'static SignatureAlgorithm,
}

impl rcgen::PublicKeyData for Csr {
    fn der_bytes(&self) -> &[u8] {
        &self.public_key
    }
    fn algorithm(&self) -> &'static SignatureAlgorithm {
        self.alg
    }
}

/// One DER element: its tag, its content, and its whole encoding (header included).
struct Der<'a> {
    tag: u8,
    content: &'a [u8],
    whole: &'a [u8],
}

/// The first DER element of `input`, and the rest of the input.
fn tlv(input: &[u8]) -> Result<(Der<'_>, &[u8]), Rejection> {
    let bad = || csr_error("the CSR is not valid DER");
    let (&tag, rest) = input.split_first().ok_or_else(bad)?;
    let (&first, rest) = rest.split_first().ok_or_else(bad)?;
    let (len, rest) = if first < 0x80 {
        (first as usize, rest)
    } else {
        let n = (first & 0x7f) as usize;
        if n == 0 || n > 4 || rest.len() < n {
            return Err(bad());
        }
        (rest[..n].iter().fold(0usize, |acc, b| (acc << 8) | *b as usize), &rest[n..])
    };
    if rest.len() < len {
        return Err(bad());
    }
    let header = input.len() - rest.len();
    Ok((Der { tag, content: &rest[..len], whole: &input[..header + len] }, &rest[len..]))
}

/// Like [`tlv`], requiring `tag`.
fn expect(input: &[u8], tag: u8) -> Result<(Der<'_>, &[u8]), Rejection> {
    let (der, rest) = tlv(input)?;
    if der.tag != tag {
        return Err(csr_error(format!("unexpected DER tag 0x{:02x} in the CSR", der.tag)));
    }
    Ok((der, rest))
}

impl Csr {
    fn from_pem(pem: &str) -> Result<Csr, Rejection> {
        if pem.contains("PRIVATE KEY") {
            return Err(csr_error(
                "that is a private key: send only a CERTIFICATE REQUEST; keys never leave the executor",
            ));
        }
        let der = writ_api::pem::first(pem, "CERTIFICATE REQUEST")
            .ok_or_else(|| csr_error("expected a PEM CERTIFICATE REQUEST (with valid base64)"))?;
        Self::from_der(&der)
    }

    fn from_der(der: &[u8]) -> Result<Csr, Rejection> {
        // CertificationRequest ::= SEQUENCE { info, signatureAlgorithm, signature BIT STRING }
        let (outer, trailing) = expect(der, 0x30)?;
        if !trailing.is_empty() {
            return Err(csr_error("trailing bytes after the CSR"));
        }
        let (info, rest) = expect(outer.content, 0x30)?;
        let (sig_alg, rest) = expect(rest, 0x30)?;
        let (sig_bits, _) = expect(rest, 0x03)?;
        // info ::= SEQUENCE { version INTEGER, subject Name, subjectPKInfo, [0] attributes }
        let (_, rest) = expect(info.content, 0x02)?;
        let (_, rest) = expect(rest, 0x30)?;
        let (key_alg, public_key) = spki(rest)?;
        let (sig_alg, info_der) = (sig_alg.content, info.whole);
        let signature = bit_string(sig_bits.content)?;
        let verifier = rustls::crypto::aws_lc_rs::default_provider()
            .signature_verification_algorithms
            .all
            .iter()
            .find(|a| a.public_key_alg_id().as_ref() == key_alg && a.signature_alg_id().as_ref() == sig_alg)
            .copied()
            .ok_or_else(|| csr_error("unsupported key or signature algorithm; use Ed25519 or ECDSA P-256/P-384"))?;
        verifier
            .verify_signature(public_key, info_der, signature)
            .map_err(|_| csr_error("the CSR's signature does not verify: it was not signed by its own key"))?;
        let alg = [&rcgen::PKCS_ED25519, &rcgen::PKCS_ECDSA_P256_SHA256, &rcgen::PKCS_ECDSA_P384_SHA384]
            .into_iter()
            .find(|a| spki_alg_matches(a, key_alg))
            .ok_or_else(|| csr_error("unsupported key type; use Ed25519 or ECDSA P-256/P-384"))?;
        Ok(Csr { public_key: public_key.to_vec(), alg })
    }
}

/// Whether rcgen's algorithm writes the same SubjectPublicKeyInfo algorithm identifier.
fn spki_alg_matches(alg: &'static SignatureAlgorithm, key_alg: &[u8]) -> bool {
    const ED25519: &[u8] = &[0x06, 0x03, 0x2b, 0x65, 0x70];
    const P256: &[u8] = &[
        0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01,
        0x07,
    ];
    const P384: &[u8] =
        &[0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06, 0x05, 0x2b, 0x81, 0x04, 0x00, 0x22];
    let want = if std::ptr::eq(alg, &rcgen::PKCS_ED25519) {
        ED25519
    } else if std::ptr::eq(alg, &rcgen::PKCS_ECDSA_P256_SHA256) {
        P256
    } else {
        P384
    };
    key_alg == want
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A CA's serial is public: it must not be (a part of) its private key's seed.
    #[test]
    fn a_derived_ca_serial_reveals_nothing_of_its_key() {
        let secret = [7u8; 32];
        let ca = DerivedCa::derive("writ/test-ca/v1", &secret, "t-1", "test").unwrap();
        let again = DerivedCa::derive("writ/test-ca/v1", &secret, "t-1", "test").unwrap();
        assert_eq!(ca.der, again.der, "every holder of the secret builds the same CA");
        let seed = Sha256::new()
            .chain_update(b"writ/test-ca/v1")
            .chain_update([0u8])
            .chain_update(secret)
            .chain_update(b"t-1")
            .finalize();
        let serial = ca.params.serial_number.as_ref().unwrap().to_bytes();
        assert!(!seed.windows(8).any(|w| serial.windows(8).any(|s| s == w)), "the serial carries key bytes");
        assert!(!ca.key.serialize_der().windows(8).any(|w| serial.windows(8).any(|s| s == w)));
    }

    fn tenant() -> Tenant {
        Tenant {
            id: "t-1".into(),
            name: "acme".into(),
            display_name: None,
            state: writ_api::ledger::TenantState::Active,
            created_at_ms: 0,
            updated_at_ms: 0,
            revision: 1,
            settings: Default::default(),
        }
    }

    #[test]
    fn ca_is_deterministic_per_secret_tenant_and_generation() {
        let a = TenantCa::derive(&[1; 32], &tenant(), 0).unwrap();
        let b = TenantCa::derive(&[1; 32], &tenant(), 0).unwrap();
        let c = TenantCa::derive(&[2; 32], &tenant(), 0).unwrap();
        let next = TenantCa::derive(&[1; 32], &tenant(), 1).unwrap();
        assert_eq!(a.der, b.der);
        assert_ne!(a.fingerprint, c.fingerprint);
        assert_ne!(a.fingerprint, next.fingerprint, "a retired CA is followed by a new one");
    }

    /// A renewal proof verifies under the certificate's own key only, for Ed25519 and ECDSA.
    #[test]
    fn renewal_proofs_verify_under_the_certificate_key_only() {
        use rcgen::SigningKey;
        for alg in [&rcgen::PKCS_ED25519, &rcgen::PKCS_ECDSA_P256_SHA256, &rcgen::PKCS_ECDSA_P384_SHA384] {
            let key = KeyPair::generate_for(alg).unwrap();
            let cert = CertificateParams::new(vec!["x".into()]).unwrap().self_signed(&key).unwrap();
            let (_, parsed) = x509_parser::parse_x509_certificate(cert.der()).unwrap();
            let spki_der = parsed.tbs_certificate.subject_pki.raw;
            let message = writ_api::executor::renewal_message("ab", 1, b"csr");
            assert!(signed_by_key(spki_der, &message, &key.sign(&message).unwrap()).unwrap());
            let other = KeyPair::generate_for(alg).unwrap();
            assert!(!signed_by_key(spki_der, &message, &other.sign(&message).unwrap()).unwrap());
            let changed = writ_api::executor::renewal_message("ab", 2, b"csr");
            assert!(!signed_by_key(spki_der, &changed, &key.sign(&message).unwrap()).unwrap());
        }
    }

    #[test]
    fn csrs_of_supported_keys_parse_and_tampered_ones_do_not() {
        for alg in [&rcgen::PKCS_ED25519, &rcgen::PKCS_ECDSA_P256_SHA256, &rcgen::PKCS_ECDSA_P384_SHA384] {
            let key = KeyPair::generate_for(alg).unwrap();
            let csr = CertificateParams::new(vec![]).unwrap().serialize_request(&key).unwrap();
            let parsed = Csr::from_der(csr.der()).unwrap();
            assert_eq!(parsed.public_key, key.public_key_raw());
            let mut tampered = csr.der().to_vec();
            let n = tampered.len();
            tampered[n - 3] ^= 0x55;
            assert_eq!(Csr::from_der(&tampered).err().unwrap().reason, ReasonCode::ENROLLMENT_CSR_INVALID);
        }
        let key = KeyPair::generate_for(&rcgen::PKCS_ED25519).unwrap();
        assert!(Csr::from_pem(&key.serialize_pem()).err().unwrap().message.contains("private key"));
    }
}
