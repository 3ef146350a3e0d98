//! Request bodies, read once for every face of the service (the worker, the router and the
//! keys guard): the byte limit, one layer of gzip or zstd decoded within it, and the
//! `multipart/form-data` form the System One SDKs send media in.
//!
//! The limit applies to the body as sent and again while decoding: the decoder is read into a
//! buffer capped at the limit, so a small body that inflates past it is refused without ever
//! holding more than the limit of inflated bytes. A [`BodyError`] names the limit it broke;
//! the `errors` crate gives it its status, code and reason word.

use std::io::Read;

use axum::body::{Body, Bytes};
use axum::http::{header, HeaderMap};

/// Every asset part of a multipart body, by part name.
pub type Parts = std::collections::BTreeMap<String, Bytes>;

/// Why a body could not be read.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum BodyError {
    #[error("the body {what} is larger than the limit of {limit} bytes")]
    TooLarge { limit: usize, what: &'static str },
    #[error("{0}")]
    Unsupported(String),
    #[error("the compressed body does not decode: {0}")]
    Malformed(String),
    #[error("the multipart body does not read: {0}")]
    Multipart(String),
    #[error("the body did not arrive within its deadline of {0} ms")]
    TimedOut(u64),
}

impl BodyError {
    /// The limit the body broke: bytes, or the deadline in milliseconds.
    pub fn limit(&self) -> Option<u64> {
        match self {
            BodyError::TooLarge { limit, .. } => Some(*limit as u64),
            BodyError::TimedOut(ms) => Some(*ms),
            _ => None,
        }
    }
}

/// The body did not arrive within `--body-timeout-ms` (the deadline, in milliseconds): the
/// error the transport's deadline puts in the body stream.
#[derive(Debug, thiserror::Error)]
#[error("the body did not arrive within {0} ms")]
pub struct BodyTimedOut(pub u64);

/// zstd frames may ask for a window of at most 8 MiB (2^23 bytes).
const ZSTD_WINDOW_LOG_MAX: u32 = 23;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Coding {
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
pub fn coding(headers: &HeaderMap) -> Result<Coding, BodyError> {
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
pub async fn raw(body: Body, limit: usize) -> Result<Bytes, BodyError> {
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

/// A `multipart/form-data` body in the form [`split`] reads: the `request` part first, then
/// one part per asset. Returns the body and its `Content-Type` (with the boundary). A face
/// that passes a request on (the router to a worker) sends the parts it read this way.
pub fn form(request: &[u8], parts: &Parts) -> (String, Bytes) {
    let boundary = format!("vsr-{}", uuid::Uuid::new_v4().simple());
    let mut out =
        Vec::with_capacity(request.len() + parts.values().map(Bytes::len).sum::<usize>() + 512);
    let mut part = |name: &str, content_type: &str, bytes: &[u8]| {
        out.extend_from_slice(format!("--{boundary}\r\n").as_bytes());
        out.extend_from_slice(
            format!("Content-Disposition: form-data; name=\"{name}\"\r\nContent-Type: {content_type}\r\n\r\n")
                .as_bytes(),
        );
        out.extend_from_slice(bytes);
        out.extend_from_slice(b"\r\n");
    };
    part("request", "application/json", request);
    for (name, bytes) in parts {
        part(name, "application/octet-stream", bytes);
    }
    out.extend_from_slice(format!("--{boundary}--\r\n").as_bytes());
    (
        format!("multipart/form-data; boundary={boundary}"),
        Bytes::from(out),
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::io::Write;

    fn gzip(data: &[u8]) -> Vec<u8> {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        e.write_all(data).unwrap();
        e.finish().unwrap()
    }

    fn headers(name: header::HeaderName, v: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(name, v.parse().unwrap());
        h
    }

    fn coded(enc: &str) -> HeaderMap {
        headers(header::CONTENT_ENCODING, enc)
    }

    #[tokio::test]
    async fn gzip_and_zstd_decode_within_the_limit() {
        let json = br#"{"state": "x", "questions": {}}"#;
        for enc in ["gzip", "x-gzip", "GZIP"] {
            let got = read(&coded(enc), Body::from(gzip(json)), 1000)
                .await
                .unwrap();
            assert_eq!(&got[..], json, "{enc}");
        }
        let z = zstd::encode_all(&json[..], 3).unwrap();
        let got = read(&coded("zstd"), Body::from(z), 1000).await.unwrap();
        assert_eq!(&got[..], json);
        let got = read(&coded("identity"), Body::from(&json[..]), 1000)
            .await
            .unwrap();
        assert_eq!(&got[..], json);
    }

    #[tokio::test]
    async fn bombs_are_refused_at_the_limit() {
        let zeros = vec![b' '; 10 << 20];
        let bomb = gzip(&zeros);
        assert!(bomb.len() < 100_000);
        let too_large = BodyError::TooLarge {
            limit: 1 << 20,
            what: "once decoded",
        };
        let e = read(&coded("gzip"), Body::from(bomb), 1 << 20)
            .await
            .unwrap_err();
        assert_eq!(e, too_large);
        let z = zstd::encode_all(&zeros[..], 19).unwrap();
        let e = read(&coded("zstd"), Body::from(z), 1 << 20)
            .await
            .unwrap_err();
        assert_eq!(e, too_large);
        let e = read(&HeaderMap::new(), Body::from(zeros), 1 << 20)
            .await
            .unwrap_err();
        assert_eq!(
            e,
            BodyError::TooLarge {
                limit: 1 << 20,
                what: "as sent"
            }
        );
    }

    #[tokio::test]
    async fn other_codings_stacked_layers_and_bad_bytes_are_refused() {
        for enc in ["br", "gzip, zstd", "deflate"] {
            let e = read(&coded(enc), Body::from("{}"), 1000).await.unwrap_err();
            assert!(matches!(e, BodyError::Unsupported(_)), "{enc}: {e:?}");
        }
        let e = read(&coded("gzip"), Body::from("not gzip"), 1000)
            .await
            .unwrap_err();
        assert!(matches!(e, BodyError::Malformed(_)), "{e:?}");
    }

    #[tokio::test]
    async fn a_form_reads_back_as_it_was_written() {
        let mut parts = Parts::new();
        parts.insert(
            "photo".into(),
            Bytes::from_static(b"\x89PNG\r\n--not a boundary"),
        );
        parts.insert("clip".into(), Bytes::from_static(b""));
        let request = br#"{"state": "<photo>"}"#;
        let (ct, body) = form(request, &parts);
        let (got, got_parts) = split(&headers(header::CONTENT_TYPE, &ct), body)
            .await
            .unwrap();
        assert_eq!(&got[..], request);
        assert_eq!(got_parts, parts);
        // Not multipart: the body is the request itself.
        let (got, none) = split(&HeaderMap::new(), Bytes::from_static(b"{}"))
            .await
            .unwrap();
        assert_eq!((&got[..], none.len()), (&b"{}"[..], 0));
        // The request part must come first.
        let (ct, body) = form(b"{}", &parts);
        let body = Bytes::from(String::from_utf8_lossy(&body).replacen(
            "name=\"request\"",
            "name=\"other\"",
            1,
        ));
        let e = split(&headers(header::CONTENT_TYPE, &ct), body)
            .await
            .unwrap_err();
        assert!(matches!(e, BodyError::Multipart(_)), "{e:?}");
    }
}
