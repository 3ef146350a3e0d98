//! `vllm-srun-bench`: see the library's documentation. One measurement per run, chosen by flag;
//! with none, the latency of one question against six over HTTP against a running server.

use clap::Parser;

/// Measure: with --url, a running server (one question vs six about one ~100-token
/// state); with --suite, the side-by-side suite against raw llama.cpp in one process.
#[derive(Parser)]
#[command(name = "vllm-srun-bench", version)]
struct Args {
    #[arg(long, default_value = "http://127.0.0.1:8000")]
    url: String,
    #[arg(long, default_value = "qwen2.5-1.5b")]
    model: String,
    #[arg(long, default_value_t = 20)]
    runs: usize,
    /// Run the full suite (raw llama.cpp vs HTTP, 1 vs 6 questions, throughput, overload).
    #[arg(long)]
    suite: bool,
    /// Distinct requests per throughput level of the suite.
    #[arg(long, default_value_t = 24)]
    requests: usize,
    /// Long inputs: a decision on a 2 KB and a 10 MB text with a 512-token budget.
    #[arg(long)]
    long: bool,
    /// Embeddings throughput of an encoder (--model minilm-l6) at batch 1, 8 and 32.
    #[arg(long)]
    embeddings: bool,
    /// Generation: one stream against raw llama.cpp, four concurrent streams against
    /// llama-cpp-python's server, time to first token, a long prompt joining streams.
    #[arg(long)]
    generate: bool,
    /// With --generate: only its line (f), four concurrent streams against llama.cpp's own
    /// `llama-server -np 4`.
    #[arg(long)]
    against_llama_server: bool,
    /// The router's own cost at --rate requests/s against a backend that answers at once
    /// (each phase --runs seconds).
    #[arg(long)]
    router: bool,
    /// The keys service's own costs: key verification on SQLite, admission decisions
    /// with 10,000 requests waiting.
    #[arg(long)]
    service: bool,
    /// SIE encode through `vllm-srun gateway` and NATS JetStream against straight to the worker
    /// (--model minilm-l6, --requests per row; needs nats-server).
    #[arg(long)]
    gateway: bool,
    /// Requests per second of --router.
    #[arg(long, default_value_t = 200)]
    rate: usize,
    /// Tokens per stream of --generate.
    #[arg(long, default_value_t = 128)]
    max_tokens: usize,
    /// Span questions: one span question (one label), and the pii preset (nine labels),
    /// against one choice question about the same ~200-token state.
    #[arg(long)]
    spans: bool,
    /// Each detector's forward (NanoDet, CenterNet) on a test photograph against TensorFlow.js
    /// running the same graph (needs Node.js with the packages tools/nanodet_reference.js
    /// names).
    #[arg(long)]
    detector: bool,
    /// Decision adapters: the question the model's package has a head for, answered by the
    /// head against the base readout (each about a new state).
    #[arg(long)]
    adapters: bool,
    /// Heads on an encoder (a package `adapt --model minilm-l6` wrote) against --model, in
    /// one process: one question, and every question of the package, about one state.
    #[arg(long)]
    heads: Option<String>,
    /// System Two: the guard and routing signals of a ~1,000-token turn, the guard on
    /// `minilm-l6-router` against the 1.5B model's head (--runs turns each).
    #[arg(long)]
    guard_turn: bool,
    /// System Two: the guard's signals on a conversation's second turn against its first
    /// (--model answers the guard; --runs conversations).
    #[arg(long)]
    turns: bool,
    /// One choice about a new ~300-token state asked in one view and in three
    /// (`choice_orders` 3), --model served twice in one process.
    #[arg(long)]
    views: bool,
}

fn main() {
    let Args {
        url,
        model,
        runs,
        suite,
        requests,
        long,
        embeddings,
        generate,
        against_llama_server,
        max_tokens,
        router,
        service,
        rate,
        spans,
        gateway,
        detector,
        adapters,
        heads,
        guard_turn,
        turns,
        views,
    } = Args::parse();
    let code = {
        use ::bench as b;
        if detector {
            run_bench(b::detector(runs.max(1)))
        } else if views {
            run_bench(b::views(&model, runs.max(1)))
        } else if guard_turn {
            run_bench(b::guard_turn(runs.max(1)))
        } else if turns {
            run_bench(b::turns(&model, runs.max(1)))
        } else if let Some(package) = heads {
            run_bench(b::heads(&package, &model, runs.max(1)))
        } else if adapters {
            run_bench(b::adapters(&model, runs.max(1)))
        } else if gateway {
            run_bench(b::gateway(&model, requests.max(1)))
        } else if service {
            run_bench(b::service_costs())
        } else if router {
            run_bench(b::router_overhead(runs.clamp(1, 600), rate.max(1)))
        } else if generate {
            run_bench(b::generation(
                &model,
                runs.max(1),
                max_tokens.max(2),
                against_llama_server,
            ))
        } else if embeddings {
            run_bench(b::embeddings(&model, runs.max(1)))
        } else if long {
            run_bench(b::long_inputs(&model, runs.max(1)))
        } else if spans {
            run_bench(b::spans(&model, runs.max(1)))
        } else if suite {
            run_bench(b::suite(&model, runs.max(1), requests.max(1)))
        } else {
            run_bench(b::latency(&url, &model, runs.max(1)))
        }
    };
    std::process::exit(code);
}

/// Run one benchmark to completion on a fresh runtime; its exit code.
fn run_bench(bench: impl std::future::Future<Output = anyhow::Result<()>>) -> i32 {
    let rt = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("cannot start the async runtime: {e}");
            return 1;
        }
    };
    match rt.block_on(bench) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("bench failed: {e}");
            1
        }
    }
}
