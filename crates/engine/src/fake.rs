//! A backend whose logits a test scripts: tokens are bytes, two chat specials and a few
//! whole words ("Yes", "No"), and each read's logits come from a function of the text
//! evaluated so far and the candidates' texts. The readout tests and the server's in-process
//! route tests (feature `fake`) answer with it, without weights.

use std::sync::Arc;

use crate::backend::{Backend, BackendError, BackendInfo, Node, RootLogits, Session, Token};
use crate::budget::Vocab;
use crate::decision::DecisionModel;
use crate::package::{DecisionConfig, ModelMeta};
use crate::scheduler::SchedulerConfig;

/// Logits of `candidates` (their texts) after `context` (the text evaluated so far).
pub type Script = Arc<dyn Fn(&str, &[String]) -> Vec<f32> + Send + Sync>;

const SPECIAL: [&str; 2] = ["<|im_start|>", "<|im_end|>"];
/// Whole-word tokens; every other text is one token per byte.
const WORDS: [&str; 5] = ["Yes", "yes", " Yes", "No", "no"];
const WORD_BASE: Token = 258;

pub struct Fake {
    info: BackendInfo,
    script: Script,
}

impl Fake {
    fn text_of(&self, t: Token) -> String {
        match t {
            0..=255 => (t as u8 as char).to_string(),
            256 | 257 => SPECIAL[t as usize - 256].to_string(),
            _ => WORDS[t as usize - WORD_BASE as usize].to_string(),
        }
    }
}

impl Vocab for Fake {
    fn tokenize_text(&self, text: &str) -> Result<Vec<Token>, BackendError> {
        self.tokenize(text, false)
    }
    fn token_bytes(&self, token: Token) -> Vec<u8> {
        self.text_of(token).into_bytes()
    }
    fn vocab_size(&self) -> usize {
        WORD_BASE as usize + WORDS.len()
    }
}

impl Backend for Fake {
    fn info(&self) -> &BackendInfo {
        &self.info
    }
    fn tokenize(&self, text: &str, special: bool) -> Result<Vec<Token>, BackendError> {
        let mut out = Vec::new();
        let mut rest = text;
        'next: while let Some(c) = rest.chars().next() {
            if special {
                for (i, s) in SPECIAL.iter().enumerate() {
                    if let Some(r) = rest.strip_prefix(s) {
                        out.push(256 + i as Token);
                        rest = r;
                        continue 'next;
                    }
                }
            }
            for (i, w) in WORDS.iter().enumerate() {
                if let Some(r) = rest.strip_prefix(w) {
                    out.push(WORD_BASE + i as Token);
                    rest = r;
                    continue 'next;
                }
            }
            let mut buf = [0u8; 4];
            out.extend(c.encode_utf8(&mut buf).bytes().map(Token::from));
            rest = &rest[c.len_utf8()..];
        }
        Ok(out)
    }
    fn token_text(&self, token: Token) -> String {
        self.text_of(token)
    }
    fn session(&self) -> Result<Box<dyn Session + '_>, BackendError> {
        Ok(Box::new(FakeSession {
            fake: self,
            prefix: Vec::new(),
        }))
    }
}

struct FakeSession<'a> {
    fake: &'a Fake,
    prefix: Vec<Token>,
}

impl FakeSession<'_> {
    fn text(&self, tokens: &[Token]) -> String {
        tokens.iter().map(|t| self.fake.text_of(*t)).collect()
    }

    /// A growing node's steps, picked as the backend trait says (by the steer).
    fn grow(&self, node: &Node, context: &[Token], grown: &mut RootLogits) {
        let Some(g) = &node.grow else { return };
        let mut picked: Vec<Token> = Vec::new();
        while let Some(candidates) = g.0.candidates(&picked).filter(|c| !c.is_empty()) {
            let mut seen = context.to_vec();
            seen.extend_from_slice(&picked);
            let texts: Vec<String> = candidates.iter().map(|t| self.fake.text_of(*t)).collect();
            let logits = (self.fake.script)(&self.text(&seen), &texts);
            let Some(best) = g.0.pick(&picked, &candidates, &logits) else {
                return;
            };
            grown.push(logits);
            picked.push(candidates[best]);
        }
    }

    fn walk(
        &self,
        node: &Node,
        context: &mut Vec<Token>,
        out: &mut RootLogits,
        grown: &mut RootLogits,
    ) {
        let base = context.len();
        context.extend_from_slice(&node.tokens);
        for read in &node.reads {
            let text: String = context[..base + read.at + 1]
                .iter()
                .map(|t| self.fake.text_of(*t))
                .collect();
            let candidates: Vec<String> = read
                .candidates
                .iter()
                .map(|t| self.fake.text_of(*t))
                .collect();
            out.push((self.fake.script)(&text, &candidates));
        }
        self.grow(node, context, grown);
        for child in &node.children {
            self.walk(child, context, out, grown);
        }
        context.truncate(base);
    }
}

impl Session for FakeSession<'_> {
    fn load_prefix(&mut self, tokens: &[Token]) -> Result<(), BackendError> {
        self.prefix = tokens.to_vec();
        Ok(())
    }
    fn forward(&mut self, roots: &[&Node]) -> Result<Vec<RootLogits>, BackendError> {
        Ok(roots
            .iter()
            .map(|root| {
                let mut out = Vec::new();
                let mut grown = Vec::new();
                self.walk(root, &mut self.prefix.clone(), &mut out, &mut grown);
                out.extend(grown);
                out
            })
            .collect())
    }
}

/// Tokens a fake model's sequence holds unless its maker says otherwise.
pub const CONTEXT_TOKENS: usize = 65_536;

/// A decision model named `name` on the fake backend.
pub fn model_named(
    name: &str,
    config: DecisionConfig,
    script: Script,
) -> Result<DecisionModel, crate::EngineError> {
    model_with(
        name,
        config,
        script,
        CONTEXT_TOKENS,
        SchedulerConfig::default(),
    )
}

/// A decision model named `name` on the fake backend, with `context_tokens` per sequence and
/// its scheduler's limits.
pub fn model_with(
    name: &str,
    config: DecisionConfig,
    script: Script,
    context_tokens: usize,
    scheduler: SchedulerConfig,
) -> Result<DecisionModel, crate::EngineError> {
    let fake = Fake {
        info: BackendInfo {
            engine: "fake".into(),
            device: "cpu".into(),
            dtype: "f32".into(),
            context_tokens,
            max_sequences: 16,
            trained_context: 8192,
            threads: 1,
            flash_attention: None,
            micro_batch_tokens: None,
            flash_attention_probe: None,
            prefix_cache_bytes: None,
            hidden_size: None,
        },
        script,
    };
    DecisionModel::start(meta_named(name), config, Arc::new(fake), scheduler)
}

/// What a fake model says of itself: its name, nothing else.
pub fn meta_named(name: &str) -> ModelMeta {
    ModelMeta {
        name: name.into(),
        description: String::new(),
        release_date: String::new(),
        revision: String::new(),
        sha256: None,
        aliases: Vec::new(),
    }
}

/// The logits a table gives each candidate text (absent ones at -200: no share at any
/// temperature here).
pub fn table(entries: &[(&str, f32)]) -> Script {
    let entries: Vec<(String, f32)> = entries.iter().map(|(s, l)| (s.to_string(), *l)).collect();
    Arc::new(move |_, candidates| {
        candidates
            .iter()
            .map(|c| {
                entries
                    .iter()
                    .find(|(s, _)| s == c)
                    .map_or(-200.0, |(_, l)| *l)
            })
            .collect()
    })
}
