//! Wire types of the vllm-srun worker API: System One 0.2 with the vllm-sr/5.0 extensions,
//! the vllm-sr/4.0 forms and the runtime's internal form.
//!
//! This crate does no I/O. It decodes JSON values strictly into typed requests, validates each
//! question (a failed question becomes an in-place answer, never a panic), and defines the
//! answer and error types with their fixed code and reason words.

pub mod answer;
pub mod assets;
pub mod bundle;
pub mod confidence;
pub mod encoder;
pub mod endpoint;
pub mod error;
pub mod limits;
pub mod listing;
pub mod member;
pub mod openai;
pub mod ordered;
pub mod precount;
pub mod request;
pub mod sie;
pub mod text;
pub mod wire;

pub use answer::{
    Answer, AnswerEntry, BatchResponse, ChoiceAnswer, DecisionResponse, NoulAnswer, ScoreAnswer,
    SetResult, SpanFound, Usage,
};
pub use endpoint::DecisionEndpoint;
pub use error::{reason, ErrorCode, ProtocolError, QuestionErrorKind, QuestionFailure};
pub use ordered::Ordered;
pub use request::{
    meaning, parse_decision_body, DecisionBody, DecisionRequest, Options, Overflow, Question,
    QuestionKind, QuestionSlot, Role, Roles, Schema,
};

/// The contract version reported by `/health`, `/health/live` and `/v1/models`.
pub const API_VERSION: &str = "5.0.0";
/// The extension set version reported in model listings.
pub const EXTENSION_VERSION: &str = "5.0";
/// Most options of a choice question, and most labels of a set or span question.
pub const MAX_OPTIONS: usize = 255;
/// Most questions one request (one state) asks: more could never fit a model's request token
/// limit, and the count is checked before any question is read.
pub const MAX_QUESTIONS: usize = 4096;
/// The preset of span questions that find personal data.
pub const PII_PRESET: &str = "pii";
/// The labels of the `pii` preset, with the descriptions a model reads.
pub const PII_LABELS: &[(&str, &str)] = &[
    ("PERSON", "the name of a person"),
    ("EMAIL_ADDRESS", "an email address"),
    (
        "PHONE_NUMBER",
        "a telephone number, with its extension if it has one",
    ),
    ("LOCATION", "a place: a city, a country or a street address"),
    ("CREDIT_CARD", "a payment card number"),
    ("IP_ADDRESS", "an IP address"),
    ("IBAN", "an international bank account number"),
    ("DATE_TIME", "a date or a time"),
    ("URL", "a web address"),
];
/// Most levels of a score question.
pub const MAX_LEVELS: usize = 10;
