//! Writ's shared types — commands, events, reason codes, wire DTOs — and the typed client of
//! the ledger's client API. This crate is the one serialization boundary of the workspace.

pub mod audit;
pub mod auth;
pub mod catalog;
pub mod client;
pub mod device;
pub mod dto;
pub mod executor;
pub mod ledger;
pub mod operation;
pub mod principal;
pub mod quota;
pub mod reason;
pub mod settings;
pub mod state;
pub mod token;
pub mod verifier;

pub use ledger::Rejection;
pub use reason::ReasonCode;

/// Canonical binary encoding of persisted types (log entries, events, snapshots).
///
/// Fixed-width little-endian integers so that encodings are stable and easy to pin in golden
/// files; the configuration is part of the on-disk format and never changes.
pub fn encode<T: serde::Serialize>(value: &T) -> Result<Vec<u8>, bincode::error::EncodeError> {
    bincode::serde::encode_to_vec(value, bincode_config())
}

/// Decodes what [`encode`] wrote; trailing bytes are an error. At most 64 MiB is decoded (a
/// bound on what a message or a stored entry may make the node allocate).
pub fn decode<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, bincode::error::DecodeError> {
    whole(bytes, bincode::serde::decode_from_slice(bytes, bincode_config())?)
}

/// [`decode`] without the 64 MiB bound, for input that is already bounded or vouched for: a
/// checksummed record the node wrote itself, or a Raft RPC body (capped by the transport). A
/// Raft snapshot grows with the state (every retained audit record) and outgrows the message
/// bound. Allocation still follows the input (serde's cautious size hints), and the encoding
/// is [`encode`]'s.
pub fn decode_unbounded<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, bincode::error::DecodeError> {
    let unbounded = bincode::config::standard().with_little_endian().with_fixed_int_encoding();
    whole(bytes, bincode::serde::decode_from_slice(bytes, unbounded)?)
}

fn whole<T>(bytes: &[u8], (value, used): (T, usize)) -> Result<T, bincode::error::DecodeError> {
    if used != bytes.len() {
        return Err(bincode::error::DecodeError::OtherString(format!(
            "{} trailing bytes after the value",
            bytes.len() - used
        )));
    }
    Ok(value)
}

fn bincode_config() -> impl bincode::config::Config {
    bincode::config::standard().with_little_endian().with_fixed_int_encoding().with_limit::<{ 64 * 1024 * 1024 }>()
}

/// sha256 as lowercase hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(bytes))
}
