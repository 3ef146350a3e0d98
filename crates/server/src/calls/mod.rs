//! Calls into the engine that more than one API family makes: a decision body answered as
//! `/v1/decisions` answers it (also a bundle task), the encoder cores (also bundle tasks and
//! SIE's score), and the generation plumbing (OpenAI's and SIE's generate). Below the routes:
//! nothing here imports a route module.

pub(crate) mod decide;
pub(crate) mod encode;
pub(crate) mod generate;

use engine::Timings;
use serde_json::Value;

use crate::error::ApiError;

/// What a core returns: the body, the model that answered, and its engine timings.
pub(crate) type CoreResult = Result<(Value, String, Timings), ApiError>;
