//! Object detection on the CPU. A detector is a TensorFlow.js graph model run by
//! [`graph::Graph`] (a small interpreter over candle tensors), its input made from an RGB
//! picture and its outputs decoded into boxes by the model's own head rules
//! ([`nanodet`]).
//!
//! Architecture invariant: nothing here knows HTTP, requests or questions. A picture comes in
//! as pixels (decoding its file is `media`'s job); boxes go out as fractions of the picture
//! as it was given, with the detector's own scores (not calibrated probabilities: what a
//! box question answers is the engine's business).

pub mod graph;
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

/// An RGB picture: `pixels` holds `width × height` triples, row by row.
#[derive(Debug, Clone, Copy)]
pub struct Rgb<'a> {
    pub width: usize,
    pub height: usize,
    pub pixels: &'a [u8],
}
