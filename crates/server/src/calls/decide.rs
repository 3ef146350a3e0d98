//! One decision body decoded and answered: the shared step of `/v1/decisions`,
//! `/v1/systemone`, each entry of `/v1/systemone/batch`, and a bundle's decisions task.

use std::time::Instant;

use engine::{Decision, DecisionModel};
use protocol::assets::Parts;
use protocol::error::ErrorCode;
use protocol::request::{parse_decision_body_with, DecisionBody, Schema};
use protocol::DecisionEndpoint;
use serde_json::{json, Value};

use crate::calls::CoreResult;
use crate::error::ApiError;
use crate::timing::Phases;
use crate::AppState;

fn meta_of(model: &DecisionModel, phases: &Phases) -> Value {
    let info = model.info();
    json!({
        "model": model.meta.name,
        "revision": model.meta.revision,
        "digest": model.meta.sha256.as_ref().map(|s| format!("sha256:{s}")),
        "dtype": info.dtype,
        "numerics": model.numerics,
        "engine": info.engine,
        "device": info.device,
        "timings": {
            "parse_ms": phases.parse.as_secs_f64() * 1000.0,
            "tokenize_ms": phases.engine.tokenize.as_secs_f64() * 1000.0,
            "queue_ms": phases.engine.queue.as_secs_f64() * 1000.0,
            "forward_ms": phases.engine.forward.as_secs_f64() * 1000.0,
            "post_ms": phases.engine.post.as_secs_f64() * 1000.0,
        }
    })
}

/// How one decision body is read and answered.
#[derive(Clone, Copy)]
pub(crate) struct Call<'a> {
    pub(crate) schema: Schema,
    pub(crate) endpoint: DecisionEndpoint,
    pub(crate) long_context: bool,
    pub(crate) started: Instant,
    /// In a `/v1/systemone/batch`, the name of the request.
    pub(crate) state_name: Option<&'a str>,
    /// The multipart parts of the body, claimed by its assets.
    pub(crate) parts: &'a Parts,
}

/// Decode and answer one decision body. Returns the JSON value and the answering model.
pub(crate) async fn answer(
    state: &AppState,
    value: &Value,
    call: Call<'_>,
    phases: &mut Phases,
) -> Result<(Value, String), ApiError> {
    let Call {
        schema,
        endpoint,
        long_context,
        started,
        state_name,
        parts,
    } = call;
    let mut body = parse_decision_body_with(value, schema, parts).map_err(ApiError::from)?;
    if long_context {
        match &mut body {
            DecisionBody::Single(r) => r.options.long_context = true,
            DecisionBody::Batch {
                options, entries, ..
            } => {
                options.long_context = true;
                for (_, r) in entries {
                    r.options.long_context = true;
                }
            }
        }
    }
    phases.parse = started.elapsed();
    let served = state.registry.names();
    let model = state
        .registry
        .ready(body.model())
        .map_err(|e| crate::error::from_engine(e, &served))?;
    let (decision, timings) = model
        .decide(&body, started)
        .await
        .map_err(|e| crate::error::from_engine(e, &served))?;
    phases.engine = timings;
    let return_meta = body.options().return_meta;
    let model_name = model.meta.name.clone();
    let input_tokens = match &decision {
        Decision::Single(r) => r.usage.input_tokens,
        Decision::Batch(b) => b.usage.input_tokens,
    };
    metrics::counter!("vllm_srun_input_tokens_total", "model" => model_name.clone())
        .increment(input_tokens);
    let value = match decision {
        Decision::Single(mut r) => {
            let failures = r.failures();
            if endpoint != DecisionEndpoint::Decisions {
                if let Some(e) = ApiError::question_failed(&failures, state_name) {
                    return Err(e);
                }
            } else if let Some(e) = ApiError::no_valid_question(&failures, r.answers.len()) {
                return Err(e);
            }
            if return_meta {
                r.meta = Some(meta_of(&model, phases));
            }
            serde_json::to_value(&r)
        }
        Decision::Batch(mut b) => {
            if return_meta {
                let meta = meta_of(&model, phases);
                for (_, r) in b.states.0.iter_mut() {
                    r.meta = Some(meta.clone());
                }
                b.meta = Some(meta);
            }
            serde_json::to_value(&b)
        }
    }
    .map_err(|e| ApiError::new(ErrorCode::InternalError, e.to_string()))?;
    Ok((value, model_name))
}

/// A `/v1/decisions` body answered as that endpoint answers it (for bundle tasks).
pub(crate) async fn decisions_core(state: &AppState, body: &Value) -> CoreResult {
    let mut phases = Phases::default();
    let call = Call {
        schema: Schema::Internal,
        endpoint: DecisionEndpoint::Decisions,
        long_context: false,
        started: Instant::now(),
        state_name: None,
        parts: &Parts::new(),
    };
    let (v, m) = answer(state, body, call, &mut phases).await?;
    Ok((v, m, phases.engine))
}
