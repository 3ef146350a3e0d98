//! The response writers, one per API family, each with its error shape: JSON for the worker's
//! own endpoints and System One (`json`), msgpack or JSON for SIE (`sie`), OpenAI's bodies and
//! server-sent events (`openai`). Routes answer through these; nothing here imports a route.

pub(crate) mod json;
pub(crate) mod openai;
pub(crate) mod sie;
