//! An encoder as the backbone of trained decision heads: a [`DirectBackend`] that reads no
//! question itself and gives, for each read of a state (one window), the encoder's pooled
//! vector. A package `vllm-srun adapt` trained on it (`decision_adapters.json`) answers each
//! choice, noul or score question it has a head for from that vector; any other question is
//! refused.

use std::borrow::Cow;
use std::sync::Arc;

use crate::backend::Vocab;
use crate::backend::{BackendError, BackendInfo, DirectBackend, DirectQuestion, Token};

use super::Encoder;

/// An encoder read for its state vectors.
pub struct Backbone {
    encoder: Arc<dyn Encoder>,
    info: BackendInfo,
}

impl Backbone {
    /// `max_sequences`: how many inputs' worth of tokens one request may read (its windows).
    pub fn new(encoder: Arc<dyn Encoder>, threads: usize, max_sequences: usize) -> Backbone {
        let e = encoder.info();
        let (head, tail) = encoder.special();
        let own = e.max_tokens.saturating_sub(head.len() + tail.len()).max(1);
        let info = BackendInfo {
            engine: e.engine.clone(),
            device: e.device.clone(),
            dtype: e.dtype.clone(),
            context_tokens: own,
            max_sequences,
            trained_context: own,
            threads,
            flash_attention: None,
            micro_batch_tokens: None,
            flash_attention_probe: None,
            prefix_cache_bytes: None,
            hidden_size: Some(e.dims),
        };
        Backbone { encoder, info }
    }

    /// The state's text as the heads read it: a text state as it is (trimmed), an object
    /// state as one `key: value` line per member in its order (text values as they are).
    pub fn render(state: &serde_json::Value) -> Cow<'_, str> {
        match state {
            serde_json::Value::String(s) => Cow::Borrowed(s.trim()),
            serde_json::Value::Null => Cow::Borrowed(""),
            serde_json::Value::Object(map) => Cow::Owned(
                map.iter()
                    .map(|(k, v)| match v {
                        serde_json::Value::String(s) => format!("{k}: {}", s.trim()),
                        v => format!("{k}: {v}"),
                    })
                    .collect::<Vec<_>>()
                    .join("\n"),
            ),
            v => Cow::Owned(v.to_string()),
        }
    }

    /// The vectors of several reads at once (each a window of state tokens, no special
    /// tokens), in one batch of the encoder.
    pub fn vectors(&self, reads: &[&[Token]]) -> Result<Vec<Vec<f32>>, BackendError> {
        let (head, tail) = self.encoder.special();
        let room = self.info.trained_context;
        let batch: Vec<Vec<Token>> = reads
            .iter()
            .map(|t| {
                let own = &t[..t.len().min(room)];
                let mut v = Vec::with_capacity(head.len() + own.len() + tail.len());
                v.extend_from_slice(&head);
                v.extend_from_slice(own);
                v.extend_from_slice(&tail);
                v
            })
            .collect();
        self.encoder.embed(&batch)
    }
}

impl Vocab for Backbone {
    fn tokenize_text(&self, text: &str) -> Result<Vec<Token>, BackendError> {
        self.encoder.tokenize_text(text)
    }

    fn token_bytes(&self, token: Token) -> Vec<u8> {
        self.encoder.token_bytes(token)
    }

    fn vocab_size(&self) -> usize {
        self.encoder.vocab_size()
    }
}

impl DirectBackend for Backbone {
    fn info(&self) -> &BackendInfo {
        &self.info
    }

    fn render_state<'a>(&self, state: &'a serde_json::Value) -> Cow<'a, str> {
        Backbone::render(state)
    }

    fn noul_outcomes(&self) -> (&str, &str) {
        ("yes", "no")
    }

    fn answer(
        &self,
        _text: &str,
        _tokens: &[Token],
        _questions: &[&DirectQuestion],
    ) -> Result<Vec<Vec<f32>>, BackendError> {
        Err(BackendError::Forward(
            "a backbone answers only through its trained heads".into(),
        ))
    }

    fn reads_questions(&self) -> bool {
        false
    }

    fn features(&self, tokens: &[Token]) -> Result<Option<Vec<f32>>, BackendError> {
        Ok(self.vectors(&[tokens])?.into_iter().next())
    }
}
