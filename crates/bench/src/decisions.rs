//! Decision benchmarks: latency over HTTP, the side-by-side suite against raw llama.cpp,
//! span questions, long inputs.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::common::*;

/// A support ticket of about 100 tokens.
pub const STATE: &str = "Hello, I am writing about my order #88213. I bought a standing desk on March 3rd and \
it arrived with a cracked leg and two missing screws. I contacted support twice by email and once by phone, \
and each time I was told someone would call me back within a day, but nobody did. I need the desk for work \
and I am now using my kitchen table. I would like a replacement leg shipped this week, or a full refund if \
that is not possible. Please tell me which one you can do.";

/// Six questions of the three decision types about [`STATE`].
pub fn questions(n: usize) -> Value {
    let all = [
        (
            "route",
            json!({"type": "choice", "instructions": "Which team should handle this ticket?",
            "criteria": {"returns": "Refunds, replacements and damaged deliveries", "billing": "Payments and invoices", "technical": "Product setup and faults"}}),
        ),
        (
            "refund",
            json!({"type": "noul", "instructions": "Does the customer accept a refund?"}),
        ),
        (
            "urgency",
            json!({"type": "score", "instructions": "How urgent is this request?", "criteria": ["Routine", "Soon", "Today"]}),
        ),
        (
            "sentiment",
            json!({"type": "choice", "instructions": "What is the customer's mood?",
            "criteria": {"calm": null, "frustrated": null, "angry": null, "happy": null}}),
        ),
        (
            "followup",
            json!({"type": "noul", "instructions": "Was the customer promised a call back?"}),
        ),
        (
            "effort",
            json!({"type": "score", "instructions": "How much work will resolving this take?", "criteria": ["Little", "Some", "A lot"]}),
        ),
    ];
    let mut q = serde_json::Map::new();
    for (id, v) in all.into_iter().take(n) {
        q.insert(id.into(), v);
    }
    Value::Object(q)
}

/// Run the latency comparison: one question vs six about the same state, alternating, so
/// both see the same machine state. Prints medians, p90s and the ratio.
pub async fn latency(base: &str, model: &str, runs: usize) -> anyhow::Result<()> {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(600))
        .build()?;
    let url = format!("{}/v1/systemone", base.trim_end_matches('/'));
    let one = json!({"model": model, "state": STATE, "questions": questions(1)});
    let six = json!({"model": model, "state": STATE, "questions": questions(6)});
    // Warm up once each.
    time_request(&client, &url, &one).await?;
    time_request(&client, &url, &six).await?;
    let (mut t1, mut t6) = (Vec::with_capacity(runs), Vec::with_capacity(runs));
    for _ in 0..runs {
        t1.push(time_request(&client, &url, &one).await?);
        t6.push(time_request(&client, &url, &six).await?);
    }
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let (m1, m6) = (median(t1.clone()), median(t6.clone()));
    println!("model {model}, {runs} runs each, over HTTP, one request at a time");
    println!(
        "(d) 1 question : median {:8.1} ms   p90 {:8.1} ms",
        ms(m1),
        ms(pct(t1, 0.9))
    );
    println!(
        "(c) 6 questions: median {:8.1} ms   p90 {:8.1} ms",
        ms(m6),
        ms(pct(t6, 0.9))
    );
    println!("(c)/(d) = {:.2}", m6.as_secs_f64() / m1.as_secs_f64());
    Ok(())
}

/// Span questions against one choice question about one ~200-token state, over HTTP in this
/// process, alternating so that drift hits all three alike.
pub async fn spans(model_spec: &str, runs: usize) -> anyhow::Result<()> {
    let (model, base) = serve_decision_model(model_spec).await?;
    let name = model.meta.name.clone();
    let url = format!("{base}/v1/decisions");
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(600))
        .build()?;
    let state = format!(
        "{} Write to me at jane.doe@example.com or call 415-555-0134. Jane Doe",
        long_state(0)
    );
    let choice = one_question(&name, &state);
    let span = json!({"model": name, "state": state, "questions": {"who": {"type": "span",
        "criteria": {"EMAIL_ADDRESS": "an email address"}}}});
    let pii = json!({"model": name, "state": state, "questions": {"pii": {"preset": "pii"}}});
    let tokens = question_tokens(&model, &state)?;
    println!("bench spans: model {name}, one choice question reads {tokens} tokens (system prompt, state, question), runs {runs}");
    for b in [&choice, &span, &pii] {
        time_request(&client, &url, b).await?;
    }
    let (mut tc, mut ts, mut tp) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..runs {
        tc.push(time_request(&client, &url, &choice).await?);
        ts.push(time_request(&client, &url, &span).await?);
        tp.push(time_request(&client, &url, &pii).await?);
    }
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let (c, s, p) = (median(tc), median(ts), median(tp));
    println!("one choice question:              median {:.1} ms", ms(c));
    println!(
        "one span question (one label):    median {:.1} ms  ({:.2}x the choice)",
        ms(s),
        s.as_secs_f64() / c.as_secs_f64()
    );
    println!(
        "one pii span question (9 labels): median {:.1} ms  ({:.2}x the choice)",
        ms(p),
        p.as_secs_f64() / c.as_secs_f64()
    );
    Ok(())
}

/// Tokens one choice question about `state` reads: system prompt, state and question.
pub(crate) fn question_tokens(model: &engine::DecisionModel, state: &str) -> anyhow::Result<usize> {
    let body = one_question(&model.meta.name, state);
    match protocol::parse_decision_body(&body, protocol::Schema::Internal)
        .map_err(|e| anyhow::anyhow!(e.message))?
    {
        protocol::DecisionBody::Single(r) => {
            let seqs = model.question_sequences(&r)?;
            Ok(seqs.first().map_or(0, Vec::len))
        }
        protocol::DecisionBody::Batch { .. } => Err(anyhow::anyhow!("not a single request")),
    }
}

/// A support ticket of about 200 tokens, made distinct by `i`.
pub(crate) fn long_state(i: usize) -> String {
    format!(
        "{STATE} I have attached the photos of the cracked leg and the packing slip, which lists \
         four screws where I received two. The courier's tracking page says the parcel was left \
         at the door, but it was handed to my neighbour, who noticed the box was dented. I have \
         been a customer for six years and this is the first time something like this has \
         happened, so I hope we can sort it out quickly. Reference {i}."
    )
}

/// Medians of `a` and `b` sent `runs` times each, alternating so that drift hits both alike
/// (after one warm-up of `a`).
pub(crate) async fn alternate(
    client: &reqwest::Client,
    url: &str,
    a: &Value,
    b: &Value,
    runs: usize,
) -> anyhow::Result<(Duration, Duration)> {
    time_request(client, url, a).await?;
    let (mut ta, mut tb) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        ta.push(time_request(client, url, a).await?);
        tb.push(time_request(client, url, b).await?);
    }
    Ok((median(ta), median(tb)))
}

/// `n` yes/no questions (at most ten) about [`long_state`].
pub(crate) fn yes_no(n: usize) -> Value {
    let all = [
        "Does the customer mention an order number?",
        "Is the customer angry?",
        "Was the item damaged?",
        "Did the customer contact support before?",
        "Does the customer want a refund?",
        "Is a phone call mentioned?",
        "Does the customer need the item for work?",
        "Is a replacement requested?",
        "Were screws missing?",
        "Is this a billing question?",
    ];
    let mut q = serde_json::Map::new();
    for (i, text) in all.iter().take(n).enumerate() {
        q.insert(
            format!("q{i}"),
            json!({"type": "noul", "instructions": text}),
        );
    }
    Value::Object(q)
}

pub(crate) fn one_question(model: &str, state: &str) -> Value {
    json!({"model": model, "state": state, "questions": questions(1)})
}

pub(crate) struct Latencies(Vec<Duration>);

impl Latencies {
    fn ms(&self, p: f64) -> f64 {
        if self.0.is_empty() {
            return f64::NAN;
        }
        pct(self.0.clone(), p).as_secs_f64() * 1000.0
    }
}

/// Run `n` requests with `c` in flight at once; return (questions/s, latencies).
pub(crate) async fn closed_loop(
    url: &str,
    bodies: &[Value],
    c: usize,
) -> anyhow::Result<(f64, Latencies)> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    let next = Arc::new(AtomicUsize::new(0));
    let bodies = Arc::new(bodies.to_vec());
    let start = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..c {
        let (next, bodies, url) = (next.clone(), bodies.clone(), url.to_string());
        tasks.push(tokio::spawn(async move {
            let client = reqwest::Client::new();
            let mut lat = Vec::new();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(body) = bodies.get(i) else { break };
                lat.push(time_request(&client, &url, body).await?);
            }
            Ok::<_, anyhow::Error>(lat)
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await??);
    }
    let wall = start.elapsed().as_secs_f64();
    Ok((bodies.len() as f64 / wall, Latencies(all)))
}

pub(crate) fn on_off(flag: Option<bool>) -> &'static str {
    match flag {
        Some(true) => "on",
        Some(false) => "off",
        None => "unknown",
    }
}

/// The full side-by-side suite (issue 6): raw llama.cpp against the server, in one process.
pub async fn suite(model_spec: &str, runs: usize, requests: usize) -> anyhow::Result<()> {
    let resolved = hub::resolve(model_spec, true)?;
    if resolved.kind == hub::Kind::Sparrow {
        return suite_direct(model_spec, runs, requests).await;
    }
    let raw = backend_llama::LlamaBackend::load(
        &resolved.weights,
        backend_llama::LlamaConfig::default(),
    )?;
    let mut plain = crate::plain::PlainEvaluator::new(&raw, 8192)?;
    // llama.cpp as a user gets it: its own context defaults (flash attention auto).
    let mut stock = crate::plain::PlainEvaluator::defaults(&raw, 8192)?;

    // (a) to (f) evaluate every request in full: no prefix cache (section (g) measures it).
    let start_server = |jobs: usize| {
        let mut o = vllm_srun::ServeOptions {
            models: vec![model_spec.to_string()],
            port: 0,
            prefix_cache_tokens: 0,
            ..vllm_srun::ServeOptions::default()
        };
        o.scheduler.max_queued_jobs = jobs;
        o
    };
    let (registry, base) = serve_in_process(start_server(256)).await?;
    let model = wait(|| registry.ready(None)).await?;
    let name = model.meta.name.clone();
    let url = format!("{base}/v1/systemone");
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(600))
        .build()?;
    let sequences = |body: &Value| -> anyhow::Result<Vec<Vec<engine::Token>>> {
        match protocol::parse_decision_body(body, protocol::Schema::V5)
            .map_err(|e| anyhow::anyhow!(e.message))?
        {
            protocol::DecisionBody::Single(r) => {
                model.question_sequences(&r).map_err(anyhow::Error::from)
            }
            protocol::DecisionBody::Batch { .. } => Err(anyhow::anyhow!("not a single request")),
        }
    };
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!(
        "bench suite: model {name}, {} threads, runs {runs}, requests {requests}",
        raw_threads()
    );

    // (a) raw llama.cpp on the exact tokens of one rendered question vs (b) the same over HTTP.
    let state = long_state(0);
    let body = one_question(&name, &state);
    let seq = sequences(&body)?
        .pop()
        .ok_or_else(|| anyhow::anyhow!("no question rendered"))?;
    let cand = [seq[seq.len() - 1]];
    time_request(&client, &url, &body).await?;
    tokio::task::block_in_place(|| plain.evaluate(&seq, &cand))?;
    tokio::task::block_in_place(|| stock.evaluate(&seq, &cand))?;
    let (mut ta, mut ts, mut tb) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..runs {
        let t = Instant::now();
        tokio::task::block_in_place(|| plain.evaluate(&seq, &cand))?;
        ta.push(t.elapsed());
        let t = Instant::now();
        tokio::task::block_in_place(|| stock.evaluate(&seq, &cand))?;
        ts.push(t.elapsed());
        tb.push(time_request(&client, &url, &body).await?);
    }
    let (ours, defaults, b) = (median(ta), median(ts), median(tb));
    let a = ours.min(defaults);
    println!(
        "(a) raw llama.cpp, one question's {} tokens: median {:.1} ms on llama.cpp's defaults (flash attention auto), {:.1} ms on the server's settings (flash attention {}); the faster is the baseline",
        seq.len(),
        ms(defaults),
        ms(ours),
        on_off(engine::Backend::info(&raw).flash_attention)
    );
    println!(
        "    the server's load-time probe chose flash attention {}: {:?}",
        on_off(model.info().flash_attention),
        model.info().flash_attention_probe
    );
    println!(
        "(b) the same question over HTTP:             median {:.1} ms",
        ms(b)
    );
    println!(
        "    (b)/(a) = {:.3}  [target <= 1.0]",
        b.as_secs_f64() / a.as_secs_f64()
    );
    // (b2) A question the server has not seen: where the model's config asks for content-free
    // calibration, its empty-state branch rides in this forward (later askings remember it).
    let mut tf = Vec::new();
    for i in 0..runs {
        let mut fresh = body.clone();
        let q = &mut fresh["questions"]["route"]["instructions"];
        *q = json!(format!(
            "{} (asked {} time)",
            q.as_str().unwrap_or_default(),
            i + 1
        ));
        tf.push(time_request(&client, &url, &fresh).await?);
    }
    let first = median(tf);
    println!(
        "(b2) the same question first seen (content-free calibration {}): median {:.1} ms; (b2)/(a) = {:.3}, (b2)/(b) = {:.3}",
        if model.config.content_free.is_empty() { "off" } else { "on: its empty-state branch included" },
        ms(first),
        first.as_secs_f64() / a.as_secs_f64(),
        first.as_secs_f64() / b.as_secs_f64()
    );
    drop(stock);

    // (c) six questions vs (d) one about one ~200-token state.
    let six = json!({"model": name, "state": state, "questions": questions(6)});
    let (c, d) = alternate(&client, &url, &six, &body, runs).await?;
    println!("(c) six questions, one request: median {:.1} ms", ms(c));
    println!("(d) one question:               median {:.1} ms", ms(d));
    println!(
        "    (c)/(d) = {:.3}  [target <= 1.6]",
        c.as_secs_f64() / d.as_secs_f64()
    );

    // (c2) ten yes/no questions vs one question about the same state.
    let ten = json!({"model": name, "state": state, "questions": yes_no(10)});
    let (ten_ms, one_ms) = alternate(&client, &url, &ten, &body, runs).await?;
    println!("(c2) ten yes/no, one request: median {:.1} ms", ms(ten_ms));
    println!("     one question:            median {:.1} ms", ms(one_ms));
    println!(
        "     ten/one = {:.3}  [target <= 2.0]",
        ten_ms.as_secs_f64() / one_ms.as_secs_f64()
    );

    // (c3) a `states` batch of 8 entries x 3 questions vs the same 8 requests one after another.
    let decisions = format!("{base}/v1/decisions");
    let entries: Vec<Value> = (0..8)
        .map(|i| json!({"state": long_state(100 + i), "questions": questions(3)}))
        .collect();
    let batch = json!({"model": name, "states": entries.iter().enumerate()
        .map(|(i, e)| (format!("s{i}"), e.clone())).collect::<serde_json::Map<_, _>>()});
    let singles: Vec<Value> = entries
        .iter()
        .map(|e| json!({"model": name, "state": e["state"], "questions": e["questions"]}))
        .collect();
    time_request(&client, &decisions, &batch).await?;
    let (mut tb8, mut ts8) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        tb8.push(time_request(&client, &decisions, &batch).await?);
        let t = Instant::now();
        for single in &singles {
            time_request(&client, &decisions, single).await?;
        }
        ts8.push(t.elapsed());
    }
    let (b8, s8) = (median(tb8), median(ts8));
    println!(
        "(c3) one `states` batch, 8 entries x 3 questions: median {:.1} ms",
        ms(b8)
    );
    println!(
        "     the same 8 requests one after another:       median {:.1} ms",
        ms(s8)
    );
    println!(
        "     batch/separate = {:.3}  [target <= 0.9]",
        b8.as_secs_f64() / s8.as_secs_f64()
    );

    // (e) throughput over distinct states at concurrency 1, 4, 16, and raw sequential.
    let bodies: Vec<Value> = (1..=requests)
        .map(|i| one_question(&name, &long_state(i)))
        .collect();
    let mut raw_seqs = Vec::new();
    for b in &bodies {
        raw_seqs.extend(sequences(b)?);
    }
    let t = Instant::now();
    for s in &raw_seqs {
        let cand = [s[s.len() - 1]];
        tokio::task::block_in_place(|| plain.evaluate(s, &cand))?;
    }
    let raw_qps = raw_seqs.len() as f64 / t.elapsed().as_secs_f64();
    println!("(e) raw llama.cpp sequential: {raw_qps:.3} questions/s (no result cache anywhere)");
    let mut sustainable = 0.0;
    for conc in [1usize, 4, 16] {
        let before = rss_bytes();
        let (run, grown) = peak_rss(closed_loop(&url, &bodies, conc)).await;
        let (qps, lat) = run?;
        if conc == 1 {
            sustainable = qps;
        }
        println!(
            "    concurrency {conc:>2}: {qps:.3} questions/s = {:.2}x raw  p50 {:.0} ms  p99 {:.0} ms  [target >= 0.95x at 4 and 16]",
            qps / raw_qps,
            lat.ms(0.5),
            lat.ms(0.99)
        );
        // The process also holds the raw baseline's model and context.
        println!(
            "                    peak resident memory {:.0} MiB (+{:.0} MiB during the run)",
            (before + grown) as f64 / 1048576.0,
            grown as f64 / 1048576.0
        );
    }

    // (f) 4x the sustainable load, open loop, on a server with a small queue.
    let small = vllm_srun::bind(start_server(4)).await?;
    let small_registry = small.registry.clone();
    let small_url = format!("http://{}/v1/systemone", small.addr);
    tokio::spawn(small.run());
    while small_registry.ready(None).is_err() {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let rate = (sustainable * 4.0).max(0.1);
    let total = requests.max(8) * 2;
    let gap = Duration::from_secs_f64(1.0 / rate);
    let mut tasks = Vec::new();
    let start = Instant::now();
    for i in 0..total {
        let due = start + gap * i as u32;
        tokio::time::sleep_until(due.into()).await;
        let (url, body) = (
            small_url.clone(),
            one_question(&name, &long_state(1000 + i)),
        );
        tasks.push(tokio::spawn(async move {
            let client = reqwest::Client::builder()
                .timeout(Duration::from_secs(600))
                .build()
                .ok()?;
            let t = Instant::now();
            let resp = client.post(&url).json(&body).send().await.ok()?;
            let status = resp.status().as_u16();
            resp.bytes().await.ok()?;
            Some((status, t.elapsed()))
        }));
    }
    let (mut ok, mut refused, mut lost, mut other) = (0, 0, 0, 0);
    let mut refusal_times = Vec::new();
    for t in tasks {
        match t.await.ok().flatten() {
            Some((200, _)) => ok += 1,
            Some((429 | 529, d)) => {
                refused += 1;
                refusal_times.push(d);
            }
            Some(_) => other += 1,
            None => lost += 1,
        }
    }
    println!(
        "(f) {total} requests at {rate:.2}/s (4x the sustainable {sustainable:.3}/s), queue limit 4: \
         200 {ok}, 429/529 {refused} ({:.0}%), other {other}, lost {lost}; refusal median {:.1} ms  [targets: lost 0, median <= 50 ms]",
        100.0 * refused as f64 / total as f64,
        Latencies(refusal_times).ms(0.5)
    );
    drop(plain);
    prefix_cache(model_spec, runs, a).await
}

/// (g) The prefix cache, on a server with its default budget: one question about a state it
/// has not seen (only the system prompt is cached), then another question about the same
/// state (its state is cached), a new state each run; `raw` is (a), raw llama.cpp on one
/// question's full token count.
async fn prefix_cache(model_spec: &str, runs: usize, raw: Duration) -> anyhow::Result<()> {
    let o = vllm_srun::ServeOptions {
        models: vec![model_spec.to_string()],
        port: 0,
        ..vllm_srun::ServeOptions::default()
    };
    let budget = o.prefix_cache_tokens;
    let (registry, base) = serve_in_process(o).await?;
    let model = wait(|| registry.ready(None)).await?;
    let name = model.meta.name.clone();
    let url = format!("{base}/v1/systemone");
    let client = reqwest::Client::new();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let second = |state: &str| {
        json!({"model": name, "state": state, "questions": {"urgent": {"type": "noul",
            "instructions": "Does the customer ask for a reply within a day?"}}})
    };
    time_request(&client, &url, &one_question(&name, &long_state(5000))).await?;
    time_request(&client, &url, &second(&long_state(5000))).await?;
    let (mut tf, mut ts) = (Vec::new(), Vec::new());
    for i in 0..runs {
        let state = long_state(6000 + i);
        tf.push(time_request(&client, &url, &one_question(&name, &state)).await?);
        ts.push(time_request(&client, &url, &second(&state)).await?);
    }
    let (first, again) = (median(tf), median(ts));
    println!("(g) prefix cache of {budget} tokens:");
    println!(
        "    one question about a new state (system prompt cached): median {:.1} ms; /(a) = {:.3}  [target <= 0.95]",
        ms(first),
        first.as_secs_f64() / raw.as_secs_f64()
    );
    println!(
        "    another question about the same state (state cached):  median {:.1} ms; /first = {:.3}  [target <= 0.35]",
        ms(again),
        again.as_secs_f64() / first.as_secs_f64()
    );
    Ok(())
}

/// The suite for a direct (Sparrow) model: the engine alone vs over HTTP, one question's
/// p50/p99, six questions vs one, and questions/s at concurrency 1, 4 and 16 (one-question
/// requests, then six-question requests), client and server in this one process.
pub(crate) async fn suite_direct(
    model_spec: &str,
    runs: usize,
    requests: usize,
) -> anyhow::Result<()> {
    let (model, base) = serve_decision_model(model_spec).await?;
    let name = model.meta.name.clone();
    let url = format!("{base}/v1/systemone");
    let client = reqwest::Client::new();
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    println!("bench suite (direct model): {name}, runs {runs}, requests {requests}");

    // (a) the engine alone (parse, tokenize, forward, readout) vs (b) the same over HTTP.
    let body = one_question(&name, STATE);
    let parsed = protocol::parse_decision_body(&body, protocol::Schema::V5)
        .map_err(|e| anyhow::anyhow!(e.message.clone()))?;
    for _ in 0..50 {
        model.decide(&parsed, Instant::now()).await?;
        time_request(&client, &url, &body).await?;
    }
    let (mut ta, mut tb) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        let t = Instant::now();
        model.decide(&parsed, Instant::now()).await?;
        ta.push(t.elapsed());
        tb.push(time_request(&client, &url, &body).await?);
    }
    let (a, b) = (Latencies(ta), Latencies(tb));
    println!(
        "(a) one question, the engine alone: p50 {:.1} us  p99 {:.1} us",
        a.ms(0.5) * 1e3,
        a.ms(0.99) * 1e3
    );
    println!(
        "(b) one question over HTTP:          p50 {:.1} us  p99 {:.1} us  [target p50 <= 1000 us]",
        b.ms(0.5) * 1e3,
        b.ms(0.99) * 1e3
    );

    // (c) six questions vs (d) one, over HTTP.
    let six = json!({"model": name, "state": STATE, "questions": questions(6)});
    let (mut tc, mut td) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        tc.push(time_request(&client, &url, &six).await?);
        td.push(time_request(&client, &url, &body).await?);
    }
    let (c, d) = (median(tc), median(td));
    println!(
        "(c) six questions: median {:.1} us; (d) one: median {:.1} us; (c)/(d) = {:.2}",
        us(c),
        us(d),
        c.as_secs_f64() / d.as_secs_f64()
    );

    // (e) throughput over distinct states.
    for (n_questions, label) in [(1usize, "one-question"), (6, "six-question")] {
        let bodies: Vec<Value> = (0..requests)
            .map(|i| json!({"model": name, "state": long_state(i), "questions": questions(n_questions)}))
            .collect();
        closed_loop(&url, &bodies[..bodies.len().min(200)], 4).await?;
        for conc in [1usize, 4, 16] {
            let (rps, lat) = closed_loop(&url, &bodies, conc).await?;
            println!(
                "(e) {label} requests, concurrency {conc:>2}: {:.0} questions/s  p50 {:.0} us  p99 {:.0} us{}",
                rps * n_questions as f64,
                lat.ms(0.5) * 1e3,
                lat.ms(0.99) * 1e3,
                if conc == 16 { "  [target >= 5000 questions/s]" } else { "" }
            );
        }
    }
    Ok(())
}

/// Long inputs: one decision on a 2 KB text and on a 10 MB text, both with a 512-token budget
/// (`options.max_tokens: 512`, `overflow: truncate`), alternating over HTTP in one process;
/// then plain whole-text tokenization of the 10 MB text for contrast.
pub async fn long_inputs(model_spec: &str, runs: usize) -> anyhow::Result<()> {
    let o = vllm_srun::ServeOptions {
        models: vec![model_spec.to_string()],
        port: 0,
        max_request_bytes: 64 << 20,
        ..vllm_srun::ServeOptions::default()
    };
    let (registry, base) = serve_in_process(o).await?;
    let model = wait(|| registry.ready(None)).await?;
    let url = format!("{base}/v1/decisions");
    let unit = "2026-11-29T10:00:00Z worker-7 INFO request 4471 served in 12 ms; cache hit for \
                key user:9913, queue depth 3, retries 0, upstream ok.\n";
    let text = |bytes: usize| unit.repeat(bytes / unit.len() + 1)[..bytes].to_string();
    let body = |state: String| -> anyhow::Result<Vec<u8>> {
        serde_json::to_vec(&json!({
            "state": state,
            "questions": {"q": {"type": "noul", "instructions": "Do the logs show an error?", "overflow": "truncate"}},
            "options": {"max_tokens": 512}
        }))
        .map_err(anyhow::Error::from)
    };
    let short = body(text(2 << 10))?;
    let long = body(text(10 << 20))?;
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(600))
        .build()?;
    let send = |b: Vec<u8>| {
        let client = client.clone();
        let url = url.clone();
        async move {
            let t = Instant::now();
            let resp = client
                .post(&url)
                .header("content-type", "application/json")
                .body(b)
                .send()
                .await?;
            let status = resp.status();
            let v: Value = resp.json().await?;
            if !status.is_success() || v["answers"]["q"]["noul"].as_f64().is_none() {
                return Err(anyhow::anyhow!("{status}: {v}"));
            }
            Ok::<(Duration, Value), anyhow::Error>((t.elapsed(), v))
        }
    };
    println!(
        "long inputs: model {}, 512-token budget (overflow truncate), {runs} runs each, alternating",
        model.meta.name
    );
    send(short.clone()).await?;
    send(long.clone()).await?;
    let (mut ts, mut tl, mut ms, mut ml) = (Vec::new(), Vec::new(), 0u64, 0u64);
    let mut usage = (Value::Null, Value::Null);
    for _ in 0..runs {
        let (r, m) = peak_rss(send(short.clone())).await;
        let (t, v) = r?;
        ts.push(t);
        ms = ms.max(m);
        usage.0 = v["usage"].clone();
        let (r, m) = peak_rss(send(long.clone())).await;
        let (t, v) = r?;
        tl.push(t);
        ml = ml.max(m);
        usage.1 = v["usage"].clone();
    }
    let mib = |b: u64| b as f64 / (1 << 20) as f64;
    let (s, l) = (median(ts), median(tl));
    println!(
        "   2 KB text: median {:8.1} ms, peak RSS growth {:6.1} MiB, usage {}",
        s.as_secs_f64() * 1e3,
        mib(ms),
        usage.0
    );
    println!(
        "  10 MB text: median {:8.1} ms, peak RSS growth {:6.1} MiB, usage {}",
        l.as_secs_f64() * 1e3,
        mib(ml),
        usage.1
    );
    println!(
        "  10 MB / 2 KB time ratio: {:.2}",
        l.as_secs_f64() / s.as_secs_f64()
    );
    // For contrast: what reading the whole 10 MB text would cost in tokenization alone.
    let resolved = hub::resolve(model_spec, false)?;
    let tok = backend_llama::LlamaBackend::load_tokenizer(&resolved.weights)?;
    let big = text(10 << 20);
    let t = Instant::now();
    let (n, m) =
        peak_rss(async { engine::Backend::tokenize(&tok, &big, false).map(|t| t.len()) }).await;
    println!(
        "  whole-text tokenization of the 10 MB text (not done by the server): {} tokens in {:.1} ms, peak RSS growth {:.1} MiB",
        n?,
        t.elapsed().as_secs_f64() * 1e3,
        mib(m)
    );
    Ok(())
}

/// Decision adapters (issue 36): the question a model's package has a head for, answered by
/// the head and by the base readout, one request each about a new state ([`long_state`]:
/// nothing cached but the system prompt), alternating so that drift hits both alike. The
/// head's features ride on the same forward as the base readout's labels, so the ratio is its
/// whole cost.
pub async fn adapters(model_spec: &str, runs: usize) -> anyhow::Result<()> {
    let resolved = hub::resolve(model_spec, true)?;
    let heads = vllm_srun::decision_adapters(
        model_spec,
        resolved.dir.as_deref(),
        resolved.entry.as_ref().and_then(|e| e.decision_adapters),
    )?
    .ok_or_else(|| anyhow::anyhow!("{model_spec} has no decision adapters"))?;
    let question = heads
        .questions()
        .first()
        .map(|q| (*q).clone())
        .ok_or_else(|| anyhow::anyhow!("{model_spec}'s decision adapters have no head"))?;
    let o = vllm_srun::ServeOptions {
        models: vec![model_spec.to_string()],
        port: 0,
        generate: None,
        ..vllm_srun::ServeOptions::default()
    };
    let (registry, base) = serve_in_process(o).await?;
    let model = wait(|| registry.ready(None)).await?;
    let name = model.meta.name.clone();
    let url = format!("{base}/v1/decisions");
    let client = reqwest::Client::new();
    let ask = |state: String, adapter: bool| {
        let mut q = question.clone();
        q["decision_adapter"] = json!(adapter);
        json!({"model": name, "state": state, "questions": {"q": q}})
    };
    // Warm-up: the base's content-free answer and both paths once.
    time_request(&client, &url, &ask(long_state(8000), false)).await?;
    time_request(&client, &url, &ask(long_state(8001), true)).await?;
    let (mut head, mut plain) = (Vec::new(), Vec::new());
    for i in 0..runs {
        head.push(time_request(&client, &url, &ask(long_state(8100 + 2 * i), true)).await?);
        plain.push(time_request(&client, &url, &ask(long_state(8101 + 2 * i), false)).await?);
    }
    let (head, plain) = (median(head), median(plain));
    println!(
        "adapters: {name}, {runs} runs, one question about a new state: head median {:.1} ms, \
         base readout median {:.1} ms; head/base = {:.3}  [target <= 1.1]",
        head.as_secs_f64() * 1000.0,
        plain.as_secs_f64() * 1000.0,
        head.as_secs_f64() / plain.as_secs_f64()
    );
    Ok(())
}

/// Heads on an encoder backbone (`adapt --model minilm-l6`) against the 1.5B path, served
/// side by side in one process: one of the package's questions about a new ~300-token state,
/// and every question it has about one state, asked of both, alternating.
pub async fn heads(package: &str, model_spec: &str, runs: usize) -> anyhow::Result<()> {
    let heads = vllm_srun::decision_adapters(package, Some(std::path::Path::new(package)), None)?
        .ok_or_else(|| anyhow::anyhow!("{package} has no decision heads"))?;
    let all: Vec<Value> = heads.questions().into_iter().cloned().collect();
    let first = all
        .first()
        .cloned()
        .ok_or_else(|| anyhow::anyhow!("{package} has no head"))?;
    let o = vllm_srun::ServeOptions {
        models: vec![package.to_string(), model_spec.to_string()],
        port: 0,
        generate: None,
        ..vllm_srun::ServeOptions::default()
    };
    let (registry, base) = serve_in_process(o).await?;
    let names: Vec<String> = [package, model_spec]
        .iter()
        .map(|spec| {
            std::path::Path::new(spec)
                .file_name()
                .map_or(spec.to_string(), |n| n.to_string_lossy().into_owned())
        })
        .collect();
    for name in &names {
        wait(|| registry.ready(Some(name))).await?;
    }
    let url = format!("{base}/v1/decisions");
    let client = reqwest::Client::new();
    let body = |model: &str, state: String, questions: &[Value]| {
        let q: serde_json::Map<String, Value> = questions
            .iter()
            .enumerate()
            .map(|(i, q)| (format!("q{i}"), q.clone()))
            .collect();
        json!({"model": model, "state": state, "questions": q})
    };
    for name in &names {
        time_request(&client, &url, &body(name, long_state(9000), &all)).await?;
    }
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!(
        "heads: {} ({} questions) against {}, {runs} runs, one request at a time",
        names[0],
        all.len(),
        names[1]
    );
    for (what, questions) in [
        ("1 question", vec![first.clone()]),
        ("per text", all.clone()),
    ] {
        let mut times = [Vec::new(), Vec::new()];
        for i in 0..runs {
            for (t, name) in times.iter_mut().zip(&names) {
                let state = long_state(9100 + i);
                t.push(time_request(&client, &url, &body(name, state, &questions)).await?);
            }
        }
        let [h, b] = times;
        println!(
            "  {what:<10}: heads p50 {:7.1} ms p99 {:7.1} ms | {} p50 {:8.1} ms p99 {:8.1} ms | ratio {:.3}",
            ms(median(h.clone())),
            ms(pct(h.clone(), 0.99)),
            names[1],
            ms(median(b.clone())),
            ms(pct(b.clone(), 0.99)),
            median(h).as_secs_f64() / median(b).as_secs_f64()
        );
    }
    Ok(())
}

/// What the customer asks for, one choice of four options about [`view_state`].
fn wanted() -> Value {
    json!({"type": "choice", "instructions": "What does the customer want?",
           "criteria": {"o1": "a replacement part", "o2": "a refund of the order",
                        "o3": "a discount on a future order", "o4": "nothing yet, only information"}})
}

/// A support ticket of about 300 tokens, made distinct by `i`.
fn view_state(i: usize) -> String {
    format!(
        "{} When I called on Monday the agent read out a case number that I wrote down as \
         CS-4471, but the email I got afterwards says CS-4417, so please check both. The \
         desk is the 160 cm oak model in the dark frame, and the leg that cracked is the front \
         left one, where the cable tray is fixed. I can send more photos or a video if that \
         helps, and I am at home every afternoon this week if a courier needs to collect it.",
        long_state(i)
    )
}

/// Views (issue 61): one choice about a new ~300-token state asked in one view, and in three
/// (`choice_orders` 3: its options shown in three turns, each a branch on the state's cache),
/// by the same weights served twice in one process, alternating. A view should cost only its
/// question's tokens, not another read of the state.
pub async fn views(model_spec: &str, runs: usize) -> anyhow::Result<()> {
    let resolved = hub::resolve(model_spec, true)?;
    let dir = resolved
        .dir
        .ok_or_else(|| anyhow::anyhow!("{model_spec} is not a catalogue model"))?;
    let mut config: Value = match resolved.entry.and_then(|e| e.decision_config) {
        Some(text) => serde_json::from_str(text)?,
        None => json!({}),
    };
    config["choice_orders"] = json!(3);
    let three = std::env::temp_dir().join(format!("vllm-srun-views-{}", std::process::id()));
    std::fs::create_dir_all(&three)?;
    std::fs::write(three.join("decision_config.json"), config.to_string())?;
    let gguf = three.join("model.gguf");
    if !gguf.exists() {
        std::os::unix::fs::symlink(dir.join("model.gguf"), &gguf)?;
    }
    let three_spec = three.to_string_lossy().into_owned();
    let o = vllm_srun::ServeOptions {
        models: vec![model_spec.to_string(), three_spec.clone()],
        port: 0,
        generate: None,
        ..vllm_srun::ServeOptions::default()
    };
    let (registry, base) = serve_in_process(o).await?;
    let one_name = wait(|| registry.ready(Some(model_spec)))
        .await?
        .meta
        .name
        .clone();
    let three_name = three
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    wait(|| registry.ready(Some(&three_name))).await?;
    let url = format!("{base}/v1/decisions");
    let client = reqwest::Client::new();
    let ask = |model: &str, i: usize| json!({"model": model, "state": view_state(i), "questions": {"q": wanted()}});
    let reply: Value = client
        .post(&url)
        .json(&ask(&one_name, 7000))
        .send()
        .await?
        .json()
        .await?;
    time_request(&client, &url, &ask(&three_name, 7001)).await?;
    let (mut one, mut three_t) = (Vec::new(), Vec::new());
    for i in 0..runs {
        one.push(time_request(&client, &url, &ask(&one_name, 7100 + 2 * i)).await?);
        three_t.push(time_request(&client, &url, &ask(&three_name, 7101 + 2 * i)).await?);
    }
    let _ = std::fs::remove_dir_all(&three);
    let (one, three_t) = (median(one), median(three_t));
    println!(
        "views: {one_name}, {runs} runs, one choice of 4 options about a new state \
         ({} tokens read): 1 view median {:.1} ms, 3 views median {:.1} ms; 3/1 = {:.3}  \
         [target <= 1.4]",
        reply["usage"]["input_tokens"],
        one.as_secs_f64() * 1000.0,
        three_t.as_secs_f64() * 1000.0,
        three_t.as_secs_f64() / one.as_secs_f64()
    );
    Ok(())
}
