//! The models a process serves, by name and alias, with each model's load state.

use std::sync::{Arc, Mutex, OnceLock};

use crate::decision::DecisionModel;
use crate::encode::EncoderModel;
use crate::error::EngineError;
use crate::generate::text::TextModel;
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

/// What kind of model a slot serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModelKind {
    /// A decision model: /v1/decisions, /v1/systemone, rerank and classify by questions.
    Decision,
    /// An encoder: /v1/embeddings, /v1/encode, rerank and score by cosine.
    Encoder,
}

impl ModelKind {
    pub fn word(self) -> &'static str {
        match self {
            ModelKind::Decision => "decision",
            ModelKind::Encoder => "encoder",
        }
    }
}

/// A loaded model.
pub enum Loaded {
    Decision(Arc<DecisionModel>),
    Encoder(Arc<EncoderModel>),
}

/// One served model.
pub struct Slot {
    /// What was known before loading (the catalogue entry or the path).
    planned: ModelMeta,
    kind: ModelKind,
    state: Mutex<ModelState>,
    model: OnceLock<Loaded>,
    /// The text-generation surface of a causal LM that serves it.
    text: OnceLock<Arc<TextModel>>,
}

impl Slot {
    pub fn new(meta: ModelMeta, kind: ModelKind) -> Arc<Slot> {
        Arc::new(Slot {
            planned: meta,
            kind,
            state: Mutex::new(ModelState::Starting),
            model: OnceLock::new(),
            text: OnceLock::new(),
        })
    }
    pub fn kind(&self) -> ModelKind {
        self.kind
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
    /// Install the text-generation surface (before [`Slot::ready`]).
    pub fn set_text(&self, text: TextModel) {
        let _ = self.text.set(Arc::new(text));
    }
    /// The text-generation surface, once ready.
    pub fn text(&self) -> Option<&Arc<TextModel>> {
        self.text.get()
    }
    /// Install the loaded model and mark it ready.
    pub fn ready(&self, model: Loaded) {
        let _ = self.model.set(model);
        self.set_state(ModelState::Ready);
    }
    /// The loaded decision model.
    pub fn model(&self) -> Option<&Arc<DecisionModel>> {
        match self.model.get() {
            Some(Loaded::Decision(m)) => Some(m),
            _ => None,
        }
    }
    /// The loaded encoder.
    pub fn encoder(&self) -> Option<&Arc<EncoderModel>> {
        match self.model.get() {
            Some(Loaded::Encoder(m)) => Some(m),
            _ => None,
        }
    }
    /// The model's identity: the loaded package's (its card may add a description and
    /// aliases) once loaded, else what was planned.
    pub fn meta(&self) -> &ModelMeta {
        match self.model.get() {
            Some(Loaded::Decision(m)) => &m.meta,
            Some(Loaded::Encoder(m)) => &m.meta,
            None => &self.planned,
        }
    }
    /// Why the slot is not ready, as an error.
    fn not_ready(&self) -> EngineError {
        match self.state() {
            ModelState::Failed(e) => EngineError::LoadFailed(self.meta().name.clone(), e),
            ModelState::Starting => EngineError::NotLoaded(self.meta().name.clone()),
            _ => EngineError::NotReady(self.meta().name.clone()),
        }
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
    /// The slot of `kind` a request names; with no name, the first model of that kind. A
    /// model of the other kind is `unsupported_surface`.
    pub fn find_kind(
        &self,
        name: Option<&str>,
        kind: ModelKind,
    ) -> Result<&Arc<Slot>, EngineError> {
        match name {
            None | Some("") => self
                .slots
                .iter()
                .find(|s| s.kind == kind)
                .ok_or_else(|| EngineError::NoModelOfKind(kind.word())),
            Some(n) => {
                let slot = self.find(Some(n))?;
                if slot.kind != kind {
                    return Err(EngineError::UnsupportedSurface(
                        slot.meta().name.clone(),
                        slot.kind.word(),
                    ));
                }
                Ok(slot)
            }
        }
    }
    /// The ready decision model a request names.
    pub fn ready(&self, name: Option<&str>) -> Result<Arc<DecisionModel>, EngineError> {
        let slot = self.find_kind(name, ModelKind::Decision)?;
        slot.model().cloned().ok_or_else(|| slot.not_ready())
    }
    /// The ready text-generation surface a request names; with no name, the first model that
    /// generates. A model that does not generate is `unsupported_surface`.
    pub fn text(&self, name: Option<&str>) -> Result<Arc<TextModel>, EngineError> {
        let slot = match name {
            None | Some("") => self
                .slots
                .iter()
                .find(|s| s.text().is_some())
                .or_else(|| {
                    self.slots
                        .iter()
                        .find(|s| s.kind == ModelKind::Decision && s.state() != ModelState::Ready)
                })
                .ok_or(EngineError::NoModelOfKind("text-generation"))?,
            Some(n) => self.find(Some(n))?,
        };
        match (slot.text(), slot.state()) {
            (Some(t), ModelState::Ready) => Ok(t.clone()),
            (None, ModelState::Ready) => Err(EngineError::UnsupportedSurface(
                slot.meta().name.clone(),
                slot.kind.word(),
            )),
            _ => Err(slot.not_ready()),
        }
    }
    /// The ready encoder a request names.
    pub fn encoder(&self, name: Option<&str>) -> Result<Arc<EncoderModel>, EngineError> {
        let slot = self.find_kind(name, ModelKind::Encoder)?;
        slot.encoder().cloned().ok_or_else(|| slot.not_ready())
    }
}
