//! Typed requests of the endpoints beside decisions: `/v1/embeddings` (OpenAI), `/v1/rerank`
//! and `/v1/classify`. Decoded strictly from a JSON value, as decision bodies are: an unknown member
//! is refused with `unknown_member` and its name, and a member of the wrong type with
//! `body_malformed`, so a value the client meant is never dropped. What depends on the model
//! (its dimensions, whether it has layer outputs) is checked by the server, which knows it.

use serde_json::{Map, Value};

use crate::error::{reason, ProtocolError};

const EMBEDDINGS_MEMBERS: &[&str] = &[
    "model",
    "input",
    "encoding_format",
    "dimensions",
    "layer",
    "user",
    "options",
];
const EMBEDDINGS_OPTIONS: &[&str] = &["return_meta", "deadline_ms"];
const RERANK_MEMBERS: &[&str] = &[
    "model",
    "query",
    "documents",
    "top_n",
    "return_documents",
    "options",
];
const RERANK_OPTIONS: &[&str] = &["deadline_ms"];

/// `POST /v1/embeddings`.
#[derive(Debug, Clone, PartialEq)]
pub struct EmbeddingsRequest {
    /// A model id or alias; `None`: the process's encoder.
    pub model: Option<String>,
    /// One entry per vector asked for, in order.
    pub input: Vec<EmbeddingInput>,
    /// `encoding_format: base64`: each vector as little-endian f32 bytes in base64.
    pub base64: bool,
    /// `dimensions`: a shorter vector (its first values), up to the model's own width.
    pub dimensions: Option<u64>,
    /// `layer` was given (no catalogue encoder declares layer outputs).
    pub layer: bool,
    pub options: EncoderOptions,
}

/// One embeddings input: text, or token ids.
#[derive(Debug, Clone, PartialEq)]
pub enum EmbeddingInput {
    Text(String),
    Tokens(Vec<u32>),
}

/// `options` of an encoder request.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EncoderOptions {
    /// Adds `meta` (the vectors' representation, engine, device, dtype).
    pub return_meta: bool,
    /// Work not answered by then is answered 504 `deadline_exceeded`.
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

pub(crate) fn malformed(message: impl Into<String>) -> ProtocolError {
    ProtocolError::invalid(message).with_reason(reason::BODY_MALFORMED)
}

/// Refuse members other than `allowed`, naming the first.
pub(crate) fn only(
    obj: &Map<String, Value>,
    allowed: &[&str],
    what: &str,
) -> Result<(), ProtocolError> {
    let Some(k) = obj.keys().find(|k| !allowed.contains(&k.as_str())) else {
        return Ok(());
    };
    let message = if allowed.is_empty() {
        format!("unknown member {k:?} in {what}, which takes none here")
    } else {
        format!(
            "unknown member {k:?} in {what}; allowed: {}",
            allowed.join(", ")
        )
    };
    Err(ProtocolError::invalid(message).with_reason(reason::UNKNOWN_MEMBER))
}

/// A member that is absent or `null`.
pub(crate) fn given<'a>(obj: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
    obj.get(key).filter(|v| !v.is_null())
}

pub(crate) fn body(v: &Value) -> Result<&Map<String, Value>, ProtocolError> {
    v.as_object()
        .ok_or_else(|| malformed("the request body must be a JSON object"))
}

/// `v` as an object; `what` names it in the error.
pub(crate) fn object<'a>(
    v: &'a Value,
    what: &str,
) -> Result<&'a Map<String, Value>, ProtocolError> {
    v.as_object()
        .ok_or_else(|| malformed(format!("{what} must be an object")))
}

/// An optional string member; `what` names it in the error.
pub(crate) fn string(
    obj: &Map<String, Value>,
    key: &str,
    what: &str,
) -> Result<Option<String>, ProtocolError> {
    match given(obj, key) {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(malformed(format!("{what} must be a string"))),
    }
}

fn model(obj: &Map<String, Value>) -> Result<Option<String>, ProtocolError> {
    string(obj, "model", "model")
}

fn flag(obj: &Map<String, Value>, key: &str, what: &str) -> Result<bool, ProtocolError> {
    match given(obj, key) {
        None => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(_) => Err(malformed(format!("{what} must be a boolean"))),
    }
}

fn options(obj: &Map<String, Value>, allowed: &[&str]) -> Result<EncoderOptions, ProtocolError> {
    let o = match given(obj, "options") {
        None => return Ok(EncoderOptions::default()),
        Some(o) => object(o, "options")?,
    };
    only(o, allowed, "options")?;
    let deadline_ms = match given(o, "deadline_ms") {
        None => None,
        Some(v) => Some(
            v.as_u64()
                .ok_or_else(|| malformed("options.deadline_ms must be a non-negative integer"))?,
        ),
    };
    Ok(EncoderOptions {
        return_meta: flag(o, "return_meta", "options.return_meta")?,
        deadline_ms,
    })
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

impl EmbeddingsRequest {
    pub fn parse(v: &Value) -> Result<Self, ProtocolError> {
        let obj = body(v)?;
        let options = options(obj, EMBEDDINGS_OPTIONS)?;
        only(obj, EMBEDDINGS_MEMBERS, "request")?;
        let input = inputs(obj.get("input"))?;
        let base64 = match given(obj, "encoding_format") {
            None => false,
            Some(v) => match v.as_str() {
                Some("float") => false,
                Some("base64") => true,
                _ => return Err(malformed("encoding_format must be float or base64")),
            },
        };
        let dimensions = match given(obj, "dimensions") {
            None => None,
            Some(d) => Some(
                d.as_u64()
                    .filter(|n| *n > 0)
                    .ok_or_else(|| malformed("dimensions must be a positive integer"))?,
            ),
        };
        if given(obj, "user").is_some_and(|u| !u.is_string()) {
            return Err(malformed("user must be a string"));
        }
        Ok(EmbeddingsRequest {
            model: model(obj)?,
            input,
            base64,
            dimensions,
            layer: given(obj, "layer").is_some(),
            options,
        })
    }
}

impl RerankRequest {
    pub fn parse(v: &Value) -> Result<Self, ProtocolError> {
        let obj = body(v)?;
        let options = options(obj, RERANK_OPTIONS)?;
        only(obj, RERANK_MEMBERS, "request")?;
        let query = obj
            .get("query")
            .and_then(Value::as_str)
            .ok_or_else(|| malformed("query must be a string"))?
            .to_string();
        let document = |d: &Value| match d {
            Value::String(s) => Some(s.clone()),
            Value::Object(o) if o.len() == 1 => {
                o.get("text").and_then(Value::as_str).map(String::from)
            }
            _ => None,
        };
        let documents = match obj.get("documents") {
            Some(Value::Array(a)) if !a.is_empty() => a
                .iter()
                .map(|d| {
                    document(d).ok_or_else(|| malformed("each document is a string or {\"text\"}"))
                })
                .collect::<Result<_, _>>()?,
            _ => return Err(malformed("documents must be a non-empty list")),
        };
        let top_n = match given(obj, "top_n") {
            None => None,
            Some(v) => Some(
                v.as_u64()
                    .filter(|n| *n > 0)
                    .and_then(|n| usize::try_from(n).ok())
                    .ok_or_else(|| malformed("top_n must be a positive integer"))?,
            ),
        };
        Ok(RerankRequest {
            model: model(obj)?,
            query,
            documents,
            top_n,
            return_documents: flag(obj, "return_documents", "return_documents")?,
            options,
        })
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

    /// The roles of a grounded input's parts (`question` is the user's).
    pub fn roles(&self) -> Option<Value> {
        let ClassifyInput::Grounded(o) = self else {
            return None;
        };
        let roles: Map<String, Value> = [
            ("context", "context"),
            ("question", "user"),
            ("answer", "answer"),
        ]
        .into_iter()
        .filter(|(k, _)| o.contains_key(*k))
        .map(|(k, r)| (k.to_string(), Value::String(r.into())))
        .collect();
        Some(Value::Object(roles))
    }
}

/// `options.overflow` of classify: what an input longer than the model reads at once gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ClassifyOverflow {
    /// Refused in place (the default).
    #[default]
    Reject,
    Truncate,
    /// Read whole in windows (`options.window` shapes them).
    Window,
}

/// `options` of classify.
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

const CLASSIFY_MEMBERS: &[&str] = &["model", "input", "options"];
const CLASSIFY_OPTIONS: &[&str] = &[
    "overflow",
    "window",
    "return_meta",
    "deadline_ms",
    "return_spans",
];

fn classify_options(obj: &Map<String, Value>) -> Result<ClassifyOptions, ProtocolError> {
    let o = match given(obj, "options") {
        None => return Ok(ClassifyOptions::default()),
        Some(o) => object(o, "options")?,
    };
    only(o, CLASSIFY_OPTIONS, "options")?;
    let overflow = match given(o, "overflow") {
        None => ClassifyOverflow::Reject,
        Some(v) => match v.as_str() {
            Some("reject") => ClassifyOverflow::Reject,
            Some("truncate") => ClassifyOverflow::Truncate,
            Some("window") => ClassifyOverflow::Window,
            _ => {
                return Err(malformed(
                    "options.overflow must be reject, truncate or window",
                ))
            }
        },
    };
    let window = match given(o, "window") {
        None => None,
        Some(w) => {
            let w = object(w, "options.window")?;
            only(w, &["tokens", "overlap"], "options.window")?;
            let field = |k: &str| match given(w, k) {
                None => Ok(None),
                Some(v) => v.as_u64().map(Some).ok_or_else(|| {
                    malformed("options.window.tokens and overlap must be non-negative integers")
                }),
            };
            Some((field("tokens")?, field("overlap")?))
        }
    };
    if window.is_some() && overflow != ClassifyOverflow::Window {
        return Err(malformed(
            "options.window applies with options.overflow window",
        ));
    }
    let deadline_ms = match given(o, "deadline_ms") {
        None => None,
        Some(v) => Some(
            v.as_u64()
                .ok_or_else(|| malformed("options.deadline_ms must be a non-negative integer"))?,
        ),
    };
    Ok(ClassifyOptions {
        overflow,
        window,
        return_meta: flag(o, "return_meta", "options.return_meta")?,
        deadline_ms,
        return_spans: flag(o, "return_spans", "options.return_spans")?,
    })
}

impl ClassifyRequest {
    pub fn parse(v: &Value) -> Result<Self, ProtocolError> {
        let obj = body(v)?;
        only(obj, CLASSIFY_MEMBERS, "request")?;
        let options = classify_options(obj)?;
        let one = |i: usize, x: &Value| match x {
            Value::String(s) => Ok(ClassifyInput::Text(s.clone())),
            Value::Object(o) if o.contains_key("text") => {
                only(o, &["text", "text_pair"], &format!("input[{i}]"))?;
                Ok(ClassifyInput::Pair(o.clone()))
            }
            Value::Object(o) if o.contains_key("context") || o.contains_key("answer") => {
                only(
                    o,
                    &["context", "question", "answer"],
                    &format!("input[{i}]"),
                )?;
                Ok(ClassifyInput::Grounded(o.clone()))
            }
            _ => Err(malformed(format!(
                "input[{i}] must be a string, {{text, text_pair}} or {{context, question, answer}}"
            ))),
        };
        let input = match obj.get("input") {
            Some(Value::String(s)) => vec![ClassifyInput::Text(s.clone())],
            Some(Value::Array(a)) if !a.is_empty() => a
                .iter()
                .enumerate()
                .map(|(i, x)| one(i, x))
                .collect::<Result<_, _>>()?,
            _ => return Err(malformed("input must be a string or a non-empty list")),
        };
        Ok(ClassifyRequest {
            model: model(obj)?,
            input,
            options,
        })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

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
                "float or base64",
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
        assert_eq!(r.input[1].roles(), None);
        assert_eq!(
            r.input[2].roles(),
            Some(json!({"context": "context", "question": "user", "answer": "answer"}))
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
                "reject, truncate or window",
            ),
            (
                json!({"overflow": 1}),
                reason::BODY_MALFORMED,
                "reject, truncate or window",
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
