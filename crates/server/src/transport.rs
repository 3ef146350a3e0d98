//! Connections and the cost of a request before a handler sees it.
//!
//! - **Connections**: at most `max_connections` are served at once (past it the listener
//!   waits); a request's head must arrive within `header_timeout` (also the most a kept-alive
//!   connection may idle), and its body within `body_timeout` of the handler's start,
//!   however slowly it trickles (408 `body_timeout`).
//! - **Large bodies** (more than [`LARGE_BODY_BYTES`] as sent, compressed, or of unknown
//!   length) take one of `max_large_requests` slots, at once or 429/529 `overloaded` with
//!   Retry-After, and are answered on a thread of their own (`block_in_place`): parsing,
//!   decompression, asset scanning and tokenization never hold a thread that serves
//!   `/health`, `/metrics` or other connections. Small bodies cost little by their size and
//!   stay on the runtime.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderMap, Method, Request};
use axum::middleware::Next;
use axum::response::Response;
use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use protocol::error::{reason, ErrorCode};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Sleep;
use tower::ServiceExt;

use crate::body::{BodyTimedOut, Coding};
use crate::error::{ApiError, Shape};
use crate::AppState;

/// A body larger than this as sent is answered off the async runtime's threads.
pub const LARGE_BODY_BYTES: u64 = 64 * 1024;

/// How connections are held and large bodies admitted.
#[derive(Debug, Clone, PartialEq)]
pub struct Transport {
    /// Connections served at once; past it the listener waits for one to close.
    pub max_connections: usize,
    /// Time for a request's head to arrive, and the most a kept-alive connection idles.
    pub header_timeout: Duration,
    /// Time for a request's whole body to arrive.
    pub body_timeout: Duration,
    /// Large bodies (see [`LARGE_BODY_BYTES`]) read and answered at once; more are refused.
    pub max_large_requests: usize,
}

impl Default for Transport {
    fn default() -> Self {
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        Transport {
            max_connections: 4096,
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(30),
            max_large_requests: 2 * cores + 2,
        }
    }
}

/// The slots large bodies take.
pub(crate) struct Admission {
    large: Arc<Semaphore>,
    body_timeout: Duration,
}

impl Admission {
    pub(crate) fn new(t: &Transport) -> Admission {
        Admission {
            large: Arc::new(Semaphore::new(t.max_large_requests.max(1))),
            body_timeout: t.body_timeout,
        }
    }
}

/// Whether a request's body may be large: more than [`LARGE_BODY_BYTES`] as sent, of unknown
/// length, or compressed (it may inflate to the body limit).
fn large(headers: &HeaderMap, method: &Method) -> bool {
    if method == Method::GET || method == Method::HEAD {
        return false;
    }
    // A coding the handler refuses (415) counts as compressed: it is refused cheaply anyway.
    let compressed = !matches!(crate::body::coding(headers), Ok(Coding::Identity));
    let length = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    compressed || length.is_none_or(|n| n > LARGE_BODY_BYTES)
}

/// Every request: the body's deadline; a large body's slot and its own thread.
pub(crate) async fn admit(
    State(state): State<Arc<AppState>>,
    req: Request<Body>,
    next: Next,
) -> Response {
    let admission = &state.admission;
    let started = std::time::Instant::now();
    let is_large = large(req.headers(), req.method());
    let (parts, body) = req.into_parts();
    let body = Body::new(Deadline::new(body, admission.body_timeout));
    if !is_large {
        return next.run(Request::from_parts(parts, body)).await;
    }
    let flavor = crate::error::shape_of_path(parts.uri.path(), state.config.schema);
    // Refused before any handler: the time spent here is the request's (Server-Timing is on
    // every answer, errors included).
    let refuse = |e: ApiError| {
        if flavor == Shape::Sie {
            return crate::respond::sie::error_response(&parts.headers, e);
        }
        let phases = crate::timing::Phases {
            parse: started.elapsed(),
            total: started.elapsed(),
            ..Default::default()
        };
        crate::respond::json::error_response(&e, flavor, Some(&phases))
    };
    let Ok(permit) = admission.large.clone().try_acquire_owned() else {
        metrics::counter!("vllm_srun_large_requests_refused_total").increment(1);
        let e = ApiError::new(
            ErrorCode::Overloaded,
            "every slot for large request bodies is taken; retry after the Retry-After delay",
        )
        .with_reason(reason::QUEUE_FULL);
        return refuse(e);
    };
    // The handler runs inside its connection's task, which reads the socket: the body is
    // read here, before that task is held by the work.
    let bytes = match crate::body::raw(body, state.config.max_request_bytes).await {
        Ok(b) => b,
        Err(e) => return refuse(ApiError::from(e)),
    };
    let req = Request::from_parts(parts, Body::from(bytes));
    off_runtime(next.run(req), permit).await
}

/// Run `work` to its end on a thread that no other task needs: the runtime hands this
/// worker's other tasks to a fresh thread first. On a single-threaded runtime (unit tests)
/// it runs in place.
async fn off_runtime<F: Future<Output = Response>>(
    work: F,
    permit: OwnedSemaphorePermit,
) -> Response {
    let handle = tokio::runtime::Handle::current();
    let resp = if handle.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread {
        tokio::task::block_in_place(|| handle.block_on(work))
    } else {
        work.await
    };
    drop(permit);
    resp
}

/// A body that fails once its deadline passes, however its bytes trickle in.
struct Deadline {
    inner: Body,
    sleep: Pin<Box<Sleep>>,
    ms: u64,
}

impl Deadline {
    fn new(inner: Body, timeout: Duration) -> Deadline {
        Deadline {
            inner,
            sleep: Box::pin(tokio::time::sleep(timeout)),
            ms: u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX),
        }
    }
}

impl http_body::Body for Deadline {
    type Data = axum::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        if let Poll::Ready(frame) = Pin::new(&mut self.inner).poll_frame(cx) {
            return Poll::Ready(frame);
        }
        if self.sleep.as_mut().poll(cx).is_ready() {
            return Poll::Ready(Some(Err(axum::Error::new(BodyTimedOut(self.ms)))));
        }
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// Serve `app` on `listener` until `stop` resolves, within the connection limits.
pub(crate) async fn serve(
    listener: tokio::net::TcpListener,
    app: Router,
    t: &Transport,
    stop: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let connections = Arc::new(Semaphore::new(t.max_connections.max(1)));
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(t.header_timeout);
    builder
        .http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(t.header_timeout)
        .keep_alive_timeout(t.header_timeout);
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let mut stop = std::pin::pin!(stop);
    loop {
        let permit = tokio::select! {
            p = connections.clone().acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => break,
            },
            () = &mut stop => break,
        };
        let (stream, remote) = tokio::select! {
            r = listener.accept() => match r {
                Ok(c) => c,
                Err(e) => {
                    // Out of descriptors or a connection reset before it was taken: wait a
                    // moment instead of spinning.
                    tracing::debug!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                }
            },
            () = &mut stop => break,
        };
        let _ = stream.set_nodelay(true);
        tracing::trace!(%remote, "connection");
        // Handlers that count work per network address read the peer from ConnectInfo.
        let service = TowerToHyperService::new(app.clone().map_request(
            move |mut req: axum::http::Request<hyper::body::Incoming>| {
                req.extensions_mut()
                    .insert(axum::extract::ConnectInfo(remote));
                req
            },
        ));
        let builder = builder.clone();
        let watcher = graceful.watcher();
        let first_byte = t.header_timeout;
        tokio::spawn(async move {
            // The protocol sniff (HTTP/1 or 2) waits for bytes with no timer of its own: a
            // connection that sends nothing is closed when the head's time is up.
            let mut b = [0u8; 1];
            match tokio::time::timeout(first_byte, stream.peek(&mut b)).await {
                Ok(Ok(n)) if n > 0 => {}
                _ => return,
            }
            let conn = builder.serve_connection_with_upgrades(TokioIo::new(stream), service);
            let _ = watcher.watch(conn).await;
            drop(permit);
        });
    }
    drop(listener);
    // Requests in flight finish; give them a bounded time.
    let _ = tokio::time::timeout(Duration::from_secs(30), graceful.shutdown()).await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(pairs: &[(header::HeaderName, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(k.clone(), HeaderValue::from_static(v));
        }
        h
    }

    #[test]
    fn large_bodies_are_long_unknown_or_compressed() {
        let small = headers(&[(header::CONTENT_LENGTH, "100")]);
        assert!(!large(&small, &Method::POST));
        assert!(!large(&HeaderMap::new(), &Method::GET));
        let long = headers(&[(header::CONTENT_LENGTH, "65537")]);
        assert!(large(&long, &Method::POST));
        let edge = headers(&[(header::CONTENT_LENGTH, "65536")]);
        assert!(!large(&edge, &Method::POST));
        assert!(large(&HeaderMap::new(), &Method::POST), "unknown length");
        let zipped = headers(&[
            (header::CONTENT_LENGTH, "100"),
            (header::CONTENT_ENCODING, "gzip"),
        ]);
        assert!(large(&zipped, &Method::POST));
        let identity = headers(&[
            (header::CONTENT_LENGTH, "100"),
            (header::CONTENT_ENCODING, "identity"),
        ]);
        assert!(!large(&identity, &Method::POST));
    }

    #[tokio::test]
    async fn a_body_that_never_ends_times_out_with_its_deadline() {
        let never = futures_util::stream::pending::<Result<axum::body::Bytes, std::io::Error>>();
        let body = Body::new(Deadline::new(
            Body::from_stream(never),
            Duration::from_millis(50),
        ));
        let e = crate::body::raw(body, 1000).await.unwrap_err();
        assert_eq!(e, crate::body::BodyError::TimedOut(50));
        let api = ApiError::from(e);
        assert_eq!(api.status(), axum::http::StatusCode::REQUEST_TIMEOUT);
        assert_eq!(api.reason, Some("body_timeout"));
        // A body that arrives in time is read whole.
        let body = Body::new(Deadline::new(Body::from("{}"), Duration::from_secs(5)));
        assert_eq!(&crate::body::raw(body, 1000).await.unwrap()[..], b"{}");
    }
}
