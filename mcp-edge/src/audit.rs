//! Request-decision audit at the edge (SPEC D10, E2, S4): denials are committed before the
//! response; allowed reads are group-committed within [`FLUSH_WINDOW`] through a bounded
//! buffer that applies backpressure (never drops), unless the tenant's audit mode is `strict`.
//! Repeats of one denial (same principal, method, name and reason; names told apart up to
//! [`DENIAL_NAMES_MAX`]) within [`DENIAL_WINDOW`]
//! after the first one's commit are counted and recorded as one aggregate decision when the
//! window closes, so a client hammering a refusal does not cost one Raft entry per request.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use writ_api::audit::{AuthorityChainV1, RequestDecisionV1, RequestDecisionV2, DECISIONS_PER_COMMAND_MAX};
use writ_api::dto::{SubmitRequest, SubmitResponse, VOUCHERS_MAX};
use writ_api::ledger::{Command, Outcome};
use writ_api::Rejection;
use writ_client::Ledger;

/// Longest an allowed read's decision waits before it is committed.
pub const FLUSH_WINDOW: Duration = Duration::from_millis(100);
/// How long repeats of a committed denial are counted before their aggregate is recorded.
pub const DENIAL_WINDOW: Duration = Duration::from_secs(10);
/// Most distinct denials counted per window; beyond it each denial is committed on its own.
pub const DENIAL_KEYS_MAX: usize = 10_000;
/// Most distinct names (tools, prompts, resources) one principal's denials of one method and
/// reason are told apart by in a window: past them, any name counts as the same denial — a
/// name is text the client chose, and varying it must not buy a commit per request.
pub const DENIAL_NAMES_MAX: usize = 8;

/// What makes two denials the same: tenant, principal, method, name, reason.
type DenialKey = (String, String, String, Option<String>, Option<writ_api::ReasonCode>);

/// The decision about an authenticated request of `authority` (SPEC D10): `method` and the
/// `name` it named (both truncated to the ledger's bound), refused with `reason` if any, with
/// the client the request came from (the ledger completes the authority chain).
pub fn request_decision(
    trace_id: &str,
    authority: &writ_api::auth::Authority,
    client: &AuthorityChainV1,
    method: &str,
    name: Option<&str>,
    reason: Option<writ_api::ReasonCode>,
) -> RequestDecisionV2 {
    let bounded = |t: &str| writ_api::audit::truncated(t, writ_api::audit::DECISION_FIELD_BYTES_MAX);
    let decision = RequestDecisionV1 {
        trace_id: trace_id.to_string(),
        principal_id: authority.principal_id.clone(),
        token_id: authority.token_id.clone(),
        parent_token_id: authority.parent_token_id.clone(),
        method: bounded(method),
        name: name.map(bounded),
        outcome: if reason.is_some() { "denied" } else { "allowed" }.into(),
        reason,
    };
    RequestDecisionV2 { decision, authority: client.clone() }
}

/// The client a request came from, as an authority chain's client fields: `clientInfo`'s
/// name and version (the 2026 wire's `_meta`, or a 2025 session's `initialize`) and the
/// protocol version it spoke, each truncated to the ledger's bound.
pub fn client(client_info: &serde_json::Value, protocol_version: Option<&str>) -> AuthorityChainV1 {
    let bounded = |v: &serde_json::Value| {
        v.as_str().map(|t| writ_api::audit::truncated(t, writ_api::audit::DECISION_FIELD_BYTES_MAX))
    };
    AuthorityChainV1 {
        client_name: bounded(&client_info["name"]),
        client_version: bounded(&client_info["version"]),
        protocol_version: protocol_version
            .map(|v| writ_api::audit::truncated(v, writ_api::audit::DECISION_FIELD_BYTES_MAX)),
        ..Default::default()
    }
}

/// The client a decoded request came from: `_meta`'s `clientInfo`, and the protocol version
/// of its 2025 session, else of its `MCP-Protocol-Version` header, else of its `_meta`.
pub fn client_of(req: &crate::jsonrpc::Request, headers: &axum::http::HeaderMap) -> AuthorityChainV1 {
    let meta = &req.params()["_meta"];
    let header = crate::header_value(headers, "mcp-protocol-version");
    let version = req.session_version.clone().or(header);
    let version = version.as_deref().or(meta[crate::jsonrpc::META_PROTOCOL_VERSION].as_str());
    client(&meta["io.modelcontextprotocol/clientInfo"], version)
}

/// The client of a request known by its headers only (refused before its body was read): the
/// protocol version it names.
pub fn client_of_headers(headers: &axum::http::HeaderMap) -> AuthorityChainV1 {
    client(&serde_json::Value::Null, crate::header_value(headers, "mcp-protocol-version").as_deref())
}

/// `command` carrying `decision` (`Command::AuditedV2`): one log entry records both, and the
/// ledger writes whether the command was allowed or refused.
pub fn with_decision(decision: RequestDecisionV2, command: Command) -> Command {
    Command::AuditedV2 { decision, command: Box::new(command) }
}

/// How many denials of `key`'s tenant, principal, method and reason this window counts under
/// a name of their own.
fn named_denials(repeats: &BTreeMap<DenialKey, u64>, key: &DenialKey) -> usize {
    let (tenant, principal, method, _, reason) = key;
    let from = (tenant.clone(), principal.clone(), method.clone(), None, None);
    repeats
        .range(from..)
        .take_while(|(k, _)| (&k.0, &k.1, &k.2) == (tenant, principal, method))
        .filter(|(k, _)| k.3.is_some() && k.4 == *reason)
        .count()
}

/// Decisions buffered before senders wait.
pub const BUFFER_DECISIONS: usize = 4096;
/// Longest a shutdown waits for buffered decisions to be committed: a ledger that is gone
/// must not keep an edge from exiting on SIGTERM.
pub const SHUTDOWN_FLUSH_MAX: Duration = Duration::from_secs(5);

/// The credential of the request a decision is about, which vouches for its principal at the
/// node (`writ_api::grant::vouched`); `None` for a caller that is no principal.
pub type Voucher = Option<writ_api::grant::Credential>;

enum Queued {
    Decision(Box<(String, RequestDecisionV2, Voucher)>),
    /// Commit everything queued before this, then answer.
    Flush(tokio::sync::oneshot::Sender<()>),
}

/// Writes decisions to the ledger.
#[derive(Clone)]
pub struct AuditSink {
    ledger: Arc<dyn Ledger>,
    buffered: mpsc::Sender<Queued>,
    /// Denials committed in this window, with how often each repeated since.
    repeats: Arc<std::sync::Mutex<BTreeMap<DenialKey, u64>>>,
    /// The latest voucher of each principal whose denials repeated in this window.
    repeat_vouchers: Arc<std::sync::Mutex<BTreeMap<(String, String), writ_api::grant::Credential>>>,
}

impl AuditSink {
    /// Starts the group-commit task (it ends, after a last flush, when every sink is dropped).
    pub fn start(ledger: Arc<dyn Ledger>) -> AuditSink {
        let (tx, rx) = mpsc::channel(BUFFER_DECISIONS);
        tokio::spawn(flusher(ledger.clone(), rx));
        let sink = AuditSink { ledger, buffered: tx, repeats: Default::default(), repeat_vouchers: Default::default() };
        let weak = sink.downgrade();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(DENIAL_WINDOW);
            tick.tick().await;
            loop {
                tick.tick().await;
                let Some(sink) = weak.upgrade() else { return };
                sink.record_repeats().await;
            }
        });
        sink
    }

    fn downgrade(&self) -> WeakSink {
        WeakSink {
            ledger: Arc::downgrade(&self.ledger),
            buffered: self.buffered.downgrade(),
            repeats: Arc::downgrade(&self.repeats),
            repeat_vouchers: Arc::downgrade(&self.repeat_vouchers),
        }
    }

    /// Commits a denial before the response, unless the same denial was committed in this
    /// window: then it is only counted, for the window's aggregate.
    pub async fn commit_denial(
        &self,
        tenant_id: &str,
        decision: RequestDecisionV2,
        voucher: Voucher,
    ) -> Result<(), Rejection> {
        let d = &decision.decision;
        let mut key = (tenant_id.to_string(), d.principal_id.clone(), d.method.clone(), d.name.clone(), d.reason);
        {
            let mut repeats = self.repeats.lock().unwrap_or_else(|e| e.into_inner());
            if !repeats.contains_key(&key) && named_denials(&repeats, &key) >= DENIAL_NAMES_MAX {
                key.3 = None;
            }
            if let Some(n) = repeats.get_mut(&key) {
                *n += 1;
                if let Some(v) = voucher {
                    let mut vouchers = self.repeat_vouchers.lock().unwrap_or_else(|e| e.into_inner());
                    vouchers.insert((key.0.clone(), key.1.clone()), v);
                }
                return Ok(());
            }
            // Taken before the commit: denials arriving while it is under way are repeats.
            if repeats.len() < DENIAL_KEYS_MAX {
                repeats.insert(key.clone(), 0);
            }
        }
        let committed = self.commit(tenant_id, decision, voucher).await;
        if committed.is_err() {
            // Not on record: the next such denial is committed again, unless some were counted.
            let mut repeats = self.repeats.lock().unwrap_or_else(|e| e.into_inner());
            if repeats.get(&key) == Some(&0) {
                repeats.remove(&key);
            }
        }
        committed
    }

    /// Closes the window: one aggregate decision for each denial that repeated in it.
    async fn record_repeats(&self) {
        let window = std::mem::take(&mut *self.repeats.lock().unwrap_or_else(|e| e.into_inner()));
        let mut vouchers = std::mem::take(&mut *self.repeat_vouchers.lock().unwrap_or_else(|e| e.into_inner()));
        for ((tenant_id, principal_id, method, name, reason), n) in window {
            if n == 0 {
                continue;
            }
            let what =
                format!("{} repeated {n}× within {} s", name.as_deref().unwrap_or(&method), DENIAL_WINDOW.as_secs());
            let voucher = vouchers.remove(&(tenant_id.clone(), principal_id.clone()));
            let decision = RequestDecisionV1 {
                trace_id: format!("repeats-{}", writ_client::now_ms()),
                principal_id,
                token_id: None,
                parent_token_id: None,
                method,
                name: Some(writ_api::audit::truncated(&what, writ_api::audit::DECISION_FIELD_BYTES_MAX)),
                outcome: "denied".into(),
                reason,
            };
            let decision = RequestDecisionV2 { decision, authority: AuthorityChainV1::default() };
            self.buffer(&tenant_id, decision, voucher).await;
        }
    }

    /// Commits one decision now (denials, effectful calls, strict tenants).
    pub async fn commit(
        &self,
        tenant_id: &str,
        decision: RequestDecisionV2,
        voucher: Voucher,
    ) -> Result<(), Rejection> {
        submit(self.ledger.as_ref(), tenant_id, &[(decision, voucher)]).await
    }

    /// Queues an allowed read's decision; waits (backpressure) when the buffer is full.
    pub async fn buffer(&self, tenant_id: &str, decision: RequestDecisionV2, voucher: Voucher) {
        if self.buffered.send(Queued::Decision(Box::new((tenant_id.to_string(), decision, voucher)))).await.is_err() {
            tracing::error!("audit flusher is gone");
        }
    }

    /// Returns once every decision buffered before the call is committed, or after `limit`
    /// (true when everything was committed). Used at shutdown with [`SHUTDOWN_FLUSH_MAX`].
    pub async fn flush(&self, limit: Duration) -> bool {
        let (tx, rx) = tokio::sync::oneshot::channel();
        // The window's counted repeats first, within the same limit (a full buffer waits).
        let flushed = async {
            self.record_repeats().await;
            self.buffered.send(Queued::Flush(tx)).await.is_ok() && rx.await.is_ok()
        };
        match tokio::time::timeout(limit, flushed).await {
            Ok(done) => done,
            Err(_) => {
                tracing::error!(
                    limit_s = limit.as_secs(),
                    "buffered audit decisions not committed: the ledger did not answer in time"
                );
                false
            }
        }
    }
}

/// An [`AuditSink`] that does not keep its flusher alive.
struct WeakSink {
    ledger: std::sync::Weak<dyn Ledger>,
    buffered: mpsc::WeakSender<Queued>,
    repeats: std::sync::Weak<std::sync::Mutex<BTreeMap<DenialKey, u64>>>,
    repeat_vouchers: std::sync::Weak<std::sync::Mutex<BTreeMap<(String, String), writ_api::grant::Credential>>>,
}

impl WeakSink {
    fn upgrade(&self) -> Option<AuditSink> {
        Some(AuditSink {
            ledger: self.ledger.upgrade()?,
            buffered: self.buffered.upgrade()?,
            repeats: self.repeats.upgrade()?,
            repeat_vouchers: self.repeat_vouchers.upgrade()?,
        })
    }
}

/// Records `decisions` with one voucher per principal they name.
async fn submit(
    ledger: &dyn Ledger,
    tenant_id: &str,
    decisions: &[(RequestDecisionV2, Voucher)],
) -> Result<(), Rejection> {
    let trace_id = decisions.first().map(|(d, _)| d.decision.trace_id.clone()).unwrap_or_default();
    let vouchers: BTreeMap<&str, &writ_api::grant::Credential> =
        decisions.iter().filter_map(|(d, v)| Some((d.decision.principal_id.as_str(), v.as_ref()?))).collect();
    let mut request = SubmitRequest::new(
        trace_id,
        Command::RecordDecisionsV2 {
            tenant_id: tenant_id.to_string(),
            decisions: decisions.iter().map(|(d, _)| d.clone()).collect(),
        },
    );
    request.vouchers = vouchers.into_values().cloned().collect();
    match ledger.submit(request).await? {
        SubmitResponse { outcome: Outcome::Applied { .. }, .. } => Ok(()),
        SubmitResponse { outcome: Outcome::Rejected { reason, message, .. }, .. } => {
            Err(Rejection::new(reason, message))
        }
        _ => Err(Rejection::new(writ_api::ReasonCode::INTERNAL, "unexpected audit outcome")),
    }
}

/// Collects decisions for up to [`FLUSH_WINDOW`] after the first (or until a flush request),
/// then commits one command per tenant. A failed commit is retried (the decisions stay
/// buffered) so none is lost.
async fn flusher(ledger: Arc<dyn Ledger>, mut rx: mpsc::Receiver<Queued>) {
    while let Some(first) = rx.recv().await {
        let mut batch: BTreeMap<String, Vec<(RequestDecisionV2, Voucher)>> = BTreeMap::new();
        let mut waiters = Vec::new();
        let mut take = |q: Queued, batch: &mut BTreeMap<String, Vec<(RequestDecisionV2, Voucher)>>| match q {
            Queued::Decision(queued) => {
                let (t, d, v) = *queued;
                batch.entry(t).or_default().push((d, v));
                true
            }
            Queued::Flush(w) => {
                waiters.push(w);
                false
            }
        };
        if take(first, &mut batch) {
            let deadline = tokio::time::Instant::now() + FLUSH_WINDOW;
            while let Ok(Some(q)) = tokio::time::timeout_at(deadline, rx.recv()).await {
                if !take(q, &mut batch) {
                    break;
                }
            }
        }
        for (tenant, decisions) in batch {
            for chunk in chunks(&decisions) {
                commit_retrying(ledger.as_ref(), &tenant, chunk).await;
            }
        }
        for w in waiters {
            let _ = w.send(());
        }
    }
}

/// `decisions` in commands of at most [`DECISIONS_PER_COMMAND_MAX`] decisions naming at most
/// [`VOUCHERS_MAX`] principals.
fn chunks(decisions: &[(RequestDecisionV2, Voucher)]) -> Vec<&[(RequestDecisionV2, Voucher)]> {
    let mut out = Vec::new();
    let (mut start, mut principals) = (0, std::collections::BTreeSet::new());
    for (i, (d, _)) in decisions.iter().enumerate() {
        let full = i - start == DECISIONS_PER_COMMAND_MAX
            || (!principals.contains(d.decision.principal_id.as_str()) && principals.len() == VOUCHERS_MAX);
        if full {
            out.push(&decisions[start..i]);
            (start, principals) = (i, Default::default());
        }
        principals.insert(d.decision.principal_id.as_str());
    }
    if start < decisions.len() {
        out.push(&decisions[start..]);
    }
    out
}

async fn commit_retrying(ledger: &dyn Ledger, tenant: &str, chunk: &[(RequestDecisionV2, Voucher)]) {
    let mut delay = Duration::from_millis(50);
    loop {
        match submit(ledger, tenant, chunk).await {
            Ok(()) => return,
            Err(e) if e.reason == writ_api::ReasonCode::LEDGER_UNAVAILABLE => {
                tracing::warn!(message = %e.message, "audit flush failed; retrying");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(2));
            }
            Err(e) => {
                tracing::error!(reason = %e.reason, message = %e.message, "audit decisions rejected");
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A client that varies the tool name of a refused call gets one commit per name only up
    /// to `DENIAL_NAMES_MAX` in a window; every other name is counted with the rest.
    #[tokio::test]
    async fn varying_names_of_one_denial_cost_a_bounded_number_of_commits() {
        let ledger = Arc::new(writ_client::memory::MemoryLedger::new());
        let tenant = Command::CreateTenant { tenant_id: "t".into(), name: "acme".into(), display_name: None };
        ledger.submit(SubmitRequest::new("setup", tenant)).await.expect("tenant");
        let spec = writ_api::principal::PrincipalSpecV1 {
            principal_id: "p".into(),
            name: "agent".into(),
            kind: writ_api::principal::PrincipalKind::Agent,
            preset: Some(writ_api::principal::RolePreset::ReadOnly),
            scopes: Default::default(),
            metadata: Default::default(),
        };
        let principal = Command::CreatePrincipal { tenant_id: "t".into(), spec };
        let created = ledger.submit(SubmitRequest::new("setup", principal)).await.expect("principal");
        assert!(matches!(created.outcome, Outcome::Applied { .. }), "{:?}", created.outcome);
        let sink = AuditSink::start(ledger.clone());
        let records = || ledger.with_state(|s| s.audit.get("t").map_or(0, |a| a.next_seq));
        let before = records();
        for i in 0..200 {
            let d = RequestDecisionV1 {
                trace_id: format!("tr-{i}"),
                principal_id: "p".into(),
                token_id: None,
                parent_token_id: None,
                method: "tools/call".into(),
                name: Some(format!("tool-{i}")),
                outcome: "denied".into(),
                reason: Some(writ_api::ReasonCode::TOOL_NOT_FOUND),
            };
            let d = RequestDecisionV2 { decision: d, authority: client(&serde_json::json!({"name": "c"}), None) };
            sink.commit_denial("t", d, None).await.expect("denial");
        }
        assert_eq!(records() - before, DENIAL_NAMES_MAX as u64 + 1, "one commit per name up to the cap, then one");
    }

    /// A batch is cut where a command would exceed the decisions or the vouchers it may carry.
    #[test]
    fn batches_are_cut_at_the_decisions_and_vouchers_a_command_carries() {
        let decision = |p: usize| RequestDecisionV2 {
            decision: RequestDecisionV1 {
                trace_id: "t".into(),
                principal_id: format!("p-{p}"),
                token_id: None,
                parent_token_id: None,
                method: "tools/list".into(),
                name: None,
                outcome: "allowed".into(),
                reason: None,
            },
            authority: AuthorityChainV1::default(),
        };
        let many: Vec<(RequestDecisionV2, Voucher)> = (0..3000).map(|i| (decision(i % 100), None)).collect();
        let cut = chunks(&many);
        assert_eq!(cut.iter().map(|c| c.len()).sum::<usize>(), 3000, "nothing lost");
        for c in &cut {
            let principals: std::collections::BTreeSet<_> = c.iter().map(|(d, _)| &d.decision.principal_id).collect();
            assert!(c.len() <= DECISIONS_PER_COMMAND_MAX && principals.len() <= VOUCHERS_MAX);
        }
        let one: Vec<(RequestDecisionV2, Voucher)> = (0..2500).map(|_| (decision(1), None)).collect();
        assert_eq!(chunks(&one).iter().map(|c| c.len()).collect::<Vec<_>>(), [1000, 1000, 500]);
    }
}
