//! Time for everything that has time in the service: limits, quotas at UTC midnight,
//! challenge expiry, admission waits. Tests drive a [`ManualClock`].

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use chrono::{DateTime, Utc};

/// Milliseconds since the Unix epoch, UTC.
pub type Millis = i64;

pub const MINUTE_MS: Millis = 60_000;
pub const HOUR_MS: Millis = 3_600_000;
pub const DAY_MS: Millis = 86_400_000;

pub trait Clock: Send + Sync + 'static {
    fn now_ms(&self) -> Millis;
}

/// The system's wall clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> Millis {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as Millis)
    }
}

/// A clock that moves only when told to.
#[derive(Debug, Default)]
pub struct ManualClock(AtomicI64);

impl ManualClock {
    pub fn new(at_ms: Millis) -> ManualClock {
        ManualClock(AtomicI64::new(at_ms))
    }
    pub fn set(&self, at_ms: Millis) {
        self.0.store(at_ms, Ordering::SeqCst);
    }
    pub fn advance(&self, ms: Millis) {
        self.0.fetch_add(ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> Millis {
        self.0.load(Ordering::SeqCst)
    }
}

/// The UTC day of an instant, as days since the epoch.
pub fn day_of(ms: Millis) -> i64 {
    ms.div_euclid(DAY_MS)
}

/// `YYYY-MM-DD` of a day number.
pub fn day_name(day: i64) -> String {
    DateTime::<Utc>::from_timestamp_millis(day * DAY_MS)
        .map(|d| d.format("%Y-%m-%d").to_string())
        .unwrap_or_default()
}

/// RFC 3339 of an instant, UTC, seconds.
pub fn rfc3339(ms: Millis) -> String {
    DateTime::<Utc>::from_timestamp_millis(ms)
        .map(|d| d.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn days_are_utc() {
        // 2026-11-30T23:59:59.999Z and the next millisecond.
        let t = 1_796_083_199_999;
        assert_eq!(day_name(day_of(t)), "2026-11-30");
        assert_eq!(day_name(day_of(t + 1)), "2026-12-01");
        assert_eq!(rfc3339(t + 1), "2026-12-01T00:00:00Z");
    }
}
