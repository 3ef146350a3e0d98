//! Plain llama.cpp evaluation, what the benchmarks hold the engine against: one token
//! sequence at a time from an empty cache, or llama.cpp's batched example, on the same weights
//! and the same context settings the backend uses.

use std::num::NonZeroU32;

use backend_llama::{runtime, LlamaBackend};
use engine::backend::{BackendError, Token};
use llama_cpp_2::context::params::LlamaContextParams;
use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::token::LlamaToken;

/// Plain llama.cpp evaluation of one token sequence at a time, in a single-sequence context:
/// what a runtime without shared prefixes, trees or batching does. For benchmarks.
pub struct PlainEvaluator<'m> {
    ctx: LlamaContext<'m>,
    batch: LlamaBatch<'static>,
    capacity: usize,
}

impl<'m> PlainEvaluator<'m> {
    /// A plain single-sequence context holding up to `tokens` tokens.
    pub fn new(backend: &'m LlamaBackend, tokens: u32) -> Result<Self, BackendError> {
        let n_ctx = tokens.max(256).div_ceil(256) * 256;
        let ctx = backend.context(n_ctx, 1)?;
        Ok(PlainEvaluator {
            ctx,
            batch: LlamaBatch::new(n_ctx as usize, 1),
            capacity: n_ctx as usize,
        })
    }

    /// A plain context for `seqs` sequences of up to `tokens` tokens each in one unified
    /// cache, on the generator's settings: what llama.cpp's batched example runs, for
    /// [`PlainEvaluator::greedy_batched`].
    pub fn batched(
        backend: &'m LlamaBackend,
        tokens: u32,
        seqs: u32,
    ) -> Result<Self, BackendError> {
        let seqs = seqs.clamp(1, 256);
        let (ctx, n_batch) =
            backend.generation_context(seqs, tokens.max(256).div_ceil(256) * 256 * seqs)?;
        Ok(PlainEvaluator {
            ctx,
            batch: LlamaBatch::new(n_batch as usize, seqs as i32),
            capacity: n_batch as usize,
        })
    }

    /// A one-sequence evaluator on llama.cpp's own context defaults (flash attention `auto`,
    /// its batch and micro-batch sizes), with only the size and the threads set: the baseline
    /// a user of plain llama.cpp gets, which benchmarks hold beside [`PlainEvaluator::new`].
    pub fn defaults(backend: &'m LlamaBackend, tokens: u32) -> Result<Self, BackendError> {
        let n_ctx = tokens.max(256).div_ceil(256) * 256;
        let threads = backend.threads();
        let params = LlamaContextParams::default()
            .with_n_ctx(NonZeroU32::new(n_ctx))
            .with_n_threads(threads)
            .with_n_threads_batch(threads);
        let ctx = backend
            .llama_model()
            .new_context(runtime()?, params)
            .map_err(|e| BackendError::Load(format!("cannot create a llama.cpp context: {e}")))?;
        let capacity = ctx.n_batch().min(n_ctx) as usize;
        Ok(PlainEvaluator {
            ctx,
            batch: LlamaBatch::new(capacity, 1),
            capacity,
        })
    }
}

impl PlainEvaluator<'_> {
    /// Greedy generation as llama.cpp's simple example does it: the prompt in one decode, then
    /// one decode per token, the argmax of the logits each time. Returns the tokens and the
    /// time spent after the prompt.
    pub fn greedy(
        &mut self,
        prompt: &[Token],
        n: usize,
    ) -> Result<(Vec<Token>, std::time::Duration), BackendError> {
        if prompt.is_empty() || prompt.len() + n > self.capacity {
            return Err(BackendError::OutOfMemory(
                "the generation does not fit".into(),
            ));
        }
        self.ctx.clear_kv_cache();
        self.fill(prompt, 0)?;
        self.decode()?;
        let start = std::time::Instant::now();
        let mut out = Vec::with_capacity(n);
        let mut last = self.batch.n_tokens() - 1;
        for k in 0..n {
            let best = argmax(self.ctx.get_logits_ith(last));
            out.push(best);
            if k + 1 == n {
                break;
            }
            self.fill(&[best], prompt.len() + k)?;
            self.decode()?;
            last = 0;
        }
        Ok((out, start.elapsed()))
    }

    /// Greedy generation for several prompts at once, as llama.cpp's batched example does it
    /// (needs [`PlainEvaluator::batched`] with a sequence per prompt): the prompts in one
    /// decode, then one decode per step carrying every sequence's last token. Returns each
    /// prompt's tokens and the time spent after the prompts.
    pub fn greedy_batched(
        &mut self,
        prompts: &[Vec<Token>],
        n: usize,
    ) -> Result<(Vec<Vec<Token>>, std::time::Duration), BackendError> {
        let total: usize = prompts.iter().map(Vec::len).sum();
        if prompts.iter().any(Vec::is_empty) || total > self.capacity || n == 0 {
            return Err(BackendError::OutOfMemory(
                "the generation does not fit".into(),
            ));
        }
        self.ctx.clear_kv_cache();
        self.batch.clear();
        let mut lasts = Vec::with_capacity(prompts.len());
        for (s, p) in prompts.iter().enumerate() {
            self.push(p, 0, s)?;
            lasts.push(self.batch.n_tokens() - 1);
        }
        self.decode()?;
        let start = std::time::Instant::now();
        let mut out = vec![Vec::with_capacity(n); prompts.len()];
        for k in 0..n {
            for (s, &at) in lasts.iter().enumerate() {
                out[s].push(argmax(self.ctx.get_logits_ith(at)));
            }
            if k + 1 == n {
                break;
            }
            self.batch.clear();
            for (s, p) in prompts.iter().enumerate() {
                self.push(&out[s][k..=k], p.len() + k, s)?;
                lasts[s] = self.batch.n_tokens() - 1;
            }
            self.decode()?;
        }
        Ok((out, start.elapsed()))
    }

    /// Evaluate `tokens` from an empty cache in one decode; return the last position's logits
    /// for `candidates`.
    pub fn evaluate(
        &mut self,
        tokens: &[Token],
        candidates: &[Token],
    ) -> Result<Vec<f32>, BackendError> {
        if tokens.is_empty() || tokens.len() > self.capacity {
            return Err(BackendError::OutOfMemory(format!(
                "{} tokens do not fit a plain context of {}",
                tokens.len(),
                self.capacity
            )));
        }
        self.ctx.clear_kv_cache();
        self.fill(tokens, 0)?;
        self.decode()?;
        let logits = self.ctx.get_logits_ith(self.batch.n_tokens() - 1);
        Ok(candidates
            .iter()
            .map(|c| {
                logits
                    .get(*c as usize)
                    .copied()
                    .unwrap_or(f32::NEG_INFINITY)
            })
            .collect())
    }

    /// Prefill `tokens` from an empty cache in decodes of at most `chunk` tokens, as a server
    /// that chunks prompts does; return how long each decode took. Later chunks attend to the
    /// earlier ones, so they cost more than the first.
    pub fn prefill_chunks(
        &mut self,
        tokens: &[Token],
        chunk: usize,
    ) -> Result<Vec<std::time::Duration>, BackendError> {
        if tokens.len() > self.capacity || chunk == 0 {
            return Err(BackendError::OutOfMemory(format!(
                "{} tokens in chunks of {chunk} do not fit a plain context of {}",
                tokens.len(),
                self.capacity
            )));
        }
        self.ctx.clear_kv_cache();
        let mut times = Vec::with_capacity(tokens.len().div_ceil(chunk));
        for (c, part) in tokens.chunks(chunk).enumerate() {
            self.fill(part, c * chunk)?;
            let start = std::time::Instant::now();
            self.decode()?;
            times.push(start.elapsed());
        }
        Ok(times)
    }

    /// Put `tokens` in the batch at positions from `first` on, with logits for the last only.
    fn fill(&mut self, tokens: &[Token], first: usize) -> Result<(), BackendError> {
        self.batch.clear();
        self.push(tokens, first, 0)
    }

    /// Add `tokens` of sequence `seq` to the batch at positions from `first` on, with logits
    /// for the last only.
    fn push(&mut self, tokens: &[Token], first: usize, seq: usize) -> Result<(), BackendError> {
        for (i, t) in tokens.iter().enumerate() {
            self.batch
                .add(
                    LlamaToken(*t as i32),
                    (first + i) as i32,
                    &[seq as i32],
                    i + 1 == tokens.len(),
                )
                .map_err(|e| BackendError::OutOfMemory(e.to_string()))?;
        }
        Ok(())
    }

    fn decode(&mut self) -> Result<(), BackendError> {
        self.ctx
            .decode(&mut self.batch)
            .map_err(|e| BackendError::Forward(e.to_string()))
    }
}

/// The index of the largest logit.
fn argmax(logits: &[f32]) -> Token {
    let mut best = 0;
    for (i, l) in logits.iter().enumerate() {
        if *l > logits[best] {
            best = i;
        }
    }
    best as Token
}
