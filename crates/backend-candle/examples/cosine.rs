//! Print the cosine similarities models.md gives for all-MiniLM-L6-v2.
//! `cargo run --release -p backend-candle --example cosine -- DIR`

#![allow(clippy::unwrap_used, clippy::expect_used)]
use engine::encode::{cosine, Encoder};

fn main() {
    let dir = std::env::args().nth(1).expect("an encoder directory");
    let m = backend_candle::BertEncoder::load(std::path::Path::new(&dir)).expect("load");
    let texts = [
        "A man is eating food.",
        "A man is eating a piece of bread.",
        "The stock market fell sharply today.",
    ];
    let batch: Vec<_> = texts.iter().map(|t| m.tokenize(t).unwrap()).collect();
    let v = m.embed(&batch).unwrap();
    println!("{:.4} {:.4}", cosine(&v[0], &v[1]), cosine(&v[0], &v[2]));
}
