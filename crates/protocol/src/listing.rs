//! The shapes of what `/v1/models`, `/health` and `/health/live` answer, for the OpenAPI
//! document (the server writes these bodies from the registry and the cards).

use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;

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
