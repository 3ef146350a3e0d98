//! What every benchmark shares: medians and percentiles, timing one request, serving in this
//! process, resident memory.

use std::time::{Duration, Instant};

use serde_json::Value;

pub(crate) fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// [`median`] of rates and other figures: the middle value, the upper one of an even count.
pub(crate) fn median_of(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

pub(crate) fn pct(mut v: Vec<Duration>, p: f64) -> Duration {
    v.sort();
    let i = ((v.len() as f64 - 1.0) * p).round() as usize;
    v[i.min(v.len() - 1)]
}

pub(crate) async fn time_request(
    client: &reqwest::Client,
    url: &str,
    body: &Value,
) -> anyhow::Result<Duration> {
    let t = Instant::now();
    let resp = client.post(url).json(body).send().await?;
    let status = resp.status();
    let text = resp.text().await?;
    if !status.is_success() {
        return Err(anyhow::anyhow!("{status}: {text}"));
    }
    Ok(t.elapsed())
}

pub(crate) fn raw_threads() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(2)
}

/// Start a server in this process; return its registry and base URL.
pub(crate) async fn serve_in_process(
    o: vllm_srun::ServeOptions,
) -> anyhow::Result<(std::sync::Arc<engine::Registry>, String)> {
    let bound = vllm_srun::bind(o).await?;
    let registry = bound.registry.clone();
    let base = format!("http://{}", bound.addr);
    tokio::spawn(bound.run());
    Ok((registry, base))
}

/// Serve one decision model in this process on a free port; the model once loaded, and the
/// server's base URL.
pub(crate) async fn serve_decision_model(
    model_spec: &str,
) -> anyhow::Result<(std::sync::Arc<engine::DecisionModel>, String)> {
    let o = vllm_srun::ServeOptions {
        models: vec![model_spec.to_string()],
        port: 0,
        ..vllm_srun::ServeOptions::default()
    };
    let (registry, base) = serve_in_process(o).await?;
    let model = wait(|| registry.ready(None)).await?;
    Ok((model, base))
}

/// Poll `get` until the model it looks up is loaded.
pub(crate) async fn wait<T>(get: impl Fn() -> Result<T, engine::EngineError>) -> anyhow::Result<T> {
    loop {
        match get() {
            Ok(m) => return Ok(m),
            Err(engine::EngineError::NotReady(_) | engine::EngineError::NotLoaded(_)) => {
                tokio::time::sleep(Duration::from_millis(100)).await
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// Resident memory of this process, in bytes.
pub(crate) fn rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| {
            s.split_whitespace()
                .nth(1)
                .and_then(|p| p.parse::<u64>().ok())
        })
        .map_or(0, |pages| pages * 4096)
}

/// Run `f` while sampling resident memory every 2 ms; return its result and the peak growth.
pub(crate) async fn peak_rss<T>(f: impl std::future::Future<Output = T>) -> (T, u64) {
    let base = rss_bytes();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let peak = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(base));
    let sampler = {
        let (stop, peak) = (stop.clone(), peak.clone());
        std::thread::spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                peak.fetch_max(rss_bytes(), std::sync::atomic::Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(2));
            }
        })
    };
    let out = f.await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let _ = sampler.join();
    let grown = peak
        .load(std::sync::atomic::Ordering::Relaxed)
        .saturating_sub(base);
    (out, grown)
}

/// The first eight bytes of a digest, in hex.
pub(crate) fn hex_short(d: &[u8]) -> String {
    d.iter().take(8).map(|b| format!("{b:02x}")).collect()
}
