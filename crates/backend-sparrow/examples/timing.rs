//! Where one question's time goes: tokenization vs the forward.
//! `cargo run --release -p backend-sparrow --example timing -- PATH.sparrow`

#![allow(clippy::unwrap_used, clippy::expect_used)]
use std::time::Instant;

use backend_sparrow::SparrowModel;
use engine::budget::Vocab;
use engine::{DirectBackend, DirectKind, DirectQuestion};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::args().nth(1).ok_or("usage: timing PATH")?;
    let m = SparrowModel::load(std::path::Path::new(&path))?;
    let state = "Hello, I am writing about my order #88213. I bought a standing desk on March 3rd and \
it arrived with a cracked leg and two missing screws. I contacted support twice by email and once by phone, \
and each time I was told someone would call me back within a day, but nobody did.";
    let n = 2000;
    let t = Instant::now();
    for _ in 0..n {
        m.tokenize_text(state)?;
    }
    println!(
        "tokenize state: {:.1} us",
        t.elapsed().as_secs_f64() * 1e6 / n as f64
    );
    let t = Instant::now();
    for _ in 0..n {
        m.tokenize_text("returns Refunds, replacements and damaged deliveries")?;
    }
    println!(
        "tokenize option: {:.1} us",
        t.elapsed().as_secs_f64() * 1e6 / n as f64
    );
    let tokens = m.tokenize_text(state)?;
    let q = DirectQuestion {
        kind: DirectKind::Choice,
        instructions: m.tokenize_text("Which team should handle this ticket?")?,
        options: [
            "returns Refunds",
            "billing Payments and invoices",
            "technical Product setup",
        ]
        .iter()
        .map(|o| m.tokenize_text(o))
        .collect::<Result<_, _>>()?,
    };
    let t = Instant::now();
    for _ in 0..n {
        m.answer(state, &tokens, &[&q])?;
    }
    println!(
        "forward, 3 options: {:.1} us",
        t.elapsed().as_secs_f64() * 1e6 / n as f64
    );
    Ok(())
}
