//! Raw llama.cpp prompt speed on this machine: `cargo run --release -p backend-llama --example rawspeed -- MODEL.gguf [TOKENS] [SEQ_MAX]`.

#![allow(clippy::unwrap_used, clippy::expect_used)]
use std::num::NonZeroU32;
use std::time::Instant;

use llama_cpp_2::context::params::LlamaContextParams;
use llama_cpp_2::llama_backend::LlamaBackend;
use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::model::params::LlamaModelParams;
use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::token::LlamaToken;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let path = args
        .get(1)
        .ok_or("usage: rawspeed MODEL.gguf [TOKENS] [SEQ_MAX]")?;
    let n: usize = args.get(2).map(|s| s.parse()).transpose()?.unwrap_or(110);
    let seq_max: u32 = args.get(3).map(|s| s.parse()).transpose()?.unwrap_or(1);
    let rt = LlamaBackend::init()?;
    let model = LlamaModel::load_from_file(&rt, path, &LlamaModelParams::default())?;
    let threads = std::thread::available_parallelism()
        .map(|n| n.get() as i32)
        .unwrap_or(2);
    let params = LlamaContextParams::default()
        .with_n_ctx(NonZeroU32::new(8192))
        .with_n_batch(8192)
        .with_n_seq_max(seq_max)
        .with_kv_unified(true)
        .with_n_threads(threads)
        .with_n_threads_batch(threads);
    let mut ctx = model.new_context(&rt, params)?;
    let text = "The quick brown fox jumps over the lazy dog. ".repeat(n / 10 + 1);
    let mut tokens = model.vocab().tokenize(text.as_bytes(), false, false);
    tokens.truncate(n);
    for round in 0..4 {
        ctx.clear_kv_cache();
        let mut batch = LlamaBatch::new(8192, 1);
        for (i, t) in tokens.iter().enumerate() {
            batch.add(LlamaToken(t.0), i as i32, &[0], i + 1 == tokens.len())?;
        }
        let t0 = Instant::now();
        ctx.decode(&mut batch)?;
        let dt = t0.elapsed().as_secs_f64();
        println!("round {round}: {} tokens in {:.3} s = {:.1} tok/s (threads {threads}, seq_max {seq_max})", tokens.len(), dt, tokens.len() as f64 / dt);
    }
    Ok(())
}
