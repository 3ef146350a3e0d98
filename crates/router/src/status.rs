//! The live state of every model the router publishes (`GET /api/status`): read from the
//! workers' last health answers, which the pools keep. Pure functions over what was seen, so
//! the rules are tested without workers.

use serde::Serialize;

use crate::config::{Deployment, AUTO_MODEL, IN_PROCESS};
use crate::pool::Seen;

/// A model's state on the status page.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum State {
    /// Every worker that serves it is ready.
    Ready,
    /// It answers, but not at full strength: some of its workers are not ready, or (for
    /// `vllm-sr/auto`) some routing signal cannot be asked.
    Degraded,
    /// No worker is ready yet, and some is starting, loading or warming it.
    Loading,
    /// No worker can answer it.
    Unavailable,
}

#[derive(Debug, Clone, Serialize)]
pub struct ModelStatus {
    pub id: String,
    /// `one` (System One) or `two` (System Two).
    pub system: &'static str,
    pub state: State,
    /// The deployment that serves it (System One).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deployment: Option<String>,
    pub workers_ready: usize,
    pub workers: usize,
}

/// One worker's state for a model: its own word for it when it lists its models, else its
/// overall state.
fn worker_state(seen: &Seen, model: &str) -> State {
    let Some(h) = &seen.answer else {
        return State::Unavailable;
    };
    let word = h
        .models
        .iter()
        .find(|(m, _)| m == model)
        .map_or(h.status.as_str(), |(_, w)| w.as_str());
    match word {
        "ready" => State::Ready,
        "degraded" if h.models.iter().all(|(m, _)| m != model) => State::Degraded,
        "starting" | "loading" | "warming" => State::Loading,
        _ => State::Unavailable,
    }
}

/// Combine the workers' states of one model.
fn combine(states: &[State]) -> State {
    let ready = states.iter().filter(|s| **s == State::Ready).count();
    if !states.is_empty() && ready == states.len() {
        State::Ready
    } else if ready > 0 || states.contains(&State::Degraded) {
        State::Degraded
    } else if states.contains(&State::Loading) {
        State::Loading
    } else {
        State::Unavailable
    }
}

/// The System One models of each deployment, with their states. A deployment with `*`
/// lists what its workers report and no other deployment names.
pub fn system_one(deployments: &[(&Deployment, Vec<Seen>)]) -> Vec<ModelStatus> {
    let mut out: Vec<ModelStatus> = Vec::new();
    for (d, seen) in deployments {
        let mut names: Vec<String> = d.models.iter().filter(|m| *m != "*").cloned().collect();
        if d.models.iter().any(|m| m == "*") {
            for s in seen {
                for (m, _) in s.answer.iter().flat_map(|h| &h.models) {
                    let taken = deployments
                        .iter()
                        .any(|(o, _)| o.name != d.name && o.models.contains(m));
                    if !taken && !names.contains(m) {
                        names.push(m.clone());
                    }
                }
            }
        }
        for name in names {
            if out.iter().any(|m| m.id == name) {
                continue;
            }
            let states: Vec<State> = seen.iter().map(|s| worker_state(s, &name)).collect();
            out.push(ModelStatus {
                state: combine(&states),
                workers_ready: states.iter().filter(|s| **s == State::Ready).count(),
                workers: states.len(),
                id: name,
                system: "one",
                deployment: Some(d.name.clone()),
            });
        }
    }
    out
}

/// `vllm-sr/auto`: unavailable (or loading) when none of the chat models it routes to that
/// this router can see is ready; degraded when a signal's model is not ready (the router then
/// routes with that signal unknown); ready otherwise. `signals` are the models the rules ask;
/// `chat` the in-process chat models (a backend reached over HTTP is not watched).
pub fn system_two(one: &[ModelStatus], signals: &[String], chat: &[String]) -> ModelStatus {
    let state_of = |m: &str| one.iter().find(|s| s.id == m).map(|s| s.state);
    let chat_states: Vec<State> = chat.iter().filter_map(|m| state_of(m)).collect();
    let signals_ok = signals
        .iter()
        .all(|m| state_of(m).is_none_or(|s| s == State::Ready));
    let state = if !chat_states.is_empty()
        && !chat_states
            .iter()
            .any(|s| matches!(s, State::Ready | State::Degraded))
    {
        if chat_states.contains(&State::Loading) {
            State::Loading
        } else {
            State::Unavailable
        }
    } else if !signals_ok || chat_states.contains(&State::Degraded) {
        State::Degraded
    } else {
        State::Ready
    };
    ModelStatus {
        id: AUTO_MODEL.to_string(),
        system: "two",
        state,
        deployment: None,
        workers_ready: usize::from(state == State::Ready),
        workers: 1,
    }
}

/// The chat models of backends served by this process (watched through its deployments).
pub fn in_process_chat(backends: &[crate::config::Backend]) -> Vec<String> {
    backends
        .iter()
        .filter(|b| b.url == IN_PROCESS)
        .flat_map(|b| b.models.iter().cloned())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pool::Health;

    fn dep(name: &str, models: &[&str]) -> Deployment {
        serde_norway::from_str(&format!(
            "name: {name}\nworkers: [http://x]\nmodels: [{}]",
            models
                .iter()
                .map(|m| format!("'{m}'"))
                .collect::<Vec<_>>()
                .join(", ")
        ))
        .unwrap()
    }

    fn seen(status: &str, models: &[(&str, &str)]) -> Seen {
        Seen {
            answer: Some(Health {
                ready: status == "ready",
                status: status.into(),
                models: models
                    .iter()
                    .map(|(a, b)| (a.to_string(), b.to_string()))
                    .collect(),
            }),
        }
    }

    #[test]
    fn states_combine_over_workers_and_models() {
        let star = dep("local", &["*"]);
        let named = dep("edge", &["edge-1"]);
        let one = system_one(&[
            (
                &star,
                vec![seen(
                    "degraded",
                    &[("big", "loading"), ("small", "ready"), ("edge-1", "ready")],
                )],
            ),
            (&named, vec![seen("ready", &[]), Seen { answer: None }]),
        ]);
        let get = |id: &str| one.iter().find(|m| m.id == id).unwrap();
        assert_eq!(get("big").state, State::Loading);
        assert_eq!(get("small").state, State::Ready);
        // `edge-1` belongs to the deployment that names it, where one of two workers is
        // unreachable.
        assert_eq!(get("edge-1").deployment.as_deref(), Some("edge"));
        assert_eq!(get("edge-1").state, State::Degraded);
        assert_eq!((get("edge-1").workers_ready, get("edge-1").workers), (1, 2));
        assert_eq!(one.len(), 3);

        let auto = |signals: &[&str], chat: &[&str]| {
            let s: Vec<String> = signals.iter().map(|x| x.to_string()).collect();
            let c: Vec<String> = chat.iter().map(|x| x.to_string()).collect();
            system_two(&one, &s, &c).state
        };
        assert_eq!(auto(&["small"], &["small"]), State::Ready);
        assert_eq!(auto(&["big"], &["small"]), State::Degraded);
        assert_eq!(auto(&["small"], &["big"]), State::Loading);
        // A chat model reached over HTTP is not watched.
        assert_eq!(auto(&["small"], &[]), State::Ready);
    }

    #[test]
    fn an_unreachable_deployment_is_unavailable() {
        let d = dep("edge", &["edge-1"]);
        let one = system_one(&[(&d, vec![Seen { answer: None }])]);
        assert_eq!(one[0].state, State::Unavailable);
        let failed = system_one(&[(&d, vec![seen("failed", &[("edge-1", "failed")])])]);
        assert_eq!(failed[0].state, State::Unavailable);
    }
}
