//! The HTTP face of the worker (axum): routes, body limits, error rendering, Server-Timing,
//! request ids, metrics and health.

// An `ApiError` is built at most once per request, on the way out; boxing it would add an
// allocation to every error path for no gain.
#![allow(clippy::result_large_err)]

// Shared pieces at the bottom, routes above them, the OpenAPI document and the router on top.
mod body;
mod calls;
mod cards;
pub mod error;
pub mod openapi;
mod respond;
mod routes;
mod timing;
mod transport;
mod work;

use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use axum::extract::DefaultBodyLimit;
use axum::middleware;
use axum::routing::{get, post};
use axum::Router;
use engine::Registry;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use protocol::Schema;

use routes::{bundle, decisions, encoders, gateway, meta, openai, sie};

pub use error::{ApiError, Shape};
pub use transport::{Transport, LARGE_BODY_BYTES};
pub use work::QueueHandler;

/// Settings of a serving process.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    pub schema: Schema,
    pub max_request_bytes: usize,
    /// While a forward runs longer than this, `/health/live` answers 503 `stalled`.
    pub forward_timeout: Duration,
    /// Classification entries served by /v1/classify.
    pub classifiers: Vec<Classifier>,
    /// Most tasks one /v1/bundle may carry.
    pub max_bundle_tasks: usize,
    /// Connections, header and body timeouts, large-body slots.
    pub transport: Transport,
}

/// A classification entry: a decision backbone asked one question with a fixed label set.
#[derive(Debug, Clone, PartialEq, Default, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct Classifier {
    /// The name requests use.
    pub name: String,
    /// The decision model that answers.
    pub backbone: String,
    /// The labels, in order (none for a span classifier with a preset).
    #[serde(default)]
    pub labels: Vec<String>,
    /// Independent label scores (a set question) instead of label probabilities (a choice).
    #[serde(default)]
    pub multi_label: bool,
    /// The question asked about each input.
    #[serde(default)]
    pub instructions: Option<String>,
    /// A span classifier: each input is answered with the spans of its labels (a span
    /// question) instead of label probabilities.
    #[serde(default)]
    pub spans: bool,
    /// A span classifier's preset label set (`pii`) when it lists no labels.
    #[serde(default)]
    pub preset: Option<String>,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            schema: Schema::V5,
            max_request_bytes: protocol::limits::WORKER_REQUEST_BYTES,
            forward_timeout: Duration::from_secs(60),
            classifiers: Vec::new(),
            max_bundle_tasks: 32,
            transport: Transport::default(),
        }
    }
}

/// Shared state of the handlers.
pub struct AppState {
    pub registry: Arc<Registry>,
    pub config: ServerConfig,
    pub metrics: PrometheusHandle,
    pub started: Instant,
    pub(crate) admission: transport::Admission,
}

/// The process's Prometheus handle (installed on first use); other HTTP faces of the same
/// process render their `/metrics` with it.
pub fn prometheus() -> PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let recorder = PrometheusBuilder::new().build_recorder();
            let handle = recorder.handle();
            // Another recorder may already be installed (tests start several servers).
            let _ = metrics::set_global_recorder(recorder);
            handle
        })
        .clone()
}

/// Build the router.
pub fn router(registry: Arc<Registry>, config: ServerConfig) -> Router {
    let state = Arc::new(AppState {
        registry,
        admission: transport::Admission::new(&config.transport),
        config,
        metrics: prometheus(),
        started: Instant::now(),
    });
    Router::new()
        .route("/v1/decisions", post(decisions::decisions))
        .route("/v1/systemone", post(decisions::systemone))
        .route("/v1/systemone/batch", post(decisions::systemone_batch))
        .route("/v1/chat/completions", post(openai::chat_completions))
        .route("/v1/completions", post(openai::completions))
        .route("/v1/generate/{*model}", post(sie::generate_route))
        .route("/v1/models", get(meta::models))
        .route("/v1/systemone/models", get(meta::systemone_models))
        .route("/health", get(meta::health))
        .route("/health/live", get(meta::live))
        .route("/metrics", get(meta::metrics_text))
        .route("/openapi.yaml", get(openapi::openapi_yaml))
        .route("/v1/embeddings", post(encoders::embeddings))
        .route("/v1/rerank", post(encoders::rerank))
        .route("/v1/classify", post(encoders::classify))
        .route("/v1/bundle", post(bundle::bundle))
        .route("/v1/encode/{*model}", post(sie::encode_route))
        .route("/v1/score/{*model}", post(sie::score_route))
        .route("/v1/extract/{*model}", post(sie::extract_route))
        .route("/v1/models/{*model}", get(sie::model_route))
        .route("/healthz", get(sie::healthz))
        .route("/readyz", get(sie::readyz))
        .route("/livez", get(sie::livez))
        .fallback(meta::not_found)
        .layer(DefaultBodyLimit::disable())
        .layer(middleware::from_fn_with_state(
            state.clone(),
            transport::admit,
        ))
        // Echo the caller's `X-Request-Id` or give one, on every response.
        .layer(
            tower::ServiceBuilder::new()
                .layer(tower_http::request_id::SetRequestIdLayer::x_request_id(
                    tower_http::request_id::MakeRequestUuid,
                ))
                .layer(tower_http::request_id::PropagateRequestIdLayer::x_request_id()),
        )
        .with_state(state)
}

/// Settings of an SIE gateway (`vllm-srun gateway`).
#[derive(Debug, Clone)]
pub struct GatewayConfig {
    pub max_request_bytes: usize,
    /// How long a request waits for its answer, the time in the queue included.
    pub timeout: Duration,
}

/// The SIE gateway's routes: work published to NATS JetStream through `queue`, answered by
/// the workers that pull it.
pub fn gateway(queue: queue::Gateway, config: GatewayConfig) -> Router {
    let state = Arc::new(gateway::GatewayState {
        gateway: queue,
        max_request_bytes: config.max_request_bytes,
        timeout: config.timeout,
        metrics: prometheus(),
    });
    Router::new()
        .route("/v1/encode/{*model}", post(gateway::encode))
        .route("/v1/score/{*model}", post(gateway::score))
        .route("/v1/extract/{*model}", post(gateway::extract))
        .route("/v1/generate/{*model}", post(gateway::generate))
        .route("/healthz", get(gateway::healthz))
        .route("/livez", get(gateway::healthz))
        .route("/readyz", get(gateway::readyz))
        .route("/metrics", get(gateway::metrics))
        .layer(DefaultBodyLimit::disable())
        .layer(
            tower::ServiceBuilder::new()
                .layer(tower_http::request_id::SetRequestIdLayer::x_request_id(
                    tower_http::request_id::MakeRequestUuid,
                ))
                .layer(tower_http::request_id::PropagateRequestIdLayer::x_request_id()),
        )
        .with_state(state)
}

/// Serve any app (the worker's routes with others in front) on `listener` until Ctrl-C,
/// within the transport's limits.
pub async fn serve_app(
    listener: tokio::net::TcpListener,
    app: Router,
    transport: &Transport,
) -> std::io::Result<()> {
    transport::serve(listener, app, transport, async {
        let _ = tokio::signal::ctrl_c().await;
    })
    .await
}

/// Serve on `listener` until the process gets Ctrl-C, within the transport's limits.
pub async fn serve(
    listener: tokio::net::TcpListener,
    registry: Arc<Registry>,
    config: ServerConfig,
) -> std::io::Result<()> {
    let transport = config.transport.clone();
    let app = router(registry, config);
    transport::serve(listener, app, &transport, async {
        let _ = tokio::signal::ctrl_c().await;
    })
    .await
}
