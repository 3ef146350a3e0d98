//! The readout on a backend whose logits a test scripts: which token answers which label, how
//! spellings add up, temperatures and `temperature_by_questions`, choices read by name or by
//! letter, score levels in order. A swapped Yes/No, a shifted option or reversed levels fail
//! here without a real model.

use std::sync::Arc;
use std::time::Instant;

use protocol::request::{parse_decision_body, Schema};
use serde_json::{json, Value};

use crate::decision::{Decision, DecisionModel};
use crate::fake::{table, Script};
use crate::package::{DecisionConfig, TemperatureByQuestions};

fn model(config: DecisionConfig, script: Script) -> DecisionModel {
    crate::fake::model_named("fake", config, script).expect("the fake model loads")
}

/// The answers of one request, as the wire shows them.
fn ask(m: &DecisionModel, state: &str, questions: Value) -> Value {
    whole(m, state, questions)["answers"].clone()
}

/// The whole response to one request.
fn whole(m: &DecisionModel, state: &str, questions: Value) -> Value {
    let body = parse_decision_body(
        &json!({"state": state, "questions": questions}),
        Schema::Internal,
    )
    .expect("a valid body");
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    match rt.block_on(m.decide(&body, Instant::now())) {
        Ok((Decision::Single(r), _)) => serde_json::to_value(r).expect("json"),
        other => panic!("not one answer: {other:?}"),
    }
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9
}

/// The share of the `yes` logits in a softmax at temperature `t` over both groups.
fn share(yes: &[f64], no: &[f64], t: f64) -> f64 {
    let w = |xs: &[f64]| xs.iter().map(|x| (x / t).exp()).sum::<f64>();
    w(yes) / (w(yes) + w(no))
}

#[test]
fn yes_is_yes_and_its_spellings_add_up() {
    let m = model(
        DecisionConfig::default(),
        table(&[("Yes", 2.0), ("yes", 1.0), ("No", 0.5), ("no", -1.0)]),
    );
    let a = ask(
        &m,
        "It rains.",
        json!({"q": {"type": "noul", "instructions": "Rain?"}}),
    );
    let p = a["q"]["noul"].as_f64().expect("noul");
    // " Yes" is a candidate too, at -200.
    let want = share(&[2.0, 1.0], &[0.5, -1.0], 1.0);
    assert!((p - want).abs() < 1e-8, "p(yes) {p}, want {want}");
    // The other way round: a model that says No is answered no.
    let m = model(
        DecisionConfig::default(),
        table(&[("Yes", -1.0), ("No", 3.0)]),
    );
    let a = ask(
        &m,
        "It is dry.",
        json!({"q": {"type": "noul", "instructions": "Rain?"}}),
    );
    assert!(a["q"]["noul"].as_f64().expect("noul") < 0.05, "{a}");
}

#[test]
fn temperatures_act_per_type_and_by_question_count() {
    let mut config = DecisionConfig::default();
    config.temperature.noul = 2.0;
    let m = model(config.clone(), table(&[("Yes", 2.0), ("No", 0.0)]));
    let q = json!({"q": {"type": "noul", "instructions": "Rain?"}});
    let p = ask(&m, "x", q.clone())["q"]["noul"].as_f64().expect("noul");
    assert!((p - share(&[2.0], &[0.0], 2.0)).abs() < 1e-8, "{p}");

    // One question reads at 0.5, two or more at 4.
    config.temperature_by_questions = Some(TemperatureByQuestions {
        max_questions: vec![1],
        temperature: vec![0.5, 4.0],
    });
    let m = model(config, table(&[("Yes", 2.0), ("No", 0.0)]));
    let one = ask(&m, "x", q)["q"]["noul"].as_f64().expect("noul");
    assert!((one - share(&[2.0], &[0.0], 0.5)).abs() < 1e-8, "{one}");
    let two = ask(
        &m,
        "x",
        json!({"q": {"type": "noul", "instructions": "Rain?"},
               "r": {"type": "noul", "instructions": "Snow?"}}),
    );
    for id in ["q", "r"] {
        let p = two[id]["noul"].as_f64().expect("noul");
        assert!((p - share(&[2.0], &[0.0], 4.0)).abs() < 1e-8, "{id}: {p}");
    }
}

/// The state a scripted model reads in its context: what stands between `Text:` and the
/// blank line after it.
fn state_of(context: &str) -> String {
    context
        .split("Text:\n")
        .nth(1)
        .and_then(|s| s.split("\n\n").next())
        .unwrap_or("")
        .to_string()
}

/// A model that answers a choice with whatever option the text names: by the name's first
/// letter when the options are read by name, by the option's letter otherwise.
fn names_what_it_reads() -> Script {
    Arc::new(|context: &str, candidates: &[String]| {
        let state = state_of(context);
        let block = context.rsplit("Options:\n").next().unwrap_or("");
        // Each option line's readout token: "- name: ..." → the name's first byte,
        // "B. name: ..." → the letter.
        let mut said: Option<String> = None;
        for line in block.lines() {
            let (token, name) = if let Some(rest) = line.strip_prefix("- ") {
                (
                    rest.get(..1).unwrap_or(""),
                    rest.split(':').next().unwrap_or(""),
                )
            } else if let Some((code, rest)) = line.split_once(". ") {
                (code, rest.split(':').next().unwrap_or(""))
            } else {
                continue;
            };
            if !name.is_empty() && state.contains(name) {
                said = Some(token.to_string());
            }
        }
        candidates
            .iter()
            .map(|c| if Some(c) == said.as_ref() { 4.0 } else { 0.0 })
            .collect()
    })
}

/// A meaning longer than the model answers with by name: its options are read by letter.
fn long(name: &str) -> String {
    format!("{name}{}", " and more".repeat(12))
}

#[test]
fn a_choice_is_answered_with_the_option_the_model_names() {
    let m = model(DecisionConfig::default(), names_what_it_reads());
    // Short meanings are read by name (punctuation and all); long ones by letter.
    let (s, c, f) = (long("sports"), long("cooking"), long("finance"));
    for criteria in [
        json!({"sports": null, "cooking": null, "finance": null}),
        json!({"sports!": null, "cooking!": null, "finance!": null}),
        json!({s: null, c: null, f: null}),
    ] {
        let keys: Vec<String> = criteria.as_object().expect("map").keys().cloned().collect();
        for (i, key) in keys.iter().enumerate() {
            let a = ask(
                &m,
                &format!("a text about {key}"),
                json!({"t": {"type": "choice", "instructions": "Topic?", "criteria": criteria}}),
            );
            assert_eq!(a["t"]["choice"], json!(key), "{a}");
            let p = &a["t"]["probabilities"];
            let want = 4f64.exp() / (4f64.exp() + 2.0);
            assert!(close(p[key].as_f64().expect("p"), want), "option {i}: {a}");
        }
    }
}

#[test]
fn renaming_keys_does_not_move_a_choice() {
    // The model reads and answers with each option's meaning (its description, or its key
    // where it has none): keys spelled as words, letters, digits or ids, in any order, give
    // the same distribution bit for bit, read by name or by letter.
    let m = model(DecisionConfig::default(), names_what_it_reads());
    for [s, c, f] in [
        ["sports", "cooking", "finance"].map(String::from),
        [long("sports"), long("cooking"), long("finance")],
    ] {
        let by_meaning = |criteria: Value| -> Vec<(String, f64)> {
            let a = ask(
                &m,
                &format!("a text about {c}"),
                json!({"t": {"type": "choice", "instructions": "Topic?", "criteria": criteria.clone()}}),
            );
            let p = &a["t"]["probabilities"];
            let keyed = criteria.as_object().expect("map");
            let mut out: Vec<(String, f64)> = keyed
                .iter()
                .map(|(k, d)| {
                    let meaning = d.as_str().unwrap_or(k).to_string();
                    (meaning, p[k].as_f64().expect("p"))
                })
                .collect();
            out.sort_by(|a, b| a.0.cmp(&b.0));
            out
        };
        let words = by_meaning(json!({&s: null, &c: null, &f: null}));
        assert!(words.iter().any(|(k, p)| k == &c && *p > 0.9), "{words:?}");
        for renamed in [
            json!({"a": s, "b": c, "c": f}),
            json!({"1": s, "2": c, "3": f}),
            json!({"zz9": s, "k2": c, "a0f": f}),
            json!({"x": f, "y": s, "z": c}),
            json!({"sports": f, "cooking": s, "finance": c}),
        ] {
            assert_eq!(by_meaning(renamed.clone()), words, "{renamed}");
        }
    }
}

#[test]
fn a_set_label_is_read_by_its_meaning() {
    // A label's key is not shown: a set answers alike whatever its labels are called.
    let said = |context: &str, candidates: &[String]| -> Vec<f32> {
        let label = context.rsplit("Label: ").next().unwrap_or("");
        let yes = label.starts_with("refund");
        candidates
            .iter()
            .map(|c| match (c.as_str(), yes) {
                ("Yes", true) | ("No", false) => 2.0,
                _ => 0.0,
            })
            .collect()
    };
    let m = model(DecisionConfig::default(), Arc::new(said));
    let a = whole(
        &m,
        "x",
        json!({"s": {"type": "set", "criteria": {"refund": null, "late": null}}}),
    );
    let b = whole(
        &m,
        "x",
        json!({"s": {"type": "set", "criteria": {"L1": "refund", "L2": "late"}}}),
    );
    let (pa, pb) = (
        &a["sets"]["s"]["probabilities"],
        &b["sets"]["s"]["probabilities"],
    );
    assert!(pa["refund"].as_f64().expect("p") > 0.5, "{a}");
    assert!(pa["late"].as_f64().expect("p") < 0.5, "{a}");
    assert_eq!(pa["refund"], pb["L1"], "{a} {b}");
    assert_eq!(pa["late"], pb["L2"], "{a} {b}");
}

#[test]
fn score_levels_keep_their_order() {
    // Short levels are read by what they say (here their first letters), long ones by their
    // number; either way level i is the i-th level the client listed.
    let (low, mid, high) = (long("low"), long("mid"), long("high"));
    for (levels, tokens) in [
        (["low", "mid", "high"], ["l", "m", "h"]),
        ([low.as_str(), mid.as_str(), high.as_str()], ["0", "1", "2"]),
    ] {
        let m = model(
            DecisionConfig::default(),
            table(&[(tokens[0], 0.0), (tokens[1], 1.0), (tokens[2], 3.0)]),
        );
        let a = ask(
            &m,
            "x",
            json!({"s": {"type": "score", "instructions": "How much?", "criteria": levels}}),
        );
        let p = &a["s"]["probabilities"];
        let z = 1.0 + 1f64.exp() + 3f64.exp();
        for (level, logit) in [("0", 0.0f64), ("1", 1.0), ("2", 3.0)] {
            assert!(close(p[level].as_f64().expect("p"), logit.exp() / z), "{a}");
        }
        let expected = (1f64.exp() + 2.0 * 3f64.exp()) / z;
        assert!(
            close(a["s"]["score"].as_f64().expect("score"), expected),
            "{a}"
        );
    }
}

/// A model that knows nothing but the places of a list: the option shown first gets logit 3,
/// the second 1, the rest 0, whether it answers by name or by letter.
fn favours_first_shown(header: &'static str) -> Script {
    Arc::new(move |context: &str, candidates: &[String]| {
        let block = context.rsplit(header).next().unwrap_or("");
        let tokens: Vec<String> = block
            .lines()
            .filter_map(|line| match line.strip_prefix("- ") {
                Some(rest) => rest.get(..1).map(str::to_string),
                None => line.split_once(". ").map(|(code, _)| code.to_string()),
            })
            .collect();
        candidates
            .iter()
            .map(|c| match tokens.iter().position(|t| t == c) {
                Some(0) => 3.0,
                Some(1) => 1.0,
                Some(_) => 0.0,
                None => -200.0,
            })
            .collect()
    })
}

fn favours_places() -> Script {
    favours_first_shown("Options:\n")
}

fn choice_probabilities(m: &DecisionModel, criteria: Value) -> Vec<(String, f64)> {
    let a = ask(
        m,
        "x",
        json!({"t": {"type": "choice", "instructions": "Which?", "criteria": criteria}}),
    );
    let p = a["t"]["probabilities"].as_object().expect("probabilities");
    let mut out: Vec<(String, f64)> = p
        .iter()
        .map(|(k, v)| (k.clone(), v.as_f64().expect("p")))
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

#[test]
fn the_order_options_come_in_does_not_move_a_choice() {
    let m = model(DecisionConfig::default(), favours_places());
    let (lc, ld, le) = (long("cat"), long("dog"), long("eel"));
    for names in [
        ["cat", "dog", "eel"],
        [lc.as_str(), ld.as_str(), le.as_str()],
    ] {
        let [a, b, c] = names;
        let one = choice_probabilities(&m, json!({a: null, b: null, c: null}));
        for other in [
            json!({c: null, b: null, a: null}),
            json!({b: null, c: null, a: null}),
        ] {
            assert_eq!(choice_probabilities(&m, other), one, "{names:?}");
        }
        // One order only: the favoured place still shows.
        assert!(one[0].1 > 0.5, "{one:?}");
    }
}

#[test]
fn a_full_turn_of_orders_cancels_a_place_bias() {
    let config = DecisionConfig {
        choice_orders: 3,
        ..DecisionConfig::default()
    };
    let m = model(config, favours_places());
    for criteria in [
        json!({"cat": null, "dog": null, "eel": null}),
        json!({"cat!": null, "dog!": null, "eel!": null}),
    ] {
        for (k, p) in choice_probabilities(&m, criteria) {
            assert!((p - 1.0 / 3.0).abs() < 1e-9, "{k}: {p}");
        }
    }
    // Two turns of three places: each option is seen at two places, and the answer is the
    // geometric mean of the two readings (renormalised).
    let config = DecisionConfig {
        choice_orders: 2,
        ..DecisionConfig::default()
    };
    let m = model(config, favours_places());
    let got = choice_probabilities(&m, json!({"cat!": null, "dog!": null, "eel!": null}));
    let z = 3f64.exp() + 1f64.exp() + 1.0;
    let first = [3f64.exp() / z, 1f64.exp() / z, 1.0 / z];
    // Turn 0 shows cat, dog, eel; turn 1 (shift 1) shows dog, eel, cat.
    let second = [1.0 / z, 3f64.exp() / z, 1f64.exp() / z];
    let g: Vec<f64> = (0..3).map(|i| (first[i] * second[i]).sqrt()).collect();
    let s: f64 = g.iter().sum();
    for (i, (k, p)) in got.iter().enumerate() {
        assert!(close(*p, g[i] / s), "{k}: {p} vs {}", g[i] / s);
    }
}

/// A script that writes `answer` (then ends the turn) as the assistant's reply, whatever the
/// candidates: each candidate that continues it gets 10, the rest 0.
fn writes(answer: &'static str) -> Script {
    Arc::new(move |context, candidates| {
        let so_far = context
            .rsplit("<|im_start|>assistant\n")
            .next()
            .unwrap_or_default();
        candidates
            .iter()
            .map(|c| {
                let next = if c == "<|im_end|>" {
                    so_far == answer
                } else {
                    answer.starts_with(&format!("{so_far}{c}"))
                };
                if next {
                    10.0
                } else {
                    0.0
                }
            })
            .collect()
    })
}

#[test]
fn a_span_is_what_the_model_copies_found_where_it_stands() {
    let m = model(DecisionConfig::default(), writes("bob@x.io\nbob"));
    let v = whole(
        &m,
        "mail bob@x.io, ask bob",
        json!({"e": {"type": "span", "criteria": {"EMAIL": "an email address"}, "threshold": 0.0},
               "preset": {"type": "span", "criteria": {"EMAIL_ADDRESS": null}, "threshold": 0.0}}),
    );
    let spans = v["spans"]["e"].as_array().expect("spans");
    // Two lines copied: the email, and `bob`, which occurs twice; the `bob` inside the email
    // overlaps the email's place and is dropped there.
    let places: Vec<(u64, u64, &str)> = spans
        .iter()
        .map(|s| {
            (
                s["start"].as_u64().unwrap(),
                s["end"].as_u64().unwrap(),
                s["text"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(places, vec![(5, 13, "bob@x.io"), (19, 22, "bob")], "{v}");
    let p = spans[0]["probability"].as_f64().unwrap();
    assert!(p > 0.9 && p < 1.0, "{v}");
    let best = spans
        .iter()
        .map(|s| s["probability"].as_f64().unwrap())
        .fold(0.0, f64::max);
    assert_eq!(v["answers"]["e"]["noul"], json!(best));
    assert_eq!(v["thresholds"]["e"], json!(0.0));
    // Under the preset's `EMAIL_ADDRESS` a span must have the label's form
    // (`span::may_hold`): `bob` is not an email address. Under the client's own label it stays.
    let texts: Vec<&str> = v["spans"]["preset"]
        .as_array()
        .expect("spans")
        .iter()
        .map(|s| s["text"].as_str().unwrap())
        .collect();
    assert_eq!(texts, ["bob@x.io"], "{v}");
}

#[test]
fn a_model_that_answers_none_finds_no_span() {
    let m = model(DecisionConfig::default(), writes("None"));
    let v = whole(
        &m,
        "mail bob@x.io",
        json!({"e": {"type": "span", "criteria": {"EMAIL": "an email address"}}}),
    );
    assert_eq!(v["spans"]["e"], json!([]), "{v}");
    assert_eq!(v["answers"]["e"]["noul"], json!(0.0));
    assert_eq!(v["thresholds"]["e"], json!(0.5));
}

/// A score model that leans to level 2 whatever the text (logit 2) and reads the level a
/// text names (logit 1.5).
fn leans_to_two() -> Script {
    Arc::new(|context: &str, candidates: &[String]| {
        let state = state_of(context);
        candidates
            .iter()
            .map(|c| {
                let lean = if c == "2" { 2.0 } else { 0.0 };
                let read = if state.contains(&format!("level {c}")) {
                    1.5
                } else {
                    0.0
                };
                lean + read
            })
            .collect()
    })
}

/// The most probable level of a score answer.
fn level(a: &Value) -> String {
    let p = a["probabilities"].as_object().expect("probabilities");
    p.iter()
        .max_by(|x, y| x.1.as_f64().partial_cmp(&y.1.as_f64()).expect("numbers"))
        .map(|(k, _)| k.clone())
        .expect("levels")
}

#[test]
fn content_free_calibration_divides_out_what_the_empty_state_says() {
    // Levels long enough to be read by number (`leans_to_two` reads digits).
    let levels = [long("a"), long("b"), long("c")];
    let q = json!({"s": {"type": "score", "instructions": "Which level?", "criteria": levels}});
    let plain = model(DecisionConfig::default(), leans_to_two());
    assert_eq!(level(&ask(&plain, "this is level 0", q.clone())["s"]), "2");
    let mut config = DecisionConfig {
        content_free: vec!["score".into()],
        ..Default::default()
    };
    config.temperature.score = 0.5;
    let m = model(config, leans_to_two());
    // Logits [1.5, 0, 2] less the empty state's [0, 0, 2], at temperature 0.5.
    let z = (3.0f64).exp() + 2.0;
    let first = ask(&m, "this is level 0", q.clone());
    assert_eq!(level(&first["s"]), "0", "{first}");
    let p0 = first["s"]["probabilities"]["0"].as_f64().expect("p");
    assert!((p0 - 3f64.exp() / z).abs() < 1e-6, "{first}");
    // The second time the empty-state answer is remembered: the same answer, bit for bit;
    // and beside another question, with other ids, the same again.
    assert_eq!(ask(&m, "this is level 0", q.clone()), first);
    let two = ask(
        &m,
        "this is level 0",
        json!({"n": {"type": "noul", "instructions": "Any?"},
               "t": {"type": "score", "instructions": "Which level?", "criteria": levels}}),
    );
    assert_eq!(two["t"], first["s"], "{two}");
    // Another question's empty state is its own.
    let other = ask(
        &m,
        "this is level 1",
        json!({"s": {"type": "score", "instructions": "Which one?", "criteria": levels}}),
    );
    assert_eq!(level(&other["s"]), "1", "{other}");
    // Nouls are not corrected this way: content_free names score only.
    let noul = json!({"n": {"type": "noul", "instructions": "Any?"}});
    assert_eq!(ask(&m, "x", noul.clone()), ask(&plain, "x", noul));
}

#[test]
fn a_noul_bias_lowers_yes_before_the_temperature() {
    let mut config = DecisionConfig {
        noul_bias: 0.7,
        ..Default::default()
    };
    config.temperature.noul = 0.5;
    let m = model(config, table(&[("Yes", 1.2), ("No", 0.3)]));
    let a = ask(
        &m,
        "x",
        json!({"q": {"type": "noul", "instructions": "Rain?"}}),
    );
    let p = a["q"]["noul"].as_f64().expect("noul");
    let want = share(&[1.2 - 0.7], &[0.3], 0.5);
    assert!((p - want).abs() < 1e-6, "p(yes) {p}, want {want}");
}

#[test]
fn a_noul_temperature_acts_on_yes_against_no_whatever_their_spellings() {
    let mut config = DecisionConfig::default();
    config.temperature.noul = 0.5;
    let m = model(
        config,
        table(&[("Yes", 2.0), ("yes", 1.0), ("No", 0.5), ("no", -1.0)]),
    );
    let a = ask(
        &m,
        "x",
        json!({"q": {"type": "noul", "instructions": "Rain?"}}),
    );
    let p = a["q"]["noul"].as_f64().expect("noul");
    // Each side's spellings summed at temperature 1, then the pair at 0.5.
    let (yes, no) = (2f64.exp() + 1f64.exp(), 0.5f64.exp() + (-1f64).exp());
    let want = 1.0 / (1.0 + (no / yes).powf(2.0));
    assert!((p - want).abs() < 1e-6, "p(yes) {p}, want {want}");
}

#[test]
fn a_content_free_noul_divides_out_its_empty_state_and_keeps_its_bias_once() {
    // Leans to yes whatever the text (logit 1 against 0); reads "rain" as yes (1.5 more).
    let script: Script = Arc::new(|context: &str, candidates: &[String]| {
        let rain = state_of(context).contains("rain");
        candidates
            .iter()
            .map(|c| match c.as_str() {
                "Yes" => 1.0 + if rain { 1.5 } else { 0.0 },
                "No" => 0.0,
                _ => -200.0,
            })
            .collect()
    });
    let mut config = DecisionConfig {
        content_free: vec!["noul".into()],
        noul_bias: 0.25,
        ..Default::default()
    };
    config.temperature.noul = 0.5;
    let m = model(config, script);
    let q = json!({"q": {"type": "noul", "instructions": "Rain?"}});
    // Log-odds 2.5 less the empty state's 1, less the bias, at temperature 0.5.
    let p = ask(&m, "rain all day", q.clone())["q"]["noul"]
        .as_f64()
        .expect("noul");
    let want = share(&[2.5 - 1.0 - 0.25], &[0.0], 0.5);
    assert!((p - want).abs() < 1e-6, "p(yes) {p}, want {want}");
    // A dry text: log-odds 1 less 1 less the bias.
    let dry = ask(&m, "sunny", q.clone())["q"]["noul"]
        .as_f64()
        .expect("noul");
    let want = share(&[-0.25], &[0.0], 0.5);
    assert!((dry - want).abs() < 1e-6, "p(yes) {dry}, want {want}");
    // Remembered: the same bits again.
    assert_eq!(
        ask(&m, "rain all day", q.clone())["q"]["noul"].as_f64(),
        Some(p)
    );
}

#[test]
fn content_free_choices_keep_each_option_its_own_correction_in_any_order() {
    // Leans to "cooking" (its readout token "c") whatever the text; reads the named option.
    let reads = names_what_it_reads();
    let script: Script = Arc::new(move |context: &str, candidates: &[String]| {
        let mut l = reads(context, candidates);
        for (x, c) in l.iter_mut().zip(candidates) {
            if c == "c" {
                *x += 5.0;
            }
        }
        l
    });
    let config = DecisionConfig {
        content_free: vec!["choice".into()],
        ..Default::default()
    };
    let m = model(config, script);
    let ask_in = |criteria: Value| {
        ask(
            &m,
            "a text about finance",
            json!({"t": {"type": "choice", "instructions": "Topic?", "criteria": criteria}}),
        )
    };
    // The first order asked is the one remembered; the other must map by key, not place.
    let a = ask_in(json!({"sports": null, "cooking": null, "finance": null}));
    let b = ask_in(json!({"finance": null, "sports": null, "cooking": null}));
    assert_eq!(a["t"]["choice"], json!("finance"), "{a}");
    for key in ["sports", "cooking", "finance"] {
        let (pa, pb) = (&a["t"]["probabilities"][key], &b["t"]["probabilities"][key]);
        let d = pa.as_f64().expect("p") - pb.as_f64().expect("p");
        assert!(d.abs() < 1e-12, "{key}: {a} against {b}");
    }
    // Logits [0, 5, 4] less the empty state's [0, 5, 0].
    let p = a["t"]["probabilities"]["finance"].as_f64().expect("p");
    assert!((p - 4f64.exp() / (4f64.exp() + 2.0)).abs() < 1e-6, "{a}");
}

fn score_probabilities(m: &DecisionModel, levels: &[String]) -> Vec<f64> {
    let a = ask(
        m,
        "x",
        json!({"s": {"type": "score", "instructions": "How much?", "criteria": levels}}),
    );
    (0..levels.len())
        .map(|i| a["s"]["probabilities"][i.to_string()].as_f64().expect("p"))
        .collect()
}

#[test]
fn a_score_also_read_reversed_cancels_the_favour_of_the_first_level() {
    // Read by name (short levels) and by number (levels too long to be answered by name).
    let named: Vec<String> = ["Low", "Mid", "High"].map(String::from).to_vec();
    let long: Vec<String> = ["a", "b", "c"]
        .map(|x| format!("{x}{}", " the level's long description".repeat(5)))
        .to_vec();
    for levels in [named, long] {
        let once = model(DecisionConfig::default(), favours_first_shown("Levels:\n"));
        let p = score_probabilities(&once, &levels);
        assert!(
            p[0] > 0.8 && p[0] > p[2],
            "one view: the first level is favoured: {p:?}"
        );
        let both = model(
            DecisionConfig {
                score_orders: 2,
                ..DecisionConfig::default()
            },
            favours_first_shown("Levels:\n"),
        );
        let p = score_probabilities(&both, &levels);
        // View 0 reads [e^3, e, 1], view 1 (reversed) [1, e, e^3] over the levels: their
        // geometric mean is [e^1.5, e, e^1.5], renormalised.
        let z = 2.0 * 1.5f64.exp() + 1f64.exp();
        let want = [1.5f64.exp() / z, 1f64.exp() / z, 1.5f64.exp() / z];
        for (got, want) in p.iter().zip(want) {
            assert!((got - want).abs() < 1e-4, "{p:?} vs {want}");
        }
    }
}
