//! Box questions on a decision model with the NanoDet detector attached (`--detector`), on
//! Debian's darknet test photographs, end to end: the box answers hit the objects marked by
//! hand below (IoU ≥ 0.5), a target the picture does not hold gets a low confidence, and the
//! spec's reasons for box questions and images (worker-api.txt, "Box").

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::PathBuf;
use std::sync::OnceLock;

use base64::Engine as _;
use common::*;
use serde_json::{json, Value};

/// Where Debian's `darknet` package installs its test photographs (`VLLM_SRUN_TEST_PHOTOS`
/// overrides).
fn photo(name: &str) -> Vec<u8> {
    let dir = std::env::var_os("VLLM_SRUN_TEST_PHOTOS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/share/darknet/data"));
    std::fs::read(dir.join(name))
        .unwrap_or_else(|e| panic!("{name}: {e} (Debian's darknet package holds it)"))
}

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// The test model with the detector attached.
fn server() -> &'static TestServer {
    static S: OnceLock<TestServer> = OnceLock::new();
    S.get_or_init(|| {
        let mut o = deciding(&test_model());
        o.detectors = vec![(test_model(), "nanodet-coco".into())];
        start(o)
    })
}

/// Boxes marked by hand on the photographs, `[left, top, right, bottom]` as fractions.
const DOG: [f64; 4] = [0.17, 0.385, 0.40, 0.94];
const BICYCLE: [f64; 4] = [0.165, 0.245, 0.737, 0.728];
const PERSON: [f64; 4] = [0.30, 0.233, 0.427, 0.885];
/// The white horse in front, on the left of horses.jpg.
const LEFT_HORSE: [f64; 4] = [0.0, 0.38, 0.41, 0.80];

fn edges(answer: &Value) -> [f64; 4] {
    let b = &answer["box"];
    let f = |k: &str| b[k].as_f64().unwrap_or_else(|| panic!("{answer}: no {k}"));
    [f("left"), f("top"), f("right"), f("bottom")]
}

fn iou(a: &[f64; 4], b: &[f64; 4]) -> f64 {
    let w = (a[2].min(b[2]) - a[0].max(b[0])).max(0.0);
    let h = (a[3].min(b[3]) - a[1].max(b[1])).max(0.0);
    let area = |x: &[f64; 4]| (x[2] - x[0]) * (x[3] - x[1]);
    w * h / (area(a) + area(b) - w * h)
}

fn boxq(instructions: &str) -> Value {
    json!({"type": "box", "instructions": instructions})
}

/// One photograph in the state by asset, with `questions`.
fn about(name: &str, questions: Value) -> Value {
    json!({"state": "<photo>", "assets": {"<photo>": {"type": "image", "data_base64": b64(&photo(name))}},
        "questions": questions})
}

#[tokio::test]
async fn boxes_hit_the_objects_marked_by_hand() {
    let s = server();
    type Marked = &'static [(&'static str, [f64; 4])];
    let cases: [(&str, Value, Marked); 3] = [
        (
            "dog.jpg",
            json!({"dog": boxq("the dog"), "bike": boxq("the bicycle")}),
            &[("dog", DOG), ("bike", BICYCLE)],
        ),
        (
            "person.jpg",
            json!({"who": boxq("the person")}),
            &[("who", PERSON)],
        ),
        (
            "horses.jpg",
            json!({"left": boxq("the horse on the left")}),
            &[("left", LEFT_HORSE)],
        ),
    ];
    for (name, questions, marked) in cases {
        let (status, _, v) = post(&s.url("/v1/decisions"), &about(name, questions)).await;
        assert_eq!(status, 200, "{name}: {v}");
        for (id, want) in marked {
            let a = &v["answers"][id];
            assert_eq!(a["type"], "box", "{name} {id}: {a}");
            let got = edges(a);
            let overlap = iou(&got, want);
            assert!(
                overlap >= 0.5,
                "{name} {id}: {a} overlaps {want:?} by {overlap:.3}"
            );
            let c = a["confidence"].as_f64().unwrap();
            assert!(c > 0.2 && c <= 1.0, "{name} {id}: {a}");
        }
        // A kind named by its word reads no tokens.
        assert_eq!(v["usage"]["input_tokens"], 0, "{v}");
    }
    // The same on the System One route, the picture given in a multipart part.
    let bytes = photo("person.jpg");
    let request = json!({"state": "<p>", "assets": {"<p>": {"type": "image", "part": "photo"}},
        "questions": {"who": boxq("the woman")}});
    let (body, content_type) = multipart(&request, &[("photo", &bytes)]);
    let (status, _, v) = post_raw(
        &s.url("/v1/systemone"),
        body,
        &[("content-type", &content_type)],
    )
    .await;
    assert_eq!(status, 200, "{v}");
    assert!(iou(&edges(&v["answers"]["who"]), &PERSON) >= 0.5, "{v}");
}

#[tokio::test]
async fn a_target_the_picture_lacks_gets_a_box_with_a_low_confidence() {
    let s = server();
    let body = about(
        "dog.jpg",
        json!({"giraffe": boxq("the giraffe"), "rocket": boxq("the rocket on the launch pad")}),
    );
    let (status, _, v) = post(&s.url("/v1/decisions"), &body).await;
    assert_eq!(status, 200, "{v}");
    for id in ["giraffe", "rocket"] {
        let a = &v["answers"][id];
        assert_eq!(a["type"], "box", "{a}");
        let c = a["confidence"].as_f64().unwrap();
        assert!(c < 0.5, "{id}: {a}");
        let e = edges(a);
        assert!(e[0] < e[2] && e[1] < e[3], "{a}");
    }
    // "rocket" names none of the detector's kinds: the model read the target's kind.
    assert!(v["usage"]["input_tokens"].as_u64().unwrap() > 0, "{v}");
}

#[tokio::test]
async fn box_questions_fail_with_the_spec_reasons() {
    let s = server();
    let url = s.url("/v1/decisions");
    // No image: the only question fails, so the request is refused with its reason.
    let (status, _, v) = post(
        &url,
        &json!({"state": "a dog on a porch", "questions": {"w": boxq("the dog")}}),
    )
    .await;
    assert_eq!(
        (status, v["error"]["reason"].as_str()),
        (400, Some("box_needs_image")),
        "{v}"
    );
    // Two images in the state and none in the question.
    let img = json!({"type": "image", "data_base64": b64(&photo("dog.jpg"))});
    let two = json!({"state": "<a> <b>", "assets": {"<a>": img, "<b>": img},
        "questions": {"w": boxq("the dog")}});
    let (status, _, v) = post(&url, &two).await;
    assert_eq!(
        (status, v["error"]["reason"].as_str()),
        (400, Some("box_target_ambiguous")),
        "{v}"
    );
    // The question's own image settles it.
    let own = json!({"state": "<a> <b>", "assets": {"<a>": img, "<b>": img},
        "questions": {"w": boxq("the dog in <a>")}});
    let (status, _, v) = post(&url, &own).await;
    assert_eq!(status, 200, "{v}");
    assert!(iou(&edges(&v["answers"]["w"]), &DOG) >= 0.5, "{v}");
    // A malformed box question fails alone; a text question about a picture fails alone
    // (this model reads pictures only to locate), and the box is answered.
    let body = about(
        "dog.jpg",
        json!({"w": boxq("the dog"), "bad": {"type": "box", "instructions": "the dog", "criteria": {"a": null}},
            "sunny": {"type": "noul", "instructions": "Is it sunny?"}}),
    );
    let (status, _, v) = post(&url, &body).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["answers"]["w"]["type"], "box", "{v}");
    assert_eq!(v["answers"]["bad"]["reason"], "question_malformed", "{v}");
    assert_eq!(
        v["answers"]["sunny"]["reason"], "modality_unsupported",
        "{v}"
    );
    // Pixels that do not decode behind a good header fail the question with invalid_input.
    let mut cut = photo("dog.jpg");
    cut.truncate(600);
    let body = json!({"state": "<p>", "assets": {"<p>": {"type": "image", "data_base64": b64(&cut)}},
        "questions": {"w": boxq("the dog")}});
    let (status, _, v) = post(&url, &body).await;
    assert!(
        status == 400 || v["answers"]["w"]["error"] == "invalid_input",
        "{status} {v}"
    );
    // The model reads no videos.
    let (status, _, v) = post(
        &url,
        &json!({"state": "x", "videos": ["data:video/mp4;base64,AAAA"], "questions": {"w": boxq("the dog")}}),
    )
    .await;
    assert_eq!(status, 400, "{v}");
}

#[tokio::test]
async fn the_card_says_what_the_detector_finds() {
    let s = server();
    let (status, v) = get(&s.url("/v1/models")).await;
    assert_eq!(status, 200);
    let card = &v["models"][0]["card"];
    let types: Vec<&str> = card["question_types"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(types.contains(&"box"), "{card}");
    assert_eq!(card["modalities"], json!(["text", "image"]), "{card}");
    assert_eq!(card["detector"]["name"], "nanodet-coco");
    let kinds = card["detector"]["kinds"].as_array().unwrap();
    assert_eq!(kinds.len(), 80);
    assert!(kinds.contains(&json!("dog")) && kinds.contains(&json!("traffic light")));
}
