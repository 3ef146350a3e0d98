//! Wiring of a serving process: resolve and load models (fetching catalogue ones when
//! missing), register them, and serve HTTP. `main.rs` is the command line over this; the
//! integration tests start the same server in-process on a loopback port.

pub mod adapt;
pub mod models_file;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use engine::{
    DecisionConfig, DecisionModel, EncoderModel, Loaded, ModelKind, ModelMeta, ModelState,
    Registry, SchedulerConfig, Slot,
};
use protocol::Schema;
pub use server::Classifier;

/// Everything `vllm-srun serve` can be told.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// Catalogue ids, GGUF files or package directories. The first is the default model and
    /// also answers to `jev-latest`.
    pub models: Vec<String>,
    /// `(alias, model)` pairs.
    pub aliases: Vec<(String, String)>,
    pub host: String,
    pub port: u16,
    pub schema: Schema,
    pub max_request_bytes: usize,
    pub forward_timeout: Duration,
    /// Tokens one sequence holds (system prompt, state, question).
    pub context_tokens: u32,
    /// Sequences evaluated at once (KV streams), the system prompt's included.
    pub sequences: u32,
    /// Tokens of KV cells each GGUF decision model keeps across requests (0: no prefix
    /// cache).
    pub prefix_cache_tokens: usize,
    pub threads: usize,
    /// Flash attention for decisions on GGUF models; `None` measures at load.
    pub flash_attention: Option<bool>,
    /// The forward plain embedding models run on ([`ENCODER_PATH`] by default).
    pub encoder_path: EncoderPath,
    pub scheduler: SchedulerConfig,
    pub pull_missing: bool,
    /// Replaces every decision model's and token head's scan budget (`limits.max_scan_tokens`).
    pub max_scan_tokens: Option<usize>,
    /// Classification entries: a decision backbone with a fixed label set.
    pub classifiers: Vec<Classifier>,
    /// Batching of encoders.
    pub encoder: engine::encode::EncoderConfig,
    /// Most tasks one /v1/bundle may carry.
    pub max_bundle_tasks: usize,
    /// Connections, header and body timeouts, large-body slots.
    pub transport: server::Transport,
    /// Text generation on GGUF models (chat, completions, SIE generate); `None`: off.
    pub generate: Option<engine::GenerateConfig>,
    /// Models (as given) that serve decisions only.
    pub no_generate: Vec<String>,
    /// Object detectors attached to decision models, `(model as given, detector)`: the model
    /// then answers box questions about images.
    pub detectors: Vec<(String, String)>,
    /// A detector that cannot be fetched or loaded leaves its model serving without box
    /// questions (a warning) instead of failing the model's load: the whole service's default.
    pub detectors_optional: bool,
    /// The router in front of the worker on the same port (System Two, System One
    /// published); `None`: the worker alone.
    pub router: Option<router::RouterConfig>,
    /// The keys service in front of the router (keys, limits, admission); only with a
    /// router.
    pub service: Option<ServiceOptions>,
    /// The web pages (home, Keys, status) beside the router's routes; only with a router.
    pub pages: bool,
    /// Also answer SIE work pulled from NATS JetStream (`serve --nats`); `None`: HTTP only.
    pub nats: Option<NatsOptions>,
}

/// Where a worker pulls SIE work from, and how.
#[derive(Debug, Clone)]
pub struct NatsOptions {
    /// `nats://host:port`.
    pub url: String,
    pub worker: queue::WorkerConfig,
}

/// The keys service's settings and where it stores its data.
#[derive(Debug, Clone)]
pub struct ServiceOptions {
    pub config: service::ServiceConfig,
    /// `sqlite://…` or `postgres://…`.
    pub database_url: String,
}

impl ServiceOptions {
    /// Defaults on a SQLite file in `dir` (created if needed).
    pub fn in_dir(dir: &std::path::Path) -> anyhow::Result<ServiceOptions> {
        std::fs::create_dir_all(dir).map_err(|e| {
            anyhow::anyhow!("cannot create the data directory {}: {e}", dir.display())
        })?;
        Ok(ServiceOptions {
            config: service::ServiceConfig::default(),
            database_url: service::Store::sqlite_url(dir),
        })
    }
}

/// The data directory of a user: `$XDG_DATA_HOME/vllm-srun`, else
/// `~/.local/share/vllm-srun`.
pub fn default_data_dir() -> std::path::PathBuf {
    std::env::var_os("XDG_DATA_HOME")
        .map(std::path::PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| std::path::Path::new(&h).join(".local/share")))
        .unwrap_or_else(|| std::path::PathBuf::from("."))
        .join("vllm-srun")
}

/// The names the service counts and lists: every published System One name and
/// `vllm-sr/auto`. A deployment of this process's worker that publishes `*` publishes the
/// names of `local` (its models and aliases); a remote one is counted as `*`.
fn service_models(rc: &router::RouterConfig, local: &[String]) -> Vec<String> {
    let mut names = vec![router::config::AUTO_MODEL.to_string()];
    for d in &rc.deployments {
        let in_process = d.workers.iter().all(|w| w == router::config::IN_PROCESS);
        for m in &d.models {
            let each: Vec<String> = if m == "*" && in_process {
                local.to_vec()
            } else {
                vec![m.clone()]
            };
            for m in each {
                if !names.contains(&m) {
                    names.push(m);
                }
            }
        }
    }
    names
}

/// The pages, when asked for, beside `app`.
fn with_pages(app: axum::Router, pages: bool) -> anyhow::Result<axum::Router> {
    if !pages {
        return Ok(app);
    }
    Ok(web::app(&web::Site::default())?.merge(app))
}

/// Put the keys service in front of a router's app.
async fn with_service(
    app: axum::Router,
    rc: &router::RouterConfig,
    local: &[String],
    o: &ServiceOptions,
) -> anyhow::Result<axum::Router> {
    let store = service::Store::open(&o.database_url).await?;
    // The guard in front of the router reads what the router's listener reads.
    let config = service::ServiceConfig {
        max_request_bytes: rc.max_request_bytes(),
        ..o.config.clone()
    };
    let svc = service::Service::new(
        config,
        store,
        Arc::new(service::clock::SystemClock),
        service_models(rc, local),
    );
    Ok(service::http::app(svc, app))
}

impl Default for ServeOptions {
    fn default() -> Self {
        ServeOptions {
            models: vec!["qwen2.5-1.5b".into(), "minilm-l6".into()],
            aliases: Vec::new(),
            host: "127.0.0.1".into(),
            port: 8000,
            schema: Schema::V5,
            max_request_bytes: protocol::limits::WORKER_REQUEST_BYTES,
            forward_timeout: Duration::from_secs(60),
            context_tokens: 8192,
            sequences: 8,
            prefix_cache_tokens: 16_384,
            threads: 0,
            flash_attention: None,
            encoder_path: ENCODER_PATH,
            scheduler: SchedulerConfig::default(),
            pull_missing: true,
            max_scan_tokens: None,
            classifiers: Vec::new(),
            encoder: engine::encode::EncoderConfig::default(),
            max_bundle_tasks: 32,
            transport: server::Transport::default(),
            generate: Some(engine::GenerateConfig::default()),
            no_generate: Vec::new(),
            detectors: Vec::new(),
            detectors_optional: false,
            router: None,
            service: None,
            pages: true,
            nats: None,
        }
    }
}

/// The models `serve` runs with no arguments: the whole service (worker and router on the
/// built-in config) needs the large and small chat models, the Sparrow signal model and the
/// guard's heads on MiniLM.
pub fn default_service_models() -> Vec<String> {
    [
        "qwen2.5-1.5b",
        "qwen2.5-0.5b",
        "minilm-l6",
        "minilm-l6-router",
        "sparrow-nano",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// The detectors the whole service attaches (model, detector): the default decision model
/// answers questions about pictures with CenterNet (surer than NanoDet of what a photograph
/// holds and where, within the forward time issue 65 allows).
pub fn default_service_detectors() -> Vec<(String, String)> {
    vec![("qwen2.5-1.5b".into(), "centernet-coco".into())]
}

/// The built-in router configuration.
pub fn default_router() -> anyhow::Result<router::RouterConfig> {
    Ok(router::RouterConfig::from_yaml(
        router::DEFAULT_CONFIG,
        "built-in router config",
    )?)
}

/// What a package directory may say about itself (`card.json`). A card is descriptive and
/// may carry more than this; `decision_config.json`, which changes answers, is read strictly.
#[derive(serde::Deserialize, Default)]
#[serde(default)]
struct CardFile {
    description: Option<String>,
    release_date: Option<String>,
    revision: Option<String>,
    aliases: Vec<String>,
}

/// What a package directory's `card.json` says of the model, over what was planned.
fn apply_card(meta: &mut ModelMeta, dir: &Path) -> anyhow::Result<()> {
    let card: CardFile = read_json(&dir.join("card.json"))?;
    if let Some(d) = card.description {
        meta.description = d;
    }
    if let Some(d) = card.release_date {
        meta.release_date = d;
    }
    if let Some(r) = card.revision {
        meta.revision = r;
    }
    meta.aliases.extend(card.aliases);
    Ok(())
}

fn read_json<T: serde::de::DeserializeOwned + Default>(path: &Path) -> anyhow::Result<T> {
    if !path.is_file() {
        return Ok(T::default());
    }
    let text =
        std::fs::read_to_string(path).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    serde_json::from_str(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
}

fn plan_meta(spec: &str, first: bool, aliases: &[(String, String)]) -> ModelMeta {
    let (name, description, release_date, revision, sha) = match hub::entry(spec) {
        Some(e) => (
            e.id.to_string(),
            e.description.to_string(),
            e.release_date.to_string(),
            format!("{}=={}", e.parts[0].0, e.parts[0].1),
            Some(e.sha256.to_string()),
        ),
        None => {
            let path = Path::new(spec);
            let stem = std::fs::canonicalize(path)
                .ok()
                .and_then(|p| p.file_stem().map(|s| s.to_string_lossy().into_owned()))
                .unwrap_or_else(|| spec.to_string());
            (
                stem,
                format!("{} model from {spec}", plan_kind(spec).word()),
                String::new(),
                "local".into(),
                None,
            )
        }
    };
    let mut all: Vec<String> = aliases
        .iter()
        .filter(|(_, m)| *m == name || *m == spec)
        .map(|(a, _)| a.clone())
        .collect();
    if first {
        all.push("jev-latest".into());
    }
    ModelMeta {
        name,
        description,
        release_date,
        revision,
        sha256: sha,
        aliases: all,
    }
}

/// The kind a `--model` names, known before loading: a catalogue entry's kind, an encoder
/// directory (`config.json` and `model.safetensors`), else a GGUF decision model.
fn plan_kind(spec: &str) -> ModelKind {
    let encoder = match hub::entry(spec) {
        // A catalogue encoder that ships decision heads serves decisions.
        Some(e) => e.kind == hub::Kind::Encoder && e.decision_adapters.is_none(),
        None => {
            // An encoder directory that holds decision heads serves decisions.
            let p = Path::new(spec);
            p.join("config.json").is_file()
                && p.join("model.safetensors").is_file()
                && !p.join(adapt::ADAPTERS_FILE).is_file()
        }
    };
    if encoder {
        ModelKind::Encoder
    } else {
        ModelKind::Decision
    }
}

/// How an encoder directory's forward runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EncoderPath {
    /// candle, F32: the reference path.
    Candle,
    /// llama.cpp on a GGUF copy of the weights, their matrices in this precision.
    Llama(backend_candle::gguf::Precision),
}

/// The path a plain embedding model runs on, chosen by `vllm-srun-bench --embeddings` (its table of
/// candidates): the fastest whose vectors stay within 1e-3 cosine of the F32 candle path.
pub const ENCODER_PATH: EncoderPath = EncoderPath::Llama(backend_candle::gguf::Precision::F16);

/// The GGUF copy of an encoder's weights in `precision`, written into the cache by `models
/// pull` or on first use (keyed by the weights' checksum and the converter's format) and
/// reused after.
pub fn encoder_gguf(
    dir: &Path,
    sha256: Option<&str>,
    pooling: &str,
    precision: backend_candle::gguf::Precision,
) -> anyhow::Result<PathBuf> {
    let sha = match sha256 {
        Some(s) => s.to_string(),
        None => hub::sha256_file(&dir.join("model.safetensors"))?,
    };
    let short: String = sha.chars().take(16).collect();
    let out = hub::cache_dir().join("converted").join(format!(
        "{short}-{pooling}-{}-v{}.gguf",
        precision.name(),
        backend_candle::gguf::FORMAT
    ));
    if !out.is_file() {
        std::fs::create_dir_all(out.parent().unwrap_or(Path::new(".")))
            .map_err(|e| anyhow::anyhow!("{}: {e}", out.display()))?;
        backend_candle::gguf::write_bert(dir, pooling, precision, &out)?;
    }
    Ok(out)
}

/// Write a cached catalogue encoder's GGUF copy for [`ENCODER_PATH`] if its forward runs
/// there; `None` for other models and for encoders that stay on candle.
pub fn prepare_encoder(e: &hub::Entry) -> anyhow::Result<Option<PathBuf>> {
    let EncoderPath::Llama(precision) = ENCODER_PATH else {
        return Ok(None);
    };
    if e.kind != hub::Kind::Encoder {
        return Ok(None);
    }
    let dir = hub::package_dir(e.id);
    let text = backend_candle::BertEncoder::load_text(&dir)?;
    let info = engine::Encoder::info(&text);
    if !runs_on_llama(&dir, info) {
        return Ok(None);
    }
    encoder_gguf(&dir, Some(e.sha256), &info.pooling, precision).map(Some)
}

/// Whether llama.cpp can run an encoder: a plain BERT, no classification head, mean or CLS
/// pooling.
fn runs_on_llama(dir: &Path, info: &engine::encode::EncoderInfo) -> bool {
    info.labels.is_none()
        && !info.per_token
        && backend_candle::gguf::pooling_type(&info.pooling).is_some()
        && backend_candle::gguf::unsupported(dir).is_none()
}

/// Load an encoder directory on `path`. Classification heads and max pooling, which llama.cpp
/// does not serve, stay on candle whatever the path.
pub fn load_encoder(
    dir: &Path,
    sha256: Option<&str>,
    threads: usize,
    path: EncoderPath,
) -> anyhow::Result<Arc<dyn engine::Encoder>> {
    let candle = || -> anyhow::Result<Arc<dyn engine::Encoder>> {
        Ok(Arc::new(backend_candle::BertEncoder::load(dir)?))
    };
    let EncoderPath::Llama(precision) = path else {
        return candle();
    };
    let text = backend_candle::BertEncoder::load_text(dir)?;
    let info = engine::Encoder::info(&text);
    if !runs_on_llama(dir, info) {
        return candle();
    }
    let gguf = encoder_gguf(dir, sha256, &info.pooling, precision)?;
    let config = backend_llama::LlamaEncoderConfig {
        threads,
        dtype: precision.name().into(),
        ..Default::default()
    };
    let enc = backend_llama::LlamaEncoder::load(&gguf, text, config)?;
    Ok(Arc::new(enc))
}

/// One of a package's files: its directory's own `name` wins over the text the catalogue
/// ships for it (`shipped`); `None` when it has neither.
fn package_file<T: serde::de::DeserializeOwned + Default>(
    spec: &str,
    dir: Option<&Path>,
    name: &str,
    shipped: Option<&str>,
) -> anyhow::Result<Option<T>> {
    match (dir.map(|d| d.join(name)).filter(|p| p.is_file()), shipped) {
        (Some(path), _) => read_json(&path).map(Some),
        (None, Some(text)) => serde_json::from_str(text)
            .map(Some)
            .map_err(|e| anyhow::anyhow!("{spec}: the catalogue's {name}: {e}")),
        (None, None) => Ok(None),
    }
}

/// A decision model's config (`decision_config.json`, see [`package_file`]); without one,
/// the engine's defaults. Whichever it is, it is validated.
fn decision_config(
    spec: &str,
    dir: Option<&Path>,
    shipped: Option<&str>,
) -> anyhow::Result<DecisionConfig> {
    let config: DecisionConfig =
        package_file(spec, dir, "decision_config.json", shipped)?.unwrap_or_default();
    config.validate(
        engine::package::TREE_LAYOUTS,
        engine::package::TREE_ATTENTION_MODES,
    )?;
    Ok(config)
}

/// A resolved decision model's config (see [`decision_config`]).
fn package_config(spec: &str, resolved: &hub::Resolved) -> anyhow::Result<DecisionConfig> {
    let shipped = resolved.entry.as_ref().and_then(|e| e.decision_config);
    decision_config(spec, resolved.dir.as_deref(), shipped)
}

/// A package's router signals (system-duo-api.txt, "Router signals"): `router_questions.json`
/// (question id to question, see [`package_file`]).
fn router_questions(
    spec: &str,
    dir: Option<&Path>,
    shipped: Option<&str>,
) -> anyhow::Result<std::collections::BTreeMap<String, serde_json::Value>> {
    Ok(package_file(spec, dir, "router_questions.json", shipped)?.unwrap_or_default())
}

/// A package's decision adapters (`decision_adapters.json`, written by `vllm-srun adapt`,
/// see [`package_file`]), checked against their questions; `None` when it has none.
pub fn decision_adapters(
    spec: &str,
    dir: Option<&Path>,
    shipped: Option<&str>,
) -> anyhow::Result<Option<engine::adapter::Adapters>> {
    let file: Option<engine::adapter::AdapterFile> =
        package_file(spec, dir, adapt::ADAPTERS_FILE, shipped)?;
    file.map(|f| engine::adapter::Adapters::new(f).map_err(|e| anyhow::anyhow!("{spec}: {e}")))
        .transpose()
}

/// Resolve, load and start one model; the slot's state follows the steps.
fn load(spec: &str, slot: &Slot, o: &ServeOptions) -> anyhow::Result<Loaded> {
    slot.set_state(ModelState::Loading);
    let resolved = hub::resolve(spec, o.pull_missing)?;
    let mut meta = slot.planned().clone();
    if resolved.kind == hub::Kind::Encoder {
        let dir = resolved
            .dir
            .clone()
            .ok_or_else(|| anyhow::anyhow!("{spec}: an encoder is a directory"))?;
        if meta.sha256.is_none() {
            meta.sha256 = hub::sha256_file(&resolved.weights).ok();
        }
        let backend = load_encoder(&dir, meta.sha256.as_deref(), o.threads, o.encoder_path)?;
        let shipped = resolved.entry.as_ref().and_then(|e| e.decision_adapters);
        if dir.join(adapt::ADAPTERS_FILE).is_file() || shipped.is_some() {
            return load_heads(spec, &resolved, &dir, backend, meta, slot, o);
        }
        slot.set_state(ModelState::Warming);
        let model = EncoderModel::start(
            meta,
            backend,
            engine::encode::EncoderConfig {
                max_scan_tokens: o.max_scan_tokens,
                ..o.encoder
            },
        )?;
        return Ok(Loaded::Encoder(Arc::new(model)));
    }
    if resolved.kind == hub::Kind::Sparrow {
        return load_sparrow(&resolved, meta, slot, o);
    }
    if resolved.kind == hub::Kind::Detector {
        return Err(anyhow::anyhow!(
            "{spec}: an object detector is not served on its own; attach it to a decision \
             model (--detector MODEL={spec}, or detector = \"{spec}\" in a models file)"
        ));
    }
    let detector = match o.detectors.iter().find(|(m, _)| m == spec) {
        Some((_, d)) => match load_detector(d, o.pull_missing) {
            Ok(d) => Some(d),
            Err(e) if o.detectors_optional => {
                tracing::warn!(model = %spec, error = %e, "serving without its detector: box questions are refused");
                None
            }
            Err(e) => return Err(e),
        },
        None => None,
    };
    let mut config = package_config(spec, &resolved)?;
    config.router_questions = router_questions(
        spec,
        resolved.dir.as_deref(),
        resolved.entry.as_ref().and_then(|e| e.router_questions),
    )?;
    config
        .validate_router_questions()
        .map_err(|e| anyhow::anyhow!("{spec}: {e}"))?;
    // `--max-scan-tokens` replaces the config's budget.
    if o.max_scan_tokens.is_some() {
        config.max_scan_tokens = o.max_scan_tokens;
    }
    if let Some(dir) = resolved.dir.as_deref() {
        apply_card(&mut meta, dir)?;
    }
    if meta.sha256.is_none() {
        meta.sha256 = hub::sha256_file(&resolved.weights).ok();
    }
    let adapters = decision_adapters(
        spec,
        resolved.dir.as_deref(),
        resolved.entry.as_ref().and_then(|e| e.decision_adapters),
    )?;
    let backend = backend_llama::LlamaBackend::load(
        &resolved.weights,
        backend_llama::LlamaConfig {
            context_tokens: o.context_tokens,
            sequences: o.sequences,
            threads: o.threads,
            flash_attention: o.flash_attention,
            probe_cache: Some(hub::cache_dir().join("flash-attention-probes.json")),
            prefix_cache_tokens: o.prefix_cache_tokens,
            ..Default::default()
        },
    )?;
    let backend: Arc<dyn engine::Backend> = Arc::new(backend);
    if let Some(g) = o
        .generate
        .filter(|_| !o.no_generate.iter().any(|m| m == spec))
    {
        // The same weights serve generation; its context opens on the first request.
        slot.set_text(engine::TextModel::new(&meta.name, backend.clone(), g)?);
    }
    slot.set_state(ModelState::Warming);
    let model = DecisionModel::start(meta, config, backend, o.scheduler.clone())?;
    let model = match adapters {
        Some(a) => model.with_adapters(a)?,
        None => model,
    };
    let model = match detector {
        Some(d) => model.with_detector(d),
        None => model,
    };
    Ok(Loaded::Decision(Arc::new(model)))
}

/// Resolve and load an object detector to attach to a decision model.
fn load_detector(spec: &str, pull: bool) -> anyhow::Result<Arc<dyn engine::backend::Detector>> {
    let resolved = hub::resolve(spec, pull)?;
    let dir = match (resolved.kind, resolved.dir) {
        (hub::Kind::Detector, Some(dir)) => dir,
        _ => {
            return Err(anyhow::anyhow!(
                "{spec}: not an object detector (e.g. nanodet-coco, centernet-coco)"
            ))
        }
    };
    // The graph the catalogue or the directory resolved to says which network it is.
    let failed = |e: backend_detector::DetectError| anyhow::anyhow!("{spec}: {e}");
    if resolved.weights.ends_with("centernet.json") {
        return Ok(Arc::new(
            backend_detector::CenterNet::load(&dir).map_err(failed)?,
        ));
    }
    Ok(Arc::new(
        backend_detector::NanoDet::load(&dir).map_err(failed)?,
    ))
}

/// Load a Sparrow static decision model: its own config sets the temperatures per question
/// type; it answers choice, noul and score.
fn load_sparrow(
    resolved: &hub::Resolved,
    mut meta: ModelMeta,
    slot: &Slot,
    o: &ServeOptions,
) -> anyhow::Result<Loaded> {
    if meta.sha256.is_none() && resolved.weights.is_file() {
        meta.sha256 = hub::sha256_file(&resolved.weights).ok();
    }
    let model = backend_sparrow::SparrowModel::load(&resolved.weights)?;
    if meta.revision.is_empty() || meta.revision == "local" {
        meta.revision = model.config.name.clone();
    }
    let config = DecisionConfig {
        max_scan_tokens: o.max_scan_tokens,
        router_questions: router_questions(
            &meta.name,
            resolved.dir.as_deref(),
            resolved.entry.as_ref().and_then(|e| e.router_questions),
        )?,
        ..model.decision_config()
    };
    config
        .validate_router_questions()
        .map_err(|e| anyhow::anyhow!("{}: {e}", meta.name))?;
    slot.set_state(ModelState::Warming);
    DecisionModel::start_direct(meta, config, Arc::new(model))
        .map(|m| Loaded::Decision(Arc::new(m)))
        .map_err(anyhow::Error::from)
}

/// A package of decision heads trained on an encoder (`vllm-srun adapt --model minilm-l6`):
/// the encoder as a [`Backbone`](engine::encode::backbone::Backbone) that answers choice, noul
/// and score questions only through the heads, checked against it at load.
fn load_heads(
    spec: &str,
    resolved: &hub::Resolved,
    dir: &Path,
    encoder: Arc<dyn engine::Encoder>,
    mut meta: ModelMeta,
    slot: &Slot,
    o: &ServeOptions,
) -> anyhow::Result<Loaded> {
    apply_card(&mut meta, dir)?;
    let entry = resolved.entry.as_ref();
    let adapters = decision_adapters(spec, Some(dir), entry.and_then(|e| e.decision_adapters))?
        .ok_or_else(|| anyhow::anyhow!("{spec}: no {}", adapt::ADAPTERS_FILE))?;
    let mut config = decision_config(spec, Some(dir), entry.and_then(|e| e.decision_config))?;
    config.question_types = if adapters.questions().is_empty() {
        Vec::new()
    } else {
        vec!["choice".into(), "noul".into(), "score".into()]
    };
    if let Some(span) = adapters.span_head() {
        config.question_types.push("span".into());
        // A head trained on the preset answers it; one trained on labels answers those.
        let preset = span.head.question.get("preset").and_then(|p| p.as_str());
        config.presets.extend(preset.map(String::from));
    }
    config.router_questions =
        router_questions(spec, Some(dir), entry.and_then(|e| e.router_questions))?;
    config
        .validate_router_questions()
        .map_err(|e| anyhow::anyhow!("{spec}: {e}"))?;
    if o.max_scan_tokens.is_some() {
        config.max_scan_tokens = o.max_scan_tokens;
    }
    let backbone = engine::encode::backbone::Backbone::new(encoder, o.threads, 64);
    slot.set_state(ModelState::Warming);
    DecisionModel::start_direct(meta, config, Arc::new(backbone))
        .and_then(|m| m.with_adapters(adapters))
        .map(|m| Loaded::Decision(Arc::new(m)))
        .map_err(anyhow::Error::from)
}

/// A bound server: its address and the future that serves it.
pub struct Bound {
    pub addr: SocketAddr,
    pub registry: Arc<Registry>,
    listener: tokio::net::TcpListener,
    app: axum::Router,
    transport: server::Transport,
}

impl Bound {
    /// Serve until the process gets Ctrl-C.
    pub async fn run(self) -> std::io::Result<()> {
        server::serve_app(self.listener, self.app, &self.transport).await
    }
}

/// Bind the port at once, and load the models on their own threads: `/health` answers
/// `loading` until they are ready.
pub async fn bind(o: ServeOptions) -> anyhow::Result<Bound> {
    let slots: Vec<(String, Arc<Slot>)> = o
        .models
        .iter()
        .enumerate()
        .map(|(i, spec)| {
            let slot = Slot::new(plan_meta(spec, i == 0, &o.aliases), plan_kind(spec));
            (spec.clone(), slot)
        })
        .collect();
    let registry = Arc::new(Registry::new(
        slots.iter().map(|(_, s)| s.clone()).collect(),
    ));
    let config = server::ServerConfig {
        schema: o.schema,
        // Behind the router, the worker reads what the router passes on: worker-api.txt gives
        // the workers it manages 96 MiB, so the public face's own limit (48 MiB) is the one a
        // client meets, never an inner 413.
        max_request_bytes: if o.router.is_some() {
            o.max_request_bytes
                .max(protocol::limits::MANAGED_WORKER_REQUEST_BYTES)
        } else {
            o.max_request_bytes
        },
        forward_timeout: o.forward_timeout,
        classifiers: o.classifiers.clone(),
        max_bundle_tasks: o.max_bundle_tasks,
        transport: o.transport.clone(),
    };
    let addr = format!("{}:{}", o.host, o.port);
    let listener = tokio::net::TcpListener::bind(&addr)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {addr}: {e}"))?;
    let bound = listener.local_addr()?;
    let transport = config.transport.clone();
    let worker = server::router(registry.clone(), config);
    if let Some(n) = &o.nats {
        let queue = queue::Worker::connect(&n.url)
            .await
            .map_err(|e| anyhow::anyhow!("--nats {}: {e}", n.url))?;
        let (registry, app, config) = (registry.clone(), worker.clone(), n.worker.clone());
        tokio::spawn(async move {
            // Pull only what can be answered: the models that loaded (and their aliases).
            let models = loaded_names(&registry).await;
            let handler = Arc::new(server::QueueHandler::new(app));
            if let Err(e) = queue.run(models, config, handler).await {
                tracing::error!(error = %e, "the NATS work loop stopped");
            }
        });
    }
    let app = match &o.router {
        None => worker,
        Some(rc) => {
            // The router answers what it routes; every other path reaches the worker.
            let rt = router::Runtime::new(rc.clone(), Some(worker.clone()), None)?;
            let checks = rt.clone();
            tokio::spawn(async move { checks.start_health_checks().await });
            let app = with_pages(router::app(rt, false), o.pages)?.fallback_service(worker);
            let local: Vec<String> = registry
                .slots()
                .iter()
                .map(|s| s.meta().name.clone())
                .chain(o.aliases.iter().map(|(a, _)| a.clone()))
                .collect();
            match &o.service {
                Some(so) => with_service(app, rc, &local, so).await?,
                None => app,
            }
        }
    };
    let o = Arc::new(o);
    for (spec, slot) in slots {
        let o = o.clone();
        std::thread::Builder::new()
            .name(format!("load-{spec}"))
            .spawn(move || match load(&spec, &slot, &o) {
                Ok(model) => {
                    tracing::info!(model = %slot.meta().name, "ready");
                    slot.ready(model);
                }
                Err(e) => {
                    tracing::error!(model = %slot.meta().name, error = %e, "load failed");
                    slot.set_state(ModelState::Failed(format!("{e:#}")));
                }
            })?;
    }
    Ok(Bound {
        addr: bound,
        registry,
        listener,
        app,
        transport,
    })
}

/// Once every model has loaded or failed: the names and aliases of those that loaded.
async fn loaded_names(registry: &Registry) -> Vec<String> {
    loop {
        let slots = registry.slots();
        let settled = slots
            .iter()
            .all(|s| matches!(s.state(), ModelState::Ready | ModelState::Failed(_)));
        if settled {
            return slots
                .iter()
                .filter(|s| s.state() == ModelState::Ready)
                .flat_map(|s| {
                    let m = s.meta();
                    std::iter::once(m.name.clone()).chain(m.aliases.iter().cloned())
                })
                .collect();
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// An SIE gateway bound on its port (`vllm-srun gateway`).
pub struct BoundGateway {
    pub addr: SocketAddr,
    listener: tokio::net::TcpListener,
    app: axum::Router,
}

impl BoundGateway {
    /// Serve until the process gets Ctrl-C.
    pub async fn run(self) -> std::io::Result<()> {
        server::serve_app(self.listener, self.app, &server::Transport::default()).await
    }
}

/// Connect to NATS at `nats` and bind the SIE gateway on `host:port` (port 0: a free one).
pub async fn bind_gateway(
    nats: &str,
    config: server::GatewayConfig,
    host: &str,
    port: u16,
) -> anyhow::Result<BoundGateway> {
    let queue = queue::Gateway::connect(nats)
        .await
        .map_err(|e| anyhow::anyhow!("--nats {nats}: {e}"))?;
    let addr = format!("{host}:{port}");
    let listener = tokio::net::TcpListener::bind(&addr)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {addr}: {e}"))?;
    Ok(BoundGateway {
        addr: listener.local_addr()?,
        listener,
        app: server::gateway(queue, config),
    })
}

/// A router bound on its own port (`vllm-srun router`): every worker and backend over HTTP.
pub struct BoundRouter {
    pub addr: SocketAddr,
    listener: tokio::net::TcpListener,
    app: axum::Router,
}

impl BoundRouter {
    /// Serve until the process gets Ctrl-C.
    pub async fn run(self) -> std::io::Result<()> {
        server::serve_app(self.listener, self.app, &server::Transport::default()).await
    }
}

/// Bind a router alone on `host:port` (port 0: a free one) and start its health checks; with
/// `pages`, the web pages too.
pub async fn bind_router(
    config: router::RouterConfig,
    service: Option<&ServiceOptions>,
    pages: bool,
    host: &str,
    port: u16,
) -> anyhow::Result<BoundRouter> {
    let runtime = router::Runtime::new(config.clone(), None, Some(server::prometheus()))?;
    let mut app = with_pages(router::app(runtime.clone(), true), pages)?;
    if let Some(so) = service {
        app = with_service(app, &config, &[], so).await?;
    }
    let addr = format!("{host}:{port}");
    let listener = tokio::net::TcpListener::bind(&addr)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {addr}: {e}"))?;
    let checks = runtime.clone();
    tokio::spawn(async move { checks.start_health_checks().await });
    Ok(BoundRouter {
        addr: listener.local_addr()?,
        listener,
        app,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every `decision_config.json` the catalogue ships parses and validates through the path
    /// a load takes, so a shipped model cannot fail to load on its own config.
    #[test]
    fn the_catalogues_decision_configs_load() {
        let mut shipped = Vec::new();
        for e in hub::catalog() {
            let Some(text) = e.decision_config else {
                continue;
            };
            if let Err(err) = decision_config(e.id, None, Some(text)) {
                panic!("{}: {err}", e.id);
            }
            shipped.push(e.id);
        }
        assert_eq!(shipped, ["qwen2.5-1.5b", "qwen2.5-0.5b"]);
    }

    /// Every `decision_adapters.json` the catalogue ships parses and passes the load's checks,
    /// and every signal of the default router whose model is `minilm-l6-router` is answered by
    /// one of its heads as the package words the signal (a head is found by its words: a
    /// signal reworded without retraining would lose it), as is the guard by `qwen2.5-1.5b`'s
    /// head (the slower option).
    #[test]
    fn the_catalogues_decision_adapters_load_and_answer_the_default_signals() {
        let mut shipped = Vec::new();
        for e in hub::catalog() {
            let Some(text) = e.decision_adapters else {
                continue;
            };
            let adapters = decision_adapters(e.id, None, Some(text))
                .unwrap_or_else(|err| panic!("{}: {err}", e.id))
                .expect("shipped");
            assert!(
                adapters.default,
                "{}: the shipped heads answer by default",
                e.id
            );
            let config = DecisionConfig {
                router_questions: router_questions(e.id, None, e.router_questions).expect("parses"),
                ..DecisionConfig::default()
            };
            shipped.push((e.id, adapters, config));
        }
        let ids: Vec<&str> = shipped.iter().map(|(id, ..)| *id).collect();
        assert_eq!(ids, ["qwen2.5-1.5b", "minilm-l6-router", "minilm-l6-pii"]);
        // The pii package is a span head alone, trained on the preset.
        let pii = &shipped[2].1;
        assert!(pii.questions().is_empty());
        let span = pii.span_head().expect("a span head");
        assert_eq!(span.head.question["preset"], "pii");
        assert_eq!(span.labels.len(), protocol::PII_LABELS.len());
        let built_in = default_router().expect("the built-in config");
        let mut answered = Vec::new();
        for (id, adapters, config) in &shipped {
            for s in &built_in.signals {
                let asks = s.model.as_deref() == Some(*id) || s.name == "vsr_jailbreak";
                let Some(q) = config.router_questions.get(&s.name).filter(|_| asks) else {
                    continue;
                };
                let q = protocol::request::parse_question(q, protocol::Schema::V5)
                    .expect("a valid question");
                assert!(adapters.find(&q).is_some(), "{id}: no head for {}", s.name);
                answered.push((*id, s.name.clone()));
            }
        }
        fn signal(id: &'static str, name: &str) -> (&'static str, String) {
            (id, name.to_string())
        }
        assert_eq!(
            answered,
            [
                signal("qwen2.5-1.5b", "vsr_jailbreak"),
                signal("minilm-l6-router", "vsr_task"),
                signal("minilm-l6-router", "vsr_needs_deliberation"),
                signal("minilm-l6-router", "vsr_jailbreak"),
                signal("minilm-l6-router", "vsr_jailbreak_view"),
            ]
        );
    }

    /// Every router signal the catalogue ships is a valid question of its model, and the
    /// built-in router asks each model's signals by the package's own ids and words, so what
    /// the router reads is what the package answers.
    #[test]
    fn the_default_routers_signals_are_the_packages_signals() {
        let built_in = default_router().expect("the built-in config");
        let mut checked = 0;
        for s in &built_in.signals {
            let model = s
                .model
                .as_deref()
                .expect("each built-in signal names its model");
            let e = hub::entry(model).expect("a catalogue model");
            let shipped = router_questions(model, None, e.router_questions).expect("parses");
            let config = DecisionConfig {
                router_questions: shipped.clone(),
                ..DecisionConfig::default()
            };
            config.validate_router_questions().expect("valid");
            let q = shipped
                .get(&s.name)
                .unwrap_or_else(|| panic!("{model} ships no router signal {}", s.name));
            assert_eq!(q["instructions"], s.instructions.as_str(), "{}", s.name);
            assert_eq!(q.get("criteria"), s.criteria.as_ref(), "{}", s.name);
            checked += 1;
        }
        assert_eq!(checked, 4);
    }
}
