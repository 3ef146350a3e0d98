//! What `/v1/models` and SIE's `/v1/models/{model}` say about a served model: its card
//! (kind, engine, limits, question types), the System One and SIE listing fields, and whether
//! a forward has stalled (read by `/health/live` and `/livez`).

use engine::{EncoderModel, ModelKind, ModelState};
use serde_json::{json, Map, Value};

use crate::AppState;

fn card(state: &AppState, slot: &engine::Slot) -> Value {
    let st = slot.state();
    let mut card = json!({
        "id": slot.meta().name,
        "aliases": slot.meta().aliases,
        "modalities": ["text"],
        "state": st.word(),
        "revision": slot.meta().revision,
        "sha256": slot.meta().sha256,
    });
    if let ModelState::Failed(why) = &st {
        card["error"] = json!(why);
    }
    card["kind"] = json!(slot.kind().word());
    if let Some(e) = slot.encoder() {
        let info = e.info();
        card["engine"] = json!(info.engine);
        card["device"] = json!(info.device);
        card["dtype"] = json!(info.dtype);
        card["numerics"] = json!("approximate");
        card["encoder"] = json!(info);
        card["representation"] = representation(e);
        card["engine_args"] = json!({"batching": e.config});
        card["limits"] = json!({"max_input_tokens": info.max_tokens,
            "max_request_bytes": state.config.max_request_bytes});
    }
    if let Some(m) = slot.model() {
        let info = m.info();
        card["question_types"] = json!(m.config.question_types);
        card["presets"] = json!(m.config.presets);
        // A detector reads the state's images (or a box question's own) for box questions.
        if let Some(d) = m.detector() {
            card["modalities"] = json!(["text", "image", "video"]);
            card["image_placements"] = json!(["state", "instructions"]);
            let (a, b) = engine::decision::box_calibration(d.name());
            card["detector"] = json!({"name": d.name(), "kinds": d.kinds(),
                "confidence": format!("sigmoid({a} + {b} × logit(p(kind read right) × detector score of the chosen box)), fitted on composed scenes (tools/boxset.py)")});
        }
        // The router signals a question id asks whatever its wording (system-duo-api.txt).
        if !m.config.router_questions.is_empty() {
            card["router_questions"] = json!(m.config.router_questions);
        }
        // The questions its decision adapters answer, and whether they answer a question
        // that does not say (`decision_adapter`).
        if let Some(a) = m.adapters() {
            card["decision_adapters"] = json!({"default": a.default, "questions": a.questions()});
        }
        card["usage"] = json!("state_once");
        card["attention_mode"] = json!(m.config.attention_mode);
        card["numerics"] = json!(m.numerics);
        card["engine"] = json!(info.engine);
        card["device"] = json!(info.device);
        card["dtype"] = json!(info.dtype);
        card["engine_args"] = match m.worker() {
            Some(w) => json!({
                "context_tokens": info.context_tokens,
                "threads": info.threads,
                "max_sequences": info.max_sequences,
                "scheduler": w.config(),
                "system_prompt_tokens": m.prefix_tokens(),
                "flash_attention": info.flash_attention,
                "micro_batch_tokens": info.micro_batch_tokens,
                "flash_attention_probe": info.flash_attention_probe,
                "prefix_cache_bytes": info.prefix_cache_bytes,
            }),
            // A direct model answers on the request's thread: no worker, no queue.
            None => json!({"execution": "inline", "input_tokens": info.context_tokens}),
        };
        let mut limits = serde_json::to_value(&m.limits).unwrap_or_else(|_| json!({}));
        // The decoder's own limits (state length, counts, media), the same for every decision
        // model: /api/info and the limits page show these values.
        if let (Some(l), Ok(Value::Object(r))) = (
            limits.as_object_mut(),
            serde_json::to_value(protocol::limits::request_limits()),
        ) {
            l.extend(r);
        }
        limits["max_request_bytes"] = json!(state.config.max_request_bytes);
        if m.detector().is_some() {
            limits["box_video_max_seconds"] = json!(engine::decision::BOX_VIDEO_MAX_SECONDS);
        }
        card["limits"] = limits;
    }
    card
}

/// One model's listing entry: the System One fields (`name`, `description`,
/// `release_date`, `version`, `features`, `card`) and the SIE fields (`inputs`, `outputs`,
/// `dims`, `loaded`, `state`, `max_sequence_length`, ...).
pub(crate) fn listing_entry(state: &AppState, s: &engine::Slot) -> Value {
    let features = match (s.model(), s.kind()) {
        (Some(m), _) => json!(m.config.question_types),
        (None, engine::ModelKind::Encoder) => json!(["embeddings", "rerank", "encode", "score"]),
        (None, _) => json!([]),
    };
    let mut entry = serde_json::Map::new();
    entry.insert("name".into(), json!(s.meta().name));
    entry.insert("description".into(), json!(s.meta().description));
    entry.insert("release_date".into(), json!(s.meta().release_date));
    entry.insert("version".into(), json!(protocol::EXTENSION_VERSION));
    entry.insert("features".into(), features);
    entry.insert("card".into(), card(state, s));
    entry.insert("surfaces".into(), json!(surfaces(s)));
    entry.extend(sie_fields(s));
    Value::Object(entry)
}

/// What a model serves: `decisions`, `generate` (chat and completions) or `embeddings`.
pub(crate) fn surfaces(s: &engine::Slot) -> Vec<&'static str> {
    let mut out = Vec::new();
    match s.kind() {
        engine::ModelKind::Encoder => out.push("embeddings"),
        engine::ModelKind::Decision => out.push("decisions"),
    }
    if s.text().is_some() {
        out.push("generate");
    }
    out
}

/// What a model answers on the SIE face: `encode` (the vector outputs), `score`, `extract`
/// (its tasks) and `generate`.
fn capabilities(slot: &engine::Slot) -> Value {
    let generate = slot.text().is_some();
    match slot.kind() {
        ModelKind::Encoder => {
            let (labels, per_token) = slot
                .encoder()
                .map(|e| (e.info().labels.is_some(), e.info().per_token))
                .unwrap_or((false, false));
            let vectors = !labels && !per_token;
            json!({
                "encode": if vectors { json!(["dense"]) } else { json!([]) },
                "score": vectors,
                "extract": if per_token { json!(["entities"]) } else { json!([]) },
                "generate": generate,
            })
        }
        ModelKind::Decision => json!({
            "encode": [],
            "score": true,
            "extract": ["classify", "entities"],
            "generate": generate,
        }),
    }
}

/// The SIE fields of one model's listing entry.
pub(crate) fn sie_fields(slot: &engine::Slot) -> Map<String, Value> {
    let st = slot.state();
    let mut m = Map::new();
    m.insert("inputs".into(), json!(["text"]));
    match slot.kind() {
        ModelKind::Encoder => {
            let (dims, max) = slot
                .encoder()
                .map(|e| (json!({"dense": e.info().dims}), json!(e.info().max_tokens)))
                .unwrap_or((json!({}), Value::Null));
            m.insert("outputs".into(), json!(["dense", "score"]));
            m.insert("dims".into(), dims);
            m.insert("max_sequence_length".into(), max);
        }
        ModelKind::Decision => {
            let max = slot
                .model()
                .map(|d| json!(d.limits.max_input_tokens))
                .unwrap_or(Value::Null);
            m.insert("outputs".into(), json!(["score", "classifications"]));
            m.insert("dims".into(), json!({}));
            m.insert("max_sequence_length".into(), max);
        }
    }
    m.insert("loaded".into(), json!(st == engine::ModelState::Ready));
    m.insert("state".into(), json!(st.word()));
    m.insert(
        "last_error".into(),
        match &st {
            engine::ModelState::Failed(e) => json!({"message": e}),
            _ => Value::Null,
        },
    );
    m.insert("capabilities".into(), capabilities(slot));
    let profiles: Map<String, Value> = protocol::sie::PROFILES
        .iter()
        .enumerate()
        .map(|(i, p)| (p.to_string(), json!({"is_default": i == 0})))
        .collect();
    m.insert("profiles".into(), Value::Object(profiles));
    m.insert("revision".into(), json!(slot.meta().revision));
    m
}

/// The vector space an encoder's vectors live in.
pub(crate) fn representation(m: &EncoderModel) -> Value {
    let info = m.info();
    json!({
        "model": m.meta.name,
        "revision": m.meta.revision,
        "sha256": m.meta.sha256,
        "dims": info.dims,
        "pooling": info.pooling,
        "normalized": info.normalize,
        "layer": "last",
    })
}

/// A model whose forward has run longer than --forward-timeout-seconds, and for how long.
pub(crate) fn stalled(state: &AppState) -> Option<(String, std::time::Duration)> {
    let limit = state.config.forward_timeout;
    state.registry.slots().iter().find_map(|s| {
        let running = s.model()?.worker()?.status().forward_running_for()?;
        (running > limit).then(|| (s.meta().name.clone(), running))
    })
}
