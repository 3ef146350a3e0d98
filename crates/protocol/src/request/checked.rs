//! The request as the engine reads it, once checked: its state, roles, options and
//! questions, each question either asked or failed in place.

use crate::assets::{self, Clip, Picture};
use crate::error::{ProtocolError, QuestionFailure};
use serde::Deserialize;
use serde_json::Value;
use utoipa::ToSchema;

/// Which System One schema a body is read in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Schema {
    /// vllm-sr/5.0: the standard plus extensions; unknown members and removed forms refused.
    V5,
    /// vllm-sr/4.0: the 4.0 forms as they are, and every 5.0 form.
    V4,
    /// The runtime's internal form (`/v1/decisions`, `/v1/bundle`): the 4.0 forms, batches in
    /// `states`, and roles, whatever the process's schema.
    Internal,
}

impl Schema {
    pub fn parse(s: &str) -> Option<Schema> {
        match s {
            "vllm-sr/5.0" | "5.0" => Some(Schema::V5),
            "vllm-sr/4.0" | "4.0" => Some(Schema::V4),
            _ => None,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            Schema::V5 => "vllm-sr/5.0",
            Schema::V4 => "vllm-sr/4.0",
            Schema::Internal => "internal",
        }
    }
    pub(super) fn legacy(self) -> bool {
        !matches!(self, Schema::V5)
    }
}

/// `options` of a request.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Options {
    pub deadline_ms: Option<u64>,
    pub return_meta: bool,
    pub max_tokens: Option<u64>,
    pub long_context: bool,
    /// The windows a question with `overflow: window` reads (internal requests only: the
    /// endpoints that take `options.window`, such as `/v1/classify`, set it).
    pub window: Option<Window>,
}

/// Windows of `tokens` tokens of state, each overlapping the last by `overlap` (by default,
/// an eighth of the window the question reads).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    pub tokens: u64,
    pub overlap: Option<u64>,
}

/// Which part of an object state plays which role.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    User,
    Context,
    Answer,
}

/// `roles` of a request: absent (keys name the parts), null (no part has a role), or a map.
#[derive(Debug, Clone, Default, PartialEq)]
pub enum Roles {
    #[default]
    Absent,
    Null,
    Map(Vec<(String, Role)>),
}

impl Roles {
    /// The role a `roles` map gives state key `key` (none when `roles` is absent or null).
    pub fn given(&self, key: &str) -> Option<Role> {
        match self {
            Roles::Map(roles) => roles.iter().find(|(k, _)| k == key).map(|(_, r)| *r),
            Roles::Absent | Roles::Null => None,
        }
    }
}

/// The options of a question, by type.
#[derive(Debug, Clone, PartialEq)]
pub enum QuestionKind {
    /// Option keys with their rendered descriptions, in request order.
    Choice {
        options: Vec<(String, Option<String>)>,
    },
    /// Descriptions of the false and true outcomes, when given.
    Noul {
        when_false: Option<String>,
        when_true: Option<String>,
    },
    /// Level descriptions, rendered, in order.
    Score { levels: Vec<String> },
    Set {
        labels: Vec<(String, Option<String>)>,
        threshold: Option<f64>,
    },
    Span {
        labels: Vec<(String, Option<String>)>,
        threshold: Option<f64>,
    },
    /// `at`: a moment (seconds) of the state's only video, else the state's image.
    Box { at: Option<f64> },
    /// `rate`: moments per second of the state's only video (1 or 2).
    Track { rate: u32 },
}

impl QuestionKind {
    pub fn type_name(&self) -> &'static str {
        match self {
            QuestionKind::Choice { .. } => "choice",
            QuestionKind::Noul { .. } => "noul",
            QuestionKind::Score { .. } => "score",
            QuestionKind::Set { .. } => "set",
            QuestionKind::Span { .. } => "span",
            QuestionKind::Box { .. } => "box",
            QuestionKind::Track { .. } => "track",
        }
    }

    /// Bytes of the text the question carries (option or label names and descriptions,
    /// level descriptions): every prompt that asks it holds at least these.
    pub fn text_bytes(&self) -> usize {
        let pairs = |v: &[(String, Option<String>)]| -> usize {
            v.iter()
                .map(|(k, d)| k.len() + d.as_ref().map_or(0, String::len))
                .sum()
        };
        match self {
            QuestionKind::Choice { options } => pairs(options),
            QuestionKind::Set { labels, .. } | QuestionKind::Span { labels, .. } => pairs(labels),
            QuestionKind::Noul {
                when_false,
                when_true,
            } => [when_false, when_true]
                .iter()
                .map(|d| d.as_ref().map_or(0, String::len))
                .sum(),
            QuestionKind::Score { levels } => levels.iter().map(String::len).sum(),
            QuestionKind::Box { .. } | QuestionKind::Track { .. } => 0,
        }
    }
}

/// How a question reads a state longer than its budget.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Overflow {
    /// Fail the question with max_length_exceeded (the default).
    #[default]
    Reject,
    /// Read the first `limits.truncate_tokens`.
    Truncate,
    /// Read it whole in windows, up to the scan budget.
    Window,
}

/// A valid question.
#[derive(Debug, Clone, PartialEq)]
pub struct Question {
    pub kind: QuestionKind,
    /// Rendered instructions, when given.
    pub instructions: Option<String>,
    pub preset: Option<String>,
    /// The state keys the question reads (`over`), when not the whole state.
    pub over: Option<Vec<String>>,
    /// How a state longer than the question's budget is read.
    pub overflow: Overflow,
    pub require_full_input: bool,
    /// Whether the package's decision adapter answers (`None`: the package's default).
    pub decision_adapter: Option<bool>,
}

/// What an option (or a set label) means: its description, or its key where it has none or a
/// blank one. Every reading of an option by its meaning (the readout's names, the detector's
/// kinds, a "when" question's spans) goes through here, so a renamed key changes none of them.
pub fn meaning<'a>(key: &'a str, description: &'a Option<String>) -> &'a str {
    match description.as_deref().map(str::trim) {
        Some(d) if !d.is_empty() => d,
        _ => key.trim(),
    }
}

/// One question slot: its id, its declared type word (if any) and the question or its failure.
#[derive(Debug, Clone, PartialEq)]
pub struct QuestionSlot {
    pub id: String,
    pub type_word: String,
    /// Images its instructions or options reference (asset uses), in the order they occur.
    pub images: Vec<Picture>,
    /// Videos its instructions or options reference.
    pub videos: usize,
    pub question: Result<Question, QuestionFailure>,
}

/// One standard request.
#[derive(Debug, Clone, PartialEq)]
pub struct DecisionRequest {
    pub model: Option<String>,
    pub state: Value,
    pub roles: Roles,
    pub questions: Vec<QuestionSlot>,
    pub options: Options,
    /// Images the state holds: 4.0 `images` data URLs, then image asset uses in the state's
    /// strings in the order they occur (headers checked, pixels not decoded).
    pub images: Vec<Picture>,
    /// Videos the state holds: 4.0 `videos` data URLs, then video asset uses in the state's
    /// strings in the order they occur (containers read, frames not decoded).
    pub videos: Vec<Clip>,
}

/// What a box or track question of a request reads.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum MediaTarget<'a> {
    Picture(&'a Picture),
    Video(&'a Clip),
}

impl DecisionRequest {
    /// Every image the request reads: the state's and each question's own.
    pub fn all_images(&self) -> usize {
        self.images.len() + self.questions.iter().map(|q| q.images.len()).sum::<usize>()
    }

    /// What a question of this request (`slot`, asking `kind`) locates its target in: a box
    /// question the picture its instructions reference, else the state's only one; a box
    /// question with `at` and a track question the state's only video. `None` for the other
    /// question types; the failure (`box_needs_image`, `box_target_ambiguous`) when the
    /// request does not say which.
    pub fn media_target<'a>(
        &'a self,
        slot: &'a QuestionSlot,
        kind: &QuestionKind,
    ) -> Option<Result<MediaTarget<'a>, QuestionFailure>> {
        Some(match kind {
            QuestionKind::Box { at: None } => {
                assets::box_target(slot.images.len(), self.images.len()).and_then(|own| {
                    let picture = if own {
                        slot.images.first()
                    } else {
                        self.images.first()
                    };
                    picture.map(MediaTarget::Picture).ok_or_else(|| {
                        QuestionFailure::malformed("the box question's picture is missing")
                    })
                })
            }
            QuestionKind::Box { .. } | QuestionKind::Track { .. } => {
                assets::video_target(self.videos.len()).and_then(|()| {
                    self.videos.first().map(MediaTarget::Video).ok_or_else(|| {
                        QuestionFailure::malformed("the question's video is missing")
                    })
                })
            }
            _ => return None,
        })
    }
}

/// A decoded body: one request, or a batch of named requests (`states`).
#[derive(Debug, Clone, PartialEq)]
pub enum DecisionBody {
    Single(DecisionRequest),
    Batch {
        model: Option<String>,
        options: Options,
        entries: Vec<(String, DecisionRequest)>,
    },
}

impl DecisionBody {
    pub fn model(&self) -> Option<&str> {
        match self {
            DecisionBody::Single(r) => r.model.as_deref(),
            DecisionBody::Batch { model, .. } => model.as_deref(),
        }
    }
    pub fn options(&self) -> &Options {
        match self {
            DecisionBody::Single(r) => &r.options,
            DecisionBody::Batch { options, .. } => options,
        }
    }
}

impl Question {
    /// A question the runtime asks itself (the recipes of rerank, classify and SIE), built
    /// from its parts rather than read from a body.
    pub fn asked(
        kind: QuestionKind,
        instructions: Option<&str>,
        preset: Option<&str>,
        overflow: Overflow,
    ) -> Question {
        Question {
            kind,
            instructions: instructions
                .filter(|i| !i.trim().is_empty())
                .map(String::from),
            preset: preset.map(String::from),
            over: None,
            overflow,
            require_full_input: false,
            decision_adapter: None,
        }
    }
}

/// A question the runtime asks, by its id (or the reason it cannot be asked).
pub type Asked = (String, Result<Question, QuestionFailure>);

impl DecisionRequest {
    /// One state with its questions, asked by the runtime itself.
    pub fn asked(state: Value, roles: Roles, questions: Vec<Asked>) -> DecisionRequest {
        DecisionRequest {
            model: None,
            state,
            roles,
            questions: questions
                .into_iter()
                .map(|(id, question)| QuestionSlot {
                    id,
                    type_word: question
                        .as_ref()
                        .map_or("", |q| q.kind.type_name())
                        .to_string(),
                    images: Vec::new(),
                    videos: 0,
                    question,
                })
                .collect(),
            options: Options::default(),
            images: Vec::new(),
            videos: Vec::new(),
        }
    }
}

impl DecisionBody {
    /// A batch of `entries` named by their index, with `options`: the states' sizes and the
    /// batch's counts checked as a body's are.
    pub fn batch_of(
        entries: Vec<DecisionRequest>,
        options: Options,
    ) -> Result<Self, ProtocolError> {
        crate::limits::check_counts(entries.len(), 0, 0, 0)?;
        for (i, r) in entries.iter().enumerate() {
            crate::limits::check_state(&r.state, &format!("states.{i}.state"))?;
        }
        crate::limits::check_counts(
            entries.len(),
            entries.iter().map(|r| r.questions.len()).sum(),
            0,
            0,
        )?;
        Ok(DecisionBody::Batch {
            model: None,
            entries: entries
                .into_iter()
                .enumerate()
                .map(|(i, mut r)| {
                    r.options = options.clone();
                    (i.to_string(), r)
                })
                .collect(),
            options,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::meaning;

    #[test]
    fn an_option_means_its_description_else_its_key() {
        assert_eq!(meaning("o1", &Some(" a dog ".into())), "a dog");
        assert_eq!(meaning(" dog ", &None), "dog");
        assert_eq!(meaning("dog", &Some("  ".into())), "dog");
    }
}
