//! A node's token-signing key: an Ed25519 PKCS#8 PEM file, created with mode 0600 on first start
//! when missing. Its public half is registered in the ledger (under a `kid` derived from the
//! public key) before the first token this node signs, so every verifier can check tokens from
//! every node. When the ledger retires the key (`writ admin credential retire-key`), the node
//! makes a new one, replaces the file and registers the new key before it signs again.

use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use writ_api::auth::Signer;

/// This node's current signer, and the file it lives in (`None`: kept in memory only, for
/// tests and embedded routers).
pub struct SigningKeys {
    current: RwLock<Arc<Signer>>,
    file: Option<PathBuf>,
}

impl SigningKeys {
    /// Loads the signing key at `path`, generating it first if the file does not exist.
    pub fn load_or_create(path: &Path) -> io::Result<SigningKeys> {
        let pem = match std::fs::read_to_string(path) {
            Ok(pem) => pem,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                let pem = generate_pem()?;
                if let Some(dir) = path.parent() {
                    std::fs::create_dir_all(dir)?;
                }
                // create_new: two processes racing never overwrite each other's key.
                let mut f = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(path)?;
                f.write_all(pem.as_bytes())?;
                f.sync_all()?;
                tracing::info!(path = %path.display(), "created a new token-signing key");
                pem
            }
            Err(e) => return Err(io::Error::new(e.kind(), format!("signing key {}: {e}", path.display()))),
        };
        let signer = signer_of(&pem)
            .map_err(|m| io::Error::new(io::ErrorKind::InvalidData, format!("signing key {}: {m}", path.display())))?;
        Ok(SigningKeys { current: RwLock::new(Arc::new(signer)), file: Some(path.to_path_buf()) })
    }

    /// A generated key kept in memory only.
    pub fn ephemeral() -> io::Result<SigningKeys> {
        let signer = signer_of(&generate_pem()?).map_err(io::Error::other)?;
        Ok(SigningKeys { current: RwLock::new(Arc::new(signer)), file: None })
    }

    /// The signer in use.
    pub fn current(&self) -> Arc<Signer> {
        self.current.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Replaces `retired` (when it is still the current key) with a new key, stored in the
    /// key file first (atomically, 0600), and returns the signer now in use.
    pub fn replace(&self, retired: &Signer) -> io::Result<Arc<Signer>> {
        let mut current = self.current.write().unwrap_or_else(|e| e.into_inner());
        if current.public_key() != retired.public_key() {
            return Ok(current.clone());
        }
        let pem = generate_pem()?;
        let signer = Arc::new(signer_of(&pem).map_err(io::Error::other)?);
        if let Some(path) = &self.file {
            writ_client::files::replace(path, &pem, true)?;
            tracing::warn!(path = %path.display(), retired = %retired.public_key().kid, kid = %signer.public_key().kid,
                "the ledger retired this node's signing key; a new key replaced it");
        }
        *current = signer.clone();
        Ok(signer)
    }
}

fn generate_pem() -> io::Result<String> {
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ED25519).map_err(io::Error::other)?;
    Ok(key.serialize_pem())
}

fn signer_of(pem: &str) -> Result<Signer, String> {
    let key = rcgen::KeyPair::from_pem(pem).map_err(|e| e.to_string())?;
    if !key.is_compatible(&rcgen::PKCS_ED25519) {
        return Err("not an Ed25519 key".into());
    }
    Signer::new(pem.as_bytes(), key.public_key_raw().to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn creates_once_reloads_the_same_key_and_replaces_it_in_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k/signing-key.pem");
        let a = SigningKeys::load_or_create(&path).unwrap();
        let b = SigningKeys::load_or_create(&path).unwrap();
        assert_eq!(a.current().public_key(), b.current().public_key());
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);

        let old = a.current();
        let new = a.replace(&old).unwrap();
        assert_ne!(new.public_key(), old.public_key(), "a new key");
        assert_eq!(a.replace(&old).unwrap().public_key(), new.public_key(), "replaced once, not per caller");
        let reloaded = SigningKeys::load_or_create(&path).unwrap();
        assert_eq!(reloaded.current().public_key(), new.public_key(), "the file holds the new key");
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);

        std::fs::write(&path, "not a key").unwrap();
        assert!(SigningKeys::load_or_create(&path).is_err());
    }
}
