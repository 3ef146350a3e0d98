//! The box share of a model (System Duo, Box): requests that ask box or track questions take
//! the detector's time, not the text model's, so they have places of their own — a quarter
//! of the model's places unless the settings say otherwise — where they never wait behind
//! text requests. One such request at a time per key and model, and `per_address` per
//! address; one that cannot start waits up to `max_wait_ms` for a place and is then refused
//! (429 `concurrency_limit` when its own key's other box request held it up, else
//! `server_overloaded`), with Retry-After.
//!
//! Deliberately absent: a box request does not also take the model's text places, and does
//! not borrow spare text places beyond its share.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::Notify;

/// A model's box share, as `/api/info` shows it under `admission.box`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BoxAdmission {
    /// Box requests in progress at once; `None`: a quarter of the model's places (at least 1).
    pub places: Option<u64>,
    /// Box requests in progress at once per key.
    pub per_key: u64,
    /// Box requests in progress at once per address.
    pub per_address: u64,
    /// Longest wait for a box place, then 429.
    pub max_wait_ms: u64,
}

impl Default for BoxAdmission {
    fn default() -> Self {
        BoxAdmission {
            places: None,
            per_key: 1,
            per_address: 8,
            max_wait_ms: 20_000,
        }
    }
}

impl BoxAdmission {
    /// The share's places for a model of `places` places.
    pub fn places_of(&self, places: u64) -> u64 {
        self.places.unwrap_or(places / 4).max(1)
    }
}

/// Why a box request was refused after its wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BoxRefusal {
    /// The model's box places (or the address's) stayed full.
    Busy,
    /// The key's own other box request held the place.
    OwnRequest,
}

#[derive(Default)]
struct Counts {
    running: u64,
    keys: HashMap<Arc<str>, u64>,
    addresses: HashMap<Arc<str>, u64>,
}

/// One model's box share.
pub struct BoxShare {
    places: u64,
    cfg: BoxAdmission,
    counts: Mutex<Counts>,
    freed: Notify,
}

/// A box place, given back when dropped.
pub struct BoxPermit {
    share: Arc<BoxShare>,
    key: Arc<str>,
    address: Arc<str>,
}

impl Drop for BoxPermit {
    fn drop(&mut self) {
        if let Ok(mut guard) = self.share.counts.lock() {
            let c = &mut *guard;
            c.running = c.running.saturating_sub(1);
            for (map, who) in [(&mut c.keys, &self.key), (&mut c.addresses, &self.address)] {
                if let Some(n) = map.get_mut(who) {
                    *n = n.saturating_sub(1);
                    if *n == 0 {
                        map.remove(who);
                    }
                }
            }
        }
        self.share.freed.notify_waiters();
    }
}

impl BoxShare {
    pub fn new(model_places: u64, cfg: BoxAdmission) -> Arc<BoxShare> {
        Arc::new(BoxShare {
            places: cfg.places_of(model_places),
            cfg,
            counts: Mutex::new(Counts::default()),
            freed: Notify::new(),
        })
    }

    /// Take a place now, or say what holds the request up.
    fn try_take(&self, key: &Arc<str>, address: &Arc<str>) -> Result<(), BoxRefusal> {
        let Ok(mut c) = self.counts.lock() else {
            return Err(BoxRefusal::Busy);
        };
        if c.keys.get(key).copied().unwrap_or(0) >= self.cfg.per_key {
            return Err(BoxRefusal::OwnRequest);
        }
        if c.running >= self.places
            || c.addresses.get(address).copied().unwrap_or(0) >= self.cfg.per_address
        {
            return Err(BoxRefusal::Busy);
        }
        c.running += 1;
        *c.keys.entry(key.clone()).or_default() += 1;
        *c.addresses.entry(address.clone()).or_default() += 1;
        Ok(())
    }

    /// A box place for `key` from `address`, waiting up to the share's `max_wait_ms`.
    pub async fn acquire(
        self: &Arc<Self>,
        key: Arc<str>,
        address: Arc<str>,
    ) -> Result<BoxPermit, BoxRefusal> {
        let deadline = tokio::time::Instant::now() + Duration::from_millis(self.cfg.max_wait_ms);
        loop {
            // Registered before the check, so a place freed in between wakes this wait.
            let freed = self.freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            match self.try_take(&key, &address) {
                Ok(()) => {
                    return Ok(BoxPermit {
                        share: self.clone(),
                        key,
                        address,
                    })
                }
                Err(why) => {
                    if tokio::time::timeout_at(deadline, freed).await.is_err() {
                        return Err(why);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn share(places: u64, wait_ms: u64) -> Arc<BoxShare> {
        BoxShare::new(
            places,
            BoxAdmission {
                max_wait_ms: wait_ms,
                ..BoxAdmission::default()
            },
        )
    }

    #[tokio::test]
    async fn a_quarter_of_the_places_one_per_key() {
        let s = share(8, 50);
        let (a, b, c): (Arc<str>, Arc<str>, Arc<str>) = ("a".into(), "b".into(), "c".into());
        let addr: Arc<str> = Arc::from("10.0.0.1");
        let first = s.acquire(a.clone(), addr.clone()).await.unwrap();
        // The key's second box request waits, then is refused as its own.
        assert_eq!(
            s.acquire(a.clone(), addr.clone()).await.err(),
            Some(BoxRefusal::OwnRequest)
        );
        let _second = s.acquire(b, addr.clone()).await.unwrap();
        // Two of eight places are the share: a third key waits, then the model is busy.
        assert_eq!(
            s.acquire(c.clone(), addr.clone()).await.err(),
            Some(BoxRefusal::Busy)
        );
        // A place given back while it waits lets it start.
        let waiting = tokio::spawn({
            let s = s.clone();
            async move { s.acquire(c, Arc::from("10.0.0.1")).await.is_ok() }
        });
        tokio::time::sleep(Duration::from_millis(10)).await;
        drop(first);
        assert!(waiting.await.unwrap());
    }

    #[tokio::test]
    async fn eight_per_address() {
        let s = BoxShare::new(
            100,
            BoxAdmission {
                max_wait_ms: 10,
                ..BoxAdmission::default()
            },
        );
        let addr: Arc<str> = Arc::from("10.0.0.2");
        let mut held = Vec::new();
        for i in 0..8 {
            held.push(
                s.acquire(Arc::from(format!("k{i}")), addr.clone())
                    .await
                    .unwrap(),
            );
        }
        assert_eq!(
            s.acquire(Arc::from("k8"), addr).await.err(),
            Some(BoxRefusal::Busy)
        );
        assert!(s
            .acquire(Arc::from("k8"), Arc::from("10.0.0.3"))
            .await
            .is_ok());
    }
}
