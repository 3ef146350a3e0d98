//! `--model` with a local package directory: weights plus `decision_config.json` and
//! `card.json`, as a user keeps one.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use serde_json::json;

#[tokio::test]
async fn a_package_directory_is_served_with_its_config_and_card() {
    let cached = hub::resolve(&test_model(), true).expect("the test model is cached");
    let dir = std::env::temp_dir()
        .join(format!("vllm-srun-pkg-{}", std::process::id()))
        .join("my-decider");
    std::fs::create_dir_all(&dir).unwrap();
    std::os::unix::fs::symlink(&cached.weights, dir.join("weights.gguf")).unwrap();
    std::fs::write(
        dir.join("decision_config.json"),
        json!({"system_prompt": "You answer questions about support tickets.", "temperature": {"choice": 2.0},
               "question_types": ["choice", "noul", "score"]})
        .to_string(),
    )
    .unwrap();
    std::fs::write(
        dir.join("card.json"),
        json!({"description": "A local decider", "release_date": "2026-11-29", "aliases": ["local-decider"], "license": "apache-2.0"}).to_string(),
    )
    .unwrap();
    let mut o = options();
    o.models = vec![dir.to_string_lossy().into_owned()];
    let s = start(o);
    let (_, m) = get(&s.url("/v1/models")).await;
    let entry = &m["models"][0];
    assert_eq!(entry["name"], "my-decider");
    assert_eq!(entry["description"], "A local decider");
    assert_eq!(entry["release_date"], "2026-11-29");
    assert_eq!(entry["features"], json!(["choice", "noul", "score"]));
    assert!(
        entry["card"]["sha256"].as_str().unwrap().len() == 64,
        "digest computed for local weights"
    );
    let body = json!({"model": "local-decider", "state": TICKET, "questions": {
        "s": {"type": "set", "instructions": "?", "criteria": {"a": null}},
        "q": {"type": "noul", "instructions": "Refund?"}}});
    let (status, _, v) = post(&s.url("/v1/decisions"), &body).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["model"], "my-decider");
    assert_eq!(
        v["answers"]["s"]["error"], "invalid_question",
        "set is not in this package's question_types"
    );
    assert_eq!(v["answers"]["q"]["type"], "noul");
    std::fs::remove_dir_all(dir.parent().unwrap()).unwrap();
}

/// A package directory of the test model with this `decision_config.json`.
fn package(name: &str, config: serde_json::Value) -> std::path::PathBuf {
    let cached = hub::resolve(&test_model(), true).expect("the test model is cached");
    let dir = std::env::temp_dir()
        .join(format!("vllm-srun-pkg-{}-{name}", std::process::id()))
        .join(name);
    std::fs::create_dir_all(&dir).unwrap();
    std::os::unix::fs::symlink(&cached.weights, dir.join("weights.gguf")).unwrap();
    std::fs::write(dir.join("decision_config.json"), config.to_string()).unwrap();
    std::fs::write(dir.join("card.json"), "{}").unwrap();
    dir
}

/// The package's choice temperature acts: the same question on the same weights, read at
/// temperature 2 instead of 1, gives exactly the square-root-flattened distribution.
#[tokio::test]
async fn a_package_temperature_changes_the_answer_as_it_says() {
    let plain = package("plain", json!({"question_types": ["choice", "noul"]}));
    let warm = package(
        "warm",
        json!({"question_types": ["choice", "noul"], "temperature": {"choice": 2.0}}),
    );
    let mut o = options();
    o.models = vec![
        plain.to_string_lossy().into_owned(),
        warm.to_string_lossy().into_owned(),
    ];
    let s = start(o);
    let q = json!({"team": {"type": "choice", "instructions": "Which team should handle this ticket?",
        "criteria": {"billing": "Payments and refunds", "engineering": "Outages and bugs", "sales": "New contracts"}}});
    let mut probs = Vec::new();
    for m in ["plain", "warm"] {
        let (st, _, v) = post(
            &s.url("/v1/systemone"),
            &json!({"model": m, "state": TICKET, "questions": q}),
        )
        .await;
        assert_eq!(st, 200, "{v}");
        probs.push(v["answers"]["team"]["probabilities"].clone());
    }
    let keys = ["billing", "engineering", "sales"];
    let p1: Vec<f64> = keys.iter().map(|k| probs[0][k].as_f64().unwrap()).collect();
    let p2: Vec<f64> = keys.iter().map(|k| probs[1][k].as_f64().unwrap()).collect();
    let z: f64 = p1.iter().map(|p| p.sqrt()).sum();
    for (a, b) in p1.iter().zip(&p2) {
        assert!((a.sqrt() / z - b).abs() < 1e-6, "T=1 {p1:?} vs T=2 {p2:?}");
    }
    assert!(p1 != p2, "the temperature changed nothing");
    for d in [plain, warm] {
        std::fs::remove_dir_all(d.parent().unwrap()).unwrap();
    }
}

/// Content-free calibration divides each answer by `content_free_weight`'s share of the same
/// question's answer about an empty state: whole (the default), a question about an empty
/// state is answered with equal probabilities, exactly; at weight 0.5 it keeps the square root
/// of the model's own lean (what `(logit − 0.5 · empty logit)` reads), for choice, score and noul.
#[tokio::test]
async fn a_content_free_weight_divides_out_that_share_of_the_empty_state() {
    let types = json!(["choice", "noul", "score"]);
    let none = package("cf-none", json!({}));
    let whole = package("cf-whole", json!({"content_free": types}));
    let half = package(
        "cf-half",
        json!({"content_free": types,
               "content_free_weight": {"choice": 0.5, "noul": 0.5, "score": 0.5}}),
    );
    let mut o = options();
    o.models = [&none, &whole, &half]
        .iter()
        .map(|d| d.to_string_lossy().into_owned())
        .collect();
    let s = start(o);
    let q = json!({
        "team": {"type": "choice", "instructions": "Which team should handle this ticket?",
                 "criteria": {"billing": "Payments and refunds", "engineering": "Outages and bugs", "sales": "New contracts"}},
        "severity": {"type": "score", "instructions": "How severe is the problem?",
                     "criteria": ["No problem at all", "A small annoyance", "A complete outage"]},
        "angry": {"type": "noul", "instructions": "Is the customer angry?"}});
    // Each question's distribution, in a fixed order (a noul as yes, no).
    let mut answers = Vec::new();
    for m in ["cf-none", "cf-whole", "cf-half"] {
        let (st, _, v) = post(
            &s.url("/v1/decisions"),
            &json!({"model": m, "state": "", "questions": q}),
        )
        .await;
        assert_eq!(st, 200, "{v}");
        let a = &v["answers"];
        let mut dists = Vec::new();
        for id in ["team", "severity"] {
            dists.push(probabilities(&a[id]).into_iter().map(|(_, x)| x).collect());
        }
        let yes = a["angry"]["noul"].as_f64().unwrap();
        dists.push(vec![yes, 1.0 - yes]);
        answers.push(dists);
    }
    let (raw, whole_p, half_p) = (&answers[0], &answers[1], &answers[2]);
    for ((r, w), h) in raw.iter().zip(whole_p).zip(half_p) {
        let even = 1.0 / w.len() as f64;
        assert!(w.iter().all(|x| (x - even).abs() < 1e-9), "whole: {w:?}");
        let z: f64 = r.iter().map(|x| x.sqrt()).sum();
        for (x, y) in r.iter().zip(h) {
            assert!(
                (x.sqrt() / z - y).abs() < 1e-6,
                "raw {r:?}, at weight 0.5 {h:?}"
            );
        }
        assert!(
            r.iter().any(|x| (x - even).abs() > 1e-3),
            "the model has no lean: {r:?}"
        );
    }
    for d in [none, whole, half] {
        std::fs::remove_dir_all(d.parent().unwrap()).unwrap();
    }
}

/// The model listing once the server's only model has failed to load (within two minutes).
async fn failed_listing(s: &TestServer) -> serde_json::Value {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    loop {
        let (_, h) = get(&s.url("/health")).await;
        if h["status"] == "failed" {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{h}");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    get(&s.url("/v1/models")).await.1
}

/// A config the engine cannot honour fails the load, and says why.
#[tokio::test]
async fn a_package_config_that_cannot_act_fails_the_load() {
    let bad = package("bad", json!({"temperature": {"noul": 0.0}}));
    let mut o = options();
    o.models = vec![bad.to_string_lossy().into_owned()];
    let s = start_unready(o);
    let m = failed_listing(&s).await;
    let err = m["models"][0]["last_error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(err.contains("temperature.noul"), "{m}");
    std::fs::remove_dir_all(bad.parent().unwrap()).unwrap();
}

/// `sys1bench generate FAMILY` with `n` cases at `seed`, keeping only the questions named.
fn generated(family: &str, n: usize, seed: u64, keep: &[&str], out: &std::path::Path) {
    let raw = out.with_extension("raw.jsonl");
    let status = std::process::Command::new("sys1bench")
        .args(["generate", family])
        .arg(&raw)
        .args(["--n", &n.to_string(), "--seed", &seed.to_string()])
        .stdout(std::process::Stdio::null())
        .status()
        .expect("sys1bench is installed (tests/test.sh installs it)");
    assert!(status.success());
    let mut lines = String::new();
    for line in std::fs::read_to_string(&raw).unwrap().lines() {
        let mut item: serde_json::Value = serde_json::from_str(line).unwrap();
        item["questions"]
            .as_object_mut()
            .unwrap()
            .retain(|k, _| keep.contains(&k.as_str()));
        lines.push_str(&item.to_string());
        lines.push('\n');
    }
    std::fs::write(out, lines).unwrap();
}

/// A manifest question as a 5.0 request asks it, and its truth as the answer names it.
fn asked(q: &serde_json::Value) -> (serde_json::Value, String) {
    match q["type"].as_str().unwrap() {
        "choice" => {
            let criteria: serde_json::Map<String, serde_json::Value> = q["criteria"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| {
                    (
                        c["key"].as_str().unwrap().to_string(),
                        c["description"].clone(),
                    )
                })
                .collect();
            (
                json!({"type": "choice", "instructions": q["instructions"], "criteria": criteria}),
                q["ground_truth"].as_str().unwrap().to_string(),
            )
        }
        _ => (
            json!({"type": "noul", "instructions": q["instructions"]}),
            q["ground_truth"].as_bool().unwrap().to_string(),
        ),
    }
}

/// `vllm-srun adapt` trains heads on one generated family and writes a package that links the
/// test model's GGUF; served, a question asked with `decision_adapter: true` is answered by
/// its head, and on held-out cases of the same family (another seed) the heads beat the base
/// readout of the same weights, asked in the same requests. A question no head was trained on
/// is answered by the base.
#[tokio::test]
async fn decision_adapters_trained_by_adapt_beat_the_base_on_held_out_cases() {
    let root = std::env::temp_dir().join(format!("vllm-srun-adapt-{}", std::process::id()));
    std::fs::create_dir_all(&root).unwrap();
    let keep = ["queue", "is_angry"];
    let (train, held_out) = (root.join("train.jsonl"), root.join("held-out.jsonl"));
    generated("support_tickets", 48, 101, &keep, &train);
    generated("support_tickets", 24, 202, &keep, &held_out);
    let out = root.join("adapted");
    let status = std::process::Command::new(env!("CARGO_BIN_EXE_vllm-srun"))
        .args([
            "adapt",
            "--model",
            &test_model(),
            "--threads",
            &test_threads().to_string(),
            "--data",
        ])
        .arg(&train)
        .arg("--out")
        .arg(&out)
        .status()
        .unwrap();
    assert!(status.success());
    let cached = hub::resolve(&test_model(), true).unwrap();
    assert_eq!(
        std::fs::canonicalize(out.join("model.gguf")).unwrap(),
        std::fs::canonicalize(&cached.weights).unwrap(),
        "the package links the base's weights"
    );
    assert!(
        std::fs::symlink_metadata(out.join("model.gguf"))
            .unwrap()
            .file_type()
            .is_symlink(),
        "not a copy"
    );
    let file: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("decision_adapters.json")).unwrap())
            .unwrap();
    assert_eq!(file["adapters"].as_array().unwrap().len(), 2);

    let mut o = options();
    o.models = vec![out.to_string_lossy().into_owned()];
    o.generate = None;
    let s = start(o);
    let (_, m) = get(&s.url("/v1/models")).await;
    let declared = &m["models"][0]["card"]["decision_adapters"];
    assert_eq!(
        declared["default"], false,
        "written without --default-on: {declared}"
    );
    assert_eq!(
        declared["questions"].as_array().map(Vec::len),
        Some(2),
        "{declared}"
    );
    let mut right = std::collections::BTreeMap::<(&str, bool), usize>::new();
    let mut n = 0;
    for line in std::fs::read_to_string(&held_out).unwrap().lines() {
        let item: serde_json::Value = serde_json::from_str(line).unwrap();
        let mut questions = serde_json::Map::new();
        let mut truths = Vec::new();
        for id in keep {
            let (q, truth) = asked(&item["questions"][id]);
            for adapter in [true, false] {
                let mut q = q.clone();
                q["decision_adapter"] = json!(adapter);
                questions.insert(format!("{id}-{adapter}"), q);
            }
            truths.push((id, truth));
        }
        questions.insert(
            "untrained".into(),
            json!({"type": "noul", "instructions": "Does the customer mention an order number?",
                   "decision_adapter": true}),
        );
        let body = json!({"model": "adapted", "state": item["state"], "questions": questions});
        let (status, _, v) = post(&s.url("/v1/decisions"), &body).await;
        assert_eq!(status, 200, "{v}");
        let untrained = &v["answers"]["untrained"];
        assert!(untrained["noul"].is_number(), "answered by the base: {v}");
        for (id, truth) in &truths {
            for adapter in [true, false] {
                let a = &v["answers"][format!("{id}-{adapter}")];
                let said = match a["type"].as_str() {
                    Some("choice") => a["choice"].as_str().unwrap().to_string(),
                    _ => (a["noul"].as_f64().unwrap() > 0.5).to_string(),
                };
                if let Some(p) = a["probabilities"].as_object() {
                    let total: f64 = p.values().map(|x| x.as_f64().unwrap()).sum();
                    assert!((total - 1.0).abs() < 1e-6, "{a}");
                }
                *right.entry((id, adapter)).or_default() += usize::from(&said == truth);
            }
        }
        n += 1;
    }
    eprintln!("held-out right answers of {n} (question, adapter): {right:?}");
    let total = |adapter: bool| keep.iter().map(|id| right[&(*id, adapter)]).sum::<usize>();
    assert!(
        total(true) > total(false),
        "the adapters beat the base readout: {right:?} of {n}"
    );
    for id in keep {
        let (adapted, base) = (right[&(id, true)], right[&(id, false)]);
        assert!(
            adapted >= base,
            "{id}: the adapter ({adapted}/{n}) is not worse than the base readout ({base}/{n})"
        );
    }
    std::fs::remove_dir_all(&root).unwrap();
}

/// `vllm-srun adapt --model minilm-l6` trains heads on the encoder's vector of each state and
/// writes a package that links the encoder's files. Served, it answers the questions it was
/// trained on (right on held-out cases of another seed, in windows for a long state), refuses
/// any other with `decision_adapter_unsupported`, and lists only the types heads answer.
#[tokio::test]
async fn heads_on_an_encoder_answer_their_questions_and_refuse_others() {
    let root = std::env::temp_dir().join(format!("vllm-srun-heads-{}", std::process::id()));
    std::fs::create_dir_all(&root).unwrap();
    let keep = ["queue", "is_angry"];
    let (train, held_out) = (root.join("train.jsonl"), root.join("held-out.jsonl"));
    generated("support_tickets", 200, 101, &keep, &train);
    generated("support_tickets", 40, 202, &keep, &held_out);
    let out = root.join("heads");
    let status = std::process::Command::new(env!("CARGO_BIN_EXE_vllm-srun"))
        .args(["adapt", "--model", "minilm-l6", "--threads"])
        .arg(test_threads().to_string())
        .arg("--data")
        .arg(&train)
        .arg("--out")
        .arg(&out)
        .status()
        .unwrap();
    assert!(status.success());
    assert!(
        std::fs::symlink_metadata(out.join("model.safetensors"))
            .unwrap()
            .file_type()
            .is_symlink(),
        "the package links the encoder's weights, not a copy"
    );

    let mut o = options();
    o.models = vec![out.to_string_lossy().into_owned()];
    o.generate = None;
    let s = start(o);
    let (_, m) = get(&s.url("/v1/models")).await;
    let card = &m["models"][0]["card"];
    assert_eq!(
        card["question_types"],
        json!(["choice", "noul", "score"]),
        "{card}"
    );
    assert_eq!(
        card["decision_adapters"]["questions"]
            .as_array()
            .map(Vec::len),
        Some(2),
        "{card}"
    );
    let mut right = std::collections::BTreeMap::<&str, usize>::new();
    let mut n = 0;
    for line in std::fs::read_to_string(&held_out).unwrap().lines() {
        let item: serde_json::Value = serde_json::from_str(line).unwrap();
        let mut questions = serde_json::Map::new();
        let mut truths = Vec::new();
        for id in keep {
            let (q, truth) = asked(&item["questions"][id]);
            questions.insert(id.to_string(), q);
            truths.push((id, truth));
        }
        questions.insert(
            "untrained".into(),
            json!({"type": "noul", "instructions": "Does the customer mention an order number?"}),
        );
        let body = json!({"model": "heads", "state": item["state"], "questions": questions});
        let (status, _, v) = post(&s.url("/v1/decisions"), &body).await;
        assert_eq!(status, 200, "{v}");
        let untrained = &v["answers"]["untrained"];
        assert_eq!(untrained["error"], "invalid_question", "{v}");
        assert_eq!(untrained["reason"], "decision_adapter_unsupported", "{v}");
        for (id, truth) in &truths {
            let a = &v["answers"][*id];
            let said = match a["type"].as_str() {
                Some("choice") => a["choice"].as_str().unwrap().to_string(),
                _ => (a["noul"].as_f64().unwrap() > 0.5).to_string(),
            };
            *right.entry(id).or_default() += usize::from(&said == truth);
        }
        n += 1;
    }
    eprintln!("held-out right answers of {n}: {right:?}");
    assert!(right["queue"] * 10 >= n * 9, "{right:?} of {n}");
    assert!(right["is_angry"] * 10 >= n * 8, "{right:?} of {n}");

    // A long state (a held-out ticket eight times over) is read in windows, each by the
    // heads, on System One too.
    let first: serde_json::Value = serde_json::from_str(
        std::fs::read_to_string(&held_out)
            .unwrap()
            .lines()
            .next()
            .unwrap(),
    )
    .unwrap();
    let long = format!("{}\n", first["state"].as_str().unwrap()).repeat(8);
    let (mut q, truth) = asked(&first["questions"]["queue"]);
    q["overflow"] = json!("window");
    let body = json!({"model": "heads", "state": long, "questions": {"queue": q}});
    let (status, _, v) = post(&s.url("/v1/systemone"), &body).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["answers"]["queue"]["choice"], json!(truth), "{v}");
    assert!(
        v["usage"]["input_tokens"].as_u64().unwrap() > 510,
        "windows: {v}"
    );
    drop(s);

    // Heads that do not fit their backbone (trained on another vocabulary) fail the load.
    let file = out.join("decision_adapters.json");
    let mut heads: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    heads["vocab_size"] = json!(32000);
    std::fs::write(&file, heads.to_string()).unwrap();
    let mut o = options();
    o.models = vec![out.to_string_lossy().into_owned()];
    let s = start_unready(o);
    let m = failed_listing(&s).await;
    let err = m["models"][0]["last_error"]["message"].to_string();
    assert!(err.contains("32000-token vocabulary"), "{m}");
    std::fs::remove_dir_all(&root).unwrap();
}

/// `adapt --lexical ID` trains that question's head on the state's character n-grams: the
/// head carries its n-gram weights, answers held-out cases right on its own (no encoder read
/// of the state), reads a long state whole, and sits beside an encoder head in one package.
/// An id no case asks stops `adapt` before anything is written.
#[tokio::test]
async fn a_lexical_head_answers_from_the_texts_ngrams() {
    let root = std::env::temp_dir().join(format!("vllm-srun-lexical-{}", std::process::id()));
    std::fs::create_dir_all(&root).unwrap();
    let keep = ["queue", "is_angry"];
    let (train, held_out) = (root.join("train.jsonl"), root.join("held-out.jsonl"));
    generated("support_tickets", 200, 101, &keep, &train);
    generated("support_tickets", 40, 202, &keep, &held_out);
    let adapt = |lexical: &str, out: &std::path::Path| {
        std::process::Command::new(env!("CARGO_BIN_EXE_vllm-srun"))
            .args(["adapt", "--model", "minilm-l6", "--no-pull", "--threads"])
            .arg(test_threads().to_string())
            .args(["--lexical", lexical, "--data"])
            .arg(&train)
            .arg("--out")
            .arg(out)
            .output()
            .unwrap()
    };
    let missing = root.join("missing");
    let run = adapt("no_such_question", &missing);
    assert!(!run.status.success());
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(err.contains("no_such_question"), "{err}");
    assert!(!missing.exists(), "nothing is written");

    let out = root.join("lexical");
    assert!(adapt("is_angry", &out).status.success());
    let file: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("decision_adapters.json")).unwrap())
            .unwrap();
    let heads = file["adapters"].as_array().unwrap();
    let lexical = heads.iter().filter(|h| h.get("lexical").is_some()).count();
    assert_eq!(
        (heads.len(), lexical),
        (2, 1),
        "queue on the encoder, is_angry on n-grams"
    );

    let mut o = options();
    o.models = vec![out.to_string_lossy().into_owned()];
    o.generate = None;
    let s = start(o);
    let (mut right, mut n) = (0, 0);
    let mut first = None;
    for line in std::fs::read_to_string(&held_out).unwrap().lines() {
        let item: serde_json::Value = serde_json::from_str(line).unwrap();
        let (q, truth) = asked(&item["questions"]["is_angry"]);
        let body =
            json!({"model": "lexical", "state": item["state"], "questions": {"is_angry": q}});
        let (status, _, v) = post(&s.url("/v1/decisions"), &body).await;
        assert_eq!(status, 200, "{v}");
        let said = v["answers"]["is_angry"]["noul"].as_f64().unwrap() > 0.5;
        right += usize::from(said.to_string() == truth);
        n += 1;
        first.get_or_insert((item["state"].as_str().unwrap().to_string(), q, said));
    }
    eprintln!("lexical is_angry: {right} of {n} held-out cases right");
    assert!(right * 10 >= n * 8, "{right} of {n}");

    // Eight copies of a ticket have the n-grams of one in eight times the counts: the head
    // reads the long state whole and answers as it does for the ticket.
    let (state, mut q, said) = first.unwrap();
    q["overflow"] = json!("window");
    let body = json!({"model": "lexical", "state": format!("{state}\n").repeat(8),
                      "questions": {"is_angry": q}});
    let (status, _, v) = post(&s.url("/v1/decisions"), &body).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(
        v["answers"]["is_angry"]["noul"].as_f64().unwrap() > 0.5,
        said,
        "{v}"
    );
    drop(s);
    std::fs::remove_dir_all(&root).unwrap();
}

/// `adapt` stops at a malformed or contradictory training file with the file and line, and
/// writes nothing.
#[test]
fn adapt_refuses_a_bad_training_file_and_writes_nothing() {
    let root = std::env::temp_dir().join(format!("vllm-srun-bad-cases-{}", std::process::id()));
    std::fs::create_dir_all(&root).unwrap();
    let case = |state: &str, truth: &str| {
        json!({"state": state, "questions": {"mood": {"type": "choice", "instructions": "Mood?",
            "criteria": [{"key": "calm"}, {"key": "angry"}], "ground_truth": truth}}})
        .to_string()
    };
    let files = [
        (
            "broken.jsonl",
            format!(
                "{}\n{}\n{{\"state\": \"x\",\n",
                case("a", "calm"),
                case("b", "angry")
            ),
            ":3:",
        ),
        (
            "unknown-truth.jsonl",
            format!("{}\n{}\n", case("a", "calm"), case("b", "furious")),
            ":2:",
        ),
        (
            "contradictory.jsonl",
            format!(
                "{}\n{}\n{}\n",
                case("a", "calm"),
                case("b", "angry"),
                case("a", "angry")
            ),
            "contradictory.jsonl:1",
        ),
    ];
    for (name, text, names) in files {
        let data = root.join(name);
        std::fs::write(&data, text).unwrap();
        let out = root.join(format!("{name}.out"));
        let run = std::process::Command::new(env!("CARGO_BIN_EXE_vllm-srun"))
            .args(["adapt", "--model", "minilm-l6", "--no-pull", "--data"])
            .arg(&data)
            .arg("--out")
            .arg(&out)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&run.stderr);
        assert!(!run.status.success(), "{name}: {err}");
        assert!(
            err.contains(&format!("{name}{names}")) || err.contains(names),
            "{name}: {err}"
        );
        assert!(!out.exists(), "{name}: nothing is written");
    }
    std::fs::remove_dir_all(&root).unwrap();
}

/// `adapt --teacher PACKAGE` labels unlabelled cases with the teacher's answers and trains on
/// them: a student distilled from a heads package on cases without truths answers held-out
/// cases as its teacher does, and as right.
#[tokio::test]
async fn a_student_distilled_from_a_teacher_answers_as_it_does() {
    let root = std::env::temp_dir().join(format!("vllm-srun-distil-{}", std::process::id()));
    std::fs::create_dir_all(&root).unwrap();
    let keep = ["queue"];
    let (train, unlabelled, held_out) = (
        root.join("train.jsonl"),
        root.join("unlabelled.jsonl"),
        root.join("held-out.jsonl"),
    );
    generated("support_tickets", 120, 101, &keep, &train);
    generated("support_tickets", 120, 303, &keep, &unlabelled);
    generated("support_tickets", 40, 202, &keep, &held_out);
    // No truths in the student's cases.
    let stripped: String = std::fs::read_to_string(&unlabelled)
        .unwrap()
        .lines()
        .map(|l| {
            let mut item: serde_json::Value = serde_json::from_str(l).unwrap();
            item["questions"]["queue"]["ground_truth"] = serde_json::Value::Null;
            item.to_string() + "\n"
        })
        .collect();
    std::fs::write(&unlabelled, stripped).unwrap();
    let adapt =
        |data: &std::path::Path, out: &std::path::Path, teacher: Option<&std::path::Path>| {
            let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_vllm-srun"));
            c.args(["adapt", "--model", "minilm-l6", "--threads"])
                .arg(test_threads().to_string())
                .arg("--data")
                .arg(data)
                .arg("--out")
                .arg(out);
            if let Some(t) = teacher {
                c.arg("--teacher").arg(t);
            }
            assert!(c.status().unwrap().success());
        };
    let (teacher, student) = (root.join("teacher"), root.join("student"));
    adapt(&train, &teacher, None);
    adapt(&unlabelled, &student, Some(&teacher));

    let mut o = options();
    o.models = vec![
        teacher.to_string_lossy().into_owned(),
        student.to_string_lossy().into_owned(),
    ];
    o.generate = None;
    let s = start(o);
    let (mut same, mut right, mut n) = (0, [0, 0], 0);
    for line in std::fs::read_to_string(&held_out).unwrap().lines() {
        let item: serde_json::Value = serde_json::from_str(line).unwrap();
        let (q, truth) = asked(&item["questions"]["queue"]);
        let mut said = Vec::new();
        for (i, model) in ["teacher", "student"].iter().enumerate() {
            let body = json!({"model": model, "state": item["state"], "questions": {"queue": q}});
            let (status, _, v) = post(&s.url("/v1/decisions"), &body).await;
            assert_eq!(status, 200, "{v}");
            let choice = v["answers"]["queue"]["choice"]
                .as_str()
                .unwrap()
                .to_string();
            right[i] += usize::from(choice == truth);
            said.push(choice);
        }
        same += usize::from(said[0] == said[1]);
        n += 1;
    }
    eprintln!("of {n} held-out cases: the same answer {same}, right (teacher, student) {right:?}");
    assert!(
        same * 10 >= n * 9,
        "the student answers as its teacher: {same} of {n}"
    );
    assert!(
        right[1] + 2 >= right[0],
        "as right as its teacher: {right:?} of {n}"
    );
    std::fs::remove_dir_all(&root).unwrap();
}

/// The `pii` preset on the catalogue's span head (`minilm-l6-pii`): spans with code-point
/// offsets (after emoji and CJK), the telephone number found, a label the head was
/// not trained on refused, and questions of other types refused: it answers nothing else.
#[tokio::test]
async fn a_span_head_answers_the_pii_preset_and_refuses_other_labels() {
    let mut o = options();
    o.models = vec!["minilm-l6-pii".into()];
    o.generate = None;
    let s = start(o);
    let (_, m) = get(&s.url("/v1/models")).await;
    let card = &m["models"][0]["card"];
    assert_eq!(card["question_types"], json!(["span"]), "{card}");
    assert_eq!(card["presets"], json!(["pii"]), "{card}");
    let ask = |state: &str, q: serde_json::Value| json!({"model": "minilm-l6-pii", "state": state, "questions": {"pii": q}});
    let text = "…call +1 415 555 0199 before Friday.";
    let (status, _, v) = post(
        &s.url("/v1/decisions"),
        &ask(text, json!({"preset": "pii"})),
    )
    .await;
    assert_eq!(status, 200, "{v}");
    let found: Vec<(&str, &str)> = v["spans"]["pii"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["label"].as_str().unwrap(), s["text"].as_str().unwrap()))
        .collect();
    assert!(found.contains(&("PHONE_NUMBER", "+1 415 555 0199")), "{v}");
    // A card number is found by its form after words the head never saw before one.
    let (_, _, v) = post(
        &s.url("/v1/decisions"),
        &ask(
            "We charged the card ending in 5555 5555 5555 4444 yesterday.",
            json!({"preset": "pii"}),
        ),
    )
    .await;
    assert!(
        v["spans"]["pii"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["label"] == "CREDIT_CARD" && s["text"] == "5555 5555 5555 4444"),
        "{v}"
    );
    // Offsets count code points, after an emoji and CJK characters.
    let text = "😀 東京: write to ana.lima@example.org today";
    let (status, _, v) = post(
        &s.url("/v1/systemone"),
        &ask(text, json!({"preset": "pii"})),
    )
    .await;
    assert_eq!(status, 200, "{v}");
    let email = v["spans"]["pii"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["label"] == "EMAIL_ADDRESS")
        .unwrap_or_else(|| panic!("{v}"));
    let (start, end) = (
        email["start"].as_u64().unwrap(),
        email["end"].as_u64().unwrap(),
    );
    let chars: Vec<char> = text.chars().collect();
    let at: String = chars[start as usize..end as usize].iter().collect();
    assert_eq!(
        (at.as_str(), email["text"].as_str()),
        ("ana.lima@example.org", Some("ana.lima@example.org"))
    );
    // A label the head names, asked alone, finds only that label.
    let phone = json!({"type": "span", "criteria": {"PHONE_NUMBER": "a telephone number"}});
    let (_, _, v) = post(
        &s.url("/v1/decisions"),
        &ask("Ring 020 7946 0958, Ana.", phone),
    )
    .await;
    let spans = v["spans"]["pii"].as_array().unwrap();
    assert!(
        spans.iter().all(|s| s["label"] == "PHONE_NUMBER") && !spans.is_empty(),
        "{v}"
    );
    // A label it was not trained on, and other question types, are refused in place.
    let body = json!({"model": "minilm-l6-pii", "state": "Ana bought a kettle.", "questions": {
        "pii": {"preset": "pii"},
        "product": {"type": "span", "criteria": {"PRODUCT": "a product name"}},
        "phone": {"type": "noul", "instructions": "Is a phone number given?"}}});
    let (status, _, v) = post(&s.url("/v1/decisions"), &body).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["answers"]["product"]["error"], "invalid_question", "{v}");
    assert_eq!(
        v["answers"]["product"]["reason"], "decision_adapter_unsupported",
        "{v}"
    );
    assert_eq!(v["answers"]["phone"]["error"], "invalid_question", "{v}");
    assert!(v["answers"]["pii"]["error"].is_null(), "{v}");
}
