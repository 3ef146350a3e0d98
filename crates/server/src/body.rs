//! Request bodies: the byte limit, and one layer of gzip or zstd decoded within it.
//!
//! The limit applies to the body as sent and again while decoding: the decoder is read into a
//! buffer capped at the limit, so a small body that inflates past it is refused without ever
//! holding more than the limit of inflated bytes.

use std::io::Read;

use axum::body::{Body, Bytes};
use axum::http::{header, HeaderMap, StatusCode};
use protocol::assets::Parts;
use protocol::error::{reason, ErrorCode};

use crate::error::ApiError;

/// Why a body could not be read.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum BodyError {
    #[error("the body {what} is larger than --max-request-bytes ({limit} bytes)")]
    TooLarge { limit: usize, what: &'static str },
    #[error("{0}")]
    Unsupported(String),
    #[error("the compressed body does not decode: {0}")]
    Malformed(String),
    #[error("the multipart body does not read: {0}")]
    Multipart(String),
    #[error("the body did not arrive within --body-timeout-ms ({0} ms)")]
    TimedOut(u64),
}

impl From<BodyError> for ApiError {
    fn from(e: BodyError) -> ApiError {
        let message = e.to_string();
        match e {
            BodyError::TooLarge { limit, .. } => {
                let mut a = ApiError::new(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    ErrorCode::RequestTooLarge,
                    message,
                )
                .with_reason(reason::BODY_TOO_LARGE);
                a.limit = Some(limit as u64);
                a
            }
            BodyError::Unsupported(_) => ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                ErrorCode::UnsupportedMediaType,
                message,
            )
            .with_reason(reason::ENCODING_UNSUPPORTED),
            BodyError::Malformed(_) => {
                ApiError::new(StatusCode::BAD_REQUEST, ErrorCode::InvalidRequest, message)
                    .with_reason(reason::ENCODING_MALFORMED)
            }
            BodyError::Multipart(_) => {
                ApiError::new(StatusCode::BAD_REQUEST, ErrorCode::InvalidRequest, message)
                    .with_reason(reason::MULTIPART_MALFORMED)
            }
            BodyError::TimedOut(ms) => {
                let mut a = ApiError::new(
                    StatusCode::REQUEST_TIMEOUT,
                    ErrorCode::InvalidRequest,
                    message,
                )
                .with_reason(reason::BODY_TIMEOUT);
                a.limit = Some(ms);
                a
            }
        }
    }
}

/// The body did not arrive within `--body-timeout-ms` (the deadline, in milliseconds): the
/// error the transport's deadline puts in the body stream.
#[derive(Debug, thiserror::Error)]
#[error("the body did not arrive within {0} ms")]
pub(crate) struct BodyTimedOut(pub(crate) u64);

/// zstd frames may ask for a window of at most 8 MiB (2^23 bytes).
const ZSTD_WINDOW_LOG_MAX: u32 = 23;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Coding {
    Identity,
    Gzip,
    Zstd,
}

fn too_large(limit: usize, what: &'static str) -> BodyError {
    BodyError::TooLarge { limit, what }
}

fn unsupported(message: String) -> BodyError {
    BodyError::Unsupported(message)
}

/// The body's content coding: none, or one layer of gzip or zstd.
pub(crate) fn coding(headers: &HeaderMap) -> Result<Coding, BodyError> {
    let mut layers = Vec::new();
    for v in headers.get_all(header::CONTENT_ENCODING) {
        let v = v
            .to_str()
            .map_err(|_| unsupported("Content-Encoding is not readable text".into()))?;
        for part in v.split(',') {
            let p = part.trim().to_ascii_lowercase();
            if !p.is_empty() && p != "identity" {
                layers.push(p);
            }
        }
    }
    match layers.as_slice() {
        [] => Ok(Coding::Identity),
        [one] if one == "gzip" || one == "x-gzip" => Ok(Coding::Gzip),
        [one] if one == "zstd" => Ok(Coding::Zstd),
        [one] => Err(unsupported(format!(
            "Content-Encoding {one:?} is not read: send one layer of gzip or zstd"
        ))),
        many => Err(unsupported(format!(
            "Content-Encoding has {} layers ({}): send at most one layer of gzip or zstd",
            many.len(),
            many.join(", ")
        ))),
    }
}

/// Read at most `limit` bytes out of `reader`; more is `request_too_large`.
fn inflate(mut reader: impl Read, limit: usize) -> Result<Vec<u8>, BodyError> {
    // Room for the most that is read, reserved once: only the pages written become resident,
    // and no doubling reallocation copies the inflated bytes.
    let mut out = Vec::with_capacity(limit.saturating_add(1));
    let read = reader.by_ref().take(limit as u64 + 1).read_to_end(&mut out);
    match read {
        Ok(n) if n > limit => Err(too_large(limit, "once decoded")),
        Ok(_) => Ok(out),
        Err(e) => Err(BodyError::Malformed(e.to_string())),
    }
}

/// The deadline of a body that did not arrive in time, somewhere in `e`'s chain.
fn timed_out(e: &axum::Error) -> Option<u64> {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        if let Some(t) = err.downcast_ref::<BodyTimedOut>() {
            return Some(t.0);
        }
        cur = err.source();
    }
    None
}

/// The body's bytes as sent, within the byte limit and its deadline.
pub(crate) async fn raw(body: Body, limit: usize) -> Result<Bytes, BodyError> {
    axum::body::to_bytes(body, limit)
        .await
        .map_err(|e| match timed_out(&e) {
            Some(ms) => BodyError::TimedOut(ms),
            None => too_large(limit, "as sent"),
        })
}

/// Read the body within the byte limit, decoding one layer of gzip or zstd.
pub async fn read(headers: &HeaderMap, body: Body, limit: usize) -> Result<Bytes, BodyError> {
    let coding = coding(headers)?;
    let raw = raw(body, limit).await?;
    if coding == Coding::Identity {
        return Ok(raw);
    }
    let decode = move || {
        if coding == Coding::Gzip {
            return inflate(flate2::read::MultiGzDecoder::new(&raw[..]), limit);
        }
        let mut d = zstd::stream::read::Decoder::new(&raw[..])
            .map_err(|e| BodyError::Malformed(e.to_string()))?;
        d.window_log_max(ZSTD_WINDOW_LOG_MAX)
            .map_err(|e| BodyError::Malformed(e.to_string()))?;
        inflate(d, limit)
    };
    tokio::task::spawn_blocking(decode)
        .await
        .map_err(|e| BodyError::Malformed(format!("the decoder stopped: {e}")))?
        .map(Bytes::from)
}

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

/// Split a `multipart/form-data` body: the first part, `request`, holds the JSON request;
/// every other part is one asset's bytes, by part name. Any other body is the request itself.
pub async fn split(headers: &HeaderMap, body: Bytes) -> Result<(Bytes, Parts), BodyError> {
    let Some(boundary) = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .filter(|ct| {
            ct.trim_start()
                .to_ascii_lowercase()
                .starts_with("multipart/form-data")
        })
        .map(|ct| multer::parse_boundary(ct).map_err(|e| BodyError::Multipart(e.to_string())))
        .transpose()?
    else {
        return Ok((body, Parts::new()));
    };
    let stream = futures_util::stream::once(async move { Ok::<Bytes, std::io::Error>(body) });
    let mut form = multer::Multipart::new(stream, boundary);
    let bad = |e: multer::Error| BodyError::Multipart(e.to_string());
    let first = form
        .next_field()
        .await
        .map_err(bad)?
        .ok_or_else(|| BodyError::Multipart("the body has no parts".into()))?;
    if first.name() != Some("request") {
        return Err(BodyError::Multipart(format!(
            "the first part must be named request (the JSON request); it is {:?}",
            first.name().unwrap_or("")
        )));
    }
    let request = first.bytes().await.map_err(bad)?;
    let mut parts = Parts::new();
    while let Some(field) = form.next_field().await.map_err(bad)? {
        let name = field
            .name()
            .filter(|n| !n.is_empty())
            .ok_or_else(|| BodyError::Multipart("every part needs a name".into()))?
            .to_string();
        if name == "request" || parts.contains_key(&name) {
            return Err(BodyError::Multipart(format!(
                "two parts are named {name:?}"
            )));
        }
        let bytes = field.bytes().await.map_err(bad)?;
        parts.insert(name, bytes);
    }
    Ok((request, parts))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn gzip(data: &[u8]) -> Vec<u8> {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        e.write_all(data).unwrap();
        e.finish().unwrap()
    }

    fn headers(enc: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::CONTENT_ENCODING, enc.parse().unwrap());
        h
    }

    #[tokio::test]
    async fn gzip_and_zstd_decode_within_the_limit() {
        let json = br#"{"state": "x", "questions": {}}"#;
        let got = read(&headers("gzip"), Body::from(gzip(json)), 1000)
            .await
            .unwrap();
        assert_eq!(&got[..], json);
        let got = read(&headers("x-gzip"), Body::from(gzip(json)), 1000)
            .await
            .unwrap();
        assert_eq!(&got[..], json);
        let z = zstd::encode_all(&json[..], 3).unwrap();
        let got = read(&headers("zstd"), Body::from(z), 1000).await.unwrap();
        assert_eq!(&got[..], json);
    }

    #[tokio::test]
    async fn bombs_are_refused_at_the_limit() {
        let zeros = vec![b' '; 10 << 20];
        let bomb = gzip(&zeros);
        assert!(bomb.len() < 100_000);
        let e = read(&headers("gzip"), Body::from(bomb), 1 << 20)
            .await
            .unwrap_err();
        assert_eq!(
            e,
            BodyError::TooLarge {
                limit: 1 << 20,
                what: "once decoded"
            }
        );
        let z = zstd::encode_all(&zeros[..], 19).unwrap();
        let e = read(&headers("zstd"), Body::from(z), 1 << 20)
            .await
            .unwrap_err();
        let api = ApiError::from(e);
        assert_eq!(api.status, StatusCode::PAYLOAD_TOO_LARGE);
        assert_eq!(api.limit, Some(1 << 20));
    }

    #[tokio::test]
    async fn other_codings_and_stacked_layers_are_415() {
        for enc in ["br", "gzip, zstd", "deflate"] {
            let e = read(&headers(enc), Body::from("{}"), 1000)
                .await
                .unwrap_err();
            assert_eq!(
                ApiError::from(e).status,
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "{enc}"
            );
        }
        let e = ApiError::from(
            read(&headers("gzip"), Body::from("not gzip"), 1000)
                .await
                .unwrap_err(),
        );
        assert_eq!(e.status, StatusCode::BAD_REQUEST);
        assert_eq!(e.reason, Some("encoding_malformed"));
    }
}
