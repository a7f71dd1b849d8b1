//! Audit export rate probe (issue 3 "measure"): fills one tenant's audit trail with N records
//! through a running node's admin API (rejected suspends are records too), then times
//! `GET /v1/tenants/{t}/audit/export` end to end, counting NDJSON lines.
//! `cargo run -p writ-tests --example audit_export_bench -- URL TOKEN COUNT CONCURRENCY`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

#[tokio::main]
async fn main() {
    // Nodes serve TLS from the cluster CA: WRIT_CA_FILE (as the cluster env file sets it).
    let ca =
        std::env::var_os("WRIT_CA_FILE").map(|p| writ_client::ClientTls::trusting(p.as_ref()).expect("WRIT_CA_FILE"));
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 5 {
        eprintln!("usage: audit_export_bench URL TOKEN COUNT CONCURRENCY");
        std::process::exit(2);
    }
    let (url, token) = (args[1].clone(), args[2].clone());
    let count: usize = args[3].parse().expect("COUNT");
    let concurrency: usize = args[4].parse().expect("CONCURRENCY");
    let admin = writ_client::AdminClient::with_tls(url.clone(), token.clone(), ca.as_ref());
    let name = format!("audit-bench-{}", std::process::id());
    let request = writ_api::dto::CreateTenantRequest { name, display_name: None, settings: None };
    let tenant = admin.create_tenant(&request).await.expect("create tenant").id;
    let settings: writ_api::settings::TenantSettingsPatch =
        serde_json::from_value(serde_json::json!({"audit_max_events": count as u64 + 100})).expect("patch");
    admin.set_tenant_settings(&tenant, &settings).await.expect("settings");
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..concurrency {
        let (admin, tenant, next) = (admin.clone(), tenant.clone(), next.clone());
        tasks.push(tokio::spawn(async move {
            while next.fetch_add(1, Ordering::Relaxed) < count {
                // Suspend of an already suspended tenant is rejected — and audited.
                let _ = admin.suspend_tenant(&tenant, &Default::default()).await;
            }
        }));
    }
    for t in tasks {
        t.await.expect("writer");
    }
    let fill = started.elapsed();
    eprintln!(
        "wrote {count} audit records in {:.1} s ({:.0}/s)",
        fill.as_secs_f64(),
        count as f64 / fill.as_secs_f64()
    );
    let started = Instant::now();
    let mut resp = admin.audit_export(&tenant, &Default::default(), None).await.expect("export");
    let (mut lines, mut bytes) = (0usize, 0usize);
    while let Some(chunk) = resp.chunk().await.expect("chunk") {
        bytes += chunk.len();
        lines += chunk.iter().filter(|b| **b == b'\n').count();
    }
    let took = started.elapsed().as_secs_f64();
    println!(
        "exported {lines} records ({:.1} MiB) in {took:.2} s: {:.0} records/s, {:.1} MiB/s",
        bytes as f64 / 1048576.0,
        lines as f64 / took,
        bytes as f64 / 1048576.0 / took
    );
}
