//! One question decoded: its type's members, options and labels named by their meaning, and
//! the refusal that fails it alone.

use super::checked::{Question, QuestionKind, Schema};
use super::wire::{QuestionType, QuestionWire};
use crate::error::QuestionFailure;
use crate::text::render;
use crate::wire::decode_question;
use crate::{MAX_LEVELS, MAX_OPTIONS, PII_PRESET};
use serde_json::{Map, Value};

const COMMON: &[&str] = &[
    "type",
    "instructions",
    "preset",
    "over",
    "overflow",
    "require_full_input",
];

/// Decode one question; any problem is an `invalid_question` with a message naming the field.
pub fn parse_question(value: &Value, schema: Schema) -> Result<Question, QuestionFailure> {
    let obj = value
        .as_object()
        .ok_or_else(|| QuestionFailure::malformed("a question must be an object"))?;
    let t = match obj.get("type") {
        Some(Value::String(word)) => QuestionType::from_word(word).ok_or_else(|| {
            QuestionFailure::malformed(format!(
                "type {word:?} is not one of choice, noul, score, set, span, box, track"
            ))
        })?,
        Some(_) => return Err(QuestionFailure::malformed("type must be a string")),
        // A preset names its type: `{"preset": "pii"}` is a span question.
        None if obj.get("preset").and_then(Value::as_str) == Some(PII_PRESET) => QuestionType::Span,
        None => return Err(QuestionFailure::malformed("type is required")),
    };
    let fields = t.fields(schema.legacy());
    let stray: Vec<&String> = obj
        .keys()
        .filter(|k| !COMMON.contains(&k.as_str()) && !fields.contains(&k.as_str()))
        .collect();
    if !stray.is_empty() {
        let names: Vec<String> = stray.iter().map(|s| format!("'{s}'")).collect();
        return Err(QuestionFailure::malformed(format!(
            "{} questions do not take [{}]",
            t.as_str(),
            names.join(", ")
        )));
    }
    if obj.contains_key("criteria") {
        if let Some(alt) = ["choices", "levels", "labels"]
            .into_iter()
            .find(|k| obj.contains_key(*k))
        {
            return Err(QuestionFailure::malformed(format!(
                "a question takes criteria or {alt}, not both"
            )));
        }
    }
    // Past the type's own members, each member's type is read by the question's wire type.
    let w: QuestionWire = decode_question(value)?;
    let instructions = match &w.instructions {
        None | Some(Value::Null) => None,
        Some(v @ (Value::String(_) | Value::Object(_) | Value::Array(_))) => {
            let s = render(v);
            if s.trim().is_empty() {
                None
            } else {
                Some(s)
            }
        }
        Some(_) => {
            return Err(QuestionFailure::malformed(
                "instructions must be a string, an object or an array",
            ))
        }
    };
    let preset = w.preset;
    let require_full_input = w.require_full_input.unwrap_or(false);
    let decision_adapter = w.decision_adapter;
    let overflow = w.overflow.unwrap_or_default();
    let over = match &w.over {
        None => None,
        Some(Value::String(k)) => Some(vec![k.clone()]),
        Some(Value::Array(a)) if !a.is_empty() && a.iter().all(Value::is_string) => Some(
            a.iter()
                .filter_map(Value::as_str)
                .map(String::from)
                .collect(),
        ),
        Some(_) => {
            return Err(QuestionFailure::malformed(
                "over must be a state key or a non-empty array of state keys",
            ))
        }
    };
    let threshold = match w.threshold {
        None => None,
        Some(x) if (0.0..=1.0).contains(&x) => Some(x),
        Some(_) => {
            return Err(QuestionFailure::malformed(
                "threshold must be a number from 0 to 1",
            ))
        }
    };
    let kind = match t {
        QuestionType::Choice => choice_kind(keyed_options(obj, "choices", "option")?)?,
        QuestionType::Noul => {
            let criteria = if obj.contains_key("choices") {
                keyed_options(obj, "choices", "outcome")?
            } else {
                match obj.get("criteria") {
                    None | Some(Value::Null) => Vec::new(),
                    Some(Value::Object(_)) => keyed_options(obj, "choices", "outcome")?,
                    Some(_) => {
                        return Err(QuestionFailure::malformed(
                            "noul criteria must be an object with false and true descriptions",
                        ))
                    }
                }
            };
            let mut when_false = None;
            let mut when_true = None;
            for (k, d) in criteria {
                match k.as_str() {
                    "false" => when_false = d,
                    "true" => when_true = d,
                    other => {
                        return Err(QuestionFailure::malformed(format!(
                            "noul criteria take the keys false and true, not {other:?}"
                        )))
                    }
                }
            }
            if instructions.is_none() && when_false.is_none() && when_true.is_none() {
                return Err(QuestionFailure::malformed(
                    "a noul needs instructions or criteria that describe an outcome",
                ));
            }
            QuestionKind::Noul {
                when_false,
                when_true,
            }
        }
        QuestionType::Score => {
            let key = if obj.contains_key("levels") {
                "levels"
            } else {
                "criteria"
            };
            let levels = match obj.get(key) {
                Some(Value::Array(a)) => a,
                _ => {
                    return Err(QuestionFailure::malformed(format!(
                        "a score takes {key} as an array of level descriptions"
                    )))
                }
            };
            if levels.len() < 2 || levels.len() > MAX_LEVELS {
                return Err(QuestionFailure::malformed(format!(
                    "a score takes 2 to {MAX_LEVELS} levels in {key}; got {}",
                    levels.len()
                )));
            }
            let mut out = Vec::with_capacity(levels.len());
            for (i, l) in levels.iter().enumerate() {
                match l {
                    Value::String(s) => out.push(s.clone()),
                    Value::Object(_) | Value::Array(_) => out.push(render(l)),
                    _ => {
                        return Err(QuestionFailure::malformed(format!(
                            "{key}[{i}] must be a string, an object or an array"
                        )))
                    }
                }
            }
            QuestionKind::Score { levels: out }
        }
        // A span question that names a preset may leave its labels to the preset.
        QuestionType::Set | QuestionType::Span => labels_kind(
            t,
            keyed_options(obj, "labels", "label")?,
            threshold,
            preset.is_some(),
        )?,
        QuestionType::Box => {
            if instructions.is_none() {
                return Err(QuestionFailure::malformed(
                    "a box question needs instructions",
                ));
            }
            if w.at.is_some_and(|x| x < 0.0) {
                return Err(QuestionFailure::malformed(
                    "at must be a non-negative number of seconds",
                ));
            }
            QuestionKind::Box { at: w.at }
        }
        QuestionType::Track => {
            if instructions.is_none() {
                return Err(QuestionFailure::malformed(
                    "a track question needs instructions",
                ));
            }
            if w.rate.is_some_and(|r| !matches!(r, 1 | 2)) {
                return Err(QuestionFailure::malformed("rate must be 1 or 2"));
            }
            QuestionKind::Track {
                rate: if w.rate == Some(2) { 2 } else { 1 },
            }
        }
    };
    Ok(Question {
        kind,
        instructions,
        preset,
        over,
        overflow,
        require_full_input,
        decision_adapter,
    })
}

/// Names given without descriptions (`["PERSON", "EMAIL_ADDRESS"]`): each a non-empty string,
/// none twice.
fn named<'a>(
    names: impl IntoIterator<Item = Option<&'a str>>,
    what: &str,
) -> Result<Vec<(String, Option<String>)>, QuestionFailure> {
    let mut out: Vec<(String, Option<String>)> = Vec::new();
    for (i, n) in names.into_iter().enumerate() {
        match n {
            Some(k) if !k.is_empty() => {
                if out.iter().any(|(o, _)| o == k) {
                    return Err(QuestionFailure::malformed(format!(
                        "criteria names {what} {k:?} twice"
                    )));
                }
                out.push((k.to_string(), None));
            }
            _ => {
                return Err(QuestionFailure::malformed(format!(
                    "criteria[{i}] must be a non-empty {what} name"
                )))
            }
        }
    }
    Ok(out)
}

/// A choice among `options`: 2 to [`MAX_OPTIONS`] of them.
fn choice_kind(options: Vec<(String, Option<String>)>) -> Result<QuestionKind, QuestionFailure> {
    if options.len() < 2 || options.len() > MAX_OPTIONS {
        return Err(QuestionFailure::malformed(format!(
            "a choice takes 2 to {MAX_OPTIONS} options in criteria; got {}",
            options.len()
        )));
    }
    Ok(QuestionKind::Choice { options })
}

/// A set or span question (`t`) over `labels`: 1 to [`MAX_OPTIONS`] of them, or none for a
/// span question that names a preset (its labels are the preset's).
fn labels_kind(
    t: QuestionType,
    labels: Vec<(String, Option<String>)>,
    threshold: Option<f64>,
    preset: bool,
) -> Result<QuestionKind, QuestionFailure> {
    let preset_labels = t == QuestionType::Span && preset && labels.is_empty();
    if (labels.is_empty() && !preset_labels) || labels.len() > MAX_OPTIONS {
        return Err(QuestionFailure::malformed(format!(
            "a {} takes 1 to {MAX_OPTIONS} labels in criteria; got {}",
            t.as_str(),
            labels.len()
        )));
    }
    Ok(if t == QuestionType::Set {
        QuestionKind::Set { labels, threshold }
    } else {
        QuestionKind::Span { labels, threshold }
    })
}

/// Options or labels the runtime names itself: each name non-empty and given once; a blank
/// description is none, as in a body.
fn runtime_names(
    names: Vec<(String, Option<String>)>,
    what: &str,
) -> Result<Vec<(String, Option<String>)>, QuestionFailure> {
    let checked = named(names.iter().map(|(n, _)| Some(n.as_str())), what)?;
    Ok(checked
        .into_iter()
        .zip(names)
        .map(|((n, _), (_, d))| (n, d.filter(|d| !d.trim().is_empty())))
        .collect())
}

impl QuestionKind {
    /// A choice among `options` (names and descriptions), checked as a body's criteria are.
    pub fn choice(options: Vec<(String, Option<String>)>) -> Result<Self, QuestionFailure> {
        choice_kind(runtime_names(options, "option")?)
    }

    /// A set question over `labels`, checked as a body's criteria are.
    pub fn set(labels: Vec<(String, Option<String>)>) -> Result<Self, QuestionFailure> {
        labels_kind(
            QuestionType::Set,
            runtime_names(labels, "label")?,
            None,
            false,
        )
    }

    /// A span question over `labels`, or over a preset's labels when `labels` is empty and
    /// `preset` is true.
    pub fn span(
        labels: Vec<(String, Option<String>)>,
        preset: bool,
    ) -> Result<Self, QuestionFailure> {
        labels_kind(
            QuestionType::Span,
            runtime_names(labels, "label")?,
            None,
            preset,
        )
    }
}

/// Options given as `criteria: {key: description}` or, in legacy forms,
/// `<list_key>: [{key, description}]`. Descriptions may be null, strings, objects or arrays.
fn keyed_options(
    obj: &Map<String, Value>,
    list_key: &str,
    what: &str,
) -> Result<Vec<(String, Option<String>)>, QuestionFailure> {
    let describe = |v: Option<&Value>, at: &str| -> Result<Option<String>, QuestionFailure> {
        match v {
            None | Some(Value::Null) => Ok(None),
            Some(v @ (Value::String(_) | Value::Object(_) | Value::Array(_))) => {
                let s = render(v);
                Ok(if s.trim().is_empty() { None } else { Some(s) })
            }
            Some(_) => Err(QuestionFailure::malformed(format!(
                "the description of {what} {at:?} must be a string, an object, an array or null"
            ))),
        }
    };
    if let Some(list) = obj.get(list_key) {
        let items = list.as_array().ok_or_else(|| {
            QuestionFailure::malformed(format!(
                "{list_key} must be an array of {{key, description}}"
            ))
        })?;
        let mut out: Vec<(String, Option<String>)> = Vec::with_capacity(items.len());
        for (i, item) in items.iter().enumerate() {
            let o = item.as_object().ok_or_else(|| {
                QuestionFailure::malformed(format!("{list_key}[{i}] must be an object with a key"))
            })?;
            if let Some(k) = o.keys().find(|k| *k != "key" && *k != "description") {
                return Err(QuestionFailure::malformed(format!(
                    "{list_key}[{i}] does not take {k:?}"
                )));
            }
            let key = match o.get("key") {
                Some(Value::String(s)) if !s.is_empty() => s.clone(),
                Some(Value::Bool(b)) => b.to_string(),
                _ => {
                    return Err(QuestionFailure::malformed(format!(
                        "{list_key}[{i}].key must be a non-empty string"
                    )))
                }
            };
            if out.iter().any(|(k, _)| *k == key) {
                return Err(QuestionFailure::malformed(format!(
                    "{list_key} names {what} {key:?} twice"
                )));
            }
            let d = describe(o.get("description"), &key)?;
            out.push((key, d));
        }
        return Ok(out);
    }
    match obj.get("criteria") {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Object(map)) => {
            let mut out = Vec::with_capacity(map.len());
            for (k, v) in map {
                if k.is_empty() {
                    return Err(QuestionFailure::malformed(format!(
                        "criteria has an empty {what} name"
                    )));
                }
                out.push((k.clone(), describe(Some(v), k)?));
            }
            Ok(out)
        }
        // Labels may be named without descriptions: `["PERSON", "EMAIL_ADDRESS"]`.
        Some(Value::Array(names)) if what == "label" => {
            named(names.iter().map(Value::as_str), what)
        }
        Some(_) => Err(QuestionFailure::malformed(format!(
            "criteria must be an object of {what} names to descriptions"
        ))),
    }
}
