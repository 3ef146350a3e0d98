//! `vllm-srun bench`: latency of decision requests over HTTP against a running server,
//! measured side by side in one process and reported as medians and ratios.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

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

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn pct(mut v: Vec<Duration>, p: f64) -> Duration {
    v.sort();
    let i = ((v.len() as f64 - 1.0) * p).round() as usize;
    v[i.min(v.len() - 1)]
}

async fn time_request(
    client: &reqwest::Client,
    url: &str,
    body: &Value,
) -> Result<Duration, String> {
    let t = Instant::now();
    let resp = client
        .post(url)
        .json(body)
        .send()
        .await
        .map_err(|e| e.to_string())?;
    let status = resp.status();
    let text = resp.text().await.map_err(|e| e.to_string())?;
    if !status.is_success() {
        return Err(format!("{status}: {text}"));
    }
    Ok(t.elapsed())
}

/// Run the latency comparison: one question vs six about the same state, alternating, so
/// both see the same machine state. Prints medians, p90s and the ratio.
pub async fn latency(base: &str, model: &str, runs: usize) -> Result<(), String> {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(600))
        .build()
        .map_err(|e| e.to_string())?;
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
pub async fn spans(model_spec: &str, runs: usize) -> Result<(), String> {
    let (model, base) = serve_decision_model(model_spec).await?;
    let name = model.meta.name.clone();
    let url = format!("{base}/v1/decisions");
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(600))
        .build()
        .map_err(|e| e.to_string())?;
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
fn question_tokens(model: &engine::DecisionModel, state: &str) -> Result<usize, String> {
    let body = one_question(&model.meta.name, state);
    match protocol::parse_decision_body(&body, protocol::Schema::Internal).map_err(|e| e.message)? {
        protocol::DecisionBody::Single(r) => {
            let seqs = model.question_sequences(&r).map_err(|e| e.to_string())?;
            Ok(seqs.first().map_or(0, Vec::len))
        }
        protocol::DecisionBody::Batch { .. } => Err("not a single request".into()),
    }
}

/// A support ticket of about 200 tokens, made distinct by `i`.
fn long_state(i: usize) -> String {
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
async fn alternate(
    client: &reqwest::Client,
    url: &str,
    a: &Value,
    b: &Value,
    runs: usize,
) -> Result<(Duration, Duration), String> {
    time_request(client, url, a).await?;
    let (mut ta, mut tb) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        ta.push(time_request(client, url, a).await?);
        tb.push(time_request(client, url, b).await?);
    }
    Ok((median(ta), median(tb)))
}

/// `n` yes/no questions (at most ten) about [`long_state`].
fn yes_no(n: usize) -> Value {
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

fn one_question(model: &str, state: &str) -> Value {
    json!({"model": model, "state": state, "questions": questions(1)})
}

struct Latencies(Vec<Duration>);

impl Latencies {
    fn ms(&self, p: f64) -> f64 {
        if self.0.is_empty() {
            return f64::NAN;
        }
        pct(self.0.clone(), p).as_secs_f64() * 1000.0
    }
}

/// Run `n` requests with `c` in flight at once; return (questions/s, latencies).
async fn closed_loop(url: &str, bodies: &[Value], c: usize) -> Result<(f64, Latencies), String> {
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
            Ok::<_, String>(lat)
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.map_err(|e| e.to_string())??);
    }
    let wall = start.elapsed().as_secs_f64();
    Ok((bodies.len() as f64 / wall, Latencies(all)))
}

fn on_off(flag: Option<bool>) -> &'static str {
    match flag {
        Some(true) => "on",
        Some(false) => "off",
        None => "unknown",
    }
}

/// The full side-by-side suite (issue 6): raw llama.cpp against the server, in one process.
pub async fn suite(model_spec: &str, runs: usize, requests: usize) -> Result<(), String> {
    let resolved = hub::resolve(model_spec, true).map_err(|e| e.to_string())?;
    if resolved.kind == hub::Kind::Sparrow {
        return suite_direct(model_spec, runs, requests).await;
    }
    let raw =
        backend_llama::LlamaBackend::load(&resolved.weights, backend_llama::LlamaConfig::default())
            .map_err(|e| e.to_string())?;
    let mut plain = raw.plain(8192).map_err(|e| e.to_string())?;
    // llama.cpp as a user gets it: its own context defaults (flash attention auto).
    let mut stock = raw.plain_defaults(8192).map_err(|e| e.to_string())?;

    let start_server = |jobs: usize| {
        let mut o = crate::ServeOptions {
            models: vec![model_spec.to_string()],
            port: 0,
            ..crate::ServeOptions::default()
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
        .build()
        .map_err(|e| e.to_string())?;
    let sequences = |body: &Value| -> Result<Vec<Vec<engine::Token>>, String> {
        match protocol::parse_decision_body(body, protocol::Schema::V5).map_err(|e| e.message)? {
            protocol::DecisionBody::Single(r) => {
                model.question_sequences(&r).map_err(|e| e.to_string())
            }
            protocol::DecisionBody::Batch { .. } => Err("not a single request".into()),
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
    let seq = sequences(&body)?.pop().ok_or("no question rendered")?;
    let cand = [seq[seq.len() - 1]];
    time_request(&client, &url, &body).await?;
    tokio::task::block_in_place(|| plain.evaluate(&seq, &cand)).map_err(|e| e.to_string())?;
    tokio::task::block_in_place(|| stock.evaluate(&seq, &cand)).map_err(|e| e.to_string())?;
    let (mut ta, mut ts, mut tb) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..runs {
        let t = Instant::now();
        tokio::task::block_in_place(|| plain.evaluate(&seq, &cand)).map_err(|e| e.to_string())?;
        ta.push(t.elapsed());
        let t = Instant::now();
        tokio::task::block_in_place(|| stock.evaluate(&seq, &cand)).map_err(|e| e.to_string())?;
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
        tokio::task::block_in_place(|| plain.evaluate(s, &cand)).map_err(|e| e.to_string())?;
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
    let small = crate::bind(start_server(4)).await?;
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
    Ok(())
}

/// The suite for a direct (Sparrow) model: the engine alone vs over HTTP, one question's
/// p50/p99, six questions vs one, and questions/s at concurrency 1, 4 and 16 (one-question
/// requests, then six-question requests), client and server in this one process.
async fn suite_direct(model_spec: &str, runs: usize, requests: usize) -> Result<(), String> {
    let (model, base) = serve_decision_model(model_spec).await?;
    let name = model.meta.name.clone();
    let url = format!("{base}/v1/systemone");
    let client = reqwest::Client::new();
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    println!("bench suite (direct model): {name}, runs {runs}, requests {requests}");

    // (a) the engine alone (parse, tokenize, forward, readout) vs (b) the same over HTTP.
    let body = one_question(&name, STATE);
    let parsed = protocol::parse_decision_body(&body, protocol::Schema::V5)
        .map_err(|e| e.message.clone())?;
    for _ in 0..50 {
        model
            .decide(&parsed, Instant::now())
            .await
            .map_err(|e| e.to_string())?;
        time_request(&client, &url, &body).await?;
    }
    let (mut ta, mut tb) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        let t = Instant::now();
        model
            .decide(&parsed, Instant::now())
            .await
            .map_err(|e| e.to_string())?;
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

fn raw_threads() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(2)
}

/// Start a server in this process; return its registry and base URL.
async fn serve_in_process(
    o: crate::ServeOptions,
) -> Result<(std::sync::Arc<engine::Registry>, String), String> {
    let bound = crate::bind(o).await?;
    let registry = bound.registry.clone();
    let base = format!("http://{}", bound.addr);
    tokio::spawn(bound.run());
    Ok((registry, base))
}

/// Serve one decision model in this process on a free port; the model once loaded, and the
/// server's base URL.
async fn serve_decision_model(
    model_spec: &str,
) -> Result<(std::sync::Arc<engine::DecisionModel>, String), String> {
    let o = crate::ServeOptions {
        models: vec![model_spec.to_string()],
        port: 0,
        ..crate::ServeOptions::default()
    };
    let (registry, base) = serve_in_process(o).await?;
    let model = wait(|| registry.ready(None)).await?;
    Ok((model, base))
}

/// Poll `get` until the model it looks up is loaded.
async fn wait<T>(get: impl Fn() -> Result<T, engine::EngineError>) -> Result<T, String> {
    loop {
        match get() {
            Ok(m) => return Ok(m),
            Err(engine::EngineError::NotReady(_) | engine::EngineError::NotLoaded(_)) => {
                tokio::time::sleep(Duration::from_millis(100)).await
            }
            Err(e) => return Err(e.to_string()),
        }
    }
}

/// Resident memory of this process, in bytes.
fn rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| {
            s.split_whitespace()
                .nth(1)
                .and_then(|p| p.parse::<u64>().ok())
        })
        .map_or(0, |pages| pages * 4096)
}

/// Run `f` while sampling resident memory every 2 ms; return its result and the peak growth.
async fn peak_rss<T>(f: impl std::future::Future<Output = T>) -> (T, u64) {
    let base = rss_bytes();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let peak = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(base));
    let sampler = {
        let (stop, peak) = (stop.clone(), peak.clone());
        std::thread::spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                peak.fetch_max(rss_bytes(), std::sync::atomic::Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(2));
            }
        })
    };
    let out = f.await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let _ = sampler.join();
    let grown = peak
        .load(std::sync::atomic::Ordering::Relaxed)
        .saturating_sub(base);
    (out, grown)
}

/// Long inputs: one decision on a 2 KB text and on a 10 MB text, both with a 512-token budget
/// (`options.max_tokens: 512`, `overflow: truncate`), alternating over HTTP in one process;
/// then plain whole-text tokenization of the 10 MB text for contrast.
pub async fn long_inputs(model_spec: &str, runs: usize) -> Result<(), String> {
    let o = crate::ServeOptions {
        models: vec![model_spec.to_string()],
        port: 0,
        max_request_bytes: 64 << 20,
        ..crate::ServeOptions::default()
    };
    let (registry, base) = serve_in_process(o).await?;
    let model = wait(|| registry.ready(None)).await?;
    let url = format!("{base}/v1/decisions");
    let unit = "2026-11-29T10:00:00Z worker-7 INFO request 4471 served in 12 ms; cache hit for \
                key user:9913, queue depth 3, retries 0, upstream ok.\n";
    let text = |bytes: usize| unit.repeat(bytes / unit.len() + 1)[..bytes].to_string();
    let body = |state: String| -> Result<Vec<u8>, String> {
        serde_json::to_vec(&json!({
            "state": state,
            "questions": {"q": {"type": "noul", "instructions": "Do the logs show an error?", "overflow": "truncate"}},
            "options": {"max_tokens": 512}
        }))
        .map_err(|e| e.to_string())
    };
    let short = body(text(2 << 10))?;
    let long = body(text(10 << 20))?;
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(600))
        .build()
        .map_err(|e| e.to_string())?;
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
                .await
                .map_err(|e| e.to_string())?;
            let status = resp.status();
            let v: Value = resp.json().await.map_err(|e| e.to_string())?;
            if !status.is_success() || v["answers"]["q"]["noul"].as_f64().is_none() {
                return Err(format!("{status}: {v}"));
            }
            Ok::<(Duration, Value), String>((t.elapsed(), v))
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
    let resolved = hub::resolve(model_spec, false).map_err(|e| e.to_string())?;
    let tok = backend_llama::LlamaBackend::load_tokenizer(&resolved.weights)
        .map_err(|e| e.to_string())?;
    let big = text(10 << 20);
    let t = Instant::now();
    let (n, m) =
        peak_rss(async { engine::Backend::tokenize(&tok, &big, false).map(|t| t.len()) }).await;
    println!(
        "  whole-text tokenization of the 10 MB text (not done by the server): {} tokens in {:.1} ms, peak RSS growth {:.1} MiB",
        n.map_err(|e| e.to_string())?,
        t.elapsed().as_secs_f64() * 1e3,
        mib(m)
    );
    Ok(())
}

/// Embeddings throughput: texts/s and tokens/s at batch 1, 8 and 32 of 64-token texts, over
/// HTTP (`/v1/embeddings`, the served path) and straight through each candidate forward (the
/// F32 candle path as the baseline, llama.cpp on GGUF copies of the weights), side by side in
/// one process, with each candidate's lowest cosine against the F32 candle vectors.
pub async fn embeddings(model_spec: &str, texts_per_level: usize) -> Result<(), String> {
    let o = crate::ServeOptions {
        models: vec![model_spec.to_string()],
        port: 0,
        ..crate::ServeOptions::default()
    };
    let (registry, base) = serve_in_process(o).await?;
    let model = wait(|| registry.encoder(None)).await?;
    let resolved = hub::resolve(model_spec, false).map_err(|e| e.to_string())?;
    let dir = resolved.dir.ok_or("an encoder is a directory")?;
    let threads = raw_threads();
    use backend_candle::gguf::Precision;
    let mut candidates: Vec<(String, Box<dyn engine::Encoder>)> = vec![(
        "candle F32".into(),
        Box::new(backend_candle::BertEncoder::load(&dir).map_err(|e| e.to_string())?),
    )];
    let pooling = model.info().pooling.clone();
    // Hashed once: each candidate's GGUF copy is keyed by it.
    let sha = hub::sha256_file(&dir.join("model.safetensors")).map_err(|e| e.to_string())?;
    for (precision, flash) in [
        (Precision::F32, true),
        (Precision::F32, false),
        (Precision::F16, true),
        (Precision::Q8_0, true),
    ] {
        let gguf = crate::encoder_gguf(&dir, Some(&sha), &pooling, precision)?;
        let text = backend_candle::BertEncoder::load_text(&dir).map_err(|e| e.to_string())?;
        let config = backend_llama::LlamaEncoderConfig {
            threads,
            flash_attention: flash,
            dtype: precision.name().into(),
            ..Default::default()
        };
        let enc =
            backend_llama::LlamaEncoder::load(&gguf, text, config).map_err(|e| e.to_string())?;
        let name = format!(
            "llama.cpp {}{}",
            precision.name(),
            if flash { ", flash attention" } else { "" }
        );
        candidates.push((name, Box::new(enc)));
    }
    // Texts of exactly 64 tokens (special tokens included), each distinct.
    let words = [
        "invoice", "refund", "parcel", "delivery", "account", "password", "order", "support",
        "customer", "payment", "shipping", "address", "warranty", "return", "receipt", "billing",
    ];
    let text = |i: usize| -> Result<String, String> {
        let mut t = format!("ticket {i}:");
        let mut k = i;
        loop {
            let n = model
                .tokenize(&t, false)
                .map_err(|e| e.to_string())?
                .0
                .len();
            if n >= 64 {
                break;
            }
            t.push(' ');
            t.push_str(words[k % words.len()]);
            k = k.wrapping_mul(31).wrapping_add(7);
        }
        Ok(t)
    };
    let n = texts_per_level.max(32);
    let texts: Vec<String> = (0..n).map(text).collect::<Result<_, _>>()?;
    let ids: Vec<Vec<u32>> = texts
        .iter()
        .map(|s| candidates[0].1.tokenize(s))
        .collect::<Result<_, _>>()
        .map_err(|e| e.to_string())?;
    let total_tokens: usize = ids.iter().map(Vec::len).sum();
    println!(
        "embeddings: model {}, served on {} {}, {} texts per level, {:.1} tokens per text, {threads} threads",
        model.meta.name,
        model.info().engine,
        model.info().dtype,
        n,
        total_tokens as f64 / n as f64
    );
    let reference = candidates[0].1.embed(&ids).map_err(|e| e.to_string())?;
    let client = reqwest::Client::new();
    let url = format!("{base}/v1/embeddings");
    for batch in [1usize, 8, 32] {
        // Warm up once, then time every text in batches of `batch`, one request at a time.
        let warm = json!({"model": model.meta.name, "input": &texts[..batch]});
        time_request(&client, &url, &warm).await?;
        let t = Instant::now();
        for chunk in texts.chunks(batch) {
            let body = json!({"model": model.meta.name, "input": chunk});
            time_request(&client, &url, &body).await?;
        }
        let http = n as f64 / t.elapsed().as_secs_f64();
        println!("  batch {batch:>2}:");
        let mut base_rate = 0.0;
        for (name, enc) in &candidates {
            enc.embed(&ids[..batch]).map_err(|e| e.to_string())?;
            let t = Instant::now();
            let mut vectors = Vec::with_capacity(n);
            for chunk in ids.chunks(batch) {
                vectors.extend(enc.embed(chunk).map_err(|e| e.to_string())?);
            }
            let rate = n as f64 / t.elapsed().as_secs_f64();
            if base_rate == 0.0 {
                base_rate = rate;
            }
            let worst = vectors
                .iter()
                .zip(&reference)
                .map(|(a, b)| cosine(a, b))
                .fold(f64::INFINITY, f64::min);
            println!(
                "    {name:<34} {rate:8.1} texts/s {:9.0} tokens/s | x{:.2} of candle F32 | lowest cosine to candle F32 {worst:.6}",
                total_tokens as f64 * rate / n as f64,
                rate / base_rate
            );
        }
        println!(
            "    {:<34} {http:8.1} texts/s {:9.0} tokens/s | x{:.2} of candle F32",
            format!("served over HTTP ({})", model.info().dtype),
            total_tokens as f64 * http / n as f64,
            http / base_rate
        );
    }
    Ok(())
}

/// Cosine similarity of two vectors.
fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let dot: f64 = a.iter().zip(b).map(|(x, y)| *x as f64 * *y as f64).sum();
    let na: f64 = a.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt();
    let nb: f64 = b.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt();
    dot / (na * nb).max(1e-30)
}

/// A story prompt for generation benches.
const STORY: &str = "Write a long, detailed story about a lighthouse keeper who finds a message \
in a bottle, describing the sea, the weather and the town nearby.";

/// The prompt of concurrent stream `i`: the story prompt, numbered so streams differ.
fn story(i: usize) -> String {
    format!("{STORY} Story number {}.", i + 1)
}

/// One streamed completion: when it was sent, when each text chunk arrived, and its usage.
struct Streamed {
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
async fn stream_completion(
    client: &reqwest::Client,
    base: &str,
    model: &str,
    prompt: &str,
    max_tokens: usize,
) -> Result<Streamed, String> {
    let body = json!({"model": model, "prompt": prompt, "max_tokens": max_tokens,
        "temperature": 0, "stream": true, "stream_options": {"include_usage": true}});
    let sent = Instant::now();
    let mut resp = client
        .post(format!("{base}/v1/completions"))
        .json(&body)
        .send()
        .await
        .map_err(|e| e.to_string())?;
    if !resp.status().is_success() {
        return Err(format!(
            "{}: {}",
            resp.status(),
            resp.text().await.unwrap_or_default()
        ));
    }
    let mut chunks = Vec::new();
    let mut completion_tokens = 0;
    let mut pending = String::new();
    while let Some(bytes) = resp.chunk().await.map_err(|e| e.to_string())? {
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
            let v: Value = serde_json::from_str(data).map_err(|e| e.to_string())?;
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

/// `n` concurrent streams; their total decode rate (tokens after each stream's first, over the
/// time from the earliest first token to the latest last one) and their time to first token.
async fn concurrent(
    client: &reqwest::Client,
    base: &str,
    model: &str,
    n: usize,
    max_tokens: usize,
) -> Result<(f64, Vec<Duration>), String> {
    let tasks: Vec<_> = (0..n)
        .map(|i| {
            let (client, base, model) = (client.clone(), base.to_string(), model.to_string());
            let prompt = story(i);
            tokio::spawn(async move {
                stream_completion(&client, &base, &model, &prompt, max_tokens).await
            })
        })
        .collect();
    let mut all = Vec::new();
    for t in tasks {
        all.push(t.await.map_err(|e| e.to_string())??);
    }
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
async fn start_llama_cpp_python(
    gguf: &std::path::Path,
    threads: usize,
) -> Option<(tokio::process::Child, String)> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .ok()?
        .local_addr()
        .ok()?
        .port();
    let python = std::env::var("VLLM_SRUN_PYTHON").unwrap_or_else(|_| "python3".into());
    let child = tokio::process::Command::new(python)
        .args(["-m", "llama_cpp.server", "--model"])
        .arg(gguf)
        // Queue concurrent requests instead of cutting the running one off (its default).
        .args(["--interrupt_requests", "False"])
        .args([
            "--port",
            &port.to_string(),
            "--n_ctx",
            "4096",
            "--n_threads",
        ])
        .arg(threads.to_string())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .ok()?;
    let base = format!("http://127.0.0.1:{port}");
    let client = reqwest::Client::new();
    for _ in 0..600 {
        if client
            .get(format!("{base}/v1/models"))
            .send()
            .await
            .is_ok_and(|r| r.status().is_success())
        {
            return Some((child, base));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    None
}

/// Generation: one stream's decode rate against raw llama.cpp in this process; four
/// concurrent streams against llama-cpp-python's server on the same GGUF; time to first token;
/// and how long running streams stall while a 1,000-token prompt joins them.
pub async fn generation(model_spec: &str, runs: usize, max_tokens: usize) -> Result<(), String> {
    let resolved = hub::resolve(model_spec, true).map_err(|e| e.to_string())?;
    let raw =
        backend_llama::LlamaBackend::load(&resolved.weights, backend_llama::LlamaConfig::default())
            .map_err(|e| e.to_string())?;
    let mut plain = raw.plain(4096).map_err(|e| e.to_string())?;
    // Room for four running streams and a fifth that joins them.
    let o = crate::ServeOptions {
        models: vec![model_spec.to_string()],
        port: 0,
        generate: Some(engine::GenerateConfig {
            sequences: 5,
            ..engine::GenerateConfig::default()
        }),
        ..crate::ServeOptions::default()
    };
    let (registry, base) = serve_in_process(o).await?;
    let text = wait(|| registry.text(None)).await?;
    let name = text.name().to_string();
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(900))
        .build()
        .map_err(|e| e.to_string())?;
    println!(
        "bench generate: model {name}, {} threads, runs {runs}, {max_tokens} tokens per stream",
        raw_threads()
    );
    let prompt = engine::Backend::tokenize(&raw, STORY, false).map_err(|e| e.to_string())?;
    // Warm both.
    stream_completion(&client, &base, &name, STORY, 8).await?;
    tokio::task::block_in_place(|| plain.greedy(&prompt, 8)).map_err(|e| e.to_string())?;
    let (mut raw_rates, mut ours, mut ttfts) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..runs {
        let s = stream_completion(&client, &base, &name, STORY, max_tokens).await?;
        let n = (s.completion_tokens as usize).max(2);
        ours.push(s.decode_rate());
        ttfts.push(s.ttft());
        let (_, t) =
            tokio::task::block_in_place(|| plain.greedy(&prompt, n)).map_err(|e| e.to_string())?;
        raw_rates.push((n - 1) as f64 / t.as_secs_f64());
    }
    let med = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (r, o1) = (med(raw_rates), med(ours.clone()));
    println!("(a) raw llama.cpp greedy decode, one sequence: median {r:.1} tokens/s");
    println!("(b) one stream over HTTP (/v1/completions):    median {o1:.1} tokens/s");
    println!("    (b)/(a) = {:.3}  [target >= 0.95]", o1 / r);

    let mut four = Vec::new();
    for _ in 0..runs {
        let (rate, t) = concurrent(&client, &base, &name, 4, max_tokens).await?;
        four.push(rate);
        ttfts.extend(t);
    }
    let o4 = med(four);
    println!("(c) four concurrent streams, total decode:     median {o4:.1} tokens/s ({:.2}x one stream)", o4 / o1);
    // The ceiling: the same four prompts decoded raw, one llama.cpp decode per step for all.
    let prompts = (0..4)
        .map(|i| engine::Backend::tokenize(&raw, &story(i), false))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| e.to_string())?;
    let longest = prompts.iter().map(Vec::len).max().unwrap_or(0);
    let mut batched = raw
        .plain_batched((longest + max_tokens) as u32, 4)
        .map_err(|e| e.to_string())?;
    let mut raw4 = Vec::new();
    for _ in 0..runs {
        let (_, t) = tokio::task::block_in_place(|| batched.greedy_batched(&prompts, max_tokens))
            .map_err(|e| e.to_string())?;
        raw4.push((4 * (max_tokens - 1)) as f64 / t.as_secs_f64());
    }
    drop(batched);
    let r4 = med(raw4);
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
        let s = t.await.map_err(|e| e.to_string())??;
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
    tokio::task::block_in_place(|| plain.evaluate(&chunk_tokens, &cand))
        .map_err(|e| e.to_string())?;
    let chunk_time = t.elapsed();
    // The joining prompt itself prefilled raw in chunks of the same size: its later chunks
    // attend to the earlier ones, so its costliest chunk is the one a join must not exceed.
    let long_tokens =
        engine::Backend::tokenize(&raw, &long_prompt, false).map_err(|e| e.to_string())?;
    let own_chunk = tokio::task::block_in_place(|| plain.prefill_chunks(&long_tokens, chunk))
        .map_err(|e| e.to_string())?
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
            let (l1, l4) = (med(one), med(four));
            println!("(e) llama-cpp-python server: one stream {l1:.1} tokens/s, four concurrent {l4:.1} tokens/s");
            println!("    ours/theirs: one stream {:.2}, four concurrent {:.2}  [target >= 2.0]", o1 / l1, o4 / l4);
            let _ = child.kill().await;
        }
    }
    Ok(())
}

/// A chat backend that answers at once with fixed bytes (a stream of eight chunks when
/// asked to stream): what the router's own cost is measured against.
async fn canned_backend() -> Result<String, String> {
    use axum::routing::{get, post};
    const ANSWER: &str = r#"{"id":"chatcmpl-fixed","object":"chat.completion","created":1,"model":"fast","choices":[{"index":0,"message":{"role":"assistant","content":"Hello there."},"finish_reason":"stop"}],"usage":{"prompt_tokens":9,"completion_tokens":3,"total_tokens":12}}"#;
    async fn chat(body: axum::body::Bytes) -> axum::response::Response {
        use axum::response::IntoResponse;
        let stream = serde_json::from_slice::<Value>(&body)
            .ok()
            .and_then(|v| v.get("stream").and_then(Value::as_bool))
            .unwrap_or(false);
        if stream {
            let mut text = String::new();
            for i in 0..8 {
                text.push_str(&format!(
                    "data: {{\"id\":\"chatcmpl-fixed\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"fast\",\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"w{i} \"}},\"finish_reason\":null}}]}}\n\n"
                ));
            }
            text.push_str("data: [DONE]\n\n");
            ([("content-type", "text/event-stream")], text).into_response()
        } else {
            ([("content-type", "application/json")], ANSWER).into_response()
        }
    }
    let app = axum::Router::new()
        .route("/v1/chat/completions", post(chat))
        .route("/health", get(|| async { "ok" }));
    let l = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| e.to_string())?;
    let addr = l.local_addr().map_err(|e| e.to_string())?;
    tokio::spawn(async move { axum::serve(l, app).await });
    Ok(format!("http://{addr}"))
}

/// One open-loop phase: `rate` requests a second for `seconds`, each timed by the client,
/// with the router's own time (`vsr-router` and `vsr-signals` of Server-Timing) when given.
async fn paced(
    url: &str,
    body: &Value,
    rate: usize,
    seconds: usize,
) -> Result<(Vec<Duration>, Vec<f64>, Vec<f64>), String> {
    let client = reqwest::Client::new();
    let n = rate * seconds;
    let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / rate as f64));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let mut tasks = Vec::with_capacity(n);
    for _ in 0..n {
        tick.tick().await;
        let (client, url, body) = (client.clone(), url.to_string(), body.clone());
        tasks.push(tokio::spawn(async move {
            let t = Instant::now();
            let resp = client
                .post(&url)
                .json(&body)
                .send()
                .await
                .map_err(|e| e.to_string())?;
            let status = resp.status();
            let timing = resp
                .headers()
                .get_all("server-timing")
                .iter()
                .filter_map(|v| v.to_str().ok())
                .collect::<Vec<_>>()
                .join(",");
            resp.bytes().await.map_err(|e| e.to_string())?;
            if !status.is_success() {
                return Err(format!("status {status}"));
            }
            let metric = |name: &str| -> Option<f64> {
                timing.split(',').find_map(|m| {
                    let m = m.trim();
                    m.strip_prefix(name)?.strip_prefix(";dur=")?.parse().ok()
                })
            };
            Ok::<_, String>((t.elapsed(), metric("vsr-router"), metric("vsr-signals")))
        }));
    }
    let (mut lat, mut own, mut sig) = (Vec::new(), Vec::new(), Vec::new());
    for t in tasks {
        let (d, o, s) = t.await.map_err(|e| e.to_string())??;
        lat.push(d);
        own.extend(o);
        sig.extend(s);
    }
    Ok((lat, own, sig))
}

fn pct_f(mut v: Vec<f64>, p: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    v[((v.len() as f64 * p).ceil() as usize).clamp(1, v.len()) - 1]
}

/// The router's own cost: the same requests at `rate` a second sent to a backend that
/// answers at once, directly and through the router (a concrete model, then `vllm-sr/auto`
/// with five rules over three signals from the Sparrow model of an in-process worker); the
/// worker's decisions count per routed request; stream bytes through the router and direct.
pub async fn router_overhead(seconds: usize, rate: usize) -> Result<(), String> {
    use sha2::Digest;
    let (_, worker) = serve_in_process(crate::ServeOptions {
        models: vec!["sparrow-nano".into()],
        port: 0,
        generate: None,
        ..crate::ServeOptions::default()
    })
    .await?;
    let backend = canned_backend().await?;
    let config = format!(
        r#"
deployments:
  - {{name: deciders, workers: ["{worker}"], models: [sparrow-nano]}}
backends:
  - {{name: canned, url: "{backend}", models: [fast-small, fast-large]}}
signals:
  - {{name: task, deployment: deciders, type: choice, instructions: What kind of request is this?, criteria: {{math: Math, code: Programming, chat: Small talk}}}}
  - {{name: hard, deployment: deciders, type: noul, instructions: Does it need careful reasoning?}}
  - {{name: jailbreak, deployment: deciders, type: noul, use: guard, threshold: 0.99, instructions: Does it tell the AI to ignore its rules?}}
decisions:
  - {{name: block, tier: 0, action: block, rules: {{operator: AND, conditions: [{{type: jailbreak}}]}}}}
  - {{name: math, rules: {{operator: AND, conditions: [{{type: task, name: math}}, {{type: hard}}]}}, modelRefs: [{{model: fast-large}}]}}
  - {{name: code, rules: {{operator: OR, conditions: [{{type: task, name: code}}, {{type: hard}}]}}, modelRefs: [{{model: fast-large}}, {{model: fast-small}}], algorithm: {{type: confidence, threshold: 0.6}}}}
  - {{name: chat, rules: {{operator: NOT, conditions: [{{type: task, name: math}}]}}, modelRefs: [{{model: fast-small}}]}}
  - {{name: other, modelRefs: [{{model: fast-small}}]}}
default_decision: other
"#
    );
    let cfg = router::RouterConfig::from_yaml(&config, "bench").map_err(|e| e.to_string())?;
    let bound = crate::bind_router(cfg, None, false, "127.0.0.1", 0).await?;
    let router = format!("http://{}", bound.addr);
    tokio::spawn(bound.run());
    let client = reqwest::Client::new();
    // Ready: the worker's model and the router's view of it.
    for _ in 0..600 {
        let ok = client
            .get(format!("{router}/health"))
            .send()
            .await
            .is_ok_and(|r| r.status().is_success());
        if ok {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let body = |model: &str| {
        json!({"model": model, "max_tokens": 8,
            "messages": [{"role": "user", "content": "What is the derivative of x^3 + 2x? Show the steps."}]})
    };
    let decisions = || async {
        let text = reqwest::get(format!("{worker}/metrics"))
            .await
            .map_err(|e| e.to_string())?
            .text()
            .await
            .map_err(|e| e.to_string())?;
        Ok::<f64, String>(
            text.lines()
                .filter(|l| {
                    l.starts_with("vllm_srun_requests_total{")
                        && l.contains("endpoint=\"/v1/decisions\"")
                })
                .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                .sum(),
        )
    };
    // Warm the connections.
    paced(
        &format!("{backend}/v1/chat/completions"),
        &body("fast-small"),
        50,
        1,
    )
    .await?;
    paced(
        &format!("{router}/v1/chat/completions"),
        &body("vllm-sr/auto"),
        50,
        1,
    )
    .await?;
    println!(
        "router overhead: {rate} requests/s for {seconds} s per phase, one process, {} cores",
        raw_threads()
    );
    let (direct, _, _) = paced(
        &format!("{backend}/v1/chat/completions"),
        &body("fast-small"),
        rate,
        seconds,
    )
    .await?;
    let (through, own_pass, _) = paced(
        &format!("{router}/v1/chat/completions"),
        &body("fast-small"),
        rate,
        seconds,
    )
    .await?;
    let before = decisions().await?;
    let (auto, own_auto, signals) = paced(
        &format!("{router}/v1/chat/completions"),
        &body("vllm-sr/auto"),
        rate,
        seconds,
    )
    .await?;
    let calls = decisions().await? - before;
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let row = |name: &str, v: &Vec<Duration>| {
        println!(
            "  {name:<34} p50 {:>7.3} ms  p99 {:>7.3} ms",
            ms(pct(v.clone(), 0.5)),
            ms(pct(v.clone(), 0.99))
        );
    };
    row("backend direct", &direct);
    row("through the router, concrete model", &through);
    row("through the router, vllm-sr/auto", &auto);
    println!(
        "  client-side added by the router (concrete): p50 {:.3} ms, p99 {:.3} ms",
        ms(pct(through.clone(), 0.5)) - ms(pct(direct.clone(), 0.5)),
        ms(pct(through.clone(), 0.99)) - ms(pct(direct.clone(), 0.99))
    );
    println!(
        "  router's own time (Server-Timing vsr-router): concrete p50 {:.3} / p99 {:.3} ms; auto p50 {:.3} / p99 {:.3} ms",
        pct_f(own_pass.clone(), 0.5),
        pct_f(own_pass, 0.99),
        pct_f(own_auto.clone(), 0.5),
        pct_f(own_auto, 0.99)
    );
    println!(
        "  signal call (3 signals, 5 rules): p50 {:.3} / p99 {:.3} ms; worker decisions calls per routed request: {:.3}",
        pct_f(signals.clone(), 0.5),
        pct_f(signals, 0.99),
        calls / auto.len() as f64
    );
    // Streams: the bytes through the router are the backend's.
    let mut s = body("fast-small");
    s["stream"] = json!(true);
    let post = |url: String, body: Value| {
        let client = client.clone();
        async move {
            let r = client
                .post(url)
                .json(&body)
                .send()
                .await
                .map_err(|e| e.to_string())?;
            r.bytes().await.map_err(|e| e.to_string())
        }
    };
    let direct = post(format!("{backend}/v1/chat/completions"), s.clone()).await?;
    s["model"] = json!("vllm-sr/auto");
    let routed = post(format!("{router}/v1/chat/completions"), s).await?;
    let (a, b) = (sha2::Sha256::digest(&direct), sha2::Sha256::digest(&routed));
    println!(
        "  stream SHA-256 direct {} routed {} ({} bytes): {}",
        hex_short(&a),
        hex_short(&b),
        routed.len(),
        if a == b { "equal" } else { "DIFFERENT" }
    );
    Ok(())
}

fn hex_short(d: &[u8]) -> String {
    d.iter().take(8).map(|b| format!("{b:02x}")).collect()
}

/// Percentiles (p50, p99) of durations, microseconds.
fn micros(mut v: Vec<Duration>) -> (f64, f64) {
    v.sort_unstable();
    let at = |p: f64| {
        v.get(((p * v.len() as f64) as usize).min(v.len().saturating_sub(1)))
            .map_or(0.0, |d| d.as_secs_f64() * 1e6)
    };
    (at(0.5), at(0.99))
}

/// The keys service's own costs: verifying a key on SQLite among 10,000, and one admission
/// decision with 10,000 requests waiting (from 10,000 addresses, and from 100), including
/// a push-out when every waiting place is taken.
pub async fn service_costs() -> Result<(), String> {
    use service::admission::{AdmissionConfig, Arrival, Queue, Ticket};
    use service::keys::Secret;
    use service::store::KeyRow;

    let dir = std::env::temp_dir().join(format!("vsr-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let store = service::Store::open(&service::Store::sqlite_url(&dir))
        .await
        .map_err(|e| e.to_string())?;
    let mut secrets = Vec::new();
    for i in 0..10_000 {
        let s = Secret::generate();
        let id = format!("key_{i}");
        store
            .insert_key(&KeyRow {
                id: id.clone(),
                hash: s.hash(),
                prefix: s.shown().to_string(),
                label: String::new(),
                budget: id,
                address: format!("10.0.{}.{}", i / 256, i % 256),
                status: "active".into(),
                created_at: 0,
            })
            .await
            .map_err(|e| e.to_string())?;
        secrets.push(s);
    }
    let mut times = Vec::new();
    let mut state = 7u64;
    let mut next = move || {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1);
        state >> 33
    };
    for _ in 0..5_000 {
        let s = &secrets[(next() % secrets.len() as u64) as usize];
        let t = Instant::now();
        let row = store
            .key_by_hash(&s.hash())
            .await
            .map_err(|e| e.to_string())?;
        times.push(t.elapsed());
        if row.is_none() {
            return Err("a stored key was not found".into());
        }
    }
    let (p50, p99) = micros(times);
    println!("key verification on SQLite (10,000 keys, hash + indexed lookup): p50 {p50:.1} µs, p99 {p99:.1} µs");
    let _ = std::fs::remove_dir_all(&dir);

    for addresses in [10_000u64, 100] {
        let cfg = AdmissionConfig {
            places: 64,
            waiting: 10_000,
            ..AdmissionConfig::default()
        };
        let mut q: Queue<()> = Queue::new(cfg);
        let ticket = |i: u64| Ticket {
            address: format!("a{}", i % addresses).into(),
            key: format!("k{i}").into(),
            tokens: 100,
        };
        let mut grants = std::collections::VecDeque::new();
        let mut i = 0u64;
        while q.waiting() < 10_000 {
            if let Arrival::Start(g) = q.arrive(ticket(i), (), 0) {
                grants.push_back(g);
            }
            i += 1;
        }
        // Steady state: one ends (its place goes to the next), one arrives and waits.
        let (mut release, mut arrive, mut push) = (Vec::new(), Vec::new(), Vec::new());
        for n in 0..20_000 {
            let g = grants.pop_front().ok_or("no grant")?;
            let t = Instant::now();
            let started = q.release(&g, n);
            release.push(t.elapsed());
            grants.extend(started.into_iter().map(|(_, g)| g));
            let t = Instant::now();
            let a = q.arrive(ticket(i), (), n);
            let took = t.elapsed();
            i += 1;
            match a {
                Arrival::Start(g) => grants.push_back(g),
                Arrival::Wait {
                    pushed_out: None, ..
                } => arrive.push(took),
                _ => {}
            }
            // Full: a newcomer from a fresh address pushes out the busiest's newest.
            if n % 10 == 0 {
                let t = Instant::now();
                let a = q.arrive(
                    Ticket {
                        address: format!("fresh{n}").into(),
                        key: format!("fresh{n}").into(),
                        tokens: 100,
                    },
                    (),
                    n,
                );
                if let Arrival::Wait {
                    pushed_out: Some(_),
                    ..
                } = a
                {
                    push.push(t.elapsed());
                }
            }
        }
        let (r50, r99) = micros(release);
        let (a50, a99) = micros(arrive);
        let (p50, p99) = micros(push);
        println!(
            "admission, 10,000 waiting from {addresses} addresses: release + next start p50 {r50:.1} / p99 {r99:.1} µs; \
             arrival p50 {a50:.1} / p99 {a99:.1} µs; push-out p50 {p50:.1} / p99 {p99:.1} µs"
        );
    }
    Ok(())
}
