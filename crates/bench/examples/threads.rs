//! Does a second worker thread slow llama.cpp down? A server decodes from several threads (the
//! decision worker, the generation worker, encoders). With llama.cpp built on OpenMP, every
//! thread that decodes keeps a team of helper threads; once they outnumber the cores, libgomp
//! spins only briefly at each barrier and sleeps instead, and one-token decodes (thousands of
//! barriers a second) slow down. This prints greedy decode speed alone, then while another
//! thread that has decoded stays alive.
//!
//! `cargo run -p bench --example threads -- MODEL.gguf`

#![allow(clippy::unwrap_used, clippy::expect_used)]
use engine::Backend;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::args().nth(1).ok_or("usage: threads MODEL.gguf")?;
    let b = backend_llama::LlamaBackend::load(
        std::path::Path::new(&path),
        backend_llama::LlamaConfig::default(),
    )?;
    let p = b.tokenize(
        "Write a long story about a lighthouse keeper who lived alone",
        false,
    )?;
    let mut one = bench::plain::PlainEvaluator::new(&b, 4096)?;
    let mut rate = |label: &str| -> Result<(), Box<dyn std::error::Error>> {
        for _ in 0..2 {
            let (_, t) = one.greedy(&p, 64)?;
            println!("{label}: {:.1} tokens/s", 63.0 / t.as_secs_f64());
        }
        Ok(())
    };
    rate("greedy decode, one thread")?;
    std::thread::scope(|s| -> Result<(), Box<dyn std::error::Error>> {
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel::<()>();
        let (b, p) = (&b, &p);
        s.spawn(move || {
            if let Ok(mut other) = bench::plain::PlainEvaluator::new(b, 512) {
                let _ = other.greedy(p, 2);
            }
            let _ = ready_tx.send(());
            let _ = done_rx.recv();
        });
        let _ = ready_rx.recv();
        let r = rate("greedy decode while another decoding thread lives");
        let _ = done_tx.send(());
        r
    })?;
    Ok(())
}
