//! Answer and response types.

use std::collections::HashMap;

use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;

use crate::error::QuestionFailure;
use crate::ordered::Ordered;

#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct ChoiceAnswer {
    pub choice: String,
    #[schema(value_type = std::collections::HashMap<String, f64>)]
    pub probabilities: Ordered<f64>,
    pub confidence: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct NoulAnswer {
    pub noul: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct ScoreAnswer {
    pub score: f64,
    #[schema(value_type = std::collections::HashMap<String, f64>)]
    pub probabilities: Ordered<f64>,
    pub confidence: f64,
    #[schema(value_type = std::collections::HashMap<String, String>)]
    pub legend: Ordered<String>,
}

/// A box's edges as fractions of the image's height (`top`, `bottom`) and width (`left`,
/// `right`), from its top-left corner, as the image was sent.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, ToSchema)]
pub struct Edges {
    pub top: f64,
    pub left: f64,
    pub bottom: f64,
    pub right: f64,
}

/// A box question's answer: always one box, and the probability that it overlaps the true one
/// by at least half (`null` when the model has no formula for it).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, ToSchema)]
pub struct BoxAnswer {
    #[serde(rename = "box")]
    pub edges: Edges,
    pub confidence: Option<f64>,
    /// The moment of the video (seconds) a box question with `at` located it at.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub time: Option<f64>,
}

/// One sampled moment of a track answer: where the target is, how sure the box is, and the
/// probability that the target is visible then.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, ToSchema)]
pub struct TrackMoment {
    pub time: f64,
    #[serde(rename = "box")]
    pub edges: Edges,
    pub confidence: Option<f64>,
    pub visible: f64,
}

/// One entry of `answers`.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    Choice(ChoiceAnswer),
    Noul(NoulAnswer),
    Score(ScoreAnswer),
    Box(BoxAnswer),
    Track(Vec<TrackMoment>),
    /// A question that has no answer: `{type, error, reason, message}`.
    Failed {
        type_word: String,
        failure: QuestionFailure,
    },
}

impl Answer {
    pub fn failure(&self) -> Option<&QuestionFailure> {
        match self {
            Answer::Failed { failure, .. } => Some(failure),
            _ => None,
        }
    }
}

/// An answer with the optional `input_coverage: complete` proof.
#[derive(Debug, Clone, PartialEq)]
pub struct AnswerEntry {
    pub answer: Answer,
    pub input_complete: bool,
}

impl Serialize for AnswerEntry {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(None)?;
        match &self.answer {
            Answer::Choice(c) => {
                m.serialize_entry("type", "choice")?;
                m.serialize_entry("choice", &c.choice)?;
                m.serialize_entry("probabilities", &c.probabilities)?;
                m.serialize_entry("confidence", &c.confidence)?;
            }
            Answer::Noul(n) => {
                m.serialize_entry("type", "noul")?;
                m.serialize_entry("noul", &n.noul)?;
            }
            Answer::Score(c) => {
                m.serialize_entry("type", "score")?;
                m.serialize_entry("score", &c.score)?;
                m.serialize_entry("probabilities", &c.probabilities)?;
                m.serialize_entry("confidence", &c.confidence)?;
                m.serialize_entry("legend", &c.legend)?;
            }
            Answer::Box(b) => {
                m.serialize_entry("type", "box")?;
                m.serialize_entry("box", &b.edges)?;
                m.serialize_entry("confidence", &b.confidence)?;
                if let Some(t) = b.time {
                    m.serialize_entry("time", &t)?;
                }
            }
            Answer::Track(moments) => {
                m.serialize_entry("type", "track")?;
                m.serialize_entry("track", moments)?;
            }
            Answer::Failed { type_word, failure } => {
                m.serialize_entry("type", type_word)?;
                m.serialize_entry("error", failure.kind.as_str())?;
                m.serialize_entry("reason", failure.reason)?;
                m.serialize_entry("message", &failure.message)?;
                if let Some(limit) = failure.limit {
                    m.serialize_entry("limit", &limit)?;
                }
            }
        }
        if self.input_complete {
            m.serialize_entry("input_coverage", "complete")?;
        }
        m.end()
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, ToSchema)]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    #[schema(required = false)]
    pub tokens_lower_bound: bool,
}

impl Usage {
    pub fn add(&mut self, other: &Usage) {
        self.input_tokens += other.input_tokens;
        self.output_tokens += other.output_tokens;
        self.tokens_lower_bound |= other.tokens_lower_bound;
    }
}

/// `sets.<id>` of a response.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct SetResult {
    pub selected: Vec<String>,
    #[schema(value_type = std::collections::HashMap<String, f64>)]
    pub probabilities: Ordered<f64>,
}

/// One span a span question found: `start` and `end` count Unicode code points into the text
/// the question read, end exclusive.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct SpanFound {
    pub label: String,
    pub start: usize,
    pub end: usize,
    pub text: String,
    pub probability: f64,
}

/// The response to one standard request.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct DecisionResponse {
    pub model: String,
    #[schema(value_type = std::collections::HashMap<String, AnswerDoc>)]
    pub answers: Ordered<AnswerEntry>,
    #[serde(skip_serializing_if = "Ordered::is_empty")]
    #[schema(value_type = Option<std::collections::HashMap<String, SetResult>>)]
    pub sets: Ordered<SetResult>,
    /// Each span question's spans.
    #[serde(skip_serializing_if = "Ordered::is_empty")]
    #[schema(value_type = Option<std::collections::HashMap<String, Vec<SpanFound>>>)]
    pub spans: Ordered<Vec<SpanFound>>,
    #[serde(skip_serializing_if = "Ordered::is_empty")]
    #[schema(value_type = Option<std::collections::HashMap<String, f64>>)]
    pub thresholds: Ordered<f64>,
    pub usage: Usage,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub meta: Option<serde_json::Value>,
}

impl DecisionResponse {
    /// The first failed question and the ids of all failed ones, in request order.
    pub fn failures(&self) -> Vec<(&str, &QuestionFailure)> {
        self.answers
            .iter()
            .filter_map(|(id, a)| a.answer.failure().map(|f| (id.as_str(), f)))
            .collect()
    }
}

/// The response to a batch (`states`).
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct BatchResponse {
    pub model: String,
    #[schema(value_type = std::collections::HashMap<String, DecisionResponse>)]
    pub states: Ordered<DecisionResponse>,
    pub usage: Usage,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub meta: Option<serde_json::Value>,
}

// What this module's endpoints answer, for the OpenAPI document (the bodies are written by
// hand, in the order the spec shows).

/// One entry of `answers`: a typed answer, or the question's error in place.
#[derive(Serialize, ToSchema)]
#[serde(untagged)]
pub enum AnswerDoc {
    Choice(ChoiceDoc),
    Noul(NoulDoc),
    Score(ScoreDoc),
    Box(BoxDoc),
    Track(TrackDoc),
    Failed(FailedDoc),
}

#[derive(Serialize, ToSchema)]
pub struct TrackDoc {
    #[serde(rename = "type")]
    pub kind: String,
    pub track: Vec<TrackMoment>,
}

#[derive(Serialize, ToSchema)]
pub struct BoxDoc {
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(rename = "box")]
    pub edges: Edges,
    /// The probability that the box overlaps the true one by at least half.
    pub confidence: Option<f64>,
    /// With `at`: the moment of the video, in seconds.
    pub time: Option<f64>,
}

#[derive(Serialize, ToSchema)]
pub struct ChoiceDoc {
    #[serde(rename = "type")]
    pub kind: String,
    pub choice: String,
    pub probabilities: HashMap<String, f64>,
    pub confidence: f64,
    pub input_coverage: Option<String>,
}

#[derive(Serialize, ToSchema)]
pub struct NoulDoc {
    #[serde(rename = "type")]
    pub kind: String,
    pub noul: f64,
    pub input_coverage: Option<String>,
}

#[derive(Serialize, ToSchema)]
pub struct ScoreDoc {
    #[serde(rename = "type")]
    pub kind: String,
    pub score: f64,
    pub probabilities: HashMap<String, f64>,
    pub confidence: f64,
    pub legend: HashMap<String, String>,
    pub input_coverage: Option<String>,
}

/// A question without an answer.
#[derive(Serialize, ToSchema)]
pub struct FailedDoc {
    #[serde(rename = "type")]
    pub kind: String,
    /// invalid_question, invalid_input, max_length_exceeded, scan_budget_exceeded,
    /// invalid_model_output, deadline_exceeded or unavailable.
    pub error: String,
    /// A fixed word; never request data.
    pub reason: String,
    pub message: String,
    pub limit: Option<u64>,
}

/// Each named request's response body; a failed one carries its error body and `status`.
#[derive(Serialize, ToSchema)]
pub struct SystemOneBatchResponseDoc {
    #[schema(value_type = HashMap<String, Object>)]
    pub responses: HashMap<String, Value>,
}
