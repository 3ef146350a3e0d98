//! The wire types of decision bodies: what a body may hold, as serde reads it and as the
//! OpenAPI document shows it (unknown members refused).

use super::checked::{Overflow, Role};
use crate::assets::AssetDoc;
use crate::error::ProtocolError;
use crate::wire::decode_at;
use serde::de::IgnoredAny;
use serde::{Deserialize, Deserializer};
use serde_json::Value;
use utoipa::openapi::schema::{ArrayBuilder, OneOfBuilder, Schema as OpenApiSchema, Type};
use utoipa::openapi::{ObjectBuilder, RefOr};
use utoipa::{PartialSchema, ToSchema};

/// A decision body on the wire: one request (a state and its questions) or, in the internal
/// and 4.0 forms, a batch of named requests in `states`. Members whose form depends on the
/// schema the body is read in, or that take several forms, are kept as values and checked by
/// [`parse_decision_body_with`], each with the error the contract gives it; their schema is
/// written from the types they are read into.
#[derive(Debug, Deserialize, ToSchema)]
#[schema(example = json!({"model": "qwen2.5-1.5b", "state": "My order arrived broken and I want a refund.",
    "questions": {"team": {"type": "choice", "instructions": "Which team should handle this?",
        "criteria": {"returns": "Refunds and damaged deliveries", "billing": null}},
        "urgent": {"type": "noul", "instructions": "Is this urgent?"}},
    "options": {"deadline_ms": 5000}}))]
#[serde(deny_unknown_fields)]
pub struct DecisionRequestWire {
    /// A model id or alias; absent: the process's first model.
    pub model: Option<String>,
    /// The text the questions are about: a string, an object of named parts or an array.
    #[schema(schema_with = text_schema)]
    pub state: Option<Value>,
    /// Question ids to questions, answered in this order.
    #[schema(value_type = HashMap<String, QuestionWire>)]
    pub questions: Option<Value>,
    pub options: Option<OptionsWire>,
    /// Which state keys hold the user's content, context or the answer under check (null: no
    /// part has a role).
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<HashMap<String, Role>>)]
    pub roles: Option<Value>,
    /// Images (and videos) by reference, placed where their references occur.
    ///
    /// This and the three members below are read in place from the body's value (base64 text
    /// and whole batches are not copied into the wire value); the type only says they may be
    /// given.
    #[schema(value_type = Option<HashMap<String, AssetDoc>>)]
    pub assets: Option<IgnoredAny>,
    /// 4.0: images as data URLs (a removed form under vllm-sr/5.0).
    #[schema(ignore)]
    pub images: Option<IgnoredAny>,
    /// 4.0: videos as data URLs (a removed form under vllm-sr/5.0).
    #[schema(ignore)]
    pub videos: Option<IgnoredAny>,
    /// Internal and 4.0: a batch of named requests (under vllm-sr/5.0, `/v1/systemone/batch`).
    #[schema(ignore)]
    pub states: Option<IgnoredAny>,
}

/// `POST /v1/systemone/batch`: named requests, each answered as it would be alone.
#[derive(Debug, Deserialize, ToSchema)]
#[schema(example = json!({"requests": {"a": {"state": "Hello", "questions": {"greeting": {"type": "noul",
    "instructions": "Is this a greeting?"}}}}}))]
#[serde(deny_unknown_fields)]
pub struct SystemOneBatchWire {
    /// The model of each request that names none.
    pub model: Option<String>,
    /// Names to requests; each is read when it is answered, so a bad one fails alone.
    #[schema(value_type = HashMap<String, DecisionRequestWire>)]
    pub requests: Option<Value>,
}

/// A `/v1/systemone/batch` body: the requests in order, each with the batch's model when it
/// names none (still to be read).
#[derive(Debug, Clone, PartialEq)]
pub struct SystemOneBatch {
    pub requests: Vec<(String, Value)>,
}

impl SystemOneBatch {
    pub fn parse(v: &Value) -> Result<Self, ProtocolError> {
        let w: SystemOneBatchWire = decode_at(v, &[])?;
        let requests = match w.requests {
            Some(Value::Object(r)) if !r.is_empty() => r,
            _ => {
                return Err(ProtocolError::schema(
                    &["requests"],
                    "requests must be an object of named requests",
                ))
            }
        };
        Ok(SystemOneBatch {
            requests: requests
                .into_iter()
                .map(|(name, mut req)| {
                    if let (Some(m), Some(o)) = (&w.model, req.as_object_mut()) {
                        o.entry("model").or_insert_with(|| Value::String(m.clone()));
                    }
                    (name, req)
                })
                .collect(),
        })
    }
}

/// One named request of a batch (`states`); its `images` and `videos` are read in place.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EntryWire {
    pub state: Option<Value>,
    pub questions: Option<Value>,
    #[serde(default, deserialize_with = "present")]
    pub roles: Option<Value>,
    pub images: Option<IgnoredAny>,
    pub videos: Option<IgnoredAny>,
}

/// `options` of a decision request.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct OptionsWire {
    /// Work not started by then is not run; its questions answer deadline_exceeded.
    pub deadline_ms: Option<u64>,
    /// Adds `meta`: identity, revision, numerics, engine, device, timings.
    pub return_meta: Option<bool>,
    /// The scan budget of a model that reads a long part in windows.
    pub max_tokens: Option<u64>,
    /// 4.0 and internal forms (vllm-sr/5.0 takes the TypeSafe-Danger-Zone-Long-Context header).
    #[schema(ignore)]
    pub long_context: Option<bool>,
    /// Internal form only: the windows questions with `overflow: window` read.
    #[schema(value_type = Option<WindowWire>)]
    pub window: Option<Value>,
}

/// `options.window` of the internal form: `tokens`, and an `overlap` less than it.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct WindowWire {
    #[schema(minimum = 1)]
    pub tokens: u64,
    pub overlap: Option<u64>,
}

/// A question's type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum QuestionType {
    Choice,
    Noul,
    Score,
    Set,
    Span,
    Box,
    Track,
}

impl QuestionType {
    pub const ALL: [QuestionType; 7] = [
        QuestionType::Choice,
        QuestionType::Noul,
        QuestionType::Score,
        QuestionType::Set,
        QuestionType::Span,
        QuestionType::Box,
        QuestionType::Track,
    ];

    /// The type's word on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            QuestionType::Choice => "choice",
            QuestionType::Noul => "noul",
            QuestionType::Score => "score",
            QuestionType::Set => "set",
            QuestionType::Span => "span",
            QuestionType::Box => "box",
            QuestionType::Track => "track",
        }
    }

    pub fn from_word(word: &str) -> Option<QuestionType> {
        QuestionType::ALL.into_iter().find(|t| t.as_str() == word)
    }

    /// The members this type takes beside the common ones; `legacy` adds vllm-sr/4.0's
    /// `choices`, `levels` and `labels`.
    pub(super) fn fields(self, legacy: bool) -> &'static [&'static str] {
        use QuestionType as T;
        match (self, legacy) {
            (T::Choice | T::Noul, false) => &["criteria", "decision_adapter"],
            (T::Choice | T::Noul, true) => &["criteria", "choices", "decision_adapter"],
            (T::Score, false) => &["criteria", "decision_adapter"],
            (T::Score, true) => &["criteria", "levels", "decision_adapter"],
            (T::Set, false) => &["criteria", "threshold"],
            (T::Set, true) => &["criteria", "labels", "threshold"],
            (T::Span, false) => &["criteria", "threshold", "head"],
            (T::Span, true) => &["criteria", "labels", "threshold", "head"],
            (T::Box, _) => &["at"],
            (T::Track, _) => &["rate"],
        }
    }
}

/// A question. Members other than `type` depend on the type (a member another type takes is
/// refused); a question the model cannot answer is answered with its error in place (or fails
/// the request on /v1/systemone).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct QuestionWire {
    /// Required but with `preset: pii` (a span question).
    #[serde(rename = "type")]
    pub kind: Option<QuestionType>,
    /// The question, as text or structured text.
    #[schema(schema_with = text_schema)]
    pub instructions: Option<Value>,
    /// Options (choice: names to descriptions), outcome descriptions (noul: false and true),
    /// levels (score: a list) or labels (set, span: names to descriptions, or a list of names).
    #[schema(value_type = Option<Object>)]
    pub criteria: Option<Value>,
    /// A named question: `pii` (span).
    pub preset: Option<String>,
    /// The state keys the question reads: one, or a non-empty list.
    #[schema(schema_with = over_schema)]
    pub over: Option<Value>,
    pub overflow: Option<Overflow>,
    pub require_full_input: Option<bool>,
    /// Choice, noul and score.
    pub decision_adapter: Option<bool>,
    /// Set and span: the probability from which a label is selected.
    #[schema(minimum = 0.0, maximum = 1.0)]
    pub threshold: Option<f64>,
    /// Span.
    #[schema(value_type = Option<Object>)]
    pub head: Option<Value>,
    /// Box: the second of a video the box is asked at.
    #[schema(minimum = 0.0)]
    pub at: Option<f64>,
    /// Track: frames per second, 1 or 2.
    #[schema(minimum = 1, maximum = 2)]
    pub rate: Option<u64>,
    /// 4.0: a choice's options as `[{key, description}]`.
    #[schema(ignore)]
    pub choices: Option<Value>,
    /// 4.0: a score's levels.
    #[schema(ignore)]
    pub levels: Option<Value>,
    /// 4.0: a set's or span's labels as `[{key, description}]`.
    #[schema(ignore)]
    pub labels: Option<Value>,
}

/// A member whose null is not its absence (`roles: null`): present as a value, absent as none.
fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(d).map(Some)
}

/// Text or structured text: a string, an object or an array.
fn text_schema() -> RefOr<OpenApiSchema> {
    OneOfBuilder::new()
        .item(String::schema())
        .item(ObjectBuilder::new().schema_type(Type::Object))
        .item(ArrayBuilder::new())
        .into()
}

/// `over`: a state key, or a non-empty list of them.
fn over_schema() -> RefOr<OpenApiSchema> {
    OneOfBuilder::new()
        .item(String::schema())
        .item(
            ArrayBuilder::new()
                .items(String::schema())
                .min_items(Some(1)),
        )
        .into()
}
