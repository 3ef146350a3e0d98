//! Time for everything that has time in the service: limits, quotas at UTC midnight,
//! challenge expiry, admission waits, the time limit of a request, server times. Nothing in
//! the service reads time or sleeps but through a [`Clock`]; tests drive a [`ManualClock`]
//! and advance it instead of sleeping.

use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::sync::watch;

use chrono::{DateTime, Utc};

/// Milliseconds since the Unix epoch, UTC.
pub type Millis = i64;

pub const MINUTE_MS: Millis = 60_000;
pub const HOUR_MS: Millis = 3_600_000;
pub const DAY_MS: Millis = 86_400_000;

/// A wait that ends when the clock reaches an instant.
pub type Sleep = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

pub trait Clock: Send + Sync + 'static {
    fn now_ms(&self) -> Millis;
    /// Resolves once `now_ms() >= at_ms` (at once when it already is).
    fn sleep_until(&self, at_ms: Millis) -> Sleep;
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

    fn sleep_until(&self, at_ms: Millis) -> Sleep {
        let left = at_ms.saturating_sub(self.now_ms()).max(0) as u64;
        Box::pin(tokio::time::sleep(Duration::from_millis(left)))
    }
}

/// A clock that moves only when told to; its sleepers wake when it is moved past their time.
#[derive(Debug)]
pub struct ManualClock(watch::Sender<Millis>);

impl Default for ManualClock {
    fn default() -> Self {
        ManualClock::new(0)
    }
}

impl ManualClock {
    pub fn new(at_ms: Millis) -> ManualClock {
        ManualClock(watch::Sender::new(at_ms))
    }
    pub fn set(&self, at_ms: Millis) {
        self.0.send_replace(at_ms);
    }
    pub fn advance(&self, ms: Millis) {
        self.0.send_modify(|t| *t += ms);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> Millis {
        *self.0.borrow()
    }

    fn sleep_until(&self, at_ms: Millis) -> Sleep {
        let mut rx = self.0.subscribe();
        Box::pin(async move {
            while *rx.borrow_and_update() < at_ms {
                if rx.changed().await.is_err() {
                    // The clock is gone: nothing will move it again.
                    std::future::pending::<()>().await;
                }
            }
        })
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

    /// A sleeper on a manual clock wakes when the clock is moved to its time, not before.
    #[tokio::test]
    async fn a_manual_sleep_ends_when_the_clock_reaches_it() {
        let clock = std::sync::Arc::new(ManualClock::new(1_000));
        let mut sleep = tokio::spawn(clock.sleep_until(2_000));
        clock.advance(999);
        let early = tokio::time::timeout(Duration::from_millis(20), &mut sleep).await;
        assert!(early.is_err(), "woke at 1999 for 2000");
        clock.advance(1);
        tokio::time::timeout(Duration::from_secs(5), sleep)
            .await
            .expect("woke at 2000")
            .expect("the sleep task");
        // Already past: at once.
        clock.sleep_until(10).await;
    }
}
