//! Where requests go: a worker or backend over HTTP, or the engine of this very process,
//! behind one trait. Bodies stream both ways; dropping a response body drops the upstream
//! call (a client that goes away cancels its generation).

use std::future::Future;
use std::pin::Pin;

use axum::body::Body;
use axum::http::{header, HeaderMap, HeaderName, Request, Response};
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
    fn call(&self, req: Request<Body>) -> BoxFuture<Result<Response<Body>, UpstreamError>> {
        let app = self.app.clone();
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
