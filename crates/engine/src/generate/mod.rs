//! Text generation with continuous batching: one thread owns a model's generation context
//! (its own KV streams on the weights the decision worker also reads); requests are rendered
//! and tokenized on the caller's side and queued here.
//!
//! Invariants:
//! - Every running generation advances in every step: a step is one `Generator::step` that
//!   holds one token of each decoding slot, plus prompt tokens of the slots still reading
//!   their prompts up to `prefill_chunk` tokens in all, so a long prompt that joins never
//!   stalls the running streams for more than a chunk.
//! - New requests join between steps, in arrival order, as slots free up; an idle thread
//!   waits `GATHER` after a first request for others sent with it. Over
//!   `max_waiting` queued requests a request is refused at once (`Overloaded`).
//! - A request whose receiver is gone (the client went away) is dropped before the next
//!   step: its slot is freed, no more tokens are computed for it.
//! - Every request gets exactly one terminal event (`Done` or `Failed`).

pub mod chat;
pub mod text;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender, TrySendError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};

use crate::backend::{Backend, BackendError, Feed, Generator, Sampled, Sampling, Token};
use crate::scheduler::JobError;

/// How long an idle generation thread waits for companions of a first request.
const GATHER: Duration = Duration::from_millis(8);

/// Limits of a model's generation context.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct GenerateConfig {
    /// Generations running at once (KV streams).
    pub sequences: u32,
    /// Tokens one generation holds (prompt and output).
    pub context_tokens: u32,
    /// Most prompt tokens one step reads while other generations decode.
    pub prefill_chunk: usize,
    /// Requests waiting for a slot before new ones are refused.
    pub max_waiting: usize,
}

impl Default for GenerateConfig {
    fn default() -> Self {
        GenerateConfig {
            sequences: 4,
            context_tokens: 4096,
            prefill_chunk: 256,
            max_waiting: 64,
        }
    }
}

/// One generation to run.
#[derive(Debug, Clone)]
pub struct GenerateJob {
    pub prompt: Vec<Token>,
    /// Most tokens to generate (the slot's room caps it too).
    pub max_tokens: usize,
    pub sampling: Sampling,
    /// Texts that end the generation; they are not part of the output.
    pub stop: Vec<String>,
    pub deadline: Option<Instant>,
}

/// A generated token's log-probability, with its text.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenInfo {
    pub text: String,
    pub bytes: Vec<u8>,
    pub logprob: f32,
    pub top: Vec<(String, Vec<u8>, f32)>,
}

/// Why a generation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FinishReason {
    /// An end-of-generation token or a stop sequence.
    Stop,
    /// `max_tokens` or the slot's room.
    Length,
}

impl FinishReason {
    pub fn word(self) -> &'static str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::Length => "length",
        }
    }
}

/// The end of a generation.
#[derive(Debug, Clone, PartialEq)]
pub struct Finish {
    pub reason: FinishReason,
    pub prompt_tokens: usize,
    /// Prompt tokens whose cells the slot already held (not evaluated again).
    pub cached_tokens: usize,
    pub completion_tokens: usize,
    /// From queueing to the first generated token.
    pub ttft: Duration,
    /// From queueing to the end.
    pub total: Duration,
}

impl Finish {
    /// Mean time per output token after the first.
    pub fn tpot(&self) -> Duration {
        match self.completion_tokens {
            0 | 1 => Duration::ZERO,
            n => self.total.saturating_sub(self.ttft) / (n as u32 - 1),
        }
    }
}

/// What a generation sends its caller.
#[derive(Debug, Clone, PartialEq)]
pub enum GenEvent {
    /// New output text (possibly empty when only log-probabilities are new).
    Delta {
        text: String,
        tokens: Vec<TokenInfo>,
    },
    Done(Finish),
    Failed(JobError),
}

/// Counters of a generation worker, for metrics.
#[derive(Debug, Default)]
pub struct GenerateStatus {
    waiting: AtomicUsize,
    active: AtomicUsize,
    generated: AtomicU64,
    cancelled: AtomicU64,
    steps: AtomicU64,
    /// Prompt tokens a slot already held, in all.
    cached: AtomicU64,
}

impl GenerateStatus {
    pub fn waiting(&self) -> usize {
        self.waiting.load(Ordering::Relaxed)
    }
    /// Generations holding a slot.
    pub fn active(&self) -> usize {
        self.active.load(Ordering::Relaxed)
    }
    pub fn generated_tokens(&self) -> u64 {
        self.generated.load(Ordering::Relaxed)
    }
    /// Generations dropped because their caller went away.
    pub fn cancelled(&self) -> u64 {
        self.cancelled.load(Ordering::Relaxed)
    }
    /// Prompt tokens a slot already held since the worker started.
    pub fn cached_tokens(&self) -> u64 {
        self.cached.load(Ordering::Relaxed)
    }
    pub fn steps(&self) -> u64 {
        self.steps.load(Ordering::Relaxed)
    }
}

struct Queued {
    job: GenerateJob,
    enqueued: Instant,
    tx: UnboundedSender<GenEvent>,
}

/// Handle to a model's generation thread.
pub struct Generation {
    tx: SyncSender<Queued>,
    status: Arc<GenerateStatus>,
    config: GenerateConfig,
    slot_tokens: usize,
}

impl Generation {
    /// Start the generation thread with its own context on `backend`'s weights.
    pub fn start(
        name: &str,
        backend: Arc<dyn Backend>,
        config: GenerateConfig,
    ) -> Result<Generation, BackendError> {
        let (tx, rx) = mpsc::sync_channel::<Queued>(config.max_waiting.max(1));
        let status = Arc::new(GenerateStatus::default());
        let (ready_tx, ready_rx) = mpsc::channel::<Result<usize, BackendError>>();
        let thread_status = status.clone();
        std::thread::Builder::new()
            .name(format!("generate-{name}"))
            .spawn(move || {
                let mut gen = match backend.generator(config.sequences, config.context_tokens) {
                    Ok(g) => g,
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                        return;
                    }
                };
                let _ = ready_tx.send(Ok(gen.slot_tokens()));
                Loop::new(&*backend, &mut *gen, &thread_status, config).run(rx);
            })
            .map_err(|e| BackendError::Load(format!("cannot start the generation thread: {e}")))?;
        let slot_tokens = ready_rx
            .recv()
            .map_err(|_| BackendError::Load("the generation thread ended during start".into()))??;
        Ok(Generation {
            tx,
            status,
            config,
            slot_tokens,
        })
    }

    pub fn status(&self) -> &Arc<GenerateStatus> {
        &self.status
    }

    pub fn config(&self) -> &GenerateConfig {
        &self.config
    }

    /// Tokens one generation holds, prompt and output together.
    pub fn slot_tokens(&self) -> usize {
        self.slot_tokens
    }

    /// Queue a generation; its events arrive on the returned receiver. Dropping the receiver
    /// stops the generation before its next step.
    pub fn submit(&self, job: GenerateJob) -> Result<UnboundedReceiver<GenEvent>, JobError> {
        let (tx, rx) = unbounded_channel();
        let queued = Queued {
            job,
            enqueued: Instant::now(),
            tx,
        };
        // Counted before it is sent: the worker uncounts it when it takes it.
        self.status.waiting.fetch_add(1, Ordering::AcqRel);
        let refused = match self.tx.try_send(queued) {
            Ok(()) => return Ok(rx),
            Err(TrySendError::Full(_)) => JobError::Overloaded,
            Err(TrySendError::Disconnected(_)) => JobError::Unavailable,
        };
        self.status.waiting.fetch_sub(1, Ordering::AcqRel);
        Err(refused)
    }
}

/// A generation holding a slot.
struct Active {
    q: Queued,
    slot: usize,
    /// Prompt tokens read so far (those the slot held included).
    read: usize,
    /// Prompt tokens the slot held when the generation began.
    cached: usize,
    /// The last sampled token, to feed next.
    last: Token,
    /// Every token sampled so far.
    sampled: Vec<Token>,
    generated: usize,
    bytes: Vec<u8>,
    /// Bytes of `bytes` already sent.
    sent: usize,
    pending: Vec<TokenInfo>,
    first_token: Option<Instant>,
}

impl Active {
    fn pos(&self) -> usize {
        self.read + self.generated.saturating_sub(1)
    }
}

struct Loop<'a> {
    backend: &'a dyn Backend,
    gen: &'a mut dyn Generator,
    status: &'a GenerateStatus,
    config: GenerateConfig,
    waiting: VecDeque<Queued>,
    active: Vec<Active>,
    free: Vec<usize>,
    /// Per slot: the tokens whose cells it holds from its last generation (a prompt that
    /// starts with them evaluates only the rest, as llama-server's slots do), and when it
    /// was last released.
    held: Vec<Vec<Token>>,
    released: Vec<u64>,
    releases: u64,
}

/// How many tokens `a` and `b` share from their start.
fn common_prefix(a: &[Token], b: &[Token]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// The longest suffix of `text` that is a proper prefix of some stop sequence.
fn held_back(text: &str, stops: &[String]) -> usize {
    let mut best = 0;
    for s in stops {
        for k in (1..s.len()).rev() {
            if k <= best || k > text.len() {
                continue;
            }
            if s.is_char_boundary(k) && text.ends_with(&s[..k]) {
                best = k;
                break;
            }
        }
    }
    best
}

impl<'a> Loop<'a> {
    fn new(
        backend: &'a dyn Backend,
        gen: &'a mut dyn Generator,
        status: &'a GenerateStatus,
        config: GenerateConfig,
    ) -> Loop<'a> {
        let free = (0..gen.slots()).rev().collect();
        let slots = gen.slots();
        Loop {
            backend,
            gen,
            status,
            config,
            waiting: VecDeque::new(),
            active: Vec::new(),
            free,
            held: vec![Vec::new(); slots],
            released: vec![0; slots],
            releases: 0,
        }
    }

    fn take(&mut self, q: Queued) {
        self.status.waiting.fetch_sub(1, Ordering::AcqRel);
        self.waiting.push_back(q);
    }

    fn run(mut self, rx: Receiver<Queued>) {
        loop {
            if self.active.is_empty() && self.waiting.is_empty() {
                match rx.recv() {
                    Ok(q) => self.take(q),
                    Err(_) => return,
                }
                // Idle until now: requests a client sent together arrive a few milliseconds
                // apart (each is parsed, rendered and tokenized on its own task). Wait that
                // long for them so their prompts share the first step, instead of the first
                // one's step making the others wait a whole step for their first token.
                let until = Instant::now() + GATHER;
                while self.waiting.len() < self.free.len() {
                    let left = until.saturating_duration_since(Instant::now());
                    match rx.recv_timeout(left) {
                        Ok(q) => self.take(q),
                        Err(_) => break,
                    }
                }
            }
            while let Ok(q) = rx.try_recv() {
                self.take(q);
            }
            self.admit();
            self.drop_cancelled();
            if self.active.is_empty() {
                continue;
            }
            self.step();
            self.status
                .active
                .store(self.active.len(), Ordering::Relaxed);
        }
    }

    /// Give free slots to waiting requests, in arrival order.
    fn admit(&mut self) {
        let now = Instant::now();
        while !self.free.is_empty() {
            let Some(q) = self.waiting.pop_front() else {
                break;
            };
            if q.tx.is_closed() {
                self.status.cancelled.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            if q.job.deadline.is_some_and(|d| d <= now) {
                let _ = q.tx.send(GenEvent::Failed(JobError::DeadlineExceeded));
                continue;
            }
            if q.job.prompt.is_empty() || q.job.prompt.len() >= self.gen.slot_tokens() {
                let _ =
                    q.tx.send(GenEvent::Failed(JobError::OutOfMemory { shared: false }));
                continue;
            }
            // The free slot holding the longest start of this prompt; else the one released
            // longest ago (its cells are the least likely to be asked again).
            let prompt = &q.job.prompt;
            let Some((at, common)) = self
                .free
                .iter()
                .enumerate()
                .map(|(at, &slot)| (at, common_prefix(&self.held[slot], prompt)))
                .max_by_key(|&(at, common)| {
                    (common, std::cmp::Reverse(self.released[self.free[at]]))
                })
            else {
                self.waiting.push_front(q);
                break;
            };
            let slot = self.free.swap_remove(at);
            // At least the prompt's last token is evaluated: its logits pick the first token.
            let keep = common.min(prompt.len() - 1);
            self.held[slot].clear();
            let cached = match self.gen.begin(slot, &q.job.sampling, keep) {
                Ok(kept) => kept,
                Err(e) => {
                    self.free.push(slot);
                    let _ =
                        q.tx.send(GenEvent::Failed(JobError::Forward(e.to_string())));
                    continue;
                }
            };
            self.status
                .cached
                .fetch_add(cached as u64, Ordering::Relaxed);
            self.active.push(Active {
                q,
                slot,
                read: cached,
                cached,
                sampled: Vec::new(),
                last: 0,
                generated: 0,
                bytes: Vec::new(),
                sent: 0,
                pending: Vec::new(),
                first_token: None,
            });
        }
        self.status
            .active
            .store(self.active.len(), Ordering::Relaxed);
    }

    /// Free the slot of active generation `i`; it keeps the cells of every token it
    /// evaluated (the prompt read so far, each sampled token fed back).
    fn release(&mut self, i: usize) -> Active {
        let a = self.active.swap_remove(i);
        self.gen.end(a.slot);
        let fed = a.generated.saturating_sub(1).min(a.sampled.len());
        let held = &mut self.held[a.slot];
        held.clear();
        held.extend_from_slice(&a.q.job.prompt[..a.read]);
        held.extend_from_slice(&a.sampled[..fed]);
        self.releases += 1;
        self.released[a.slot] = self.releases;
        self.free.push(a.slot);
        a
    }

    fn drop_cancelled(&mut self) {
        let mut i = 0;
        while i < self.active.len() {
            if self.active[i].q.tx.is_closed() {
                self.release(i);
                self.status.cancelled.fetch_add(1, Ordering::Relaxed);
            } else {
                i += 1;
            }
        }
    }

    fn step(&mut self) {
        let decoding = self.active.iter().filter(|a| a.generated > 0).count();
        let mut budget = prompt_budget(self.config.prefill_chunk, decoding, self.gen.step_tokens());
        // (index into active, tokens range start, end, sample)
        let mut plan: Vec<(usize, usize, usize, bool)> = Vec::new();
        for (i, a) in self.active.iter().enumerate() {
            if a.generated > 0 {
                plan.push((i, 0, 0, true));
            } else if budget > 0 {
                let n = (a.q.job.prompt.len() - a.read).min(budget);
                budget -= n;
                plan.push((i, a.read, a.read + n, a.read + n == a.q.job.prompt.len()));
            }
        }
        let lasts: Vec<[Token; 1]> = self.active.iter().map(|a| [a.last]).collect();
        let feeds: Vec<Feed<'_>> = plan
            .iter()
            .map(|&(i, s, e, sample)| {
                let a = &self.active[i];
                if a.generated > 0 {
                    Feed {
                        slot: a.slot,
                        tokens: &lasts[i],
                        pos: a.pos(),
                        sample: true,
                    }
                } else {
                    Feed {
                        slot: a.slot,
                        tokens: &a.q.job.prompt[s..e],
                        pos: s,
                        sample,
                    }
                }
            })
            .collect();
        let result = self.gen.step(&feeds);
        drop(feeds);
        self.status.steps.fetch_add(1, Ordering::Relaxed);
        let sampled = match result {
            Ok(s) => s,
            Err(e) => {
                let err = match e {
                    BackendError::OutOfMemory(_) => JobError::OutOfMemory { shared: true },
                    other => JobError::Forward(other.to_string()),
                };
                while !self.active.is_empty() {
                    let a = self.release(self.active.len() - 1);
                    // What the failed step left in the slot is unknown.
                    self.held[a.slot].clear();
                    let _ = a.q.tx.send(GenEvent::Failed(err.clone()));
                }
                return;
            }
        };
        let mut done: Vec<usize> = Vec::new();
        for (&(i, _, e, _), s) in plan.iter().zip(sampled) {
            let a = &mut self.active[i];
            if a.generated == 0 {
                a.read = e;
            }
            if let Some(s) = s {
                // Counted before its event is sent: a caller that has its answer sees it counted.
                self.status.generated.fetch_add(1, Ordering::Relaxed);
                if on_token(self.backend, a, s, self.gen.slot_tokens()) {
                    done.push(i);
                }
            }
        }
        done.sort_unstable_by(|a, b| b.cmp(a));
        for i in done {
            self.release(i);
        }
    }
}

/// Take a sampled token: send the text it completes, and say whether the generation ended
/// (then its terminal event is sent).
fn on_token(backend: &dyn Backend, a: &mut Active, s: Sampled, slot_tokens: usize) -> bool {
    let now = Instant::now();
    a.first_token.get_or_insert(now);
    a.generated += 1;
    a.last = s.token;
    a.sampled.push(s.token);
    let finish = |a: &Active, reason: FinishReason| {
        GenEvent::Done(Finish {
            reason,
            prompt_tokens: a.q.job.prompt.len(),
            cached_tokens: a.cached,
            completion_tokens: a.generated,
            ttft: a.first_token.unwrap_or(now).duration_since(a.q.enqueued),
            total: now.duration_since(a.q.enqueued),
        })
    };
    if backend.ends_generation(s.token) {
        flush(a, a.bytes.len(), true);
        let _ = a.q.tx.send(finish(a, FinishReason::Stop));
        return true;
    }
    let piece = backend.token_bytes(s.token);
    if let Some(lp) = s.logprob {
        a.pending.push(TokenInfo {
            text: String::from_utf8_lossy(&piece).into_owned(),
            bytes: piece.clone(),
            logprob: lp,
            top: s
                .top
                .iter()
                .map(|&(t, l)| {
                    let b = backend.token_bytes(t);
                    (String::from_utf8_lossy(&b).into_owned(), b, l)
                })
                .collect(),
        });
    }
    a.bytes.extend_from_slice(&piece);
    // Only the unsent tail is read, with as many sent bytes before it as a stop sequence may
    // reach back over (they were held back); what was sent is whole characters.
    let stops = &a.q.job.stop;
    let reach = stops.iter().map(String::len).max().unwrap_or(0);
    let mut from = a.sent.saturating_sub(reach);
    while from > 0 && a.bytes.get(from).is_some_and(|b| b & 0xC0 == 0x80) {
        from -= 1;
    }
    let window = &a.bytes[from..];
    let text = match std::str::from_utf8(window) {
        Ok(t) => t,
        Err(e) => std::str::from_utf8(&window[..e.valid_up_to()]).unwrap_or_default(),
    };
    let valid = from + text.len();
    let hit = stops
        .iter()
        .filter_map(|st| text.find(st.as_str()).map(|p| from + p))
        .min();
    let held = held_back(text, stops);
    if let Some(at) = hit {
        a.pending.clear();
        flush(a, at, false);
        let _ = a.q.tx.send(finish(a, FinishReason::Stop));
        return true;
    }
    let length = a.generated >= a.q.job.max_tokens || a.pos() >= slot_tokens;
    if length {
        flush(a, a.bytes.len(), true);
        let _ = a.q.tx.send(finish(a, FinishReason::Length));
        return true;
    }
    let safe = valid - held;
    if safe > a.sent || !a.pending.is_empty() && safe >= a.sent {
        flush(a, safe.max(a.sent), false);
    }
    false
}

/// Send the output up to byte `to` (and the pending log-probabilities). At the end, bytes
/// that are not whole characters are sent replaced.
fn flush(a: &mut Active, to: usize, end: bool) {
    let to = to.min(a.bytes.len()).max(a.sent);
    let text = if end {
        String::from_utf8_lossy(&a.bytes[a.sent..to]).into_owned()
    } else {
        match std::str::from_utf8(&a.bytes[a.sent..to]) {
            Ok(t) => t.to_string(),
            Err(_) => return,
        }
    };
    a.sent = to;
    let tokens = std::mem::take(&mut a.pending);
    if !text.is_empty() || !tokens.is_empty() {
        let _ = a.q.tx.send(GenEvent::Delta { text, tokens });
    }
}

/// Collect a generation's whole output.
pub async fn collect(
    mut rx: UnboundedReceiver<GenEvent>,
) -> Result<(String, Vec<TokenInfo>, Finish), JobError> {
    let mut text = String::new();
    let mut tokens = Vec::new();
    while let Some(ev) = rx.recv().await {
        match ev {
            GenEvent::Delta { text: t, tokens: k } => {
                text.push_str(&t);
                tokens.extend(k);
            }
            GenEvent::Done(f) => return Ok((text, tokens, f)),
            GenEvent::Failed(e) => return Err(e),
        }
    }
    Err(JobError::Unavailable)
}

impl From<JobError> for crate::error::EngineError {
    fn from(e: JobError) -> Self {
        use crate::error::EngineError as E;
        match e {
            JobError::Overloaded => E::Overloaded,
            JobError::OutOfMemory { shared } => E::OutOfMemory { shared },
            JobError::Unavailable => E::Unavailable,
            JobError::Forward(m) => E::Forward(m),
            JobError::DeadlineExceeded => E::Request(
                protocol::error::ProtocolError::new(
                    protocol::error::ErrorCode::DeadlineExceeded,
                    "the deadline passed before the generation started",
                )
                .with_reason(protocol::error::reason::DEADLINE),
            ),
        }
    }
}

/// Prompt tokens one step may read beside `decoding` running streams. Beside them, a step
/// holds at most `chunk` tokens in all, their decode tokens included, so it costs them no more
/// than a chunk's prefill; alone, a prompt reads in chunks as large as a step holds (at most
/// 8 chunks). Never more than the step holds, and never 0, so a prompt always advances.
fn prompt_budget(chunk: usize, decoding: usize, step_tokens: usize) -> usize {
    let chunk = chunk.max(1);
    let want = if decoding > 0 {
        chunk.saturating_sub(decoding)
    } else {
        chunk * 8
    };
    want.min(step_tokens.saturating_sub(decoding)).max(1)
}

#[cfg(test)]
mod tests {
    use super::{held_back, prompt_budget};

    #[test]
    fn a_step_beside_running_streams_holds_one_chunk_in_all() {
        // 4 streams decode: 252 prompt tokens + 4 decode tokens = one 256-token chunk.
        assert_eq!(prompt_budget(256, 4, 2048), 252);
        // Alone, up to 8 chunks, within what a step holds.
        assert_eq!(prompt_budget(256, 0, 4096), 2048);
        assert_eq!(prompt_budget(256, 0, 1000), 1000);
        // The step's own limit wins, and a prompt always advances.
        assert_eq!(prompt_budget(256, 4, 100), 96);
        assert_eq!(prompt_budget(2, 4, 2048), 1);
        assert_eq!(prompt_budget(0, 0, 2048), 8);
    }

    #[test]
    fn held_back_keeps_a_possible_stop_start() {
        let stops = vec!["</end>".to_string(), "STOP".to_string()];
        assert_eq!(held_back("hello </e", &stops), 3);
        assert_eq!(held_back("hello ST", &stops), 2);
        assert_eq!(held_back("hello", &stops), 0);
        assert_eq!(held_back("x<", &stops), 1);
    }
}
