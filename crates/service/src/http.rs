//! The service's HTTP edge: `/api/keys…` and `/api/info`, and the guard in front of the
//! router's `/v1` routes (key check, limits, admission, usage, rate-limit headers).

use protocol::member;
use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{header, HeaderMap, HeaderName, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use futures_util::StreamExt;
use serde::Deserialize;
use serde_json::{json, Map, Value};

use crate::admission::{Refusal, Ticket};
use crate::boxshare::BoxRefusal;
use crate::clock::{day_name, day_of, rfc3339, Millis, DAY_MS, HOUR_MS};
use crate::error::ServiceError;
use crate::estimate;
use crate::keys::{self, Secret};
use crate::limits::{reset_text, Budgets, Check, Exceeded, Subject, Taken};
use crate::live::percentile;
use crate::store::{DayRow, KeyRow, RequestRow};
use crate::Service;
use errors::{ApiError, Code, Shape};

use protocol::limits::ANSWER_BYTES;

/// The service's routes around `inner` (the router's app, with the worker behind it).
pub fn app(svc: Arc<Service>, inner: Router) -> Router {
    let status_inner = inner.clone();
    let status_svc = svc.clone();
    let (info_inner, info_svc) = (inner.clone(), svc.clone());
    let (pt_inner, pt_svc) = (inner.clone(), svc.clone());
    let guarded = inner.layer(axum::middleware::from_fn_with_state(svc.clone(), guard));
    Router::new()
        .route(
            "/api/status",
            get(move || status(status_svc.clone(), status_inner.clone())),
        )
        .route("/pt/api/keys/self/usage", get(usage_two))
        .route("/api/keys/challenge", post(challenge))
        .route("/api/keys", post(create_key))
        .route("/api/keys/self", get(key_self).delete(revoke_self))
        .route("/api/keys/self/usage", get(usage))
        .route("/api/keys/self/forget", post(forget))
        // The spec's place for an older System Two key's forget: the same action.
        .route("/pt/api/keys/self/forget", post(forget))
        .route(
            "/api/info",
            get(move || info(info_svc.clone(), info_inner.clone())),
        )
        .route(
            "/pt/api/info",
            get(move || info_two(pt_svc.clone(), pt_inner.clone())),
        )
        .with_state(svc)
        .fallback_service(guarded)
        // Every answer carries `X-Request-Id`: the caller's, or a new one (also passed inward).
        .layer(
            tower::ServiceBuilder::new()
                .layer(tower_http::request_id::SetRequestIdLayer::x_request_id(
                    tower_http::request_id::MakeRequestUuid,
                ))
                .layer(tower_http::request_id::PropagateRequestIdLayer::x_request_id()),
        )
}

/// The address a request counts against (an IPv6 /64).
fn address(svc: &Service, req_headers: &HeaderMap, peer: Option<SocketAddr>) -> String {
    if let Some(h) = &svc.config.trusted_proxy_header {
        let ip = req_headers
            .get(h.as_str())
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split(',').next())
            .and_then(|v| v.trim().parse::<IpAddr>().ok());
        if let Some(ip) = ip {
            return keys::address_key(ip);
        }
    }
    peer.map_or_else(|| "local".to_string(), |p| keys::address_key(p.ip()))
}

fn peer(req: &Request) -> Option<SocketAddr> {
    req.extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0)
}

/// The key a request sent, if any: `Authorization: Bearer` or `X-API-Key`.
fn sent_key(h: &HeaderMap) -> Option<&str> {
    if let Some(v) = h.get("x-api-key").and_then(|v| v.to_str().ok()) {
        return Some(v.trim());
    }
    h.get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            v.strip_prefix("Bearer ")
                .or_else(|| v.strip_prefix("bearer "))
        })
        .map(str::trim)
}

/// The active key a request sent; `None` when it sent none; 401 for a bad one.
async fn authenticate(svc: &Service, h: &HeaderMap) -> Result<Option<KeyRow>, ServiceError> {
    let Some(sent) = sent_key(h) else {
        return Ok(None);
    };
    let Some(secret) = Secret::parse(sent) else {
        // On a private service (keys optional) a credential that is not a service key at all,
        // such as the placeholder every OpenAI SDK must send, is no key. Anything shaped like
        // one of ours (`sk-vsr-`, `sk-pt-`) is still checked and refused when it is wrong.
        if !svc.config.require_keys && !keys::has_key_prefix(sent) {
            return Ok(None);
        }
        return Err(ServiceError::InvalidApiKey);
    };
    match svc.store.key_by_hash(&secret.hash()).await? {
        Some(k) if k.status == "active" => Ok(Some(k)),
        _ => Err(ServiceError::InvalidApiKey),
    }
}

async fn required_key(svc: &Service, h: &HeaderMap) -> Result<KeyRow, ServiceError> {
    authenticate(svc, h)
        .await?
        .ok_or(ServiceError::InvalidApiKey)
}

fn json_response(status: StatusCode, v: Value) -> Response {
    let mut r = (status, v.to_string()).into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

fn limit_of(which: Exceeded, b: &Budgets) -> Option<u64> {
    match which {
        Exceeded::RequestsPerMinute => b.requests_per_minute,
        Exceeded::TokensPerMinute => b.tokens_per_minute,
        Exceeded::RequestsPerDay => b.requests_per_day,
        Exceeded::TokensPerDay => b.tokens_per_day,
    }
}

/// A limit of the key endpoints, per address (and per key when given).
fn api_limit(
    svc: &Service,
    what: &str,
    per_minute: u64,
    addr: &str,
    key: Option<&str>,
) -> Result<(), ServiceError> {
    let budgets = Budgets {
        requests_per_minute: Some(per_minute),
        ..Budgets::default()
    };
    let mut checks = vec![Check {
        subject: Subject::Address(format!("{what}:{addr}")),
        budgets,
    }];
    if let Some(k) = key {
        checks.push(Check {
            subject: Subject::Address(format!("{what}:key:{k}")),
            budgets,
        });
    }
    svc.api_limiter
        .take(&checks, 0, svc.clock.now_ms())
        .map(|_| ())
        .map_err(|r| ServiceError::RateLimited(r.retry_after_s))
}

// ---------------------------------------------------------------------------------------
// Keys API

async fn challenge(State(svc): State<Arc<Service>>, req: Request) -> Response {
    let addr = address(&svc, req.headers(), peer(&req));
    if let Err(e) = api_limit(
        &svc,
        "challenge",
        svc.config.challenges_per_minute,
        &addr,
        None,
    ) {
        return e.response();
    }
    let now = svc.clock.now_ms();
    let challenge = keys::new_id("ch");
    let expires = now + svc.config.challenge_ttl_seconds as Millis * 1000;
    match svc
        .store
        .add_challenge(&challenge, &addr, svc.config.difficulty, expires, now)
        .await
    {
        Ok(()) => json_response(
            StatusCode::OK,
            json!({"challenge": challenge, "difficulty": svc.config.difficulty,
                   "algorithm": "sha256", "expires_at": rfc3339(expires)}),
        ),
        Err(e) => ServiceError::from(e).response(),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateKey {
    challenge: String,
    nonce: String,
    #[serde(default)]
    accept_terms: bool,
    #[serde(default)]
    label: Option<String>,
}

fn bad(message: impl Into<String>, code: Code) -> ServiceError {
    ServiceError::BadRequest {
        message: message.into(),
        code,
    }
}

/// Creations are checked and written one at a time, so concurrent requests from one
/// address cannot pass its limit together.
static CREATING: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

async fn create_key(State(svc): State<Arc<Service>>, req: Request) -> Response {
    match create_key_inner(&svc, req).await {
        Ok(r) => r,
        Err(e) => e.response(),
    }
}

async fn create_key_inner(svc: &Service, req: Request) -> Result<Response, ServiceError> {
    let addr = address(svc, req.headers(), peer(&req));
    let bytes = axum::body::to_bytes(req.into_body(), 64 * 1024)
        .await
        .map_err(|_| bad("the body is larger than 64 KiB", Code::InvalidRequest))?;
    let body: CreateKey = serde_json::from_slice(&bytes).map_err(|e| {
        bad(
            format!("the body must be {{\"challenge\", \"nonce\", \"accept_terms\"}}: {e}"),
            Code::InvalidRequest,
        )
    })?;
    if !body.accept_terms {
        return Err(bad(
            "creating a key needs \"accept_terms\": true (the terms of use)",
            Code::TermsNotAccepted,
        ));
    }
    let label = body.label.unwrap_or_default();
    if label.chars().count() > 100 {
        return Err(bad(
            "label has at most 100 characters",
            Code::InvalidRequest,
        ));
    }
    let _one = CREATING.lock().await;
    let now = svc.clock.now_ms();
    // Windows end exclusive: a key made exactly an hour ago no longer counts.
    let created = svc.store.keys_created(&addr, now - DAY_MS + 1).await?;
    let in_hour: Vec<Millis> = created
        .iter()
        .copied()
        .filter(|t| *t > now - HOUR_MS)
        .collect();
    let cfg = &svc.config;
    let wait = if in_hour.len() as u64 >= cfg.keys_per_hour {
        in_hour.first().map(|t| t + HOUR_MS - now)
    } else if created.len() as u64 >= cfg.keys_per_day {
        created.first().map(|t| t + DAY_MS - now)
    } else {
        None
    };
    if let Some(ms) = wait {
        return Err(ServiceError::KeyCreationLimited(
            (ms.max(0) as u64).div_ceil(1000),
        ));
    }
    let Some(difficulty) = svc.store.take_challenge(&body.challenge, now).await? else {
        return Err(bad(
            "the challenge is unknown, used or expired: ask POST /api/keys/challenge for a new one",
            Code::InvalidChallenge,
        ));
    };
    if !keys::solves(&body.challenge, &body.nonce, difficulty) {
        return Err(bad(
            format!("the nonce does not give {difficulty} leading zero bits; the challenge is used, ask a new one"),
            Code::InvalidProof,
        ));
    }
    let secret = Secret::generate();
    let id = keys::new_id("key");
    // An address's keys of the last 24 hours share one budget.
    let budget = svc
        .store
        .shared_budget(&addr, now - DAY_MS)
        .await?
        .unwrap_or_else(|| id.clone());
    let row = KeyRow {
        id: id.clone(),
        hash: secret.hash(),
        prefix: secret.shown().to_string(),
        label,
        budget,
        address: addr,
        status: "active".into(),
        created_at: now,
    };
    svc.store.insert_key(&row).await?;
    metrics::counter!("vsr_keys_created_total").increment(1);
    Ok(json_response(
        StatusCode::CREATED,
        json!({"api_key": secret.expose(), "key_id": id, "prefix": row.prefix, "label": row.label,
               "status": "active", "created_at": rfc3339(now)}),
    ))
}

fn budgets_json(b: &Budgets) -> Value {
    serde_json::to_value(b).unwrap_or(Value::Null)
}

async fn key_self(State(svc): State<Arc<Service>>, headers: HeaderMap) -> Response {
    let k = match required_key(&svc, &headers).await {
        Ok(k) => k,
        Err(e) => return e.response(),
    };
    let today = day_of(svc.clock.now_ms());
    let days = match svc.store.days(&k.id, today).await {
        Ok(d) => d,
        Err(e) => return ServiceError::from(e).response(),
    };
    let one = days.iter().filter(|d| !svc.config.is_system_two(&d.model));
    let (requests, tokens) = one.fold((0, 0), |(r, t), d| (r + d.requests, t + d.input_tokens));
    json_response(
        StatusCode::OK,
        json!({"key_id": k.id, "prefix": k.prefix, "label": k.label, "status": k.status,
               "created_at": rfc3339(k.created_at),
               "usage_today": {"requests": requests, "input_tokens": tokens},
               "limits": budgets_json(&svc.config.per_key)}),
    )
}

async fn revoke_self(State(svc): State<Arc<Service>>, headers: HeaderMap) -> Response {
    let k = match required_key(&svc, &headers).await {
        Ok(k) => k,
        Err(e) => return e.response(),
    };
    match svc.store.revoke(&k.id, svc.clock.now_ms()).await {
        Ok(()) => StatusCode::NO_CONTENT.into_response(),
        Err(e) => ServiceError::from(e).response(),
    }
}

async fn forget(State(svc): State<Arc<Service>>, headers: HeaderMap) -> Response {
    let k = match required_key(&svc, &headers).await {
        Ok(k) => k,
        Err(e) => return e.response(),
    };
    // Deleting the key's row revokes it; its usage and request log go in the same
    // transaction.
    match svc.store.forget(&k.id).await {
        Ok(()) => json_response(
            StatusCode::ACCEPTED,
            json!({"key_id": k.id, "status": "scheduled",
                   "message": "The key is revoked; its logged requests, usage and metadata are deleted."}),
        ),
        Err(e) => ServiceError::from(e).response(),
    }
}

fn recent_summary(rows: &[&RequestRow]) -> Value {
    let mut answered: Vec<i64> = rows
        .iter()
        .filter(|r| r.status < 400)
        .map(|r| r.server_ms)
        .collect();
    answered.sort_unstable();
    let mut errors: BTreeMap<(i64, String), u64> = BTreeMap::new();
    for r in rows.iter().filter(|r| r.status >= 400) {
        *errors
            .entry((r.status, r.code.clone().unwrap_or_default()))
            .or_default() += 1;
    }
    json!({
        "requests": rows.len(),
        "answered": answered.len(),
        "latency_ms": {"p50": percentile(&answered, 0.5), "p90": percentile(&answered, 0.9)},
        "errors": errors.iter().map(|((s, c), n)| json!({"status": s, "code": c, "count": n})).collect::<Vec<_>>(),
    })
}

async fn usage(State(svc): State<Arc<Service>>, req: Request) -> Response {
    usage_of_system(svc, req, false).await
}

/// The same for System Two (`vllm-sr/auto`), which the Keys page shows beside it.
async fn usage_two(State(svc): State<Arc<Service>>, req: Request) -> Response {
    usage_of_system(svc, req, true).await
}

async fn usage_of_system(svc: Arc<Service>, req: Request, two: bool) -> Response {
    let addr = address(&svc, req.headers(), peer(&req));
    let k = match required_key(&svc, req.headers()).await {
        Ok(k) => k,
        Err(e) => return e.response(),
    };
    let per_minute = svc.config.usage_requests_per_minute;
    if let Err(e) = api_limit(&svc, "usage", per_minute, &addr, Some(&k.id)) {
        return e.response();
    }
    match usage_body(&svc, &k, two).await {
        Ok(v) => json_response(StatusCode::OK, v),
        Err(e) => e.response(),
    }
}

async fn usage_body(svc: &Service, k: &KeyRow, two: bool) -> Result<Value, ServiceError> {
    let of_system = |m: &str| svc.config.is_system_two(m) == two;
    let now = svc.clock.now_ms();
    let today = day_of(now);
    let first = today - 29;
    let rows: Vec<DayRow> = svc
        .store
        .days(&k.id, first)
        .await?
        .into_iter()
        .filter(|d| of_system(&d.model))
        .collect();
    let mut days = Vec::with_capacity(30);
    for day in first..=today {
        let of_day = rows.iter().filter(|r| r.day == day);
        let (mut rq, mut tk, mut er, mut rl) = (0, 0, 0, 0);
        for r in of_day {
            rq += r.requests;
            tk += r.input_tokens;
            er += r.errors;
            rl += r.rate_limited;
        }
        days.push(json!({"date": day_name(day), "requests": rq, "input_tokens": tk, "errors": er, "rate_limited": rl}));
    }
    let mut models: BTreeMap<&str, [i64; 4]> = BTreeMap::new();
    for r in &rows {
        let m = models.entry(&r.model).or_default();
        m[0] += r.requests;
        m[1] += r.input_tokens;
        m[2] += r.errors;
        m[3] += r.rate_limited;
    }
    let totals = models.values().fold([0i64; 4], |mut a, m| {
        for i in 0..4 {
            a[i] += m[i];
        }
        a
    });
    let recent_rows = svc.store.recent(&k.id, now - 7 * DAY_MS, 10_000).await?;
    let one: Vec<&RequestRow> = recent_rows.iter().filter(|r| of_system(&r.model)).collect();
    let mut recent = recent_summary(&one);
    let mut by_model: BTreeMap<&str, Vec<&RequestRow>> = BTreeMap::new();
    for r in &one {
        by_model.entry(&r.model).or_default().push(r);
    }
    if let Value::Object(m) = &mut recent {
        m.insert("days".into(), json!(7));
        m.insert(
            "models".into(),
            Value::Array(
                by_model
                    .iter()
                    .map(|(id, rs)| {
                        let mut v = recent_summary(rs);
                        if let Value::Object(o) = &mut v {
                            o.insert("id".into(), json!(id));
                        }
                        v
                    })
                    .collect(),
            ),
        );
    }
    let mut quota = Vec::new();
    for model in svc.models.iter().filter(|m| of_system(m) && *m != "*") {
        let b = svc.config.budgets(model);
        let subject = Subject::Budget {
            id: k.budget.clone(),
            model: model.clone(),
        };
        seed(svc, &subject, &k.budget, model, now).await?;
        let (rq, tk) = svc.limiter.today(&subject, now);
        quota.push(
            json!({"id": model, "requests_today": rq, "tokens_today": tk,
            "requests_left": b.requests_per_day.map(|l| l.saturating_sub(rq)),
            "tokens_left": b.tokens_per_day.map(|l| l.saturating_sub(tk)),
            "limits": budgets_json(&b)}),
        );
    }
    Ok(json!({
        "key_id": k.id, "generated_at": rfc3339(now),
        "days": days,
        "totals": {"requests": totals[0], "input_tokens": totals[1], "output_tokens": 0,
                   "errors": totals[2], "rate_limited": totals[3]},
        "models": models.iter().map(|(id, m)| json!({"id": id, "requests": m[0], "input_tokens": m[1], "errors": m[2], "rate_limited": m[3]})).collect::<Vec<_>>(),
        "recent": recent,
        "quota": {"resets_at": rfc3339((today + 1) * DAY_MS), "models": quota},
    }))
}

/// The router's live model states, each with its recent server times (p50 and p90 of the
/// answered requests of the last minutes, the wait for a place included).
async fn status(svc: Arc<Service>, inner: Router) -> Response {
    let Some((status, mut v)) = inner_json(inner, "/api/status").await else {
        return ApiError::new(
            Code::StatusUnavailable,
            "the router's status did not answer",
        )
        .response(Shape::Duo);
    };
    let now = svc.clock.now_ms();
    if let Some(models) = v.get_mut("models").and_then(Value::as_array_mut) {
        for m in models.iter_mut() {
            let id = m.get("id").and_then(Value::as_str).unwrap_or_default();
            let live = svc.live.summary(id, now);
            if let (Value::Object(o), Ok(Value::Object(l))) = (m, serde_json::to_value(live)) {
                o.extend(l);
            }
        }
    }
    if let Value::Object(o) = &mut v {
        o.insert("generated_at".into(), json!(rfc3339(now)));
    }
    json_response(status, v)
}

/// A GET of `path` on the router behind the service, its JSON body (`None` when it answers
/// no JSON object).
async fn inner_json(inner: Router, path: &'static str) -> Option<(StatusCode, Value)> {
    use tower::ServiceExt;
    let mut req = Request::new(Body::empty());
    *req.uri_mut() = axum::http::Uri::from_static(path);
    let Ok(resp) = inner.oneshot(req).await;
    let (parts, body) = resp.into_parts();
    let bytes = axum::body::to_bytes(body, 4 * 1024 * 1024).await.ok()?;
    let v: Value = serde_json::from_slice(&bytes).ok()?;
    v.is_object().then_some((parts.status, v))
}

/// Each published System One model's card, by name, as its worker reports it.
async fn cards(inner: Router) -> BTreeMap<String, Value> {
    let Some((_, listing)) = inner_json(inner, "/v1/systemone/models").await else {
        return BTreeMap::new();
    };
    listing
        .get("models")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|m| {
            let name = m.get("name").and_then(Value::as_str)?;
            Some((name.to_string(), m.get("card").cloned()?))
        })
        .collect()
}

/// A model's `limits` in /api/info: what its worker enforces (its card's limits: state length,
/// options, states, questions, images, videos and their sizes), what this service enforces
/// (`max_request_tokens` by its estimate, `timeout_seconds`), and whether it answers `box`.
fn model_limits(card: Option<&Value>, own: &crate::config::ModelLimits) -> Value {
    let mut limits = card
        .and_then(|c| c.get("limits"))
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    if let Ok(Value::Object(o)) = serde_json::to_value(own) {
        limits.extend(o);
    }
    let answers_box = card
        .and_then(|c| c.get("question_types"))
        .and_then(Value::as_array)
        .is_some_and(|t| t.iter().any(|t| t == "box"));
    limits.insert("box".into(), json!(answers_box));
    Value::Object(limits)
}

async fn info(svc: Arc<Service>, inner: Router) -> Response {
    let c = &svc.config;
    let cards = cards(inner).await;
    let models: Vec<Value> = svc
        .models
        .iter()
        .filter(|m| *m != "*")
        .map(|m| {
            let s = c.model(m);
            json!({"id": m, "system": if c.is_system_two(m) { "two" } else { "one" },
                   "limits": model_limits(cards.get(m), &s.limits), "admission": s.admission,
                   "rate_limits": budgets_json(&c.budgets(m))})
        })
        .collect();
    json_response(
        StatusCode::OK,
        json!({
            "keys": {"required": c.require_keys, "difficulty": c.difficulty,
                     "challenge_ttl_seconds": c.challenge_ttl_seconds},
            "rate_limits": {
                "per_key": budgets_json(&c.per_key),
                "per_address": budgets_json(&c.per_address),
                "system_two": budgets_json(&c.system_two),
                "key_creation": {"per_hour": c.keys_per_hour, "per_day": c.keys_per_day},
                "challenges_per_minute": c.challenges_per_minute,
                "usage_requests_per_minute": c.usage_requests_per_minute,
            },
            "models": models,
        }),
    )
}

/// `/pt/api/info`: the router's System Two facts (the models `vllm-sr/auto` routes to, its
/// limits) with each key's System Two budgets beside them.
async fn info_two(svc: Arc<Service>, inner: Router) -> Response {
    let Some((status, mut v)) = inner_json(inner, "/pt/api/info").await else {
        return ApiError::new(Code::NotFound, "the router serves no System Two")
            .response(Shape::Duo);
    };
    if let Some(o) = v.as_object_mut() {
        o.insert(
            "rate_limits".into(),
            json!({"per_key": budgets_json(&svc.config.system_two)}),
        );
    }
    json_response(status, v)
}

// ---------------------------------------------------------------------------------------
// The guard in front of /v1

#[derive(Clone, Copy, PartialEq, Eq)]
enum Family {
    One,
    Two,
    Other,
}

/// Seed a budget's daily counts from the store once per day and process.
async fn seed(
    svc: &Service,
    subject: &Subject,
    budget: &str,
    model: &str,
    now: Millis,
) -> Result<(), ServiceError> {
    if svc.limiter.needs_seed(subject, now) {
        let (r, t) = svc.store.budget_day(budget, model, day_of(now)).await?;
        svc.limiter.seed(subject, now, r, t);
    }
    Ok(())
}

/// What the guard knows of a request, to record it.
struct Ctx {
    svc: Arc<Service>,
    key: Option<KeyRow>,
    model: String,
    estimate: u64,
    /// When the guard took the request, by the service's clock.
    at: Millis,
    request_id: String,
}

impl Ctx {
    fn subject(&self) -> Option<(Subject, Budgets)> {
        self.key.as_ref().map(|k| {
            (
                Subject::Budget {
                    id: k.budget.clone(),
                    model: self.model.clone(),
                },
                self.svc.config.budgets(&self.model),
            )
        })
    }

    /// The key's per-minute budgets on the model, as OpenAI's headers.
    fn headers(&self, h: &mut HeaderMap) {
        let Some((s, b)) = self.subject() else { return };
        let st = self
            .svc
            .limiter
            .minute_state(&s, &b, self.svc.clock.now_ms());
        let reset = reset_text(st.reset_ms);
        let values = [
            (
                "x-ratelimit-limit-requests",
                st.limit_requests.map(|v| v.to_string()),
            ),
            (
                "x-ratelimit-remaining-requests",
                st.remaining_requests.map(|v| v.to_string()),
            ),
            (
                "x-ratelimit-reset-requests",
                st.limit_requests.map(|_| reset.clone()),
            ),
            (
                "x-ratelimit-limit-tokens",
                st.limit_tokens.map(|v| v.to_string()),
            ),
            (
                "x-ratelimit-remaining-tokens",
                st.remaining_tokens.map(|v| v.to_string()),
            ),
            (
                "x-ratelimit-reset-tokens",
                st.limit_tokens.map(|_| reset.clone()),
            ),
        ];
        for (name, v) in values {
            if let Some(v) = v.and_then(|v| HeaderValue::from_str(&v).ok()) {
                h.insert(HeaderName::from_static(name), v);
            }
        }
    }

    /// Write a request's outcome to the key's usage and request log.
    async fn record(
        &self,
        status: u16,
        code: Option<&str>,
        input: u64,
        output: u64,
        rate_limited: bool,
    ) {
        let server_ms = self.svc.clock.now_ms().saturating_sub(self.at).max(0) as u64;
        self.svc
            .live
            .record(&self.model, self.at, server_ms, status);
        let Some(k) = &self.key else { return };
        let charged = !rate_limited && status != 429;
        let day = DayRow {
            day: day_of(self.at),
            model: self.model.clone(),
            requests: i64::from(charged),
            input_tokens: if charged { input as i64 } else { 0 },
            output_tokens: if charged { output as i64 } else { 0 },
            errors: i64::from(status >= 500),
            rate_limited: i64::from(rate_limited),
        };
        let log = RequestRow {
            at: self.at,
            model: self.model.clone(),
            status: status as i64,
            code: code.map(str::to_string),
            server_ms: server_ms as i64,
            input_tokens: input as i64,
        };
        if let Err(e) = self
            .svc
            .store
            .record(&k.id, &day, Some((&self.request_id, &log)))
            .await
        {
            tracing::warn!(error = %e, "usage not recorded");
        }
    }

    async fn refuse(&self, e: ServiceError, rate_limited: bool) -> Response {
        self.record(e.status().as_u16(), Some(e.code()), 0, 0, rate_limited)
            .await;
        let mut r = e.response();
        self.headers(r.headers_mut());
        r
    }
}

/// The guard, and then one shape for System One's errors (`errors::both_shapes`): whether a
/// refusal is the service's own or came from the router or a worker, a client of
/// system-duo-api and one of worker-api's vllm-sr/5.0 both read it.
async fn guard(State(svc): State<Arc<Service>>, req: Request, next: Next) -> Response {
    let flat = match (req.method(), req.uri().path()) {
        (&Method::POST, "/v1/systemone" | "/v1/systemone/batch") => Some(true),
        (&Method::POST, "/v1/decisions") => Some(false),
        _ => None,
    };
    let resp = admit(svc, req, next).await;
    match flat {
        Some(flat) if resp.status().as_u16() >= 400 => one_error_shape(resp, flat).await,
        _ => resp,
    }
}

async fn one_error_shape(resp: Response, flat: bool) -> Response {
    let (mut parts, body) = resp.into_parts();
    let bytes = axum::body::to_bytes(body, ANSWER_BYTES)
        .await
        .unwrap_or_default();
    let Ok(mut v) = serde_json::from_slice::<Value>(&bytes) else {
        return Response::from_parts(parts, Body::from(bytes));
    };
    errors::both_shapes(&mut v, parts.status.as_u16(), flat);
    parts.headers.remove(header::CONTENT_LENGTH);
    parts.headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    Response::from_parts(parts, Body::from(v.to_string()))
}

async fn admit(svc: Arc<Service>, req: Request, next: Next) -> Response {
    let family = match (req.method(), req.uri().path()) {
        (&Method::POST, "/v1/systemone" | "/v1/systemone/batch" | "/v1/decisions") => Family::One,
        (&Method::POST, "/v1/chat/completions") => Family::Two,
        (&Method::POST, p) if p.starts_with("/v1/") => Family::Other,
        _ => return next.run(req).await,
    };
    let key = match authenticate(&svc, req.headers()).await {
        Ok(k) => k,
        Err(e) => return e.response(),
    };
    if key.is_none() && svc.config.require_keys {
        return ServiceError::InvalidApiKey.response();
    }
    if family == Family::Other {
        return next.run(req).await;
    }
    let addr = address(&svc, req.headers(), peer(&req));
    let request_id = req
        .headers()
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        // The log keeps at most 128 characters of a caller's id.
        .map_or_else(
            || uuid::Uuid::new_v4().simple().to_string(),
            |s| s.chars().take(128).collect(),
        );
    let (mut parts, body) = req.into_parts();
    // The shared body layer: one layer of gzip or zstd decoded here, once; the request goes
    // on decoded. A multipart body is read for its JSON `request` part (what the estimate
    // counts) and goes on as it came.
    let bytes = match ::body::read(&parts.headers, body, svc.config.max_request_bytes).await {
        Ok(b) => b,
        Err(e) => return ServiceError::Body(e).response(),
    };
    parts.headers.remove(header::CONTENT_ENCODING);
    parts.headers.remove(header::CONTENT_LENGTH);
    let request = match ::body::split(&parts.headers, bytes.clone()).await {
        Ok((request, _)) => request,
        Err(e) => return ServiceError::Body(e).response(),
    };
    let obj: Option<Map<String, Value>> = serde_json::from_slice(&request).ok();
    let model = obj
        .as_ref()
        .and_then(|o| o.get(member::MODEL))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    // What the request is counted as: every chat is System Two's (a concrete backend name
    // counts as the first System Two model); System One names as published, others as `*`.
    let model = match family {
        Family::Two if !svc.config.is_system_two(&model) => svc
            .config
            .system_two_models
            .first()
            .cloned()
            .unwrap_or_else(|| "*".to_string()),
        _ if svc.models.contains(&model) || svc.config.is_system_two(&model) => model,
        _ => "*".to_string(),
    };
    let settings = svc.config.model(&model).clone();
    // A body that is not plain JSON (compressed, or malformed) counts its bytes.
    let estimate = match (&obj, family) {
        (Some(o), Family::One) => estimate::input_tokens(o, settings.limits.state_once),
        (Some(o), _) => estimate::chat_tokens(o),
        (None, _) => bytes.len() as u64,
    };
    let ctx = Ctx {
        svc: svc.clone(),
        key,
        model: model.clone(),
        estimate,
        at: svc.clock.now_ms(),
        request_id,
    };
    if family == Family::One && estimate > settings.limits.max_request_tokens {
        let e = ServiceError::RequestTooLong {
            estimate,
            limit: settings.limits.max_request_tokens,
        };
        return ctx.refuse(e, false).await;
    }
    // Limits: the key's budget on the model and the address, all checked before any is
    // charged.
    let mut taken: Option<Taken> = None;
    if let (Some(k), Some((subject, budgets))) = (&ctx.key, ctx.subject()) {
        if let Err(e) = seed(&svc, &subject, &k.budget, &model, ctx.at).await {
            return e.response();
        }
        let checks = [
            Check {
                subject: Subject::Address(addr.clone()),
                budgets: svc.config.per_address,
            },
            Check { subject, budgets },
        ];
        match svc.limiter.take(&checks, estimate, ctx.at).await {
            Ok(t) => taken = Some(t),
            Err(r) => {
                let b = if r.subject_is_address {
                    svc.config.per_address
                } else {
                    budgets
                };
                tracing::debug!(which = ?r.which, limit = ?limit_of(r.which, &b), "rate limited");
                return ctx
                    .refuse(ServiceError::RateLimited(r.retry_after_s), true)
                    .await;
            }
        }
    }
    // Who asks, for admission: the key, or the address without one.
    let asker: Arc<str> = ctx
        .key
        .as_ref()
        .map_or(addr.as_str(), |k| k.id.as_str())
        .into();
    // A request with box questions takes a place of the model's box share instead.
    let boxes = family == Family::One && obj.as_ref().is_some_and(estimate::asks_boxes);
    let _box_place = match svc.box_share(&model).filter(|_| boxes) {
        Some(share) => match share.acquire(asker.clone(), addr.as_str().into()).await {
            Ok(p) => Some(p),
            Err(r) => {
                if let Some(t) = &taken {
                    svc.limiter.refund(t);
                }
                let e = match r {
                    BoxRefusal::OwnRequest => ServiceError::ConcurrencyLimit(2),
                    BoxRefusal::Busy => ServiceError::Overloaded(2),
                };
                return ctx.refuse(e, false).await;
            }
        },
        None => None,
    };
    // Fair admission to the model's places.
    let ticket = Ticket {
        address: addr.as_str().into(),
        key: asker,
        tokens: estimate,
    };
    let permit = match svc.gate(&model).filter(|_| !boxes) {
        Some(g) => match g.acquire(ticket).await {
            Ok(p) => Some(p),
            Err(r) => {
                if let Some(t) = &taken {
                    svc.limiter.refund(t);
                }
                let wait = if r == Refusal::TimedOut { 2 } else { 1 };
                return ctx.refuse(ServiceError::Overloaded(wait), false).await;
            }
        },
        None => None,
    };
    if let Some(p) = &permit {
        metrics::histogram!("vsr_admission_wait_seconds", "model" => model.clone())
            .record(p.waited.as_secs_f64());
    }
    let limit_ms = settings.limits.timeout_seconds.max(1).saturating_mul(1000) as Millis;
    let deadline = svc.clock.sleep_until(ctx.at.saturating_add(limit_ms));
    let req = Request::from_parts(parts, Body::from(bytes));
    let answered = tokio::select! {
        r = next.run(req) => Some(r),
        () = deadline => None,
    };
    let resp = match answered {
        // A System One model call past the router's budget (its 504, whatever the word) is
        // the published API's 504 timeout, charged its estimate like one cut here.
        Some(r) if family == Family::One && r.status() == StatusCode::GATEWAY_TIMEOUT => {
            let e = ServiceError::Timeout(settings.limits.timeout_seconds);
            return ctx.refuse(e, false).await;
        }
        Some(r) => r,
        None => {
            // Charged its estimate, as an abandoned request is.
            let e = ServiceError::Timeout(settings.limits.timeout_seconds);
            return ctx.refuse(e, false).await;
        }
    };
    match family {
        Family::One => finish_buffered(ctx, taken, resp, permit).await,
        _ if is_stream(&resp) => finish_stream(ctx, taken, resp, permit),
        _ => finish_buffered(ctx, taken, resp, permit).await,
    }
}

fn is_stream(r: &Response) -> bool {
    r.headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"))
}

/// Input and output tokens of an answer's `usage` (System One's `input_tokens`, OpenAI's
/// `prompt_tokens` and `completion_tokens`).
fn usage_of(v: &Value) -> Option<(u64, u64)> {
    // A System One batch (`/v1/systemone/batch`): each answered request's usage, summed.
    if let Some(rs) = v.get("responses").and_then(Value::as_object) {
        return rs
            .values()
            .filter_map(usage_of)
            .reduce(|a, b| (a.0 + b.0, a.1 + b.1));
    }
    let u = v.get("usage")?;
    if let Some(i) = u.get("input_tokens").and_then(Value::as_u64) {
        return Some((
            i,
            u.get("output_tokens").and_then(Value::as_u64).unwrap_or(0),
        ));
    }
    let p = u.get("prompt_tokens").and_then(Value::as_u64)?;
    Some((
        p,
        u.get("completion_tokens")
            .and_then(Value::as_u64)
            .unwrap_or(0),
    ))
}

fn error_code(v: &Value) -> Option<String> {
    let e = v.get("error").unwrap_or(v);
    e.get("code")
        .and_then(Value::as_str)
        .or_else(|| v.get("code").and_then(Value::as_str))
        .map(str::to_string)
}

async fn finish_buffered(
    ctx: Ctx,
    taken: Option<Taken>,
    resp: Response,
    permit: Option<crate::admission::Permit>,
) -> Response {
    let (mut parts, body) = resp.into_parts();
    let bytes = axum::body::to_bytes(body, ANSWER_BYTES)
        .await
        .unwrap_or_default();
    drop(permit);
    let v: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    let status = parts.status.as_u16();
    let (input, output) = if status < 400 {
        usage_of(&v).unwrap_or((ctx.estimate, 0))
    } else {
        (0, 0)
    };
    if let Some(t) = &taken {
        ctx.svc.limiter.settle(t, input + output);
    }
    let code = (status >= 400).then(|| error_code(&v)).flatten();
    ctx.record(status, code.as_deref(), input, output, false)
        .await;
    ctx.headers(&mut parts.headers);
    Response::from_parts(parts, Body::from(bytes))
}

/// Counts a streamed answer's tokens when the stream ends (or the client leaves): the last
/// `usage` seen in its events, else the estimate.
struct StreamTally {
    ctx: Option<Ctx>,
    taken: Option<Taken>,
    status: u16,
    tail: Vec<u8>,
    usage: Option<(u64, u64)>,
    _permit: Option<crate::admission::Permit>,
}

impl StreamTally {
    fn push(&mut self, b: &Bytes) {
        self.tail.extend_from_slice(b);
        // Whole lines only: read each complete `data:` event, keep the rest.
        while let Some(n) = self.tail.iter().position(|c| *c == b'\n') {
            let line: Vec<u8> = self.tail.drain(..=n).collect();
            if let Some(data) = line.strip_prefix(b"data: ") {
                if let Ok(v) = serde_json::from_slice::<Value>(data) {
                    if let Some(u) = usage_of(&v) {
                        self.usage = Some(u);
                    }
                }
            }
        }
        if self.tail.len() > 1 << 20 {
            self.tail.clear();
        }
    }
}

impl Drop for StreamTally {
    fn drop(&mut self) {
        let Some(ctx) = self.ctx.take() else { return };
        let (input, output) = self.usage.unwrap_or((ctx.estimate, 0));
        if let Some(t) = &self.taken {
            ctx.svc.limiter.settle(t, input + output);
        }
        let status = self.status;
        if let Ok(h) = tokio::runtime::Handle::try_current() {
            h.spawn(async move { ctx.record(status, None, input, output, false).await });
        }
    }
}

fn finish_stream(
    ctx: Ctx,
    taken: Option<Taken>,
    resp: Response,
    permit: Option<crate::admission::Permit>,
) -> Response {
    let (mut parts, body) = resp.into_parts();
    ctx.headers(&mut parts.headers);
    let mut tally = StreamTally {
        ctx: Some(ctx),
        taken,
        status: parts.status.as_u16(),
        tail: Vec::new(),
        usage: None,
        _permit: permit,
    };
    let stream = body.into_data_stream().map(move |chunk| {
        if let Ok(b) = &chunk {
            tally.push(b);
        }
        chunk
    });
    Response::from_parts(parts, Body::from_stream(stream))
}
