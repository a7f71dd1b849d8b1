//! A node whose store turns out to be corrupt stops serving (SPEC L7): it exits with
//! `EXIT_FATAL` and the cause in its log, instead of answering from garbage.
//!
//! The damage is done at rest, to a stored event that the newest snapshot covers (so the
//! restart neither re-applies nor rewrites it), and found at run time, when a watch replays
//! history from revision 1.

use std::time::Duration;

use serde_json::json;
use writ_tests::eventually;
use writ_tests::procs::Cluster;

/// Flips one payload byte of the event stored at `revision` (the checksum then disagrees).
fn damage_event(db_dir: &std::path::Path, revision: u64) {
    let names = rocksdb::DB::list_cf(&rocksdb::Options::default(), db_dir).expect("column families");
    let db = rocksdb::DB::open_cf(&rocksdb::Options::default(), db_dir, &names).expect("open the stopped node's store");
    let events = db.cf_handle("events").expect("events column family");
    let key = revision.to_be_bytes();
    let mut value = db.get_cf(events, key).expect("read").expect("the event is stored");
    let last = value.len() - 1;
    value[last] ^= 0x5a;
    db.put_cf(events, key, value).expect("write the damaged event");
    db.flush_cf(events).expect("flush");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupt_record_found_at_run_time_stops_the_node() {
    let mut cluster = Cluster::start(1).await;
    let url = cluster.all_urls()[0].clone();
    for name in ["acme", "globex", "initech"] {
        assert_eq!(cluster.admin.create_tenant(&url, name).await, Ok(true));
    }
    // Nothing is left to apply after the restart (an apply would find the damage first).
    let newest = u64::from(writ_api::ledger::LEDGER_VERSION);
    eventually("the newest ledger version in force", Duration::from_secs(30), || async {
        let status = cluster.admin.get(&url, "/client/status").await.ok()?;
        (status["ledger_version_in_force"].as_u64() == Some(newest)).then_some(())
    })
    .await;
    cluster.admin.post_ok(&url, "/v1/cluster/snapshot", json!({})).await;
    let node = cluster.node_mut(1);
    node.kill();
    damage_event(&node.dir.join("data/db"), 2);
    node.start(false);
    let http = writ_tests::pki::http(Some((writ_api::role::Role::Node, "2")));
    eventually("the restarted node to serve", Duration::from_secs(30), || async {
        http.get(format!("{url}/readyz")).send().await.ok()?.status().is_success().then_some(())
    })
    .await;
    // Replaying history reads the damaged event (the answer does not matter: the node's does).
    if let Ok(watch) = http.get(format!("{url}/client/watch?from=1")).send().await {
        let _ = watch.bytes().await;
    }
    let node = cluster.node_mut(1);
    let status = eventually("the node to stop on the corrupt record", Duration::from_secs(30), || {
        let status = node.exit_status();
        async move { status }
    })
    .await;
    assert_eq!(status.code(), Some(i32::from(writ_node::EXIT_FATAL)), "{}", node.log());
    assert!(node.log().contains("storage is corrupt"), "{}", node.log());
}
