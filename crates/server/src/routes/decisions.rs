//! `/v1/decisions` (the internal form, failures in place), `/v1/systemone` (a failed question
//! fails the request) and `/v1/systemone/batch` (named requests, each answered alone).

use std::sync::Arc;
use std::time::Instant;

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use protocol::answer::DecisionResponse;
use protocol::answer::SystemOneBatchResponseDoc;
use protocol::assets::Parts;
use protocol::error::ErrorCode;
use protocol::error::ErrorDoc;
use protocol::request::{Schema, SystemOneBatch, SystemOneBatchWire};
use serde_json::{json, Value};

use crate::calls::decide::{answer, Call};
use crate::error::ApiError;
use crate::respond::json::respond;
use crate::timing::Phases;
use crate::AppState;
use protocol::DecisionEndpoint;

const LONG_CONTEXT_HEADER: &str = "typesafe-danger-zone-long-context";

async fn handle(
    state: Arc<AppState>,
    headers: HeaderMap,
    body: Body,
    endpoint: DecisionEndpoint,
) -> Response {
    let started = Instant::now();
    let schema = match endpoint {
        DecisionEndpoint::Decisions => Schema::Internal,
        _ => state.config.schema,
    };
    let flavor = crate::error::shape_of_path(endpoint.path(), schema);
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
        if endpoint == DecisionEndpoint::SystemOneBatch {
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
    let requests = SystemOneBatch::parse(&value)?.requests;
    let flavor = crate::error::shape_of_path(DecisionEndpoint::SystemOneBatch.path(), schema);
    let mut set = tokio::task::JoinSet::new();
    let count = requests.len();
    for (i, (name, req)) in requests.into_iter().enumerate() {
        let state = state.clone();
        set.spawn(async move {
            let mut p = Phases::default();
            let call = Call {
                schema,
                endpoint: DecisionEndpoint::SystemOneBatch,
                long_context,
                started,
                state_name: Some(&name),
                parts: &Parts::new(),
            };
            let r = answer(&state, &req, call, &mut p).await;
            (i, name, r, p)
        });
    }
    let mut out: Vec<(usize, String, Value)> = Vec::with_capacity(count);
    let mut model_name = String::new();
    while let Some(joined) = set.join_next().await {
        let (i, name, r, p) =
            joined.map_err(|e| ApiError::new(ErrorCode::InternalError, e.to_string()))?;
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
                let mut b = e.body(flavor);
                if let Some(o) = b.as_object_mut() {
                    o.insert("status".into(), json!(e.status_in(flavor).as_u16()));
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
    request_body(content = protocol::request::DecisionRequestWire, description = "A request in the internal form (also a batch in `states`, 4.0 forms, gzip/zstd bodies, multipart/form-data with the request first)"),
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
        (status = 504, description = "timeout: behind the router (serve), a model call past its deadline", body = ErrorDoc),
    ))]
pub async fn decisions(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    handle(state, headers, body, DecisionEndpoint::Decisions).await
}

/// Answer one System One request; a failed question fails the request.
#[utoipa::path(post, path = "/v1/systemone", tag = "decisions",
    request_body(content = protocol::request::DecisionRequestWire, description = "One System One request (gzip/zstd bodies and multipart/form-data with the request first are read)"),
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
    handle(state, headers, body, DecisionEndpoint::SystemOne).await
}

/// Named System One requests, each answered as it would be alone.
#[utoipa::path(post, path = "/v1/systemone/batch", tag = "decisions",
    request_body = SystemOneBatchWire,
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
        (status = 504, description = "timeout: behind the router (serve), a model call past its deadline", body = ErrorDoc),
        (status = 529, description = "overloaded (vllm-sr/5.0)", body = ErrorDoc),
    ))]
pub async fn systemone_batch(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    handle(state, headers, body, DecisionEndpoint::SystemOneBatch).await
}
