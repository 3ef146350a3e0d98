//! The pages a person uses, served by the router process: the home page (get a key with a
//! proof of work done in the browser; try System One and System Two), the Keys page (this
//! browser's keys, their usage, revoke and delete) and the status page (every model's live
//! state and server times).
//!
//! Everything is compiled in: minijinja templates rendered once when the app is built, and
//! the stylesheet and scripts embedded. No byte comes from anywhere but this server, and no
//! framework build step is needed. The pages speak only to the public API
//! (`/api/keys…`, `/api/info`, `/api/status`, `/v1/…`), from the browser; this crate knows
//! nothing of the service, the router or the worker.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, HeaderValue, Response, StatusCode};
use axum::routing::get;
use axum::Router;
use minijinja::{context, Environment};
use sha2::{Digest, Sha256};

/// What the pages say about the site.
#[derive(Debug, Clone)]
pub struct Site {
    /// The name in every page's title and header.
    pub name: String,
}

impl Default for Site {
    fn default() -> Site {
        Site {
            name: "vllm-srun".into(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum WebError {
    #[error("page template {name}: {source}")]
    Template {
        name: &'static str,
        #[source]
        source: minijinja::Error,
    },
}

const TEMPLATES: [(&str, &str); 7] = [
    ("base.html", include_str!("../templates/base.html")),
    ("home.html", include_str!("../templates/home.html")),
    ("keys.html", include_str!("../templates/keys.html")),
    ("status.html", include_str!("../templates/status.html")),
    ("terms.html", include_str!("../templates/terms.html")),
    ("privacy.html", include_str!("../templates/privacy.html")),
    ("limits.html", include_str!("../templates/limits.html")),
];

/// Every page: its path and its template.
const PAGES: [(&str, &str); 6] = [
    ("/", "home.html"),
    ("/keys", "keys.html"),
    ("/status", "status.html"),
    ("/terms", "terms.html"),
    ("/privacy", "privacy.html"),
    ("/limits", "limits.html"),
];

/// The embedded assets: name, content type, bytes.
const ASSETS: [(&str, &str, &str); 7] = [
    (
        "site.css",
        "text/css; charset=utf-8",
        include_str!("../assets/site.css"),
    ),
    (
        "common.js",
        "text/javascript; charset=utf-8",
        include_str!("../assets/common.js"),
    ),
    (
        "home.js",
        "text/javascript; charset=utf-8",
        include_str!("../assets/home.js"),
    ),
    (
        "keys.js",
        "text/javascript; charset=utf-8",
        include_str!("../assets/keys.js"),
    ),
    (
        "status.js",
        "text/javascript; charset=utf-8",
        include_str!("../assets/status.js"),
    ),
    (
        "pow.js",
        "text/javascript; charset=utf-8",
        include_str!("../assets/pow.js"),
    ),
    (
        "limits.js",
        "text/javascript; charset=utf-8",
        include_str!("../assets/limits.js"),
    ),
];

/// The System One examples of the home page's Try it (the API reference's requests; the
/// page puts the chosen model in).
const EXAMPLES: &str = include_str!("../assets/examples.json");

/// Only this server's scripts, styles and connections; no inline script, no framing.
const CSP: &str = "default-src 'self'; script-src 'self'; worker-src 'self'; style-src 'self'; \
img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'self'; \
frame-ancestors 'none'";

/// A page or asset, ready to send.
struct Doc {
    content_type: &'static str,
    body: axum::body::Bytes,
    etag: HeaderValue,
}

impl Doc {
    fn new(content_type: &'static str, body: Vec<u8>) -> Doc {
        let tag = format!("\"{}\"", &hex::encode(Sha256::digest(&body))[..16]);
        Doc {
            content_type,
            etag: HeaderValue::from_str(&tag).unwrap_or(HeaderValue::from_static("\"0\"")),
            body: body.into(),
        }
    }

    fn answer(&self, req: &HeaderMap) -> Response<Body> {
        let fresh = req
            .get(header::IF_NONE_MATCH)
            .is_some_and(|v| v.as_bytes() == self.etag.as_bytes());
        let mut r = if fresh {
            let mut r = Response::new(Body::empty());
            *r.status_mut() = StatusCode::NOT_MODIFIED;
            r
        } else {
            Response::new(Body::from(self.body.clone()))
        };
        let h = r.headers_mut();
        h.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static(self.content_type),
        );
        h.insert(header::ETAG, self.etag.clone());
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
        h.insert(
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(CSP),
        );
        h.insert(
            header::X_CONTENT_TYPE_OPTIONS,
            HeaderValue::from_static("nosniff"),
        );
        h.insert(
            header::REFERRER_POLICY,
            HeaderValue::from_static("no-referrer"),
        );
        r
    }
}

struct Pages {
    /// Each page by its path.
    pages: Vec<(&'static str, Doc)>,
    assets: Vec<(&'static str, Doc)>,
}

/// Render every page once.
fn render(site: &Site) -> Result<Pages, WebError> {
    let mut env = Environment::new();
    for (name, text) in TEMPLATES {
        env.add_template(name, text)
            .map_err(|source| WebError::Template { name, source })?;
    }
    // The examples go into the page as written (their members in the order a person reads
    // them), with `<` escaped so that no text in them can close the script element.
    let examples = minijinja::Value::from_safe_string(EXAMPLES.replace('<', "\\u003c"));
    let page = |name: &'static str| -> Result<Doc, WebError> {
        let t = env
            .get_template(name)
            .map_err(|source| WebError::Template { name, source })?;
        let html = t
            .render(context! { site => site.name, page => name, examples => examples })
            .map_err(|source| WebError::Template { name, source })?;
        Ok(Doc::new("text/html; charset=utf-8", html.into_bytes()))
    };
    Ok(Pages {
        pages: PAGES
            .iter()
            .map(|(path, name)| Ok((*path, page(name)?)))
            .collect::<Result<_, WebError>>()?,
        assets: ASSETS
            .iter()
            .map(|(n, t, b)| (*n, Doc::new(t, b.as_bytes().to_vec())))
            .collect(),
    })
}

/// The pages' routes: `/`, `/keys`, `/status`, `/terms`, `/privacy`, `/limits` and
/// `/assets/{name}`.
pub fn app(site: &Site) -> Result<Router, WebError> {
    let pages = Arc::new(render(site)?);
    let mut r = Router::new();
    for (i, (path, _)) in PAGES.iter().enumerate() {
        r = r.route(
            path,
            get(move |s: State<Arc<Pages>>, h: HeaderMap| async move { s.pages[i].1.answer(&h) }),
        );
    }
    Ok(r.route("/assets/{name}", get(asset)).with_state(pages))
}

async fn asset(
    State(p): State<Arc<Pages>>,
    Path(name): Path<String>,
    h: HeaderMap,
) -> Response<Body> {
    match p.assets.iter().find(|(n, _)| *n == name) {
        Some((_, d)) => d.answer(&h),
        None => {
            let mut r = Response::new(Body::from("not found"));
            *r.status_mut() = errors::Code::NotFound.http_status();
            r
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tower::ServiceExt;

    async fn get(app: &Router, path: &str, etag: Option<&HeaderValue>) -> Response<Body> {
        let mut req = axum::http::Request::get(path);
        if let Some(e) = etag {
            req = req.header(header::IF_NONE_MATCH, e);
        }
        app.clone()
            .oneshot(req.body(Body::empty()).unwrap())
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn every_page_is_small_self_contained_and_cacheable() {
        let app = app(&Site::default()).unwrap();
        for (path, _) in PAGES {
            let r = get(&app, path, None).await;
            assert_eq!(r.status(), StatusCode::OK, "{path}");
            let csp = r.headers()[header::CONTENT_SECURITY_POLICY]
                .to_str()
                .unwrap()
                .to_string();
            assert!(
                csp.contains("script-src 'self'") && !csp.contains("unsafe"),
                "{csp}"
            );
            let etag = r.headers()[header::ETAG].clone();
            let html = axum::body::to_bytes(r.into_body(), usize::MAX)
                .await
                .unwrap();
            let text = std::str::from_utf8(&html).unwrap();
            // Every script and stylesheet the page loads is one of ours, and is served.
            let mut total = html.len();
            for src in text
                .split("src=\"")
                .skip(1)
                .chain(text.split("href=\"").skip(1))
            {
                let url = &src[..src.find('"').unwrap()];
                if url.starts_with('#') || url == "data:," {
                    continue;
                }
                assert!(
                    url.starts_with('/') && !url.starts_with("//"),
                    "{path} loads {url}"
                );
                if url.starts_with("/assets/") {
                    let a = get(&app, url, None).await;
                    assert_eq!(a.status(), StatusCode::OK, "{url}");
                    total += axum::body::to_bytes(a.into_body(), usize::MAX)
                        .await
                        .unwrap()
                        .len();
                }
            }
            assert!(!text.contains("<script>"), "{path} has an inline script");
            // Under 100 KB with everything it loads, but the worker started on demand.
            assert!(total < 100_000, "{path}: {total} bytes");
            let again = get(&app, path, Some(&etag)).await;
            assert_eq!(again.status(), StatusCode::NOT_MODIFIED);
        }
        assert_eq!(
            get(&app, "/assets/nope.js", None).await.status(),
            StatusCode::NOT_FOUND
        );
    }

    #[test]
    fn the_examples_are_system_one_requests() {
        let v: serde_json::Value = serde_json::from_str(EXAMPLES).unwrap();
        let list = v.as_array().unwrap();
        assert!(list.len() >= 2);
        for e in list {
            assert!(e["title"].is_string());
            assert!(e["request"]["state"].is_string());
            assert!(e["request"]["questions"]
                .as_object()
                .is_some_and(|q| !q.is_empty()));
        }
    }
}
