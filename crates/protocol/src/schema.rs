//! Schema-only types for the OpenAPI document: the shapes whose serialization is written by
//! hand (answers, errors, listings). Requests are described by the wire types they are decoded
//! into (`*Wire` in [`crate::request`], [`crate::encoder`], [`crate::sie`], [`crate::bundle`]).

use std::collections::HashMap;

use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;

/// One entry of `answers`: a typed answer, or the question's error in place.
#[derive(Serialize, ToSchema)]
#[serde(untagged)]
pub enum AnswerDoc {
    Choice(ChoiceDoc),
    Noul(NoulDoc),
    Score(ScoreDoc),
    Failed(FailedDoc),
}

#[derive(Serialize, ToSchema)]
pub struct ChoiceDoc {
    #[serde(rename = "type")]
    pub kind: String,
    pub choice: String,
    pub probabilities: HashMap<String, f64>,
    pub confidence: f64,
    pub input_coverage: Option<String>,
}

#[derive(Serialize, ToSchema)]
pub struct NoulDoc {
    #[serde(rename = "type")]
    pub kind: String,
    pub noul: f64,
    pub input_coverage: Option<String>,
}

#[derive(Serialize, ToSchema)]
pub struct ScoreDoc {
    #[serde(rename = "type")]
    pub kind: String,
    pub score: f64,
    pub probabilities: HashMap<String, f64>,
    pub confidence: f64,
    pub legend: HashMap<String, String>,
    pub input_coverage: Option<String>,
}

/// A question without an answer.
#[derive(Serialize, ToSchema)]
pub struct FailedDoc {
    #[serde(rename = "type")]
    pub kind: String,
    /// invalid_question, invalid_input, max_length_exceeded, scan_budget_exceeded,
    /// invalid_model_output, deadline_exceeded or unavailable.
    pub error: String,
    /// A fixed word; never request data.
    pub reason: String,
    pub message: String,
    pub limit: Option<u64>,
}

/// An error body. Under vllm-sr/5.0 on /v1/systemone: the standard `detail` (a list on a 422)
/// with flat `code`, `reason`, `question`, `state`, `limit`; elsewhere `{"error": {...}}`.
#[derive(Serialize, ToSchema)]
pub struct ErrorDoc {
    #[schema(value_type = Option<Object>)]
    pub error: Option<Value>,
    /// An object, or on a 422 a list of `{loc, msg, type}`.
    pub detail: Option<Value>,
    pub code: Option<String>,
    pub message: Option<String>,
    pub reason: Option<String>,
    pub question: Option<String>,
    pub state: Option<String>,
    pub limit: Option<u64>,
}

/// Each named request's response body; a failed one carries its error body and `status`.
#[derive(Serialize, ToSchema)]
pub struct SystemOneBatchResponseDoc {
    #[schema(value_type = HashMap<String, Object>)]
    pub responses: HashMap<String, Value>,
}

/// `GET /v1/models`.
#[derive(Serialize, ToSchema)]
pub struct ModelListDoc {
    pub models: Vec<ModelEntryDoc>,
    #[schema(value_type = Option<Vec<Object>>)]
    pub data: Option<Value>,
}

#[derive(Serialize, ToSchema)]
pub struct ModelEntryDoc {
    pub name: String,
    pub description: Option<String>,
    pub release_date: Option<String>,
    pub version: Option<String>,
    pub features: Option<Vec<String>>,
    #[schema(value_type = Option<Object>)]
    pub card: Option<Value>,
}

/// `GET /health` and `GET /health/live`.
#[derive(Serialize, ToSchema)]
pub struct HealthDoc {
    pub status: String,
    pub api_version: Option<String>,
    /// The extension set version the server answers with (`/health`: 5.0, or 4.0).
    pub version: Option<String>,
    pub reason: Option<String>,
    #[schema(value_type = Option<Object>)]
    pub models: Option<Value>,
}

#[derive(Serialize, ToSchema)]
pub struct EmbeddingDoc {
    pub object: String,
    pub index: u64,
    /// A list of numbers, or a base64 string with encoding_format base64.
    pub embedding: Value,
}

#[derive(Serialize, ToSchema)]
pub struct EmbeddingsUsageDoc {
    pub prompt_tokens: u64,
    pub total_tokens: u64,
}

#[derive(Serialize, ToSchema)]
pub struct EmbeddingsResponseDoc {
    pub object: String,
    pub data: Vec<EmbeddingDoc>,
    pub model: String,
    pub usage: EmbeddingsUsageDoc,
    #[schema(value_type = Option<Object>)]
    pub meta: Option<Value>,
}

#[derive(Serialize, ToSchema)]
pub struct RerankResultDoc {
    pub index: u64,
    pub relevance_score: f64,
    #[schema(value_type = Option<Object>)]
    pub document: Option<Value>,
}

#[derive(Serialize, ToSchema)]
pub struct RerankResponseDoc {
    pub model: String,
    pub results: Vec<RerankResultDoc>,
    #[schema(value_type = Object)]
    pub usage: Value,
}

#[derive(Serialize, ToSchema)]
pub struct ClassifyResponseDoc {
    pub model: String,
    pub backbone: String,
    /// Per input: `{index, label, labels: [{label, score}]}` (a set: `selected`); on a
    /// token-classification head `{index, spans: [{label, start, end, text, probability}]}`
    /// (code-point offsets, end exclusive; `truncated` when cut); or
    /// `{index, error, reason, message}`.
    #[schema(value_type = Vec<Object>)]
    pub data: Vec<Value>,
    #[schema(value_type = Object)]
    pub usage: Value,
    #[schema(value_type = Option<Object>)]
    pub meta: Option<Value>,
}

#[derive(Serialize, ToSchema)]
pub struct BundleResponseDoc {
    /// In task order: `{id, type, status, body}`.
    #[schema(value_type = Vec<Object>)]
    pub results: Vec<Value>,
}

/// An SIE error: `{"detail": {"code", "message"}}`.
#[derive(Serialize, ToSchema)]
pub struct SieErrorDoc {
    pub detail: SieErrorDetailDoc,
}

#[derive(Serialize, ToSchema)]
pub struct SieErrorDetailDoc {
    /// MODEL_NOT_FOUND, INVALID_INPUT, INPUT_TOO_LONG, MODEL_NOT_LOADED, MODEL_LOADING,
    /// MODEL_LOAD_FAILED, QUEUE_FULL, RESOURCE_EXHAUSTED, INFERENCE_ERROR or INTERNAL_ERROR.
    pub code: String,
    pub message: String,
}

#[derive(Serialize, ToSchema)]
pub struct SieEncodeResponseDoc {
    pub model: String,
    /// Per item: `{id?, dense: {dims, dtype, values}}`.
    #[schema(value_type = Vec<Object>)]
    pub items: Vec<Value>,
    #[schema(value_type = Option<Object>)]
    pub timing: Option<Value>,
}

#[derive(Serialize, ToSchema)]
pub struct SieScoreResponseDoc {
    pub model: String,
    /// The query's `id` as sent (any value), or null.
    pub query_id: Value,
    /// `{item_id, score, rank}`, best first.
    #[schema(value_type = Vec<Object>)]
    pub scores: Vec<Value>,
    #[schema(value_type = Object)]
    pub usage: Value,
}

#[derive(Serialize, ToSchema)]
pub struct SieExtractResponseDoc {
    pub model: String,
    /// Per item: `{id, classifications: [{label, score}]}` or `{id, error: {code, message}}`.
    #[schema(value_type = Vec<Object>)]
    pub items: Vec<Value>,
}
