//! Where requests go: a worker or backend over HTTP, or the engine of this very process,
//! behind one trait. Bodies stream both ways; dropping a response body drops the upstream
//! call (a client that goes away cancels its generation).

use std::future::Future;
use std::pin::Pin;

use axum::body::{Body, HttpBody};
use axum::http::{header, HeaderMap, HeaderName, HeaderValue, Request, Response};
use tower::ServiceExt;

pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    #[error("cannot reach {0}: {1}")]
    Unreachable(String, String),
}

/// One place requests can be sent.
pub trait Upstream: Send + Sync + 'static {
    /// Send a request (its URI holds only the path and query) and get the answer's head;
    /// the body streams.
    fn call(&self, req: Request<Body>) -> BoxFuture<Result<Response<Body>, UpstreamError>>;
    /// How it is named in logs and errors.
    fn name(&self) -> &str;
}

/// Headers that belong to one hop, never forwarded.
pub fn hop_by_hop(name: &HeaderName) -> bool {
    matches!(
        name.as_str(),
        "connection"
            | "keep-alive"
            | "proxy-connection"
            | "transfer-encoding"
            | "te"
            | "trailer"
            | "upgrade"
            | "host"
    )
}

/// The length of a body whose bytes are all known (the router's own calls, edited bodies),
/// sent as its `Content-Length`: a worker takes a body of unknown length for a large one, which
/// costs one of its few large-body slots (429 once they are taken) and a thread of its own.
fn known_length(body: &Body) -> Option<HeaderValue> {
    body.size_hint().exact().map(HeaderValue::from)
}

/// A server reached over HTTP.
pub struct HttpUpstream {
    base: String,
    client: reqwest::Client,
    api_key: Option<String>,
}

impl HttpUpstream {
    pub fn new(base: &str, client: reqwest::Client, api_key: Option<String>) -> HttpUpstream {
        HttpUpstream {
            base: base.trim_end_matches('/').to_string(),
            client,
            api_key,
        }
    }
}

impl Upstream for HttpUpstream {
    fn call(&self, req: Request<Body>) -> BoxFuture<Result<Response<Body>, UpstreamError>> {
        let (parts, body) = req.into_parts();
        let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
        let url = format!("{}{}", self.base, path);
        let mut headers = HeaderMap::new();
        for (k, v) in &parts.headers {
            if !hop_by_hop(k) && k != header::CONTENT_LENGTH {
                headers.append(k.clone(), v.clone());
            }
        }
        if let Some(n) = known_length(&body) {
            headers.insert(header::CONTENT_LENGTH, n);
        }
        if let Some(key) = &self.api_key {
            if let Ok(v) = format!("Bearer {key}").parse() {
                headers.insert(header::AUTHORIZATION, v);
            }
        }
        let builder = self
            .client
            .request(parts.method, &url)
            .headers(headers)
            .body(reqwest::Body::wrap_stream(body.into_data_stream()));
        let base = self.base.clone();
        Box::pin(async move {
            let resp = builder
                .send()
                .await
                .map_err(|e| UpstreamError::Unreachable(base, e.to_string()))?;
            let mut out = Response::builder().status(resp.status());
            if let Some(h) = out.headers_mut() {
                for (k, v) in resp.headers() {
                    if !hop_by_hop(k) {
                        h.append(k.clone(), v.clone());
                    }
                }
            }
            out.body(Body::from_stream(resp.bytes_stream()))
                .map_err(|e| UpstreamError::Unreachable(url, e.to_string()))
        })
    }

    fn name(&self) -> &str {
        &self.base
    }
}

/// The worker served by this process: its routes called without a socket.
pub struct LocalUpstream {
    app: axum::Router,
}

impl LocalUpstream {
    pub fn new(app: axum::Router) -> LocalUpstream {
        LocalUpstream { app }
    }
}

impl Upstream for LocalUpstream {
    fn call(&self, mut req: Request<Body>) -> BoxFuture<Result<Response<Body>, UpstreamError>> {
        let app = self.app.clone();
        if let Some(n) = known_length(req.body()) {
            req.headers_mut().insert(header::CONTENT_LENGTH, n);
        }
        Box::pin(async move {
            match app.oneshot(req).await {
                Ok(r) => Ok(r),
                Err(never) => match never {},
            }
        })
    }

    fn name(&self) -> &str {
        crate::config::IN_PROCESS
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A worker that answers with the `Content-Length` its request came with.
    fn echo_length() -> axum::Router {
        axum::Router::new().route(
            "/v1/decisions",
            axum::routing::post(|h: HeaderMap| async move {
                h.get(header::CONTENT_LENGTH)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("none")
                    .to_string()
            }),
        )
    }

    /// Over HTTP too, a body the router holds whole goes with its length (not chunked).
    #[tokio::test]
    async fn an_http_call_says_how_long_its_body_is() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(l, echo_length()).await });
        let up = HttpUpstream::new(&format!("http://{addr}"), reqwest::Client::new(), None);
        let req = Request::post("/v1/decisions")
            .body(Body::from(r#"{"model":"m"}"#))
            .unwrap();
        let resp = up.call(req).await.unwrap();
        let bytes = axum::body::to_bytes(resp.into_body(), 1024).await.unwrap();
        assert_eq!(&bytes[..], b"13");
    }

    /// A body the router built whole reaches this process's worker with its length, so the
    /// worker does not take it for a large body of unknown length.
    #[tokio::test]
    async fn an_in_process_call_says_how_long_its_body_is() {
        let local = LocalUpstream::new(echo_length());
        let req = Request::post("/v1/decisions")
            .body(Body::from(r#"{"model":"m"}"#))
            .unwrap();
        let resp = local.call(req).await.unwrap();
        let bytes = axum::body::to_bytes(resp.into_body(), 1024).await.unwrap();
        assert_eq!(&bytes[..], b"13");
        // A streamed body of unknown length is passed on as it came.
        let stream =
            futures_util::stream::iter([Ok::<_, std::io::Error>(bytes::Bytes::from("ab"))]);
        let req = Request::post("/v1/decisions")
            .body(Body::from_stream(stream))
            .unwrap();
        let resp = local.call(req).await.unwrap();
        let bytes = axum::body::to_bytes(resp.into_body(), 1024).await.unwrap();
        assert_eq!(&bytes[..], b"none");
    }
}
