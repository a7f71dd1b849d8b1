//! What one retention look costs as retention retires a tenant's rows: the scan for the oldest
//! due rows of one kind (what `ApplyRetention` decides on and the reaper asks before each entry)
//! with 0, 100,000 and 400,000 rows already retired before them, whose versions stay until a
//! snapshot lets them go. Without floors the scan steps over every one of them; with floors it
//! starts where the last look found the first live row, so a look costs the same however much
//! was retired. Run with `cargo bench -p writ-raft-store --bench retention`.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use writ_api::cold::{tenant_prefix, ColdWrites, PendingRow};
use writ_raft_store::cold::RocksCold;

/// Rows still due after the retired ones: more than the looks measured take.
const LIVE: u64 = 20_000;
/// Rows one look reads (`writ_api::retention::RETIRED_PER_ENTRY`).
const LOOK: usize = writ_api::retention::RETIRED_PER_ENTRY;

fn kind() -> Vec<u8> {
    [&tenant_prefix("tenant-1", 1)[..], b"f"].concat()
}

/// The time row of operation `i`: finished at `i` ms.
fn key(i: u64) -> Vec<u8> {
    let id = format!("op-{i:08}");
    let mut key = kind();
    key.extend_from_slice(&i.to_be_bytes());
    key.extend_from_slice(&u16::try_from(id.len()).unwrap().to_be_bytes());
    key.extend_from_slice(id.as_bytes());
    key
}

fn write(store: &RocksCold, rows: impl Iterator<Item = (Vec<u8>, PendingRow)>) {
    let mut rows = rows.peekable();
    while rows.peek().is_some() {
        let batch = rows.by_ref().take(10_000).collect();
        store.commit(ColdWrites { rows: batch, dropped: Vec::new() }).unwrap();
    }
}

/// A store whose first `retired` time rows were written at revision 1 and deleted at 2, then
/// `LIVE` rows still there.
fn store(dir: &std::path::Path, retired: u64, floors: bool) -> RocksCold {
    let store = RocksCold::open_alone(dir, floors).unwrap();
    let put = PendingRow { revision: 1, value: Some(Vec::new()), replaces: false };
    write(&store, (0..retired + LIVE).map(|i| (key(i), put.clone())));
    let delete = PendingRow { revision: 2, value: None, replaces: true };
    write(&store, (0..retired).map(|i| (key(i), delete.clone())));
    store
}

fn look(c: &mut Criterion) {
    let mut group = c.benchmark_group("retention_look");
    group.sample_size(10);
    for retired in [0u64, 100_000, 400_000] {
        for floors in [false, true] {
            let dir = tempfile::tempdir().unwrap();
            let store = store(dir.path(), retired, floors);
            let name = if floors { "with_floors" } else { "without_floors" };
            let kind = kind();
            group.bench_with_input(BenchmarkId::new(name, retired), &retired, |b, _| {
                b.iter(|| {
                    use writ_api::cold::ColdStore;
                    let rows = store.scan(&kind, None, 2, LOOK);
                    assert_eq!(rows.len(), LOOK);
                    rows
                })
            });
        }
    }
    group.finish();
}

criterion_group!(benches, look);
criterion_main!(benches);
