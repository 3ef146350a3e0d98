//! The models a process serves, by name and alias, with each model's load state.

use std::sync::{Arc, Mutex, OnceLock};

use crate::decision::DecisionModel;
use crate::error::EngineError;
use crate::package::ModelMeta;

/// Load state of a served model, as `/health` reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelState {
    Starting,
    Loading,
    Warming,
    Ready,
    Failed(String),
}

impl ModelState {
    pub fn word(&self) -> &'static str {
        match self {
            ModelState::Starting => "starting",
            ModelState::Loading => "loading",
            ModelState::Warming => "warming",
            ModelState::Ready => "ready",
            ModelState::Failed(_) => "failed",
        }
    }
}

/// One served model.
pub struct Slot {
    /// What was known before loading (the catalogue entry or the path).
    planned: ModelMeta,
    state: Mutex<ModelState>,
    model: OnceLock<Arc<DecisionModel>>,
}

impl Slot {
    pub fn new(meta: ModelMeta) -> Arc<Slot> {
        Arc::new(Slot {
            planned: meta,
            state: Mutex::new(ModelState::Starting),
            model: OnceLock::new(),
        })
    }
    pub fn state(&self) -> ModelState {
        self.state
            .lock()
            .map(|s| s.clone())
            .unwrap_or(ModelState::Failed("poisoned".into()))
    }
    pub fn set_state(&self, state: ModelState) {
        if let Ok(mut s) = self.state.lock() {
            *s = state;
        }
    }
    /// Install the loaded model and mark it ready.
    pub fn ready(&self, model: DecisionModel) {
        let _ = self.model.set(Arc::new(model));
        self.set_state(ModelState::Ready);
    }
    pub fn model(&self) -> Option<&Arc<DecisionModel>> {
        self.model.get()
    }
    /// The model's identity: the loaded package's (its card may add a description and
    /// aliases) once loaded, else what was planned.
    pub fn meta(&self) -> &ModelMeta {
        self.model.get().map(|m| &m.meta).unwrap_or(&self.planned)
    }
    /// What was known before loading.
    pub fn planned(&self) -> &ModelMeta {
        &self.planned
    }
    pub fn answers_to(&self, name: &str) -> bool {
        let meta = self.meta();
        meta.name == name || meta.aliases.iter().any(|a| a == name)
    }
}

/// Every model of the process.
#[derive(Default)]
pub struct Registry {
    slots: Vec<Arc<Slot>>,
}

impl Registry {
    pub fn new(slots: Vec<Arc<Slot>>) -> Registry {
        Registry { slots }
    }
    pub fn slots(&self) -> &[Arc<Slot>] {
        &self.slots
    }
    pub fn names(&self) -> Vec<String> {
        self.slots.iter().map(|s| s.meta().name.clone()).collect()
    }
    /// The slot a request names; with no name, the only model (or the first, the default).
    pub fn find(&self, name: Option<&str>) -> Result<&Arc<Slot>, EngineError> {
        match name {
            None | Some("") => self
                .slots
                .first()
                .ok_or_else(|| EngineError::ModelNotFound(String::new())),
            Some(n) => self
                .slots
                .iter()
                .find(|s| s.answers_to(n))
                .ok_or_else(|| EngineError::ModelNotFound(n.to_string())),
        }
    }
    /// The ready model a request names.
    pub fn ready(&self, name: Option<&str>) -> Result<Arc<DecisionModel>, EngineError> {
        let slot = self.find(name)?;
        slot.model()
            .cloned()
            .ok_or_else(|| EngineError::NotReady(slot.meta().name.clone()))
    }
}
