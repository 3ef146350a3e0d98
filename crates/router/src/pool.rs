//! A deployment's workers: the next request goes to the ready worker with the fewest
//! outstanding requests; a worker whose `/health` is not ready gets none.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{Request, StatusCode};

use crate::upstream::Upstream;

pub struct Worker {
    pub upstream: Arc<dyn Upstream>,
    outstanding: AtomicUsize,
    ready: AtomicBool,
    /// What its last `/health` said, for the status page.
    seen: Mutex<Seen>,
}

/// A worker's last health answer: `None` when it could not be reached; else its overall
/// status word and each model's state word (a worker that serves several models lists them).
#[derive(Debug, Clone, Default)]
pub struct Seen {
    pub answer: Option<Health>,
}

#[derive(Debug, Clone, Default)]
pub struct Health {
    pub ready: bool,
    pub status: String,
    pub models: Vec<(String, String)>,
}

impl Health {
    /// Read a `/health` answer: its `status` word and its `models` map, if any.
    fn read(ready: bool, body: &[u8]) -> Health {
        let v: serde_json::Value = serde_json::from_slice(body).unwrap_or_default();
        let status = v
            .get("status")
            .and_then(serde_json::Value::as_str)
            .unwrap_or(if ready { "ready" } else { "unavailable" })
            .to_string();
        let models = v
            .get("models")
            .and_then(serde_json::Value::as_object)
            .map(|m| {
                m.iter()
                    .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                    .collect()
            })
            .unwrap_or_default();
        Health {
            ready,
            status,
            models,
        }
    }
}

/// Why no worker was picked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PickError {
    /// Every ready worker holds its most outstanding requests.
    Busy,
    /// No worker is ready.
    NotReady,
}

pub struct Pool {
    workers: Vec<Arc<Worker>>,
    max_outstanding: usize,
    next: AtomicUsize,
    /// When the last on-demand health check ran (ms since `born`).
    last_check_ms: AtomicU64,
    born: Instant,
}

/// A request held by a worker; dropping it frees the place.
pub struct Lease {
    pub worker: Arc<Worker>,
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.worker.outstanding.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Pool {
    pub fn new(upstreams: Vec<Arc<dyn Upstream>>, max_outstanding: usize) -> Pool {
        Pool {
            workers: upstreams
                .into_iter()
                .map(|upstream| {
                    Arc::new(Worker {
                        upstream,
                        outstanding: AtomicUsize::new(0),
                        ready: AtomicBool::new(false),
                        seen: Mutex::new(Seen::default()),
                    })
                })
                .collect(),
            max_outstanding: max_outstanding.max(1),
            next: AtomicUsize::new(0),
            last_check_ms: AtomicU64::new(0),
            born: Instant::now(),
        }
    }

    /// [`Pool::pick`], but when no worker is ready, ask their health once more first (at
    /// most every 200 ms), so a worker that just became ready is not refused until the next
    /// scheduled check.
    pub async fn pick_checked(&self) -> Result<Lease, PickError> {
        match self.pick() {
            Err(PickError::NotReady) => {
                let now = self.born.elapsed().as_millis() as u64 + 1_000;
                let last = self.last_check_ms.load(Ordering::Acquire);
                if now.saturating_sub(last) >= 200
                    && self
                        .last_check_ms
                        .compare_exchange(last, now, Ordering::AcqRel, Ordering::Acquire)
                        .is_ok()
                {
                    self.check().await;
                }
                self.pick()
            }
            r => r,
        }
    }

    /// The ready worker with the fewest outstanding requests (ties taken in turn).
    pub fn pick(&self) -> Result<Lease, PickError> {
        let n = self.workers.len();
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        let mut any_ready = false;
        loop {
            let mut best: Option<(&Arc<Worker>, usize)> = None;
            for i in 0..n {
                let w = &self.workers[(start + i) % n];
                if !w.ready.load(Ordering::Acquire) {
                    continue;
                }
                any_ready = true;
                let o = w.outstanding.load(Ordering::Acquire);
                if o < self.max_outstanding && best.is_none_or(|(_, b)| o < b) {
                    best = Some((w, o));
                }
            }
            let Some((w, o)) = best else {
                return Err(if any_ready {
                    PickError::Busy
                } else {
                    PickError::NotReady
                });
            };
            // Take the place unless another request took it meanwhile; then look again.
            if w.outstanding
                .compare_exchange(o, o + 1, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                return Ok(Lease { worker: w.clone() });
            }
        }
    }

    /// Whether some worker is ready.
    pub fn ready(&self) -> bool {
        self.workers.iter().any(|w| w.ready.load(Ordering::Acquire))
    }

    /// What each worker's last `/health` said.
    pub fn seen(&self) -> Vec<Seen> {
        self.workers
            .iter()
            .map(|w| w.seen.lock().map(|s| s.clone()).unwrap_or_default())
            .collect()
    }

    /// Ask every worker's `/health` once.
    pub async fn check(&self) {
        let checks = self.workers.iter().map(|w| async move {
            let answer = async {
                let req = Request::get("/health").body(Body::empty()).ok()?;
                let r = w.upstream.call(req).await.ok()?;
                let ready = r.status() == StatusCode::OK;
                let body = axum::body::to_bytes(r.into_body(), 64 * 1024).await;
                Some(Health::read(ready, &body.unwrap_or_default()))
            };
            let answer = tokio::time::timeout(Duration::from_secs(2), answer)
                .await
                .ok()
                .flatten();
            let ok = answer.as_ref().is_some_and(|h| h.ready);
            if let Ok(mut s) = w.seen.lock() {
                s.answer = answer;
            }
            let was = w.ready.swap(ok, Ordering::AcqRel);
            if was != ok {
                tracing::info!(
                    worker = w.upstream.name(),
                    ready = ok,
                    "worker health changed"
                );
            }
        });
        futures_util::future::join_all(checks).await;
    }

    /// Check health now and then every `every`, for as long as the pool lives.
    pub fn watch(self: &Arc<Self>, every: Duration) {
        let weak = Arc::downgrade(self);
        tokio::spawn(async move {
            loop {
                let Some(pool) = weak.upgrade() else { return };
                pool.check().await;
                drop(pool);
                tokio::time::sleep(every).await;
            }
        });
    }

    #[cfg(test)]
    fn set_ready(&self, i: usize, ready: bool) {
        self.workers[i].ready.store(ready, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::upstream::{BoxFuture, UpstreamError};
    use axum::http::Response;

    struct Nowhere(String);
    impl Upstream for Nowhere {
        fn call(&self, _: Request<Body>) -> BoxFuture<Result<Response<Body>, UpstreamError>> {
            let n = self.0.clone();
            Box::pin(async move { Err(UpstreamError::Unreachable(n, "test".into())) })
        }
        fn name(&self) -> &str {
            &self.0
        }
    }

    fn pool(n: usize, max: usize) -> Pool {
        Pool::new(
            (0..n)
                .map(|i| Arc::new(Nowhere(format!("w{i}"))) as Arc<dyn Upstream>)
                .collect(),
            max,
        )
    }

    #[test]
    fn least_outstanding_ready_worker_wins() {
        let p = pool(3, 2);
        assert_eq!(p.pick().err(), Some(PickError::NotReady));
        p.set_ready(0, true);
        p.set_ready(2, true);
        let a = p.pick().unwrap();
        let b = p.pick().unwrap();
        // Two ready workers: one request each before either gets a second.
        assert_ne!(a.worker.upstream.name(), b.worker.upstream.name());
        assert!([a.worker.upstream.name(), b.worker.upstream.name()]
            .iter()
            .all(|n| *n != "w1"));
        let c = p.pick().unwrap();
        let d = p.pick().unwrap();
        assert_eq!(p.pick().err(), Some(PickError::Busy));
        drop(c);
        let e = p.pick().unwrap();
        drop((a, b, d, e));
        p.set_ready(0, false);
        p.set_ready(2, false);
        assert_eq!(p.pick().err(), Some(PickError::NotReady));
    }

    #[tokio::test]
    async fn an_unreachable_worker_is_not_ready() {
        let p = pool(1, 1);
        p.set_ready(0, true);
        p.check().await;
        assert!(!p.ready());
    }
}
