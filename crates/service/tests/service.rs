//! The keys service over HTTP on a real SQLite database, in front of a small stand-in for
//! the router (it answers System One with a usage and System Two with a stream). Time is
//! a manual clock, so budgets, quotas and midnight resets are exact.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use axum::routing::post;
use axum::Router;
use serde_json::{json, Value};
use service::clock::{Clock, ManualClock};
use service::{ServiceConfig, Store};
use tower::ServiceExt;

/// 2026-11-30T23:58:30Z.
const T0: i64 = 1_796_083_200_000 - 90_000;

/// What stands behind the service in these tests: System One answers with
/// `usage.input_tokens: 7` (its batch with a worker's vllm-sr/5.0 `model_unavailable`);
/// chat answers stream a usage chunk.
fn inner() -> Router {
    Router::new()
        .route(
            "/v1/systemone",
            post(|| async {
                axum::Json(json!({"model": "m1", "answers": {}, "usage": {"input_tokens": 7}}))
            }),
        )
        .route(
            "/v1/decisions",
            // Never answers: the service's time limit (on its clock) must end it.
            post(std::future::pending::<axum::Json<Value>>),
        )
        .route(
            "/v1/systemone/batch",
            post(|| async {
                (
                    axum::http::StatusCode::SERVICE_UNAVAILABLE,
                    [("retry-after", "5")],
                    axum::Json(json!({"code": "model_unavailable", "message": "no worker of the model is ready",
                        "detail": {"error_type": "model_unavailable", "message": "no worker of the model is ready"}})),
                )
            }),
        )
        .route(
            "/api/status",
            axum::routing::get(|| async {
                axum::Json(json!({"status": "ready", "models": [
                    {"id": "vllm-sr/auto", "system": "two", "state": "ready"},
                    {"id": "m1", "system": "one", "state": "ready"}]}))
            }),
        )
        .route(
            "/v1/chat/completions",
            post(|| async {
                let body = "data: {\"choices\":[]}\n\ndata: {\"choices\":[],\"usage\":{\"prompt_tokens\":11,\"completion_tokens\":5}}\n\ndata: [DONE]\n\n";
                ([("content-type", "text/event-stream")], body)
            }),
        )
}

/// Where a test's data lives: a SQLite file in a temporary directory, or a fresh database
/// on the PostgreSQL server named by `VSR_TEST_POSTGRES_URL` (`.ci/run` starts one).
#[derive(Clone)]
enum Db {
    Sqlite,
    Postgres(String),
}

impl Db {
    fn postgres() -> Option<Db> {
        match std::env::var("VSR_TEST_POSTGRES_URL") {
            Ok(u) if !u.is_empty() => Some(Db::Postgres(u)),
            _ => {
                eprintln!("VSR_TEST_POSTGRES_URL is not set: the PostgreSQL run is skipped");
                None
            }
        }
    }

    /// A URL of an empty database, and the directory that holds it (SQLite).
    async fn fresh(&self) -> (String, Option<tempfile::TempDir>) {
        match self {
            Db::Sqlite => {
                let dir = tempfile::tempdir().unwrap();
                (Store::sqlite_url(dir.path()), Some(dir))
            }
            Db::Postgres(admin) => {
                use sqlx::Connection;
                static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
                let name = format!(
                    "vsr_test_{}_{}",
                    std::process::id(),
                    N.fetch_add(1, std::sync::atomic::Ordering::SeqCst)
                );
                sqlx::any::install_default_drivers();
                let mut c = sqlx::AnyConnection::connect(admin).await.unwrap();
                sqlx::query(&format!("DROP DATABASE IF EXISTS {name}"))
                    .execute(&mut c)
                    .await
                    .unwrap();
                sqlx::query(&format!("CREATE DATABASE {name}"))
                    .execute(&mut c)
                    .await
                    .unwrap();
                // postgres://AUTH/DB?QUERY with the new database.
                let (scheme, rest) = admin.split_once("://").unwrap();
                let (auth, tail) = rest.split_once('/').unwrap_or((rest, ""));
                let query = tail
                    .split_once('?')
                    .map(|(_, q)| format!("?{q}"))
                    .unwrap_or_default();
                (format!("{scheme}://{auth}/{name}{query}"), None)
            }
        }
    }
}

struct Env {
    app: Router,
    clock: Arc<ManualClock>,
    svc: Arc<service::Service>,
    _dir: Option<tempfile::TempDir>,
}

async fn env_with(cfg: ServiceConfig, db: &Db) -> Env {
    let (url, dir) = db.fresh().await;
    env_on(cfg, &url, dir).await
}

async fn env_on(cfg: ServiceConfig, url: &str, dir: Option<tempfile::TempDir>) -> Env {
    let store = Store::open(url).await.unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let svc = service::Service::new(
        cfg,
        store,
        clock.clone(),
        vec!["vllm-sr/auto".into(), "m1".into()],
    );
    Env {
        app: service::http::app(svc.clone(), inner()),
        clock,
        svc,
        _dir: dir,
    }
}

async fn call(
    app: &Router,
    method: &str,
    path: &str,
    key: Option<&str>,
    body: Option<Value>,
) -> (StatusCode, axum::http::HeaderMap, Value) {
    let mut b = Request::builder().method(method).uri(path);
    if let Some(k) = key {
        b = b.header("authorization", format!("Bearer {k}"));
    }
    let req = match body {
        Some(v) => b
            .header("content-type", "application/json")
            .body(Body::from(v.to_string())),
        None => b.body(Body::empty()),
    }
    .unwrap();
    let resp = app.clone().oneshot(req).await.unwrap();
    let status = resp.status();
    let headers = resp.headers().clone();
    let bytes = axum::body::to_bytes(resp.into_body(), usize::MAX)
        .await
        .unwrap();
    let v = serde_json::from_slice(&bytes)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into()));
    (status, headers, v)
}

/// The spec's terminal recipe: ask a challenge, find the nonce, create the key.
async fn new_key(app: &Router) -> String {
    let (s, _, c) = call(app, "POST", "/api/keys/challenge", None, None).await;
    assert_eq!(s, 200, "{c}");
    let ch = c["challenge"].as_str().unwrap().to_string();
    let d = c["difficulty"].as_u64().unwrap() as u32;
    let nonce = (0u64..)
        .find(|n| service::keys::solves(&ch, &n.to_string(), d))
        .unwrap();
    let (s, _, k) = call(
        app,
        "POST",
        "/api/keys",
        None,
        Some(json!({"challenge": ch, "nonce": nonce.to_string(), "accept_terms": true})),
    )
    .await;
    assert_eq!(s, 201, "{k}");
    k["api_key"].as_str().unwrap().to_string()
}

/// A challenge and a nonce that solves it.
async fn solved(app: &Router) -> (String, String) {
    let (_, _, c) = call(app, "POST", "/api/keys/challenge", None, None).await;
    let ch = c["challenge"].as_str().unwrap().to_string();
    let d = c["difficulty"].as_u64().unwrap() as u32;
    let nonce = (0u64..)
        .find(|n| service::keys::solves(&ch, &n.to_string(), d))
        .unwrap();
    (ch, nonce.to_string())
}

/// `POST /api/keys` with the terms accepted.
async fn create(app: &Router, ch: &str, nonce: &str) -> (StatusCode, axum::http::HeaderMap, Value) {
    let body = json!({"challenge": ch, "nonce": nonce, "accept_terms": true});
    call(app, "POST", "/api/keys", None, Some(body)).await
}

fn cheap() -> ServiceConfig {
    ServiceConfig {
        difficulty: 8,
        keys_per_hour: 100,
        keys_per_day: 100,
        ..ServiceConfig::default()
    }
}

/// The status of one System One request with `key`.
async fn ask_status(app: &Router, key: &str) -> StatusCode {
    call(app, "POST", "/v1/systemone", Some(key), Some(ask()))
        .await
        .0
}

fn ask() -> Value {
    json!({"model": "m1", "state": "hello", "questions": {"q": {"type": "noul", "instructions": "Is it?"}}})
}

async fn a_key_is_made_used_revoked_and_refused(db: Db) {
    let e = env_with(cheap(), &db).await;
    let key = new_key(&e.app).await;
    assert!(key.starts_with("sk-vsr-"));
    let (s, h, v) = call(&e.app, "POST", "/v1/systemone", Some(&key), Some(ask())).await;
    assert_eq!(s, 200, "{v}");
    assert!(h.contains_key("x-request-id"));
    assert_eq!(h["x-ratelimit-limit-requests"], "60");
    assert_eq!(h["x-ratelimit-remaining-requests"], "59");
    let (s, _, me) = call(&e.app, "GET", "/api/keys/self", Some(&key), None).await;
    assert_eq!(s, 200);
    assert_eq!(me["status"], "active");
    assert_eq!(me["usage_today"], json!({"requests": 1, "input_tokens": 7}));
    assert_eq!(me["prefix"].as_str().unwrap(), &key[..11]);
    let (s, _, _) = call(&e.app, "DELETE", "/api/keys/self", Some(&key), None).await;
    assert_eq!(s, 204);
    let (s, _, v) = call(&e.app, "POST", "/v1/systemone", Some(&key), Some(ask())).await;
    assert_eq!(s, 401);
    assert_eq!(v["error"]["code"], "invalid_api_key");
    assert_eq!(v["error"]["type"], "authentication_error");
    // An unknown key and a malformed one get the same answer.
    let (s, _, _) = call(
        &e.app,
        "GET",
        "/api/keys/self",
        Some(&format!("sk-vsr-{}", "x".repeat(32))),
        None,
    )
    .await;
    assert_eq!(s, 401);
    let (s, _, _) = call(&e.app, "GET", "/api/keys/self", Some("nonsense"), None).await;
    assert_eq!(s, 401);
}

async fn keys_are_required_when_the_service_says_so(db: Db) {
    let e = env_with(
        ServiceConfig {
            require_keys: true,
            ..cheap()
        },
        &db,
    )
    .await;
    let (s, _, v) = call(&e.app, "POST", "/v1/systemone", None, Some(ask())).await;
    assert_eq!(s, 401, "{v}");
    let (s, _, v) = call(&e.app, "POST", "/v1/systemone", Some("unused"), Some(ask())).await;
    assert_eq!(s, 401, "{v}");
    assert_eq!(v["error"]["code"], "invalid_api_key");
    // Off: a request without a key passes, without rate-limit headers.
    let e = env_with(cheap(), &db).await;
    let (s, h, _) = call(&e.app, "POST", "/v1/systemone", None, Some(ask())).await;
    assert_eq!(s, 200);
    assert!(!h.contains_key("x-ratelimit-limit-requests"));
    // A private service takes a credential that is no service key (the placeholder an OpenAI
    // SDK must send) for no key; a key of ours that is wrong is still refused.
    let (s, h, v) = call(&e.app, "POST", "/v1/systemone", Some("unused"), Some(ask())).await;
    assert_eq!(s, 200, "{v}");
    assert!(!h.contains_key("x-ratelimit-limit-requests"));
    let bad = format!("sk-vsr-{}", "x".repeat(32));
    let (s, _, v) = call(&e.app, "POST", "/v1/systemone", Some(&bad), Some(ask())).await;
    assert_eq!(s, 401, "{v}");
    assert_eq!(v["error"]["code"], "invalid_api_key");
    let (s, _, _) = call(
        &e.app,
        "POST",
        "/v1/systemone",
        Some("sk-vsr-short"),
        Some(ask()),
    )
    .await;
    assert_eq!(s, 401);
    // /api/keys/self needs a key whatever the service: the placeholder is refused there.
    let (s, _, _) = call(&e.app, "GET", "/api/keys/self", Some("unused"), None).await;
    assert_eq!(s, 401);
}

async fn forget_leaves_no_row(db: Db) {
    let e = env_with(cheap(), &db).await;
    let key = new_key(&e.app).await;
    for _ in 0..3 {
        call(&e.app, "POST", "/v1/systemone", Some(&key), Some(ask())).await;
    }
    let (_, _, me) = call(&e.app, "GET", "/api/keys/self", Some(&key), None).await;
    let id = me["key_id"].as_str().unwrap().to_string();
    assert!(e.svc.store.rows_of(&id).await.unwrap() >= 3);
    let (s, _, v) = call(&e.app, "POST", "/api/keys/self/forget", Some(&key), None).await;
    assert_eq!(s, 202);
    assert_eq!(v["status"], "scheduled");
    assert_eq!(e.svc.store.rows_of(&id).await.unwrap(), 0);
    let (s, _, _) = call(&e.app, "POST", "/v1/systemone", Some(&key), Some(ask())).await;
    assert_eq!(s, 401);
    // The older System Two path forgets too; an older `sk-pt-` key is looked up like any
    // key (none is stored here, so it is refused as unknown, not as malformed).
    let other = new_key(&e.app).await;
    let (s, _, v) = call(
        &e.app,
        "POST",
        "/pt/api/keys/self/forget",
        Some(&other),
        None,
    )
    .await;
    assert_eq!(s, 202, "{v}");
    let old = format!("sk-pt-{}", "a".repeat(32));
    let (s, _, v) = call(&e.app, "POST", "/pt/api/keys/self/forget", Some(&old), None).await;
    assert_eq!(s, 401, "{v}");
    assert_eq!(v["error"]["code"], "invalid_api_key");
    let (s, _, _) = call(&e.app, "POST", "/v1/systemone", Some(&old), Some(ask())).await;
    assert_eq!(s, 401, "an sk-pt- key is checked, never taken for no key");
    // Imported (as `vllm-srun keys import` does), it works, is counted, and is forgotten
    // under /pt; importing it again stores nothing new; a line that is no key is named.
    let text = format!("{old}\n\nnot-a-key\n{old}\n");
    let done = service::import_keys(&e.svc.store, &text, T0).await.unwrap();
    use service::Imported;
    assert_eq!(
        done,
        vec![
            Imported::Added("sk-pt-aaaa".into()),
            Imported::Malformed(3),
            Imported::Known("sk-pt-aaaa".into())
        ]
    );
    let (s, _, v) = call(&e.app, "POST", "/v1/systemone", Some(&old), Some(ask())).await;
    assert_eq!(s, 200, "{v}");
    let (_, _, me) = call(&e.app, "GET", "/api/keys/self", Some(&old), None).await;
    assert_eq!(me["prefix"], "sk-pt-aaaa");
    assert_eq!(me["usage_today"]["requests"], 1);
    let id = me["key_id"].as_str().unwrap().to_string();
    let (s, _, _) = call(&e.app, "POST", "/pt/api/keys/self/forget", Some(&old), None).await;
    assert_eq!(s, 202);
    assert_eq!(e.svc.store.rows_of(&id).await.unwrap(), 0);
    let (s, _, _) = call(&e.app, "POST", "/v1/systemone", Some(&old), Some(ask())).await;
    assert_eq!(s, 401);
}

async fn challenges_are_single_use_limited_and_checked(db: Db) {
    let e = env_with(cheap(), &db).await;
    let (ch, nonce) = solved(&e.app).await;
    let (s, _, v) = call(
        &e.app,
        "POST",
        "/api/keys",
        None,
        Some(json!({"challenge": ch, "nonce": nonce, "accept_terms": false})),
    )
    .await;
    assert_eq!(
        (s.as_u16(), v["error"]["code"].as_str()),
        (400, Some("terms_not_accepted"))
    );
    let (s, _, _) = create(&e.app, &ch, &nonce).await;
    assert_eq!(s, 201);
    let (s, _, v) = create(&e.app, &ch, &nonce).await;
    assert_eq!(
        (s.as_u16(), v["error"]["code"].as_str()),
        (400, Some("invalid_challenge"))
    );
    // A wrong nonce.
    let (_, _, c) = call(&e.app, "POST", "/api/keys/challenge", None, None).await;
    let ch = c["challenge"].as_str().unwrap().to_string();
    let bad = (0u64..)
        .find(|n| !service::keys::solves(&ch, &n.to_string(), 8))
        .unwrap()
        .to_string();
    let (s, _, v) = call(
        &e.app,
        "POST",
        "/api/keys",
        None,
        Some(json!({"challenge": ch, "nonce": bad, "accept_terms": true})),
    )
    .await;
    assert_eq!(
        (s.as_u16(), v["error"]["code"].as_str()),
        (400, Some("invalid_proof"))
    );
    // Expired after ten minutes.
    let (ch, nonce) = solved(&e.app).await;
    e.clock.advance(600_001);
    let (s, _, _) = create(&e.app, &ch, &nonce).await;
    assert_eq!(s, 400);
    // Twenty challenges a minute per address, then 429 with Retry-After.
    e.clock.set(T0 + 3_600_000);
    for _ in 0..20 {
        assert_eq!(
            call(&e.app, "POST", "/api/keys/challenge", None, None)
                .await
                .0,
            200
        );
    }
    let (s, h, v) = call(&e.app, "POST", "/api/keys/challenge", None, None).await;
    assert_eq!(
        (s.as_u16(), v["error"]["code"].as_str()),
        (429, Some("rate_limit_exceeded"))
    );
    assert!(h.contains_key("retry-after"));
}

async fn key_creation_is_limited_per_address(db: Db) {
    let e = env_with(
        ServiceConfig {
            difficulty: 4,
            keys_per_hour: 2,
            keys_per_day: 3,
            ..ServiceConfig::default()
        },
        &db,
    )
    .await;
    new_key(&e.app).await;
    new_key(&e.app).await;
    let (ch, nonce) = solved(&e.app).await;
    let body = json!({"challenge": ch, "nonce": nonce, "accept_terms": true});
    let (s, h, v) = call(&e.app, "POST", "/api/keys", None, Some(body.clone())).await;
    assert_eq!(
        (s.as_u16(), v["error"]["code"].as_str()),
        (429, Some("key_creation_limited"))
    );
    assert_eq!(h["retry-after"], "3600");
    // The refused creation did not use the challenge.
    e.clock.advance(60_000);
    assert_eq!(
        call(&e.app, "POST", "/api/keys", None, Some(body.clone()))
            .await
            .0,
        429
    );
    // An hour after the first key, one more fits the hour; then the day's limit (3) stops
    // the next.
    e.clock.advance(3_540_000);
    new_key(&e.app).await;
    let (ch, nonce) = solved(&e.app).await;
    let (s, h, _) = create(&e.app, &ch, &nonce).await;
    assert_eq!(s, 429);
    assert_eq!(h["retry-after"], (86_400 - 3_600).to_string());
}

async fn deleting_a_key_gives_back_neither_a_creation_nor_a_budget(db: Db) {
    let e = env_with(
        ServiceConfig {
            difficulty: 4,
            keys_per_hour: 2,
            per_key: budgets(Some(2), None, None, None),
            ..ServiceConfig::default()
        },
        &db,
    )
    .await;
    let first = new_key(&e.app).await;
    for _ in 0..2 {
        assert_eq!(ask_status(&e.app, &first).await, 200);
    }
    let (s, _, _) = call(&e.app, "POST", "/api/keys/self/forget", Some(&first), None).await;
    assert_eq!(s, 202);
    // The second key of the hour: it shares the deleted key's minute budget, already spent.
    let second = new_key(&e.app).await;
    assert_eq!(ask_status(&e.app, &second).await, 429);
    // And the deleted key still counts: a third creation within the hour is refused.
    let (ch, nonce) = solved(&e.app).await;
    let (s, _, v) = create(&e.app, &ch, &nonce).await;
    assert_eq!(
        (s.as_u16(), v["error"]["code"].as_str()),
        (429, Some("key_creation_limited"))
    );
}

async fn status_adds_live_server_times_to_the_router_states(db: Db) {
    let e = env_with(cheap(), &db).await;
    let key = new_key(&e.app).await;
    for _ in 0..3 {
        assert_eq!(ask_status(&e.app, &key).await, 200);
    }
    // A request without a key counts too: the status page is about the models.
    call(&e.app, "POST", "/v1/systemone", None, Some(ask())).await;
    let (s, _, v) = call(&e.app, "GET", "/api/status", None, None).await;
    assert_eq!(s, 200, "{v}");
    let m1 = model_of(&v, "m1");
    assert_eq!(m1["state"], "ready");
    assert_eq!(
        (m1["requests"].as_u64(), m1["answered"].as_u64()),
        (Some(4), Some(4))
    );
    assert!(
        m1["latency_ms"]["p50"].is_u64() && m1["latency_ms"]["p90"].is_u64(),
        "{m1}"
    );
    assert_eq!(m1["window_seconds"], 300);
    let auto = &v["models"][0];
    assert_eq!(
        (auto["id"].as_str(), auto["requests"].as_u64()),
        (Some("vllm-sr/auto"), Some(0))
    );
    assert!(auto["latency_ms"]["p50"].is_null());
}

async fn system_two_usage_is_read_apart(db: Db) {
    let e = env_with(cheap(), &db).await;
    let key = new_key(&e.app).await;
    let chat = json!({"model": "vllm-sr/auto", "stream": true,
                      "messages": [{"role": "user", "content": "hi"}]});
    let (s, _, _) = call(
        &e.app,
        "POST",
        "/v1/chat/completions",
        Some(&key),
        Some(chat),
    )
    .await;
    assert_eq!(s, 200);
    assert_eq!(ask_status(&e.app, &key).await, 200);
    // The stream's usage is written when its body is dropped, on a task of its own.
    for _ in 0..100 {
        let (_, _, two) = call(&e.app, "GET", "/pt/api/keys/self/usage", Some(&key), None).await;
        if two["totals"]["requests"] == 1 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let (s, _, two) = call(&e.app, "GET", "/pt/api/keys/self/usage", Some(&key), None).await;
    assert_eq!(s, 200, "{two}");
    assert_eq!(two["totals"]["requests"], 1, "{two}");
    assert_eq!(two["totals"]["input_tokens"], 11);
    assert_eq!(two["models"][0]["id"], "vllm-sr/auto");
    assert_eq!(two["quota"]["models"][0]["id"], "vllm-sr/auto");
    let (_, _, one) = call(&e.app, "GET", "/api/keys/self/usage", Some(&key), None).await;
    assert_eq!(
        (
            one["totals"]["requests"].as_u64(),
            one["models"][0]["id"].as_str()
        ),
        (Some(1), Some("m1"))
    );
    assert_eq!(one["days"].as_array().unwrap().len(), 30);
}

/// The entry of `models` with this id.
fn model_of<'a>(v: &'a Value, id: &str) -> &'a Value {
    v["models"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["id"] == id)
        .unwrap_or_else(|| panic!("{id} is not listed: {v}"))
}

fn budgets(
    rpm: Option<u64>,
    tpm: Option<u64>,
    rpd: Option<u64>,
    tpd: Option<u64>,
) -> service::limits::Budgets {
    service::limits::Budgets {
        requests_per_minute: rpm,
        tokens_per_minute: tpm,
        requests_per_day: rpd,
        tokens_per_day: tpd,
    }
}

async fn budgets_admit_exactly_their_value_and_headers_follow(db: Db) {
    let e = env_with(
        ServiceConfig {
            per_key: budgets(Some(3), None, Some(5), None),
            ..cheap()
        },
        &db,
    )
    .await;
    let key = new_key(&e.app).await;
    for left in [2, 1, 0] {
        let (s, h, _) = call(&e.app, "POST", "/v1/systemone", Some(&key), Some(ask())).await;
        assert_eq!(s, 200);
        assert_eq!(h["x-ratelimit-remaining-requests"], left.to_string());
        assert_eq!(h["x-ratelimit-reset-requests"], "30s");
    }
    let (s, h, v) = call(&e.app, "POST", "/v1/systemone", Some(&key), Some(ask())).await;
    assert_eq!(
        (s.as_u16(), v["error"]["code"].as_str()),
        (429, Some("rate_limit_exceeded"))
    );
    assert_eq!(h["retry-after"], "30");
    assert_eq!(h["x-ratelimit-remaining-requests"], "0");
    // The same refusal in worker-api's vllm-sr/5.0 words, for a client of that document.
    assert_eq!(v["error"]["type"], "rate_limit_error");
    assert_eq!(v["code"], "rate_limit_exceeded");
    assert_eq!(v["detail"]["error_type"], "rate_limit_exceeded");
    // Next minute: two more fit the day's five; the sixth is refused by the daily quota
    // and leaves the minute budget untouched.
    e.clock.advance(30_000);
    for _ in 0..2 {
        assert_eq!(ask_status(&e.app, &key).await, 200);
    }
    let (s, h, _) = call(&e.app, "POST", "/v1/systemone", Some(&key), Some(ask())).await;
    assert_eq!(s, 429);
    assert_eq!(h["retry-after"], "60");
    assert_eq!(h["x-ratelimit-remaining-requests"], "1");
    // 00:00 UTC: the quota resets.
    e.clock.advance(60_000);
    assert_eq!(ask_status(&e.app, &key).await, 200);
    // The usage counts five answered and two refused yesterday, one today.
    let (_, _, u) = call(&e.app, "GET", "/api/keys/self/usage", Some(&key), None).await;
    let days = u["days"].as_array().unwrap();
    assert_eq!(days.len(), 30);
    assert_eq!(days[28]["date"], "2026-11-30");
    assert_eq!(
        (
            days[28]["requests"].as_i64(),
            days[28]["rate_limited"].as_i64()
        ),
        (Some(5), Some(2))
    );
    assert_eq!(days[29]["requests"], 1);
    assert_eq!(u["totals"]["requests"], 6);
    assert_eq!(
        u["recent"]["errors"][0],
        json!({"status": 429, "code": "rate_limit_exceeded", "count": 2})
    );
    let q = &u["quota"]["models"][0];
    assert_eq!(
        (
            q["id"].as_str(),
            q["requests_today"].as_u64(),
            q["requests_left"].as_u64()
        ),
        (Some("m1"), Some(1), Some(4))
    );
    assert_eq!(u["quota"]["resets_at"], "2026-12-02T00:00:00Z");
}

async fn token_budgets_count_the_estimate_then_the_usage(db: Db) {
    // 7 tokens per answer (the stand-in's usage); the estimate is far larger.
    let e = env_with(
        ServiceConfig {
            per_key: budgets(None, Some(1_000), None, None),
            ..cheap()
        },
        &db,
    )
    .await;
    let key = new_key(&e.app).await;
    let (s, h, _) = call(&e.app, "POST", "/v1/systemone", Some(&key), Some(ask())).await;
    assert_eq!(s, 200);
    assert_eq!(h["x-ratelimit-remaining-tokens"], "993");
    // A request whose estimate is over the remaining budget is refused.
    let big = json!({"model": "m1", "state": "x".repeat(2_000), "questions": {"q": {"type": "noul", "instructions": "?"}}});
    assert_eq!(
        call(&e.app, "POST", "/v1/systemone", Some(&key), Some(big))
            .await
            .0,
        429
    );
    // Over the model's max_request_tokens: 400 request_too_long.
    let huge = json!({"model": "m1", "state": "x".repeat(300_000), "questions": {"q": {"type": "noul", "instructions": "?"}}});
    let (s, _, v) = call(&e.app, "POST", "/v1/systemone", Some(&key), Some(huge)).await;
    assert_eq!(
        (s.as_u16(), v["error"]["code"].as_str()),
        (400, Some("request_too_long"))
    );
}

async fn keys_of_one_address_within_a_day_share_a_budget(db: Db) {
    let e = env_with(
        ServiceConfig {
            per_key: budgets(Some(2), None, None, None),
            ..cheap()
        },
        &db,
    )
    .await;
    let a = new_key(&e.app).await;
    let b = new_key(&e.app).await;
    assert_eq!(ask_status(&e.app, &a).await, 200);
    assert_eq!(ask_status(&e.app, &b).await, 200);
    assert_eq!(ask_status(&e.app, &b).await, 429);
}

async fn daily_counts_survive_a_restart(db: Db) {
    let (url, dir) = db.fresh().await;
    let cfg = ServiceConfig {
        per_key: budgets(None, None, Some(2), None),
        ..cheap()
    };
    let key = {
        let e = env_on(cfg.clone(), &url, None).await;
        let key = new_key(&e.app).await;
        assert_eq!(ask_status(&e.app, &key).await, 200);
        assert_eq!(ask_status(&e.app, &key).await, 200);
        key
    };
    // A new process on the same database: today's two requests still count.
    let e = env_on(cfg, &url, dir).await;
    let (s, _, v) = call(&e.app, "POST", "/v1/systemone", Some(&key), Some(ask())).await;
    assert_eq!(s, 429, "{v}");
}

async fn streamed_chats_are_charged_when_they_end(db: Db) {
    let e = env_with(
        ServiceConfig {
            system_two: budgets(None, Some(100), None, None),
            ..cheap()
        },
        &db,
    )
    .await;
    let key = new_key(&e.app).await;
    let (s, _, _) = call(&e.app, "POST", "/v1/chat/completions", Some(&key), Some(json!({"model": "vllm-sr/auto", "messages": [{"role": "user", "content": "hi"}], "stream": true}))).await;
    assert_eq!(s, 200);
    // The stream's usage (11 + 5) replaced the estimate once the stream ended.
    let (_, h, _) = call(
        &e.app,
        "POST",
        "/v1/chat/completions",
        Some(&key),
        Some(json!({"model": "vllm-sr/auto", "messages": [], "stream": true})),
    )
    .await;
    let left: u64 = h["x-ratelimit-remaining-tokens"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(left <= 100 - 16, "{left}");
    // A chat to a concrete backend model is System Two's too, on the same budget.
    let (_, h2, _) = call(
        &e.app,
        "POST",
        "/v1/chat/completions",
        Some(&key),
        Some(json!({"model": "some-backend", "messages": [], "stream": true})),
    )
    .await;
    let left2: u64 = h2["x-ratelimit-remaining-tokens"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(left2 < left, "{left2} {left}");
    // System Two usage stays out of System One's usage_today.
    let (_, _, me) = call(&e.app, "GET", "/api/keys/self", Some(&key), None).await;
    assert_eq!(me["usage_today"]["requests"], 0);
}

async fn info_lists_limits_and_admission(db: Db) {
    let e = env_with(cheap(), &db).await;
    let (s, _, v) = call(&e.app, "GET", "/api/info", None, None).await;
    assert_eq!(s, 200);
    assert_eq!(v["keys"]["difficulty"], 8);
    assert_eq!(v["rate_limits"]["per_key"]["requests_per_minute"], 60);
    let m1 = model_of(&v, "m1");
    assert_eq!(m1["admission"]["places"], 8);
    assert_eq!(m1["admission"]["box"]["per_key"], 1);
    assert_eq!(m1["admission"]["box"]["per_address"], 8);
    assert_eq!(m1["admission"]["box"]["max_wait_ms"], 20_000);
    assert_eq!(m1["limits"]["max_request_tokens"], 200_000);
}

/// system-duo-api, Box: box requests have places of their own (a quarter of the model's), one
/// at a time per key and model. A key's second box request waits (here 50 ms, by default 20 s)
/// and is then refused with 429 `concurrency_limit` and Retry-After; another key's starts, and
/// the key's next one starts once its first has gone.
#[tokio::test]
async fn a_keys_second_box_request_waits_then_is_refused() {
    let mut cfg = cheap();
    cfg.default_model.admission.boxes.max_wait_ms = 50;
    let e = env_with(cfg, &Db::Sqlite).await;
    let (mine, other) = (new_key(&e.app).await, new_key(&e.app).await);
    let boxq = json!({"model": "m1", "state": "<p>",
        "questions": {"w": {"type": "box", "instructions": "the dog"}}});
    // The stand-in's /v1/decisions never answers: each admitted request stays in progress.
    let start = |key: String| {
        let (app, body) = (e.app.clone(), boxq.clone());
        tokio::spawn(
            async move { call(&app, "POST", "/v1/decisions", Some(&key), Some(body)).await },
        )
    };
    let first = start(mine.clone());
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    let (s, h, v) = call(
        &e.app,
        "POST",
        "/v1/decisions",
        Some(&mine),
        Some(boxq.clone()),
    )
    .await;
    assert_eq!(
        (s.as_u16(), v["error"]["code"].as_str()),
        (429, Some("concurrency_limit")),
        "{v}"
    );
    assert!(h.contains_key("retry-after"));
    let still = |t: tokio::task::JoinHandle<_>| async move {
        let waited = tokio::time::timeout(std::time::Duration::from_millis(300), t).await;
        waited.is_err()
    };
    assert!(
        still(start(other)).await,
        "another key's box request starts"
    );
    first.abort();
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    assert!(
        still(start(mine)).await,
        "the key's next box request starts"
    );
}

async fn a_request_past_its_time_limit_gets_504_and_keeps_its_estimate(db: Db) {
    let mut cfg = ServiceConfig {
        per_key: budgets(None, Some(10_000), None, None),
        ..cheap()
    };
    cfg.default_model.limits.timeout_seconds = 1;
    let e = env_with(cfg, &db).await;
    let key = new_key(&e.app).await;
    // The stand-in's /v1/decisions never answers; the test's clock moves on, a quarter of a
    // second at a time, until the service gives up (nothing sleeps for the limit's length).
    let answer = call(&e.app, "POST", "/v1/decisions", Some(&key), Some(ask()));
    let ticks = async {
        loop {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
            e.clock.advance(250);
        }
    };
    let (s, h, v) = tokio::select! {
        r = answer => r,
        () = ticks => unreachable!(),
    };
    // Answered at the limit: one second by the clock, not before.
    assert!(e.clock.now_ms() - T0 >= 1_000);
    assert_eq!(
        (s.as_u16(), v["error"]["code"].as_str()),
        (504, Some("timeout"))
    );
    let estimate = service::estimate::input_tokens(ask().as_object().unwrap(), true);
    assert_eq!(
        h["x-ratelimit-remaining-tokens"],
        (10_000 - estimate).to_string()
    );
}

/// system-duo-api: "Both APIs answer errors in one shape, the OpenAI one"; worker-api's
/// vllm-sr/5.0 answers the flat `code` and `detail`. An error that comes from behind the
/// service is read by a client of either, its status and Retry-After kept.
async fn system_one_errors_from_behind_the_service_have_both_shapes(db: Db) {
    let e = env_with(cheap(), &db).await;
    let body = json!({"model": "m1", "requests": {"a": ask()}});
    let (s, h, v) = call(&e.app, "POST", "/v1/systemone/batch", None, Some(body)).await;
    assert_eq!(s, 503, "{v}");
    assert_eq!(h["retry-after"], "5");
    assert_eq!(
        v["error"],
        json!({"type": "server_error", "code": "model_unavailable", "message": "no worker of the model is ready"})
    );
    assert_eq!(v["code"], "model_unavailable");
    assert_eq!(v["detail"]["error_type"], "model_unavailable");
}

/// Every scenario runs on SQLite, and on PostgreSQL when a server is given.
macro_rules! on_both {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(#[tokio::test]
            async fn $name() {
                super::$name(super::Db::Sqlite).await
            })*
        }
        mod postgres {
            $(#[tokio::test]
            async fn $name() {
                if let Some(db) = super::Db::postgres() {
                    super::$name(db).await
                }
            })*
        }
    };
}

on_both!(
    a_request_past_its_time_limit_gets_504_and_keeps_its_estimate,
    a_key_is_made_used_revoked_and_refused,
    keys_are_required_when_the_service_says_so,
    forget_leaves_no_row,
    challenges_are_single_use_limited_and_checked,
    key_creation_is_limited_per_address,
    budgets_admit_exactly_their_value_and_headers_follow,
    token_budgets_count_the_estimate_then_the_usage,
    keys_of_one_address_within_a_day_share_a_budget,
    daily_counts_survive_a_restart,
    streamed_chats_are_charged_when_they_end,
    info_lists_limits_and_admission,
    deleting_a_key_gives_back_neither_a_creation_nor_a_budget,
    status_adds_live_server_times_to_the_router_states,
    system_two_usage_is_read_apart,
    system_one_errors_from_behind_the_service_have_both_shapes,
);

/// Two routers on one PostgreSQL database (two services, as two processes would be) give a
/// key its minute budget once: each takes leases of a twentieth of it, and together they
/// never pass it. A lease left idle for two seconds is given back for the other to use.
#[tokio::test]
async fn on_postgres_two_routers_share_a_keys_minute_budget() {
    let Some(db) = Db::postgres() else { return };
    let (url, _) = db.fresh().await;
    let cfg = ServiceConfig {
        per_key: budgets(Some(100), None, None, None),
        ..cheap()
    };
    let a = env_on(cfg.clone(), &url, None).await;
    let b = env_on(cfg, &url, None).await;
    let key = new_key(&a.app).await;
    // One request on `a`: it takes a lease of five and uses one.
    assert_eq!(ask_status(&a.app, &key).await, 200);
    // Idle for three seconds: `a` gives the four it did not use back.
    a.clock.advance(3_000);
    b.clock.advance(3_000);
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let mut on_b = 0;
    for _ in 0..150 {
        if ask_status(&b.app, &key).await == 200 {
            on_b += 1;
        }
    }
    assert_eq!(on_b, 99, "what `a` gave back is `b`'s to use");
    // Next minute: alternating between the two, the key gets its hundred, no more.
    a.clock.advance(60_000);
    b.clock.advance(60_000);
    let mut admitted = [0, 0];
    for i in 0..300 {
        let app = if i % 2 == 0 { &a.app } else { &b.app };
        if ask_status(app, &key).await == 200 {
            admitted[i % 2] += 1;
        }
    }
    assert_eq!(admitted[0] + admitted[1], 100, "{admitted:?}");
    assert!(admitted[0] >= 45 && admitted[1] >= 45, "{admitted:?}");
    // The headers count both routers' requests.
    let (s, h, _) = call(&b.app, "POST", "/v1/systemone", Some(&key), Some(ask())).await;
    assert_eq!(s, 429);
    assert_eq!(h["x-ratelimit-remaining-requests"], "0");
}
