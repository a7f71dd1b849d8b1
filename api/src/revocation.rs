//! What the cluster has revoked or retired among its credentials (SPEC S1): tenant-issuer token
//! ids, Writ token-signing keys, tenant executor CAs and role certificates of the cluster PKI.
//!
//! Everything here is bounded: an entry that names something with a lifetime (an issuer's
//! token, a role certificate) is kept only until that lifetime is over — after that the thing
//! is refused as expired anyway — and is dropped by the next revocation of its kind (by ledger
//! time, so on every replica alike). Retired keys and CAs are few and kept for good: a retired
//! key id or CA can never be registered again.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Revoked token ids retained per tenant issuer (each kept until the tenant's longest token
/// lifetime has passed since its revocation).
pub const ISSUER_REVOCATIONS_MAX: usize = 10_000;
/// Revoked role certificates retained (each until its own `notAfter`).
pub const ROLE_REVOCATIONS_MAX: usize = 10_000;
/// Executor CAs a tenant may retire (each retirement makes the nodes derive the next one).
pub const EXECUTOR_CA_RETIREMENTS_MAX: usize = 64;
/// Longest `jti` an issuer revocation may name.
pub const JTI_BYTES_MAX: usize = 256;
/// Longest certificate serial (hex) a role revocation may name (20 octets, RFC 5280).
pub const SERIAL_HEX_MAX: usize = 40;

/// A revoked certificate of the cluster PKI (`writ pki issue`): refused by every listener
/// from the moment a node's state holds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RevokedRoleCertificateV1 {
    /// Serial number: lowercase hex without leading zero octets ([`normalize_serial`]).
    pub serial: String,
    /// The identity the certificate names (`node:1`, `edge:a`, `operator:ops`), for the record.
    pub identity: String,
    /// The certificate's `notAfter` (ms): the revocation is dropped after it.
    pub not_after_ms: u64,
}

/// The revocations and retirements of the whole cluster (a view of [`crate::state::LedgerState`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Revocations {
    /// Revoked tenant-issuer token ids by issuer, then `jti`: the ledger time until which the
    /// revocation is kept.
    pub issuer_tokens: BTreeMap<String, BTreeMap<String, u64>>,
    /// Retired Writ signing keys by `kid`: the ledger time of retirement.
    pub signing_keys: BTreeMap<String, u64>,
    /// Retired executor CAs by tenant id, then CA fingerprint: the ledger time of retirement.
    pub executor_cas: BTreeMap<String, BTreeMap<String, u64>>,
    /// Revoked role certificates by serial.
    pub role_certificates: BTreeMap<String, RevokedRoleCertificateV1>,
}

impl Revocations {
    /// Whether issuer `iss` revoked token id `jti`.
    pub fn issuer_token_revoked(&self, iss: &str, jti: &str) -> bool {
        self.issuer_tokens.get(iss).is_some_and(|m| m.contains_key(jti))
    }

    /// Whether the role certificate with serial `serial` (lowercase hex) was revoked.
    pub fn role_certificate_revoked(&self, serial: &str) -> bool {
        self.role_certificates.contains_key(serial)
    }

    /// Whether the executor CA `fingerprint` of `tenant_id` was retired.
    pub fn executor_ca_retired(&self, tenant_id: &str, fingerprint: &str) -> bool {
        self.executor_cas.get(tenant_id).is_some_and(|m| m.contains_key(fingerprint))
    }
}

/// A certificate serial as the revocation records name it: lowercase hex of the serial's
/// octets without leading zero octets (so `00ab` and `ab` are one serial).
pub fn normalize_serial(serial: &str) -> Option<String> {
    let s = serial.trim().trim_start_matches("0x").replace(':', "").to_ascii_lowercase();
    if s.is_empty() || s.len() > SERIAL_HEX_MAX || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let s = if s.len() % 2 == 1 { format!("0{s}") } else { s };
    let mut octets = s.as_bytes().chunks(2).skip_while(|o| *o == b"00").peekable();
    if octets.peek().is_none() {
        return Some("00".into());
    }
    Some(octets.map(|o| std::str::from_utf8(o).expect("ascii hex")).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serials_normalize_to_one_spelling() {
        assert_eq!(normalize_serial("00AB:cd").as_deref(), Some("abcd"));
        assert_eq!(normalize_serial("0xabc").as_deref(), Some("0abc"));
        assert_eq!(normalize_serial("0000").as_deref(), Some("00"));
        assert_eq!(normalize_serial("zz"), None);
        assert_eq!(normalize_serial(""), None);
        assert_eq!(normalize_serial(&"a".repeat(41)), None);
    }
}
