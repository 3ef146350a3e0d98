//! What travels through the queue: a work item (one SIE request as the gateway received it)
//! and its answer, both msgpack; and the names a model's work goes under.

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The SIE operations the gateway forwards (sie-api: encode, score, extract; generate too).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Route {
    Encode,
    Score,
    Extract,
    Generate,
}

impl Route {
    pub fn word(self) -> &'static str {
        match self {
            Route::Encode => "encode",
            Route::Score => "score",
            Route::Extract => "extract",
            Route::Generate => "generate",
        }
    }

    /// The route of a path word (`encode` in `/v1/encode/{model}`).
    pub fn of_word(w: &str) -> Option<Route> {
        [Route::Encode, Route::Score, Route::Extract, Route::Generate]
            .into_iter()
            .find(|r| r.word() == w)
    }

    /// The worker's path for this route and model.
    pub fn path(self, model: &str) -> String {
        format!("/v1/{}/{model}", self.word())
    }
}

/// One SIE request as the gateway received it: the body bytes untouched (msgpack or JSON,
/// as the client sent them) and the headers that decide how it is read and answered.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkItem {
    /// Unique per request: the gateway matches answers to requests by it, and JetStream
    /// drops a second publish of the same id (`Nats-Msg-Id`).
    pub id: String,
    /// The caller's `X-Request-Id` (or the gateway's), echoed by the worker.
    pub request_id: String,
    pub route: Route,
    pub model: String,
    pub content_type: Option<String>,
    pub accept: Option<String>,
    pub traceparent: Option<String>,
    pub body: Bytes,
    /// Milliseconds since the Unix epoch after which the item is not worth answering: a
    /// worker that pulls it later drops it with a timeout error.
    pub deadline_ms: u64,
    /// The subject the answer is published to (the gateway's inbox for this request).
    pub reply: String,
}

/// A worker's answer: the HTTP status, the headers worth carrying (content type, timings,
/// trace id, Retry-After) and the body bytes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Answer {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Bytes,
}

impl WorkItem {
    pub fn to_msgpack(&self) -> Result<Vec<u8>, rmp_serde::encode::Error> {
        rmp_serde::to_vec_named(self)
    }

    pub fn from_msgpack(b: &[u8]) -> Result<WorkItem, rmp_serde::decode::Error> {
        rmp_serde::from_slice(b)
    }
}

impl Answer {
    pub fn to_msgpack(&self) -> Result<Vec<u8>, rmp_serde::encode::Error> {
        rmp_serde::to_vec_named(self)
    }

    pub fn from_msgpack(b: &[u8]) -> Result<Answer, rmp_serde::decode::Error> {
        rmp_serde::from_slice(b)
    }
}

/// A model name as one subject token and stream name: letters, digits, `-` and `_` kept,
/// anything else (`/`, `.`, spaces) as `_`, and then a short hash of the name so that two
/// names that differ only there do not share a stream.
fn token(model: &str) -> String {
    let kept: String = model
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if kept == model && !model.is_empty() {
        return kept;
    }
    let hash = Sha256::digest(model.as_bytes());
    format!("{kept}_{}", &hex::encode(hash)[..8])
}

/// The subject a model's work items are published to.
pub fn subject(model: &str) -> String {
    format!("sie.work.{}", token(model))
}

/// The JetStream stream (work-queue retention) that holds a model's items.
pub fn stream_name(model: &str) -> String {
    format!("SIE_{}", token(model))
}

/// The durable pull consumer every worker of a model shares.
pub const CONSUMER: &str = "sie-workers";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_one_token_and_distinct() {
        assert_eq!(subject("minilm-l6"), "sie.work.minilm-l6");
        assert_eq!(stream_name("minilm-l6"), "SIE_minilm-l6");
        let a = subject("BAAI/bge-m3");
        let b = subject("BAAI_bge-m3");
        let c = subject("BAAI.bge-m3");
        assert!(a.starts_with("sie.work.BAAI_bge-m3_"), "{a}");
        assert_eq!(b, "sie.work.BAAI_bge-m3");
        assert_ne!(a, c);
        for s in [&a, &c] {
            assert_eq!(s.matches('.').count(), 2, "{s}");
        }
        assert!(!stream_name("").is_empty());
    }

    #[test]
    fn items_round_trip_as_msgpack_with_binary_bodies() {
        let item = WorkItem {
            id: "i1".into(),
            request_id: "r1".into(),
            route: Route::Score,
            model: "m".into(),
            content_type: Some("application/msgpack".into()),
            accept: None,
            traceparent: None,
            body: Bytes::from_static(&[0x81, 0xa1, 0x61, 0x01]),
            deadline_ms: 1_700_000_000_000,
            reply: "_INBOX.x.i1".into(),
        };
        let bytes = item.to_msgpack().unwrap();
        // The body is one msgpack bin (0xc4 len …), not an array of integers.
        assert!(bytes.windows(2).any(|w| w == [0xc4, 4]));
        assert_eq!(WorkItem::from_msgpack(&bytes).unwrap(), item);
        assert_eq!(Route::of_word("extract"), Some(Route::Extract));
        assert_eq!(Route::Generate.path("a/b"), "/v1/generate/a/b");
    }
}
