//! Disk pressure (SPEC L9, as etcd's `NOSPACE` alarm): a node watches the space its data
//! directory may still use — the filesystem's free bytes against `[raft] min_free_disk_bytes`,
//! and the directory's own size against `[raft] data_quota_bytes` when set — every
//! [`STORAGE_CHECK`]. While either is crossed its **storage alarm** is on: as leader it refuses
//! new writes with `STORAGE_FULL` before proposing them (reads go on; so do the commands that
//! free space: retention, expiries, a tenant's purge), it says so in its status
//! (`NodeStatus::storage_alarm`, so a leader refuses while any member is short too) and in
//! `writ_storage_alarm`. The alarm clears by itself once space returns. Without it a full disk
//! stops the node loudly at its next write (L7), which the alarm is there to avoid.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use writ_api::ledger::Command;
use writ_api::{ReasonCode, Rejection};

/// How often a node measures its data directory.
pub const STORAGE_CHECK: Duration = Duration::from_secs(1);
/// The free space a data directory's filesystem must keep by default (`min_free_disk_bytes`).
pub const MIN_FREE_DISK_BYTES_DEFAULT: u64 = 64 << 20;

/// What a node may use, and what it last measured.
#[derive(Debug)]
pub struct StorageWatch {
    dir: PathBuf,
    min_free_bytes: u64,
    quota_bytes: Option<u64>,
    alarm: AtomicBool,
    free_bytes: AtomicU64,
    used_bytes: AtomicU64,
}

impl StorageWatch {
    /// Measures `dir` once (so the alarm is right from the start).
    pub fn new(dir: &Path, min_free_bytes: u64, quota_bytes: Option<u64>) -> Arc<StorageWatch> {
        let w = Arc::new(StorageWatch {
            dir: dir.to_path_buf(),
            min_free_bytes,
            quota_bytes,
            alarm: AtomicBool::new(false),
            free_bytes: AtomicU64::new(u64::MAX),
            used_bytes: AtomicU64::new(0),
        });
        w.check();
        w
    }

    /// Whether the alarm is on.
    pub fn alarm(&self) -> bool {
        self.alarm.load(Ordering::Relaxed)
    }

    /// Measures once: the filesystem's free bytes and the directory's size; sets the alarm.
    pub fn check(&self) {
        let free = free_bytes(&self.dir).unwrap_or_else(|e| {
            tracing::warn!(dir = %self.dir.display(), error = %e, "cannot read the data directory's free space");
            u64::MAX
        });
        let used = dir_bytes(&self.dir);
        self.free_bytes.store(free, Ordering::Relaxed);
        self.used_bytes.store(used, Ordering::Relaxed);
        let short = free < self.min_free_bytes || self.quota_bytes.is_some_and(|q| used >= q);
        let was = self.alarm.swap(short, Ordering::Relaxed);
        if short != was {
            if short {
                tracing::error!(free, used, min_free = self.min_free_bytes, quota = ?self.quota_bytes,
                    "storage alarm: the data directory is short of space; writes are refused until it is freed");
            } else {
                tracing::warn!(free, used, "storage alarm cleared: space returned; writes are accepted again");
            }
        }
        metrics::gauge!("writ_storage_alarm").set(if short { 1.0 } else { 0.0 });
        metrics::gauge!("writ_storage_free_bytes").set(free as f64);
        metrics::gauge!("writ_storage_used_bytes").set(used as f64);
    }

    /// Checks every [`STORAGE_CHECK`] while `alive` says so.
    pub fn start(self: &Arc<Self>, alive: impl Fn() -> bool + Send + 'static) {
        let w = self.clone();
        tokio::spawn(async move {
            while alive() {
                tokio::time::sleep(STORAGE_CHECK).await;
                let w = w.clone();
                // Walking the directory is blocking IO.
                let _ = tokio::task::spawn_blocking(move || w.check()).await;
            }
        });
    }

    /// Why `command` is refused while the alarm is on (of this node, or of `short` members).
    pub fn refusal(&self, command: &Command, short: &[u64]) -> Option<Rejection> {
        if frees_space(command) || (!self.alarm() && short.is_empty()) {
            return None;
        }
        metrics::counter!("writ_storage_refusals_total").increment(1);
        let who = if self.alarm() {
            format!(
                "this node's data directory ({} bytes free, {} used; it keeps {} free{})",
                self.free_bytes.load(Ordering::Relaxed),
                self.used_bytes.load(Ordering::Relaxed),
                self.min_free_bytes,
                self.quota_bytes.map_or(String::new(), |q| format!(", uses at most {q}"))
            )
        } else {
            format!("member(s) {short:?}")
        };
        Some(Rejection::new(
            ReasonCode::STORAGE_FULL,
            format!(
                "{} is refused: {who} short of space; reads go on, and writes resume once space is freed",
                command.kind()
            ),
        ))
    }
}

/// Commands that free space (or only move time on), taken even under the alarm.
fn frees_space(command: &Command) -> bool {
    matches!(
        command,
        Command::ApplyRetention { .. }
            | Command::ApplyRetentionV2 { .. }
            | Command::PurgeTenant { .. }
            | Command::ExpireDue { .. }
    )
}

fn free_bytes(dir: &Path) -> std::io::Result<u64> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes()).map_err(std::io::Error::other)?;
    let s = rustix::fs::statvfs(path.as_c_str()).map_err(|e| std::io::Error::from_raw_os_error(e.raw_os_error()))?;
    Ok(s.f_bavail.saturating_mul(s.f_frsize))
}

/// The bytes of the files under `dir` (bounded by what a data directory holds; unreadable
/// entries count 0).
fn dir_bytes(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
    entries
        .flatten()
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => dir_bytes(&e.path()),
            Ok(_) => e.metadata().map_or(0, |m| m.len()),
            Err(_) => 0,
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_alarm_follows_the_quota_and_spares_what_frees_space() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a"), vec![0u8; 4096]).unwrap();
        let w = StorageWatch::new(dir.path(), 0, Some(8192));
        assert!(!w.alarm());
        let create = Command::CreateTenant { tenant_id: "t".into(), name: "n".into(), display_name: None };
        assert!(w.refusal(&create, &[]).is_none());
        let refused = w.refusal(&create, &[3]).expect("a member is short");
        assert!(refused.message.contains("[3]"), "{}", refused.message);
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::fs::write(dir.path().join("sub/b"), vec![0u8; 4096]).unwrap();
        w.check();
        assert!(w.alarm(), "8192 bytes used of 8192");
        let refused = w.refusal(&create, &[]).expect("refused");
        assert_eq!(refused.reason, ReasonCode::STORAGE_FULL);
        assert!(w.refusal(&Command::ApplyRetention { tenant_id: "t".into() }, &[]).is_none());
        std::fs::remove_file(dir.path().join("sub/b")).unwrap();
        w.check();
        assert!(!w.alarm(), "space returned");
    }
}
