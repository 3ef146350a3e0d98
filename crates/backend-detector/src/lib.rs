//! Object detection on the CPU. A detector is a TensorFlow.js graph model run by
//! [`graph::Graph`] (a small interpreter over candle tensors), its input made from an RGB
//! picture and its outputs decoded into boxes by the model's own head rules
//! ([`nanodet`], [`centernet`]).
//!
//! Architecture invariant: nothing here knows HTTP, requests or questions. A picture comes in
//! as pixels (decoding its file is `media`'s job); boxes go out as fractions of the picture
//! as it was given, with the detector's own scores (not calibrated probabilities: what a
//! box question answers is the engine's business). From the engine it takes only the
//! [`engine::backend::Detector`] trait, which [`NanoDet`] and [`CenterNet`] implement.

pub mod centernet;
pub mod coco;
mod conv;
pub mod graph;
mod kernels;
pub mod nanodet;

pub use centernet::CenterNet;
pub use coco::{Detection, COCO};
pub use nanodet::NanoDet;

/// Errors of loading or running a detector.
#[derive(Debug, thiserror::Error)]
pub enum DetectError {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("graph model: {0}")]
    Graph(String),
    #[error("tensor: {0}")]
    Tensor(#[from] candle_core::Error),
    #[error("picture: {0}")]
    Picture(String),
}

/// A detector network of this crate: its input made from a picture, its forward, and its
/// head's decoding of the flattened outputs into boxes. Finding the objects in a picture is
/// the three in turn, the same for every network.
pub trait Network {
    /// The network's input for a picture.
    fn input(&self, picture: Rgb<'_>) -> Result<candle_core::Tensor, DetectError>;

    /// The network's raw outputs, in the order its head reads them.
    fn forward(&self, input: candle_core::Tensor) -> Result<Vec<candle_core::Tensor>, DetectError>;

    /// The outputs (flattened) as boxes scored at least `min_score`, best first, after
    /// per-kind suppression above `iou`.
    fn decode(&self, outputs: &[Vec<f32>], min_score: f32, iou: f32) -> Vec<Detection>;

    /// Every object in the picture scored at least `min_score`, best first, after per-kind
    /// suppression above `iou`.
    fn detect(
        &self,
        picture: Rgb<'_>,
        min_score: f32,
        iou: f32,
    ) -> Result<Vec<Detection>, DetectError> {
        let outputs = self.forward(self.input(picture)?)?;
        let flat = outputs
            .iter()
            .map(|o| Ok(o.flatten_all()?.to_vec1::<f32>()?))
            .collect::<Result<Vec<_>, DetectError>>()?;
        Ok(self.decode(&flat, min_score, iou))
    }
}

/// Boxes the engine is handed: what a detector scores at least this surely (the engine keeps
/// what it needs), after suppression of same-kind boxes overlapping by more than half.
const ENGINE_MIN_SCORE: f32 = 0.05;
const ENGINE_IOU: f32 = 0.5;

/// The engine's `Detector` for a COCO detector of this crate: its catalogue name, COCO's
/// kinds, and its boxes at the engine's score floor and overlap.
macro_rules! coco_detector {
    ($model:ty, $name:literal) => {
        impl engine::backend::Detector for $model {
            fn name(&self) -> &str {
                $name
            }

            fn kinds(&self) -> &[&'static str] {
                &COCO
            }

            fn detect(
                &self,
                width: usize,
                height: usize,
                rgb: &[u8],
            ) -> Result<Vec<engine::backend::Found>, engine::BackendError> {
                let picture = Rgb {
                    width,
                    height,
                    pixels: rgb,
                };
                found(<$model as Network>::detect(
                    self,
                    picture,
                    ENGINE_MIN_SCORE,
                    ENGINE_IOU,
                ))
            }
        }
    };
}

coco_detector!(NanoDet, "nanodet-coco");
coco_detector!(CenterNet, "centernet-coco");

/// Detections as the engine takes them.
fn found(
    detections: Result<Vec<Detection>, DetectError>,
) -> Result<Vec<engine::backend::Found>, engine::BackendError> {
    let detections = detections.map_err(|e| engine::BackendError::Forward(e.to_string()))?;
    Ok(detections
        .into_iter()
        .map(|d| engine::backend::Found {
            kind: d.class,
            score: d.score,
            edges: d.bbox,
        })
        .collect())
}

/// The picture stretched to `size × size` (each axis on its own, no letterbox) by bilinear
/// interpolation with half-pixel centres ([`kernels::resize_bilinear`], in the picture's own
/// pixel-by-pixel order), as `size × size × 3` floats from 0 to 255.
fn stretched(picture: Rgb<'_>, size: usize) -> Result<Vec<f32>, DetectError> {
    let (w, h) = (picture.width, picture.height);
    if w == 0 || h == 0 || picture.pixels.len() != w * h * 3 {
        return Err(DetectError::Picture(format!(
            "{} bytes do not hold a {w}×{h} RGB picture",
            picture.pixels.len()
        )));
    }
    let rgb: Vec<f32> = picture.pixels.iter().map(|&b| f32::from(b)).collect();
    kernels::resize_bilinear(&rgb, (1, h, w, 3), (size, size), true)
        .ok_or_else(|| DetectError::Picture(format!("a {w}×{h} picture to {size}×{size}")))
}

/// An RGB picture: `pixels` holds `width × height` triples, row by row.
#[derive(Debug, Clone, Copy)]
pub struct Rgb<'a> {
    pub width: usize,
    pub height: usize,
    pub pixels: &'a [u8],
}
