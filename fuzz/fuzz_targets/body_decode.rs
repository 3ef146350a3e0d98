//! A request body as any face reads it (`body::read`, then `body::split`): the first byte
//! picks the Content-Encoding and Content-Type, the rest is the body. No input may panic,
//! hang, or hold more than the limit once decoded.
#![no_main]

use axum::body::Body;
use axum::http::{header, HeaderMap, HeaderValue};
use libfuzzer_sys::fuzz_target;

const LIMIT: usize = 1 << 20;

fuzz_target!(|data: &[u8]| {
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    let mut headers = HeaderMap::new();
    let coding =
        ["identity", "gzip", "x-gzip", "zstd", "gzip, zstd", "br"][(pick & 7) as usize % 6];
    headers.insert(header::CONTENT_ENCODING, HeaderValue::from_static(coding));
    if pick & 8 != 0 {
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("multipart/form-data; boundary=b"),
        );
    }
    let Ok(rt) = tokio::runtime::Builder::new_current_thread().build() else {
        return;
    };
    rt.block_on(async {
        if let Ok(bytes) = body::read(&headers, Body::from(rest.to_vec()), LIMIT).await {
            assert!(bytes.len() <= LIMIT);
            let _ = body::split(&headers, bytes).await;
        }
    });
});
