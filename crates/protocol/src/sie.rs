//! Typed requests of the SIE face (`sie-api.txt`): `/v1/encode/:model`, `/v1/score/:model` and
//! `/v1/extract/:model`, decoded from the value a JSON or msgpack body gave. Members the API does
//! not name are refused with `unknown_member`; a member of the wrong type, or a word the API
//! does not list (`output_dtype`, `overflow_policy`, `task`), with `body_malformed`, so no
//! option a client sends is silently dropped.

use std::num::NonZeroU64;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use utoipa::ToSchema;

use crate::error::ProtocolError;
use crate::wire::{decode, decode_owned, malformed, BODY};

/// `params.options.overflow_policy`: what a text longer than the model reads at once gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum OverflowPolicy {
    /// Passed as the model allows: an encoder cuts it to its length, a token head or a
    /// decision backbone reads all of it in windows.
    #[default]
    Default,
    /// Its end cut to fit.
    TruncateText,
    /// Refused with INPUT_TOO_LONG.
    Error,
}

/// `params.output_dtype` of encode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum OutputDtype {
    #[default]
    Float32,
    Float16,
    Int8,
    Binary,
}

impl OutputDtype {
    pub fn as_str(self) -> &'static str {
        match self {
            OutputDtype::Float32 => "float32",
            OutputDtype::Float16 => "float16",
            OutputDtype::Int8 => "int8",
            OutputDtype::Binary => "binary",
        }
    }
}

/// `params.options.task` of extract (a runtime option; without it a model that finds spans
/// answers `entities`, as SIE's extract does, and any other `classifications`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ExtractTask {
    /// Each item classified over the labels (`classifications`).
    Classify,
    /// The words of each label found in each item (`entities`).
    Entities,
}

/// `params.output_types` of encode: these models provide dense vectors only.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum OutputType {
    Dense,
}

/// `options.profile`: every model has one profile, the default (`GET /v1/models` lists it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Profile {
    Default,
}

/// The profiles every model has (`GET /v1/models` lists them): one, the default.
pub const PROFILES: &[&str] = &["default"];

/// An SIE item on the wire: an optional id (any value, echoed back) and its text. These models
/// read no images, audio, video or documents: an item carrying one is refused as malformed,
/// not as an unknown member.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SieItemWire {
    #[schema(value_type = Option<Object>)]
    pub id: Option<Value>,
    pub text: String,
    #[schema(value_type = Option<Object>)]
    pub metadata: Option<Map<String, Value>>,
    #[schema(ignore)]
    pub images: Option<Value>,
    #[schema(ignore)]
    pub audio: Option<Value>,
    #[schema(ignore)]
    pub video: Option<Value>,
    #[schema(ignore)]
    pub document: Option<Value>,
}

/// `params.options` of encode.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EncodeOptionsWire {
    pub overflow_policy: Option<OverflowPolicy>,
    pub profile: Option<Profile>,
    /// Each vector's first values, renormalised, up to the model's width (a runtime option,
    /// as `/v1/embeddings`' `dimensions`).
    #[schema(value_type = Option<u64>, minimum = 1)]
    pub dimensions: Option<NonZeroU64>,
}

/// `params` of encode.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EncodeParamsWire {
    pub output_types: Option<Vec<OutputType>>,
    /// Put before each item's text.
    pub instruction: Option<String>,
    pub output_dtype: Option<OutputDtype>,
    pub options: Option<EncodeOptionsWire>,
}

/// `POST /v1/encode/{model}`.
#[derive(Debug, Deserialize, ToSchema)]
#[schema(example = json!({"items": [{"id": "a", "text": "a first text"}], "params": {"output_dtype": "float16"}}))]
#[serde(deny_unknown_fields)]
pub struct EncodeRequestWire {
    #[schema(min_items = 1)]
    pub items: Vec<SieItemWire>,
    pub params: Option<EncodeParamsWire>,
}

/// `options` of score: no runtime option acts on score.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ScoreOptionsWire {
    pub profile: Option<Profile>,
}

/// `POST /v1/score/{model}`.
#[derive(Debug, Deserialize, ToSchema)]
#[schema(example = json!({"query": {"text": "refund policy"}, "items": [{"id": "d1", "text": "Refunds take 5 days."}]}))]
#[serde(deny_unknown_fields)]
pub struct ScoreRequestWire {
    pub query: SieItemWire,
    #[schema(min_items = 1)]
    pub items: Vec<SieItemWire>,
    /// Put before the query's text.
    pub instruction: Option<String>,
    pub options: Option<ScoreOptionsWire>,
}

/// `params.options` of extract.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ExtractOptionsWire {
    pub task: Option<ExtractTask>,
    pub overflow_policy: Option<OverflowPolicy>,
    pub profile: Option<Profile>,
}

/// `params` of extract.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ExtractParamsWire {
    /// Required but on a token head (which has its own).
    #[schema(min_items = 1)]
    pub labels: Option<Vec<String>>,
    /// Structured extraction: refused by these models.
    #[schema(value_type = Option<Object>)]
    pub output_schema: Option<Value>,
    pub instruction: Option<String>,
    pub options: Option<ExtractOptionsWire>,
}

/// `POST /v1/extract/{model}`. Each item is decoded alone (one that cannot be read fails
/// alone).
#[derive(Debug, Deserialize, ToSchema)]
#[schema(example = json!({"items": [{"text": "Call Ada Lovelace at +44 20 7946 0958."}], "params": {"labels": ["PERSON", "PHONE_NUMBER"]}}))]
#[serde(deny_unknown_fields)]
pub struct ExtractRequestWire {
    #[schema(value_type = Vec<SieItemWire>, min_items = 1)]
    pub items: Vec<Value>,
    pub params: Option<ExtractParamsWire>,
}

/// One item: its text and the id echoed back (any value the client gave).
#[derive(Debug, Clone, PartialEq)]
pub struct SieItem {
    pub id: Option<Value>,
    pub text: String,
}

/// `POST /v1/encode/:model`.
#[derive(Debug, Clone, PartialEq)]
pub struct EncodeRequest {
    pub items: Vec<SieItem>,
    /// Put before each item's text.
    pub instruction: Option<String>,
    pub output_dtype: OutputDtype,
    pub overflow: OverflowPolicy,
    /// `params.options.dimensions` (a runtime option, as `/v1/embeddings`' `dimensions`):
    /// each vector's first values, up to the model's width.
    pub dimensions: Option<u64>,
}

/// `POST /v1/score/:model`.
#[derive(Debug, Clone, PartialEq)]
pub struct ScoreRequest {
    pub query: SieItem,
    pub items: Vec<SieItem>,
    /// Put before the query's text.
    pub instruction: Option<String>,
}

/// `POST /v1/extract/:model`. An item that cannot be read fails alone, so each item is kept
/// with its own result.
#[derive(Debug, Clone, PartialEq)]
pub struct ExtractRequest {
    pub items: Vec<Result<SieItem, ProtocolError>>,
    /// The item ids, in order (`item-<index>` for an item without one).
    pub ids: Vec<Value>,
    pub labels: Option<Vec<String>>,
    /// `params.output_schema` was given (structured extraction).
    pub output_schema: bool,
    pub instruction: Option<String>,
    pub overflow: OverflowPolicy,
    /// `None`: the model's own default.
    pub task: Option<ExtractTask>,
}

impl SieItem {
    /// An item read from its wire form (`what` names it in errors).
    fn checked(w: SieItemWire, what: &str) -> Result<SieItem, ProtocolError> {
        let media = [
            ("images", &w.images),
            ("audio", &w.audio),
            ("video", &w.video),
            ("document", &w.document),
        ];
        if let Some((k, _)) = media.iter().find(|(_, v)| v.is_some()) {
            return Err(malformed(format!("{what}.{k}: the model reads text only")));
        }
        Ok(SieItem {
            id: w.id,
            text: w.text,
        })
    }

    /// An item's text; images, audio, video and documents are not read by these models. The
    /// value is consumed: its text moves into the item.
    pub fn parse(v: Value, what: &str) -> Result<SieItem, ProtocolError> {
        SieItem::checked(decode_owned(v, what)?, what)
    }
}

/// `items`, checked non-empty and read one by one (errors name them `items[i]`).
fn items(items: Vec<SieItemWire>) -> Result<Vec<SieItem>, ProtocolError> {
    if items.is_empty() {
        return Err(malformed("items must be a non-empty list"));
    }
    items
        .into_iter()
        .enumerate()
        .map(|(i, it)| SieItem::checked(it, &format!("items[{i}]")))
        .collect()
}

impl TryFrom<EncodeRequestWire> for EncodeRequest {
    type Error = ProtocolError;

    fn try_from(w: EncodeRequestWire) -> Result<Self, ProtocolError> {
        let p = w.params.unwrap_or_default();
        let o = p.options.unwrap_or_default();
        Ok(EncodeRequest {
            items: items(w.items)?,
            instruction: p.instruction,
            output_dtype: p.output_dtype.unwrap_or_default(),
            overflow: o.overflow_policy.unwrap_or_default(),
            dimensions: o.dimensions.map(NonZeroU64::get),
        })
    }
}

impl EncodeRequest {
    pub fn parse(v: &Value) -> Result<Self, ProtocolError> {
        decode::<EncodeRequestWire>(v, BODY)?.try_into()
    }
}

impl TryFrom<ScoreRequestWire> for ScoreRequest {
    type Error = ProtocolError;

    fn try_from(w: ScoreRequestWire) -> Result<Self, ProtocolError> {
        Ok(ScoreRequest {
            query: SieItem::checked(w.query, "query")?,
            items: items(w.items)?,
            instruction: w.instruction,
        })
    }
}

impl ScoreRequest {
    pub fn parse(v: &Value) -> Result<Self, ProtocolError> {
        decode::<ScoreRequestWire>(v, BODY)?.try_into()
    }
}

impl TryFrom<ExtractRequestWire> for ExtractRequest {
    type Error = ProtocolError;

    fn try_from(w: ExtractRequestWire) -> Result<Self, ProtocolError> {
        if w.items.is_empty() {
            return Err(malformed("items must be a non-empty list"));
        }
        let p = w.params.unwrap_or_default();
        if p.labels.as_ref().is_some_and(Vec::is_empty) {
            return Err(malformed(
                "params.labels must be a non-empty list of labels",
            ));
        }
        let o = p.options.unwrap_or_default();
        let n = w.items.len();
        let (mut items, mut ids) = (Vec::with_capacity(n), Vec::with_capacity(n));
        for (i, it) in w.items.into_iter().enumerate() {
            ids.push(
                it.get("id")
                    .cloned()
                    .unwrap_or_else(|| Value::String(format!("item-{i}"))),
            );
            items.push(SieItem::parse(it, &format!("items[{i}]")));
        }
        Ok(ExtractRequest {
            items,
            ids,
            labels: p.labels,
            output_schema: p.output_schema.is_some(),
            instruction: p.instruction,
            overflow: o.overflow_policy.unwrap_or_default(),
            task: o.task,
        })
    }
}

impl ExtractRequest {
    pub fn parse(v: &Value) -> Result<Self, ProtocolError> {
        decode::<ExtractRequestWire>(v, BODY)?.try_into()
    }
}

// What this module's endpoints answer, for the OpenAPI document (the bodies are written by
// hand, in the order the spec shows).

/// An SIE error: `{"detail": {"code", "message"}}`.
#[derive(Serialize, ToSchema)]
pub struct SieErrorDoc {
    pub detail: SieErrorDetailDoc,
}

#[derive(Serialize, ToSchema)]
pub struct SieErrorDetailDoc {
    /// MODEL_NOT_FOUND, INVALID_INPUT, INPUT_TOO_LONG, MODEL_NOT_LOADED, MODEL_LOADING,
    /// MODEL_LOAD_FAILED, QUEUE_FULL, RESOURCE_EXHAUSTED, INFERENCE_ERROR or INTERNAL_ERROR.
    pub code: String,
    pub message: String,
}

#[derive(Serialize, ToSchema)]
pub struct SieEncodeResponseDoc {
    pub model: String,
    /// Per item: `{id?, dense: {dims, dtype, values}}`.
    #[schema(value_type = Vec<Object>)]
    pub items: Vec<Value>,
    #[schema(value_type = Option<Object>)]
    pub timing: Option<Value>,
}

#[derive(Serialize, ToSchema)]
pub struct SieScoreResponseDoc {
    pub model: String,
    /// The query's `id` as sent (any value), or null.
    pub query_id: Value,
    /// `{item_id, score, rank}`, best first.
    #[schema(value_type = Vec<Object>)]
    pub scores: Vec<Value>,
    #[schema(value_type = Object)]
    pub usage: Value,
}

#[derive(Serialize, ToSchema)]
pub struct SieExtractResponseDoc {
    pub model: String,
    /// Per item: `{id, classifications: [{label, score}]}` or `{id, error: {code, message}}`.
    #[schema(value_type = Vec<Object>)]
    pub items: Vec<Value>,
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::error::reason;

    fn refused<T: std::fmt::Debug>(r: Result<T, ProtocolError>, word: &str, says: &str) {
        let e = r.expect_err("refused");
        assert_eq!(e.reason, Some(word), "{}", e.message);
        assert!(e.message.contains(says), "{}", e.message);
    }

    #[test]
    fn encode_reads_its_params_and_refuses_words_it_does_not_know() {
        let r = EncodeRequest::parse(&json!({"items": [{"id": 7, "text": "a", "metadata": {}}],
            "params": {"output_types": ["dense"], "instruction": "q:", "output_dtype": "int8",
                "options": {"overflow_policy": "error", "dimensions": 64}}}))
        .unwrap();
        assert_eq!(
            r,
            EncodeRequest {
                items: vec![SieItem {
                    id: Some(json!(7)),
                    text: "a".into()
                }],
                instruction: Some("q:".into()),
                output_dtype: OutputDtype::Int8,
                overflow: OverflowPolicy::Error,
                dimensions: Some(64),
            }
        );
        let r = EncodeRequest::parse(&json!({"items": [{"text": "a"}]})).unwrap();
        assert_eq!(
            (r.output_dtype, r.overflow, r.instruction),
            (OutputDtype::Float32, OverflowPolicy::Default, None)
        );
        let item = json!([{"text": "a"}]);
        for (params, word, says) in [
            (
                json!({"output_dtype": "float64"}),
                reason::BODY_MALFORMED,
                "float32, float16",
            ),
            (
                json!({"output_dtype": 16}),
                reason::BODY_MALFORMED,
                "output_dtype",
            ),
            (
                json!({"instruction": ["q"]}),
                reason::BODY_MALFORMED,
                "instruction",
            ),
            (
                json!({"output_types": ["sparse"]}),
                reason::BODY_MALFORMED,
                "sparse",
            ),
            (
                json!({"options": {"overflow_policy": "truncate"}}),
                reason::BODY_MALFORMED,
                "truncate_text",
            ),
            (
                json!({"options": {"overflow_policy": true}}),
                reason::BODY_MALFORMED,
                "overflow_policy",
            ),
            (
                json!({"options": {"lora": "x"}}),
                reason::UNKNOWN_MEMBER,
                "\"lora\"",
            ),
            (
                json!({"options": {"task": "entities"}}),
                reason::UNKNOWN_MEMBER,
                "\"task\"",
            ),
            (
                json!({"options": {"dimensions": 0}}),
                reason::BODY_MALFORMED,
                "dimensions",
            ),
            (
                json!({"pooling": "mean"}),
                reason::UNKNOWN_MEMBER,
                "\"pooling\"",
            ),
        ] {
            refused(
                EncodeRequest::parse(&json!({"items": item, "params": params})),
                word,
                says,
            );
        }
        for (items, word, says) in [
            (json!([]), reason::BODY_MALFORMED, "non-empty"),
            (
                json!([{"text": "a", "images": []}]),
                reason::BODY_MALFORMED,
                "text only",
            ),
            (
                json!([{"text": 1}]),
                reason::BODY_MALFORMED,
                "items[0].text",
            ),
            (
                json!([{"text": "a", "lang": "en"}]),
                reason::UNKNOWN_MEMBER,
                "\"lang\"",
            ),
            (
                json!([{"text": "a", "metadata": 3}]),
                reason::BODY_MALFORMED,
                "metadata",
            ),
        ] {
            refused(EncodeRequest::parse(&json!({"items": items})), word, says);
        }
    }

    #[test]
    fn score_takes_no_options_it_would_not_act_on() {
        let r = ScoreRequest::parse(&json!({"query": {"id": "q", "text": "x"},
            "items": [{"text": "a"}], "instruction": "find:", "options": {}}))
        .unwrap();
        assert_eq!(r.query.id, Some(json!("q")));
        assert_eq!(r.instruction.as_deref(), Some("find:"));
        refused(
            ScoreRequest::parse(&json!({"query": {"text": "x"}, "items": [{"text": "a"}],
                "options": {"lora": "x"}})),
            reason::UNKNOWN_MEMBER,
            "\"lora\"",
        );
        refused(
            ScoreRequest::parse(&json!({"query": {"text": "x"}, "items": [{"text": "a"}],
                "options": {"profile": "fast"}})),
            reason::BODY_MALFORMED,
            "options.profile \"fast\": use default",
        );
        assert!(
            ScoreRequest::parse(&json!({"query": {"text": "x"}, "items": [{"text": "a"}],
            "options": {"profile": "default"}}))
            .is_ok()
        );
        refused(
            ScoreRequest::parse(&json!({"items": [{"text": "a"}]})),
            reason::BODY_MALFORMED,
            "query is required",
        );
        refused(
            ScoreRequest::parse(&json!({"query": {"text": "x"}, "items": [{"text": "a"}],
                "instruction": 1})),
            reason::BODY_MALFORMED,
            "instruction",
        );
    }

    #[test]
    fn extract_keeps_each_items_own_failure_and_reads_its_task() {
        let r = ExtractRequest::parse(&json!({"items": [{"text": "a"}, {"id": "b", "text": 2}],
            "params": {"labels": ["PERSON"], "options": {"task": "entities"}}}))
        .unwrap();
        assert_eq!(r.ids, vec![json!("item-0"), json!("b")]);
        assert!(r.items[0].is_ok() && r.items[1].is_err());
        assert_eq!(r.task, Some(ExtractTask::Entities));
        let r = ExtractRequest::parse(&json!({"items": [{"text": "a"}]})).unwrap();
        assert_eq!((r.task, r.labels, r.output_schema), (None, None, false));
        // A misspelt task was read as classify before it was typed.
        refused(
            ExtractRequest::parse(&json!({"items": [{"text": "a"}],
                "params": {"labels": ["x"], "options": {"task": "entity"}}})),
            reason::BODY_MALFORMED,
            "classify, entities",
        );
        refused(
            ExtractRequest::parse(&json!({"items": [{"text": "a"}], "params": {"labels": []}})),
            reason::BODY_MALFORMED,
            "non-empty",
        );
    }
}
