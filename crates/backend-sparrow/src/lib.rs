//! Sparrow static decision models (`sparrow-decider`'s `arch: static`): no attention. The
//! state, the question (plus a learned vector per question kind) and each option are
//! mean-pooled from an int8 embedding table and L2-normalised; a three-layer MLP scores every
//! option from element-wise products of those vectors and a set-level contrast term. With
//! `kv` on, numbers in the state are also read as key-value pairs (`battery: 6%`): each pair
//! becomes emb(key) x g(value), and each option attends over the pairs by the similarity of
//! its vector to the pair's line label.
//!
//! A model is a `.sparrow` zip (or a directory) holding `config.json`, `tokenizer.json`
//! (`{"vocab": {piece: id}}`, BERT uncased WordPiece) and `model.npz` (`<name>.q8` int8
//! tensors with `<name>.scale` f32 per-row scales, f32 biases).

use std::borrow::Cow;
use std::collections::HashMap;
use std::fs::File;
use std::io::Read;
use std::path::Path;

use engine::budget::Vocab;
use engine::wordpiece::AsciiWordPiece;
use engine::{BackendError, BackendInfo, DirectBackend, DirectKind, DirectQuestion, Token};
use tokenizers::Tokenizer;

mod math;
mod pairs;

use math::{gelu, normalize, Matrix};

/// Errors of loading a Sparrow model.
#[derive(Debug, thiserror::Error)]
pub enum SparrowError {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("{path}: {message}")]
    Format { path: String, message: String },
}

impl From<SparrowError> for BackendError {
    fn from(e: SparrowError) -> Self {
        BackendError::Load(e.to_string())
    }
}

/// The `config.json` fields the forward reads.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub name: String,
    /// Numbers in the state read as key-value pairs.
    pub kv: bool,
    /// Most tokens of one text (state, instructions or option) pooled.
    pub max_len: usize,
    /// `(choice, noul, score)` temperatures the package divides logits by.
    pub temperature: (f64, f64, f64),
}

/// An int8 row table: rows are dequantised (`q x scale`) as they are read.
struct Rows {
    q: Vec<i8>,
    scale: Vec<f32>,
    dim: usize,
}

impl Rows {
    fn len(&self) -> usize {
        self.scale.len()
    }
    /// Add row `i`, dequantised, to `acc`.
    fn add_to(&self, i: usize, acc: &mut [f32]) {
        let s = self.scale[i];
        let row = &self.q[i * self.dim..(i + 1) * self.dim];
        for (a, &q) in acc.iter_mut().zip(row) {
            *a += f32::from(q) * s;
        }
    }
}

/// The weights of the forward.
struct Weights {
    emb: Rows,
    /// One vector per question kind (noul, choice, score).
    kind: Matrix,
    mlp0: Matrix,
    mlp2: Matrix,
    mlp4: Matrix,
    /// The value map of key-value pairs (`kv` models).
    g: Option<Matrix>,
    tau: f32,
}

/// A key-value pair of the state: its vector (emb(key) x g(value)) and its line label's
/// normalised vector.
type PairVectors = (Vec<f32>, Vec<f32>);

/// A loaded Sparrow model.
pub struct SparrowModel {
    pub config: Config,
    /// The general WordPiece pipeline, and a faster path for ASCII text with equal pieces.
    tokenizer: Tokenizer,
    ascii: AsciiWordPiece,
    weights: Weights,
    info: BackendInfo,
}

fn format_err(path: &Path, message: impl Into<String>) -> SparrowError {
    SparrowError::Format {
        path: path.display().to_string(),
        message: message.into(),
    }
}

/// The three parts of a model, read from a `.sparrow` zip or a directory.
fn read_parts(path: &Path) -> Result<[Vec<u8>; 3], SparrowError> {
    let names = ["config.json", "tokenizer.json", "model.npz"];
    let mut out: [Vec<u8>; 3] = Default::default();
    if path.is_dir() {
        for (o, n) in out.iter_mut().zip(names) {
            *o = std::fs::read(path.join(n))?;
        }
        return Ok(out);
    }
    let mut zip =
        zip::ZipArchive::new(File::open(path)?).map_err(|e| format_err(path, e.to_string()))?;
    for (o, n) in out.iter_mut().zip(names) {
        let mut m = zip
            .by_name(n)
            .map_err(|e| format_err(path, format!("{n}: {e}")))?;
        m.read_to_end(o)?;
    }
    Ok(out)
}

/// Every array of an `.npz` archive as f32 or i8 values with its shape.
enum Array {
    F32(Vec<f32>, Vec<usize>),
    I8(Vec<i8>, Vec<usize>),
}

fn read_npz(path: &Path, bytes: &[u8]) -> Result<HashMap<String, Array>, SparrowError> {
    let mut zip = zip::ZipArchive::new(std::io::Cursor::new(bytes))
        .map_err(|e| format_err(path, format!("model.npz: {e}")))?;
    let mut out = HashMap::new();
    for i in 0..zip.len() {
        let mut m = zip
            .by_index(i)
            .map_err(|e| format_err(path, format!("model.npz: {e}")))?;
        let name = m.name().trim_end_matches(".npy").to_string();
        let mut buf = Vec::with_capacity(m.size() as usize);
        m.read_to_end(&mut buf)?;
        out.insert(name.clone(), read_npy(path, &name, &buf)?);
    }
    Ok(out)
}

fn read_npy(path: &Path, name: &str, buf: &[u8]) -> Result<Array, SparrowError> {
    let bad = |e: std::io::Error| format_err(path, format!("model.npz {name}: {e}"));
    let npy = npyz::NpyFile::new(std::io::Cursor::new(buf)).map_err(bad)?;
    if npy.order() != npyz::Order::C {
        return Err(format_err(path, format!("model.npz {name}: not C order")));
    }
    let shape: Vec<usize> = npy.shape().iter().map(|&d| d as usize).collect();
    let descr = npy.dtype().descr();
    if descr.contains("f4") {
        Ok(Array::F32(npy.into_vec::<f32>().map_err(bad)?, shape))
    } else if descr.contains("i1") {
        Ok(Array::I8(npy.into_vec::<i8>().map_err(bad)?, shape))
    } else {
        Err(format_err(
            path,
            format!("model.npz {name}: dtype {descr} is neither float32 nor int8"),
        ))
    }
}

/// Take a weight: `name.q8` with `name.scale` dequantised per row, or `name` as f32.
fn take(
    path: &Path,
    arrays: &mut HashMap<String, Array>,
    name: &str,
) -> Result<(Vec<f32>, Vec<usize>), SparrowError> {
    if let Some(Array::F32(v, shape)) = arrays.remove(name) {
        return Ok((v, shape));
    }
    let (q, shape) = match arrays.remove(&format!("{name}.q8")) {
        Some(Array::I8(q, shape)) => (q, shape),
        _ => return Err(format_err(path, format!("model.npz has no weight {name}"))),
    };
    let scale = match arrays.remove(&format!("{name}.scale")) {
        Some(Array::F32(s, _)) => s,
        _ => return Err(format_err(path, format!("model.npz has no {name}.scale"))),
    };
    let cols: usize = shape.iter().skip(1).product::<usize>().max(1);
    if scale.len() * cols != q.len() {
        return Err(format_err(
            path,
            format!("{name}.scale does not match its rows"),
        ));
    }
    let v = q
        .iter()
        .enumerate()
        .map(|(i, &x)| f32::from(x) * scale[i / cols])
        .collect();
    Ok((v, shape))
}

fn matrix(
    path: &Path,
    arrays: &mut HashMap<String, Array>,
    name: &str,
    bias: bool,
) -> Result<Matrix, SparrowError> {
    let (w, shape) = take(path, arrays, &format!("{name}.weight"))?;
    let (rows, cols) = match shape[..] {
        [r, c] => (r, c),
        _ => return Err(format_err(path, format!("{name}.weight is not a matrix"))),
    };
    let b = if bias {
        let (b, _) = take(path, arrays, &format!("{name}.bias"))?;
        if b.len() != rows {
            return Err(format_err(
                path,
                format!("{name}.bias has {} values", b.len()),
            ));
        }
        b
    } else {
        vec![0.0; rows]
    };
    Ok(Matrix { w, b, rows, cols })
}

/// A BERT uncased WordPiece tokenizer over `vocab`, as the package's tokenizer reads text.
pub(crate) fn wordpiece_pipeline(
    path: &Path,
    vocab: &serde_json::Value,
) -> Result<Tokenizer, SparrowError> {
    let spec = serde_json::json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": [],
        "normalizer": {"type": "BertNormalizer", "clean_text": true,
            "handle_chinese_chars": true, "strip_accents": null, "lowercase": true},
        "pre_tokenizer": {"type": "BertPreTokenizer"},
        "post_processor": null,
        "decoder": null,
        "model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
            "max_input_chars_per_word": 100, "vocab": vocab},
    });
    spec.to_string()
        .parse::<Tokenizer>()
        .map_err(|e| format_err(path, format!("tokenizer.json: {e}")))
}

impl SparrowModel {
    /// Load a `.sparrow` file or a directory holding the same three files.
    pub fn load(path: &Path) -> Result<SparrowModel, SparrowError> {
        let [config, tokenizer, npz] = read_parts(path)?;
        let cfg: serde_json::Value = serde_json::from_slice(&config)
            .map_err(|e| format_err(path, format!("config.json: {e}")))?;
        let arch = cfg.get("arch").and_then(|a| a.as_str()).unwrap_or("");
        if arch != "static" {
            return Err(format_err(
                path,
                format!("config.json: arch {arch:?}; this backend reads static Sparrow models"),
            ));
        }
        let temp = |k: &str| {
            cfg.pointer(&format!("/temperature_by_kind/{k}"))
                .and_then(|t| t.as_f64())
                .unwrap_or(1.0)
        };
        let config = Config {
            name: cfg
                .get("name")
                .and_then(|n| n.as_str())
                .unwrap_or("sparrow")
                .to_string(),
            kv: cfg.get("kv").and_then(|k| k.as_bool()).unwrap_or(false),
            max_len: cfg.get("max_len").and_then(|m| m.as_u64()).unwrap_or(512) as usize,
            temperature: (temp("choice"), temp("noul"), temp("score")),
        };
        let tk: serde_json::Value = serde_json::from_slice(&tokenizer)
            .map_err(|e| format_err(path, format!("tokenizer.json: {e}")))?;
        let vocab = tk
            .get("vocab")
            .ok_or_else(|| format_err(path, "tokenizer.json has no vocab"))?;
        let tokenizer = wordpiece_pipeline(path, vocab)?;
        let ids: HashMap<String, u32> = serde_json::from_value(vocab.clone())
            .map_err(|e| format_err(path, format!("tokenizer.json vocab: {e}")))?;
        let ascii = AsciiWordPiece::new(ids)
            .ok_or_else(|| format_err(path, "tokenizer.json has no [UNK]"))?;

        let mut arrays = read_npz(path, &npz)?;
        let (emb_q, emb_shape) = match arrays.remove("emb.weight.q8") {
            Some(Array::I8(q, shape)) => (q, shape),
            _ => return Err(format_err(path, "model.npz has no int8 emb.weight")),
        };
        let emb_scale = match arrays.remove("emb.weight.scale") {
            Some(Array::F32(s, _)) => s,
            _ => return Err(format_err(path, "model.npz has no emb.weight.scale")),
        };
        let dim = match emb_shape[..] {
            [rows, dim] if rows == emb_scale.len() && rows > 0 => dim,
            _ => return Err(format_err(path, "emb.weight does not match its scales")),
        };
        let emb = Rows {
            q: emb_q,
            scale: emb_scale,
            dim,
        };
        let kind = matrix(path, &mut arrays, "kind", false)?;
        let mlp0 = matrix(path, &mut arrays, "mlp.0", true)?;
        let mlp2 = matrix(path, &mut arrays, "mlp.2", true)?;
        let mlp4 = matrix(path, &mut arrays, "mlp.4", true)?;
        let g = if config.kv {
            Some(matrix(path, &mut arrays, "g", true)?)
        } else {
            None
        };
        let tau = match arrays.remove("tau") {
            Some(Array::F32(t, _)) => t.first().copied().unwrap_or(1.0),
            _ => 1.0,
        };
        let blocks = if config.kv { 10 } else { 6 };
        let shapes_fit = kind.rows == 3
            && kind.cols == dim
            && mlp0.cols == blocks * dim
            && mlp2.cols == mlp0.rows
            && mlp4.cols == mlp2.rows
            && mlp4.rows == 1
            && g.as_ref()
                .is_none_or(|g| g.rows == dim && g.cols == pairs::N_FEATURES);
        if !shapes_fit {
            return Err(format_err(
                path,
                "the weights' shapes do not fit the forward",
            ));
        }
        let info = BackendInfo {
            engine: "sparrow".into(),
            device: "cpu".into(),
            dtype: "int8".into(),
            context_tokens: config.max_len,
            // A request reads at most 64 inputs' worth of tokens.
            max_sequences: 64,
            trained_context: config.max_len,
            threads: 1,
            flash_attention: None,
            micro_batch_tokens: None,
            flash_attention_probe: None,
            prefix_cache_bytes: None,
            hidden_size: None,
        };
        Ok(SparrowModel {
            config,
            tokenizer,
            ascii,
            weights: Weights {
                emb,
                kind,
                mlp0,
                mlp2,
                mlp4,
                g,
                tau,
            },
            info,
        })
    }

    /// How the runtime reads this model: the package's temperature per question type, and
    /// the three types it answers.
    pub fn decision_config(&self) -> engine::DecisionConfig {
        let (choice, noul, score) = self.config.temperature;
        engine::DecisionConfig {
            attention_mode: "state_once".into(),
            prompt_layout: "sparrow-static".into(),
            system_prompt: String::new(),
            temperature: engine::package::PerType {
                choice,
                noul,
                score,
            },
            question_types: vec!["choice".into(), "noul".into(), "score".into()],
            ..engine::DecisionConfig::default()
        }
    }

    fn dim(&self) -> usize {
        self.weights.emb.dim
    }

    /// The mean of the embedding rows of `ids` (at most `max_len` of them); an empty text
    /// reads row 0.
    fn pool(&self, ids: &[Token]) -> Vec<f32> {
        let ids = &ids[..ids.len().min(self.config.max_len)];
        let mut acc = vec![0.0f32; self.dim()];
        let emb = &self.weights.emb;
        let mut n = 0usize;
        for &id in ids {
            let i = id as usize;
            if i < emb.len() {
                emb.add_to(i, &mut acc);
                n += 1;
            }
        }
        if n == 0 {
            emb.add_to(0, &mut acc);
            n = 1;
        }
        let n = n as f32;
        for a in &mut acc {
            *a /= n;
        }
        acc
    }

    fn pool_text(&self, text: &str) -> Result<Vec<f32>, BackendError> {
        Ok(self.pool(&self.tokenize_text(text)?))
    }

    /// The key-value pairs of a state text: each pair's vector (emb(key) x g(value)) and its
    /// line label's normalised vector.
    fn pairs(&self, text: &str) -> Result<Vec<PairVectors>, BackendError> {
        let Some(g) = &self.weights.g else {
            return Ok(Vec::new());
        };
        let mut out = Vec::new();
        for p in pairs::kv_pairs(text, pairs::MAX_PAIRS) {
            let mut ek = self.pool_text(&p.key)?;
            normalize(&mut ek);
            let mut el = self.pool_text(&p.label)?;
            normalize(&mut el);
            let features = pairs::value_features(p.value);
            let mut gv = g.apply(&features);
            for (e, v) in ek.iter_mut().zip(&mut gv) {
                *e *= v.tanh();
            }
            out.push((ek, el));
        }
        Ok(out)
    }

    /// One logit per option of one question, given the state's normalised vector and pairs.
    fn logits(&self, s: &[f32], pairs: &[PairVectors], question: &DirectQuestion) -> Vec<f32> {
        let w = &self.weights;
        let d = self.dim();
        let k = match question.kind {
            DirectKind::Noul => 0,
            DirectKind::Choice => 1,
            DirectKind::Score => 2,
        };
        let mut q = self.pool(&question.instructions);
        for (x, y) in q.iter_mut().zip(w.kind.row(k)) {
            *x += y;
        }
        normalize(&mut q);
        let opts: Vec<Vec<f32>> = question
            .options
            .iter()
            .map(|ids| {
                let mut o = self.pool(ids);
                normalize(&mut o);
                o
            })
            .collect();
        let n = opts.len().max(1) as f32;
        let mut om = vec![0.0f32; d];
        for o in &opts {
            for (m, x) in om.iter_mut().zip(o) {
                *m += x;
            }
        }
        for m in &mut om {
            *m /= n;
        }
        // The pairs' mean vector, and each option's attention over the pairs.
        let kv_mean = (!pairs.is_empty()).then(|| {
            let mut m = vec![0.0f32; d];
            for (pv, _) in pairs {
                for (a, x) in m.iter_mut().zip(pv) {
                    *a += x;
                }
            }
            let np = pairs.len() as f32;
            m.iter_mut().for_each(|a| *a /= np);
            m
        });
        let blocks = if self.config.kv { 10 } else { 6 };
        let mut f = vec![0.0f32; blocks * d];
        opts.iter()
            .map(|o| {
                for j in 0..d {
                    f[j] = o[j];
                    f[d + j] = s[j] * o[j];
                    f[2 * d + j] = q[j] * o[j];
                    f[3 * d + j] = s[j] * q[j] * o[j];
                    f[4 * d + j] = o[j] - om[j];
                    f[5 * d + j] = (s[j] - om[j]) * o[j];
                }
                if self.config.kv {
                    let kvo = attend(w.tau, o, pairs, d);
                    let zero = vec![0.0f32; d];
                    let kv = kv_mean.as_deref().unwrap_or(&zero);
                    for j in 0..d {
                        f[6 * d + j] = kv[j] * o[j];
                        f[7 * d + j] = kv[j] * q[j] * o[j];
                        f[8 * d + j] = kvo[j];
                        f[9 * d + j] = kvo[j] * q[j];
                    }
                }
                let mut h = w.mlp0.apply(&f);
                h.iter_mut().for_each(|x| *x = gelu(*x));
                let mut h = w.mlp2.apply(&h);
                h.iter_mut().for_each(|x| *x = gelu(*x));
                w.mlp4.apply(&h)[0]
            })
            .collect()
    }
}

/// An option's attention over the pairs: softmax of `tau x (o . label)`, weighting the pair
/// vectors. No pairs read as zeros.
fn attend(tau: f32, o: &[f32], pairs: &[PairVectors], d: usize) -> Vec<f32> {
    let mut out = vec![0.0f32; d];
    if pairs.is_empty() {
        return out;
    }
    let scores: Vec<f32> = pairs.iter().map(|(_, el)| tau * math::dot(o, el)).collect();
    let max = scores.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
    let e: Vec<f32> = scores.iter().map(|s| (s - max).exp()).collect();
    let sum: f32 = e.iter().sum();
    for (w, (pv, _)) in e.iter().zip(pairs) {
        let a = w / sum;
        for (x, v) in out.iter_mut().zip(pv) {
            *x += a * v;
        }
    }
    out
}

impl Vocab for SparrowModel {
    fn tokenize_text(&self, text: &str) -> Result<Vec<Token>, BackendError> {
        if let Some(ids) = self.ascii.encode(text) {
            return Ok(ids);
        }
        let enc = self
            .tokenizer
            .encode(text, false)
            .map_err(|e| BackendError::Tokenize(e.to_string()))?;
        Ok(enc.get_ids().to_vec())
    }

    /// A WordPiece token's text without its continuation mark (WordPiece folds case and drops
    /// whitespace, so the cut checks find which cuts hold).
    fn token_bytes(&self, token: Token) -> Vec<u8> {
        self.ascii.piece(token).as_bytes().to_vec()
    }

    fn vocab_size(&self) -> usize {
        self.ascii.vocab_size()
    }
}

impl DirectBackend for SparrowModel {
    fn info(&self) -> &BackendInfo {
        &self.info
    }

    /// A text state is read stripped; any other state as JSON indented by two spaces, as the
    /// package renders it.
    fn render_state<'a>(&self, state: &'a serde_json::Value) -> Cow<'a, str> {
        match state {
            serde_json::Value::String(s) => Cow::Borrowed(s.trim()),
            serde_json::Value::Null => Cow::Borrowed(""),
            v => Cow::Owned(serde_json::to_string_pretty(v).unwrap_or_default()),
        }
    }

    fn noul_outcomes(&self) -> (&str, &str) {
        (
            "the statement holds for this state",
            "the statement does not hold for this state",
        )
    }

    fn answer(
        &self,
        text: &str,
        tokens: &[Token],
        questions: &[&DirectQuestion],
    ) -> Result<Vec<Vec<f32>>, BackendError> {
        let mut s = self.pool(tokens);
        normalize(&mut s);
        let pairs = self.pairs(text)?;
        Ok(questions
            .iter()
            .map(|q| self.logits(&s, &pairs, q))
            .collect())
    }
}

/// Whether `path` holds a Sparrow model: a `.sparrow` file, or a directory with
/// `config.json` and `model.npz`.
pub fn is_sparrow(path: &Path) -> bool {
    if path.is_dir() {
        return path.join("config.json").is_file() && path.join("model.npz").is_file();
    }
    path.extension().is_some_and(|e| e == "sparrow")
}

#[cfg(test)]
mod wordpiece_tests {
    use std::collections::HashMap;

    use engine::wordpiece::AsciiWordPiece;

    /// The shared ASCII WordPiece gives the same tokens as the general `tokenizers` pipeline
    /// on random ASCII texts (letters, digits, punctuation, every control character, long
    /// words).
    #[test]
    fn ascii_pieces_equal_the_general_pipeline() {
        let pieces = [
            "[PAD]", "[UNK]", "the", "cat", "##s", "sat", "on", "mat", "un", "##believ", "##able",
            "a", "##b", "b", "c", "1", "2", "##3", "!", ",", ".", "'", "-", "(", ")", "#", "@",
            "x", "##x", "hello", "world", "##ing", "go",
        ];
        let vocab: HashMap<String, u32> = pieces
            .iter()
            .enumerate()
            .map(|(i, p)| (p.to_string(), i as u32))
            .collect();
        let general = crate::wordpiece_pipeline(
            std::path::Path::new("test"),
            &serde_json::to_value(&vocab).unwrap(),
        )
        .unwrap();
        let fast = AsciiWordPiece::new(vocab).unwrap();
        let alphabet: Vec<u8> = (0u8..128).collect();
        let words = [
            "the",
            "cats",
            "unbelievable",
            "going",
            "hello",
            "World",
            "ab",
            "xxx",
            "123",
        ];
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for i in 0..3000 {
            let mut text = String::new();
            for _ in 0..(next() % 24) {
                match next() % 4 {
                    0 => text.push(alphabet[(next() % 128) as usize] as char),
                    1 => text.push(' '),
                    _ => text.push_str(words[(next() % words.len() as u64) as usize]),
                }
            }
            if i % 100 == 0 {
                text.push_str(&"x".repeat(95 + (i / 100) % 10));
            }
            let want = general
                .encode(text.as_str(), false)
                .unwrap()
                .get_ids()
                .to_vec();
            assert_eq!(fast.encode(&text), Some(want), "{text:?}");
        }
        assert_eq!(fast.encode("caf\u{e9}"), None);
    }
}
