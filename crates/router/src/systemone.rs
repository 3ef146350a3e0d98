//! System One published: requests forwarded to the deployment that serves their model,
//! to its least busy ready worker, within the call's deadline. A `systemone/0.2`
//! deployment gets the standard part only: stripped fields removed, fields it cannot carry
//! refused, batches split. Error messages from the runtime are replaced by fixed words.

use protocol::{member, DecisionEndpoint};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ::body::Parts;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, Request, Response, StatusCode};
use serde_json::{json, Map, Value};

use crate::config::{Deployment, WorkerSchema};
use crate::error::{RouterError, Shape};
use crate::pool::{PickError, Pool};
use crate::Runtime;

/// Request members a standard target never sees (the standard part already says them).
const STRIPPED: &[&str] = &[member::ROLES, member::OPTIONS];
const STRIPPED_QUESTION: &[&str] = &[member::PRESET, member::OVERFLOW];
/// Question members and types a standard target cannot carry.
const REFUSED_QUESTION: &[&str] = &[
    "head",
    "decision_adapter",
    "over",
    "require_full_input",
    "threshold",
    "at",
    "rate",
];
const REFUSED_TYPES: &[&str] = &["span", "set", "track"];

/// The shape the router's own refusals take on a decision endpoint.
fn shape(endpoint: DecisionEndpoint) -> Shape {
    match endpoint {
        DecisionEndpoint::Decisions => Shape::Internal,
        _ => Shape::One,
    }
}

/// Where a worker answers what arrived at `endpoint`: a worker that speaks the standard
/// alone is asked at `/v1/systemone` whatever the caller's path.
fn worker_path(endpoint: DecisionEndpoint, schema: WorkerSchema) -> &'static str {
    match schema {
        WorkerSchema::Standard => DecisionEndpoint::SystemOne.path(),
        WorkerSchema::V5 => endpoint.path(),
    }
}

pub async fn systemone(
    State(rt): State<Arc<Runtime>>,
    headers: HeaderMap,
    body: Body,
) -> Response<Body> {
    publish(&rt, DecisionEndpoint::SystemOne, &headers, body).await
}

pub async fn decisions(
    State(rt): State<Arc<Runtime>>,
    headers: HeaderMap,
    body: Body,
) -> Response<Body> {
    publish(&rt, DecisionEndpoint::Decisions, &headers, body).await
}

pub async fn batch(
    State(rt): State<Arc<Runtime>>,
    headers: HeaderMap,
    body: Body,
) -> Response<Body> {
    publish(&rt, DecisionEndpoint::SystemOneBatch, &headers, body).await
}

async fn publish(
    rt: &Runtime,
    ep: DecisionEndpoint,
    headers: &HeaderMap,
    body: Body,
) -> Response<Body> {
    let flavor = shape(ep);
    let read = crate::read_object(rt, headers, body, flavor, true, Some("body_malformed")).await;
    let (bytes, mut req, parts) = match read {
        Ok(x) => x,
        Err(r) => return r,
    };
    let model = req
        .get(member::MODEL)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let Some((dep, pool)) = rt.deployment(&model) else {
        return RouterError::ModelNotFound(model).response(flavor);
    };
    let deadline = wait(&req, headers, rt.deadline_ms, rt.max_deadline_ms);
    if dep.schema == WorkerSchema::V5 {
        // The published face speaks system-duo-api.txt: its `images` and `videos` reach a
        // vllm-sr/5.0 worker as the assets they are.
        let bytes = match media_as_assets(&mut req) {
            Ok(false) => bytes,
            Ok(true) => match serde_json::to_vec(&req) {
                Ok(b) => Bytes::from(b),
                Err(_) => return RouterError::NotReady.response(flavor),
            },
            Err(e) => return e.response(flavor),
        };
        return call(
            dep,
            pool,
            worker_path(ep, dep.schema),
            headers,
            (bytes, &parts),
            deadline,
            flavor,
        )
        .await;
    }
    // systemone/0.2: the standard part only.
    if let Err(e) = standardize(&mut req) {
        return e.response(flavor);
    }
    if ep == DecisionEndpoint::SystemOneBatch {
        return split_batch(dep, pool, headers, req, &parts, deadline).await;
    }
    match serde_json::to_vec(&req) {
        Ok(b) => {
            call(
                dep,
                pool,
                worker_path(ep, dep.schema),
                headers,
                (Bytes::from(b), &parts),
                deadline,
                flavor,
            )
            .await
        }
        Err(_) => RouterError::NotReady.response(flavor),
    }
}

/// The hosted form's media (`images`: data URLs of pictures; `videos`: data URLs of videos) as
/// vllm-sr/5.0 assets, each placed by a placeholder in front of the state's text, images first
/// and in their order, as every question of the state sees them. Whether anything moved.
/// A member that is not a list of `data:<kind>/...;base64,` URLs is refused with the worker's
/// words (links and paths are never fetched); the worker reads the bytes.
fn media_as_assets(req: &mut Map<String, Value>) -> Result<bool, RouterError> {
    if !req.contains_key(member::IMAGES) && !req.contains_key(member::VIDEOS) {
        return Ok(false);
    }
    let malformed = |message: String, param: &str| RouterError::BadRequest {
        message,
        param: Some(param.to_string()),
        reason: Some("encoding_malformed"),
    };
    let mut assets = match req.remove(member::ASSETS) {
        None => Map::new(),
        Some(Value::Object(m)) => m,
        Some(_) => return Err(malformed("assets must be an object".into(), "assets")),
    };
    let mut placed = String::new();
    for (member, kind) in [("images", "image"), ("videos", "video")] {
        let list = match req.remove(member) {
            None | Some(Value::Null) => continue,
            Some(Value::Array(l)) => l,
            Some(_) => {
                return Err(malformed(
                    format!("{member} must be a list of data URLs"),
                    member,
                ))
            }
        };
        for (i, v) in list.iter().enumerate() {
            let at = format!("{member}[{i}]");
            let data = v
                .as_str()
                .and_then(|s| s.strip_prefix("data:"))
                .and_then(|rest| rest.split_once(";base64,"))
                .filter(|(mime, _)| {
                    mime.strip_prefix(kind)
                        .is_some_and(|sub| sub.starts_with('/'))
                })
                .map(|(_, data)| data)
                .ok_or_else(|| {
                    malformed(format!("{at} must be a data:{kind}/...;base64, URL"), &at)
                })?;
            let reference = format!("\u{27e6}{kind} {}\u{27e7}", i + 1);
            if assets.contains_key(&reference) {
                return Err(malformed(
                    format!("assets already names {reference}"),
                    "assets",
                ));
            }
            assets.insert(
                reference.clone(),
                json!({member::TYPE: kind, member::DATA_BASE64: data}),
            );
            placed.push_str(&reference);
        }
    }
    if !assets.is_empty() {
        req.insert(member::ASSETS.into(), Value::Object(assets));
    }
    if placed.is_empty() {
        return Ok(true);
    }
    match req.get_mut(member::STATE) {
        Some(Value::String(text)) => text.insert_str(0, &placed),
        Some(Value::Object(parts)) => {
            // In front of the first part that is text.
            let first = parts.values_mut().find_map(|v| match v {
                Value::String(t) => Some(t),
                _ => None,
            });
            match first {
                Some(t) => t.insert_str(0, &placed),
                None => {
                    return Err(malformed(
                        "the state has no text to place media in".into(),
                        "state",
                    ))
                }
            }
        }
        None | Some(Value::Null) => {
            req.insert(member::STATE.into(), Value::String(placed));
        }
        Some(_) => {}
    }
    Ok(true)
}

/// How much longer than its own `options.deadline_ms` the router waits for a worker, which
/// answers that deadline itself (in place on /v1/decisions).
const WORKER_GRACE: Duration = Duration::from_millis(500);

/// How long the router waits for a call's answer.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Wait {
    /// The request's deadline, the one its 504 names.
    budget: Duration,
    /// Past the budget, for the worker's own answer to a deadline it was given.
    grace: Duration,
}

/// How long a published request may wait: its own `options.deadline_ms`, else the listener's
/// deadline, else for a long-context request (`options.long_context` or the standard's
/// header) the listener's whole `max_deadline_ms` (worker-api.txt, "Errors"); never more than
/// that.
fn wait(
    req: &Map<String, Value>,
    headers: &HeaderMap,
    deadline_ms: u64,
    max_deadline_ms: u64,
) -> Wait {
    let options = req.get(member::OPTIONS);
    let long_context = options
        .and_then(|o| o.get(member::LONG_CONTEXT))
        .and_then(Value::as_bool)
        .unwrap_or(false)
        || headers
            .get("typesafe-danger-zone-long-context")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.eq_ignore_ascii_case("true"));
    let own = options
        .and_then(|o| o.get(member::DEADLINE_MS))
        .and_then(Value::as_u64);
    let ms = own
        .unwrap_or(if long_context {
            max_deadline_ms
        } else {
            deadline_ms
        })
        .clamp(1, max_deadline_ms);
    Wait {
        budget: Duration::from_millis(ms),
        grace: if own.is_some() {
            WORKER_GRACE
        } else {
            Duration::ZERO
        },
    }
}

/// Remove what a standard target must not see; refuse what it cannot answer.
fn standardize(req: &mut Map<String, Value>) -> Result<(), RouterError> {
    for k in STRIPPED {
        req.remove(*k);
    }
    let check = |qs: &mut Map<String, Value>, at: &str| -> Result<(), RouterError> {
        for (id, q) in qs.iter_mut() {
            let Some(q) = q.as_object_mut() else { continue };
            for k in STRIPPED_QUESTION {
                q.remove(*k);
            }
            let refused = REFUSED_QUESTION
                .iter()
                .find(|k| q.contains_key(**k))
                .map(|k| k.to_string())
                .or_else(|| {
                    q.get(member::TYPE)
                        .and_then(Value::as_str)
                        .filter(|t| REFUSED_TYPES.contains(t))
                        .map(|t| format!("type {t}"))
                });
            if let Some(what) = refused {
                return Err(RouterError::BadRequest {
                    message: format!(
                        "{at}questions.{id}: this model speaks systemone/0.2, which has no {what}"
                    ),
                    param: Some(format!("{at}questions.{id}")),
                    reason: Some("unsupported_field"),
                });
            }
        }
        Ok(())
    };
    if let Some(qs) = req
        .get_mut(member::QUESTIONS)
        .and_then(Value::as_object_mut)
    {
        check(qs, "")?;
    }
    if let Some(requests) = req.get_mut(member::REQUESTS).and_then(Value::as_object_mut) {
        for (name, e) in requests.iter_mut() {
            let Some(e) = e.as_object_mut() else { continue };
            for k in STRIPPED {
                e.remove(*k);
            }
            if let Some(qs) = e.get_mut(member::QUESTIONS).and_then(Value::as_object_mut) {
                check(qs, &format!("requests.{name}."))?;
            }
        }
    }
    Ok(())
}

/// A batch to a target without one (`{"model"?, "requests": {name: request}}`, the body the
/// worker's own batch takes): each request sent alone, all at once, and answered as the
/// worker answers a batch, under `responses`, a failed one with its error body and `status`.
async fn split_batch(
    dep: &Deployment,
    pool: &Arc<Pool>,
    headers: &HeaderMap,
    mut req: Map<String, Value>,
    parts: &Parts,
    deadline: Wait,
) -> Response<Body> {
    let model = req.get(member::MODEL).cloned();
    let requests = match req.remove(member::REQUESTS) {
        Some(Value::Object(r)) if !r.is_empty() => r,
        _ => {
            return RouterError::BadRequest {
                message: "requests must be an object of named requests".into(),
                param: Some("requests".into()),
                reason: Some("body_malformed"),
            }
            .response(Shape::One)
        }
    };
    let calls = requests.into_iter().map(|(name, entry)| {
        let model = model.clone();
        async move {
            let mut one = entry.as_object().cloned().unwrap_or_default();
            if let Some(m) = model {
                one.entry(member::MODEL).or_insert(m);
            }
            let body = serde_json::to_vec(&one).unwrap_or_default();
            let r = call(
                dep,
                pool,
                "/v1/systemone",
                headers,
                (Bytes::from(body), parts),
                deadline,
                Shape::One,
            )
            .await;
            let status = r.status();
            let b = axum::body::to_bytes(r.into_body(), protocol::limits::ANSWER_BYTES)
                .await
                .unwrap_or_default();
            let mut v = serde_json::from_slice::<Value>(&b).unwrap_or(Value::Null);
            if !status.is_success() {
                if let Some(o) = v.as_object_mut() {
                    o.insert("status".into(), json!(status.as_u16()));
                }
            }
            (name, v)
        }
    });
    let responses: Map<String, Value> = futures_util::future::join_all(calls)
        .await
        .into_iter()
        .collect();
    let body = json!({ "responses": responses });
    let mut r = Response::new(Body::from(serde_json::to_vec(&body).unwrap_or_default()));
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

/// One call to a worker of the deployment, within the deadline; the answer read whole so
/// the runtime's private messages can be replaced.
#[allow(clippy::too_many_arguments)]
async fn call(
    dep: &Deployment,
    pool: &Arc<Pool>,
    path: &str,
    headers: &HeaderMap,
    (body, parts): (Bytes, &Parts),
    deadline: Wait,
    flavor: Shape,
) -> Response<Body> {
    let lease = match pool.pick_checked().await {
        Ok(l) => l,
        Err(PickError::Busy) => return RouterError::Overloaded.response(flavor),
        Err(PickError::NotReady) => return RouterError::NotReady.response(flavor),
    };
    // The body goes on decoded: JSON, or with assets the multipart form the worker reads.
    let (content_type, body) = if parts.is_empty() {
        ("application/json".to_string(), body)
    } else {
        ::body::form(&body, parts)
    };
    let mut req = Request::post(path).header(header::CONTENT_TYPE, content_type);
    for name in [
        "x-request-id",
        "typesafe-danger-zone-long-context",
        "accept",
    ] {
        if let Some(v) = headers.get(name) {
            req = req.header(name, v);
        }
    }
    let Ok(req) = req.body(Body::from(body)) else {
        return RouterError::NotReady.response(flavor);
    };
    let started = Instant::now();
    let exchange = async {
        let resp = lease.worker.upstream.call(req).await.ok()?;
        let (parts, body) = resp.into_parts();
        let bytes = axum::body::to_bytes(body, 256 * 1024 * 1024).await.ok()?;
        Some((parts, bytes))
    };
    let cut = deadline.budget + deadline.grace;
    let (mut parts, bytes) = match tokio::time::timeout(cut, exchange).await {
        Err(_) => {
            let ms = deadline.budget.as_millis() as u64;
            return RouterError::DeadlineExceeded(ms).response(flavor);
        }
        Ok(None) => return RouterError::NotReady.response(flavor),
        Ok(Some(x)) => x,
    };
    drop(lease);
    let client_time = started.elapsed().as_secs_f64();
    if let Some(total) = server_total(&parts.headers) {
        metrics::histogram!("vsr_transport_seconds", "deployment" => dep.name.clone())
            .record((client_time - total).max(0.0));
    }
    let mut bytes = bytes;
    if let Ok(mut v) = serde_json::from_slice::<Value>(&bytes) {
        // A model that is starting (or failed) on its worker is, on the published System
        // One API, a model that is unavailable: 503 model_unavailable with Retry-After.
        if flavor == Shape::One
            && parts.status == StatusCode::SERVICE_UNAVAILABLE
            && v.pointer("/error/code").or_else(|| v.get("code")) == Some(&json!("not_ready"))
        {
            return RouterError::NotReady.response(flavor);
        }
        let mut changed = scrub(&mut v);
        if dep.schema == WorkerSchema::Standard && parts.status == StatusCode::OK {
            changed |= strip_listing(&mut v);
        }
        if changed {
            bytes = Bytes::from(serde_json::to_vec(&v).unwrap_or_default());
            parts.headers.remove(header::CONTENT_LENGTH);
        }
    }
    Response::from_parts(parts, Body::from(bytes))
}

/// The worker's `total` from Server-Timing, in seconds.
fn server_total(h: &HeaderMap) -> Option<f64> {
    let v = h.get("server-timing")?.to_str().ok()?;
    v.split(',').find_map(|m| {
        let m = m.trim();
        let rest = m.strip_prefix("total")?;
        let dur = rest
            .split(';')
            .find_map(|p| p.trim().strip_prefix("dur="))?;
        dur.parse::<f64>().ok().map(|ms| ms / 1000.0)
    })
}

/// Replace every error message by fixed words built from its code, reason and limit.
fn scrub(v: &mut Value) -> bool {
    let mut changed = false;
    match v {
        Value::Object(m) => {
            let word = ["reason", "error_type", "type", "code", "error"]
                .iter()
                .find_map(|k| m.get(*k).and_then(Value::as_str))
                .map(str::to_string);
            if let Some(word) = word {
                let limit = m.get("limit").and_then(Value::as_u64);
                for key in ["message", "msg"] {
                    if let Some(Value::String(s)) = m.get_mut(key) {
                        let fixed = fixed_message(&word, limit);
                        if *s != fixed {
                            *s = fixed;
                            changed = true;
                        }
                    }
                }
            }
            for (_, child) in m.iter_mut() {
                changed |= scrub(child);
            }
        }
        Value::Array(a) => {
            for child in a {
                changed |= scrub(child);
            }
        }
        _ => {}
    }
    changed
}

fn fixed_message(word: &str, limit: Option<u64>) -> String {
    let mut s = word.replace('_', " ");
    if let Some(l) = limit {
        s.push_str(&format!(" (limit {l})"));
    }
    s
}

/// The extension members a standard listing never carries.
fn strip_listing(v: &mut Value) -> bool {
    let Some(models) = v.get_mut("models").and_then(Value::as_array_mut) else {
        return false;
    };
    for m in models {
        if let Some(o) = m.as_object_mut() {
            for k in ["version", "features", "card"] {
                o.remove(k);
            }
        }
    }
    true
}

/// `GET /v1/systemone/models`: every deployment's listing of its public models.
pub async fn models(State(rt): State<Arc<Runtime>>) -> Response<Body> {
    let mut all: Vec<Value> = Vec::new();
    let mut head = Map::new();
    let id = |m: &Value| -> String {
        m.get("name")
            .or_else(|| m.get("id"))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    for (dep, pool) in &rt.deployments {
        let Ok(lease) = pool.pick_checked().await else {
            continue;
        };
        let Ok(req) = Request::get("/v1/systemone/models").body(Body::empty()) else {
            continue;
        };
        let fetch = async {
            let r = lease.worker.upstream.call(req).await.ok()?;
            let b = axum::body::to_bytes(r.into_body(), protocol::limits::LISTING_BYTES)
                .await
                .ok()?;
            serde_json::from_slice::<Value>(&b).ok()
        };
        let Ok(Some(mut v)) = tokio::time::timeout(Duration::from_secs(10), fetch).await else {
            continue;
        };
        if dep.schema == WorkerSchema::Standard {
            strip_listing(&mut v);
        }
        if head.is_empty() {
            for k in ["object", "api_version"] {
                if let Some(x) = v.get(k) {
                    head.insert(k.into(), x.clone());
                }
            }
        }
        let every = dep.models.iter().any(|m| m == "*");
        for m in v
            .get("models")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let name = id(m);
            let listed = dep.models.contains(&name);
            let taken = rt
                .deployments
                .iter()
                .any(|(d, _)| d.name != dep.name && d.models.contains(&name));
            if (listed || (every && !taken)) && !all.iter().any(|x| id(x) == name) {
                let mut m = m.clone();
                // What the card says arrives is what the public face lets through.
                if let Some(limits) = m.pointer_mut("/card/limits").and_then(Value::as_object_mut) {
                    crate::public_limits(limits, rt.max_request_bytes);
                }
                all.push(m);
            }
        }
    }
    head.insert("models".into(), Value::Array(all));
    let mut r = Response::new(Body::from(serde_json::to_vec(&head).unwrap_or_default()));
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(v: Value) -> Map<String, Value> {
        serde_json::from_value(v).unwrap_or_default()
    }

    #[test]
    fn hosted_media_become_assets_in_front_of_the_text() {
        let mut req = object(json!({"state": "A photo.", "questions": {},
            "images": ["data:image/png;base64,AAAA", "data:image/jpeg;base64,BBBB"],
            "videos": ["data:video/webm;base64,CCCC"]}));
        assert_eq!(media_as_assets(&mut req), Ok(true));
        assert!(!req.contains_key("images") && !req.contains_key("videos"));
        let (i1, i2, v1) = (
            "\u{27e6}image 1\u{27e7}",
            "\u{27e6}image 2\u{27e7}",
            "\u{27e6}video 1\u{27e7}",
        );
        assert_eq!(req["state"], json!(format!("{i1}{i2}{v1}A photo.")));
        assert_eq!(
            req["assets"][i1],
            json!({"type": "image", "data_base64": "AAAA"})
        );
        assert_eq!(req["assets"][i2]["data_base64"], "BBBB");
        assert_eq!(
            req["assets"][v1],
            json!({"type": "video", "data_base64": "CCCC"})
        );
        // An object state gets them in front of its first text part; own assets stay.
        let mut req = object(
            json!({"state": {"n": 3, "user": "hi"}, "assets": {"<a>": {}},
            "images": ["data:image/png;base64,AAAA"]}),
        );
        assert_eq!(media_as_assets(&mut req), Ok(true));
        assert_eq!(req["state"]["user"], json!(format!("{i1}hi")));
        assert!(req["assets"]["<a>"].is_object());
        // Nothing to move.
        let mut plain = object(json!({"state": "x"}));
        assert_eq!(media_as_assets(&mut plain), Ok(false));
        assert_eq!(plain, object(json!({"state": "x"})));
        // A link, a picture sent as a video, or not a list: the worker's word.
        for bad in [
            json!({"state": "x", "images": ["https://example.com/a.png"]}),
            json!({"state": "x", "videos": ["data:image/png;base64,AAAA"]}),
            json!({"state": "x", "images": "data:image/png;base64,AAAA"}),
        ] {
            let e = media_as_assets(&mut object(bad.clone())).unwrap_err();
            assert_eq!(e.status(), StatusCode::BAD_REQUEST, "{bad}");
            assert_eq!(e.body(Shape::One)["reason"], "encoding_malformed", "{bad}");
        }
    }

    #[test]
    fn standard_targets_get_the_standard_part() {
        let mut req: Map<String, Value> = serde_json::from_value(json!({
            "model": "m", "state": "s", "roles": {"user": "a"}, "options": {"deadline_ms": 5},
            "questions": {"q": {"type": "noul", "instructions": "i", "preset": "pii", "overflow": "window"}}
        }))
        .unwrap();
        standardize(&mut req).unwrap();
        assert_eq!(
            Value::Object(req),
            json!({"model": "m", "state": "s", "questions": {"q": {"type": "noul", "instructions": "i"}}})
        );
        let mut req: Map<String, Value> = serde_json::from_value(json!({
            "model": "m", "requests": {"a": {"state": "s", "options": {"return_meta": true},
                "questions": {"q": {"type": "noul", "instructions": "i", "preset": "pii"}}}}
        }))
        .unwrap();
        standardize(&mut req).unwrap();
        assert_eq!(
            req["requests"]["a"],
            json!({"state": "s", "questions": {"q": {"type": "noul", "instructions": "i"}}})
        );
        let mut req: Map<String, Value> = serde_json::from_value(json!({
            "model": "m", "requests": {"a": {"state": "s", "questions": {"q": {"type": "span", "instructions": "i"}}}}
        }))
        .unwrap();
        let e = standardize(&mut req).unwrap_err();
        assert!(
            matches!(&e, RouterError::BadRequest { param: Some(p), .. } if p == "requests.a.questions.q"),
            "{e:?}"
        );
        let mut req: Map<String, Value> = serde_json::from_value(json!({
            "model": "m", "state": "s", "questions": {"q": {"type": "noul", "instructions": "i", "over": ["a"]}}
        }))
        .unwrap();
        assert!(standardize(&mut req).is_err());
    }

    #[test]
    fn a_long_context_request_may_wait_the_whole_max_deadline() {
        let body = |v: Value| -> Map<String, Value> { serde_json::from_value(v).unwrap() };
        let none = HeaderMap::new();
        let ms = |req: &Map<String, Value>, h: &HeaderMap| {
            wait(req, h, 30_000, 600_000).budget.as_millis()
        };
        assert_eq!(ms(&body(json!({})), &none), 30_000);
        assert_eq!(
            ms(&body(json!({"options": {"long_context": true}})), &none),
            600_000
        );
        let mut header = HeaderMap::new();
        header.insert(
            "typesafe-danger-zone-long-context",
            HeaderValue::from_static("true"),
        );
        assert_eq!(ms(&body(json!({})), &header), 600_000);
        // Its own deadline wins, within max_deadline_ms.
        let own = body(json!({"options": {"long_context": true, "deadline_ms": 5000}}));
        assert_eq!(ms(&own, &none), 5000);
        // Only a deadline the worker was given too is waited a moment past, for its answer.
        assert_eq!(wait(&own, &none, 30_000, 600_000).grace, WORKER_GRACE);
        let listeners = wait(&body(json!({})), &header, 30_000, 600_000);
        assert_eq!(listeners.grace, Duration::ZERO);
        assert_eq!(
            ms(
                &body(json!({"options": {"deadline_ms": 10_000_000}})),
                &none
            ),
            600_000
        );
    }

    #[test]
    fn private_messages_become_fixed_words() {
        let mut v = json!({"code": "invalid_request", "reason": "video_too_long", "limit": 300,
            "message": "video of 412.5 s in asset clip-7 is too long",
            "detail": {"error_type": "invalid_request", "message": "secret text"},
            "answers": {"q": {"error": "invalid_question", "reason": "criteria_empty", "message": "question q about 'Bob'"}}});
        assert!(scrub(&mut v));
        assert_eq!(v["message"], "video too long (limit 300)");
        assert_eq!(v["detail"]["message"], "invalid request");
        assert_eq!(v["answers"]["q"]["message"], "criteria empty");
        let mut ok = json!({"answers": {"q": {"noul": 0.5}}});
        assert!(!scrub(&mut ok));
    }

    #[test]
    fn server_timing_total() {
        let mut h = HeaderMap::new();
        h.insert(
            "server-timing",
            "parse;dur=0.1, total;dur=12.5".parse().unwrap(),
        );
        assert_eq!(server_total(&h), Some(0.0125));
    }
}
