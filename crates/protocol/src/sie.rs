//! Typed requests of the SIE face (`sie-api.txt`): `/v1/encode/:model`, `/v1/score/:model` and
//! `/v1/extract/:model`, decoded from the value a JSON or msgpack body gave. Members the API does
//! not name are refused with `unknown_member`; a member of the wrong type, or a word the API
//! does not list (`output_dtype`, `overflow_policy`, `task`), with `body_malformed`, so no
//! option a client sends is silently dropped.

use serde_json::{Map, Value};

use crate::encoder::{self, given, malformed, object, only, string};
use crate::error::ProtocolError;

/// `params.options.overflow_policy`: what a text longer than the model reads at once gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
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
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExtractTask {
    /// Each item classified over the labels (`classifications`).
    Classify,
    /// The words of each label found in each item (`entities`).
    Entities,
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

const ITEM_MEMBERS: &[&str] = &["id", "text", "metadata"];
const MEDIA: &[&str] = &["images", "audio", "video", "document"];

/// One of `words` (`None` when absent).
fn word<'a>(
    obj: &Map<String, Value>,
    key: &str,
    what: &str,
    words: &[&'a str],
) -> Result<Option<&'a str>, ProtocolError> {
    let Some(v) = given(obj, key) else {
        return Ok(None);
    };
    v.as_str()
        .and_then(|s| words.iter().find(|w| **w == s).copied())
        .map(Some)
        .ok_or_else(|| malformed(format!("{what} {v}: use {}", words.join(", "))))
}

impl SieItem {
    /// An item's text; images, audio, video and documents are not read by these models.
    pub fn parse(v: &Value, what: &str) -> Result<SieItem, ProtocolError> {
        let o = object(v, what)?;
        if let Some(k) = MEDIA.iter().find(|k| o.contains_key(**k)) {
            return Err(malformed(format!("{what}.{k}: the model reads text only")));
        }
        only(o, ITEM_MEMBERS, what)?;
        let text = o
            .get("text")
            .and_then(Value::as_str)
            .ok_or_else(|| malformed(format!("{what}.text must be a string")))?;
        if given(o, "metadata").is_some_and(|m| !m.is_object()) {
            return Err(malformed(format!("{what}.metadata must be an object")));
        }
        Ok(SieItem {
            id: o.get("id").cloned(),
            text: text.to_string(),
        })
    }
}

fn body<'a>(v: &'a Value, allowed: &[&str]) -> Result<&'a Map<String, Value>, ProtocolError> {
    let obj = encoder::body(v)?;
    only(obj, allowed, "request")?;
    Ok(obj)
}

fn items(v: Option<&Value>) -> Result<&Vec<Value>, ProtocolError> {
    match v {
        Some(Value::Array(a)) if !a.is_empty() => Ok(a),
        _ => Err(malformed("items must be a non-empty list")),
    }
}

/// The `i`th member of `items`, read as an item (errors name it `items[i]`).
fn list_item((i, it): (usize, &Value)) -> Result<SieItem, ProtocolError> {
    SieItem::parse(it, &format!("items[{i}]"))
}

/// `params` (an empty map when absent), its own members checked.
fn params(obj: &Map<String, Value>, allowed: &[&str]) -> Result<Map<String, Value>, ProtocolError> {
    let p = match given(obj, "params") {
        None => return Ok(Map::new()),
        Some(p) => object(p, "params")?,
    };
    only(p, allowed, "params")?;
    Ok(p.clone())
}

/// The profiles every model has (`GET /v1/models` lists them): one, the default.
pub const PROFILES: &[&str] = &["default"];

/// `options.profile`: one of [`PROFILES`] when given.
fn profile(o: &Map<String, Value>, what: &str) -> Result<(), ProtocolError> {
    word(o, "profile", what, PROFILES).map(|_| ())
}

/// The runtime options of `params.options` an endpoint read.
#[derive(Debug, Default)]
struct Options {
    overflow: OverflowPolicy,
    task: Option<ExtractTask>,
    dimensions: Option<u64>,
}

/// `params.options`: `overflow_policy` and `profile`, and what else the endpoint takes
/// (`extra`: extract's `task`, encode's `dimensions`).
fn options(p: &Map<String, Value>, extra: &[&str]) -> Result<Options, ProtocolError> {
    let o = match given(p, "options") {
        None => return Ok(Options::default()),
        Some(o) => object(o, "params.options")?,
    };
    let mut allowed = vec!["overflow_policy", "profile"];
    allowed.extend_from_slice(extra);
    only(o, &allowed, "params.options")?;
    profile(o, "params.options.profile")?;
    let overflow = match word(
        o,
        "overflow_policy",
        "params.options.overflow_policy",
        &["default", "truncate_text", "error"],
    )? {
        Some("truncate_text") => OverflowPolicy::TruncateText,
        Some("error") => OverflowPolicy::Error,
        _ => OverflowPolicy::Default,
    };
    let task = match word(o, "task", "params.options.task", &["classify", "entities"])? {
        Some("entities") => Some(ExtractTask::Entities),
        Some(_) => Some(ExtractTask::Classify),
        None => None,
    };
    let dimensions =
        match given(o, "dimensions") {
            None => None,
            Some(d) => Some(d.as_u64().filter(|d| *d > 0).ok_or_else(|| {
                malformed("params.options.dimensions must be a positive integer")
            })?),
        };
    Ok(Options {
        overflow,
        task,
        dimensions,
    })
}

impl EncodeRequest {
    pub fn parse(v: &Value) -> Result<Self, ProtocolError> {
        let obj = body(v, &["items", "params"])?;
        let raw = items(obj.get("items"))?;
        let p = params(
            obj,
            &["output_types", "instruction", "output_dtype", "options"],
        )?;
        let Options {
            overflow,
            dimensions,
            ..
        } = options(&p, &["dimensions"])?;
        if let Some(t) = given(&p, "output_types") {
            let types = t
                .as_array()
                .ok_or_else(|| malformed("params.output_types must be a list"))?;
            if let Some(bad) = types.iter().find(|t| t.as_str() != Some("dense")) {
                return Err(malformed(format!(
                    "params.output_types: this model provides dense vectors only, not {bad}"
                )));
            }
        }
        let output_dtype = match word(
            &p,
            "output_dtype",
            "params.output_dtype",
            &["float32", "float16", "int8", "binary"],
        )? {
            Some("float16") => OutputDtype::Float16,
            Some("int8") => OutputDtype::Int8,
            Some("binary") => OutputDtype::Binary,
            _ => OutputDtype::Float32,
        };
        let items = raw
            .iter()
            .enumerate()
            .map(list_item)
            .collect::<Result<_, _>>()?;
        Ok(EncodeRequest {
            items,
            instruction: string(&p, "instruction", "params.instruction")?,
            output_dtype,
            overflow,
            dimensions,
        })
    }
}

impl ScoreRequest {
    pub fn parse(v: &Value) -> Result<Self, ProtocolError> {
        let obj = body(v, &["query", "items", "instruction", "options"])?;
        if let Some(o) = given(obj, "options") {
            let o = object(o, "options")?;
            only(o, &["profile"], "options")?;
            profile(o, "options.profile")?;
        }
        let query = obj
            .get("query")
            .ok_or_else(|| malformed("query is required"))?;
        let query = SieItem::parse(query, "query")?;
        let instruction = string(obj, "instruction", "instruction")?;
        let items = items(obj.get("items"))?
            .iter()
            .enumerate()
            .map(list_item)
            .collect::<Result<_, _>>()?;
        Ok(ScoreRequest {
            query,
            items,
            instruction,
        })
    }
}

impl ExtractRequest {
    pub fn parse(v: &Value) -> Result<Self, ProtocolError> {
        let obj = body(v, &["items", "params"])?;
        let raw = items(obj.get("items"))?;
        let p = params(obj, &["labels", "output_schema", "instruction", "options"])?;
        let labels = match given(&p, "labels") {
            None => None,
            Some(Value::Array(a)) if !a.is_empty() => Some(
                a.iter()
                    .map(|l| {
                        l.as_str()
                            .map(String::from)
                            .ok_or_else(|| malformed("params.labels must be strings"))
                    })
                    .collect::<Result<_, _>>()?,
            ),
            Some(_) => {
                return Err(malformed(
                    "params.labels must be a non-empty list of labels",
                ))
            }
        };
        let Options { overflow, task, .. } = options(&p, &["task"])?;
        Ok(ExtractRequest {
            items: raw.iter().enumerate().map(list_item).collect(),
            ids: raw
                .iter()
                .enumerate()
                .map(|(i, it)| {
                    it.get("id")
                        .cloned()
                        .unwrap_or_else(|| Value::String(format!("item-{i}")))
                })
                .collect(),
            labels,
            output_schema: p.contains_key("output_schema"),
            instruction: string(&p, "instruction", "params.instruction")?,
            overflow,
            task,
        })
    }
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
