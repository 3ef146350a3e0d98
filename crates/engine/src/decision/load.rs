//! Loading a causal-LM decision model: its label vocabulary, its worker and system prompt,
//! and the self-check that measures whether its numerics are exact.

use std::sync::Arc;

use protocol::request::DecisionBody;

use super::model::{DecisionModel, Engine, Limits, Tree};
use crate::backend::{Backend, Node, RootLogits, Token};
use crate::budget::Cutter;
use crate::error::EngineError;
use crate::labels::{option_code, Trie};
use crate::package::{DecisionConfig, ModelMeta};
use crate::scheduler::{SchedulerConfig, Worker};
use crate::span::SpanVocab;

/// Each label tokenized as the model writes it.
pub(super) fn label_paths(
    backend: &dyn Backend,
    labels: &[String],
) -> Result<Vec<Vec<Token>>, EngineError> {
    labels
        .iter()
        .map(|l| backend.tokenize(l, false).map_err(EngineError::from))
        .collect()
}

/// Yes and No as the model may write them first: the prompt asks for `Yes` or `No`, and each
/// answer's probability adds up its one-token spellings (`Yes`, `yes`, `YES`, with a leading
/// space too), so mass the model puts on another spelling of the same word is not lost.
pub(super) fn yes_no_trie(backend: &dyn Backend) -> Result<Trie, EngineError> {
    const SPELLINGS: [[&str; 5]; 2] = [
        ["Yes", "yes", "YES", " Yes", " yes"],
        ["No", "no", "NO", " No", " no"],
    ];
    // The first spelling of each always counts (in as many tokens as it takes); another only
    // where it is one token that starts no path kept before, so none is a prefix of another.
    let mut paths: Vec<(Vec<Token>, usize)> = Vec::new();
    for (label, words) in SPELLINGS.iter().enumerate() {
        paths.push((backend.tokenize(words[0], false)?, label));
    }
    for (label, words) in SPELLINGS.iter().enumerate() {
        for w in &words[1..] {
            let p = backend.tokenize(w, false)?;
            if p.len() == 1 && !paths.iter().any(|(q, _)| q.first() == p.first()) {
                paths.push((p, label));
            }
        }
    }
    let labelled: Vec<(&[Token], usize)> = paths.iter().map(|(p, l)| (p.as_slice(), *l)).collect();
    Trie::build_spellings(&labelled).map_err(|e| EngineError::Labels(e.to_string()))
}

impl DecisionModel {
    /// Load: check the label vocabulary, start the worker and evaluate the system prompt once.
    pub fn start(
        meta: ModelMeta,
        config: DecisionConfig,
        backend: Arc<dyn Backend>,
        scheduler: SchedulerConfig,
    ) -> Result<DecisionModel, EngineError> {
        let t = &config.template;
        let prefix_text = format!(
            "{}{}{}{}",
            t.system_start, config.system_prompt, t.system_end, t.user_start
        );
        let prefix = backend.tokenize(&prefix_text, true)?;
        let turn_end = backend.tokenize(&format!("{}{}", t.user_end, t.assistant_start), true)?;
        let letters = label_paths(
            &*backend,
            &(0..26).map(|i| option_code(i, 26)).collect::<Vec<_>>(),
        )?;
        let codes = label_paths(
            &*backend,
            &(0..260).map(|i| option_code(i, 260)).collect::<Vec<_>>(),
        )?;
        let digits = label_paths(
            &*backend,
            &(0..10).map(|i| i.to_string()).collect::<Vec<_>>(),
        )?;
        let yes_no = yes_no_trie(&*backend)?;
        for paths in [&letters, &codes, &digits] {
            Trie::build(paths).map_err(|e| EngineError::Labels(e.to_string()))?;
        }
        let info = backend.info().clone();
        // A question's path (system prompt, state, question, two label steps) must fit one
        // sequence; a request's tokens are bounded by what the sequences hold together.
        let max_input_tokens = info
            .trained_context
            .min(info.context_tokens)
            .saturating_sub(2);
        let limits = Limits::new(max_input_tokens, &info, &config);
        let header = backend.tokenize("Text:\n", false)?;
        let sep = backend.tokenize("\n\n", false)?;
        let cutter = Cutter::calibrate(&*backend)?;
        // A vocabulary that cannot steer a copy (no one-token newline, no `None`) serves no
        // span questions, and its card says so.
        let spans = if config.answers("span") {
            SpanVocab::build(&*backend, &t.user_end).ok().map(Arc::new)
        } else {
            None
        };
        let mut config = config;
        match spans {
            Some(_) if !config.presets.iter().any(|p| p == protocol::PII_PRESET) => {
                config.presets.push(protocol::PII_PRESET.into());
            }
            Some(_) => {}
            None => config.question_types.retain(|t| t != "span"),
        }
        let worker = Worker::start(&meta.name, backend.clone(), prefix.clone(), scheduler)?;
        let features = super::adapter::feature_tokens(
            backend.vocab_size(),
            backend.info().hidden_size.unwrap_or(0),
        );
        let tree = Tree {
            backend,
            worker,
            prefix,
            yes_no,
            letters,
            codes,
            digits,
            turn_end,
            header,
            sep,
            spans,
            remembered: Default::default(),
            features,
        };
        let mut model = DecisionModel {
            meta,
            config,
            limits,
            numerics: "approximate",
            cutter,
            engine: Engine::Tree(Box::new(tree)),
            detector: None,
            adapters: None,
            record_features: false,
        };
        if let Engine::Tree(t) = &model.engine {
            let numerics = model.measure_numerics(t)?;
            model.numerics = numerics;
        }
        Ok(model)
    }

    /// Self-check at load: the same question alone, then beside another question and another
    /// request in one forward. Bit-identical logits mean `exact` numerics.
    pub(super) fn measure_numerics(&self, t: &Tree) -> Result<&'static str, EngineError> {
        let root = |state: &str, questions: serde_json::Value| -> Result<Node, EngineError> {
            let body = serde_json::json!({"state": state, "questions": questions});
            match protocol::parse_decision_body(&body, protocol::Schema::Internal) {
                Ok(DecisionBody::Single(r)) => self
                    .prepare(t, &r)
                    .map_err(EngineError::Request)?
                    .roots
                    .into_iter()
                    .next()
                    .ok_or_else(|| EngineError::Labels("the self-check has no state".into())),
                _ => Err(EngineError::Labels(
                    "the self-check request does not decode".into(),
                )),
            }
        };
        let probe = serde_json::json!({"type": "noul", "instructions": "Is the customer unhappy?"});
        let other =
            serde_json::json!({"type": "noul", "instructions": "Does the text mention a date?"});
        let state = "The parcel arrived two days late and the box was crushed.";
        let alone = root(state, serde_json::json!({ "q": probe }))?;
        let shared = root(state, serde_json::json!({ "q": probe, "x": other }))?;
        let neighbour = root(
            "Please reset my password.",
            serde_json::json!({ "x": other }),
        )?;
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .map_err(|e| EngineError::Forward(e.to_string()))?;
        let run = |roots: Vec<Node>| {
            rt.block_on(t.worker.submit(roots, None))
                .map_err(|e| EngineError::Forward(e.to_string()))
        };
        let a = run(vec![alone])?;
        let b = run(vec![neighbour, shared])?;
        let first =
            |logits: &[RootLogits], i: usize| logits.get(i).and_then(|r| r.first()).cloned();
        let same = match (first(&a.logits, 0), first(&b.logits, 1)) {
            (Some(x), Some(y)) => {
                x.iter().zip(&y).all(|(p, q)| p.to_bits() == q.to_bits()) && x.len() == y.len()
            }
            _ => false,
        };
        Ok(if same { "exact" } else { "approximate" })
    }
}
