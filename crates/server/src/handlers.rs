//! Route handlers.

use std::sync::Arc;
use std::time::Instant;

use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use engine::{Decision, DecisionModel, ModelState};
use protocol::answer::DecisionResponse;
use protocol::assets::Parts;
use protocol::error::ErrorCode;
use protocol::request::{parse_decision_body_with, DecisionBody, Schema};
use protocol::schema::{
    DecisionRequestDoc, ErrorDoc, HealthDoc, ModelListDoc, SystemOneBatchDoc,
    SystemOneBatchResponseDoc,
};
use serde_json::{json, Value};

use crate::error::{ApiError, Flavor};
use crate::timing::Phases;
use crate::AppState;

const LONG_CONTEXT_HEADER: &str = "typesafe-danger-zone-long-context";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Endpoint {
    Decisions,
    SystemOne,
    SystemOneBatch,
}

impl Endpoint {
    fn path(self) -> &'static str {
        match self {
            Endpoint::Decisions => "/v1/decisions",
            Endpoint::SystemOne => "/v1/systemone",
            Endpoint::SystemOneBatch => "/v1/systemone/batch",
        }
    }
}

fn flavor(endpoint: Endpoint, schema: Schema) -> Flavor {
    match (endpoint, schema) {
        (Endpoint::Decisions, _) => Flavor::Internal,
        (_, Schema::V4) => Flavor::V4,
        _ => Flavor::V5,
    }
}

pub(crate) fn json_response(
    status: StatusCode,
    body: Vec<u8>,
    phases: Option<&Phases>,
) -> Response {
    let mut resp = (status, body).into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    if let Some(p) = phases {
        if let Ok(v) = HeaderValue::from_str(&p.header()) {
            resp.headers_mut().insert("server-timing", v);
        }
    }
    resp
}

pub(crate) fn error_response(err: &ApiError, flavor: Flavor, phases: Option<&Phases>) -> Response {
    let body = serde_json::to_vec(&err.body(flavor)).unwrap_or_default();
    let mut resp = json_response(err.status, body, phases);
    if let Some(s) = err.retry_after {
        resp.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(s));
    }
    resp
}

fn meta_of(model: &DecisionModel, phases: &Phases) -> Value {
    let info = model.info();
    json!({
        "model": model.meta.name,
        "revision": model.meta.revision,
        "digest": model.meta.sha256.as_ref().map(|s| format!("sha256:{s}")),
        "dtype": info.dtype,
        "numerics": model.numerics,
        "engine": info.engine,
        "device": info.device,
        "timings": {
            "parse_ms": phases.parse.as_secs_f64() * 1000.0,
            "tokenize_ms": phases.engine.tokenize.as_secs_f64() * 1000.0,
            "queue_ms": phases.engine.queue.as_secs_f64() * 1000.0,
            "forward_ms": phases.engine.forward.as_secs_f64() * 1000.0,
            "post_ms": phases.engine.post.as_secs_f64() * 1000.0,
        }
    })
}

/// How one decision body is read and answered.
#[derive(Clone, Copy)]
struct Call<'a> {
    schema: Schema,
    endpoint: Endpoint,
    long_context: bool,
    started: Instant,
    /// In a `/v1/systemone/batch`, the name of the request.
    state_name: Option<&'a str>,
    /// The multipart parts of the body, claimed by its assets.
    parts: &'a Parts,
}

/// Decode and answer one decision body. Returns the JSON value and the answering model.
async fn answer(
    state: &AppState,
    value: &Value,
    call: Call<'_>,
    phases: &mut Phases,
) -> Result<(Value, String), ApiError> {
    let Call {
        schema,
        endpoint,
        long_context,
        started,
        state_name,
        parts,
    } = call;
    let mut body = parse_decision_body_with(value, schema, parts).map_err(ApiError::from)?;
    if long_context {
        match &mut body {
            DecisionBody::Single(r) => r.options.long_context = true,
            DecisionBody::Batch {
                options, entries, ..
            } => {
                options.long_context = true;
                for (_, r) in entries {
                    r.options.long_context = true;
                }
            }
        }
    }
    phases.parse = started.elapsed();
    let served = state.registry.names();
    let model = state
        .registry
        .ready(body.model())
        .map_err(|e| ApiError::from_engine(e, &served))?;
    let (decision, timings) = model
        .decide(&body, started)
        .await
        .map_err(|e| ApiError::from_engine(e, &served))?;
    phases.engine = timings;
    let return_meta = body.options().return_meta;
    let model_name = model.meta.name.clone();
    let input_tokens = match &decision {
        Decision::Single(r) => r.usage.input_tokens,
        Decision::Batch(b) => b.usage.input_tokens,
    };
    metrics::counter!("vllm_srun_input_tokens_total", "model" => model_name.clone())
        .increment(input_tokens);
    let value = match decision {
        Decision::Single(mut r) => {
            let failures = r.failures();
            if endpoint != Endpoint::Decisions {
                if let Some(e) = ApiError::question_failed(&failures, state_name) {
                    return Err(e);
                }
            } else if let Some(e) = ApiError::no_valid_question(&failures, r.answers.len()) {
                return Err(e);
            }
            if return_meta {
                r.meta = Some(meta_of(&model, phases));
            }
            serde_json::to_value(&r)
        }
        Decision::Batch(mut b) => {
            if return_meta {
                let meta = meta_of(&model, phases);
                for (_, r) in b.states.0.iter_mut() {
                    r.meta = Some(meta.clone());
                }
                b.meta = Some(meta);
            }
            serde_json::to_value(&b)
        }
    }
    .map_err(|e| {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            ErrorCode::InternalError,
            e.to_string(),
        )
    })?;
    Ok((value, model_name))
}

async fn handle(
    state: Arc<AppState>,
    headers: HeaderMap,
    body: Body,
    endpoint: Endpoint,
) -> Response {
    let started = Instant::now();
    let schema = match endpoint {
        Endpoint::Decisions => Schema::Internal,
        _ => state.config.schema,
    };
    let flavor = flavor(endpoint, schema);
    let long_context = headers
        .get(LONG_CONTEXT_HEADER)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("true"));
    let mut phases = Phases::default();
    let result: Result<(StatusCode, Value, String), ApiError> = async {
        let bytes = crate::body::read(&headers, body, state.config.max_request_bytes)
            .await
            .map_err(ApiError::from)?;
        let (bytes, parts) = crate::body::split(&headers, bytes)
            .await
            .map_err(ApiError::from)?;
        // A large body that asks too many questions is refused before it is built into a
        // value (most of a second at 16 MB of tiny questions); a small one costs little either
        // way and is read once.
        if bytes.len() as u64 > crate::LARGE_BODY_BYTES {
            if let Some(n) = protocol::precount::top_level_questions(&bytes)
                .filter(|n| *n > protocol::MAX_QUESTIONS)
            {
                return Err(protocol::precount::too_many_questions(n).into());
            }
        }
        let value: Value = serde_json::from_slice(&bytes).map_err(|e| ApiError::bad_json(&e))?;
        // The parsed value holds everything now; a long body's bytes are not kept beside it.
        drop(bytes);
        if endpoint == Endpoint::SystemOneBatch {
            if !parts.is_empty() {
                return Err(ApiError::from(crate::body::BodyError::Multipart(
                    "a batch reads its assets from data_base64; send one request per multipart body".into(),
                )));
            }
            return batch(&state, value, schema, long_context, started, &mut phases).await;
        }
        let call = Call {
            schema,
            endpoint,
            long_context,
            started,
            state_name: None,
            parts: &parts,
        };
        let (v, m) = answer(&state, &value, call, &mut phases).await?;
        Ok((StatusCode::OK, v, m))
    }
    .await;
    respond(result, flavor, started, phases, endpoint.path())
}

/// Serialize an answer or render an error in `flavor`, with Server-Timing; record the phase
/// histograms and the request counter. The one tail of every JSON worker endpoint.
pub(crate) fn respond(
    result: Result<(StatusCode, Value, String), ApiError>,
    flavor: Flavor,
    started: Instant,
    mut phases: Phases,
    path: &'static str,
) -> Response {
    let t_ser = Instant::now();
    let (resp, model, status) = match result {
        Ok((status, value, model)) => {
            let bytes = serde_json::to_vec(&value).unwrap_or_default();
            phases.serialize = t_ser.elapsed();
            phases.total = started.elapsed();
            (json_response(status, bytes, Some(&phases)), model, status)
        }
        Err(e) => {
            let e = e.for_flavor(flavor);
            phases.serialize = t_ser.elapsed();
            phases.total = started.elapsed();
            (
                error_response(&e, flavor, Some(&phases)),
                String::new(),
                e.status,
            )
        }
    };
    phases.record(path);
    count_request(path, model, status);
    resp
}

/// `vllm_srun_requests_total` by endpoint, answering model and status.
pub(crate) fn count_request(path: &'static str, model: String, status: StatusCode) {
    metrics::counter!(
        "vllm_srun_requests_total",
        "endpoint" => path,
        "model" => model,
        "status" => status.as_u16().to_string()
    )
    .increment(1);
}

/// `/v1/systemone/batch`: `{"model"?, "requests": {name: request}}`, each answered as it would
/// be alone, under `responses`; a failed entry carries its error body and `status`.
async fn batch(
    state: &Arc<AppState>,
    value: Value,
    schema: Schema,
    long_context: bool,
    started: Instant,
    phases: &mut Phases,
) -> Result<(StatusCode, Value, String), ApiError> {
    let obj = value.as_object().ok_or_else(|| {
        ApiError::from(protocol::ProtocolError::schema(
            &[],
            "the batch body must be a JSON object",
        ))
    })?;
    if let Some(k) = obj
        .keys()
        .find(|k| !matches!(k.as_str(), "model" | "requests"))
    {
        return Err(ApiError::from(
            protocol::ProtocolError::invalid(format!(
                "unknown member {k:?} in the batch; allowed: model, requests"
            ))
            .with_reason(protocol::reason::UNKNOWN_MEMBER),
        ));
    }
    let requests = obj
        .get("requests")
        .and_then(Value::as_object)
        .filter(|r| !r.is_empty())
        .ok_or_else(|| {
            ApiError::from(protocol::ProtocolError::schema(
                &["requests"],
                "requests must be an object of named requests",
            ))
        })?;
    let model = obj.get("model").cloned();
    let flavor = flavor(Endpoint::SystemOneBatch, schema);
    let mut set = tokio::task::JoinSet::new();
    for (i, (name, req)) in requests.iter().enumerate() {
        let mut req = req.clone();
        if let (Some(m), Some(o)) = (&model, req.as_object_mut()) {
            o.entry("model").or_insert_with(|| m.clone());
        }
        let state = state.clone();
        let name = name.clone();
        set.spawn(async move {
            let mut p = Phases::default();
            let call = Call {
                schema,
                endpoint: Endpoint::SystemOneBatch,
                long_context,
                started,
                state_name: Some(&name),
                parts: &Parts::new(),
            };
            let r = answer(&state, &req, call, &mut p).await;
            (i, name, r, p)
        });
    }
    let mut out: Vec<(usize, String, Value)> = Vec::with_capacity(requests.len());
    let mut model_name = String::new();
    while let Some(joined) = set.join_next().await {
        let (i, name, r, p) = joined.map_err(|e| {
            ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                ErrorCode::InternalError,
                e.to_string(),
            )
        })?;
        phases.parse = phases.parse.max(p.parse);
        phases.engine.tokenize += p.engine.tokenize;
        phases.engine.queue = phases.engine.queue.max(p.engine.queue);
        phases.engine.forward = phases.engine.forward.max(p.engine.forward);
        phases.engine.post += p.engine.post;
        let v = match r {
            Ok((v, m)) => {
                model_name = m;
                v
            }
            Err(e) => {
                let e = e.for_flavor(flavor);
                let mut b = e.body(flavor);
                if let Some(o) = b.as_object_mut() {
                    o.insert("status".into(), json!(e.status.as_u16()));
                }
                b
            }
        };
        out.push((i, name, v));
    }
    out.sort_by_key(|(i, _, _)| *i);
    let responses: serde_json::Map<String, Value> =
        out.into_iter().map(|(_, n, v)| (n, v)).collect();
    Ok((
        StatusCode::OK,
        json!({ "responses": responses }),
        model_name,
    ))
}

/// Answer a request (or a batch in `states`), each failed question in place.
#[utoipa::path(post, path = "/v1/decisions", tag = "decisions",
    request_body(content = DecisionRequestDoc, description = "A request in the internal form (also a batch in `states`, 4.0 forms, gzip/zstd bodies, multipart/form-data with the request first)"),
    responses(
        (status = 200, description = "Every question answered, failures in place", body = DecisionResponse),
        (status = 400, description = "invalid_request", body = ErrorDoc),
        (status = 404, description = "model_not_found", body = ErrorDoc),
        (status = 408, description = "body_timeout: the body did not arrive within --body-timeout-ms", body = ErrorDoc),
        (status = 413, description = "request_too_large", body = ErrorDoc),
        (status = 415, description = "unsupported_media_type", body = ErrorDoc),
        (status = 422, description = "unsupported_surface", body = ErrorDoc),
        (status = 429, description = "overloaded", body = ErrorDoc),
        (status = 500, description = "internal_error", body = ErrorDoc),
        (status = 503, description = "not_ready", body = ErrorDoc),
    ))]
pub async fn decisions(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    handle(state, headers, body, Endpoint::Decisions).await
}

/// Answer one System One request; a failed question fails the request.
#[utoipa::path(post, path = "/v1/systemone", tag = "decisions",
    request_body(content = DecisionRequestDoc, description = "One System One request (gzip/zstd bodies and multipart/form-data with the request first are read)"),
    params(("TypeSafe-Danger-Zone-Long-Context" = Option<String>, Header, description = "true reads a long context")),
    responses(
        (status = 200, description = "Every question answered", body = DecisionResponse),
        (status = 400, description = "invalid_request, or question_failed (max_length_exceeded, scan_budget_exceeded, invalid_input)", body = ErrorDoc),
        (status = 404, description = "model_not_found", body = ErrorDoc),
        (status = 408, description = "body_timeout: the body did not arrive within --body-timeout-ms", body = ErrorDoc),
        (status = 413, description = "request_too_large", body = ErrorDoc),
        (status = 415, description = "unsupported_media_type", body = ErrorDoc),
        (status = 422, description = "validation failure, or question_failed (invalid_question)", body = ErrorDoc),
        (status = 429, description = "overloaded (vllm-sr/4.0)", body = ErrorDoc),
        (status = 500, description = "question_failed (invalid_model_output)", body = ErrorDoc),
        (status = 503, description = "not_ready, or question_failed (unavailable)", body = ErrorDoc),
        (status = 504, description = "question_failed (deadline_exceeded)", body = ErrorDoc),
        (status = 529, description = "overloaded (vllm-sr/5.0)", body = ErrorDoc),
    ))]
pub async fn systemone(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    handle(state, headers, body, Endpoint::SystemOne).await
}

/// Named System One requests, each answered as it would be alone.
#[utoipa::path(post, path = "/v1/systemone/batch", tag = "decisions",
    request_body = SystemOneBatchDoc,
    responses(
        (status = 200, description = "Each request's body (a failed one with its status)", body = SystemOneBatchResponseDoc),
        (status = 400, description = "invalid_request", body = ErrorDoc),
        (status = 404, description = "model_not_found", body = ErrorDoc),
        (status = 408, description = "body_timeout: the body did not arrive within --body-timeout-ms", body = ErrorDoc),
        (status = 413, description = "request_too_large", body = ErrorDoc),
        (status = 415, description = "unsupported_media_type", body = ErrorDoc),
        (status = 422, description = "validation failure", body = ErrorDoc),
        (status = 429, description = "overloaded", body = ErrorDoc),
        (status = 503, description = "not_ready", body = ErrorDoc),
        (status = 529, description = "overloaded (vllm-sr/5.0)", body = ErrorDoc),
    ))]
pub async fn systemone_batch(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    handle(state, headers, body, Endpoint::SystemOneBatch).await
}

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
        card["representation"] = crate::encoders::representation(e);
        card["engine_args"] = json!({"batching": e.config});
        card["limits"] = json!({"max_input_tokens": info.max_tokens,
            "max_request_bytes": state.config.max_request_bytes});
    }
    if let Some(m) = slot.model() {
        let info = m.info();
        card["question_types"] = json!(m.config.question_types);
        card["presets"] = json!(m.config.presets);
        // The router signals a question id asks whatever its wording (system-duo-api.txt).
        if !m.config.router_questions.is_empty() {
            card["router_questions"] = json!(m.config.router_questions);
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
    entry.extend(crate::sie::sie_fields(s));
    Value::Object(entry)
}

/// What a model serves: `decisions`, `generate` (chat and completions) or `embeddings`.
fn surfaces(s: &engine::Slot) -> Vec<&'static str> {
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

/// The served models with their cards.
#[utoipa::path(get, path = "/v1/models", tag = "models",
    responses((status = 200, description = "Served models", body = ModelListDoc)))]
pub async fn models(State(state): State<Arc<AppState>>) -> Response {
    let models: Vec<Value> = state
        .registry
        .slots()
        .iter()
        .map(|s| listing_entry(&state, s))
        .collect();
    let created = state.started.elapsed().as_secs().abs_diff(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0),
    );
    let data: Vec<Value> = state
        .registry
        .slots()
        .iter()
        .map(|s| {
            json!({"id": s.meta().name, "object": "model", "created": created,
                "owned_by": "vllm-srun", "surfaces": surfaces(s)})
        })
        .collect();
    let body = json!({
        "object": "list",
        "api_version": protocol::API_VERSION,
        "models": models,
        "classifiers": state.config.classifiers,
        "limits": {"max_request_bytes": state.config.max_request_bytes,
            "max_bundle_tasks": state.config.max_bundle_tasks},
        "data": data,
    });
    json_response(
        StatusCode::OK,
        serde_json::to_vec(&body).unwrap_or_default(),
        None,
    )
}

/// The served models, as System One clients discover them (the same listing).
#[utoipa::path(get, path = "/v1/systemone/models", tag = "models",
    responses((status = 200, description = "Served models", body = ModelListDoc)))]
pub async fn systemone_models(state: State<Arc<AppState>>) -> Response {
    models(state).await
}

/// Readiness of the process and each model.
#[utoipa::path(get, path = "/health", tag = "health",
    responses((status = 200, description = "Every model ready", body = HealthDoc),
        (status = 503, description = "Not ready (starting, loading, warming, degraded or failed)", body = HealthDoc)))]
pub async fn health(State(state): State<Arc<AppState>>) -> Response {
    let slots = state.registry.slots();
    let states: Vec<ModelState> = slots.iter().map(|s| s.state()).collect();
    let overall = if states.iter().all(|s| *s == ModelState::Ready) {
        "ready"
    } else if states.iter().all(|s| matches!(s, ModelState::Failed(_))) {
        "failed"
    } else if states.contains(&ModelState::Ready) {
        "degraded"
    } else if states.contains(&ModelState::Warming) {
        "warming"
    } else if states.contains(&ModelState::Loading) {
        "loading"
    } else {
        "starting"
    };
    let models: serde_json::Map<String, Value> = slots
        .iter()
        .zip(&states)
        .map(|(s, st)| (s.meta().name.clone(), json!(st.word())))
        .collect();
    let status = if overall == "ready" {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    // The extension set this process's System One answers with (extension-reference.txt,
    // GET /health): 5.0, or 4.0 on a vllm-sr/4.0 process.
    let version = match state.config.schema {
        protocol::Schema::V4 => "4.0",
        _ => protocol::EXTENSION_VERSION,
    };
    let body = json!({"status": overall, "api_version": protocol::API_VERSION,
        "version": version, "models": models});
    json_response(status, serde_json::to_vec(&body).unwrap_or_default(), None)
}

/// A model whose forward has run longer than --forward-timeout-seconds, and for how long.
pub(crate) fn stalled(state: &AppState) -> Option<(String, std::time::Duration)> {
    let limit = state.config.forward_timeout;
    state.registry.slots().iter().find_map(|s| {
        let running = s.model()?.worker()?.status().forward_running_for()?;
        (running > limit).then(|| (s.meta().name.clone(), running))
    })
}

/// Liveness: 503 `stalled` while a forward outruns --forward-timeout-seconds.
#[utoipa::path(get, path = "/health/live", tag = "health",
    responses((status = 200, description = "Alive", body = HealthDoc),
        (status = 503, description = "Stalled", body = HealthDoc)))]
pub async fn live(State(state): State<Arc<AppState>>) -> Response {
    let limit = state.config.forward_timeout;
    let (status, body) = match stalled(&state) {
        Some((name, running)) => (
            StatusCode::SERVICE_UNAVAILABLE,
            json!({
                "status": "stalled",
                "api_version": protocol::API_VERSION,
                "reason": "forward_timeout",
                "message": format!("a forward of model {name} has run {:.1} s, longer than --forward-timeout-seconds ({} s)", running.as_secs_f64(), limit.as_secs()),
            }),
        ),
        None => (
            StatusCode::OK,
            json!({"status": "alive", "api_version": protocol::API_VERSION, "uptime_s": state.started.elapsed().as_secs()}),
        ),
    };
    json_response(status, serde_json::to_vec(&body).unwrap_or_default(), None)
}

/// Prometheus metrics.
#[utoipa::path(get, path = "/metrics", tag = "health",
    responses((status = 200, description = "Prometheus text format", body = String, content_type = "text/plain")))]
pub async fn metrics_text(State(state): State<Arc<AppState>>) -> Response {
    for s in state.registry.slots() {
        if let Some(w) = s.model().and_then(|m| m.worker()) {
            let st = w.status();
            let name = s.meta().name.clone();
            metrics::gauge!("vllm_srun_queue_jobs", "model" => name.clone())
                .set(st.queued_jobs() as f64);
            metrics::gauge!("vllm_srun_queue_tokens", "model" => name.clone())
                .set(st.queued_tokens() as f64);
            metrics::gauge!("vllm_srun_forwards", "model" => name.clone())
                .set(st.forwards() as f64);
            metrics::gauge!("vllm_srun_cancelled_jobs", "model" => name).set(st.cancelled() as f64);
        }
        if let Some(g) = s.text().and_then(|t| t.running()) {
            let st = g.status();
            let name = s.meta().name.clone();
            metrics::gauge!("vllm_srun_generation_active_sequences", "model" => name.clone())
                .set(st.active() as f64);
            metrics::gauge!("vllm_srun_generation_waiting", "model" => name.clone())
                .set(st.waiting() as f64);
            metrics::gauge!("vllm_srun_generation_cancelled", "model" => name)
                .set(st.cancelled() as f64);
        }
    }
    let mut resp = state.metrics.render().into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4"),
    );
    resp
}

pub async fn not_found() -> Response {
    let e = ApiError::new(
        StatusCode::NOT_FOUND,
        ErrorCode::InvalidRequest,
        "no such route",
    )
    .with_reason("route_not_found");
    error_response(&e, Flavor::Internal, None)
}

/// The OpenAPI document, generated from the handlers' annotations and the wire types.
#[utoipa::path(get, path = "/openapi.yaml", tag = "health",
    responses((status = 200, description = "This document", body = String, content_type = "application/yaml")))]
pub async fn openapi_yaml() -> Response {
    match crate::openapi::yaml() {
        Ok(y) => ([(header::CONTENT_TYPE, "application/yaml")], y).into_response(),
        Err(e) => error_response(
            &ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                ErrorCode::InternalError,
                e,
            ),
            Flavor::Internal,
            None,
        ),
    }
}

/// A `/v1/decisions` body answered as that endpoint answers it (for bundle tasks).
pub(crate) async fn decisions_core(state: &AppState, body: &Value) -> crate::encoders::CoreResult {
    let mut phases = Phases::default();
    let call = Call {
        schema: Schema::Internal,
        endpoint: Endpoint::Decisions,
        long_context: false,
        started: Instant::now(),
        state_name: None,
        parts: &Parts::new(),
    };
    let (v, m) = answer(state, body, call, &mut phases).await?;
    Ok((v, m, phases.engine))
}
