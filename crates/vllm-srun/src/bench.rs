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
