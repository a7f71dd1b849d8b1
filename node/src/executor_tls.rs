//! The edge's executor listener (SPEC E7): mutual TLS in front of
//! [`writ_mcp_edge::executors::ExecutorGate`].
//!
//! - Server side: the edge's own certificate from the cluster PKI (followed on disk), and
//!   executors trust the cluster CA; or, without one (dev, loopback), every edge of a deployment
//!   derives the same "edge CA" from a shared secret file and issues itself a leaf for its host
//!   names, re-issued at ⅔ of its lifetime. Either CA is handed to executors at enrollment.
//! - Client side: a certificate must chain to one of the tenants' executor CAs the ledger holds
//!   (read from the edge's replica at each handshake, so a CA registered a moment ago counts);
//!   refusals at this layer are audited through the gate. The mapping to an executor
//!   (recorded fingerprint, not revoked, not expired) happens in the gate, per request.

use std::path::Path;
use std::sync::Arc;

use rustls::client::danger::HandshakeSignatureValid;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::{ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use rustls::{DigitallySignedStruct, DistinguishedName, RootCertStore, ServerConfig, SignatureScheme};
use tokio::net::TcpListener;
use writ_client::tls::provider;
use writ_mcp_edge::executors::ExecutorGate;
use writ_tenant_admin::enroll::DerivedCa;

const EDGE_CA_LABEL: &str = "writ/edge-executor-ca/v1";

/// Lifetime of a leaf the edge issues itself from the derived CA (dev and loopback setups).
const DERIVED_LEAF_LIFETIME: time::Duration = time::Duration::days(30);
/// A derived leaf is re-issued once it is this old (⅔ of its lifetime): a long-running edge
/// never serves an expired certificate.
const DERIVED_LEAF_RENEW_AFTER: std::time::Duration = std::time::Duration::from_secs(20 * 24 * 3600);

/// The executor endpoint's server side: the CA executors are told to trust and where the
/// certificate comes from.
pub struct EdgeTls {
    /// PEM of the CA the endpoint's certificate chains to (handed to executors at enrollment).
    pub ca_pem: String,
    cert: Arc<dyn ResolvesServerCert>,
}

/// The edge executor-endpoint CA every edge derives from the shared secret in `secret_file`.
fn derived_ca(secret_file: &Path) -> Result<DerivedCa, String> {
    let secret = crate::edge::load_or_create_secret(secret_file)?;
    DerivedCa::derive(EDGE_CA_LABEL, &secret, "", "Writ edge executor-endpoint CA")
}

impl EdgeTls {
    /// The edge's own credential from the cluster PKI (`writ pki issue edge NAME --host …`),
    /// followed on disk; executors trust the cluster CA `ca_pem`.
    pub fn cluster(credential: Arc<writ_client::tls::CredentialFiles>, ca_pem: String) -> EdgeTls {
        EdgeTls { ca_pem, cert: credential }
    }

    /// Without a cluster credential (dev, loopback): every edge of a deployment derives the same
    /// CA from the shared secret file (created 0600 when missing) and issues itself a leaf for
    /// `hosts` (IPs or names), re-issued before it expires.
    pub fn derived(secret_file: &Path, hosts: &[String]) -> Result<EdgeTls, String> {
        let ca = derived_ca(secret_file)?;
        let leaf = DerivedLeaf::issue(&ca, hosts)?;
        Ok(EdgeTls {
            ca_pem: ca.pem(),
            cert: Arc::new(DerivedLeaf { ca, hosts: hosts.to_vec(), current: std::sync::Mutex::new(leaf) }),
        })
    }

    /// PEM of the CA [`EdgeTls::derived`] derives from `secret_file` (created when missing):
    /// what enrollment tokens pin for such an edge.
    pub fn derived_ca_pem(secret_file: &Path) -> Result<String, String> {
        Ok(derived_ca(secret_file)?.pem())
    }

    fn server_config(&self, gate: &ExecutorGate) -> Result<Arc<ServerConfig>, String> {
        let verifier = Arc::new(ExecutorCertVerifier::new(gate.clone()));
        let mut cfg = ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_client_cert_verifier(verifier)
            .with_cert_resolver(self.cert.clone());
        cfg.alpn_protocols = writ_client::tls::alpn();
        Ok(Arc::new(cfg))
    }
}

/// A leaf issued from the derived CA, re-issued when [`DERIVED_LEAF_RENEW_AFTER`] old.
struct DerivedLeaf {
    ca: DerivedCa,
    hosts: Vec<String>,
    current: std::sync::Mutex<(std::time::Instant, Arc<CertifiedKey>)>,
}

impl std::fmt::Debug for DerivedLeaf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DerivedLeaf").field("hosts", &self.hosts).finish()
    }
}

impl DerivedLeaf {
    fn issue(ca: &DerivedCa, hosts: &[String]) -> Result<(std::time::Instant, Arc<CertifiedKey>), String> {
        let leaf_key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ED25519).map_err(|e| e.to_string())?;
        let mut params = rcgen::CertificateParams::new(hosts.to_vec()).map_err(|e| e.to_string())?;
        params.distinguished_name.push(rcgen::DnType::CommonName, "Writ edge executor endpoint");
        params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
        params.use_authority_key_identifier_extension = true;
        let now = time::OffsetDateTime::now_utc();
        params.not_before = now - time::Duration::minutes(5);
        params.not_after = now + DERIVED_LEAF_LIFETIME;
        let issuer = rcgen::Issuer::from_params(&ca.params, &ca.key);
        let leaf = params.signed_by(&leaf_key, &issuer).map_err(|e| e.to_string())?;
        let chain = vec![leaf.der().clone(), CertificateDer::from(ca.der.clone())];
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(leaf_key.serialize_der()));
        let certified = CertifiedKey::from_der(chain, key, &provider()).map_err(|e| e.to_string())?;
        Ok((std::time::Instant::now(), Arc::new(certified)))
    }
}

impl ResolvesServerCert for DerivedLeaf {
    fn resolve(&self, _hello: rustls::server::ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let mut current = self.current.lock().unwrap_or_else(|p| p.into_inner());
        if current.0.elapsed() >= DERIVED_LEAF_RENEW_AFTER {
            match Self::issue(&self.ca, &self.hosts) {
                Ok(fresh) => *current = fresh,
                Err(e) => tracing::error!(error = %e, "executor endpoint: re-issuing its certificate failed"),
            }
        }
        Some(current.1.clone())
    }
}

/// Client certificates must chain to a tenant's executor CA (as of this handshake).
struct ExecutorCertVerifier {
    gate: ExecutorGate,
    inner: Option<Arc<dyn ClientCertVerifier>>,
    provider: Arc<CryptoProvider>,
}

impl std::fmt::Debug for ExecutorCertVerifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ExecutorCertVerifier")
    }
}

impl ExecutorCertVerifier {
    fn new(gate: ExecutorGate) -> ExecutorCertVerifier {
        let mut roots = RootCertStore::empty();
        for der in gate.roots() {
            let _ = roots.add(CertificateDer::from(der));
        }
        let inner = (!roots.is_empty())
            .then(|| WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider()).build().ok())
            .flatten();
        ExecutorCertVerifier { gate, inner, provider: provider() }
    }
}

impl ClientCertVerifier for ExecutorCertVerifier {
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        let result = match &self.inner {
            Some(v) => v.verify_client_cert(end_entity, intermediates, now),
            None => Err(rustls::Error::General("no executor CA is registered".into())),
        };
        if let Err(e) = &result {
            self.gate.refused_at_tls(end_entity.as_ref(), &e.to_string());
        }
        result
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.provider.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.provider.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider.signature_verification_algorithms.supported_schemes()
    }
}

/// The endpoint's TLS for one handshake: the server certificate and the executor CAs the
/// ledger holds as of now.
struct EndpointTls {
    tls: EdgeTls,
    gate: ExecutorGate,
}

impl crate::tls::ServerConfigSource for EndpointTls {
    fn config(&self) -> Result<Arc<ServerConfig>, String> {
        self.tls.server_config(&self.gate)
    }
}

/// Serves the gate's router over mutual TLS on `listener` until `drain` starts.
pub async fn serve(listener: TcpListener, tls: EdgeTls, gate: ExecutorGate, drain: crate::tls::Drain) {
    let app = gate.router();
    let accept =
        crate::tls::Accept { tls: Some(Arc::new(EndpointTls { tls, gate })), trusted_proxies: None, name: "executor" };
    crate::tls::serve(listener, app, accept, drain, crate::DRAIN_DEADLINE).await
}
