//! The gateway's side: publish a work item to its model's stream and wait for the answer on
//! the gateway's own inbox. A worker that dies after pulling an item leaves it unacknowledged;
//! JetStream gives it to another worker after the ack wait, so the request is still answered.
//! Should two workers both answer one item (one finished but died before its ack reached the
//! server), the first answer is kept and the second counted and dropped: no request is
//! answered twice.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::jetstream::{self, context::PublishErrorKind};
use futures_util::StreamExt;
use tokio::sync::oneshot;

use crate::item::{subject, Answer, WorkItem};
use crate::{now_ms, QueueError};

type Pending = Arc<Mutex<HashMap<String, oneshot::Sender<Answer>>>>;

/// A connection to NATS that publishes work and routes answers back to their requests.
#[derive(Clone)]
pub struct Gateway {
    client: async_nats::Client,
    js: jetstream::Context,
    inbox: String,
    pending: Pending,
    duplicates: Arc<AtomicU64>,
}

/// Takes the request's waiter out of the map however `submit` ends (answer, timeout, or the
/// caller dropping the future), so the map never keeps a request nobody waits for.
struct Waiting<'a> {
    pending: &'a Pending,
    id: String,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        if let Ok(mut p) = self.pending.lock() {
            p.remove(&self.id);
        }
    }
}

impl Gateway {
    /// Connect and subscribe to this gateway's inbox.
    pub async fn connect(url: &str) -> Result<Gateway, QueueError> {
        let client = crate::connect(url)
            .await
            .map_err(|e| QueueError::Connect(e.to_string()))?;
        let inbox = format!("_INBOX.sie.{}", uuid::Uuid::new_v4().simple());
        let mut answers = client
            .subscribe(format!("{inbox}.*"))
            .await
            .map_err(|e| QueueError::Connect(e.to_string()))?;
        let pending: Pending = Arc::default();
        let duplicates = Arc::new(AtomicU64::new(0));
        let (p, d, prefix) = (pending.clone(), duplicates.clone(), format!("{inbox}."));
        tokio::spawn(async move {
            while let Some(msg) = answers.next().await {
                let Some(id) = msg.subject.as_str().strip_prefix(&prefix) else {
                    continue;
                };
                let waiter = p.lock().ok().and_then(|mut p| p.remove(id));
                match (waiter, Answer::from_msgpack(&msg.payload)) {
                    (Some(w), Ok(a)) => {
                        let _ = w.send(a);
                    }
                    (Some(_), Err(e)) => {
                        tracing::warn!(id, error = %e, "an answer that does not decode");
                    }
                    (None, _) => {
                        // Answered already (a redelivered item answered again) or given up.
                        d.fetch_add(1, Ordering::Relaxed);
                        metrics::counter!("sie_gateway_unclaimed_answers_total").increment(1);
                    }
                }
            }
        });
        Ok(Gateway {
            js: jetstream::new(client.clone()),
            client,
            inbox,
            pending,
            duplicates,
        })
    }

    /// Whether the connection to NATS is up.
    pub fn connected(&self) -> bool {
        self.client.connection_state() == async_nats::connection::State::Connected
    }

    /// Answers that arrived for a request already answered or given up (each dropped).
    pub fn unclaimed_answers(&self) -> u64 {
        self.duplicates.load(Ordering::Relaxed)
    }

    /// Publish `item` (its `reply` is set here) and wait for its answer until its deadline.
    pub async fn submit(&self, mut item: WorkItem) -> Result<Answer, QueueError> {
        item.reply = format!("{}.{}", self.inbox, item.id);
        let (tx, rx) = oneshot::channel();
        self.pending
            .lock()
            .map_err(|_| QueueError::Internal("the pending map is poisoned".into()))?
            .insert(item.id.clone(), tx);
        let _waiting = Waiting {
            pending: &self.pending,
            id: item.id.clone(),
        };
        let deadline = tokio::time::Instant::now()
            + Duration::from_millis(item.deadline_ms.saturating_sub(now_ms()));
        let payload = item
            .to_msgpack()
            .map_err(|e| QueueError::Internal(e.to_string()))?;
        let max = self.client.server_info().max_payload;
        if max > 0 && payload.len() > max {
            return Err(QueueError::TooLarge {
                size: payload.len(),
                max,
            });
        }
        let mut headers = async_nats::HeaderMap::new();
        headers.insert("Nats-Msg-Id", item.id.as_str());
        let published = async {
            self.js
                .publish_with_headers(subject(&item.model), headers, payload.into())
                .await?
                .await
        };
        match tokio::time::timeout_at(deadline, published).await {
            Err(_) => return Err(QueueError::Timeout),
            Ok(Err(e)) => {
                return Err(match e.kind() {
                    PublishErrorKind::StreamNotFound => QueueError::NoWorkers(item.model),
                    PublishErrorKind::TimedOut => QueueError::Timeout,
                    _ => QueueError::Unavailable(e.to_string()),
                })
            }
            Ok(Ok(_)) => {}
        }
        match tokio::time::timeout_at(deadline, rx).await {
            Ok(Ok(a)) => Ok(a),
            Ok(Err(_)) => Err(QueueError::Internal("the answer channel closed".into())),
            Err(_) => Err(QueueError::Timeout),
        }
    }
}
