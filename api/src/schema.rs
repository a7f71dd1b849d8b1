//! The persistence schema of a whole state, from state format 18 on: tagged sections, one per
//! domain, each with its own version. A section is its tag (a length byte, then the name), its
//! version (u32 LE), its length (u64 LE) and its bytes; the sections come in [`SECTIONS`]'
//! order. A domain changes its layout by raising its section's version and keeping a reader of
//! every older one, with an explicit `upgrade_<domain>_v<N>_to_v<N+1>` from each to the next;
//! other domains' sections are untouched. An unknown tag or a version newer than this build
//! reads is refused, never skipped (the state would be incomplete).
//!
//! Formats before 18 are read by [`LedgerState::decode_body`] (format 1's struct with views
//! appended, then untagged sections); `docs/design/formats.md` lists every format.

use std::collections::BTreeMap;

use crate::state::LedgerState;

/// Every section of format 18, in order, with the version this build writes (and the newest it
/// reads).
pub const SECTIONS: [(&str, u32); 16] = [
    ("ledger", 2),
    ("tenant", 1),
    ("principal", 1),
    ("token", 2),
    ("device", 1),
    ("executor", 1),
    ("catalog", 1),
    ("audit", 1),
    ("quota", 1),
    ("operation", 1),
    ("work", 2),
    ("upstream", 1),
    ("oauth", 1),
    ("session", 1),
    ("operator", 1),
    ("cold", 2),
];

/// The ledger version in force a `ledger` section of version 1 upgrades to: none (it was
/// written before any could be raised).
fn upgrade_ledger_v1_to_v2() -> u32 {
    0
}

/// A `token` section of version 1 held the token records, which version 2 keeps as cold rows:
/// they move there once every section is read (the rows need the tenants' incarnations).
fn upgrade_token_v1_to_v2(state: &mut LedgerState) {
    state.cool_tokens();
}

/// A `work` section of version 1 held every work item, which version 2 keeps open ones of (with
/// a count of the closed ones, which are cold rows): they move there once every section is read.
fn upgrade_work_v1_to_v2(state: &mut LedgerState) {
    state.cool_works();
}

/// A `cold` section of version 1 summed each tenant's rows without a count of token records
/// (there were none): version 2 adds it, at zero.
fn upgrade_cold_v1_to_v2(
    tenants: BTreeMap<String, crate::cold::ColdTenantV1>,
) -> BTreeMap<String, crate::cold::ColdTenant> {
    crate::cold::sums_from_v1(tenants)
}

fn enc<T: serde::Serialize>(value: &T) -> Vec<u8> {
    crate::encode(value).expect("state views are always encodable")
}

impl LedgerState {
    /// Each section's bytes, in [`SECTIONS`]' order (`rows`: with the cold rows not in a store;
    /// the digest covers them through the per-tenant sums instead).
    fn section_bytes(&self, rows: bool) -> [Vec<u8>; SECTIONS.len()] {
        let pending = if rows { self.cold.pending_rows() } else { &BTreeMap::new() };
        [
            enc(&(self.clock_ms, self.revision, &self.stream_seq, self.ledger_version)),
            enc(&(&self.tenants, &self.tenant_names)),
            enc(&(&self.principals, &self.principal_names, &self.principal_quotas, &self.anonymous)),
            enc(&(&self.signing_keys, &self.issuers, &self.issuer_sources, &self.revocations)),
            enc(&(
                &self.sites,
                &self.site_names,
                &self.devices,
                &self.device_names,
                &self.device_leases,
                &self.fencing,
            )),
            enc(&(
                &self.enrollments,
                &self.executors,
                &self.executor_certs,
                &self.executor_cas,
                &self.executor_presence,
            )),
            enc(&self.catalogs),
            enc(&self.audit),
            enc(&(&self.quota_windows, &self.operation_windows, &self.principal_operation_windows)),
            enc(&(&self.operations, &self.live_operations, &self.history, &self.proposals, &self.upstream_operations)),
            enc(&(&self.works, &self.works_closed)),
            enc(&self.upstreams),
            enc(&self.oauth),
            enc(&self.sessions),
            enc(&self.operators),
            enc(&(&self.cold.tenants, pending)),
        ]
    }

    /// The body of state format 18 ([`crate::schema`]).
    pub(crate) fn encode_schema(&self, rows: bool) -> Vec<u8> {
        let bytes = self.section_bytes(rows);
        let mut out = Vec::with_capacity(bytes.iter().map(|b| b.len() + 24).sum());
        for ((tag, version), b) in SECTIONS.iter().zip(&bytes) {
            push_section(&mut out, tag, *version, b);
        }
        out
    }

    /// Reads a body of state format 18: every section of [`SECTIONS`], in order, each at a
    /// version this build reads.
    pub(crate) fn decode_schema(body: &[u8], bounded: bool) -> Result<LedgerState, String> {
        let mut rest = body;
        let mut state = LedgerState::default();
        let (mut tokens_in_memory, mut closed_works_in_memory) = (false, false);
        for (tag, newest) in SECTIONS {
            let (found, version, bytes) = next_section(&mut rest)?;
            if found != tag.as_bytes() {
                let found = String::from_utf8_lossy(found);
                return Err(format!("undecodable ledger state (format 18): section '{found}' where '{tag}' belongs"));
            }
            if version == 0 || version > newest {
                return Err(format!(
                    "ledger state section '{tag}' is version {version}; this build reads 1 to {newest}: upgrade it first"
                ));
            }
            state
                .read_section(tag, version, bytes, bounded)
                .map_err(|e| format!("undecodable '{tag}' section: {e}"))?;
            tokens_in_memory |= tag == "token" && version == 1;
            closed_works_in_memory |= tag == "work" && version == 1;
        }
        if !rest.is_empty() {
            return Err("undecodable ledger state (format 18): bytes after the last section".into());
        }
        if tokens_in_memory {
            upgrade_token_v1_to_v2(&mut state);
        }
        if closed_works_in_memory {
            upgrade_work_v1_to_v2(&mut state);
        }
        Ok(state)
    }

    /// Reads section `tag` at `version` into this state: version 1 of every section; version 2
    /// of `ledger` adds the ledger version in force (none was, in version 1:
    /// [`upgrade_ledger_v1_to_v2`]); version 2 of `token` no longer holds the token records,
    /// which are cold rows ([`upgrade_token_v1_to_v2`]); version 2 of `cold` counts them
    /// ([`upgrade_cold_v1_to_v2`]); version 2 of `work` holds the open items and a count of the
    /// closed ones, which are cold rows ([`upgrade_work_v1_to_v2`]).
    fn read_section(&mut self, tag: &str, version: u32, bytes: &[u8], bounded: bool) -> Result<(), String> {
        let mut r = crate::Sequence::new(bytes, bounded);
        let s = self;
        let e = |e: bincode::error::DecodeError| e.to_string();
        match tag {
            "ledger" if version == 1 => {
                (s.clock_ms, s.revision, s.stream_seq) = r.next().map_err(e)?;
                s.ledger_version = upgrade_ledger_v1_to_v2();
            }
            "ledger" => (s.clock_ms, s.revision, s.stream_seq, s.ledger_version) = r.next().map_err(e)?,
            "tenant" => (s.tenants, s.tenant_names) = r.next().map_err(e)?,
            "principal" => (s.principals, s.principal_names, s.principal_quotas, s.anonymous) = r.next().map_err(e)?,
            "token" if version == 1 => {
                (s.tokens, s.token_children, s.signing_keys, s.issuers, s.issuer_sources, s.revocations) =
                    r.next().map_err(e)?
            }
            "token" => (s.signing_keys, s.issuers, s.issuer_sources, s.revocations) = r.next().map_err(e)?,
            "device" => {
                (s.sites, s.site_names, s.devices, s.device_names, s.device_leases, s.fencing) = r.next().map_err(e)?
            }
            "executor" => {
                (s.enrollments, s.executors, s.executor_certs, s.executor_cas, s.executor_presence) =
                    r.next().map_err(e)?
            }
            "catalog" => s.catalogs = r.next().map_err(e)?,
            "audit" => s.audit = r.next().map_err(e)?,
            "quota" => (s.quota_windows, s.operation_windows, s.principal_operation_windows) = r.next().map_err(e)?,
            "operation" => {
                (s.operations, s.live_operations, s.history, s.proposals, s.upstream_operations) =
                    r.next().map_err(e)?
            }
            "work" if version == 1 => s.works = r.next().map_err(e)?,
            "work" => (s.works, s.works_closed) = r.next().map_err(e)?,
            "upstream" => s.upstreams = r.next().map_err(e)?,
            "oauth" => s.oauth = r.next().map_err(e)?,
            "session" => s.sessions = r.next().map_err(e)?,
            "operator" => s.operators = r.next().map_err(e)?,
            "cold" if version == 1 => {
                let (tenants, pending) = r.next().map_err(e)?;
                s.cold.tenants = upgrade_cold_v1_to_v2(tenants);
                s.cold.restore_pending(pending);
            }
            "cold" => {
                let (tenants, pending) = r.next().map_err(e)?;
                s.cold.tenants = tenants;
                s.cold.restore_pending(pending);
            }
            other => return Err(format!("no section '{other}'")),
        }
        r.finish().map_err(e)
    }
}

#[cfg(test)]
impl LedgerState {
    /// This state as a build of format 19 wrote it: its `token` section at version 1 (with the
    /// token records), its `work` section at version 1 (every item), and its `cold` section at
    /// version 1 (sums without their count, rows without the token and work rows); to test the
    /// upgrade from that format's own layout.
    pub(crate) fn encode_format_19(&self) -> Vec<u8> {
        let mut warm = self.clone();
        warm.warm_tokens();
        warm.warm_works();
        let mut bytes = warm.section_bytes(true);
        let w = &warm;
        bytes[3] = enc(&(&w.tokens, &w.token_children, &w.signing_keys, &w.issuers, &w.issuer_sources, &w.revocations));
        bytes[10] = enc(&w.works);
        let sums: BTreeMap<&String, crate::cold::ColdTenantV1> =
            w.cold.tenants.iter().map(|(id, t)| (id, t.clone().into())).collect();
        bytes[15] = enc(&(&sums, w.cold.pending_rows()));
        let mut out = crate::format::STATE_MAGIC.to_vec();
        out.extend_from_slice(&19u32.to_le_bytes());
        for ((tag, version), b) in SECTIONS.iter().zip(&bytes) {
            let version = if matches!(*tag, "token" | "work" | "cold") { 1 } else { *version };
            push_section(&mut out, tag, version, b);
        }
        out
    }
}

/// Appends section `tag` at `version` with its `bytes` to `out`: the tag (a length byte, then
/// the name), the version (u32 LE), the length (u64 LE), the bytes.
fn push_section(out: &mut Vec<u8>, tag: &str, version: u32, bytes: &[u8]) {
    out.push(u8::try_from(tag.len()).expect("a short tag"));
    out.extend_from_slice(tag.as_bytes());
    out.extend_from_slice(&version.to_le_bytes());
    out.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
    out.extend_from_slice(bytes);
}

/// How many bytes each section of [`SECTIONS`] takes in `body` (what [`LedgerState::encode`]
/// wrote): which domain a state's size is in, read from its section headers.
pub fn section_sizes(mut body: &[u8]) -> Result<[(&'static str, usize); SECTIONS.len()], String> {
    let mut sizes = SECTIONS.map(|(tag, _)| (tag, 0));
    for (tag, size) in &mut sizes {
        let (found, _, bytes) = next_section(&mut body)?;
        if found != tag.as_bytes() {
            return Err(format!("section '{}' where '{tag}' belongs", String::from_utf8_lossy(found)));
        }
        *size = bytes.len();
    }
    Ok(sizes)
}

/// The next section of `rest` (tag, version, bytes), moving past it.
fn next_section<'a>(rest: &mut &'a [u8]) -> Result<(&'a [u8], u32, &'a [u8]), String> {
    let truncated = || "undecodable ledger state (format 18): a section is truncated".to_string();
    let (&len, after) = rest.split_first().ok_or_else(truncated)?;
    let (tag, after) = after.split_at_checked(usize::from(len)).ok_or_else(truncated)?;
    let (version, after) = after.split_at_checked(4).ok_or_else(truncated)?;
    let (size, after) = after.split_at_checked(8).ok_or_else(truncated)?;
    let size = usize::try_from(u64::from_le_bytes(size.try_into().expect("8 bytes"))).map_err(|_| truncated())?;
    let (bytes, after) = after.split_at_checked(size).ok_or_else(truncated)?;
    *rest = after;
    Ok((tag, u32::from_le_bytes(version.try_into().expect("4 bytes")), bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> LedgerState {
        let mut state = LedgerState { clock_ms: 7, revision: 3, ..LedgerState::default() };
        state.stream_seq.insert("t-1".into(), 3);
        state
    }

    #[test]
    fn section_sizes_add_up_to_the_encoding_less_its_section_headers() {
        let state = sample();
        let body = state.encode_schema(true);
        let sizes = section_sizes(&body).expect("its own encoding");
        let headers: usize = SECTIONS.iter().map(|(tag, _)| 1 + tag.len() + 4 + 8).sum();
        assert_eq!(sizes.iter().map(|(_, n)| n).sum::<usize>() + headers, body.len());
        assert_eq!(sizes.map(|(tag, _)| tag), SECTIONS.map(|(tag, _)| tag));
        assert_eq!(sizes[7], ("audit", crate::encode(&state.audit).unwrap().len()));
        assert!(section_sizes(&body[..body.len() - 1]).is_err(), "a cut body is refused");
    }

    #[test]
    fn every_section_round_trips_in_order() {
        let body = sample().encode_schema(true);
        let mut rest = body.as_slice();
        for (tag, version) in SECTIONS {
            let (found, v, _) = next_section(&mut rest).expect("a section");
            assert_eq!((found, v), (tag.as_bytes(), version));
        }
        assert!(rest.is_empty());
        assert_eq!(LedgerState::decode_schema(&body, true).expect("decodes"), sample());
    }

    #[test]
    fn a_newer_section_an_unknown_tag_or_a_cut_body_is_refused() {
        let body = sample().encode_schema(true);
        // The first section's version follows its tag ("ledger": a length byte and 6 bytes).
        let mut newer = body.clone();
        newer[7..11].copy_from_slice(&3u32.to_le_bytes());
        let e = LedgerState::decode_schema(&newer, true).expect_err("newer");
        assert!(e.contains("'ledger' is version 3") && e.contains("upgrade it first"), "{e}");
        let mut renamed = body.clone();
        renamed[1] = b'L';
        let e = LedgerState::decode_schema(&renamed, true).expect_err("unknown tag");
        assert!(e.contains("section 'Ledger' where 'ledger' belongs"), "{e}");
        let e = LedgerState::decode_schema(&body[..body.len() - 1], true).expect_err("cut");
        assert!(e.contains("truncated"), "{e}");
        let mut longer = body.clone();
        longer.push(0);
        assert!(LedgerState::decode_schema(&longer, true).expect_err("trailing").contains("after the last section"));
    }
}
