//! Limits counted in the database every router shares (PostgreSQL), so that routers behind
//! one load balancer give a key its limits once, not once each.
//!
//! A router does not ask the database for every request: it takes a **lease** of a window's
//! limit (a twentieth of it, at least what the request needs) with one atomic update that
//! fails when the window's total would pass the limit, and admits from its lease until it is
//! spent. What a lease did not use is given back once it has been idle for two seconds.
//!
//! The bound: the requests every router admits in one window never pass the window's limit
//! (a lease is granted only within it). Tokens are leased on the estimate; a request that
//! used more than its estimate is charged the difference after it ended, so tokens can pass a
//! limit by what the requests running at that moment used beyond their estimates, as on one
//! router. A router killed while holding a lease takes its unused part with it until the
//! window ends: at most a twentieth of the limit (one request for a limit under 40).

use std::collections::HashMap;
use std::sync::Mutex;

use crate::clock::{Millis, DAY_MS, MINUTE_MS};
use crate::limits::{secs_until, starts, Check, Exceeded, MinuteState, Refused, Subject, Taken};
use crate::store::Store;

/// How long an unused lease is kept before it is given back.
pub const IDLE_MS: Millis = 2_000;

/// What this router holds of one window of one limit.
#[derive(Debug, Default, Clone, Copy)]
struct Lease {
    granted: (i64, i64),
    used: (i64, i64),
    /// The window's totals over every router, as the database last said.
    seen: (i64, i64),
    last_use: Millis,
}

impl Lease {
    fn free(&self) -> (i64, i64) {
        (self.granted.0 - self.used.0, self.granted.1 - self.used.1)
    }

    /// Used in the window by every router, as far as this router knows.
    fn used_everywhere(&self) -> (i64, i64) {
        let f = self.free();
        ((self.seen.0 - f.0).max(0), (self.seen.1 - f.1).max(0))
    }
}

#[derive(Debug, Clone)]
struct Window {
    key: String,
    start: Millis,
    end: Millis,
    limits: (Option<u64>, Option<u64>),
    day: bool,
    address: bool,
}

fn window_key(day: bool, s: &Subject) -> String {
    let kind = if day { "day" } else { "minute" };
    match s {
        Subject::Budget { id, model } => format!("{kind}/budget/{id}/{model}"),
        Subject::Address(a) => format!("{kind}/address/{a}"),
    }
}

/// A twentieth of a limit, at least one: what a router takes at a time.
fn lease_size(limit: u64) -> i64 {
    (limit / 20).max(1) as i64
}

fn cap(limit: Option<u64>) -> i64 {
    limit.map_or(i64::MAX / 4, |l| l.min(i64::MAX as u64 / 4) as i64)
}

pub struct SharedLimiter {
    store: Store,
    leases: Mutex<HashMap<(String, Millis), Lease>>,
}

impl SharedLimiter {
    pub fn new(store: Store) -> SharedLimiter {
        SharedLimiter {
            store,
            leases: Mutex::new(HashMap::new()),
        }
    }

    fn windows(checks: &[Check], now: Millis) -> Vec<(Window, Subject)> {
        let (m, d) = starts(now);
        let mut out = Vec::new();
        for ch in checks {
            let b = ch.budgets;
            for (day, start, len, limits) in [
                (
                    false,
                    m,
                    MINUTE_MS,
                    (b.requests_per_minute, b.tokens_per_minute),
                ),
                (true, d, DAY_MS, (b.requests_per_day, b.tokens_per_day)),
            ] {
                if limits.0.is_none() && limits.1.is_none() {
                    continue;
                }
                out.push((
                    Window {
                        key: window_key(day, &ch.subject),
                        start,
                        end: start + len,
                        limits,
                        day,
                        address: matches!(ch.subject, Subject::Address(_)),
                    },
                    ch.subject.clone(),
                ));
            }
        }
        out
    }

    /// Check every budget; charge one request and `tokens` to all of them only if all pass.
    pub async fn take(&self, checks: &[Check], tokens: u64, now: Millis) -> Result<Taken, Refused> {
        let windows = Self::windows(checks, now);
        let tokens_i = tokens.min(i64::MAX as u64 / 4) as i64;
        let busy = Refused {
            which: Exceeded::RequestsPerMinute,
            subject_is_address: false,
            retry_after_s: 1,
        };
        // A few rounds: another request of this router may spend a lease just taken.
        for _ in 0..4 {
            let short = {
                let mut leases = self.leases.lock().map_err(|_| busy)?;
                let mut short = None;
                for (w, _) in &windows {
                    let l = leases.entry((w.key.clone(), w.start)).or_default();
                    let free = l.free();
                    let need_r = if w.limits.0.is_some() {
                        (1 - free.0).max(0)
                    } else {
                        0
                    };
                    let need_t = if w.limits.1.is_some() {
                        (tokens_i - free.1).max(0)
                    } else {
                        0
                    };
                    if need_r > 0 || need_t > 0 {
                        short = Some((w.clone(), need_r, need_t));
                        break;
                    }
                }
                if short.is_none() {
                    // Every window has room: charge them all.
                    for (w, _) in &windows {
                        if let Some(l) = leases.get_mut(&(w.key.clone(), w.start)) {
                            l.used.0 += 1;
                            l.used.1 += tokens_i;
                            l.last_use = now;
                        }
                    }
                    let (m, d) = starts(now);
                    let mut charged: Vec<(Subject, Millis, Millis)> = Vec::new();
                    for (_, s) in &windows {
                        if !charged.iter().any(|(c, _, _)| c == s) {
                            charged.push((s.clone(), m, d));
                        }
                    }
                    return Ok(Taken { charged, tokens });
                }
                short
            };
            let Some((w, need_r, need_t)) = short else {
                continue;
            };
            let want = (
                if need_r > 0 {
                    need_r.max(w.limits.0.map_or(0, lease_size))
                } else {
                    0
                },
                if need_t > 0 {
                    need_t.max(w.limits.1.map_or(0, lease_size))
                } else {
                    0
                },
            );
            let max = (cap(w.limits.0), cap(w.limits.1));
            let mut got = self.store.lease(&w.key, w.start, want, max).await;
            let mut granted = want;
            if matches!(got, Ok(None)) && want != (need_r, need_t) {
                // Not a whole lease left: what this request needs, if that fits.
                granted = (need_r, need_t);
                got = self.store.lease(&w.key, w.start, granted, max).await;
            }
            match got {
                Ok(Some(seen)) => {
                    let mut leases = self.leases.lock().map_err(|_| busy)?;
                    let l = leases.entry((w.key.clone(), w.start)).or_default();
                    l.granted.0 += granted.0;
                    l.granted.1 += granted.1;
                    l.seen = seen;
                    l.last_use = now;
                }
                Ok(None) => {
                    let seen = self.store.window(&w.key, w.start).await.unwrap_or((0, 0));
                    if let Ok(mut leases) = self.leases.lock() {
                        leases.entry((w.key.clone(), w.start)).or_default().seen = seen;
                    }
                    let requests_short = need_r > 0 && seen.0 + need_r > cap(w.limits.0);
                    let which = match (w.day, requests_short) {
                        (false, true) => Exceeded::RequestsPerMinute,
                        (false, false) => Exceeded::TokensPerMinute,
                        (true, true) => Exceeded::RequestsPerDay,
                        (true, false) => Exceeded::TokensPerDay,
                    };
                    return Err(Refused {
                        which,
                        subject_is_address: w.address,
                        retry_after_s: secs_until(w.end, now),
                    });
                }
                Err(e) => {
                    tracing::warn!(error = %e, "the shared limits are unreachable; refusing");
                    return Err(busy);
                }
            }
        }
        Err(busy)
    }

    fn adjust(&self, taken: &Taken, mut f: impl FnMut(&mut Lease)) {
        if let Ok(mut leases) = self.leases.lock() {
            for (s, m, d) in &taken.charged {
                for (day, start) in [(false, *m), (true, *d)] {
                    if let Some(l) = leases.get_mut(&(window_key(day, s), start)) {
                        f(l);
                    }
                }
            }
        }
    }

    /// Replace a charge's estimate with the tokens the request really used.
    pub fn settle(&self, taken: &Taken, actual_tokens: u64) {
        let diff = actual_tokens as i64 - taken.tokens as i64;
        self.adjust(taken, |l| l.used.1 += diff);
    }

    /// Give a charge back (the request was refused after it).
    pub fn refund(&self, taken: &Taken) {
        self.adjust(taken, |l| {
            l.used.0 -= 1;
            l.used.1 -= taken.tokens as i64;
        });
    }

    fn used(&self, day: bool, s: &Subject, start: Millis) -> (u64, u64) {
        self.leases
            .lock()
            .ok()
            .and_then(|l| l.get(&(window_key(day, s), start)).copied())
            .map_or((0, 0), |l| {
                let u = l.used_everywhere();
                (u.0 as u64, u.1 as u64)
            })
    }

    /// The per-minute state of a subject under its budgets, for the headers.
    pub fn minute_state(
        &self,
        s: &Subject,
        b: &crate::limits::Budgets,
        now: Millis,
    ) -> MinuteState {
        let (m, _) = starts(now);
        MinuteState::of(b, self.used(false, s, m), now)
    }

    /// Today's counts of a subject (requests, tokens), over every router as far as known.
    pub fn today(&self, s: &Subject, now: Millis) -> (u64, u64) {
        let (_, d) = starts(now);
        self.used(true, s, d)
    }

    /// Give back what idle leases did not use, forget leases of windows that ended, and
    /// prune windows over two days old from the database.
    pub async fn tidy(&self, now: Millis) {
        let mut back = Vec::new();
        if let Ok(mut leases) = self.leases.lock() {
            leases.retain(|(key, start), l| {
                let len = if key.starts_with("day/") {
                    DAY_MS
                } else {
                    MINUTE_MS
                };
                if start + len <= now {
                    return false;
                }
                let free = l.free();
                if now - l.last_use >= IDLE_MS && (free.0 != 0 || free.1 != 0) {
                    back.push((key.clone(), *start, free));
                    l.granted = l.used;
                    l.seen = (l.seen.0 - free.0, l.seen.1 - free.1);
                }
                true
            });
        }
        for (key, start, free) in back {
            if let Err(e) = self.store.give_back(&key, start, free.0, free.1).await {
                tracing::warn!(error = %e, "an unused lease was not given back");
            }
        }
        if now.rem_euclid(MINUTE_MS) < 1_000 {
            let _ = self.store.prune_windows(now - 2 * DAY_MS).await;
        }
    }
}
