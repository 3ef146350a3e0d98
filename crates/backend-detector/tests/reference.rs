//! Each detector against the reference run of its original graph by TensorFlow.js itself
//! (`tools/nanodet_reference.js`, fixture `fixtures/nanodet.json`; `tools/centernet_reference.js`,
//! `fixtures/centernet.json`), on Debian's darknet test photographs decoded by `media` (the
//! reference read the same pixels): every object either side finds with a score of at least
//! 0.3 is found by the other too, same kind, its box overlapping by IoU ≥ 0.99 and its score
//! within 0.02.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::PathBuf;

use backend_detector::{CenterNet, Detection, NanoDet, Network, Rgb};
use engine::backend::iou;
use serde::Deserialize;

/// Where Debian's `darknet` package installs its test photographs (`VLLM_SRUN_TEST_PHOTOS`
/// overrides).
fn photos() -> PathBuf {
    std::env::var_os("VLLM_SRUN_TEST_PHOTOS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/share/darknet/data"))
}

#[derive(Debug, Deserialize)]
struct Reference {
    class: usize,
    score: f32,
    #[serde(rename = "box")]
    bbox: [f32; 4],
}

const SURE: f32 = 0.3;

/// A catalogue detector's package directory, fetched if need be.
fn package(id: &str) -> PathBuf {
    let resolved = hub::resolve(id, true).expect("the detector is fetched");
    resolved.dir.expect("a package directory")
}

#[test]
fn nanodet_boxes_match_the_reference_run_on_the_test_photographs() {
    let model = NanoDet::load(&package("nanodet-coco")).expect("the graph loads");
    same_as_reference(include_str!("fixtures/nanodet.json"), |picture| {
        model.detect(picture, 0.2, 0.5).unwrap()
    });
}

#[test]
fn centernet_boxes_match_the_reference_run_on_the_test_photographs() {
    let model = CenterNet::load(&package("centernet-coco")).expect("the graph loads");
    same_as_reference(include_str!("fixtures/centernet.json"), |picture| {
        model.detect(picture, 0.2, 0.5).unwrap()
    });
}

/// Every photograph of the fixture `json` read by `detect`, compared with the reference.
fn same_as_reference(json: &str, detect: impl Fn(Rgb<'_>) -> Vec<Detection>) {
    let fixture: BTreeMap<String, Vec<Reference>> = serde_json::from_str(json).unwrap();
    assert_eq!(fixture.len(), 6);
    for (name, want) in &fixture {
        let bytes = std::fs::read(photos().join(format!("{name}.jpg")))
            .unwrap_or_else(|e| panic!("{name}: {e} (Debian's darknet package holds it)"));
        let picture = media::decode_picture(&bytes, 50_000_000).unwrap();
        let got = detect(Rgb {
            width: picture.width,
            height: picture.height,
            pixels: &picture.rgb,
        });
        let mut worst = (1f32, 0f32);
        let mut matches = |a: &[f32; 4], class: usize, score: f32, other: &[Detection]| {
            let best = other
                .iter()
                .filter(|d| d.class == class)
                .map(|d| (iou(a, &d.bbox), (d.score - score).abs()))
                .max_by(|x, y| x.0.total_cmp(&y.0));
            if let Some((overlap, diff)) = best {
                worst = (worst.0.min(overlap), worst.1.max(diff));
            }
            best.is_some_and(|(overlap, diff)| overlap >= 0.99 && diff <= 0.02)
        };
        let theirs: Vec<Detection> = want
            .iter()
            .map(|r| Detection {
                class: r.class,
                score: r.score,
                bbox: r.bbox,
            })
            .collect();
        for r in want.iter().filter(|r| r.score >= SURE) {
            assert!(
                matches(&r.bbox, r.class, r.score, &got),
                "{name}: the reference's {r:?} is not among ours: {got:?}"
            );
        }
        for d in got.iter().filter(|d| d.score >= SURE) {
            assert!(
                matches(&d.bbox, d.class, d.score, &theirs),
                "{name}: our {d:?} is not among the reference's"
            );
        }
        eprintln!(
            "{name}: {} objects at {SURE} or more; lowest IoU {:.4}, largest score difference {:.4}",
            got.iter().filter(|d| d.score >= SURE).count(),
            worst.0,
            worst.1
        );
    }
}
