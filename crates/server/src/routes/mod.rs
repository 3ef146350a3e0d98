//! The routes, one module per API family. Each imports only the shared pieces below it
//! (`body`, `error`, `respond`, `calls`, `cards`, `timing`) and the engine, never another
//! route module (`tests/modgraph.py` checks it).

pub(crate) mod bundle;
pub(crate) mod decisions;
pub(crate) mod encoders;
pub(crate) mod gateway;
pub(crate) mod meta;
pub(crate) mod openai;
pub(crate) mod sie;
