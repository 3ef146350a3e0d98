//! The router's configuration: parsed from YAML into raw types, then validated as a whole
//! (every reference resolved) before anything starts. Errors name the file, the line and the
//! path of the member at fault.
//!
//! The vocabulary follows vLLM Semantic Router's: signals, decisions whose `rules` are
//! AND/OR/NOT trees of `{type: <signal>, name: <value>}` conditions, `modelRefs` with
//! `use_reasoning`/`reasoning_effort`, per-decision `algorithm`, and `reasoning_families`.

use std::collections::{BTreeMap, HashMap, HashSet};

use serde::Deserialize;
use serde_json::Value;

/// The public model name that asks the router to choose.
pub const AUTO_MODEL: &str = "vllm-sr/auto";

/// A worker or backend address that means "this process".
pub const IN_PROCESS: &str = "in-process";

/// The configuration a router runs with.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouterConfig {
    #[serde(default)]
    pub listeners: Vec<Listener>,
    #[serde(default)]
    pub global: Global,
    #[serde(default)]
    pub deployments: Vec<Deployment>,
    #[serde(default)]
    pub backends: Vec<Backend>,
    #[serde(default)]
    pub signals: Vec<Signal>,
    #[serde(default)]
    pub decisions: Vec<Decision>,
    #[serde(default)]
    pub reasoning_families: BTreeMap<String, ReasoningFamily>,
    /// The decision taken when no other matches (or the signals could not be read).
    pub default_decision: String,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Listener {
    pub name: String,
    #[serde(default = "default_address")]
    pub address: String,
    pub port: u16,
    /// The public body limit.
    #[serde(default = "default_max_request_bytes")]
    pub max_request_bytes: usize,
    #[serde(default)]
    pub apis: Apis,
}

fn default_address() -> String {
    "127.0.0.1".into()
}

fn default_max_request_bytes() -> usize {
    protocol::limits::PUBLIC_REQUEST_BYTES
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Apis {
    #[serde(default)]
    pub systemone: SystemOneApi,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SystemOneApi {
    /// A System One call's budget when the request sets no `options.deadline_ms`.
    #[serde(default = "default_deadline_ms")]
    pub deadline_ms: u64,
    /// The most any request may wait, `options.deadline_ms` included.
    #[serde(default = "default_max_deadline_ms")]
    pub max_deadline_ms: u64,
}

impl Default for SystemOneApi {
    fn default() -> Self {
        SystemOneApi {
            deadline_ms: default_deadline_ms(),
            max_deadline_ms: default_max_deadline_ms(),
        }
    }
}

fn default_deadline_ms() -> u64 {
    30_000
}

fn default_max_deadline_ms() -> u64 {
    600_000
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Global {
    #[serde(default)]
    pub model_catalog: ModelCatalog,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelCatalog {
    /// How long the signals of one chat request may take before the rules decide without them.
    #[serde(default = "default_signal_timeout_ms")]
    pub signal_timeout_ms: u64,
}

impl Default for ModelCatalog {
    fn default() -> Self {
        ModelCatalog {
            signal_timeout_ms: default_signal_timeout_ms(),
        }
    }
}

fn default_signal_timeout_ms() -> u64 {
    3_000
}

/// The System One schema a deployment's workers speak.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub enum WorkerSchema {
    #[serde(rename = "vllm-sr/5.0")]
    V5,
    #[serde(rename = "systemone/0.2")]
    Standard,
}

/// Decision workers serving the same models, balanced by outstanding requests.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Deployment {
    pub name: String,
    /// Worker base URLs (`http://host:port`), or `in-process`.
    pub workers: Vec<String>,
    /// Public model names answered here; `*` takes every name no other deployment lists.
    pub models: Vec<String>,
    #[serde(default = "default_schema")]
    pub schema: WorkerSchema,
    /// Characters of a conversation a routing signal reads: its head and its tail.
    #[serde(default = "default_routing_view")]
    pub routing_view: usize,
    /// Characters per window of a guard signal's whole-text scan.
    #[serde(default = "default_scan_window")]
    pub scan_window: usize,
    #[serde(default)]
    pub input: Input,
    /// Requests one worker holds at once; past it the worker counts as busy.
    #[serde(default = "default_max_outstanding")]
    pub max_outstanding: usize,
}

fn default_schema() -> WorkerSchema {
    WorkerSchema::V5
}

fn default_routing_view() -> usize {
    2_000
}

fn default_scan_window() -> usize {
    8_000
}

fn default_max_outstanding() -> usize {
    64
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Input {
    /// The scan budget guard signals ask for (`options.max_tokens`).
    pub max_tokens: Option<u64>,
}

/// An OpenAI-compatible chat endpoint and the models it serves.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Backend {
    pub name: String,
    /// Base URL without `/v1` (`http://host:port`), or `in-process`.
    pub url: String,
    pub models: Vec<String>,
    /// How reasoning is switched on for these models (a key of `reasoning_families`).
    pub reasoning_family: Option<String>,
    /// Sent as `Authorization: Bearer` to the backend.
    pub api_key: Option<String>,
}

/// Which view of the conversation a signal reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum SignalUse {
    /// The bounded routing view: head and tail within the deployment's `routing_view`.
    #[default]
    Routing,
    /// What the client wrote, turn by turn (`signals::conversation`), each in windows.
    Guard,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SignalType {
    Choice,
    Noul,
    Score,
    Span,
}

/// What a guard rule does when no window of its scan answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum OnUnknown {
    #[default]
    Match,
    NoMatch,
}

/// What a guard signal does when its scan did not read the whole text (a window failed, or
/// the text was longer than the windows one request reads).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum OnUnscanned {
    /// Decide on the windows that were read.
    #[default]
    BestEffort,
    /// Treat the signal as unknown (then `on_unknown` decides).
    Unknown,
}

/// One decision question whose answer conditions read.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Signal {
    pub name: String,
    pub deployment: String,
    /// The deployment's model that answers; default its first model.
    pub model: Option<String>,
    #[serde(rename = "type")]
    pub kind: SignalType,
    pub instructions: String,
    /// Options of a choice or score question (an object, or the ordered list form).
    pub criteria: Option<Value>,
    /// A trained question of the model (`pii`, a router signal).
    pub preset: Option<String>,
    #[serde(default, rename = "use")]
    pub usage: SignalUse,
    /// A noul matches from this probability; a choice or score value needs at least this.
    #[serde(default)]
    pub threshold: Option<f64>,
    /// The `x-vsr-matched-<group>` header its matches are listed in.
    #[serde(default = "default_group")]
    pub group: String,
    #[serde(default)]
    pub on_unknown: OnUnknown,
    #[serde(default)]
    pub on_unscanned: OnUnscanned,
    /// Extension fields a `systemone/0.2` deployment cannot carry.
    pub over: Option<Value>,
    pub require_full_input: Option<bool>,
}

fn default_group() -> String {
    "signals".into()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub enum Operator {
    #[serde(rename = "AND", alias = "and")]
    And,
    #[serde(rename = "OR", alias = "or")]
    Or,
    #[serde(rename = "NOT", alias = "not")]
    Not,
}

/// A rule tree: a condition on one signal, or an operator over conditions.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged, deny_unknown_fields)]
pub enum Rule {
    Tree {
        operator: Operator,
        conditions: Vec<Rule>,
    },
    Condition {
        /// The signal's name.
        #[serde(rename = "type")]
        signal: String,
        /// The option (choice, score) or `yes`/`no` (noul, span; default `yes`).
        name: Option<String>,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    #[default]
    Route,
    /// Answer an OpenAI-shaped error instead of calling a model.
    Block,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelRef {
    pub model: String,
    #[serde(default)]
    pub use_reasoning: bool,
    pub reasoning_effort: Option<String>,
    #[serde(default = "default_weight")]
    pub weight: f64,
}

fn default_weight() -> f64 {
    1.0
}

/// How a decision chooses among its models.
#[derive(Debug, Clone, PartialEq, Deserialize, Default)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum Algorithm {
    /// The first model (of the highest weight).
    #[default]
    Static,
    /// The first (small) model when the decision's confidence reaches `threshold`, else
    /// the last (large) one.
    Confidence { threshold: f64 },
    /// The model with the lowest measured time to first token; untried models first.
    LatencyAware,
}

impl Algorithm {
    pub fn name(&self) -> &'static str {
        match self {
            Algorithm::Static => "static",
            Algorithm::Confidence { .. } => "confidence",
            Algorithm::LatencyAware => "latency_aware",
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Decision {
    pub name: String,
    pub description: Option<String>,
    /// Higher wins among decisions of one tier and equal confidence.
    #[serde(default)]
    pub priority: i64,
    /// Lower wins first: guards at tier 0 come before routes at tier 1.
    #[serde(default = "default_tier")]
    pub tier: u32,
    /// No rules: the decision matches only as the default.
    pub rules: Option<Rule>,
    #[serde(default, rename = "modelRefs", alias = "model_refs")]
    pub model_refs: Vec<ModelRef>,
    #[serde(default)]
    pub algorithm: Algorithm,
    #[serde(default)]
    pub action: Action,
    /// The message of a blocking decision's error.
    pub message: Option<String>,
}

fn default_tier() -> u32 {
    1
}

/// How a model family is told to reason.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReasoningFamily {
    #[serde(rename = "type")]
    pub kind: ReasoningKind,
    /// The member set: `reasoning_effort`, or the key under `chat_template_kwargs`.
    pub parameter: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReasoningKind {
    /// `body[parameter] = effort` when reasoning is on (removed when off).
    ReasoningEffort,
    /// `body.chat_template_kwargs[parameter] = true/false`.
    ChatTemplateKwargs,
}

/// A configuration that does not load: where, and why.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{file}{}: {path}{}{message}", line.map(|l| format!(":{l}")).unwrap_or_default(), if path.is_empty() { "" } else { ": " })]
pub struct ConfigError {
    pub file: String,
    pub line: Option<usize>,
    pub path: String,
    pub message: String,
}

impl RouterConfig {
    /// The most bytes of a request body the public face reads: the first listener's
    /// `max_request_bytes`, else protocol's public limit.
    pub fn max_request_bytes(&self) -> usize {
        self.listeners
            .first()
            .map_or(protocol::limits::PUBLIC_REQUEST_BYTES, |l| {
                l.max_request_bytes
            })
    }

    /// Parse and validate `text`; `file` names it in errors.
    pub fn from_yaml(text: &str, file: &str) -> Result<RouterConfig, ConfigError> {
        let config: RouterConfig =
            serde_norway::from_str(text).map_err(|e: serde_norway::Error| ConfigError {
                file: file.into(),
                line: e.location().map(|l| l.line()),
                path: String::new(),
                message: e.to_string(),
            })?;
        config
            .validate()
            .map_err(|(path, needle, message)| ConfigError {
                file: file.into(),
                line: locate(text, &path, needle.as_deref()),
                path,
                message,
            })?;
        Ok(config)
    }

    /// Every reference resolved; `(path, text to find the line by, message)` otherwise.
    fn validate(&self) -> Result<(), (String, Option<String>, String)> {
        fn err<T>(
            path: String,
            needle: &str,
            message: String,
        ) -> Result<T, (String, Option<String>, String)> {
            Err((path, Some(needle.to_string()), message))
        }
        unique(self.deployments.iter().map(|d| &d.name), "deployments")?;
        unique(self.backends.iter().map(|b| &b.name), "backends")?;
        unique(self.signals.iter().map(|s| &s.name), "signals")?;
        unique(self.decisions.iter().map(|d| &d.name), "decisions")?;
        for (i, l) in self.listeners.iter().enumerate() {
            let api = &l.apis.systemone;
            if api.deadline_ms == 0 || api.deadline_ms > api.max_deadline_ms {
                return err(
                    format!("listeners[{i}].apis.systemone.deadline_ms"),
                    "deadline_ms",
                    "must be at least 1 and at most max_deadline_ms".into(),
                );
            }
        }
        for (i, d) in self.deployments.iter().enumerate() {
            if d.workers.is_empty() {
                return err(
                    format!("deployments[{i}].workers"),
                    &d.name,
                    "a deployment needs at least one worker".into(),
                );
            }
            if d.models.is_empty() {
                return err(
                    format!("deployments[{i}].models"),
                    &d.name,
                    "a deployment needs at least one public model name".into(),
                );
            }
            for (j, w) in d.workers.iter().enumerate() {
                check_url(w).map_err(|m| {
                    (
                        format!("deployments[{i}].workers[{j}]"),
                        Some(w.clone()),
                        m.to_string(),
                    )
                })?;
            }
            if d.routing_view < 64 || d.scan_window < 64 {
                return err(
                    format!("deployments[{i}]"),
                    &d.name,
                    "routing_view and scan_window are at least 64 characters".into(),
                );
            }
        }
        let mut served: HashMap<&str, usize> = HashMap::new();
        for (i, b) in self.backends.iter().enumerate() {
            check_url(&b.url).map_err(|m| {
                (
                    format!("backends[{i}].url"),
                    Some(b.url.clone()),
                    m.to_string(),
                )
            })?;
            if b.models.is_empty() {
                return err(
                    format!("backends[{i}].models"),
                    &b.name,
                    "a backend serves at least one model".into(),
                );
            }
            for m in &b.models {
                if m == AUTO_MODEL {
                    return err(
                        format!("backends[{i}].models"),
                        m,
                        format!("{AUTO_MODEL} is the router's own name"),
                    );
                }
                if served.insert(m, i).is_some() {
                    return err(
                        format!("backends[{i}].models"),
                        m,
                        format!("model {m:?} is served by two backends"),
                    );
                }
            }
            if let Some(f) = &b.reasoning_family {
                if !self.reasoning_families.contains_key(f) {
                    return err(
                        format!("backends[{i}].reasoning_family"),
                        f,
                        format!("unknown reasoning family {f:?}"),
                    );
                }
            }
        }
        for (i, s) in self.signals.iter().enumerate() {
            let path = format!("signals[{i}]");
            let Some(dep) = self.deployments.iter().find(|d| d.name == s.deployment) else {
                return err(
                    format!("{path}.deployment"),
                    &s.deployment,
                    format!("unknown deployment {:?}", s.deployment),
                );
            };
            match &s.model {
                Some(m) if !dep.models.iter().any(|x| x == m || x == "*") => {
                    return err(
                        format!("{path}.model"),
                        m,
                        format!("deployment {:?} does not serve {m:?}", dep.name),
                    );
                }
                None if dep.models[0] == "*" => {
                    return err(
                        format!("{path}.model"),
                        &s.name,
                        format!(
                            "deployment {:?} serves every model: name the signal's model",
                            dep.name
                        ),
                    );
                }
                _ => {}
            }
            match s.kind {
                SignalType::Choice | SignalType::Score => {
                    if option_keys(s).is_empty() {
                        return err(
                            format!("{path}.criteria"),
                            &s.name,
                            "a choice or score signal needs criteria".into(),
                        );
                    }
                }
                SignalType::Noul | SignalType::Span => {}
            }
            if let Some(t) = s.threshold {
                if !(0.0..=1.0).contains(&t) {
                    return err(
                        format!("{path}.threshold"),
                        &s.name,
                        "a threshold is a probability in [0, 1]".into(),
                    );
                }
            }
            if dep.schema == WorkerSchema::Standard {
                let refused = [
                    (s.kind == SignalType::Span, "type: span"),
                    (s.over.is_some(), "over"),
                    (s.require_full_input.is_some(), "require_full_input"),
                    (
                        s.kind == SignalType::Span && s.threshold.is_some(),
                        "threshold",
                    ),
                ];
                if let Some((_, what)) = refused.iter().find(|(bad, _)| *bad) {
                    return err(
                        path,
                        &s.name,
                        format!(
                            "deployment {:?} speaks systemone/0.2, which cannot carry {what}",
                            dep.name
                        ),
                    );
                }
            }
        }
        let signals: HashMap<&str, &Signal> =
            self.signals.iter().map(|s| (s.name.as_str(), s)).collect();
        for (i, d) in self.decisions.iter().enumerate() {
            let path = format!("decisions[{i}]");
            if let Some(r) = &d.rules {
                check_rule(r, &signals, &format!("{path}.rules"))?;
            }
            if d.action == Action::Route && d.model_refs.is_empty() {
                return err(
                    format!("{path}.modelRefs"),
                    &d.name,
                    "a routing decision names at least one model".into(),
                );
            }
            for (j, m) in d.model_refs.iter().enumerate() {
                if !served.contains_key(m.model.as_str()) {
                    let mut all: Vec<&str> = served.keys().copied().collect();
                    all.sort_unstable();
                    return err(
                        format!("{path}.modelRefs[{j}].model"),
                        &m.model,
                        format!(
                            "no backend serves {:?} (backends serve: {})",
                            m.model,
                            all.join(", ")
                        ),
                    );
                }
                if m.weight.is_nan() || m.weight <= 0.0 {
                    return err(
                        format!("{path}.modelRefs[{j}].weight"),
                        &m.model,
                        "a weight is positive".into(),
                    );
                }
            }
            if let Algorithm::Confidence { threshold } = d.algorithm {
                if !(0.0..=1.0).contains(&threshold) {
                    return err(
                        format!("{path}.algorithm.threshold"),
                        &d.name,
                        "a threshold is a probability in [0, 1]".into(),
                    );
                }
            }
        }
        if !self
            .decisions
            .iter()
            .any(|d| d.name == self.default_decision)
        {
            return err(
                "default_decision".into(),
                &self.default_decision,
                format!("unknown decision {:?}", self.default_decision),
            );
        }
        Ok(())
    }

    /// The signals some decision's rules read.
    pub fn used_signals(&self) -> Vec<&Signal> {
        let mut names = HashSet::new();
        for d in &self.decisions {
            if let Some(r) = &d.rules {
                r.signals(&mut names);
            }
        }
        self.signals
            .iter()
            .filter(|s| names.contains(s.name.as_str()))
            .collect()
    }
}

impl Rule {
    fn signals<'a>(&'a self, out: &mut HashSet<&'a str>) {
        match self {
            Rule::Tree { conditions, .. } => conditions.iter().for_each(|c| c.signals(out)),
            Rule::Condition { signal, .. } => {
                out.insert(signal);
            }
        }
    }
}

/// The option keys of a choice or score signal, in order.
pub fn option_keys(s: &Signal) -> Vec<String> {
    match &s.criteria {
        Some(Value::Object(m)) => m.keys().cloned().collect(),
        Some(Value::Array(a)) => a
            .iter()
            .filter_map(|x| match x {
                Value::String(k) => Some(k.clone()),
                Value::Object(o) => o
                    .get("key")
                    .or_else(|| o.get("name"))
                    .and_then(Value::as_str)
                    .map(str::to_string),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    }
}

fn check_rule(
    r: &Rule,
    signals: &HashMap<&str, &Signal>,
    path: &str,
) -> Result<(), (String, Option<String>, String)> {
    match r {
        Rule::Tree {
            operator,
            conditions,
        } => {
            if conditions.is_empty() || (*operator == Operator::Not && conditions.len() != 1) {
                return Err((
                    format!("{path}.conditions"),
                    None,
                    "AND and OR take one condition or more, NOT exactly one".into(),
                ));
            }
            for (i, c) in conditions.iter().enumerate() {
                check_rule(c, signals, &format!("{path}.conditions[{i}]"))?;
            }
            Ok(())
        }
        Rule::Condition { signal, name } => {
            let Some(s) = signals.get(signal.as_str()) else {
                return Err((
                    format!("{path}.type"),
                    Some(signal.clone()),
                    format!("unknown signal {signal:?}"),
                ));
            };
            match (s.kind, name) {
                (SignalType::Choice | SignalType::Score, None) => Err((
                    format!("{path}.name"),
                    Some(signal.clone()),
                    format!("a condition on {signal:?} names one of its options"),
                )),
                (SignalType::Choice | SignalType::Score, Some(n))
                    if !option_keys(s).contains(n) =>
                {
                    Err((
                        format!("{path}.name"),
                        Some(n.clone()),
                        format!(
                            "{signal:?} has no option {n:?} (options: {})",
                            option_keys(s).join(", ")
                        ),
                    ))
                }
                (SignalType::Noul | SignalType::Span, Some(n)) if n != "yes" && n != "no" => Err((
                    format!("{path}.name"),
                    Some(n.clone()),
                    format!("a condition on {signal:?} is yes or no"),
                )),
                _ => Ok(()),
            }
        }
    }
}

fn unique<'a>(
    names: impl Iterator<Item = &'a String>,
    what: &str,
) -> Result<(), (String, Option<String>, String)> {
    let mut seen = HashSet::new();
    for (i, n) in names.enumerate() {
        if n.is_empty() {
            return Err((
                format!("{what}[{i}].name"),
                None,
                "a name is not empty".into(),
            ));
        }
        if !seen.insert(n) {
            return Err((
                format!("{what}[{i}].name"),
                Some(n.clone()),
                format!("{n:?} is named twice"),
            ));
        }
    }
    Ok(())
}

/// A worker or backend address that is neither a URL nor the in-process worker.
#[derive(Debug, thiserror::Error)]
#[error("{0:?} is neither an http(s) URL nor {IN_PROCESS}")]
struct NotAnAddress(String);

fn check_url(u: &str) -> Result<(), NotAnAddress> {
    if u == IN_PROCESS || u.starts_with("http://") || u.starts_with("https://") {
        Ok(())
    } else {
        Err(NotAnAddress(u.to_string()))
    }
}

/// The line (1-based) of the member a path names: the line of the path's last list entry
/// (`decisions[2]` is the third `- ` entry under `decisions:`), then the first line after it
/// holding `needle`.
fn locate(text: &str, path: &str, needle: Option<&str>) -> Option<usize> {
    let lines: Vec<&str> = text.lines().collect();
    let top = path.split(['.', '[']).next()?;
    let mut start = lines
        .iter()
        .position(|l| l.trim_start().starts_with(&format!("{top}:")))?;
    if let Some(idx) = path
        .strip_prefix(top)
        .and_then(|r| r.strip_prefix('['))
        .and_then(|r| r.split(']').next())
        .and_then(|n| n.parse::<usize>().ok())
    {
        let indent = lines[start].len() - lines[start].trim_start().len();
        let mut seen = 0;
        for (i, l) in lines.iter().enumerate().skip(start + 1) {
            let t = l.trim_start();
            let ind = l.len() - t.len();
            if !t.is_empty() && !t.starts_with('#') && ind <= indent && !t.starts_with('-') {
                break;
            }
            if t.starts_with("- ") || t == "-" {
                let entry_indent = ind;
                if lines[start + 1..=i]
                    .iter()
                    .filter(|x| x.trim_start().starts_with('-'))
                    .all(|x| x.len() - x.trim_start().len() >= entry_indent)
                {
                    if seen == idx {
                        start = i;
                        break;
                    }
                    seen += 1;
                }
            }
        }
    }
    match needle {
        Some(n) => lines
            .iter()
            .enumerate()
            .skip(start)
            .find(|(_, l)| l.contains(n))
            .map(|(i, _)| i + 1)
            .or(Some(start + 1)),
        None => Some(start + 1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
deployments:
  - name: deciders
    workers: ["http://127.0.0.1:9000"]
    models: [qwen2.5-0.5b]
backends:
  - name: local
    url: http://127.0.0.1:9001
    models: [small, large]
    reasoning_family: qwen3
reasoning_families:
  qwen3: {type: chat_template_kwargs, parameter: enable_thinking}
signals:
  - name: task
    deployment: deciders
    type: choice
    instructions: What kind of request is this?
    criteria: {math: Mathematics, chat: Small talk}
decisions:
  - name: math
    rules:
      operator: AND
      conditions:
        - type: task
          name: math
    modelRefs:
      - model: large
        use_reasoning: true
  - name: chat
    modelRefs: [{model: small}]
default_decision: chat
"#;

    #[test]
    fn the_built_in_config_loads() {
        let c = RouterConfig::from_yaml(crate::DEFAULT_CONFIG, "built-in").unwrap();
        assert_eq!(c.default_decision, "chat");
        assert!(c
            .decisions
            .iter()
            .any(|d| d.action == Action::Block && d.tier == 0));
    }

    #[test]
    fn a_good_config_loads() {
        let c = RouterConfig::from_yaml(GOOD, "router.yaml").unwrap();
        assert_eq!(c.decisions.len(), 2);
        assert_eq!(c.used_signals().len(), 1);
        assert_eq!(c.decisions[0].tier, 1);
        assert_eq!(c.decisions[0].algorithm, Algorithm::Static);
    }

    #[test]
    fn a_bad_reference_names_file_line_and_path() {
        let bad = GOOD.replace("- model: large", "- model: huge");
        let e = RouterConfig::from_yaml(&bad, "router.yaml").unwrap_err();
        assert_eq!(e.path, "decisions[0].modelRefs[0].model");
        let line = bad.lines().position(|l| l.contains("model: huge")).unwrap() + 1;
        assert_eq!(e.line, Some(line), "{e}");
        assert!(
            e.to_string()
                .starts_with(&format!("router.yaml:{line}: decisions[0]")),
            "{e}"
        );

        let bad = GOOD.replace("name: math\n    modelRefs", "name: algebra\n    modelRefs");
        let e = RouterConfig::from_yaml(&bad, "router.yaml").unwrap_err();
        assert_eq!(e.path, "decisions[0].rules.conditions[0].name");
        let line = bad
            .lines()
            .position(|l| l.contains("name: algebra"))
            .unwrap()
            + 1;
        assert_eq!(e.line, Some(line), "{e}");

        let bad = GOOD.replace("default_decision: chat", "default_decision: nope");
        let e = RouterConfig::from_yaml(&bad, "r.yaml").unwrap_err();
        assert_eq!(e.path, "default_decision");
        assert_eq!(e.line, Some(bad.lines().count()));
    }

    #[test]
    fn syntax_and_unknown_members_give_lines() {
        let bad = GOOD.replace("    reasoning_family: qwen3", "    reasoning_famly: qwen3");
        let e = RouterConfig::from_yaml(&bad, "r.yaml").unwrap_err();
        assert!(e.message.contains("reasoning_famly"), "{e}");
        assert!(e.line.is_some(), "{e}");
    }

    #[test]
    fn a_standard_deployment_refuses_what_it_cannot_carry() {
        let bad = GOOD
            .replace(
                "    models: [qwen2.5-0.5b]",
                "    models: [qwen2.5-0.5b]\n    schema: systemone/0.2",
            )
            .replace("    type: choice", "    type: choice\n    over: [user]");
        let e = RouterConfig::from_yaml(&bad, "r.yaml").unwrap_err();
        assert_eq!(e.path, "signals[0]");
        assert!(
            e.message.contains("systemone/0.2") && e.message.contains("over"),
            "{e}"
        );
    }

    #[test]
    fn not_takes_one_condition() {
        let bad = GOOD.replace("operator: AND", "operator: NOT").replace(
            "        - type: task\n          name: math",
            "        - {type: task, name: math}\n        - {type: task, name: chat}",
        );
        let e = RouterConfig::from_yaml(&bad, "r.yaml").unwrap_err();
        assert_eq!(e.path, "decisions[0].rules.conditions");
    }
}
