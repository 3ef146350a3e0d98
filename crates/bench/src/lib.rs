//! `vllm-srun-bench`: the runtime measured side by side, in one process, against what a user
//! would otherwise run on the same machine (plain llama.cpp on the same weights, llama-cpp-python's
//! server, the encoder's alternatives) and reported as medians and ratios: never as wall-clock
//! thresholds. Benchmark-only code lives here, so the served binary carries none of it.
//!
//! Each module is one family of measurements; [`common`] holds what they share and [`plain`]
//! the plain llama.cpp evaluator the decision and generation benchmarks are held against.

pub mod common;
pub mod decisions;
pub mod detector;
pub mod embeddings;
pub mod gateway;
pub mod generation;
pub mod plain;
pub mod router;
pub mod service;

pub use decisions::{adapters, heads, latency, long_inputs, spans, suite, views};
pub use detector::detector;
pub use embeddings::embeddings;
pub use gateway::gateway;
pub use generation::generation;
pub use router::{guard_turn, router_overhead, turns};
pub use service::service_costs;
