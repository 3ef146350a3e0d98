//! Signals: the decision questions the rules read, asked of their deployments in one
//! request per deployment and model (state-once: every question branches from one read of
//! the text). Routing signals read a bounded view (head and tail) of the last user message;
//! guard signals read what the client wrote, turn by turn ([`conversation`]), each turn in
//! windows, answered together in the same batch.

use protocol::member;
use std::collections::{BTreeMap, HashMap};

use serde_json::{json, Map, Value};

use crate::config::{Deployment, OnUnscanned, Signal, SignalType, SignalUse, WorkerSchema};
use crate::rules::{SignalValue, Signals};

/// Most guard windows one request reads; text past them is not scanned (the rules decide
/// on what was read).
pub const MAX_WINDOWS: usize = 64;

/// The texts of a chat request: its last user message (what routing reads) and the texts a
/// guard reads, oldest first. A guard reads what the client wrote, not the assistant's
/// replies (the model's output), in turns: each user message with the messages that came
/// just before it (a system prompt, tool results), as `role: content` lines. A turn reads
/// the same on every later request that carries it, so the worker's prefix cache answers it
/// again without a forward and only the new turn costs (the spec's history-aware rule: one
/// batch entry per earlier message). A system prompt is read with the message it frames, as
/// a whole conversation was read before.
pub fn conversation(body: &Map<String, Value>) -> (String, Vec<String>) {
    let mut last_user = String::new();
    let mut turns = Vec::new();
    let mut turn = String::new();
    if let Some(messages) = body.get(member::MESSAGES).and_then(Value::as_array) {
        for m in messages {
            let role = m
                .get(member::ROLE)
                .and_then(Value::as_str)
                .unwrap_or("user");
            let text = content_text(m.get(member::CONTENT));
            if text.is_empty() || role == "assistant" {
                continue;
            }
            if !turn.is_empty() {
                turn.push_str("\n\n");
            }
            turn.push_str(role);
            turn.push_str(": ");
            turn.push_str(&text);
            if role == "user" {
                last_user = text;
                turns.push(std::mem::take(&mut turn));
            }
        }
    }
    if !turn.is_empty() {
        turns.push(turn);
    }
    if last_user.is_empty() {
        last_user = turns.last().cloned().unwrap_or_default();
    }
    (last_user, turns)
}

/// A message's text: a string, or the `text` parts of a list.
fn content_text(c: Option<&Value>) -> String {
    match c {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| p.get(member::TEXT).and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// At most `max` characters: the text, or its head and tail around a marker.
pub fn routing_view(text: &str, max: usize) -> String {
    let n = text.chars().count();
    if n <= max {
        return text.to_string();
    }
    let half = max / 2;
    let head: String = text.chars().take(half).collect();
    let tail: String = text.chars().skip(n - half).collect();
    format!("{head}\n…\n{tail}")
}

/// Texts in windows of `size` characters, each text's windows from its own start, at most
/// [`MAX_WINDOWS`] in all (the earliest); whether they were all.
pub fn windows(texts: &[String], size: usize) -> (Vec<String>, bool) {
    let all: Vec<String> = texts
        .iter()
        .flat_map(|t| {
            let chars: Vec<char> = t.chars().collect();
            chars
                .chunks(size.max(1))
                .map(|c| c.iter().collect::<String>())
                .collect::<Vec<_>>()
        })
        .collect();
    let complete = all.len() <= MAX_WINDOWS;
    (all.into_iter().take(MAX_WINDOWS).collect(), complete)
}

/// The question a signal asks.
fn question(s: &Signal, schema: WorkerSchema) -> Value {
    let mut q = Map::new();
    let kind = match s.kind {
        SignalType::Choice => "choice",
        SignalType::Noul => "noul",
        SignalType::Score => "score",
        SignalType::Span => "span",
    };
    q.insert(member::TYPE.into(), json!(kind));
    q.insert(member::INSTRUCTIONS.into(), json!(s.instructions));
    if let Some(c) = &s.criteria {
        q.insert(member::CRITERIA.into(), c.clone());
    }
    if schema == WorkerSchema::V5 {
        if let Some(p) = &s.preset {
            q.insert(member::PRESET.into(), json!(p));
        }
        if s.usage == SignalUse::Guard {
            q.insert(member::OVERFLOW.into(), json!("window"));
        }
        if let Some(o) = &s.over {
            q.insert(member::OVER.into(), o.clone());
        }
        if let Some(r) = s.require_full_input {
            q.insert(member::REQUIRE_FULL_INPUT.into(), json!(r));
        }
    }
    Value::Object(q)
}

/// One call to make: the endpoint path and its body.
#[derive(Debug, Clone, PartialEq)]
pub struct Call {
    pub path: &'static str,
    pub body: Value,
    /// Guard windows this call asks about, and whether the windows cover the whole text.
    pub windows: usize,
    pub whole: bool,
}

/// The calls that ask `signals` (all of one deployment and model) about a conversation
/// (`guarded`: the turns guards read, see [`conversation`]):
/// one `/v1/decisions` (a batch when guards read windows) on vllm-sr/5.0, one
/// `/v1/systemone` per text on systemone/0.2 (which has no batch).
pub fn calls(
    dep: &Deployment,
    model: &str,
    signals: &[&Signal],
    routing_text: &str,
    guarded: &[String],
    timeout_ms: u64,
) -> Vec<Call> {
    let mut entries: Vec<(String, String, Map<String, Value>)> = Vec::new();
    let routing: Map<String, Value> = signals
        .iter()
        .filter(|s| s.usage == SignalUse::Routing)
        .map(|s| (s.name.clone(), question(s, dep.schema)))
        .collect();
    if !routing.is_empty() {
        entries.push((
            "routing".into(),
            routing_view(routing_text, dep.routing_view),
            routing,
        ));
    }
    let guard: Map<String, Value> = signals
        .iter()
        .filter(|s| s.usage == SignalUse::Guard)
        .map(|s| (s.name.clone(), question(s, dep.schema)))
        .collect();
    let mut whole = true;
    let mut count = 0;
    if !guard.is_empty() {
        let (ws, complete) = windows(guarded, dep.scan_window);
        whole = complete;
        count = ws.len();
        for (i, w) in ws.into_iter().enumerate() {
            entries.push((format!("guard-{i}"), w, guard.clone()));
        }
    }
    match dep.schema {
        WorkerSchema::Standard => entries
            .into_iter()
            .map(|(name, state, questions)| Call {
                path: "/v1/systemone",
                body: json!({member::MODEL: model, member::STATE: state, member::QUESTIONS: questions}),
                windows: usize::from(name.starts_with("guard-")),
                whole,
            })
            .collect(),
        WorkerSchema::V5 => {
            let mut options = json!({ member::DEADLINE_MS: timeout_ms });
            if let Some(t) = dep.input.max_tokens.filter(|_| !guard.is_empty()) {
                options[member::MAX_TOKENS] = json!(t);
            }
            let body = if entries.len() == 1 {
                let (_, state, questions) = entries.remove(0);
                json!({member::MODEL: model, member::STATE: state, member::QUESTIONS: questions, member::OPTIONS: options})
            } else {
                let states: Map<String, Value> = entries
                    .into_iter()
                    .map(|(name, state, questions)| {
                        (name, json!({member::STATE: state, member::QUESTIONS: questions}))
                    })
                    .collect();
                json!({member::MODEL: model, member::STATES: states, member::OPTIONS: options})
            };
            vec![Call {
                path: "/v1/decisions",
                body,
                windows: count,
                whole,
            }]
        }
    }
}

/// One answer as a signal value; an error answer (or none) is unknown.
pub fn value(kind: SignalType, answer: Option<&Value>) -> SignalValue {
    let Some(a) = answer.filter(|a| a.get("error").is_none()) else {
        return SignalValue::Unknown;
    };
    match kind {
        SignalType::Noul | SignalType::Span => a
            .get("noul")
            .and_then(Value::as_f64)
            .map_or(SignalValue::Unknown, SignalValue::Yes),
        SignalType::Choice | SignalType::Score => {
            let Some(ps) = a.get("probabilities").and_then(Value::as_object) else {
                return SignalValue::Unknown;
            };
            let probabilities: HashMap<String, f64> = ps
                .iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_f64()?)))
                .collect();
            let chosen = a
                .get("choice")
                .and_then(Value::as_str)
                .map(str::to_string)
                .or_else(|| {
                    probabilities
                        .iter()
                        .max_by(|x, y| x.1.total_cmp(y.1))
                        .map(|(k, _)| k.clone())
                });
            match chosen {
                Some(chosen) => SignalValue::Options {
                    chosen,
                    probabilities,
                },
                None => SignalValue::Unknown,
            }
        }
    }
}

/// The signals' values from the answers of `calls` (in the same order; `None` for a call
/// that failed or timed out). A guard signal takes, over the windows that answered, the
/// highest P(yes) (the first answer for options); none answered: unknown.
pub fn read(signals: &[&Signal], calls: &[Call], answers: &[Option<Value>]) -> Signals {
    // Per entry name: its answers object.
    let mut entries: BTreeMap<String, Value> = BTreeMap::new();
    for (call, answer) in calls.iter().zip(answers) {
        let Some(answer) = answer else { continue };
        if let Some(states) = answer.get(member::STATES).and_then(Value::as_object) {
            for (name, r) in states {
                if let Some(a) = r.get("answers") {
                    entries.insert(name.clone(), a.clone());
                }
            }
        } else if let Some(a) = answer.get("answers") {
            // A single request: name it by what it asked.
            let guard = call
                .body
                .get(member::QUESTIONS)
                .and_then(Value::as_object)
                .is_some_and(|q| {
                    signals
                        .iter()
                        .any(|s| s.usage == SignalUse::Guard && q.contains_key(&s.name))
                });
            let name = if guard {
                format!("guard-{}", entries.len())
            } else {
                "routing".into()
            };
            entries.insert(name, a.clone());
        }
    }
    // Guard windows asked, and whether they cover the whole text.
    let asked: usize = calls.iter().map(|c| c.windows).sum();
    let whole = calls.iter().all(|c| c.whole);
    let mut out = Signals::new();
    for s in signals {
        let v = match s.usage {
            SignalUse::Routing => {
                value(s.kind, entries.get("routing").and_then(|a| a.get(&s.name)))
            }
            SignalUse::Guard => {
                let read: Vec<SignalValue> = entries
                    .iter()
                    .filter(|(k, _)| k.starts_with("guard-"))
                    .map(|(_, a)| value(s.kind, a.get(&s.name)))
                    .filter(|v| *v != SignalValue::Unknown)
                    .collect();
                if (!whole || read.len() < asked) && s.on_unscanned == OnUnscanned::Unknown {
                    SignalValue::Unknown
                } else {
                    read.into_iter()
                        .fold(SignalValue::Unknown, |acc, v| match (acc, v) {
                            (SignalValue::Yes(a), SignalValue::Yes(b)) => {
                                SignalValue::Yes(a.max(b))
                            }
                            (SignalValue::Unknown, v) => v,
                            (acc, _) => acc,
                        })
                }
            }
        };
        out.insert(s.name.clone(), v);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::RouterConfig;

    const CONFIG: &str = r#"
deployments:
  - {name: d, workers: ["http://127.0.0.1:1"], models: [m], routing_view: 100, scan_window: 64}
  - {name: s, workers: ["http://127.0.0.1:1"], models: [m2], schema: systemone/0.2}
backends:
  - {name: b, url: "http://127.0.0.1:2", models: [small]}
signals:
  - {name: task, deployment: d, type: choice, instructions: t, criteria: {math: a, chat: c}}
  - {name: hard, deployment: d, type: noul, instructions: h}
  - {name: jailbreak, deployment: d, type: noul, instructions: j, use: guard, preset: jailbreak}
  - {name: task2, deployment: s, type: choice, instructions: t, criteria: {math: a, chat: c}}
  - {name: jb2, deployment: s, type: noul, instructions: j, use: guard, preset: jailbreak}
decisions:
  - {name: default, modelRefs: [{model: small}]}
default_decision: default
"#;

    #[test]
    fn views_and_windows_count_characters() {
        assert_eq!(routing_view("héllo", 10), "héllo");
        let v = routing_view(&"é".repeat(30), 10);
        assert_eq!(v, format!("{}\n…\n{}", "é".repeat(5), "é".repeat(5)));
        let (w, all) = windows(&["ab".repeat(5), "cd".into()], 3);
        assert_eq!(w, ["aba", "bab", "aba", "b", "cd"]);
        assert!(all);
        let (w, all) = windows(&["x".repeat(MAX_WINDOWS * 2 + 1)], 2);
        assert_eq!(w.len(), MAX_WINDOWS);
        assert!(!all);
    }

    #[test]
    fn conversation_reads_strings_and_parts() {
        let body = json!({"messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": [{"type": "text", "text": "first"}]},
            {"role": "assistant", "content": "ok"},
            {"role": "user", "content": "second"}
        ]});
        let (last, guarded) = conversation(body.as_object().unwrap());
        assert_eq!(last, "second");
        assert_eq!(
            guarded,
            ["system: Be brief.\n\nuser: first", "user: second"]
        );
        // A message reads the same on the next turn: earlier texts are unchanged.
        let mut next = body.clone();
        next["messages"].as_array_mut().unwrap().extend([
            json!({"role": "assistant", "content": "sure"}),
            json!({"role": "user", "content": "third"}),
        ]);
        let (last, more) = conversation(next.as_object().unwrap());
        assert_eq!(last, "third");
        assert_eq!(more[..2], guarded[..]);
        assert_eq!(more[2], "user: third");
        // Tool results after the last user message are a turn of their own.
        next["messages"]
            .as_array_mut()
            .unwrap()
            .push(json!({"role": "tool", "content": "42"}));
        let (last, more) = conversation(next.as_object().unwrap());
        assert_eq!(last, "third");
        assert_eq!(more.last().map(String::as_str), Some("tool: 42"));
    }

    #[test]
    fn one_batch_per_v5_deployment_and_split_requests_for_the_standard() {
        let c = RouterConfig::from_yaml(CONFIG, "t.yaml").unwrap();
        let d: Vec<&Signal> = c.signals.iter().filter(|s| s.deployment == "d").collect();
        let text = ["y".repeat(100)];
        let calls_d = calls(&c.deployments[0], "m", &d, "route me", &text, 500);
        assert_eq!(calls_d.len(), 1);
        let b = &calls_d[0].body;
        assert_eq!(calls_d[0].path, "/v1/decisions");
        assert_eq!(b["states"]["routing"]["state"], "route me");
        assert!(b["states"]["routing"]["questions"]["task"].is_object());
        assert!(b["states"]["routing"]["questions"]
            .get("jailbreak")
            .is_none());
        assert_eq!(
            b["states"]["guard-0"]["questions"]["jailbreak"]["overflow"],
            "window"
        );
        assert_eq!(
            b["states"]["guard-0"]["questions"]["jailbreak"]["preset"],
            "jailbreak"
        );
        assert_eq!(b["states"]["guard-1"]["state"], "y".repeat(36));
        assert_eq!(b["options"]["deadline_ms"], 500);

        let s: Vec<&Signal> = c.signals.iter().filter(|s| s.deployment == "s").collect();
        let calls_s = calls(
            &c.deployments[1],
            "m2",
            &s,
            "route me",
            &["short".into()],
            500,
        );
        assert_eq!(calls_s.len(), 2);
        assert!(calls_s
            .iter()
            .all(|c| c.path == "/v1/systemone" && c.body.get("options").is_none()));
        assert!(calls_s[1].body["questions"]["jb2"].get("preset").is_none());
        assert!(calls_s[1].body["questions"]["jb2"]
            .get("overflow")
            .is_none());

        // Answers read back, guards as the highest over windows that answered.
        let answer = json!({"states": {
            "routing": {"answers": {"task": {"choice": "math", "probabilities": {"math": 0.8, "chat": 0.2}}, "hard": {"noul": 0.3}}},
            "guard-0": {"answers": {"jailbreak": {"noul": 0.1}}},
            "guard-1": {"answers": {"jailbreak": {"noul": 0.7}}},
            "guard-2": {"answers": {"jailbreak": {"error": "deadline_exceeded"}}}
        }});
        let v = read(&d, &calls_d, &[Some(answer)]);
        assert_eq!(v["hard"], SignalValue::Yes(0.3));
        assert_eq!(v["jailbreak"], SignalValue::Yes(0.7));
        assert!(matches!(&v["task"], SignalValue::Options { chosen, .. } if chosen == "math"));
        let v = read(&d, &calls_d, &[None]);
        assert!(v.values().all(|x| *x == SignalValue::Unknown));
        // One of two windows answered: best effort decides on it; `unknown` does not.
        let two = json!({"states": {
            "routing": {"answers": {}},
            "guard-0": {"answers": {"jailbreak": {"noul": 0.7}}},
            "guard-1": {"answers": {"jailbreak": {"error": "deadline_exceeded"}}}}});
        assert_eq!(
            read(&d, &calls_d, &[Some(two.clone())])["jailbreak"],
            SignalValue::Yes(0.7)
        );
        let mut strict = c.signals.clone();
        strict[2].on_unscanned = OnUnscanned::Unknown;
        let d2: Vec<&Signal> = strict.iter().filter(|s| s.deployment == "d").collect();
        assert_eq!(
            read(&d2, &calls_d, &[Some(two)])["jailbreak"],
            SignalValue::Unknown
        );

        let v = read(
            &s,
            &calls_s,
            &[
                Some(
                    json!({"answers": {"task2": {"choice": "chat", "probabilities": {"math": 0.1, "chat": 0.9}}}}),
                ),
                Some(json!({"answers": {"jb2": {"noul": 0.9}}})),
            ],
        );
        assert_eq!(v["jb2"], SignalValue::Yes(0.9));
        assert!(matches!(&v["task2"], SignalValue::Options { chosen, .. } if chosen == "chat"));
    }
}
