//! Object detection on the CPU. A detector is a TensorFlow.js graph model run by
//! [`graph::Graph`] (a small interpreter over candle tensors), its input made from an RGB
//! picture and its outputs decoded into boxes by the model's own head rules
//! ([`nanodet`]).
//!
//! Architecture invariant: nothing here knows HTTP, requests or questions. A picture comes in
//! as pixels (decoding its file is `media`'s job); boxes go out as fractions of the picture
//! as it was given, with the detector's own scores (not calibrated probabilities: what a
//! box question answers is the engine's business). From the engine it takes only the
//! [`engine::backend::Detector`] trait, which [`NanoDet`] implements.

mod conv;
pub mod graph;
mod kernels;
pub mod nanodet;

pub use nanodet::{Detection, NanoDet, COCO};

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

/// Boxes the engine is handed: what NanoDet scores at least this surely (the engine keeps
/// what it needs), after suppression of same-kind boxes overlapping by more than half.
const ENGINE_MIN_SCORE: f32 = 0.05;
const ENGINE_IOU: f32 = 0.5;

impl engine::backend::Detector for NanoDet {
    fn name(&self) -> &str {
        "nanodet-coco"
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
        let found = NanoDet::detect(self, picture, ENGINE_MIN_SCORE, ENGINE_IOU)
            .map_err(|e| engine::BackendError::Forward(e.to_string()))?;
        Ok(found
            .into_iter()
            .map(|d| engine::backend::Found {
                kind: d.class,
                score: d.score,
                edges: d.bbox,
            })
            .collect())
    }
}

/// An RGB picture: `pixels` holds `width × height` triples, row by row.
#[derive(Debug, Clone, Copy)]
pub struct Rgb<'a> {
    pub width: usize,
    pub height: usize,
    pub pixels: &'a [u8],
}
