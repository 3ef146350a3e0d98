//! OpenAI's error answers as the OpenAPI document lists them, and server-sent events (one
//! `data:` line per chunk) for streamed generation.

use std::convert::Infallible;

use axum::body::{Body, Bytes};
use axum::http::{header, HeaderValue};
use axum::response::Response;

/// The error answers the OpenAI-compatible endpoints document, in OpenAI's body shape.
pub(crate) struct OpenAiErrors;

impl utoipa::IntoResponses for OpenAiErrors {
    fn responses() -> std::collections::BTreeMap<
        String,
        utoipa::openapi::RefOr<utoipa::openapi::response::Response>,
    > {
        use utoipa::openapi::{ContentBuilder, Ref, ResponseBuilder};
        [
            (
                "400",
                "Malformed or out-of-range request (param names the member)",
            ),
            ("404", "Unknown model (code model_not_found)"),
            ("408", "The body did not arrive in time"),
            ("413", "Body too large"),
            ("415", "Unsupported content encoding"),
            ("429", "Queue full; retry after Retry-After"),
            ("500", "The generation failed"),
            ("503", "Model not ready"),
        ]
        .into_iter()
        .map(|(status, description)| {
            let body = ContentBuilder::new()
                .schema(Some(Ref::from_schema_name("OpenAiErrorDoc")))
                .build();
            let r = ResponseBuilder::new()
                .description(description)
                .content("application/json", body)
                .build();
            (status.to_string(), r.into())
        })
        .collect()
    }
}

pub(crate) fn sse_response(
    stream: impl futures_util::Stream<Item = Result<Bytes, Infallible>> + Send + 'static,
) -> Response {
    let mut r = Response::new(Body::from_stream(stream));
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    r
}

pub(crate) fn data<T: serde::Serialize>(v: &T) -> Bytes {
    let mut out = b"data: ".to_vec();
    out.extend(serde_json::to_vec(v).unwrap_or_default());
    out.extend_from_slice(b"\n\n");
    Bytes::from(out)
}
