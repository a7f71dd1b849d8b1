//! TLS on a node's listener (rustls), always: the server presents its certificate from the
//! cluster CA; a client certificate is optional at the handshake (the admin API authenticates
//! operators by token, probes are open) but, when presented, must chain to the CA. The role
//! identity it names ([`crate::pki::identity_of`]) travels with every request of the
//! connection as a [`PeerIdentity`], which `http` checks before reading any body.

use std::io::{self, BufReader};
use std::sync::Arc;

use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::service::TowerToHyperService;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

use crate::config::TlsConfig;

/// Deadline for a TLS handshake on an accepted connection.
const TLS_HANDSHAKE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// The role identity of the connection's client certificate (`None`: no certificate, or one
/// naming no Writ role).
#[derive(Debug, Clone)]
pub struct PeerIdentity(pub Option<writ_api::role::Identity>);

/// Loaded certificate chain, key and CA roots.
pub struct TlsMaterial {
    certs: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
    roots: Arc<RootCertStore>,
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
}

fn bad(path: &std::path::Path, what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("{}: {what}", path.display()))
}

impl TlsMaterial {
    pub fn load(cfg: &TlsConfig) -> io::Result<TlsMaterial> {
        let read = |p: &std::path::Path| std::fs::File::open(p).map(BufReader::new);
        let certs: Vec<CertificateDer<'static>> =
            rustls_pemfile::certs(&mut read(&cfg.cert)?).collect::<Result<_, _>>()?;
        if certs.is_empty() {
            return Err(bad(&cfg.cert, "no PEM certificate found"));
        }
        let key = rustls_pemfile::private_key(&mut read(&cfg.key)?)?
            .ok_or_else(|| bad(&cfg.key, "no PEM private key found"))?;
        let mut roots = RootCertStore::empty();
        for ca in rustls_pemfile::certs(&mut read(&cfg.ca)?) {
            roots.add(ca?).map_err(|e| bad(&cfg.ca, &e.to_string()))?;
        }
        if roots.is_empty() {
            return Err(bad(&cfg.ca, "no CA certificate found"));
        }
        Ok(TlsMaterial { certs, key, roots: Arc::new(roots) })
    }

    /// The role identity this material's certificate names.
    pub fn identity(&self) -> Result<writ_api::role::Identity, String> {
        crate::pki::identity_of(&self.certs[0])
    }

    /// Server side: verifies a client certificate when one is presented.
    pub fn server_config(&self) -> io::Result<Arc<ServerConfig>> {
        let verifier = WebPkiClientVerifier::builder_with_provider(self.roots.clone(), provider())
            .allow_unauthenticated()
            .build()
            .map_err(io::Error::other)?;
        let mut cfg = ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(io::Error::other)?
            .with_client_cert_verifier(verifier)
            .with_single_cert(self.certs.clone(), self.key.clone_key())
            .map_err(io::Error::other)?;
        cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(Arc::new(cfg))
    }

    /// Client side: trusts only the CA and presents this node's certificate.
    pub fn client_config(&self) -> io::Result<ClientConfig> {
        let mut cfg = ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(io::Error::other)?
            .with_root_certificates(self.roots.clone())
            .with_client_auth_cert(self.certs.clone(), self.key.clone_key())
            .map_err(io::Error::other)?;
        cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(cfg)
    }
}

/// Serves `app` over TLS (HTTP/1.1 or HTTP/2 by ALPN) until the task is aborted.
pub async fn serve(listener: TcpListener, app: Router, cfg: Arc<ServerConfig>) {
    let acceptor = TlsAcceptor::from(cfg);
    loop {
        let (tcp, peer) = match listener.accept().await {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(error = %e, "accept failed");
                continue;
            }
        };
        let _ = tcp.set_nodelay(true);
        let acceptor = acceptor.clone();
        let app = app.clone();
        tokio::spawn(async move {
            let tls = match tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                Ok(Ok(s)) => s,
                Ok(Err(e)) => {
                    // Counted, never audited: an unauthenticated party writes to no trail.
                    metrics::counter!("writ_node_tls_refused_total").increment(1);
                    tracing::debug!(%peer, error = %e, "TLS handshake refused");
                    return;
                }
                Err(_) => {
                    metrics::counter!("writ_node_tls_refused_total").increment(1);
                    return;
                }
            };
            let identity =
                tls.get_ref().1.peer_certificates().and_then(|c| c.first()).map(|c| crate::pki::identity_of(c));
            let identity = match identity {
                None => None,
                Some(Ok(id)) => Some(id),
                Some(Err(e)) => {
                    tracing::info!(%peer, error = %e, "client certificate names no Writ role");
                    None
                }
            };
            let service = TowerToHyperService::new(app.layer(axum::Extension(PeerIdentity(identity))));
            if let Err(e) = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(tls), service)
                .await
            {
                tracing::debug!(%peer, error = %e, "connection ended");
            }
        });
    }
}
