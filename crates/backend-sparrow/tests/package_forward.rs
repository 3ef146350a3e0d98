//! The forward against the package's own numpy forward: every probability of the recorded
//! cases (`tools/sparrow_fixtures.py`, both bundled models, all three question types,
//! text, structured and long states) within 1e-4, read through the engine as a request is.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Instant;

use backend_sparrow::SparrowModel;
use engine::{Decision, DecisionModel, ModelMeta};
use protocol::{Answer, Schema};
use serde_json::{json, Value};

fn model(id: &str) -> DecisionModel {
    let resolved = hub::resolve(id, true).expect("the catalogue model is fetched");
    let sparrow = SparrowModel::load(&resolved.weights).expect("the model loads");
    let config = sparrow.decision_config();
    let meta = ModelMeta {
        name: id.into(),
        description: String::new(),
        release_date: String::new(),
        revision: String::new(),
        sha256: None,
        aliases: Vec::new(),
    };
    DecisionModel::start_direct(meta, config, Arc::new(sparrow)).expect("the model starts")
}

/// The probabilities of the one answer, in option order (a noul's as `[false, true]`).
fn probabilities(answer: &Answer) -> Vec<f64> {
    match answer {
        Answer::Noul(n) => vec![1.0 - n.noul, n.noul],
        Answer::Choice(c) => c.probabilities.0.iter().map(|(_, p)| *p).collect(),
        Answer::Score(s) => s.probabilities.0.iter().map(|(_, p)| *p).collect(),
        other => panic!("unexpected answer {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn probabilities_match_the_package_within_1e4() {
    let fixtures: Value =
        serde_json::from_str(include_str!("fixtures/sparrow.json")).expect("fixtures parse");
    let cases = fixtures["cases"].as_array().expect("cases");
    assert!(cases.len() >= 200);
    let mut worst = 0.0f64;
    let mut checked = 0;
    for id in ["sparrow-nano", "sparrow-nano-robot"] {
        let m = model(id);
        assert_eq!(m.numerics, "exact");
        for case in cases.iter().filter(|c| c["model"] == id) {
            let body = json!({"state": case["state"], "questions": {"q": case["question"]}});
            let body = protocol::parse_decision_body(&body, Schema::Internal)
                .unwrap_or_else(|e| panic!("{case}: {e:?}"));
            let (decision, _) = m.decide(&body, Instant::now()).await.expect("decides");
            let Decision::Single(r) = decision else {
                panic!("a single answer")
            };
            let answer = &r.answers.0[0].1.answer;
            let got = probabilities(answer);
            let want: Vec<f64> = case["probabilities"]
                .as_array()
                .expect("probabilities")
                .iter()
                .map(|p| p.as_f64().expect("a number"))
                .collect();
            assert_eq!(got.len(), want.len(), "{case}");
            for (g, w) in got.iter().zip(&want) {
                let d = (g - w).abs();
                worst = worst.max(d);
                assert!(d < 1e-4, "{id} {case}: got {got:?}, the package {want:?}");
            }
            checked += 1;
        }
    }
    println!("{checked} questions, largest difference {worst:.2e}");
    assert_eq!(checked, cases.len());
}
