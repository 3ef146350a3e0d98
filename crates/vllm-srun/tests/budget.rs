//! Budgeted tokenization on real tokenizers: the tokens kept from a cut text are exactly the
//! prefix of the whole text's tokens, for every kind of text and cut.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;

use backend_llama::LlamaBackend;
use engine::budget::{CutKind, Cutter, Vocab};

/// Tokenizers to check: the test model's, and every other catalogue GGUF in the cache.
fn tokenizers() -> Vec<(String, PathBuf)> {
    let mut out = Vec::new();
    for id in ["smollm2-135m", "qwen2.5-0.5b", "qwen2.5-1.5b"] {
        if let Ok(r) = hub::resolve(id, false) {
            out.push((id.to_string(), r.weights));
        }
    }
    assert!(
        !out.is_empty(),
        "no GGUF model is cached; run `vllm-srun models pull smollm2-135m`"
    );
    out
}

fn texts() -> Vec<(&'static str, String)> {
    let english = "The refund for order 4471 was promised last week, but it has not arrived. \
        Customers who wait longer than thirty days may dispute the charge; our policy (v2.3) says so!\n";
    let code =
        "fn merge(a: &[i32], b: &[i32]) -> Vec<i32> {\n    let (mut i, mut j) = (0, 0);\n    \
        while i < a.len() && j < b.len() { if a[i] <= b[j] { i += 1 } else { j += 1 } }\n}\n";
    let mut base64 = String::new();
    let mut hex = String::new();
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let b64 = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for _ in 0..400_000 {
        x ^= x << 7;
        x ^= x >> 9;
        base64.push(b64[(x % 64) as usize] as char);
        hex.push(b"0123456789abcdef"[(x % 16) as usize] as char);
    }
    let chinese =
        "今天的天气很好，我们一起去公园散步。然后在湖边喝茶，聊了很多关于工作和生活的事情。";
    let japanese = "東京の桜は春に咲きます。多くの人が公園に集まり、花見を楽しみます。";
    let unspaced_chinese =
        "今天的天气很好我们一起去公园散步然后在湖边喝茶聊了很多关于工作和生活的事情";
    vec![
        ("english", english.repeat(1500)),
        ("code", code.repeat(1500)),
        ("base64", base64),
        ("hex", hex),
        ("chinese", chinese.repeat(1500)),
        ("japanese", japanese.repeat(1500)),
        ("unspaced chinese", unspaced_chinese.repeat(1500)),
    ]
}

#[test]
fn kept_tokens_are_the_whole_texts_token_prefix() {
    for (id, path) in tokenizers() {
        let tok = LlamaBackend::load_tokenizer(&path).expect("tokenizer");
        let cutter = Cutter::calibrate(&tok).expect("calibrate");
        eprintln!(
            "{id}: max token bytes {}, cuts {:?}",
            cutter.max_token_bytes,
            cutter.enabled.iter().map(|k| k.name()).collect::<Vec<_>>()
        );
        assert!(
            cutter.enabled.contains(&CutKind::Whitespace),
            "{id}: a BPE tokenizer cuts at whitespace"
        );
        for (name, text) in texts() {
            let whole = tok.tokenize_text(&text).expect("tokenize");
            for budget in [16, 200, 512] {
                let read = cutter.read(&tok, &text, budget).expect("read");
                assert!(
                    whole.starts_with(&read.tokens),
                    "{id} {name} budget {budget}: cut {:?} kept tokens that differ from the whole text's",
                    read.cut
                );
                if read.complete {
                    assert_eq!(read.tokens.len(), whole.len());
                } else {
                    assert!(
                        read.tokens.len() > budget,
                        "{id} {name}: read past the budget"
                    );
                    assert!(read.tokens.len() < whole.len(), "{id} {name}: read in part");
                    let read_bytes: usize =
                        read.tokens.iter().map(|t| tok.token_bytes(*t).len()).sum();
                    assert!(
                        read_bytes <= cutter.bytes_for(budget) + 8192,
                        "{id} {name}: read {read_bytes} bytes for a budget of {budget} tokens"
                    );
                }
                eprintln!(
                    "  {name:>16} budget {budget:>3}: {:>6} of {:>7} tokens, cut {:?}",
                    read.tokens.len(),
                    whole.len(),
                    read.cut.map(CutKind::name)
                );
            }
        }
    }
}

#[test]
fn minilm_wordpiece_cuts_keep_the_token_prefix_and_reads_unsplit_runs_whole() {
    let dir = hub::resolve("minilm-l6", false)
        .expect("minilm-l6 is cached")
        .dir
        .unwrap();
    let tok = backend_candle::BertEncoder::load(&dir).expect("encoder");
    let cutter = Cutter::calibrate(&tok).expect("calibrate");
    eprintln!(
        "minilm-l6: max token bytes {}, cuts {:?}",
        cutter.max_token_bytes,
        cutter.enabled.iter().map(|k| k.name()).collect::<Vec<_>>()
    );
    assert!(cutter.enabled.contains(&CutKind::Whitespace));
    // WordPiece reads a word of more than 100 characters as one unknown token: a cut inside
    // such a run would change it, so the check turns the in-run cut off.
    assert!(!cutter.enabled.contains(&CutKind::Run));
    for (name, text) in texts() {
        let whole = tok.tokenize_text(&text).expect("tokenize");
        for budget in [16, 200, 510] {
            let read = cutter.read(&tok, &text, budget).expect("read");
            assert!(
                whole.starts_with(&read.tokens),
                "minilm {name} budget {budget}: cut {:?} kept tokens that differ",
                read.cut
            );
            if read.complete {
                assert_eq!(read.tokens.len(), whole.len());
            } else {
                assert!(read.tokens.len() > budget);
            }
            eprintln!(
                "  {name:>16} budget {budget:>3}: {:>6} of {:>7} tokens, cut {:?}",
                read.tokens.len(),
                whole.len(),
                read.cut.map(CutKind::name)
            );
        }
    }
}

/// The length bound that refuses a text untokenized must never overstate its tokens: on every
/// kind of text (and runs that merge into the longest tokens) the least count is at most the
/// real count.
#[test]
fn the_least_token_count_from_length_never_overstates() {
    let mut texts = texts();
    texts.push(("spaces", " ".repeat(200_000)));
    texts.push(("dashes", "-".repeat(200_000)));
    texts.push(("emoji", "🙂👍🏽🇯🇵".repeat(20_000)));
    for (id, path) in tokenizers() {
        let tok = LlamaBackend::load_tokenizer(&path).expect("tokenizer");
        assert!(tok.covers_text(), "{id}");
        let cutter = Cutter::calibrate(&tok).expect("calibrate");
        for (name, text) in &texts {
            let end = (0..=text.len().min(300_000))
                .rev()
                .find(|&i| text.is_char_boundary(i))
                .unwrap_or(0);
            let text = &text[..end];
            let real = tok.tokenize_text(text).expect("tokens").len();
            let least = cutter.least_tokens(text.len());
            assert!(least > 0, "{id} {name}: the bound says nothing");
            assert!(least <= real, "{id} {name}: least {least} > real {real}");
        }
    }
}
