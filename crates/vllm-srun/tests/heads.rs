//! Sequence-classification heads (`BertForSequenceClassification` safetensors) from a local
//! directory. No such weights ship in the registries, so the test writes a tiny random head
//! in the standard layout (config.json with id2label, `bert.*`, `bert.pooler.dense`,
//! `classifier` tensors) with MiniLM's real tokenizer, and checks shapes and the endpoint.

mod common;

use candle_core::{DType, Device};
use candle_nn::{VarBuilder, VarMap};
use candle_transformers::models::bert::{BertModel, Config};
use common::*;
use serde_json::json;

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
    let dir = std::env::temp_dir()
        .join(format!("vllm-srun-head-{}", std::process::id()))
        .join("tiny-head");
    write_tiny_head(&dir);
    let mut o = options();
    o.models = vec![dir.to_string_lossy().into_owned()];
    let s = start(o);
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
}
