//! Classification heads (`BertForSequenceClassification` and `BertForTokenClassification`
//! safetensors) from a local directory. No such weights ship in the registries, so the tests
//! write tiny heads in the standard layout (config.json with id2label, `bert.*`,
//! `bert.pooler.dense`, `classifier` tensors) with MiniLM's real tokenizer: a random sequence
//! head, whose shapes and endpoint are checked, and a token head whose weights are set so
//! that known words get known tags, whose spans and offsets are checked exactly.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use candle_core::{DType, Device};
use candle_nn::{VarBuilder, VarMap};
use candle_transformers::models::bert::{BertModel, Config};
use common::*;
use serde_json::json;

/// Write a head with `write` into a directory named `name` and serve it.
fn serve_head(name: &str, write: fn(&std::path::Path)) -> TestServer {
    let dir = std::env::temp_dir()
        .join(format!("vllm-srun-{name}-{}", std::process::id()))
        .join(name);
    write(&dir);
    let mut o = options();
    o.models = vec![dir.to_string_lossy().into_owned()];
    start(o)
}

fn write_tiny_head(dir: &std::path::Path) {
    std::fs::create_dir_all(dir).unwrap();
    let cfg = json!({"architectures": ["BertForSequenceClassification"], "model_type": "bert",
        "vocab_size": 30522, "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2,
        "intermediate_size": 64, "hidden_act": "gelu", "hidden_dropout_prob": 0.0,
        "max_position_embeddings": 512, "type_vocab_size": 2, "initializer_range": 0.02,
        "layer_norm_eps": 1e-12, "pad_token_id": 0,
        "id2label": {"0": "negative", "1": "positive", "2": "neutral"}});
    std::fs::write(dir.join("config.json"), cfg.to_string()).unwrap();
    let minilm = hub::resolve("minilm-l6", false)
        .expect("minilm-l6 is cached")
        .dir
        .unwrap();
    std::fs::copy(minilm.join("tokenizer.json"), dir.join("tokenizer.json")).unwrap();
    let config: Config = serde_json::from_value(cfg).unwrap();
    let varmap = VarMap::new();
    let vb = VarBuilder::from_varmap(&varmap, DType::F32, &Device::Cpu);
    BertModel::load(vb.pp("bert"), &config).unwrap();
    candle_nn::linear(32, 32, vb.pp("bert.pooler.dense")).unwrap();
    candle_nn::linear(32, 3, vb.pp("classifier")).unwrap();
    varmap.save(dir.join("model.safetensors")).unwrap();
}

#[tokio::test]
async fn a_sequence_classification_head_serves_classify_only() {
    let s = serve_head("tiny-head", write_tiny_head);
    let (_, m) = get(&s.url("/v1/models")).await;
    let card = &m["models"][0]["card"];
    assert_eq!(
        card["encoder"]["labels"],
        json!(["negative", "positive", "neutral"]),
        "{m}"
    );

    let body =
        json!({"model": "tiny-head", "input": ["I love it", "I hate it", "word ".repeat(600)]});
    let (status, h, v) = post(&s.url("/v1/classify"), &body).await;
    assert_eq!(status, 200, "{v}");
    assert!(h.contains_key("server-timing"));
    for i in 0..2 {
        let labels = v["data"][i]["labels"].as_array().unwrap();
        assert_eq!(labels.len(), 3);
        let total: f64 = labels.iter().map(|l| l["score"].as_f64().unwrap()).sum();
        assert!(
            (total - 1.0).abs() < 1e-5,
            "softmax over the labels: {total}"
        );
        assert_eq!(v["data"][i]["label"], labels[0]["label"]);
    }
    // Over the model's 512 tokens: that input fails in place, the others are answered.
    assert_eq!(v["data"][2]["error"], "max_length_exceeded", "{v}");
    assert_eq!(v["data"][2]["reason"], "input_too_long");
    assert_eq!(v["data"][2]["limit"], 512);
    let mut truncated = body.clone();
    truncated["options"] = json!({"overflow": "truncate"});
    let (status, _, v) = post(&s.url("/v1/classify"), &truncated).await;
    assert_eq!(status, 200, "{v}");
    assert!(v["data"][2]["labels"].is_array(), "{v}");
    // A head gives no vectors.
    let (status, _, v) = post(
        &s.url("/v1/embeddings"),
        &json!({"model": "tiny-head", "input": "x"}),
    )
    .await;
    assert_eq!(
        (status, v["error"]["code"].as_str()),
        (422, Some("unsupported_surface")),
        "{v}"
    );
    let (status, _, _) = post(
        &s.url("/v1/classify"),
        &json!({"model": "tiny-head", "input": [{"text": "a", "text_pair": "b"}]}),
    )
    .await;
    assert_eq!(status, 400);
    // Options act or are refused: meta is given, spans a sequence head has not are refused,
    // and a deadline that is no integer is refused rather than dropped.
    let (status, _, v) = post(
        &s.url("/v1/classify"),
        &json!({"model": "tiny-head", "input": "x", "options": {"return_meta": true}}),
    )
    .await;
    assert_eq!(status, 200, "{v}");
    assert!(v["meta"]["sha256"].is_string(), "{v}");
    for (options, status, code) in [
        (json!({"return_spans": true}), 422, "unsupported_surface"),
        (json!({"deadline_ms": "5"}), 400, "invalid_request"),
        (json!({"window": {"tokens": 8}}), 400, "invalid_request"),
    ] {
        let (st, _, v) = post(
            &s.url("/v1/classify"),
            &json!({"model": "tiny-head", "input": "x", "options": options}),
        )
        .await;
        assert_eq!(
            (st, v["error"]["code"].as_str()),
            (status, Some(code)),
            "{options}: {v}"
        );
    }
}

/// A token head with no encoder layers whose embeddings give each of a few words its own
/// direction and the classifier reads the tag off it: `tom` is B-PER, `baker` I-PER, `oslo`
/// B-LOC, every other token O. The tags then do not depend on context, so windowed and whole
/// reads must agree exactly.
fn write_tiny_tagger(dir: &std::path::Path) {
    use candle_core::Tensor;
    std::fs::create_dir_all(dir).unwrap();
    let labels = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"];
    let id2label: serde_json::Map<String, serde_json::Value> = labels
        .iter()
        .enumerate()
        .map(|(i, l)| (i.to_string(), json!(l)))
        .collect();
    let (vocab, h) = (30522usize, 32usize);
    let cfg = json!({"architectures": ["BertForTokenClassification"], "model_type": "bert",
        "vocab_size": vocab, "hidden_size": h, "num_hidden_layers": 0, "num_attention_heads": 2,
        "intermediate_size": 64, "hidden_act": "gelu", "hidden_dropout_prob": 0.0,
        "max_position_embeddings": 512, "type_vocab_size": 2, "initializer_range": 0.02,
        "layer_norm_eps": 1e-12, "pad_token_id": 0, "id2label": id2label});
    std::fs::write(dir.join("config.json"), cfg.to_string()).unwrap();
    let minilm = hub::resolve("minilm-l6", false)
        .expect("minilm-l6 is cached")
        .dir
        .unwrap();
    std::fs::copy(minilm.join("tokenizer.json"), dir.join("tokenizer.json")).unwrap();
    // MiniLM's WordPiece ids of the tagged words, and the direction each gets.
    let tagged = [(3419usize, 1usize), (6243, 2), (9977, 3)];
    let mut words = vec![0f32; vocab * h];
    for t in 0..vocab {
        let dir = tagged.iter().find(|(w, _)| *w == t).map_or(0, |(_, d)| *d);
        words[t * h + dir] = 1.0;
    }
    let mut classifier = vec![0f32; labels.len() * h];
    for j in 0..4 {
        classifier[j * h + j] = 10.0;
    }
    let dev = &Device::Cpu;
    let t = |v: Vec<f32>, shape: (usize, usize)| Tensor::from_vec(v, shape, dev).unwrap();
    let tensors: std::collections::HashMap<String, Tensor> = [
        (
            "bert.embeddings.word_embeddings.weight",
            t(words, (vocab, h)),
        ),
        (
            "bert.embeddings.position_embeddings.weight",
            t(vec![0.0; 512 * h], (512, h)),
        ),
        (
            "bert.embeddings.token_type_embeddings.weight",
            t(vec![0.0; 2 * h], (2, h)),
        ),
        ("bert.embeddings.LayerNorm.weight", t(vec![1.0; h], (1, h))),
        ("bert.embeddings.LayerNorm.bias", t(vec![0.0; h], (1, h))),
        ("classifier.weight", t(classifier, (labels.len(), h))),
        (
            "classifier.bias",
            t(vec![0.0; labels.len()], (1, labels.len())),
        ),
    ]
    .into_iter()
    .map(|(k, v)| {
        let v = if k.ends_with("LayerNorm.weight")
            || k.ends_with("LayerNorm.bias")
            || k == "classifier.bias"
        {
            v.squeeze(0).unwrap()
        } else {
            v
        };
        (k.to_string(), v)
    })
    .collect();
    candle_core::safetensors::save(&tensors, dir.join("model.safetensors")).unwrap();
}

/// `(label, start, end, text)` of each span of a classify entry, after checking that every
/// span's text is the text's code points `start..end`.
fn spans_of(entry: &serde_json::Value, text: &str) -> Vec<(String, u64, u64, String)> {
    let chars: Vec<char> = text.chars().collect();
    entry["spans"]
        .as_array()
        .unwrap_or_else(|| panic!("no spans: {entry}"))
        .iter()
        .map(|s| {
            let (start, end) = (s["start"].as_u64().unwrap(), s["end"].as_u64().unwrap());
            assert!(start < end && end as usize <= chars.len(), "{s}");
            let cut: String = chars[start as usize..end as usize].iter().collect();
            assert_eq!(s["text"], json!(cut), "{s}");
            let p = s["probability"].as_f64().unwrap();
            assert!(p > 0.99 && p <= 1.0, "{s}");
            (s["label"].as_str().unwrap().to_string(), start, end, cut)
        })
        .collect()
}

#[tokio::test]
async fn a_token_classification_head_finds_spans_with_code_point_offsets() {
    let s = serve_head("tiny-tagger", write_tiny_tagger);
    let (_, m) = get(&s.url("/v1/models")).await;
    let card = &m["models"][0]["card"];
    assert_eq!(card["encoder"]["per_token"], true, "{m}");

    let text = "🙂 東京 Tom Baker met Ann in Oslo; mail tom.baker@example.com!";
    let want = |label: &str, word: &str, nth: usize| {
        let chars: Vec<char> = text.chars().collect();
        let w: Vec<char> = word.chars().collect();
        let start = (0..chars.len())
            .filter(|&i| chars[i..].starts_with(&w))
            .nth(nth)
            .unwrap();
        (
            label.to_string(),
            start as u64,
            (start + w.len()) as u64,
            word.to_string(),
        )
    };
    // `tom` opens a PER span and `baker` continues it; in the address `.` (O) stands between
    // them, so there `baker` (I-PER after O) opens a span of its own.
    let expected = vec![
        want("PER", "Tom Baker", 0),
        want("LOC", "Oslo", 0),
        want("PER", "tom", 0),
        want("PER", "baker", 0),
    ];
    let body = json!({"model": "tiny-tagger", "input": [text, "nothing here"]});
    let (status, h, v) = post(&s.url("/v1/classify"), &body).await;
    assert_eq!(status, 200, "{v}");
    assert!(h.contains_key("server-timing"));
    assert_eq!(spans_of(&v["data"][0], text), expected, "{v}");
    assert_eq!(v["data"][1]["spans"], json!([]), "{v}");
    let whole_tokens = v["usage"]["input_tokens"].as_u64().unwrap();

    // Read in windows of 6 tokens (4 of the text's) overlapping by 2: the same spans, and
    // more tokens read.
    let mut windowed = body.clone();
    windowed["options"] = json!({"overflow": "window", "window": {"tokens": 6, "overlap": 2}});
    let (status, _, w) = post(&s.url("/v1/classify"), &windowed).await;
    assert_eq!(status, 200, "{w}");
    assert_eq!(spans_of(&w["data"][0], text), expected, "{w}");
    assert!(
        w["usage"]["input_tokens"].as_u64().unwrap() > whole_tokens,
        "{w}"
    );

    // A long text: refused under reject, cut under truncate, read whole in windows up to
    // the scan budget (four inputs).
    let long = format!("{} Tom Baker", "word ".repeat(700));
    let body = json!({"model": "tiny-tagger", "input": [long]});
    let (status, _, v) = post(&s.url("/v1/classify"), &body).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["data"][0]["error"], "max_length_exceeded", "{v}");
    let mut b = body.clone();
    b["options"] = json!({"overflow": "truncate"});
    let (_, _, v) = post(&s.url("/v1/classify"), &b).await;
    assert_eq!(
        (
            v["data"][0]["spans"].clone(),
            v["data"][0]["truncated"].clone()
        ),
        (json!([]), json!(true)),
        "{v}"
    );
    b["options"] = json!({"overflow": "window"});
    let (_, _, v) = post(&s.url("/v1/classify"), &b).await;
    let found = spans_of(&v["data"][0], &long);
    assert_eq!(found.len(), 1, "{v}");
    assert_eq!((found[0].1, found[0].3.as_str()), (3501, "Tom Baker"));
    b["input"] = json!(["word ".repeat(3000)]);
    let (_, _, v) = post(&s.url("/v1/classify"), &b).await;
    assert_eq!(v["data"][0]["error"], "scan_budget_exceeded", "{v}");
    assert_eq!(v["data"][0]["reason"], "scan_budget");
    assert_eq!(v["data"][0]["limit"], 2048);
    b["options"] = json!({"overflow": "window", "window": {"tokens": 8, "overlap": 8}});
    let (status, _, _) = post(&s.url("/v1/classify"), &b).await;
    assert_eq!(status, 400);

    // SIE extract: entities of the types named (case-insensitive), code-point offsets.
    let resp = client()
        .post(s.url("/v1/extract/tiny-tagger"))
        .header("accept", "application/json")
        .json(&json!({"items": [{"id": "a", "text": text}], "params": {"labels": ["loc"]}}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let v: serde_json::Value = resp.json().await.unwrap();
    let e = &v["items"][0]["entities"];
    assert_eq!(e.as_array().map(Vec::len), Some(1), "{v}");
    assert_eq!(
        (&e[0]["label"], &e[0]["text"], &e[0]["start"], &e[0]["end"]),
        (
            &json!("LOC"),
            &json!("Oslo"),
            &json!(expected[1].1),
            &json!(expected[1].2)
        ),
        "{v}"
    );
    assert!(e[0]["score"].as_f64().unwrap() > 0.99);
    // The head reads no instruction: one sent is refused, not ignored.
    let resp = client()
        .post(s.url("/v1/extract/tiny-tagger"))
        .header("accept", "application/json")
        .json(&json!({"items": [{"text": text}], "params": {"instruction": "Find places."}}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 400);
    let v: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(v["detail"]["code"], "INVALID_INPUT", "{v}");
}
