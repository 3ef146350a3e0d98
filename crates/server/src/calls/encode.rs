//! The encoder cores (`Value` in, `Value` out): embeddings, rerank and classify, answered the
//! same whether a route or a bundle task asks; the relevance and batched-decision steps that
//! SIE's score and extract share with them.

use std::time::{Duration, Instant};

use base64::Engine as _;
use engine::recipes::{self, Ask};
use engine::{EncoderModel, ModelKind, Timings};
use protocol::encoder::{
    ClassifyInput, ClassifyOverflow, ClassifyRequest, EmbeddingInput, EmbeddingsRequest,
    RerankRequest,
};
use protocol::error::ErrorCode;
use protocol::request::Overflow;
use serde_json::{json, Value};

use crate::calls::CoreResult;
use crate::cards::representation;
use crate::error::{invalid, unsupported_param, ApiError};
use crate::AppState;

pub(crate) fn engine_err(state: &AppState, e: engine::EngineError) -> ApiError {
    crate::error::from_engine(e, &state.registry.names())
}

/// A classification head is served by /v1/classify only.
pub(crate) fn vectors_only(m: &EncoderModel) -> Result<(), ApiError> {
    if m.info().labels.is_some() {
        return Err(ApiError::new(
            ErrorCode::UnsupportedSurface,
            format!(
                "model {} is a sequence-classification head: it serves /v1/classify, not vectors",
                m.meta.name
            ),
        ));
    }
    Ok(())
}

/// Run `work` within `deadline_ms`: past it the caller gets 504 `deadline_exceeded`, and the
/// work is dropped (a queued encoder or decision job whose caller is gone is not run). Work
/// found finished only once the deadline has passed is past it too: tokio's `timeout` looks at
/// the work before the clock, so a forward whose reply and the timer's turn come in the same
/// wake-up would otherwise be answered late (with `deadline_ms` 0, a fast forward answered 200).
pub(crate) async fn within(
    deadline_ms: Option<u64>,
    work: impl std::future::Future<Output = CoreResult>,
) -> CoreResult {
    let Some(d) = deadline_ms else {
        return work.await;
    };
    let deadline = tokio::time::Instant::now() + Duration::from_millis(d);
    match tokio::time::timeout_at(deadline, work).await {
        Ok(answer) if tokio::time::Instant::now() < deadline => answer,
        _ => Err(ApiError::new(
            ErrorCode::DeadlineExceeded,
            format!("options.deadline_ms ({d} ms) passed before the work was answered"),
        )),
    }
}

/// The width a request asked for (`dimensions`): fewer than the model's, the vector's first
/// values, normalised again when the model's vectors are (as text-embeddings-inference
/// answers); more, refused.
pub(crate) fn width(asked: Option<u64>, model: &str, dims: usize) -> Result<usize, ApiError> {
    match asked {
        None => Ok(dims),
        Some(d) if d as usize <= dims => Ok(d as usize),
        Some(d) => Err(unsupported_param(format!(
            "dimensions: model {model} has vectors of {dims} dimensions, fewer than {d}"
        ))),
    }
}

/// A vector's first `dims` values; scaled back to unit length when `normalize` (the model's
/// own vectors are unit length, so a shortened one is made so again).
pub(crate) fn shortened(v: &[f32], dims: usize, normalize: bool) -> Vec<f32> {
    let mut out = v[..dims.min(v.len())].to_vec();
    if normalize && out.len() < v.len() {
        let norm = out.iter().map(|x| x * x).sum::<f32>().sqrt();
        if norm > 0.0 {
            out.iter_mut().for_each(|x| *x /= norm);
        }
    }
    out
}

/// `POST /v1/embeddings`, OpenAI-compatible.
pub(crate) async fn embeddings_core(state: &AppState, body: &Value) -> CoreResult {
    let req = EmbeddingsRequest::parse(body)?;
    within(req.options.deadline_ms, embed(state, req)).await
}

pub(crate) async fn embed(state: &AppState, req: EmbeddingsRequest) -> CoreResult {
    let m = state
        .registry
        .encoder(req.model.as_deref())
        .map_err(|e| engine_err(state, e))?;
    vectors_only(&m)?;
    let info = m.info().clone();
    let dims = width(req.dimensions, &m.meta.name, info.dims)?;
    if req.layer {
        return Err(unsupported_param(format!(
            "layer: model {} declares no layer outputs; it answers from its last layer",
            m.meta.name
        )));
    }
    let t0 = Instant::now();
    let mut tokenized = Vec::with_capacity(req.input.len());
    for (i, input) in req.input.iter().enumerate() {
        let t = match input {
            EmbeddingInput::Text(s) => m.tokenize(s, false).map(|(t, _)| t),
            EmbeddingInput::Tokens(t) => {
                if let Some(bad) = t.iter().find(|x| **x as usize >= info.vocab_size) {
                    Err(engine::EncodeError::Invalid(format!(
                        "token id {bad} is outside the vocabulary ({} tokens)",
                        info.vocab_size
                    )))
                } else if t.len() > info.max_tokens {
                    Err(engine::EncodeError::TooLong {
                        tokens: t.len(),
                        limit: info.max_tokens,
                        lower_bound: false,
                    })
                } else {
                    Ok(t.clone())
                }
            }
        };
        tokenized
            .push(t.map_err(|e| crate::error::from_encode(e).prefixed(&format!("input[{i}]: ")))?);
    }
    let tokenize = t0.elapsed();
    let n_tokens: usize = tokenized.iter().map(Vec::len).sum();
    let out = m
        .embed_tokens(tokenized)
        .await
        .map_err(crate::error::from_encode)?;
    let data: Vec<Value> = out
        .vectors
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let v = shortened(v, dims, info.normalize);
            let embedding = if req.base64 {
                let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
                json!(base64::engine::general_purpose::STANDARD.encode(bytes))
            } else {
                json!(v)
            };
            json!({"object": "embedding", "index": i, "embedding": embedding})
        })
        .collect();
    let mut resp = json!({
        "object": "list",
        "data": data,
        "model": m.meta.name,
        "usage": {"prompt_tokens": n_tokens, "total_tokens": n_tokens},
    });
    if req.options.return_meta {
        let mut representation = representation(&m);
        representation["dims"] = json!(dims);
        resp["meta"] = json!({"representation": representation, "engine": info.engine,
            "device": info.device, "dtype": info.dtype});
    }
    let timings = Timings {
        tokenize,
        queue: out.timings.queue,
        forward: out.timings.forward,
        batch_jobs: 1,
        batch_tokens: n_tokens,
        ..Timings::default()
    };
    Ok((resp, m.meta.name.clone(), timings))
}

/// Ask a decision model a batch built by one of the endpoints that answer through decision
/// questions (`engine::recipes`: rerank, classify, SIE score/extract).
pub(crate) async fn decide_batch(
    state: &AppState,
    m: &engine::DecisionModel,
    body: Result<protocol::DecisionBody, protocol::ProtocolError>,
) -> Result<(protocol::BatchResponse, Timings), ApiError> {
    let body = body.map_err(ApiError::from)?;
    let (decision, timings) = m
        .decide(&body, Instant::now())
        .await
        .map_err(|e| engine_err(state, e))?;
    match decision {
        engine::Decision::Batch(b) => Ok((b, timings)),
        engine::Decision::Single(_) => Err(invalid("a batch was not answered as a batch")),
    }
}

/// A decision question's failure as a request error (400 with its reason word and limit).
pub(crate) fn failed_question(failure: &protocol::QuestionFailure) -> ApiError {
    let mut e = ApiError::new(ErrorCode::InvalidRequest, failure.message.clone())
        .with_reason(failure.reason);
    e.limit = failure.limit;
    e
}

/// Relevance of each document to a query, from an encoder (cosine of the vectors) or a
/// decision model (the probability of a relevance noul per document, asked as one batch).
/// Returns the scores, the tokens read, the model and the timings.
pub(crate) async fn relevance(
    state: &AppState,
    model: Option<&str>,
    query: &str,
    documents: &[String],
) -> Result<(Vec<f64>, usize, String, Timings), ApiError> {
    let kind = match model {
        Some(n) => state
            .registry
            .find(Some(n))
            .map_err(|e| engine_err(state, e))?
            .kind(),
        None if state
            .registry
            .slots()
            .iter()
            .any(|s| s.kind() == ModelKind::Encoder) =>
        {
            ModelKind::Encoder
        }
        None => ModelKind::Decision,
    };
    if kind == ModelKind::Encoder {
        let m = state
            .registry
            .encoder(model)
            .map_err(|e| engine_err(state, e))?;
        let mut texts: Vec<&str> = vec![query];
        texts.extend(documents.iter().map(String::as_str));
        let out = m
            .embed(&texts, true)
            .await
            .map_err(crate::error::from_encode)?;
        let q = &out.vectors[0];
        let scores = out.vectors[1..]
            .iter()
            .map(|d| engine::encode::cosine(q, d) as f64)
            .collect();
        let tokens = out.tokens.iter().sum();
        let timings = Timings {
            tokenize: out.timings.tokenize,
            queue: out.timings.queue,
            forward: out.timings.forward,
            ..Timings::default()
        };
        return Ok((scores, tokens, m.meta.name.clone(), timings));
    }
    let m = state
        .registry
        .ready(model)
        .map_err(|e| engine_err(state, e))?;
    let (b, timings) = decide_batch(state, &m, recipes::relevance_batch(query, documents)).await?;
    let scores = recipes::relevance_scores(&b).map_err(|f| failed_question(&f))?;
    Ok((
        scores,
        b.usage.input_tokens as usize,
        m.meta.name.clone(),
        timings,
    ))
}

/// `POST /v1/rerank`.
pub(crate) async fn rerank_core(state: &AppState, body: &Value) -> CoreResult {
    let req = RerankRequest::parse(body)?;
    within(req.options.deadline_ms, rank(state, req)).await
}

pub(crate) async fn rank(state: &AppState, req: RerankRequest) -> CoreResult {
    let docs = req.documents;
    let (scores, tokens, model, timings) =
        relevance(state, req.model.as_deref(), &req.query, &docs).await?;
    let mut order: Vec<usize> = (0..docs.len()).collect();
    order.sort_by(|a, b| scores[*b].total_cmp(&scores[*a]));
    let results: Vec<Value> = order
        .into_iter()
        .take(req.top_n.unwrap_or(docs.len()))
        .map(|i| {
            let mut r = json!({"index": i, "relevance_score": scores[i]});
            if req.return_documents {
                r["document"] = json!({"text": docs[i]});
            }
            r
        })
        .collect();
    let resp = json!({"model": model, "results": results, "usage": {"input_tokens": tokens, "total_tokens": tokens}});
    Ok((resp, model, timings))
}

/// `POST /v1/classify`: a classification entry (a decision backbone and a fixed label set)
/// over strings, `{text, text_pair}` pairs or `{context, question, answer}` items.
pub(crate) async fn classify_core(state: &AppState, body: &Value) -> CoreResult {
    let req = ClassifyRequest::parse(body)?;
    let names: Vec<String> = state
        .config
        .classifiers
        .iter()
        .map(|c| c.name.clone())
        .collect();
    let name = req.model.as_deref();
    let head = name
        .and_then(|n| state.registry.encoder(Some(n)).ok())
        .filter(|m| m.info().labels.is_some());
    if let Some(m) = head {
        let answered = async {
            let (mut resp, name, timings) = classify_head(&m, &req).await?;
            if req.options.return_meta {
                let info = m.info();
                resp["meta"] = json!({"revision": m.meta.revision, "sha256": m.meta.sha256,
                    "engine": info.engine, "device": info.device, "dtype": info.dtype});
            }
            Ok((resp, name, timings))
        };
        return within(req.options.deadline_ms, answered).await;
    }
    let Some(c) = state
        .config
        .classifiers
        .iter()
        .find(|c| Some(c.name.as_str()) == name || (name.is_none() && names.len() == 1))
    else {
        // A model that exists but is no classification entry does not serve this endpoint.
        if let Some(n) = name {
            if state.registry.find(Some(n)).is_ok() {
                return Err(ApiError::new(
                    ErrorCode::UnsupportedSurface,
                    format!(
                        "model {n:?} has no classification head; classification entries: {}",
                        names.join(", ")
                    ),
                ));
            }
        }
        return Err(ApiError::new(
            ErrorCode::ModelNotFound,
            format!(
                "classifier {:?} is not served; classification entries: {}",
                name.unwrap_or(""),
                names.join(", ")
            ),
        ));
    };
    let o = &req.options;
    let overflow = match o.overflow {
        ClassifyOverflow::Reject => Overflow::Reject,
        ClassifyOverflow::Truncate => Overflow::Truncate,
        ClassifyOverflow::Window => Overflow::Window,
    };
    // Windows no larger than what the backbone reads with the question (the engine caps them
    // there); by default an eighth of the window it reads overlaps.
    let mut window = None;
    if let Some((tokens, overlap)) = o.window.filter(|(t, v)| t.is_some() || v.is_some()) {
        let tokens = tokens.unwrap_or(u64::MAX);
        if tokens == 0 || overlap.is_some_and(|o| o >= tokens) {
            return Err(invalid(
                "options.window.overlap must be less than options.window.tokens",
            ));
        }
        window = Some(protocol::request::Window { tokens, overlap });
    }
    if o.return_spans && !c.spans {
        return Err(ApiError::new(
            ErrorCode::UnsupportedSurface,
            format!(
                "classifier {:?}: backbone {} has no span capability",
                c.name, c.backbone
            ),
        ));
    }
    let ask = if c.spans {
        Ask::Spans {
            labels: &c.labels,
            preset: c.preset.as_deref(),
            instructions: c.instructions.as_deref(),
        }
    } else if c.multi_label {
        Ask::Set {
            labels: &c.labels,
            instructions: c.instructions.as_deref(),
        }
    } else {
        Ask::Choice {
            labels: &c.labels,
            instructions: c.instructions.as_deref(),
        }
    };
    let entries: Vec<_> = req
        .input
        .iter()
        .map(|item| ask.entry(item.state(), item.roles(), overflow))
        .collect();
    let m = state
        .registry
        .ready(Some(&c.backbone))
        .map_err(|e| engine_err(state, e))?;
    let (b, timings) =
        decide_batch(state, &m, recipes::batch(entries, o.deadline_ms, window)).await?;
    let mut data = Vec::with_capacity(req.input.len());
    for (i, (_, r)) in b.states.iter().enumerate() {
        data.push(match ask.read(r) {
            recipes::Read::Spans(spans) => json!({"index": i, "spans": spans}),
            recipes::Read::Labels { ranked, selected } => {
                let mut entry = json!({
                    "index": i,
                    "labels": ranked.iter().map(|(l, p)| json!({"label": l, "score": p})).collect::<Vec<_>>(),
                });
                match selected {
                    Some(s) => entry["selected"] = json!(s),
                    None => entry["label"] = json!(ranked[0].0),
                }
                entry
            }
            recipes::Read::Failed(f) => json!({"index": i, "error": f.kind.as_str(),
                "reason": f.reason, "message": f.message}),
        });
    }
    let mut resp =
        json!({"model": c.name, "backbone": m.meta.name, "data": data, "usage": b.usage});
    if o.return_meta {
        resp["meta"] =
            json!({"revision": m.meta.revision, "sha256": m.meta.sha256, "numerics": m.numerics});
    }
    Ok((resp, c.name.clone(), timings))
}

/// `/v1/classify` on a sequence-classification head: label probabilities (softmax) or
/// independent label scores (sigmoid, `multi_label`) per input text, in one batch. On a
/// token-classification head: the spans of each text.
pub(crate) async fn classify_head(m: &EncoderModel, req: &ClassifyRequest) -> CoreResult {
    let labels = m.info().labels.clone().unwrap_or_default();
    let o = &req.options;
    if o.return_spans && !m.info().per_token {
        return Err(ApiError::new(
            ErrorCode::UnsupportedSurface,
            format!(
                "model {}: a sequence-classification head has no spans",
                m.meta.name
            ),
        ));
    }
    let overflow = match o.overflow {
        ClassifyOverflow::Reject => engine::TagOverflow::Reject,
        ClassifyOverflow::Truncate => engine::TagOverflow::Truncate,
        ClassifyOverflow::Window if m.info().per_token => {
            let (tokens, overlap) = o.window.unwrap_or((None, None));
            let tokens = tokens.map_or(m.info().max_tokens, |n| n as usize);
            let overlap = overlap.map_or(engine::TagOverflow::overlap(tokens), |n| n as usize);
            if overlap >= tokens {
                return Err(invalid(
                    "options.window.overlap must be less than options.window.tokens",
                ));
            }
            engine::TagOverflow::Window { tokens, overlap }
        }
        ClassifyOverflow::Window => {
            return Err(unsupported_param(format!(
                "options.overflow window: model {} reads one input of {} tokens; send truncate or reject",
                m.meta.name,
                m.info().max_tokens
            )))
        }
    };
    let truncate = overflow == engine::TagOverflow::Truncate;
    let texts: Vec<String> = req
        .input
        .iter()
        .enumerate()
        .map(|(i, x)| match x {
            ClassifyInput::Text(s) => Ok(s.clone()),
            _ => Err(invalid(format!(
                "input[{i}]: model {} is a single-text classification head; send strings",
                m.meta.name
            ))),
        })
        .collect::<Result<_, _>>()?;
    if m.info().per_token {
        return classify_spans(m, &texts, overflow).await;
    }
    let t0 = Instant::now();
    let mut data: Vec<Option<Value>> = vec![None; texts.len()];
    let mut batch = Vec::new();
    let mut at = Vec::new();
    for (i, t) in texts.iter().enumerate() {
        match m.tokenize(t, truncate) {
            Ok((ids, _)) => {
                batch.push(ids);
                at.push(i);
            }
            Err(e) => {
                let a = crate::error::from_encode(e);
                data[i] = Some(json!({"index": i, "error": "max_length_exceeded",
                    "reason": a.reason.unwrap_or(protocol::reason::INPUT_TOO_LONG), "message": a.message, "limit": a.limit}));
            }
        }
    }
    let tokenize = t0.elapsed();
    let tokens: usize = batch.iter().map(Vec::len).sum();
    let out = m
        .embed_tokens(batch)
        .await
        .map_err(crate::error::from_encode)?;
    for (i, probs) in at.into_iter().zip(out.vectors) {
        let mut scored: Vec<(&String, f32)> = labels.iter().zip(probs).collect();
        scored.sort_by(|a, b| b.1.total_cmp(&a.1));
        let list: Vec<Value> = scored
            .iter()
            .map(|(l, p)| json!({"label": l, "score": p}))
            .collect();
        let mut e = json!({"index": i, "labels": list});
        if m.info().multi_label {
            e["selected"] = json!(scored
                .iter()
                .filter(|(_, p)| *p >= 0.5)
                .map(|(l, _)| l)
                .collect::<Vec<_>>());
        } else {
            e["label"] = json!(scored[0].0);
        }
        data[i] = Some(e);
    }
    let timings = Timings {
        tokenize,
        queue: out.timings.queue,
        forward: out.timings.forward,
        ..Timings::default()
    };
    let resp = json!({"model": m.meta.name, "backbone": m.meta.name, "data": data,
        "usage": {"input_tokens": tokens, "output_tokens": 0}});
    Ok((resp, m.meta.name.clone(), timings))
}

/// An item error of a token head's text, as the sequence heads give it.
pub(crate) fn item_error(index: usize, e: engine::EncodeError) -> Value {
    let a = crate::error::from_encode(e);
    let error = if a.reason == Some(protocol::reason::SCAN_BUDGET) {
        "scan_budget_exceeded"
    } else if a.reason == Some(protocol::reason::INPUT_TOO_LONG) {
        "max_length_exceeded"
    } else {
        "invalid_input"
    };
    json!({"index": index, "error": error, "reason": a.reason, "message": a.message,
        "limit": a.limit})
}

/// `/v1/classify` on a token-classification head: each text's spans (label, code-point
/// `start`/`end`, `text`, `probability`).
pub(crate) async fn classify_spans(
    m: &EncoderModel,
    texts: &[String],
    overflow: engine::TagOverflow,
) -> CoreResult {
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let (tagged, t) = m
        .tag(&refs, overflow)
        .await
        .map_err(crate::error::from_encode)?;
    let mut tokens = 0;
    let data: Vec<Value> = tagged
        .into_iter()
        .enumerate()
        .map(|(i, r)| match r {
            Ok(tg) => {
                tokens += tg.tokens;
                let mut e = json!({"index": i, "spans": tg.spans});
                if tg.truncated {
                    e["truncated"] = json!(true);
                }
                e
            }
            Err(e) => item_error(i, e),
        })
        .collect();
    let timings = Timings {
        tokenize: t.tokenize,
        queue: t.queue,
        forward: t.forward,
        ..Timings::default()
    };
    let resp = json!({"model": m.meta.name, "backbone": m.meta.name, "data": data,
        "usage": {"input_tokens": tokens, "output_tokens": 0}});
    Ok((resp, m.meta.name.clone(), timings))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answered() -> CoreResult {
        Ok((json!({}), String::new(), Timings::default()))
    }

    #[tokio::test]
    async fn work_done_after_the_deadline_is_refused_and_within_it_answered() {
        let code = |r: CoreResult| r.err().map(|e| e.status());
        // Finished at once, but a deadline of 0 ms has passed before anything can answer.
        assert_eq!(
            code(within(Some(0), async { answered() }).await),
            Some(axum::http::StatusCode::GATEWAY_TIMEOUT)
        );
        assert_eq!(code(within(Some(60_000), async { answered() }).await), None);
        assert_eq!(code(within(None, async { answered() }).await), None);
    }
}
