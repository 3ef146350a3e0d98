//! The backend trait: what an inference engine must do for the decision runtime.
//!
//! The runtime asks a backend for logits of chosen candidate tokens at chosen positions of a
//! tree of token sequences that share prefixes: the system prompt (evaluated once per load),
//! then each request's state (a root), then each question (a child of its state), then the
//! extra one-token steps of multi-token labels (children of a question).

/// A token id of the backend's vocabulary.
pub type Token = u32;

/// A place in a node's tokens where the logits of some candidate tokens are read.
#[derive(Debug, Clone, PartialEq)]
pub struct Read {
    /// Index into the node's `tokens` whose next-token logits are read.
    pub at: usize,
    /// The candidate tokens, in the order their logits are returned.
    pub candidates: Vec<Token>,
}

/// A node of the evaluation tree: tokens that continue its parent's sequence.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Node {
    pub tokens: Vec<Token>,
    pub reads: Vec<Read>,
    pub children: Vec<Node>,
    /// Tokens that grow after `tokens`, one step at a time, as `grow` steers them (a node
    /// that grows has no children).
    pub grow: Option<Grow>,
}

/// What a growing node may continue with. At each step the backend asks for the candidates
/// after the tokens picked so far, reads their logits at the node's last token, and lets the
/// steer pick one (by default the highest logit, the first such in candidate order), until
/// `candidates` says the growth is over. Each step's candidate logits are returned, after the
/// root's fixed reads, so the engine can replay the same picks.
pub trait Steer: Send + Sync + std::fmt::Debug {
    /// The candidates for the token after `picked`, or `None` when the growth ends.
    fn candidates(&self, picked: &[Token]) -> Option<Vec<Token>>;
    /// The most tokens the growth may pick (the sequence must have room for them).
    fn max_tokens(&self) -> usize;
    /// Which of `candidates` (the step after `picked`, with these logits) to take. A pure
    /// function of its arguments, so a replay picks the same.
    fn pick(&self, picked: &[Token], candidates: &[Token], logits: &[f32]) -> Option<usize> {
        let _ = (picked, candidates);
        pick(logits)
    }
}

/// A shared [`Steer`]; two are equal when they are the same steer.
#[derive(Debug, Clone)]
pub struct Grow(pub std::sync::Arc<dyn Steer>);

impl PartialEq for Grow {
    fn eq(&self, other: &Grow) -> bool {
        std::sync::Arc::ptr_eq(&self.0, &other.0)
    }
}

/// The candidate a growth step picks: the highest logit, the first in candidate order on a tie
/// (`None` when there are no candidates).
pub fn pick(logits: &[f32]) -> Option<usize> {
    let mut best: Option<usize> = None;
    for (i, l) in logits.iter().enumerate() {
        if best.is_none_or(|b| *l > logits[b]) {
            best = Some(i);
        }
    }
    best
}

impl Node {
    /// Tokens of this node and all its descendants, a growing node's growth counted at its
    /// most (the work and cache a request may take).
    pub fn total_tokens(&self) -> usize {
        self.tokens.len()
            + self.grow.as_ref().map_or(0, |g| g.0.max_tokens())
            + self.children.iter().map(Node::total_tokens).sum::<usize>()
    }
    /// Number of nodes in this subtree.
    pub fn count(&self) -> usize {
        1 + self.children.iter().map(Node::count).sum::<usize>()
    }
}

/// The logits read for one root, flattened in depth-first order: a node's reads in order, then
/// each child's subtree in order; then the steps of each growing node, in depth-first order.
/// Each entry holds one logit per candidate.
pub type RootLogits = Vec<Vec<f32>>;

/// Facts about a loaded backend.
#[derive(Debug, Clone, PartialEq)]
pub struct BackendInfo {
    /// Engine name, e.g. `llama.cpp`.
    pub engine: String,
    /// Device, e.g. `cpu`.
    pub device: String,
    /// Weight precision, e.g. `Q4_K_M`.
    pub dtype: String,
    /// Tokens the evaluation context holds at once (system prompt and every live sequence).
    pub context_tokens: usize,
    /// Most sequences one forward may hold.
    pub max_sequences: usize,
    /// Context length the model was trained at.
    pub trained_context: usize,
    pub threads: usize,
    /// Whether decisions evaluate with flash attention (llama.cpp; `None` where the engine has
    /// no such switch).
    pub flash_attention: Option<bool>,
    /// Tokens of one micro-batch (llama.cpp's `n_ubatch`; `None` elsewhere).
    pub micro_batch_tokens: Option<usize>,
    /// The load-time measurement that chose `flash_attention`, where one ran.
    pub flash_attention_probe: Option<FlashProbe>,
    /// Most bytes the decision prefix cache keeps across requests (`None`: no such cache).
    pub prefix_cache_bytes: Option<usize>,
    /// Width of the model's hidden state (`None` where the engine does not say).
    pub hidden_size: Option<usize>,
}

/// One evaluation of the same tokens with flash attention off and on, at load: the setting is
/// kept on only where it is faster and reads the same next-token logits (within rounding).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct FlashProbe {
    pub tokens: usize,
    /// The faster of two evaluations with flash attention off, in milliseconds.
    pub off_ms: f64,
    /// The same with flash attention on.
    pub on_ms: f64,
    /// Largest difference between the two settings' logits of the last token.
    pub max_logit_difference: f32,
    /// Whether both settings' logits name the same most likely token.
    pub same_argmax: bool,
}

/// Errors of a backend.
#[derive(Debug, Clone, thiserror::Error)]
pub enum BackendError {
    #[error("model load failed: {0}")]
    Load(String),
    #[error("tokenization failed: {0}")]
    Tokenize(String),
    /// The forward did not fit the context (the KV cache is full).
    #[error("the forward does not fit the context: {0}")]
    OutOfMemory(String),
    #[error("forward failed: {0}")]
    Forward(String),
}

/// What budgeted tokenization needs of a tokenizer. Implemented by every [`Backend`] and
/// [`Encoder`](crate::encode::Encoder).
///
/// [`Backend`]: Backend
pub trait Vocab {
    /// Tokens of `text` without special tokens.
    fn tokenize_text(&self, text: &str) -> Result<Vec<Token>, BackendError>;
    /// The bytes of the text a token covers.
    fn token_bytes(&self, token: Token) -> Vec<u8>;
    fn vocab_size(&self) -> usize;
    /// Whether every byte of a text is covered by its tokens' bytes (byte-level BPE): then a
    /// text of `n` bytes has at least `n / max_token_bytes` tokens, and a text can be known
    /// to be over a budget from its length alone. WordPiece drops whitespace and maps unknown
    /// words to one token, so it does not.
    fn covers_text(&self) -> bool {
        false
    }
}

/// An inference engine. Shared between request threads (tokenization) and the model's worker
/// thread, which opens the one [`Session`] that evaluates.
pub trait Backend: Vocab + Send + Sync + 'static {
    fn info(&self) -> &BackendInfo;
    /// Tokenize `text`. With `special`, control-token text (`<|im_start|>`) is read as control
    /// tokens; user text is always tokenized without it.
    fn tokenize(&self, text: &str, special: bool) -> Result<Vec<Token>, BackendError>;
    /// The text of a token (for diagnostics and label checks).
    fn token_text(&self, token: Token) -> String;
    /// Open an evaluation session. Called on the model's worker thread; the session lives there.
    fn session(&self) -> Result<Box<dyn Session + '_>, BackendError>;

    /// Open a text-generation context of `slots` sequences of `slot_tokens` tokens each, on
    /// the same weights. Called on the model's generation thread; it lives there.
    fn generator(
        &self,
        _slots: u32,
        _slot_tokens: u32,
    ) -> Result<Box<dyn Generator + '_>, BackendError> {
        Err(BackendError::Load(
            "this backend does not generate text".into(),
        ))
    }
    /// The model's chat template (Jinja source), if its file carries one.
    fn chat_template(&self) -> Option<String> {
        None
    }
    /// The texts of the beginning- and end-of-sequence tokens, as chat templates name them.
    fn bos_eos_text(&self) -> (String, String) {
        (String::new(), String::new())
    }
    /// Whether `token` ends a generation (end of sequence or of turn).
    fn ends_generation(&self, _token: Token) -> bool {
        false
    }
    /// A grammar (the backend's own notation) for outputs that are JSON documents valid
    /// under `schema`.
    fn schema_grammar(&self, _schema: &str) -> Result<String, BackendError> {
        Err(BackendError::Load(
            "this backend has no constrained sampling".into(),
        ))
    }
}

/// How a generation picks each token.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Sampling {
    /// 0 always picks the most likely token.
    pub temperature: f32,
    /// Nucleus cut-off in (0, 1].
    pub top_p: f32,
    pub seed: u32,
    /// A grammar the output must follow (from [`Backend::schema_grammar`], in its notation).
    pub grammar: Option<String>,
    /// Report the chosen token's log-probability.
    pub logprobs: bool,
    /// Report this many most likely tokens at each step.
    pub top_logprobs: usize,
}

/// A token a generation step picked, with the model's log-probabilities (raw logits, before
/// temperature or grammar) when asked.
#[derive(Debug, Clone, PartialEq)]
pub struct Sampled {
    pub token: Token,
    pub logprob: Option<f32>,
    pub top: Vec<(Token, f32)>,
}

/// Tokens a generation step adds to one slot, from position `pos`.
#[derive(Debug, Clone, Copy)]
pub struct Feed<'a> {
    pub slot: usize,
    pub tokens: &'a [Token],
    pub pos: usize,
    /// Sample a token after the last one.
    pub sample: bool,
}

/// A text-generation context, owned by one thread: slots of KV cache that steps fill.
pub trait Generator {
    /// Sequences held at once.
    fn slots(&self) -> usize;
    /// Tokens one slot holds (prompt and output).
    fn slot_tokens(&self) -> usize;
    /// Most tokens one step evaluates, all feeds together.
    fn step_tokens(&self) -> usize;
    /// Prepare `slot` for a new generation: keep its first `keep` cells (a prefix of the new
    /// prompt the slot holds from its last generation), empty the rest, set its sampler.
    /// Returns the cells kept: `keep`, or 0 where the cache cannot cut a sequence.
    fn begin(
        &mut self,
        slot: usize,
        sampling: &Sampling,
        keep: usize,
    ) -> Result<usize, BackendError>;
    /// One evaluation over every feed (all slots share it); one token is sampled for each
    /// feed that asks, in feed order (`None` for the others).
    fn step(&mut self, feeds: &[Feed<'_>]) -> Result<Vec<Option<Sampled>>, BackendError>;
    /// Free a slot's sampler; its cells stay until the next `begin` on it.
    fn end(&mut self, slot: usize);
}

/// An evaluation context, owned by one thread.
pub trait Session {
    /// Evaluate the shared prefix (the system prompt) once; every root continues it.
    fn load_prefix(&mut self, tokens: &[Token]) -> Result<(), BackendError>;
    /// Evaluate the trees under `roots` and return, per root, the logits of every read.
    fn forward(&mut self, roots: &[&Node]) -> Result<Vec<RootLogits>, BackendError>;
    /// Per root of the last forward: its tokens a prefix cache answered (not evaluated).
    fn cached_tokens(&self) -> &[usize] {
        &[]
    }
    /// Bytes the session's prefix cache holds now.
    fn cache_bytes(&self) -> usize {
        0
    }
}

/// What a question asks, as a [`DirectBackend`] reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DirectKind {
    Noul,
    Choice,
    Score,
}

/// One question for a [`DirectBackend`]: its kind, its instructions' tokens and each option's
/// tokens (an option is read as its name, then its description; a noul's options are its
/// outcomes `true` then `false`; a score's are its levels from the lowest).
#[derive(Debug, Clone, PartialEq)]
pub struct DirectQuestion {
    pub kind: DirectKind,
    pub instructions: Vec<Token>,
    pub options: Vec<Vec<Token>>,
}

/// A decision model that answers each question from its parts in one call: no token tree, no
/// worker thread, no queue. Its work is small enough to run on the request's own thread.
pub trait DirectBackend: Vocab + Send + Sync + 'static {
    fn info(&self) -> &BackendInfo;
    /// A state as the model was trained to read it (a text state is read as it is).
    fn render_state<'a>(&self, state: &'a serde_json::Value) -> std::borrow::Cow<'a, str>;
    /// What a noul's outcomes mean when its question does not say: `(true, false)`.
    fn noul_outcomes(&self) -> (&str, &str);
    /// One logit per option of each question about one state. `tokens` are the state's tokens
    /// read (at most `info().trained_context`); `text` is the text they were read from, for
    /// models that also read facts from it.
    fn answer(
        &self,
        text: &str,
        tokens: &[Token],
        questions: &[&DirectQuestion],
    ) -> Result<Vec<Vec<f32>>, BackendError>;
    /// Whether [`DirectBackend::answer`] reads questions at all. A backbone served only
    /// through the heads a package trained on it (`vllm-srun adapt`) reads none: a question
    /// with no head is refused, not guessed.
    fn reads_questions(&self) -> bool {
        true
    }
    /// The vector a trained head reads for one read of the state (`tokens`, as for
    /// [`DirectBackend::answer`]); `None` where the model gives none.
    fn features(&self, tokens: &[Token]) -> Result<Option<Vec<f32>>, BackendError> {
        let _ = tokens;
        Ok(None)
    }
    /// The words of `text` as a trained span head reads them, reading at most `budget` of its
    /// tokens; `None` where the model gives no word features.
    fn word_rows(&self, text: &str, budget: usize) -> Result<Option<WordRows>, BackendError> {
        let _ = (text, budget);
        Ok(None)
    }
}

/// A text's words as a trained span head reads them.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct WordRows {
    /// Each word's code-point range in the text.
    pub ranges: Vec<(usize, usize)>,
    /// Each word's features.
    pub rows: Vec<Vec<f32>>,
    /// Tokens read, special tokens of every window included.
    pub tokens: usize,
    /// The text had more tokens than the budget; the words past it were not read.
    pub truncated: bool,
}

/// One object a [`Detector`] found.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Found {
    /// Index into [`Detector::kinds`].
    pub kind: usize,
    /// The detector's own score (not a calibrated probability).
    pub score: f32,
    /// `[left, top, right, bottom]` as fractions of the picture's width and height.
    pub edges: [f32; 4],
}

/// The overlap of two `[left, top, right, bottom]` boxes: their intersection's area over
/// their union's (0 where the union is empty).
pub fn iou(a: &[f32; 4], b: &[f32; 4]) -> f32 {
    let w = (a[2].min(b[2]) - a[0].max(b[0])).max(0.0);
    let h = (a[3].min(b[3]) - a[1].max(b[1])).max(0.0);
    let area = |e: &[f32; 4]| (e[2] - e[0]).max(0.0) * (e[3] - e[1]).max(0.0);
    let union = area(a) + area(b) - w * h;
    if union > 0.0 {
        w * h / union
    } else {
        0.0
    }
}

/// An object detector a decision model may carry to answer box questions: RGB pixels in,
/// boxes out. It knows nothing of questions; matching a target to its kinds, choosing among
/// the boxes and the confidence are the engine's (`decision::locate`).
pub trait Detector: Send + Sync + 'static {
    /// What it is (for the card), e.g. `nanodet-coco`.
    fn name(&self) -> &str;
    /// The kinds of object it finds, by index (lower case, singular).
    fn kinds(&self) -> &[&'static str];
    /// Every object found in a `width × height` RGB picture, best first.
    fn detect(&self, width: usize, height: usize, rgb: &[u8]) -> Result<Vec<Found>, BackendError>;
}
