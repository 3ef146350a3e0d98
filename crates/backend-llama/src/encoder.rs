//! Sentence encoders through llama.cpp: a BERT encoder's weights as GGUF (written from its
//! safetensors by the caller), evaluated by llama.cpp's CPU kernels, every operation on every
//! thread.
//!
//! Text handling (tokenizer, special tokens, token offsets) is the wrapped encoder's: this
//! type only replaces the forward, so both paths read the same token ids and a user sees the
//! same model, faster.

use std::num::NonZeroU32;
use std::path::Path;
use std::sync::Mutex;

use engine::backend::{BackendError, Token};
use engine::budget::Vocab;
use engine::encode::{Encoder, EncoderInfo, Words};
use llama_cpp_2::context::params::{LlamaContextParams, LlamaPoolingType};
use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::model::params::LlamaModelParams;
use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::token::LlamaToken;

use crate::runtime;

/// How to run an encoder through llama.cpp.
#[derive(Debug, Clone, PartialEq)]
pub struct LlamaEncoderConfig {
    /// Tokens of one llama.cpp evaluation: a batch's inputs are packed into evaluations of at
    /// most this many tokens (raised to the model's longest input).
    pub ubatch: u32,
    /// Inputs of one evaluation at most.
    pub sequences: u32,
    pub flash_attention: bool,
    /// CPU threads; 0 for every available core.
    pub threads: usize,
    /// Precision of the weight matrices in the file, as the card reports it.
    pub dtype: String,
}

impl Default for LlamaEncoderConfig {
    fn default() -> Self {
        LlamaEncoderConfig {
            ubatch: 512,
            sequences: 64,
            flash_attention: true,
            threads: 0,
            dtype: "F32".into(),
        }
    }
}

/// A llama.cpp context, used by one thread at a time behind the encoder's mutex.
struct Context(LlamaContext<'static>);

// SAFETY: a llama.cpp context is not tied to the thread that made it; the mutex makes every
// use exclusive.
unsafe impl Send for Context {}

/// An encoder whose forward runs in llama.cpp and whose text side is `E`'s.
pub struct LlamaEncoder<E> {
    // Declared before `model`: they borrow the model and must be dropped first.
    ctx: Mutex<(Context, LlamaBatch<'static>)>,
    /// A context that pools nothing: every token's last hidden state.
    token_ctx: Mutex<(Context, LlamaBatch<'static>)>,
    #[allow(dead_code)]
    model: Box<LlamaModel>,
    text: E,
    info: EncoderInfo,
    tokens: usize,
    sequences: usize,
    dims: usize,
}

fn load_err(e: impl std::fmt::Display) -> BackendError {
    BackendError::Load(format!("llama.cpp encoder: {e}"))
}

impl<E: Encoder> LlamaEncoder<E> {
    /// Load `gguf` (the weights of `text`'s model, with its pooling) and evaluate with it.
    pub fn load(
        gguf: &Path,
        text: E,
        config: LlamaEncoderConfig,
    ) -> Result<LlamaEncoder<E>, BackendError> {
        let rt = runtime()?;
        let model = Box::new(
            LlamaModel::load_from_file(rt, gguf, &LlamaModelParams::default())
                .map_err(|e| load_err(format!("{}: {e}", gguf.display())))?,
        );
        let info = text.info().clone();
        let tokens = (config.ubatch as usize).max(info.max_tokens);
        let sequences = config.sequences.max(1) as usize;
        let threads = if config.threads == 0 {
            std::thread::available_parallelism().map_or(2, |n| n.get())
        } else {
            config.threads
        } as i32;
        let pooling = match info.pooling.as_str() {
            "mean" => LlamaPoolingType::Mean,
            "cls" => LlamaPoolingType::Cls,
            other => return Err(load_err(format!("{other} pooling"))),
        };
        let n = NonZeroU32::new(tokens as u32);
        let params = |pooling| {
            LlamaContextParams::default()
                .with_n_ctx(n)
                .with_n_batch(tokens as u32)
                .with_n_ubatch(tokens as u32)
                .with_n_seq_max(sequences as u32)
                .with_embeddings(true)
                .with_pooling_type(pooling)
                // LLAMA_FLASH_ATTN_TYPE_ENABLED (1) or _DISABLED (0).
                .with_flash_attention_policy(i32::from(config.flash_attention))
                .with_n_threads(threads)
                .with_n_threads_batch(threads)
        };
        let model_ref: &LlamaModel = &model;
        // SAFETY: the model is boxed (its address never changes) and lives in the same struct
        // as the contexts, which are dropped first (field order).
        let model_ref: &'static LlamaModel = unsafe { &*(model_ref as *const LlamaModel) };
        let context = |pooling| {
            model_ref
                .new_context(rt, params(pooling))
                .map_err(|e| load_err(format!("cannot create a context: {e}")))
        };
        let ctx = context(pooling)?;
        // Every token's own state, for span heads: a context that pools nothing.
        let token_ctx = context(LlamaPoolingType::None)?;
        let dims = model.n_embd() as usize;
        let mut info = info;
        info.engine = "llama.cpp".into();
        info.dtype = config.dtype;
        Ok(LlamaEncoder {
            ctx: Mutex::new((Context(ctx), LlamaBatch::new(tokens, sequences as i32))),
            token_ctx: Mutex::new((
                Context(token_ctx),
                LlamaBatch::new(tokens, sequences as i32),
            )),
            model,
            text,
            info,
            tokens,
            sequences,
            dims,
        })
    }

    /// Evaluate `inputs` (at most `self.sequences`, `self.tokens` tokens in all) in one
    /// llama.cpp evaluation, appending their vectors to `out`.
    fn evaluate(
        &self,
        inputs: &[Vec<Token>],
        ctx: &mut LlamaContext<'static>,
        batch: &mut LlamaBatch<'static>,
        out: &mut Vec<Vec<f32>>,
    ) -> Result<(), BackendError> {
        let fwd = |e: String| BackendError::Forward(e);
        batch.clear();
        for (s, input) in inputs.iter().enumerate() {
            for (i, &t) in input.iter().enumerate() {
                batch
                    .add(LlamaToken(t as i32), i as i32, &[s as i32], true)
                    .map_err(|e| fwd(e.to_string()))?;
            }
        }
        ctx.encode(batch).map_err(|e| fwd(e.to_string()))?;
        for s in 0..inputs.len() {
            let v = ctx
                .embeddings_seq_ith(s as i32)
                .map_err(|e| fwd(e.to_string()))?;
            let mut v = v[..self.dims.min(v.len())].to_vec();
            if self.info.normalize {
                let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-12);
                v.iter_mut().for_each(|x| *x /= norm);
            }
            out.push(v);
        }
        Ok(())
    }
}

impl<E: Encoder> Vocab for LlamaEncoder<E> {
    fn tokenize_text(&self, text: &str) -> Result<Vec<Token>, BackendError> {
        self.text.tokenize_text(text)
    }

    fn token_bytes(&self, token: Token) -> Vec<u8> {
        self.text.token_bytes(token)
    }

    fn vocab_size(&self) -> usize {
        self.text.vocab_size()
    }
}

impl<E: Encoder> Encoder for LlamaEncoder<E> {
    fn info(&self) -> &EncoderInfo {
        &self.info
    }

    fn tokenize(&self, text: &str) -> Result<Vec<Token>, BackendError> {
        self.text.tokenize(text)
    }

    fn special(&self) -> (Vec<Token>, Vec<Token>) {
        self.text.special()
    }

    fn words(&self, text: &str) -> Result<Words, BackendError> {
        self.text.words(text)
    }

    fn embed(&self, batch: &[Vec<Token>]) -> Result<Vec<Vec<f32>>, BackendError> {
        let mut guard = self
            .ctx
            .lock()
            .map_err(|_| BackendError::Forward("the encoder's context was poisoned".into()))?;
        let (Context(ctx), llama_batch) = &mut *guard;
        let mut out = Vec::with_capacity(batch.len());
        for (start, end) in self.packs(batch)? {
            self.evaluate(&batch[start..end], ctx, llama_batch, &mut out)?;
        }
        Ok(out)
    }

    fn token_states(&self, batch: &[Vec<Token>]) -> Result<Vec<Vec<Vec<f32>>>, BackendError> {
        let fwd = |e: String| BackendError::Forward(e);
        let mut guard = self
            .token_ctx
            .lock()
            .map_err(|_| fwd("the encoder's context was poisoned".into()))?;
        let (Context(ctx), llama_batch) = &mut *guard;
        let mut out = Vec::with_capacity(batch.len());
        for (start, end) in self.packs(batch)? {
            llama_batch.clear();
            for (s, input) in batch[start..end].iter().enumerate() {
                for (i, &t) in input.iter().enumerate() {
                    llama_batch
                        .add(LlamaToken(t as i32), i as i32, &[s as i32], true)
                        .map_err(|e| fwd(e.to_string()))?;
                }
            }
            ctx.encode(llama_batch).map_err(|e| fwd(e.to_string()))?;
            let mut at = 0i32;
            for input in &batch[start..end] {
                let mut rows = Vec::with_capacity(input.len());
                for _ in input {
                    let v = ctx.embeddings_ith(at).map_err(|e| fwd(e.to_string()))?;
                    rows.push(v[..self.dims.min(v.len())].to_vec());
                    at += 1;
                }
                out.push(rows);
            }
        }
        Ok(out)
    }
}

impl<E: Encoder> LlamaEncoder<E> {
    /// Inputs packed in order into evaluations of at most `tokens` tokens and `sequences`
    /// inputs: each evaluation's range of `batch`.
    fn packs(&self, batch: &[Vec<Token>]) -> Result<Vec<(usize, usize)>, BackendError> {
        if batch.iter().any(|t| t.is_empty() || t.len() > self.tokens) {
            return Err(BackendError::Forward(format!(
                "an input must hold 1 to {} tokens",
                self.tokens
            )));
        }
        let mut out = Vec::new();
        let mut start = 0;
        while start < batch.len() {
            let mut end = start;
            let mut used = 0;
            while end < batch.len()
                && end - start < self.sequences
                && (end == start || used + batch[end].len() <= self.tokens)
            {
                used += batch[end].len();
                end += 1;
            }
            out.push((start, end));
            start = end;
        }
        Ok(out)
    }
}
