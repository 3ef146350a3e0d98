//! The SIE face of the engine: `/v1/encode/{model}`, `/v1/score/{model}`,
//! `/v1/extract/{model}`, `/v1/generate/{model}`, `/v1/models/{model}`, `/healthz`, `/readyz`,
//! `/livez`.
//!
//! Bodies are msgpack (`Content-Type: application/msgpack`) or JSON; answers are msgpack unless
//! the client sends `Accept: application/json`. Errors are `{"detail": {"code", "message"}}`
//! with SIE's codes, and every answer carries `X-Total-Time`, `X-Queue-Time`,
//! `X-Tokenization-Time` and `X-Inference-Time` (milliseconds).

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Instant;

use axum::body::{Body, Bytes};
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use engine::generate::{collect, Finish};
use engine::recipes::{self, Ask};
use engine::{EngineError, GenEvent, Timings};
use protocol::openai::{SieGenerateRequest, SieGenerateResponse, Usage};
use protocol::request::{Overflow, Roles};
use protocol::sie::{
    EncodeRequest, ExtractRequest, ExtractTask, OutputDtype, OverflowPolicy, ScoreRequest,
};
use serde_json::{json, Value};

use crate::calls::encode::{decide_batch, relevance, shortened, vectors_only, width};
use crate::calls::generate::{fail, first, observe, submit, Events};
use crate::calls::CoreResult;
use crate::cards::{listing_entry, stalled};
use crate::error::{invalid, ApiError, Shape};
use crate::respond::json::count_request;
use crate::respond::openai::sse_response;
use crate::respond::sie::{decode, encode, error_response, ms, set_trace_id, SieErrors};
use crate::AppState;

/// Read, decode, answer with `core`, and render with SIE's negotiation, headers and errors.
async fn serve<F, Fut>(
    state: Arc<AppState>,
    headers: HeaderMap,
    body: Body,
    path: &'static str,
    core: F,
) -> Response
where
    F: FnOnce(Arc<AppState>, Value) -> Fut,
    Fut: std::future::Future<Output = CoreResult>,
{
    let started = Instant::now();
    let result = async {
        let value = crate::body::value(&headers, body, state.config.max_request_bytes, |b| {
            decode(&headers, b)
        })
        .await?;
        core(state.clone(), value).await
    }
    .await;
    let (mut resp, model, timings) = match result {
        Ok((v, model, t)) => (encode(&headers, StatusCode::OK, &v), model, t),
        Err(e) => (
            error_response(&headers, e),
            String::new(),
            Timings::default(),
        ),
    };
    let h = resp.headers_mut();
    for (name, d) in [
        ("x-total-time", started.elapsed()),
        ("x-queue-time", timings.queue),
        ("x-tokenization-time", timings.tokenize),
        ("x-inference-time", timings.forward),
    ] {
        if let Ok(v) = HeaderValue::from_str(&ms(d)) {
            h.insert(name, v);
        }
    }
    if timings.post > std::time::Duration::ZERO {
        if let Ok(v) = HeaderValue::from_str(&ms(timings.post)) {
            h.insert("x-postprocessing-time", v);
        }
    }
    set_trace_id(&headers, h);
    count_request(path, model, resp.status());
    resp
}

/// The `overflow` a decision backbone's questions take under `overflow_policy`: `default`
/// passes the text as the model allows, so the backbone reads all of it, in windows when it is
/// longer than one input (up to its scan budget); `truncate_text` reads its head; `error`
/// refuses a text longer than one input.
fn backbone_overflow(policy: OverflowPolicy) -> Overflow {
    match policy {
        OverflowPolicy::Default => Overflow::Window,
        OverflowPolicy::TruncateText => Overflow::Truncate,
        OverflowPolicy::Error => Overflow::Reject,
    }
}

/// INPUT_TOO_LONG for an item over the model's length under `overflow_policy: error`.
fn too_long(message: String, limit: Option<u64>) -> ApiError {
    let mut e = ApiError::new(protocol::ErrorCode::InvalidRequest, message)
        .with_reason(protocol::reason::INPUT_TOO_LONG);
    e.limit = limit;
    e
}

fn quantize(v: &[f32], dtype: OutputDtype) -> Value {
    match dtype {
        OutputDtype::Float32 => json!(v),
        OutputDtype::Float16 => json!(v
            .iter()
            .map(|x| f64::from(half_round(*x)))
            .collect::<Vec<_>>()),
        OutputDtype::Int8 => json!(v
            .iter()
            .map(|x| (x * 127.0).round().clamp(-127.0, 127.0) as i8)
            .collect::<Vec<_>>()),
        OutputDtype::Binary => json!(v
            .chunks(8)
            .map(|c| c.iter().enumerate().fold(0u8, |b, (i, x)| if *x > 0.0 {
                b | (0x80 >> i)
            } else {
                b
            }))
            .collect::<Vec<_>>()),
    }
}

/// Round an f32 to the nearest value an IEEE half can hold (10 mantissa bits).
fn half_round(x: f32) -> f32 {
    if !x.is_finite() || x == 0.0 {
        return x;
    }
    let bits = x.to_bits();
    let rounded = (bits + 0x0000_1000) & 0xFFFF_E000;
    f32::from_bits(rounded)
}

async fn encode_core(state: &AppState, model: &str, body: &Value) -> CoreResult {
    let req = EncodeRequest::parse(body)?;
    let m = state
        .registry
        .encoder(Some(model))
        .map_err(|e| crate::error::from_engine(e, &state.registry.names()))?;
    vectors_only(&m)?;
    let texts: Vec<String> = req
        .items
        .iter()
        .map(|it| match &req.instruction {
            Some(ins) => format!("{ins} {}", it.text),
            None => it.text.clone(),
        })
        .collect();
    let truncate = req.overflow != OverflowPolicy::Error;
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let info = m.info().clone();
    let dims = width(req.dimensions, &m.meta.name, info.dims)?;
    let out = m
        .embed(&refs, truncate)
        .await
        .map_err(crate::error::from_encode)?;
    let mut results = Vec::with_capacity(req.items.len());
    let dtype = req.output_dtype;
    for (it, v) in req.items.iter().zip(&out.vectors) {
        let v = shortened(v, dims, info.normalize);
        let mut r = json!({"dense": {"dims": dims, "dtype": dtype.as_str(), "values": quantize(&v, dtype)}});
        if let Some(id) = &it.id {
            r["id"] = id.clone();
        }
        results.push(r);
    }
    let timing = json!({
        "tokenization_ms": out.timings.tokenize.as_secs_f64() * 1e3,
        "queue_ms": out.timings.queue.as_secs_f64() * 1e3,
        "inference_ms": out.timings.forward.as_secs_f64() * 1e3,
    });
    let timings = Timings {
        tokenize: out.timings.tokenize,
        queue: out.timings.queue,
        forward: out.timings.forward,
        ..Timings::default()
    };
    Ok((
        json!({"model": m.meta.name, "items": results, "timing": timing}),
        m.meta.name.clone(),
        timings,
    ))
}

async fn score_core(state: &AppState, model: &str, body: &Value) -> CoreResult {
    let req = ScoreRequest::parse(body)?;
    let q = match &req.instruction {
        Some(ins) => format!("{ins} {}", req.query.text),
        None => req.query.text.clone(),
    };
    let docs: Vec<String> = req.items.iter().map(|it| it.text.clone()).collect();
    let (scores, tokens, name, timings) = relevance(state, Some(model), &q, &docs).await?;
    let mut order: Vec<usize> = (0..docs.len()).collect();
    order.sort_by(|a, b| scores[*b].total_cmp(&scores[*a]));
    let entries: Vec<Value> = order
        .iter()
        .enumerate()
        .map(|(rank, &i)| {
            json!({"item_id": req.items[i].id.clone().unwrap_or(Value::Null), "score": scores[i], "rank": rank})
        })
        .collect();
    Ok((
        json!({"model": name, "query_id": req.query.id.clone().unwrap_or(Value::Null),
            "scores": entries, "usage": {"input_tokens": tokens}}),
        name,
        timings,
    ))
}

/// Extract: a decision model classifies each item over `params.labels` (`classifications`),
/// or with `options.task: entities` finds the words of each label as a span question
/// (`entities`, code-point offsets). A model without span questions fails each item alone.
async fn extract_core(state: &AppState, model: &str, body: &Value) -> CoreResult {
    let req = ExtractRequest::parse(body)?;
    if req.output_schema {
        return Err(invalid(format!(
            "params.output_schema: model {model} does no structured extraction"
        )));
    }
    if let Some(m) = state
        .registry
        .encoder(Some(model))
        .ok()
        .filter(|m| m.info().per_token)
    {
        return extract_tagged(&m, &req).await;
    }
    let labels = req
        .labels
        .as_deref()
        .ok_or_else(|| invalid("params.labels must be a non-empty list of labels"))?;
    let overflow = backbone_overflow(req.overflow);
    let m = state
        .registry
        .ready(Some(model))
        .map_err(|e| crate::error::from_engine(e, &state.registry.names()))?;
    let ids = &req.ids;
    // Items that cannot be read, and an entity request on a model without spans, fail alone.
    let mut out: Vec<Option<Value>> = vec![None; req.items.len()];
    let instructions = req.instruction.as_deref();
    // SIE's extract with labels finds entities; a model that answers no span questions
    // classifies instead.
    let task = req.task.unwrap_or(if m.config.answers("span") {
        ExtractTask::Entities
    } else {
        ExtractTask::Classify
    });
    let ask = if task == ExtractTask::Entities {
        Ask::Spans {
            labels,
            preset: None,
            instructions,
        }
    } else {
        Ask::Choice {
            labels,
            instructions,
        }
    };
    // The items asked, by their place in the batch.
    let mut asked = Vec::with_capacity(req.items.len());
    let mut entries = Vec::with_capacity(req.items.len());
    for (i, it) in req.items.iter().enumerate() {
        match it {
            Ok(it) => {
                asked.push(i);
                entries.push(ask.entry(json!(it.text), Roles::Absent, overflow));
            }
            Err(e) => {
                out[i] = Some(
                    json!({"id": ids[i], "error": {"code": "INVALID_INPUT", "message": e.message}}),
                );
            }
        }
    }
    let mut timings = Timings::default();
    if !entries.is_empty() {
        let (b, t) = decide_batch(state, &m, recipes::batch(entries, None, None)).await?;
        timings = t;
        for (&i, (_, r)) in asked.iter().zip(b.states.iter()) {
            out[i] = Some(match ask.read(r) {
                recipes::Read::Spans(spans) => {
                    json!({"id": ids[i], "entities": spans.iter().map(|s| json!({
                        "text": s.text, "label": s.label, "score": s.probability,
                        "start": s.start, "end": s.end})).collect::<Vec<_>>()})
                }
                recipes::Read::Labels { ranked, .. } => {
                    json!({"id": ids[i], "classifications": ranked.iter().map(|(l, s)| json!({"label": l, "score": s})).collect::<Vec<_>>()})
                }
                // A text over what the model reads (its length under overflow_policy error,
                // its scan budget by default) fails the request, as SIE answers it.
                recipes::Read::Failed(f)
                    if matches!(
                        f.kind,
                        protocol::QuestionErrorKind::MaxLengthExceeded
                            | protocol::QuestionErrorKind::ScanBudgetExceeded
                    ) =>
                {
                    return Err(too_long(format!("items[{i}]: {}", f.message), f.limit));
                }
                recipes::Read::Failed(f)
                    if f.kind == protocol::QuestionErrorKind::InvalidModelOutput =>
                {
                    json!({"id": ids[i], "error": {"code": "INFERENCE_ERROR", "message": f.message}})
                }
                recipes::Read::Failed(f) => {
                    json!({"id": ids[i], "error": {"code": "INVALID_INPUT", "message": f.message}})
                }
            });
        }
    }
    let results: Vec<Value> = out.into_iter().map(|o| o.unwrap_or(Value::Null)).collect();
    Ok((
        json!({"model": m.meta.name, "items": results}),
        m.meta.name.clone(),
        timings,
    ))
}

/// Extract on a token-classification head: each item's entities (spans merged from its
/// tags), keeping the entity types `labels` names (case-insensitive; all without it). Under
/// `overflow_policy` `default` the head reads a long text whole in windows up to its scan
/// budget; `truncate_text` reads its first input; `error` refuses a text over one input.
async fn extract_tagged(m: &engine::EncoderModel, req: &ExtractRequest) -> CoreResult {
    // A token head tags what it was trained to tag and reads no instruction: one sent is
    // refused rather than ignored.
    if req.instruction.is_some() {
        return Err(invalid(format!(
            "params.instruction: model {} is a token-classification head and reads no instruction",
            m.meta.name
        )));
    }
    let overflow = match req.overflow {
        OverflowPolicy::TruncateText => engine::TagOverflow::Truncate,
        OverflowPolicy::Error => engine::TagOverflow::Reject,
        OverflowPolicy::Default => {
            let tokens = m.info().max_tokens;
            engine::TagOverflow::Window {
                tokens,
                overlap: engine::TagOverflow::overlap(tokens),
            }
        }
    };
    let ids = &req.ids;
    let mut out: Vec<Option<Value>> = vec![None; req.items.len()];
    let mut texts = Vec::new();
    let mut at = Vec::new();
    for (i, it) in req.items.iter().enumerate() {
        match it {
            Ok(it) => {
                texts.push(it.text.clone());
                at.push(i);
            }
            Err(e) => {
                out[i] = Some(
                    json!({"id": ids[i], "error": {"code": "INVALID_INPUT", "message": e.message}}),
                )
            }
        }
    }
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let (tagged, t) = m
        .tag(&refs, overflow)
        .await
        .map_err(crate::error::from_encode)?;
    let labels = req.labels.as_deref();
    let wanted = |kind: &str| labels.is_none_or(|l| l.iter().any(|x| x.eq_ignore_ascii_case(kind)));
    for (i, r) in at.into_iter().zip(tagged) {
        out[i] = Some(match r {
            Ok(tg) => json!({"id": ids[i], "entities": tg.spans.iter().filter(|s| wanted(&s.label))
                .map(|s| json!({"text": s.text, "label": s.label, "score": s.probability,
                    "start": s.start, "end": s.end})).collect::<Vec<_>>()}),
            Err(e) => {
                let a = crate::error::from_encode(e);
                if a.reason == Some(protocol::reason::INPUT_TOO_LONG)
                    || a.reason == Some(protocol::reason::SCAN_BUDGET)
                {
                    return Err(too_long(format!("items[{i}]: {}", a.message), a.limit));
                }
                json!({"id": ids[i], "error": {"code": "INVALID_INPUT", "message": a.message}})
            }
        });
    }
    let timings = Timings {
        tokenize: t.tokenize,
        queue: t.queue,
        forward: t.forward,
        ..Timings::default()
    };
    let results: Vec<Value> = out.into_iter().map(|o| o.unwrap_or(Value::Null)).collect();
    Ok((
        json!({"model": m.meta.name, "items": results}),
        m.meta.name.clone(),
        timings,
    ))
}

/// Embeddings of items (SIE).
#[utoipa::path(post, path = "/v1/encode/{model}", tag = "sie",
    params(("model" = String, Path, description = "A served model id or alias")),
    request_body(content((protocol::sie::EncodeRequestWire = "application/json"), (protocol::sie::EncodeRequestWire = "application/msgpack"))),
    responses(
        (status = 200, description = "msgpack by default; JSON with Accept: application/json", content((protocol::sie::SieEncodeResponseDoc = "application/msgpack"), (protocol::sie::SieEncodeResponseDoc = "application/json"))),
        SieErrors,
    ))]
pub async fn encode_route(
    State(state): State<Arc<AppState>>,
    Path(model): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    serve(state, headers, body, "/v1/encode", |s, v| async move {
        encode_core(&s, &model, &v).await
    })
    .await
}

/// Items ranked against a query (SIE).
#[utoipa::path(post, path = "/v1/score/{model}", tag = "sie",
    params(("model" = String, Path, description = "A served model id or alias")),
    request_body(content((protocol::sie::ScoreRequestWire = "application/json"), (protocol::sie::ScoreRequestWire = "application/msgpack"))),
    responses(
        (status = 200, description = "msgpack by default; JSON with Accept: application/json", content((protocol::sie::SieScoreResponseDoc = "application/msgpack"), (protocol::sie::SieScoreResponseDoc = "application/json"))),
        SieErrors,
    ))]
pub async fn score_route(
    State(state): State<Arc<AppState>>,
    Path(model): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    serve(state, headers, body, "/v1/score", |s, v| async move {
        score_core(&s, &model, &v).await
    })
    .await
}

/// Classifications of items over labels (SIE); per-item errors in place.
#[utoipa::path(post, path = "/v1/extract/{model}", tag = "sie",
    params(("model" = String, Path, description = "A served model id or alias")),
    request_body(content((protocol::sie::ExtractRequestWire = "application/json"), (protocol::sie::ExtractRequestWire = "application/msgpack"))),
    responses(
        (status = 200, description = "msgpack by default; JSON with Accept: application/json", content((protocol::sie::SieExtractResponseDoc = "application/msgpack"), (protocol::sie::SieExtractResponseDoc = "application/json"))),
        SieErrors,
    ))]
pub async fn extract_route(
    State(state): State<Arc<AppState>>,
    Path(model): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    serve(state, headers, body, "/v1/extract", |s, v| async move {
        extract_core(&s, &model, &v).await
    })
    .await
}

/// `GET /v1/models/{model}`: one model's listing entry (System One and SIE fields).
#[utoipa::path(get, path = "/v1/models/{model}", tag = "sie",
    params(("model" = String, Path, description = "A served model id or alias")),
    responses(
        (status = 200, description = "msgpack by default; JSON with Accept: application/json", content((protocol::listing::ModelEntryDoc = "application/msgpack"), (protocol::listing::ModelEntryDoc = "application/json"))),
        SieErrors,
    ))]
pub async fn model_route(
    State(state): State<Arc<AppState>>,
    Path(model): Path<String>,
    headers: HeaderMap,
) -> Response {
    match state.registry.find(Some(&model)) {
        Ok(slot) => {
            let v = listing_entry(&state, slot);
            encode(&headers, StatusCode::OK, &v)
        }
        Err(e) => error_response(
            &headers,
            crate::error::from_engine(e, &state.registry.names()),
        ),
    }
}

fn text(status: StatusCode, body: &'static str) -> Response {
    (status, [(header::CONTENT_TYPE, "text/plain")], body).into_response()
}

/// `GET /healthz`: the process runs.
#[utoipa::path(get, path = "/healthz", tag = "sie", responses((status = 200, description = "ok", body = String, content_type = "text/plain")))]
pub async fn healthz() -> Response {
    text(StatusCode::OK, "ok")
}

/// `GET /readyz`: every model is ready.
#[utoipa::path(get, path = "/readyz", tag = "sie", responses((status = 200, description = "ok", body = String, content_type = "text/plain"), (status = 503, description = "not ready", body = String, content_type = "text/plain")))]
pub async fn readyz(State(state): State<Arc<AppState>>) -> Response {
    let ready = state
        .registry
        .slots()
        .iter()
        .all(|s| s.state() == engine::ModelState::Ready);
    text(errors::probe(ready), if ready { "ok" } else { "not ready" })
}

/// `GET /livez`: no forward has outrun --forward-timeout-seconds.
#[utoipa::path(get, path = "/livez", tag = "sie", responses((status = 200, description = "ok", body = String, content_type = "text/plain"), (status = 503, description = "stalled", body = String, content_type = "text/plain")))]
pub async fn livez(State(state): State<Arc<AppState>>) -> Response {
    let stalled = stalled(&state).is_some();
    text(
        errors::probe(!stalled),
        if stalled { "stalled" } else { "ok" },
    )
}

/// Text from a prompt (SIE). The model id uses `__` for `/`; an id with `/` is refused.
#[utoipa::path(post, path = "/v1/generate/{model}", tag = "sie",
    params(("model" = String, Path, description = "A served model id, with __ in place of /")),
    request_body(content((SieGenerateRequest = "application/json"), (SieGenerateRequest = "application/msgpack"))),
    responses(
        (status = 200, description = "msgpack by default; JSON with Accept: application/json; with stream: true a text/event-stream of text_delta events and a done event",
            content((SieGenerateResponse = "application/msgpack"), (SieGenerateResponse = "application/json"), (String = "text/event-stream"))),
        SieErrors,
    ))]
pub async fn generate_route(
    State(state): State<Arc<AppState>>,
    Path(model): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let started = Instant::now();
    let mut resp = match generate(&state, &model, &headers, body).await {
        Ok(r) => r,
        Err(e) => error_response(&headers, e),
    };
    if let Ok(v) = HeaderValue::from_str(&ms(started.elapsed())) {
        resp.headers_mut().insert("x-total-time", v);
    }
    set_trace_id(&headers, resp.headers_mut());
    count_request("/v1/generate", String::new(), resp.status());
    resp
}

fn sie_answer(model: &str, text: String, f: &Finish) -> SieGenerateResponse {
    SieGenerateResponse {
        model: model.to_string(),
        text,
        finish_reason: f.reason.word().into(),
        usage: Usage::new(f.prompt_tokens as u64, f.completion_tokens as u64),
        ttft_ms: f.ttft.as_secs_f64() * 1000.0,
        tpot_ms: f.tpot().as_secs_f64() * 1000.0,
    }
}

fn event<T: serde::Serialize>(name: &str, v: &T) -> Vec<u8> {
    let mut out = format!("event: {name}\ndata: ").into_bytes();
    out.extend(serde_json::to_vec(v).unwrap_or_default());
    out.extend_from_slice(b"\n\n");
    out
}

async fn generate(
    state: &AppState,
    model: &str,
    headers: &HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    if model.contains('/') {
        return Err(invalid(format!(
            "model id {model:?} has '/': use '__' in its place ({:?})",
            model.replace('/', "__")
        ))
        .with_reason(protocol::reason::MODEL_ID_SLASH));
    }
    let value = crate::body::value(headers, body, state.config.max_request_bytes, |b| {
        decode(headers, b)
    })
    .await?;
    let r: SieGenerateRequest = serde_json::from_value(value).map_err(|e| {
        invalid(format!("the request does not match the schema: {e}"))
            .with_reason(protocol::reason::BODY_MALFORMED)
    })?;
    let params = r.check().map_err(ApiError::from)?;
    let id = model.replace("__", "/");
    let tm = state.registry.text(Some(&id)).map_err(|e| fail(state, e))?;
    let job = tm
        .text_job(&r.prompt, &params)
        .map_err(|e| fail(state, e))?;
    let rx = submit(&tm, job).await.map_err(|e| fail(state, e))?;
    let name = tm.name().to_string();
    if r.stream != Some(true) {
        let (text, _, finish) = collect(rx).await.map_err(|e| fail(state, e.into()))?;
        observe(&name, &finish);
        let v = serde_json::to_value(sie_answer(&name, text, &finish)).unwrap_or_default();
        return Ok(encode(headers, StatusCode::OK, &v));
    }
    let (head, rx) = first(rx).await.map_err(|e| fail(state, e))?;
    struct St {
        rx: Events,
        head: Option<GenEvent>,
        text: String,
        ended: bool,
    }
    let st = St {
        rx,
        head,
        text: String::new(),
        ended: false,
    };
    let stream = futures_util::stream::unfold(st, move |mut st| {
        let name = name.clone();
        async move {
            if st.ended {
                return None;
            }
            let ev = match st.head.take() {
                Some(ev) => Some(ev),
                None => st.rx.recv().await,
            };
            let out = match ev {
                Some(GenEvent::Delta { text, .. }) => {
                    st.text.push_str(&text);
                    event("text_delta", &serde_json::json!({"text_delta": text}))
                }
                Some(GenEvent::Done(f)) => {
                    observe(&name, &f);
                    st.ended = true;
                    event("done", &sie_answer(&name, std::mem::take(&mut st.text), &f))
                }
                other => {
                    st.ended = true;
                    let e: EngineError = match other {
                        Some(GenEvent::Failed(e)) => e.into(),
                        _ => EngineError::Unavailable,
                    };
                    let api = crate::error::from_engine(e, &[]);
                    event("error", &api.body(Shape::Sie))
                }
            };
            Some((Ok::<_, Infallible>(Bytes::from(out)), st))
        }
    });
    Ok(sse_response(stream))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    /// sie-api.txt: `default` passes the input as the model allows (a decision backbone reads
    /// it whole, in windows), `truncate_text` cuts its end, `error` refuses it.
    #[test]
    fn overflow_policy_maps_to_the_backbone_overflow_the_spec_describes() {
        let of = |policy: serde_json::Value| {
            let body = json!({"items": [{"text": "a"}],
                "params": {"labels": ["a"], "options": {"overflow_policy": policy}}});
            protocol::sie::ExtractRequest::parse(&body)
                .map(|r| super::backbone_overflow(r.overflow))
                .map_err(|e| crate::error::ApiError::from(e).status().as_u16())
        };
        assert_eq!(of(json!(null)), Ok(protocol::request::Overflow::Window));
        assert_eq!(
            of(json!("default")),
            Ok(protocol::request::Overflow::Window)
        );
        assert_eq!(
            of(json!("truncate_text")),
            Ok(protocol::request::Overflow::Truncate)
        );
        assert_eq!(of(json!("error")), Ok(protocol::request::Overflow::Reject));
        assert_eq!(of(json!("cut")), Err(400));
    }
}
