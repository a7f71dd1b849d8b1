//! The node's token-signing key: an Ed25519 PKCS#8 PEM file, created with mode 0600 on first
//! start when missing. Its public half is registered in the ledger (under a `kid` derived
//! from the public key) before the first token this node signs, so every verifier can check
//! tokens from every node; rotating is starting with a new file.

use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use writ_api::auth::Signer;

/// A node's token signer.
pub struct NodeKeys {
    pub signer: Signer,
}

/// Loads the signing key at `path`, generating it first if the file does not exist.
pub fn load_or_create_signer(path: &Path) -> io::Result<NodeKeys> {
    let pem = match std::fs::read_to_string(path) {
        Ok(pem) => pem,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ED25519).map_err(io::Error::other)?;
            let pem = key.serialize_pem();
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
    let bad = |m: String| io::Error::new(io::ErrorKind::InvalidData, format!("signing key {}: {m}", path.display()));
    let key = rcgen::KeyPair::from_pem(&pem).map_err(|e| bad(e.to_string()))?;
    if !key.is_compatible(&rcgen::PKCS_ED25519) {
        return Err(bad("not an Ed25519 key".into()));
    }
    let signer = Signer::new(pem.as_bytes(), key.public_key_raw().to_vec()).map_err(bad)?;
    Ok(NodeKeys { signer })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn creates_once_then_reloads_the_same_key() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k/signing-key.pem");
        let a = load_or_create_signer(&path).unwrap();
        let b = load_or_create_signer(&path).unwrap();
        assert_eq!(a.signer.public_key(), b.signer.public_key());
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        std::fs::write(&path, "not a key").unwrap();
        assert!(load_or_create_signer(&path).is_err());
    }
}
