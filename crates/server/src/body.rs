//! Request bodies as the worker reads them: the shared `body` crate decodes (limits, codings,
//! multipart); this module maps its errors to the worker's error shape.

use axum::body::Body;
use axum::http::HeaderMap;

pub use ::body::{coding, raw, read, split, BodyError, BodyTimedOut, Coding};

use crate::error::ApiError;

/// Read a body within the limits and decode it with `decode` (JSON, msgpack, ...); the body's
/// bytes are dropped once decoded.
pub async fn value(
    headers: &HeaderMap,
    body: Body,
    limit: usize,
    decode: impl FnOnce(&[u8]) -> Result<serde_json::Value, ApiError>,
) -> Result<serde_json::Value, ApiError> {
    let bytes = read(headers, body, limit).await.map_err(ApiError::from)?;
    decode(&bytes)
}
