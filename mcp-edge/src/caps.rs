//! Caps on long-lived streams per caller on one edge replica (SPEC S4): a principal's
//! `subscriptions/listen` streams and an executor's dispatch streams. A permit is held for the
//! stream's life and given back when it ends.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// Most `subscriptions/listen` streams one principal may hold open on one edge replica.
pub const LISTEN_STREAMS_PER_PRINCIPAL: usize = 4;
/// Most dispatch streams one executor may hold open on one edge replica.
pub const DISPATCH_STREAMS_PER_EXECUTOR: usize = 2;

/// Open streams by caller key, each at most a cap.
#[derive(Clone, Default)]
pub struct StreamCaps(Arc<Mutex<BTreeMap<String, usize>>>);

/// One open stream of a caller; dropping it closes the slot.
pub struct StreamPermit {
    caps: StreamCaps,
    key: String,
}

impl StreamCaps {
    /// A slot for `key`, unless it already holds `max`.
    pub fn try_acquire(&self, key: String, max: usize) -> Option<StreamPermit> {
        let mut open = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let n = open.entry(key.clone()).or_default();
        if *n >= max {
            return None;
        }
        *n += 1;
        Some(StreamPermit { caps: self.clone(), key })
    }

    /// How many streams `key` holds open.
    pub fn open(&self, key: &str) -> usize {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).get(key).copied().unwrap_or(0)
    }
}

impl Drop for StreamPermit {
    fn drop(&mut self) {
        let mut open = self.caps.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = open.get_mut(&self.key) {
            *n -= 1;
            if *n == 0 {
                open.remove(&self.key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cap_holds_and_frees_with_its_permits() {
        let caps = StreamCaps::default();
        let a: Vec<_> = (0..2).map(|_| caps.try_acquire("p".into(), 2).expect("under the cap")).collect();
        assert!(caps.try_acquire("p".into(), 2).is_none(), "the cap holds");
        assert!(caps.try_acquire("q".into(), 2).is_some(), "per key");
        drop(a);
        let again: Vec<_> = (0..2).map(|_| caps.try_acquire("p".into(), 2)).collect();
        assert!(again.iter().all(Option::is_some), "both slots are free again");
        assert!(caps.0.lock().unwrap().get("p") == Some(&2));
    }
}
