//! Rate limits and quotas: per-minute budgets and daily quotas (UTC days), counted in
//! requests and estimated input tokens, for a key's budget per model, for an address, and
//! for System Two keys. A request is checked against every limit that applies before any is
//! charged, so one refused by a limit consumes no other.
//!
//! Windows are fixed: a minute budget resets at the start of the next UTC minute, a daily
//! quota at 00:00 UTC. Daily counts are seeded from the store on first use after a start,
//! so a restart keeps them.

use std::collections::HashMap;
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use crate::clock::{day_of, Millis, DAY_MS, MINUTE_MS};

/// Budgets in requests and tokens per minute and per UTC day. `None` is unlimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Budgets {
    pub requests_per_minute: Option<u64>,
    pub tokens_per_minute: Option<u64>,
    pub requests_per_day: Option<u64>,
    pub tokens_per_day: Option<u64>,
}

/// Who a budget belongs to.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Subject {
    /// A key's budget (shared by the keys of one address created within 24 h) on a model.
    Budget { id: String, model: String },
    /// A network address, all its keys together, every model.
    Address(String),
}

/// Which limit refused a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exceeded {
    RequestsPerMinute,
    TokensPerMinute,
    RequestsPerDay,
    TokensPerDay,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refused {
    pub which: Exceeded,
    pub subject_is_address: bool,
    /// Seconds until the refusing window resets.
    pub retry_after_s: u64,
}

#[derive(Debug, Clone, Copy, Default)]
struct Window {
    start: Millis,
    requests: u64,
    tokens: u64,
}

impl Window {
    fn roll(&mut self, start: Millis) {
        if self.start != start {
            *self = Window {
                start,
                requests: 0,
                tokens: 0,
            };
        }
    }
}

#[derive(Debug, Default)]
struct Counters {
    minute: Window,
    day: Window,
    /// The day whose counts were seeded from the store.
    seeded_day: Option<i64>,
}

/// One check: a subject and its budgets.
#[derive(Debug, Clone)]
pub struct Check {
    pub subject: Subject,
    pub budgets: Budgets,
}

/// What a charge took, to settle or report later.
#[derive(Debug, Clone)]
pub struct Taken {
    pub charged: Vec<(Subject, Millis, Millis)>,
    pub tokens: u64,
}

/// A key's per-minute state on a model, for the rate-limit headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MinuteState {
    pub limit_requests: Option<u64>,
    pub remaining_requests: Option<u64>,
    pub limit_tokens: Option<u64>,
    pub remaining_tokens: Option<u64>,
    /// Milliseconds until the minute resets.
    pub reset_ms: Millis,
}

impl MinuteState {
    /// The state of budgets `b` with `used` (requests, tokens) in the minute of `now`.
    pub(crate) fn of(b: &Budgets, used: (u64, u64), now: Millis) -> MinuteState {
        let (m, _) = starts(now);
        MinuteState {
            limit_requests: b.requests_per_minute,
            remaining_requests: b.requests_per_minute.map(|l| l.saturating_sub(used.0)),
            limit_tokens: b.tokens_per_minute,
            remaining_tokens: b.tokens_per_minute.map(|l| l.saturating_sub(used.1)),
            reset_ms: m + MINUTE_MS - now,
        }
    }
}

#[derive(Default)]
pub struct Limiter {
    counters: Mutex<HashMap<Subject, Counters>>,
}

pub(crate) fn starts(now: Millis) -> (Millis, Millis) {
    (now - now.rem_euclid(MINUTE_MS), day_of(now) * DAY_MS)
}

pub(crate) fn secs_until(end: Millis, now: Millis) -> u64 {
    ((end - now).max(0) as u64).div_ceil(1000).max(1)
}

impl Limiter {
    pub fn new() -> Limiter {
        Limiter::default()
    }

    /// Whether today's counts of a subject still need seeding from the store.
    pub fn needs_seed(&self, s: &Subject, now: Millis) -> bool {
        self.counters
            .lock()
            .map(|c| c.get(s).and_then(|c| c.seeded_day) != Some(day_of(now)))
            .unwrap_or(false)
    }

    /// Add what the store counted today before this process started (once per day).
    pub fn seed(&self, s: &Subject, now: Millis, requests: u64, tokens: u64) {
        if let Ok(mut c) = self.counters.lock() {
            let (_, d) = starts(now);
            let e = c.entry(s.clone()).or_default();
            if e.seeded_day == Some(day_of(now)) {
                return;
            }
            e.day.roll(d);
            e.day.requests += requests;
            e.day.tokens += tokens;
            e.seeded_day = Some(day_of(now));
        }
    }

    /// Check every budget; charge one request and `tokens` to all of them only if all pass.
    pub fn take(&self, checks: &[Check], tokens: u64, now: Millis) -> Result<Taken, Refused> {
        let (m, d) = starts(now);
        let mut c = self.counters.lock().map_err(|_| Refused {
            which: Exceeded::RequestsPerMinute,
            subject_is_address: false,
            retry_after_s: 1,
        })?;
        for ch in checks {
            let e = c.entry(ch.subject.clone()).or_default();
            e.minute.roll(m);
            e.day.roll(d);
            let b = ch.budgets;
            let over = |used: u64, add: u64, lim: Option<u64>| lim.is_some_and(|l| used + add > l);
            let which = if over(e.minute.requests, 1, b.requests_per_minute) {
                Some((Exceeded::RequestsPerMinute, m + MINUTE_MS))
            } else if over(e.minute.tokens, tokens, b.tokens_per_minute) {
                Some((Exceeded::TokensPerMinute, m + MINUTE_MS))
            } else if over(e.day.requests, 1, b.requests_per_day) {
                Some((Exceeded::RequestsPerDay, d + DAY_MS))
            } else if over(e.day.tokens, tokens, b.tokens_per_day) {
                Some((Exceeded::TokensPerDay, d + DAY_MS))
            } else {
                None
            };
            if let Some((which, end)) = which {
                return Err(Refused {
                    which,
                    subject_is_address: matches!(ch.subject, Subject::Address(_)),
                    retry_after_s: secs_until(end, now),
                });
            }
        }
        let mut charged = Vec::with_capacity(checks.len());
        for ch in checks {
            let e = c.entry(ch.subject.clone()).or_default();
            e.minute.requests += 1;
            e.minute.tokens += tokens;
            e.day.requests += 1;
            e.day.tokens += tokens;
            charged.push((ch.subject.clone(), m, d));
        }
        Ok(Taken { charged, tokens })
    }

    /// Change every window a charge went to, if it is still the current one (a window that
    /// has passed is left alone).
    fn adjust(&self, taken: &Taken, mut f: impl FnMut(&mut Window)) {
        if let Ok(mut c) = self.counters.lock() {
            for (s, m, d) in &taken.charged {
                if let Some(e) = c.get_mut(s) {
                    for (w, start) in [(&mut e.minute, *m), (&mut e.day, *d)] {
                        if w.start == start {
                            f(w);
                        }
                    }
                }
            }
        }
    }

    /// Replace a charge's estimate with the tokens the request really used.
    pub fn settle(&self, taken: &Taken, actual_tokens: u64) {
        self.adjust(taken, |w| {
            w.tokens = (w.tokens + actual_tokens).saturating_sub(taken.tokens)
        });
    }

    /// Give a charge back (the request was refused after it: no place for it).
    pub fn refund(&self, taken: &Taken) {
        self.adjust(taken, |w| {
            w.requests = w.requests.saturating_sub(1);
            w.tokens = w.tokens.saturating_sub(taken.tokens);
        });
    }

    /// The per-minute state of a subject under its budgets, for the headers.
    pub fn minute_state(&self, s: &Subject, b: &Budgets, now: Millis) -> MinuteState {
        let (m, _) = starts(now);
        let (req, tok) = self
            .counters
            .lock()
            .ok()
            .and_then(|c| {
                c.get(s)
                    .map(|e| (e.minute.start == m).then_some((e.minute.requests, e.minute.tokens)))
            })
            .flatten()
            .unwrap_or((0, 0));
        MinuteState::of(b, (req, tok), now)
    }

    /// Today's counts of a subject (requests, tokens).
    pub fn today(&self, s: &Subject, now: Millis) -> (u64, u64) {
        let (_, d) = starts(now);
        self.counters
            .lock()
            .ok()
            .and_then(|c| {
                c.get(s)
                    .filter(|e| e.day.start == d)
                    .map(|e| (e.day.requests, e.day.tokens))
            })
            .unwrap_or((0, 0))
    }
}

/// A duration as OpenAI's rate-limit headers write it: `59s`, `1m0s`, `250ms`.
pub fn reset_text(ms: Millis) -> String {
    let ms = ms.max(0);
    if ms < 1_000 {
        return format!("{ms}ms");
    }
    let s = (ms as u64).div_ceil(1000);
    if s < 60 {
        format!("{s}s")
    } else {
        format!("{}m{}s", s / 60, s % 60)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: Millis = 1_796_083_200_000 - 90_000; // 2026-11-30T23:58:30Z

    fn key(b: Budgets) -> Check {
        Check {
            subject: Subject::Budget {
                id: "b1".into(),
                model: "m".into(),
            },
            budgets: b,
        }
    }

    #[test]
    fn minute_budgets_admit_exactly_their_value_then_reset() {
        let l = Limiter::new();
        let c = [key(Budgets {
            requests_per_minute: Some(3),
            ..Budgets::default()
        })];
        for _ in 0..3 {
            l.take(&c, 10, T0).unwrap();
        }
        let r = l.take(&c, 10, T0).unwrap_err();
        assert_eq!(r.which, Exceeded::RequestsPerMinute);
        assert_eq!(r.retry_after_s, 30);
        // 23:59:00: a new minute.
        assert!(l.take(&c, 10, T0 + 30_000).is_ok());
        let st = l.minute_state(&c[0].subject, &c[0].budgets, T0 + 30_000);
        assert_eq!(st.remaining_requests, Some(2));
        assert_eq!(st.reset_ms, 60_000);
    }

    #[test]
    fn daily_quotas_reset_at_utc_midnight() {
        let l = Limiter::new();
        let c = [key(Budgets {
            tokens_per_day: Some(100),
            ..Budgets::default()
        })];
        l.take(&c, 60, T0).unwrap();
        l.take(&c, 40, T0).unwrap();
        let r = l.take(&c, 1, T0 + 1_000).unwrap_err();
        assert_eq!(r.which, Exceeded::TokensPerDay);
        assert_eq!(r.retry_after_s, 89);
        assert!(l.take(&c, 1, T0 + 89_999).is_err());
        assert!(l.take(&c, 100, T0 + 90_000).is_ok());
    }

    #[test]
    fn a_refused_request_consumes_no_other_limit() {
        let l = Limiter::new();
        let minute = key(Budgets {
            requests_per_minute: Some(10),
            requests_per_day: Some(2),
            ..Budgets::default()
        });
        let addr = Check {
            subject: Subject::Address("1.2.3.4".into()),
            budgets: Budgets {
                requests_per_minute: Some(100),
                ..Budgets::default()
            },
        };
        let both = [addr.clone(), minute.clone()];
        l.take(&both, 1, T0).unwrap();
        l.take(&both, 1, T0).unwrap();
        assert_eq!(
            l.take(&both, 1, T0).unwrap_err().which,
            Exceeded::RequestsPerDay
        );
        // The daily refusal left the minute budget and the address untouched.
        let st = l.minute_state(&minute.subject, &minute.budgets, T0);
        assert_eq!(st.remaining_requests, Some(8));
        let st = l.minute_state(&addr.subject, &addr.budgets, T0);
        assert_eq!(st.remaining_requests, Some(98));
    }

    #[test]
    fn settling_replaces_the_estimate_and_seeds_add_once() {
        let l = Limiter::new();
        let c = [key(Budgets {
            tokens_per_minute: Some(1_000),
            ..Budgets::default()
        })];
        let t = l.take(&c, 900, T0).unwrap();
        l.settle(&t, 100);
        assert_eq!(l.today(&c[0].subject, T0), (1, 100));
        assert!(l.needs_seed(&c[0].subject, T0));
        l.seed(&c[0].subject, T0, 5, 50);
        l.seed(&c[0].subject, T0, 5, 50);
        assert!(!l.needs_seed(&c[0].subject, T0));
        assert_eq!(l.today(&c[0].subject, T0), (6, 150));
        // A refund takes back the request and its tokens.
        let t = l.take(&c, 30, T0).unwrap();
        l.refund(&t);
        assert_eq!(l.today(&c[0].subject, T0), (6, 150));
    }

    #[test]
    fn reset_texts() {
        assert_eq!(reset_text(250), "250ms");
        assert_eq!(reset_text(58_001), "59s");
        assert_eq!(reset_text(61_000), "1m1s");
    }
}
