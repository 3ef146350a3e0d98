//! Model packages: `decision_config.json` (how a package reads a request) and the model card
//! (what it serves and its limits).

use std::collections::BTreeMap;

use protocol::request::parse_question;
use protocol::{Question, QuestionSlot, Schema};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The chat layout a causal LM was tuned on. Template pieces are read with control tokens.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PromptTemplate {
    pub system_start: String,
    pub system_end: String,
    pub user_start: String,
    pub user_end: String,
    pub assistant_start: String,
}

impl PromptTemplate {
    /// ChatML, as Qwen2.5 and SmolLM2 use.
    pub fn chatml() -> Self {
        PromptTemplate {
            system_start: "<|im_start|>system\n".into(),
            system_end: "<|im_end|>\n".into(),
            user_start: "<|im_start|>user\n".into(),
            user_end: "<|im_end|>\n".into(),
            assistant_start: "<|im_start|>assistant\n".into(),
        }
    }
}

/// A number per corrected question type (`temperature`, `content_free_weight`): 1 for each
/// type the config does not name.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PerType {
    pub choice: f64,
    pub noul: f64,
    pub score: f64,
}

impl Default for PerType {
    fn default() -> Self {
        PerType {
            choice: 1.0,
            noul: 1.0,
            score: 1.0,
        }
    }
}

impl PerType {
    fn is_default(&self) -> bool {
        *self == PerType::default()
    }

    /// Each type's number, by its config key.
    fn entries(&self) -> [(&'static str, f64); 3] {
        [
            ("choice", self.choice),
            ("noul", self.noul),
            ("score", self.score),
        ]
    }
}

/// `temperature_by_questions`: a request's temperature from its number of choice, noul and
/// score questions `n`: the `t_i` of the first `n <= n_i`, else `t_rest`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TemperatureByQuestions {
    pub max_questions: Vec<usize>,
    /// One more entry than `max_questions`: the last is `t_rest`.
    pub temperature: Vec<f64>,
}

impl TemperatureByQuestions {
    pub fn for_count(&self, n: usize) -> Option<f64> {
        for (i, max) in self.max_questions.iter().enumerate() {
            if n <= *max {
                return self.temperature.get(i).copied();
            }
        }
        self.temperature.get(self.max_questions.len()).copied()
    }
}

/// A package's `decision_config.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DecisionConfig {
    /// `state_once`: the state is evaluated once and every question branches from it.
    pub attention_mode: String,
    pub prompt_layout: String,
    pub system_prompt: String,
    pub template: PromptTemplate,
    pub temperature: PerType,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub temperature_by_questions: Option<TemperatureByQuestions>,
    /// The question types the package answers.
    pub question_types: Vec<String>,
    /// Trained presets (questions the package answers by a trained head or prompt).
    pub presets: Vec<String>,
    /// Default threshold of set questions.
    pub set_threshold: f64,
    /// Default threshold of span questions (spans less probable are not listed).
    pub span_threshold: f64,
    /// The length questions were validated at (card `limits.validated_input_tokens`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub validated_input_tokens: Option<usize>,
    /// The scan budget of windowed reads (card `limits.max_scan_tokens`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_scan_tokens: Option<usize>,
    /// Tokens a truncating question reads (card `limits.truncate_tokens`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub truncate_tokens: Option<usize>,
    /// How many orders of its options a choice is asked in (turns of one canonical order,
    /// spread evenly; the answer is their geometric mean). 1 asks once; more cancel the
    /// favour a model shows some places in a list, at the cost of one branch each.
    pub choice_orders: usize,
    /// How many orders of its levels a score is asked in: 1 in their order; 2 also reversed
    /// (the answer is the geometric mean of both, mapped back to the levels), which cancels
    /// the favour a model shows the first or last level it reads, at the cost of one branch.
    pub score_orders: usize,
    /// Question types (`choice`, `score`, `noul`) whose answers are divided by the same question's
    /// answer about an empty state (content-free calibration), which removes the favour a
    /// model shows some labels whatever the state says. Each distinct question's empty-state
    /// answer is evaluated once and remembered.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub content_free: Vec<String>,
    /// How much of the empty-state answer each type divides by, in [0, 1]: a weight `a`
    /// divides the logits by `a` times the empty state's (1, the default, divides it out
    /// whole). Fitted with the temperatures (`tools/lodo.py`).
    #[serde(skip_serializing_if = "PerType::is_default")]
    pub content_free_weight: PerType,
    /// A noul's yes-against-no log-odds are lowered by this much before its temperature: the
    /// lean toward yes a model shows, fitted on labelled development data (0: none).
    pub noul_bias: f64,
    /// The package's router signals (`router_questions.json`): question ids the package
    /// answers as its own question, whatever a request's wording or options
    /// (system-duo-api.txt, "Router signals"). Each is a 5.0 question (`type`,
    /// `instructions`, `criteria`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub router_questions: BTreeMap<String, Value>,
}

impl Default for DecisionConfig {
    fn default() -> Self {
        DecisionConfig {
            attention_mode: "prefix_causal".into(),
            prompt_layout: "question-last-v1".into(),
            system_prompt: "You are a precise decision model. Read the text, then answer the \
                            question about it with only the label of your answer."
                .into(),
            template: PromptTemplate::chatml(),
            temperature: PerType::default(),
            temperature_by_questions: None,
            question_types: vec![
                "choice".into(),
                "noul".into(),
                "score".into(),
                "set".into(),
                "span".into(),
            ],
            presets: Vec::new(),
            set_threshold: 0.5,
            span_threshold: 0.5,
            validated_input_tokens: None,
            max_scan_tokens: None,
            truncate_tokens: None,
            choice_orders: 1,
            score_orders: 1,
            content_free: Vec::new(),
            content_free_weight: PerType::default(),
            noul_bias: 0.0,
            router_questions: BTreeMap::new(),
        }
    }
}

/// The prompt layouts and attention modes the token-tree engine implements: every question
/// branches from the state's cache (the state read once, the question attending to it).
pub const TREE_LAYOUTS: &[&str] = &["question-last-v1"];
pub const TREE_ATTENTION_MODES: &[&str] = &["prefix_causal", "state_once"];
/// The most orders a choice may be asked in (each is one more branch per choice question).
pub const MAX_CHOICE_ORDERS: usize = 8;
/// The question types whose answers a content-free reading corrects.
pub const CONTENT_FREE_TYPES: &[&str] = &["choice", "score", "noul"];
/// The question types a package may declare.
const QUESTION_TYPES: &[&str] = &["choice", "noul", "score", "set", "span", "box", "track"];

impl DecisionConfig {
    pub fn answers(&self, question_type: &str) -> bool {
        self.question_types.iter().any(|t| t == question_type)
    }

    /// The router signal a question id names, as the package words it.
    fn router_question(&self, id: &str) -> Option<Question> {
        parse_question(self.router_questions.get(id)?, Schema::V5).ok()
    }

    /// A question slot whose id is one of the package's router signals, asked as the package
    /// words it: the signal's type, instructions and options replace the request's (its
    /// `over`, `overflow` and `require_full_input` stay, since they say what to read, not what
    /// to ask). `None` when the id names no signal.
    pub fn as_router_signal(&self, slot: &QuestionSlot) -> Option<QuestionSlot> {
        let signal = self.router_question(&slot.id)?;
        let question = match &slot.question {
            Ok(q) => Question {
                kind: signal.kind,
                instructions: signal.instructions,
                preset: None,
                ..q.clone()
            },
            Err(_) => signal,
        };
        Some(QuestionSlot {
            id: slot.id.clone(),
            type_word: question.kind.type_name().to_string(),
            images: slot.images.clone(),
            videos: slot.videos,
            question: Ok(question),
        })
    }

    /// Every setting acts or is refused: a config the engine cannot honour fails the load
    /// with what is wrong, instead of being served with the setting ignored.
    pub fn validate(&self, layouts: &[&str], attention_modes: &[&str]) -> Result<(), ConfigError> {
        let bad = |setting: &str, why: String| {
            Err(ConfigError::Setting {
                setting: setting.to_string(),
                why,
            })
        };
        let positive = |name: &str, t: f64| {
            if t.is_finite() && t > 0.0 {
                Ok(())
            } else {
                bad(name, format!("must be a positive number, not {t}"))
            }
        };
        for (name, t) in self.temperature.entries() {
            positive(&format!("temperature.{name}"), t)?;
        }
        if let Some(t) = &self.temperature_by_questions {
            if t.temperature.len() != t.max_questions.len() + 1 {
                return bad(
                    "temperature_by_questions.temperature",
                    format!(
                        "needs one entry more than max_questions (the last is for more \
                         questions): {} and {}",
                        t.temperature.len(),
                        t.max_questions.len()
                    ),
                );
            }
            if t.max_questions.windows(2).any(|w| w[0] >= w[1]) {
                return bad(
                    "temperature_by_questions.max_questions",
                    "must increase".into(),
                );
            }
            for (i, x) in t.temperature.iter().enumerate() {
                positive(&format!("temperature_by_questions.temperature[{i}]"), *x)?;
            }
        }
        if !layouts.contains(&self.prompt_layout.as_str()) {
            return bad(
                "prompt_layout",
                format!(
                    "{:?} is not one this engine renders ({})",
                    self.prompt_layout,
                    layouts.join(", ")
                ),
            );
        }
        if !attention_modes.contains(&self.attention_mode.as_str()) {
            return bad(
                "attention_mode",
                format!(
                    "{:?} is not one this engine evaluates ({})",
                    self.attention_mode,
                    attention_modes.join(", ")
                ),
            );
        }
        if let Some(t) = self
            .question_types
            .iter()
            .find(|t| !QUESTION_TYPES.contains(&t.as_str()))
        {
            return bad(
                "question_types",
                format!("names an unknown question type {t:?}"),
            );
        }
        if !(1..=MAX_CHOICE_ORDERS).contains(&self.choice_orders) {
            return bad(
                "choice_orders",
                format!(
                    "must be 1 to {MAX_CHOICE_ORDERS}, not {}",
                    self.choice_orders
                ),
            );
        }
        if !(1..=2).contains(&self.score_orders) {
            return bad(
                "score_orders",
                format!("must be 1 or 2, not {}", self.score_orders),
            );
        }
        if let Some(t) = self
            .content_free
            .iter()
            .find(|t| !CONTENT_FREE_TYPES.contains(&t.as_str()))
        {
            return bad(
                "content_free",
                format!(
                    "names {t:?}; it corrects only {}",
                    CONTENT_FREE_TYPES.join(", ")
                ),
            );
        }
        for (name, a) in self.content_free_weight.entries() {
            if !(0.0..=1.0).contains(&a) {
                return bad(
                    &format!("content_free_weight.{name}"),
                    format!("must be in [0, 1], not {a}"),
                );
            }
        }
        if !self.noul_bias.is_finite() {
            return bad(
                "noul_bias",
                format!("must be a finite number, not {}", self.noul_bias),
            );
        }
        self.validate_router_questions()?;
        for (name, value) in [
            ("set_threshold", self.set_threshold),
            ("span_threshold", self.span_threshold),
        ] {
            if !(0.0..=1.0).contains(&value) {
                return bad(name, format!("must be in [0, 1], not {value}"));
            }
        }
        Ok(())
    }

    /// Each router signal is a question the package answers, in its own words.
    pub fn validate_router_questions(&self) -> Result<(), ConfigError> {
        for (id, q) in &self.router_questions {
            let bad = |why: String| {
                Err(ConfigError::RouterQuestion {
                    id: id.clone(),
                    why,
                })
            };
            let parsed = match parse_question(q, Schema::V5) {
                Ok(p) => p,
                Err(f) => return bad(f.message),
            };
            let kind = parsed.kind.type_name();
            if !self.answers(kind) || parsed.instructions.is_none() || parsed.preset.is_some() {
                return bad(format!(
                    "must be a {} question with its own instructions (a {kind} question{})",
                    self.question_types.join(", "),
                    if parsed.preset.is_some() {
                        " naming a preset"
                    } else {
                        ""
                    }
                ));
            }
        }
        Ok(())
    }
}

/// Why a package's decision config cannot be served as written.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ConfigError {
    /// A setting of `decision_config.json` the engine cannot honour.
    #[error("decision_config.json: {setting} {why}")]
    Setting { setting: String, why: String },
    /// A router signal that is not a question the package answers in its own words.
    #[error("router_questions.json: {id}: {why}")]
    RouterQuestion { id: String, why: String },
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(edit: impl FnOnce(&mut DecisionConfig)) -> Result<(), ConfigError> {
        let mut c = DecisionConfig::default();
        edit(&mut c);
        c.validate(TREE_LAYOUTS, TREE_ATTENTION_MODES)
    }

    #[test]
    fn router_signals_replace_a_request_s_wording_and_nothing_else() {
        let mut c = DecisionConfig::default();
        c.router_questions.insert(
            "vsr_task".into(),
            serde_json::json!({"type": "choice", "instructions": "What kind of request is this?",
                "criteria": {"stem": "Science or code", "chat": "Small talk"}}),
        );
        assert_eq!(c.validate(TREE_LAYOUTS, TREE_ATTENTION_MODES), Ok(()));
        let asked = |id: &str, q: Value| QuestionSlot {
            id: id.into(),
            type_word: "noul".into(),
            images: Vec::new(),
            videos: 0,
            question: parse_question(&q, Schema::V5),
        };
        let mine = asked(
            "vsr_task",
            serde_json::json!({"type": "noul", "instructions": "Is it code?", "overflow": "window"}),
        );
        let s = c.as_router_signal(&mine).expect("a signal");
        let q = s.question.expect("valid");
        assert_eq!(s.type_word, "choice");
        assert_eq!(
            q.instructions.as_deref(),
            Some("What kind of request is this?")
        );
        assert!(
            matches!(&q.kind, protocol::QuestionKind::Choice { options } if options.len() == 2)
        );
        assert_eq!(q.overflow, protocol::Overflow::Window);
        // A malformed request question is still answered as the signal.
        let broken = asked("vsr_task", serde_json::json!({"type": "noul"}));
        assert!(c
            .as_router_signal(&broken)
            .expect("a signal")
            .question
            .is_ok());
        assert!(c
            .as_router_signal(&asked("other", serde_json::json!({})))
            .is_none());
        // A signal must be a question the package answers, worded by the package.
        c.router_questions.insert(
            "bad".into(),
            serde_json::json!({"type": "box", "instructions": "x"}),
        );
        assert!(c.validate(TREE_LAYOUTS, TREE_ATTENTION_MODES).is_err());
        c.router_questions.insert(
            "bad".into(),
            serde_json::json!({"type": "noul", "preset": "pii"}),
        );
        assert!(c.validate(TREE_LAYOUTS, TREE_ATTENTION_MODES).is_err());
    }

    #[test]
    fn configs_that_cannot_act_are_refused() {
        assert_eq!(check(|_| {}), Ok(()));
        let e = check(|c| c.temperature.noul = 0.0).unwrap_err().to_string();
        assert!(e.contains("temperature.noul"), "{e}");
        assert!(check(|c| c.temperature.choice = f64::NAN).is_err());
        assert!(check(|c| c.temperature.score = -1.0).is_err());
        let e = check(|c| {
            c.temperature_by_questions = Some(TemperatureByQuestions {
                max_questions: vec![1, 4],
                temperature: vec![1.0, 1.2],
            })
        })
        .unwrap_err()
        .to_string();
        assert!(e.contains("one entry more"), "{e}");
        assert!(check(|c| {
            c.temperature_by_questions = Some(TemperatureByQuestions {
                max_questions: vec![1, 4],
                temperature: vec![1.0, 1.2, 1.4],
            })
        })
        .is_ok());
        assert!(check(|c| {
            c.temperature_by_questions = Some(TemperatureByQuestions {
                max_questions: vec![4, 1],
                temperature: vec![1.0, 1.2, 1.4],
            })
        })
        .is_err());
        let e = check(|c| c.prompt_layout = "question-first-v9".into())
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("prompt_layout") && e.contains("question-first-v9"),
            "{e}"
        );
        let e = check(|c| c.attention_mode = "full".into())
            .unwrap_err()
            .to_string();
        assert!(e.contains("attention_mode"), "{e}");
        assert!(check(|c| c.question_types.push("poll".into())).is_err());
        assert!(check(|c| c.set_threshold = 1.5).is_err());
        assert!(check(|c| c.span_threshold = f64::NAN).is_err());
        assert!(check(|c| c.choice_orders = 0).is_err());
        assert!(check(|c| c.choice_orders = MAX_CHOICE_ORDERS + 1).is_err());
        assert!(check(|c| c.choice_orders = 3).is_ok());
        let e = check(|c| c.content_free = vec!["set".into()])
            .unwrap_err()
            .to_string();
        assert!(e.contains("content_free") && e.contains("set"), "{e}");
        assert!(check(|c| c.content_free = vec!["noul".into()]).is_ok());
        assert!(check(|c| c.content_free = vec!["choice".into(), "score".into()]).is_ok());
        let e = check(|c| c.noul_bias = f64::INFINITY)
            .unwrap_err()
            .to_string();
        assert!(e.contains("noul_bias"), "{e}");
        assert!(check(|c| c.noul_bias = -0.7).is_ok());
        let e = check(|c| c.content_free_weight.noul = 1.5)
            .unwrap_err()
            .to_string();
        assert!(e.contains("content_free_weight.noul"), "{e}");
        assert!(check(|c| c.content_free_weight.choice = f64::NAN).is_err());
        assert!(check(|c| c.content_free_weight.score = 0.75).is_ok());
    }
}

/// What a catalogue entry or a models file says about a model beyond its weights.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelMeta {
    pub name: String,
    pub description: String,
    pub release_date: String,
    pub revision: String,
    /// sha256 of the weights file, when known.
    pub sha256: Option<String>,
    pub aliases: Vec<String>,
}
