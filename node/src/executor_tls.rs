//! The edge's executor listener (SPEC E7): mutual TLS in front of
//! [`writ_mcp_edge::executors::ExecutorGate`].
//!
//! - Server side: every edge of a deployment derives the same "edge CA" from a shared secret
//!   file (like the seal key) and issues itself a fresh leaf certificate for its host names at
//!   start; executors trust that CA (handed to them at enrollment).
//! - Client side: a certificate must chain to one of the tenants' executor CAs the ledger holds
//!   (read from the edge's replica at each handshake, so a CA registered a moment ago counts);
//!   refusals at this layer are audited through the gate. The mapping to an executor
//!   (recorded fingerprint, not revoked, not expired) happens in the gate, per request.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use axum::Extension;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::service::TowerToHyperService;
use rustls::client::danger::HandshakeSignatureValid;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::WebPkiClientVerifier;
use rustls::{DigitallySignedStruct, DistinguishedName, RootCertStore, ServerConfig, SignatureScheme};
use tokio::net::TcpListener;
use writ_mcp_edge::executors::{ExecutorGate, ExecutorPeer};
use writ_tenant_admin::enroll::DerivedCa;

const HANDSHAKE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);
const EDGE_CA_LABEL: &str = "writ/edge-executor-ca/v1";

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
}

/// The edges' CA (derived from the shared secret) and this edge's leaf certificate.
pub struct EdgeTls {
    pub ca_pem: String,
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
}

impl EdgeTls {
    /// Reads (or creates, 0600) the shared secret and issues a leaf for `hosts` (IPs or names).
    pub fn load_or_create(secret_file: &Path, hosts: &[String]) -> Result<EdgeTls, String> {
        let secret = crate::edge::load_or_create_secret(secret_file)?;
        let ca = DerivedCa::derive(EDGE_CA_LABEL, &secret, "", "Writ edge executor-endpoint CA")?;
        let leaf_key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ED25519).map_err(|e| e.to_string())?;
        let mut params = rcgen::CertificateParams::new(hosts.to_vec()).map_err(|e| e.to_string())?;
        params.distinguished_name.push(rcgen::DnType::CommonName, "Writ edge executor endpoint");
        params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
        params.use_authority_key_identifier_extension = true;
        let now = time::OffsetDateTime::now_utc();
        params.not_before = now - time::Duration::minutes(5);
        params.not_after = now + time::Duration::days(30);
        let issuer = rcgen::Issuer::from_params(&ca.params, &ca.key);
        let leaf = params.signed_by(&leaf_key, &issuer).map_err(|e| e.to_string())?;
        Ok(EdgeTls {
            ca_pem: ca.pem(),
            chain: vec![leaf.der().clone(), CertificateDer::from(ca.der.clone())],
            key: PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(leaf_key.serialize_der())),
        })
    }

    fn server_config(&self, gate: &ExecutorGate) -> Result<Arc<ServerConfig>, String> {
        let verifier = Arc::new(ExecutorCertVerifier::new(gate.clone()));
        let mut cfg = ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_client_cert_verifier(verifier)
            .with_single_cert(self.chain.clone(), self.key.clone_key())
            .map_err(|e| e.to_string())?;
        cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(Arc::new(cfg))
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

/// Serves the gate's router over mutual TLS until the task is aborted.
pub async fn serve(listener: TcpListener, tls: Arc<EdgeTls>, gate: ExecutorGate) {
    let app = gate.router();
    loop {
        let (tcp, peer): (_, SocketAddr) = match listener.accept().await {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(error = %e, "executor endpoint: accept failed");
                continue;
            }
        };
        let _ = tcp.set_nodelay(true);
        let (tls, gate, app) = (tls.clone(), gate.clone(), app.clone());
        tokio::spawn(async move {
            let cfg = match tls.server_config(&gate) {
                Ok(c) => c,
                Err(e) => {
                    tracing::error!(error = %e, "executor endpoint: TLS configuration");
                    return;
                }
            };
            let acceptor = tokio_rustls::TlsAcceptor::from(cfg);
            let stream = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                Ok(Ok(s)) => s,
                Ok(Err(e)) => {
                    tracing::info!(%peer, error = %e, "executor endpoint: TLS handshake refused");
                    return;
                }
                Err(_) => return,
            };
            let Some(cert) = stream.get_ref().1.peer_certificates().and_then(|c| c.first()).map(|c| c.to_vec()) else {
                return;
            };
            let app = app.layer(Extension(ExecutorPeer(Arc::new(cert))));
            let service = TowerToHyperService::new(app);
            if let Err(e) = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(stream), service)
                .await
            {
                tracing::debug!(%peer, error = %e, "executor connection ended");
            }
        });
    }
}
