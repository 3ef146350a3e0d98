//! Start the real server in-process on a free loopback port, with a real model.
#![allow(dead_code)]

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::Value;
use vllm_srun::ServeOptions;

/// The model the tests serve: `$VLLM_SRUN_TEST_MODEL`, by default the small `smollm2-135m`.
pub fn test_model() -> String {
    std::env::var("VLLM_SRUN_TEST_MODEL").unwrap_or_else(|_| "smollm2-135m".into())
}

/// The threads a test's model runs on: `$VLLM_SRUN_TEST_THREADS`, by default 2 (this project's
/// machines have two cores). `tests/test.sh` sets 1 when it runs two test binaries at once.
pub fn test_threads() -> usize {
    std::env::var("VLLM_SRUN_TEST_THREADS")
        .ok()
        .and_then(|t| t.parse().ok())
        .filter(|&t| t > 0)
        .unwrap_or(2)
}

pub struct TestServer {
    pub base: String,
    pub registry: std::sync::Arc<engine::Registry>,
    /// The server's thread and runtime, stopped when the server is dropped.
    pub running: Running,
}

/// A server running on a thread and runtime of its own: dropping it stops the server and
/// waits for its thread, so a test binary holds only the servers its tests still use.
pub struct Running {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl TestServer {
    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }
}

/// Options for a test server on a free port, serving the test model.
pub fn options() -> ServeOptions {
    ServeOptions {
        models: vec![test_model()],
        port: 0,
        threads: test_threads(),
        ..ServeOptions::default()
    }
}

/// Options that serve `model` alone, for decisions (no generation worker).
pub fn deciding(model: &str) -> ServeOptions {
    let mut o = options();
    o.models = vec![model.into()];
    o.generate = None;
    o
}

/// Start a server with `o` on its own thread and runtime; wait until `/health` is ready.
pub fn start(o: ServeOptions) -> TestServer {
    let server = start_unready(o);
    wait_ready(&server);
    server
}

/// Run `serve` on a thread of its own, on a two-worker runtime, until it ends or the
/// returned [`Running`] is dropped; return what it sends once it is bound (within 30 s).
pub fn on_own_runtime<T, F>(
    serve: impl FnOnce(std::sync::mpsc::Sender<T>) -> F + Send + 'static,
) -> (T, Running)
where
    T: Send + 'static,
    F: std::future::Future<Output = ()>,
{
    let (tx, rx) = std::sync::mpsc::channel();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let thread = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async move {
            tokio::select! {
                _ = serve(tx) => {}
                _ = stopped => {}
            }
        });
        // Tasks still running (open connections, a forward's wait) are dropped with it.
        rt.shutdown_timeout(Duration::from_secs(5));
    });
    let sent = rx.recv_timeout(Duration::from_secs(30)).expect("bound");
    (
        sent,
        Running {
            stop: Some(stop),
            thread: Some(thread),
        },
    )
}

/// Start a server and return as soon as it listens.
pub fn start_unready(o: ServeOptions) -> TestServer {
    let ((addr, registry), running) = on_own_runtime(move |tx| async move {
        let bound = vllm_srun::bind(o).await.expect("bind");
        tx.send((bound.addr, bound.registry.clone()))
            .expect("send addr");
        let _ = bound.run().await;
    });
    TestServer {
        base: format!("http://{addr}"),
        registry,
        running,
    }
}

fn wait_ready(s: &TestServer) {
    let deadline = Instant::now() + Duration::from_secs(600);
    let client = reqwest::blocking_free_client();
    loop {
        if let Ok(status) = client(&s.url("/health")) {
            if status == 200 {
                return;
            }
        }
        assert!(Instant::now() < deadline, "server did not become ready");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// One shared server for the tests of a binary.
pub fn shared() -> &'static TestServer {
    static S: OnceLock<TestServer> = OnceLock::new();
    S.get_or_init(|| start(options()))
}

/// A blocking GET that returns the status, for tests outside a runtime.
pub fn blocking_get() -> impl Fn(&str) -> std::io::Result<u16> {
    reqwest::blocking_free_client()
}

/// Minimal blocking GET for readiness polling, without a second HTTP client.
mod reqwest {
    use std::io::{Read, Write};
    use std::net::TcpStream;

    pub fn blocking_free_client() -> impl Fn(&str) -> std::io::Result<u16> {
        |url: &str| {
            let rest = url.trim_start_matches("http://");
            let (host, path) = rest.split_once('/').unwrap_or((rest, ""));
            let mut s = TcpStream::connect(host)?;
            write!(
                s,
                "GET /{path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
            )?;
            let mut buf = String::new();
            s.read_to_string(&mut buf)?;
            let code = buf
                .split_whitespace()
                .nth(1)
                .and_then(|c| c.parse().ok())
                .unwrap_or(0);
            Ok(code)
        }
    }
}

/// POST JSON; return status, headers and the JSON body.
pub async fn post(url: &str, body: &Value) -> (u16, ::reqwest::header::HeaderMap, Value) {
    let resp = client().post(url).json(body).send().await.expect("send");
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let bytes = resp.bytes().await.expect("body");
    let v = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    (status, headers, v)
}

/// POST raw bytes with extra headers.
pub async fn post_raw(
    url: &str,
    body: Vec<u8>,
    headers: &[(&str, &str)],
) -> (u16, ::reqwest::header::HeaderMap, Value) {
    let mut req = client().post(url).body(body);
    if !headers
        .iter()
        .any(|(k, _)| k.eq_ignore_ascii_case("content-type"))
    {
        req = req.header("content-type", "application/json");
    }
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = req.send().await.expect("send");
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let bytes = resp.bytes().await.expect("body");
    (
        status,
        headers,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

pub async fn get(url: &str) -> (u16, Value) {
    let resp = client().get(url).send().await.expect("send");
    let status = resp.status().as_u16();
    let bytes = resp.bytes().await.expect("body");
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

/// The body of a GET as text (e.g. /metrics).
pub async fn get_text(url: &str) -> String {
    client()
        .get(url)
        .send()
        .await
        .expect("send")
        .text()
        .await
        .expect("body")
}

/// A client for the calling test's runtime (a pooled client cannot outlive its runtime).
pub fn client() -> ::reqwest::Client {
    ::reqwest::Client::builder()
        .timeout(Duration::from_secs(300))
        .build()
        .expect("client")
}

pub const TICKET: &str = "Hi, I was charged twice for my March invoice (order #4471) and the refund I was promised last week still hasn't arrived. Please fix this today or I will dispute the charge with my bank.";

/// Sum of an object's numeric values.
pub fn sum(v: &Value) -> f64 {
    v.as_object()
        .map(|o| o.values().filter_map(Value::as_f64).sum())
        .unwrap_or(f64::NAN)
}

/// An answer's `probabilities`, as (key, probability) sorted by key.
pub fn probabilities(a: &Value) -> Vec<(String, f64)> {
    let mut p: Vec<(String, f64)> = a["probabilities"]
        .as_object()
        .expect("probabilities")
        .iter()
        .map(|(k, v)| (k.clone(), v.as_f64().expect("p")))
        .collect();
    p.sort_by(|a, b| a.0.cmp(&b.0));
    p
}

/// A small deterministic generator (xorshift64) for fuzzing bodies.
pub fn xorshift(mut seed: u64) -> impl FnMut() -> u64 {
    move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    }
}

/// A router config for `serve`: every model of the process published through `*`, chat on
/// `small`, one `task` signal (math or small talk) asked of `signals`, decisions `math` and
/// `chat` (the default).
pub fn in_process_router(small: &str, signals: &str) -> router::RouterConfig {
    let yaml = format!(
        r#"
deployments:
  - {{name: local, workers: [in-process], models: ["*"]}}
backends:
  - {{name: local, url: in-process, models: [{small}]}}
signals:
  - {{name: task, deployment: local, model: {signals}, type: choice, instructions: Is this message a math problem or small talk?, criteria: {{math: A math problem, chat: Small talk}}}}
decisions:
  - {{name: math, rules: {{operator: AND, conditions: [{{type: task, name: math}}]}}, modelRefs: [{{model: {small}}}]}}
  - {{name: chat, modelRefs: [{{model: {small}}}]}}
default_decision: chat
"#
    );
    router::RouterConfig::from_yaml(&yaml, "in-process.yaml").expect("the config loads")
}

/// A multipart body: `request` first, then the named parts.
pub fn multipart(request: &Value, parts: &[(&str, &[u8])]) -> (Vec<u8>, String) {
    let boundary = "vllm-srun-test-boundary";
    let mut b = Vec::new();
    let mut part = |name: &str, ct: &str, data: &[u8]| {
        b.extend(format!("--{boundary}\r\nContent-Disposition: form-data; name=\"{name}\"\r\nContent-Type: {ct}\r\n\r\n").bytes());
        b.extend(data);
        b.extend(b"\r\n");
    };
    part(
        "request",
        "application/json",
        request.to_string().as_bytes(),
    );
    for (name, data) in parts {
        part(name, "application/octet-stream", data);
    }
    b.extend(format!("--{boundary}--\r\n").bytes());
    (b, format!("multipart/form-data; boundary={boundary}"))
}

/// An H.264 MP4 of `frames` plain grey frames of `width` × `height` at `fps`: a clip in which
/// the detector finds nothing.
pub fn grey_clip(frames: usize, width: usize, height: usize, fps: u32) -> Vec<u8> {
    let frames: Vec<media::Picture> = (0..frames)
        .map(|_| media::Picture {
            width,
            height,
            rgb: vec![128; width * height * 3],
        })
        .collect();
    media::encode_mp4(&frames, fps).expect("grey frames encode")
}
