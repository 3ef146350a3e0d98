//! The listing and the process's own state: `/v1/models`, `/v1/systemone/models`, `/health`,
//! `/health/live`, `/metrics`, and the answer for a route that does not exist.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use engine::ModelState;
use protocol::listing::{HealthDoc, ModelListDoc};
use serde_json::{json, Value};

use crate::cards::{listing_entry, stalled, surfaces};
use crate::error::{ApiError, Shape};
use crate::respond::json::{error_response, json_response};
use crate::AppState;

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
    let status = errors::probe(overall == "ready");
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

/// Liveness: 503 `stalled` while a forward outruns --forward-timeout-seconds.
#[utoipa::path(get, path = "/health/live", tag = "health",
    responses((status = 200, description = "Alive", body = HealthDoc),
        (status = 503, description = "Stalled", body = HealthDoc)))]
pub async fn live(State(state): State<Arc<AppState>>) -> Response {
    let limit = state.config.forward_timeout;
    let (status, body) = match stalled(&state) {
        Some((name, running)) => (
            errors::probe(false),
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
            metrics::gauge!("vllm_srun_cancelled_jobs", "model" => name.clone())
                .set(st.cancelled() as f64);
            metrics::gauge!("vllm_srun_prefix_cache_hit_tokens", "model" => name.clone())
                .set(st.cached_tokens() as f64);
            metrics::gauge!("vllm_srun_prefix_cache_bytes", "model" => name)
                .set(st.cache_bytes() as f64);
        }
        if let Some(g) = s.text().and_then(|t| t.running()) {
            let st = g.status();
            let name = s.meta().name.clone();
            metrics::gauge!("vllm_srun_generation_active_sequences", "model" => name.clone())
                .set(st.active() as f64);
            metrics::gauge!("vllm_srun_generation_waiting", "model" => name.clone())
                .set(st.waiting() as f64);
            metrics::gauge!("vllm_srun_generation_cancelled", "model" => name.clone())
                .set(st.cancelled() as f64);
            metrics::gauge!("vllm_srun_generation_cached_prompt_tokens", "model" => name)
                .set(st.cached_tokens() as f64);
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
    error_response(&ApiError::no_route(), Shape::Internal, None)
}
