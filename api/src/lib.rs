//! Writ's pure core: commands, events, the state machine (`decide` then `apply`), reason codes,
//! wire DTOs and canonical encodings. This crate is the one serialization boundary of the
//! workspace, and it does no IO: no network, no storage, no clock, no randomness (enforced by
//! `tests/fast/tests/architecture.rs` and this crate's `clippy.toml`). Clients live in `writ-client`.

pub mod audit;
pub mod auth;
pub mod backup;
pub mod catalog;
pub mod cold;
pub mod credential;
pub mod decide;
pub mod device;
pub mod dto;
pub mod evidence;
pub mod executor;
pub mod frames;
pub mod grant;
pub mod health;
pub mod ledger;
pub mod oauth;
pub mod operation;
pub mod operator;
pub mod pem;
pub mod principal;
pub mod query;
pub mod quota;
pub mod reason;
pub mod rejection;
pub mod retention;
pub mod revocation;

/// Bugs the operation simulation must catch (`make sim-mutants`), off unless a test thread
/// switches one on; compiled only with the `sim-mutants` feature, never into Writ.
#[cfg(feature = "sim-mutants")]
pub mod mutants {
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum Mutant {
        /// A rival executor's start of a running attempt goes through (a second attempt).
        SecondStart,
        /// A device whose lease's time is over counts as free, although its operation still
        /// holds it (an attempt whose effect is unknown).
        ExpiredLeaseIsFree,
    }

    thread_local! {
        pub static ACTIVE: std::cell::Cell<Option<Mutant>> = const { std::cell::Cell::new(None) };
    }

    pub fn active(m: Mutant) -> bool {
        ACTIVE.with(|a| a.get() == Some(m))
    }
}
pub mod role;
pub mod schema;
pub mod session;
pub mod settings;
pub mod signatures;
pub mod state;
pub mod tenant;
pub mod token;
pub mod trace;
pub mod trail;
pub mod upstream;
pub mod work;

pub use reason::ReasonCode;
pub use rejection::Rejection;

/// Why a value could not be [`encode`]d.
pub type EncodeError = bincode::error::EncodeError;

/// Canonical binary encoding of persisted types (log entries, events, snapshots).
///
/// Fixed-width little-endian integers so that encodings are stable and easy to pin in golden
/// files; the configuration is part of the on-disk format and never changes.
pub fn encode<T: serde::Serialize>(value: &T) -> Result<Vec<u8>, bincode::error::EncodeError> {
    bincode::serde::encode_to_vec(value, bincode_config())
}

/// [`encode`], appended to `out`: the same bytes, so encodings of a struct's fields written one
/// after another are the struct's encoding.
pub fn encode_into<T: serde::Serialize>(value: &T, out: &mut Vec<u8>) -> Result<(), bincode::error::EncodeError> {
    bincode::serde::encode_into_std_write(value, out, bincode_config()).map(drop)
}

/// How many bytes [`encode`] would write, without writing them.
pub fn encoded_len<T: serde::Serialize>(value: &T) -> Result<usize, bincode::error::EncodeError> {
    let mut size = bincode::enc::write::SizeWriter::default();
    bincode::serde::encode_into_writer(value, &mut size, bincode_config())?;
    Ok(size.bytes_written)
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
    whole(bytes, bincode::serde::decode_from_slice(bytes, unbounded_config())?)
}

/// Values [`encode`]d one after another (as a tuple's elements are), read in turn — bounded like
/// [`decode`] (64 MiB in all) or not, like [`decode_unbounded`].
pub(crate) struct Sequence<'a> {
    rest: &'a [u8],
    bounded: bool,
}

impl<'a> Sequence<'a> {
    pub(crate) fn new(bytes: &'a [u8], bounded: bool) -> Sequence<'a> {
        Sequence { rest: bytes, bounded }
    }

    /// The next value.
    pub(crate) fn next<T: serde::de::DeserializeOwned>(&mut self) -> Result<T, bincode::error::DecodeError> {
        if self.bounded && self.rest.len() > DECODE_BYTES_MAX {
            return Err(bincode::error::DecodeError::LimitExceeded);
        }
        let (value, used) = if self.bounded {
            bincode::serde::decode_from_slice(self.rest, bincode_config())?
        } else {
            bincode::serde::decode_from_slice(self.rest, unbounded_config())?
        };
        self.rest = &self.rest[used..];
        Ok(value)
    }

    /// Nothing may follow the last value.
    pub(crate) fn finish(self) -> Result<(), bincode::error::DecodeError> {
        whole(self.rest, ((), 0))
    }
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

/// Most bytes [`decode`] reads.
const DECODE_BYTES_MAX: usize = 64 * 1024 * 1024;

fn bincode_config() -> impl bincode::config::Config {
    bincode::config::standard().with_little_endian().with_fixed_int_encoding().with_limit::<DECODE_BYTES_MAX>()
}

/// [`encode`]'s configuration, with no bound on what a decode reads.
fn unbounded_config() -> impl bincode::config::Config {
    bincode::config::standard().with_little_endian().with_fixed_int_encoding()
}

/// sha256 as lowercase hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    hex(&sha2::Sha256::digest(bytes))
}

/// `bytes` as lowercase hex, written in one allocation (`hex::encode` collects the text char
/// by char: it showed in the profile of a node recording audit records, one hash each).
pub fn hex(bytes: &[u8]) -> String {
    let mut out = vec![0; bytes.len() * 2];
    ::hex::encode_to_slice(bytes, &mut out).expect("the output is twice the input");
    String::from_utf8(out).expect("hex digits are ASCII")
}

/// Version headers for whole-state encodings (Raft snapshots, the state edges load).
///
/// A versioned encoding is `magic (8 bytes) ++ version (u32 LE) ++ body`. The body of version
/// 1 is the [`encode`]d value. Bytes without the magic are the layout written before versions
/// existed, which is version 1's body. A reader refuses a version newer than it knows with a
/// clear error instead of misreading it; `api/tests/golden.rs` pins the version-1 state, so a
/// changed layout fails a test until the version is raised (and the old one still read or
/// refused on purpose).
pub mod format {
    /// Magic of a Raft snapshot payload (state plus retained audit records).
    pub const SNAPSHOT_MAGIC: [u8; 8] = *b"WRITSNAP";
    /// Magic of a ledger state as a node serves it to followers (edges).
    pub const STATE_MAGIC: [u8; 8] = *b"WRITSTAT";
    /// The version this build writes, and the newest it reads.
    /// 2: the state is followed by its revocations (`LedgerState::encode`).
    /// 3: then by its live proposals.
    /// 4: then by its work items and operation histories.
    /// 5: then by its evidence records.
    /// 6: then by its compacted operations (retention).
    /// 7: then by its upstream MCP servers.
    /// 8: then by its upstream operations waiting for their attempt.
    /// 9: a tenant's audit times are runs (`crate::audit::AuditTimes`), not a time per record.
    /// 10: then by the anonymous access of edges (`LedgerState::anonymous`).
    /// 11: then by the records of MCP sessions (`LedgerState::sessions`).
    /// 12: then by the sources of issuers known by their URL (`LedgerState::issuer_sources`).
    /// 13: then by the tenants' own authorization servers (`LedgerState::oauth`).
    /// 14: sections — format 13's body with its length in front, then the operators
    /// (`LedgerState::operators`).
    /// 15: every section with its length in front, then the executors' presence
    /// (`LedgerState::executor_presence`).
    /// 16: then what the cold rows add up to per tenant, then the rows not in a store
    /// (`LedgerState::cold`); operations no longer live, bindings and idempotency keys are
    /// rows, no longer in the body's maps.
    /// 17: the same layout; an operation whose reported effect waits for a decision has a time
    /// row (`crate::cold::Row::Reported`), which upgrading format 16 adds
    /// (`LedgerState::upgrade_v16_to_v17`).
    /// 18: tagged sections, one per domain, each with its own version (`crate::schema`); the
    /// maps older formats kept finished operations, keys and evidence in are gone from it.
    /// 19: format 18 with the `ledger` section at version 2 (the ledger version in force).
    /// 20: format 19 with the `token` and `cold` sections at version 2: token records are cold
    /// rows (`crate::cold::Row::Token`), no longer in the `token` section.
    /// 21: format 20 with the `work` section at version 2: the open work items and a count of
    /// the closed ones, which are cold rows (`crate::cold::Row::Work`).
    pub const STATE_FORMAT_VERSION: u32 = 21;
    const HEADER_BYTES: usize = 12;

    /// Why versioned bytes cannot be read.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub enum FormatError {
        /// Written by a newer Writ: upgrade this process first.
        Newer { found: u32, newest: u32 },
        /// The magic without a whole version number.
        Truncated,
    }

    impl std::fmt::Display for FormatError {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            match self {
                FormatError::Newer { found, newest } => write!(
                    f,
                    "state format version {found} is newer than this build reads (at most {newest}): upgrade it first"
                ),
                FormatError::Truncated => write!(f, "state format header is truncated"),
            }
        }
    }

    impl std::error::Error for FormatError {}

    /// `body` behind the header of `magic` at the current version.
    pub fn wrap(magic: [u8; 8], body: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEADER_BYTES + body.len());
        out.extend_from_slice(&magic);
        out.extend_from_slice(&STATE_FORMAT_VERSION.to_le_bytes());
        out.extend_from_slice(body);
        out
    }

    /// The version and body of `bytes` (headerless bytes are the pre-version layout, which is
    /// version 1's).
    pub fn unwrap(magic: [u8; 8], bytes: &[u8]) -> Result<(u32, &[u8]), FormatError> {
        let Some(rest) = bytes.strip_prefix(&magic) else { return Ok((1, bytes)) };
        let (Some(version), Some(body)) = (rest.get(..4), rest.get(4..)) else { return Err(FormatError::Truncated) };
        let version = u32::from_le_bytes([version[0], version[1], version[2], version[3]]);
        if version > STATE_FORMAT_VERSION {
            return Err(FormatError::Newer { found: version, newest: STATE_FORMAT_VERSION });
        }
        Ok((version, body))
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn hex_is_lowercase_and_agrees_with_the_hex_crate() {
        let bytes: Vec<u8> = (0..=255).collect();
        assert_eq!(super::hex(&bytes), ::hex::encode(&bytes));
        assert_eq!(super::hex(&[0xab, 0x01]), "ab01");
        assert_eq!(super::hex(&[]), "");
    }
}
