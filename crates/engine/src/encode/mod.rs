//! Encoder models: sentence embeddings from a backend behind the [`Encoder`] trait, evaluated
//! on a dedicated worker thread that batches the texts of concurrent requests together.

pub mod backbone;
pub mod tagger;

use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use crate::backend::{BackendError, Token};
use crate::budget::{Cutter, Vocab};
use crate::error::EngineError;
use crate::package::ModelMeta;

/// Facts about a loaded encoder.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct EncoderInfo {
    pub engine: String,
    pub device: String,
    pub dtype: String,
    /// Length of the vectors.
    pub dims: usize,
    /// Most tokens one input holds, special tokens included.
    pub max_tokens: usize,
    /// `mean`, `cls` or `max`.
    pub pooling: String,
    pub normalize: bool,
    pub architecture: String,
    pub vocab_size: usize,
    /// A sequence-classification head: its labels, in output order. Its "vectors" are then
    /// label probabilities, served by /v1/classify only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub labels: Option<Vec<String>>,
    /// A head whose labels are scored independently (sigmoid) rather than as one softmax.
    pub multi_label: bool,
    /// A token-classification head: an input's output holds one row of label probabilities
    /// per token (special tokens included), row after row; its labels are tags (`O`,
    /// `B-PER`, ...). Served as a span head (/v1/classify spans, SIE entities).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub per_token: bool,
}

/// A text's tokens (no special tokens) with the code-point range each covers in the text
/// and the word it belongs to.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Words {
    pub tokens: Vec<Token>,
    pub offsets: Vec<(usize, usize)>,
    pub words: Vec<Option<u32>>,
}

/// An encoder backend. Tokenization runs on request threads; `embed` on the worker thread.
pub trait Encoder: Vocab + Send + Sync + 'static {
    fn info(&self) -> &EncoderInfo;
    /// Token ids of `text` with the model's special tokens, not padded or truncated.
    fn tokenize(&self, text: &str) -> Result<Vec<Token>, BackendError>;
    /// The special tokens around an input's own (e.g. `[CLS]` and `[SEP]`).
    fn special(&self) -> (Vec<Token>, Vec<Token>);
    /// The vector of each input (a batch of token sequences of any lengths).
    fn embed(&self, batch: &[Vec<Token>]) -> Result<Vec<Vec<f32>>, BackendError>;
    /// The last hidden state of every token of each input (a span head's features).
    fn token_states(&self, batch: &[Vec<Token>]) -> Result<Vec<Vec<Vec<f32>>>, BackendError> {
        let _ = batch;
        Err(BackendError::Forward(
            "this encoder gives no token states".into(),
        ))
    }
    /// `text`'s tokens with their code-point ranges and words (for token heads).
    fn words(&self, text: &str) -> Result<Words, BackendError> {
        let _ = text;
        Err(BackendError::Tokenize(
            "this encoder gives no token offsets".into(),
        ))
    }
}

/// How a token head reads a text longer than one input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TagOverflow {
    /// A text over one input fails.
    Reject,
    /// Only the first input's worth of tokens is read.
    Truncate,
    /// Windows of `tokens` (at most one input) overlapping by `overlap`, up to the scan budget.
    Window { tokens: usize, overlap: usize },
}

impl TagOverflow {
    /// The overlap of windows of `tokens` when a request names none: 64, or a quarter of a
    /// smaller window.
    pub fn overlap(tokens: usize) -> usize {
        64.min(tokens / 4)
    }
}

/// The spans a token head found in one text.
#[derive(Debug, Clone, PartialEq)]
pub struct Tagged {
    pub spans: Vec<protocol::SpanFound>,
    /// Tokens read, special tokens of every window included.
    pub tokens: usize,
    /// The text was longer than what was read (`Truncate`).
    pub truncated: bool,
}

/// How many texts the worker evaluates in one batch, and how many may wait.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct EncoderConfig {
    pub max_batch: usize,
    pub max_queued_jobs: usize,
    /// The scan budget of a token head's windowed reads; four inputs when unset.
    pub max_scan_tokens: Option<usize>,
}

impl Default for EncoderConfig {
    fn default() -> Self {
        EncoderConfig {
            max_batch: 32,
            max_queued_jobs: 256,
            max_scan_tokens: None,
        }
    }
}

/// Time spent by one embedding request.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct EncodeTimings {
    pub tokenize: Duration,
    pub queue: Duration,
    pub forward: Duration,
}

/// The vectors of one request.
#[derive(Debug, Clone, PartialEq)]
pub struct Encoded {
    pub vectors: Vec<Vec<f32>>,
    /// Tokens of each input as read (after truncation).
    pub tokens: Vec<usize>,
    pub timings: EncodeTimings,
}

/// A job's vectors with its queue and forward time, or why the forward failed.
type JobReply = Result<(Vec<Vec<f32>>, Duration, Duration), EncodeError>;

struct Job {
    inputs: Vec<Vec<Token>>,
    queued: Instant,
    reply: oneshot::Sender<JobReply>,
}

/// A loaded encoder with its worker.
pub struct EncoderModel {
    pub meta: ModelMeta,
    pub config: EncoderConfig,
    backend: Arc<dyn Encoder>,
    queue: SyncSender<Job>,
    /// Where long texts may be cut for this tokenizer (budgeted tokenization).
    pub cutter: Cutter,
}

impl EncoderModel {
    pub fn start(
        meta: ModelMeta,
        backend: Arc<dyn Encoder>,
        config: EncoderConfig,
    ) -> Result<EncoderModel, EngineError> {
        let cutter = Cutter::calibrate(&*backend)?;
        let (tx, rx) = mpsc::sync_channel::<Job>(config.max_queued_jobs.max(1));
        let worker_backend = backend.clone();
        let max_batch = config.max_batch.max(1);
        std::thread::Builder::new()
            .name(format!("encoder-{}", meta.name))
            .spawn(move || run(worker_backend, rx, max_batch))
            .map_err(|e| EngineError::Forward(format!("cannot start the encoder worker: {e}")))?;
        Ok(EncoderModel {
            meta,
            config,
            backend,
            queue: tx,
            cutter,
        })
    }

    pub fn info(&self) -> &EncoderInfo {
        self.backend.info()
    }

    /// Tokenize one text within the model's length, reading a long text only as far as the
    /// length needs (budgeted tokenization). With `truncate`, keep its first tokens; else a
    /// longer text is refused. Returns the tokens (special tokens included) and whether they
    /// were cut.
    pub fn tokenize(&self, text: &str, truncate: bool) -> Result<(Vec<Token>, bool), EncodeError> {
        let (head, tail) = self.backend.special();
        let room = self
            .info()
            .max_tokens
            .saturating_sub(head.len() + tail.len());
        let read = self
            .cutter
            .read(&*self.backend, text, room)
            .map_err(|e| EncodeError::Invalid(e.to_string()))?;
        let over = !read.complete || read.tokens.len() > room;
        if over && !truncate {
            return Err(EncodeError::TooLong {
                tokens: read.tokens.len() + head.len() + tail.len(),
                limit: self.info().max_tokens,
                lower_bound: !read.complete,
            });
        }
        let own = &read.tokens[..read.tokens.len().min(room)];
        let mut t = Vec::with_capacity(head.len() + own.len() + tail.len());
        t.extend_from_slice(&head);
        t.extend_from_slice(own);
        t.extend_from_slice(&tail);
        Ok((t, over))
    }

    /// Embed pre-tokenized inputs on the worker (batched with other requests).
    pub async fn embed_tokens(&self, inputs: Vec<Vec<Token>>) -> Result<Encoded, EncodeError> {
        let tokens = inputs.iter().map(Vec::len).collect();
        if inputs.is_empty() {
            return Ok(Encoded {
                vectors: Vec::new(),
                tokens,
                timings: EncodeTimings::default(),
            });
        }
        let (reply, rx) = oneshot::channel();
        let job = Job {
            inputs,
            queued: Instant::now(),
            reply,
        };
        match self.queue.try_send(job) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => return Err(EncodeError::Overloaded),
            Err(TrySendError::Disconnected(_)) => return Err(EncodeError::Unavailable),
        }
        let (vectors, queue, forward) = rx.await.map_err(|_| EncodeError::Unavailable)??;
        Ok(Encoded {
            vectors,
            tokens,
            timings: EncodeTimings {
                tokenize: Duration::ZERO,
                queue,
                forward,
            },
        })
    }

    /// The most tokens a token head's windowed read of one text covers.
    pub fn scan_budget(&self) -> usize {
        self.config
            .max_scan_tokens
            .unwrap_or(4 * self.info().max_tokens)
    }

    /// A prefix of `text`'s words holding all its tokens, or more than `budget` of them: the
    /// prefix ends at whitespace, where WordPiece and metaspace tokenizers give the same
    /// tokens as for the whole text. Returns the words and whether the text was read whole.
    fn prefix_words(&self, text: &str, budget: usize) -> Result<(Words, bool), EncodeError> {
        let mut least = self.cutter.bytes_for(budget);
        loop {
            let end = if least >= text.len() {
                text.len()
            } else {
                let mut at = least;
                while !text.is_char_boundary(at) {
                    at -= 1;
                }
                text[at..]
                    .find(char::is_whitespace)
                    .map_or(text.len(), |i| at + i)
            };
            let w = self
                .backend
                .words(&text[..end])
                .map_err(|e| EncodeError::Invalid(e.to_string()))?;
            if end == text.len() {
                return Ok((w, true));
            }
            if w.tokens.len() > budget {
                return Ok((w, false));
            }
            least = least.saturating_mul(2);
        }
    }

    /// Spans of each text from a token-classification head: every window of every text in
    /// one batch on the worker. A text that cannot be read fails alone.
    pub async fn tag(
        &self,
        texts: &[&str],
        overflow: TagOverflow,
    ) -> Result<(Vec<Result<Tagged, EncodeError>>, EncodeTimings), EncodeError> {
        let info = self.info();
        let labels = info.labels.clone().unwrap_or_default();
        if !info.per_token || labels.is_empty() {
            return Err(EncodeError::Invalid(format!(
                "model {} is not a token-classification head",
                self.meta.name
            )));
        }
        let t0 = Instant::now();
        let (head, tail) = self.backend.special();
        let room = info
            .max_tokens
            .saturating_sub(head.len() + tail.len())
            .max(1);
        let (size, overlap, budget) = match overflow {
            TagOverflow::Reject | TagOverflow::Truncate => (room, 0, room),
            TagOverflow::Window { tokens, overlap } => {
                let size = tokens
                    .saturating_sub(head.len() + tail.len())
                    .clamp(1, room);
                (size, overlap.min(size - 1), self.scan_budget())
            }
        };
        // Each text: its words and windows, or why it is not read.
        struct Plan {
            words: Words,
            windows: Vec<(usize, usize)>,
            truncated: bool,
        }
        let mut plans = Vec::with_capacity(texts.len());
        let mut inputs = Vec::new();
        for (i, text) in texts.iter().enumerate() {
            let plan = self.prefix_words(text, budget).and_then(|(mut w, whole)| {
                let over = !whole || w.tokens.len() > budget;
                match overflow {
                    TagOverflow::Reject if over => Err(EncodeError::TooLong {
                        tokens: w.tokens.len() + head.len() + tail.len(),
                        limit: info.max_tokens,
                        lower_bound: !whole,
                    }),
                    TagOverflow::Window { .. } if over => Err(EncodeError::ScanBudget {
                        tokens: w.tokens.len(),
                        limit: budget,
                        lower_bound: !whole,
                    }),
                    _ => {
                        w.tokens.truncate(budget);
                        w.offsets.truncate(budget);
                        w.words.truncate(budget);
                        Ok(Plan {
                            windows: crate::budget::windows(w.tokens.len(), size, overlap),
                            words: w,
                            truncated: over,
                        })
                    }
                }
            });
            let plan = plan.map_err(|e| e.at(i));
            if let Ok(p) = &plan {
                for &(s, e) in &p.windows {
                    let mut t = Vec::with_capacity(head.len() + e - s + tail.len());
                    t.extend_from_slice(&head);
                    t.extend_from_slice(&p.words.tokens[s..e]);
                    t.extend_from_slice(&tail);
                    inputs.push(t);
                }
            }
            plans.push(plan);
        }
        let tokenize = t0.elapsed();
        let lens: Vec<usize> = inputs.iter().map(Vec::len).collect();
        let mut out = self.embed_tokens(inputs).await?;
        out.timings.tokenize = tokenize;
        let n = labels.len();
        let mut rows = out.vectors.into_iter().zip(lens);
        let mut answers = Vec::with_capacity(texts.len());
        for (text, plan) in texts.iter().zip(plans) {
            let plan = match plan {
                Ok(p) => p,
                Err(e) => {
                    answers.push(Err(e));
                    continue;
                }
            };
            let mut read = 0;
            let mut outputs = Vec::with_capacity(plan.windows.len());
            for _ in &plan.windows {
                let (v, len) = rows.next().ok_or_else(|| {
                    EncodeError::Inference("the head returned too few outputs".into())
                })?;
                if v.len() != len * n {
                    return Err(EncodeError::Inference(
                        "the head returned rows of the wrong size".into(),
                    ));
                }
                read += len;
                outputs.push(v);
            }
            let tokens = plan.words.tokens.len();
            let pick = tagger::best_window(tokens, &plan.windows);
            let token_rows: Vec<&[f32]> = (0..tokens)
                .map(|i| {
                    let w = pick[i];
                    let r = head.len() + i - plan.windows[w].0;
                    &outputs[w][r * n..(r + 1) * n]
                })
                .collect();
            let words = tagger::words(&plan.words.offsets, &plan.words.words, &token_rows);
            answers.push(Ok(Tagged {
                spans: tagger::merge(&labels, &words, text),
                tokens: read,
                truncated: plan.truncated,
            }));
        }
        Ok((answers, out.timings))
    }

    /// Tokenize and embed texts.
    pub async fn embed(&self, texts: &[&str], truncate: bool) -> Result<Encoded, EncodeError> {
        let t0 = Instant::now();
        let inputs = texts
            .iter()
            .enumerate()
            .map(|(i, text)| {
                self.tokenize(text, truncate)
                    .map(|(t, _)| t)
                    .map_err(|e| e.at(i))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let tokenize = t0.elapsed();
        let mut out = self.embed_tokens(inputs).await?;
        out.timings.tokenize = tokenize;
        Ok(out)
    }
}

/// Why an embedding request failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum EncodeError {
    #[error("{0}")]
    Invalid(String),
    #[error("the input has {}{tokens} tokens; the model reads at most {limit}", if *.lower_bound { "more than " } else { "" })]
    TooLong {
        tokens: usize,
        limit: usize,
        /// The text was read in part: it has more tokens than `tokens`.
        lower_bound: bool,
    },
    #[error("the input has {}{tokens} tokens; the model reads at most {limit} in windows", if *.lower_bound { "more than " } else { "" })]
    ScanBudget {
        tokens: usize,
        limit: usize,
        lower_bound: bool,
    },
    #[error("input {index}: {inner}")]
    Item {
        index: usize,
        inner: Box<EncodeError>,
    },
    #[error("the encoder's queue is full")]
    Overloaded,
    #[error("the encoder is not running")]
    Unavailable,
    #[error("inference failed: {0}")]
    Inference(String),
}

impl EncodeError {
    fn at(self, index: usize) -> EncodeError {
        EncodeError::Item {
            index,
            inner: Box::new(self),
        }
    }
    /// The error without its item index.
    pub fn root(&self) -> &EncodeError {
        match self {
            EncodeError::Item { inner, .. } => inner.root(),
            e => e,
        }
    }
}

/// The worker: take every waiting job up to `max_batch` texts, embed them in one batch, and
/// hand each job its vectors.
fn run(backend: Arc<dyn Encoder>, rx: Receiver<Job>, max_batch: usize) {
    let mut pending: Option<Job> = None;
    loop {
        let first = match pending.take() {
            Some(j) => j,
            None => match rx.recv() {
                Ok(j) => j,
                Err(_) => return,
            },
        };
        let mut jobs = vec![first];
        let mut texts = jobs[0].inputs.len();
        while texts < max_batch {
            match rx.recv_timeout(Duration::ZERO) {
                Ok(j) => {
                    if texts + j.inputs.len() > max_batch {
                        pending = Some(j);
                        break;
                    }
                    texts += j.inputs.len();
                    jobs.push(j);
                }
                Err(RecvTimeoutError::Timeout) => break,
                Err(RecvTimeoutError::Disconnected) => break,
            }
        }
        jobs.retain(|j| !j.reply.is_closed());
        if jobs.is_empty() {
            continue;
        }
        let started = Instant::now();
        // Sort by length inside the batch so padding stays small; chunks of max_batch.
        let mut all: Vec<(usize, usize, &Vec<Token>)> = Vec::new();
        for (j, job) in jobs.iter().enumerate() {
            for (i, t) in job.inputs.iter().enumerate() {
                all.push((j, i, t));
            }
        }
        all.sort_by_key(|(_, _, t)| t.len());
        let mut results: Vec<Vec<Option<Vec<f32>>>> =
            jobs.iter().map(|j| vec![None; j.inputs.len()]).collect();
        let mut failure = None;
        for chunk in all.chunks(max_batch) {
            let batch: Vec<Vec<Token>> = chunk.iter().map(|(_, _, t)| (*t).clone()).collect();
            match backend.embed(&batch) {
                Ok(vectors) if vectors.len() == chunk.len() => {
                    for ((j, i, _), v) in chunk.iter().zip(vectors) {
                        results[*j][*i] = Some(v);
                    }
                }
                Ok(_) => {
                    failure = Some(EncodeError::Inference(
                        "the encoder returned the wrong number of vectors".into(),
                    ))
                }
                Err(e) => failure = Some(EncodeError::Inference(e.to_string())),
            }
        }
        let forward = started.elapsed();
        for (job, res) in jobs.into_iter().zip(results) {
            let queue = started.saturating_duration_since(job.queued);
            let out = match &failure {
                Some(f) => Err(f.clone()),
                None => res
                    .into_iter()
                    .collect::<Option<Vec<_>>>()
                    .map(|v| (v, queue, forward))
                    .ok_or_else(|| EncodeError::Inference("an input has no vector".into())),
            };
            let _ = job.reply.send(out);
        }
    }
}

/// Cosine similarity of two vectors.
pub fn cosine(a: &[f32], b: &[f32]) -> f32 {
    let dot: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let na: f32 = a.iter().map(|x| x * x).sum::<f32>().sqrt();
    let nb: f32 = b.iter().map(|x| x * x).sum::<f32>().sqrt();
    if na == 0.0 || nb == 0.0 {
        0.0
    } else {
        dot / (na * nb)
    }
}
