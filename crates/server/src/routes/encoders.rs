//! The worker's encoder endpoints: `/v1/embeddings` (OpenAI), `/v1/rerank`, `/v1/classify`.
//! Each reads its body and answers with its core (`calls::encode`), which a bundle task calls
//! too, so both answer alike.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;

use crate::calls::encode::{classify_core, embeddings_core, rerank_core};
use crate::respond::json::serve;
use crate::AppState;

/// OpenAI-compatible embeddings.
#[utoipa::path(post, path = "/v1/embeddings", tag = "encoders",
    request_body(content = protocol::encoder::EmbeddingsRequestWire, description = "input: a string, a list of strings, token ids or lists of token ids"),
    responses(
        (status = 200, description = "One vector per input", body = protocol::encoder::EmbeddingsResponseDoc),
        (status = 400, description = "invalid_request (input_too_long, parameter_unsupported, ...)", body = protocol::error::ErrorDoc),
        (status = 404, description = "model_not_found", body = protocol::error::ErrorDoc),
        (status = 408, description = "body_timeout: the body did not arrive within --body-timeout-ms", body = protocol::error::ErrorDoc),
        (status = 413, description = "request_too_large", body = protocol::error::ErrorDoc),
        (status = 415, description = "unsupported_media_type", body = protocol::error::ErrorDoc),
        (status = 422, description = "unsupported_surface: the model is no encoder", body = protocol::error::ErrorDoc),
        (status = 429, description = "overloaded", body = protocol::error::ErrorDoc),
        (status = 504, description = "deadline_exceeded: options.deadline_ms passed before the answer", body = protocol::error::ErrorDoc),
        (status = 503, description = "not_ready", body = protocol::error::ErrorDoc),
    ))]
pub async fn embeddings(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    serve(state, headers, body, "/v1/embeddings", |s, v| async move {
        embeddings_core(&s, &v).await
    })
    .await
}

/// Score documents against a query.
#[utoipa::path(post, path = "/v1/rerank", tag = "encoders",
    request_body = protocol::encoder::RerankRequestWire,
    responses(
        (status = 200, description = "Documents by relevance", body = protocol::encoder::RerankResponseDoc),
        (status = 400, description = "invalid_request", body = protocol::error::ErrorDoc),
        (status = 404, description = "model_not_found", body = protocol::error::ErrorDoc),
        (status = 408, description = "body_timeout: the body did not arrive within --body-timeout-ms", body = protocol::error::ErrorDoc),
        (status = 413, description = "request_too_large", body = protocol::error::ErrorDoc),
        (status = 415, description = "unsupported_media_type", body = protocol::error::ErrorDoc),
        (status = 429, description = "overloaded", body = protocol::error::ErrorDoc),
        (status = 504, description = "deadline_exceeded: options.deadline_ms passed before the answer", body = protocol::error::ErrorDoc),
        (status = 503, description = "not_ready", body = protocol::error::ErrorDoc),
    ))]
pub async fn rerank(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    serve(state, headers, body, "/v1/rerank", |s, v| async move {
        rerank_core(&s, &v).await
    })
    .await
}

/// Run a classification entry over inputs.
#[utoipa::path(post, path = "/v1/classify", tag = "encoders",
    request_body = protocol::encoder::ClassifyRequestWire,
    responses(
        (status = 200, description = "Labels per input (failed inputs answered in place)", body = protocol::encoder::ClassifyResponseDoc),
        (status = 400, description = "invalid_request", body = protocol::error::ErrorDoc),
        (status = 404, description = "model_not_found", body = protocol::error::ErrorDoc),
        (status = 408, description = "body_timeout: the body did not arrive within --body-timeout-ms", body = protocol::error::ErrorDoc),
        (status = 413, description = "request_too_large", body = protocol::error::ErrorDoc),
        (status = 415, description = "unsupported_media_type", body = protocol::error::ErrorDoc),
        (status = 422, description = "unsupported_surface", body = protocol::error::ErrorDoc),
        (status = 429, description = "overloaded", body = protocol::error::ErrorDoc),
        (status = 504, description = "deadline_exceeded: options.deadline_ms passed before the answer", body = protocol::error::ErrorDoc),
        (status = 503, description = "not_ready", body = protocol::error::ErrorDoc),
    ))]
pub async fn classify(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    serve(state, headers, body, "/v1/classify", |s, v| async move {
        classify_core(&s, &v).await
    })
    .await
}
