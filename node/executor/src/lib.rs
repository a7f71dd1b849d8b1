//! The reference site executor (SPEC X1, X2): `writ executor enroll` and `writ executor run`.
//!
//! Enrollment generates the key locally and sends only a CSR with the one-time token to an
//! edge; the private key never leaves the directory it is written to (0600).
//!
//! Running, the executor holds a dispatch stream to one edge at a time (any edge serves it; it
//! rotates through the configured URLs when a stream ends) and, for each dispatch, checks the
//! deadline (on the edge's clock), the fencing token (never lower than one it has seen for the
//! device) and the handler's local-state preconditions **before** anything happens. A stale or
//! unmet dispatch is refused. Otherwise it asks the ledger to start the attempt (the one
//! attempt: if the ledger says no, nothing happens), runs the handler while renewing the attempt
//! lease, and reports the outcome with evidence (a content hash and an `evidence_return_ref`).
//! An outcome it cannot know (the command handler crashed or timed out) is not reported: the
//! lease runs out and the ledger marks the operation `unknown_effect` for reconciliation.
//! A cancellation asked for during the attempt reaches the executor on its lease renewals: the
//! simulated device stops before its effect and reports no effect (the operation ends
//! `cancelled`); the command handler runs to its end (a real site decides what it can abort).
//!
//! Its certificate is renewed through an edge at about two thirds of its lifetime (or by
//! `writ executor renew`): a new key is generated here, kept as `<key>.renewing` until the new
//! certificate is written (so a crash in between is finished or undone at the next start), and
//! its CSR is signed for with the current key. After a renewal the executor reconnects with the
//! new certificate; calls in flight finish with the old one, which stays valid until it expires.

pub mod camera;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::Write;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::{Args, Subcommand};
use futures::StreamExt;
use serde::Deserialize;
use sha2::{Digest, Sha256};
use writ_api::dto::{EnrollRequest, ErrorBody};
use writ_api::executor::{
    AttemptCall, AttemptRequest, AttemptVerb, Dispatch, DispatchFrame, EvidenceUpload, ExecutorEnrollment,
    OperationStatus, RefuseRequest, ReportRequest, CALLS_PATH, CALL_PAYLOAD_BYTES_MAX, DISPATCH_PATH, ENROLL_PATH,
    HEARTBEAT_MS, OPERATIONS_PATH,
};
use writ_api::operation::{AttemptOutcome, EvidenceV1};
use writ_api::ReasonCode;
use writ_client::CallError;

/// How a renewal that reached no edge says so (as opposed to an answer that refused).
const UNREACHABLE: &str = "edge unreachable";
/// How often a report is tried (about a minute with the backoff).
const REPORT_TRIES: u32 = 40;
/// How often a start whose outcome was uncertain is tried again.
const START_TRIES: usize = 12;
/// How often the status of an uncertainly started operation is asked (every 0.5 s).
const STATUS_TRIES: usize = 40;

/// How an attempt's start went.
enum Started {
    /// The ledger recorded it: attempt now.
    Now,
    /// It landed, but its answer came only after the attempt lease had run out (the ledger was
    /// electing a leader): the operation is `unknown_effect` and nothing was attempted.
    TooLate,
}

/// `writ executor …`.
#[derive(Debug, Args)]
pub struct ExecutorArgs {
    #[command(subcommand)]
    pub cmd: ExecutorCmd,
}

#[derive(Debug, Subcommand)]
pub enum ExecutorCmd {
    /// Enroll with a one-time token: generate a key here, send a CSR, write the certificate and
    /// an `executor.toml` into DIR.
    Enroll {
        /// The edge's URL (its MCP URL or origin).
        #[arg(long)]
        edge: String,
        /// The enrollment token from `writ admin executor enroll-token`.
        #[arg(long, env = "WRIT_ENROLLMENT_TOKEN")]
        token: String,
        /// Where to write the key, certificates and configuration.
        #[arg(long)]
        out: PathBuf,
        /// The CA an HTTPS edge's certificate chains to (the cluster CA); default: the system's.
        #[arg(long, env = "WRIT_CA_FILE")]
        ca: Option<PathBuf>,
    },
    /// Serve dispatches with the configured handler until interrupted (renewing the
    /// certificate at about ⅔ of its lifetime).
    Run {
        #[arg(long)]
        config: PathBuf,
    },
    /// Renew the certificate now: a new key, a new certificate through an edge.
    Renew {
        #[arg(long)]
        config: PathBuf,
    },
}

/// What an executor does with an attempt.
#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum HandlerConfig {
    /// A simulated device for tests and demos.
    Simulated {
        #[serde(default)]
        latency_ms: u64,
        #[serde(default)]
        failure: FailureMode,
        /// Each attempt appends the operation id here (the device's attempt counter).
        attempts_file: Option<PathBuf>,
        /// The device's local state, checked against an operation's preconditions.
        #[serde(default)]
        state: BTreeMap<String, String>,
        /// A camera over the device: each effect also uploads a PNG frame of it as evidence
        /// (`crate::camera`).
        #[serde(default)]
        camera: bool,
    },
    /// The MCP conformance fixtures' task tools (the tenant `writ dev --conformance-fixtures`
    /// provisions): `slow_compute` sleeps `seconds` (cancellable), `failing_job` reports a tool
    /// error after a second, `protocol_error_job` refuses the dispatch (its handler "crashed"
    /// before running), `confirm_delete`, `multi_input` and `test_tool_with_task` answer with
    /// what their inputs were.
    ConformanceFixtures,
    /// An external command: the dispatch as JSON on stdin (`"read": true` for a catalog `read`,
    /// which must effect nothing); exit 0 = effect, or the reading (stdout is the evidence),
    /// exit 3 = no effect; anything else (or a timeout) is an unknown outcome and
    /// is not reported. Files it leaves in `$WRIT_EVIDENCE_DIR` (camera frames, logs) are
    /// uploaded as evidence of the attempt before the report.
    Command {
        program: String,
        #[serde(default)]
        args: Vec<String>,
        #[serde(default = "default_command_timeout")]
        timeout_s: u64,
    },
}

fn default_command_timeout() -> u64 {
    60
}

/// How the simulated device misbehaves.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureMode {
    #[default]
    None,
    /// The process dies right after the attempt started (the outcome is lost).
    CrashMidAttempt,
    /// The effect happens but the report never reaches the ledger.
    ReportLost,
    /// The attempt takes `latency_ms` + 3 leases (renewed while working).
    Slow,
    /// Every dispatch is refused: the local precondition is not met.
    RefusePrecondition,
}

/// `executor.toml`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExecutorConfig {
    /// Executor endpoint URLs (`https://…`), tried in turn.
    pub edges: Vec<String>,
    /// PEM certificate (chain) and key from enrollment; relative paths are relative to the file.
    pub cert: PathBuf,
    pub key: PathBuf,
    /// PEM CA of the edges' executor endpoints.
    pub edge_ca: PathBuf,
    /// Attempt lease asked of the ledger (renewed at a third of it while the handler works).
    #[serde(default = "default_lease_ms")]
    pub lease_ms: u64,
    /// A dispatch is refused when less than this is left before its deadline (an attempt
    /// needs time; starting one that cannot finish in time is a stale command).
    #[serde(default)]
    pub deadline_margin_ms: u64,
    /// Where `/healthz`, `/readyz` (a dispatch stream is open) and `/metrics` are served over
    /// plain HTTP, read-only, for the site's monitoring (port 0 picks one; the address is
    /// logged as `probes listening`). Off when absent.
    #[serde(default)]
    pub probe_listen: Option<std::net::SocketAddr>,
    /// Export spans of attempts to this OTLP/HTTP collector (base URL); the standard
    /// `OTEL_EXPORTER_OTLP_*` variables work too.
    #[serde(default)]
    pub otlp_endpoint: Option<String>,
    /// Store each attempt's output in the ledger's evidence store with its report (its
    /// `evidence_return_ref` is then `writ://operations/{id}/evidence/{hash}`, which agents
    /// read with `ops:read`); `false`: only its hash and a summary travel, and the ref names
    /// this executor. Default true.
    #[serde(default = "default_true")]
    pub upload_evidence: bool,
    /// Dispatches handled at once, at most (1 to [`START_JOURNAL_QUEUE`]; default 256). A
    /// dispatch beyond them is left untaken and the edge offers it again, so what a ledger that
    /// falls behind has not had started waits in the ledger, not in this process's memory.
    #[serde(default = "default_attempts_max")]
    pub attempts_max: usize,
    pub handler: HandlerConfig,
}

fn default_lease_ms() -> u64 {
    5_000
}

fn default_true() -> bool {
    true
}

fn default_attempts_max() -> usize {
    256
}

impl ExecutorConfig {
    pub fn load(path: &Path) -> Result<ExecutorConfig, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let mut cfg: ExecutorConfig = toml::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
        let base = path.parent().unwrap_or(Path::new("."));
        for p in [&mut cfg.cert, &mut cfg.key, &mut cfg.edge_ca] {
            if p.is_relative() {
                *p = base.join(&*p);
            }
        }
        if let HandlerConfig::Simulated { attempts_file: Some(f), .. } = &mut cfg.handler {
            if f.is_relative() {
                *f = base.join(&*f);
            }
        }
        if cfg.edges.is_empty() || cfg.edges.iter().any(|u| !u.starts_with("https://")) {
            return Err(format!("{}: edges: list at least one https:// executor endpoint", path.display()));
        }
        if !(100..=writ_api::operation::LEASE_MS_MAX).contains(&cfg.lease_ms) {
            return Err(format!("{}: lease_ms must be 100..={}", path.display(), writ_api::operation::LEASE_MS_MAX));
        }
        if !(1..=START_JOURNAL_QUEUE).contains(&cfg.attempts_max) {
            return Err(format!("{}: attempts_max must be 1..={START_JOURNAL_QUEUE}", path.display()));
        }
        cfg.otlp_endpoint = writ_telemetry::process::otlp_endpoint(cfg.otlp_endpoint.take())
            .map_err(|e| format!("{}: otlp_endpoint: {e}", path.display()))?;
        Ok(cfg)
    }
}

/// `writ executor …`; returns the process exit code. `run` stops when `shutdown` resolves.
pub async fn run_cli(args: ExecutorArgs, shutdown: impl std::future::Future<Output = ()>) -> u8 {
    let result = match args.cmd {
        ExecutorCmd::Enroll { edge, token, out, ca } => enroll(&edge, &token, &out, ca.as_deref()).await.map(|e| {
            println!(
                "Enrolled executor {} (tenant {}, site {}, devices {}).\nWrote {}/executor.toml; start it with:\n  writ executor run --config {}/executor.toml",
                e.enrolled.executor_id,
                e.enrolled.tenant_id,
                e.enrolled.site_id,
                e.enrolled.device_ids.join(", "),
                out.display(),
                out.display()
            );
        }),
        ExecutorCmd::Renew { config } => match ExecutorConfig::load(&config) {
            Ok(cfg) => match http_client(&cfg) {
                Ok(http) => renew(&cfg, &http).await.map(|r| {
                    println!(
                        "Renewed the certificate of executor {}: fingerprint {}, valid until {} (ms since the epoch).",
                        r.executor_id, r.fingerprint, r.not_after_ms
                    )
                }),
                Err(e) => Err(e),
            },
            Err(e) => Err(e),
        },
        ExecutorCmd::Run { config } => match ExecutorConfig::load(&config) {
            Ok(cfg) => {
                let instance = config.display().to_string();
                writ_telemetry::process::start_telemetry(cfg.otlp_endpoint.as_deref(), "executor", &instance);
                tokio::select! {
                    r = run(cfg) => r,
                    _ = shutdown => Ok(()),
                }
            }
            Err(e) => Err(e),
        },
    };
    match result {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("error: {e}");
            1
        }
    }
}

fn origin(url: &str) -> Result<String, String> {
    let u = reqwest::Url::parse(url).map_err(|e| format!("edge URL '{url}': {e}"))?;
    Ok(u.origin().ascii_serialization())
}

/// Where an executor enrolls: `https://`, or plain `http://` only to a literal loopback
/// address — the enrollment token travels with the request, and the answer names the CA the
/// executor will trust from then on.
fn enroll_origin(url: &str) -> Result<String, String> {
    let u = reqwest::Url::parse(url).map_err(|e| format!("edge URL '{url}': {e}"))?;
    let host = u.host_str().unwrap_or_default();
    let literal = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(host);
    let loopback = literal.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback());
    match u.scheme() {
        "https" => origin(url),
        "http" if loopback => origin(url),
        _ => Err(format!(
            "edge URL '{url}': enrollment goes over https:// (plain http only to a literal loopback address)"
        )),
    }
}

/// Enrolls: key generated here, CSR + token to the edge, files written into `out` — only when
/// the edge CA the answer names is one the token pins (`EnrollmentToken`): whoever answers
/// cannot make the executor trust another CA for its edges.
pub async fn enroll(edge: &str, token: &str, out: &Path, ca: Option<&Path>) -> Result<ExecutorEnrollment, String> {
    let parsed = writ_api::executor::EnrollmentToken::parse(token.trim())
        .ok_or("the enrollment token is malformed (expected wen2.<tenant>.<enrollment>.<secret>.<pins>)")?;
    if parsed.pins.is_empty() {
        tracing::warn!("the enrollment token pins no edge CA (made by an earlier build): trusting the answer's");
    }
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ED25519).map_err(|e| e.to_string())?;
    let csr = rcgen::CertificateParams::default()
        .serialize_request(&key)
        .and_then(|r| r.pem())
        .map_err(|e| format!("CSR: {e}"))?;
    let mut builder = reqwest::Client::builder().no_proxy().timeout(Duration::from_secs(30));
    if let Some(ca) = ca {
        builder = writ_client::ClientTls::trusting(ca)?.apply(builder);
    }
    let http = builder.build().map_err(|e| e.to_string())?;
    let url = format!("{}{ENROLL_PATH}", enroll_origin(edge)?);
    let r = http
        .post(&url)
        .json(&EnrollRequest { token: token.to_string(), csr })
        .send()
        .await
        .map_err(|e| format!("{url}: {e}"))?;
    if !r.status().is_success() {
        let status = r.status();
        let text = r.text().await.unwrap_or_default();
        return Err(match serde_json::from_str::<ErrorBody>(&text) {
            Ok(b) => format!("enrollment refused: {} ({}): {}", b.reason, status.as_u16(), b.message),
            Err(_) => format!("enrollment refused: HTTP {status}: {text}"),
        });
    }
    let e: ExecutorEnrollment = r.json().await.map_err(|e| format!("enrollment answer: {e}"))?;
    if !parsed.pins_ca(&e.edge_ca_certificate) {
        return Err(format!(
            "{url} answered with an edge CA the enrollment token does not pin: nothing written. The token is \
             used up: revoke executor {} and enroll with a new token over a path you trust",
            e.enrolled.executor_id
        ));
    }
    std::fs::create_dir_all(out).map_err(|e| format!("{}: {e}", out.display()))?;
    writ_client::files::replace(&out.join("executor.key"), &key.serialize_pem(), true)
        .map_err(|e| format!("executor.key: {e}"))?;
    let write = |name: &str, text: &str| std::fs::write(out.join(name), text).map_err(|e| format!("{name}: {e}"));
    write("executor.crt", &format!("{}{}", e.enrolled.certificate, e.enrolled.ca_certificate))?;
    write("edge-ca.crt", &e.edge_ca_certificate)?;
    let edges: Vec<String> = e.executor_urls.iter().map(|u| format!("{u:?}")).collect();
    write(
        "executor.toml",
        &format!(
            "# Written by `writ executor enroll`: executor {}, tenant {}, site {}.\n\
             edges = [{}]\ncert = \"executor.crt\"\nkey = \"executor.key\"\nedge_ca = \"edge-ca.crt\"\n\
             lease_ms = {}\n\n# The built-in simulated device; for a real site use the command handler:\n\
             # kind = \"command\", program = \"/path/to/handler\", args = [], timeout_s = 60\n\
             [handler]\nkind = \"simulated\"\nlatency_ms = 0\nattempts_file = \"attempts.log\"\ncamera = true\n",
            e.enrolled.executor_id,
            e.enrolled.tenant_id,
            e.enrolled.site_id,
            edges.join(", "),
            default_lease_ms()
        ),
    )?;
    Ok(e)
}

/// `<key>.renewing`: the key of a renewal in progress.
fn pending_key_path(cfg: &ExecutorConfig) -> PathBuf {
    let mut p = cfg.key.as_os_str().to_owned();
    p.push(".renewing");
    PathBuf::from(p)
}

/// The DER of the first certificate (the leaf) in the PEM file `path`.
fn leaf_der(path: &Path) -> Result<Vec<u8>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    writ_api::pem::first(&text, "CERTIFICATE").ok_or_else(|| format!("{}: no PEM certificate", path.display()))
}

/// `(not_before_ms, not_after_ms, public key bits)` of a DER certificate.
fn certificate_facts(der: &[u8]) -> Result<(u64, u64, Vec<u8>), String> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).map_err(|e| format!("certificate: {e}"))?;
    let ms = |t: x509_parser::time::ASN1Time| u64::try_from(t.timestamp()).unwrap_or(0).saturating_mul(1000);
    let v = cert.validity();
    Ok((ms(v.not_before), ms(v.not_after), cert.public_key().subject_public_key.data.to_vec()))
}

/// Finishes or undoes a renewal a crash interrupted: a pending key whose certificate was
/// written becomes the key; one whose certificate never came is dropped.
fn recover_renewal(cfg: &ExecutorConfig) -> Result<(), String> {
    let pending = pending_key_path(cfg);
    let Ok(text) = std::fs::read_to_string(&pending) else { return Ok(()) };
    let key = rcgen::KeyPair::from_pem(&text).map_err(|e| format!("{}: {e}", pending.display()))?;
    let (_, _, cert_key) = certificate_facts(&leaf_der(&cfg.cert)?)?;
    if cert_key == key.public_key_raw() {
        std::fs::rename(&pending, &cfg.key).map_err(|e| format!("{}: {e}", cfg.key.display()))?;
        tracing::info!("finished an interrupted certificate renewal");
    } else {
        let _ = std::fs::remove_file(&pending);
    }
    Ok(())
}

/// When the certificate in `cfg.cert` should be renewed: at two thirds of its lifetime
/// (counted from its issue, not from its back-dated `notBefore`).
fn renewal_due_ms(cfg: &ExecutorConfig) -> Result<u64, String> {
    let (not_before, not_after, _) = certificate_facts(&leaf_der(&cfg.cert)?)?;
    let issued = (not_before + writ_api::executor::CERT_BACKDATE_MS).min(not_after);
    Ok(issued + (not_after - issued) * 2 / 3)
}

/// Renews the certificate through the first edge that answers: a new key (kept as
/// `<key>.renewing` until the new certificate is on disk), a CSR for it and the current key's
/// signature over [`writ_api::executor::renewal_message`].
pub async fn renew(cfg: &ExecutorConfig, http: &reqwest::Client) -> Result<writ_api::dto::EnrollResponse, String> {
    use base64::Engine;
    use rcgen::SigningKey;
    recover_renewal(cfg)?;
    let current_der = leaf_der(&cfg.cert)?;
    let current_key = std::fs::read_to_string(&cfg.key)
        .map_err(|e| format!("{}: {e}", cfg.key.display()))
        .and_then(|t| rcgen::KeyPair::from_pem(&t).map_err(|e| format!("{}: {e}", cfg.key.display())))?;
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ED25519).map_err(|e| e.to_string())?;
    let csr = rcgen::CertificateParams::default().serialize_request(&key).map_err(|e| format!("CSR: {e}"))?;
    let issued_at_ms = writ_client::now_ms();
    let message = writ_api::executor::renewal_message(&writ_api::sha256_hex(&current_der), issued_at_ms, csr.der());
    let proof = current_key.sign(&message).map_err(|e| format!("signing the renewal: {e}"))?;
    let request = writ_api::executor::RenewRequest {
        csr: csr.pem().map_err(|e| format!("CSR: {e}"))?,
        issued_at_ms,
        proof: base64::engine::general_purpose::STANDARD.encode(proof),
    };
    let pending = pending_key_path(cfg);
    writ_client::files::replace(&pending, &key.serialize_pem(), true).map_err(|e| e.to_string())?;
    let mut last = String::from("no edge is configured");
    for edge in &cfg.edges {
        let url = format!("{edge}{}", writ_api::executor::RENEW_PATH);
        let r = match http.post(&url).json(&request).timeout(Duration::from_secs(30)).send().await {
            Ok(r) => r,
            Err(e) => {
                last = format!("{url}: {e}");
                continue;
            }
        };
        if !r.status().is_success() {
            let _ = std::fs::remove_file(&pending);
            let status = r.status();
            let text = r.text().await.unwrap_or_default();
            return Err(match serde_json::from_str::<ErrorBody>(&text) {
                Ok(b) => format!("renewal refused: {} ({}): {}", b.reason, status.as_u16(), b.message),
                Err(_) => format!("renewal refused: HTTP {status}: {text}"),
            });
        }
        let renewed: writ_api::dto::EnrollResponse = r.json().await.map_err(|e| format!("renewal answer: {e}"))?;
        let chain = format!("{}{}", renewed.certificate, renewed.ca_certificate);
        writ_client::files::replace(&cfg.cert, &chain, false).map_err(|e| e.to_string())?;
        recover_renewal(cfg)?;
        return Ok(renewed);
    }
    let _ = std::fs::remove_file(&pending);
    Err(format!("{UNREACHABLE}: {last}"))
}

/// The executor's client of its edges: it trusts the edges' CA bundle and presents its own
/// certificate, both followed on disk (`writ_client::ClientTls`).
fn http_client(cfg: &ExecutorConfig) -> Result<reqwest::Client, String> {
    let tls = writ_client::ClientTls::with_identity(&cfg.edge_ca, &cfg.cert, &cfg.key)?;
    tls.apply(reqwest::Client::builder().no_proxy().connect_timeout(Duration::from_secs(5)))
        .build()
        .map_err(|e| e.to_string())
}

/// An operation id as the executor remembers it: the first 16 bytes of its SHA-256. The
/// executor remembers a window of ids (every operation it took on within a deadline and a lease),
/// so each is kept in 16 bytes whatever the id's length, without a heap block of its own. Two
/// ids share a key with a chance of 2^-128 per pair.
type IdKey = [u8; 16];

fn id_key(id: &str) -> IdKey {
    let digest = Sha256::digest(id.as_bytes());
    let mut key = [0; 16];
    key.copy_from_slice(&digest[..16]);
    key
}

/// The executor's memory: what it has taken on and the highest fencing token per device.
#[derive(Default)]
struct Memory {
    /// Each operation taken on, until its deadline and the longest lease have passed (after
    /// that an offer of it could only be refused as stale): bounded by the dispatch rate over
    /// that time, not by every operation ever taken.
    taken: HashMap<IdKey, u64>,
    /// When `taken` was last swept of what may be forgotten (ms since the epoch).
    swept_at_ms: u64,
    fencing: HashMap<String, u64>,
}

/// How often `taken` is swept: it holds the operations that may still start, and at most this
/// much more, so it is full one deadline and lease after the executor starts.
const TAKEN_SWEEP_EVERY_MS: u64 = 60_000;

impl Memory {
    /// Takes `id` on until `forget_after_ms`; false when it is taken on already. Sweeps what
    /// may be forgotten once [`TAKEN_SWEEP_EVERY_MS`] has passed since the last sweep.
    fn take(&mut self, id: &str, forget_after_ms: u64, now_ms: u64) -> bool {
        if now_ms >= self.swept_at_ms.saturating_add(TAKEN_SWEEP_EVERY_MS) {
            self.taken.retain(|_, until| *until > now_ms);
            self.swept_at_ms = now_ms;
        }
        match self.taken.entry(id_key(id)) {
            std::collections::hash_map::Entry::Occupied(_) => false,
            std::collections::hash_map::Entry::Vacant(v) => {
                v.insert(forget_after_ms);
                true
            }
        }
    }

    /// Forgets that `id` was taken on: an offer of it is taken again.
    fn untake(&mut self, id: &str) {
        self.taken.remove(&id_key(id));
    }

    #[cfg(test)]
    fn is_taken(&self, id: &str) -> bool {
        self.taken.contains_key(&id_key(id))
    }
}

/// File name of the start journal, next to the executor's key.
pub const START_JOURNAL_FILE: &str = "starts.journal";
/// Appended lines after which a running executor rewrites its journal without what it may forget.
const START_JOURNAL_COMPACT_AFTER: usize = 10_000;

/// Starts waiting for the journal's writer at most (a bound on the queue, not a tuning: the
/// executor never has more dispatches in flight than this, the most `attempts_max` may be).
const START_JOURNAL_QUEUE: usize = 4096;

/// The operations this executor sent a start for, on disk (`starts.journal` next to its key):
/// one line `<operation id> <forget after, ms>`, appended and synced before the start is sent.
/// A restarted executor never starts what an earlier process may have started: after an
/// uncertain start the ledger's status ("attempting, attempt 1, this executor") cannot tell an
/// earlier process's start from its own, so retrying could act on the device twice. Such an
/// operation ends as an unknown effect, which an operator reconciles. An entry is forgotten
/// once the operation's deadline and the longest lease have passed (no start can land then).
///
/// One writer thread owns the file, off the async runtime: it takes every start queued while
/// it synced the last ones and makes them durable with one write and one sync (group commit),
/// so starts are not limited to one per sync. The journal's entries live on disk only: a
/// compaction streams the file through a filter, so the process holds none of them.
struct StartJournal {
    /// Started by an earlier process: never started again.
    earlier: HashSet<IdKey>,
    appends: tokio::sync::mpsc::Sender<Append>,
}

/// One start to record, and who waits for it to be durable.
struct Append {
    id: String,
    forget_after_ms: u64,
    now_ms: u64,
    durable: tokio::sync::oneshot::Sender<Result<(), String>>,
}

struct JournalFile {
    path: PathBuf,
    file: std::fs::File,
    /// Lines appended since the journal was last rewritten.
    appended: usize,
    /// Appended lines after which it is rewritten ([`START_JOURNAL_COMPACT_AFTER`]).
    compact_after: usize,
    /// Syncs of appended lines so far (each covers a whole batch).
    syncs: u64,
}

impl StartJournal {
    fn open(path: PathBuf, now_ms: u64) -> Result<StartJournal, String> {
        let (journal, file, queue) = Self::load(path, now_ms)?;
        std::thread::Builder::new()
            .name("start-journal".into())
            .spawn(move || file.serve(queue))
            .map_err(|e| format!("start journal writer: {e}"))?;
        Ok(journal)
    }

    /// Rewrites the journal without what may be forgotten, and returns what it still holds
    /// with the file and the queue its writer serves.
    fn load(
        path: PathBuf,
        now_ms: u64,
    ) -> Result<(StartJournal, JournalFile, tokio::sync::mpsc::Receiver<Append>), String> {
        let mut earlier = HashSet::new();
        let file = JournalFile::compact(&path, now_ms, |id| {
            earlier.insert(id_key(id));
        })?;
        let (appends, queue) = tokio::sync::mpsc::channel(START_JOURNAL_QUEUE);
        let journal = StartJournal { earlier, appends };
        Ok((
            journal,
            JournalFile { path, file, appended: 0, compact_after: START_JOURNAL_COMPACT_AFTER, syncs: 0 },
            queue,
        ))
    }

    fn started_before(&self, id: &str) -> bool {
        self.earlier.contains(&id_key(id))
    }

    /// Records, durably, that a start of `id` is about to be sent.
    async fn record(&self, id: &str, forget_after_ms: u64, now_ms: u64) -> Result<(), String> {
        let (durable, synced) = tokio::sync::oneshot::channel();
        let append = Append { id: id.to_string(), forget_after_ms, now_ms, durable };
        const STOPPED: &str = "the start journal's writer stopped";
        self.appends.send(append).await.map_err(|_| STOPPED.to_string())?;
        synced.await.map_err(|_| STOPPED.to_string())?
    }
}

impl JournalFile {
    /// Replaces the journal with its entries that may still start after `now_ms` (read line by
    /// line, each id passed to `kept`), and opens it for appending. A missing journal is empty.
    fn compact(path: &Path, now_ms: u64, mut kept: impl FnMut(&str)) -> Result<std::fs::File, String> {
        use std::io::BufRead;
        let at = |e: std::io::Error| format!("{}: {e}", path.display());
        let old = match std::fs::File::open(path) {
            Ok(f) => Some(std::io::BufReader::new(f)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(at(e)),
        };
        writ_client::files::replace_with(path, true, |out| {
            for line in old.into_iter().flat_map(|r| r.lines()) {
                let line = line?;
                let Some((id, until)) = line.split_once(' ') else { continue };
                if until.parse::<u64>().is_ok_and(|until| until > now_ms) {
                    kept(id);
                    writeln!(out, "{line}")?;
                }
            }
            Ok(())
        })
        .map_err(at)?;
        std::fs::OpenOptions::new().append(true).open(path).map_err(at)
    }

    /// The writer: each batch is what was queued while the previous one synced. Returns (with
    /// the file) once every sender is gone.
    fn serve(mut self, mut queue: tokio::sync::mpsc::Receiver<Append>) -> JournalFile {
        while let Some(first) = queue.blocking_recv() {
            let mut batch = vec![first];
            while let Ok(more) = queue.try_recv() {
                batch.push(more);
            }
            let written = self.append(&batch);
            for a in batch {
                let _ = a.durable.send(written.clone());
            }
        }
        self
    }

    /// Appends a batch with one write and one sync, then rewrites the journal without what may
    /// be forgotten once enough lines were appended.
    fn append(&mut self, batch: &[Append]) -> Result<(), String> {
        let lines: String = batch.iter().map(|a| format!("{} {}\n", a.id, a.forget_after_ms)).collect();
        self.syncs += 1;
        let written = self.file.write_all(lines.as_bytes()).and_then(|_| self.file.sync_data());
        written.map_err(|e| format!("{}: {e}", self.path.display()))?;
        self.appended += batch.len();
        if self.appended >= self.compact_after {
            let now_ms = batch.iter().map(|a| a.now_ms).max().unwrap_or(0);
            self.file = Self::compact(&self.path, now_ms, |_| {})?;
            self.appended = 0;
        }
        Ok(())
    }
}

struct Executor {
    cfg: ExecutorConfig,
    /// The client of the current certificate: replaced after a renewal (so no pooled
    /// connection outlives the old certificate), while calls in flight finish on the old one.
    http: Mutex<reqwest::Client>,
    /// Bumped by each renewal: the dispatch stream reconnects with the new certificate.
    renewed: tokio::sync::watch::Sender<u64>,
    memory: Mutex<Memory>,
    /// One permit per dispatch being handled ([`ExecutorConfig::attempts_max`]).
    slots: Arc<tokio::sync::Semaphore>,
    journal: StartJournal,
    /// Whether a dispatch stream is open (what `/readyz` answers).
    streaming: std::sync::atomic::AtomicBool,
    /// Index into `cfg.edges` of the edge currently streaming.
    edge: Mutex<usize>,
    /// The call stream to each edge, for attempt calls.
    calls: writ_client::numbered::Exchanges<OperationStatus>,
}

/// How long an attempt call waits for its answer before its outcome is uncertain.
const CALL_TIMEOUT: Duration = Duration::from_secs(15);

/// Runs until the process is stopped: a dispatch stream (rotating edges on failure) and one
/// task per dispatch.
pub async fn run(cfg: ExecutorConfig) -> Result<(), String> {
    recover_renewal(&cfg)?;
    let http = Mutex::new(http_client(&cfg)?);
    let journal = StartJournal::open(cfg.key.with_file_name(START_JOURNAL_FILE), writ_client::now_ms())?;
    let x = Arc::new(Executor::new(cfg, http, journal));
    if let Some(addr) = x.cfg.probe_listen {
        let listener = tokio::net::TcpListener::bind(addr).await.map_err(|e| format!("probe_listen {addr}: {e}"))?;
        let bound = listener.local_addr().map_err(|e| e.to_string())?;
        tracing::info!(url = %format!("http://{bound}"), "probes listening");
        let router = probe_router(x.clone());
        tokio::spawn(async move { axum::serve(listener, router).await });
    }
    tokio::spawn(x.clone().renew_when_due());
    let mut failures = 0u32;
    loop {
        let edge = x.cfg.edges[*x.edge.lock().expect("edge lock") % x.cfg.edges.len()].clone();
        let ended = x.clone().stream(&edge).await;
        x.streaming.store(false, std::sync::atomic::Ordering::Relaxed);
        metrics::gauge!("writ_executor_dispatch_stream_open").set(0.0);
        metrics::counter!("writ_executor_dispatch_stream_ends_total", "ok" => ended.is_ok().to_string()).increment(1);
        match ended {
            Ok(()) => failures = 0,
            Err(e) => {
                failures += 1;
                tracing::warn!(%edge, error = %e, "dispatch stream ended");
            }
        }
        *x.edge.lock().expect("edge lock") += 1;
        let backoff = Duration::from_millis((100u64 << failures.min(5)).min(3_000));
        tokio::time::sleep(backoff).await;
    }
}

/// The executor's probe listener (`probe_listen`): `/healthz` while the process runs, `/readyz`
/// while a dispatch stream is open (503 otherwise), `/metrics` in the Prometheus text format.
/// Plain HTTP, read-only: it says nothing an executor's site monitoring may not see.
fn probe_router(x: Arc<Executor>) -> axum::Router {
    use axum::http::StatusCode;
    use axum::routing::get;
    let metrics = writ_telemetry::process::install_metrics();
    writ_telemetry::process::build_info("executor");
    axum::Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route(
            "/readyz",
            get(move || {
                let open = x.streaming.load(std::sync::atomic::Ordering::Relaxed);
                async move {
                    if open {
                        (StatusCode::OK, "ready")
                    } else {
                        (StatusCode::SERVICE_UNAVAILABLE, "no dispatch stream open")
                    }
                }
            }),
        )
        .route("/metrics", get(move || async move { metrics.as_ref().map(|m| m.render()).unwrap_or_default() }))
}

/// Longest wait between looks at the certificate's renewal time (a certificate replaced on
/// disk by hand is noticed within it).
const RENEWAL_LOOK_MAX: Duration = Duration::from_secs(3600);

impl Executor {
    fn new(cfg: ExecutorConfig, http: Mutex<reqwest::Client>, journal: StartJournal) -> Executor {
        let slots = Arc::new(tokio::sync::Semaphore::new(cfg.attempts_max));
        let (renewed, memory, streaming) = (tokio::sync::watch::Sender::new(0), Mutex::default(), Default::default());
        let calls = writ_client::numbered::Exchanges::new(writ_client::numbered::Bounds {
            path: CALLS_PATH,
            payload_max: CALL_PAYLOAD_BYTES_MAX,
            deadline: CALL_TIMEOUT,
        });
        Executor { cfg, http, renewed, memory, slots, journal, streaming, edge: Mutex::new(0), calls }
    }

    fn http(&self) -> reqwest::Client {
        self.http.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Renews the certificate at about two thirds of its lifetime; a failed renewal is tried
    /// again after a tenth of the time left (1 s to 5 min).
    async fn renew_when_due(self: Arc<Self>) {
        loop {
            let now = writ_client::now_ms();
            let wait = match renewal_due_ms(&self.cfg) {
                Ok(due) if due > now => Duration::from_millis(due - now).min(RENEWAL_LOOK_MAX),
                Ok(_) => match renew(&self.cfg, &self.http()).await {
                    Ok(r) => {
                        match http_client(&self.cfg) {
                            Ok(client) => {
                                *self.http.lock().unwrap_or_else(|e| e.into_inner()) = client;
                                // Calls go on over exchanges opened with the new certificate.
                                self.calls.reset();
                            }
                            Err(e) => tracing::error!(error = %e, "the renewed certificate does not load"),
                        }
                        self.renewed.send_modify(|n| *n += 1);
                        tracing::info!(fingerprint = %r.fingerprint, not_after_ms = r.not_after_ms, "certificate renewed");
                        continue;
                    }
                    Err(e) => {
                        let left = certificate_facts(&leaf_der(&self.cfg.cert).unwrap_or_default())
                            .map(|(_, not_after, _)| not_after.saturating_sub(now))
                            .unwrap_or(0);
                        tracing::warn!(error = %e, left_ms = left, "certificate renewal failed; trying again");
                        Duration::from_millis(left / 10).clamp(Duration::from_secs(1), Duration::from_secs(300))
                    }
                },
                Err(e) => {
                    tracing::error!(error = %e, "cannot read the certificate's lifetime");
                    Duration::from_secs(60)
                }
            };
            tokio::time::sleep(wait).await;
        }
    }

    /// One dispatch stream; returns when it ends (or the certificate was renewed: the caller
    /// reconnects with the new one).
    async fn stream(self: Arc<Self>, edge: &str) -> Result<(), String> {
        let mut renewed = self.renewed.subscribe();
        renewed.mark_unchanged();
        let r = self.http().get(format!("{edge}{DISPATCH_PATH}")).send().await.map_err(|e| e.to_string())?;
        if !r.status().is_success() {
            let status = r.status();
            return Err(format!("HTTP {status}: {}", r.text().await.unwrap_or_default()));
        }
        let mut body = r.bytes_stream();
        let mut buf: Vec<u8> = Vec::new();
        let silence = Duration::from_millis(3 * HEARTBEAT_MS);
        loop {
            let next = tokio::select! {
                next = tokio::time::timeout(silence, body.next()) => next,
                _ = renewed.changed() => return Ok(()),
            };
            let chunk = match next {
                Err(_) => return Err("no heartbeat from the edge".into()),
                Ok(None) => return Ok(()),
                Ok(Some(Err(e))) => return Err(e.to_string()),
                Ok(Some(Ok(c))) => c,
            };
            buf.extend_from_slice(&chunk);
            while let Some(nl) = buf.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = buf.drain(..=nl).collect();
                let frame: DispatchFrame = serde_json::from_slice(&line).map_err(|e| format!("bad frame: {e}"))?;
                match frame {
                    DispatchFrame::Hello { executor_id, tenant_id, site_id, .. } => {
                        tracing::info!(%edge, %executor_id, %tenant_id, %site_id, "dispatch stream open");
                        self.streaming.store(true, std::sync::atomic::Ordering::Relaxed);
                        metrics::gauge!("writ_executor_dispatch_stream_open").set(1.0);
                    }
                    DispatchFrame::Heartbeat { .. } => {}
                    DispatchFrame::End { reason, message } => return Err(format!("{reason}: {message}")),
                    DispatchFrame::Dispatch { dispatch, now_ms } => {
                        metrics::counter!("writ_executor_dispatches_total").increment(1);
                        self.clone().take_on(edge, dispatch, now_ms);
                    }
                }
            }
        }
    }

    /// Handles a dispatch in a task of its own while fewer than `attempts_max` are handled;
    /// beyond them, leaves it untaken for the edge to offer again. Returns whether it was taken.
    fn take_on(self: Arc<Self>, edge: &str, dispatch: Dispatch, edge_now_ms: u64) -> bool {
        let Ok(slot) = self.slots.clone().try_acquire_owned() else {
            metrics::counter!("writ_executor_dispatches_deferred_total").increment(1);
            tracing::debug!(operation = %dispatch.operation_id, "every attempt slot is busy: left for a later offer");
            return false;
        };
        let (received, edge) = (Instant::now(), edge.to_string());
        tokio::spawn(async move {
            self.handle(&edge, dispatch, edge_now_ms, received).await;
            drop(slot);
        });
        true
    }

    /// Why this dispatch must not be attempted (its reason code and what was found), if it
    /// must not.
    fn stale(&self, d: &Dispatch, edge_now_ms: u64, received: Instant) -> Option<(ReasonCode, String)> {
        let now = edge_now_ms + received.elapsed().as_millis() as u64;
        if d.deadline_ms <= now {
            return Some((ReasonCode::DEADLINE_EXCEEDED, format!("deadline passed ({} ms ago)", now - d.deadline_ms)));
        }
        if d.deadline_ms - now < self.cfg.deadline_margin_ms {
            return Some((
                ReasonCode::DEADLINE_EXCEEDED,
                format!(
                    "deadline too close: {} ms left, this executor needs {}",
                    d.deadline_ms - now,
                    self.cfg.deadline_margin_ms
                ),
            ));
        }
        let memory = self.memory.lock().expect("memory lock");
        if let Some(seen) = d.device_id.as_ref().and_then(|dev| memory.fencing.get(dev)) {
            if d.fencing_token < *seen {
                let why = format!("stale fencing token {} (this executor has seen {seen})", d.fencing_token);
                return Some((ReasonCode::FENCING_TOKEN_STALE, why));
            }
        }
        if matches!(self.cfg.handler, HandlerConfig::ConformanceFixtures) && d.action == "protocol_error_job" {
            let why = "the fixture handler crashed before running (a simulated protocol error)";
            return Some((ReasonCode::EXECUTOR_UNAVAILABLE, why.into()));
        }
        if let HandlerConfig::Simulated { state, failure, .. } = &self.cfg.handler {
            if *failure == FailureMode::RefusePrecondition {
                return Some((ReasonCode::PRECONDITION_FAILED, "local precondition not met (simulated)".into()));
            }
            for (name, expected) in &d.preconditions {
                let actual = state.get(name).map(String::as_str).unwrap_or("<unset>");
                if actual != expected {
                    let why = format!("precondition {name}={expected} not met ({name} is {actual})");
                    return Some((ReasonCode::PRECONDITION_FAILED, why));
                }
            }
        }
        None
    }

    /// Asks the ledger to start the attempt, trying each edge while none answers. When a try's
    /// outcome was uncertain (the edge went away mid-request) and a later try finds the
    /// operation already attempting, that start was this task's own (only this task handles
    /// the operation in this process): the attempt proceeds — unless the lease ran out before
    /// the answer came (`unknown_effect`): then nothing is attempted.
    async fn start(&self, edge: &str, id: &str, fencing_token: u64, lease_ms: u64) -> Result<Started, CallError> {
        let body = AttemptRequest { fencing_token, lease_ms };
        let others = self.cfg.edges.iter().filter(|e| e.as_str() != edge).map(String::as_str);
        let order: Vec<&str> = std::iter::once(edge).chain(others).collect();
        let (mut uncertain, mut last) = (false, CallError::NotSent("no edge is configured".into()));
        // Bounded: the ledger refuses a start after the deadline anyway.
        for round in 0..START_TRIES {
            let e = order[round % order.len()];
            match self.post(e, id, AttemptVerb::Start, &body).await {
                Ok(_) => return Ok(Started::Now),
                Err(CallError::Rejected(r)) if uncertain && r.reason == ReasonCode::OPERATION_STATE_CONFLICT => {
                    return self.own_start(id, &order).await.ok_or(CallError::Rejected(r));
                }
                // Not sent, no answer, or the ledger could not confirm: try again (after an
                // answer that never came, the start may or may not have been committed).
                Err(err) if !matches!(&err, CallError::Rejected(r) if r.reason != ReasonCode::LEDGER_UNAVAILABLE) => {
                    uncertain |= err.may_have_executed();
                    last = err;
                    tokio::time::sleep(Duration::from_millis(200 * (round as u64 + 1)).min(Duration::from_secs(2)))
                        .await;
                }
                Err(err) => return Err(err),
            }
        }
        // No try got an answer; one of them may still have landed.
        if uncertain {
            if let Some(started) = self.own_start(id, &order).await {
                return Ok(started);
            }
        }
        Err(last)
    }

    /// After uncertain starts: whether one of them landed — the operation's first attempt is
    /// recorded (only this task handles the operation in this process, and the status, read
    /// from the ledger, answers only for operations offered or dispatched to this executor).
    /// Asks the edges in turn for a while (a leader election may be under way).
    async fn own_start(&self, id: &str, order: &[&str]) -> Option<Started> {
        use writ_api::operation::OperationState::{Attempting, UnknownEffect};
        for round in 0..STATUS_TRIES {
            let e = order[round % order.len()];
            let sent =
                self.http().get(format!("{e}{OPERATIONS_PATH}/{id}")).timeout(Duration::from_secs(5)).send().await;
            if let Ok(r) = sent {
                if r.status() == reqwest::StatusCode::NOT_FOUND {
                    return None; // not (or no longer) this executor's
                }
                if r.status().is_success() {
                    if let Ok(s) = r.json::<OperationStatus>().await {
                        return match (s.state, s.attempts) {
                            (Attempting, 1) => Some(Started::Now),
                            (UnknownEffect, 1) => Some(Started::TooLate),
                            _ => None,
                        };
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        None
    }

    /// [`Executor::post`] to `edge`, then to the other edges while the edge is unreachable (an
    /// attempt's renewals and report must not die with the edge its dispatch came from).
    async fn post_any<T: serde::Serialize>(
        &self,
        edge: &str,
        id: &str,
        verb: AttemptVerb,
        body: &T,
    ) -> Result<OperationStatus, CallError> {
        let others = self.cfg.edges.iter().filter(|e| e.as_str() != edge).map(String::as_str);
        let mut last = CallError::NotSent("no edge is configured".into());
        for e in std::iter::once(edge).chain(others) {
            match self.post(e, id, verb, body).await {
                Err(err @ (CallError::NotSent(_) | CallError::Uncertain(_))) => last = err,
                other => return other,
            }
        }
        Err(last)
    }

    /// An attempt call to `edge`: on its call stream ([`writ_client::numbered`]), or a request
    /// of its own to an edge that serves none; the outcome rules are the same either way.
    async fn post<T: serde::Serialize>(
        &self,
        edge: &str,
        id: &str,
        verb: AttemptVerb,
        body: &T,
    ) -> Result<OperationStatus, CallError> {
        let http = self.http();
        match self.calls.route(&http, edge).await? {
            writ_client::numbered::Route::Exchange(calls) => {
                let body = serde_json::to_vec(body).map_err(|e| {
                    CallError::Rejected(writ_api::Rejection::new(
                        ReasonCode::INTERNAL,
                        format!("unencodable call: {e}"),
                    ))
                })?;
                let traceparent = writ_client::trace::traceparent();
                calls.call(&AttemptCall { verb, operation_id: id.to_string(), traceparent, body }).await
            }
            writ_client::numbered::Route::Request => Self::post_request(&http, edge, id, verb, body).await,
        }
    }

    async fn post_request<T: serde::Serialize>(
        http: &reqwest::Client,
        edge: &str,
        id: &str,
        verb: AttemptVerb,
        body: &T,
    ) -> Result<OperationStatus, CallError> {
        let url = format!("{edge}{OPERATIONS_PATH}/{id}/{}", verb.segment());
        let mut request = http.post(&url).json(body).timeout(CALL_TIMEOUT);
        if let Some(parent) = writ_client::trace::traceparent() {
            request = request.header(writ_client::TRACEPARENT_HEADER, parent);
        }
        let sent = request.send().await;
        let r = sent.map_err(CallError::from_transport)?;
        if r.status().is_success() {
            return r
                .json()
                .await
                .map_err(|e| CallError::Uncertain(format!("{url}: an answer that is no status: {e}")));
        }
        let status = r.status();
        let text = r.text().await.unwrap_or_default();
        Err(match serde_json::from_str::<ErrorBody>(&text) {
            Ok(b) => CallError::Rejected(writ_api::Rejection::new(b.reason, b.message)),
            // Not Writ's answer (a proxy's page): what happened behind it is unknown.
            Err(_) => CallError::Uncertain(format!("{url}: HTTP {status}: {}", writ_api::audit::truncated(&text, 200))),
        })
    }

    /// Handles a dispatch as a span of the operation's trace (under its submission's span,
    /// which the dispatch names by its trace and operation ids).
    async fn handle(self: Arc<Self>, edge: &str, d: Dispatch, edge_now_ms: u64, received: Instant) {
        let parent = writ_api::trace::operation_traceparent(&d.trace_id, &d.operation_id);
        let Some(parent) = parent.as_deref().and_then(writ_api::trace::Parent::parse) else {
            return self.attempt_dispatch(edge, d, edge_now_ms, received).await;
        };
        let cx = writ_api::trace::TraceContext::child_of(Some(parent), None, writ_telemetry::fresh_ids);
        let consumer = opentelemetry::trace::SpanKind::Consumer;
        let mut span = writ_telemetry::Span::start(cx, consumer, || format!("writ.executor.attempt {}", d.action));
        span.set("writ.operation.id", d.operation_id.clone());
        span.set("writ.action", d.action.clone());
        span.set("writ.fencing_token", d.fencing_token as i64);
        if let Some(device) = &d.device_name {
            span.set("writ.device", device.clone());
        }
        let cx = span.context().clone();
        writ_client::trace::within(&cx, self.attempt_dispatch(edge, d, edge_now_ms, received)).await;
        span.end();
    }

    async fn attempt_dispatch(self: Arc<Self>, edge: &str, d: Dispatch, edge_now_ms: u64, received: Instant) {
        let id = d.operation_id.clone();
        let forget_after = d.deadline_ms.saturating_add(writ_api::operation::LEASE_MS_MAX);
        if !self.memory.lock().expect("memory lock").take(&id, forget_after, writ_client::now_ms()) {
            return; // already handled (a reconnect resends what is still waiting)
        }
        if let Some((code, why)) = self.stale(&d, edge_now_ms, received) {
            tracing::info!(operation = %id, %code, %why, "refusing dispatch");
            let refusal = RefuseRequest { fencing_token: d.fencing_token, reason: why, code: Some(code) };
            let _ = self.post(edge, &id, AttemptVerb::Refuse, &refusal).await;
            return;
        }
        if let Some(dev) = &d.device_id {
            let mut memory = self.memory.lock().expect("memory lock");
            let seen = memory.fencing.entry(dev.clone()).or_insert(0);
            *seen = (*seen).max(d.fencing_token);
        }
        if self.journal.started_before(&id) {
            // An earlier process sent a start for it: it may have acted. Never twice.
            tracing::warn!(operation = %id, "an earlier run of this executor started this operation: not attempted again");
            return;
        }
        if let Err(e) = self.journal.record(&id, forget_after, writ_client::now_ms()).await {
            tracing::error!(operation = %id, error = %e, "the start journal cannot be written: not attempted");
            self.memory.lock().expect("memory lock").untake(&id);
            return;
        }
        let lease_ms = self.cfg.lease_ms;
        match self.start(edge, &id, d.fencing_token, lease_ms).await {
            Ok(Started::Now) => {}
            Ok(Started::TooLate) => {
                // Never attempt what the ledger already gave up on; say truthfully that nothing
                // happened, which reconciles the unknown effect.
                tracing::warn!(operation = %id, "start recorded but confirmed only after the lease ran out: not attempted");
                let why = "the start was recorded, but its answer came after the attempt lease ran out: not attempted";
                return self.report(edge, &id, d.fencing_token, AttemptOutcome::NoEffect, why.into()).await;
            }
            Err(e) => {
                // No attempt without the ledger's go-ahead.
                tracing::info!(operation = %id, error = %e, "attempt not started");
                // Not attempted: if it is offered again (to this executor too), take it then.
                self.memory.lock().expect("memory lock").untake(&id);
                return;
            }
        }
        // The renewals also bring a cancellation asked for during the attempt.
        let (cancel_tx, cancel) = tokio::sync::watch::channel(false);
        let renewer = {
            let (x, edge, id, token) = (self.clone(), edge.to_string(), id.clone(), d.fencing_token);
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(Duration::from_millis(lease_ms / 3)).await;
                    let renewal = AttemptRequest { fencing_token: token, lease_ms };
                    match x.post_any(&edge, &id, AttemptVerb::Renew, &renewal).await {
                        Ok(status) if status.cancel_requested => {
                            let _ = cancel_tx.send(true);
                        }
                        Ok(_) => {}
                        Err(e) => tracing::warn!(operation = %id, error = %e, "lease renewal failed"),
                    }
                }
            })
        };
        let result = self.attempt(&d, cancel).await;
        renewer.abort();
        let Some(Attempted { outcome, output, captured }) = result else {
            tracing::warn!(operation = %id, "outcome unknown: not reported (the ledger will mark unknown_effect)");
            return;
        };
        for capture in captured {
            self.upload(edge, &id, capture).await;
        }
        self.report(edge, &id, d.fencing_token, outcome, output).await;
    }

    /// Reports an attempt's outcome with its output as evidence: the output itself travels
    /// with the report into the ledger's evidence store (one entry) when it may
    /// ([`ExecutorConfig::upload_evidence`], at most `EVIDENCE_BYTES_MAX`), and the evidence
    /// then names where it is read. Secret-like values are redacted first
    /// ([`writ_api::audit::redact_str`]).
    async fn report(&self, edge: &str, id: &str, fencing_token: u64, outcome: AttemptOutcome, output: String) {
        // Secrets a handler printed never leave the executor: the evidence is the redacted text.
        let output = writ_api::audit::redact_str(&output).unwrap_or(output);
        let content_hash = writ_api::hex(&Sha256::digest(output.as_bytes()));
        let stored =
            self.cfg.upload_evidence && !output.is_empty() && output.len() <= writ_api::evidence::EVIDENCE_BYTES_MAX;
        let content = stored.then(|| {
            let json = serde_json::from_str::<serde_json::Value>(&output).is_ok();
            writ_api::evidence::EvidenceContentV1 {
                mime_type: if json { "application/json" } else { "text/plain" }.into(),
                content_base64: writ_api::evidence::to_base64(output.as_bytes()),
            }
        });
        let evidence = EvidenceV1 {
            evidence_return_ref: if stored {
                writ_api::evidence::evidence_uri(id, &content_hash)
            } else {
                format!("writ-executor:{id}/evidence")
            },
            content_hash,
            summary: output.chars().take(200).collect(),
        };
        let label = if outcome == AttemptOutcome::Effect { "effect" } else { "no_effect" };
        metrics::counter!("writ_executor_reports_total", "outcome" => label).increment(1);
        let report = ReportRequest { fencing_token, outcome, evidence: Some(evidence), content };
        // A report is retried for a while (through a leader election or an edge going away; a
        // repeat of one that landed is a state conflict). If it never lands, the lease runs out
        // and the ledger marks the operation `unknown_effect` for reconciliation.
        for attempt in 0..REPORT_TRIES {
            match self.post_any(edge, id, AttemptVerb::Report, &report).await {
                Ok(_) => return,
                Err(CallError::Rejected(r))
                    if matches!(r.reason, ReasonCode::OPERATION_STATE_CONFLICT | ReasonCode::FENCING_TOKEN_STALE) =>
                {
                    tracing::warn!(operation = %id, reason = %r.reason, message = %r.message, "report refused");
                    return;
                }
                Err(e) => {
                    tracing::warn!(operation = %id, error = %e, attempt, "report failed; retrying");
                    tokio::time::sleep(Duration::from_millis(200 << attempt.min(3))).await;
                }
            }
        }
    }

    /// Uploads what the attempt captured to the ledger's evidence store (before the report,
    /// while the attempt is the operation's). A blob that is refused or cannot be sent is
    /// logged and left out: the report still goes.
    async fn upload(&self, edge: &str, id: &str, capture: Captured) {
        let upload = EvidenceUpload {
            content_hash: writ_api::hex(&Sha256::digest(&capture.bytes)),
            content_base64: writ_api::evidence::to_base64(&capture.bytes),
            mime_type: capture.mime_type.into(),
        };
        match self.post_any(edge, id, AttemptVerb::Evidence, &upload).await {
            Ok(_) => metrics::counter!("writ_executor_evidence_uploads_total", "result" => "stored").increment(1),
            Err(e) => {
                metrics::counter!("writ_executor_evidence_uploads_total", "result" => "failed").increment(1);
                tracing::warn!(operation = %id, error = %e, hash = %upload.content_hash, "evidence not stored");
            }
        }
    }

    /// Performs the attempt; `None` when its outcome is not known.
    async fn attempt(&self, d: &Dispatch, cancel: tokio::sync::watch::Receiver<bool>) -> Option<Attempted> {
        match &self.cfg.handler {
            HandlerConfig::Simulated { latency_ms, state, .. } if d.read => {
                // A read: the device's local state, nothing effected (no attempt counted).
                if !work(Duration::from_millis(*latency_ms), cancel).await {
                    return Some((AttemptOutcome::NoEffect, "cancelled before the reading".to_string()).into());
                }
                let output = serde_json::json!({"device": d.device_name, "action": d.action, "state": state});
                Some((AttemptOutcome::Effect, output.to_string()).into())
            }
            HandlerConfig::Simulated { latency_ms, failure, attempts_file, camera, .. } => {
                if let Some(path) = attempts_file {
                    let line = format!("{}\n", d.operation_id);
                    let appended = std::fs::OpenOptions::new()
                        .create(true)
                        .append(true)
                        .open(path)
                        .and_then(|mut f| f.write_all(line.as_bytes()).and_then(|_| f.sync_data()));
                    if let Err(e) = appended {
                        tracing::error!(error = %e, "attempt counter not written");
                    }
                }
                if *failure == FailureMode::CrashMidAttempt {
                    tracing::error!(operation = %d.operation_id, "simulated crash mid-attempt");
                    std::process::abort();
                }
                let extra = if *failure == FailureMode::Slow { 3 * self.cfg.lease_ms } else { 0 };
                if !work(Duration::from_millis(latency_ms + extra), cancel).await {
                    return Some((AttemptOutcome::NoEffect, "cancelled before the effect".to_string()).into());
                }
                if *failure == FailureMode::ReportLost {
                    return None;
                }
                let output =
                    serde_json::json!({"device": d.device_name, "action": d.action, "input": d.input, "done": true});
                let mut attempted = Attempted::from((AttemptOutcome::Effect, output.to_string()));
                if *camera {
                    let bytes = crate::camera::frame(d.operation_id.as_bytes());
                    attempted.captured.push(Captured { mime_type: "image/png", bytes });
                }
                Some(attempted)
            }
            HandlerConfig::Command { program, args, timeout_s } => run_command(program, args, *timeout_s, d).await,
            HandlerConfig::ConformanceFixtures => Some(fixture(d, cancel).await.into()),
        }
    }
}

/// How an attempt ended: its outcome, its output (the report's evidence) and what it captured
/// besides (frames of the effect, files its handler wrote), uploaded before the report.
struct Attempted {
    outcome: AttemptOutcome,
    output: String,
    captured: Vec<Captured>,
}

impl From<(AttemptOutcome, String)> for Attempted {
    fn from((outcome, output): (AttemptOutcome, String)) -> Attempted {
        Attempted { outcome, output, captured: Vec::new() }
    }
}

/// A blob an attempt captured, with its media type (one of `EVIDENCE_MIME_TYPES`).
struct Captured {
    mime_type: &'static str,
    bytes: Vec<u8>,
}

/// Works for `duration` unless cancelled first; whether it finished.
async fn work(duration: Duration, mut cancel: tokio::sync::watch::Receiver<bool>) -> bool {
    tokio::select! {
        _ = tokio::time::sleep(duration) => true,
        _ = cancel.wait_for(|c| *c) => false,
    }
}

/// The conformance fixtures' task tools (see [`HandlerConfig::ConformanceFixtures`]).
async fn fixture(d: &Dispatch, cancel: tokio::sync::watch::Receiver<bool>) -> (AttemptOutcome, String) {
    let answer =
        |id: &str, field: &str| d.answers.get(id).and_then(|a| a["content"][field].as_str()).map(str::to_string);
    match d.action.as_str() {
        "slow_compute" => {
            let seconds = d.input["seconds"].as_f64().unwrap_or(0.0).clamp(0.0, 300.0);
            let label = d.input["label"].as_str().unwrap_or("slow_compute");
            if work(Duration::from_secs_f64(seconds), cancel).await {
                (AttemptOutcome::Effect, format!("Computed '{label}' after {seconds} s"))
            } else {
                (AttemptOutcome::NoEffect, format!("'{label}' cancelled before it finished"))
            }
        }
        "failing_job" => {
            work(Duration::from_secs(1), cancel).await;
            (AttemptOutcome::NoEffect, "failing_job failed: a simulated tool execution error".into())
        }
        "confirm_delete" => {
            let file = d.input["filename"].as_str().unwrap_or("the file");
            (AttemptOutcome::Effect, format!("Deleted {file}"))
        }
        "multi_input" => {
            let name = answer("name", "name").unwrap_or_default();
            (AttemptOutcome::Effect, format!("Received both inputs (name: {name})"))
        }
        "test_tool_with_task" => {
            let name = d.input["user_name"].as_str().unwrap_or("stranger");
            (AttemptOutcome::Effect, format!("Hello, {name}! (gathered through MRTR, finished as a task)"))
        }
        other => (AttemptOutcome::NoEffect, format!("no fixture named '{other}'")),
    }
}

/// Runs the command handler on `d`, with `WRIT_EVIDENCE_DIR` naming a fresh private directory
/// whose files it leaves there are uploaded as evidence ([`captured_files`]).
async fn run_command(program: &str, args: &[String], timeout_s: u64, d: &Dispatch) -> Option<Attempted> {
    let dir = std::env::temp_dir().join(format!("writ-evidence-{}", writ_api::hex(&rand::random::<[u8; 8]>())));
    let made = std::fs::DirBuilder::new().mode(0o700).create(&dir);
    if let Err(e) = made {
        tracing::error!(dir = %dir.display(), error = %e, "no evidence directory for the handler");
    }
    let ran = run_handler(program, args, timeout_s, d, &dir).await;
    let captured = captured_files(&dir);
    let _ = std::fs::remove_dir_all(&dir);
    ran.map(|(outcome, output)| Attempted { outcome, output, captured })
}

/// The files a handler left in `dir` (regular files, in name order), at most one less than an
/// operation's evidence count, each at most `EVIDENCE_BYTES_MAX` (others are logged and left
/// out), typed by their first bytes or name.
fn captured_files(dir: &Path) -> Vec<Captured> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut paths: Vec<PathBuf> =
        entries.filter_map(Result::ok).filter(|e| e.file_type().is_ok_and(|t| t.is_file())).map(|e| e.path()).collect();
    paths.sort();
    let kept = writ_api::evidence::EVIDENCE_PER_OPERATION_MAX - 1;
    if paths.len() > kept {
        tracing::warn!(files = paths.len(), kept, "the handler left more evidence files than an operation keeps");
        paths.truncate(kept);
    }
    let read = |p: &PathBuf| match std::fs::read(p) {
        Ok(bytes) if !bytes.is_empty() && bytes.len() <= writ_api::evidence::EVIDENCE_BYTES_MAX => Some(bytes),
        Ok(bytes) => {
            tracing::warn!(file = %p.display(), bytes = bytes.len(), "evidence file empty or too large: left out");
            None
        }
        Err(e) => {
            tracing::warn!(file = %p.display(), error = %e, "evidence file unreadable");
            None
        }
    };
    paths.iter().filter_map(|p| read(p).map(|bytes| Captured { mime_type: media_type(p, &bytes), bytes })).collect()
}

/// A captured file's media type: images and PDFs by their signature, text by its name, other
/// bytes as `application/octet-stream` (never a type that a browser would run).
fn media_type(path: &Path, bytes: &[u8]) -> &'static str {
    if bytes.starts_with(b"\x89PNG\r\n\x1a\n") {
        return "image/png";
    }
    if bytes.starts_with(&[0xff, 0xd8, 0xff]) {
        return "image/jpeg";
    }
    if bytes.starts_with(b"%PDF-") {
        return "application/pdf";
    }
    let text = std::str::from_utf8(bytes).is_ok();
    match path.extension().and_then(|e| e.to_str()) {
        Some("json") if serde_json::from_slice::<serde_json::Value>(bytes).is_ok() => "application/json",
        Some("csv") if text => "text/csv",
        Some("txt" | "log") if text => "text/plain",
        _ => "application/octet-stream",
    }
}

async fn run_handler(
    program: &str,
    args: &[String],
    timeout_s: u64,
    d: &Dispatch,
    evidence_dir: &Path,
) -> Option<(AttemptOutcome, String)> {
    use tokio::io::AsyncWriteExt;
    let mut child = tokio::process::Command::new(program)
        .args(args)
        .env("WRIT_EVIDENCE_DIR", evidence_dir)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| tracing::error!(%program, error = %e, "handler did not start"))
        .ok()?;
    let input = serde_json::to_vec(d).unwrap_or_default();
    if let Some(mut stdin) = child.stdin.take() {
        let _ = stdin.write_all(&input).await;
    }
    let out = tokio::time::timeout(Duration::from_secs(timeout_s), child.wait_with_output()).await;
    match out {
        Ok(Ok(o)) => {
            let text = String::from_utf8_lossy(&o.stdout).into_owned();
            match o.status.code() {
                Some(0) => Some((AttemptOutcome::Effect, text)),
                Some(3) => Some((AttemptOutcome::NoEffect, text)),
                code => {
                    tracing::warn!(%program, ?code, "handler ended without a known outcome");
                    None
                }
            }
        }
        Ok(Err(e)) => {
            tracing::warn!(%program, error = %e, "handler failed");
            None
        }
        Err(_) => {
            tracing::warn!(%program, timeout_s, "handler timed out");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_handler_s_files_are_typed_by_their_bytes_and_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let file = |name: &str, bytes: &[u8]| std::fs::write(dir.path().join(name), bytes).unwrap();
        file("a.png", &crate::camera::frame(b"x"));
        file("b.html", b"<script>alert(1)</script>");
        file("c.json", b"{\"ok\": true}");
        file("d.txt", &[0xff, 0xfe]);
        file("e.bin", &vec![1u8; writ_api::evidence::EVIDENCE_BYTES_MAX + 1]);
        file("f.empty", b"");
        let types: Vec<&str> = captured_files(dir.path()).iter().map(|c| c.mime_type).collect();
        assert_eq!(types, ["image/png", "application/octet-stream", "application/json", "application/octet-stream"]);
        for i in 0..20 {
            file(&format!("z{i:02}.txt"), b"line");
        }
        std::fs::remove_file(dir.path().join("e.bin")).unwrap();
        std::fs::remove_file(dir.path().join("f.empty")).unwrap();
        assert_eq!(captured_files(dir.path()).len(), writ_api::evidence::EVIDENCE_PER_OPERATION_MAX - 1);
    }

    /// A dispatch of `id` due by `deadline_ms`.
    fn dispatch(id: &str, deadline_ms: u64) -> Dispatch {
        Dispatch {
            operation_id: id.into(),
            action: "press".into(),
            input: serde_json::Value::Null,
            device_id: None,
            device_name: None,
            fencing_token: 1,
            deadline_ms,
            preconditions: BTreeMap::new(),
            payload_hash: String::new(),
            trace_id: String::new(),
            answers: BTreeMap::new(),
            read: false,
        }
    }

    #[tokio::test]
    async fn a_dispatch_beyond_attempts_max_is_left_for_a_later_offer() {
        // An edge nobody listens on: every call fails at once, unsent.
        let edge = "https://127.0.0.1:1";
        let text = format!(
            r#"edges = ["{edge}"]
cert = "c"
key = "k"
edge_ca = "ca"
attempts_max = 1
[handler]
kind = "simulated"
"#
        );
        let cfg: ExecutorConfig = toml::from_str(&text).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let journal = StartJournal::open(dir.path().join(START_JOURNAL_FILE), 1_000).unwrap();
        let http = Mutex::new(reqwest::Client::builder().no_proxy().build().unwrap());
        let x = Arc::new(Executor::new(cfg, http, journal));
        let now_ms = 10_000;
        // Past its deadline: taken, refused (the refusal reaches no edge), and its slot freed.
        assert!(x.clone().take_on(edge, dispatch("op-stale", 1), now_ms));
        assert!(!x.clone().take_on(edge, dispatch("op-next", now_ms + 60_000), now_ms), "the one slot is busy");
        assert!(!x.memory.lock().unwrap().is_taken("op-next"), "left untaken");
        let freed = tokio::time::timeout(Duration::from_secs(30), x.slots.acquire()).await;
        drop(freed.expect("the stale dispatch's task ends").unwrap());
        assert!(x.clone().take_on(edge, dispatch("op-next", now_ms + 60_000), now_ms), "offered again, taken");
    }

    #[test]
    fn what_was_taken_is_forgotten_once_no_offer_of_it_could_start() {
        let mut m = Memory::default();
        assert!(m.take("op-live", 100_000, 1_000));
        assert!(!m.take("op-live", 100_000, 1_000), "taken once");
        assert!(m.take("op-short", 5_000, 1_000));
        // Within a minute of the last sweep nothing is swept, not even what may be forgotten.
        assert!(m.take("op-a", 100_000, 30_000));
        assert_eq!(m.taken.len(), 3);
        // A minute on, the next take sweeps away what can no longer start.
        assert!(m.take("op-new", 100_000, 61_000));
        assert_eq!(m.taken.len(), 3, "op-live, op-a and op-new remain");
        assert!(!m.take("op-live", 100_000, 61_000), "what can still start stays taken");
        assert!(m.take("op-short", 200_000, 61_000), "forgotten");
    }

    #[test]
    fn enrollment_goes_over_https_or_to_literal_loopback_only() {
        for ok in ["https://edge.example:9444", "http://127.0.0.1:8080/mcp", "http://[::1]:8080"] {
            assert!(enroll_origin(ok).is_ok(), "{ok}");
        }
        for bad in ["http://edge.example:8080", "http://10.0.0.5:8080", "http://localhost:8080", "ftp://127.0.0.1"] {
            assert!(enroll_origin(bad).unwrap_err().contains("https://"), "{bad}");
        }
    }

    #[tokio::test]
    async fn the_start_journal_survives_a_restart_and_forgets_what_can_no_longer_start() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(START_JOURNAL_FILE);
        let j = StartJournal::open(path.clone(), 1_000).unwrap();
        assert!(!j.started_before("op-1"), "a new executor started nothing");
        j.record("op-1", 5_000, 1_000).await.unwrap();
        j.record("op-2", 9_000, 1_000).await.unwrap();
        assert!(!j.started_before("op-1"), "this run's own starts are its tasks' business");
        // The next run, at a time when op-1 can no longer start.
        let next = StartJournal::open(path.clone(), 6_000).unwrap();
        assert!(next.started_before("op-2") && !next.started_before("op-1"));
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "op-2 9000\n", "rewritten without op-1");
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
    }

    #[test]
    fn starts_queued_while_the_journal_syncs_are_made_durable_by_one_sync() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(START_JOURNAL_FILE);
        let (journal, file, queue) = StartJournal::load(path.clone(), 1_000).unwrap();
        // 50 starts queued before the writer runs: all in the batch it takes first.
        let answers: Vec<_> = (0..50)
            .map(|i| {
                let (durable, synced) = tokio::sync::oneshot::channel();
                let a = Append { id: format!("op-{i}"), forget_after_ms: 9_000, now_ms: 1_000, durable };
                journal.appends.try_send(a).unwrap();
                synced
            })
            .collect();
        drop(journal);
        let file = file.serve(queue);
        assert_eq!(file.syncs, 1, "one sync for the whole batch");
        for mut synced in answers {
            assert_eq!(synced.try_recv().unwrap(), Ok(()), "every start was answered durable");
        }
        let next = StartJournal::open(path, 2_000).unwrap();
        assert!((0..50).all(|i| next.started_before(&format!("op-{i}"))), "every start is on disk");
    }

    #[test]
    fn a_running_journal_rewrites_itself_without_what_may_be_forgotten() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(START_JOURNAL_FILE);
        let (_journal, mut file, _queue) = StartJournal::load(path.clone(), 1_000).unwrap();
        file.compact_after = 3;
        let append = |id: &str, forget_after_ms, now_ms| {
            let (durable, _) = tokio::sync::oneshot::channel();
            Append { id: id.into(), forget_after_ms, now_ms, durable }
        };
        file.append(&[append("op-old", 2_000, 1_000), append("op-live", 9_000, 1_000)]).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "op-old 2000\nop-live 9000\n");
        // The third line reaches the bound, at a time op-old can no longer start.
        file.append(&[append("op-new", 9_000, 3_000)]).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "op-live 9000\nop-new 9000\n", "rewritten");
        file.append(&[append("op-after", 9_000, 3_000)]).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text, "op-live 9000\nop-new 9000\nop-after 9000\n", "appends reach the rewritten file");
        let next = StartJournal::open(path, 4_000).unwrap();
        assert!(["op-live", "op-new", "op-after"].iter().all(|id| next.started_before(id)));
        assert!(!next.started_before("op-old"));
    }
}
