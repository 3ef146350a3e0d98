//! The service's settings: whether keys are required, proof of work, key creation limits,
//! budgets, and each model's limits and admission. Every value is live in `/api/info`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::admission::AdmissionConfig;
use crate::limits::Budgets;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServiceConfig {
    /// Every `/v1` request needs a key (a public service); off for a private worker.
    pub require_keys: bool,
    /// The most bytes the guard reads of a request body, as sent and once decoded: the public
    /// face's limit (`serve` sets the router's listener limit here, so both refuse alike).
    pub max_request_bytes: usize,
    /// Leading zero bits a key's proof of work needs.
    pub difficulty: u32,
    pub challenge_ttl_seconds: u64,
    pub challenges_per_minute: u64,
    pub keys_per_hour: u64,
    pub keys_per_day: u64,
    /// Requests per minute to `/api/keys/self/usage`, per key and per address.
    pub usage_requests_per_minute: u64,
    /// A header naming the client's address, set by a proxy in front (e.g.
    /// `x-forwarded-for`: its first address counts). Unset: the peer address.
    pub trusted_proxy_header: Option<String>,
    /// Each key's budgets on each System One model (keys of one address created within
    /// 24 h share one set).
    pub per_key: Budgets,
    /// Each network address's budgets, all its keys and models together.
    pub per_address: Budgets,
    /// Each key's System Two budgets.
    pub system_two: Budgets,
    /// Model names System Two answers (the rest are System One).
    pub system_two_models: Vec<String>,
    /// Settings of named models; the others take `default_model`.
    pub models: BTreeMap<String, ModelSettings>,
    pub default_model: ModelSettings,
}

impl Default for ServiceConfig {
    fn default() -> Self {
        ServiceConfig {
            require_keys: false,
            max_request_bytes: protocol::limits::PUBLIC_REQUEST_BYTES,
            difficulty: 16,
            challenge_ttl_seconds: 600,
            challenges_per_minute: 20,
            keys_per_hour: 3,
            keys_per_day: 10,
            usage_requests_per_minute: 30,
            trusted_proxy_header: None,
            per_key: Budgets {
                requests_per_minute: Some(60),
                tokens_per_minute: Some(200_000),
                requests_per_day: Some(5_000),
                tokens_per_day: Some(5_000_000),
            },
            per_address: Budgets {
                requests_per_minute: Some(240),
                tokens_per_minute: Some(1_000_000),
                requests_per_day: None,
                tokens_per_day: None,
            },
            system_two: Budgets {
                requests_per_minute: Some(30),
                tokens_per_minute: None,
                requests_per_day: Some(1_000),
                tokens_per_day: Some(2_000_000),
            },
            system_two_models: vec!["vllm-sr/auto".into()],
            models: BTreeMap::new(),
            default_model: ModelSettings::default(),
        }
    }
}

/// What one model allows.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ModelSettings {
    pub limits: ModelLimits,
    pub admission: AdmissionConfig,
    /// Budgets of each key on this model, instead of `per_key`.
    pub budgets: Option<Budgets>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ModelLimits {
    /// The most estimated input tokens of one request (400 `request_too_long` above).
    pub max_request_tokens: u64,
    /// A request's whole time, waiting included (504 `timeout` after).
    pub timeout_seconds: u64,
    /// The model reads each state once: the estimate counts it once.
    pub state_once: bool,
}

impl Default for ModelLimits {
    fn default() -> Self {
        ModelLimits {
            max_request_tokens: 200_000,
            timeout_seconds: 60,
            state_once: true,
        }
    }
}

impl ServiceConfig {
    pub fn model(&self, id: &str) -> &ModelSettings {
        self.models.get(id).unwrap_or(&self.default_model)
    }

    pub fn budgets(&self, model: &str) -> Budgets {
        if self.is_system_two(model) {
            return self.system_two;
        }
        self.model(model).budgets.unwrap_or(self.per_key)
    }

    pub fn is_system_two(&self, model: &str) -> bool {
        self.system_two_models.iter().any(|m| m == model)
    }
}
