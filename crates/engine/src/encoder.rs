//! Encoder models: sentence embeddings from a backend behind the [`Encoder`] trait, evaluated
//! on a dedicated worker thread that batches the texts of concurrent requests together.

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
}

/// How many texts the worker evaluates in one batch, and how many may wait.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct EncoderConfig {
    pub max_batch: usize,
    pub max_queued_jobs: usize,
}

impl Default for EncoderConfig {
    fn default() -> Self {
        EncoderConfig {
            max_batch: 32,
            max_queued_jobs: 256,
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
type JobReply = Result<(Vec<Vec<f32>>, Duration, Duration), String>;

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
        let (vectors, queue, forward) = rx
            .await
            .map_err(|_| EncodeError::Unavailable)?
            .map_err(EncodeError::Inference)?;
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
                Ok(_) => failure = Some("the encoder returned the wrong number of vectors".into()),
                Err(e) => failure = Some(e.to_string()),
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
                    .ok_or_else(|| "an input has no vector".to_string()),
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
