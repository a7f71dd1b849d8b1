//! What a node's Raft log holds, by command kind: an offline reading of a stopped node's data
//! directory (`writ node log-stats`), to see where the log's bytes per operation go.
//!
//! A batch's commands count as commands of their own. A command counts under the kind of the
//! plain command inside its wrappers (`Command::innermost`); what the wrappers add (the verified
//! grant, the request decision) counts apart, as its wrapper bytes.
//!
//! Beside the log, it reads what apply derived from it ([`AppliedBytes`]): the stored rows of
//! each column family apply writes, events by kind and audit records by what they record.

use std::collections::BTreeMap;
use std::io;
use std::path::Path;

use openraft::alias::EntryOf;
use openraft::EntryPayload;
use rocksdb::IteratorMode;
use writ_api::ledger::{Command, EventEnvelope};

use crate::codec::checked_decode;
use crate::{TypeConfig, CF_AUDIT, CF_EVENTS, CF_LOGS};

/// Commands of one kind in the log.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct KindBytes {
    pub commands: u64,
    /// Encoded bytes of the plain commands.
    pub bytes: u64,
    /// Encoded bytes their wrappers added.
    pub wrapper_bytes: u64,
}

/// The log's entries and commands, by kind.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct LogBytes {
    pub entries: u64,
    /// Stored bytes of the entries (as the log column family holds them, before compression).
    pub bytes: u64,
    pub first_index: Option<u64>,
    pub last_index: Option<u64>,
    pub by_kind: BTreeMap<&'static str, KindBytes>,
}

impl LogBytes {
    /// Counts one entry that takes `stored` bytes in the log.
    pub fn add_entry(&mut self, entry: &EntryOf<TypeConfig>, stored: usize) {
        self.entries += 1;
        self.bytes += stored as u64;
        self.first_index.get_or_insert(entry.log_id.index);
        self.last_index = Some(entry.log_id.index);
        if let EntryPayload::Normal(request) = &entry.payload {
            self.add_command(&request.command);
        }
    }

    fn add_command(&mut self, command: &Command) {
        if let Command::Batch { commands } = command {
            commands.iter().for_each(|b| self.add_command(&b.command));
            return;
        }
        let inner = command.innermost();
        let (whole, plain) = (encoded_len(command), encoded_len(inner));
        let kind = self.by_kind.entry(inner.kind()).or_default();
        kind.commands += 1;
        kind.bytes += plain;
        kind.wrapper_bytes += whole - plain;
    }

    /// Operations submitted in the log's range (the per-operation figures' denominator).
    pub fn operations(&self) -> u64 {
        self.by_kind.get("submit_operation").map_or(0, |k| k.commands)
    }

    /// A table, largest kind first, with the totals and bytes per submitted operation.
    pub fn render(&self) -> String {
        let range = match (self.first_index, self.last_index) {
            (Some(a), Some(b)) => format!("entries {a}..={b}"),
            _ => "no entries".to_string(),
        };
        let mut out = format!("{range}: {} entries, {} bytes stored\n", self.entries, self.bytes);
        let ops = self.operations();
        if let Some(per) = self.bytes.checked_div(ops) {
            out += &format!("{ops} operations submitted: {per} bytes per operation\n");
        }
        out +=
            &format!("{:<32} {:>10} {:>14} {:>10} {:>14}\n", "kind", "commands", "bytes", "per cmd", "wrapper bytes");
        let mut kinds: Vec<_> = self.by_kind.iter().collect();
        kinds.sort_by_key(|(name, k)| (std::cmp::Reverse(k.bytes + k.wrapper_bytes), **name));
        for (name, k) in kinds {
            let per = (k.bytes + k.wrapper_bytes) / k.commands.max(1);
            out += &format!("{name:<32} {:>10} {:>14} {per:>10} {:>14}\n", k.commands, k.bytes, k.wrapper_bytes);
        }
        out
    }
}

/// Rows of one kind and their stored bytes (key and value).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Rows {
    pub rows: u64,
    pub bytes: u64,
}

impl Rows {
    fn add(&mut self, key: &[u8], value: &[u8]) {
        self.rows += 1;
        self.bytes += (key.len() + value.len()) as u64;
    }
}

/// What apply derived from the log and stored: each applied column family's rows, the events
/// by kind and the audit records by their `operation` (the event kind or rejected command).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct AppliedBytes {
    pub families: BTreeMap<&'static str, Rows>,
    pub events: BTreeMap<&'static str, Rows>,
    pub audit: BTreeMap<String, Rows>,
}

impl AppliedBytes {
    /// The families, then events and audit records by kind, largest first; per operation where
    /// `operations` is not zero.
    pub fn render(&self, operations: u64) -> String {
        let mut out = String::new();
        let sections: [(&str, Vec<(&str, Rows)>); 3] = [
            ("column family", self.families.iter().map(|(k, v)| (*k, *v)).collect()),
            ("event", self.events.iter().map(|(k, v)| (*k, *v)).collect()),
            ("audit record", self.audit.iter().map(|(k, v)| (k.as_str(), *v)).collect()),
        ];
        for (title, mut rows) in sections {
            rows.sort_by_key(|(name, r)| (std::cmp::Reverse(r.bytes), *name));
            out += &format!("{title:<32} {:>10} {:>14} {:>10} {:>14}\n", "rows", "bytes", "rows/op", "bytes/op");
            for (name, r) in rows {
                let (per_rows, per_bytes) = match operations {
                    0 => ("-".to_string(), "-".to_string()),
                    n => (format!("{:.2}", r.rows as f64 / n as f64), (r.bytes / n).to_string()),
                };
                out += &format!("{name:<32} {:>10} {:>14} {per_rows:>10} {per_bytes:>14}\n", r.rows, r.bytes);
            }
        }
        out
    }
}

fn encoded_len(command: &Command) -> u64 {
    writ_api::encode(command).map_or(0, |b| b.len() as u64)
}

/// Reads the log, and what apply derived from it, of the node whose data directory is `dir`.
/// The node must be stopped: RocksDB lets one process open its database.
pub fn read(dir: &Path) -> io::Result<(LogBytes, AppliedBytes)> {
    let path = dir.join("db");
    if !path.join("CURRENT").exists() {
        return Err(io::Error::new(io::ErrorKind::NotFound, format!("no node database under {}", path.display())));
    }
    let db = crate::open_db(&path).map_err(|e| io::Error::other(format!("{e} (is the node still running?)")))?;
    let cf = db.cf_handle(CF_LOGS).expect("column families are created at open");
    let mut stats = LogBytes::default();
    for item in db.iterator_cf(cf, IteratorMode::Start) {
        let (_, value) = item.map_err(io::Error::other)?;
        let entry: EntryOf<TypeConfig> = checked_decode(&value, "log entry")?;
        stats.add_entry(&entry, value.len());
    }
    Ok((stats, read_applied(&db)?))
}

fn read_applied(db: &rocksdb::DB) -> io::Result<AppliedBytes> {
    let mut applied = AppliedBytes::default();
    let mut events = crate::audit_rows::EventReader::new(db, None);
    for family in crate::state_machine::APPLIED_FAMILIES {
        let cf = db.cf_handle(family).expect("column families are created at open");
        let rows = applied.families.entry(family).or_default();
        for item in db.iterator_cf(cf, IteratorMode::Start) {
            let (key, value) = item.map_err(io::Error::other)?;
            rows.add(&key, &value);
            if family == CF_EVENTS {
                let envelope: EventEnvelope = checked_decode(&value, "event")?;
                applied.events.entry(envelope.event.kind()).or_default().add(&key, &value);
            } else if family == CF_AUDIT {
                let operation = match crate::audit_rows::record_of(&key, &value, |r| events.read(r))? {
                    Some(record) => record.operation,
                    None => "(its event left the log)".to_string(),
                };
                applied.audit.entry(operation).or_default().add(&key, &value);
            }
        }
    }
    Ok(applied)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use writ_api::ledger::{BatchedCommand, LedgerRequest};

    fn normal(index: u64, command: Command) -> EntryOf<TypeConfig> {
        let request = LedgerRequest { stamp_ms: 1, trace_id: "t".into(), command: Arc::new(command) };
        let mut e = openraft::testing::blank_ent::<TypeConfig>(1, 1, index);
        e.payload = EntryPayload::Normal(request);
        e
    }

    fn suspend(id: &str) -> Command {
        Command::SuspendTenant { tenant_id: id.into(), note: None }
    }

    #[test]
    fn batches_count_their_commands_and_wrappers_count_apart() {
        let wrapped = Command::ByOperator { session_id: "s".repeat(40), command: Box::new(suspend("a")) };
        let batch = Command::Batch {
            commands: vec![
                BatchedCommand { trace_id: "x".into(), command: suspend("b") },
                BatchedCommand { trace_id: "y".into(), command: wrapped.clone() },
            ],
        };
        let mut stats = LogBytes::default();
        stats.add_entry(&openraft::testing::blank_ent::<TypeConfig>(1, 1, 4), 10);
        stats.add_entry(&normal(5, batch), 500);
        stats.add_entry(&normal(6, Command::ResumeTenant { tenant_id: "a".into() }), 30);
        assert_eq!((stats.entries, stats.bytes, stats.first_index, stats.last_index), (3, 540, Some(4), Some(6)));
        let suspended = stats.by_kind[suspend("a").kind()];
        assert_eq!(suspended.commands, 2, "both of the batch's suspensions, one inside its wrapper");
        assert_eq!(suspended.bytes, 2 * encoded_len(&suspend("a")));
        assert_eq!(suspended.wrapper_bytes, encoded_len(&wrapped) - encoded_len(&suspend("a")));
        assert!(suspended.wrapper_bytes >= 40, "the operator's session id is the wrapper's");
        assert_eq!(stats.by_kind.len(), 2);
        assert_eq!(stats.operations(), 0);
        let table = stats.render();
        assert!(table.starts_with("entries 4..=6: 3 entries, 540 bytes stored\n"), "{table}");
        assert!(table.lines().nth(2).is_some_and(|l| l.starts_with(suspend("a").kind())), "largest first:\n{table}");
    }

    #[test]
    fn a_stopped_nodes_log_is_read_from_its_database() {
        let dir = tempfile::tempdir().unwrap();
        let stored = {
            let db = crate::open_db(&dir.path().join("db")).unwrap();
            let cf = db.cf_handle(CF_LOGS).unwrap();
            let mut stored = 0;
            for (i, c) in [suspend("a"), suspend("b")].into_iter().enumerate() {
                let bytes = crate::codec::checked_encode(&normal(i as u64 + 1, c)).unwrap();
                stored += bytes.len() as u64;
                db.put_cf(cf, (i as u64 + 1).to_be_bytes(), bytes).unwrap();
            }
            stored
        };
        let (stats, applied) = read(dir.path()).unwrap();
        assert_eq!(applied.families.len(), crate::state_machine::APPLIED_FAMILIES.len());
        assert!(applied.families.values().all(|f| *f == Rows::default()), "nothing applied");
        assert_eq!((stats.entries, stats.bytes, stats.last_index), (2, stored, Some(2)));
        assert_eq!(stats.by_kind[suspend("a").kind()].commands, 2);
    }

    #[test]
    fn applied_rows_count_by_family_event_kind_and_audit_operation() {
        let dir = tempfile::tempdir().unwrap();
        let (event_bytes, record_bytes) = {
            let db = crate::open_db(&dir.path().join("db")).unwrap();
            let event = writ_api::ledger::Event::TenantSuspendedV1 { tenant_id: "a".into(), note: None };
            let envelope =
                EventEnvelope { revision: 7, stream: "a".into(), seq: 1, at_ms: 1, trace_id: "t".into(), event };
            let encoded = crate::codec::checked_encode(&envelope).unwrap();
            db.put_cf(db.cf_handle(CF_EVENTS).unwrap(), 7u64.to_be_bytes(), &encoded).unwrap();
            let record = writ_api::audit::AuditRecord {
                seq: 1,
                at_ms: 1,
                revision: 7,
                trace_id: "t".into(),
                tenant_id: "a".into(),
                domain: "tenant".into(),
                operation: "tenant_suspended".into(),
                outcome: "applied".into(),
                reason_code: None,
                principal_id: None,
                token_id: None,
                parent_token_id: None,
                detail: "{}".into(),
                authority: None,
            };
            let key = writ_api::audit::record_key("a", 1);
            let stored = crate::codec::checked_bytes(&record.stored());
            db.put_cf(db.cf_handle(CF_AUDIT).unwrap(), &key, &stored).unwrap();
            (8 + encoded.len() as u64, (key.len() + stored.len()) as u64)
        };
        let (_, applied) = read(dir.path()).unwrap();
        assert_eq!(applied.families[CF_EVENTS], Rows { rows: 1, bytes: event_bytes });
        assert_eq!(applied.families[CF_AUDIT], Rows { rows: 1, bytes: record_bytes });
        assert_eq!(applied.events["tenant_suspended"], Rows { rows: 1, bytes: event_bytes });
        assert_eq!(applied.audit["tenant_suspended"], Rows { rows: 1, bytes: record_bytes });
        let table = applied.render(2);
        let line = table.lines().find(|l| l.starts_with("events ")).unwrap();
        assert!(line.ends_with(&format!(" 0.50 {:>14}", event_bytes / 2)), "{table}");
    }

    #[test]
    fn a_directory_without_a_node_database_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let err = read(dir.path()).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
        assert!(!dir.path().join("db").exists(), "reading creates nothing");
    }
}
