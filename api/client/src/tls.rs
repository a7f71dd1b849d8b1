//! TLS for Writ's processes (rustls, one place): the clients trust only the cluster CA and
//! present a role credential (`writ pki issue`) where the server asks for one (SPEC S1); and
//! every certificate + key pair is a [`CredentialFiles`] that follows its files on disk, so a
//! rotated certificate is used by the next handshake without a restart while open connections
//! keep working (H2). A client's CA bundle follows its file the same way ([`CaBundle`]).

use std::io::BufReader;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::{ResolvesClientCert, WebPkiServerVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use writ_api::revocation::RevokedRoleCertificateV1;
use writ_api::role::{Identity, IDENTITY_URI_PREFIX};

/// How often a credential's files are looked at again (one `stat` per file per period).
pub const RELOAD_CHECK_PERIOD: Duration = Duration::from_secs(1);

/// The crypto provider of every Writ TLS endpoint.
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
}

/// ALPN of every Writ HTTPS endpoint and client: HTTP/2 first.
pub fn alpn() -> Vec<Vec<u8>> {
    vec![b"h2".to_vec(), b"http/1.1".to_vec()]
}

fn open(path: &Path) -> Result<BufReader<std::fs::File>, String> {
    std::fs::File::open(path).map(BufReader::new).map_err(|e| format!("{}: {e}", path.display()))
}

/// Every PEM certificate in `path` (at least one).
pub fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs: Vec<CertificateDer<'static>> = rustls_pemfile::certs(&mut open(path)?)
        .collect::<Result<_, _>>()
        .map_err(|e| format!("{}: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!("{}: no PEM certificate found", path.display()));
    }
    Ok(certs)
}

/// The CA bundle in `path` as trust roots (at least one).
pub fn read_roots(path: &Path) -> Result<Arc<RootCertStore>, String> {
    let mut roots = RootCertStore::empty();
    for ca in read_certs(path)? {
        roots.add(ca).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    Ok(Arc::new(roots))
}

fn read_key(path: &Path) -> Result<PrivateKeyDer<'static>, String> {
    rustls_pemfile::private_key(&mut open(path)?)
        .map_err(|e| format!("{}: {e}", path.display()))?
        .ok_or_else(|| format!("{}: no PEM private key found", path.display()))
}

/// What identifies one version of a file: modification time, length and inode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileStamp(Option<(SystemTime, u64, u64)>);

impl FileStamp {
    pub fn of(path: &Path) -> FileStamp {
        use std::os::unix::fs::MetadataExt;
        FileStamp(std::fs::metadata(path).ok().and_then(|m| Some((m.modified().ok()?, m.len(), m.ino()))))
    }
}

/// Checks a certificate a credential is about to use (e.g. that it still names this node).
pub type CertCheck = Arc<dyn Fn(&CertificateDer<'_>) -> Result<(), String> + Send + Sync>;

/// A value read from files and read again when any of them changes (looked at no more than
/// once per [`RELOAD_CHECK_PERIOD`]: one `stat` per file). A changed version that cannot be used
/// is refused once — counted in `writ_tls_credential_reload_refused_total{reason}` — and the
/// previous value stays until the files change again. The one mechanism behind credentials, CA
/// bundles and servers' configurations.
pub struct Followed<T> {
    what: &'static str,
    paths: Vec<PathBuf>,
    read: Box<dyn Fn() -> Result<T, (&'static str, String)> + Send + Sync>,
    state: Mutex<FollowedState<T>>,
}

struct FollowedState<T> {
    stamps: Vec<FileStamp>,
    /// The version last refused (not tried again until the files change once more).
    refused: Option<Vec<FileStamp>>,
    refusals: u64,
    checked: Instant,
    value: T,
}

impl<T: Clone> Followed<T> {
    /// Reads the value now (`what` names it in logs); `read` says why a version cannot be used
    /// as (reason label, message).
    pub fn new(
        what: &'static str,
        paths: Vec<PathBuf>,
        read: impl Fn() -> Result<T, (&'static str, String)> + Send + Sync + 'static,
    ) -> Result<Followed<T>, String> {
        let stamps = paths.iter().map(|p| FileStamp::of(p)).collect();
        let value = read().map_err(|(_, e)| e)?;
        let state = FollowedState { stamps, refused: None, refusals: 0, checked: Instant::now(), value };
        Ok(Followed { what, paths, read: Box::new(read), state: Mutex::new(state) })
    }

    /// The value in use now, after looking at the files if the period has passed.
    pub fn current(&self) -> T {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if state.checked.elapsed() >= RELOAD_CHECK_PERIOD {
            state.checked = Instant::now();
            let stamps: Vec<FileStamp> = self.paths.iter().map(|p| FileStamp::of(p)).collect();
            if stamps != state.stamps && state.refused.as_ref() != Some(&stamps) {
                match (self.read)() {
                    Ok(v) => {
                        state.value = v;
                        state.stamps = stamps;
                        state.refused = None;
                        metrics::counter!("writ_tls_credential_reloads_total").increment(1);
                        tracing::info!(path = %self.paths[0].display(), "{} reloaded", self.what);
                    }
                    // The previous value stays; the next change is tried (e.g. a key on its way).
                    Err((reason, e)) => {
                        state.refused = Some(stamps);
                        state.refusals += 1;
                        metrics::counter!("writ_tls_credential_reload_refused_total", "reason" => reason).increment(1);
                        tracing::warn!(error = %e, reason, "changed {} not used; the previous one stays", self.what);
                    }
                }
            }
        }
        state.value.clone()
    }

    /// How many changed versions of the files were refused.
    pub fn refusals(&self) -> u64 {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).refusals
    }
}

/// A certificate chain and its private key, read from two PEM files and read again when either
/// changes (looked at no more than once per [`RELOAD_CHECK_PERIOD`]). A new pair is used only
/// when it parses, the key matches the certificate and the check passes; until then (e.g.
/// between the writes of the certificate and the key) the previous pair stays in use.
pub struct CredentialFiles {
    cert: PathBuf,
    key: PathBuf,
    pair: Followed<Arc<CertifiedKey>>,
}

impl std::fmt::Debug for CredentialFiles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CredentialFiles").field("cert", &self.cert).field("key", &self.key).finish()
    }
}

impl CredentialFiles {
    /// Loads `cert` and `key`; `check` vets every certificate before it is used.
    pub fn load(cert: &Path, key: &Path, check: Option<CertCheck>) -> Result<Arc<CredentialFiles>, String> {
        let (c, k) = (cert.to_path_buf(), key.to_path_buf());
        let pair = Followed::new("certificate", vec![c.clone(), k.clone()], move || {
            Self::read(&c, &k, check.as_ref()).map(Arc::new)
        })?;
        Ok(Arc::new(CredentialFiles { cert: cert.to_path_buf(), key: key.to_path_buf(), pair }))
    }

    /// The pair in the files, or why it cannot be used: ("identity", …) when the check refuses
    /// the certificate, ("unusable", …) when the files do not parse or do not match.
    fn read(cert: &Path, key: &Path, check: Option<&CertCheck>) -> Result<CertifiedKey, (&'static str, String)> {
        let chain = read_certs(cert).map_err(|e| ("unusable", e))?;
        if let Some(check) = check {
            check(&chain[0]).map_err(|e| ("identity", format!("{}: {e}", cert.display())))?;
        }
        let key_der = read_key(key).map_err(|e| ("unusable", e))?;
        let expires = parse_certificate(&chain[0]).map(|c| c.validity().not_after.timestamp()).unwrap_or(0);
        let pair = CertifiedKey::from_der(chain, key_der, &provider())
            .map_err(|e| ("unusable", format!("{} / {}: {e}", cert.display(), key.display())))?;
        // When the certificate this process presents runs out (an alert's input: renew before).
        metrics::gauge!("writ_tls_certificate_expiry_timestamp_seconds").set(expires as f64);
        Ok(pair)
    }

    /// The pair in use now, after looking at the files if the period has passed.
    pub fn current(&self) -> Arc<CertifiedKey> {
        self.pair.current()
    }

    /// The end-entity certificate in use now.
    pub fn leaf(&self) -> CertificateDer<'static> {
        self.current().cert[0].clone()
    }
}

impl ResolvesServerCert for CredentialFiles {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }
}

impl ResolvesClientCert for CredentialFiles {
    fn resolve(&self, _hints: &[&[u8]], _schemes: &[SignatureScheme]) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }

    fn has_certs(&self) -> bool {
        true
    }
}

/// A client's trust: the CA bundle in a file, read again when it changes (looked at no more
/// than once per [`RELOAD_CHECK_PERIOD`]), so a CA rotation — the bundle first gains the new CA,
/// later loses the old one — reaches running clients as it reaches servers. A changed bundle
/// that does not parse is refused once and the previous roots stay.
pub struct CaBundle {
    path: PathBuf,
    verifier: Followed<Arc<WebPkiServerVerifier>>,
}

impl std::fmt::Debug for CaBundle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CaBundle").field("path", &self.path).finish()
    }
}

impl CaBundle {
    pub fn load(path: &Path) -> Result<Arc<CaBundle>, String> {
        let p = path.to_path_buf();
        let verifier = Followed::new("CA bundle", vec![p.clone()], move || {
            let roots = read_roots(&p).map_err(|e| ("unusable", e))?;
            WebPkiServerVerifier::builder_with_provider(roots, provider())
                .build()
                .map_err(|e| ("unusable", format!("{}: {e}", p.display())))
        })?;
        Ok(Arc::new(CaBundle { path: path.to_path_buf(), verifier }))
    }

    fn current(&self) -> Arc<WebPkiServerVerifier> {
        self.verifier.current()
    }

    /// How many changed versions of the file were refused (they did not parse).
    pub fn refusals(&self) -> u64 {
        self.verifier.refusals()
    }
}

impl ServerCertVerifier for CaBundle {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        self.current().verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.current().verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.current().verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.current().supported_verify_schemes()
    }
}

/// What a client trusts and, optionally, the credential it presents.
#[derive(Clone)]
pub struct ClientTls {
    ca: Arc<CaBundle>,
    identity: Option<Arc<CredentialFiles>>,
}

impl std::fmt::Debug for ClientTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientTls").field("identity", &self.identity).finish()
    }
}

impl ClientTls {
    /// Trusts the CA in `ca` (PEM); presents no certificate.
    pub fn trusting(ca: &Path) -> Result<ClientTls, String> {
        Ok(ClientTls { ca: CaBundle::load(ca)?, identity: None })
    }

    /// Trusts `ca` and presents the certificate `cert` with its key `key` (PEM files, followed
    /// on disk: a renewed certificate is presented from the next connection on).
    pub fn with_identity(ca: &Path, cert: &Path, key: &Path) -> Result<ClientTls, String> {
        Self::with_credential(ca, CredentialFiles::load(cert, key, None)?)
    }

    /// Trusts `ca` and presents `credential`.
    pub fn with_credential(ca: &Path, credential: Arc<CredentialFiles>) -> Result<ClientTls, String> {
        Ok(ClientTls { ca: CaBundle::load(ca)?, identity: Some(credential) })
    }

    /// The CA bundle this client trusts.
    pub fn ca(&self) -> &CaBundle {
        &self.ca
    }

    /// The rustls client configuration: only the CA bundle's certificates are trusted (the
    /// bundle as it is on disk now, [`CaBundle`]).
    pub fn config(&self) -> Result<ClientConfig, String> {
        let builder = ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .dangerous()
            .with_custom_certificate_verifier(self.ca.clone());
        let mut cfg = match &self.identity {
            Some(c) => builder.with_client_cert_resolver(c.clone()),
            None => builder.with_no_client_auth(),
        };
        cfg.alpn_protocols = alpn();
        Ok(cfg)
    }

    /// Configures `builder` to trust only the CA and to present the credential, if any.
    pub fn apply(&self, builder: reqwest::ClientBuilder) -> reqwest::ClientBuilder {
        match self.config() {
            Ok(cfg) => builder.use_preconfigured_tls(cfg),
            // Only a provider without safe protocol versions fails here: trust nothing then.
            Err(e) => {
                tracing::error!(error = %e, "TLS client configuration");
                builder.tls_certs_only([])
            }
        }
    }
}

/// The role identity a (verified) cluster certificate names — exactly one
/// `urn:writ:<role>:<id>` SAN URI — and its serial as revocations name it
/// ([`writ_api::revocation::normalize_serial`]).
pub fn role_certificate(cert_der: &[u8]) -> Result<(Identity, String), String> {
    role_of(&parse_certificate(cert_der)?)
}

fn parse_certificate(der: &[u8]) -> Result<x509_parser::certificate::X509Certificate<'_>, String> {
    x509_parser::parse_x509_certificate(der).map(|(_, c)| c).map_err(|e| format!("unreadable certificate: {e}"))
}

fn role_of(cert: &x509_parser::certificate::X509Certificate<'_>) -> Result<(Identity, String), String> {
    let serial = writ_api::revocation::normalize_serial(&writ_api::hex(cert.raw_serial()))
        .ok_or_else(|| "the certificate's serial is longer than 20 octets".to_string())?;
    let sans = cert
        .subject_alternative_name()
        .map_err(|e| format!("bad subjectAltName: {e}"))?
        .map(|ext| ext.value.general_names.clone())
        .unwrap_or_default();
    let mut found = sans.iter().filter_map(|n| match n {
        x509_parser::extensions::GeneralName::URI(u) if u.starts_with(IDENTITY_URI_PREFIX) => Some(*u),
        _ => None,
    });
    let (Some(uri), None) = (found.next(), found.next()) else {
        return Err("the certificate must name exactly one urn:writ:<role>:<id> identity".into());
    };
    let identity = Identity::from_uri(uri).ok_or_else(|| format!("'{uri}' is not a Writ role identity"))?;
    Ok((identity, serial))
}

/// What revoking the role certificate in `pem` records: its serial, the identity it names and
/// its `notAfter` (`writ admin credential revoke-cert --cert FILE`).
pub fn revocation_of(pem: &[u8]) -> Result<RevokedRoleCertificateV1, String> {
    let der = rustls_pemfile::certs(&mut &pem[..])
        .next()
        .ok_or("no CERTIFICATE block")?
        .map_err(|e| format!("unreadable PEM: {e}"))?;
    let cert = parse_certificate(&der)?;
    let (identity, serial) = role_of(&cert)?;
    let not_after_ms = u64::try_from(cert.validity().not_after.timestamp()).unwrap_or(0).saturating_mul(1000);
    Ok(RevokedRoleCertificateV1 { serial, identity: identity.to_string(), not_after_ms })
}
