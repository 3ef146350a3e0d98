//! `/v1/bundle`: several tasks (decisions, classify, embeddings, rerank) in one body, each
//! answered by the same core as its own endpoint, under one deadline.

use std::sync::Arc;
use std::time::Instant;

use axum::body::Body;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use engine::Timings;
use protocol::bundle::{BundleRequest, BundleTask, TaskKind};
use serde_json::{json, Value};

use crate::calls::decide::decisions_core;
use crate::calls::encode::{classify_core, embeddings_core, rerank_core, within};
use crate::calls::CoreResult;
use crate::error::Shape;
use crate::respond::json::serve;
use crate::AppState;

/// Several tasks for one or more models in one call, answered in task order, each with the
/// status it would have had alone.
#[utoipa::path(post, path = "/v1/bundle", tag = "encoders",
    request_body = protocol::bundle::BundleRequestWire,
    responses(
        (status = 200, description = "Each task's status and body, in task order", body = protocol::bundle::BundleResponseDoc),
        (status = 400, description = "invalid_request (too many tasks: reason bundle_tasks)", body = protocol::error::ErrorDoc),
        (status = 408, description = "body_timeout: the body did not arrive within --body-timeout-ms", body = protocol::error::ErrorDoc),
        (status = 413, description = "request_too_large", body = protocol::error::ErrorDoc),
        (status = 415, description = "unsupported_media_type", body = protocol::error::ErrorDoc),
    ))]
pub async fn bundle(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    serve(state, headers, body, "/v1/bundle", |s, v| async move {
        bundle_core(&s, &v).await
    })
    .await
}

async fn run_task(
    state: &AppState,
    kind: TaskKind,
    mut body: Value,
    deadline_ms: Option<u64>,
) -> CoreResult {
    match kind {
        TaskKind::Decisions => {
            if let (Some(d), Some(o)) = (deadline_ms, body.as_object_mut()) {
                let opts = o.entry("options").or_insert_with(|| json!({}));
                if let Some(opts) = opts.as_object_mut() {
                    opts.entry("deadline_ms").or_insert(json!(d));
                }
            }
            decisions_core(state, &body).await
        }
        TaskKind::Classify => classify_core(state, &body).await,
        TaskKind::Embeddings => embeddings_core(state, &body).await,
        TaskKind::Rerank => rerank_core(state, &body).await,
    }
}

/// `POST /v1/bundle`.
pub(crate) async fn bundle_core(state: &AppState, body: &Value) -> CoreResult {
    let BundleRequest { tasks, deadline_ms } =
        BundleRequest::parse(body, state.config.max_bundle_tasks)?;
    let started = Instant::now();
    let futures = tasks
        .into_iter()
        .map(|BundleTask { id, kind, body }| async move {
            let run = run_task(state, kind, body, deadline_ms);
            // Decisions honour the deadline themselves (work not started is not run); other
            // tasks are cut off when it passes.
            let result = if kind == TaskKind::Decisions {
                run.await
            } else {
                within(deadline_ms, run).await
            };
            (id, kind, result)
        });
    let done = futures_util::future::join_all(futures).await;
    let mut timings = Timings::default();
    let mut results = Vec::with_capacity(done.len());
    for (id, kind, r) in done {
        match r {
            Ok((body, _, t)) => {
                timings = t;
                results.push(json!({"id": id, "type": kind.as_str(), "status": 200, "body": body}));
            }
            Err(e) => results.push(
                json!({"id": id, "type": kind.as_str(), "status": e.status_in(Shape::Internal).as_u16(),
                "body": e.body(Shape::Internal)}),
            ),
        }
    }
    timings.tokenize = timings.tokenize.min(started.elapsed());
    Ok((json!({"results": results}), String::new(), timings))
}
