//! Decision models: render a request into a tree of token sequences (system prompt once, the
//! state once, then one branch per question), queue it, and read typed answers from the logits
//! of each question's option labels.
//!
//! The steps, one module each, so each can be read and tested without HTTP:
//! - `load`: the label vocabulary, the worker with the system prompt, the exactness self-check;
//! - `plan`: one question's type checked, its block rendered and tokenized, its label trie;
//! - `views` and `prepare`: the state's views read within budget, each question placed on its
//!   roots (whole, truncated or in windows), the request's token limits;
//! - `merge`: branches asked twice in one forward (same tokens under the same parent)
//!   evaluated once, each read given its own candidates back;
//! - `readout`: answers read from the logits, windows combined, spans replayed, the response;
//! - `adapter`: heads a package trained per question, read from features at the answer
//!   position (logits of a spread of tokens, a linear image of the hidden state), or on an
//!   encoder's state vector; `lexical`: the character n-grams a head may read instead;
//! - `calibrate`: label-bias corrections a package asks for (empty-state division, noul bias);
//! - `contest`: places several labels of a span question claim, settled by a short second job;
//! - `target` and `locate`: box questions answered by the object detector a model carries.

pub mod adapter;
mod calibrate;
mod contest;
mod decide;
pub(crate) mod direct;
pub mod lexical;
mod load;
mod locate;
mod merge;
mod model;
mod moments;
mod plan;
mod prepare;
mod readout;
mod target;
mod views;

pub use locate::{calibration as box_calibration, BOX_VIDEO_MAX_SECONDS};
pub use model::{Decision, DecisionModel, Limits, Timings};
