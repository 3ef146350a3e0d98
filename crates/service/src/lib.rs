//! The System Duo service in front of System One and System Two: API keys made with proof
//! of work, stored as hashes; usage, revoke and forget; per-key and per-address budgets and
//! daily quotas; fair admission to each model's places.
//!
//! [`Service`] holds the state; [`http::app`] wraps the router's routes with the key check,
//! the limits and admission, and adds `/api/keys…` and `/api/info`. The service never
//! imports the router or the worker: it sees requests and answers.

pub mod admission;
pub mod boxshare;
pub mod clock;
pub mod config;
pub mod error;
pub mod estimate;
pub mod http;
pub mod keys;
pub mod limits;
pub mod live;
pub mod places;
pub mod shared;
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
    limiter: Limits,
    /// Limits of the key endpoints themselves (challenges, usage reads).
    api_limiter: Limiter,
    gates: Mutex<HashMap<String, Arc<Gate>>>,
    /// Each model's box share (made on first use).
    box_shares: Mutex<HashMap<String, Arc<boxshare::BoxShare>>>,
    /// The models `/api/info` lists.
    models: Vec<String>,
    /// Recent server times per model, for the status page.
    pub live: live::Live,
    /// This router among those sharing the database.
    router_id: String,
}

/// With the database every router shares: give back idle leases, and share each model's
/// places by every router's demand, until the service is dropped.
async fn shared_upkeep(svc: std::sync::Weak<Service>) {
    let mut last_tidy = 0;
    loop {
        let (clock, now) = match svc.upgrade() {
            Some(s) => (s.clock.clone(), s.clock.now_ms()),
            None => return,
        };
        clock.sleep_until(now + places::TICK_MS).await;
        let Some(s) = svc.upgrade() else { return };
        let now = s.clock.now_ms();
        if now - last_tidy >= 1_000 {
            if let Limits::Shared(l) = &s.limiter {
                l.tidy(now).await;
            }
            last_tidy = now;
        }
        s.share_places(now).await;
    }
}

/// Where budgets are counted: in this process, or in the database every router shares.
pub(crate) enum Limits {
    Local(Limiter),
    Shared(Arc<shared::SharedLimiter>),
}

impl Limits {
    pub(crate) async fn take(
        &self,
        checks: &[limits::Check],
        tokens: u64,
        now: clock::Millis,
    ) -> Result<limits::Taken, limits::Refused> {
        match self {
            Limits::Local(l) => l.take(checks, tokens, now),
            Limits::Shared(s) => s.take(checks, tokens, now).await,
        }
    }

    pub(crate) fn settle(&self, taken: &limits::Taken, actual_tokens: u64) {
        match self {
            Limits::Local(l) => l.settle(taken, actual_tokens),
            Limits::Shared(s) => s.settle(taken, actual_tokens),
        }
    }

    pub(crate) fn refund(&self, taken: &limits::Taken) {
        match self {
            Limits::Local(l) => l.refund(taken),
            Limits::Shared(s) => s.refund(taken),
        }
    }

    pub(crate) fn minute_state(
        &self,
        s: &limits::Subject,
        b: &limits::Budgets,
        now: clock::Millis,
    ) -> limits::MinuteState {
        match self {
            Limits::Local(l) => l.minute_state(s, b, now),
            Limits::Shared(sh) => sh.minute_state(s, b, now),
        }
    }

    pub(crate) fn today(&self, s: &limits::Subject, now: clock::Millis) -> (u64, u64) {
        match self {
            Limits::Local(l) => l.today(s, now),
            Limits::Shared(sh) => sh.today(s, now),
        }
    }

    /// Whether today's counts need seeding from the usage records (in memory only: the
    /// database's windows outlive a restart).
    pub(crate) fn needs_seed(&self, s: &limits::Subject, now: clock::Millis) -> bool {
        match self {
            Limits::Local(l) => l.needs_seed(s, now),
            Limits::Shared(_) => false,
        }
    }

    pub(crate) fn seed(&self, s: &limits::Subject, now: clock::Millis, requests: u64, tokens: u64) {
        if let Limits::Local(l) = self {
            l.seed(s, now, requests, tokens);
        }
    }
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
        // On PostgreSQL (the database routers on several machines share) the budgets are
        // counted there; on SQLite (one process) in memory.
        let limiter = if store.postgres {
            Limits::Shared(Arc::new(shared::SharedLimiter::new(store.clone())))
        } else {
            Limits::Local(Limiter::new())
        };
        let svc = Arc::new(Service {
            config,
            store,
            clock,
            limiter,
            api_limiter: Limiter::new(),
            gates: Mutex::new(HashMap::new()),
            box_shares: Mutex::new(HashMap::new()),
            models,
            live: live::Live::default(),
            router_id: uuid::Uuid::new_v4().simple().to_string(),
        });
        if let (Limits::Shared(_), Ok(rt)) = (&svc.limiter, tokio::runtime::Handle::try_current()) {
            rt.spawn(shared_upkeep(Arc::downgrade(&svc)));
        }
        svc
    }

    /// Write this router's demand on each model and take its part of the model's places.
    async fn share_places(&self, now: clock::Millis) {
        let gates: Vec<(String, Arc<Gate>)> = match self.gates.lock() {
            Ok(g) => g.iter().map(|(m, g)| (m.clone(), g.clone())).collect(),
            Err(_) => return,
        };
        for (model, gate) in gates {
            let places = gate.config().places.max(1);
            let mine: HashMap<String, u64> = gate
                .demand()
                .into_iter()
                .map(|(a, n)| (a.to_string(), n))
                .collect();
            let text = serde_json::to_string(&mine).unwrap_or_default();
            let all = async {
                self.store
                    .put_demand(&self.router_id, &model, &text, now)
                    .await?;
                self.store.demands(&model, now - places::STALE_MS).await
            };
            let capacity = match all.await {
                Ok(rows) => {
                    let mut demands = std::collections::BTreeMap::new();
                    for (router, json) in rows {
                        let d: HashMap<String, u64> =
                            serde_json::from_str(&json).unwrap_or_default();
                        demands.insert(router, d);
                    }
                    demands.insert(self.router_id.clone(), mine);
                    places::share(places, &demands, &self.router_id)
                }
                Err(e) => {
                    tracing::warn!(error = %e, "the shared places are unreachable; using the model's own");
                    places
                }
            };
            gate.set_capacity(capacity);
        }
    }

    /// The box share of a model (made on first use).
    pub fn box_share(&self, model: &str) -> Option<Arc<boxshare::BoxShare>> {
        let mut s = self.box_shares.lock().ok()?;
        Some(
            s.entry(model.to_string())
                .or_insert_with(|| {
                    let a = &self.config.model(model).admission;
                    boxshare::BoxShare::new(a.places, a.boxes)
                })
                .clone(),
        )
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
