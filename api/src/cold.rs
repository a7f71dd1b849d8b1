//! Cold state: what grows with traffic and no rule reads on every command — operations that are
//! no longer live (with their histories, and the bindings retention compacts them to), the
//! idempotency keys, evidence records, token records (with their delegation links), closed work
//! items, the operator's queue of what waits for a human, and the time rows retention and evidence expiry
//! walk — kept as rows outside the in-memory state. A node keeps them in a RocksDB column family written at apply; a state without a store
//! (the pure tests, the simulation, a state decoded from bytes) keeps them in
//! [`ColdTier::pending`], so the rules read them the same way everywhere.
//!
//! **Determinism.** A row is versioned by the revision of the event that wrote it, and a read is
//! "as of" a revision: the newest version written at or before it. So a node that replays its
//! log from a snapshot after a crash (its column family possibly holding rows of entries it is
//! about to apply again) reads exactly what it read the first time, and every replica reads
//! the same. Folds read as of the revision before the event they fold ([`ColdTier::at`]).
//!
//! **Digest.** The state's digest covers the rows through a running digest per tenant: the sum,
//! modulo 2^256, of sha256 over each row's key and value, moved by every write — so the state
//! digest never re-reads the rows, yet two replicas with different rows differ in it.
//!
//! **Tenants.** A tenant's rows share a prefix: its id and its incarnation (the ledger time it
//! was created: [`ColdTier::open`]), so a purge drops one prefix and a tenant re-created under
//! the same id never sees the old rows. The incarnation depends on the tenant alone, never on
//! when a replica first wrote a row of it, so replicas that reached the same state by different
//! paths (a fold, or the upgrade of an older snapshot at another revision) hold the same keys.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::operation::OperationState;

/// Where a node keeps the rows: read as of a revision (the newest version at or before it).
pub trait ColdStore: Send + Sync + std::fmt::Debug {
    /// The value of `key` as of revision `at`; `None` when it has none or it was deleted.
    fn get(&self, key: &[u8], at: u64) -> Option<Vec<u8>>;
    /// The rows under `prefix` whose keys sort after `after` (all, without one), in key order,
    /// as of revision `at`: at most `limit`.
    fn scan(&self, prefix: &[u8], after: Option<&[u8]>, at: u64, limit: usize) -> Vec<(Vec<u8>, Vec<u8>)>;
}

/// A write not yet in the store: the revision that made it, the value (`None`: deleted), and
/// whether it replaced a row (so older versions become garbage once no replay can read them).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingRow {
    pub revision: u64,
    pub value: Option<Vec<u8>>,
    pub replaces: bool,
}

/// What a state wrote since its store last took its writes.
#[derive(Debug, Default)]
pub struct ColdWrites {
    /// The newest write of each row, by key.
    pub rows: BTreeMap<Vec<u8>, PendingRow>,
    /// Tenant prefixes dropped (a purge), with the revision that dropped them.
    pub dropped: Vec<(u64, Vec<u8>)>,
}

impl ColdWrites {
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty() && self.dropped.is_empty()
    }
}

/// What a tenant's rows add up to: kept in the state (encoded, and in the digest).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ColdTenant {
    /// The ledger time the tenant was created: part of every key of it.
    pub incarnation: u64,
    /// sha256 over each row's key and value, summed modulo 2^256.
    pub digest: [u8; 32],
    /// Operation records that are no longer live, whole.
    pub operations: u64,
    /// Operation records compacted to their bindings.
    pub bindings: u64,
    /// Idempotency keys bound.
    pub keys: u64,
    /// Transitions in the histories of the whole records.
    pub transitions: u64,
    /// The whole and compacted records by state.
    pub by_state: BTreeMap<OperationState, u64>,
    /// Bytes of the rows' keys and values.
    pub bytes: u64,
    /// Evidence records, and the bytes of the blobs they describe (the tenant's evidence quota).
    pub evidence: u64,
    pub evidence_bytes: u64,
    /// Token records (from the `cold` section's version 2; version 1's tokens were in memory).
    pub tokens: u64,
}

/// [`ColdTenant`] as the `cold` section's version 1 wrote it (before token records were rows).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ColdTenantV1 {
    pub incarnation: u64,
    pub digest: [u8; 32],
    pub operations: u64,
    pub bindings: u64,
    pub keys: u64,
    pub transitions: u64,
    pub by_state: BTreeMap<OperationState, u64>,
    pub bytes: u64,
    pub evidence: u64,
    pub evidence_bytes: u64,
}

impl From<ColdTenant> for ColdTenantV1 {
    fn from(t: ColdTenant) -> ColdTenantV1 {
        let ColdTenant {
            incarnation,
            digest,
            operations,
            bindings,
            keys,
            transitions,
            by_state,
            bytes,
            evidence,
            evidence_bytes,
            tokens: _,
        } = t;
        ColdTenantV1 {
            incarnation,
            digest,
            operations,
            bindings,
            keys,
            transitions,
            by_state,
            bytes,
            evidence,
            evidence_bytes,
        }
    }
}

impl From<ColdTenantV1> for ColdTenant {
    fn from(v1: ColdTenantV1) -> ColdTenant {
        let ColdTenantV1 {
            incarnation,
            digest,
            operations,
            bindings,
            keys,
            transitions,
            by_state,
            bytes,
            evidence,
            evidence_bytes,
        } = v1;
        ColdTenant {
            incarnation,
            digest,
            operations,
            bindings,
            keys,
            transitions,
            by_state,
            bytes,
            evidence,
            evidence_bytes,
            tokens: 0,
        }
    }
}

/// Per-tenant sums as the `cold` section's version 1 (and state format 16) wrote them, with no
/// token records counted (there were none).
pub(crate) fn sums_from_v1(tenants: BTreeMap<String, ColdTenantV1>) -> BTreeMap<String, ColdTenant> {
    tenants.into_iter().map(|(id, t)| (id, t.into())).collect()
}

/// The kinds of rows, each under its own byte after the tenant's prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Row<'a> {
    /// An operation no longer live: [`ColdOperation`], by id.
    Operation(&'a str),
    /// An idempotency key: the operation id, by [`crate::state::idempotency_slot`].
    Key(&'a str),
    /// A finished operation's whole record, by (ledger time finished, id): what retention
    /// compacts first. Empty value.
    Finished(u64, &'a str),
    /// A compacted operation, by (ledger time finished, id): what retention releases first.
    Compacted(u64, &'a str),
    /// An operation whose effect was reported and that nobody accepted or rejected yet, by
    /// (ledger time reported, id): what retention compacts once nobody decided it in time.
    /// Empty value.
    Reported(u64, &'a str),
    /// An operation that waits for a human (an unknown or a reported effect), by id: the
    /// operator's queue. Empty value.
    Attention(&'a str),
    /// An evidence record (`crate::evidence::EvidenceBlobV1`), by operation id and content hash.
    Evidence(&'a str, &'a str),
    /// An evidence record by (ledger time stored, operation id, content hash): what expires
    /// first. Empty value.
    EvidenceTime(u64, &'a str, &'a str),
    /// A token record (`crate::token::Token`: the record and its revocation), by `jti`.
    Token(&'a str),
    /// A token by (ledger time it expires, `jti`): what retention retires first. Empty value.
    TokenExpiry(u64, &'a str),
    /// A delegated token by (its parent's `jti`, its own): what a revocation cascades to.
    /// Empty value.
    TokenChild(&'a str, &'a str),
    /// A closed work item (`crate::work::WorkItem`, completed or cancelled), by id.
    Work(&'a str),
    /// A closed work item by (ledger time it closed, id): what retention retires first (from
    /// ledger version 19 on, `crate::retention::retires_works`). Empty value.
    WorkClosed(u64, &'a str),
}

impl Row<'_> {
    fn kind(self) -> u8 {
        match self {
            Row::Operation(_) => b'o',
            Row::Key(_) => b'k',
            Row::Finished(..) => b'f',
            Row::Compacted(..) => b'c',
            Row::Reported(..) => b'r',
            Row::Attention(_) => b'a',
            Row::Evidence(..) => b'e',
            Row::EvidenceTime(..) => b'x',
            Row::Token(_) => b't',
            Row::TokenExpiry(..) => b'y',
            Row::TokenChild(..) => b'd',
            Row::Work(_) => b'w',
            Row::WorkClosed(..) => b'z',
        }
    }
}

/// The time rows retention walks, oldest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Aging {
    /// [`Row::Finished`]: finished operations, whole.
    Finished,
    /// [`Row::Reported`]: operations whose reported effect waits for a decision.
    Reported,
    /// [`Row::Compacted`]: bindings.
    Compacted,
    /// [`Row::TokenExpiry`]: token records, by when they expire.
    Tokens,
    /// [`Row::WorkClosed`]: closed work items, by when they closed.
    Works,
}

impl Aging {
    fn kind(self) -> u8 {
        match self {
            Aging::Finished => Row::Finished(0, "").kind(),
            Aging::Reported => Row::Reported(0, "").kind(),
            Aging::Compacted => Row::Compacted(0, "").kind(),
            Aging::Tokens => Row::TokenExpiry(0, "").kind(),
            Aging::Works => Row::WorkClosed(0, "").kind(),
        }
    }
}

/// An operation record in the cold rows: whole (with its history) or compacted to its binding.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ColdOperation {
    pub op: crate::operation::Operation,
    pub history: Vec<crate::operation::TransitionV1>,
    pub compacted: bool,
}

/// The rows of a state: the store a node attached, what was written since it last took the
/// writes, and what the rows add up to per tenant.
#[derive(Clone, Default)]
pub struct ColdTier {
    store: Option<Arc<dyn ColdStore>>,
    /// Writes not yet taken by the store, by key: every row, for a state without a store.
    pending: BTreeMap<Vec<u8>, PendingRow>,
    /// Tenant prefixes dropped (a purge), with the revision that dropped them, not yet taken.
    dropped: Vec<(u64, Vec<u8>)>,
    /// What each tenant's rows add up to, by tenant id.
    pub tenants: BTreeMap<String, ColdTenant>,
    /// The revision reads are as of: the state's, or the one before the event being folded.
    pub(crate) at: u64,
    /// Decoded from a format whose rows had no [`Row::Reported`]: the store attached next is
    /// indexed ([`ColdTier::index_reports`]) before anything reads it.
    pub(crate) reports_unindexed: bool,
    /// Token records read from the store ([`TokenReads`]).
    tokens_read: TokenReads,
}

/// Most token records a tier keeps as read ([`TokenReads`]); a full cache starts over.
pub const TOKEN_READS_CACHED: usize = 4096;

/// Token records (or their absence) as read from the store, by key: every decision that names a
/// token reads its record, which changes rarely, and each store read is a versioned seek.
///
/// Sound because nothing else moves them: every write of a row goes through [`ColdTier::put`],
/// which forgets the key (and a purge, a new store or restored rows forget everything); a node's
/// apply takes the writes and writes them to the store under the state's write lock, so no
/// reader of this tier sees the store between the two; and reads are as of [`ColdTier::at`],
/// which only moves forward. A clone starts empty (its reads may be as of another revision).
#[derive(Default)]
struct TokenReads(std::sync::Mutex<BTreeMap<Vec<u8>, Option<Vec<u8>>>>);

impl Clone for TokenReads {
    fn clone(&self) -> Self {
        TokenReads::default()
    }
}

impl TokenReads {
    fn reads(&self) -> std::sync::MutexGuard<'_, BTreeMap<Vec<u8>, Option<Vec<u8>>>> {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The record read before, or `read` it and keep it.
    fn get_or_read(&self, key: Vec<u8>, read: impl FnOnce(&[u8]) -> Option<Vec<u8>>) -> Option<Vec<u8>> {
        if let Some(hit) = self.reads().get(&key) {
            return hit.clone();
        }
        let value = read(&key);
        let mut reads = self.reads();
        if reads.len() >= TOKEN_READS_CACHED {
            reads.clear();
        }
        reads.insert(key, value.clone());
        value
    }

    fn forget(&self, key: &[u8]) {
        self.reads().remove(key);
    }

    fn forget_all(&self) {
        self.reads().clear();
    }
}

impl std::fmt::Debug for ColdTier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ColdTier")
            .field("store", &self.store.is_some())
            .field("pending", &self.pending.len())
            .field("tenants", &self.tenants)
            .finish()
    }
}

/// Two tiers are equal when their rows are: the per-tenant digests and counts say so, wherever
/// the rows are kept.
impl PartialEq for ColdTier {
    fn eq(&self, other: &Self) -> bool {
        self.tenants == other.tenants
    }
}
impl Eq for ColdTier {}

/// `bytes` prefixed by their length (u16, big-endian): keys built of such parts are prefix-free,
/// so all versions of a key are adjacent in the store.
fn part(out: &mut Vec<u8>, bytes: &[u8]) {
    let len = u16::try_from(bytes.len()).expect("key parts are bounded well below 64 KiB");
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(bytes);
}

/// The prefix of every row of `tenant_id`'s incarnation.
pub fn tenant_prefix(tenant_id: &str, incarnation: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(2 + tenant_id.len() + 8);
    part(&mut out, tenant_id.as_bytes());
    out.extend_from_slice(&incarnation.to_be_bytes());
    out
}

/// The tenant's prefix and kind byte that begin row key `key` (or a prefix of the rows of one
/// kind itself): `None` when `key` is shorter than that.
pub fn kind_prefix_of(key: &[u8]) -> Option<&[u8]> {
    let id_len = usize::from(u16::from_be_bytes([*key.first()?, *key.get(1)?]));
    key.get(..2 + id_len + 8 + 1)
}

fn kind_prefix(tenant: &[u8], kind: u8) -> Vec<u8> {
    let mut out = tenant.to_vec();
    out.push(kind);
    out
}

/// The key of `row` under a tenant's prefix.
fn row_key(tenant: &[u8], row: Row<'_>) -> Vec<u8> {
    let mut out = kind_prefix(tenant, row.kind());
    match row {
        Row::Operation(id) | Row::Key(id) | Row::Attention(id) | Row::Token(id) | Row::Work(id) => {
            part(&mut out, id.as_bytes())
        }
        Row::Finished(at, id)
        | Row::Compacted(at, id)
        | Row::Reported(at, id)
        | Row::TokenExpiry(at, id)
        | Row::WorkClosed(at, id) => {
            out.extend_from_slice(&at.to_be_bytes());
            part(&mut out, id.as_bytes());
        }
        Row::Evidence(first, second) | Row::TokenChild(first, second) => {
            part(&mut out, first.as_bytes());
            part(&mut out, second.as_bytes());
        }
        Row::EvidenceTime(at, id, hash) => {
            out.extend_from_slice(&at.to_be_bytes());
            part(&mut out, id.as_bytes());
            part(&mut out, hash.as_bytes());
        }
    }
    out
}

/// The length-prefixed parts of `bytes` (the rest of a row key after its kind and time).
fn parts(mut bytes: &[u8]) -> Option<Vec<String>> {
    let mut out = Vec::new();
    while !bytes.is_empty() {
        let (len, rest) = bytes.split_at_checked(2)?;
        let (p, rest) = rest.split_at_checked(usize::from(u16::from_be_bytes([len[0], len[1]])))?;
        out.push(String::from_utf8(p.to_vec()).ok()?);
        bytes = rest;
    }
    Some(out)
}

/// The time (0 for a kind without one) and the parts of a row key after its tenant's prefix
/// and kind (`prefix_len` bytes).
fn parts_of(key: &[u8], prefix_len: usize, timed: bool) -> Option<(u64, Vec<String>)> {
    let rest = key.get(prefix_len..)?;
    let (at, rest) = if timed {
        let (t, r) = rest.split_at_checked(8)?;
        (u64::from_be_bytes(t.try_into().ok()?), r)
    } else {
        (0, rest)
    };
    Some((at, parts(rest)?))
}

/// [`parts_of`] of a key of one id.
fn id_of(key: &[u8], prefix_len: usize, timed: bool) -> Option<(u64, String)> {
    let (at, mut parts) = parts_of(key, prefix_len, timed)?;
    Some((at, parts.pop()?))
}

/// The ids of `due`, in (time, id) order: the first `limit`.
fn sorted(mut due: Vec<(u64, String)>, limit: usize) -> Vec<String> {
    due.sort();
    due.into_iter().take(limit).map(|(_, id)| id).collect()
}

fn row_hash(key: &[u8], value: &[u8]) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update((key.len() as u32).to_be_bytes());
    h.update(key);
    h.update(value);
    h.finalize().into()
}

/// `acc += x` (or `-=`), modulo 2^256, big-endian.
fn add(acc: &mut [u8; 32], x: &[u8; 32], subtract: bool) {
    let mut carry = 0i16;
    for i in (0..32).rev() {
        let v = if subtract {
            i16::from(acc[i]) - i16::from(x[i]) + carry
        } else {
            i16::from(acc[i]) + i16::from(x[i]) + carry
        };
        acc[i] = v.rem_euclid(256) as u8;
        carry = v.div_euclid(256);
    }
}

impl ColdTier {
    /// Has the rows kept in `store` from now on (what is pending is taken with the next writes).
    pub fn attach(&mut self, store: Arc<dyn ColdStore>) {
        self.store = Some(store);
        self.tokens_read.forget_all();
        if std::mem::take(&mut self.reports_unindexed) {
            self.index_reports();
        }
    }

    /// Gives each operation whose reported effect waits for a decision its time row
    /// ([`Row::Reported`]) as of [`ColdTier::at`], where it has none: what upgrading rows
    /// written before such rows existed adds. The operator's queue holds every such operation.
    pub(crate) fn index_reports(&mut self) {
        const PAGE: usize = 1_000;
        let tenants: Vec<String> = self.tenants.keys().cloned().collect();
        for tenant_id in tenants {
            let mut after: Option<String> = None;
            loop {
                let page = self.attention(&tenant_id, after.as_deref(), PAGE);
                for id in &page {
                    let Some(bytes) = self.get(&tenant_id, Row::Operation(id)) else { continue };
                    let row: ColdOperation = crate::decode_unbounded(&bytes).expect("a cold operation row decodes");
                    let time = Row::Reported(row.op.updated_at_ms, id);
                    let waits = !row.compacted && row.op.state == OperationState::EffectReported;
                    if waits && self.get(&tenant_id, time).is_none() {
                        self.put(&tenant_id, time, self.at, None, Some(Vec::new()));
                    }
                }
                if page.len() < PAGE {
                    break;
                }
                after = page.last().cloned();
            }
        }
    }

    /// The writes since the last call, for the store to write (in the same batch as the entries
    /// that made them); nothing without a store (the pending rows are then the rows).
    pub fn take_writes(&mut self) -> ColdWrites {
        if self.store.is_none() {
            return ColdWrites::default();
        }
        ColdWrites { rows: std::mem::take(&mut self.pending), dropped: std::mem::take(&mut self.dropped) }
    }

    /// The pending rows (the whole set, for a state without a store): what a state's encoding
    /// carries beside the per-tenant sums.
    pub fn pending_rows(&self) -> &BTreeMap<Vec<u8>, PendingRow> {
        &self.pending
    }

    /// Puts rows read back from an encoding in place as pending.
    pub(crate) fn restore_pending(&mut self, rows: BTreeMap<Vec<u8>, PendingRow>) {
        self.tokens_read.forget_all();
        self.pending = rows;
    }

    /// Forgets the pending writes of rows of `kinds` ([`Row::kind`]): what writing a format
    /// that kept such records in memory leaves out, once they are back there.
    pub(crate) fn forget_pending(&mut self, kinds: &[Row<'_>]) {
        self.tokens_read.forget_all();
        let kinds: Vec<u8> = kinds.iter().map(|r| r.kind()).collect();
        self.pending.retain(|key, _| !kind_prefix_of(key).and_then(|p| p.last()).is_some_and(|k| kinds.contains(k)));
    }

    fn prefix(&self, tenant_id: &str) -> Option<Vec<u8>> {
        self.tenants.get(tenant_id).map(|t| tenant_prefix(tenant_id, t.incarnation))
    }

    /// `row` of `tenant_id` as of [`ColdTier::at`].
    pub fn get(&self, tenant_id: &str, row: Row<'_>) -> Option<Vec<u8>> {
        let key = row_key(&self.prefix(tenant_id)?, row);
        if let Some(p) = self.pending.get(&key) {
            return p.value.clone();
        }
        let store = self.store.as_ref()?;
        match row {
            Row::Token(_) => self.tokens_read.get_or_read(key, |key| store.get(key, self.at)),
            _ => store.get(&key, self.at),
        }
    }

    /// Writes `row` of `tenant_id` at `revision` (`None`: deletes it); `old` is its value before
    /// (the caller read it), which moves the tenant's digest.
    pub fn put(&mut self, tenant_id: &str, row: Row<'_>, revision: u64, old: Option<&[u8]>, new: Option<Vec<u8>>) {
        let tenant = self.tenants.entry(tenant_id.to_string()).or_default();
        let key = row_key(&tenant_prefix(tenant_id, tenant.incarnation), row);
        if matches!(row, Row::Token(_)) {
            self.tokens_read.forget(&key);
        }
        if let Some(old) = old {
            add(&mut tenant.digest, &row_hash(&key, old), true);
            tenant.bytes -= (key.len() + old.len()) as u64;
        }
        if let Some(new) = &new {
            add(&mut tenant.digest, &row_hash(&key, new), false);
            tenant.bytes += (key.len() + new.len()) as u64;
        }
        if self.store.is_none() && new.is_none() {
            self.pending.remove(&key);
            return;
        }
        let replaces = old.is_some() || self.pending.get(&key).is_some_and(|p| p.replaces);
        self.pending.insert(key, PendingRow { revision, value: new, replaces });
    }

    /// Drops every row of `tenant_id` (a purge), at `revision`.
    pub fn drop_tenant(&mut self, tenant_id: &str, revision: u64) {
        let Some(prefix) = self.prefix(tenant_id) else { return };
        self.tokens_read.forget_all();
        self.tenants.remove(tenant_id);
        let doomed: Vec<Vec<u8>> = self
            .pending
            .range(prefix.clone()..)
            .take_while(|(k, _)| k.starts_with(&prefix))
            .map(|(k, _)| k.clone())
            .collect();
        for key in doomed {
            self.pending.remove(&key);
        }
        if self.store.is_some() {
            self.dropped.push((revision, prefix));
        }
    }

    /// Opens `tenant_id`'s rows under `incarnation` (the ledger time it was created), unless
    /// they are open.
    pub fn open(&mut self, tenant_id: &str, incarnation: u64) {
        self.tenants.entry(tenant_id.to_string()).or_insert_with(|| ColdTenant { incarnation, ..Default::default() });
    }

    /// The counts of `tenant_id`'s rows, changed by `f`.
    pub fn counts(&mut self, tenant_id: &str, f: impl FnOnce(&mut ColdTenant)) {
        f(self.tenants.entry(tenant_id.to_string()).or_default());
    }

    /// Rows of one kind of `tenant_id` after `after`, in key order: [`ColdTier::scan_prefix`].
    fn scan(&self, tenant_id: &str, kind: u8, after: Option<&[u8]>, limit: usize) -> Vec<(Vec<u8>, Vec<u8>)> {
        let Some(tenant) = self.prefix(tenant_id) else { return Vec::new() };
        self.scan_prefix(&kind_prefix(&tenant, kind), after, limit)
    }

    /// Rows under `prefix` after `after`, in key order, as of [`ColdTier::at`]: at most `limit`,
    /// the pending writes over the store's rows.
    fn scan_prefix(&self, prefix: &[u8], after: Option<&[u8]>, limit: usize) -> Vec<(Vec<u8>, Vec<u8>)> {
        let prefix = prefix.to_vec();
        let lower = after.map_or(prefix.clone(), <[u8]>::to_vec);
        let pending = self
            .pending
            .range(lower..)
            .filter(|(k, _)| after.is_none_or(|a| k.as_slice() > a))
            .take_while(|(k, _)| k.starts_with(&prefix));
        let mut merged: BTreeMap<Vec<u8>, Option<Vec<u8>>> = BTreeMap::new();
        let mut cursor = after.map(<[u8]>::to_vec);
        // Store rows, a page at a time, until `limit` survive the pending deletions.
        if let Some(store) = &self.store {
            loop {
                let page = store.scan(&prefix, cursor.as_deref(), self.at, limit);
                let full = page.len() == limit;
                cursor = page.last().map(|(k, _)| k.clone()).or(cursor);
                for (k, v) in page {
                    let gone = self.pending.get(&k).is_some_and(|p| p.value.is_none());
                    if !gone {
                        merged.insert(k, Some(v));
                    }
                }
                if !full || merged.len() >= limit {
                    break;
                }
            }
        }
        let bound = cursor.filter(|_| merged.len() >= limit);
        for (k, p) in pending {
            if bound.as_ref().is_some_and(|b| k > b) {
                break;
            }
            merged.insert(k.clone(), p.value.clone());
        }
        merged.into_iter().filter_map(|(k, v)| Some((k, v?))).take(limit).collect()
    }

    /// Ids of `tenant_id`'s time rows of `aging` whose time plus `after_ms` is at most `now`,
    /// oldest first: at most `limit`.
    pub fn due(&self, tenant_id: &str, aging: Aging, after_ms: u64, now: u64, limit: usize) -> Vec<String> {
        let Some(tenant) = self.prefix(tenant_id) else { return Vec::new() };
        let len = tenant.len() + 1;
        self.scan(tenant_id, aging.kind(), None, limit)
            .into_iter()
            .filter_map(|(k, _)| id_of(&k, len, true))
            .take_while(|(at, _)| at.saturating_add(after_ms) <= now)
            .map(|(_, id)| id)
            .collect()
    }

    /// [`ColdTier::due`] in (time, id) order, ids of one time compared as strings whatever
    /// their lengths (the order of a set of `(time, id)`): where `limit` cuts a time's ids, the
    /// rest of that time's rows are read too, so the first `limit` are those of that order.
    pub fn due_in_id_order(&self, tenant_id: &str, aging: Aging, after_ms: u64, now: u64, limit: usize) -> Vec<String> {
        let Some(tenant) = self.prefix(tenant_id) else { return Vec::new() };
        let len = tenant.len() + 1;
        let is_due = |at: u64| at.saturating_add(after_ms) <= now;
        let mut rows = self.scan(tenant_id, aging.kind(), None, limit);
        let mut due: Vec<(u64, String)> = Vec::new();
        loop {
            let full = rows.len() == limit;
            let last = rows.last().map(|(k, _)| k.clone());
            let cut_at = due.last().map(|(at, _)| *at);
            for (at, id) in rows.iter().filter_map(|(k, _)| id_of(k, len, true)) {
                if !is_due(at) || cut_at.is_some_and(|c| at != c) {
                    return sorted(due, limit);
                }
                due.push((at, id));
            }
            if !full || due.len() < limit {
                return sorted(due, limit);
            }
            rows = self.scan(tenant_id, aging.kind(), last.as_deref(), limit);
        }
    }

    /// The time of `tenant_id`'s oldest time row of `aging`.
    pub fn oldest(&self, tenant_id: &str, aging: Aging) -> Option<u64> {
        let len = self.prefix(tenant_id)?.len() + 1;
        let (key, _) = self.scan(tenant_id, aging.kind(), None, 1).into_iter().next()?;
        id_of(&key, len, true).map(|(at, _)| at)
    }

    /// Ids of `tenant_id`'s operations that wait for a human, after `after`, in the rows' order
    /// (by length, then bytes): at most `limit`.
    pub fn attention(&self, tenant_id: &str, after: Option<&str>, limit: usize) -> Vec<String> {
        let Some(tenant) = self.prefix(tenant_id) else { return Vec::new() };
        let after = after.map(|id| row_key(&tenant, Row::Attention(id)));
        let len = tenant.len() + 1;
        let rows = self.scan(tenant_id, b'a', after.as_deref(), limit);
        rows.into_iter().filter_map(|(k, _)| id_of(&k, len, false)).map(|(_, id)| id).collect()
    }

    /// `tenant_id`'s evidence records of `operation_id`, by content hash: at most `limit`.
    pub fn evidence_of(
        &self,
        tenant_id: &str,
        operation_id: &str,
        limit: usize,
    ) -> Vec<crate::evidence::EvidenceBlobV1> {
        let Some(tenant) = self.prefix(tenant_id) else { return Vec::new() };
        let mut of_operation = kind_prefix(&tenant, b'e');
        part(&mut of_operation, operation_id.as_bytes());
        let rows = self.scan_prefix(&of_operation, None, limit);
        rows.into_iter().map(|(_, v)| crate::decode_unbounded(&v).expect("an evidence row decodes")).collect()
    }

    /// (time stored, operation id, content hash) of `tenant_id`'s oldest evidence records,
    /// oldest first: at most `limit`.
    pub fn evidence_by_time(&self, tenant_id: &str, limit: usize) -> Vec<(u64, String, String)> {
        let Some(tenant) = self.prefix(tenant_id) else { return Vec::new() };
        let len = tenant.len() + 1;
        let rows = self.scan(tenant_id, b'x', None, limit);
        rows.into_iter()
            .filter_map(|(k, _)| {
                let (at, mut p) = parts_of(&k, len, true)?;
                let hash = p.pop()?;
                Some((at, p.pop()?, hash))
            })
            .collect()
    }

    /// `tenant_id`'s token records with `jti`s after `after`, in the order of their rows: at
    /// most `limit`.
    pub fn tokens(&self, tenant_id: &str, after: Option<&str>, limit: usize) -> Vec<crate::token::Token> {
        let Some(tenant) = self.prefix(tenant_id) else { return Vec::new() };
        let after = after.map(|jti| row_key(&tenant, Row::Token(jti)));
        let rows = self.scan(tenant_id, Row::Token("").kind(), after.as_deref(), limit);
        rows.into_iter().map(|(_, v)| crate::decode_unbounded(&v).expect("a token row decodes")).collect()
    }

    /// The `jti`s of the tokens delegated from `parent` of `tenant_id`: at most `limit`.
    pub fn token_children(&self, tenant_id: &str, parent: &str, limit: usize) -> Vec<String> {
        let Some(tenant) = self.prefix(tenant_id) else { return Vec::new() };
        let mut of_parent = kind_prefix(&tenant, Row::TokenChild("", "").kind());
        part(&mut of_parent, parent.as_bytes());
        let rows = self.scan_prefix(&of_parent, None, limit);
        rows.into_iter().filter_map(|(k, _)| parts(k.get(of_parent.len()..)?)?.pop()).collect()
    }

    /// `tenant_id`'s closed work items with ids after `after`, in the rows' order (by length,
    /// then bytes): at most `limit`.
    pub fn works(&self, tenant_id: &str, after: Option<&str>, limit: usize) -> Vec<crate::work::WorkItem> {
        let Some(tenant) = self.prefix(tenant_id) else { return Vec::new() };
        let after = after.map(|id| row_key(&tenant, Row::Work(id)));
        let rows = self.scan(tenant_id, Row::Work("").kind(), after.as_deref(), limit);
        rows.into_iter().map(|(_, v)| crate::decode_unbounded(&v).expect("a work row decodes")).collect()
    }

    /// `tenant_id`'s operation records (whole or compacted) with ids after `after`, in the rows'
    /// order (by length, then bytes): at most `limit`.
    pub fn operations(&self, tenant_id: &str, after: Option<&str>, limit: usize) -> Vec<ColdOperation> {
        let Some(tenant) = self.prefix(tenant_id) else { return Vec::new() };
        let after = after.map(|id| row_key(&tenant, Row::Operation(id)));
        self.scan(tenant_id, b'o', after.as_deref(), limit)
            .into_iter()
            .filter_map(|(_, v)| crate::decode_unbounded::<ColdOperation>(&v).ok())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_digest_returns_to_where_it_was_when_a_row_goes() {
        let mut tier = ColdTier::default();
        tier.put("t", Row::Key("a"), 1, None, Some(b"x".to_vec()));
        let one = tier.tenants["t"].digest;
        tier.put("t", Row::Key("b"), 2, None, Some(b"y".to_vec()));
        assert_ne!(tier.tenants["t"].digest, one);
        tier.put("t", Row::Key("b"), 3, Some(b"y"), None);
        assert_eq!(tier.tenants["t"].digest, one);
        assert_eq!(tier.get("t", Row::Key("a")).as_deref(), Some(&b"x"[..]));
        assert_eq!(tier.get("t", Row::Key("b")), None);
    }

    #[test]
    fn time_rows_come_out_oldest_first_and_only_when_due() {
        let mut tier = ColdTier::default();
        for (at, id) in [(30, "c"), (10, "z"), (20, "a")] {
            tier.put("t", Row::Finished(at, id), at, None, Some(Vec::new()));
        }
        assert_eq!(tier.due("t", Aging::Finished, 5, 26, 10), ["z", "a"]);
        assert_eq!(tier.due("t", Aging::Finished, 5, 26, 1), ["z"]);
        assert_eq!(tier.oldest("t", Aging::Finished), Some(10));
        assert_eq!(tier.oldest("t", Aging::Compacted), None);
        assert_eq!(tier.oldest("t", Aging::Reported), None);
    }

    #[test]
    fn due_ids_of_one_time_come_in_string_order_whatever_their_lengths() {
        let mut tier = ColdTier::default();
        for id in ["b", "aa", "c", "ab"] {
            tier.put("t", Row::TokenExpiry(10, id), 1, None, Some(Vec::new()));
        }
        tier.put("t", Row::TokenExpiry(5, "zz"), 1, None, Some(Vec::new()));
        tier.put("t", Row::TokenExpiry(20, "a"), 1, None, Some(Vec::new()));
        // Rows sort by length first ("b", "c", then "aa", "ab"): a cut among them reads on.
        assert_eq!(tier.due("t", Aging::Tokens, 0, 10, 3), ["zz", "b", "c"]);
        assert_eq!(tier.due_in_id_order("t", Aging::Tokens, 0, 10, 3), ["zz", "aa", "ab"]);
        assert_eq!(tier.due_in_id_order("t", Aging::Tokens, 0, 10, 2), ["zz", "aa"]);
        assert_eq!(tier.due_in_id_order("t", Aging::Tokens, 0, 10, 1), ["zz"]);
        assert_eq!(tier.due_in_id_order("t", Aging::Tokens, 0, 20, 10), ["zz", "aa", "ab", "b", "c", "a"]);
        assert_eq!(tier.due_in_id_order("t", Aging::Tokens, 0, 9, 10), ["zz"]);
    }

    #[test]
    fn a_row_key_names_the_prefix_of_its_tenant_and_kind() {
        let tenant = tenant_prefix("tenant-a", 7);
        let key = row_key(&tenant, Row::Finished(10, "op"));
        let kind = kind_prefix(&tenant, b'f');
        assert_eq!(kind_prefix_of(&key), Some(&kind[..]));
        assert_eq!(kind_prefix_of(&kind), Some(&kind[..]), "a kind's prefix names itself");
        assert_eq!(kind_prefix_of(&tenant), None, "a tenant's prefix has no kind");
        assert_eq!(kind_prefix_of(&[0]), None);
    }

    #[test]
    fn a_purged_tenant_created_again_sees_none_of_its_old_rows() {
        let mut tier = ColdTier::default();
        tier.open("t", 1);
        tier.put("t", Row::Key("a"), 1, None, Some(b"x".to_vec()));
        tier.drop_tenant("t", 2);
        assert!(tier.pending_rows().is_empty());
        tier.open("t", 3);
        tier.put("t", Row::Key("b"), 3, None, Some(b"y".to_vec()));
        assert_eq!(tier.get("t", Row::Key("a")), None);
        assert_eq!(tier.tenants["t"].incarnation, 3);
    }
}
