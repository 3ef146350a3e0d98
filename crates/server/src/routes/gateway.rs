//! The SIE gateway (`vllm-srun gateway`): `/v1/encode/{model}`, `/v1/score/{model}`,
//! `/v1/extract/{model}` and `/v1/generate/{model}` published as work items to NATS
//! JetStream and answered by whichever worker pulls them; `/healthz`, `/readyz`, `/livez`.
//!
//! The body goes through as the client sent it (after one layer of gzip or zstd is
//! decoded), so a worker reads, validates and answers it exactly as its own HTTP route would:
//! the gateway adds no second reading of SIE requests. What the gateway itself refuses is in
//! SIE's error shape: a body over the limit (413), a model no worker serves (404
//! `MODEL_NOT_FOUND`), no answer by the deadline (504 `DEADLINE_EXCEEDED`), NATS unreachable
//! (503 `MODEL_NOT_LOADED`, Retry-After 1).

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use protocol::ErrorCode;
use queue::{Answer, QueueError, Route, WorkItem};

use crate::error::ApiError;
use crate::respond::sie::{error_response, ms};

/// What the gateway's routes share.
pub(crate) struct GatewayState {
    pub gateway: queue::Gateway,
    pub max_request_bytes: usize,
    /// How long a request may wait for its answer, the time in the queue included.
    pub timeout: Duration,
    pub metrics: metrics_exporter_prometheus::PrometheusHandle,
}

fn header_text(headers: &HeaderMap, name: impl header::AsHeaderName) -> Option<String> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

/// The error a queue failure is answered with.
pub(crate) fn queue_error(e: QueueError) -> ApiError {
    match e {
        QueueError::NoWorkers(model) => ApiError::new(
            ErrorCode::ModelNotFound,
            format!("Model '{model}' not found: no worker behind this gateway serves it"),
        ),
        QueueError::Timeout => ApiError::new(
            ErrorCode::DeadlineExceeded,
            "no worker answered before the request's deadline",
        ),
        QueueError::Connect(m) | QueueError::Unavailable(m) => ApiError::new(
            ErrorCode::NotReady,
            format!("the work queue is unavailable: {m}"),
        ),
        QueueError::TooLarge { .. } => ApiError::new(ErrorCode::RequestTooLarge, e.to_string()),
        QueueError::Internal(m) => ApiError::new(ErrorCode::InternalError, m),
    }
}

/// The worker's answer as the client's response.
fn response_of(a: Answer) -> Response {
    let status = StatusCode::from_u16(a.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut r = (status, a.body).into_response();
    let h = r.headers_mut();
    for (name, value) in a.headers {
        if let (Ok(n), Ok(v)) = (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_str(&value),
        ) {
            h.insert(n, v);
        }
    }
    r
}

async fn forward(
    state: Arc<GatewayState>,
    route: Route,
    model: String,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let started = Instant::now();
    let result = async {
        let body = crate::body::read(&headers, body, state.max_request_bytes)
            .await
            .map_err(ApiError::from)?;
        let item = WorkItem {
            id: uuid::Uuid::new_v4().simple().to_string(),
            request_id: header_text(&headers, "x-request-id").unwrap_or_default(),
            route,
            model,
            content_type: header_text(&headers, header::CONTENT_TYPE),
            accept: header_text(&headers, header::ACCEPT),
            traceparent: header_text(&headers, "traceparent"),
            body,
            deadline_ms: queue::now_ms() + state.timeout.as_millis() as u64,
            reply: String::new(),
        };
        state.gateway.submit(item).await.map_err(queue_error)
    }
    .await;
    let mut resp = match result {
        Ok(a) => response_of(a),
        Err(e) => error_response(&headers, e),
    };
    // The client's total is the gateway's: the time in the queue and on the way back count.
    if let Ok(v) = HeaderValue::from_str(&ms(started.elapsed())) {
        resp.headers_mut().insert("x-total-time", v);
    }
    let status = resp.status().as_u16().to_string();
    metrics::counter!("sie_gateway_requests_total", "endpoint" => route.word(), "status" => status)
        .increment(1);
    metrics::histogram!("sie_gateway_request_duration_seconds", "endpoint" => route.word())
        .record(started.elapsed().as_secs_f64());
    resp
}

macro_rules! through_queue {
    ($name:ident, $route:expr, $path:literal) => {
        #[doc = concat!("`POST ", $path, "` through the queue.")]
        pub(crate) async fn $name(
            State(state): State<Arc<GatewayState>>,
            Path(model): Path<String>,
            headers: HeaderMap,
            body: Body,
        ) -> Response {
            forward(state, $route, model, headers, body).await
        }
    };
}

through_queue!(encode, Route::Encode, "/v1/encode/{model}");
through_queue!(score, Route::Score, "/v1/score/{model}");
through_queue!(extract, Route::Extract, "/v1/extract/{model}");
through_queue!(generate, Route::Generate, "/v1/generate/{model}");

fn text(status: StatusCode, s: &'static str) -> Response {
    (status, [(header::CONTENT_TYPE, "text/plain")], s).into_response()
}

/// `GET /healthz` and `/livez`: the process runs.
pub(crate) async fn healthz() -> Response {
    text(StatusCode::OK, "ok")
}

/// `GET /readyz`: the gateway can accept requests (its NATS connection is up); it does not
/// wait for workers, as sie-api says of the gateway.
pub(crate) async fn readyz(State(state): State<Arc<GatewayState>>) -> Response {
    let ready = state.gateway.connected();
    text(errors::probe(ready), if ready { "ok" } else { "not ready" })
}

/// `GET /metrics`: the gateway's counters in Prometheus text (`sie_gateway_requests_total`,
/// `sie_gateway_request_duration_seconds`, `sie_gateway_unclaimed_answers_total`).
pub(crate) async fn metrics(State(state): State<Arc<GatewayState>>) -> Response {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        state.metrics.render(),
    )
        .into_response()
}
