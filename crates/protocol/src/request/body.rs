//! A decision body decoded: the single and batch forms, options, roles and assets, checked
//! against the limits, each question read in place.

use super::checked::{
    DecisionBody, DecisionRequest, Options, Question, QuestionSlot, Role, Roles, Schema, Window,
};
use super::question::parse_question;
use super::wire::{DecisionRequestWire, EntryWire, OptionsWire, WindowWire};
use crate::assets::{self, Asset, AssetKind, Assets, Clip, Parts, Picture};
use crate::error::{reason, ProtocolError, QuestionErrorKind, QuestionFailure};
use crate::wire::decode_at;
use serde_json::{Map, Value};

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
