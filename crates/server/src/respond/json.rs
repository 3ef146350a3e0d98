//! JSON answers of the worker's endpoints (decisions, System One, encoders, bundle, models,
//! health): the body, `Server-Timing`, the phase histograms and the request counter; errors
//! rendered in the endpoint's family (internal, vllm-sr/4.0, vllm-sr/5.0, OpenAI).

use std::sync::Arc;
use std::time::Instant;

use axum::body::Body;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use crate::calls::CoreResult;
use crate::error::{ApiError, Shape};
use crate::timing::Phases;
use crate::AppState;

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

pub(crate) fn error_response(err: &ApiError, flavor: Shape, phases: Option<&Phases>) -> Response {
    let mut resp = err.response(flavor);
    if let Some(p) = phases {
        if let Ok(v) = HeaderValue::from_str(&p.header()) {
            resp.headers_mut().insert("server-timing", v);
        }
    }
    resp
}

/// Serialize an answer or render an error in `flavor`, with Server-Timing; record the phase
/// histograms and the request counter. The one tail of every JSON worker endpoint.
pub(crate) fn respond(
    result: Result<(StatusCode, Value, String), ApiError>,
    flavor: Shape,
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
            phases.serialize = t_ser.elapsed();
            phases.total = started.elapsed();
            (
                error_response(&e, flavor, Some(&phases)),
                String::new(),
                e.status_in(flavor),
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

/// Read a JSON body within the limits and answer it with `core`, with Server-Timing, metrics
/// and the internal error shape.
pub(crate) async fn serve<F, Fut>(
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
    let mut phases = Phases::default();
    let result = async {
        let value = crate::body::value(&headers, body, state.config.max_request_bytes, |b| {
            serde_json::from_slice(b).map_err(|e| ApiError::bad_json(&e))
        })
        .await?;
        phases.parse = started.elapsed();
        core(state.clone(), value).await
    }
    .await;
    let result = result.map(|(value, model, timings)| {
        phases.engine = timings;
        (StatusCode::OK, value, model)
    });
    respond(result, Shape::Internal, started, phases, path)
}
