//! Embeddings throughput of an encoder against its alternatives.

use std::time::Instant;

use serde_json::json;

use crate::common::*;

/// Embeddings throughput: texts/s and tokens/s at batch 1, 8 and 32 of 64-token texts, over
/// HTTP (`/v1/embeddings`, the served path) and straight through each candidate forward (the
/// F32 candle path as the baseline, llama.cpp on GGUF copies of the weights), side by side in
/// one process, with each candidate's lowest cosine against the F32 candle vectors.
pub async fn embeddings(model_spec: &str, texts_per_level: usize) -> anyhow::Result<()> {
    let o = vllm_srun::ServeOptions {
        models: vec![model_spec.to_string()],
        port: 0,
        ..vllm_srun::ServeOptions::default()
    };
    let (registry, base) = serve_in_process(o).await?;
    let model = wait(|| registry.encoder(None)).await?;
    let resolved = hub::resolve(model_spec, false)?;
    let dir = resolved
        .dir
        .ok_or_else(|| anyhow::anyhow!("an encoder is a directory"))?;
    let threads = raw_threads();
    use backend_candle::gguf::Precision;
    let mut candidates: Vec<(String, Box<dyn engine::Encoder>)> = vec![(
        "candle F32".into(),
        Box::new(backend_candle::BertEncoder::load(&dir)?),
    )];
    let pooling = model.info().pooling.clone();
    // Hashed once: each candidate's GGUF copy is keyed by it.
    let sha = hub::sha256_file(&dir.join("model.safetensors"))?;
    for (precision, flash) in [
        (Precision::F32, true),
        (Precision::F32, false),
        (Precision::F16, true),
        (Precision::Q8_0, true),
    ] {
        let gguf = vllm_srun::encoder_gguf(&dir, Some(&sha), &pooling, precision)?;
        let text = backend_candle::BertEncoder::load_text(&dir)?;
        let config = backend_llama::LlamaEncoderConfig {
            threads,
            flash_attention: flash,
            dtype: precision.name().into(),
            ..Default::default()
        };
        let enc = backend_llama::LlamaEncoder::load(&gguf, text, config)?;
        let name = format!(
            "llama.cpp {}{}",
            precision.name(),
            if flash { ", flash attention" } else { "" }
        );
        candidates.push((name, Box::new(enc)));
    }
    // Texts of exactly 64 tokens (special tokens included), each distinct.
    let words = [
        "invoice", "refund", "parcel", "delivery", "account", "password", "order", "support",
        "customer", "payment", "shipping", "address", "warranty", "return", "receipt", "billing",
    ];
    let text = |i: usize| -> anyhow::Result<String> {
        let mut t = format!("ticket {i}:");
        let mut k = i;
        loop {
            let n = model.tokenize(&t, false)?.0.len();
            if n >= 64 {
                break;
            }
            t.push(' ');
            t.push_str(words[k % words.len()]);
            k = k.wrapping_mul(31).wrapping_add(7);
        }
        Ok(t)
    };
    let n = texts_per_level.max(32);
    let texts: Vec<String> = (0..n).map(text).collect::<Result<_, _>>()?;
    let ids: Vec<Vec<u32>> = texts
        .iter()
        .map(|s| candidates[0].1.tokenize(s))
        .collect::<Result<_, _>>()?;
    let total_tokens: usize = ids.iter().map(Vec::len).sum();
    println!(
        "embeddings: model {}, served on {} {}, {} texts per level, {:.1} tokens per text, {threads} threads",
        model.meta.name,
        model.info().engine,
        model.info().dtype,
        n,
        total_tokens as f64 / n as f64
    );
    let reference = candidates[0].1.embed(&ids)?;
    let client = reqwest::Client::new();
    let url = format!("{base}/v1/embeddings");
    for batch in [1usize, 8, 32] {
        // Warm up once, then time every text in batches of `batch`, one request at a time.
        let warm = json!({"model": model.meta.name, "input": &texts[..batch]});
        time_request(&client, &url, &warm).await?;
        let t = Instant::now();
        for chunk in texts.chunks(batch) {
            let body = json!({"model": model.meta.name, "input": chunk});
            time_request(&client, &url, &body).await?;
        }
        let http = n as f64 / t.elapsed().as_secs_f64();
        println!("  batch {batch:>2}:");
        let mut base_rate = 0.0;
        for (name, enc) in &candidates {
            enc.embed(&ids[..batch])?;
            let t = Instant::now();
            let mut vectors = Vec::with_capacity(n);
            for chunk in ids.chunks(batch) {
                vectors.extend(enc.embed(chunk)?);
            }
            let rate = n as f64 / t.elapsed().as_secs_f64();
            if base_rate == 0.0 {
                base_rate = rate;
            }
            let worst = vectors
                .iter()
                .zip(&reference)
                .map(|(a, b)| cosine(a, b))
                .fold(f64::INFINITY, f64::min);
            println!(
                "    {name:<34} {rate:8.1} texts/s {:9.0} tokens/s | x{:.2} of candle F32 | lowest cosine to candle F32 {worst:.6}",
                total_tokens as f64 * rate / n as f64,
                rate / base_rate
            );
        }
        println!(
            "    {:<34} {http:8.1} texts/s {:9.0} tokens/s | x{:.2} of candle F32",
            format!("served over HTTP ({})", model.info().dtype),
            total_tokens as f64 * http / n as f64,
            http / base_rate
        );
    }
    Ok(())
}

/// Cosine similarity of two vectors.
pub(crate) fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let dot: f64 = a.iter().zip(b).map(|(x, y)| *x as f64 * *y as f64).sum();
    let na: f64 = a.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt();
    let nb: f64 = b.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt();
    dot / (na * nb).max(1e-30)
}
