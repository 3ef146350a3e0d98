//! Counts read from a body's bytes before the body is built into a JSON value: building a
//! 16 MB body of hundreds of thousands of tiny questions costs most of a second, and such a
//! request is refused by its count alone.

use std::fmt;

use serde::de::{Deserializer, IgnoredAny, MapAccess, Visitor};

use crate::error::{reason, ProtocolError};
use crate::MAX_QUESTIONS;

/// The number of members of a body's top-level `questions` object, read without building the
/// body. `None` when the body is not a JSON object or has no such object: the full parse then
/// says what is wrong with it.
pub fn top_level_questions(body: &[u8]) -> Option<usize> {
    let mut de = serde_json::Deserializer::from_slice(body);
    de.deserialize_map(Top).ok().flatten()
}

/// The refusal of a request that asks more than [`MAX_QUESTIONS`] questions.
pub fn too_many_questions(n: usize) -> ProtocolError {
    ProtocolError::invalid(format!(
        "questions holds {n} questions; a request asks at most {MAX_QUESTIONS}"
    ))
    .with_reason(reason::TOO_MANY_QUESTIONS)
    .with_limit(MAX_QUESTIONS as u64)
}

/// The top-level object: the member count of `questions`, every other member skipped.
struct Top;

impl<'de> Visitor<'de> for Top {
    type Value = Option<usize>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Option<usize>, A::Error> {
        let mut count = None;
        while let Some(key) = map.next_key::<String>()? {
            if key == "questions" {
                count = Some(map.next_value_seed(Members)?);
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(count)
    }
}

/// An object's member count, its members skipped.
struct Members;

impl<'de> serde::de::DeserializeSeed<'de> for Members {
    type Value = usize;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<usize, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for Members {
    type Value = usize;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an object of questions")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<usize, A::Error> {
        let mut n = 0;
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {
            n += 1;
        }
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_the_top_level_questions_only() {
        let body = br#"{"state": {"questions": {"a": 1}}, "questions": {"q1": {"type": "noul", "criteria": {"x": [1, {"y": 2}]}}, "q2": null}, "options": {}}"#;
        assert_eq!(top_level_questions(body), Some(2));
        assert_eq!(top_level_questions(br#"{"state": "x"}"#), None);
        assert_eq!(top_level_questions(br#"{"questions": []}"#), None);
        assert_eq!(top_level_questions(b"[1, 2]"), None);
        assert_eq!(top_level_questions(b"{\"questions\": {"), None);
        let deep = format!(
            "{{\"questions\": {{\"q\": {}{}}}}}",
            "[".repeat(10_000),
            "]".repeat(10_000)
        );
        // Skipped members are walked without recursion, however deep.
        assert_eq!(top_level_questions(deep.as_bytes()), Some(1));
    }
}
