//! Server-Timing: the runtime's own time per phase, in milliseconds.

use std::time::Duration;

use engine::Timings;

/// Phase times of one request.
#[derive(Debug, Clone, Copy, Default)]
pub struct Phases {
    pub parse: Duration,
    pub engine: Timings,
    pub serialize: Duration,
    pub total: Duration,
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

impl Phases {
    pub fn header(&self) -> String {
        format!(
            "parse;dur={:.3}, tokenize;dur={:.3}, queue;dur={:.3}, forward;dur={:.3}, cached;desc={}, post;dur={:.3}, serialize;dur={:.3}, total;dur={:.3}",
            ms(self.parse),
            ms(self.engine.tokenize),
            ms(self.engine.queue),
            ms(self.engine.forward),
            self.engine.cached_tokens,
            ms(self.engine.post),
            ms(self.serialize),
            ms(self.total)
        )
    }

    /// Record each phase in the duration histograms.
    pub fn record(&self, endpoint: &'static str) {
        for (phase, d) in [
            ("parse", self.parse),
            ("tokenize", self.engine.tokenize),
            ("queue", self.engine.queue),
            ("forward", self.engine.forward),
            ("post", self.engine.post),
            ("serialize", self.serialize),
            ("total", self.total),
        ] {
            metrics::histogram!("vllm_srun_phase_seconds", "endpoint" => endpoint, "phase" => phase)
                .record(d.as_secs_f64());
        }
        if self.engine.batch_jobs > 0 {
            metrics::histogram!("vllm_srun_batch_requests").record(self.engine.batch_jobs as f64);
            metrics::histogram!("vllm_srun_batch_tokens").record(self.engine.batch_tokens as f64);
        }
    }
}
