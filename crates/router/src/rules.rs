//! Decisions from signals: rule trees evaluated over the signals' answers, the matching
//! decisions ranked, and a model chosen by the winner's algorithm. Pure: no I/O, no clock.

use std::collections::HashMap;

use crate::config::{
    Algorithm, Decision, ModelRef, OnUnknown, Operator, Rule, Signal, SignalType, SignalUse,
};

/// What one signal answered.
#[derive(Debug, Clone, PartialEq)]
pub enum SignalValue {
    /// A choice or score: the chosen option and every option's probability.
    Options {
        chosen: String,
        probabilities: HashMap<String, f64>,
    },
    /// A noul (or a span question's noul): P(yes).
    Yes(f64),
    /// Not answered: failed, timed out, or never read.
    Unknown,
}

/// The answers of one request's signals, by signal name.
pub type Signals = HashMap<String, SignalValue>;

/// A rule's outcome: whether it holds, and the probability that it does.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Outcome {
    pub matched: bool,
    pub confidence: f64,
}

/// Evaluate a rule tree. A condition holds when its signal chose the named option (with at
/// least the signal's threshold) or, for a noul, when P(yes) reaches the threshold (0.5 by
/// default); its confidence is that option's probability (P(yes), or 1 − P(yes) for `no`).
/// AND holds when all hold, with the least confidence; OR when any holds, with the greatest
/// confidence among those that hold (or among all when none does); NOT inverts both.
/// A condition on an unknown signal does not hold, with confidence 0 — except a guard
/// signal's `yes` condition, which holds unless the signal sets `on_unknown: no_match`.
pub fn evaluate(rule: &Rule, signals: &Signals, defs: &HashMap<&str, &Signal>) -> Outcome {
    match rule {
        Rule::Tree {
            operator: Operator::And,
            conditions,
        } => {
            let all: Vec<Outcome> = conditions
                .iter()
                .map(|c| evaluate(c, signals, defs))
                .collect();
            Outcome {
                matched: all.iter().all(|o| o.matched),
                confidence: all.iter().map(|o| o.confidence).fold(1.0, f64::min),
            }
        }
        Rule::Tree {
            operator: Operator::Or,
            conditions,
        } => {
            let all: Vec<Outcome> = conditions
                .iter()
                .map(|c| evaluate(c, signals, defs))
                .collect();
            let matched = all.iter().any(|o| o.matched);
            let confidence = all
                .iter()
                .filter(|o| o.matched || !matched)
                .map(|o| o.confidence)
                .fold(0.0, f64::max);
            Outcome {
                matched,
                confidence,
            }
        }
        Rule::Tree {
            operator: Operator::Not,
            conditions,
        } => {
            let inner = conditions
                .first()
                .map(|c| evaluate(c, signals, defs))
                .unwrap_or(Outcome {
                    matched: false,
                    confidence: 0.0,
                });
            Outcome {
                matched: !inner.matched,
                confidence: 1.0 - inner.confidence,
            }
        }
        Rule::Condition { signal, name } => match defs.get(signal.as_str()) {
            Some(def) => condition(
                def,
                signals
                    .get(signal.as_str())
                    .unwrap_or(&SignalValue::Unknown),
                name.as_deref(),
            ),
            None => Outcome {
                matched: false,
                confidence: 0.0,
            },
        },
    }
}

/// One condition `{type: <signal>, name}` on a signal's value: an option's name, or `yes`
/// (also `None`) and `no` for a yes/no signal.
pub fn condition(def: &Signal, value: &SignalValue, name: Option<&str>) -> Outcome {
    let want_yes = name != Some("no");
    match value {
        SignalValue::Options {
            chosen,
            probabilities,
        } => {
            let n = name.unwrap_or_default();
            let p = probabilities.get(n).copied().unwrap_or(0.0);
            Outcome {
                matched: chosen == n && p >= def.threshold.unwrap_or(0.0),
                confidence: p,
            }
        }
        SignalValue::Yes(p) => {
            let t = def.threshold.unwrap_or(0.5);
            if want_yes {
                Outcome {
                    matched: *p >= t,
                    confidence: *p,
                }
            } else {
                Outcome {
                    matched: *p < t,
                    confidence: 1.0 - p,
                }
            }
        }
        SignalValue::Unknown => {
            let guard_yes = def.usage == SignalUse::Guard
                && matches!(def.kind, SignalType::Noul | SignalType::Span)
                && want_yes;
            Outcome {
                matched: guard_yes && def.on_unknown == OnUnknown::Match,
                confidence: 0.0,
            }
        }
    }
}

/// A matching decision and its rule's confidence.
#[derive(Debug, Clone)]
pub struct Ranked<'a> {
    pub decision: &'a Decision,
    pub confidence: f64,
}

/// The decisions whose rules hold, best first: lower tier, then higher confidence, then
/// higher priority, then name. Decisions without rules never match here (only as default).
pub fn rank<'a>(
    decisions: &'a [Decision],
    signals: &Signals,
    defs: &HashMap<&str, &Signal>,
) -> Vec<Ranked<'a>> {
    let mut out: Vec<Ranked> = decisions
        .iter()
        .filter_map(|d| {
            let o = evaluate(d.rules.as_ref()?, signals, defs);
            o.matched.then_some(Ranked {
                decision: d,
                confidence: o.confidence,
            })
        })
        .collect();
    out.sort_by(|a, b| {
        a.decision
            .tier
            .cmp(&b.decision.tier)
            .then(b.confidence.total_cmp(&a.confidence))
            .then(b.decision.priority.cmp(&a.decision.priority))
            .then(a.decision.name.cmp(&b.decision.name))
    });
    out
}

/// The decision's models in the order to try them: the algorithm's choice first, then the
/// others in the decision's order. `latency` gives a model's expected answer time (from its
/// measured time to first token and time per output token), `None` before it is measured.
pub fn choose<'a>(
    d: &'a Decision,
    confidence: f64,
    latency: &dyn Fn(&str) -> Option<f64>,
) -> Vec<&'a ModelRef> {
    let refs = &d.model_refs;
    if refs.is_empty() {
        return Vec::new();
    }
    let first = match &d.algorithm {
        Algorithm::Static => {
            // The first of the highest weight.
            let best = refs.iter().map(|r| r.weight).fold(f64::MIN, f64::max);
            refs.iter().position(|r| r.weight == best).unwrap_or(0)
        }
        Algorithm::Confidence { threshold } => {
            if confidence >= *threshold {
                0
            } else {
                refs.len() - 1
            }
        }
        Algorithm::LatencyAware => {
            // An untried model first (to measure it), else the fastest.
            refs.iter()
                .position(|r| latency(&r.model).is_none())
                .unwrap_or_else(|| {
                    let mut best = 0;
                    for (i, r) in refs.iter().enumerate() {
                        if latency(&r.model).unwrap_or(f64::MAX)
                            < latency(&refs[best].model).unwrap_or(f64::MAX)
                        {
                            best = i;
                        }
                    }
                    best
                })
        }
    };
    let mut order = vec![&refs[first]];
    order.extend(
        refs.iter()
            .enumerate()
            .filter(|(i, _)| *i != first)
            .map(|(_, r)| r),
    );
    order
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::RouterConfig;

    const CONFIG: &str = r#"
deployments:
  - {name: d, workers: ["http://127.0.0.1:1"], models: [m]}
backends:
  - {name: b, url: "http://127.0.0.1:2", models: [small, large]}
signals:
  - {name: task, deployment: d, type: choice, instructions: t, criteria: {math: a, code: b, chat: c}}
  - {name: hard, deployment: d, type: noul, instructions: h}
  - {name: strict, deployment: d, type: noul, instructions: s, threshold: 0.9}
  - {name: level, deployment: d, type: score, instructions: l, criteria: [low, mid, high], threshold: 0.6}
  - {name: jailbreak, deployment: d, type: noul, instructions: j, use: guard}
  - {name: pii, deployment: d, type: noul, instructions: p, use: guard, on_unknown: no_match}
decisions:
  - {name: default, modelRefs: [{model: small}]}
default_decision: default
"#;

    fn base() -> RouterConfig {
        RouterConfig::from_yaml(CONFIG, "t.yaml").unwrap()
    }

    fn rule(yaml: &str) -> Rule {
        serde_norway::from_str(yaml).unwrap()
    }

    fn opts(chosen: &str, ps: &[(&str, f64)]) -> SignalValue {
        SignalValue::Options {
            chosen: chosen.into(),
            probabilities: ps.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
        }
    }

    fn signals() -> Signals {
        let mut s = Signals::new();
        s.insert(
            "task".into(),
            opts("math", &[("math", 0.7), ("code", 0.2), ("chat", 0.1)]),
        );
        s.insert("hard".into(), SignalValue::Yes(0.8));
        s.insert("strict".into(), SignalValue::Yes(0.8));
        s.insert(
            "level".into(),
            opts("high", &[("low", 0.1), ("mid", 0.35), ("high", 0.55)]),
        );
        s.insert("jailbreak".into(), SignalValue::Unknown);
        s.insert("pii".into(), SignalValue::Unknown);
        s
    }

    /// Rule, expected match, expected confidence.
    #[test]
    fn rules_table() {
        let c = base();
        let defs: HashMap<&str, &Signal> = c.signals.iter().map(|s| (s.name.as_str(), s)).collect();
        let s = signals();
        let cases: &[(&str, bool, f64)] = &[
            ("{type: task, name: math}", true, 0.7),
            ("{type: task, name: code}", false, 0.2),
            ("{type: hard}", true, 0.8),
            ("{type: hard, name: no}", false, 0.2),
            // The signal's threshold: 0.8 < 0.9.
            ("{type: strict}", false, 0.8),
            ("{type: strict, name: no}", true, 0.2),
            // A score level chosen below its threshold (0.55 < 0.6) does not hold.
            ("{type: level, name: high}", false, 0.55),
            ("{operator: AND, conditions: [{type: task, name: math}, {type: hard}]}", true, 0.7),
            ("{operator: AND, conditions: [{type: task, name: math}, {type: strict}]}", false, 0.7),
            ("{operator: OR, conditions: [{type: task, name: code}, {type: hard}]}", true, 0.8),
            ("{operator: OR, conditions: [{type: task, name: code}, {type: task, name: chat}]}", false, 0.2),
            // OR's confidence is among the conditions that hold, not the largest overall.
            ("{operator: OR, conditions: [{type: task, name: math}, {type: hard, name: no}]}", true, 0.7),
            ("{operator: NOT, conditions: [{type: task, name: chat}]}", true, 0.9),
            ("{operator: NOT, conditions: [{type: hard}]}", false, 0.2),
            ("{operator: NOT, conditions: [{operator: OR, conditions: [{type: task, name: code}, {type: strict}]}]}", true, 0.2),
            // Unknown guard signals: jailbreak fails closed, pii (on_unknown: no_match) open.
            ("{type: jailbreak}", true, 0.0),
            ("{type: pii}", false, 0.0),
            ("{type: jailbreak, name: no}", false, 0.0),
            ("{operator: AND, conditions: [{type: jailbreak}, {type: hard}]}", true, 0.0),
        ];
        for (yaml, matched, conf) in cases {
            let o = evaluate(&rule(yaml), &s, &defs);
            assert_eq!(o.matched, *matched, "{yaml}");
            assert!(
                (o.confidence - conf).abs() < 1e-9,
                "{yaml}: {}",
                o.confidence
            );
        }
        // An unknown routing signal never holds.
        let mut s2 = s.clone();
        s2.insert("task".into(), SignalValue::Unknown);
        let o = evaluate(&rule("{type: task, name: math}"), &s2, &defs);
        assert!(!o.matched);
        let o = evaluate(
            &rule("{operator: NOT, conditions: [{type: task, name: math}]}"),
            &s2,
            &defs,
        );
        assert!(o.matched);
    }

    fn decision(name: &str, tier: u32, priority: i64, rule_yaml: &str) -> Decision {
        Decision {
            name: name.into(),
            description: None,
            priority,
            tier,
            rules: Some(rule(rule_yaml)),
            model_refs: vec![],
            algorithm: Algorithm::Static,
            action: crate::config::Action::Route,
            message: None,
        }
    }

    #[test]
    fn ranking_tier_then_confidence_then_priority_then_name() {
        let c = base();
        let defs: HashMap<&str, &Signal> = c.signals.iter().map(|s| (s.name.as_str(), s)).collect();
        let s = signals();
        let names = |ds: &[Decision]| -> Vec<String> {
            rank(ds, &s, &defs)
                .iter()
                .map(|r| r.decision.name.clone())
                .collect()
        };
        let math = "{type: task, name: math}"; // 0.7
        let hard = "{type: hard}"; // 0.8
                                   // Tier first: the tier-0 decision wins with less confidence.
        assert_eq!(
            names(&[decision("a", 1, 0, hard), decision("b", 0, 0, math)]),
            ["b", "a"]
        );
        // Same tier: confidence.
        assert_eq!(
            names(&[decision("a", 1, 100, math), decision("b", 1, 0, hard)]),
            ["b", "a"]
        );
        // Same tier and confidence: priority.
        assert_eq!(
            names(&[decision("a", 1, 1, math), decision("b", 1, 5, math)]),
            ["b", "a"]
        );
        // Full tie: name.
        assert_eq!(
            names(&[decision("z", 1, 1, math), decision("m", 1, 1, math)]),
            ["m", "z"]
        );
        // Non-matching and rule-less decisions are left out.
        let mut none = decision("x", 0, 0, "{type: task, name: chat}");
        assert!(names(std::slice::from_ref(&none)).is_empty());
        none.rules = None;
        assert!(names(&[none]).is_empty());
    }

    fn refs(d: &mut Decision, models: &[(&str, f64)]) {
        d.model_refs = models
            .iter()
            .map(|(m, w)| ModelRef {
                model: m.to_string(),
                use_reasoning: false,
                reasoning_effort: None,
                weight: *w,
            })
            .collect();
    }

    #[test]
    fn algorithms_choose() {
        let mut d = decision("d", 1, 0, "{type: hard}");
        refs(&mut d, &[("small", 1.0), ("large", 2.0)]);
        let none = |_: &str| None;
        let order = |d: &Decision, c: f64, t: &dyn Fn(&str) -> Option<f64>| -> Vec<String> {
            choose(d, c, t).iter().map(|r| r.model.clone()).collect()
        };
        assert_eq!(order(&d, 0.9, &none), ["large", "small"]);
        d.algorithm = Algorithm::Confidence { threshold: 0.75 };
        assert_eq!(order(&d, 0.8, &none), ["small", "large"]);
        assert_eq!(order(&d, 0.7, &none), ["large", "small"]);
        d.algorithm = Algorithm::LatencyAware;
        assert_eq!(
            order(&d, 0.0, &|m: &str| (m == "small").then_some(0.1)),
            ["large", "small"]
        );
        let t = |m: &str| Some(if m == "small" { 0.1 } else { 0.5 });
        assert_eq!(order(&d, 0.0, &t), ["small", "large"]);
    }
}
