//! Greedy generation by re-reading the whole sequence each step in a plain context: the
//! reference the generation worker's output is compared with.
//! `cargo run --release -p bench --example greedy -- model.gguf "prompt with <|im_start|>" 20`

#![allow(clippy::unwrap_used, clippy::expect_used)]
use backend_llama::{LlamaBackend, LlamaConfig};
use engine::Backend;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (path, prompt, n) = (&args[1], &args[2], args[3].parse::<usize>().unwrap_or(20));
    let b = LlamaBackend::load(std::path::Path::new(path), LlamaConfig::default()).unwrap();
    let mut toks = b.tokenize(&prompt.replace("\\n", "\n"), true).unwrap();
    let vocab: Vec<u32> = (0..engine::budget::Vocab::vocab_size(&b) as u32).collect();
    let mut plain = bench::plain::PlainEvaluator::new(&b, 4096).unwrap();
    let mut out = String::new();
    for _ in 0..n {
        let logits = plain.evaluate(&toks, &vocab).unwrap();
        let best = (0..logits.len())
            .max_by(|&a, &c| logits[a].total_cmp(&logits[c]))
            .unwrap() as u32;
        if b.ends_generation(best) {
            break;
        }
        out.push_str(&b.token_text(best));
        toks.push(best);
    }
    println!("{out:?}");
}
