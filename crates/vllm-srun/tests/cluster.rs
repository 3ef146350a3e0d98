//! Several machines on loopback, as real processes: a NATS server with JetStream, SIE workers
//! (`vllm-srun serve --nats`) and gateways (`vllm-srun gateway`). A worker killed with
//! SIGKILL in the middle of 200 SIE requests loses none of them and answers none twice; an
//! item whose deadline passed while no worker was there is answered with the timeout error
//! and not run by the worker that pulls it later.
//!
//! And two routers (`vllm-srun router`) on one PostgreSQL database in front of one worker: a
//! key's minute budget holds over both, a router killed mid-load leaves the other serving, and
//! backlogged addresses get even shares of a model's places whichever router they reach.
//!
//! Needs Debian's `nats-server` and a PostgreSQL server named by `VSR_TEST_POSTGRES_URL`
//! (`.ci/run` installs and starts both); outside CI a test says so and passes without running
//! when its server is missing.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// A child process killed when the test ends, however it ends.
struct Proc {
    child: Child,
    base: String,
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Proc {
    fn kill_9(&mut self) {
        unsafe {
            libc::kill(self.child.id() as i32, libc::SIGKILL);
        }
        let _ = self.child.wait();
    }
}

fn nats_server() -> Option<PathBuf> {
    std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/usr/bin")])
        .map(|d| d.join("nats-server"))
        .find(|p| p.is_file())
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn start_nats(bin: &PathBuf, dir: &std::path::Path) -> Proc {
    let port = free_port();
    let child = Command::new(bin)
        .args(["-js", "-a", "127.0.0.1", "-p", &port.to_string(), "-sd"])
        .arg(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "nats-server did not listen");
        std::thread::sleep(Duration::from_millis(50));
    }
    Proc {
        child,
        base: format!("nats://127.0.0.1:{port}"),
    }
}

/// Start `vllm-srun ARGS --port 0` and read the address it prints; its log goes to `log`.
fn start(args: &[&str], log: &std::path::Path) -> Proc {
    let mut child = Command::new(env!("CARGO_BIN_EXE_vllm-srun"))
        .args(args)
        .args(["--port", "0"])
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(log).unwrap())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    let base = line
        .trim()
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("{line:?}; see {}", log.display()))
        .to_string();
    // Keep the pipe drained.
    std::thread::spawn(move || for _ in out.lines() {});
    Proc { child, base }
}

fn worker(nats: &str, log: &std::path::Path) -> Proc {
    start(
        &[
            "serve",
            "--model",
            "minilm-l6",
            "--no-pull",
            "--threads",
            "1",
            "--nats",
            nats,
            "--nats-ack-wait-seconds",
            "2",
        ],
        log,
    )
}

async fn until(what: &str, secs: u64, mut ok: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !ok().await {
        assert!(Instant::now() < deadline, "{what} within {secs} s");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A counter's value in a Prometheus text page (0 when absent), summed over its labels.
async fn counter(client: &reqwest::Client, base: &str, name: &str) -> f64 {
    let Ok(r) = client.get(format!("{base}/metrics")).send().await else {
        return 0.0;
    };
    let text = r.text().await.unwrap_or_default();
    text.lines()
        .filter(|l| l.starts_with(name) && !l.starts_with('#'))
        .filter(|l| {
            let rest = &l[name.len()..];
            rest.starts_with(' ') || rest.starts_with('{')
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

async fn encode(client: &reqwest::Client, base: &str, id: &str) -> (u16, Value) {
    let r = client
        .post(format!("{base}/v1/encode/minilm-l6"))
        .header("accept", "application/json")
        .json(&json!({"items": [{"id": id, "text": format!("request number {id} of the burst")}]}))
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sie_through_jetstream_survives_a_killed_worker_and_drops_expired_items() {
    let Some(bin) = nats_server() else {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must have nats-server (.ci/run installs Debian's)"
        );
        eprintln!("nats-server is not installed; skipped");
        return;
    };
    let dir = test_dir("sie");
    let nats = start_nats(&bin, &dir.join("jetstream"));
    let url = nats.base.clone();
    let mut w1 = worker(&url, &dir.join("w1.log"));
    let w2 = worker(&url, &dir.join("w2.log"));
    let gw = start(&["gateway", "--nats", &url], &dir.join("gw.log"));
    let client = reqwest::Client::new();

    // A worker makes its model's stream once the model has loaded: until then the gateway
    // finds no stream and answers 404.
    until("a worker takes work", 120, async || {
        encode(&client, &gw.base, "warm").await.0 == 200
    })
    .await;
    // The one that did may be the other: w2 is asked over HTTP below, once it has loaded.
    until("the second worker answers", 120, async || {
        encode(&client, &w2.base, "warm").await.0 == 200
    })
    .await;

    // Through the gateway, a msgpack score request gets the answer the worker gives it over
    // HTTP.
    let score = rmp_serde::to_vec_named(&json!({"query": {"text": "refund policy"},
        "items": [{"id": "d1", "text": "Refunds take five days."}, {"id": "d2", "text": "The sky is blue."}]}))
    .unwrap();
    let mut bodies = Vec::new();
    for base in [&gw.base, &w2.base] {
        let r = client
            .post(format!("{base}/v1/score/minilm-l6"))
            .header("content-type", "application/msgpack")
            .body(score.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        assert_eq!(r.headers()["content-type"], "application/msgpack");
        let v: Value = rmp_serde::from_slice(&r.bytes().await.unwrap()).unwrap();
        bodies.push(v);
    }
    assert_eq!(bodies[0], bodies[1]);
    assert_eq!(
        bodies[0]["scores"][0]["item_id"],
        json!("d1"),
        "{}",
        bodies[0]
    );

    let answered = Arc::new(Mutex::new(Vec::<(String, u16, Value)>::new()));
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let (client, base, answered, next) = (
            client.clone(),
            gw.base.clone(),
            answered.clone(),
            next.clone(),
        );
        tasks.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if i >= 200 {
                    break;
                }
                let id = format!("item-{i}");
                let (status, body) = encode(&client, &base, &id).await;
                answered.lock().unwrap().push((id, status, body));
            }
        }));
    }
    // Kill the first worker once both have answered items and a third of the burst is in.
    let w1_base = w1.base.clone();
    until("both workers answer and 60 are in", 120, async || {
        let n = answered.lock().unwrap().len();
        n >= 60
            && counter(&client, &w1_base, "sie_worker_requests_total").await > 0.0
            && counter(&client, &w2.base, "sie_worker_requests_total").await > 0.0
    })
    .await;
    let at_kill = answered.lock().unwrap().len();
    w1.kill_9();
    let killed = Instant::now();
    for t in tasks {
        t.await.unwrap();
    }
    let after_kill = killed.elapsed();
    let answered = answered.lock().unwrap().clone();
    assert_eq!(answered.len(), 200);
    let mut seen = std::collections::HashSet::new();
    for (id, status, body) in &answered {
        assert_eq!(*status, 200, "{id}: {body}");
        // Each answer is the one to its own request: the item id it echoes is its own.
        assert_eq!(body["items"][0]["id"], json!(id), "{body}");
        assert_eq!(body["items"][0]["dense"]["dims"], json!(384));
        assert!(seen.insert(id.clone()), "{id} answered twice");
    }
    let unclaimed = counter(&client, &gw.base, "sie_gateway_unclaimed_answers_total").await;
    eprintln!(
        "SIE through JetStream: 200 requests, 200 answered with their own item (0 lost), \
         worker 1 killed after {at_kill}; the last answer came {:.1} s after the kill; \
         second answers dropped by the gateway: {}",
        after_kill.as_secs_f64(),
        unclaimed as u64
    );

    // With no worker left, an item waits in the stream; its gateway gives up at the deadline
    // (504 DEADLINE_EXCEEDED) and the worker that pulls it later answers the timeout error
    // without running it.
    drop(w2);
    let short = start(
        &["gateway", "--nats", &url, "--timeout-seconds", "1"],
        &dir.join("gw-short.log"),
    );
    let asked = Instant::now();
    let (status, body) = encode(&client, &short.base, "late").await;
    assert_eq!(status, 504, "{body}");
    assert_eq!(body["detail"]["code"], json!("DEADLINE_EXCEEDED"), "{body}");
    assert!(asked.elapsed() >= Duration::from_millis(900));
    let w3 = worker(&url, &dir.join("w3.log"));
    until("the late item is dropped as expired", 120, async || {
        counter(&client, &w3.base, "sie_worker_items_expired_total").await >= 1.0
    })
    .await;
    assert_eq!(
        counter(&client, &w3.base, "sie_worker_requests_total").await,
        1.0,
        "the expired item is answered (with the timeout error), and nothing else"
    );
    drop(nats);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A fresh database on the server `admin` names; its URL.
async fn fresh_database(admin: &str, tag: &str) -> String {
    use sqlx::Connection;
    sqlx::any::install_default_drivers();
    let name = format!("vsr_cluster_{tag}");
    let mut c = sqlx::AnyConnection::connect(admin).await.unwrap();
    for q in [
        format!("DROP DATABASE IF EXISTS {name}"),
        format!("CREATE DATABASE {name}"),
    ] {
        sqlx::query(&q).execute(&mut c).await.unwrap();
    }
    let (scheme, rest) = admin.split_once("://").unwrap();
    let (auth, tail) = rest.split_once('/').unwrap_or((rest, ""));
    let query = tail
        .split_once('?')
        .map(|(_, q)| format!("?{q}"))
        .unwrap_or_default();
    format!("{scheme}://{auth}/{name}{query}")
}

/// The PostgreSQL server of `VSR_TEST_POSTGRES_URL`; `None` (the test is skipped) when it
/// is not set, outside CI.
fn postgres_admin() -> Option<String> {
    match std::env::var("VSR_TEST_POSTGRES_URL") {
        Ok(u) if !u.is_empty() => Some(u),
        _ => {
            assert!(
                std::env::var_os("CI").is_none(),
                "CI must set VSR_TEST_POSTGRES_URL"
            );
            eprintln!("VSR_TEST_POSTGRES_URL is not set; skipped");
            None
        }
    }
}

/// A directory of its own for test `tag`, empty.
fn test_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("vsr-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// For a test of routers on one PostgreSQL database: a fresh database (its URL), and in `dir`
/// a router config that publishes `model` of `worker` and the service config `service`.
async fn routers_setup(
    admin: &str,
    dir: &std::path::Path,
    worker: &str,
    model: &str,
    service: &str,
) -> String {
    let tag = dir.file_name().unwrap().to_str().unwrap().replace('-', "_");
    let database = fresh_database(admin, &tag).await;
    std::fs::write(
        dir.join("router.yaml"),
        format!(
            "deployments:\n  - {{name: d, workers: [\"{worker}\"], models: [{model}]}}\n\
             backends:\n  - {{name: b, url: \"http://127.0.0.1:9\", models: [llm]}}\n\
             decisions:\n  - {{name: all, modelRefs: [{{model: llm}}]}}\n\
             default_decision: all\n"
        ),
    )
    .unwrap();
    std::fs::write(dir.join("service.yaml"), service).unwrap();
    database
}

/// `vllm-srun router` on the files of [`routers_setup`], its log in `dir/NAME.log`.
fn start_router(dir: &std::path::Path, database: &str, name: &str) -> Proc {
    start(
        &[
            "router",
            "--config",
            dir.join("router.yaml").to_str().unwrap(),
            "--service-config",
            dir.join("service.yaml").to_str().unwrap(),
            "--database-url",
            database,
            "--no-pages",
        ],
        &dir.join(format!("{name}.log")),
    )
}

/// A key made through `base` by the spec's recipe, as a client at `address`.
async fn key_from(client: &reqwest::Client, base: &str, address: &str) -> String {
    let c: Value = client
        .post(format!("{base}/api/keys/challenge"))
        .header("x-client-address", address)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let ch = c["challenge"].as_str().unwrap().to_string();
    let d = c["difficulty"].as_u64().unwrap() as u32;
    let nonce = (0u64..)
        .find(|n| service::keys::solves(&ch, &n.to_string(), d))
        .unwrap();
    let k: Value = client
        .post(format!("{base}/api/keys"))
        .header("x-client-address", address)
        .json(&json!({"challenge": ch, "nonce": nonce.to_string(), "accept_terms": true}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    k["api_key"]
        .as_str()
        .unwrap_or_else(|| panic!("{k}"))
        .to_string()
}

async fn ask(client: &reqwest::Client, base: &str, key: &str, address: &str) -> u16 {
    client
        .post(format!("{base}/v1/systemone"))
        .bearer_auth(key)
        .header("x-client-address", address)
        .json(
            &json!({"model": "sparrow-nano", "state": "My parcel arrived broken.",
            "questions": {"q": {"type": "noul", "instructions": "Is this a complaint?"}}}),
        )
        .send()
        .await
        .map_or(0, |r| r.status().as_u16())
}

/// `n` requests of one key, `at_once` at a time, spread over `routers` in turn; how many were
/// admitted (200) and how many refused by the budget (429).
async fn burst(
    client: &reqwest::Client,
    routers: &[String],
    key: &str,
    address: &str,
    n: usize,
) -> (usize, usize) {
    let mut tasks = Vec::new();
    for chunk in 0..4 {
        let (client, routers, key, address) = (
            client.clone(),
            routers.to_vec(),
            key.to_string(),
            address.to_string(),
        );
        tasks.push(tokio::spawn(async move {
            let mut got = (0, 0);
            for i in (chunk..n).step_by(4) {
                match ask(&client, &routers[i % routers.len()], &key, &address).await {
                    200 => got.0 += 1,
                    429 => got.1 += 1,
                    s => panic!("status {s}"),
                }
            }
            got
        }));
    }
    let mut total = (0, 0);
    for t in tasks {
        let g = t.await.unwrap();
        total = (total.0 + g.0, total.1 + g.1);
    }
    total
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routers_on_one_database_share_a_keys_budget_and_survive_each_other() {
    let Some(admin) = postgres_admin() else {
        return;
    };
    let dir = test_dir("budget");
    let worker = start(
        &[
            "serve",
            "--model",
            "sparrow-nano",
            "--no-pull",
            "--threads",
            "1",
        ],
        &dir.join("worker.log"),
    );
    const LIMIT: usize = 40;
    let service = format!(
        "difficulty: 4\nkeys_per_hour: 1000\nkeys_per_day: 1000\nchallenges_per_minute: 1000\n\
         trusted_proxy_header: x-client-address\n\
         per_key: {{requests_per_minute: {LIMIT}}}\n"
    );
    let database = routers_setup(&admin, &dir, &worker.base, "sparrow-nano", &service).await;
    let router = |name: &str| start_router(&dir, &database, name);
    let mut a = router("router-a");
    let b = router("router-b");
    let client = reqwest::Client::new();
    // Keys of separate addresses have separate budgets.
    let keys = [
        key_from(&client, &a.base, "10.0.0.1").await,
        key_from(&client, &b.base, "10.0.0.2").await,
        key_from(&client, &a.base, "10.0.0.3").await,
    ];
    // Each router checks the worker's health on its own.
    for r in [&a.base, &b.base] {
        until("the worker answers through each router", 120, async || {
            ask(&client, r, &keys[2], "10.0.0.3").await == 200
        })
        .await;
    }
    // The budget is per UTC minute: start both bursts in one.
    let second = |d: Duration| d.as_secs() % 60;
    let now = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
    };
    if second(now()) > 50 {
        tokio::time::sleep(Duration::from_secs(61 - second(now()))).await;
    }
    let minute = now().as_secs() / 60;
    let one = burst(&client, &[a.base.clone()], &keys[0], "10.0.0.1", 2 * LIMIT).await;
    let two = burst(
        &client,
        &[a.base.clone(), b.base.clone()],
        &keys[1],
        "10.0.0.2",
        2 * LIMIT,
    )
    .await;
    assert_eq!(now().as_secs() / 60, minute, "the bursts crossed a minute");
    eprintln!(
        "a key's minute budget of {LIMIT}: one router admitted {} of {} ({:.2} of the limit), \
         two routers {} of {} ({:.2})",
        one.0,
        2 * LIMIT,
        one.0 as f64 / LIMIT as f64,
        two.0,
        2 * LIMIT,
        two.0 as f64 / LIMIT as f64
    );
    assert_eq!(one, (LIMIT, LIMIT));
    // Never past the limit; at most one lease (a twentieth) left unused at the other router.
    assert!(two.0 <= LIMIT && two.0 + LIMIT / 20 >= LIMIT, "{two:?}");

    // A router killed in the middle of load: the other keeps serving.
    let load = {
        let (client, base, key) = (client.clone(), b.base.clone(), keys[2].clone());
        tokio::spawn(async move {
            let mut statuses = Vec::new();
            for _ in 0..20 {
                statuses.push(ask(&client, &base, &key, "10.0.0.3").await);
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            statuses
        })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    a.kill_9();
    let statuses = load.await.unwrap();
    assert!(
        statuses.iter().all(|s| *s == 200 || *s == 429),
        "{statuses:?}"
    );
    assert!(statuses.iter().filter(|s| **s == 200).count() > 0);
    assert_eq!(ask(&client, &a.base, &keys[2], "10.0.0.3").await, 0);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A stand-in worker in this process: ready, and every System One answer takes 100 ms, so
/// the routers' places, not the worker, decide who is served.
async fn slow_worker() -> String {
    use axum::routing::{get, post};
    let app = axum::Router::new()
        .route(
            "/health",
            get(|| async { axum::Json(json!({"status": "ready"})) }),
        )
        .route(
            "/v1/systemone",
            post(|| async {
                tokio::time::sleep(Duration::from_millis(100)).await;
                axum::Json(json!({"model": "slow", "answers": {"q": {"p_yes": 0.5}},
                    "usage": {"input_tokens": 5, "output_tokens": 0}}))
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    base
}

/// Jain's fairness index of what each got: 1 when all got the same.
fn jain(x: &[f64]) -> f64 {
    let sum: f64 = x.iter().sum();
    let squares: f64 = x.iter().map(|v| v * v).sum();
    sum * sum / (x.len() as f64 * squares)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backlogged_addresses_get_even_shares_over_two_routers() {
    let Some(admin) = postgres_admin() else {
        return;
    };
    let dir = test_dir("fair");
    let worker = slow_worker().await;
    let service = "trusted_proxy_header: x-client-address\n\
        default_model: {admission: {places: 4, push_out: false, max_wait_ms: 20000}}\n";
    let database = routers_setup(&admin, &dir, &worker, "slow", service).await;
    let router = |name: &str| start_router(&dir, &database, name);
    let (a, b) = (router("router-a"), router("router-b"));
    let client = reqwest::Client::new();
    let call = move |base: String, address: &'static str| {
        let client = client.clone();
        async move {
            client
                .post(format!("{base}/v1/systemone"))
                .header("x-client-address", address)
                .json(&json!({"model": "slow", "state": "s",
                    "questions": {"q": {"type": "noul", "instructions": "?"}}}))
                .send()
                .await
                .map_or(0, |r| r.status().as_u16())
        }
    };
    for r in [&a.base, &b.base] {
        until("the stand-in answers through each router", 60, async || {
            call(r.clone(), "10.9.9.9").await == 200
        })
        .await;
    }
    // One address reaches the model through router a, three through router b; each keeps six
    // requests in flight. Count what each got in the middle three seconds.
    let addresses: [(&'static str, &String); 4] = [
        ("10.1.0.1", &a.base),
        ("10.1.0.2", &b.base),
        ("10.1.0.3", &b.base),
        ("10.1.0.4", &b.base),
    ];
    let start_at = Instant::now();
    let (from, to) = (Duration::from_secs(1), Duration::from_secs(4));
    let mut tasks = Vec::new();
    for (address, base) in addresses {
        for _ in 0..6 {
            let (base, call) = (base.clone(), call.clone());
            tasks.push(tokio::spawn(async move {
                let mut done = Vec::new();
                while start_at.elapsed() < to {
                    let s = call(base.clone(), address).await;
                    done.push((address, s, start_at.elapsed()));
                }
                done
            }));
        }
    }
    let mut got: std::collections::BTreeMap<&str, f64> =
        addresses.iter().map(|(a, _)| (*a, 0.0)).collect();
    for t in tasks {
        for (address, status, at) in t.await.unwrap() {
            assert_eq!(status, 200, "{address}");
            if at >= from && at < to {
                *got.get_mut(address).unwrap() += 1.0;
            }
        }
    }
    let shares: Vec<f64> = got.values().copied().collect();
    let index = jain(&shares);
    eprintln!(
        "fair admission over two routers (4 places, 100 ms per request): answered per address \
         in 3 s {got:?}, Jain index {index:.3}"
    );
    assert!(index >= 0.99, "{got:?}: {index}");
    let _ = std::fs::remove_dir_all(&dir);
}
