//! The abuse suite: hostile requests against the real binary (a child process, so its memory
//! is its own), while a probe keeps asking `/health` and a small decision.
//!
//! Every abusive request must be answered with its status and reason (or its connection
//! closed, for clients that never finish sending), nothing may answer 5xx, the probe must get
//! every answer, and the process's peak RSS during the suite must stay within twice its idle
//! RSS plus four body limits. Times are printed (run with `--nocapture`), never asserted: the
//! machines are noisy. `VLLM_SRUN_ABUSE_BIN` points the suite at another build of the binary.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

const MB: usize = 1 << 20;
/// The server's body limit (its default).
const BODY_LIMIT: usize = 16 * MB;
const HEADER_TIMEOUT_MS: u64 = 1000;
const BODY_TIMEOUT_MS: u64 = 2000;

struct Server {
    child: Child,
    addr: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// `VmRSS` or `VmHWM` of the server, in bytes.
    fn memory(&self, field: &str) -> usize {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .unwrap_or_default();
        status
            .lines()
            .find_map(|l| l.strip_prefix(field))
            .and_then(|v| v.trim_start_matches(':').split_whitespace().next())
            .and_then(|kb| kb.parse::<usize>().ok())
            .map_or(0, |kb| kb * 1024)
    }
}

/// Raise this process's descriptor limit to its hard limit (the server inherits it); returns
/// the soft limit in force.
fn raise_fd_limit() -> u64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit only read and write the struct passed.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
            return 1024;
        }
        let wanted = libc::rlimit {
            rlim_cur: lim.rlim_max.min(65_536),
            rlim_max: lim.rlim_max,
        };
        if libc::setrlimit(libc::RLIMIT_NOFILE, &wanted) == 0 {
            return wanted.rlim_cur;
        }
    }
    lim.rlim_cur
}

fn start() -> Server {
    // Another build of the binary may be measured the same way (e.g. a release build).
    let bin = std::env::var("VLLM_SRUN_ABUSE_BIN")
        .unwrap_or_else(|_| env!("CARGO_BIN_EXE_vllm-srun").to_string());
    let mut child = Command::new(bin)
        .args(["serve", "--model", &common::test_model(), "--port", "0"])
        .args(["--no-pull", "--max-connections", "8192"])
        .args(["--threads", &common::test_threads().to_string()])
        .args(["--header-timeout-ms", &HEADER_TIMEOUT_MS.to_string()])
        .args(["--body-timeout-ms", &BODY_TIMEOUT_MS.to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the server");
    let stdout = child.stdout.take().expect("stdout");
    let mut lines = BufReader::new(stdout).lines();
    let addr = loop {
        let line = lines
            .next()
            .expect("the server printed its address")
            .expect("stdout");
        if let Some(a) = line.strip_prefix("listening on http://") {
            break a.trim().to_string();
        }
    };
    std::thread::spawn(move || lines.for_each(drop));
    let server = Server { child, addr };
    let deadline = Instant::now() + Duration::from_secs(600);
    let get = common::blocking_get();
    while get(&server.url("/health")).map_or(true, |code| code != 200) {
        assert!(Instant::now() < deadline, "the server did not become ready");
        std::thread::sleep(Duration::from_millis(100));
    }
    server
}

fn words(n: usize) -> String {
    let unit = "the parcel arrived late and the box was crushed again ";
    unit.repeat(n / unit.len() + 1)[..n].to_string()
}

fn noul() -> Value {
    json!({"type": "noul", "instructions": "Is the customer unhappy?"})
}

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(data).expect("gzip");
    e.finish().expect("gzip")
}

/// One abusive request and what it must get.
struct Case {
    name: &'static str,
    body: Vec<u8>,
    headers: Vec<(&'static str, String)>,
    /// Acceptable (status, reason) answers.
    expect: Vec<(u16, &'static str)>,
}

fn case(name: &'static str, body: Vec<u8>, expect: Vec<(u16, &'static str)>) -> Case {
    Case {
        name,
        body,
        headers: Vec::new(),
        expect,
    }
}

fn window_10mb() -> Vec<u8> {
    let mut q = noul();
    q["overflow"] = json!("window");
    serde_json::to_vec(&json!({
        "state": words(10 * MB),
        "options": {"max_tokens": 100_000_000u64},
        "questions": {"q": q},
    }))
    .expect("json")
}

fn cases() -> Vec<Case> {
    let mut out = Vec::new();
    let assets: serde_json::Map<String, Value> = (0..5000)
        .map(|i| {
            (
                format!("Z{i:04}"),
                json!({"type": "video", "data_base64": ""}),
            )
        })
        .collect();
    out.push(case(
        "5,000 unreferenced video assets, 1 MB state",
        serde_json::to_vec(
            &json!({"state": words(MB), "assets": assets, "questions": {"q": noul()}}),
        )
        .expect("json"),
        // Refused at the first asset, whose bytes are no video container.
        vec![(400, "invalid_media")],
    ));
    out.push(case(
        "10 MB state, max_tokens 1e8, overflow window",
        window_10mb(),
        vec![(400, "request_tokens")],
    ));
    let option = words(190);
    let questions: serde_json::Map<String, Value> = (0..200)
        .map(|i| {
            let criteria: serde_json::Map<String, Value> = (0..255)
                .map(|j| (format!("o{j} {option}"), Value::Null))
                .collect();
            (
                format!("q{i}"),
                json!({"type": "choice", "criteria": criteria}),
            )
        })
        .collect();
    out.push(case(
        "200 questions x 255 options (10 MB)",
        serde_json::to_vec(&json!({"state": "short", "questions": questions})).expect("json"),
        vec![(400, "request_tokens")],
    ));
    out.push(case(
        "16 MB of one string",
        serde_json::to_vec(
            &json!({"state": "a".repeat(BODY_LIMIT - 200), "questions": {"q": noul()}}),
        )
        .expect("json"),
        vec![(400, "question_tokens")],
    ));
    let tiny: serde_json::Map<String, Value> = (0..300_000)
        .map(|i| {
            (
                format!("q{i}"),
                json!({"type": "noul", "instructions": "Late?"}),
            )
        })
        .collect();
    out.push(case(
        "300,000 tiny questions",
        serde_json::to_vec(&json!({"state": "short", "questions": tiny})).expect("json"),
        vec![(400, "too_many_questions")],
    ));
    let mut nested = b"{\"state\": ".to_vec();
    nested.extend(std::iter::repeat_n(b'[', 100_000));
    nested.extend(std::iter::repeat_n(b']', 100_000));
    nested.extend(br#", "questions": {"q": {"type": "noul", "instructions": "?"}}}"#);
    out.push(case(
        "JSON nested 100,000 deep",
        nested,
        vec![(400, "body_malformed")],
    ));
    let plain = serde_json::to_vec(&json!({"state": words(15 * MB), "questions": {"q": noul()}}))
        .expect("json");
    let mut c = case(
        "gzip body of 15 MB",
        gzip(&plain),
        vec![(400, "question_tokens")],
    );
    c.headers.push(("content-encoding", "gzip".into()));
    out.push(c);
    let mut c = case(
        "zstd body of 15 MB",
        zstd::encode_all(&plain[..], 3).expect("zstd"),
        vec![(400, "question_tokens")],
    );
    c.headers.push(("content-encoding", "zstd".into()));
    out.push(c);
    let spaces = vec![b' '; 2 * BODY_LIMIT];
    let mut c = case(
        "zstd body of 32 MB of spaces",
        zstd::encode_all(&spaces[..], 3).expect("zstd"),
        vec![(413, "body_too_large")],
    );
    c.headers.push(("content-encoding", "zstd".into()));
    out.push(c);
    let boundary = "abuseboundary";
    let mut multipart = format!(
        "--{boundary}\r\nContent-Disposition: form-data; name=\"request\"\r\nContent-Type: application/json\r\n\r\n{}\r\n",
        json!({"state": "a short state", "questions": {"q": noul()}})
    )
    .into_bytes();
    for i in 0..5000 {
        multipart.extend(
            format!(
                "--{boundary}\r\nContent-Disposition: form-data; name=\"p{i}\"\r\n\r\nxxxxxxxx\r\n"
            )
            .into_bytes(),
        );
    }
    multipart.extend(format!("--{boundary}--\r\n").into_bytes());
    let mut c = case(
        "multipart with 5,000 parts",
        multipart,
        vec![(400, "part_unclaimed")],
    );
    c.headers.push((
        "content-type",
        format!("multipart/form-data; boundary={boundary}"),
    ));
    out.push(c);
    out
}

fn reason(v: &Value) -> String {
    v["error"]["reason"].as_str().unwrap_or("").to_string()
}

async fn send(
    client: &reqwest::Client,
    url: &str,
    body: Vec<u8>,
    headers: &[(&'static str, String)],
) -> (u16, String, Duration) {
    let mut req = client.post(url).body(body);
    if !headers.iter().any(|(k, _)| *k == "content-type") {
        req = req.header("content-type", "application/json");
    }
    for (k, v) in headers {
        req = req.header(*k, v);
    }
    let t = Instant::now();
    let resp = req.send().await.expect("an answer");
    let status = resp.status().as_u16();
    let bytes = resp.bytes().await.expect("a body");
    let v: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    (status, reason(&v), t.elapsed())
}

/// What the probe saw: (`/health` times, decision times), every answer checked as 200.
#[derive(Default)]
struct Probe {
    health: Vec<Duration>,
    decision: Vec<Duration>,
    failures: Vec<String>,
}

async fn probe(base: String, stop: Arc<AtomicBool>) -> Probe {
    let health = async {
        let client = common::client();
        let (mut times, mut failures) = (Vec::new(), Vec::new());
        while !stop.load(Ordering::Relaxed) {
            let t = Instant::now();
            match client.get(format!("{base}/health")).send().await {
                Ok(r) if r.status() == 200 => times.push(t.elapsed()),
                Ok(r) => failures.push(format!("/health {}", r.status())),
                Err(e) => failures.push(format!("/health {e}")),
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        (times, failures)
    };
    let decision = async {
        let client = common::client();
        let small = json!({"state": common::TICKET, "questions": {"q": noul()}});
        let (mut times, mut failures) = (Vec::new(), Vec::new());
        while !stop.load(Ordering::Relaxed) {
            let t = Instant::now();
            match client
                .post(format!("{base}/v1/decisions"))
                .json(&small)
                .send()
                .await
            {
                Ok(r) if r.status() == 200 => times.push(t.elapsed()),
                Ok(r) => failures.push(format!("decision {}", r.status())),
                Err(e) => failures.push(format!("decision {e}")),
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        (times, failures)
    };
    let ((health, mut failures), (decision, more)) = tokio::join!(health, decision);
    failures.extend(more);
    Probe {
        health,
        decision,
        failures,
    }
}

fn pct(v: &[Duration], q: f64) -> f64 {
    let mut ms: Vec<f64> = v.iter().map(|d| d.as_secs_f64() * 1000.0).collect();
    ms.sort_by(f64::total_cmp);
    if ms.is_empty() {
        return f64::NAN;
    }
    ms[((ms.len() - 1) as f64 * q).round() as usize]
}

/// Open `n` connections that never send a byte; each must be closed by the server. Returns
/// the longest time one stayed open.
fn idle_connections(addr: String, n: usize) -> Duration {
    let opened = Instant::now();
    let mut conns = Vec::with_capacity(n);
    for _ in 0..n {
        let s = TcpStream::connect(&addr).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(30)))
            .expect("timeout");
        conns.push(s);
    }
    let mut longest = Duration::ZERO;
    for mut s in conns {
        let mut b = [0u8; 64];
        match s.read(&mut b) {
            Ok(0) => {}
            Ok(k) if b.starts_with(b"HTTP/1.1 408") => {
                let _ = k;
            }
            Ok(k) => panic!(
                "an idle connection got {k} bytes: {:?}",
                String::from_utf8_lossy(&b[..k])
            ),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
            Err(e) => panic!("an idle connection was not closed: {e}"),
        }
        longest = longest.max(opened.elapsed());
    }
    longest
}

/// Send a request head one byte per 100 ms; the server must close the connection.
fn slow_head(addr: String) -> Duration {
    let t = Instant::now();
    let mut s = TcpStream::connect(&addr).expect("connect");
    let head = format!(
        "POST /v1/decisions HTTP/1.1\r\nHost: {addr}\r\nX-Slow: {}",
        "a".repeat(400)
    );
    for b in head.bytes() {
        if s.write_all(&[b]).is_err() || t.elapsed() > Duration::from_secs(30) {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    s.set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    let mut buf = Vec::new();
    // A closed connection ends the read (or resets it); a live one would time out.
    let r = s.read_to_end(&mut buf);
    assert!(
        r.is_ok()
            || r.as_ref()
                .is_err_and(|e| e.kind() == std::io::ErrorKind::ConnectionReset),
        "a slow head's connection was not closed: {r:?}"
    );
    t.elapsed()
}

/// Send a body one byte per 100 ms; the server must answer 408 body_timeout.
fn slow_body(addr: String, length: usize) -> (String, Duration) {
    let t = Instant::now();
    let mut s = TcpStream::connect(&addr).expect("connect");
    write!(
        s,
        "POST /v1/decisions HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {length}\r\n\r\n"
    )
    .expect("head");
    let mut reader = s.try_clone().expect("clone");
    let writer = std::thread::spawn(move || {
        for _ in 0..300 {
            if s.write_all(b" ").is_err() {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    });
    reader
        .set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    // The answer's head and body may arrive in separate reads.
    let mut got = Vec::new();
    let mut elapsed = None;
    let mut buf = [0u8; 4096];
    while let Ok(n @ 1..) = reader.read(&mut buf) {
        elapsed.get_or_insert(t.elapsed());
        got.extend_from_slice(&buf[..n]);
        if String::from_utf8_lossy(&got).contains("body_timeout") {
            break;
        }
    }
    let _ = reader.shutdown(std::net::Shutdown::Both);
    let _ = writer.join();
    (
        String::from_utf8_lossy(&got).to_string(),
        elapsed.unwrap_or(t.elapsed()),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn abusive_requests_cost_their_limits_and_never_stall_the_server() {
    let fd_limit = raise_fd_limit();
    let server = start();
    let base = server.url("");
    let client = common::client();

    // Idle: a few small decisions, then the probe alone.
    let idle_stop = Arc::new(AtomicBool::new(false));
    let idle_probe = tokio::spawn(probe(base.clone(), idle_stop.clone()));
    tokio::time::sleep(Duration::from_secs(3)).await;
    idle_stop.store(true, Ordering::Relaxed);
    let idle = idle_probe.await.expect("probe");
    assert!(idle.failures.is_empty(), "{:?}", idle.failures);
    let idle_rss = server.memory("VmRSS");
    // Reset the peak, so VmHWM is the suite's own.
    let _ = std::fs::write(format!("/proc/{}/clear_refs", server.child.id()), "5");

    let stop = Arc::new(AtomicBool::new(false));
    let probing = tokio::spawn(probe(base.clone(), stop.clone()));

    // Clients that never finish sending, beside everything else.
    let n_idle = (fd_limit.saturating_sub(512) / 2).min(2000) as usize;
    let idle_conns = {
        let addr = server.addr.clone();
        tokio::task::spawn_blocking(move || idle_connections(addr, n_idle))
    };
    let heads: Vec<_> = (0..3)
        .map(|_| {
            let addr = server.addr.clone();
            tokio::task::spawn_blocking(move || slow_head(addr))
        })
        .collect();
    let bodies: Vec<_> = [5_000, 5_000, 1_000_000]
        .into_iter()
        .map(|len| {
            let addr = server.addr.clone();
            tokio::task::spawn_blocking(move || slow_body(addr, len))
        })
        .collect();

    let mut table = Vec::new();
    let mut worst_status = 0;
    for c in cases() {
        let (status, why, took) =
            send(&client, &server.url("/v1/decisions"), c.body, &c.headers).await;
        worst_status = worst_status.max(status);
        table.push(format!(
            "| {} | {status} {why} | {:.0} ms |",
            c.name,
            took.as_secs_f64() * 1000.0
        ));
        assert!(
            c.expect.iter().any(|(s, r)| *s == status && *r == why),
            "{}: got {status} {why}, expected one of {:?}",
            c.name,
            c.expect
        );
    }

    // Eight 10 MB bodies at once: each is refused by its token limit or, past the large-body
    // slots, at once with 429 overloaded.
    let burst: Vec<_> = (0..8)
        .map(|_| {
            let client = client.clone();
            let url = server.url("/v1/decisions");
            let body = window_10mb();
            tokio::spawn(async move { send(&client, &url, body, &[]).await })
        })
        .collect();
    let mut burst_worst = Duration::ZERO;
    for b in burst {
        let (status, why, took) = b.await.expect("burst");
        burst_worst = burst_worst.max(took);
        worst_status = worst_status.max(status);
        assert!(
            (status, why.as_str()) == (400, "request_tokens")
                || (status, why.as_str()) == (429, "queue_full"),
            "burst: {status} {why}"
        );
    }
    table.push(format!(
        "| 8 at once: 10 MB state, window | 400/429 | {:.0} ms (slowest) |",
        burst_worst.as_secs_f64() * 1000.0
    ));

    for h in heads {
        let took = h.await.expect("slow head");
        table.push(format!(
            "| head one byte per 100 ms | closed | {:.0} ms |",
            took.as_secs_f64() * 1000.0
        ));
    }
    for b in bodies {
        let (resp, took) = b.await.expect("slow body");
        assert!(
            resp.starts_with("HTTP/1.1 408") && resp.contains("body_timeout"),
            "a slow body got: {resp}"
        );
        table.push(format!(
            "| body one byte per 100 ms | 408 body_timeout | {:.0} ms |",
            took.as_secs_f64() * 1000.0
        ));
    }
    let longest_idle = idle_conns.await.expect("idle connections");
    table.push(format!(
        "| {n_idle} idle connections | all closed | {:.0} ms (last) |",
        longest_idle.as_secs_f64() * 1000.0
    ));

    stop.store(true, Ordering::Relaxed);
    let busy = probing.await.expect("probe");
    let peak = server.memory("VmHWM");
    println!("| case | answer | time |\n|---|---|---|");
    for row in &table {
        println!("{row}");
    }
    println!(
        "/health ms p50/p99/max: idle {:.1}/{:.1}/{:.1} ({} calls), under abuse {:.1}/{:.1}/{:.1} ({} calls)",
        pct(&idle.health, 0.5),
        pct(&idle.health, 0.99),
        pct(&idle.health, 1.0),
        idle.health.len(),
        pct(&busy.health, 0.5),
        pct(&busy.health, 0.99),
        pct(&busy.health, 1.0),
        busy.health.len()
    );
    println!(
        "small decision ms p50/p99: idle {:.1}/{:.1}, under abuse {:.1}/{:.1} ({} calls)",
        pct(&idle.decision, 0.5),
        pct(&idle.decision, 0.99),
        pct(&busy.decision, 0.5),
        pct(&busy.decision, 0.99),
        busy.decision.len()
    );
    println!(
        "RSS: idle {} MiB, peak under abuse {} MiB",
        idle_rss / MB,
        peak / MB
    );
    assert!(
        busy.failures.is_empty(),
        "the probe failed: {:?}",
        busy.failures
    );
    assert!(!busy.health.is_empty() && !busy.decision.is_empty());
    assert!(worst_status < 500, "a 5xx answer");
    assert!(
        peak <= 2 * idle_rss + 4 * BODY_LIMIT,
        "peak RSS {peak} over twice the idle {idle_rss} plus four body limits"
    );
}
