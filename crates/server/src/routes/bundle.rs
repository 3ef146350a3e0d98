//! `/v1/bundle`: several tasks (decisions, classify, embeddings, rerank) in one body, each
//! answered by the same core as its own endpoint, under one deadline.

use std::sync::Arc;
use std::time::Instant;

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use engine::Timings;
use protocol::error::ErrorCode;
use serde_json::{json, Value};

use crate::calls::decide::decisions_core;
use crate::calls::encode::{classify_core, deadline_only, embeddings_core, rerank_core, within};
use crate::calls::CoreResult;
use crate::error::{invalid, object, only, ApiError, Flavor};
use crate::respond::json::serve;
use crate::AppState;

/// Several tasks for one or more models in one call, answered in task order, each with the
/// status it would have had alone.
#[utoipa::path(post, path = "/v1/bundle", tag = "encoders",
    request_body = protocol::schema::BundleRequestDoc,
    responses(
        (status = 200, description = "Each task's status and body, in task order", body = protocol::schema::BundleResponseDoc),
        (status = 400, description = "invalid_request (too many tasks: reason bundle_tasks)", body = protocol::schema::ErrorDoc),
        (status = 408, description = "body_timeout: the body did not arrive within --body-timeout-ms", body = protocol::schema::ErrorDoc),
        (status = 413, description = "request_too_large", body = protocol::schema::ErrorDoc),
        (status = 415, description = "unsupported_media_type", body = protocol::schema::ErrorDoc),
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

const TASK_KINDS: &[&str] = &["decisions", "classify", "embeddings", "rerank"];

async fn run_task(
    state: &AppState,
    kind: &str,
    mut body: Value,
    deadline_ms: Option<u64>,
) -> CoreResult {
    match kind {
        "decisions" => {
            if let (Some(d), Some(o)) = (deadline_ms, body.as_object_mut()) {
                let opts = o.entry("options").or_insert_with(|| json!({}));
                if let Some(opts) = opts.as_object_mut() {
                    opts.entry("deadline_ms").or_insert(json!(d));
                }
            }
            decisions_core(state, &body).await
        }
        "classify" => classify_core(state, &body).await,
        "embeddings" => embeddings_core(state, &body).await,
        _ => rerank_core(state, &body).await,
    }
}

/// `POST /v1/bundle`.
pub(crate) async fn bundle_core(state: &AppState, body: &Value) -> CoreResult {
    let obj = object(body, "the request body")?;
    only(obj, &["tasks", "options"], "request")?;
    let tasks = match obj.get("tasks") {
        Some(Value::Array(t)) if !t.is_empty() => t,
        _ => return Err(invalid("tasks must be a non-empty list")),
    };
    let limit = state.config.max_bundle_tasks;
    if tasks.len() > limit {
        let mut e = ApiError::new(
            StatusCode::BAD_REQUEST,
            ErrorCode::InvalidRequest,
            format!(
                "the bundle has {} tasks; this process takes at most {limit}",
                tasks.len()
            ),
        )
        .with_reason(protocol::reason::BUNDLE_TASKS);
        e.limit = Some(limit as u64);
        return Err(e);
    }
    let deadline_ms = deadline_only(obj)?;
    let mut parsed = Vec::with_capacity(tasks.len());
    for (i, t) in tasks.iter().enumerate() {
        let t = object(t, &format!("tasks[{i}]"))?;
        let mut allowed = vec!["id"];
        allowed.extend_from_slice(TASK_KINDS);
        only(t, &allowed, &format!("tasks[{i}]"))?;
        let kinds: Vec<&str> = TASK_KINDS
            .iter()
            .copied()
            .filter(|k| t.contains_key(*k))
            .collect();
        let [kind] = kinds[..] else {
            return Err(invalid(format!(
                "tasks[{i}] needs exactly one of {}",
                TASK_KINDS.join(", ")
            )));
        };
        let id = t.get("id").cloned().unwrap_or(json!(i.to_string()));
        parsed.push((id, kind, t[kind].clone()));
    }
    let started = Instant::now();
    let futures = parsed.into_iter().map(|(id, kind, body)| async move {
        let run = run_task(state, kind, body, deadline_ms);
        // Decisions honour the deadline themselves (work not started is not run); other
        // tasks are cut off when it passes.
        let result = if kind == "decisions" {
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
                results.push(json!({"id": id, "type": kind, "status": 200, "body": body}));
            }
            Err(e) => results.push(json!({"id": id, "type": kind, "status": e.status.as_u16(),
                "body": e.body(Flavor::Internal)})),
        }
    }
    timings.tokenize = timings.tokenize.min(started.elapsed());
    Ok((json!({"results": results}), String::new(), timings))
}
