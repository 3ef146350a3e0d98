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
}

impl Node {
    /// Tokens of this node and all its descendants.
    pub fn total_tokens(&self) -> usize {
        self.tokens.len() + self.children.iter().map(Node::total_tokens).sum::<usize>()
    }
    /// Number of nodes in this subtree.
    pub fn count(&self) -> usize {
        1 + self.children.iter().map(Node::count).sum::<usize>()
    }
}

/// The logits read for one root, flattened in depth-first order: a node's reads in order, then
/// each child's subtree in order. Each entry holds one logit per candidate.
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
}

/// Errors of a backend.
#[derive(Debug, thiserror::Error)]
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

/// An inference engine. Shared between request threads (tokenization) and the model's worker
/// thread, which opens the one [`Session`] that evaluates.
pub trait Backend: crate::budget::Vocab + Send + Sync + 'static {
    fn info(&self) -> &BackendInfo;
    /// Tokenize `text`. With `special`, control-token text (`<|im_start|>`) is read as control
    /// tokens; user text is always tokenized without it.
    fn tokenize(&self, text: &str, special: bool) -> Result<Vec<Token>, BackendError>;
    /// The text of a token (for diagnostics and label checks).
    fn token_text(&self, token: Token) -> String;
    /// Open an evaluation session. Called on the model's worker thread; the session lives there.
    fn session(&self) -> Result<Box<dyn Session + '_>, BackendError>;
}

/// An evaluation context, owned by one thread.
pub trait Session {
    /// Evaluate the shared prefix (the system prompt) once; every root continues it.
    fn load_prefix(&mut self, tokens: &[Token]) -> Result<(), BackendError>;
    /// Evaluate the trees under `roots` and return, per root, the logits of every read.
    fn forward(&mut self, roots: &[&Node]) -> Result<Vec<RootLogits>, BackendError>;
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
pub trait DirectBackend: crate::budget::Vocab + Send + Sync + 'static {
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
}
