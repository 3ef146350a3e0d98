//! Strict decoding of decision requests from JSON values.
//!
//! Request-level problems (a body that is not a request, an unknown member, a removed form) are
//! a [`ProtocolError`]; question-level problems become a [`QuestionFailure`] kept beside the
//! question's id, so the other questions are still answered.

mod body;
mod checked;
mod question;
mod wire;

pub use body::{parse_decision_body, parse_decision_body_with};
pub use checked::{
    meaning, Asked, DecisionBody, DecisionRequest, MediaTarget, Options, Overflow, Question,
    QuestionKind, QuestionSlot, Role, Roles, Schema, Window,
};
pub use question::parse_question;
pub use wire::{
    DecisionRequestWire, EntryWire, OptionsWire, QuestionType, QuestionWire, SystemOneBatch,
    SystemOneBatchWire, WindowWire,
};

#[cfg(test)]
mod tests;
