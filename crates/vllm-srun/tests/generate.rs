//! Text generation end to end on the real test model: OpenAI chat and completions (answers,
//! streams, tools, JSON schemas, errors), SIE generate (msgpack and SSE), disconnects,
//! continuous batching and fuzzed bodies.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{Read, Write};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use common::*;
use serde_json::{json, Value};

fn server() -> &'static TestServer {
    static S: OnceLock<TestServer> = OnceLock::new();
    S.get_or_init(|| {
        let mut o = options();
        o.generate = Some(engine::GenerateConfig {
            sequences: 4,
            context_tokens: 2048,
            prefill_chunk: 64,
            max_waiting: 64,
        });
        start(o)
    })
}

/// The tests of this binary run one at a time: two of them read the worker's counters.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn status() -> std::sync::Arc<engine::generate::GenerateStatus> {
    server().registry.slots()[0]
        .text()
        .and_then(|t| t.running())
        .expect("the generation worker runs")
        .status()
        .clone()
}

async fn complete(body: Value) -> Value {
    let (st, _, v) = post(&server().url("/v1/completions"), &body).await;
    assert_eq!(st, 200, "{v}");
    v
}

/// The `data:` payloads of an event stream, without `[DONE]`; and whether it ended with it.
fn events(text: &str) -> (Vec<Value>, bool) {
    let mut out = Vec::new();
    let mut done = false;
    for line in text.lines() {
        if let Some(d) = line.strip_prefix("data: ") {
            if d == "[DONE]" {
                done = true;
            } else {
                out.push(serde_json::from_str(d).expect("each data line is JSON"));
            }
        }
    }
    (out, done)
}

async fn post_text(path: &str, body: &Value) -> (u16, String, String) {
    let r = client()
        .post(server().url(path))
        .json(body)
        .send()
        .await
        .unwrap();
    let st = r.status().as_u16();
    let ct = r
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap_or("").to_string())
        .unwrap_or_default();
    (st, ct, r.text().await.unwrap())
}

#[tokio::test]
async fn greedy_completions_are_right_and_stop_where_told() {
    let _serial = SERIAL.lock().await;
    let v =
        complete(json!({"prompt": "The capital of France is", "max_tokens": 6, "temperature": 0}))
            .await;
    let text = v["choices"][0]["text"].as_str().unwrap();
    assert!(text.contains("Paris"), "{v}");
    assert_eq!(v["object"], "text_completion");
    assert_eq!(v["choices"][0]["finish_reason"], "length");
    let u = &v["usage"];
    assert_eq!(u["completion_tokens"], 6);
    assert_eq!(
        u["total_tokens"].as_u64().unwrap(),
        u["prompt_tokens"].as_u64().unwrap() + 6
    );
    // A stop sequence ends the text before it.
    let v = complete(
        json!({"prompt": "The capital of France is", "max_tokens": 12,
        "temperature": 0, "stop": ["."]}),
    )
    .await;
    assert_eq!(v["choices"][0]["text"], " Paris", "{v}");
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
    // Logprobs: the chosen token is the most likely one under greedy decoding.
    let v = complete(
        json!({"prompt": "The capital of France is", "max_tokens": 3,
        "temperature": 0, "logprobs": 2}),
    )
    .await;
    let lp = &v["choices"][0]["logprobs"];
    assert_eq!(lp["tokens"].as_array().unwrap().len(), 3, "{v}");
    for (i, t) in lp["tokens"].as_array().unwrap().iter().enumerate() {
        let top = lp["top_logprobs"][i].as_object().unwrap();
        let best = top
            .iter()
            .max_by(|a, b| a.1.as_f64().unwrap().total_cmp(&b.1.as_f64().unwrap()))
            .unwrap();
        assert_eq!(best.0, t.as_str().unwrap(), "{v}");
        assert!(lp["token_logprobs"][i].as_f64().unwrap() <= 0.0);
    }
}

#[tokio::test]
async fn the_same_seed_gives_the_same_text() {
    let _serial = SERIAL.lock().await;
    let body = json!({"prompt": "Once upon a time", "max_tokens": 16, "temperature": 0.9,
        "seed": 1234});
    let a = complete(body.clone()).await;
    let b = complete(body).await;
    assert_eq!(a["choices"][0]["text"], b["choices"][0]["text"]);
    assert_eq!(a["usage"]["completion_tokens"], 16);
}

#[tokio::test]
async fn chat_streams_the_same_text_it_answers_whole() {
    let _serial = SERIAL.lock().await;
    let body = json!({"model": test_model(), "messages": [
        {"role": "system", "content": "You are brief."},
        {"role": "user", "content": "Name a colour."}],
        "max_tokens": 12, "temperature": 0});
    let (st, _, whole) = post(&server().url("/v1/chat/completions"), &body).await;
    assert_eq!(st, 200, "{whole}");
    assert_eq!(whole["object"], "chat.completion");
    assert_eq!(whole["choices"][0]["message"]["role"], "assistant");
    let content = whole["choices"][0]["message"]["content"].as_str().unwrap();
    assert!(!content.is_empty());
    let mut s = body.clone();
    s["stream"] = json!(true);
    s["stream_options"] = json!({"include_usage": true});
    let (st, ct, text) = post_text("/v1/chat/completions", &s).await;
    assert_eq!(st, 200);
    assert!(ct.starts_with("text/event-stream"), "{ct}");
    let (chunks, done) = events(&text);
    assert!(done, "the stream ends with [DONE]");
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    let streamed: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(streamed, content);
    let last = chunks.last().unwrap();
    assert_eq!(last["choices"].as_array().unwrap().len(), 0);
    assert_eq!(last["usage"], whole["usage"]);
    let finish: Vec<&Value> = chunks
        .iter()
        .map(|c| &c["choices"][0]["finish_reason"])
        .filter(|f| !f.is_null())
        .collect();
    assert_eq!(finish, vec![&whole["choices"][0]["finish_reason"]]);
    assert!(chunks
        .iter()
        .all(|c| c["object"] == "chat.completion.chunk" && c["id"] == chunks[0]["id"]));
}

#[tokio::test]
async fn a_required_tool_is_called_with_arguments_that_fit_its_schema() {
    let _serial = SERIAL.lock().await;
    let body = json!({"messages": [{"role": "user", "content": "What is the weather in Oslo?"}],
        "tools": [{"type": "function", "function": {"name": "get_weather",
            "description": "The weather in a city",
            "parameters": {"type": "object", "properties": {
                "city": {"type": "string", "maxLength": 24}}, "required": ["city"]}}}],
        "tool_choice": "required", "temperature": 0, "max_tokens": 64});
    let (st, _, v) = post(&server().url("/v1/chat/completions"), &body).await;
    assert_eq!(st, 200, "{v}");
    let choice = &v["choices"][0];
    assert_eq!(choice["finish_reason"], "tool_calls", "{v}");
    let call = &choice["message"]["tool_calls"][0];
    assert_eq!(call["type"], "function");
    assert_eq!(call["function"]["name"], "get_weather");
    assert!(call["id"].as_str().unwrap().starts_with("call_"));
    let args: Value =
        serde_json::from_str(call["function"]["arguments"].as_str().unwrap()).unwrap();
    assert!(args["city"].is_string(), "{args}");
    // Streamed, the call arrives as a tool_calls delta with its index.
    let mut s = body;
    s["stream"] = json!(true);
    let (_, _, text) = post_text("/v1/chat/completions", &s).await;
    let (chunks, done) = events(&text);
    assert!(done);
    let call = chunks
        .iter()
        .find_map(|c| c["choices"][0]["delta"]["tool_calls"].as_array().cloned())
        .expect("a tool_calls delta");
    assert_eq!(call[0]["index"], 0);
    assert_eq!(call[0]["function"]["name"], "get_weather");
}

#[tokio::test]
async fn a_json_schema_answer_parses_and_validates() {
    let _serial = SERIAL.lock().await;
    let body = json!({"messages": [{"role": "user", "content": "Give a city and its population."}],
        "response_format": {"type": "json_schema", "json_schema": {"name": "city", "schema": {
            "type": "object", "properties": {"city": {"type": "string", "maxLength": 24},
            "population": {"type": "integer"}}, "required": ["city", "population"]}}},
        "temperature": 0, "max_tokens": 80});
    let (st, _, v) = post(&server().url("/v1/chat/completions"), &body).await;
    assert_eq!(st, 200, "{v}");
    let content = v["choices"][0]["message"]["content"].as_str().unwrap();
    let doc: Value = serde_json::from_str(content).unwrap_or_else(|e| panic!("{e}: {content}"));
    assert!(
        doc["city"]
            .as_str()
            .is_some_and(|c| c.chars().count() <= 24),
        "{doc}"
    );
    assert!(
        doc["population"].is_i64() || doc["population"].is_u64(),
        "{doc}"
    );
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
}

#[tokio::test]
async fn bad_bodies_get_openai_shaped_errors() {
    let _serial = SERIAL.lock().await;
    let url = server().url("/v1/chat/completions");
    let user = json!([{"role": "user", "content": "hi"}]);
    for (body, status, param, code) in [
        (
            json!({"model": "nope", "messages": user}),
            404,
            Value::Null,
            "model_not_found",
        ),
        (
            json!({"messages": []}),
            400,
            json!("messages"),
            "parameter_invalid",
        ),
        (
            json!({"messages": user, "n": 2}),
            400,
            json!("n"),
            "parameter_invalid",
        ),
        (
            json!({"messages": user, "temperature": 5}),
            400,
            json!("temperature"),
            "parameter_invalid",
        ),
        (
            json!({"messages": user, "top_logprobs": 50}),
            400,
            json!("top_logprobs"),
            "parameter_invalid",
        ),
        (
            json!({"messages": user, "tool_choice": {"type": "function", "function": {"name": "f"}}}),
            400,
            json!("tool_choice"),
            "parameter_invalid",
        ),
        (
            json!({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}),
            400,
            json!("messages"),
            "modality_unsupported",
        ),
        (
            json!({"messages": "hi"}),
            400,
            Value::Null,
            "body_malformed",
        ),
        (
            json!({"messages": [{"role": "user", "content": "x".repeat(30_000)}]}),
            400,
            json!("messages"),
            "context_length_exceeded",
        ),
    ] {
        let (st, _, v) = post(&url, &body).await;
        assert_eq!(st, status, "{body}: {v}");
        let e = &v["error"];
        assert!(e["message"].is_string(), "{v}");
        assert_eq!(e["type"], "invalid_request_error", "{v}");
        assert_eq!(e["param"], param, "{v}");
        assert_eq!(e["code"], code, "{v}");
    }
    let (st, _, v) = post_raw(&url, b"{\"messages\":".to_vec(), &[]).await;
    assert_eq!(st, 400);
    assert_eq!(v["error"]["code"], "body_malformed");
    let (st, _, v) = post(
        &server().url("/v1/completions"),
        &json!({"prompt": "x", "echo": true}),
    )
    .await;
    assert_eq!((st, v["error"]["param"].clone()), (400, json!("echo")));
}

#[tokio::test]
async fn sie_generate_round_trips_msgpack_and_streams_text_deltas() {
    let _serial = SERIAL.lock().await;
    let url = server().url(&format!("/v1/generate/{}", test_model()));
    let body = json!({"prompt": "The capital of France is", "max_new_tokens": 5, "temperature": 0});
    let r = client()
        .post(&url)
        .header("content-type", "application/msgpack")
        .body(rmp_serde::to_vec_named(&body).unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-type"], "application/msgpack");
    let v: Value = rmp_serde::from_slice(&r.bytes().await.unwrap()).unwrap();
    assert!(v["text"].as_str().unwrap().contains("Paris"), "{v}");
    assert_eq!(v["finish_reason"], "length");
    assert_eq!(v["usage"]["completion_tokens"], 5);
    assert!(v["ttft_ms"].as_f64().unwrap() > 0.0);
    let mut s = body;
    s["stream"] = json!(true);
    let r = client().post(&url).json(&s).send().await.unwrap();
    assert_eq!(r.headers()["content-type"], "text/event-stream");
    let text = r.text().await.unwrap();
    let mut deltas = String::new();
    let mut done = None;
    let mut name = "";
    for line in text.lines() {
        if let Some(n) = line.strip_prefix("event: ") {
            name = n;
        } else if let Some(d) = line.strip_prefix("data: ") {
            let d: Value = serde_json::from_str(d).unwrap();
            match name {
                "text_delta" => deltas.push_str(d["text_delta"].as_str().unwrap()),
                "done" => done = Some(d),
                other => panic!("unexpected event {other}"),
            }
        }
    }
    let done = done.expect("a done event");
    assert_eq!(done["text"], v["text"]);
    assert_eq!(deltas, v["text"].as_str().unwrap());
    assert!(done["ttft_ms"].as_f64().unwrap() > 0.0);
    assert_eq!(done["usage"]["completion_tokens"], 5);
    // Slashes are refused; `__` stands for them. Errors are msgpack too unless JSON is asked.
    let sie_json = |path: String, body: Value| async move {
        post_raw(
            &path,
            body.to_string().into_bytes(),
            &[("accept", "application/json")],
        )
        .await
    };
    let (st, _, v) = sie_json(
        server().url("/v1/generate/org/model"),
        json!({"prompt": "x", "max_new_tokens": 1}),
    )
    .await;
    assert_eq!(
        (st, v["detail"]["code"].as_str()),
        (400, Some("INVALID_INPUT")),
        "{v}"
    );
    let (st, _, v) = sie_json(
        server().url("/v1/generate/org__model"),
        json!({"prompt": "x", "max_new_tokens": 1}),
    )
    .await;
    assert_eq!(
        (st, v["detail"]["code"].as_str()),
        (404, Some("MODEL_NOT_FOUND")),
        "{v}"
    );
    let (st, _, v) = sie_json(url.clone(), json!({"prompt": "x"})).await;
    assert_eq!(
        (st, v["detail"]["code"].as_str()),
        (400, Some("INVALID_INPUT")),
        "{v}"
    );
    let r = client()
        .post(&url)
        .json(&json!({"prompt": "x"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.headers()["content-type"], "application/msgpack");
    let v: Value = rmp_serde::from_slice(&r.bytes().await.unwrap()).unwrap();
    assert_eq!(v["detail"]["code"], "INVALID_INPUT");
}

#[tokio::test]
async fn a_client_that_goes_away_frees_its_sequence() {
    let _serial = SERIAL.lock().await;
    // Make sure the worker runs, then stream a long generation and hang up after its first
    // chunks.
    complete(json!({"prompt": "Hi", "max_tokens": 1})).await;
    let before = status().cancelled();
    let addr = server().base.trim_start_matches("http://").to_string();
    let body = json!({"prompt": "Write a very long story about a dragon.", "max_tokens": 1500,
        "temperature": 0.8, "seed": 1, "stream": true})
    .to_string();
    let mut sock = std::net::TcpStream::connect(&addr).unwrap();
    write!(
        sock,
        "POST /v1/completions HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut buf = vec![0u8; 4096];
    let mut got = 0;
    while got < 3 {
        let n = sock.read(&mut buf).unwrap();
        assert!(n > 0);
        got += String::from_utf8_lossy(&buf[..n]).matches("data: ").count();
    }
    assert!(status().active() >= 1);
    drop(sock);
    let deadline = Instant::now() + Duration::from_secs(30);
    while status().cancelled() == before {
        assert!(Instant::now() < deadline, "the generation was not stopped");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // No more tokens are computed for it.
    let tokens = status().generated_tokens();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(status().generated_tokens(), tokens);
}

#[tokio::test]
async fn concurrent_generations_share_decode_steps() {
    let _serial = SERIAL.lock().await;
    complete(json!({"prompt": "Hi", "max_tokens": 1})).await;
    {
        let (t0, s0) = (status().generated_tokens(), status().steps());
        let tasks: Vec<_> = ["Red", "Blue", "Green", "Yellow"]
            .iter()
            .map(|p| {
                let body = json!({"prompt": format!("{p} is a colour that"), "max_tokens": 24,
                    "temperature": 0});
                tokio::spawn(async move { complete(body).await })
            })
            .collect();
        for t in tasks {
            let v = t.await.unwrap();
            assert_eq!(v["usage"]["completion_tokens"], 24);
        }
        let tokens = status().generated_tokens() - t0;
        let steps = status().steps() - s0;
        eprintln!("{tokens} tokens in {steps} steps");
        assert_eq!(tokens, 96);
        // Four streams of 24 tokens: close to 24 shared steps (plus prompt chunks of requests
        // that arrive a step apart), not 96.
        assert!(steps <= 40, "{steps} steps for {tokens} tokens");
    }
}

#[tokio::test]
async fn models_list_generation_and_metrics_show_it() {
    let _serial = SERIAL.lock().await;
    complete(json!({"prompt": "Hi", "max_tokens": 2})).await;
    let (st, v) = get(&server().url("/v1/models")).await;
    assert_eq!(st, 200);
    let entry = &v["data"][0];
    assert_eq!(entry["object"], "model");
    assert_eq!(entry["id"], test_model());
    assert!(entry["surfaces"]
        .as_array()
        .unwrap()
        .contains(&json!("generate")));
    let text = get_text(&server().url("/metrics")).await;
    for m in [
        "vllm_srun_time_to_first_token_seconds",
        "vllm_srun_inter_token_latency_seconds",
        "vllm_srun_generated_tokens_total",
        "vllm_srun_generation_active_sequences",
    ] {
        assert!(text.contains(m), "{m} missing");
    }
}

#[tokio::test]
async fn fuzzed_generation_bodies_never_get_a_server_error() {
    let _serial = SERIAL.lock().await;
    let mut next = xorshift(0x5eed_1234);
    let values = [
        json!(null),
        json!(-1),
        json!(0),
        json!(1),
        json!(2.5),
        json!(1e300),
        json!("x"),
        json!([]),
        json!({}),
        json!([1, 2]),
        json!(["a"]),
        json!(true),
        json!("\u{0}"),
    ];
    let fields = [
        "model",
        "messages",
        "prompt",
        "max_tokens",
        "max_completion_tokens",
        "temperature",
        "top_p",
        "seed",
        "stop",
        "n",
        "stream",
        "logprobs",
        "top_logprobs",
        "response_format",
        "tools",
        "tool_choice",
        "stream_options",
        "max_new_tokens",
        "chat_template_kwargs",
    ];
    for path in [
        "/v1/chat/completions",
        "/v1/completions",
        &format!("/v1/generate/{}", test_model()),
    ] {
        for _ in 0..25 {
            let mut body = json!({"messages": [{"role": "user", "content": "hi"}],
                "prompt": "hi", "max_tokens": 2, "max_completion_tokens": 2, "max_new_tokens": 2});
            for _ in 0..(1 + next() % 3) {
                let f = fields[(next() as usize) % fields.len()];
                body[f] = values[(next() as usize) % values.len()].clone();
            }
            // Keep every run short.
            for k in ["max_tokens", "max_new_tokens", "max_completion_tokens"] {
                if body[k].as_u64().is_some_and(|n| n > 4)
                    || body[k].as_f64().is_some_and(|n| n > 4.0)
                {
                    body[k] = json!(2);
                }
            }
            if body["max_completion_tokens"].is_null() && body["max_tokens"].is_null() {
                body["max_tokens"] = json!(2);
            }
            let (st, _, text) = post_text(path, &body).await;
            assert!(st < 500, "{path} {body}: {st} {text}");
        }
    }
}

/// A prompt that starts with tokens a free slot still holds (the last generation's prompt and
/// output) evaluates only the rest, as llama-server's slots do: the same prompt again reads
/// only its last token, a longer one that continues it only what follows; the answers stay
/// right.
#[tokio::test]
async fn a_prompt_a_slot_holds_is_evaluated_only_where_it_is_new() {
    let _serial = SERIAL.lock().await;
    let body = json!({"prompt": "The capital of France is", "max_tokens": 4, "temperature": 0});
    let first = complete(body.clone()).await;
    let prompt = first["usage"]["prompt_tokens"].as_u64().unwrap();
    let before = status().cached_tokens();
    let again = complete(body).await;
    assert_eq!(status().cached_tokens() - before, prompt - 1);
    for v in [&first, &again] {
        assert!(
            v["choices"][0]["text"].as_str().unwrap().contains("Paris"),
            "{v}"
        );
    }
    let before = status().cached_tokens();
    let longer = complete(
        json!({"prompt": "The capital of France is Paris. The capital of Germany is",
        "max_tokens": 4, "temperature": 0}),
    )
    .await;
    assert!(
        status().cached_tokens() - before >= prompt,
        "the old prompt is held"
    );
    assert!(
        longer["choices"][0]["text"]
            .as_str()
            .unwrap()
            .contains("Berlin"),
        "{longer}"
    );
}
