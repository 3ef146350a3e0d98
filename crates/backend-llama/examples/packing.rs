//! Can branches share llama.cpp micro-batches and still get the logits they get alone? A
//! question's tokens are evaluated under one state, alone, then beside copies of itself and
//! beside other questions in one decode (ascending, consecutive sequence ids, so llama.cpp packs
//! their streams into shared micro-batches). Prints the largest logit difference per question.
//!
//! `cargo run --release -p backend-llama --example packing -- MODEL.gguf [fa:0|1]`
//!
//! Seen on qwen2.5-1.5b Q4_K_M (2 threads, AVX-512): with llama.cpp's weight repacking (the
//! default build) packed questions differ by 0.4 to 0.6 in logit (the repacked kernels treat
//! rows by their index modulo 4 in the micro-batch). Built with `GGML_CPU_REPACK=OFF`, a
//! question's logits are bit-equal whenever its micro-batches and the lone evaluation's both
//! hold at least 8 rows, or both fewer than 8, and differ otherwise.
use std::num::NonZeroU32;

use llama_cpp_2::context::params::LlamaContextParams;
use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::llama_backend::LlamaBackend;
use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::model::params::LlamaModelParams;
use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::token::LlamaToken;

/// Evaluate `state` in sequence 0, then each group in one decode: (question, sequence) pairs,
/// each sequence a copy of the state. Returns the last logits of each question.
fn run(
    ctx: &mut LlamaContext,
    state: &[LlamaToken],
    qs: &[Vec<LlamaToken>],
    groups: &[Vec<(usize, i32)>],
) -> Result<Vec<Vec<f32>>, Box<dyn std::error::Error>> {
    let mut out = vec![Vec::new(); qs.len()];
    ctx.clear_kv_cache();
    let mut batch = LlamaBatch::new(8192, 1);
    for (i, t) in state.iter().enumerate() {
        batch.add(*t, i as i32, &[0], false)?;
    }
    ctx.decode(&mut batch)?;
    for g in groups {
        batch.clear();
        let mut reads = Vec::new();
        for &(q, seq) in g {
            ctx.copy_kv_cache_seq(0, seq, None, None)?;
            for (k, t) in qs[q].iter().enumerate() {
                let last = k + 1 == qs[q].len();
                if last {
                    reads.push((q, batch.n_tokens()));
                }
                batch.add(*t, (state.len() + k) as i32, &[seq], last)?;
            }
        }
        ctx.decode(&mut batch)?;
        for (q, bi) in reads {
            out[q] = ctx.get_logits_ith(bi).to_vec();
        }
        for &(_, seq) in g {
            ctx.clear_kv_cache_seq(Some(seq as u32), None, None)?;
        }
    }
    Ok(out)
}

/// Groups that evaluate questions `0..n` each in its own decode, in sequence 1.
fn one_by_one(n: usize) -> Vec<Vec<(usize, i32)>> {
    (0..n).map(|q| vec![(q, 1)]).collect()
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let path = args.get(1).ok_or("usage: packing MODEL.gguf [fa:0|1]")?;
    let fa = args.get(2).is_some_and(|s| s == "1");
    let rt = LlamaBackend::init()?;
    let model = LlamaModel::load_from_file(&rt, path, &LlamaModelParams::default())?;
    let params = LlamaContextParams::default()
        .with_n_ctx(NonZeroU32::new(8 * 1024))
        .with_n_batch(8 * 1024)
        .with_n_ubatch(512)
        .with_n_seq_max(8)
        .with_kv_unified(false)
        .with_n_threads(2)
        .with_n_threads_batch(2)
        .with_flash_attention_policy(if fa { 1 } else { 0 });
    let mut ctx = model.new_context(&rt, params)?;
    let tk = |s: &str| model.vocab().tokenize(s.as_bytes(), false, false);
    let state = tk(
        "Hello, I am writing about my order #88213. I bought a standing desk on March \
        3rd and it arrived with a cracked leg and two missing screws. I contacted support twice \
        by email and once by phone, and nobody called back.",
    );
    let question = tk(
        "Question: Which team should handle this ticket?\nOptions:\nA. returns\nB. \
        billing\nC. technical\nAnswer with the letter.",
    );
    // Prefixes of one question, 1 to 20 tokens: alone, and two or three copies in one decode.
    let qs: Vec<Vec<LlamaToken>> = (1..=20).map(|l| question[..l].to_vec()).collect();
    let alone = run(&mut ctx, &state, &qs, &one_by_one(qs.len()))?;
    println!("fa={fa}; tokens: difference alone vs 2 copies packed, vs 3 copies packed");
    for q in 0..qs.len() {
        let two = run(&mut ctx, &state, &qs, &[vec![(q, 1), (q, 2)]])?;
        let three = run(&mut ctx, &state, &qs, &[vec![(q, 1), (q, 2), (q, 3)]])?;
        println!(
            "{:2}: {:.4} {:.4}",
            q + 1,
            max_diff(&alone[q], &two[q]),
            max_diff(&alone[q], &three[q])
        );
    }
    // Questions of different lengths packed in one decode (llama.cpp splits them into
    // micro-batches of equal tokens per stream).
    let mixed: Vec<Vec<LlamaToken>> = [4usize, 12, 20, 28]
        .iter()
        .map(|&l| question[..l].to_vec())
        .collect();
    let alone = run(&mut ctx, &state, &mixed, &one_by_one(mixed.len()))?;
    let packed = run(
        &mut ctx,
        &state,
        &mixed,
        &[(0..mixed.len()).map(|q| (q, q as i32 + 1)).collect()],
    )?;
    for (q, m) in mixed.iter().enumerate() {
        println!(
            "{} tokens beside {{4, 12, 20, 28}}: {:.4}",
            m.len(),
            max_diff(&alone[q], &packed[q])
        );
    }
    Ok(())
}
