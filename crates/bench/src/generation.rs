//! Generation against raw llama.cpp and llama-cpp-python's server.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::common::*;
use crate::decisions::STATE;

/// A story prompt for generation benches.
pub(crate) const STORY: &str =
    "Write a long, detailed story about a lighthouse keeper who finds a message \
in a bottle, describing the sea, the weather and the town nearby.";

/// The prompt of concurrent stream `i`: the story prompt, numbered so streams differ.
pub(crate) fn story(i: usize) -> String {
    format!("{STORY} Story number {}.", i + 1)
}

/// One streamed completion: when it was sent, when each text chunk arrived, and its usage.
pub(crate) struct Streamed {
    sent: Instant,
    chunks: Vec<Instant>,
    completion_tokens: u64,
}

impl Streamed {
    fn ttft(&self) -> Duration {
        self.chunks
            .first()
            .map_or(Duration::ZERO, |t| *t - self.sent)
    }
    /// Decode tokens per second after the first token.
    fn decode_rate(&self) -> f64 {
        match (self.chunks.first(), self.chunks.last()) {
            (Some(a), Some(b)) if b > a => {
                (self.completion_tokens.saturating_sub(1)) as f64 / (*b - *a).as_secs_f64()
            }
            _ => 0.0,
        }
    }
}

/// Stream one OpenAI completion (`/v1/completions`), greedy, `max_tokens` long.
pub(crate) async fn stream_completion(
    client: &reqwest::Client,
    base: &str,
    model: &str,
    prompt: &str,
    max_tokens: usize,
) -> anyhow::Result<Streamed> {
    let body = json!({"model": model, "prompt": prompt, "max_tokens": max_tokens,
        "temperature": 0, "stream": true, "stream_options": {"include_usage": true}});
    let sent = Instant::now();
    let mut resp = client
        .post(format!("{base}/v1/completions"))
        .json(&body)
        .send()
        .await
        .map_err(|e| anyhow::anyhow!("{e}: {:?}", std::error::Error::source(&e)))?;
    if !resp.status().is_success() {
        return Err(anyhow::anyhow!(
            "{}: {}",
            resp.status(),
            resp.text().await.unwrap_or_default()
        ));
    }
    let mut chunks = Vec::new();
    let mut completion_tokens = 0;
    let mut pending = String::new();
    while let Some(bytes) = resp.chunk().await? {
        let at = Instant::now();
        pending.push_str(&String::from_utf8_lossy(&bytes).replace("\r\n", "\n"));
        while let Some(end) = pending.find("\n\n") {
            let event: String = pending.drain(..end + 2).collect();
            let Some(data) = event.trim().strip_prefix("data: ") else {
                continue;
            };
            if data == "[DONE]" {
                continue;
            }
            let v: Value = serde_json::from_str(data)?;
            if let Some(n) = v["usage"]["completion_tokens"].as_u64() {
                completion_tokens = n;
            }
            if v["choices"][0]["text"]
                .as_str()
                .is_some_and(|t| !t.is_empty())
            {
                chunks.push(at);
            }
        }
    }
    if completion_tokens == 0 {
        // A server that does not report usage in streams: one token per text chunk.
        completion_tokens = chunks.len() as u64;
    }
    Ok(Streamed {
        sent,
        chunks,
        completion_tokens,
    })
}

/// One stream per prompt, all sent at once; each stream as it came back, in prompt order.
async fn stream_all(
    client: &reqwest::Client,
    base: &str,
    model: &str,
    prompts: &[String],
    max_tokens: usize,
) -> anyhow::Result<Vec<Streamed>> {
    let tasks: Vec<_> = prompts
        .iter()
        .map(|p| {
            let (client, base, model, p) = (
                client.clone(),
                base.to_string(),
                model.to_string(),
                p.clone(),
            );
            tokio::spawn(
                async move { stream_completion(&client, &base, &model, &p, max_tokens).await },
            )
        })
        .collect();
    let mut all = Vec::with_capacity(tasks.len());
    for t in tasks {
        all.push(t.await??);
    }
    Ok(all)
}

/// `n` concurrent streams; their total decode rate (tokens after each stream's first, over the
/// time from the earliest first token to the latest last one) and their time to first token.
pub(crate) async fn concurrent(
    client: &reqwest::Client,
    base: &str,
    model: &str,
    n: usize,
    max_tokens: usize,
) -> anyhow::Result<(f64, Vec<Duration>)> {
    let prompts: Vec<String> = (0..n).map(story).collect();
    let all = stream_all(client, base, model, &prompts, max_tokens).await?;
    let first = all.iter().filter_map(|s| s.chunks.first()).min().copied();
    let last = all.iter().filter_map(|s| s.chunks.last()).max().copied();
    let tokens: u64 = all
        .iter()
        .map(|s| s.completion_tokens.saturating_sub(1))
        .sum();
    let rate = match (first, last) {
        (Some(a), Some(b)) if b > a => tokens as f64 / (b - a).as_secs_f64(),
        _ => 0.0,
    };
    Ok((rate, all.iter().map(Streamed::ttft).collect()))
}

/// Start llama-cpp-python's OpenAI server on `gguf` (one request at a time), if installed.
pub(crate) async fn start_llama_cpp_python(
    gguf: &std::path::Path,
    threads: usize,
) -> Option<(tokio::process::Child, String)> {
    let python = std::env::var("VLLM_SRUN_PYTHON").unwrap_or_else(|_| "python3".into());
    let mut command = tokio::process::Command::new(python);
    command
        .args(["-m", "llama_cpp.server", "--model"])
        .arg(gguf)
        // Queue concurrent requests instead of cutting the running one off (its default).
        .args(["--interrupt_requests", "False"])
        .args(["--n_ctx", "4096", "--n_threads"])
        .arg(threads.to_string());
    start_reference(command, "/v1/models").await
}

/// Start a reference server: `command` with `--port` and a free local port added, its output
/// dropped, killed when its handle is; its base URL once it answers `ready`.
async fn start_reference(
    mut command: tokio::process::Command,
    ready: &str,
) -> Option<(tokio::process::Child, String)> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .ok()?
        .local_addr()
        .ok()?
        .port();
    let child = command
        .args(["--port", &port.to_string()])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .ok()?;
    let base = format!("http://127.0.0.1:{port}");
    answering(&base, ready).await.then_some((child, base))
}

/// Whether `base` answers `path` with a success within two minutes.
async fn answering(base: &str, path: &str) -> bool {
    let client = reqwest::Client::new();
    for _ in 0..600 {
        if client
            .get(format!("{base}{path}"))
            .send()
            .await
            .is_ok_and(|r| r.status().is_success())
        {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    false
}

/// Generation: one stream's decode rate against raw llama.cpp in this process; four
/// concurrent streams against llama-cpp-python's server on the same GGUF; time to first token;
/// and how long running streams stall while a 1,000-token prompt joins them.
pub async fn generation(
    model_spec: &str,
    runs: usize,
    max_tokens: usize,
    reference_only: bool,
) -> anyhow::Result<()> {
    let resolved = hub::resolve(model_spec, true)?;
    // Room for four running streams and a fifth that joins them.
    let o = vllm_srun::ServeOptions {
        models: vec![model_spec.to_string()],
        port: 0,
        generate: Some(engine::GenerateConfig {
            sequences: 5,
            ..engine::GenerateConfig::default()
        }),
        ..vllm_srun::ServeOptions::default()
    };
    let (registry, base) = serve_in_process(o).await?;
    let text = wait(|| registry.text(None)).await?;
    let name = text.name().to_string();
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(900))
        .build()?;
    println!(
        "bench generate: model {name}, {} threads, runs {runs}, {max_tokens} tokens per stream",
        raw_threads()
    );
    if reference_only {
        return against_llama_server(&base, &name, &resolved.weights, runs, max_tokens).await;
    }
    let raw = backend_llama::LlamaBackend::load(
        &resolved.weights,
        backend_llama::LlamaConfig::default(),
    )?;
    let mut plain = crate::plain::PlainEvaluator::new(&raw, 4096)?;
    let prompt = engine::Backend::tokenize(&raw, STORY, false)?;
    // Warm both.
    stream_completion(&client, &base, &name, STORY, 8).await?;
    tokio::task::block_in_place(|| plain.greedy(&prompt, 8))?;
    let (mut raw_rates, mut ours, mut ttfts) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..runs {
        let s = stream_completion(&client, &base, &name, STORY, max_tokens).await?;
        let n = (s.completion_tokens as usize).max(2);
        ours.push(s.decode_rate());
        ttfts.push(s.ttft());
        let (_, t) = tokio::task::block_in_place(|| plain.greedy(&prompt, n))?;
        raw_rates.push((n - 1) as f64 / t.as_secs_f64());
    }
    let (r, o1) = (median_of(&raw_rates), median_of(&ours));
    println!("(a) raw llama.cpp greedy decode, one sequence: median {r:.1} tokens/s");
    println!("(b) one stream over HTTP (/v1/completions):    median {o1:.1} tokens/s");
    println!("    (b)/(a) = {:.3}  [target >= 0.95]", o1 / r);

    let mut four = Vec::new();
    for _ in 0..runs {
        let (rate, t) = concurrent(&client, &base, &name, 4, max_tokens).await?;
        four.push(rate);
        ttfts.extend(t);
    }
    let o4 = median_of(&four);
    println!("(c) four concurrent streams, total decode:     median {o4:.1} tokens/s ({:.2}x one stream)", o4 / o1);
    // The ceiling: the same four prompts decoded raw, one llama.cpp decode per step for all.
    let prompts = (0..4)
        .map(|i| engine::Backend::tokenize(&raw, &story(i), false))
        .collect::<Result<Vec<_>, _>>()?;
    let longest = prompts.iter().map(Vec::len).max().unwrap_or(0);
    let mut batched =
        crate::plain::PlainEvaluator::batched(&raw, (longest + max_tokens) as u32, 4)?;
    let mut raw4 = Vec::new();
    for _ in 0..runs {
        let (_, t) = tokio::task::block_in_place(|| batched.greedy_batched(&prompts, max_tokens))?;
        raw4.push((4 * (max_tokens - 1)) as f64 / t.as_secs_f64());
    }
    drop(batched);
    let r4 = median_of(&raw4);
    println!(
        "    raw llama.cpp, the same four prompts batched: median {r4:.1} tokens/s ({:.2}x raw one sequence); (c)/raw = {:.3}",
        r4 / r,
        o4 / r4
    );
    println!(
        "    time to first token over {} requests: p50 {:.0} ms, p99 {:.0} ms",
        ttfts.len(),
        pct(ttfts.clone(), 0.5).as_secs_f64() * 1e3,
        pct(ttfts, 0.99).as_secs_f64() * 1e3
    );

    // (d) A 1,000-token prompt joins four running streams.
    let long_prompt = {
        let mut p = String::new();
        while engine::Backend::tokenize(&raw, &p, false).map_or(0, |t| t.len()) < 1000 {
            p.push_str(STATE);
            p.push(' ');
        }
        p
    };
    // The running streams are long enough to outlast the joining prompt's prefill.
    let running: Vec<_> = (0..4)
        .map(|i| {
            let (client, base, name) = (client.clone(), base.clone(), name.clone());
            let prompt = story(i);
            tokio::spawn(async move {
                stream_completion(&client, &base, &name, &prompt, max_tokens * 4).await
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let joined_at = Instant::now();
    let joiner = stream_completion(&client, &base, &name, &long_prompt, 4).await?;
    let join_end = joined_at + joiner.ttft();
    let mut normal = Vec::new();
    let mut during = Duration::ZERO;
    for t in running {
        let s = t.await??;
        for w in s.chunks.windows(2) {
            let gap = w[1] - w[0];
            if w[1] >= joined_at && w[0] <= join_end {
                during = during.max(gap);
            } else {
                normal.push(gap);
            }
        }
    }
    let chunk = registry
        .text(None)
        .map(|t| t.config().prefill_chunk)
        .unwrap_or(256);
    let chunk_tokens = prompt
        .iter()
        .cycle()
        .take(chunk)
        .copied()
        .collect::<Vec<_>>();
    let cand = [chunk_tokens[0]];
    let t = Instant::now();
    tokio::task::block_in_place(|| plain.evaluate(&chunk_tokens, &cand))?;
    let chunk_time = t.elapsed();
    // The joining prompt itself prefilled raw in chunks of the same size: its later chunks
    // attend to the earlier ones, so its costliest chunk is the one a join must not exceed.
    let long_tokens = engine::Backend::tokenize(&raw, &long_prompt, false)?;
    let own_chunk = tokio::task::block_in_place(|| plain.prefill_chunks(&long_tokens, chunk))?
        .into_iter()
        .max()
        .unwrap_or_default();
    println!(
        "(d) a {}-token prompt joins 4 streams: its first token after {:.0} ms; the running streams' \
         longest gap meanwhile {:.0} ms (median gap otherwise {:.0} ms); raw prefill of one {chunk}-token chunk: \
         {:.0} ms from an empty cache, {:.0} ms for the costliest chunk of the joining prompt",
        long_tokens.len(),
        joiner.ttft().as_secs_f64() * 1e3,
        during.as_secs_f64() * 1e3,
        if normal.is_empty() { 0.0 } else { median(normal).as_secs_f64() * 1e3 },
        chunk_time.as_secs_f64() * 1e3,
        own_chunk.as_secs_f64() * 1e3,
    );
    println!(
        "    longest gap / the joining prompt's costliest raw chunk = {:.2}  [target <= 1.0]",
        during.as_secs_f64() / own_chunk.as_secs_f64().max(1e-9)
    );

    // (e) llama-cpp-python's server on the same file, one request at a time.
    drop(plain);
    match start_llama_cpp_python(&resolved.weights, raw_threads()).await {
        None => println!("(e) llama-cpp-python's server is not installed (pip install 'llama-cpp-python[server]'): skipped"),
        Some((mut child, lbase)) => {
            stream_completion(&client, &lbase, &name, STORY, 8).await?;
            let (mut one, mut four) = (Vec::new(), Vec::new());
            for _ in 0..runs {
                one.push(stream_completion(&client, &lbase, &name, STORY, max_tokens).await?.decode_rate());
                four.push(concurrent(&client, &lbase, &name, 4, max_tokens).await?.0);
            }
            let (l1, l4) = (median_of(&one), median_of(&four));
            println!("(e) llama-cpp-python server: one stream {l1:.1} tokens/s, four concurrent {l4:.1} tokens/s");
            println!("    ours/theirs: one stream {:.2}, four concurrent {:.2}  [target >= 2.0]", o1 / l1, o4 / l4);
            let _ = child.kill().await;
        }
    }
    against_llama_server(&base, &name, &resolved.weights, runs, max_tokens).await
}

/// Where llama.cpp's own tools are (`../shared/tools/llama-tools.sh` builds them):
/// `$LLAMA_TOOLS`, else `~/.cache/llama-tools/bin`.
fn llama_tools() -> std::path::PathBuf {
    std::env::var_os("LLAMA_TOOLS")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            std::path::PathBuf::from(std::env::var_os("HOME").unwrap_or_default())
                .join(".cache/llama-tools/bin")
        })
}

/// Start llama.cpp's `llama-server` on `gguf` with four slots of 4,096 tokens, if built.
async fn start_llama_server(
    gguf: &std::path::Path,
    threads: usize,
) -> Option<(tokio::process::Child, String)> {
    let dir = llama_tools();
    let mut command = tokio::process::Command::new(dir.join("llama-server"));
    command
        .env("LD_LIBRARY_PATH", &dir)
        .arg("-m")
        .arg(gguf)
        .args(["-np", "4", "-c", "16384", "-t"])
        .arg(threads.to_string());
    start_reference(command, "/health").await
}

/// Four streams sent at once, as a chat client sends them: every stream's tokens over the
/// wall time from sending to the last token, and the median time to first token.
async fn four_at_once(
    client: &reqwest::Client,
    base: &str,
    model: &str,
    prompts: &[String],
    max_tokens: usize,
) -> anyhow::Result<(f64, Duration)> {
    let start = Instant::now();
    let all = stream_all(client, base, model, prompts, max_tokens).await?;
    let end = all.iter().filter_map(|s| s.chunks.last()).max().copied();
    let tokens: u64 = all.iter().map(|s| s.completion_tokens).sum();
    let rate = end.map_or(0.0, |e| tokens as f64 / (e - start).as_secs_f64());
    Ok((rate, median(all.iter().map(Streamed::ttft).collect())))
}

/// The pause before each run of (f).
const SETTLE: Duration = Duration::from_secs(1);

/// (f) Four concurrent streams against llama.cpp's own `llama-server -np 4` (whose slots keep
/// their prompts' cells): the same four prompts sent again (the runs after the first), then
/// four fresh prompts each run; each run goes to both servers, in turn.
async fn against_llama_server(
    base: &str,
    name: &str,
    gguf: &std::path::Path,
    runs: usize,
    max_tokens: usize,
) -> anyhow::Result<()> {
    let Some((mut child, lbase)) = start_llama_server(gguf, raw_threads()).await else {
        println!(
            "(f) llama-server is not built in {} (../shared/tools/llama-tools.sh): skipped",
            llama_tools().display()
        );
        return Ok(());
    };
    // A client of its own without idle connections: a pooled one left idle through (d) and (e)
    // may be closed by the server just as it is reused.
    let client = &reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .timeout(Duration::from_secs(900))
        .build()?;
    let again: Vec<String> = (0..4).map(story).collect();
    let urls = [base, lbase.as_str()];
    // Runs alternate between the two servers, each run starting with the other one, so that a
    // drift in the machine's speed (or a neighbour's load) falls on both alike. The prompts
    // sent again come first: a fresh run would replace them in the slots. Each run starts a
    // second after the last one ended, so that whatever a server still does after its last
    // token does not land on the other's run (run back to back, our p50 first token was 307 ms
    // against 121-141 ms measured alone).
    let order = |run: usize| {
        if run.is_multiple_of(2) {
            [0, 1]
        } else {
            [1, 0]
        }
    };
    for url in urls {
        four_at_once(client, url, name, &again, max_tokens).await?;
    }
    // [phase][server], phase 0 the prompts sent again and 1 fresh ones; first tokens in ms.
    let (mut rates, mut ttfts) = (
        [[vec![], vec![]], [vec![], vec![]]],
        [[vec![], vec![]], [vec![], vec![]]],
    );
    for phase in 0..2 {
        for run in 0..runs {
            let fresh: Vec<String>;
            let prompts = if phase == 0 {
                &again
            } else {
                fresh = (0..4).map(|i| story(1000 + 10 * run + i)).collect();
                &fresh
            };
            for w in order(run) {
                tokio::time::sleep(SETTLE).await;
                let (r, t) = four_at_once(client, urls[w], name, prompts, max_tokens).await?;
                rates[phase][w].push(r);
                ttfts[phase][w].push(t.as_secs_f64() * 1e3);
            }
        }
    }
    let _ = child.kill().await;
    let each = |v: &[f64], digits: usize| {
        v.iter()
            .map(|r| format!("{r:.digits$}"))
            .collect::<Vec<_>>()
            .join(" ")
    };
    for (what, digits, series) in [
        ("tokens/s", 1, &rates),
        ("first token p50 in ms", 0, &ttfts),
    ] {
        println!(
            "(f) each run, {what}: sent again ours {} / llama-server {}; fresh ours {} / llama-server {}",
            each(&series[0][0], digits),
            each(&series[0][1], digits),
            each(&series[1][0], digits),
            each(&series[1][1], digits)
        );
    }
    for (w, who) in ["ours", "llama-server"].into_iter().enumerate() {
        println!(
            "(f) {who:>12}: four streams sent again {:.1} tokens/s, first token p50 {:.0} ms; four fresh {:.1} tokens/s, p50 {:.0} ms",
            median_of(&rates[0][w]),
            median_of(&ttfts[0][w]),
            median_of(&rates[1][w]),
            median_of(&ttfts[1][w])
        );
    }
    let ratio = |series: &[[Vec<f64>; 2]; 2], phase: usize| {
        median_of(&series[phase][0]) / median_of(&series[phase][1])
    };
    println!(
        "    ours/llama-server: sent again {:.2} tokens/s [target >= 1.0], first token {:.2} [target <= 1.5]; fresh {:.2} tokens/s [target >= 1.0]",
        ratio(&rates, 0),
        ratio(&ttfts, 0),
        ratio(&rates, 1)
    );
    Ok(())
}
