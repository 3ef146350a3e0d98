//! Compressed bodies that inflate far past the limit. Alone in its own test binary, so the
//! process's resident memory measures this server and nothing else.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;

use axum::body::Body;
use axum::http::{header, Request};
use common::{fake_registry, yes_over_no, CONTEXT_TOKENS};
use engine::registry::Registry;
use serde_json::Value;
use server::ServerConfig;
use tower::ServiceExt;

fn registry() -> Arc<Registry> {
    fake_registry(CONTEXT_TOKENS, Default::default(), yes_over_no())
}

/// POST a coded body to `/v1/decisions`: the status and the JSON body.
async fn post(app: axum::Router, body: Vec<u8>, coding: &str) -> (u16, Value) {
    let req = Request::post("/v1/decisions")
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::CONTENT_ENCODING, coding)
        .body(Body::from(body))
        .unwrap();
    let resp = app.oneshot(req).await.unwrap();
    let status = resp.status().as_u16();
    let bytes = axum::body::to_bytes(resp.into_body(), usize::MAX)
        .await
        .unwrap();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

fn rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|kb| kb.parse::<u64>().ok())
        .map(|kb| kb * 1024)
        .unwrap_or(0)
}

#[tokio::test]
async fn compressed_bombs_are_413_without_holding_the_inflated_bytes() {
    use std::io::Write;
    let limit = 4 << 20;
    let app = server::router(
        registry(),
        ServerConfig {
            max_request_bytes: limit,
            ..ServerConfig::default()
        },
    );
    let chunk = vec![b' '; 1 << 20];
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    let mut zs = zstd::stream::write::Encoder::new(Vec::new(), 1).unwrap();
    for w in [&mut gz as &mut dyn Write, &mut zs as &mut dyn Write] {
        w.write_all(b"{\"state\": \"").unwrap();
        for _ in 0..1024 {
            w.write_all(&chunk).unwrap();
        }
    }
    let gz = gz.finish().unwrap();
    let zs = zs.finish().unwrap();
    assert!(zs.len() < 100_000, "zstd bomb is {} bytes", zs.len());
    // DEFLATE cannot beat about 1:1032, so a gzip body that inflates to 1 GiB is about 1 MiB.
    assert!(gz.len() < limit, "gzip bomb is {} bytes", gz.len());
    for (enc, body) in [("gzip", gz), ("zstd", zs)] {
        let idle = rss_bytes();
        // Without /proc the measurement below would pass on zeros.
        assert!(idle > 0, "resident memory cannot be read here");
        let peak = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(idle));
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let sampler = {
            let (peak, stop) = (peak.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    peak.fetch_max(rss_bytes(), std::sync::atomic::Ordering::Relaxed);
                    std::thread::sleep(std::time::Duration::from_millis(2));
                }
            })
        };
        let (status, v) = post(app.clone(), body, enc).await;
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        sampler.join().unwrap();
        assert_eq!(status, 413, "{enc}: {v}");
        assert_eq!(v["error"]["code"], "request_too_large");
        assert_eq!(v["error"]["limit"], limit as u64);
        let grew = peak
            .load(std::sync::atomic::Ordering::Relaxed)
            .saturating_sub(idle);
        // The output held is at most the limit; a zstd decoder also holds its window (up to
        // 8 MiB, the server's window cap), which the first zstd body allocates.
        let window = if enc == "zstd" { 8 << 20 } else { 0 };
        assert!(
            grew < 2 * limit as u64 + window,
            "{enc}: resident memory grew by {grew} bytes"
        );
    }
}
