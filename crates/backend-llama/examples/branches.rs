//! Check that identical branches of one state get identical logits:
//! `cargo run -p backend-llama --example branches -- MODEL.gguf [fa:0|1] [unified:0|1]`.

#![allow(clippy::unwrap_used, clippy::expect_used)]
use std::num::NonZeroU32;

use llama_cpp_2::context::params::LlamaContextParams;
use llama_cpp_2::llama_backend::LlamaBackend;
use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::model::params::LlamaModelParams;
use llama_cpp_2::model::LlamaModel;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let fa = args.get(2).map(|s| s == "1").unwrap_or(false);
    let unified = args.get(3).map(|s| s == "1").unwrap_or(true);
    let one_by_one = args.get(4).map(|s| s == "1").unwrap_or(false);
    let rt = LlamaBackend::init()?;
    let model = LlamaModel::load_from_file(&rt, &args[1], &LlamaModelParams::default())?;
    let mut params = LlamaContextParams::default()
        .with_n_ctx(NonZeroU32::new(4096))
        .with_n_batch(4096)
        .with_n_seq_max(8)
        .with_kv_unified(unified)
        .with_n_threads(2)
        .with_n_threads_batch(2);
    params = params.with_flash_attention_policy(if fa { 1 } else { 0 });
    let mut ctx = model.new_context(&rt, params)?;
    let state = model.vocab().tokenize(
        b"Hi, I was charged twice for my March invoice and the refund never arrived.",
        false,
        false,
    );
    let q = model.vocab().tokenize(b"Question: Which team should handle this? Options: A. Billing B. Technical C. Sales. Answer with the letter.", false, false);
    let run = |ctx: &mut llama_cpp_2::context::LlamaContext, n_branches: usize| -> Vec<Vec<f32>> {
        ctx.clear_kv_cache();
        let mut batch = LlamaBatch::new(4096, 1);
        for (i, t) in state.iter().enumerate() {
            batch.add(*t, i as i32, &[0], false).unwrap();
        }
        ctx.decode(&mut batch).unwrap();
        batch.clear();
        let mut outs = Vec::new();
        let mut done: Vec<Vec<f32>> = Vec::new();
        for b in 0..n_branches {
            let seq = (b + 1) as i32;
            ctx.copy_kv_cache_seq(0, seq, None, None).unwrap();
            for (k, t) in q.iter().enumerate() {
                let last = k + 1 == q.len();
                if last {
                    outs.push(batch.n_tokens());
                }
                batch
                    .add(*t, (state.len() + k) as i32, &[seq], last)
                    .unwrap();
            }
            if one_by_one {
                ctx.decode(&mut batch).unwrap();
                let i = outs.pop().unwrap();
                done.push(ctx.get_logits_ith(i)[..2000].to_vec());
                batch.clear();
            }
        }
        if one_by_one {
            return done;
        }
        ctx.decode(&mut batch).unwrap();
        outs.iter()
            .map(|i| ctx.get_logits_ith(*i)[..2000].to_vec())
            .collect()
    };
    let alone = run(&mut ctx, 1);
    let many = run(&mut ctx, 4);
    let diff = |a: &[f32], b: &[f32]| {
        a.iter()
            .zip(b)
            .map(|(x, y)| (x - y).abs())
            .fold(0.0f32, f32::max)
    };
    println!("fa={fa} unified={unified} one_by_one={one_by_one}");
    for (i, m) in many.iter().enumerate() {
        println!(
            "branch {i}: max |logit - alone| = {:.5}",
            diff(&alone[0], m)
        );
    }
    Ok(())
}
