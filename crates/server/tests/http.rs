//! The worker's HTTP behaviour, in process and without weights: routes called with
//! `tower::ServiceExt::oneshot` on a decision model whose backend scripts its logits
//! (`engine::fake`). Error words, validation, body codings and limits are asserted here;
//! what only a real model shows (answers, bit-exactness, speed) stays in `crates/vllm-srun/tests`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::Write;
use std::sync::{Arc, OnceLock};

use axum::body::Body;
use axum::http::{header, Request, StatusCode};
use common::{fake_registry, yes_over_no, CONTEXT_TOKENS};
use engine::registry::{ModelKind, Registry, Slot};
use serde_json::{json, Value};
use server::ServerConfig;
use tower::ServiceExt;

const LIMIT: usize = 4096;

/// One fake model, "fake", that says Yes over No, loaded once for every test.
fn registry() -> Arc<Registry> {
    static REGISTRY: OnceLock<Arc<Registry>> = OnceLock::new();
    REGISTRY
        .get_or_init(|| fake_registry(CONTEXT_TOKENS, Default::default(), yes_over_no()))
        .clone()
}

/// The worker's routes on the fake model, with a small body limit.
fn app() -> axum::Router {
    app_with(ServerConfig {
        max_request_bytes: LIMIT,
        ..ServerConfig::default()
    })
}

fn app_with(config: ServerConfig) -> axum::Router {
    server::router(registry(), config)
}

/// POST `body` to `path` with `headers`; the status, the headers and the JSON body.
async fn post(
    path: &str,
    body: Vec<u8>,
    headers: &[(&str, &str)],
) -> (StatusCode, axum::http::HeaderMap, Value) {
    send(app(), Request::post(path), body, headers).await
}

/// POST a JSON value to `path`.
async fn post_json(path: &str, body: &Value) -> (StatusCode, Value) {
    let (s, _, v) = post(path, body.to_string().into_bytes(), &[]).await;
    (s, v)
}

/// POST a JSON value to `path` of `app` (a future that owns what it needs, to spawn).
async fn post_to(
    app: axum::Router,
    path: &'static str,
    body: Value,
) -> (StatusCode, axum::http::HeaderMap, Value) {
    send(app, Request::post(path), body.to_string().into_bytes(), &[]).await
}

/// One noul about `state`, for the model the process serves.
fn asking(state: &str) -> Value {
    json!({"state": state, "questions": {"q": {"type": "noul", "instructions": "Does it rain?"}}})
}

/// `req` with `body` and `headers` to `app`; the status, the headers and the JSON body.
async fn send(
    app: axum::Router,
    mut req: axum::http::request::Builder,
    body: Vec<u8>,
    headers: &[(&str, &str)],
) -> (StatusCode, axum::http::HeaderMap, Value) {
    // As a client sends it: its length said.
    req = req
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::CONTENT_LENGTH, body.len());
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = app
        .oneshot(req.body(Body::from(body)).unwrap())
        .await
        .unwrap();
    let status = resp.status();
    let headers = resp.headers().clone();
    let bytes = axum::body::to_bytes(resp.into_body(), usize::MAX)
        .await
        .unwrap();
    let v = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    (status, headers, v)
}

fn noul() -> Value {
    json!({"model": "fake", "state": "It rains.",
           "questions": {"q": {"type": "noul", "instructions": "Does it rain?"}}})
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(bytes).unwrap();
    e.finish().unwrap()
}

#[tokio::test]
async fn a_noul_is_answered_with_the_scripted_probability() {
    let (status, _, v) = post("/v1/decisions", noul().to_string().into_bytes(), &[]).await;
    assert_eq!(status, StatusCode::OK, "{v}");
    let p = v["answers"]["q"]["noul"].as_f64().unwrap();
    let want = 2f64.exp() / (2f64.exp() + 1.0);
    assert!((p - want).abs() < 1e-6, "p {p}, want {want}");
}

#[tokio::test]
async fn gzip_and_zstd_bodies_are_answered_as_the_plain_one() {
    let plain = noul().to_string().into_bytes();
    let (_, _, want) = post("/v1/decisions", plain.clone(), &[]).await;
    let (s, _, g) = post(
        "/v1/decisions",
        gzip(&plain),
        &[("content-encoding", "gzip")],
    )
    .await;
    assert_eq!((s, &g["answers"]), (StatusCode::OK, &want["answers"]));
    let z = zstd::encode_all(&plain[..], 3).unwrap();
    let (s, _, z) = post("/v1/systemone", z, &[("content-encoding", "zstd")]).await;
    assert_eq!(s, StatusCode::OK, "{z}");
    assert_eq!(z["answers"]["q"]["noul"], want["answers"]["q"]["noul"]);
}

#[tokio::test]
async fn an_unread_coding_is_415_encoding_unsupported_and_a_broken_one_400() {
    let (s, _, v) = post(
        "/v1/decisions",
        noul().to_string().into_bytes(),
        &[("content-encoding", "br")],
    )
    .await;
    assert_eq!(s, StatusCode::UNSUPPORTED_MEDIA_TYPE);
    assert_eq!(v["error"]["code"], "unsupported_media_type");
    assert_eq!(v["error"]["reason"], "encoding_unsupported");
    // Stacked codings and ones this server does not read, on the published path's shape,
    // still carry the request's timing and id.
    for enc in ["br", "gzip, gzip", "compress"] {
        let (s, h, v) = post(
            "/v1/systemone",
            noul().to_string().into_bytes(),
            &[("content-encoding", enc)],
        )
        .await;
        assert_eq!(s, StatusCode::UNSUPPORTED_MEDIA_TYPE, "{enc}: {v}");
        assert_eq!(v["code"], "unsupported_media_type");
        assert_eq!(v["reason"], "encoding_unsupported");
        assert!(h.contains_key("server-timing") && h.contains_key("x-request-id"));
    }
    let (s, _, v) = post(
        "/v1/decisions",
        b"not gzip at all".to_vec(),
        &[("content-encoding", "gzip")],
    )
    .await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
    assert_eq!(v["error"]["reason"], "encoding_malformed");
}

#[tokio::test]
async fn a_body_over_the_limit_is_413_as_sent_and_once_decoded() {
    let mut big = noul();
    big["state"] = json!("x".repeat(LIMIT));
    let bytes = big.to_string().into_bytes();
    let (s, h, v) = post("/v1/decisions", bytes.clone(), &[]).await;
    assert_eq!(s, StatusCode::PAYLOAD_TOO_LARGE);
    assert!(h.contains_key("server-timing"));
    assert_eq!(v["error"]["code"], "request_too_large");
    assert_eq!(v["error"]["reason"], "body_too_large");
    assert_eq!(v["error"]["limit"], LIMIT);
    // Far under the limit as sent, over it once inflated.
    let packed = gzip(&bytes);
    assert!(packed.len() < LIMIT / 4);
    let (s, _, v) = post("/v1/systemone", packed, &[("content-encoding", "gzip")]).await;
    assert_eq!(s, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(v["reason"], "body_too_large");
    assert_eq!(v["code"], "request_too_large");
}

/// A body whose length is not said (streamed) is read on the large-body path; refused there
/// it still carries Server-Timing, as every answer of these endpoints does.
#[tokio::test]
async fn a_streamed_body_over_the_limit_is_413_with_server_timing() {
    let mut big = noul();
    big["state"] = json!("x".repeat(LIMIT));
    let bytes = big.to_string().into_bytes();
    let chunks = || {
        let c: Vec<Result<Vec<u8>, std::io::Error>> =
            bytes.chunks(1024).map(|c| Ok(c.to_vec())).collect();
        futures_util::stream::iter(c)
    };
    for path in ["/v1/decisions", "/v1/systemone"] {
        let req = Request::post(path)
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from_stream(chunks()))
            .unwrap();
        let resp = app().oneshot(req).await.unwrap();
        assert_eq!(resp.status(), StatusCode::PAYLOAD_TOO_LARGE, "{path}");
        assert!(resp.headers().contains_key("server-timing"), "{path}");
    }
}

#[tokio::test]
async fn a_body_that_is_not_json_is_422_on_systemone_and_400_on_decisions() {
    let (s, _, v) = post("/v1/systemone", b"{not json".to_vec(), &[]).await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(v["detail"][0]["loc"], json!(["body"]));
    assert_eq!(v["detail"][0]["type"], "body_malformed");
    let (s, _, v) = post("/v1/decisions", b"{not json".to_vec(), &[]).await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    assert_eq!(v["error"]["reason"], "body_malformed");
    // A member of the wrong type: 5.0's detail names where.
    let body = json!({"state": 7, "questions": {"q": {"type": "noul", "instructions": "?"}}});
    let (s, v) = post_json("/v1/systemone", &body).await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{v}");
    assert_eq!(v["reason"], "body_malformed");
    assert_eq!(v["detail"][0]["loc"], json!(["body", "state"]));
    let (s, v) = post_json("/v1/decisions", &body).await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
    assert_eq!(v["error"]["reason"], "body_malformed");
}

#[tokio::test]
async fn an_unknown_member_is_refused_by_name() {
    let mut body = noul();
    body["colour"] = json!("red");
    let (s, _, v) = post("/v1/decisions", body.to_string().into_bytes(), &[]).await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    assert_eq!(v["error"]["reason"], "unknown_member");
    assert!(
        v["error"]["message"].as_str().unwrap().contains("colour"),
        "{v}"
    );
}

#[tokio::test]
async fn an_unknown_member_is_400_on_the_published_path_and_mixed_forms_forms_mixed() {
    let q = json!({"q": {"type": "noul", "instructions": "?"}});
    let (s, v) = post_json(
        "/v1/systemone",
        &json!({"state": "x", "questions": q, "temperature": 0}),
    )
    .await;
    assert_eq!(
        (s, v["reason"].as_str()),
        (StatusCode::BAD_REQUEST, Some("unknown_member")),
        "{v}"
    );
    assert!(v["message"].as_str().unwrap().contains("temperature"));
    let mixed =
        json!({"state": "x", "questions": q, "states": {"a": {"state": "y", "questions": q}}});
    let (s, v) = post_json("/v1/decisions", &mixed).await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
    assert_eq!(v["error"]["reason"], "forms_mixed");
}

/// worker-api.txt: an entry of `states` whose images are refused fails each of its
/// questions with `invalid_input` (`input_malformed`) and the refusal's message; the other
/// entries are answered. Every entry refused: the first refusal answers the body.
#[tokio::test]
async fn a_refused_batch_entry_fails_its_questions_with_input_malformed() {
    let q = json!({"q": {"type": "noul", "instructions": "Does it rain?"}});
    let broken = "data:image/png;base64,iVBORw0KGgo=";
    let body = json!({"states": {
        "good": {"state": "It rains.", "questions": q},
        "bad": {"state": "x", "images": [broken], "questions": q},
    }});
    let (s, v) = post_json("/v1/decisions", &body).await;
    assert_eq!(
        s,
        StatusCode::OK,
        "a refused image fails only its entry: {v}"
    );
    let bad = &v["states"]["bad"]["answers"]["q"];
    assert_eq!(bad["error"], "invalid_input", "{v}");
    assert_eq!(bad["reason"], "input_malformed", "{v}");
    assert!(
        bad["message"].as_str().unwrap().contains("images[0]"),
        "{v}"
    );
    assert!(
        v["states"]["good"]["answers"]["q"]["noul"].is_number(),
        "{v}"
    );
    let all = json!({"states": {"bad": {"state": "x", "images": [broken], "questions": q}}});
    let (s, v) = post_json("/v1/decisions", &all).await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
    assert_eq!(v["error"]["reason"], "image_malformed");
    // A picture that decodes, refused while reading the entry for the model (a text model):
    // only that entry's questions fail.
    let png = {
        let mut b = b"\x89PNG\r\n\x1a\n\x00\x00\x00\x0dIHDR".to_vec();
        b.extend(4u32.to_be_bytes());
        b.extend(4u32.to_be_bytes());
        b.extend([8, 6, 0, 0, 0, 0, 0, 0, 0]);
        b
    };
    use base64::Engine as _;
    let url = format!(
        "data:image/png;base64,{}",
        base64::engine::general_purpose::STANDARD.encode(png)
    );
    let body = json!({"states": {
        "good": {"state": "It rains.", "questions": q},
        "bad": {"state": "x", "images": [url], "questions": q},
    }});
    let (s, v) = post_json("/v1/decisions", &body).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["states"]["good"]["answers"]["q"]["type"], "noul");
    let bad = &v["states"]["bad"]["answers"]["q"];
    assert_eq!(bad["error"], "invalid_input", "{bad}");
    assert_eq!(bad["reason"], "input_malformed");
    assert!(bad["message"].as_str().unwrap().contains("image"));
}

/// A worker started with `--systemone-schema vllm-sr/4.0` reads the earlier forms and
/// answers errors with both `error` and `detail`.
#[tokio::test]
async fn v4_reads_the_earlier_forms_and_answers_errors_with_error_and_detail() {
    let v4 = || {
        app_with(ServerConfig {
            schema: protocol::Schema::V4,
            ..ServerConfig::default()
        })
    };
    let call = |path, body| post_to(v4(), path, body);
    let body = json!({"state": "It rains.", "options": {"long_context": true}, "questions": {
        "team": {"type": "choice", "instructions": "Which team?", "choices": [{"key": "billing"}, {"key": "tech", "description": "Bugs"}]},
        "anger": {"type": "score", "instructions": "How angry?", "levels": ["Calm", "Angry"]}}});
    let (s, _, v) = call("/v1/systemone", body).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["answers"]["team"]["type"], "choice");
    assert_eq!(v["answers"]["anger"]["legend"]["1"], "Angry");
    let bad = json!({"state": "x", "questions": {"w": {"type": "box", "instructions": "logo"}}});
    let (s, _, v) = call("/v1/systemone", bad).await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{v}");
    assert_eq!(v["error"]["code"], "question_failed");
    assert_eq!(v["error"]["reason"], "box_unsupported");
    assert_eq!(v["code"], "question_failed");
    assert!(v["detail"].is_array());
    let (s, _, m) = send(v4(), Request::get("/v1/models"), Vec::new(), &[]).await;
    assert_eq!(s, StatusCode::OK);
    assert!(m["data"].is_array(), "4.0 keeps the OpenAI data list");
}

#[tokio::test]
async fn an_unknown_model_is_404_and_an_unknown_route_404_route_not_found() {
    let mut body = noul();
    body["model"] = json!("nope");
    let (s, _, v) = post("/v1/decisions", body.to_string().into_bytes(), &[]).await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    assert_eq!(v["error"]["code"], "model_not_found");
    let (s, _, v) = post("/v1/nothing-here", b"{}".to_vec(), &[]).await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    assert_eq!(v["error"]["reason"], "route_not_found");
}

#[tokio::test]
async fn a_bad_question_fails_in_place_on_decisions_and_the_request_on_systemone() {
    let body = json!({"model": "fake", "state": "It rains.", "questions": {
        "q": {"type": "noul", "instructions": "Does it rain?"},
        "bad": {"type": "score", "instructions": "How much?", "criteria": ["only one"]}}});
    let (s, _, v) = post("/v1/decisions", body.to_string().into_bytes(), &[]).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["answers"]["bad"]["error"], "invalid_question");
    assert!(v["answers"]["q"]["noul"].is_number());
    let (s, _, v) = post("/v1/systemone", body.to_string().into_bytes(), &[]).await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(v["code"], "question_failed");
    assert_eq!(v["question"], "bad");
    assert_eq!(v["question_error"], "invalid_question");
    assert_eq!(v["detail"][0]["loc"], json!(["body", "questions", "bad"]));
}

#[tokio::test]
async fn chat_on_a_decision_model_answers_in_openai_shape() {
    let body = json!({"model": "fake", "messages": [{"role": "user", "content": "hi"}]});
    let (s, _, v) = post("/v1/chat/completions", body.to_string().into_bytes(), &[]).await;
    assert!(s.is_client_error(), "{s} {v}");
    assert!(
        v["error"]["type"].is_string() && v["error"]["message"].is_string(),
        "{v}"
    );
    assert!(v.get("detail").is_none());
}

/// Says Yes over No, and takes `pause` over each read of a state that holds "SLOW": a forward
/// that runs long enough to be seen running, queued behind or timed out.
fn slow_script(pause: std::time::Duration) -> engine::fake::Script {
    let answer = yes_over_no();
    Arc::new(move |context, candidates| {
        if context.contains("SLOW") {
            std::thread::sleep(pause);
        }
        answer(context, candidates)
    })
}

async fn get(app: axum::Router, path: &str) -> (StatusCode, Value) {
    let (s, _, v) = send(app, Request::get(path), Vec::new(), &[]).await;
    (s, v)
}

/// A queue of one job: the others are refused at once with Retry-After, each in its path's
/// shape (429 internally, 529 on vllm-sr/5.0), and every request is answered.
#[tokio::test]
async fn admission_refuses_at_once_with_retry_after_and_loses_nothing() {
    let registry = fake_registry(
        CONTEXT_TOKENS,
        engine::SchedulerConfig {
            max_queued_jobs: 1,
            ..Default::default()
        },
        slow_script(std::time::Duration::from_millis(20)),
    );
    let app = server::router(registry, ServerConfig::default());
    let body = json!({"state": "SLOW ticket", "questions": {
        "a": {"type": "noul", "instructions": "Refund?"}, "b": {"type": "noul", "instructions": "Angry?"}}});
    let mut tasks = Vec::new();
    for i in 0..8 {
        let path = if i % 2 == 0 {
            "/v1/decisions"
        } else {
            "/v1/systemone"
        };
        let sent = post_to(app.clone(), path, body.clone());
        tasks.push(tokio::spawn(async move { (i, sent.await) }));
    }
    let (mut ok, mut refused) = (0, 0);
    for t in tasks {
        let (i, (status, h, v)) = t.await.unwrap();
        match status.as_u16() {
            200 => ok += 1,
            429 | 529 => {
                refused += 1;
                assert_eq!(status.as_u16(), if i % 2 == 0 { 429 } else { 529 }, "{v}");
                assert!(h.contains_key("retry-after"));
                let code = if i % 2 == 0 {
                    &v["error"]["code"]
                } else {
                    &v["code"]
                };
                assert_eq!(code, "overloaded");
            }
            other => panic!("unexpected {other}: {v}"),
        }
    }
    assert_eq!(ok + refused, 8, "every request is answered");
    assert!(ok >= 1 && refused >= 1, "ok {ok}, refused {refused}");
}

/// A question that cannot fit one sequence is `question_tokens` (5.0:
/// `max_length_exceeded`); questions that each fit but together pass the request cap
/// (context tokens × sequences) are `request_tokens`, with the cap the card publishes.
#[tokio::test]
async fn a_question_longer_than_a_sequence_is_max_length_exceeded() {
    let registry = fake_registry(512, Default::default(), yes_over_no());
    let app = || server::router(registry.clone(), ServerConfig::default());
    let body = json!({"state": "The customer writes again about the invoice. ".repeat(80),
        "questions": {"q": {"type": "noul", "instructions": "Refund?"}}});
    let call = |path, body: &Value| post_to(app(), path, body.clone());
    let (s, _, v) = call("/v1/decisions", &body).await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
    assert_eq!(v["error"]["reason"], "question_tokens");
    assert!(v["error"]["limit"].as_u64().unwrap() <= 512);
    let (s, _, v) = call("/v1/systemone", &body).await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
    assert_eq!(v["question_error"], "max_length_exceeded");
    let words = "Does the customer mention the invoice or the order? ".repeat(4);
    let questions: serde_json::Map<String, Value> = (0..60)
        .map(|i| {
            (
                format!("q{i}"),
                json!({"type": "noul", "instructions": words}),
            )
        })
        .collect();
    let body = json!({"state": "A short ticket.", "questions": questions});
    let (s, _, v) = call("/v1/decisions", &body).await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
    assert_eq!(v["error"]["reason"], "request_tokens");
    let cap = v["error"]["limit"].as_u64().unwrap();
    let (_, m) = get(app(), "/v1/models").await;
    assert_eq!(
        m["models"][0]["card"]["limits"]["max_request_tokens"], cap,
        "{m}"
    );
}

/// A request dropped while its job waits behind a running forward is cancelled: it never
/// runs a forward of its own.
#[tokio::test]
async fn a_dropped_request_s_queued_work_is_not_run() {
    let registry = fake_registry(
        CONTEXT_TOKENS,
        Default::default(),
        slow_script(std::time::Duration::from_millis(100)),
    );
    let app = server::router(registry.clone(), ServerConfig::default());
    let model = registry.ready(None).expect("ready");
    let worker = model.worker().expect("the fake model has a worker");
    let busy = tokio::spawn(post_to(app.clone(), "/v1/decisions", asking("SLOW")));
    while worker.status().forward_running_for().is_none() {
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    }
    let (cancelled, forwards) = (worker.status().cancelled(), worker.status().forwards());
    let queued = tokio::spawn(post_to(app.clone(), "/v1/decisions", asking("x")));
    while worker.status().queued_jobs() == 0 {
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    }
    queued.abort();
    let _ = queued.await;
    assert_eq!(busy.await.unwrap().0, StatusCode::OK);
    let counts = || {
        let st = worker.status();
        (st.cancelled() - cancelled, st.forwards() - forwards)
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while counts().0 + counts().1 < 2 && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    // A forward wrongly run after the cancellation would show here.
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    assert_eq!(
        counts(),
        (1, 1),
        "(cancelled, forwards) from the busy forward on"
    );
}

/// `/health/live` answers 503 `stalled` (`forward_timeout`) while a forward outruns the
/// timeout, and `alive` again once it ends.
#[tokio::test]
async fn live_answers_stalled_while_a_forward_outruns_the_timeout() {
    let registry = fake_registry(
        CONTEXT_TOKENS,
        Default::default(),
        slow_script(std::time::Duration::from_millis(300)),
    );
    let app = server::router(
        registry,
        ServerConfig {
            forward_timeout: std::time::Duration::from_millis(50),
            ..ServerConfig::default()
        },
    );
    let (s, v) = get(app.clone(), "/health/live").await;
    assert_eq!((s, v["status"].as_str()), (StatusCode::OK, Some("alive")));
    let busy = tokio::spawn(post_to(app.clone(), "/v1/decisions", asking("SLOW")));
    let mut stalled = None;
    for _ in 0..2000 {
        let (s, v) = get(app.clone(), "/health/live").await;
        if s == StatusCode::SERVICE_UNAVAILABLE {
            stalled = Some(v);
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    let v = stalled.expect("a forward longer than 50 ms makes /health/live answer 503");
    assert_eq!(v["status"], "stalled");
    assert_eq!(v["reason"], "forward_timeout");
    assert_eq!(busy.await.unwrap().0, StatusCode::OK);
    let (s, v) = get(app, "/health/live").await;
    assert_eq!((s, v["status"].as_str()), (StatusCode::OK, Some("alive")));
}

/// A model whose load failed: `/health` 503 naming it failed, its requests 503 `not_ready`
/// with Retry-After, the process still alive, and its card's state `failed`.
#[tokio::test]
async fn a_model_that_failed_to_load_is_reported_and_answers_503() {
    let slot = Slot::new(engine::fake::meta_named("broken"), ModelKind::Decision);
    slot.set_state(engine::registry::ModelState::Failed(
        "not a GGUF file".into(),
    ));
    let app = server::router(Arc::new(Registry::new(vec![slot])), ServerConfig::default());
    let (s, v) = get(app.clone(), "/health").await;
    assert_eq!(s, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(v["status"], "failed");
    assert_eq!(v["models"]["broken"], "failed");
    let (s, h, v) = post_to(app.clone(), "/v1/decisions", asking("x")).await;
    assert_eq!(s, StatusCode::SERVICE_UNAVAILABLE, "{v}");
    assert_eq!(v["error"]["code"], "not_ready");
    assert!(h.contains_key("retry-after"));
    let (s, _) = get(app.clone(), "/health/live").await;
    assert_eq!(
        s,
        StatusCode::OK,
        "the process is alive though its model is not"
    );
    let (_, m) = get(app, "/v1/models").await;
    assert_eq!(m["models"][0]["card"]["state"], "failed");
}
