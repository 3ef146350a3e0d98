//! The integration tests: one binary (linking each file as a binary of its own cost more than
//! most tests take), one module per file. Each file starts the servers it needs: `common::shared()`
//! (the test model, shared by the files that use it), or a server of its own.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

mod abuse;
mod answers;
mod assets;
mod bombs;
mod budget;
mod calibration;
mod decisions;
mod encoders;
mod generate;
mod heads;
mod keys;
mod limits;
mod long_inputs;
mod packages;
mod pages;
mod qwen;
mod reasons;
mod router;
mod schema_v4;
mod spans;
mod sparrow;
