//! Generation plumbing shared by OpenAI's chat and completions and SIE's generate: the
//! model's worker started on first use, jobs submitted, the first event awaited, timings
//! recorded.

use std::sync::Arc;

use engine::generate::{Finish, GenerateJob};
use engine::{EngineError, GenEvent, TextModel};
use tokio::sync::mpsc::UnboundedReceiver;

use crate::error::ApiError;
use crate::AppState;

pub(crate) type Events = UnboundedReceiver<GenEvent>;

pub(crate) fn fail(state: &AppState, e: EngineError) -> ApiError {
    crate::error::from_engine(e, &state.registry.names())
}

/// The model's worker, started on first use off the async threads.
pub(crate) async fn worker(
    tm: &Arc<TextModel>,
) -> Result<Arc<engine::generate::Generation>, EngineError> {
    if let Some(w) = tm.running() {
        return Ok(w);
    }
    let tm = tm.clone();
    tokio::task::spawn_blocking(move || tm.worker())
        .await
        .map_err(|_| EngineError::Unavailable)?
}

pub(crate) async fn submit(tm: &Arc<TextModel>, job: GenerateJob) -> Result<Events, EngineError> {
    let w = worker(tm).await?;
    w.submit(job).map_err(EngineError::from)
}

/// Record a finished generation's timings.
pub(crate) fn observe(model: &str, f: &Finish) {
    let m = model.to_string();
    metrics::histogram!("vllm_srun_time_to_first_token_seconds", "model" => m.clone())
        .record(f.ttft.as_secs_f64());
    if f.completion_tokens > 1 {
        metrics::histogram!("vllm_srun_inter_token_latency_seconds", "model" => m.clone())
            .record(f.tpot().as_secs_f64());
    }
    metrics::counter!("vllm_srun_generated_tokens_total", "model" => m)
        .increment(f.completion_tokens as u64);
}

/// Wait for the first event: a refusal becomes an error answer; otherwise the events,
/// with the first put back in front.
pub(crate) async fn first(mut rx: Events) -> Result<(Option<GenEvent>, Events), EngineError> {
    match rx.recv().await {
        Some(GenEvent::Failed(e)) => Err(e.into()),
        Some(ev) => Ok((Some(ev), rx)),
        None => Err(EngineError::Unavailable),
    }
}
