//! Token signatures already verified. A signature check is a pure function of the key, the
//! signed bytes and the signature, and the one a process repeats most: a node checks the
//! credential of every act an edge submits (each step of an operation presents the same
//! token again), and every recorded decision's voucher. [`install`] puts a bounded cache of
//! passed checks in front of jsonwebtoken's own verifiers (aws-lc), for every token this
//! process decodes. Only the signature is cached: each decode still checks the header, the
//! algorithm, the claims, expiry and everything the ledger records (revocations, retired
//! keys, the principal), as before. An entry is the sha256 of the key, the signed bytes and
//! the signature, so a hit is exactly a check that passed before; a failed check is never kept.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock, PoisonError};

use jsonwebtoken::crypto::{CryptoProvider, JwtVerifier};
use jsonwebtoken::{Algorithm, DecodingKey, DecodingKeyKind};
use sha2::{Digest, Sha256};

/// Most passed checks kept; the set starts over when full (a node sees a few tokens per
/// principal per hour, so a full set is a burst of new tokens, not a steady state).
pub const VERIFIED_SIGNATURES_MAX: usize = 65_536;

static PASSED: Mutex<BTreeSet<[u8; 32]>> = Mutex::new(BTreeSet::new());
static HITS: AtomicU64 = AtomicU64::new(0);

/// Makes jsonwebtoken's decoding in this process go through the cache. Call once, before the
/// first token is decoded (jsonwebtoken's provider is chosen once per process): false if
/// another provider was chosen first.
pub fn install() -> bool {
    static PROVIDER: OnceLock<CryptoProvider> = OnceLock::new();
    let provider = PROVIDER.get_or_init(|| CryptoProvider {
        verifier_factory: cached_verifier,
        ..jsonwebtoken::crypto::aws_lc::DEFAULT_PROVIDER.clone()
    });
    provider.install_default().is_ok() || std::ptr::eq(CryptoProvider::try_get_default().unwrap_or(provider), provider)
}

/// Checks answered from the cache since the process started.
pub fn hits() -> u64 {
    HITS.load(Ordering::Relaxed)
}

fn cached_verifier(alg: &Algorithm, key: &DecodingKey) -> jsonwebtoken::errors::Result<Box<dyn JwtVerifier>> {
    let inner = (jsonwebtoken::crypto::aws_lc::DEFAULT_PROVIDER.verifier_factory)(alg, key)?;
    let digest = framed(Sha256::new(), format!("{alg:?}").as_bytes());
    let digest = match key.kind() {
        DecodingKeyKind::SecretOrDer(bytes) => framed(digest, bytes),
        DecodingKeyKind::RsaModulusExponent { n, e } => framed(framed(digest, n), e),
    };
    Ok(Box::new(Cached { inner, key: digest.finalize().into() }))
}

/// Adds `bytes` behind their length, so two parts never read as one.
fn framed(digest: Sha256, bytes: &[u8]) -> Sha256 {
    digest.chain_update((bytes.len() as u64).to_le_bytes()).chain_update(bytes)
}

struct Cached {
    inner: Box<dyn JwtVerifier>,
    /// The digest of the algorithm and the key.
    key: [u8; 32],
}

impl Cached {
    fn entry(&self, message: &[u8], signature: &[u8]) -> [u8; 32] {
        framed(Sha256::new().chain_update(self.key), message).chain_update(signature).finalize().into()
    }
}

impl jsonwebtoken::signature::Verifier<Vec<u8>> for Cached {
    fn verify(&self, message: &[u8], signature: &Vec<u8>) -> Result<(), jsonwebtoken::signature::Error> {
        let entry = self.entry(message, signature);
        let passed = || PASSED.lock().unwrap_or_else(PoisonError::into_inner);
        if passed().contains(&entry) {
            HITS.fetch_add(1, Ordering::Relaxed);
            return Ok(());
        }
        self.inner.verify(message, signature)?;
        let mut passed = passed();
        if passed.len() >= VERIFIED_SIGNATURES_MAX {
            passed.clear();
        }
        passed.insert(entry);
        Ok(())
    }
}

impl JwtVerifier for Cached {
    fn algorithm(&self) -> Algorithm {
        self.inner.algorithm()
    }
}

#[cfg(test)]
mod tests {
    use jsonwebtoken::{EncodingKey, Header};

    use super::*;

    fn key_pair() -> (EncodingKey, DecodingKey) {
        let pair = rcgen::KeyPair::generate_for(&rcgen::PKCS_ED25519).unwrap();
        let signing = EncodingKey::from_ed_pem(pair.serialize_pem().as_bytes()).unwrap();
        (signing, DecodingKey::from_ed_der(pair.public_key_raw()))
    }

    /// The signed bytes and the signature of `claims` signed with `key`.
    fn signed(claims: serde_json::Value, key: &EncodingKey) -> (Vec<u8>, Vec<u8>) {
        let token = jsonwebtoken::encode(&Header::new(Algorithm::EdDSA), &claims, key).unwrap();
        let (message, signature) = token.rsplit_once('.').unwrap();
        let signature = base64::Engine::decode(&base64::engine::general_purpose::URL_SAFE_NO_PAD, signature).unwrap();
        (message.as_bytes().to_vec(), signature)
    }

    #[test]
    fn a_passed_check_is_answered_again_and_nothing_else_is() {
        let (signing, key) = key_pair();
        let (message, signature) = signed(serde_json::json!({"sub": "agent", "exp": 4_000_000_000u64}), &signing);
        let verifier = cached_verifier(&Algorithm::EdDSA, &key).unwrap();
        let before = hits();
        verifier.verify(&message, &signature).expect("verifies");
        verifier.verify(&message, &signature).expect("verifies again");
        assert!(hits() > before, "the second check came from the cache");

        // The same signature over other bytes, or under another key, is checked and refused,
        // each time: a refusal is never kept.
        let (other, _) = signed(serde_json::json!({"sub": "root", "exp": 4_000_000_000u64}), &signing);
        let (_, stranger) = key_pair();
        let strangers = cached_verifier(&Algorithm::EdDSA, &stranger).unwrap();
        for _ in 0..2 {
            assert!(verifier.verify(&other, &signature).is_err(), "a signature over other bytes");
            assert!(strangers.verify(&message, &signature).is_err(), "another key");
        }
    }
}
