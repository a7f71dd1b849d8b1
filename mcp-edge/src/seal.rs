//! Sealed values handed to clients and accepted back by any edge replica: MRTR `requestState`
//! and list cursors. A seal is `base64url(json) "." base64url(HMAC-SHA256(key, json))` with a
//! key every replica shares; the JSON binds the value to a principal, a purpose and an expiry,
//! so a value is useless to another principal, for another request, or after it expires.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::Sha256;

/// Length of the shared key (bytes).
pub const KEY_BYTES: usize = 32;

/// The HMAC key shared by all edge replicas of a deployment.
#[derive(Clone)]
pub struct SealKey([u8; KEY_BYTES]);

impl std::fmt::Debug for SealKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SealKey(..)")
    }
}

impl SealKey {
    pub fn new(bytes: [u8; KEY_BYTES]) -> SealKey {
        SealKey(bytes)
    }

    /// A fresh random key (one replica only: sealed values will not work on another).
    pub fn random() -> SealKey {
        SealKey(rand::random())
    }

    /// Parses the hex text of a key file (64 hex digits, surrounding whitespace ignored).
    pub fn from_hex(text: &str) -> Result<SealKey, String> {
        let bytes = hex::decode(text.trim()).map_err(|_| "the key is not hex".to_string())?;
        let bytes: [u8; KEY_BYTES] = bytes
            .try_into()
            .map_err(|_| format!("the key must be {KEY_BYTES} bytes ({} hex digits)", KEY_BYTES * 2))?;
        Ok(SealKey(bytes))
    }

    fn mac(&self, data: &[u8]) -> Hmac<Sha256> {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.0).expect("HMAC takes any key length");
        mac.update(data);
        mac
    }
}

/// What a sealed value is bound to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Binding {
    pub tenant_id: String,
    pub principal_id: String,
    /// What the value is for, e.g. `tools/call test_tool <sha256 of the arguments>`.
    pub purpose: String,
}

#[derive(Serialize, Deserialize)]
struct Sealed {
    #[serde(rename = "b")]
    binding: Binding,
    #[serde(rename = "x")]
    expires_at_ms: u64,
    #[serde(rename = "d")]
    data: Value,
}

/// Why a sealed value was refused (the client sees one message; logs see the reason).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    Malformed,
    Tampered,
    Expired,
    OtherBinding,
}

pub fn seal(key: &SealKey, binding: &Binding, expires_at_ms: u64, data: Value) -> String {
    let json = serde_json::to_vec(&Sealed { binding: binding.clone(), expires_at_ms, data }).expect("serializes");
    let tag = key.mac(&json).finalize().into_bytes();
    format!("{}.{}", URL_SAFE_NO_PAD.encode(&json), URL_SAFE_NO_PAD.encode(tag))
}

/// The data of a sealed value, if it is intact, unexpired and bound to `binding`.
pub fn open(key: &SealKey, binding: &Binding, now_ms: u64, sealed: &str) -> Result<Value, Refused> {
    let (body, tag) = sealed.split_once('.').ok_or(Refused::Malformed)?;
    let json = URL_SAFE_NO_PAD.decode(body).map_err(|_| Refused::Malformed)?;
    let tag = URL_SAFE_NO_PAD.decode(tag).map_err(|_| Refused::Tampered)?;
    key.mac(&json).verify_slice(&tag).map_err(|_| Refused::Tampered)?;
    let s: Sealed = serde_json::from_slice(&json).map_err(|_| Refused::Malformed)?;
    if s.expires_at_ms <= now_ms {
        return Err(Refused::Expired);
    }
    if &s.binding != binding {
        return Err(Refused::OtherBinding);
    }
    Ok(s.data)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn binding(principal: &str) -> Binding {
        Binding { tenant_id: "t1".into(), principal_id: principal.into(), purpose: "tools/call x".into() }
    }

    #[test]
    fn sealed_values_open_only_intact_unexpired_and_for_their_binding() {
        let key = SealKey::from_hex(&"ab".repeat(32)).unwrap();
        let s = seal(&key, &binding("p1"), 1_000, json!({"round": 2}));
        assert_eq!(open(&key, &binding("p1"), 999, &s), Ok(json!({"round": 2})));
        assert_eq!(open(&key, &binding("p1"), 1_000, &s), Err(Refused::Expired));
        assert_eq!(open(&key, &binding("p2"), 999, &s), Err(Refused::OtherBinding));
        assert_eq!(open(&SealKey::random(), &binding("p1"), 999, &s), Err(Refused::Tampered));
        assert!(open(&key, &binding("p1"), 999, &format!("{s}-TAMPERED")).is_err());
        // Flipping one byte of the body breaks the tag.
        let (body, tag) = s.split_once('.').unwrap();
        let mut raw = URL_SAFE_NO_PAD.decode(body).unwrap();
        raw[10] ^= 1;
        let forged = format!("{}.{tag}", URL_SAFE_NO_PAD.encode(raw));
        assert!(matches!(open(&key, &binding("p1"), 999, &forged), Err(Refused::Tampered | Refused::Malformed)));
        assert!(SealKey::from_hex("abcd").is_err());
    }
}
