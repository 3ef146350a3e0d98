//! Several machines on loopback, as real processes: a NATS server with JetStream, SIE workers
//! (`vllm-srun serve --nats`) and gateways (`vllm-srun gateway`). A worker killed with
//! SIGKILL in the middle of 200 SIE requests loses none of them and answers none twice; an
//! item whose deadline passed while no worker was there is answered with the timeout error
//! and not run by the worker that pulls it later.
//!
//! Needs Debian's `nats-server` (`.ci/run` installs it); outside CI the test says so and
//! passes without running when it is missing.

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
    let dir = std::env::temp_dir().join(format!("vsr-cluster-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
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
