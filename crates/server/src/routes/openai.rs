//! Text generation over HTTP, OpenAI's way: `/v1/chat/completions` and `/v1/completions`
//! (JSON answers or `text/event-stream` chunks ending in `data: [DONE]`).
//!
//! A streamed answer starts only once the first token (or the refusal) is known, so a request
//! the engine refuses gets a plain error status, never a stream that breaks off. Dropping the
//! stream (the client went away) drops the receiver, which stops the generation.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use engine::generate::{collect, TokenInfo};
use engine::{EngineError, GenEvent};
use protocol::openai::{
    AssistantMessage, ChatChoice, ChatCompletion, ChatCompletionChunk, ChatCompletionRequest,
    ChatDelta, ChatLogprobs, ChunkChoice, Completion, CompletionChoice, CompletionLogprobs,
    CompletionRequest, FunctionCall, TokenLogprob, ToolCallOut, ToolMode, TopLogprob, Usage,
};
use serde::de::DeserializeOwned;
use tokio::sync::mpsc::UnboundedReceiver;

use crate::calls::generate::{fail, first, observe, submit, Events};
use crate::error::{ApiError, Shape};
use crate::respond::json::{count_request, error_response, json_response};
use crate::respond::openai::{data, sse_response, OpenAiErrors};
use crate::AppState;

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Read a JSON body into a request type.
async fn read_json<T: DeserializeOwned>(
    state: &AppState,
    headers: &HeaderMap,
    body: Body,
) -> Result<T, ApiError> {
    let bytes = crate::body::read(headers, body, state.config.max_request_bytes)
        .await
        .map_err(ApiError::from)?;
    serde_json::from_slice(&bytes).map_err(|e| ApiError::bad_json(&e))
}

fn chat_logprobs(tokens: &[TokenInfo]) -> Vec<TokenLogprob> {
    tokens
        .iter()
        .map(|t| TokenLogprob {
            token: t.text.clone(),
            logprob: t.logprob,
            bytes: t.bytes.clone(),
            top_logprobs: t
                .top
                .iter()
                .map(|(text, bytes, lp)| TopLogprob {
                    token: text.clone(),
                    logprob: *lp,
                    bytes: bytes.clone(),
                })
                .collect(),
        })
        .collect()
}

fn tool_calls_of(text: &str, mode: &ToolMode) -> (Option<Vec<ToolCallOut>>, Option<String>) {
    if *mode == ToolMode::None {
        return (None, Some(text.to_string()));
    }
    let whole = matches!(mode, ToolMode::Required(_));
    let (calls, rest) = engine::generate::chat::read_tool_calls(text, whole);
    if calls.is_empty() {
        return (None, Some(text.to_string()));
    }
    let calls = calls
        .into_iter()
        .enumerate()
        .map(|(i, c)| ToolCallOut {
            index: None,
            id: format!("call_{}_{i}", uuid::Uuid::new_v4().simple()),
            kind: "function".into(),
            function: FunctionCall {
                name: c.name,
                arguments: c.arguments,
            },
        })
        .collect();
    (Some(calls), (!rest.is_empty()).then_some(rest))
}

/// `POST /v1/chat/completions`.
#[utoipa::path(post, path = "/v1/chat/completions", tag = "generation",
    request_body(content = ChatCompletionRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "The answer, or with stream: true a text/event-stream of chat.completion.chunk objects ending in data: [DONE]",
            content((ChatCompletion = "application/json"), (String = "text/event-stream"))),
        OpenAiErrors,
    ))]
pub async fn chat_completions(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let resp = match chat(&state, &headers, body).await {
        Ok(r) => r,
        Err(e) => error_response(&e, Shape::OpenAi, None),
    };
    count_request("/v1/chat/completions", String::new(), resp.status());
    resp
}

async fn chat(state: &AppState, headers: &HeaderMap, body: Body) -> Result<Response, ApiError> {
    let r: ChatCompletionRequest = read_json(state, headers, body).await?;
    let params = r.check().map_err(ApiError::from)?;
    let tm = state
        .registry
        .text(r.model.as_deref())
        .map_err(|e| fail(state, e))?;
    let plan = tm.chat_plan(&r, &params).map_err(|e| fail(state, e))?;
    let rx = submit(&tm, plan.job).await.map_err(|e| fail(state, e))?;
    let id = format!("chatcmpl-{}", uuid::Uuid::new_v4().simple());
    let created = now_secs();
    let model = tm.name().to_string();
    let want_logprobs = r.logprobs == Some(true);
    if r.stream != Some(true) {
        let (text, tokens, finish) = collect(rx).await.map_err(|e| fail(state, e.into()))?;
        observe(&model, &finish);
        let (tool_calls, content) = tool_calls_of(&text, &plan.tools);
        let reason = if tool_calls.is_some() {
            "tool_calls"
        } else {
            finish.reason.word()
        };
        let answer = ChatCompletion {
            id,
            object: "chat.completion".into(),
            created,
            model,
            choices: vec![ChatChoice {
                index: 0,
                message: AssistantMessage {
                    role: "assistant".into(),
                    content,
                    tool_calls,
                },
                logprobs: want_logprobs.then(|| ChatLogprobs {
                    content: chat_logprobs(&tokens),
                }),
                finish_reason: reason.into(),
            }],
            usage: Usage::new(finish.prompt_tokens as u64, finish.completion_tokens as u64),
        };
        return Ok(json_response(
            StatusCode::OK,
            serde_json::to_vec(&answer).unwrap_or_default(),
            None,
        ));
    }
    let (head, rx) = first(rx).await.map_err(|e| fail(state, e))?;
    let usage = r
        .stream_options
        .as_ref()
        .and_then(|o| o.include_usage)
        .unwrap_or(false);
    let chunk = {
        let (id, model) = (id.clone(), model.clone());
        move |delta: ChatDelta, logprobs: Option<ChatLogprobs>, finish: Option<String>| {
            data(&ChatCompletionChunk {
                id: id.clone(),
                object: "chat.completion.chunk".into(),
                created,
                model: model.clone(),
                choices: vec![ChunkChoice {
                    index: 0,
                    delta,
                    logprobs,
                    finish_reason: finish,
                }],
                usage: None,
            })
        }
    };
    // With tools in play the output is read whole (a call is not streamed as text).
    let buffered = plan.tools != ToolMode::None;
    let tools = plan.tools.clone();
    struct St {
        rx: Events,
        head: Option<GenEvent>,
        started: bool,
        ended: bool,
        text: String,
    }
    let st = St {
        rx,
        head,
        started: false,
        ended: false,
        text: String::new(),
    };
    let stream = futures_util::stream::unfold(st, move |mut st| {
        let chunk = chunk.clone();
        let tools = tools.clone();
        let (id, model) = (id.clone(), model.clone());
        async move {
            if st.ended {
                return None;
            }
            if !st.started {
                st.started = true;
                let role = ChatDelta {
                    role: Some("assistant".into()),
                    content: Some(String::new()),
                    tool_calls: None,
                };
                return Some((Ok::<_, Infallible>(chunk(role, None, None)), st));
            }
            let mut out: Vec<u8> = Vec::new();
            loop {
                let ev = match st.head.take() {
                    Some(ev) => Some(ev),
                    None => st.rx.recv().await,
                };
                match ev {
                    Some(GenEvent::Delta { text, tokens }) => {
                        if buffered {
                            st.text.push_str(&text);
                            continue;
                        }
                        let lp = want_logprobs.then(|| ChatLogprobs {
                            content: chat_logprobs(&tokens),
                        });
                        let delta = ChatDelta {
                            content: Some(text),
                            ..ChatDelta::default()
                        };
                        return Some((Ok(chunk(delta, lp, None)), st));
                    }
                    Some(GenEvent::Done(f)) => {
                        observe(&model, &f);
                        let mut reason = f.reason.word().to_string();
                        if buffered {
                            let (calls, content) = tool_calls_of(&st.text, &tools);
                            if let Some(calls) = calls {
                                reason = "tool_calls".into();
                                let calls = calls
                                    .into_iter()
                                    .enumerate()
                                    .map(|(i, mut c)| {
                                        c.index = Some(i as u32);
                                        c
                                    })
                                    .collect();
                                out.extend(chunk(
                                    ChatDelta {
                                        content,
                                        tool_calls: Some(calls),
                                        ..ChatDelta::default()
                                    },
                                    None,
                                    None,
                                ));
                            } else {
                                out.extend(chunk(
                                    ChatDelta {
                                        content,
                                        ..ChatDelta::default()
                                    },
                                    None,
                                    None,
                                ));
                            }
                        }
                        out.extend(chunk(ChatDelta::default(), None, Some(reason)));
                        if usage {
                            out.extend(data(&ChatCompletionChunk {
                                id: id.clone(),
                                object: "chat.completion.chunk".into(),
                                created,
                                model: model.clone(),
                                choices: Vec::new(),
                                usage: Some(Usage::new(
                                    f.prompt_tokens as u64,
                                    f.completion_tokens as u64,
                                )),
                            }));
                        }
                        out.extend_from_slice(b"data: [DONE]\n\n");
                        st.ended = true;
                        return Some((Ok(Bytes::from(out)), st));
                    }
                    other => {
                        // The generation failed mid-stream: say so in OpenAI's error shape.
                        let e: EngineError = match other {
                            Some(GenEvent::Failed(e)) => e.into(),
                            _ => EngineError::Unavailable,
                        };
                        let api = crate::error::from_engine(e, &[]);
                        out.extend(data(&api.body(Shape::OpenAi)));
                        out.extend_from_slice(b"data: [DONE]\n\n");
                        st.ended = true;
                        return Some((Ok(Bytes::from(out)), st));
                    }
                }
            }
        }
    });
    Ok(sse_response(stream))
}

/// Legacy `logprobs` of a completion: tokens, their log-probabilities, the top alternatives
/// and each token's offset in the text.
fn completion_logprobs(tokens: &[TokenInfo], base: usize) -> CompletionLogprobs {
    let mut lp = CompletionLogprobs::default();
    let mut offset = base as u64;
    for t in tokens {
        lp.tokens.push(t.text.clone());
        lp.token_logprobs.push(t.logprob);
        lp.top_logprobs
            .push(t.top.iter().map(|(s, _, l)| (s.clone(), *l)).collect());
        lp.text_offset.push(offset);
        offset += t.text.len() as u64;
    }
    lp
}

/// Forward several generations' events into one receiver, tagged by index. A forwarder ends
/// when its generation ends or the merged receiver is dropped (which drops its generation).
fn merge(rxs: Vec<Events>) -> UnboundedReceiver<(usize, GenEvent)> {
    let (tx, merged) = tokio::sync::mpsc::unbounded_channel();
    for (i, mut rx) in rxs.into_iter().enumerate() {
        let tx = tx.clone();
        tokio::spawn(async move {
            while let Some(ev) = rx.recv().await {
                let end = !matches!(ev, GenEvent::Delta { .. });
                if tx.send((i, ev)).is_err() || end {
                    return;
                }
            }
        });
    }
    merged
}

/// `POST /v1/completions`.
#[utoipa::path(post, path = "/v1/completions", tag = "generation",
    request_body(content = CompletionRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "The answer, or with stream: true a text/event-stream of text_completion objects ending in data: [DONE]",
            content((Completion = "application/json"), (String = "text/event-stream"))),
        OpenAiErrors,
    ))]
pub async fn completions(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let resp = match complete(&state, &headers, body).await {
        Ok(r) => r,
        Err(e) => error_response(&e, Shape::OpenAi, None),
    };
    count_request("/v1/completions", String::new(), resp.status());
    resp
}

async fn complete(state: &AppState, headers: &HeaderMap, body: Body) -> Result<Response, ApiError> {
    let r: CompletionRequest = read_json(state, headers, body).await?;
    let params = r.check().map_err(ApiError::from)?;
    let tm = state
        .registry
        .text(r.model.as_deref())
        .map_err(|e| fail(state, e))?;
    let top = r.logprobs;
    let mut jobs = Vec::new();
    for p in r.prompts() {
        let mut job = tm.text_job(&p, &params).map_err(|e| fail(state, e))?;
        job.sampling.logprobs = top.is_some();
        job.sampling.top_logprobs = top.unwrap_or(0) as usize;
        jobs.push(job);
    }
    let mut rxs = Vec::with_capacity(jobs.len());
    for job in jobs {
        rxs.push(submit(&tm, job).await.map_err(|e| fail(state, e))?);
    }
    let id = format!("cmpl-{}", uuid::Uuid::new_v4().simple());
    let created = now_secs();
    let model = tm.name().to_string();
    if r.stream != Some(true) {
        let mut choices = Vec::with_capacity(rxs.len());
        let mut usage = Usage::default();
        let mut pending = Vec::with_capacity(rxs.len());
        for rx in rxs {
            pending.push(tokio::spawn(collect(rx)));
        }
        for (i, task) in pending.into_iter().enumerate() {
            let (text, tokens, finish) = task
                .await
                .map_err(|_| fail(state, EngineError::Unavailable))?
                .map_err(|e| fail(state, e.into()))?;
            observe(&model, &finish);
            let u = Usage::new(finish.prompt_tokens as u64, finish.completion_tokens as u64);
            usage = Usage::new(
                usage.prompt_tokens + u.prompt_tokens,
                usage.completion_tokens + u.completion_tokens,
            );
            choices.push(CompletionChoice {
                index: i as u32,
                text,
                logprobs: top.map(|_| completion_logprobs(&tokens, 0)),
                finish_reason: Some(finish.reason.word().into()),
            });
        }
        let answer = Completion {
            id,
            object: "text_completion".into(),
            created,
            model,
            choices,
            usage: Some(usage),
        };
        return Ok(json_response(
            StatusCode::OK,
            serde_json::to_vec(&answer).unwrap_or_default(),
            None,
        ));
    }
    // Refusals before the stream starts.
    let mut ready = Vec::with_capacity(rxs.len());
    let mut heads = Vec::with_capacity(rxs.len());
    for rx in rxs {
        let (head, rx) = first(rx).await.map_err(|e| fail(state, e))?;
        heads.push(head);
        ready.push(rx);
    }
    let n = ready.len();
    let include_usage = r
        .stream_options
        .as_ref()
        .and_then(|o| o.include_usage)
        .unwrap_or(false);
    let queued: Vec<(usize, GenEvent)> = heads
        .into_iter()
        .enumerate()
        .filter_map(|(i, h)| h.map(|h| (i, h)))
        .collect();
    struct St {
        rx: UnboundedReceiver<(usize, GenEvent)>,
        queued: std::collections::VecDeque<(usize, GenEvent)>,
        offsets: Vec<usize>,
        done: usize,
        usage: Usage,
        ended: bool,
    }
    let st = St {
        rx: merge(ready),
        queued: queued.into(),
        offsets: vec![0; n],
        done: 0,
        usage: Usage::default(),
        ended: false,
    };
    let stream = futures_util::stream::unfold(st, move |mut st| {
        let (id, model) = (id.clone(), model.clone());
        async move {
            if st.ended {
                return None;
            }
            let chunk = |choices: Vec<CompletionChoice>, usage: Option<Usage>| {
                data(&Completion {
                    id: id.clone(),
                    object: "text_completion".into(),
                    created,
                    model: model.clone(),
                    choices,
                    usage,
                })
            };
            let ev = match st.queued.pop_front() {
                Some(ev) => Some(ev),
                None => st.rx.recv().await,
            };
            let mut out = Vec::new();
            match ev {
                Some((i, GenEvent::Delta { text, tokens })) => {
                    let logprobs = top.map(|_| completion_logprobs(&tokens, st.offsets[i]));
                    st.offsets[i] += text.len();
                    out.extend(chunk(
                        vec![CompletionChoice {
                            index: i as u32,
                            text,
                            logprobs,
                            finish_reason: None,
                        }],
                        None,
                    ));
                }
                Some((i, GenEvent::Done(f))) => {
                    observe(&model, &f);
                    st.usage = Usage::new(
                        st.usage.prompt_tokens + f.prompt_tokens as u64,
                        st.usage.completion_tokens + f.completion_tokens as u64,
                    );
                    out.extend(chunk(
                        vec![CompletionChoice {
                            index: i as u32,
                            text: String::new(),
                            logprobs: None,
                            finish_reason: Some(f.reason.word().into()),
                        }],
                        None,
                    ));
                    st.done += 1;
                }
                Some((_, GenEvent::Failed(e))) => {
                    let api = crate::error::from_engine(e.into(), &[]);
                    out.extend(data(&api.body(Shape::OpenAi)));
                    st.done = n;
                }
                None => {
                    let api = crate::error::from_engine(EngineError::Unavailable, &[]);
                    out.extend(data(&api.body(Shape::OpenAi)));
                    st.done = n;
                }
            }
            if st.done == n {
                if include_usage {
                    out.extend(chunk(Vec::new(), Some(st.usage)));
                }
                out.extend_from_slice(b"data: [DONE]\n\n");
                st.ended = true;
            }
            Some((Ok::<_, Infallible>(Bytes::from(out)), st))
        }
    });
    Ok(sse_response(stream))
}
