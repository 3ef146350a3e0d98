//! SIE work over NATS JetStream, as sie-api describes a cluster: a gateway publishes each
//! encode, score, extract or generate request as a msgpack work item to its model's
//! work-queue stream; workers pull with one durable consumer per model, run the items on
//! their engine, publish each answer to the item's reply subject and ack after answering.
//!
//! This crate knows NATS and the item format, not HTTP: the server crate turns requests into
//! items and answers into responses ([`worker::Handler`] is implemented there).

pub mod gateway;
pub mod item;
pub mod worker;

pub use gateway::Gateway;
pub use item::{Answer, Route, WorkItem};
pub use worker::{Handler, Worker, WorkerConfig};

/// Why the queue could not answer.
#[derive(Debug, thiserror::Error)]
pub enum QueueError {
    #[error("cannot connect to NATS: {0}")]
    Connect(String),
    /// No stream takes the model's subject: no worker serving it ever started.
    #[error("no worker serves model '{0}'")]
    NoWorkers(String),
    #[error("the deadline passed before an answer came")]
    Timeout,
    /// The item is larger than the NATS server takes in one message (its `max_payload`).
    #[error("the work item is {size} bytes; the NATS server takes at most {max} in one message (max_payload)")]
    TooLarge { size: usize, max: usize },
    #[error("the queue is unavailable: {0}")]
    Unavailable(String),
    #[error("internal queue error: {0}")]
    Internal(String),
}

/// Milliseconds since the Unix epoch: deadlines cross machines, so they are wall-clock time.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// A client that keeps trying when NATS is not up yet (processes of a cluster start in any
/// order) and reconnects when it goes away; only a malformed address fails here.
async fn connect(url: &str) -> Result<async_nats::Client, async_nats::ConnectError> {
    async_nats::ConnectOptions::new()
        .retry_on_initial_connect()
        .connect(url)
        .await
}
