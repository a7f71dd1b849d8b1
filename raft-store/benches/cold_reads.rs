//! What the reads a report makes of the cold rows cost on a node's store: the evidence records
//! of an operation that has none yet (the count an upload is checked against) and the record
//! of a blob not stored yet, among 400,000 evidence records of other operations written in
//! 40 commits (so most are in tables on disk, as on a node under load).
//! Run with `cargo bench -p writ-raft-store --bench cold_reads`.

use std::sync::Arc;

use criterion::{criterion_group, criterion_main, Criterion};
use writ_api::cold::{ColdTier, Row};
use writ_raft_store::cold::RocksCold;

const T: &str = "tenant-1";

fn reads(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(RocksCold::open_alone(dir.path(), true).unwrap());
    let mut cold = ColdTier::default();
    cold.open(T, 1);
    cold.attach(store.clone());
    let record = vec![7u8; 120];
    for commit in 0..40u64 {
        for i in 0..10_000u64 {
            let (op, hash) = (format!("op-{:08}", commit * 10_000 + i), format!("{:064x}", i));
            cold.put(T, Row::Evidence(&op, &hash), commit + 1, None, Some(record.clone()));
        }
        store.commit(cold.take_writes()).unwrap();
    }
    let mut group = c.benchmark_group("cold reads of a report");
    group.bench_function("evidence of an operation without any", |b| {
        b.iter(|| assert!(cold.evidence_of(T, "op-new", 16).is_empty()))
    });
    group.bench_function("a blob's record not stored yet", |b| {
        b.iter(|| assert!(cold.get(T, Row::Evidence("op-new", &"0".repeat(64))).is_none()))
    });
    group.finish();
}

criterion_group!(benches, reads);
criterion_main!(benches);
