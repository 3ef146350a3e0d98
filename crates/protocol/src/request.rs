//! Strict decoding of decision requests from JSON values.
//!
//! Request-level problems (a body that is not a request, an unknown member, a removed form) are
//! a [`ProtocolError`]; question-level problems become a [`QuestionFailure`] kept beside the
//! question's id, so the other questions are still answered.

use serde::de::IgnoredAny;
use serde::{Deserialize, Deserializer};
use serde_json::{Map, Value};
use utoipa::openapi::schema::{ArrayBuilder, OneOfBuilder, Schema as OpenApiSchema, Type};
use utoipa::openapi::{ObjectBuilder, RefOr};
use utoipa::{PartialSchema, ToSchema};

use crate::assets::{self, Asset, AssetDoc, AssetKind, Assets, Clip, Parts, Picture};
use crate::error::{reason, ProtocolError, QuestionErrorKind, QuestionFailure};
use crate::text::render;
use crate::wire::{decode_at, decode_question};
use crate::{MAX_LEVELS, MAX_OPTIONS, PII_PRESET};

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
    fn legacy(self) -> bool {
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
    fn fields(self, legacy: bool) -> &'static [&'static str] {
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

/// Decode a request body (already parsed as JSON) in `schema`.
pub fn parse_decision_body(value: &Value, schema: Schema) -> Result<DecisionBody, ProtocolError> {
    parse_decision_body_with(value, schema, &Parts::new())
}

/// Decode a request body whose assets may claim the multipart `parts` of its body.
pub fn parse_decision_body_with(
    value: &Value,
    schema: Schema,
    parts: &Parts,
) -> Result<DecisionBody, ProtocolError> {
    let obj = value
        .as_object()
        .ok_or_else(|| ProtocolError::schema(&[], "the request body must be a JSON object"))?;
    if schema == Schema::V5 {
        // Removed forms are named as such, before any other member is read.
        for (form, replacement) in [
            ("images", "assets of type image"),
            ("videos", "assets of type video"),
            ("states", "POST /v1/systemone/batch"),
        ] {
            if obj.contains_key(form) {
                return Err(removed(form, replacement));
            }
        }
        if obj
            .get("options")
            .and_then(Value::as_object)
            .is_some_and(|o| o.contains_key("long_context"))
        {
            return Err(removed(
                "options.long_context",
                "the request header TypeSafe-Danger-Zone-Long-Context: true",
            ));
        }
    }
    let w: DecisionRequestWire = decode_at(value, &[])?;
    let options = options(w.options, schema)?;
    let assets = assets::parse_assets(obj.get("assets"), parts)?;
    let mut used = vec![0usize; assets.len()];
    let top = EntryWire {
        state: w.state,
        questions: w.questions,
        roles: w.roles,
        images: w.images,
        videos: w.videos,
    };
    let body = parse_requests(top, obj, schema, w.model, options, &assets, &mut used)?;
    if let Some(i) = used.iter().position(|n| *n == 0) {
        return Err(ProtocolError::invalid(format!(
            "asset {:?} is used nowhere: every asset must be referenced in the state, a question's instructions or its options",
            assets[i].reference
        ))
        .with_reason(reason::ASSET_UNREFERENCED));
    }
    Ok(body)
}

/// One request (`top`, read from the body `obj`), or the batch in `states` (each entry without
/// `roles` takes the top's).
fn parse_requests(
    top: EntryWire,
    obj: &Map<String, Value>,
    schema: Schema,
    model: Option<String>,
    options: Options,
    assets: &Assets,
    used: &mut [usize],
) -> Result<DecisionBody, ProtocolError> {
    if let Some(states) = obj.get("states").filter(|s| !s.is_null()) {
        for (member, given) in [
            ("state", top.state.is_some()),
            ("questions", top.questions.is_some()),
            ("images", top.images.is_some()),
            ("videos", top.videos.is_some()),
        ] {
            if given {
                return Err(ProtocolError::invalid(format!(
                    "a batch (states) has no top-level {member}: send each entry's {member} inside it"
                ))
                .with_reason(reason::FORMS_MIXED));
            }
        }
        let states = states.as_object().ok_or_else(|| {
            ProtocolError::schema(&["states"], "states must be an object of named requests")
        })?;
        if states.is_empty() {
            return Err(ProtocolError::schema(
                &["states"],
                "states must hold at least one entry",
            ));
        }
        crate::limits::check_counts(states.len(), 0, 0, 0)?;
        let mut entries = Vec::with_capacity(states.len());
        let mut refusals = Vec::new();
        for (name, entry) in states {
            let raw = entry.as_object().ok_or_else(|| {
                ProtocolError::schema(
                    &["states", name],
                    format!("states.{name} must be an object"),
                )
            })?;
            let mut e: EntryWire = decode_at(entry, &["states", name])?;
            if e.roles.is_none() {
                e.roles = top.roles.clone();
            }
            let (mut req, refused) = parse_single(e, raw, schema, &["states", name], assets, used)?;
            if let Some(e) = refused {
                refusals.push(e);
            }
            req.model = model.clone();
            req.options = options.clone();
            entries.push((name.clone(), req));
        }
        // A batch every entry of which is refused is answered with the first refusal.
        if refusals.len() == entries.len() {
            if let Some(first) = refusals.into_iter().next() {
                return Err(first);
            }
        }
        let sum = |f: fn(&DecisionRequest) -> usize| entries.iter().map(|(_, r)| f(r)).sum();
        crate::limits::check_counts(
            entries.len(),
            sum(|r| r.questions.len()),
            sum(DecisionRequest::all_images),
            sum(|r| r.videos.len()),
        )?;
        return Ok(DecisionBody::Batch {
            model,
            options,
            entries,
        });
    }
    let (mut req, _) = parse_single(top, obj, schema, &[], assets, used)?;
    crate::limits::check_counts(1, req.questions.len(), req.all_images(), req.videos.len())?;
    req.model = model;
    req.options = options;
    Ok(DecisionBody::Single(req))
}

fn removed(form: &str, replacement: &str) -> ProtocolError {
    ProtocolError::invalid(format!(
        "{form} is a removed form under vllm-sr/5.0: use {replacement}"
    ))
    .with_reason(reason::REMOVED_FORM)
}

/// The options a body in `schema` takes (`window` in the internal form only, `long_context`
/// not in vllm-sr/5.0, where it is a removed form).
fn options(w: Option<OptionsWire>, schema: Schema) -> Result<Options, ProtocolError> {
    let Some(w) = w else {
        return Ok(Options::default());
    };
    let allowed: &[&str] = match schema {
        Schema::Internal => &[
            "deadline_ms",
            "return_meta",
            "max_tokens",
            "long_context",
            "window",
        ],
        _ if schema.legacy() => &["deadline_ms", "return_meta", "max_tokens", "long_context"],
        _ => &["deadline_ms", "return_meta", "max_tokens"],
    };
    if w.window.is_some() && schema != Schema::Internal {
        return Err(ProtocolError::invalid(format!(
            "unknown member \"window\" in options; allowed: {}",
            allowed.join(", ")
        ))
        .with_reason(reason::UNKNOWN_MEMBER));
    }
    let window = match w.window.filter(|w| !w.is_null()) {
        None => None,
        Some(v) => match decode_at::<WindowWire>(&v, &["options", "window"]) {
            Ok(WindowWire {
                tokens,
                overlap: None,
            }) if tokens > 0 => Some(Window {
                tokens,
                overlap: None,
            }),
            Ok(WindowWire {
                tokens,
                overlap: Some(overlap),
            }) if overlap < tokens => Some(Window {
                tokens,
                overlap: Some(overlap),
            }),
            _ => {
                return Err(ProtocolError::schema(
                    &["options", "window"],
                    "options.window is {tokens, overlap}: integers, overlap (optional) less than tokens",
                ))
            }
        },
    };
    Ok(Options {
        deadline_ms: w.deadline_ms,
        return_meta: w.return_meta.unwrap_or(false),
        max_tokens: w.max_tokens,
        long_context: w.long_context.unwrap_or(false),
        window,
    })
}

fn parse_roles(value: Option<&Value>) -> Result<Roles, ProtocolError> {
    match value {
        None => Ok(Roles::Absent),
        Some(Value::Null) => Ok(Roles::Null),
        Some(Value::Object(map)) => {
            let mut roles = Vec::with_capacity(map.len());
            for (k, v) in map {
                let role = match v.as_str() {
                    Some("user") => Role::User,
                    Some("context") => Role::Context,
                    Some("answer") => Role::Answer,
                    _ => {
                        return Err(ProtocolError::schema(
                            &["roles", k],
                            format!("roles.{k} must be user, context or answer"),
                        ))
                    }
                };
                roles.push((k.clone(), role));
            }
            Ok(Roles::Map(roles))
        }
        Some(_) => Err(ProtocolError::schema(
            &["roles"],
            "roles must be an object or null",
        )),
    }
}

/// One request: `e`, decoded from `raw`, where its data URLs are read in place.
fn parse_single(
    e: EntryWire,
    raw: &Map<String, Value>,
    schema: Schema,
    at: &[&str],
    assets: &Assets,
    used: &mut [usize],
) -> Result<(DecisionRequest, Option<ProtocolError>), ProtocolError> {
    fn join<'a>(at: &[&'a str], k: &'a str) -> Vec<&'a str> {
        at.iter().copied().chain(std::iter::once(k)).collect()
    }
    let loc = |k: &'static str| join(at, k);
    let state = match e.state {
        None => return Err(ProtocolError::schema(&loc("state"), "state is required")),
        Some(v @ (Value::String(_) | Value::Object(_) | Value::Array(_))) => v,
        Some(_) => {
            return Err(ProtocolError::schema(
                &loc("state"),
                "state must be a string, an object or an array",
            ))
        }
    };
    crate::limits::check_state(&state, &loc("state").join("."))?;
    let questions = match &e.questions {
        None => {
            return Err(ProtocolError::schema(
                &loc("questions"),
                "questions is required",
            ))
        }
        Some(Value::Object(q)) => q,
        Some(_) => {
            return Err(ProtocolError::schema(
                &loc("questions"),
                "questions must be an object of question ids to questions",
            ))
        }
    };
    if questions.is_empty() {
        return Err(ProtocolError::schema(
            &loc("questions"),
            "questions must hold at least one question",
        ));
    }
    if questions.len() > crate::MAX_QUESTIONS {
        return Err(crate::precount::too_many_questions(questions.len()));
    }
    let roles = parse_roles(e.roles.as_ref())?;
    let mut slots = Vec::with_capacity(questions.len());
    for (id, q) in questions {
        if schema == Schema::V5 {
            if let Some(form) = q.as_object().and_then(|o| {
                ["choices", "levels", "labels"]
                    .into_iter()
                    .find(|f| o.contains_key(*f))
            }) {
                return Err(removed(&format!("questions.{id}.{form}"), "criteria"));
            }
        }
        let type_word = q
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let mut uses = Vec::new();
        if let Some(o) = q.as_object() {
            for field in ["instructions", "criteria", "choices", "levels", "labels"] {
                if let Some(v) = o.get(field) {
                    assets::list_uses(v, assets, &mut uses);
                }
            }
        }
        let (images, clips) = add_uses(used, &uses, assets);
        let videos = clips.len();
        let question = if id.is_empty() {
            Err(QuestionFailure::malformed(
                "a question id must be a non-empty string",
            ))
        } else {
            parse_question(q, schema).and_then(|q| check_over(q, &state))
        };
        slots.push(QuestionSlot {
            id: id.clone(),
            type_word,
            images,
            videos,
            question,
        });
    }
    let list = |k: &'static str| -> Result<&[Value], ProtocolError> {
        match raw.get(k) {
            None | Some(Value::Null) => Ok(&[]),
            Some(Value::Array(a)) => Ok(a),
            Some(_) => Err(ProtocolError::schema(
                &loc(k),
                format!("{k} must be an array"),
            )),
        }
    };
    // The state's asset uses are counted before its own media are read, so that a refused
    // entry of a batch still counts the assets it names.
    let mut uses = Vec::new();
    assets::list_uses(&state, assets, &mut uses);
    let (in_state, videos_used) = add_uses(used, &uses, assets);
    let media = || -> Result<(Vec<Picture>, Vec<Clip>), ProtocolError> {
        let mut images = list("images")?
            .iter()
            .enumerate()
            .map(|(i, v)| assets::read_data_url(v, &format!("images[{i}]")))
            .collect::<Result<Vec<_>, _>>()?;
        images.extend(in_state);
        let mut videos = list("videos")?
            .iter()
            .enumerate()
            .map(|(i, v)| assets::read_video_data_url(v, &format!("videos[{i}]")))
            .collect::<Result<Vec<_>, _>>()?;
        videos.extend(videos_used);
        Ok((images, videos))
    };
    let (images, videos, refused) = match media() {
        Ok((images, videos)) => (images, videos, None),
        // An entry of a batch whose media are refused fails each of its own questions with
        // the refusal (worker-api.txt); the other entries are answered.
        Err(e) if !at.is_empty() => {
            for slot in &mut slots {
                slot.question = Err(QuestionFailure::new(
                    QuestionErrorKind::InvalidInput,
                    reason::INPUT_MALFORMED,
                    e.message.clone(),
                ));
            }
            (Vec::new(), Vec::new(), Some(e))
        }
        Err(e) => return Err(e),
    };
    Ok((
        DecisionRequest {
            model: None,
            state,
            roles,
            questions: slots,
            options: Options::default(),
            images,
            videos,
        },
        refused,
    ))
}

/// `over` must name keys of an object state.
fn check_over(q: Question, state: &Value) -> Result<Question, QuestionFailure> {
    let Some(keys) = &q.over else { return Ok(q) };
    let Some(map) = state.as_object() else {
        return Err(QuestionFailure::malformed(
            "over names state keys, but the state is not an object",
        ));
    };
    if let Some(k) = keys.iter().find(|k| !map.contains_key(k.as_str())) {
        return Err(QuestionFailure::malformed(format!(
            "over names {k:?}, which is not a key of the state"
        )));
    }
    Ok(q)
}

/// Count one place's asset uses (indices into `assets`, in order) in the request's; return
/// the images and the videos they place, in order.
fn add_uses(used: &mut [usize], uses: &[usize], assets: &[Asset]) -> (Vec<Picture>, Vec<Clip>) {
    let mut images = Vec::new();
    let mut videos = Vec::new();
    for &i in uses {
        if let Some(n) = used.get_mut(i) {
            *n += 1;
        }
        match assets.get(i).map(|a| (a.kind, &a.bytes)) {
            Some((AssetKind::Image(info), bytes)) => images.push(Picture {
                info,
                bytes: bytes.clone(),
            }),
            Some((AssetKind::Video(facts), bytes)) => videos.push(Clip {
                facts,
                bytes: bytes.clone(),
            }),
            None => {}
        }
    }
    (images, videos)
}

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorCode;
    use serde_json::json;

    /// The byte-level count a large body is refused by agrees with the full parse.
    #[test]
    fn the_count_agrees_with_the_full_parse() {
        let mut questions = serde_json::Map::new();
        for i in 0..=crate::MAX_QUESTIONS {
            questions.insert(
                format!("q{i}"),
                serde_json::json!({"type": "noul", "instructions": "?"}),
            );
        }
        let body = serde_json::json!({"state": "s", "questions": questions});
        let bytes = serde_json::to_vec(&body).unwrap();
        assert_eq!(
            crate::precount::top_level_questions(&bytes),
            Some(crate::MAX_QUESTIONS + 1)
        );
        let e = parse_decision_body(&body, crate::Schema::V5).unwrap_err();
        assert_eq!(
            e,
            crate::precount::too_many_questions(crate::MAX_QUESTIONS + 1)
        );
    }

    #[test]
    fn a_pii_preset_is_a_span_question_and_labels_may_be_a_list_of_names() {
        let q = parse_question(&json!({"preset": "pii"}), Schema::V5).expect("valid");
        assert_eq!(q.kind.type_name(), "span");
        assert!(matches!(&q.kind, QuestionKind::Span { labels, .. } if labels.is_empty()));
        assert_eq!(q.preset.as_deref(), Some("pii"));
        let q = parse_question(
            &json!({"type": "span", "criteria": ["PERSON", "EMAIL_ADDRESS"]}),
            Schema::V5,
        )
        .expect("valid");
        let QuestionKind::Span { labels, .. } = &q.kind else {
            panic!("a span")
        };
        let names: Vec<&str> = labels.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(names, ["PERSON", "EMAIL_ADDRESS"]);
        // Without a preset a span needs labels; a name twice, or a type from another preset,
        // is refused.
        for bad in [
            json!({"type": "span"}),
            json!({"type": "span", "criteria": ["A", "A"]}),
            json!({"preset": "sentiment"}),
            json!({"type": "span", "criteria": [""]}),
        ] {
            assert!(parse_question(&bad, Schema::V5).is_err(), "{bad}");
        }
    }

    fn single(v: Value, schema: Schema) -> DecisionRequest {
        match parse_decision_body(&v, schema).expect("valid") {
            DecisionBody::Single(r) => r,
            DecisionBody::Batch { .. } => panic!("not a batch"),
        }
    }

    #[test]
    fn standard_request_decodes_with_every_state_form() {
        for state in [json!("text"), json!({"a": "b"}), json!(["x", "y"])] {
            let r = single(
                json!({"model": "m", "state": state, "questions": {"q": {"type": "noul", "instructions": "?"}}}),
                Schema::V5,
            );
            assert_eq!(r.questions.len(), 1);
            assert!(r.questions[0].question.is_ok());
        }
    }

    #[test]
    fn unknown_top_level_member_is_refused_naming_it() {
        let e = parse_decision_body(
            &json!({"state": "s", "questions": {"q": {"type": "noul", "instructions": "?"}}, "seed": 7}),
            Schema::V5,
        )
        .unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidRequest);
        assert!(e.message.contains("\"seed\""), "{}", e.message);
        assert!(!e.validation);
    }

    #[test]
    fn removed_forms_name_their_replacement_under_v5_only() {
        let q = json!({"type": "choice", "choices": [{"key": "a"}, {"key": "b"}]});
        let body = json!({"state": "s", "questions": {"q": q}});
        let e = parse_decision_body(&body, Schema::V5).unwrap_err();
        assert!(e.message.contains("criteria"));
        assert_eq!(e.reason, Some(reason::REMOVED_FORM));
        let r = single(body, Schema::V4);
        assert!(r.questions[0].question.is_ok());
        for (k, v, word) in [
            ("images", json!([]), "assets"),
            ("states", json!({}), "batch"),
        ] {
            let mut body =
                json!({"state": "s", "questions": {"q": {"type": "noul", "instructions": "?"}}});
            body[k] = v;
            let e = parse_decision_body(&body, Schema::V5).unwrap_err();
            assert!(e.message.contains(word), "{}", e.message);
        }
        let e = parse_decision_body(
            &json!({"state": "s", "questions": {"q": {"type": "noul", "instructions": "?"}}, "options": {"long_context": true}}),
            Schema::V5,
        )
        .unwrap_err();
        assert!(e.message.contains("TypeSafe-Danger-Zone-Long-Context"));
    }

    #[test]
    fn questions_fail_in_place_with_fixed_reasons() {
        let r = single(
            json!({"state": "s", "questions": {
                "ok": {"type": "noul", "instructions": "?"},
                "bad": {"type": "set", "instructions": "?", "criteria": {"a": null}, "colour": 1},
                "none": {"type": "boolean"},
                "one": {"type": "choice", "criteria": {"a": null}},
                "map": {"type": "score", "criteria": {"0": "a", "1": "b"}},
            }}),
            Schema::V5,
        );
        assert!(r.questions[0].question.is_ok());
        let bad = r.questions[1].question.as_ref().unwrap_err();
        assert_eq!(bad.reason, reason::QUESTION_MALFORMED);
        assert_eq!(bad.message, "set questions do not take ['colour']");
        for slot in &r.questions[2..] {
            assert!(slot.question.is_err(), "{}", slot.id);
        }
    }

    #[test]
    fn noul_criteria_may_be_absent_null_or_one_sided() {
        for crit in [
            json!(null),
            json!({"true": "yes"}),
            json!({"false": "no"}),
            json!({"false": "n", "true": "y"}),
        ] {
            let q = parse_question(
                &json!({"type": "noul", "instructions": "?", "criteria": crit}),
                Schema::V5,
            );
            assert!(q.is_ok(), "{crit}");
        }
        let q = parse_question(
            &json!({"type": "noul", "criteria": {"maybe": "x"}}),
            Schema::V5,
        );
        assert!(q.is_err());
    }

    #[test]
    fn option_names_round_trip_and_descriptions_render() {
        let q = parse_question(
            &json!({"type": "choice", "criteria": {"환불 요청": {"owns": ["a"]}, "🙂 기타": null}}),
            Schema::V5,
        )
        .unwrap();
        match q.kind {
            QuestionKind::Choice { options } => {
                assert_eq!(options[0].0, "환불 요청");
                assert_eq!(options[0].1.as_deref(), Some("owns:\n  - a"));
                assert_eq!(options[1], ("🙂 기타".to_string(), None));
            }
            _ => panic!("choice"),
        }
    }

    #[test]
    fn batch_form_and_mixing() {
        let body = json!({"model": "m", "states": {
            "a": {"state": "x", "questions": {"q": {"type": "noul", "instructions": "?"}}},
            "b": {"state": "y", "questions": {"q": {"type": "noul", "instructions": "?"}}}}});
        match parse_decision_body(&body, Schema::Internal).unwrap() {
            DecisionBody::Batch { entries, model, .. } => {
                assert_eq!(entries.len(), 2);
                assert_eq!(model.as_deref(), Some("m"));
            }
            _ => panic!("batch"),
        }
        let mut mixed = body.clone();
        mixed["state"] = json!("z");
        let e = parse_decision_body(&mixed, Schema::Internal).unwrap_err();
        assert_eq!(e.reason, Some(reason::FORMS_MIXED));
    }

    #[test]
    fn a_refused_entry_of_a_batch_fails_only_its_own_questions() {
        let entry = |image: &str| {
            json!({"state": "x", "images": [image],
                   "questions": {"q": {"type": "noul", "instructions": "?"}, "r": {"type": "noul", "instructions": "?"}}})
        };
        let link = "https://example.com/a.png";
        let body = json!({"states": {
            "bad": entry(link),
            "good": {"state": "y", "questions": {"q": {"type": "noul", "instructions": "?"}}}}});
        match parse_decision_body(&body, Schema::Internal).unwrap() {
            DecisionBody::Batch { entries, .. } => {
                let bad = &entries[0].1;
                assert_eq!(bad.questions.len(), 2);
                for slot in &bad.questions {
                    let f = slot.question.as_ref().unwrap_err();
                    assert_eq!(f.kind, QuestionErrorKind::InvalidInput);
                    assert_eq!(f.reason, reason::INPUT_MALFORMED);
                    assert!(f.message.contains("images[0]"), "{}", f.message);
                }
                assert!(entries[1].1.questions[0].question.is_ok());
            }
            _ => panic!("batch"),
        }
        // Every entry refused: the first refusal answers the body.
        let all = json!({"states": {"a": entry(link), "b": entry(link)}});
        let e = parse_decision_body(&all, Schema::Internal).unwrap_err();
        assert_eq!(e.reason, Some(reason::ENCODING_MALFORMED));
        // A single request is refused whole, as before.
        let e = parse_decision_body(&entry(link), Schema::Internal).unwrap_err();
        assert_eq!(e.reason, Some(reason::ENCODING_MALFORMED));
    }

    /// `options.window` is an internal option: endpoints that take a window set it; a V5 body
    /// cannot. Its overlap may be left to the engine.
    #[test]
    fn a_window_is_internal_and_its_overlap_optional() {
        let with = |window: Value| {
            json!({"state": "x", "options": {"window": window},
                "questions": {"q": {"type": "noul", "instructions": "?"}}})
        };
        let window =
            |w: Value, schema| parse_decision_body(&with(w), schema).map(|b| b.options().window);
        assert_eq!(
            window(json!({"tokens": 64}), Schema::Internal),
            Ok(Some(Window {
                tokens: 64,
                overlap: None
            }))
        );
        assert_eq!(
            window(json!({"tokens": 64, "overlap": 8}), Schema::Internal),
            Ok(Some(Window {
                tokens: 64,
                overlap: Some(8)
            }))
        );
        for bad in [
            json!({"tokens": 64, "overlap": 64}),
            json!({"tokens": 0}),
            json!({"overlap": 8}),
            json!({"tokens": 64, "stride": 8}),
        ] {
            assert!(window(bad.clone(), Schema::Internal).is_err(), "{bad}");
        }
        assert!(window(json!({"tokens": 64}), Schema::V5).is_err());
    }

    #[test]
    fn schema_errors_are_validation_failures() {
        for body in [
            json!([]),
            json!({"questions": {}}),
            json!({"state": "s"}),
            json!({"state": "s", "questions": {}}),
            json!({"state": null, "questions": {"q": {"type": "noul", "instructions": "?"}}}),
        ] {
            let e = parse_decision_body(&body, Schema::V5).unwrap_err();
            assert!(e.validation, "{body}");
            assert_eq!(e.loc[0], "body");
        }
    }
}
