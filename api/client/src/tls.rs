//! TLS for Writ's HTTP clients: trust only the cluster CA, and present a role credential
//! (`writ pki issue`) where the server asks for one (SPEC S1).

use std::path::Path;

/// What a client trusts and, optionally, the credential it presents.
#[derive(Clone)]
pub struct ClientTls {
    ca_pem: Vec<u8>,
    /// Certificate chain followed by its private key, PEM.
    identity_pem: Option<Vec<u8>>,
}

impl std::fmt::Debug for ClientTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientTls").field("identity", &self.identity_pem.is_some()).finish()
    }
}

fn read(path: &Path) -> Result<Vec<u8>, String> {
    std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))
}

impl ClientTls {
    /// Trusts the CA in `ca` (PEM); presents no certificate.
    pub fn trusting(ca: &Path) -> Result<ClientTls, String> {
        let ca_pem = read(ca)?;
        reqwest::Certificate::from_pem(&ca_pem).map_err(|e| format!("{}: {e}", ca.display()))?;
        Ok(ClientTls { ca_pem, identity_pem: None })
    }

    /// Trusts `ca` and presents the certificate `cert` with its key `key` (PEM files).
    pub fn with_identity(ca: &Path, cert: &Path, key: &Path) -> Result<ClientTls, String> {
        let mut tls = ClientTls::trusting(ca)?;
        let mut pem = read(cert)?;
        pem.push(b'\n');
        pem.extend(read(key)?);
        reqwest::Identity::from_pem(&pem).map_err(|e| format!("{} / {}: {e}", cert.display(), key.display()))?;
        tls.identity_pem = Some(pem);
        Ok(tls)
    }

    /// Configures `builder` to trust only the CA and to present the credential, if any.
    pub fn apply(&self, builder: reqwest::ClientBuilder) -> reqwest::ClientBuilder {
        // Both parsed in the constructors, so these cannot fail here.
        let mut b = match reqwest::Certificate::from_pem(&self.ca_pem) {
            Ok(ca) => builder.tls_certs_only([ca]),
            Err(_) => builder,
        };
        if let Some(id) = self.identity_pem.as_ref().and_then(|p| reqwest::Identity::from_pem(p).ok()) {
            b = b.identity(id);
        }
        b
    }
}
