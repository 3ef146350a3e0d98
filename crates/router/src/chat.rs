//! `POST /v1/chat/completions`: `vllm-sr/auto` asks the signals, ranks the decisions and
//! sends the request to the chosen model; a concrete model name goes straight to its
//! backend. The body is edited as raw JSON (members the router does not know survive), and
//! the answer — streamed or not — passes through byte for byte with the routing headers.

use protocol::member;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderName, HeaderValue, Request, Response};
use serde_json::{json, Map, Value};

use crate::config::{Action, Decision, ModelRef, ReasoningKind, Signal, AUTO_MODEL};
use crate::error::{RouterError, Shape};
use crate::rules::{self, SignalValue, Signals};
use crate::signals;
use crate::Runtime;

/// The routing headers of one answer.
struct Routed {
    /// The decision that chose the models (`none` for a concrete model).
    decision: String,
    headers: Vec<(String, String)>,
}

impl Routed {
    fn apply(&self, h: &mut HeaderMap) {
        for (k, v) in &self.headers {
            if let (Ok(k), Ok(v)) = (HeaderName::try_from(k.as_str()), HeaderValue::from_str(v)) {
                h.insert(k, v);
            }
        }
    }
}

pub async fn chat_completions(
    State(rt): State<Arc<Runtime>>,
    headers: HeaderMap,
    body: Body,
) -> Response<Body> {
    let start = Instant::now();
    let (bytes, mut req, _) =
        match crate::read_object(&rt, &headers, body, Shape::OpenAi, false, None).await {
            Ok(x) => x,
            Err(r) => return r,
        };
    let Some(model) = req
        .get(member::MODEL)
        .and_then(Value::as_str)
        .map(str::to_string)
    else {
        return RouterError::BadRequest {
            message: "model is required".into(),
            param: Some("model".into()),
            reason: None,
        }
        .response(Shape::OpenAi);
    };
    let debug = headers
        .get("x-vsr-debug")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("true"));
    if model != AUTO_MODEL {
        // A concrete model: straight to its backend, body untouched.
        if !rt.backends.contains_key(&model) {
            return RouterError::ModelNotFound(model).response(Shape::OpenAi);
        }
        let routed = Routed {
            decision: "none".into(),
            headers: vec![
                ("x-vsr-selected-model".into(), model.clone()),
                ("x-vsr-selected-decision".into(), "none".into()),
                ("x-vsr-selected-reasoning".into(), "off".into()),
            ],
        };
        let r = ModelRef {
            model,
            use_reasoning: false,
            reasoning_effort: None,
            weight: 1.0,
        };
        return forward(
            &rt,
            &headers,
            bytes,
            None,
            &[&r],
            &routed,
            start,
            Duration::ZERO,
        )
        .await;
    }

    // Signals, one call per deployment and model, within the signal deadline.
    let signal_start = Instant::now();
    let values = ask_signals(&rt, &req).await;
    let signal_time = signal_start.elapsed();
    let defs: HashMap<&str, &Signal> = rt
        .config
        .signals
        .iter()
        .map(|s| (s.name.as_str(), s))
        .collect();
    let ranking = rules::rank(&rt.config.decisions, &values, &defs);
    let default = rt
        .config
        .decisions
        .iter()
        .find(|d| d.name == rt.config.default_decision);
    let (decision, confidence): (&Decision, f64) = match (ranking.first(), default) {
        (Some(r), _) => (r.decision, r.confidence),
        (None, Some(d)) => (d, 0.0),
        (None, None) => return RouterError::BackendUnavailable.response(Shape::OpenAi),
    };
    let mut hs = Vec::new();
    if debug {
        for (group, matched) in matched_groups(&rt.config.signals, &values) {
            hs.push((format!("x-vsr-matched-{group}"), matched));
        }
        hs.push((
            "x-vsr-selected-algorithm".into(),
            decision.algorithm.name().to_string(),
        ));
        let ranked: Vec<String> = ranking
            .iter()
            .map(|r| format!("{}:{:.3}", r.decision.name, r.confidence))
            .collect();
        hs.push((
            "x-vsr-decision-ranking".into(),
            if ranked.is_empty() {
                format!("{}:default", decision.name)
            } else {
                ranked.join(",")
            },
        ));
    }
    hs.push(("x-vsr-selected-decision".into(), decision.name.clone()));

    if decision.action == Action::Block {
        metrics::counter!("vsr_routing_decisions_total", "decision" => decision.name.clone(), "model" => "blocked").increment(1);
        let mut r = RouterError::Blocked {
            decision: decision.name.clone(),
            message: decision.message.clone().unwrap_or_else(|| {
                format!(
                    "the request was blocked by the router's {} rule",
                    decision.name
                )
            }),
        }
        .response(Shape::OpenAi);
        Routed {
            decision: decision.name.clone(),
            headers: hs,
        }
        .apply(r.headers_mut());
        return r;
    }

    // The models to try: the algorithm's order, then the default decision's models.
    // Expected output length for latency-aware choices: the request's cap, up to 256.
    let tokens = ["max_completion_tokens", "max_tokens"]
        .iter()
        .find_map(|k| req.get(*k).and_then(Value::as_f64))
        .unwrap_or(128.0)
        .min(256.0);
    let mut order = rules::choose(decision, confidence, &|m| rt.expected_seconds(m, tokens));
    if let Some(d) = default.filter(|d| d.name != decision.name) {
        for r in &d.model_refs {
            if !order.iter().any(|o| o.model == r.model) {
                order.push(r);
            }
        }
    }
    let routed = Routed {
        decision: decision.name.clone(),
        headers: hs,
    };
    forward(
        &rt,
        &headers,
        Bytes::new(),
        Some(&mut req),
        &order,
        &routed,
        start,
        signal_time,
    )
    .await
}

/// Send to the first model that answers (before any byte reached the client), with the
/// body rewritten for each model when `req` is given (else `raw` as sent).
#[allow(clippy::too_many_arguments)]
async fn forward(
    rt: &Arc<Runtime>,
    headers: &HeaderMap,
    raw: Bytes,
    mut req: Option<&mut Map<String, Value>>,
    order: &[&ModelRef],
    routed: &Routed,
    start: Instant,
    signal_time: Duration,
) -> Response<Body> {
    let mut last_error = None;
    for r in order {
        let Some(backend) = rt.backends.get(&r.model) else {
            continue;
        };
        let body = match req.as_deref_mut() {
            Some(m) => {
                m.insert(member::MODEL.into(), json!(r.model));
                if let Some(f) = &backend.family {
                    apply_reasoning(m, f.kind, &f.parameter, r);
                }
                match serde_json::to_vec(m) {
                    Ok(b) => Bytes::from(b),
                    Err(_) => continue,
                }
            }
            None => raw.clone(),
        };
        let mut up = Request::post("/v1/chat/completions");
        for (k, v) in headers {
            if !crate::upstream::hop_by_hop(k)
                && k != header::CONTENT_LENGTH
                // The body goes on decoded, as JSON.
                && k != header::CONTENT_ENCODING
                && k != header::CONTENT_TYPE
                && k != header::AUTHORIZATION
                && k.as_str() != "x-api-key"
                && !k.as_str().starts_with("x-vsr-")
            {
                up = up.header(k, v);
            }
        }
        let Ok(up) = up
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(body))
        else {
            continue;
        };
        let sent = Instant::now();
        match backend.upstream.call(up).await {
            Ok(mut resp) if !resp.status().is_server_error() => {
                rt.record_ttft(&r.model, sent.elapsed().as_secs_f64());
                metrics::counter!("vsr_routing_decisions_total",
                    "decision" => routed.decision.clone(),
                    "model" => r.model.clone())
                .increment(1);
                let waited = sent.elapsed();
                let h = resp.headers_mut();
                routed.apply(h);
                for (k, v) in [
                    ("x-vsr-selected-model", r.model.clone()),
                    ("x-vsr-selected-reasoning", reasoning_word(r)),
                ] {
                    if let Ok(v) = HeaderValue::from_str(&v) {
                        h.insert(k, v);
                    }
                }
                // The router's own time: all of it but the signals and the backend's wait.
                let own = start
                    .elapsed()
                    .saturating_sub(signal_time)
                    .saturating_sub(waited);
                metrics::histogram!("vsr_router_overhead_seconds").record(own.as_secs_f64());
                let timing = format!(
                    "vsr-signals;dur={:.3}, vsr-router;dur={:.3}",
                    signal_time.as_secs_f64() * 1e3,
                    own.as_secs_f64() * 1e3
                );
                if let Ok(v) = HeaderValue::from_str(&timing) {
                    h.append("server-timing", v);
                }
                let streamed = h
                    .get(header::CONTENT_TYPE)
                    .and_then(|v| v.to_str().ok())
                    .is_some_and(|v| v.starts_with("text/event-stream"));
                if streamed {
                    return timed_stream(resp, rt.clone(), r.model.clone());
                }
                return resp;
            }
            Ok(resp) => {
                tracing::warn!(model = %r.model, status = %resp.status(), "backend failed; trying the next model");
                last_error = Some(resp.status());
            }
            Err(e) => {
                tracing::warn!(model = %r.model, error = %e, "backend unreachable; trying the next model");
            }
        }
    }
    tracing::warn!(?last_error, "no backend answered");
    let mut resp = RouterError::BackendUnavailable.response(Shape::OpenAi);
    routed.apply(resp.headers_mut());
    resp
}

/// A stream passed through unchanged while its events are timed: the time per event after
/// the first is the model's time per output token, recorded when the stream ends (or the
/// client leaves).
fn timed_stream(resp: Response<Body>, rt: Arc<Runtime>, model: String) -> Response<Body> {
    use futures_util::StreamExt;
    struct Clock {
        rt: Arc<Runtime>,
        model: String,
        first: Option<Instant>,
        last: Option<Instant>,
        events: usize,
    }
    impl Drop for Clock {
        fn drop(&mut self) {
            if let (Some(a), Some(b)) = (self.first, self.last) {
                if self.events > 2 {
                    let per = b.duration_since(a).as_secs_f64() / (self.events - 1) as f64;
                    self.rt.record_tpot(&self.model, per);
                }
            }
        }
    }
    impl Clock {
        fn tick(&mut self, events: usize) {
            let now = Instant::now();
            self.first.get_or_insert(now);
            self.last = Some(now);
            self.events += events;
        }
    }
    let mut clock = Clock {
        rt,
        model,
        first: None,
        last: None,
        events: 0,
    };
    let (parts, body) = resp.into_parts();
    let stream = body.into_data_stream().map(move |item| {
        if let Ok(b) = &item {
            let n = b.windows(6).filter(|w| *w == b"data: ").count();
            if n > 0 {
                clock.tick(n);
            }
        }
        item
    });
    Response::from_parts(parts, Body::from_stream(stream))
}

/// The reasoning the router chose, as the header says it: the effort, `on`, or `off`.
fn reasoning_word(r: &ModelRef) -> String {
    match (&r.reasoning_effort, r.use_reasoning) {
        (Some(e), true) => e.clone(),
        (None, true) => "on".into(),
        _ => "off".into(),
    }
}

/// Write the decision's reasoning into the body, as the model's family takes it.
fn apply_reasoning(m: &mut Map<String, Value>, kind: ReasoningKind, parameter: &str, r: &ModelRef) {
    match kind {
        ReasoningKind::ChatTemplateKwargs => {
            let kw = m
                .entry("chat_template_kwargs")
                .or_insert_with(|| Value::Object(Map::new()));
            if !kw.is_object() {
                *kw = Value::Object(Map::new());
            }
            if let Some(o) = kw.as_object_mut() {
                o.insert(parameter.to_string(), json!(r.use_reasoning));
            }
        }
        ReasoningKind::ReasoningEffort => {
            if r.use_reasoning {
                let effort = r
                    .reasoning_effort
                    .clone()
                    .unwrap_or_else(|| "medium".into());
                m.insert(parameter.to_string(), json!(effort));
            } else {
                m.remove(parameter);
            }
        }
    }
}

/// `x-vsr-matched-<group>` values: a chosen option as `signal:option`, a noul that holds
/// as its name.
fn matched_groups(defs: &[Signal], values: &Signals) -> BTreeMap<String, String> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for s in defs {
        // A known value whose own condition holds: the chosen option, or yes.
        let item = match values.get(&s.name) {
            Some(v @ SignalValue::Options { chosen, .. })
                if rules::condition(s, v, Some(chosen)).matched =>
            {
                Some(format!("{}:{chosen}", s.name))
            }
            Some(v @ SignalValue::Yes(_)) if rules::condition(s, v, None).matched => {
                Some(s.name.clone())
            }
            _ => None,
        };
        if let Some(item) = item {
            out.entry(s.group.clone()).or_default().push(item);
        }
    }
    out.into_iter().map(|(k, v)| (k, v.join(","))).collect()
}

/// Ask every signal the rules read: one call per deployment and model, all at once, each
/// bounded by the signal deadline. A call that fails leaves its signals unknown.
async fn ask_signals(rt: &Runtime, req: &Map<String, Value>) -> Signals {
    if rt.signal_groups.is_empty() {
        return Signals::new();
    }
    let (routing_text, guarded) = signals::conversation(req);
    let timeout = Duration::from_millis(rt.config.global.model_catalog.signal_timeout_ms);
    let tasks = rt.signal_groups.iter().map(|(di, model, members)| {
        let sigs: Vec<&Signal> = members.iter().map(|i| &rt.config.signals[*i]).collect();
        let routing_text = &routing_text;
        let guarded = &guarded;
        async move {
            let Some((d, pool)) = rt.deployments.get(*di) else {
                return Signals::new();
            };
            let dep = &d.name;
            let calls = signals::calls(d, model, &sigs, routing_text, guarded, timeout.as_millis() as u64);
            let started = Instant::now();
            let answers = futures_util::future::join_all(calls.iter().map(|c| async {
                let lease = pool.pick_checked().await.ok()?;
                let body = serde_json::to_vec(&c.body).ok()?;
                let req = Request::post(c.path)
                    .header(header::CONTENT_TYPE, "application/json")
                    .body(Body::from(body))
                    .ok()?;
                let read = async {
                    let resp = lease.worker.upstream.call(req).await.ok()?;
                    if !resp.status().is_success() {
                        return None;
                    }
                    let b = axum::body::to_bytes(resp.into_body(), 64 * 1024 * 1024).await.ok()?;
                    serde_json::from_slice::<Value>(&b).ok()
                };
                tokio::time::timeout(timeout, read).await.ok().flatten()
            }))
            .await;
            metrics::histogram!("vsr_signal_seconds", "deployment" => dep.clone())
                .record(started.elapsed().as_secs_f64());
            if answers.iter().any(Option::is_none) {
                tracing::warn!(deployment = %dep, "a signal call failed or timed out; its signals are unknown");
            }
            signals::read(&sigs, &calls, &answers)
        }
    });
    let mut out = Signals::new();
    for s in futures_util::future::join_all(tasks).await {
        out.extend(s);
    }
    // Signals never answered are unknown (not absent), so guards see them.
    for s in &rt.config.signals {
        out.entry(s.name.clone()).or_insert(SignalValue::Unknown);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mref(use_reasoning: bool, effort: Option<&str>) -> ModelRef {
        ModelRef {
            model: "m".into(),
            use_reasoning,
            reasoning_effort: effort.map(str::to_string),
            weight: 1.0,
        }
    }

    #[test]
    fn reasoning_is_written_as_the_family_takes_it() {
        let mut m: Map<String, Value> = serde_json::from_value(
            json!({"model": "x", "chat_template_kwargs": {"keep": 1}, "zz_unknown": [1]}),
        )
        .unwrap();
        apply_reasoning(
            &mut m,
            ReasoningKind::ChatTemplateKwargs,
            "enable_thinking",
            &mref(true, None),
        );
        assert_eq!(
            m["chat_template_kwargs"],
            json!({"keep": 1, "enable_thinking": true})
        );
        assert_eq!(m["zz_unknown"], json!([1]));
        apply_reasoning(
            &mut m,
            ReasoningKind::ReasoningEffort,
            "reasoning_effort",
            &mref(true, Some("high")),
        );
        assert_eq!(m["reasoning_effort"], "high");
        apply_reasoning(
            &mut m,
            ReasoningKind::ReasoningEffort,
            "reasoning_effort",
            &mref(false, Some("high")),
        );
        assert!(m.get("reasoning_effort").is_none());
        assert_eq!(reasoning_word(&mref(true, Some("low"))), "low");
        assert_eq!(reasoning_word(&mref(true, None)), "on");
        assert_eq!(reasoning_word(&mref(false, Some("low"))), "off");
    }
}
