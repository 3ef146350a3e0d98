//! Typed requests of the endpoints beside decisions: `/v1/embeddings` (OpenAI), `/v1/rerank`
//! and `/v1/classify`. Each body is a wire struct (`*Wire`: `Deserialize` and the OpenAPI
//! schema in one type, unknown members refused with `unknown_member` and their name, a member
//! of the wrong type with `body_malformed`), then checked into the request the server runs, so a
//! value the client meant is never dropped. Members that take several forms (`input`,
//! `documents`) are read from their value by the check, item by item, with errors naming the
//! item; their schema is written from the same item types. What depends on the model (its
//! dimensions, whether it has layer outputs) is checked by the server, which knows it.

use std::num::NonZeroU64;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use utoipa::openapi::schema::{ArrayBuilder, OneOfBuilder, Schema, Type};
use utoipa::openapi::{ObjectBuilder, RefOr};
use utoipa::{PartialSchema, ToSchema};

use crate::error::ProtocolError;
use crate::request::{Role, Roles};
use crate::wire::{decode, malformed, BODY};

/// `POST /v1/embeddings`.
#[derive(Debug, Clone, PartialEq)]
pub struct EmbeddingsRequest {
    pub model: Option<String>,
    pub input: Vec<EmbeddingInput>,
    pub base64: bool,
    pub dimensions: Option<u64>,
    pub layer: bool,
    pub options: EncoderOptions,
}

/// One input of `/v1/embeddings`.
#[derive(Debug, Clone, PartialEq)]
pub enum EmbeddingInput {
    Text(String),
    Tokens(Vec<u32>),
}

/// `options` of `/v1/embeddings` and `/v1/rerank`, as read.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EncoderOptions {
    pub return_meta: bool,
    pub deadline_ms: Option<u64>,
}

/// `POST /v1/rerank`.
#[derive(Debug, Clone, PartialEq)]
pub struct RerankRequest {
    pub model: Option<String>,
    pub query: String,
    /// The documents' texts (each sent as a string or `{"text"}`), in order.
    pub documents: Vec<String>,
    /// How many results to return, best first; `None`: all.
    pub top_n: Option<usize>,
    /// Each result carries its document.
    pub return_documents: bool,
    pub options: EncoderOptions,
}

/// `encoding_format` of `/v1/embeddings`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum EncodingFormat {
    /// A list of numbers (the default).
    Float,
    /// Little-endian float32, base64.
    Base64,
}

/// `options` of `/v1/embeddings`.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EmbeddingsOptionsWire {
    /// Add `meta` (the vector space, revision, checksum) to the answer.
    pub return_meta: Option<bool>,
    /// Past this many milliseconds the request answers 504 `deadline_exceeded`; work not
    /// started is not run.
    pub deadline_ms: Option<u64>,
}

/// `POST /v1/embeddings` (OpenAI-compatible).
#[derive(Debug, Deserialize, ToSchema)]
#[schema(example = json!({"model": "minilm-l6", "input": ["a first text", "a second"]}))]
#[serde(deny_unknown_fields)]
pub struct EmbeddingsRequestWire {
    pub model: Option<String>,
    /// A string, a list of strings, token ids, or a list of token-id lists.
    #[schema(schema_with = embedding_input_schema)]
    pub input: Option<Value>,
    pub encoding_format: Option<EncodingFormat>,
    /// Fewer than the model's width: the vector's first values, unit length again when the
    /// model's vectors are; more: 400 parameter_unsupported.
    #[schema(value_type = Option<u64>, minimum = 1)]
    pub dimensions: Option<NonZeroU64>,
    /// Only where the model declares layer outputs; otherwise 400.
    #[schema(value_type = Option<u64>)]
    pub layer: Option<Value>,
    pub user: Option<String>,
    pub options: Option<EmbeddingsOptionsWire>,
}

/// `options` of `/v1/rerank`.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RerankOptionsWire {
    /// Past this many milliseconds the request answers 504 `deadline_exceeded`; work not
    /// started is not run.
    pub deadline_ms: Option<u64>,
}

/// A rerank document given as an object.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RerankDocumentWire {
    pub text: String,
}

/// `POST /v1/rerank`.
#[derive(Debug, Deserialize, ToSchema)]
#[schema(example = json!({"query": "refund policy", "documents": ["Refunds take 5 days.", {"text": "Shipping is free."}], "top_n": 1}))]
#[serde(deny_unknown_fields)]
pub struct RerankRequestWire {
    pub model: Option<String>,
    pub query: String,
    /// Strings or `{"text"}` objects.
    #[schema(schema_with = rerank_documents_schema)]
    pub documents: Option<Value>,
    #[schema(value_type = Option<u64>, minimum = 1)]
    pub top_n: Option<NonZeroU64>,
    pub return_documents: Option<bool>,
    pub options: Option<RerankOptionsWire>,
}

/// A string, or one of `items`.
fn one_of(items: impl IntoIterator<Item = RefOr<Schema>>) -> OneOfBuilder {
    items
        .into_iter()
        .fold(OneOfBuilder::new(), |b, item| b.item(item))
}

/// A non-empty list of `item`.
fn list(item: impl Into<RefOr<Schema>>) -> RefOr<Schema> {
    let item: RefOr<Schema> = item.into();
    ArrayBuilder::new().items(item).min_items(Some(1)).into()
}

fn token_ids_schema() -> RefOr<Schema> {
    list(
        ObjectBuilder::new()
            .schema_type(Type::Integer)
            .minimum(Some(0)),
    )
}

/// `input` of embeddings: a string, token ids, or a non-empty list of strings or token-id lists.
fn embedding_input_schema() -> RefOr<Schema> {
    one_of([
        String::schema(),
        token_ids_schema(),
        list(one_of([String::schema(), token_ids_schema()])),
    ])
    .into()
}

/// `documents` of rerank: a non-empty list of strings or [`RerankDocumentWire`].
fn rerank_documents_schema() -> RefOr<Schema> {
    list(one_of([String::schema(), RerankDocumentWire::schema()]))
}

fn token_ids(a: &[Value]) -> Result<Vec<u32>, ProtocolError> {
    a.iter()
        .map(|x| x.as_u64().and_then(|t| u32::try_from(t).ok()))
        .collect::<Option<_>>()
        .ok_or_else(|| malformed("input token ids must be non-negative integers"))
}

fn inputs(v: Option<&Value>) -> Result<Vec<EmbeddingInput>, ProtocolError> {
    match v {
        Some(Value::String(s)) => Ok(vec![EmbeddingInput::Text(s.clone())]),
        Some(Value::Array(a)) if !a.is_empty() && a.iter().all(Value::is_number) => {
            Ok(vec![EmbeddingInput::Tokens(token_ids(a)?)])
        }
        Some(Value::Array(a)) if !a.is_empty() => a
            .iter()
            .map(|x| match x {
                Value::String(s) => Ok(EmbeddingInput::Text(s.clone())),
                Value::Array(t) if !t.is_empty() => token_ids(t).map(EmbeddingInput::Tokens),
                _ => Err(malformed(
                    "input must be a string, a list of strings, a list of token ids or a list of lists of token ids",
                )),
            })
            .collect(),
        None | Some(Value::Null) => Err(malformed("input is required")),
        Some(_) => Err(malformed(
            "input must be a non-empty string list, a string, or token ids",
        )),
    }
}

impl TryFrom<EmbeddingsRequestWire> for EmbeddingsRequest {
    type Error = ProtocolError;

    fn try_from(w: EmbeddingsRequestWire) -> Result<Self, ProtocolError> {
        let o = w.options.unwrap_or_default();
        Ok(EmbeddingsRequest {
            model: w.model,
            input: inputs(w.input.as_ref())?,
            base64: w.encoding_format == Some(EncodingFormat::Base64),
            dimensions: w.dimensions.map(NonZeroU64::get),
            layer: w.layer.is_some(),
            options: EncoderOptions {
                return_meta: o.return_meta.unwrap_or(false),
                deadline_ms: o.deadline_ms,
            },
        })
    }
}

impl EmbeddingsRequest {
    pub fn parse(v: &Value) -> Result<Self, ProtocolError> {
        decode::<EmbeddingsRequestWire>(v, BODY)?.try_into()
    }
}

impl TryFrom<RerankRequestWire> for RerankRequest {
    type Error = ProtocolError;

    fn try_from(w: RerankRequestWire) -> Result<Self, ProtocolError> {
        let documents = match w.documents {
            Some(Value::Array(a)) if !a.is_empty() => a
                .into_iter()
                .map(|d| match d {
                    Value::String(s) => Ok(s),
                    d => decode::<RerankDocumentWire>(&d, "document")
                        .map(|d| d.text)
                        .map_err(|_| malformed("each document is a string or {\"text\"}")),
                })
                .collect::<Result<_, _>>()?,
            _ => return Err(malformed("documents must be a non-empty list")),
        };
        Ok(RerankRequest {
            model: w.model,
            query: w.query,
            documents,
            top_n: w
                .top_n
                .map(|n| usize::try_from(n.get()).unwrap_or(usize::MAX)),
            return_documents: w.return_documents.unwrap_or(false),
            options: EncoderOptions {
                return_meta: false,
                deadline_ms: w.options.and_then(|o| o.deadline_ms),
            },
        })
    }
}

impl RerankRequest {
    pub fn parse(v: &Value) -> Result<Self, ProtocolError> {
        decode::<RerankRequestWire>(v, BODY)?.try_into()
    }
}

/// `POST /v1/classify`.
#[derive(Debug, Clone, PartialEq)]
pub struct ClassifyRequest {
    /// A classification entry of the models file, or a classification head.
    pub model: Option<String>,
    pub input: Vec<ClassifyInput>,
    pub options: ClassifyOptions,
}

/// One classify input.
#[derive(Debug, Clone, PartialEq)]
pub enum ClassifyInput {
    Text(String),
    /// `{text, text_pair}` (`text_pair` optional).
    Pair(Map<String, Value>),
    /// `{context, question, answer}`: a grounding check (each optional, one of `context` and
    /// `answer` present).
    Grounded(Map<String, Value>),
}

impl ClassifyInput {
    /// The input as a decision state.
    pub fn state(&self) -> Value {
        match self {
            ClassifyInput::Text(s) => Value::String(s.clone()),
            ClassifyInput::Pair(o) | ClassifyInput::Grounded(o) => Value::Object(o.clone()),
        }
    }

    /// The roles of a grounded input's parts (`question` is the user's); none for the others.
    pub fn roles(&self) -> Roles {
        let ClassifyInput::Grounded(o) = self else {
            return Roles::Absent;
        };
        Roles::Map(
            [
                ("context", Role::Context),
                ("question", Role::User),
                ("answer", Role::Answer),
            ]
            .into_iter()
            .filter(|(k, _)| o.contains_key(*k))
            .map(|(k, r)| (k.to_string(), r))
            .collect(),
        )
    }
}

/// `options.overflow` of classify: what an input longer than the model reads at once gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ClassifyOverflow {
    /// Refused in place (the default).
    #[default]
    Reject,
    Truncate,
    /// Read whole in windows (`options.window` shapes them).
    Window,
}

/// `options` of classify, as read.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ClassifyOptions {
    pub overflow: ClassifyOverflow,
    /// `options.window`: its `tokens` and `overlap`, each optional; only with `overflow: window`.
    pub window: Option<(Option<u64>, Option<u64>)>,
    pub return_meta: bool,
    pub deadline_ms: Option<u64>,
    /// Spans asked for: refused where the model has none.
    pub return_spans: bool,
}

/// `options.window` of classify (with `overflow: window` only).
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ClassifyWindowWire {
    pub tokens: Option<u64>,
    pub overlap: Option<u64>,
}

/// `options` of classify.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ClassifyOptionsWire {
    pub overflow: Option<ClassifyOverflow>,
    pub window: Option<ClassifyWindowWire>,
    pub return_meta: Option<bool>,
    /// Past this many milliseconds the request answers 504 `deadline_exceeded`.
    pub deadline_ms: Option<u64>,
    /// Refused where the model has no spans.
    pub return_spans: Option<bool>,
}

/// A classify input given as a text pair.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ClassifyPairWire {
    pub text: String,
    pub text_pair: Option<String>,
}

/// A classify input given as a grounding check (one of `context` and `answer` present).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ClassifyGroundedWire {
    pub context: Option<String>,
    pub question: Option<String>,
    pub answer: Option<String>,
}

/// `POST /v1/classify`.
#[derive(Debug, Deserialize, ToSchema)]
#[schema(example = json!({"input": ["I love it", {"text": "The cat sat.", "text_pair": "A cat is sitting."}]}))]
#[serde(deny_unknown_fields)]
pub struct ClassifyRequestWire {
    /// A classification entry of the models file, or a classification head.
    pub model: Option<String>,
    /// A string, or a list of strings, `{text, text_pair}` pairs or `{context, question, answer}` items.
    #[schema(schema_with = classify_input_schema)]
    pub input: Option<Value>,
    pub options: Option<ClassifyOptionsWire>,
}

/// `input` of classify: a string, or a non-empty list of strings and the two object forms.
fn classify_input_schema() -> RefOr<Schema> {
    one_of([
        String::schema(),
        list(one_of([
            String::schema(),
            ClassifyPairWire::schema(),
            ClassifyGroundedWire::schema(),
        ])),
    ])
    .into()
}

/// One classify input, read from its value (errors name it `input[i]`). The object forms are
/// checked member by member by their wire types and kept as sent (the state a model reads).
fn classify_input(i: usize, x: &Value) -> Result<ClassifyInput, ProtocolError> {
    let what = format!("input[{i}]");
    match x {
        Value::String(s) => Ok(ClassifyInput::Text(s.clone())),
        Value::Object(o) if o.contains_key("text") => {
            decode::<ClassifyPairWire>(x, &what)?;
            Ok(ClassifyInput::Pair(o.clone()))
        }
        Value::Object(o) if o.contains_key("context") || o.contains_key("answer") => {
            decode::<ClassifyGroundedWire>(x, &what)?;
            Ok(ClassifyInput::Grounded(o.clone()))
        }
        _ => Err(malformed(format!(
            "{what} must be a string, {{text, text_pair}} or {{context, question, answer}}"
        ))),
    }
}

impl TryFrom<ClassifyRequestWire> for ClassifyRequest {
    type Error = ProtocolError;

    fn try_from(w: ClassifyRequestWire) -> Result<Self, ProtocolError> {
        let o = w.options.unwrap_or_default();
        let overflow = o.overflow.unwrap_or_default();
        if o.window.is_some() && overflow != ClassifyOverflow::Window {
            return Err(malformed(
                "options.window applies with options.overflow window",
            ));
        }
        let input = match &w.input {
            Some(Value::String(s)) => vec![ClassifyInput::Text(s.clone())],
            Some(Value::Array(a)) if !a.is_empty() => a
                .iter()
                .enumerate()
                .map(|(i, x)| classify_input(i, x))
                .collect::<Result<_, _>>()?,
            _ => return Err(malformed("input must be a string or a non-empty list")),
        };
        Ok(ClassifyRequest {
            model: w.model,
            input,
            options: ClassifyOptions {
                overflow,
                window: o.window.map(|w| (w.tokens, w.overlap)),
                return_meta: o.return_meta.unwrap_or(false),
                deadline_ms: o.deadline_ms,
                return_spans: o.return_spans.unwrap_or(false),
            },
        })
    }
}

impl ClassifyRequest {
    pub fn parse(v: &Value) -> Result<Self, ProtocolError> {
        decode::<ClassifyRequestWire>(v, BODY)?.try_into()
    }
}

// What this module's endpoints answer, for the OpenAPI document (the bodies are written by
// hand, in the order the spec shows).

#[derive(Serialize, ToSchema)]
pub struct EmbeddingDoc {
    pub object: String,
    pub index: u64,
    /// A list of numbers, or a base64 string with encoding_format base64.
    pub embedding: Value,
}

#[derive(Serialize, ToSchema)]
pub struct EmbeddingsUsageDoc {
    pub prompt_tokens: u64,
    pub total_tokens: u64,
}

#[derive(Serialize, ToSchema)]
pub struct EmbeddingsResponseDoc {
    pub object: String,
    pub data: Vec<EmbeddingDoc>,
    pub model: String,
    pub usage: EmbeddingsUsageDoc,
    #[schema(value_type = Option<Object>)]
    pub meta: Option<Value>,
}

#[derive(Serialize, ToSchema)]
pub struct RerankResultDoc {
    pub index: u64,
    pub relevance_score: f64,
    #[schema(value_type = Option<Object>)]
    pub document: Option<Value>,
}

#[derive(Serialize, ToSchema)]
pub struct RerankResponseDoc {
    pub model: String,
    pub results: Vec<RerankResultDoc>,
    #[schema(value_type = Object)]
    pub usage: Value,
}

#[derive(Serialize, ToSchema)]
pub struct ClassifyResponseDoc {
    pub model: String,
    pub backbone: String,
    /// Per input: `{index, label, labels: [{label, score}]}` (a set: `selected`); on a
    /// token-classification head `{index, spans: [{label, start, end, text, probability}]}`
    /// (code-point offsets, end exclusive; `truncated` when cut); or
    /// `{index, error, reason, message}`.
    #[schema(value_type = Vec<Object>)]
    pub data: Vec<Value>,
    #[schema(value_type = Object)]
    pub usage: Value,
    #[schema(value_type = Option<Object>)]
    pub meta: Option<Value>,
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::error::reason;

    fn refused(r: Result<impl std::fmt::Debug, ProtocolError>) -> (Option<&'static str>, String) {
        let e = r.expect_err("refused");
        (e.reason, e.message)
    }

    #[test]
    fn embeddings_inputs_of_every_form() {
        let r = EmbeddingsRequest::parse(&json!({"input": "a"})).unwrap();
        assert_eq!(r.input, vec![EmbeddingInput::Text("a".into())]);
        assert_eq!(r.options, EncoderOptions::default());
        let r = EmbeddingsRequest::parse(&json!({"input": [1, 2]})).unwrap();
        assert_eq!(r.input, vec![EmbeddingInput::Tokens(vec![1, 2])]);
        let r = EmbeddingsRequest::parse(&json!({
            "model": "m", "input": ["a", [3]], "encoding_format": "base64", "dimensions": 384,
            "user": "u", "options": {"return_meta": true, "deadline_ms": 50}
        }))
        .unwrap();
        assert_eq!(
            r,
            EmbeddingsRequest {
                model: Some("m".into()),
                input: vec![
                    EmbeddingInput::Text("a".into()),
                    EmbeddingInput::Tokens(vec![3])
                ],
                base64: true,
                dimensions: Some(384),
                layer: false,
                options: EncoderOptions {
                    return_meta: true,
                    deadline_ms: Some(50)
                },
            }
        );
        // null members are absent ones
        let r = EmbeddingsRequest::parse(&json!({"input": "a", "model": null, "layer": null,
            "dimensions": null, "options": null}))
        .unwrap();
        assert_eq!((r.model, r.dimensions, r.layer), (None, None, false));
        assert!(
            EmbeddingsRequest::parse(&json!({"input": "a", "layer": 3}))
                .unwrap()
                .layer
        );
    }

    #[test]
    fn embeddings_refusals_name_what_is_wrong() {
        for (body, word, says) in [
            (
                json!({"input": "a", "extra": 1}),
                reason::UNKNOWN_MEMBER,
                "\"extra\"",
            ),
            (
                json!({"input": "a", "options": {"window": 1}}),
                reason::UNKNOWN_MEMBER,
                "\"window\"",
            ),
            (json!({}), reason::BODY_MALFORMED, "input is required"),
            (json!({"input": []}), reason::BODY_MALFORMED, "non-empty"),
            (json!({"input": [-1]}), reason::BODY_MALFORMED, "token ids"),
            (
                json!({"input": [[]]}),
                reason::BODY_MALFORMED,
                "a list of strings",
            ),
            (
                json!({"input": "a", "encoding_format": "hex"}),
                reason::BODY_MALFORMED,
                "use float, base64",
            ),
            (
                json!({"input": "a", "dimensions": "384"}),
                reason::BODY_MALFORMED,
                "dimensions",
            ),
            (
                json!({"input": "a", "dimensions": 0}),
                reason::BODY_MALFORMED,
                "dimensions",
            ),
            (
                json!({"input": "a", "user": 7}),
                reason::BODY_MALFORMED,
                "user",
            ),
            (
                json!({"input": "a", "model": 7}),
                reason::BODY_MALFORMED,
                "model",
            ),
            (
                json!({"input": "a", "options": {"return_meta": "yes"}}),
                reason::BODY_MALFORMED,
                "return_meta",
            ),
            (
                json!({"input": "a", "options": {"deadline_ms": -1}}),
                reason::BODY_MALFORMED,
                "deadline_ms",
            ),
            (json!(["a"]), reason::BODY_MALFORMED, "JSON object"),
        ] {
            let (r, message) = refused(EmbeddingsRequest::parse(&body));
            assert_eq!(r, Some(word), "{body}: {message}");
            assert!(message.contains(says), "{body}: {message}");
        }
    }

    #[test]
    fn rerank_reads_documents_and_refuses_what_it_cannot_act_on() {
        let r = RerankRequest::parse(&json!({"query": "q", "documents": ["a", {"text": "b"}],
            "top_n": 1, "return_documents": true, "options": {"deadline_ms": 9}}))
        .unwrap();
        assert_eq!(r.documents, vec!["a".to_string(), "b".to_string()]);
        assert_eq!((r.top_n, r.return_documents), (Some(1), true));
        assert_eq!(r.options.deadline_ms, Some(9));
        let r = RerankRequest::parse(&json!({"query": "q", "documents": ["a"]})).unwrap();
        assert_eq!((r.top_n, r.return_documents, r.model), (None, false, None));
        for (body, word, says) in [
            (
                json!({"query": "q", "documents": ["a"], "rank_fields": []}),
                reason::UNKNOWN_MEMBER,
                "rank_fields",
            ),
            (
                json!({"query": "q", "documents": ["a"], "options": {"return_meta": true}}),
                reason::UNKNOWN_MEMBER,
                "return_meta",
            ),
            (json!({"documents": ["a"]}), reason::BODY_MALFORMED, "query"),
            (
                json!({"query": "q", "documents": []}),
                reason::BODY_MALFORMED,
                "non-empty",
            ),
            (
                json!({"query": "q", "documents": [1]}),
                reason::BODY_MALFORMED,
                "each document",
            ),
            (
                json!({"query": "q", "documents": [{"text": "a", "title": "t"}]}),
                reason::BODY_MALFORMED,
                "each document",
            ),
            (
                json!({"query": "q", "documents": ["a"], "top_n": 0}),
                reason::BODY_MALFORMED,
                "top_n",
            ),
            // a flag of the wrong type was read as false before it was typed
            (
                json!({"query": "q", "documents": ["a"], "return_documents": "yes"}),
                reason::BODY_MALFORMED,
                "return_documents",
            ),
        ] {
            let (r, message) = refused(RerankRequest::parse(&body));
            assert_eq!(r, Some(word), "{body}: {message}");
            assert!(message.contains(says), "{body}: {message}");
        }
    }

    #[test]
    fn classify_reads_every_input_form_and_refuses_options_it_cannot_act_on() {
        let r = ClassifyRequest::parse(&json!({"model": "m", "input": ["a",
            {"text": "b", "text_pair": "c"}, {"context": "d", "question": "e", "answer": "f"}],
            "options": {"overflow": "window", "window": {"tokens": 64}, "return_meta": true,
                "deadline_ms": 5, "return_spans": false}}))
        .unwrap();
        assert_eq!(r.input.len(), 3);
        assert_eq!(r.input[0].state(), json!("a"));
        assert_eq!(r.input[1].roles(), Roles::Absent);
        assert_eq!(
            r.input[2].roles(),
            Roles::Map(vec![
                ("context".into(), Role::Context),
                ("question".into(), Role::User),
                ("answer".into(), Role::Answer)
            ])
        );
        assert_eq!(
            r.options,
            ClassifyOptions {
                overflow: ClassifyOverflow::Window,
                window: Some((Some(64), None)),
                return_meta: true,
                deadline_ms: Some(5),
                return_spans: false,
            }
        );
        for (options, word, says) in [
            (json!({"speed": 1}), reason::UNKNOWN_MEMBER, "\"speed\""),
            (
                json!({"window": {"size": 3}, "overflow": "window"}),
                reason::UNKNOWN_MEMBER,
                "\"size\"",
            ),
            (
                json!({"window": {"tokens": 64}}),
                reason::BODY_MALFORMED,
                "overflow window",
            ),
            (
                json!({"overflow": "cut"}),
                reason::BODY_MALFORMED,
                "use reject, truncate, window",
            ),
            (
                json!({"overflow": 1}),
                reason::BODY_MALFORMED,
                "options.overflow",
            ),
            // each of these was read as absent before it was typed
            (
                json!({"deadline_ms": "5"}),
                reason::BODY_MALFORMED,
                "deadline_ms",
            ),
            (
                json!({"return_meta": 1}),
                reason::BODY_MALFORMED,
                "return_meta",
            ),
            (
                json!({"return_spans": "yes"}),
                reason::BODY_MALFORMED,
                "return_spans",
            ),
        ] {
            let (r, message) = refused(ClassifyRequest::parse(
                &json!({"input": "a", "options": options}),
            ));
            assert_eq!(r, Some(word), "{options}: {message}");
            assert!(message.contains(says), "{options}: {message}");
        }
        let (r, message) = refused(ClassifyRequest::parse(
            &json!({"input": [{"text": "a", "label": 1}]}),
        ));
        assert_eq!(r, Some(reason::UNKNOWN_MEMBER), "{message}");
        let (r, _) = refused(ClassifyRequest::parse(&json!({"input": [3]})));
        assert_eq!(r, Some(reason::BODY_MALFORMED));
    }
}
