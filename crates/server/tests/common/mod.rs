//! The fake model the in-process route tests serve (`engine::fake`, no weights).
#![allow(dead_code, clippy::expect_used)]

use std::sync::Arc;

use engine::package::DecisionConfig;
use engine::registry::{Loaded, ModelKind, Registry, Slot};

pub use engine::fake::CONTEXT_TOKENS;

/// Says Yes (logit 2) over No (logit 0) whatever it reads.
pub fn yes_over_no() -> engine::fake::Script {
    engine::fake::table(&[("Yes", 2.0), ("No", 0.0)])
}

/// A registry of one fake model, "fake", with `context_tokens` per sequence, its scheduler's
/// limits and `script`; loaded on a thread of its own (loading runs the model's self-check
/// outside any runtime).
pub fn fake_registry(
    context_tokens: usize,
    scheduler: engine::SchedulerConfig,
    script: engine::fake::Script,
) -> Arc<Registry> {
    std::thread::spawn(move || {
        let m = engine::fake::model_with(
            "fake",
            DecisionConfig::default(),
            script,
            context_tokens,
            scheduler,
        )
        .expect("the fake model loads");
        let slot = Slot::new(m.meta.clone(), ModelKind::Decision);
        slot.ready(Loaded::Decision(Arc::new(m)));
        Arc::new(Registry::new(vec![slot]))
    })
    .join()
    .expect("the loading thread")
}
