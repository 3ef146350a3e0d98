//! GGUF causal language models through llama.cpp (`llama-cpp-2`), behind [`engine::Backend`].
//!
//! One [`LlamaSession`] owns one llama.cpp context whose KV cache has one stream per sequence
//! (`kv_unified = false`). Sequence 0 holds the system prompt for the whole life of the
//! session. A forward evaluates trees of nodes: each node gets its own sequence, which first
//! receives its parent's cells in use (`llama_state_seq_get`/`_set`: only those cells, not
//! the parent's whole stream as `llama_memory_seq_cp` would copy), so a
//! request's state is evaluated once and each question branches from it. Nodes of one tree
//! level (across requests) share one `llama_decode`, each in micro-batches of its own (see
//! `process`). Every sequence but 0 is removed when the forward ends, whatever happens.
//!
//! Why separate streams: with this llama.cpp, a unified cache let sibling sequences at the
//! same positions change each other's logits (by up to 0.85 on SmolLM2, see
//! `examples/branches.rs`); separate streams give every branch exactly the logits it gets
//! alone.

pub mod encoder;
mod prefix;
mod schema;
pub use encoder::{LlamaEncoder, LlamaEncoderConfig};

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use engine::backend::{
    Backend, BackendError, BackendInfo, Feed, Generator, Node, RootLogits, Sampled, Sampling,
    Session, Token,
};
use llama_cpp_2::context::params::LlamaContextParams;
use llama_cpp_2::context::session::{LlamaStateSeqFlags, SeqState};
use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::llama_backend::LlamaBackend as Runtime;
use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::model::params::LlamaModelParams;
use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::sampling::LlamaSampler;
use llama_cpp_2::token::LlamaToken;
use llama_cpp_2::DecodeError;
use schema::Schemas;

static RUNTIME: OnceLock<Result<Runtime, BackendError>> = OnceLock::new();

/// llama.cpp's process-wide backend, initialised once (logs go to `tracing`, off).
pub fn runtime() -> Result<&'static Runtime, BackendError> {
    RUNTIME
        .get_or_init(|| {
            llama_cpp_2::send_logs_to_tracing(
                llama_cpp_2::LogOptions::default().with_logs_enabled(false),
            );
            Runtime::init().map_err(|e| BackendError::Load(e.to_string()))
        })
        .as_ref()
        .map_err(Clone::clone)
}

/// How to open a GGUF model.
#[derive(Debug, Clone, PartialEq)]
pub struct LlamaConfig {
    /// Tokens one sequence holds (system prompt, state, question and label steps).
    pub context_tokens: u32,
    /// Sequences (KV streams) of the context, the system prompt's included.
    pub sequences: u32,
    /// CPU threads for evaluation; 0 for every available core.
    pub threads: usize,
    /// Tokens per llama.cpp micro-batch.
    pub ubatch: u32,
    /// Flash attention for decisions: `None` chooses at load by measurement
    /// ([`engine::backend::FlashProbe`]).
    pub flash_attention: Option<bool>,
    /// A JSON file keeping those measurements per model file (path, size, modification time,
    /// threads), so a model keeps its choice, and its exact answers, across loads.
    pub probe_cache: Option<PathBuf>,
    /// Tokens of KV cells the decision prefix cache keeps across requests (0: off); turned
    /// into bytes with the model's cells per token.
    pub prefix_cache_tokens: usize,
}

impl Default for LlamaConfig {
    fn default() -> Self {
        LlamaConfig {
            context_tokens: 8192,
            sequences: 8,
            threads: 0,
            ubatch: 512,
            flash_attention: None,
            probe_cache: None,
            prefix_cache_tokens: 16_384,
        }
    }
}

/// A GGUF model loaded through llama.cpp.
pub struct LlamaBackend {
    model: LlamaModel,
    info: BackendInfo,
    config: LlamaConfig,
    schemas: Schemas,
}

fn file_type_name(ft: &str) -> String {
    // llama_ftype values of common quantizations.
    match ft {
        "0" => "F32",
        "1" => "F16",
        "2" => "Q4_0",
        "3" => "Q4_1",
        "7" => "Q8_0",
        "8" => "Q5_0",
        "9" => "Q5_1",
        "10" => "Q2_K",
        "11" => "Q3_K_S",
        "12" => "Q3_K_M",
        "13" => "Q3_K_L",
        "14" => "Q4_K_S",
        "15" => "Q4_K_M",
        "16" => "Q5_K_S",
        "17" => "Q5_K_M",
        "18" => "Q6_K",
        "32" => "BF16",
        other => return format!("gguf-ftype-{other}"),
    }
    .to_string()
}

impl LlamaBackend {
    /// Load a GGUF file.
    pub fn load(path: &Path, mut config: LlamaConfig) -> Result<LlamaBackend, BackendError> {
        let rt = runtime()?;
        if !path.is_file() {
            return Err(BackendError::Load(format!(
                "{} is not a file",
                path.display()
            )));
        }
        let model = LlamaModel::load_from_file(rt, path, &LlamaModelParams::default())
            .map_err(|e| BackendError::Load(format!("{}: {e}", path.display())))?;
        if config.threads == 0 {
            config.threads = std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(2);
        }
        let trained = model.n_ctx_train() as usize;
        // llama.cpp pads each stream to a multiple of 256 tokens.
        config.context_tokens = config.context_tokens.max(256).div_ceil(256) * 256;
        config.sequences = config.sequences.clamp(4, 256);
        let dtype = model
            .meta_val_str("general.file_type")
            .map(|s| file_type_name(&s))
            .unwrap_or_else(|_| "unknown".into());
        let info = BackendInfo {
            engine: "llama.cpp".into(),
            device: "cpu".into(),
            dtype,
            context_tokens: config.context_tokens as usize,
            max_sequences: config.sequences as usize - 1,
            trained_context: trained,
            threads: config.threads,
            flash_attention: config.flash_attention,
            micro_batch_tokens: Some(config.ubatch.min(config.context_tokens) as usize),
            flash_attention_probe: None,
            prefix_cache_bytes: Some(config.prefix_cache_tokens * kv_bytes_per_token(&model)),
            hidden_size: usize::try_from(model.n_embd()).ok(),
        };
        let mut backend = LlamaBackend {
            model,
            info,
            config,
            schemas: Schemas::default(),
        };
        if backend.config.flash_attention.is_none() {
            let probe = backend.remembered_probe(path)?;
            let on = probe.same_argmax
                && probe.max_logit_difference <= FLASH_TOLERANCE
                && probe.on_ms < probe.off_ms * FLASH_GAIN;
            backend.config.flash_attention = Some(on);
            backend.info.flash_attention = Some(on);
            backend.info.flash_attention_probe = Some(probe);
        }
        Ok(backend)
    }

    /// Load only a GGUF file's tokenizer (no weights): tokenize and read tokens, no sessions.
    pub fn load_tokenizer(path: &Path) -> Result<LlamaBackend, BackendError> {
        let rt = runtime()?;
        let params = LlamaModelParams::default().with_vocab_only(true);
        let model = LlamaModel::load_from_file(rt, path, &params)
            .map_err(|e| BackendError::Load(format!("{}: {e}", path.display())))?;
        let info = BackendInfo {
            engine: "llama.cpp".into(),
            device: "cpu".into(),
            dtype: "vocab-only".into(),
            context_tokens: 0,
            max_sequences: 0,
            trained_context: model.n_ctx_train() as usize,
            threads: 1,
            flash_attention: None,
            micro_batch_tokens: None,
            flash_attention_probe: None,
            prefix_cache_bytes: None,
            hidden_size: usize::try_from(model.n_embd()).ok(),
        };
        Ok(LlamaBackend {
            model,
            info,
            config: LlamaConfig::default(),
            schemas: Schemas::default(),
        })
    }

    /// Metadata string of the GGUF file.
    pub fn meta(&self, key: &str) -> Option<String> {
        self.model.meta_val_str(key).ok()
    }
}

impl LlamaBackend {
    /// The llama.cpp model, for tools that measure this backend against plain llama.cpp on the
    /// same weights (the `bench` crate).
    pub fn llama_model(&self) -> &LlamaModel {
        &self.model
    }

    /// The CPU threads every context of this model evaluates with, as llama.cpp takes them.
    pub fn threads(&self) -> i32 {
        i32::try_from(self.config.threads).unwrap_or(2)
    }

    /// A context of `n_ctx` tokens split into `seqs` KV streams (one per sequence), with the
    /// attention path chosen at load: the configuration whose branches the engine's self-check
    /// measures exact.
    pub fn context(&self, n_ctx: u32, seqs: u32) -> Result<LlamaContext<'_>, BackendError> {
        self.context_with(n_ctx, seqs, self.config.flash_attention.unwrap_or(false))
    }

    /// A context of `n_ctx` cells shared by `slots` sequences, as generation uses it; with its
    /// batch size (steps hold at most that many tokens).
    pub fn generation_context(
        &self,
        slots: u32,
        n_ctx: u32,
    ) -> Result<(LlamaContext<'_>, u32), BackendError> {
        let threads = self.threads();
        let n_batch = n_ctx.min(GENERATION_BATCH);
        let params = LlamaContextParams::default()
            .with_n_ctx(NonZeroU32::new(n_ctx))
            .with_n_batch(n_batch)
            .with_n_ubatch(self.config.ubatch.min(n_batch))
            .with_n_seq_max(slots)
            // One cache for every slot: llama.cpp then evaluates the slots' tokens of a step in
            // one micro-batch (separate streams split a step into one micro-batch per slot).
            // Generation does not promise bit-equal logits across batch compositions.
            .with_kv_unified(true)
            // LLAMA_FLASH_ATTN_TYPE_DISABLED: with separate streams, auto (flash attention on
            // CPU) turned greedy SmolLM2 output into broken words in this llama.cpp build.
            .with_flash_attention_policy(0)
            .with_n_threads(threads)
            .with_n_threads_batch(threads);
        let ctx = self
            .model
            .new_context(runtime()?, params)
            .map_err(|e| BackendError::Load(format!("cannot create a llama.cpp context: {e}")))?;
        Ok((ctx, n_batch))
    }

    fn context_with(
        &self,
        n_ctx: u32,
        seqs: u32,
        flash_attention: bool,
    ) -> Result<LlamaContext<'_>, BackendError> {
        let rt = runtime()?;
        let threads = self.threads();
        let params = LlamaContextParams::default()
            .with_n_ctx(NonZeroU32::new(n_ctx))
            .with_n_batch(n_ctx)
            .with_n_ubatch(self.config.ubatch.min(n_ctx))
            .with_n_seq_max(seqs)
            .with_kv_unified(false)
            // LLAMA_FLASH_ATTN_TYPE_ENABLED (1) or _DISABLED (0).
            .with_flash_attention_policy(i32::from(flash_attention))
            .with_n_threads(threads)
            .with_n_threads_batch(threads);
        self.model
            .new_context(rt, params)
            .map_err(|e| BackendError::Load(format!("cannot create a llama.cpp context: {e}")))
    }
}

/// Bytes one token's KV cells take in a decision context: keys and values (F16) of every
/// layer's key-value heads.
fn kv_bytes_per_token(model: &LlamaModel) -> usize {
    let heads = model.n_head().max(1) as usize;
    let head_dim = model.n_embd().max(0) as usize / heads;
    model.n_layer() as usize * 2 * head_dim * model.n_head_kv() as usize * 2
}

/// Tokens of the load-time flash attention measurement.
const FLASH_PROBE_TOKENS: usize = 256;
/// Largest logit difference between the two attention paths accepted as rounding (the
/// catalogue's quantized models differed by 0.29 to 0.68 between them on next-token logits).
const FLASH_TOLERANCE: f32 = 1.0;
/// Flash attention is kept only if it takes less than this share of the plain path's time.
const FLASH_GAIN: f64 = 0.97;

/// Probes measured in this process, by model file: one measurement per file, so two loads of
/// the same weights choose the same attention path and give the same bits.
static PROBES: Mutex<Option<HashMap<String, engine::backend::FlashProbe>>> = Mutex::new(None);

impl LlamaBackend {
    /// The flash attention probe of the model file at `path`: remembered in this process or in
    /// the probe cache file, else measured now and remembered in both.
    fn remembered_probe(&self, path: &Path) -> Result<engine::backend::FlashProbe, BackendError> {
        let meta = std::fs::metadata(path).ok();
        let key = format!(
            "{}|{}|{}|{} threads",
            std::fs::canonicalize(path)
                .unwrap_or_else(|_| path.to_path_buf())
                .display(),
            meta.as_ref().map_or(0, |m| m.len()),
            meta.and_then(|m| m.modified().ok())
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map_or(0, |d| d.as_secs()),
            self.config.threads
        );
        // Held while measuring: concurrent loads of one file wait for its one measurement.
        let mut memo = PROBES.lock().unwrap_or_else(|e| e.into_inner());
        let memo = memo.get_or_insert_with(HashMap::new);
        if let Some(p) = memo.get(&key) {
            return Ok(p.clone());
        }
        let read_file = |f: &Path| -> HashMap<String, engine::backend::FlashProbe> {
            std::fs::read(f)
                .ok()
                .and_then(|b| serde_json::from_slice(&b).ok())
                .unwrap_or_default()
        };
        let cached = self.config.probe_cache.as_deref().map(read_file);
        let probe = match cached.as_ref().and_then(|c| c.get(&key)) {
            Some(p) => p.clone(),
            None => {
                let p = self.probe_flash_attention()?;
                if let Some(f) = self.config.probe_cache.as_deref() {
                    let mut all = read_file(f);
                    all.insert(key.clone(), p.clone());
                    // A cache that cannot be written only costs a measurement next time.
                    if let Ok(text) = serde_json::to_vec_pretty(&all) {
                        let tmp = f.with_extension(format!("tmp{}", std::process::id()));
                        if std::fs::write(&tmp, text).is_ok() {
                            let _ = std::fs::rename(&tmp, f);
                        }
                    }
                }
                p
            }
        };
        memo.insert(key, probe.clone());
        Ok(probe)
    }

    /// Evaluate the same tokens with flash attention off and on, alternately, twice each.
    fn probe_flash_attention(&self) -> Result<engine::backend::FlashProbe, BackendError> {
        let text = "The parcel arrived two days late, the box was crushed, and the invoice \
            listed three items I never ordered; support has not answered my two emails. "
            .repeat(16);
        let mut tokens = Backend::tokenize(self, &text, false)?;
        tokens.truncate(FLASH_PROBE_TOKENS);
        let n = tokens.len();
        let run = |fa: bool| -> Result<(f64, Vec<f32>), BackendError> {
            let mut ctx = self.context_with(512, 1, fa)?;
            let mut batch = LlamaBatch::new(n, 1);
            for (i, &t) in tokens.iter().enumerate() {
                batch
                    .add(LlamaToken(t as i32), i as i32, &[0], i + 1 == n)
                    .map_err(|e| BackendError::Forward(e.to_string()))?;
            }
            let start = std::time::Instant::now();
            ctx.decode(&mut batch)
                .map_err(|e| BackendError::Forward(e.to_string()))?;
            let ms = start.elapsed().as_secs_f64() * 1e3;
            Ok((ms, ctx.get_logits_ith(n as i32 - 1).to_vec()))
        };
        let (off1, off_logits) = run(false)?;
        let (on1, on_logits) = run(true)?;
        let (off2, _) = run(false)?;
        let (on2, _) = run(true)?;
        let argmax = |v: &[f32]| {
            v.iter()
                .enumerate()
                .max_by(|a, b| a.1.total_cmp(b.1))
                .map(|(i, _)| i)
        };
        let max_logit_difference = off_logits
            .iter()
            .zip(&on_logits)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0f32, f32::max);
        Ok(engine::backend::FlashProbe {
            tokens: n,
            off_ms: off1.min(off2),
            on_ms: on1.min(on2),
            max_logit_difference,
            same_argmax: argmax(&off_logits) == argmax(&on_logits),
        })
    }
}

impl engine::budget::Vocab for LlamaBackend {
    fn tokenize_text(&self, text: &str) -> Result<Vec<Token>, BackendError> {
        Backend::tokenize(self, text, false)
    }

    /// GGUF vocabularies are byte-level BPE or SentencePiece with byte fallback: every byte of
    /// the text lies in some token's piece.
    fn covers_text(&self) -> bool {
        true
    }

    fn token_bytes(&self, token: Token) -> Vec<u8> {
        self.model
            .vocab()
            .token_to_piece(LlamaToken(token as i32), true, None)
    }

    fn vocab_size(&self) -> usize {
        self.model.n_vocab().max(0) as usize
    }
}

impl Backend for LlamaBackend {
    fn info(&self) -> &BackendInfo {
        &self.info
    }

    fn tokenize(&self, text: &str, special: bool) -> Result<Vec<Token>, BackendError> {
        let tokens = self.model.vocab().tokenize(text.as_bytes(), false, special);
        tokens
            .into_iter()
            .map(|t| {
                u32::try_from(t.0)
                    .map_err(|_| BackendError::Tokenize(format!("negative token id {}", t.0)))
            })
            .collect()
    }

    fn token_text(&self, token: Token) -> String {
        String::from_utf8_lossy(&engine::budget::Vocab::token_bytes(self, token)).into_owned()
    }

    fn generator(
        &self,
        slots: u32,
        slot_tokens: u32,
    ) -> Result<Box<dyn Generator + '_>, BackendError> {
        let slots = slots.clamp(1, 256);
        let slot_tokens = slot_tokens.max(256).div_ceil(256) * 256;
        let (ctx, n_batch) = self.generation_context(slots, slots * slot_tokens)?;
        Ok(Box::new(LlamaGenerator {
            model: &self.model,
            schemas: &self.schemas,
            ctx,
            batch: LlamaBatch::new(n_batch as usize, 1),
            batch_capacity: n_batch as usize,
            samplers: (0..slots).map(|_| None).collect(),
            wants: vec![(false, 0); slots as usize],
            slot_tokens: slot_tokens as usize,
        }))
    }

    fn chat_template(&self) -> Option<String> {
        self.model
            .chat_template(None)
            .ok()
            .and_then(|t| t.to_string().ok())
    }

    fn bos_eos_text(&self) -> (String, String) {
        let vocab = self.model.vocab();
        let text = |t: LlamaToken| {
            String::from_utf8_lossy(&vocab.token_to_piece(t, true, None)).into_owned()
        };
        (text(vocab.bos()), text(vocab.eos()))
    }

    fn ends_generation(&self, token: Token) -> bool {
        self.model.vocab().is_eog(LlamaToken(token as i32))
    }

    fn schema_grammar(&self, schema: &str) -> Result<String, BackendError> {
        self.schemas
            .grammar(&self.model, schema)
            .map_err(|e| BackendError::Tokenize(format!("the JSON schema cannot be used: {e}")))
    }

    fn session(&self) -> Result<Box<dyn Session + '_>, BackendError> {
        let per_seq = self.config.context_tokens;
        let seqs = self.config.sequences;
        let n_ctx = per_seq * seqs;
        let ctx = self.context(n_ctx, seqs)?;
        Ok(Box::new(LlamaSession {
            ctx,
            n_vocab: self.model.n_vocab().max(0) as usize,
            batch: LlamaBatch::new(n_ctx as usize, 1),
            batch_capacity: n_ctx as usize,
            per_seq: per_seq as usize,
            sequences: seqs,
            prefix_len: 0,
            prefix_cells: None,
            free: (1..seqs as i32).rev().collect(),
            cache: prefix::PrefixCache::new(
                self.info.prefix_cache_bytes.unwrap_or(0),
                self.info.micro_batch_tokens.unwrap_or(0),
            ),
            cached: Vec::new(),
        }))
    }
}

/// One node of a forward, in an arena.
struct Item<'n> {
    node: &'n Node,
    root: usize,
    parent: Option<usize>,
    /// Position of the node's first token.
    pos: usize,
    /// Index of the node's first read in its root's depth-first read order.
    read_base: usize,
    children: Vec<usize>,
    /// Levels of descendants under this node.
    height: usize,
    seq: i32,
    /// The node's prefix-cache key (`None` for a growing node, which is never cached).
    key: Option<Vec<u32>>,
    /// What the prefix cache held for it: then it is not evaluated.
    hit: Option<prefix::Hit>,
    /// For a root without a hit: a cached root's cells good for its first tokens, which are
    /// then not evaluated.
    start: Option<prefix::Partial>,
    /// Its sequence's cells, once read (a root's, for its children and the cache).
    cells: Option<Arc<SeqState>>,
}

/// A node growing one token per step.
struct Growing {
    item: usize,
    /// Where the logits of its next step are in the last decode.
    batch_index: i32,
    picked: Vec<Token>,
    log: Vec<Vec<f32>>,
    /// The candidates of its next step (`None` once it has ended).
    next: Option<Vec<Token>>,
}

/// A llama.cpp context owned by the model's worker thread.
pub struct LlamaSession<'m> {
    ctx: LlamaContext<'m>,
    n_vocab: usize,
    batch: LlamaBatch<'static>,
    batch_capacity: usize,
    per_seq: usize,
    sequences: u32,
    prefix_len: usize,
    /// Sequence 0's cells (the system prompt), read once after it is evaluated.
    prefix_cells: Option<Arc<SeqState>>,
    /// Free sequence ids, highest first: a pop takes the lowest.
    free: Vec<i32>,
    cache: prefix::PrefixCache,
    /// Per root of the last forward: tokens the prefix cache answered.
    cached: Vec<usize>,
}

impl LlamaSession<'_> {
    /// Decode the batch, which holds tokens of `nodes` nodes; each decode is logged at `debug`.
    fn decode(&mut self, nodes: usize) -> Result<(), BackendError> {
        let started = std::time::Instant::now();
        let result = match self.ctx.decode(&mut self.batch) {
            Ok(()) => Ok(()),
            Err(DecodeError::NoKvCacheSlot) => Err(BackendError::OutOfMemory(
                "no room in the KV cache for this forward".into(),
            )),
            Err(e) => Err(BackendError::Forward(e.to_string())),
        };
        tracing::debug!(
            nodes,
            tokens = self.batch.n_tokens(),
            ms = started.elapsed().as_secs_f64() * 1e3,
            "a decision decode evaluated"
        );
        result
    }

    /// The forward's nodes in an arena (depth first), with what the prefix cache holds for
    /// each; the roots' indices; each root's count of reads.
    fn arena<'n>(
        roots: &[&'n Node],
        prefix_len: usize,
        cache: &mut prefix::PrefixCache,
    ) -> (Vec<Item<'n>>, Vec<usize>, Vec<usize>) {
        struct Walk<'a, 'n> {
            items: Vec<Item<'n>>,
            cache: &'a mut prefix::PrefixCache,
        }
        fn add<'n>(
            w: &mut Walk<'_, 'n>,
            node: &'n Node,
            root: usize,
            parent: Option<usize>,
            pos: usize,
            reads: &mut usize,
        ) -> usize {
            let idx = w.items.len();
            let key = match parent.map(|p| w.items[p].key.as_deref()) {
                _ if node.grow.is_some() || !w.cache.enabled() => None,
                None => Some(prefix::PrefixCache::key(None, &node.tokens)),
                Some(Some(pk)) => Some(prefix::PrefixCache::key(Some(pk), &node.tokens)),
                Some(None) => None,
            };
            let hit = key
                .as_deref()
                .and_then(|k| w.cache.lookup(k, &node.reads, !node.children.is_empty()));
            let start = if hit.is_none() && key.is_some() && parent.is_none() {
                w.cache
                    .lookup_start(&node.tokens)
                    .filter(|s| node.reads.iter().all(|r| r.at >= s.cut))
            } else {
                None
            };
            w.items.push(Item {
                node,
                root,
                parent,
                pos,
                read_base: *reads,
                children: Vec::new(),
                height: 0,
                seq: 0,
                key,
                cells: hit.as_ref().and_then(|h| h.cells.clone()),
                hit,
                start,
            });
            *reads += node.reads.len();
            let mut height = 0;
            for child in &node.children {
                let c = add(w, child, root, Some(idx), pos + node.tokens.len(), reads);
                w.items[idx].children.push(c);
                height = height.max(w.items[c].height + 1);
            }
            w.items[idx].height = height;
            idx
        }
        let mut w = Walk {
            items: Vec::new(),
            cache,
        };
        let mut top = Vec::with_capacity(roots.len());
        let mut counts = Vec::with_capacity(roots.len());
        for (r, node) in roots.iter().enumerate() {
            let mut reads = 0;
            top.push(add(&mut w, node, r, None, prefix_len, &mut reads));
            counts.push(reads);
        }
        (w.items, top, counts)
    }

    /// Evaluate `level` (nodes whose parents hold their sequences), then their children.
    fn process(
        &mut self,
        items: &mut [Item<'_>],
        level: &[usize],
        out: &mut [RootLogits],
        grown: &mut Vec<(usize, Vec<Vec<f32>>)>,
    ) -> Result<(), BackendError> {
        let reserve = level.iter().map(|&i| items[i].height).max().unwrap_or(0);
        let mut next = 0;
        while next < level.len() {
            if self.free.len() <= reserve {
                return Err(BackendError::Forward("out of sequence ids".into()));
            }
            let room = self.free.len() - reserve;
            let mut chunk = Vec::new();
            let mut tokens = 0;
            while next < level.len() && chunk.len() < room {
                let item = &items[level[next]];
                let len = item.node.tokens.len();
                // A node the prefix cache answers adds no tokens to the decode; a root whose
                // start it holds, only the rest.
                let n = match (&item.hit, &item.start) {
                    (Some(_), _) => 0,
                    (None, Some(s)) => len - s.cut,
                    (None, None) => len,
                };
                if !chunk.is_empty() && tokens + n > self.batch_capacity {
                    break;
                }
                if item.pos + len > self.per_seq {
                    return Err(BackendError::OutOfMemory(format!(
                        "a sequence of {} tokens exceeds the context of {}",
                        item.pos + len,
                        self.per_seq
                    )));
                }
                tokens += n;
                chunk.push(level[next]);
                next += 1;
            }
            // The chunk's sequence ids: the lowest free ones, highest first. llama.cpp splits a
            // decode over separate streams into micro-batches of consecutive *ascending* ids,
            // so descending ids give every node micro-batches of its own: the same shapes as
            // when it is evaluated alone, whatever its siblings or the requests batched with
            // it, and whatever ran before. (Packing siblings into shared micro-batches saved
            // about 7% on ten yes/no questions on qwen2.5-1.5b but let a question's
            // probabilities move with its siblings': quantized kernels round differently with
            // the batch's shape.) Growth steps queue their nodes in the same order.
            if self.free.len() < chunk.len() {
                return Err(BackendError::Forward("out of sequence ids".into()));
            }
            let ids = self.free.split_off(self.free.len() - chunk.len());
            // Each parent's cells in use, read once for all its children in the chunk: a child
            // receives those cells only, not a copy of the parent's whole stream (llama.cpp's
            // cross-stream `seq_cp` copies every cell of every layer: 224 MiB on qwen2.5-1.5b
            // at 8,192 tokens a stream). A node the cache answers needs none.
            // `from[k]` is the index in `parents` of chunk node k's parent's cells.
            let mut parents: Vec<(Option<usize>, Arc<SeqState>)> = Vec::new();
            let mut from = Vec::with_capacity(chunk.len());
            for &it in &chunk {
                if items[it].hit.is_some() || items[it].start.is_some() {
                    from.push(None);
                    continue;
                }
                let parent = items[it].parent;
                let at = match parents.iter().position(|(p, _)| *p == parent) {
                    Some(at) => at,
                    None => {
                        parents.push((parent, self.parent_cells(items, parent)?));
                        parents.len() - 1
                    }
                };
                from.push(Some(at));
            }
            // Give each node a sequence holding its parent's cells, and queue its tokens; a
            // node the cache answers gets its reads from there.
            self.batch.clear();
            let mut growing: Vec<Growing> = Vec::new();
            let mut read_slots: Vec<(usize, usize, i32)> = Vec::new(); // (item, read idx, batch idx)
            for ((&it, &seq), &at) in chunk.iter().zip(&ids).zip(&from) {
                items[it].seq = seq;
                let (root, base) = (items[it].root, items[it].read_base);
                if let Some(hit) = items[it].hit.as_mut() {
                    for (ri, logits) in hit.logits.iter_mut().enumerate() {
                        out[root][base + ri] = std::mem::take(logits);
                    }
                    self.cached[root] += items[it].node.tokens.len();
                    continue;
                }
                let mut first = 0;
                if let Some(start) = &items[it].start {
                    // The cached root's cells, cut back to the start this root shares.
                    self.ctx
                        .state_seq_set(&start.cells, seq)
                        .map_err(|e| BackendError::Forward(e.to_string()))?;
                    let cut = u32::try_from(items[it].pos + start.cut)
                        .map_err(|_| BackendError::Forward("position overflow".into()))?;
                    if !self
                        .ctx
                        .clear_kv_cache_seq(Some(seq as u32), Some(cut), None)
                        .unwrap_or(false)
                    {
                        return Err(BackendError::Forward(
                            "the cache cannot cut a sequence".into(),
                        ));
                    }
                    first = start.cut;
                    self.cached[root] += start.cut;
                } else if let Some(at) = at {
                    self.ctx
                        .state_seq_set(&parents[at].1, seq)
                        .map_err(|e| BackendError::Forward(e.to_string()))?;
                } else {
                    continue;
                }
                let node = items[it].node;
                if node.tokens.is_empty() {
                    return Err(BackendError::Forward("a node has no tokens".into()));
                }
                if let Some(g) = &node.grow {
                    let end = items[it].pos + node.tokens.len() + g.0.max_tokens();
                    if end > self.per_seq {
                        return Err(BackendError::OutOfMemory(format!(
                            "a growing sequence of up to {end} tokens exceeds the context of {}",
                            self.per_seq
                        )));
                    }
                }
                let last = node.tokens.len() - 1;
                for (k, tok) in node.tokens.iter().enumerate().skip(first) {
                    let read = node.reads.iter().position(|r| r.at == k);
                    let bi = self.batch.n_tokens();
                    let pos = i32::try_from(items[it].pos + k)
                        .map_err(|_| BackendError::Forward("position overflow".into()))?;
                    let grows = k == last && node.grow.is_some();
                    if grows {
                        growing.push(Growing {
                            item: it,
                            batch_index: bi,
                            picked: Vec::new(),
                            log: Vec::new(),
                            next: None,
                        });
                    }
                    self.batch
                        .add(
                            LlamaToken(*tok as i32),
                            pos,
                            &[seq],
                            read.is_some() || grows,
                        )
                        .map_err(|e| BackendError::OutOfMemory(e.to_string()))?;
                    if read.is_some() {
                        for (ri, r) in node.reads.iter().enumerate() {
                            if r.at == k {
                                read_slots.push((it, ri, bi));
                            }
                        }
                    }
                }
            }
            drop(parents);
            if self.batch.n_tokens() > 0 {
                self.decode(chunk.len())?;
            }
            for (it, ri, bi) in read_slots {
                let picked = self.candidate_logits(bi, &items[it].node.reads[ri].candidates)?;
                let slot = items[it].read_base + ri;
                let root = items[it].root;
                out[root][slot] = picked;
            }
            self.remember(items, &chunk, out)?;
            if !growing.is_empty() {
                self.grow(items, &mut growing)?;
                grown.extend(growing.into_iter().map(|g| (g.item, g.log)));
            }
            let children: Vec<usize> = chunk
                .iter()
                .flat_map(|&i| items[i].children.clone())
                .collect();
            if !children.is_empty() {
                self.process(items, &children, out, grown)?;
            }
            for &it in &chunk {
                let seq = items[it].seq;
                let _ = self.ctx.clear_kv_cache_seq(Some(seq as u32), None, None);
                self.free.push(seq);
            }
            // The free ids stay in descending order: the next chunk takes the lowest first.
            self.free.sort_unstable_by(|a, b| b.cmp(a));
        }
        Ok(())
    }

    /// The cells a child of `parent` (`None`: the system prompt) starts from.
    fn parent_cells(
        &self,
        items: &[Item<'_>],
        parent: Option<usize>,
    ) -> Result<Arc<SeqState>, BackendError> {
        let (held, seq) = match parent {
            None => (self.prefix_cells.as_ref(), 0),
            Some(p) => (items[p].cells.as_ref(), items[p].seq),
        };
        if let Some(cells) = held {
            return Ok(cells.clone());
        }
        let cells = self.read_cells(seq)?;
        tracing::trace!(
            parent = seq,
            bytes = cells.byte_len(),
            "a parent's cells read for its children"
        );
        Ok(cells)
    }

    /// Sequence `seq`'s cells in use.
    fn read_cells(&self, seq: i32) -> Result<Arc<SeqState>, BackendError> {
        self.ctx
            .state_seq_get(seq, LlamaStateSeqFlags::empty())
            .map(Arc::new)
            .map_err(|e| BackendError::Forward(e.to_string()))
    }

    /// Keep in the prefix cache what the chunk's evaluated nodes left: their reads' logits
    /// and a root's cells (read now, and kept for its children too).
    fn remember(
        &mut self,
        items: &mut [Item<'_>],
        chunk: &[usize],
        out: &[RootLogits],
    ) -> Result<(), BackendError> {
        for &it in chunk {
            if items[it].hit.is_some() {
                continue;
            }
            // Every key was made when the arena was built; the cache can keep this one.
            let Some(key) = items[it].key.take() else {
                continue;
            };
            let item = &items[it];
            let logits: Vec<Vec<f32>> = (0..item.node.reads.len())
                .map(|ri| out[item.root][item.read_base + ri].clone())
                .collect();
            let cells = if item.parent.is_none() && !item.node.children.is_empty() {
                Some(self.read_cells(item.seq)?)
            } else {
                None
            };
            let root = item.parent.is_none().then_some(&item.node.tokens[..]);
            self.cache
                .store(key, root, &item.node.reads, logits, cells.clone());
            if cells.is_some() {
                items[it].cells = cells;
            }
        }
        Ok(())
    }

    /// The candidate logits at batch index `bi` of the last decode.
    fn candidate_logits(&self, bi: i32, candidates: &[Token]) -> Result<Vec<f32>, BackendError> {
        let logits = self.ctx.get_logits_ith(bi);
        candidates
            .iter()
            .map(|c| {
                let idx = *c as usize;
                if idx >= self.n_vocab {
                    return Err(BackendError::Forward(format!(
                        "token {c} is outside the vocabulary"
                    )));
                }
                Ok(logits.get(idx).copied().unwrap_or(f32::NEG_INFINITY))
            })
            .collect()
    }

    /// Grow the growing nodes of the last decode together: one decode per step holds the
    /// picked token of every node still growing.
    fn grow(&mut self, items: &[Item<'_>], growing: &mut [Growing]) -> Result<(), BackendError> {
        for g in growing.iter_mut() {
            if let Some(steer) = &items[g.item].node.grow {
                g.next = steer.0.candidates(&[]).filter(|c| !c.is_empty());
            }
        }
        loop {
            let mut queued = Vec::new();
            for (gi, g) in growing.iter_mut().enumerate() {
                let (Some(candidates), Some(steer)) = (g.next.take(), &items[g.item].node.grow)
                else {
                    continue;
                };
                let logits = self.candidate_logits(g.batch_index, &candidates)?;
                let Some(best) = steer.0.pick(&g.picked, &candidates, &logits) else {
                    continue;
                };
                g.log.push(logits);
                g.picked.push(candidates[best]);
                if g.picked.len() > steer.0.max_tokens() {
                    return Err(BackendError::Forward(
                        "a growing node passed its token limit".into(),
                    ));
                }
                g.next = steer.0.candidates(&g.picked).filter(|c| !c.is_empty());
                if g.next.is_some() {
                    queued.push(gi);
                }
            }
            if queued.is_empty() {
                return Ok(());
            }
            self.batch.clear();
            let nodes = queued.len();
            for gi in queued {
                let g = &mut growing[gi];
                let item = &items[g.item];
                let pos = item.pos + item.node.tokens.len() + g.picked.len() - 1;
                let pos = i32::try_from(pos)
                    .map_err(|_| BackendError::Forward("position overflow".into()))?;
                g.batch_index = self.batch.n_tokens();
                let token = g.picked[g.picked.len() - 1];
                self.batch
                    .add(LlamaToken(token as i32), pos, &[item.seq], true)
                    .map_err(|e| BackendError::OutOfMemory(e.to_string()))?;
            }
            self.decode(nodes)?;
        }
    }

    fn reset_sequences(&mut self) {
        for seq in 1..self.sequences {
            let _ = self.ctx.clear_kv_cache_seq(Some(seq), None, None);
        }
        self.free = (1..self.sequences as i32).rev().collect();
    }
}

impl Session for LlamaSession<'_> {
    fn load_prefix(&mut self, tokens: &[Token]) -> Result<(), BackendError> {
        self.prefix_cells = None;
        self.ctx.clear_kv_cache();
        self.batch.clear();
        for (i, t) in tokens.iter().enumerate() {
            self.batch
                .add(LlamaToken(*t as i32), i as i32, &[0], false)
                .map_err(|e| BackendError::OutOfMemory(e.to_string()))?;
        }
        if !tokens.is_empty() {
            self.decode(1)?;
        }
        self.prefix_len = tokens.len();
        // Every cached path continued the old prefix.
        self.cache.clear();
        self.prefix_cells = Some(self.read_cells(0)?);
        Ok(())
    }

    fn forward(&mut self, roots: &[&Node]) -> Result<Vec<RootLogits>, BackendError> {
        let (mut items, top, counts) = Self::arena(roots, self.prefix_len, &mut self.cache);
        self.cached = vec![0; roots.len()];
        let mut out: Vec<RootLogits> = counts.iter().map(|n| vec![Vec::new(); *n]).collect();
        let mut grown = Vec::new();
        let result = self.process(&mut items, &top, &mut out, &mut grown);
        if result.is_err() {
            self.reset_sequences();
        }
        // Growth steps follow the fixed reads, growing node by growing node in depth-first
        // (arena) order.
        grown.sort_by_key(|(item, _)| *item);
        for (item, log) in grown {
            out[items[item].root].extend(log);
        }
        result.map(|()| out)
    }

    fn cached_tokens(&self) -> &[usize] {
        &self.cached
    }

    fn cache_bytes(&self) -> usize {
        self.cache.bytes()
    }
}

/// Most tokens one generation step evaluates.
const GENERATION_BATCH: u32 = 2048;

/// A generation context: one KV stream per slot, a sampler chain per running slot.
pub struct LlamaGenerator<'m> {
    model: &'m LlamaModel,
    schemas: &'m Schemas,
    ctx: LlamaContext<'m>,
    batch: LlamaBatch<'static>,
    batch_capacity: usize,
    samplers: Vec<Option<LlamaSampler>>,
    /// Per slot: whether to report the chosen token's logprob, and how many top tokens.
    wants: Vec<(bool, usize)>,
    slot_tokens: usize,
}

impl LlamaGenerator<'_> {
    fn chain(&self, s: &Sampling) -> Result<LlamaSampler, BackendError> {
        let mut parts = Vec::new();
        if let Some(g) = &s.grammar {
            parts.push(
                self.schemas
                    .sampler(self.model, g)
                    .map_err(|e| BackendError::Tokenize(format!("the grammar is invalid: {e}")))?,
            );
        }
        if s.temperature <= 0.0 {
            parts.push(LlamaSampler::greedy());
        } else {
            if s.top_p > 0.0 && s.top_p < 1.0 {
                parts.push(LlamaSampler::top_p(s.top_p, 1));
            }
            parts.push(LlamaSampler::temp(s.temperature));
            parts.push(LlamaSampler::dist(s.seed));
        }
        Ok(LlamaSampler::chain_simple(parts))
    }
}

/// The token with the largest logit (the first of equals).
/// The log-softmax of `logits` at `chosen`, and the `top` most likely tokens with theirs.
fn log_probs(logits: &[f32], chosen: usize, top: usize) -> (f32, Vec<(Token, f32)>) {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let sum: f64 = logits.iter().map(|&l| f64::from(l - max).exp()).sum();
    let log_z = max + sum.ln() as f32;
    let lp = logits.get(chosen).map_or(f32::NEG_INFINITY, |l| l - log_z);
    let mut best: Vec<(Token, f32)> = Vec::with_capacity(top + 1);
    if top > 0 {
        for (i, &l) in logits.iter().enumerate() {
            if best.len() < top || l > best[best.len() - 1].1 {
                let at = best.partition_point(|b| b.1 >= l);
                best.insert(at, (i as Token, l));
                best.truncate(top);
            }
        }
    }
    for b in &mut best {
        b.1 -= log_z;
    }
    (lp, best)
}

impl Generator for LlamaGenerator<'_> {
    fn slots(&self) -> usize {
        self.samplers.len()
    }

    fn slot_tokens(&self) -> usize {
        self.slot_tokens
    }

    fn step_tokens(&self) -> usize {
        self.batch_capacity
    }

    fn begin(
        &mut self,
        slot: usize,
        sampling: &Sampling,
        keep: usize,
    ) -> Result<usize, BackendError> {
        if slot >= self.samplers.len() {
            return Err(BackendError::Forward(format!("no slot {slot}")));
        }
        let chain = self.chain(sampling)?;
        let seq = Some(slot as u32);
        let mut kept = keep;
        let cut = u32::try_from(keep).ok().filter(|&k| k > 0);
        if !self.ctx.clear_kv_cache_seq(seq, cut, None).unwrap_or(false) {
            // A cache that cannot cut a sequence (recurrent models) starts it over.
            kept = 0;
            let _ = self.ctx.clear_kv_cache_seq(seq, None, None);
        }
        self.samplers[slot] = Some(chain);
        self.wants[slot] = (sampling.logprobs, sampling.top_logprobs);
        Ok(kept)
    }

    fn step(&mut self, feeds: &[Feed<'_>]) -> Result<Vec<Option<Sampled>>, BackendError> {
        let total: usize = feeds.iter().map(|f| f.tokens.len()).sum();
        if total == 0 || total > self.batch_capacity {
            return Err(BackendError::Forward(format!(
                "a generation step of {total} tokens (at most {})",
                self.batch_capacity
            )));
        }
        self.batch.clear();
        let mut at = Vec::with_capacity(feeds.len());
        for f in feeds {
            if f.pos + f.tokens.len() > self.slot_tokens || f.slot >= self.samplers.len() {
                return Err(BackendError::OutOfMemory(format!(
                    "slot {} cannot hold {} tokens",
                    f.slot,
                    f.pos + f.tokens.len()
                )));
            }
            for (k, t) in f.tokens.iter().enumerate() {
                let last = k + 1 == f.tokens.len();
                let pos = i32::try_from(f.pos + k)
                    .map_err(|_| BackendError::Forward("position overflow".into()))?;
                self.batch
                    .add(
                        LlamaToken(*t as i32),
                        pos,
                        &[f.slot as i32],
                        f.sample && last,
                    )
                    .map_err(|e| BackendError::OutOfMemory(e.to_string()))?;
            }
            at.push(self.batch.n_tokens() - 1);
        }
        match self.ctx.decode(&mut self.batch) {
            Ok(()) => {}
            Err(DecodeError::NoKvCacheSlot) => {
                return Err(BackendError::OutOfMemory(
                    "no room in the KV cache for this step".into(),
                ))
            }
            Err(e) => return Err(BackendError::Forward(e.to_string())),
        }
        let mut out = Vec::with_capacity(feeds.len());
        for (f, idx) in feeds.iter().zip(at) {
            if !f.sample {
                out.push(None);
                continue;
            }
            let sampler = self.samplers[f.slot]
                .as_mut()
                .ok_or_else(|| BackendError::Forward(format!("slot {} has no sampler", f.slot)))?;
            let token = sampler.sample(&self.ctx, idx);
            let (want_lp, top) = self.wants[f.slot];
            let (logprob, top) = if want_lp || top > 0 {
                let logits = self.ctx.get_logits_ith(idx);
                let (lp, best) = log_probs(logits, token.0.max(0) as usize, top);
                (Some(lp), best)
            } else {
                (None, Vec::new())
            };
            out.push(Some(Sampled {
                token: token.0.max(0) as Token,
                logprob,
                top,
            }));
        }
        Ok(out)
    }

    fn end(&mut self, slot: usize) {
        if let Some(s) = self.samplers.get_mut(slot) {
            *s = None;
        }
    }
}
