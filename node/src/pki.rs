//! The cluster's PKI (SPEC S1): one CA, and a certificate per node, edge and operator whose SAN
//! URI `urn:writ:<role>:<id>` names its role. Offline: `writ pki init` creates the CA,
//! `writ pki issue ROLE ID` a credential; `writ dev` and `deploy/local-cluster.sh` do the same.
//!
//! Layout of a PKI directory: `ca.pem`, `ca-key.pem` (0600), and per identity
//! `<role>-<id>.pem` and `<role>-<id>-key.pem` (0600). Keys are ECDSA P-256; serial numbers
//! are random; the CA key never leaves the directory it was created in.

use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use writ_api::role::Identity;

/// A credential and the CA it chains to: the `[tls]` of a node, the `[ledger_tls]` of an edge.
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsConfig {
    /// PEM certificate chain.
    pub cert: PathBuf,
    /// PEM private key.
    pub key: PathBuf,
    /// PEM CA bundle that peer (client and server) certificates must chain to.
    pub ca: PathBuf,
}

pub const CA_CERT_FILE: &str = "ca.pem";
pub const CA_KEY_FILE: &str = "ca-key.pem";
/// How long the cluster CA is valid.
pub const CA_VALIDITY_DAYS: i64 = 3650;
/// Default validity of an issued credential.
pub const LEAF_VALIDITY_DAYS_DEFAULT: u32 = 365;
/// Longest validity `writ pki issue --days` accepts.
pub const LEAF_VALIDITY_DAYS_MAX: u32 = 825;
/// Most host names and addresses one credential may name.
pub const HOSTS_MAX: usize = 32;

fn other(what: &str, e: impl std::fmt::Display) -> io::Error {
    io::Error::other(format!("{what}: {e}"))
}

/// A random, positive 16-byte serial number.
fn serial() -> rcgen::SerialNumber {
    let mut bytes: [u8; 16] = rand::random();
    bytes[0] &= 0x7f;
    bytes[0] |= 0x01;
    rcgen::SerialNumber::from_slice(&bytes)
}

/// Writes a new file; `private` ones are created 0600. Never overwrites.
fn create(path: &Path, text: &str, private: bool) -> io::Result<()> {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(if private { 0o600 } else { 0o644 })
        .open(path)
        .map_err(|e| other(&path.display().to_string(), e))?;
    f.write_all(text.as_bytes())?;
    f.sync_all()
}

fn validity(params: &mut rcgen::CertificateParams, days: i64) {
    let now = time::OffsetDateTime::now_utc();
    params.not_before = now - time::Duration::minutes(5);
    params.not_after = now + time::Duration::days(days);
}

/// Creates the CA in `dir` (made if missing); refuses when one is there already.
pub fn init(dir: &Path) -> io::Result<PathBuf> {
    std::fs::create_dir_all(dir)?;
    let (cert_path, key_path) = (dir.join(CA_CERT_FILE), dir.join(CA_KEY_FILE));
    if cert_path.exists() || key_path.exists() {
        return Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!("{} already holds a CA; a CA is never replaced in place", dir.display()),
        ));
    }
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).map_err(|e| other("CA key", e))?;
    let mut params = rcgen::CertificateParams::default();
    params.distinguished_name.push(rcgen::DnType::CommonName, "Writ cluster CA");
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Constrained(0));
    params.key_usages = vec![rcgen::KeyUsagePurpose::KeyCertSign, rcgen::KeyUsagePurpose::CrlSign];
    params.serial_number = Some(serial());
    validity(&mut params, CA_VALIDITY_DAYS);
    let cert = params.self_signed(&key).map_err(|e| other("CA certificate", e))?;
    create(&key_path, &key.serialize_pem(), true)?;
    create(&cert_path, &cert.pem(), false)?;
    Ok(cert_path)
}

/// The file names of an identity's credential in a PKI directory.
pub fn credential(dir: &Path, identity: &Identity) -> TlsConfig {
    let stem = format!("{}-{}", identity.role.as_str(), identity.id);
    TlsConfig {
        cert: dir.join(format!("{stem}.pem")),
        key: dir.join(format!("{stem}-key.pem")),
        ca: dir.join(CA_CERT_FILE),
    }
}

/// Issues a credential for `identity`, valid `days`, naming `hosts` (DNS names or IPs) for
/// server use. Refuses to overwrite an existing one (`renew` replaces one).
pub fn issue(dir: &Path, identity: &Identity, hosts: &[String], days: u32) -> io::Result<TlsConfig> {
    let files = credential(dir, identity);
    if files.cert.exists() || files.key.exists() {
        return Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!("{} already exists; `writ pki renew` replaces it", files.cert.display()),
        ));
    }
    let (cert, key) = sign(dir, identity, hosts, days)?;
    create(&files.key, &key, true)?;
    create(&files.cert, &cert, false)?;
    Ok(files)
}

/// Replaces `identity`'s credential with a new key and certificate (new serial, `days` from
/// now). Each file is replaced atomically (written beside it, then renamed), the key first: a
/// process following the files (`writ_client::tls::CredentialFiles`) keeps its previous pair
/// until both match, then uses the new one from its next handshake.
pub fn renew(dir: &Path, identity: &Identity, hosts: &[String], days: u32) -> io::Result<TlsConfig> {
    let files = credential(dir, identity);
    if !files.cert.exists() {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("{} does not exist; `writ pki issue` creates it", files.cert.display()),
        ));
    }
    let (cert, key) = sign(dir, identity, hosts, days)?;
    writ_client::files::replace(&files.key, &key, true)?;
    writ_client::files::replace(&files.cert, &cert, false)?;
    Ok(files)
}

/// A new key and a certificate for it signed by `dir`'s CA: (certificate PEM, key PEM).
fn sign(dir: &Path, identity: &Identity, hosts: &[String], days: u32) -> io::Result<(String, String)> {
    if days == 0 || days > LEAF_VALIDITY_DAYS_MAX {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("--days must be 1..={LEAF_VALIDITY_DAYS_MAX}"),
        ));
    }
    if hosts.len() > HOSTS_MAX {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("at most {HOSTS_MAX} hosts")));
    }
    let ca_pem = std::fs::read_to_string(dir.join(CA_CERT_FILE))
        .map_err(|e| other(&format!("{} (run `writ pki init` first)", dir.join(CA_CERT_FILE).display()), e))?;
    let ca_key_pem = std::fs::read_to_string(dir.join(CA_KEY_FILE))
        .map_err(|e| other(&dir.join(CA_KEY_FILE).display().to_string(), e))?;
    let ca_key = rcgen::KeyPair::from_pem(&ca_key_pem).map_err(|e| other("CA key", e))?;
    let issuer = rcgen::Issuer::from_ca_cert_pem(&ca_pem, ca_key).map_err(|e| other("CA certificate", e))?;
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).map_err(|e| other("key", e))?;
    let mut params = rcgen::CertificateParams::new(hosts.to_vec()).map_err(|e| other("hosts", e))?;
    let uri = rcgen::string::Ia5String::try_from(identity.uri()).map_err(|e| other("identity", e))?;
    params.subject_alt_names.push(rcgen::SanType::URI(uri));
    params.distinguished_name.push(rcgen::DnType::CommonName, format!("writ {identity}"));
    params.key_usages = vec![rcgen::KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages =
        vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth, rcgen::ExtendedKeyUsagePurpose::ClientAuth];
    params.use_authority_key_identifier_extension = true;
    params.serial_number = Some(serial());
    validity(&mut params, i64::from(days));
    let cert = params.signed_by(&key, &issuer).map_err(|e| other("certificate", e))?;
    Ok((cert.pem(), key.serialize_pem()))
}

/// One certificate of a PKI directory, as `writ pki list` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    pub file: String,
    /// The role identity it names (`None` for the CA).
    pub identity: Option<Identity>,
    pub serial: String,
    /// Unix seconds.
    pub not_after: i64,
}

/// Every certificate in `dir` (the CA first), with what it names and when it expires.
pub fn list(dir: &Path) -> io::Result<Vec<Listed>> {
    let mut names: Vec<String> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.ends_with(".pem") && !n.ends_with("-key.pem"))
        .collect();
    names.sort_by_key(|n| (n != CA_CERT_FILE, n.clone()));
    let mut out = Vec::new();
    for name in names {
        let pem = std::fs::read(dir.join(&name))?;
        let Some(Ok(der)) = rustls_pemfile::certs(&mut &pem[..]).next() else { continue };
        let (_, cert) = x509_parser::parse_x509_certificate(&der).map_err(|e| other(&name, e))?;
        out.push(Listed {
            identity: identity_of(&der).ok(),
            serial: writ_api::hex(cert.raw_serial()),
            not_after: cert.validity().not_after.timestamp(),
            file: name,
        });
    }
    Ok(out)
}

/// Creates what is missing of a PKI directory for one process's own use (`writ dev`, tests):
/// the CA, then each identity's credential for `hosts`.
pub fn ensure(dir: &Path, identities: &[Identity], hosts: &[String]) -> io::Result<()> {
    if !dir.join(CA_CERT_FILE).exists() {
        init(dir)?;
    }
    for identity in identities {
        if !credential(dir, identity).cert.exists() {
            issue(dir, identity, hosts, LEAF_VALIDITY_DAYS_DEFAULT)?;
        }
    }
    Ok(())
}

/// The role identity a (verified) certificate names: exactly one `urn:writ:<role>:<id>` SAN URI.
pub fn identity_of(cert_der: &[u8]) -> Result<Identity, String> {
    writ_client::tls::role_certificate(cert_der).map(|(identity, _)| identity)
}

#[cfg(test)]
mod tests {
    use super::*;
    use writ_api::role::Role;

    #[test]
    fn issued_credentials_name_their_role_and_are_private() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        init(dir.path()).unwrap();
        assert!(init(dir.path()).is_err(), "a CA is never replaced");
        let edge = Identity::new(Role::Edge, "e1").unwrap();
        let files = issue(dir.path(), &edge, &["127.0.0.1".into(), "localhost".into()], 30).unwrap();
        assert!(issue(dir.path(), &edge, &[], 30).is_err(), "never overwritten");
        let before = list(dir.path()).unwrap();
        renew(dir.path(), &edge, &["127.0.0.1".into()], 2).unwrap();
        let after = list(dir.path()).unwrap();
        assert_eq!(after.len(), 2, "{after:?}");
        assert_eq!(after[0].file, CA_CERT_FILE);
        assert_eq!(after[1].identity.as_ref(), Some(&edge));
        assert_ne!(after[1].serial, before[1].serial, "renewed with a new serial");
        assert!(after[1].not_after < before[1].not_after, "renewed for 2 days instead of 30");
        assert_eq!(std::fs::metadata(&files.key).unwrap().permissions().mode() & 0o777, 0o600);
        assert!(renew(dir.path(), &Identity::new(Role::Edge, "nobody").unwrap(), &[], 2).is_err());
        let pem = std::fs::read(&files.cert).unwrap();
        let der = rustls_pemfile::certs(&mut &pem[..]).next().unwrap().unwrap();
        assert_eq!(identity_of(&der), Ok(edge));
        for key in [&files.key, &dir.path().join(CA_KEY_FILE)] {
            assert_eq!(std::fs::metadata(key).unwrap().permissions().mode() & 0o777, 0o600);
        }
        let other = Identity::new(Role::Node, "1").unwrap();
        let again = issue(dir.path(), &other, &[], 30).unwrap();
        let der2 = rustls_pemfile::certs(&mut &std::fs::read(&again.cert).unwrap()[..]).next().unwrap().unwrap();
        let serial = |d: &[u8]| x509_parser::parse_x509_certificate(d).unwrap().1.raw_serial().to_vec();
        assert_ne!(serial(&der), serial(&der2), "serials are random");
        assert!(issue(dir.path(), &Identity::new(Role::Node, "2").unwrap(), &[], LEAF_VALIDITY_DAYS_MAX + 1).is_err());
    }
}
