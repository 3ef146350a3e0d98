//! The models file (TOML): what a process serves.
//!
//! ```toml
//! [[models]]
//! model = "qwen2.5-1.5b"          # catalogue id, GGUF file or package directory
//! aliases = ["decider"]
//! generate = false                # decisions only (default: GGUF models also generate)
//! detector = "nanodet-coco"       # answers box questions about images with this detector
//!
//! [[models]]
//! model = "minilm-l6"             # an encoder
//!
//! max_scan_tokens = 32768         # scan budget of windowed reads (decision models)
//!
//! [[classifiers]]
//! name = "sentiment"
//! backbone = "qwen2.5-1.5b"
//! labels = ["positive", "negative", "neutral"]
//! instructions = "What is the sentiment of the text?"
//!
//! [[classifiers]]
//! name = "pii"
//! backbone = "qwen2.5-1.5b"
//! spans = true                    # answered with spans (a span question)
//! preset = "pii"                  # or labels = ["PERSON", "EMAIL_ADDRESS"]
//! ```

use std::path::Path;

use serde::Deserialize;

use crate::{Classifier, ServeOptions};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ModelsFile {
    #[serde(default)]
    models: Vec<ModelEntry>,
    #[serde(default)]
    classifiers: Vec<Classifier>,
    #[serde(default)]
    max_scan_tokens: Option<usize>,
    #[serde(default)]
    max_bundle_tasks: Option<usize>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ModelEntry {
    model: String,
    #[serde(default)]
    aliases: Vec<String>,
    /// Whether a GGUF model also serves chat, completions and SIE generate.
    #[serde(default = "yes")]
    generate: bool,
    /// An object detector that answers the model's box questions.
    #[serde(default)]
    detector: Option<String>,
}

fn yes() -> bool {
    true
}

/// Read a models file into `o`: its models replace `o.models`.
pub fn apply(path: &Path, o: &mut ServeOptions) -> anyhow::Result<()> {
    let text =
        std::fs::read_to_string(path).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    apply_str(&text, o).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
}

fn apply_str(text: &str, o: &mut ServeOptions) -> anyhow::Result<()> {
    let f: ModelsFile = toml::from_str(text)?;
    if f.models.is_empty() {
        return Err(anyhow::anyhow!("the models file lists no [[models]]"));
    }
    o.models = f.models.iter().map(|m| m.model.clone()).collect();
    o.no_generate = f
        .models
        .iter()
        .filter(|m| !m.generate)
        .map(|m| m.model.clone())
        .collect();
    o.detectors_optional = false;
    o.detectors = f
        .models
        .iter()
        .filter_map(|m| Some((m.model.clone(), m.detector.clone()?)))
        .collect();
    for m in &f.models {
        for a in &m.aliases {
            o.aliases.push((a.clone(), m.model.clone()));
        }
    }
    for c in &f.classifiers {
        if c.spans {
            if c.multi_label {
                return Err(anyhow::anyhow!(
                    "classifier {:?}: a span classifier has no multi_label",
                    c.name
                ));
            }
            match (&c.preset, c.labels.is_empty()) {
                (Some(p), true) if p == "pii" => {}
                (Some(p), true) => {
                    return Err(anyhow::anyhow!(
                        "classifier {:?}: unknown preset {p:?}; presets: pii",
                        c.name
                    ))
                }
                (None, true) => {
                    return Err(anyhow::anyhow!(
                        "classifier {:?} needs labels or preset = \"pii\"",
                        c.name
                    ))
                }
                (Some(_), false) => {
                    return Err(anyhow::anyhow!(
                        "classifier {:?}: give labels or a preset, not both",
                        c.name
                    ))
                }
                (None, false) => {}
            }
        } else if c.preset.is_some() {
            return Err(anyhow::anyhow!(
                "classifier {:?}: a preset needs spans = true",
                c.name
            ));
        } else if c.labels.is_empty() || (c.labels.len() < 2 && !c.multi_label) {
            return Err(anyhow::anyhow!(
                "classifier {:?} needs at least two labels",
                c.name
            ));
        }
        if !o.models.contains(&c.backbone)
            && !f.models.iter().any(|m| m.aliases.contains(&c.backbone))
        {
            return Err(anyhow::anyhow!(
                "classifier {:?}: backbone {:?} is not among the models",
                c.name,
                c.backbone
            ));
        }
    }
    o.classifiers = f.classifiers;
    if f.max_scan_tokens.is_some() {
        o.max_scan_tokens = f.max_scan_tokens;
    }
    if let Some(n) = f.max_bundle_tasks {
        o.max_bundle_tasks = n;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn span_classifiers_take_labels_or_the_pii_preset() {
        let file = |c: &str| {
            format!("[[models]]\nmodel = \"qwen2.5-1.5b\"\n[[classifiers]]\nname = \"x\"\nbackbone = \"qwen2.5-1.5b\"\n{c}")
        };
        let mut o = ServeOptions::default();
        apply_str(&file("spans = true\npreset = \"pii\""), &mut o).unwrap();
        assert_eq!(o.classifiers[0].preset.as_deref(), Some("pii"));
        apply_str(&file("spans = true\nlabels = [\"PERSON\"]"), &mut o).unwrap();
        for (bad, why) in [
            ("spans = true", "needs labels"),
            ("spans = true\npreset = \"phi\"", "unknown preset"),
            (
                "spans = true\npreset = \"pii\"\nlabels = [\"A\"]",
                "not both",
            ),
            ("preset = \"pii\"\nlabels = [\"A\", \"B\"]", "needs spans"),
            (
                "spans = true\nmulti_label = true\nlabels = [\"A\"]",
                "multi_label",
            ),
        ] {
            let e = apply_str(&file(bad), &mut o).unwrap_err().to_string();
            assert!(e.contains(why), "{bad}: {e}");
        }
    }

    #[test]
    fn a_models_file_lists_models_aliases_and_classifiers() {
        let mut o = ServeOptions::default();
        apply_str(
            r#"
max_scan_tokens = 1000
[[models]]
model = "smollm2-135m"
aliases = ["small"]
detector = "nanodet-coco"
[[models]]
model = "minilm-l6"
generate = false
[[classifiers]]
name = "mood"
backbone = "small"
labels = ["happy", "sad"]
"#,
            &mut o,
        )
        .unwrap();
        assert_eq!(o.models, ["smollm2-135m", "minilm-l6"]);
        assert_eq!(
            o.aliases,
            [("small".to_string(), "smollm2-135m".to_string())]
        );
        assert_eq!(o.classifiers[0].labels, ["happy", "sad"]);
        assert_eq!(o.max_scan_tokens, Some(1000));
        assert_eq!(o.no_generate, ["minilm-l6"]);
        assert_eq!(
            o.detectors,
            [("smollm2-135m".to_string(), "nanodet-coco".to_string())]
        );
        let e = apply_str("[[models]]\nmodel = \"x\"\ncolour = 1\n", &mut o)
            .unwrap_err()
            .to_string();
        assert!(e.contains("colour"), "{e}");
    }
}
