//! What one decode of N tokens costs after a 114-token prefix (a question block under a state):
//! the best of four runs per N. Small decodes pay a fixed share per micro-batch (every weight
//! is read once per micro-batch), so a branch of 30 tokens costs more per token than a root of
//! 114. Build with `GGML_CPU_REPACK=OFF` (in the environment) to compare llama.cpp without its
//! weight repacking.
//!
//! It also prints what one decode of 114 to 1,712 tokens from an empty cache costs a token:
//! past about a hundred tokens the cost per token stops falling, so evaluating several
//! requests' states in one decode (a `states` batch) cannot save much more than the small
//! decodes' share, and an exact engine keeps each node in micro-batches of its own anyway.
//!
//! `cargo run --release -p bench --example ubatch -- MODEL.gguf`

#![allow(clippy::unwrap_used, clippy::expect_used)]
use engine::Backend;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::args().nth(1).ok_or("usage: ubatch MODEL.gguf")?;
    let b = backend_llama::LlamaBackend::load(
        std::path::Path::new(&path),
        backend_llama::LlamaConfig::default(),
    )?;
    let text = "The quick brown fox jumps over the lazy dog while the farmer counts his sheep. "
        .repeat(120);
    let p = b.tokenize(&text, false)?;
    let mut ev = bench::plain::PlainEvaluator::new(&b, 2048)?;
    let sizes = [1usize, 8, 16, 30, 32, 64, 114];
    let mut best = [f64::MAX; 7];
    for _ in 0..4 {
        for (i, n) in sizes.iter().enumerate() {
            let t = ev.prefill_chunks(&p[..114 + n], 114)?;
            let last = t.last().map_or(0.0, |d| d.as_secs_f64() * 1e3);
            best[i] = best[i].min(last);
        }
    }
    for (n, ms) in sizes.iter().zip(best) {
        println!(
            "{n:3} tokens: {ms:7.1} ms, {:.2} ms a token",
            ms / *n as f64
        );
    }
    println!("one decode from an empty cache:");
    let whole = [114usize, 214, 428, 512, 856, 1712];
    let mut best = [f64::MAX; 6];
    for _ in 0..3 {
        for (i, n) in whole.iter().enumerate() {
            let t = ev.prefill_chunks(&p[..*n], *n)?;
            best[i] = best[i].min(t.iter().map(|d| d.as_secs_f64() * 1e3).sum());
        }
    }
    for (n, ms) in whole.iter().zip(best) {
        println!(
            "{n:5} tokens: {ms:8.1} ms, {:.2} ms a token",
            ms / *n as f64
        );
    }
    Ok(())
}
