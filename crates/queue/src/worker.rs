//! The worker's side: for each model it serves, a work-queue stream and one durable pull
//! consumer shared by every worker of that model. Items are pulled only as fast as places
//! free up (no worker hoards items another could run), handed to the local engine at once
//! (its queue batches them as it batches HTTP requests), answered on the item's reply subject,
//! and acknowledged after the answer is sent. While an item runs, the worker tells JetStream
//! it is still working on it (a progress ack every third of the ack wait); a worker that dies
//! stops doing so and the item goes to another worker when the ack wait runs out. An item
//! pulled after its deadline is answered with a timeout error and not run.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::{self, consumer::pull, stream, AckKind};
use futures_util::StreamExt;
use tokio::sync::Semaphore;

use crate::item::{stream_name, subject, Answer, WorkItem, CONSUMER};
use crate::{now_ms, QueueError};

/// What runs an item: the worker's own SIE routes.
pub trait Handler: Send + Sync + 'static {
    /// Answer `item` (within its deadline; the worker also stops waiting at the deadline).
    fn handle(&self, item: WorkItem) -> Pin<Box<dyn Future<Output = Answer> + Send>>;
    /// The timeout error for an item past its deadline, in the form its caller asked for.
    fn expired(&self, item: &WorkItem) -> Answer;
    /// The error for an answer of `size` bytes that NATS cannot carry (at most `max`).
    fn too_large(&self, item: &WorkItem, size: usize, max: usize) -> Answer;
}

#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// Items this worker runs at once, over all its models.
    pub concurrency: usize,
    /// How long JetStream waits for an ack (or a progress ack) before it redelivers.
    pub ack_wait: Duration,
    /// How long a stream keeps an item nobody pulled.
    pub max_age: Duration,
}

impl Default for WorkerConfig {
    fn default() -> WorkerConfig {
        WorkerConfig {
            concurrency: 32,
            ack_wait: Duration::from_secs(5),
            max_age: Duration::from_secs(600),
        }
    }
}

/// The stream and consumer of `model`, created if missing (every worker and test creates
/// them the same way, so the first one wins and the rest find them).
pub async fn consumer(
    js: &jetstream::Context,
    model: &str,
    config: &WorkerConfig,
) -> Result<jetstream::consumer::Consumer<pull::Config>, QueueError> {
    let s = js
        .get_or_create_stream(stream::Config {
            name: stream_name(model),
            subjects: vec![subject(model)],
            retention: stream::RetentionPolicy::WorkQueue,
            max_age: config.max_age,
            duplicate_window: Duration::from_secs(120),
            ..Default::default()
        })
        .await
        .map_err(|e| QueueError::Unavailable(e.to_string()))?;
    s.get_or_create_consumer(
        CONSUMER,
        pull::Config {
            durable_name: Some(CONSUMER.into()),
            ack_wait: config.ack_wait,
            ack_policy: jetstream::consumer::AckPolicy::Explicit,
            ..Default::default()
        },
    )
    .await
    .map_err(|e| QueueError::Unavailable(e.to_string()))
}

/// A worker's connection to NATS.
pub struct Worker {
    client: async_nats::Client,
    js: jetstream::Context,
}

impl Worker {
    /// Connect; when NATS is not up yet (or goes away), the client keeps trying by itself.
    pub async fn connect(url: &str) -> Result<Worker, QueueError> {
        let client = crate::connect(url)
            .await
            .map_err(|e| QueueError::Connect(e.to_string()))?;
        Ok(Worker {
            js: jetstream::new(client.clone()),
            client,
        })
    }

    /// Pull and answer the items of `models` until a pull loop ends.
    pub async fn run(
        self,
        models: Vec<String>,
        config: WorkerConfig,
        handler: Arc<dyn Handler>,
    ) -> Result<(), QueueError> {
        let places = Arc::new(Semaphore::new(config.concurrency.max(1)));
        let mut loops = tokio::task::JoinSet::new();
        for model in models {
            let (js, client, places, handler, config) = (
                self.js.clone(),
                self.client.clone(),
                places.clone(),
                handler.clone(),
                config.clone(),
            );
            loops.spawn(async move {
                // NATS may come up after the worker: try until the stream is there.
                let c = loop {
                    match consumer(&js, &model, &config).await {
                        Ok(c) => break c,
                        Err(e) => {
                            tracing::warn!(model, error = %e, "no stream yet; retrying");
                            tokio::time::sleep(Duration::from_secs(1)).await;
                        }
                    }
                };
                pull_loop(model, c, client, places, handler, config).await
            });
        }
        match loops.join_next().await {
            Some(Ok(r)) => r,
            Some(Err(e)) => Err(QueueError::Internal(e.to_string())),
            None => Ok(()),
        }
    }
}

async fn pull_loop(
    model: String,
    consumer: jetstream::consumer::Consumer<pull::Config>,
    client: async_nats::Client,
    places: Arc<Semaphore>,
    handler: Arc<dyn Handler>,
    config: WorkerConfig,
) -> Result<(), QueueError> {
    loop {
        // Ask for as many items as there are free places, at least one.
        let first = places
            .clone()
            .acquire_owned()
            .await
            .map_err(|e| QueueError::Internal(e.to_string()))?;
        let mut permits = vec![first];
        while let Ok(p) = places.clone().try_acquire_owned() {
            permits.push(p);
        }
        let batch = consumer
            .batch()
            .max_messages(permits.len())
            .expires(Duration::from_millis(500))
            .messages()
            .await;
        let mut batch = match batch {
            Ok(b) => b,
            Err(e) => {
                tracing::warn!(model, error = %e, "pull failed; retrying");
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
        };
        let mut formed = 0u32;
        while let Some(msg) = batch.next().await {
            let msg = match msg {
                Ok(m) => m,
                Err(e) => {
                    tracing::debug!(model, error = %e, "pull ended");
                    break;
                }
            };
            let Some(permit) = permits.pop() else {
                // More than asked for: leave it for the ack wait to give to someone.
                break;
            };
            formed += 1;
            let (client, handler, ack_wait) = (client.clone(), handler.clone(), config.ack_wait);
            tokio::spawn(async move {
                answer_one(msg, client, handler, ack_wait).await;
                drop(permit);
            });
        }
        if formed > 0 {
            metrics::histogram!("sie_worker_batch_size").record(formed as f64);
        }
    }
}

async fn answer_one(
    msg: jetstream::Message,
    client: async_nats::Client,
    handler: Arc<dyn Handler>,
    ack_wait: Duration,
) {
    let item = match WorkItem::from_msgpack(&msg.payload) {
        Ok(i) => i,
        Err(e) => {
            // Never answerable: tell JetStream not to deliver it again.
            tracing::warn!(error = %e, "a work item that does not decode; dropped");
            let _ = msg.ack_with(AckKind::Term).await;
            return;
        }
    };
    let left = item.deadline_ms.saturating_sub(now_ms());
    let answer = if left == 0 {
        metrics::counter!("sie_worker_items_expired_total").increment(1);
        handler.expired(&item)
    } else {
        let work = handler.handle(item.clone());
        let deadline = tokio::time::sleep(Duration::from_millis(left));
        tokio::pin!(work, deadline);
        let every = ack_wait / 3;
        let mut progress = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        loop {
            tokio::select! {
                a = &mut work => break a,
                _ = &mut deadline => {
                    metrics::counter!("sie_worker_items_expired_total").increment(1);
                    break handler.expired(&item);
                }
                _ = progress.tick() => {
                    let _ = msg.ack_with(AckKind::Progress).await;
                }
            }
        }
    };
    let max = client.server_info().max_payload;
    let published = match answer.to_msgpack() {
        Ok(bytes) if max > 0 && bytes.len() > max => {
            // Never deliverable as it is: answer that instead of leaving the item to be run
            // again by every worker.
            let refusal = handler.too_large(&item, bytes.len(), max);
            match refusal.to_msgpack() {
                Ok(b) => client.publish(item.reply.clone(), b.into()).await,
                Err(e) => {
                    tracing::warn!(error = %e, "an answer that does not encode");
                    return;
                }
            }
        }
        Ok(bytes) => client.publish(item.reply.clone(), bytes.into()).await,
        Err(e) => {
            tracing::warn!(error = %e, "an answer that does not encode");
            return;
        }
    };
    if let Err(e) = published {
        // Not acked: another worker answers it after the ack wait.
        tracing::warn!(error = %e, "the answer was not sent");
        return;
    }
    // The answer first, then the ack (one connection keeps its messages in order): a worker
    // that dies between the two causes a second answer, which the gateway drops, never a
    // lost one.
    if let Err(e) = msg.ack().await {
        tracing::warn!(error = %e, "ack failed");
    }
    metrics::counter!("sie_worker_requests_total").increment(1);
}
