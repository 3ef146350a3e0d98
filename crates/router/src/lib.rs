//! System Two and the published System One: OpenAI chat completions with `model:
//! vllm-sr/auto` routed to a backend by decision signals, and System One requests forwarded
//! to decision deployments by public model name.
//!
//! The router talks to workers and backends through [`upstream::Upstream`]: over HTTP, or to
//! the worker of this same process without a socket. It never imports the worker's code.

mod chat;
pub mod config;
pub mod error;
pub mod pool;
pub mod rules;
pub mod signals;
pub mod status;
mod systemone;
pub mod upstream;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{DefaultBodyLimit, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use metrics_exporter_prometheus::PrometheusHandle;
use serde_json::{json, Value};

use config::{Backend, Deployment, ReasoningFamily, AUTO_MODEL, IN_PROCESS};
pub use config::{ConfigError, RouterConfig};
use pool::Pool;
use upstream::{HttpUpstream, LocalUpstream, Upstream};

/// The built-in configuration of `vllm-srun serve`: System One and System Two from the
/// models of the same process.
pub const DEFAULT_CONFIG: &str = include_str!("default.yaml");

/// A chat backend as the router uses it.
struct ChatBackend {
    upstream: Arc<dyn Upstream>,
    family: Option<ReasoningFamily>,
}

/// Everything a request needs: the validated config, the deployments' pools, the backends.
pub struct Runtime {
    pub config: RouterConfig,
    deployments: Vec<(Deployment, Arc<Pool>)>,
    /// Backend by model name.
    backends: HashMap<String, ChatBackend>,
    /// Measured latency per model (exponentially averaged).
    latency: Mutex<HashMap<String, Latency>>,
    /// The signals the rules read, grouped by deployment (index) and model: one decisions
    /// call per group.
    signal_groups: Vec<(usize, String, Vec<usize>)>,
    max_request_bytes: usize,
    deadline_ms: u64,
    max_deadline_ms: u64,
    metrics: Option<PrometheusHandle>,
    /// This process's worker (`serve`), asked for its model listing.
    local: Option<Arc<dyn Upstream>>,
}

/// Why a router's runtime does not start from its config.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("the HTTP client does not build: {0}")]
    Client(#[from] reqwest::Error),
    #[error("{IN_PROCESS} is served only by `vllm-srun serve`")]
    NoLocalWorker,
}

impl Runtime {
    /// Build the pools and backends. `local` is this process's worker, needed when a
    /// worker or backend is `in-process`; `metrics` renders `/metrics` of a standalone router.
    pub fn new(
        config: RouterConfig,
        local: Option<axum::Router>,
        metrics: Option<PrometheusHandle>,
    ) -> Result<Arc<Runtime>, StartError> {
        let client = reqwest::Client::builder()
            .pool_idle_timeout(Duration::from_secs(60))
            .tcp_nodelay(true)
            .build()?;
        let local: Option<Arc<dyn Upstream>> =
            local.map(|app| Arc::new(LocalUpstream::new(app)) as Arc<dyn Upstream>);
        let upstream = |url: &str, key: Option<String>| -> Result<Arc<dyn Upstream>, StartError> {
            if url == IN_PROCESS {
                local.clone().ok_or(StartError::NoLocalWorker)
            } else {
                Ok(Arc::new(HttpUpstream::new(url, client.clone(), key)))
            }
        };
        let mut deployments = Vec::new();
        for d in &config.deployments {
            let workers = d
                .workers
                .iter()
                .map(|w| upstream(w, None))
                .collect::<Result<Vec<_>, _>>()?;
            deployments.push((d.clone(), Arc::new(Pool::new(workers, d.max_outstanding))));
        }
        let mut backends = HashMap::new();
        for b in &config.backends {
            let Backend {
                url,
                api_key,
                models,
                reasoning_family,
                ..
            } = b;
            let up = upstream(url, api_key.clone())?;
            for m in models {
                backends.insert(
                    m.clone(),
                    ChatBackend {
                        upstream: up.clone(),
                        family: reasoning_family
                            .as_ref()
                            .and_then(|f| config.reasoning_families.get(f).cloned()),
                    },
                );
            }
        }
        let mut groups: std::collections::BTreeMap<(usize, String), Vec<usize>> =
            std::collections::BTreeMap::new();
        let used: std::collections::HashSet<&str> = config
            .used_signals()
            .iter()
            .map(|s| s.name.as_str())
            .collect();
        for (i, s) in config.signals.iter().enumerate() {
            if !used.contains(s.name.as_str()) {
                continue;
            }
            let Some(d) = deployments.iter().position(|(d, _)| d.name == s.deployment) else {
                continue;
            };
            let model = s
                .model
                .clone()
                .or_else(|| deployments[d].0.models.first().cloned())
                .unwrap_or_default();
            groups.entry((d, model)).or_default().push(i);
        }
        let signal_groups = groups.into_iter().map(|((d, m), v)| (d, m, v)).collect();
        let listener = config.listeners.first();
        let api = listener
            .map(|l| l.apis.systemone.clone())
            .unwrap_or_default();
        Ok(Arc::new(Runtime {
            max_request_bytes: config.max_request_bytes(),
            deadline_ms: api.deadline_ms,
            max_deadline_ms: api.max_deadline_ms,
            config,
            deployments,
            backends,
            latency: Mutex::new(HashMap::new()),
            signal_groups,
            metrics,
            local,
        }))
    }

    /// Check the workers' health now, then every two seconds. Call within a Tokio runtime.
    pub async fn start_health_checks(&self) {
        for (_, p) in &self.deployments {
            p.check().await;
            p.watch(Duration::from_secs(2));
        }
    }

    /// The state of every published model and of `vllm-sr/auto`.
    pub fn model_status(&self) -> Vec<status::ModelStatus> {
        let seen: Vec<(&Deployment, Vec<pool::Seen>)> = self
            .deployments
            .iter()
            .map(|(d, p)| (d, p.seen()))
            .collect();
        let mut one = status::system_one(&seen);
        let signals: Vec<String> = self
            .signal_groups
            .iter()
            .map(|(_, m, _)| m.clone())
            .collect();
        let chat = status::in_process_chat(&self.config.backends);
        let two = status::system_two(&one, &signals, &chat);
        one.insert(0, two);
        one
    }

    /// The deployment that publishes a model name: one that lists it, else one with `*`.
    fn deployment(&self, model: &str) -> Option<&(Deployment, Arc<Pool>)> {
        self.deployments
            .iter()
            .find(|(d, _)| d.models.iter().any(|m| m == model))
            .or_else(|| {
                self.deployments
                    .iter()
                    .find(|(d, _)| d.models.iter().any(|m| m == "*"))
            })
    }

    /// A backend's time to its answer's head (for a stream, its first token), seconds.
    fn record_ttft(&self, model: &str, seconds: f64) {
        if let Ok(mut t) = self.latency.lock() {
            let e = t.entry(model.to_string()).or_default();
            let v = e.ttft.map_or(seconds, |x| 0.8 * x + 0.2 * seconds);
            e.ttft = Some(v);
            metrics::gauge!("vsr_model_ttft_seconds", "model" => model.to_string()).set(v);
        }
    }

    /// A stream's time per output event after the first, seconds.
    fn record_tpot(&self, model: &str, seconds: f64) {
        if let Ok(mut t) = self.latency.lock() {
            let e = t.entry(model.to_string()).or_default();
            let v = e.tpot.map_or(seconds, |x| 0.8 * x + 0.2 * seconds);
            e.tpot = Some(v);
            metrics::gauge!("vsr_model_tpot_seconds", "model" => model.to_string()).set(v);
        }
    }

    /// The expected time of an answer of `tokens` tokens: TTFT plus TPOT per token (TPOT
    /// counts as zero until a stream has measured it); `None` before any measurement.
    fn expected_seconds(&self, model: &str, tokens: f64) -> Option<f64> {
        let t = self.latency.lock().ok()?;
        let l = t.get(model)?;
        Some(l.ttft? + l.tpot.unwrap_or(0.0) * tokens)
    }
}

/// What the router measured of one model.
#[derive(Debug, Clone, Copy, Default)]
struct Latency {
    ttft: Option<f64>,
    tpot: Option<f64>,
}

/// The router's routes. With `standalone`, also `/health` and `/metrics` (in `serve`, the
/// worker answers those, and every path the router does not route).
pub fn app(rt: Arc<Runtime>, standalone: bool) -> Router {
    let mut r = Router::new()
        .route("/v1/chat/completions", post(chat::chat_completions))
        .route("/v1/models", get(models))
        .route("/pt/api/info", get(info))
        .route("/v1/systemone", post(systemone::systemone))
        .route("/v1/decisions", post(systemone::decisions))
        .route("/v1/systemone/batch", post(systemone::batch))
        .route("/v1/systemone/models", get(systemone::models))
        .route("/api/status", get(status_page_data));
    if standalone {
        r = r
            .route("/health", get(health))
            .route("/metrics", get(metrics_text));
    }
    r.layer(DefaultBodyLimit::disable())
        // Every answer carries `X-Request-Id`: the caller's (also sent on to the worker or
        // backend), or a new one.
        .layer(
            tower::ServiceBuilder::new()
                .layer(tower_http::request_id::SetRequestIdLayer::x_request_id(
                    tower_http::request_id::MakeRequestUuid,
                ))
                .layer(tower_http::request_id::PropagateRequestIdLayer::x_request_id()),
        )
        .with_state(rt)
}

/// A request body read within the public limit by the shared body layer (one layer of gzip
/// or zstd decoded; with `multipart`, a `multipart/form-data` body split into its `request`
/// part and its assets) and parsed as a JSON object; otherwise the error answer in `flavor`'s
/// shape.
async fn read_object(
    rt: &Runtime,
    headers: &axum::http::HeaderMap,
    body: axum::body::Body,
    flavor: error::Shape,
    multipart: bool,
    reason: Option<&'static str>,
) -> Result<
    (
        axum::body::Bytes,
        serde_json::Map<String, serde_json::Value>,
        ::body::Parts,
    ),
    Response,
> {
    let refused = |e: ::body::BodyError| error::RouterError::Body(e).response(flavor);
    let bytes = ::body::read(headers, body, rt.max_request_bytes)
        .await
        .map_err(refused)?;
    let (bytes, parts) = if multipart {
        ::body::split(headers, bytes).await.map_err(refused)?
    } else {
        (bytes, ::body::Parts::new())
    };
    match serde_json::from_slice(&bytes) {
        Ok(serde_json::Value::Object(m)) => Ok((bytes, m, parts)),
        // Worded as the worker words it, so a client reads the same refusal through either.
        Ok(_) => {
            Err(malformed("the request body must be a JSON object".into(), reason).response(flavor))
        }
        Err(e) => {
            Err(malformed(format!("the body is not valid JSON: {e}"), reason).response(flavor))
        }
    }
}

/// A body that is not a JSON object: on System One a validation failure (`body_malformed`),
/// elsewhere (chat) a plain bad request.
fn malformed(message: String, reason: Option<&'static str>) -> error::RouterError {
    match reason {
        Some(_) => error::RouterError::Malformed(message),
        None => error::RouterError::BadRequest {
            message,
            param: None,
            reason: None,
        },
    }
}

fn json_response(status: StatusCode, v: &serde_json::Value) -> Response {
    let mut r = (status, serde_json::to_vec(v).unwrap_or_default()).into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

/// The model list: under `serve`, the worker's own listing (its `models` with their cards,
/// `classifiers`, `limits`, `api_version`, and an OpenAI entry for every model it serves, each
/// with the card and features of that model), with the router's entries beside it:
/// `vllm-sr/auto`, the backends' models and the published decision models. The largest
/// request body is the public one. A standalone router lists its own entries only.
async fn models(State(rt): State<Arc<Runtime>>) -> Response {
    let mut listing = match &rt.local {
        Some(up) => worker_listing(up.as_ref()).await,
        None => None,
    }
    .unwrap_or_else(|| json!({}));
    // What the cards say arrives is what the public face lets through.
    if let Some(models) = listing.get_mut("models").and_then(Value::as_array_mut) {
        for m in models {
            if let Some(limits) = m.pointer_mut("/card/limits").and_then(Value::as_object_mut) {
                public_limits(limits, rt.max_request_bytes);
            }
        }
    }
    let cards: HashMap<String, (Value, Value)> = listing
        .get("models")
        .and_then(serde_json::Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|m| {
            let name = m.get("name")?.as_str()?.to_string();
            let card = m.get("card").cloned().unwrap_or(Value::Null);
            let features = m.get("features").cloned().unwrap_or(Value::Null);
            Some((name, (card, features)))
        })
        .collect();
    let mut data =
        vec![json!({"id": AUTO_MODEL, "object": "model", "created": 0, "owned_by": "vllm-sr"})];
    let mut seen = std::collections::HashSet::new();
    seen.insert(AUTO_MODEL.to_string());
    let worker_data = listing
        .get_mut("data")
        .and_then(|d| d.as_array_mut())
        .map(std::mem::take)
        .unwrap_or_default();
    for mut e in worker_data {
        let Some(id) = e.get("id").and_then(Value::as_str).map(str::to_string) else {
            continue;
        };
        if let (Some((card, features)), Some(o)) = (cards.get(&id), e.as_object_mut()) {
            if !card.is_null() {
                o.insert("card".into(), card.clone());
            }
            if !features.is_null() {
                o.insert("features".into(), features.clone());
            }
        }
        if seen.insert(id) {
            data.push(e);
        }
    }
    for b in &rt.config.backends {
        for m in &b.models {
            if seen.insert(m.clone()) {
                data.push(json!({"id": m, "object": "model", "created": 0, "owned_by": b.name}));
            }
        }
    }
    for (d, _) in &rt.deployments {
        for m in d.models.iter().filter(|m| *m != "*") {
            if seen.insert(m.clone()) {
                data.push(json!({"id": m, "object": "model", "created": 0, "owned_by": d.name}));
            }
        }
    }
    let Some(o) = listing.as_object_mut() else {
        return json_response(StatusCode::OK, &json!({"object": "list", "data": data}));
    };
    o.insert("object".into(), json!("list"));
    if let Some(limits) = o.get_mut("limits").and_then(Value::as_object_mut) {
        limits.insert("max_request_bytes".into(), json!(rt.max_request_bytes));
    }
    o.insert("data".into(), Value::Array(data));
    json_response(StatusCode::OK, &listing)
}

/// A card's limits as the public face reads bodies: no body over `public` bytes arrives, so
/// the largest picture or video is what a multipart body of that size carries beside its
/// request part.
pub(crate) fn public_limits(limits: &mut serde_json::Map<String, Value>, public: usize) {
    limits.insert("max_request_bytes".into(), json!(public));
    let carried = public.saturating_sub(protocol::limits::MULTIPART_HEADROOM_BYTES) as u64;
    for k in ["max_image_bytes", "max_video_bytes"] {
        if let Some(v) = limits.get(k).and_then(Value::as_u64) {
            limits.insert(k.into(), json!(v.min(carried)));
        }
    }
}

/// The in-process worker's `GET /v1/models`, when it answers with a JSON object.
async fn worker_listing(up: &dyn Upstream) -> Option<Value> {
    let req = axum::http::Request::get("/v1/models")
        .body(axum::body::Body::empty())
        .ok()?;
    let resp = up.call(req).await.ok()?;
    if !resp.status().is_success() {
        return None;
    }
    let bytes = axum::body::to_bytes(resp.into_body(), protocol::limits::LISTING_BYTES)
        .await
        .ok()?;
    serde_json::from_slice::<Value>(&bytes)
        .ok()
        .filter(Value::is_object)
}

/// System Two's limits and what `vllm-sr/auto` routes to.
async fn info(State(rt): State<Arc<Runtime>>) -> Response {
    let mut routes_to: Vec<&str> = Vec::new();
    for d in &rt.config.decisions {
        for m in &d.model_refs {
            if !routes_to.contains(&m.model.as_str()) {
                routes_to.push(&m.model);
            }
        }
    }
    json_response(
        StatusCode::OK,
        &json!({
            "models": [{"id": AUTO_MODEL, "routes_to": routes_to}],
            "limits": {
                "max_request_bytes": rt.max_request_bytes,
                "signal_timeout_ms": rt.config.global.model_catalog.signal_timeout_ms,
                "systemone": {"deadline_ms": rt.deadline_ms, "max_deadline_ms": rt.max_deadline_ms},
            },
        }),
    )
}

/// Ready when every deployment has a ready worker.
async fn health(State(rt): State<Arc<Runtime>>) -> Response {
    let deployments: serde_json::Map<String, serde_json::Value> = rt
        .deployments
        .iter()
        .map(|(d, p)| {
            (
                d.name.clone(),
                json!(if p.ready() { "ready" } else { "not_ready" }),
            )
        })
        .collect();
    let ready = rt.deployments.iter().all(|(_, p)| p.ready());
    json_response(
        errors::probe(ready),
        &json!({"status": if ready { "ready" } else { "degraded" }, "deployments": deployments}),
    )
}

/// Every published model's live state, from the workers' last health answers.
async fn status_page_data(State(rt): State<Arc<Runtime>>) -> Response {
    let models = rt.model_status();
    let overall = if models.iter().all(|m| m.state == status::State::Ready) {
        "ready"
    } else {
        "degraded"
    };
    json_response(
        StatusCode::OK,
        &json!({"status": overall, "models": models}),
    )
}

async fn metrics_text(State(rt): State<Arc<Runtime>>) -> Response {
    let text = rt.metrics.as_ref().map(|m| m.render()).unwrap_or_default();
    let mut r = text.into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4"),
    );
    r
}
