//! The decision engine: model packages and cards, the [`Backend`](backend::Backend) trait,
//! prompt rendering, readout (logits to typed answers) and the per-model scheduler.
//!
//! Knows nothing of HTTP. Depends on `protocol` for request and answer types.

pub mod backend;
pub mod budget;
pub mod decision;
pub mod encode;
pub mod error;
#[cfg(any(test, feature = "fake"))]
pub mod fake;
pub mod generate;
pub mod labels;
pub mod package;
pub mod recipes;
pub mod registry;
pub mod scheduler;
pub mod span;
pub mod wordpiece;

#[cfg(test)]
mod readout_tests;

pub use backend::{
    Backend, BackendError, BackendInfo, DirectBackend, DirectKind, DirectQuestion, Feed, Generator,
    Node, Read, Sampled, Sampling, Session, Token,
};
pub use decision::{adapter, lexical};
pub use decision::{Decision, DecisionModel, Limits, Timings};
pub use encode::{EncodeError, Encoder, EncoderInfo, EncoderModel, TagOverflow, Tagged};
pub use error::EngineError;
pub use generate::text::TextModel;
pub use generate::{GenEvent, GenerateConfig};
pub use package::{ConfigError, DecisionConfig, ModelMeta};
pub use registry::{Loaded, ModelKind, ModelState, Registry, Slot};
pub use scheduler::SchedulerConfig;
