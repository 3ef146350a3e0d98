//! The System Duo service in front of System One and System Two: API keys made with proof
//! of work, stored as hashes; usage, revoke and forget; per-key and per-address budgets and
//! daily quotas; fair admission to each model's places.
//!
//! [`Service`] holds the state; [`http::app`] wraps the router's routes with the key check,
//! the limits and admission, and adds `/api/keys…` and `/api/info`. The service never
//! imports the router or the worker: it sees requests and answers.

pub mod admission;
pub mod clock;
pub mod config;
pub mod error;
pub mod estimate;
pub mod http;
pub mod keys;
pub mod limits;
pub mod live;
pub mod store;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use admission::Gate;
use clock::Clock;
pub use config::ServiceConfig;
pub use error::ServiceError;
use limits::Limiter;
pub use store::{Store, StoreError};

pub struct Service {
    pub config: ServiceConfig,
    pub store: Store,
    pub clock: Arc<dyn Clock>,
    /// Budgets of keys and addresses on the models.
    limiter: Limiter,
    /// Limits of the key endpoints themselves (challenges, usage reads).
    api_limiter: Limiter,
    gates: Mutex<HashMap<String, Arc<Gate>>>,
    /// The models `/api/info` lists.
    models: Vec<String>,
    /// Recent server times per model, for the status page.
    pub live: live::Live,
}

impl Service {
    pub fn new(
        config: ServiceConfig,
        store: Store,
        clock: Arc<dyn Clock>,
        models: Vec<String>,
    ) -> Arc<Service> {
        Arc::new(Service {
            config,
            store,
            clock,
            limiter: Limiter::new(),
            api_limiter: Limiter::new(),
            gates: Mutex::new(HashMap::new()),
            models,
            live: live::Live::default(),
        })
    }

    /// The admission gate of a model (made on first use).
    pub fn gate(&self, model: &str) -> Option<Arc<Gate>> {
        let mut g = self.gates.lock().ok()?;
        Some(
            g.entry(model.to_string())
                .or_insert_with(|| {
                    Gate::new(
                        self.config.model(model).admission.clone(),
                        self.clock.clone(),
                    )
                })
                .clone(),
        )
    }
}
