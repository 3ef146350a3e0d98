//! Live server times per model for the status page: each model's recent requests (the last
//! few minutes, at most a few thousand), held in memory. The same measure as a key's usage:
//! the wait for a place plus the model's time.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use serde::Serialize;

use crate::clock::Millis;

/// How far back the status page looks.
pub const WINDOW_MS: Millis = 5 * 60 * 1000;
/// The most requests kept per model.
const KEEP: usize = 4096;

#[derive(Debug, Clone, Copy)]
struct Sample {
    at: Millis,
    server_ms: u32,
    status: u16,
}

#[derive(Default)]
pub struct Live {
    models: Mutex<HashMap<String, VecDeque<Sample>>>,
}

/// A model's recent requests.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    pub window_seconds: u64,
    pub requests: usize,
    pub answered: usize,
    /// Answers with a 5xx status.
    pub errors: usize,
    pub latency_ms: Latency,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Latency {
    pub p50: Option<u32>,
    pub p90: Option<u32>,
}

/// Nearest-rank percentile of sorted values.
pub fn percentile<T: Copy>(sorted: &[T], p: f64) -> Option<T> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    Some(sorted[rank - 1])
}

impl Live {
    pub fn record(&self, model: &str, at: Millis, server_ms: u64, status: u16) {
        let Ok(mut m) = self.models.lock() else {
            return;
        };
        let q = match m.get_mut(model) {
            Some(q) => q,
            None => m.entry(model.to_string()).or_default(),
        };
        while q.len() >= KEEP || q.front().is_some_and(|s| s.at + WINDOW_MS < at) {
            q.pop_front();
        }
        q.push_back(Sample {
            at,
            server_ms: server_ms.min(u64::from(u32::MAX)) as u32,
            status,
        });
    }

    /// The model's requests within the window before `now`.
    pub fn summary(&self, model: &str, now: Millis) -> Summary {
        let mut answered: Vec<u32> = Vec::new();
        let (mut requests, mut errors) = (0, 0);
        if let Ok(m) = self.models.lock() {
            for s in m
                .get(model)
                .into_iter()
                .flatten()
                .filter(|s| s.at + WINDOW_MS >= now)
            {
                requests += 1;
                if s.status < 400 {
                    answered.push(s.server_ms);
                } else if s.status >= 500 {
                    errors += 1;
                }
            }
        }
        answered.sort_unstable();
        Summary {
            window_seconds: (WINDOW_MS / 1000) as u64,
            requests,
            answered: answered.len(),
            errors,
            latency_ms: Latency {
                p50: percentile(&answered, 0.5),
                p90: percentile(&answered, 0.9),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_of_the_window_only() {
        let l = Live::default();
        // An old slow request, then ten within the window: 10, 20, ..., 100 ms; one 503.
        l.record("m", 0, 9_000, 200);
        for i in 1..=10u64 {
            l.record("m", WINDOW_MS + i as Millis, i * 10, 200);
        }
        l.record("m", WINDOW_MS + 20, 5, 503);
        l.record("m", WINDOW_MS + 21, 5, 429);
        let s = l.summary("m", WINDOW_MS + 30);
        assert_eq!((s.requests, s.answered, s.errors), (12, 10, 1));
        assert_eq!(s.latency_ms.p50, Some(50));
        assert_eq!(s.latency_ms.p90, Some(90));
        let none = l.summary("other", 0);
        assert_eq!((none.requests, none.latency_ms.p50), (0, None));
    }

    #[test]
    fn keeps_at_most_its_cap() {
        let l = Live::default();
        for i in 0..(KEEP as u64 + 10) {
            l.record("m", 1_000, i, 200);
        }
        let s = l.summary("m", 1_000);
        assert_eq!(s.requests, KEEP);
        // The oldest ten went first.
        assert_eq!(s.latency_ms.p50, Some(10 + KEEP as u32 / 2 - 1));
    }
}
