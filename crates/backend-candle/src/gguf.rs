//! A BERT encoder directory written as a GGUF file llama.cpp loads (`bert` architecture), so
//! the same weights can run through llama.cpp's CPU kernels.
//!
//! The file carries no vocabulary (`tokenizer.ggml.model = none`, only its size): the runtime
//! tokenizes with the directory's `tokenizer.json` as the candle path does, so both paths read
//! the same token ids. Weight matrices are written in the precision asked; embeddings tables,
//! biases and norms stay F32.

use std::path::Path;

use candle_core::quantized::{gguf_file, GgmlDType, QTensor};
use candle_core::{DType, Device, Tensor};
use candle_transformers::models::bert::Config;
use engine::backend::BackendError;

use crate::load_err;

/// Version of what [`write_bert`] writes: a cache of converted files keys on it, so a changed
/// converter never reuses an older file.
pub const FORMAT: u32 = 1;

/// Precision of the weight matrices in a converted file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Precision {
    F32,
    F16,
    Q8_0,
}

impl Precision {
    fn ggml(self) -> GgmlDType {
        match self {
            Precision::F32 => GgmlDType::F32,
            Precision::F16 => GgmlDType::F16,
            Precision::Q8_0 => GgmlDType::Q8_0,
        }
    }

    /// `general.file_type` (llama_ftype) of a file of this precision.
    fn file_type(self) -> u32 {
        match self {
            Precision::F32 => 0,
            Precision::F16 => 1,
            Precision::Q8_0 => 7,
        }
    }

    /// The name the card reports.
    pub fn name(self) -> &'static str {
        match self {
            Precision::F32 => "F32",
            Precision::F16 => "F16",
            Precision::Q8_0 => "Q8_0",
        }
    }
}

/// How an encoder pools its tokens, in llama.cpp's terms (`llama_pooling_type`).
pub fn pooling_type(pooling: &str) -> Option<u32> {
    match pooling {
        "mean" => Some(1),
        "cls" => Some(2),
        // Max pooling has no llama.cpp counterpart.
        _ => None,
    }
}

/// Why llama.cpp's `bert` graph cannot run the encoder in `dir`, if it cannot: it computes a
/// plain BERT (absolute positions from 0, GELU), so other model types (RoBERTa's offset
/// positions) and activations stay on candle.
pub fn unsupported(dir: &Path) -> Option<String> {
    let text = match std::fs::read_to_string(dir.join("config.json")) {
        Ok(t) => t,
        Err(e) => return Some(format!("config.json: {e}")),
    };
    match serde_json::from_str(&text) {
        Ok(raw) => unsupported_config(&raw),
        Err(e) => Some(format!("config.json: {e}")),
    }
}

/// [`unsupported`] on a parsed `config.json`.
fn unsupported_config(raw: &serde_json::Value) -> Option<String> {
    let field = |k: &str| raw[k].as_str();
    if !matches!(field("model_type"), None | Some("bert")) {
        return Some(format!("model_type {:?}", field("model_type")));
    }
    if !matches!(field("position_embedding_type"), None | Some("absolute")) {
        return Some(format!(
            "position_embedding_type {:?}",
            field("position_embedding_type")
        ));
    }
    if !matches!(
        field("hidden_act"),
        Some("gelu" | "gelu_new" | "gelu_pytorch_tanh")
    ) {
        return Some(format!("hidden_act {:?}", field("hidden_act")));
    }
    None
}

/// Write the BERT encoder in `dir` (`config.json`, `model.safetensors`) to `out` as GGUF,
/// pooled as `pooling` (`mean` or `cls`).
pub fn write_bert(
    dir: &Path,
    pooling: &str,
    precision: Precision,
    out: &Path,
) -> Result<(), BackendError> {
    let config_text =
        std::fs::read_to_string(dir.join("config.json")).map_err(|e| load_err("config.json", e))?;
    let raw: serde_json::Value =
        serde_json::from_str(&config_text).map_err(|e| load_err("config.json", e))?;
    if let Some(why) = unsupported_config(&raw) {
        return Err(load_err("GGUF conversion", why));
    }
    let config: Config = serde_json::from_value(raw).map_err(|e| load_err("config.json", e))?;
    let pooling = pooling_type(pooling)
        .ok_or_else(|| load_err("GGUF conversion", format!("{pooling} pooling")))?;
    let weights = candle_core::safetensors::load(dir.join("model.safetensors"), &Device::Cpu)
        .map_err(|e| load_err("model.safetensors", e))?;
    // sentence-transformers checkpoints name tensors without the `bert.` prefix.
    let get = |name: &str| -> Result<&Tensor, BackendError> {
        weights
            .get(name)
            .or_else(|| weights.get(&format!("bert.{name}")))
            .ok_or_else(|| load_err("model.safetensors", format!("no tensor {name}")))
    };
    let mut names: Vec<(String, String, bool)> = vec![
        (
            "embeddings.word_embeddings.weight".into(),
            "token_embd.weight".into(),
            false,
        ),
        (
            "embeddings.position_embeddings.weight".into(),
            "position_embd.weight".into(),
            false,
        ),
        (
            "embeddings.token_type_embeddings.weight".into(),
            "token_types.weight".into(),
            false,
        ),
        (
            "embeddings.LayerNorm.weight".into(),
            "token_embd_norm.weight".into(),
            false,
        ),
        (
            "embeddings.LayerNorm.bias".into(),
            "token_embd_norm.bias".into(),
            false,
        ),
    ];
    for i in 0..config.num_hidden_layers {
        let p = format!("encoder.layer.{i}");
        let b = format!("blk.{i}");
        for (hf, gg, matrix) in [
            ("attention.self.query", "attn_q", true),
            ("attention.self.key", "attn_k", true),
            ("attention.self.value", "attn_v", true),
            ("attention.output.dense", "attn_output", true),
            ("attention.output.LayerNorm", "attn_output_norm", false),
            ("intermediate.dense", "ffn_up", true),
            ("output.dense", "ffn_down", true),
            ("output.LayerNorm", "layer_output_norm", false),
        ] {
            names.push((
                format!("{p}.{hf}.weight"),
                format!("{b}.{gg}.weight"),
                matrix,
            ));
            names.push((format!("{p}.{hf}.bias"), format!("{b}.{gg}.bias"), false));
        }
    }
    let mut tensors = Vec::with_capacity(names.len());
    for (hf, gg, matrix) in &names {
        let t = get(hf)?
            .to_dtype(DType::F32)
            .map_err(|e| load_err("model.safetensors", e))?;
        let dtype = if *matrix {
            precision.ggml()
        } else {
            GgmlDType::F32
        };
        let q = QTensor::quantize(&t, dtype).map_err(|e| load_err(hf, e))?;
        tensors.push((gg.as_str(), q));
    }
    use gguf_file::Value as V;
    let u32_of = |n: usize| V::U32(n as u32);
    let metadata: Vec<(&str, V)> = vec![
        ("general.architecture", V::String("bert".into())),
        ("general.name", V::String("encoder".into())),
        ("general.file_type", V::U32(precision.file_type())),
        (
            "bert.context_length",
            u32_of(config.max_position_embeddings),
        ),
        ("bert.embedding_length", u32_of(config.hidden_size)),
        ("bert.feed_forward_length", u32_of(config.intermediate_size)),
        ("bert.block_count", u32_of(config.num_hidden_layers)),
        (
            "bert.attention.head_count",
            u32_of(config.num_attention_heads),
        ),
        (
            "bert.attention.layer_norm_epsilon",
            V::F32(config.layer_norm_eps as f32),
        ),
        ("bert.attention.causal", V::Bool(false)),
        ("bert.pooling_type", V::U32(pooling)),
        ("bert.vocab_size", u32_of(config.vocab_size)),
        ("tokenizer.ggml.model", V::String("none".into())),
        (
            "tokenizer.ggml.token_type_count",
            u32_of(config.type_vocab_size),
        ),
    ];
    let metadata: Vec<(&str, &V)> = metadata.iter().map(|(k, v)| (*k, v)).collect();
    let tensors: Vec<(&str, &QTensor)> = tensors.iter().map(|(k, v)| (*k, v)).collect();
    // Written beside the target and renamed, so a reader never sees half a file.
    static WRITES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = WRITES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tmp = out.with_extension(format!("tmp{}-{n}", std::process::id()));
    let write = || -> Result<(), Box<dyn std::error::Error>> {
        let file = std::fs::File::create(&tmp)?;
        let mut w = std::io::BufWriter::new(file);
        gguf_file::write(&mut w, &metadata, &tensors)?;
        use std::io::Write;
        w.flush()?;
        Ok(std::fs::rename(&tmp, out)?)
    };
    write().map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        load_err(&out.display().to_string(), e)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir_with(config: serde_json::Value) -> std::path::PathBuf {
        static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let d = std::env::temp_dir().join(format!("vsr-gguf-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("config.json"), config.to_string()).unwrap();
        d
    }

    #[test]
    fn only_a_plain_bert_goes_to_llama_cpp() {
        let bert = serde_json::json!({"model_type": "bert", "hidden_act": "gelu",
            "position_embedding_type": "absolute"});
        let d = dir_with(bert.clone());
        assert_eq!(unsupported(&d), None);
        for (k, v) in [
            ("model_type", "roberta"),
            ("hidden_act", "relu"),
            ("position_embedding_type", "relative_key"),
        ] {
            let mut c = bert.clone();
            c[k] = serde_json::json!(v);
            let why = unsupported(&dir_with(c)).expect(k);
            assert!(why.contains(k) && why.contains(v), "{why}");
        }
        assert!(unsupported(&d.join("missing")).is_some());
        assert!(write_bert(
            &dir_with(serde_json::json!({"model_type": "roberta", "hidden_act": "gelu"})),
            "mean",
            Precision::F16,
            &d.join("x.gguf")
        )
        .is_err());
        assert_eq!(pooling_type("max"), None);
        assert_eq!(pooling_type("cls"), Some(2));
    }
}
