//! Can branches share llama.cpp micro-batches and still get the logits they get alone? A
//! question's tokens are evaluated under one state, alone, then beside copies of itself and
//! beside other questions in one decode (ascending, consecutive sequence ids, so llama.cpp packs
//! their streams into shared micro-batches). Prints the largest logit difference per question;
//! then the same with every question padded, and what padded packing costs.
//!
//! `cargo run --release -p backend-llama --example packing -- MODEL.gguf [fa:0|1]`
//!
//! Seen on qwen2.5-1.5b Q4_K_M (2 threads, AVX-512): with llama.cpp's weight repacking (the
//! default build) packed questions differ by 0.4 to 0.6 in logit (the repacked kernels treat
//! rows by their index modulo 4 in the micro-batch). Built with `GGML_CPU_REPACK=OFF`, a
//! question's logits are bit-equal whenever its micro-batches and the lone evaluation's both
//! hold at least 8 rows, or both fewer than 8, and differ otherwise.
//!
//! Padded (the default build): each question's tokens are followed by filler up to a multiple
//! of 4 and at least 8 (alone), or up to the longest padded question of its decode (packed, so
//! every stream gives llama.cpp's equal split the same count). The filler comes after the read
//! position, so causal attention keeps it out of the read logits. Lengths 4 to 54 tokens, 2 to
//! 6 copies: bit-equal in 253 of 255 cases; 4 copies of 30 and of 38 tokens differed by 0.024
//! and 0.042 (cause not found). Six questions of 29 to 39 tokens took about as long packed
//! and padded to 40 as in six micro-batches of their own (two runs of four rounds: 2.0 to 2.8 s
//! either way, packing ahead by 0.4 s once): the filler ate what the shared micro-batch saved.

#![allow(clippy::unwrap_used, clippy::expect_used)]
use std::num::NonZeroU32;

use llama_cpp_2::context::params::LlamaContextParams;
use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::llama_backend::LlamaBackend;
use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::model::params::LlamaModelParams;
use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::token::LlamaToken;

/// Evaluate `state` in sequence 0, then each group in one decode: (question, sequence, length)
/// triples, each sequence a copy of the state, each question's tokens followed by `filler` up to
/// `length`. Returns the logits at each question's last token.
fn run(
    ctx: &mut LlamaContext,
    state: &[LlamaToken],
    qs: &[Vec<LlamaToken>],
    groups: &[Vec<(usize, i32, usize)>],
    filler: LlamaToken,
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
        for &(q, seq, length) in g {
            ctx.copy_kv_cache_seq(0, seq, None, None)?;
            for k in 0..length.max(qs[q].len()) {
                let last = k + 1 == qs[q].len();
                if last {
                    reads.push((q, batch.n_tokens()));
                }
                let t = qs[q].get(k).copied().unwrap_or(filler);
                batch.add(t, (state.len() + k) as i32, &[seq], last)?;
            }
        }
        ctx.decode(&mut batch)?;
        for (q, bi) in reads {
            out[q] = ctx.get_logits_ith(bi).to_vec();
        }
        for &(_, seq, _) in g {
            ctx.clear_kv_cache_seq(Some(seq as u32), None, None)?;
        }
    }
    Ok(out)
}

/// Groups that evaluate each question in its own decode, in sequence 1, padded to `length`.
fn one_by_one(
    qs: &[Vec<LlamaToken>],
    length: impl Fn(usize) -> usize,
) -> Vec<Vec<(usize, i32, usize)>> {
    (0..qs.len())
        .map(|q| vec![(q, 1, length(qs[q].len()))])
        .collect()
}

/// `copies` copies of question `q` in one decode, each padded to `length`.
fn copies(q: usize, copies: usize, length: usize) -> Vec<Vec<(usize, i32, usize)>> {
    vec![(0..copies).map(|k| (q, k as i32 + 1, length)).collect()]
}

/// A padded length: a multiple of 4, at least 8.
fn padded(len: usize) -> usize {
    len.max(8).div_ceil(4) * 4
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
    let filler = tk("\n")[0];
    let own = |len: usize| len;
    // Prefixes of one question, 1 to 20 tokens: alone, and two or three copies in one decode.
    let qs: Vec<Vec<LlamaToken>> = (1..=20).map(|l| question[..l].to_vec()).collect();
    let alone = run(&mut ctx, &state, &qs, &one_by_one(&qs, own), filler)?;
    println!("fa={fa}; tokens: difference alone vs 2 copies packed, vs 3 copies packed");
    for q in 0..qs.len() {
        let len = qs[q].len();
        let two = run(&mut ctx, &state, &qs, &copies(q, 2, len), filler)?;
        let three = run(&mut ctx, &state, &qs, &copies(q, 3, len), filler)?;
        println!(
            "{:2}: {:.4} {:.4}",
            len,
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
    let alone = run(&mut ctx, &state, &mixed, &one_by_one(&mixed, own), filler)?;
    let together = vec![(0..mixed.len())
        .map(|q| (q, q as i32 + 1, mixed[q].len()))
        .collect()];
    let packed = run(&mut ctx, &state, &mixed, &together, filler)?;
    for (q, m) in mixed.iter().enumerate() {
        println!(
            "{} tokens beside {{4, 12, 20, 28}}: {:.4}",
            m.len(),
            max_diff(&alone[q], &packed[q])
        );
    }
    // Padded: prefixes of a longer question, 4 to 54 tokens, alone and as 2 to 6 copies.
    let long = tk(
        "Question: Which team should handle this ticket? Think about the customer, the \
        product and the tone.\nOptions:\nA. returns\nB. billing\nC. technical\nD. shipping\nE. \
        sales\nAnswer with the letter of the best option, nothing else.",
    );
    let qs: Vec<Vec<LlamaToken>> = (4..=long.len().min(54))
        .map(|l| long[..l].to_vec())
        .collect();
    let alone = run(&mut ctx, &state, &qs, &one_by_one(&qs, padded), filler)?;
    println!("padded; tokens: difference alone vs 2, 3, 4, 5, 6 copies packed");
    for q in 0..qs.len() {
        let len = qs[q].len();
        let mut line = format!("{len:2}:");
        for n in 2..=6 {
            let packed = run(&mut ctx, &state, &qs, &copies(q, n, padded(len)), filler)?;
            line += &format!(" {:.4}", max_diff(&alone[q], &packed[q]));
        }
        println!("{line}");
    }
    // What padded packing costs: six questions of 29 to 39 tokens, each in micro-batches of its
    // own (descending ids, as the engine evaluates them), against packed and padded to 40.
    let six: Vec<Vec<LlamaToken>> = [29usize, 31, 33, 35, 37, 39]
        .iter()
        .map(|&l| long[..l.min(long.len())].to_vec())
        .collect();
    let separate = vec![(0..six.len())
        .map(|q| (q, (six.len() - q) as i32, six[q].len()))
        .collect()];
    let longest = six.iter().map(|q| padded(q.len())).max().unwrap_or(8);
    let packed = vec![(0..six.len()).map(|q| (q, q as i32 + 1, longest)).collect()];
    for round in 0..4 {
        let timed = |ctx: &mut LlamaContext, groups: &[Vec<(usize, i32, usize)>]| {
            let started = std::time::Instant::now();
            run(ctx, &state, &six, groups, filler).map(|_| started.elapsed().as_secs_f64() * 1e3)
        };
        let state_only = timed(&mut ctx, &[])?;
        let a = timed(&mut ctx, &separate)? - state_only;
        let b = timed(&mut ctx, &packed)? - state_only;
        println!("round {round}: six questions separate {a:.0} ms, packed and padded {b:.0} ms");
    }
    Ok(())
}
