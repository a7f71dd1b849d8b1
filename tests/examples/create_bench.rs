//! Quick tenant-create throughput probe against a running cluster (not a test, not the load
//! tester): `cargo run --release -p writ-tests --example create_bench -- URL[,URL...] TOKEN COUNT CONCURRENCY`.
//! Prints creates/s and latency percentiles.

use std::time::Instant;

#[tokio::main]
async fn main() {
    // Nodes serve TLS from the cluster CA: WRIT_CA_FILE (as the cluster env file sets it).
    let ca =
        std::env::var_os("WRIT_CA_FILE").map(|p| writ_client::ClientTls::trusting(p.as_ref()).expect("WRIT_CA_FILE"));
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 5 {
        eprintln!("usage: create_bench URL[,URL...] TOKEN COUNT CONCURRENCY");
        std::process::exit(2);
    }
    let urls: Vec<String> = args[1].split(',').map(str::to_string).collect();
    let token = args[2].clone();
    let count: usize = args[3].parse().expect("COUNT");
    let concurrency: usize = args[4].parse().expect("CONCURRENCY");
    let run = format!("b{}", std::process::id());
    let next = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let clients: Vec<writ_client::AdminClient> =
        urls.iter().map(|u| writ_client::AdminClient::with_tls(u.clone(), token.clone(), ca.as_ref())).collect();
    let started = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..concurrency {
        let (clients, next, run) = (clients.clone(), next.clone(), run.clone());
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if i >= count {
                    return lat;
                }
                let client = &clients[(w + i) % clients.len()];
                let t = Instant::now();
                let request = writ_api::dto::CreateTenantRequest {
                    name: format!("{run}-{i}"),
                    display_name: None,
                    settings: None,
                };
                client.create_tenant(&request).await.expect("create");
                lat.push(t.elapsed().as_secs_f64() * 1000.0);
            }
        }));
    }
    let mut lat: Vec<f64> = Vec::new();
    for t in tasks {
        lat.extend(t.await.expect("worker"));
    }
    let secs = started.elapsed().as_secs_f64();
    lat.sort_by(f64::total_cmp);
    let pct = |p: f64| lat[((lat.len() as f64 * p) as usize).min(lat.len() - 1)];
    println!(
        "creates={count} concurrency={concurrency} nodes={} seconds={secs:.2} creates_per_s={:.0} p50_ms={:.2} p99_ms={:.2}",
        urls.len(),
        count as f64 / secs,
        pct(0.50),
        pct(0.99)
    );
}
