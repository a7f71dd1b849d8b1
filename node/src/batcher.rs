//! The leader's proposal batcher (issue 17, SPEC P1): submits that arrive while earlier
//! proposals are still being committed wait in a bounded queue and go out together, many
//! commands in one Raft entry ([`Command::Batch`]): one append, one replication message and
//! one apply for all of them, as etcd and TiKV batch proposals.
//!
//! Batching is natural: a lone submit is proposed at once, as an entry of its own (the
//! latency of an idle cluster does not change); only while [`PROPOSALS_IN_FLIGHT_MAX`]
//! entries are in flight do arrivals queue, and the next entry takes up to
//! [`BATCH_COMMANDS_MAX`] of them. Each command keeps its own outcome, its own trace id and its
//! own idempotency: the ledger executes a batch command by command, exactly as consecutive
//! entries. A command that carries evidence bytes is never batched (the caller proposes it
//! alone), and a batch is proposed only when every member understands it (ledger version 6);
//! otherwise its commands go out one entry each.

use std::sync::Arc;

use futures::future::BoxFuture;
use tokio::sync::{mpsc, oneshot, Semaphore};
use writ_api::ledger::{BatchedCommand, Command, LedgerRequest, Outcome};

/// Most commands in one entry.
pub const BATCH_COMMANDS_MAX: usize = 64;
/// Most encoded command bytes in one entry (a node caps it further at half its Raft body
/// limit, so that one entry always fits in an append); a command larger than the bound goes
/// alone.
pub const BATCH_BYTES_MAX: usize = 4 << 20;
/// Most entries the batcher has proposed and not yet seen applied.
pub const PROPOSALS_IN_FLIGHT_MAX: usize = 4;
/// Most submits waiting for a proposal (a full queue holds the submitter back).
pub const QUEUE_MAX: usize = 4096;

/// Why a proposal has no outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProposeError {
    /// Nothing was appended: this node does not lead (or cannot take writes yet).
    NotLeader(String),
    /// It may or may not have been committed.
    Unknown(String),
}

/// A proposal's log index and outcome.
pub type Proposed = Result<(u64, Outcome), ProposeError>;

/// What the batcher proposes through (a node's Raft; a fake in tests).
pub trait Propose: Send + Sync + 'static {
    /// Proposes one entry and waits for its outcome.
    fn propose(&self, request: LedgerRequest) -> BoxFuture<'static, Proposed>;
    /// Whether every member understands [`Command::Batch`].
    fn batches_understood(&self) -> BoxFuture<'static, bool>;
}

struct Pending {
    request: LedgerRequest,
    reply: oneshot::Sender<Proposed>,
}

/// A handle on the batching task (it stops when the last handle is dropped).
pub struct Batcher {
    queue: mpsc::Sender<Pending>,
}

impl Batcher {
    /// Starts the batching task over `proposer`, with at most `in_flight` entries in flight and
    /// at most `bytes_max` encoded command bytes in one entry.
    pub fn start(proposer: Arc<dyn Propose>, in_flight: usize, bytes_max: usize) -> Self {
        let (queue, rx) = mpsc::channel(QUEUE_MAX);
        tokio::spawn(run(rx, proposer, Arc::new(Semaphore::new(in_flight.max(1))), bytes_max));
        Batcher { queue }
    }

    /// Proposes `request` (never a batch, never one carrying evidence bytes) with whatever
    /// else is waiting, and returns its own log index and outcome.
    pub async fn propose(&self, request: LedgerRequest) -> Proposed {
        let (reply, answer) = oneshot::channel();
        if self.queue.send(Pending { request, reply }).await.is_err() {
            return Err(ProposeError::NotLeader("the proposal batcher stopped".into()));
        }
        answer.await.unwrap_or_else(|_| Err(ProposeError::Unknown("the proposal was dropped".into())))
    }
}

async fn run(mut rx: mpsc::Receiver<Pending>, proposer: Arc<dyn Propose>, slots: Arc<Semaphore>, bytes_max: usize) {
    // A command that cannot be measured is measured as the whole bound: it goes alone.
    let size = |p: &Pending| writ_api::encoded_len(&p.request.command).unwrap_or(bytes_max);
    // A command that did not fit in the last entry: the first of the next.
    let mut carried: Option<Pending> = None;
    loop {
        let first = match carried.take() {
            Some(p) => p,
            None => match rx.recv().await {
                Some(p) => p,
                None => return,
            },
        };
        // Waiting for a slot is what lets the queue fill while entries are in flight.
        let Ok(slot) = slots.clone().acquire_owned().await else { return };
        // Measured only once a second command arrives: a lone command (the idle case) is not.
        let mut bytes = None;
        let mut batch = vec![first];
        while batch.len() < BATCH_COMMANDS_MAX {
            match rx.try_recv() {
                Ok(p) => {
                    let so_far = *bytes.get_or_insert_with(|| size(&batch[0]));
                    let n = size(&p);
                    if so_far + n > bytes_max {
                        carried = Some(p);
                        break;
                    }
                    bytes = Some(so_far + n);
                    batch.push(p);
                }
                Err(_) => break,
            }
        }
        let proposer = proposer.clone();
        tokio::spawn(async move {
            propose_batch(proposer.as_ref(), batch).await;
            drop(slot);
        });
    }
}

/// Proposes `batch` as one entry (one command: as itself) and answers each submitter.
async fn propose_batch(proposer: &dyn Propose, mut batch: Vec<Pending>) {
    let entry_of = |commands: usize| metrics::histogram!("writ_ledger_batch_commands").record(commands as f64);
    if batch.len() == 1 {
        entry_of(1);
        let p = batch.pop().expect("one");
        let _ = p.reply.send(proposer.propose(p.request).await);
        return;
    }
    if !proposer.batches_understood().await {
        let each = batch.into_iter().map(|p| async move {
            entry_of(1);
            let _ = p.reply.send(proposer.propose(p.request).await);
        });
        futures::future::join_all(each).await;
        return;
    }
    entry_of(batch.len());
    let stamp_ms = batch.iter().map(|p| p.request.stamp_ms).max().unwrap_or(0);
    let mut replies = Vec::with_capacity(batch.len());
    let mut commands = Vec::with_capacity(batch.len());
    for p in batch {
        replies.push(p.reply);
        commands
            .push(BatchedCommand { trace_id: p.request.trace_id, command: Arc::unwrap_or_clone(p.request.command) });
    }
    let request = LedgerRequest { stamp_ms, trace_id: String::new(), command: Command::Batch { commands }.into() };
    match proposer.propose(request).await {
        Ok((index, Outcome::Batch(outcomes))) if outcomes.len() == replies.len() => {
            for (reply, outcome) in replies.into_iter().zip(outcomes) {
                let _ = reply.send(Ok((index, outcome)));
            }
        }
        Ok((index, other)) => {
            // Applied, but not as a batch of this size: a bug; nobody can tell what each did.
            tracing::error!(index, ?other, "a batch entry's outcome does not match its commands");
            for reply in replies {
                let _ = reply.send(Err(ProposeError::Unknown("the batch's outcome does not match it".into())));
            }
        }
        Err(e) => {
            for reply in replies {
                let _ = reply.send(Err(e.clone()));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use writ_api::ledger::Outcome;
    use writ_api::ReasonCode;

    use super::*;

    /// Answers every command with a rejection whose message is its trace id; holds the first
    /// proposal until released.
    struct Fake {
        seen: Mutex<Vec<LedgerRequest>>,
        held: Mutex<Option<oneshot::Receiver<()>>>,
        understood: bool,
        refuse: bool,
    }

    fn answer(trace_id: &str) -> Outcome {
        Outcome::Rejected { reason: ReasonCode::INPUT_INVALID, message: trace_id.into(), revision: 0 }
    }

    impl Propose for Fake {
        fn propose(&self, request: LedgerRequest) -> BoxFuture<'static, Proposed> {
            let held = self.held.lock().unwrap().take();
            self.seen.lock().unwrap().push(request.clone());
            let refuse = self.refuse;
            Box::pin(async move {
                if let Some(release) = held {
                    let _ = release.await;
                }
                match request.command.as_ref() {
                    Command::Batch { .. } if refuse => Err(ProposeError::NotLeader("deposed".into())),
                    Command::Batch { commands } => {
                        Ok((2, Outcome::Batch(commands.iter().map(|c| answer(&c.trace_id)).collect())))
                    }
                    _ => Ok((1, answer(&request.trace_id))),
                }
            })
        }

        fn batches_understood(&self) -> BoxFuture<'static, bool> {
            let understood = self.understood;
            Box::pin(async move { understood })
        }
    }

    fn request(trace_id: &str) -> LedgerRequest {
        LedgerRequest {
            stamp_ms: 1,
            trace_id: trace_id.into(),
            command: Command::ExpireDue { tenant_id: "t".into() }.into(),
        }
    }

    /// One submit is held in flight (one slot) while ten more arrive; returns the fake and
    /// every submitter's answer, in submission order.
    async fn ten_behind_one(understood: bool, refuse: bool) -> (Arc<Fake>, Vec<Proposed>) {
        ten_behind_one_within(understood, refuse, BATCH_BYTES_MAX).await
    }

    /// [`ten_behind_one`] with at most `bytes_max` command bytes per entry.
    async fn ten_behind_one_within(understood: bool, refuse: bool, bytes_max: usize) -> (Arc<Fake>, Vec<Proposed>) {
        let (release, held) = oneshot::channel();
        let fake = Arc::new(Fake { seen: Mutex::default(), held: Mutex::new(Some(held)), understood, refuse });
        let batcher = Arc::new(Batcher::start(fake.clone(), 1, bytes_max));
        let mut answers = Vec::new();
        let b = batcher.clone();
        answers.push(tokio::spawn(async move { b.propose(request("t0")).await }));
        let proposed = |n: usize| fake.seen.lock().unwrap().len() == n;
        for _ in 0..10_000 {
            if proposed(1) {
                break;
            }
            tokio::task::yield_now().await;
        }
        assert!(proposed(1), "the first submit is proposed at once, alone");
        for i in 1..=10 {
            let b = batcher.clone();
            answers.push(tokio::spawn(async move { b.propose(request(&format!("t{i}"))).await }));
        }
        // The batching task holds one (waiting for the slot); nine wait in the queue.
        let waiting = || QUEUE_MAX - batcher.queue.capacity();
        for _ in 0..10_000 {
            if waiting() == 9 {
                break;
            }
            tokio::task::yield_now().await;
        }
        assert_eq!(waiting(), 9);
        release.send(()).unwrap();
        let mut out = Vec::new();
        for a in answers {
            out.push(a.await.unwrap());
        }
        (fake, out)
    }

    #[tokio::test]
    async fn submits_that_arrive_while_an_entry_is_in_flight_share_the_next_and_keep_their_outcomes() {
        let (fake, answers) = ten_behind_one(true, false).await;
        let seen = fake.seen.lock().unwrap().clone();
        assert_eq!(seen.len(), 2, "one entry alone, then one for the ten: {seen:?}");
        assert_eq!(seen[0], request("t0"));
        let Command::Batch { commands } = seen[1].command.as_ref() else { panic!("not a batch: {:?}", seen[1]) };
        let traces: Vec<&str> = commands.iter().map(|c| c.trace_id.as_str()).collect();
        assert_eq!(traces, (1..=10).map(|i| format!("t{i}")).collect::<Vec<_>>(), "in arrival order");
        for (i, a) in answers.into_iter().enumerate() {
            let index = if i == 0 { 1 } else { 2 };
            assert_eq!(a, Ok((index, answer(&format!("t{i}")))), "submit {i} gets its own outcome");
        }
    }

    #[tokio::test]
    async fn an_entry_holds_at_most_its_byte_bound_and_the_command_that_did_not_fit_leads_the_next() {
        let one = writ_api::encoded_len(&request("t1").command).unwrap();
        let (fake, answers) = ten_behind_one_within(true, false, 3 * one).await;
        let seen = fake.seen.lock().unwrap().clone();
        let sizes: Vec<usize> = seen
            .iter()
            .map(|r| match r.command.as_ref() {
                Command::Batch { commands } => commands.len(),
                _ => 1,
            })
            .collect();
        assert_eq!(sizes, vec![1, 3, 3, 3, 1], "{seen:?}");
        let traces: Vec<String> = seen
            .iter()
            .flat_map(|r| match r.command.as_ref() {
                Command::Batch { commands } => commands.iter().map(|c| c.trace_id.clone()).collect(),
                _ => vec![r.trace_id.clone()],
            })
            .collect();
        assert_eq!(traces, (0..=10).map(|i| format!("t{i}")).collect::<Vec<_>>(), "none lost, none reordered");
        for (i, a) in answers.into_iter().enumerate() {
            assert_eq!(a.map(|(_, o)| o), Ok(answer(&format!("t{i}"))), "submit {i} gets its own outcome");
        }
    }

    #[tokio::test]
    async fn without_every_member_understanding_batches_each_command_is_an_entry() {
        let (fake, answers) = ten_behind_one(false, false).await;
        let seen = fake.seen.lock().unwrap().clone();
        assert_eq!(seen.len(), 11);
        assert!(seen.iter().all(|r| !matches!(*r.command, Command::Batch { .. })), "{seen:?}");
        for (i, a) in answers.into_iter().enumerate() {
            assert_eq!(a, Ok((1, answer(&format!("t{i}")))));
        }
    }

    #[tokio::test]
    async fn a_batch_that_was_not_appended_fails_every_submit_in_it_alike() {
        let (_, answers) = ten_behind_one(true, true).await;
        assert!(answers[0].is_ok());
        for a in &answers[1..] {
            assert_eq!(a, &Err(ProposeError::NotLeader("deposed".into())));
        }
    }
}
