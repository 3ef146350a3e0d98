//! Encoders, rerank, classify, bundle and the SIE face, against a real server serving the
//! test decision model, minilm-l6 and one classification entry.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::OnceLock;

use common::*;
use serde_json::{json, Value};
use vllm_srun::Classifier;

fn server() -> &'static TestServer {
    static S: OnceLock<TestServer> = OnceLock::new();
    S.get_or_init(|| {
        let mut o = options();
        o.models = vec![test_model(), "minilm-l6".into()];
        o.classifiers = vec![
            Classifier {
                name: "sentiment".into(),
                backbone: test_model(),
                labels: vec!["positive".into(), "negative".into(), "neutral".into()],
                multi_label: false,
                instructions: Some("What is the sentiment of the text?".into()),
                ..Classifier::default()
            },
            Classifier {
                name: "topics".into(),
                backbone: test_model(),
                labels: vec!["billing".into(), "shipping".into()],
                multi_label: true,
                instructions: None,
                ..Classifier::default()
            },
        ];
        o.max_bundle_tasks = 3;
        start(o)
    })
}

fn cosine(a: &Value, b: &Value) -> f64 {
    let a: Vec<f64> = a
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect();
    let b: Vec<f64> = b
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect();
    let dot: f64 = a.iter().zip(&b).map(|(x, y)| x * y).sum();
    dot / (a.iter().map(|x| x * x).sum::<f64>().sqrt()
        * b.iter().map(|x| x * x).sum::<f64>().sqrt())
}

const FOOD: &str = "A man is eating food.";
const BREAD: &str = "A man is eating a piece of bread.";
const STOCKS: &str = "The stock market fell sharply today.";

#[tokio::test]
async fn embeddings_match_the_known_minilm_similarities() {
    let s = server();
    let (status, h, v) = post(
        &s.url("/v1/embeddings"),
        &json!({"model": "minilm-l6", "input": [FOOD, BREAD, STOCKS]}),
    )
    .await;
    assert_eq!(status, 200, "{v}");
    assert!(h.contains_key("server-timing"));
    let d = &v["data"];
    assert_eq!(d[0]["embedding"].as_array().unwrap().len(), 384);
    assert_eq!(v["object"], "list");
    assert_eq!(d[2]["index"], 2);
    let c1 = cosine(&d[0]["embedding"], &d[1]["embedding"]);
    let c2 = cosine(&d[0]["embedding"], &d[2]["embedding"]);
    assert!((c1 - 0.755).abs() < 1e-3, "{c1}");
    assert!((c2 - 0.004).abs() < 1e-3, "{c2}");
    // The same text alone and batched with others gives the same vector (within rounding).
    let (_, _, alone) = post(
        &s.url("/v1/embeddings"),
        &json!({"model": "minilm-l6", "input": FOOD}),
    )
    .await;
    let c = cosine(&alone["data"][0]["embedding"], &d[0]["embedding"]);
    assert!(c > 0.99999, "{c}");
    assert!(v["usage"]["prompt_tokens"].as_u64().unwrap() > 20);
}

#[tokio::test]
async fn embeddings_shortened_to_fewer_dimensions_are_unit_prefixes() {
    let s = server();
    let url = s.url("/v1/embeddings");
    let (status, _, full) = post(&url, &json!({"model": "minilm-l6", "input": FOOD})).await;
    assert_eq!(status, 200, "{full}");
    let body = json!({"model": "minilm-l6", "input": FOOD, "dimensions": 128, "options": {"return_meta": true}});
    let (status, _, short) = post(&url, &body).await;
    assert_eq!(status, 200, "{short}");
    let v = short["data"][0]["embedding"].as_array().unwrap();
    assert_eq!(v.len(), 128);
    let norm: f64 = v
        .iter()
        .map(|x| x.as_f64().unwrap().powi(2))
        .sum::<f64>()
        .sqrt();
    assert!((norm - 1.0).abs() < 1e-5, "{norm}");
    // The same direction as the full vector's first 128 values.
    let head = json!(full["data"][0]["embedding"].as_array().unwrap()[..128]);
    assert!(cosine(&head, &short["data"][0]["embedding"]) > 0.99999);
    assert_eq!(short["meta"]["representation"]["dims"], 128);
    // Its own width is the full vector.
    let body = json!({"model": "minilm-l6", "input": FOOD, "dimensions": 384});
    let (_, _, same) = post(&url, &body).await;
    assert_eq!(same["data"][0]["embedding"], full["data"][0]["embedding"]);
    // The SIE face takes it as a runtime option (params.options.dimensions): the same vector.
    let (status, _, v) = sie(
        "/v1/encode/minilm-l6",
        json!({"items": [{"text": FOOD}], "params": {"options": {"dimensions": 128}}}),
    )
    .await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["items"][0]["dense"]["dims"], 128);
    assert!(
        cosine(
            &v["items"][0]["dense"]["values"],
            &short["data"][0]["embedding"]
        ) > 0.99999
    );
    let (status, _, v) = sie(
        "/v1/encode/minilm-l6",
        json!({"items": [{"text": FOOD}], "params": {"options": {"dimensions": 385}}}),
    )
    .await;
    assert_eq!(status, 400, "{v}");
}

#[tokio::test]
async fn embeddings_refuse_what_the_card_does_not_declare() {
    let s = server();
    let url = s.url("/v1/embeddings");
    for (body, reason) in [
        (
            json!({"model": "minilm-l6", "input": "x", "dimensions": 385}),
            "parameter_unsupported",
        ),
        (
            json!({"model": "minilm-l6", "input": "x", "layer": 3}),
            "parameter_unsupported",
        ),
        (
            json!({"model": "minilm-l6", "input": "word ".repeat(600)}),
            "input_too_long",
        ),
        (
            json!({"model": "minilm-l6", "input": [[101, 99999999]]}),
            "input_malformed",
        ),
        (json!({"model": "minilm-l6", "input": []}), "body_malformed"),
        (
            json!({"model": "minilm-l6", "input": "x", "colour": 1}),
            "unknown_member",
        ),
    ] {
        let (status, _, v) = post(&url, &body).await;
        assert_eq!(status, 400, "{body}: {v}");
        assert_eq!(v["error"]["reason"], reason, "{v}");
    }
    let (_, _, v) = post(
        &url,
        &json!({"model": "minilm-l6", "input": "word ".repeat(600)}),
    )
    .await;
    assert_eq!(v["error"]["limit"], 512);
    // A decision model does not serve embeddings; an encoder does not serve decisions.
    let (status, _, v) = post(&url, &json!({"model": test_model(), "input": "x"})).await;
    assert_eq!(
        (status, v["error"]["code"].as_str()),
        (422, Some("unsupported_surface")),
        "{v}"
    );
    let body = json!({"model": "minilm-l6", "state": "x", "questions": {"q": {"type": "noul", "instructions": "?"}}});
    let (status, _, v) = post(&s.url("/v1/decisions"), &body).await;
    assert_eq!(
        (status, v["error"]["code"].as_str()),
        (422, Some("unsupported_surface")),
        "{v}"
    );
    // Token ids are read as given; base64 is little-endian float32.
    let (status, _, v) = post(&url, &json!({"model": "minilm-l6", "input": [101, 7592, 102], "encoding_format": "base64", "options": {"return_meta": true}})).await;
    assert_eq!(status, 200, "{v}");
    // 384 float32 values are 1,536 bytes: 2,048 base64 characters.
    assert_eq!(v["data"][0]["embedding"].as_str().unwrap().len(), 2048);
    assert_eq!(v["meta"]["representation"]["dims"], 384);
    assert_eq!(v["meta"]["representation"]["model"], "minilm-l6");
}

#[tokio::test]
async fn rerank_by_cosine_and_by_decision_model() {
    let s = server();
    let docs = json!([STOCKS, BREAD, {"text": "Bread and soup for lunch."}]);
    let (status, _, v) = post(
        &s.url("/v1/rerank"),
        &json!({"model": "minilm-l6", "query": FOOD, "documents": docs, "top_n": 2, "return_documents": true}),
    )
    .await;
    assert_eq!(status, 200, "{v}");
    let r = v["results"].as_array().unwrap();
    assert_eq!(r.len(), 2);
    assert_eq!(r[0]["index"], 1);
    assert_eq!(r[0]["document"]["text"], BREAD);
    assert!(r[0]["relevance_score"].as_f64() > r[1]["relevance_score"].as_f64());
    let (status, _, v) = post(
        &s.url("/v1/rerank"),
        &json!({"model": test_model(), "query": "How do I reset my password?", "documents": ["Open Settings, then Security.", "Our offices close on Sunday."]}),
    )
    .await;
    assert_eq!(status, 200, "{v}");
    let r = v["results"].as_array().unwrap();
    assert_eq!(r.len(), 2);
    for x in r {
        let p = x["relevance_score"].as_f64().unwrap();
        assert!((0.0..=1.0).contains(&p));
    }
    assert!(v["usage"]["input_tokens"].as_u64().unwrap() > 0);
}

/// `options.deadline_ms` acts on the encoder endpoints: past it the request answers 504
/// `deadline_exceeded` (0 ms passes before any forward can answer), within it the answer is the
/// usual one; rerank takes no other option.
#[tokio::test]
async fn encoder_deadlines_act_and_rerank_refuses_other_options() {
    let s = server();
    for (path, body) in [
        (
            "/v1/embeddings",
            json!({"model": "minilm-l6", "input": ["x"], "options": {"deadline_ms": 0}}),
        ),
        (
            "/v1/rerank",
            json!({"model": "minilm-l6", "query": FOOD, "documents": [BREAD], "options": {"deadline_ms": 0}}),
        ),
    ] {
        let (status, _, v) = post(&s.url(path), &body).await;
        assert_eq!(
            (status, v["error"]["code"].as_str()),
            (504, Some("deadline_exceeded")),
            "{path}: {v}"
        );
    }
    let (status, _, v) = post(&s.url("/v1/rerank"), &json!({"model": "minilm-l6", "query": FOOD, "documents": [BREAD, STOCKS], "options": {"deadline_ms": 600_000}})).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["results"][0]["index"], 0, "{v}");
    let (status, _, v) = post(
        &s.url("/v1/embeddings"),
        &json!({"model": "minilm-l6", "input": ["x"], "options": {"deadline_ms": 600_000}}),
    )
    .await;
    assert_eq!(status, 200, "{v}");
    let (status, _, v) = post(&s.url("/v1/rerank"), &json!({"model": "minilm-l6", "query": FOOD, "documents": [BREAD], "options": {"window": 3}})).await;
    assert_eq!(status, 400, "{v}");
    assert!(
        v["error"]["message"].as_str().unwrap().contains("window"),
        "{v}"
    );
    // A flag of the wrong type is refused, not read as false.
    let (status, _, v) = post(&s.url("/v1/rerank"), &json!({"model": "minilm-l6", "query": FOOD, "documents": [BREAD], "return_documents": "yes"})).await;
    assert_eq!(
        (status, v["error"]["reason"].as_str()),
        (400, Some("body_malformed")),
        "{v}"
    );
}

#[tokio::test]
async fn classify_entries_answer_labels_for_every_input_form() {
    let s = server();
    let body = json!({"model": "sentiment", "input": [
        "I love this product!",
        {"text": "The parcel was late.", "text_pair": "I am annoyed."},
        {"context": "Refunds take 30 days.", "question": "How long do refunds take?", "answer": "30 days."},
    ]});
    let (status, h, v) = post(&s.url("/v1/classify"), &body).await;
    assert_eq!(status, 200, "{v}");
    assert!(h.contains_key("server-timing"));
    let d = v["data"].as_array().unwrap();
    assert_eq!(d.len(), 3);
    for (i, e) in d.iter().enumerate() {
        assert_eq!(e["index"], i);
        let labels = e["labels"].as_array().unwrap();
        assert_eq!(labels.len(), 3);
        let total: f64 = labels.iter().map(|l| l["score"].as_f64().unwrap()).sum();
        assert!((total - 1.0).abs() < 1e-6);
        assert_eq!(e["label"], labels[0]["label"]);
    }
    let (status, _, v) = post(
        &s.url("/v1/classify"),
        &json!({"model": "topics", "input": "I was charged twice and the box never came."}),
    )
    .await;
    assert_eq!(status, 200, "{v}");
    assert!(v["data"][0]["selected"].is_array());
    assert_eq!(v["data"][0]["labels"].as_array().unwrap().len(), 2);
    // Spans need a span head: unsupported_surface; unknown entries: model_not_found.
    let (status, _, v) = post(
        &s.url("/v1/classify"),
        &json!({"model": "sentiment", "input": "x", "options": {"return_spans": true}}),
    )
    .await;
    assert_eq!(
        (status, v["error"]["code"].as_str()),
        (422, Some("unsupported_surface")),
        "{v}"
    );
    let (status, _, v) = post(
        &s.url("/v1/classify"),
        &json!({"model": "minilm-l6", "input": "x"}),
    )
    .await;
    assert_eq!(
        (status, v["error"]["code"].as_str()),
        (422, Some("unsupported_surface")),
        "{v}"
    );
    let (status, _, v) = post(
        &s.url("/v1/classify"),
        &json!({"model": "nope", "input": "x"}),
    )
    .await;
    assert_eq!(status, 404, "{v}");
    assert!(v["error"]["message"]
        .as_str()
        .unwrap()
        .contains("sentiment"));
    // options.window acts: the same text (~150 tokens) read in 64-token windows reads the
    // question once per window, so it counts more input tokens than read whole in one.
    let text = format!("{} The delivery was late and I am angry.", BREAD.repeat(12));
    let read = |window: Value| {
        let body = json!({"model": "sentiment", "input": text, "options": {"overflow": "window", "window": window}});
        let url = s.url("/v1/classify");
        async move {
            let (status, _, v) = post(&url, &body).await;
            assert_eq!(status, 200, "{v}");
            v["usage"]["input_tokens"].as_u64().expect("usage")
        }
    };
    let whole = read(json!({})).await;
    let windowed = read(json!({"tokens": 64, "overlap": 8})).await;
    assert!(
        windowed > whole,
        "64-token windows read {windowed} tokens, one read {whole}"
    );
    let (status, _, v) = post(
        &s.url("/v1/classify"),
        &json!({"model": "sentiment", "input": "x", "options": {"window": {"tokens": 64}}}),
    )
    .await;
    assert_eq!(status, 400, "a window without overflow window: {v}");
}

#[tokio::test]
async fn bundle_answers_in_task_order_with_each_status() {
    let s = server();
    let body = json!({"tasks": [
        {"id": "kind", "decisions": {"state": "What is 2 + 2?", "questions": {"math": {"type": "noul", "instructions": "Is this a math question?"}}}},
        {"id": "vec", "embeddings": {"model": "minilm-l6", "input": "What is 2 + 2?"}},
        {"id": "missing", "classify": {"model": "nope", "input": "x"}},
    ], "options": {"deadline_ms": 60000}});
    let (status, h, v) = post(&s.url("/v1/bundle"), &body).await;
    assert_eq!(status, 200, "{v}");
    assert!(h.contains_key("server-timing"));
    let r = v["results"].as_array().unwrap();
    assert_eq!(
        r.iter()
            .map(|x| x["id"].as_str().unwrap())
            .collect::<Vec<_>>(),
        ["kind", "vec", "missing"]
    );
    assert_eq!(r[0]["status"], 200);
    assert_eq!(r[0]["body"]["answers"]["math"]["type"], "noul");
    assert_eq!(r[1]["status"], 200);
    assert_eq!(
        r[1]["body"]["data"][0]["embedding"]
            .as_array()
            .unwrap()
            .len(),
        384
    );
    assert_eq!(r[2]["status"], 404);
    assert_eq!(r[2]["body"]["error"]["code"], "model_not_found");
    // A deadline already passed: the decisions task is not run.
    let body = json!({"tasks": [{"id": "late", "decisions": {"state": "x", "questions": {"q": {"type": "noul", "instructions": "?"}}}}], "options": {"deadline_ms": 0}});
    let (_, _, v) = post(&s.url("/v1/bundle"), &body).await;
    assert_eq!(
        v["results"][0]["body"]["answers"]["q"]["error"], "deadline_exceeded",
        "{v}"
    );
    // The process limit on tasks, reported in /v1/models.
    let task = json!({"embeddings": {"model": "minilm-l6", "input": "x"}});
    let (status, _, v) = post(
        &s.url("/v1/bundle"),
        &json!({"tasks": [task, task, task, task]}),
    )
    .await;
    assert_eq!(status, 400, "{v}");
    assert_eq!(v["error"]["reason"], "bundle_tasks");
    assert_eq!(v["error"]["limit"], 3);
    let (_, m) = get(&s.url("/v1/models")).await;
    assert_eq!(m["limits"]["max_bundle_tasks"], 3);
}

async fn sie(path: &str, body: Value) -> (u16, reqwest::header::HeaderMap, Value) {
    let resp = client()
        .post(server().url(path))
        .header("accept", "application/json")
        .json(&body)
        .send()
        .await
        .expect("send");
    let status = resp.status().as_u16();
    let h = resp.headers().clone();
    let v = resp.json().await.unwrap_or(Value::Null);
    (status, h, v)
}

#[tokio::test]
async fn sie_encode_score_extract_and_their_error_codes() {
    let (status, h, v) = sie(
        "/v1/encode/minilm-l6",
        json!({"items": [{"id": "a", "text": FOOD}, {"text": BREAD}],
        "params": {"output_types": ["dense"], "output_dtype": "float16"}}),
    )
    .await;
    assert_eq!(status, 200, "{v}");
    for k in [
        "x-total-time",
        "x-queue-time",
        "x-tokenization-time",
        "x-inference-time",
        "x-trace-id",
    ] {
        assert!(h.contains_key(k), "{k}");
    }
    assert_eq!(h["x-trace-id"].len(), 32);
    // A caller's W3C trace context is kept: the answer names the caller's trace.
    let r = client()
        .post(server().url("/v1/encode/minilm-l6"))
        .header("accept", "application/json")
        .header(
            "traceparent",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        )
        .json(&json!({"items": [{"text": FOOD}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(
        r.headers()["x-trace-id"],
        "4bf92f3577b34da6a3ce929d0e0e4736"
    );
    assert_eq!(v["items"][0]["id"], "a");
    assert!(v["items"][1].get("id").is_none());
    assert_eq!(v["items"][0]["dense"]["dtype"], "float16");
    let c = cosine(
        &v["items"][0]["dense"]["values"],
        &v["items"][1]["dense"]["values"],
    );
    assert!((c - 0.755).abs() < 2e-3, "{c}");
    // The SIE face truncates a long item to the model's length (read only as far as needed).
    let long = "The parcel was late again. ".repeat(200_000);
    let (status, _, v) = sie("/v1/encode/minilm-l6", json!({"items": [{"text": long}]})).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["items"][0]["dense"]["dims"], 384);
    let (_, _, v) = sie(
        "/v1/encode/minilm-l6",
        json!({"items": [{"text": FOOD}], "params": {"output_dtype": "binary"}}),
    )
    .await;
    assert_eq!(
        v["items"][0]["dense"]["values"].as_array().unwrap().len(),
        48
    );
    let (_, _, v) = sie("/v1/encode/minilm-l6", json!({"items": [{"text": FOOD}], "params": {"output_dtype": "int8", "instruction": "query:"}})).await;
    assert!(v["items"][0]["dense"]["values"][0].is_i64());

    let (status, _, v) = sie("/v1/score/minilm-l6", json!({"query": {"text": FOOD}, "items": [{"id": "s", "text": STOCKS}, {"id": "b", "text": BREAD}]})).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["scores"][0]["item_id"], "b");
    assert_eq!(v["scores"][1]["rank"], 1);
    let (status, _, v) = sie(
        &format!("/v1/score/{}", test_model()),
        json!({"query": {"text": "password reset"}, "items": [{"text": "Open Settings"}]}),
    )
    .await;
    assert_eq!(status, 200, "decision models score by relevance: {v}");

    let (status, _, v) = sie(&format!("/v1/extract/{}", test_model()), json!({"items": [{"id": "t", "text": "Tim Cook is the CEO of Apple."}, {"id": "bad"}], "params": {"labels": ["business", "sports"], "options": {"task": "classify"}}})).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["items"][0]["id"], "t");
    assert_eq!(
        v["items"][0]["classifications"].as_array().unwrap().len(),
        2
    );
    assert_eq!(v["items"][1]["error"]["code"], "INVALID_INPUT");
    // Entities are a span question on a causal LM: each entity holds the text at its
    // code-point offsets.
    let text = "Ünïcode first: Tim Cook is the CEO of Apple.";
    let (status, _, v) = sie(&format!("/v1/extract/{}", test_model()), json!({"items": [{"text": text}], "params": {"labels": ["person"], "options": {"task": "entities"}}})).await;
    assert_eq!(status, 200, "{v}");
    // Without a task, labels on a model that finds spans give entities, as SIE's extract does.
    let (status, _, plain) = sie(
        &format!("/v1/extract/{}", test_model()),
        json!({"items": [{"text": text}], "params": {"labels": ["person"]}}),
    )
    .await;
    assert_eq!(status, 200, "{plain}");
    assert_eq!(
        plain["items"][0]["entities"], v["items"][0]["entities"],
        "{plain}"
    );
    assert!(
        plain["items"][0].get("classifications").is_none(),
        "{plain}"
    );
    let chars: Vec<char> = text.chars().collect();
    for e in v["items"][0]["entities"].as_array().expect("entities") {
        let (a, b) = (
            e["start"].as_u64().unwrap() as usize,
            e["end"].as_u64().unwrap() as usize,
        );
        assert!(a < b && b <= chars.len(), "{e}");
        assert_eq!(
            e["text"],
            json!(chars[a..b].iter().collect::<String>()),
            "{e}"
        );
        assert_eq!(e["label"], "person");
        assert!((0.0..=1.0).contains(&e["score"].as_f64().unwrap()));
    }

    // overflow_policy error: a text over the model's length is INPUT_TOO_LONG (400).
    let long = "The parcel was late again. ".repeat(2000);
    let policy = json!({"options": {"overflow_policy": "error"}});
    let mut p = policy.clone();
    p["labels"] = json!(["late", "fine"]);
    p["options"]["task"] = json!("classify");
    for (path, body) in [
        (
            "/v1/encode/minilm-l6".to_string(),
            json!({"items": [{"text": long}], "params": policy}),
        ),
        (
            format!("/v1/extract/{}", test_model()),
            json!({"items": [{"text": FOOD}, {"text": long.repeat(20)}], "params": p}),
        ),
    ] {
        let (status, _, v) = sie(&path, body).await;
        assert_eq!(status, 400, "{path}: {v}");
        assert_eq!(v["detail"]["code"], "INPUT_TOO_LONG", "{path}: {v}");
    }
    // Every SIE error code this server can produce for these requests.
    for (path, body, status, code) in [
        (
            "/v1/encode/nope",
            json!({"items": [{"text": "x"}]}),
            404,
            "MODEL_NOT_FOUND",
        ),
        (
            "/v1/encode/minilm-l6",
            json!({"items": []}),
            400,
            "INVALID_INPUT",
        ),
        (
            "/v1/encode/minilm-l6",
            json!({"items": [{"text": "x"}], "params": {"output_types": ["sparse"]}}),
            400,
            "INVALID_INPUT",
        ),
        (
            "/v1/encode/minilm-l6",
            json!({"items": [{"images": [{"data": "", "format": "png"}]}]}),
            400,
            "INVALID_INPUT",
        ),
        (
            "/v1/encode/minilm-l6",
            json!({"items": [{"text": "x"}], "params": {"output_dtype": "float64"}}),
            400,
            "INVALID_INPUT",
        ),
        (
            "/v1/extract/minilm-l6",
            json!({"items": [{"text": "x"}], "params": {"labels": ["a"]}}),
            400,
            "INVALID_INPUT",
        ),
        // Options that would not act are refused, not dropped: a runtime option this server
        // has not, an option on score.
        (
            "/v1/encode/minilm-l6",
            json!({"items": [{"text": "x"}], "params": {"options": {"lora": "x"}}}),
            400,
            "INVALID_INPUT",
        ),
        (
            "/v1/score/minilm-l6",
            json!({"query": {"text": "x"}, "items": [{"text": "y"}], "options": {"profile": "fast"}}),
            400,
            "INVALID_INPUT",
        ),
    ] {
        let (st, _, v) = sie(path, body).await;
        assert_eq!(st, status, "{path}: {v}");
        assert_eq!(v["detail"]["code"], code, "{path}: {v}");
        assert!(v["detail"]["message"].is_string());
    }
    // A misspelt task was read as classify; now it is refused.
    let (st, _, v) = sie(&format!("/v1/extract/{}", test_model()), json!({"items": [{"text": "x"}], "params": {"labels": ["a"], "options": {"task": "entity"}}})).await;
    assert_eq!(
        (st, v["detail"]["code"].as_str()),
        (400, Some("INVALID_INPUT")),
        "{v}"
    );
    // msgpack is the default answer.
    let resp = client()
        .post(server().url("/v1/encode/minilm-l6"))
        .json(&json!({"items": [{"text": "x"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.headers()["content-type"], "application/msgpack");
}

#[tokio::test]
async fn sie_health_and_model_listing_carry_both_field_sets() {
    let s = server();
    for p in ["/healthz", "/readyz", "/livez"] {
        let r = client().get(s.url(p)).send().await.unwrap();
        assert_eq!(r.status(), 200, "{p}");
        assert_eq!(r.text().await.unwrap(), "ok");
    }
    let (status, v) = get(&s.url("/v1/models")).await;
    assert_eq!(status, 200);
    let enc = v["models"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == "minilm-l6")
        .unwrap()
        .clone();
    for k in [
        "name",
        "description",
        "release_date",
        "version",
        "features",
        "card",
        "inputs",
        "outputs",
        "dims",
        "loaded",
        "state",
        "max_sequence_length",
    ] {
        assert!(enc.get(k).is_some(), "{k} missing: {enc}");
    }
    assert_eq!(enc["dims"]["dense"], 384);
    assert_eq!(enc["loaded"], true);
    assert_eq!(enc["max_sequence_length"], 512);
    assert_eq!(
        enc["capabilities"],
        json!({"encode": ["dense"], "score": true, "extract": [], "generate": false})
    );
    assert_eq!(enc["profiles"], json!({"default": {"is_default": true}}));
    let dec = v["models"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == test_model())
        .unwrap();
    assert_eq!(dec["capabilities"]["encode"], json!([]));
    assert_eq!(dec["capabilities"]["score"], true);
    assert_eq!(
        dec["capabilities"]["extract"],
        json!(["classify", "entities"])
    );
    assert_eq!(v["classifiers"][0]["name"], "sentiment");
    let r = client()
        .get(s.url("/v1/models/minilm-l6"))
        .header("accept", "application/json")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let one: Value = r.json().await.unwrap();
    assert_eq!(one["dims"]["dense"], 384);
    let r = client()
        .get(s.url("/v1/models/nope"))
        .header("accept", "application/json")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    let e: Value = r.json().await.unwrap();
    assert_eq!(e["detail"]["code"], "MODEL_NOT_FOUND");
}

#[tokio::test]
async fn sie_queue_full_and_load_failed() {
    // A queue of one job: concurrent large batches are refused at once with QUEUE_FULL.
    let mut o = options();
    o.models = vec!["minilm-l6".into()];
    o.encoder.max_queued_jobs = 1;
    o.encoder.max_batch = 8;
    let s = start(o);
    let text = "The parcel arrived late and the box was crushed. ".repeat(40);
    let items: Vec<Value> = (0..32)
        .map(|i| json!({"text": format!("{i} {text}")}))
        .collect();
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let url = s.url("/v1/encode/minilm-l6");
        let body = json!({"items": items});
        tasks.push(tokio::spawn(async move {
            let r = client()
                .post(url)
                .header("accept", "application/json")
                .json(&body)
                .send()
                .await
                .unwrap();
            let status = r.status().as_u16();
            (status, r.json::<Value>().await.unwrap_or(Value::Null))
        }));
    }
    let mut full = 0;
    for t in tasks {
        let (status, v) = t.await.unwrap();
        match status {
            200 => {}
            503 => {
                assert_eq!(v["detail"]["code"], "QUEUE_FULL", "{v}");
                full += 1;
            }
            other => panic!("{other}: {v}"),
        }
    }
    assert!(
        full >= 1,
        "a one-job queue refuses some of 8 concurrent batches"
    );

    // An encoder directory whose weights do not load: 502 MODEL_LOAD_FAILED on the SIE face.
    let dir = std::env::temp_dir()
        .join(format!("vllm-srun-bad-enc-{}", std::process::id()))
        .join("broken-encoder");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("config.json"), "{}").unwrap();
    std::fs::write(dir.join("model.safetensors"), "not safetensors").unwrap();
    let mut o = options();
    o.models = vec![dir.to_string_lossy().into_owned()];
    let s = start_unready(o);
    let mut answer = None;
    for _ in 0..600 {
        let r = client()
            .post(s.url("/v1/encode/broken-encoder"))
            .header("accept", "application/json")
            .json(&json!({"items": [{"text": "x"}]}))
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        let v: Value = r.json().await.unwrap_or(Value::Null);
        if status == 502 {
            answer = Some(v);
            break;
        }
        assert_eq!(status, 503, "loading answers 503: {v}");
        assert!(
            matches!(
                v["detail"]["code"].as_str(),
                Some("MODEL_LOADING" | "MODEL_NOT_LOADED")
            ),
            "{v}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let v = answer.expect("the load fails");
    assert_eq!(v["detail"]["code"], "MODEL_LOAD_FAILED");
}

#[tokio::test]
async fn arbitrary_bodies_to_the_encoder_and_sie_endpoints_never_get_a_5xx() {
    let s = server();
    let mut next = xorshift(0x2545_f491_4f6c_dd1d);
    let valid = serde_json::to_vec(&json!({"model": "minilm-l6", "input": ["x", "y"], "query": "q", "documents": ["a"], "items": [{"text": "x"}]})).unwrap();
    let odd = [
        json!(null),
        json!([1, 2]),
        json!({"input": {"a": 1}}),
        json!({"input": [[-1]]}),
        json!({"input": [[]]}),
        json!({"query": {"text": 1}, "items": [{}]}),
        json!({"items": [{"text": null}], "params": {"output_types": "dense"}}),
        json!({"tasks": [{"embeddings": null}]}),
        json!({"tasks": [{"decisions": {}, "rerank": {}}]}),
        json!({"model": "sentiment", "input": [{"context": 1}]}),
        json!({"query": "q", "documents": [1], "top_n": 0}),
    ];
    let mut paths = vec!["/v1/embeddings", "/v1/rerank", "/v1/classify", "/v1/bundle"];
    paths.extend([
        "/v1/encode/minilm-l6",
        "/v1/score/minilm-l6",
        "/v1/extract/smollm2-135m",
    ]);
    for path in paths {
        for _ in 0..20 {
            let n = (next() % 64) as usize;
            let bytes: Vec<u8> = (0..n).map(|_| next() as u8).collect();
            let (status, _, _) = post_raw(&s.url(path), bytes.clone(), &[]).await;
            assert!(status < 500, "{path}: random bytes got {status}");
            let (status, _, _) = post_raw(
                &s.url(path),
                bytes,
                &[("content-type", "application/msgpack")],
            )
            .await;
            assert!(status < 500, "{path}: random msgpack got {status}");
            let cut = (next() as usize) % valid.len();
            let (status, _, _) = post_raw(&s.url(path), valid[..cut].to_vec(), &[]).await;
            assert!(status < 500, "{path}: truncated JSON got {status}");
        }
        for v in &odd {
            let (status, _, body) = post(&s.url(path), v).await;
            assert!(status < 500, "{path}: {v} got {status}: {body}");
        }
    }
}

/// The served forward (llama.cpp on a GGUF copy of the weights) gives the vectors of the F32
/// candle path, for inputs of many lengths, alone and in batches that llama.cpp evaluates in
/// several parts.
#[test]
fn the_served_encoder_forward_gives_the_f32_candle_vectors() {
    let dir = minilm_dir();
    let served = vllm_srun::load_encoder(&dir, None, 0, vllm_srun::ENCODER_PATH).unwrap();
    let reference = vllm_srun::load_encoder(&dir, None, 0, vllm_srun::EncoderPath::Candle).unwrap();
    assert_eq!(served.info().engine, "llama.cpp");
    assert_eq!(reference.info().engine, "candle");
    let words = [
        "parcel", "refund", "late", "the", "delivery", "never", "arrived", "again",
    ];
    // 1 to ~500 tokens, and 70 inputs in all: more tokens and more inputs than one llama.cpp
    // evaluation holds (512 tokens, 64 inputs).
    let texts: Vec<String> = (0..70)
        .map(|i| {
            let n = [1, 3, 12, 40, 7, 2, 30, 9, 120, 400][i % 10] + i / 10;
            (0..n)
                .map(|k| words[(k * 7 + i) % words.len()])
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect();
    let ids: Vec<Vec<u32>> = texts.iter().map(|t| served.tokenize(t).unwrap()).collect();
    assert!(
        ids.iter().any(|t| t.len() > 400),
        "{:?}",
        ids.iter().map(Vec::len).max()
    );
    let batched = served.embed(&ids).unwrap();
    // One at a time: the candle path pads a batch to its longest input.
    let expected: Vec<Vec<f32>> = ids
        .iter()
        .map(|t| reference.embed(std::slice::from_ref(t)).unwrap().remove(0))
        .collect();
    assert_eq!(batched.len(), ids.len());
    for (i, input) in ids.iter().enumerate() {
        let c = cosine_f32(&batched[i], &expected[i]);
        assert!(c > 0.9999, "input {i} ({} tokens): cosine {c}", input.len());
        let norm: f32 = batched[i].iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-4, "{norm}");
        if i % 9 == 0 {
            let alone = served.embed(std::slice::from_ref(input)).unwrap();
            let c = cosine_f32(&alone[0], &batched[i]);
            assert!(c > 0.99999, "input {i} alone vs batched: {c}");
        }
    }
}

/// The served encoder's tokens (its ASCII fast path where it applies) are the `tokenizers`
/// pipeline's on every text of the guard's training and held-out files, whole and cut at odd
/// places, and on texts that write its special tokens.
#[test]
fn the_served_encoder_tokenizes_as_its_tokenizer_json() {
    let dir = minilm_dir();
    let served = vllm_srun::load_encoder(&dir, None, 0, vllm_srun::ENCODER_PATH).unwrap();
    let mut general = tokenizers::Tokenizer::from_file(dir.join("tokenizer.json")).unwrap();
    general.with_truncation(None).unwrap();
    general.with_padding(None);
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tools/guard");
    let mut texts: Vec<String> = [
        "[CLS] hello [SEP] [mask] [Pad]",
        "x[UNK]y and caf\u{e9}",
        "tabs\tand\r\nnewlines \u{7} bell",
    ]
    .map(String::from)
    .to_vec();
    for file in [
        "written_jailbreaks.jsonl",
        "innocent_train.jsonl",
        "ordinary_heldout.jsonl",
    ] {
        for line in std::fs::read_to_string(root.join(file)).unwrap().lines() {
            let row: Value = serde_json::from_str(line).unwrap();
            let text = row["text"].as_str().or(row["state"].as_str()).unwrap();
            let text = text.to_string();
            let cut = text
                .char_indices()
                .nth(text.len() / 3)
                .map_or(0, |(i, _)| i);
            texts.push(text[cut..].to_string());
            texts.push(text);
        }
    }
    assert!(texts.len() > 200, "{}", texts.len());
    for t in &texts {
        let want = general.encode(t.as_str(), true).unwrap().get_ids().to_vec();
        assert_eq!(served.tokenize(t).unwrap(), want, "{t:?}");
    }
}

/// The cached `minilm-l6` directory.
fn minilm_dir() -> std::path::PathBuf {
    hub::resolve("minilm-l6", false)
        .expect("minilm-l6 is cached")
        .dir
        .expect("an encoder directory")
}

fn cosine_f32(a: &[f32], b: &[f32]) -> f64 {
    let dot: f64 = a.iter().zip(b).map(|(x, y)| *x as f64 * *y as f64).sum();
    let n = |v: &[f32]| v.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt();
    dot / (n(a) * n(b))
}
