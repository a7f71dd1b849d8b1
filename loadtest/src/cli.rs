//! The command-line options every system under load shares (`writ-loadtest writ|etcd|mcp`, and
//! the baselines built outside the workspace, e.g. `loadtest/baselines/etcd-grpc`): the run's
//! plan, fault injection, watched server processes and where the summary goes.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;

use crate::engine::{self, Fault, Plan, Workload};
use crate::mcp;
use crate::report::{self, Summary};

/// Items of a comma- or space-separated list (URLs lose a trailing `/`).
pub fn list(s: &str) -> Vec<String> {
    s.split([',', ' ']).filter(|x| !x.is_empty()).map(|x| x.trim_end_matches('/').to_string()).collect()
}

#[derive(Args, Clone)]
pub struct LoadArgs {
    /// Closed loop: concurrent clients.
    #[arg(long, default_value_t = 16)]
    pub concurrency: usize,
    /// Open loop: requests per second (latency from each request's intended start).
    #[arg(long)]
    pub rate: Option<f64>,
    /// Seconds to run.
    #[arg(long, default_value_t = 10.0)]
    pub duration: f64,
    /// Stop after this many requests.
    #[arg(long)]
    pub requests: Option<u64>,
    /// Open loop: most requests in flight.
    #[arg(long, default_value_t = 4096)]
    pub max_in_flight: usize,
    /// Per-request timeout in seconds.
    #[arg(long, default_value_t = 30.0)]
    pub timeout: f64,
    /// Write the summary as JSON here.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Name of this run in the summary.
    #[arg(long, default_value = "run")]
    pub label: String,
    /// Run `--kill-cmd` this many seconds into the run and report the recovery (P3).
    #[arg(long, requires = "kill_cmd")]
    pub kill_after: Option<f64>,
    /// Shell command for `--kill-after` (e.g. `kill -9 <leader pid>`).
    #[arg(long)]
    pub kill_cmd: Option<String>,
    /// Server processes whose CPU time and memory to report (comma or space separated).
    #[arg(long, default_value = "")]
    pub watch_pids: String,
    /// No progress line.
    #[arg(long)]
    pub quiet: bool,
}

impl LoadArgs {
    pub fn plan(&self) -> Plan {
        Plan {
            concurrency: self.concurrency,
            rate: self.rate,
            duration: Duration::from_secs_f64(self.duration),
            requests: self.requests,
            max_in_flight: self.max_in_flight,
            progress: !self.quiet,
        }
    }

    pub fn http(&self, tls: Option<&writ_client::ClientTls>) -> reqwest::Client {
        mcp::http_client(Duration::from_secs_f64(self.timeout), self.concurrency.max(64), tls)
    }

    pub fn fault(&self) -> Option<Fault> {
        Some(Fault { after: Duration::from_secs_f64(self.kill_after?), command: self.kill_cmd.clone()? })
    }

    pub fn pids(&self) -> Result<Vec<u32>, String> {
        list(&self.watch_pids).iter().map(|p| p.parse().map_err(|_| format!("'{p}' is not a process id"))).collect()
    }

    /// Runs the load and returns its summary (servers' usage included).
    pub async fn measure<W: Workload>(&self, system: &str, w: Arc<W>) -> Result<Summary, String> {
        self.measure_with(system, w, &[]).await
    }

    /// [`LoadArgs::measure`], counting `also` (processes the run started) with the servers.
    pub async fn measure_with<W: Workload>(&self, system: &str, w: Arc<W>, also: &[u32]) -> Result<Summary, String> {
        let mut pids = self.pids()?;
        pids.extend_from_slice(also);
        let before = report::snapshot(&pids);
        let plan = self.plan();
        let rec = engine::run(&plan, w, self.fault()).await;
        let mut s = Summary::new(self.label.clone(), system, &plan, &rec);
        s.servers = report::servers(&pids, &before, s.requests);
        Ok(s)
    }

    pub fn finish(&self, s: &Summary) -> Result<ExitCode, String> {
        print!("{}", s.table());
        if let Some(path) = &self.json {
            let text = serde_json::to_string_pretty(s).map_err(|e| e.to_string())?;
            std::fs::write(path, text + "\n").map_err(|e| format!("{}: {e}", path.display()))?;
        }
        if s.verify.as_ref().is_some_and(|v| !v.passed()) {
            eprintln!("verify FAILED");
            return Ok(ExitCode::from(1));
        }
        if s.ok == 0 {
            eprintln!("no request succeeded");
            return Ok(ExitCode::from(3));
        }
        Ok(ExitCode::SUCCESS)
    }
}
