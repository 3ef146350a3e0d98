//! Decoding a body's value into its wire type: the types derive `Deserialize` (and `ToSchema`,
//! so the OpenAPI document is written from them) and refuse members they do not name; this
//! module turns serde's first error into the protocol's, with the path where it happened.
//!
//! Two kinds of error come out: a member the type does not name (`unknown_member`, with the
//! members it takes), and anything else (`body_malformed`: a wrong type, a word the type does
//! not list, a missing member). Validation past types (lengths, ranges, combinations) is the
//! job of each request's `TryFrom`, not of this module.

use serde::de::DeserializeOwned;
use serde_json::Value;
use serde_path_to_error::Segment;

use crate::error::{reason, ProtocolError, QuestionFailure};

/// Decode `v` into `T`. `what` names the value in errors at its root (`"the request body"`,
/// `"items[3]"`); deeper errors are named by their path from there.
///
/// Every wire type is a struct, and `v` must be an object (serde would also take a struct's
/// members in order from an array, which no client means).
pub fn decode<T: DeserializeOwned>(v: &Value, what: &str) -> Result<T, ProtocolError> {
    if !v.is_object() {
        return Err(not_object(what));
    }
    serde_path_to_error::deserialize(v).map_err(|e| wire_error(e, what))
}

/// [`decode`] of a value the caller owns: its strings move into `T` instead of being copied.
pub fn decode_owned<T: DeserializeOwned>(v: Value, what: &str) -> Result<T, ProtocolError> {
    if !v.is_object() {
        return Err(not_object(what));
    }
    serde_path_to_error::deserialize(v).map_err(|e| wire_error(e, what))
}

fn not_object(what: &str) -> ProtocolError {
    if what == BODY {
        malformed("the request body must be a JSON object")
    } else {
        malformed(format!("{what} must be an object"))
    }
}

/// serde's error at its path under `what`, as the protocol's error.
fn wire_error(e: serde_path_to_error::Error<serde_json::Error>, what: &str) -> ProtocolError {
    let path = e.path().to_string();
    let inner = e.into_inner().to_string();
    let at = match (path.as_str(), what) {
        (".", w) => w.to_string(),
        (p, BODY) => p.to_string(),
        (p, w) if p.starts_with('[') => format!("{w}{p}"),
        (p, w) => format!("{w}.{p}"),
    };
    match fault(&at, &inner) {
        Fault::Unknown(m) => ProtocolError::invalid(m).with_reason(reason::UNKNOWN_MEMBER),
        Fault::Other(m) => malformed(m),
    }
}

/// Decode a decision body's value `v`, found at `loc` in the body, into `T`: an unknown member
/// is refused as in [`decode`]; any other error is a schema validation error (a 422 under
/// vllm-sr/5.0) at its location, as decision bodies report them.
pub fn decode_at<T: DeserializeOwned>(v: &Value, loc: &[&str]) -> Result<T, ProtocolError> {
    let dotted = |segments: &[String]| {
        if segments.is_empty() {
            BODY.to_string()
        } else {
            segments.join(".")
        }
    };
    let root: Vec<String> = loc.iter().map(|s| s.to_string()).collect();
    if !v.is_object() {
        let message = if root.is_empty() {
            "the request body must be a JSON object".to_string()
        } else {
            format!("{} must be an object", dotted(&root))
        };
        return Err(ProtocolError::schema(loc, message));
    }
    serde_path_to_error::deserialize(v).map_err(|e| {
        let mut at = root.clone();
        at.extend(e.path().iter().map(|s| match s {
            Segment::Seq { index } => index.to_string(),
            Segment::Map { key } => key.clone(),
            Segment::Enum { variant } => variant.clone(),
            Segment::Unknown => "?".to_string(),
        }));
        let inner = e.into_inner().to_string();
        match fault(&dotted(&at), &inner) {
            Fault::Unknown(m) => ProtocolError::invalid(m).with_reason(reason::UNKNOWN_MEMBER),
            Fault::Other(m) => {
                let at: Vec<&str> = at.iter().map(String::as_str).collect();
                ProtocolError::schema(&at, m)
            }
        }
    })
}

/// Decode one question into `T`; what does not decode fails that question alone, as
/// malformed.
pub fn decode_question<T: DeserializeOwned>(v: &Value) -> Result<T, QuestionFailure> {
    serde_path_to_error::deserialize(v).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner().to_string();
        match fault(if path == "." { "the question" } else { &path }, &inner) {
            Fault::Unknown(m) | Fault::Other(m) => QuestionFailure::malformed(m),
        }
    })
}

/// How errors name a body at its root: [`decode`] given this names deeper errors by their path
/// alone.
pub(crate) const BODY: &str = "the request body";

/// What serde's first error was.
enum Fault {
    /// A member the type does not name.
    Unknown(String),
    /// Anything else.
    Other(String),
}

/// The fault for serde's message `inner` about the value at `at`.
fn fault(at: &str, inner: &str) -> Fault {
    if let Some(rest) = inner.strip_prefix("unknown variant `") {
        // serde: "unknown variant `x`, expected one of `a`, `b`" / "expected `a` or `b`".
        let (word, expected) = rest.split_once('`').unwrap_or((rest, ""));
        return Fault::Other(format!("{at} {word:?}: use {}", words(expected)));
    }
    if let Some(rest) = inner.strip_prefix("missing field `") {
        let name = rest.split('`').next().unwrap_or(rest);
        return Fault::Other(if at == BODY {
            format!("{name} is required")
        } else {
            format!("{at}.{name} is required")
        });
    }
    let Some(rest) = inner.strip_prefix("unknown field `") else {
        return Fault::Other(format!("{at}: {inner}"));
    };
    // serde: "unknown field `x`, expected one of `a`, `b`" / "expected `a`" / "there are no
    // fields". The path ends at the unknown member; the error names the object holding it.
    let (name, expected) = rest.split_once('`').unwrap_or((rest, ""));
    let holder = at
        .strip_suffix(name)
        .map(|h| h.strip_suffix('.').unwrap_or(h))
        .unwrap_or(at);
    let holder = if holder.is_empty() { "request" } else { holder };
    let allowed = words(expected);
    Fault::Unknown(if allowed.is_empty() {
        format!("unknown member {name:?} in {holder}, which takes none here")
    } else {
        format!("unknown member {name:?} in {holder}; allowed: {allowed}")
    })
}

/// The words serde quotes in backticks, joined by commas.
fn words(expected: &str) -> String {
    expected
        .split('`')
        .skip(1)
        .step_by(2)
        .collect::<Vec<_>>()
        .join(", ")
}

/// A `body_malformed` refusal.
pub(crate) fn malformed(message: impl Into<String>) -> ProtocolError {
    ProtocolError::invalid(message).with_reason(reason::BODY_MALFORMED)
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;
    use serde_json::json;

    use super::*;

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Inner {
        size: Option<u32>,
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Outer {
        name: String,
        inner: Option<Inner>,
        list: Option<Vec<Inner>>,
    }

    #[test]
    fn errors_name_the_member_and_where_it_is() {
        let e = decode::<Outer>(
            &json!({"name": "a", "inner": {"colour": 1}}),
            "the request body",
        )
        .unwrap_err();
        assert_eq!(e.reason, Some(reason::UNKNOWN_MEMBER));
        assert_eq!(
            e.message,
            "unknown member \"colour\" in inner; allowed: size"
        );
        let e = decode::<Outer>(&json!({"name": "a", "y": 1}), "the request body").unwrap_err();
        assert!(
            e.message.starts_with("unknown member \"y\" in request;"),
            "{}",
            e.message
        );
        let e = decode::<Outer>(&json!({"name": "a", "x": 1}), "items[2]").unwrap_err();
        assert_eq!(
            e.message,
            "unknown member \"x\" in items[2]; allowed: name, inner, list"
        );
        let e =
            decode::<Outer>(&json!({"name": "a", "list": [{}, {"size": "big"}]}), "q").unwrap_err();
        assert_eq!(e.reason, Some(reason::BODY_MALFORMED));
        assert!(
            e.message.starts_with("q.list[1].size: invalid type"),
            "{}",
            e.message
        );
        let e = decode::<Outer>(&json!([1]), "the request body").unwrap_err();
        assert_eq!(e.reason, Some(reason::BODY_MALFORMED));
        assert_eq!(e.message, "the request body must be a JSON object");
        let e = decode::<Outer>(&json!({}), "the request body").unwrap_err();
        assert_eq!(e.message, "name is required");
        let e = decode::<Outer>(&json!({"name": "a", "list": [{"size": 1, "big": 2}]}), "x")
            .unwrap_err();
        assert_eq!(
            e.message,
            "unknown member \"big\" in x.list[0]; allowed: size"
        );
    }
}
