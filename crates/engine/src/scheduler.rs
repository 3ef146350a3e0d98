//! The per-model scheduler: one worker thread owns the model's evaluation session; requests are
//! prepared (rendered, tokenized) on the caller's side and queued here as jobs.
//!
//! Invariants:
//! - Admission is decided at submit time: over the queued-jobs or queued-tokens limit a job is
//!   refused at once (`Overloaded`), never left waiting without bound.
//! - The worker takes every queued job that fits the forward token budget into one forward
//!   (cross-request batching). A job whose deadline passed before its forward starts is not
//!   run; a job whose caller went away (the reply receiver dropped) is not run.
//! - Every job gets exactly one reply.
//! - A caller with a deadline is answered by it (`DeadlineExceeded`), started or not: the
//!   deadline bounds the wait, not the forward, which runs on unheard.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender, TrySendError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use crate::backend::{Backend, BackendError, Node, RootLogits, Token};

/// Limits of one model's queue and forwards.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct SchedulerConfig {
    pub max_queued_jobs: usize,
    pub max_queued_tokens: usize,
    /// Most tokens one forward evaluates (several jobs share a forward up to this).
    pub forward_tokens: usize,
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        SchedulerConfig {
            max_queued_jobs: 256,
            max_queued_tokens: 262_144,
            forward_tokens: 4096,
        }
    }
}

/// Why a job produced no logits.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum JobError {
    #[error("the model is overloaded")]
    Overloaded,
    #[error("the deadline passed before the work started")]
    DeadlineExceeded,
    /// The forward ran out of context memory; `shared` when other requests were in it.
    #[error("the forward ran out of memory")]
    OutOfMemory { shared: bool },
    #[error("the forward failed: {0}")]
    Forward(String),
    #[error("the model's worker is not running")]
    Unavailable,
}

/// Logits and timings of one finished job.
#[derive(Debug)]
pub struct JobOutput {
    pub logits: Vec<RootLogits>,
    pub queue: Duration,
    pub forward: Duration,
    /// How many jobs shared the forward.
    pub batch_jobs: usize,
    /// Tokens the shared forward evaluated.
    pub batch_tokens: usize,
    /// Tokens of this job the session's prefix cache answered.
    pub cached_tokens: usize,
}

struct Job {
    roots: Vec<Node>,
    tokens: usize,
    deadline: Option<Instant>,
    enqueued: Instant,
    reply: oneshot::Sender<Result<JobOutput, JobError>>,
}

/// Shared counters of a worker, for admission, health and metrics.
#[derive(Debug, Default)]
pub struct WorkerStatus {
    queued_jobs: AtomicUsize,
    queued_tokens: AtomicUsize,
    /// Milliseconds since `epoch` when the running forward started; 0 when idle.
    forward_since_ms: AtomicU64,
    forwards: AtomicU64,
    cancelled: AtomicU64,
    /// Tokens the prefix cache answered, in all.
    cached_tokens: AtomicU64,
    /// Bytes the session's prefix cache held after the last forward.
    cache_bytes: AtomicUsize,
    epoch: std::sync::OnceLock<Instant>,
}

impl WorkerStatus {
    fn epoch(&self) -> Instant {
        *self.epoch.get_or_init(Instant::now)
    }
    pub fn queued_jobs(&self) -> usize {
        self.queued_jobs.load(Ordering::Relaxed)
    }
    pub fn queued_tokens(&self) -> usize {
        self.queued_tokens.load(Ordering::Relaxed)
    }
    /// How long the running forward has run, if one runs.
    pub fn forward_running_for(&self) -> Option<Duration> {
        let since = self.forward_since_ms.load(Ordering::Relaxed);
        if since == 0 {
            return None;
        }
        let now = self.epoch().elapsed().as_millis() as u64;
        Some(Duration::from_millis(now.saturating_sub(since)))
    }
    pub fn forwards(&self) -> u64 {
        self.forwards.load(Ordering::Relaxed)
    }
    /// Jobs dropped because their caller went away.
    pub fn cancelled(&self) -> u64 {
        self.cancelled.load(Ordering::Relaxed)
    }
    /// Tokens the prefix cache answered since the worker started.
    pub fn cached_tokens(&self) -> u64 {
        self.cached_tokens.load(Ordering::Relaxed)
    }
    /// Bytes the prefix cache holds.
    pub fn cache_bytes(&self) -> usize {
        self.cache_bytes.load(Ordering::Relaxed)
    }
}

/// Handle to a model's worker thread.
pub struct Worker {
    tx: SyncSender<Job>,
    status: Arc<WorkerStatus>,
    config: SchedulerConfig,
}

impl Worker {
    /// Start the worker thread: it opens the backend's session, evaluates `prefix` once, and
    /// then serves jobs. Returns once the prefix is evaluated (or failed).
    pub fn start(
        name: &str,
        backend: Arc<dyn Backend>,
        prefix: Vec<Token>,
        config: SchedulerConfig,
    ) -> Result<Worker, BackendError> {
        let (tx, rx) = mpsc::sync_channel::<Job>(config.max_queued_jobs.max(1));
        let status = Arc::new(WorkerStatus::default());
        status.epoch();
        let (ready_tx, ready_rx) = mpsc::channel::<Result<(), BackendError>>();
        let thread_status = status.clone();
        let budget = config.forward_tokens;
        std::thread::Builder::new()
            .name(format!("model-{name}"))
            .spawn(move || {
                let mut session = match backend.session() {
                    Ok(s) => s,
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                        return;
                    }
                };
                if let Err(e) = session.load_prefix(&prefix) {
                    let _ = ready_tx.send(Err(e));
                    return;
                }
                let _ = ready_tx.send(Ok(()));
                run(&mut *session, rx, &thread_status, budget);
            })
            .map_err(|e| BackendError::Load(format!("cannot start the worker thread: {e}")))?;
        ready_rx
            .recv()
            .map_err(|_| BackendError::Load("the worker thread ended during start".into()))??;
        Ok(Worker { tx, status, config })
    }

    pub fn status(&self) -> &Arc<WorkerStatus> {
        &self.status
    }

    pub fn config(&self) -> &SchedulerConfig {
        &self.config
    }

    /// Queue `roots` for evaluation and wait for their logits. Dropping the returned future
    /// cancels the job if it has not started.
    pub async fn submit(
        &self,
        roots: Vec<Node>,
        deadline: Option<Instant>,
    ) -> Result<JobOutput, JobError> {
        let tokens: usize = roots.iter().map(Node::total_tokens).sum();
        let queued = self
            .status
            .queued_tokens
            .fetch_add(tokens, Ordering::AcqRel);
        if queued + tokens > self.config.max_queued_tokens && queued > 0 {
            self.status
                .queued_tokens
                .fetch_sub(tokens, Ordering::AcqRel);
            return Err(JobError::Overloaded);
        }
        let (reply, rx) = oneshot::channel();
        let job = Job {
            roots,
            tokens,
            deadline,
            enqueued: Instant::now(),
            reply,
        };
        // Counted before it is sent: the worker may take the job (and uncount it) before
        // this thread runs again, and the count must never wrap below zero.
        self.status.queued_jobs.fetch_add(1, Ordering::AcqRel);
        if let Err(e) = self.tx.try_send(job) {
            self.status.queued_jobs.fetch_sub(1, Ordering::AcqRel);
            self.status
                .queued_tokens
                .fetch_sub(tokens, Ordering::AcqRel);
            return Err(match e {
                TrySendError::Full(_) => JobError::Overloaded,
                TrySendError::Disconnected(_) => JobError::Unavailable,
            });
        }
        // The deadline bounds the caller's wait: past it the caller is answered, and the job,
        // its receiver gone, is not run (one already running finishes unheard).
        let answered = match deadline {
            Some(d) => tokio::time::timeout_at(tokio::time::Instant::from_std(d), rx)
                .await
                .map_err(|_| JobError::DeadlineExceeded)?,
            None => rx.await,
        };
        answered.unwrap_or(Err(JobError::Unavailable))
    }
}

fn dequeue(status: &WorkerStatus, job: &Job) {
    status.queued_jobs.fetch_sub(1, Ordering::AcqRel);
    status.queued_tokens.fetch_sub(job.tokens, Ordering::AcqRel);
}

fn run(
    session: &mut dyn crate::backend::Session,
    rx: Receiver<Job>,
    status: &WorkerStatus,
    budget: usize,
) {
    let mut carry: Option<Job> = None;
    loop {
        let first = match carry.take() {
            Some(j) => j,
            None => match rx.recv() {
                Ok(j) => j,
                Err(_) => return,
            },
        };
        let mut batch = vec![first];
        let mut tokens = batch[0].tokens;
        while tokens < budget {
            match rx.try_recv() {
                Ok(j) => {
                    if tokens + j.tokens > budget {
                        carry = Some(j);
                        break;
                    }
                    tokens += j.tokens;
                    batch.push(j);
                }
                Err(_) => break,
            }
        }
        let now = Instant::now();
        let mut live = Vec::with_capacity(batch.len());
        for job in batch {
            dequeue(status, &job);
            if job.reply.is_closed() {
                status.cancelled.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            if job.deadline.is_some_and(|d| d <= now) {
                let _ = job.reply.send(Err(JobError::DeadlineExceeded));
                continue;
            }
            live.push(job);
        }
        if live.is_empty() {
            continue;
        }
        let roots: Vec<&Node> = live.iter().flat_map(|j| j.roots.iter()).collect();
        let start = Instant::now();
        status.forward_since_ms.store(
            start.duration_since(status.epoch()).as_millis().max(1) as u64,
            Ordering::Relaxed,
        );
        let result = session.forward(&roots);
        status.forward_since_ms.store(0, Ordering::Relaxed);
        status.forwards.fetch_add(1, Ordering::Relaxed);
        status
            .cache_bytes
            .store(session.cache_bytes(), Ordering::Relaxed);
        let forward = start.elapsed();
        let cached = session.cached_tokens().to_vec();
        let shared = live.len() > 1;
        match result {
            Ok(mut logits) if logits.len() == roots.len() => {
                let batch_jobs = live.len();
                let batch_tokens: usize = live.iter().map(|j| j.tokens).sum();
                // Hand each job its roots' logits, in order.
                let mut rest = logits.drain(..);
                let mut first = 0;
                for job in live {
                    let mine: Vec<RootLogits> = rest.by_ref().take(job.roots.len()).collect();
                    let cached_tokens: usize = cached
                        .get(first..first + job.roots.len())
                        .map_or(0, |c| c.iter().sum());
                    first += job.roots.len();
                    status
                        .cached_tokens
                        .fetch_add(cached_tokens as u64, Ordering::Relaxed);
                    let _ = job.reply.send(Ok(JobOutput {
                        logits: mine,
                        queue: start.duration_since(job.enqueued),
                        forward,
                        batch_jobs,
                        batch_tokens,
                        cached_tokens,
                    }));
                }
            }
            Ok(_) => {
                for job in live {
                    let _ = job.reply.send(Err(JobError::Forward(
                        "the backend returned the wrong number of roots".into(),
                    )));
                }
            }
            Err(BackendError::OutOfMemory(_)) => {
                for job in live {
                    let _ = job.reply.send(Err(JobError::OutOfMemory { shared }));
                }
            }
            Err(e) => {
                for job in live {
                    let _ = job.reply.send(Err(JobError::Forward(e.to_string())));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::{BackendInfo, Session};
    use crate::budget::Vocab;

    /// A backend whose every forward takes `slow`.
    struct Slow {
        info: BackendInfo,
        slow: Duration,
    }

    impl Vocab for Slow {
        fn tokenize_text(&self, text: &str) -> Result<Vec<Token>, BackendError> {
            Ok(text.bytes().map(Token::from).collect())
        }
        fn token_bytes(&self, token: Token) -> Vec<u8> {
            vec![token as u8]
        }
        fn vocab_size(&self) -> usize {
            256
        }
    }

    impl Backend for Slow {
        fn info(&self) -> &BackendInfo {
            &self.info
        }
        fn tokenize(&self, text: &str, _special: bool) -> Result<Vec<Token>, BackendError> {
            self.tokenize_text(text)
        }
        fn token_text(&self, token: Token) -> String {
            (token as u8 as char).to_string()
        }
        fn session(&self) -> Result<Box<dyn Session + '_>, BackendError> {
            Ok(Box::new(SlowSession(self.slow)))
        }
    }

    struct SlowSession(Duration);

    impl Session for SlowSession {
        fn load_prefix(&mut self, _tokens: &[Token]) -> Result<(), BackendError> {
            Ok(())
        }
        fn forward(&mut self, roots: &[&Node]) -> Result<Vec<RootLogits>, BackendError> {
            std::thread::sleep(self.0);
            Ok(roots.iter().map(|_| Vec::new()).collect())
        }
    }

    fn worker(slow: Duration) -> Worker {
        let info = BackendInfo {
            engine: "slow".into(),
            device: "cpu".into(),
            dtype: "f32".into(),
            context_tokens: 4096,
            max_sequences: 4,
            trained_context: 4096,
            threads: 1,
            flash_attention: None,
            micro_batch_tokens: None,
            flash_attention_probe: None,
            prefix_cache_bytes: None,
            hidden_size: None,
        };
        let backend = Arc::new(Slow { info, slow });
        Worker::start("slow", backend, Vec::new(), SchedulerConfig::default())
            .expect("the slow worker starts")
    }

    fn node() -> Node {
        Node {
            tokens: vec![1, 2, 3],
            ..Node::default()
        }
    }

    #[test]
    fn a_caller_is_answered_at_its_deadline_while_a_forward_runs_on() {
        let w = worker(Duration::from_secs(3));
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("a runtime");
        rt.block_on(async {
            // The first job holds the model for seconds; the second, queued behind it, is
            // answered at its deadline, before the forward it waits for has ended.
            let mut first = std::pin::pin!(w.submit(vec![node()], None));
            let late = async {
                tokio::time::sleep(Duration::from_millis(50)).await;
                let deadline = Instant::now() + Duration::from_millis(200);
                w.submit(vec![node()], Some(deadline)).await
            };
            tokio::select! {
                late = late => {
                    assert!(matches!(late, Err(JobError::DeadlineExceeded)), "{late:?}");
                }
                _ = &mut first => panic!("the forward ended before the deadline answered"),
            }
            assert!(
                first.await.is_ok(),
                "the running forward still answers its own caller"
            );
        });
    }
}
