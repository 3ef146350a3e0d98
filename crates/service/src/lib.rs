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

/// What `import_keys` did with one line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Imported {
    /// Stored, shown by its prefix.
    Added(String),
    /// Already stored.
    Known(String),
    /// Not a key's shape (`sk-vsr-…` or an older `sk-pt-…`); its line number.
    Malformed(usize),
}

/// Store keys made elsewhere (one per line; blank lines skipped), such as the older System
/// Two sites' `sk-pt-` keys, so that they are checked, counted and forgotten like keys made
/// here. Each gets its own budget; only its hash is kept.
pub async fn import_keys(
    store: &Store,
    text: &str,
    now: clock::Millis,
) -> Result<Vec<Imported>, StoreError> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let Some(secret) = keys::Secret::parse(line) else {
            out.push(Imported::Malformed(n + 1));
            continue;
        };
        let id = keys::new_id("key");
        let row = store::KeyRow {
            id: id.clone(),
            hash: secret.hash(),
            prefix: secret.shown().to_string(),
            label: "imported".into(),
            budget: id,
            address: "imported".into(),
            status: "active".into(),
            created_at: now,
        };
        let shown = row.prefix.clone();
        out.push(if store.import_key(&row).await? {
            Imported::Added(shown)
        } else {
            Imported::Known(shown)
        });
    }
    Ok(out)
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
