//! A worker's answers to work items from the queue (`serve --nats`): each item is sent
//! through the worker's own routes, in process, as the HTTP request it was at the gateway,
//! so it is read, validated, batched and answered exactly as a direct request would be.

use std::future::Future;
use std::pin::Pin;

use axum::body::Body;
use axum::http::{header, HeaderMap, HeaderValue, Method, Request};
use axum::Router;
use bytes::Bytes;
use protocol::ErrorCode;
use queue::{Answer, WorkItem};
use tower::ServiceExt;

use crate::error::ApiError;
use crate::respond::sie::error_response;

/// Bodies of answers are collected whole (a generate stream arrives at the gateway at its
/// end); this bounds one answer.
const MAX_ANSWER_BYTES: usize = 256 * 1024 * 1024;

/// The headers an answer carries back to the gateway.
const CARRIED: [&str; 8] = [
    "content-type",
    "retry-after",
    "x-queue-time",
    "x-tokenization-time",
    "x-inference-time",
    "x-postprocessing-time",
    "x-trace-id",
    "x-request-id",
];

/// Runs items on a worker's app (the router `server::router` builds).
pub struct QueueHandler {
    app: Router,
}

impl QueueHandler {
    pub fn new(app: Router) -> QueueHandler {
        QueueHandler { app }
    }
}

/// A path segment as it may appear in a URI: unreserved characters and `/` kept, the rest
/// percent-encoded.
fn escape(model: &str) -> String {
    let mut out = String::with_capacity(model.len());
    for b in model.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~/".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn headers_of(item: &WorkItem) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (name, value) in [
        (header::CONTENT_TYPE, &item.content_type),
        (header::ACCEPT, &item.accept),
    ] {
        if let Some(v) = value.as_deref().and_then(|v| HeaderValue::from_str(v).ok()) {
            h.insert(name, v);
        }
    }
    for (name, value) in [
        ("traceparent", item.traceparent.as_deref()),
        (
            "x-request-id",
            Some(item.request_id.as_str()).filter(|s| !s.is_empty()),
        ),
    ] {
        if let Some(v) = value.and_then(|v| HeaderValue::from_str(v).ok()) {
            h.insert(name, v);
        }
    }
    h
}

fn carried(h: &HeaderMap) -> Vec<(String, String)> {
    CARRIED
        .iter()
        .filter_map(|n| {
            let v = h.get(*n)?.to_str().ok()?;
            Some((n.to_string(), v.to_string()))
        })
        .collect()
}

async fn answer_of(resp: axum::response::Response) -> Answer {
    let status = resp.status().as_u16();
    let headers = carried(resp.headers());
    let body = axum::body::to_bytes(resp.into_body(), MAX_ANSWER_BYTES)
        .await
        .unwrap_or_else(|_| Bytes::new());
    Answer {
        status,
        headers,
        body,
    }
}

impl queue::Handler for QueueHandler {
    fn handle(&self, item: WorkItem) -> Pin<Box<dyn Future<Output = Answer> + Send>> {
        let app = self.app.clone();
        Box::pin(async move {
            let mut headers = headers_of(&item);
            // A body of known length, as the client sent it: the transport's large-body
            // slots are for bodies over 64 KiB or of unknown length.
            headers.insert(header::CONTENT_LENGTH, HeaderValue::from(item.body.len()));
            let mut req = Request::new(Body::from(item.body.clone()));
            *req.method_mut() = Method::POST;
            *req.headers_mut() = headers.clone();
            match item.route.path(&escape(&item.model)).parse() {
                Ok(uri) => *req.uri_mut() = uri,
                Err(_) => {
                    let e = ApiError::new(
                        ErrorCode::InvalidRequest,
                        "the model name does not make a path",
                    );
                    return answer_of(error_response(&headers, e)).await;
                }
            }
            match app.oneshot(req).await {
                Ok(resp) => answer_of(resp).await,
                Err(never) => match never {},
            }
        })
    }

    fn expired(&self, item: &WorkItem) -> Answer {
        refusal(
            item,
            ApiError::new(
                ErrorCode::DeadlineExceeded,
                "the request's deadline passed before a worker started it; it was not run",
            ),
        )
    }

    fn too_large(&self, item: &WorkItem, size: usize, max: usize) -> Answer {
        refusal(
            item,
            ApiError::new(
                ErrorCode::InternalError,
                format!(
                    "the answer is {size} bytes and NATS carries at most {max} in one message: \
                     send fewer items, or raise max_payload in the NATS server's configuration"
                ),
            ),
        )
    }
}

/// An error answered without running the item, in the form its caller asked for.
fn refusal(item: &WorkItem, e: ApiError) -> Answer {
    let resp = error_response(&headers_of(item), e);
    let status = resp.status().as_u16();
    let headers = carried(resp.headers());
    // An error body is rendered in memory: take it without a runtime.
    let body = futures_util::FutureExt::now_or_never(axum::body::to_bytes(
        resp.into_body(),
        MAX_ANSWER_BYTES,
    ))
    .and_then(Result::ok)
    .unwrap_or_default();
    Answer {
        status,
        headers,
        body,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_names_become_paths() {
        assert_eq!(escape("BAAI/bge-m3"), "BAAI/bge-m3");
        assert_eq!(escape("a b%"), "a%20b%25");
    }
}
