//! Views of a request's state: the texts its questions read, rendered, read within budget
//! and cut into roots (whole, truncated, or windows).

use std::borrow::Cow;

use protocol::error::{reason, QuestionFailure};
use protocol::request::{DecisionRequest, Question, Role, Roles};
use protocol::{text, ProtocolError, Usage};

use super::model::{DecisionModel, Tree};
use crate::backend::{Node, Token};
use crate::budget;
use crate::budget::windows;

/// Whether `keys` name every key of an object state (then the question reads the whole state).
fn covers_state(state: &serde_json::Value, keys: &[String]) -> bool {
    state
        .as_object()
        .is_some_and(|m| m.len() == keys.len() && m.keys().all(|k| keys.contains(k)))
}

/// Where a question reads its view of the state from.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum RootKey {
    /// The whole view, in one root.
    Whole(usize),
    /// The first tokens of the view.
    Truncated(usize, usize),
    /// The whole view in windows of this many tokens, overlapping by the second count.
    Windows(usize, usize, usize),
}

/// The views of a request's state (the whole state, or the keys an `over` names), each read
/// once as far as its questions need, and scanned whole when a question reads it in windows.
pub(crate) struct Views<'a> {
    pub texts: Vec<Cow<'a, str>>,
    pub reads: Vec<budget::Read>,
    /// Per view: not scanned, scanned whole, or over the scan budget (`Some(None)`).
    pub scans: Vec<Option<Option<budget::Read>>>,
    pub read_in_part: Vec<bool>,
    pub used: Vec<bool>,
}

impl Views<'_> {
    /// The token slices of the roots a key stands for.
    pub fn roots(&self, key: RootKey) -> Vec<&[Token]> {
        match key {
            RootKey::Whole(v) => vec![&self.reads[v].tokens[..]],
            RootKey::Truncated(v, n) => {
                let n = n.min(self.reads[v].tokens.len());
                vec![&self.reads[v].tokens[..n]]
            }
            RootKey::Windows(v, w, overlap) => {
                let tokens = self.scanned(v).unwrap_or(&[]);
                windows(tokens.len(), w, overlap)
                    .into_iter()
                    .map(|(a, b)| &tokens[a..b])
                    .collect()
            }
        }
    }

    /// Per root of `key`: where the bytes it reads start in the view's text, and those bytes.
    pub fn root_bytes(&self, vocab: &dyn budget::Vocab, key: RootKey) -> Vec<(usize, Vec<u8>)> {
        let bytes = |tokens: &[Token]| -> Vec<u8> {
            tokens.iter().flat_map(|t| vocab.token_bytes(*t)).collect()
        };
        match key {
            RootKey::Whole(_) | RootKey::Truncated(..) => self
                .roots(key)
                .into_iter()
                .map(|ts| (0, bytes(ts)))
                .collect(),
            RootKey::Windows(v, w, overlap) => {
                let tokens = self.scanned(v).unwrap_or(&[]);
                let mut offset = 0;
                let mut done = 0;
                let mut out = Vec::new();
                for (a, b) in windows(tokens.len(), w, overlap) {
                    offset += bytes(&tokens[done..a]).len();
                    done = a;
                    out.push((offset, bytes(&tokens[a..b])));
                }
                out
            }
        }
    }

    pub(super) fn scanned(&self, v: usize) -> Option<&[Token]> {
        match &self.scans[v] {
            Some(Some(scan)) => Some(&scan.tokens),
            _ => None,
        }
    }

    /// Add the tokens read of each view used (the whole view once, or the part read, plus
    /// `framing` tokens around it) to `usage`, and mark a state read in part.
    pub fn count(&self, usage: &mut Usage, framing: usize) {
        for v in 0..self.texts.len() {
            if !self.used[v] {
                continue;
            }
            let scanned = self.scanned(v);
            let n = scanned.map_or(self.reads[v].tokens.len(), <[Token]>::len);
            usage.input_tokens += (n + framing) as u64;
            if self.read_in_part[v] && scanned.is_none() {
                usage.tokens_lower_bound = true;
            }
        }
    }
}

/// The keys of the state question `q` reads with `over`, or `None` when it reads the whole
/// state (no `over`, or one that names every key).
pub(crate) fn over_keys<'a>(r: &DecisionRequest, q: &'a Question) -> Option<&'a [String]> {
    q.over
        .as_deref()
        .filter(|keys| !covers_state(&r.state, keys))
}

/// The index of view `key` in `views`, added when new.
pub(crate) fn view_index<K: PartialEq>(views: &mut Vec<K>, key: K) -> usize {
    match views.iter().position(|v| *v == key) {
        Some(v) => v,
        None => {
            views.push(key);
            views.len() - 1
        }
    }
}

/// A view of the state that questions read.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum ViewKey<'a> {
    /// The whole state, or the keys an `over` names, rendered.
    State(Option<&'a [String]>),
    /// The text of one string part of an object state, exactly as it was sent: what a span
    /// question reads, so that its offsets count into a string the client has.
    Part(&'a str),
}

/// The text of the string part of an object state that span question `q` reads: the one key
/// its `over` names, else the answer part, else the user part, else the state's only part
/// (`None` for a text state). A span question's offsets must count into a string the client
/// sent, so anything else (several parts, a part that is not a string) is refused.
pub(super) fn span_part<'a>(
    r: &'a DecisionRequest,
    q: &Question,
) -> Result<Option<&'a str>, QuestionFailure> {
    let Some(map) = r.state.as_object() else {
        return Ok(None);
    };
    // The part's text, when its value is a string.
    let text_part = |k: &str| {
        map.get(k)
            .and_then(serde_json::Value::as_str)
            .map(Some)
            .ok_or_else(|| {
                QuestionFailure::malformed(format!(
                    "a span question reads one text part of the state, and {k:?} is not a string"
                ))
            })
    };
    if let Some(keys) = &q.over {
        return match keys.as_slice() {
            [k] => text_part(k),
            _ => Err(QuestionFailure::malformed(
                "a span question reads one text part of the state: over must name one key",
            )),
        };
    }
    let role_of = |k: &str| match (&r.roles, k) {
        (Roles::Absent, "answer") => Some(Role::Answer),
        (Roles::Absent, "user") => Some(Role::User),
        (roles, _) => roles.given(k),
    };
    let with_role = |want: Role| map.keys().find(|k| role_of(k) == Some(want));
    let part = match (with_role(Role::Answer), with_role(Role::User)) {
        (Some(k), _) | (None, Some(k)) => Some(k),
        (None, None) if map.len() == 1 => map.keys().next(),
        (None, None) => None,
    };
    match part {
        Some(k) => text_part(k),
        None => Err(QuestionFailure::malformed(
            "a span question reads one text part of the state: name it with over",
        )),
    }
}

impl DecisionModel {
    pub(super) fn render_state(state: &serde_json::Value, roles: &Roles) -> String {
        match (state, roles) {
            (serde_json::Value::Object(map), Roles::Map(_)) => {
                let mut out = String::new();
                for (k, v) in map {
                    let tag = match roles.given(k) {
                        Some(Role::User) => " (user's content)",
                        Some(Role::Context) => " (context)",
                        Some(Role::Answer) => " (answer under check)",
                        None => "",
                    };
                    let body = text::render(v);
                    if body.contains('\n') {
                        out.push_str(&format!("{k}{tag}:\n{body}\n"));
                    } else {
                        out.push_str(&format!("{k}{tag}: {body}\n"));
                    }
                }
                out
            }
            (v, _) => text::render(v),
        }
    }

    /// The most tokens one question reads (system prompt, state and question): the validated
    /// length by default, `max_input_tokens` with long context.
    pub(crate) fn question_cap(&self, long_context: bool) -> usize {
        match self.limits.validated_input_tokens {
            Some(v) if !long_context => v.min(self.limits.max_input_tokens),
            _ => self.limits.max_input_tokens,
        }
    }

    /// The text of a view: the state rendered, or with `over` only the keys it names (in state
    /// order) exactly as a state holding only them; a part as it was sent.
    pub(super) fn view_text<'a>(r: &'a DecisionRequest, view: ViewKey<'a>) -> Cow<'a, str> {
        match (view, &r.state) {
            // A plain text state, or a part, is read as it is, without a copy.
            (ViewKey::State(None), serde_json::Value::String(s)) => {
                Cow::Borrowed(s.trim_end_matches('\n'))
            }
            (ViewKey::Part(text), _) => Cow::Borrowed(text.trim_end_matches('\n')),
            (ViewKey::State(Some(keys)), serde_json::Value::Object(map)) => {
                let subset = serde_json::Value::Object(
                    map.iter()
                        .filter(|(k, _)| keys.contains(k))
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect(),
                );
                Cow::Owned(Self::render_state(&subset, &r.roles))
            }
            _ => Cow::Owned(Self::render_state(&r.state, &r.roles)),
        }
    }

    pub(crate) fn read_text(
        &self,
        vocab: &dyn budget::Vocab,
        text: &str,
        budget: usize,
    ) -> Result<budget::Read, ProtocolError> {
        self.cutter
            .read(vocab, text, budget)
            .map_err(|e| ProtocolError::invalid(e.to_string()).with_reason(reason::INPUT_MALFORMED))
    }

    /// A root: the state header, `tokens`, the separator.
    pub(super) fn state_root(&self, t: &Tree, tokens: &[Token]) -> Node {
        let mut all = Vec::with_capacity(t.header.len() + tokens.len() + t.sep.len());
        all.extend_from_slice(&t.header);
        all.extend_from_slice(tokens);
        all.extend_from_slice(&t.sep);
        Node {
            tokens: all,
            ..Node::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use protocol::request::{parse_decision_body, DecisionBody, Schema};
    use serde_json::{json, Value};

    use super::span_part;

    /// The text of the part the request's one span question reads, or its refusal's message.
    /// Each test state's parts hold distinct texts, so the text names the part.
    fn part(
        state: Value,
        roles: Option<Value>,
        over: Option<Value>,
    ) -> Result<Option<String>, protocol::error::QuestionFailure> {
        let mut q = json!({"type": "span", "criteria": ["EMAIL_ADDRESS"]});
        if let Some(over) = over {
            q["over"] = over;
        }
        let mut body = json!({"model": "m", "state": state, "questions": {"q": q}});
        if let Some(roles) = roles {
            body["roles"] = roles;
        }
        let Ok(DecisionBody::Single(r)) = parse_decision_body(&body, Schema::Internal) else {
            panic!("{body}")
        };
        let q = r.questions[0].question.as_ref().expect("a valid question");
        span_part(&r, q).map(|k| k.map(str::to_string))
    }

    #[test]
    fn a_span_reads_one_string_part_in_the_order_the_extension_reference_gives() {
        let ok = |text: &str| Ok(Some(text.to_string()));
        assert_eq!(part(json!("plain text"), None, None), Ok(None));
        // over, else answer, else user, else the only key.
        let qa = json!({"user": "Who?", "answer": "Jane", "context": "notes"});
        assert_eq!(part(qa.clone(), None, None), ok("Jane"));
        assert_eq!(part(qa.clone(), None, Some(json!("context"))), ok("notes"));
        assert_eq!(
            part(json!({"user": "Hi", "context": "c"}), None, None),
            ok("Hi")
        );
        assert_eq!(part(json!({"text": "Only"}), None, None), ok("Only"));
        // Roles name the parts when given; null roles name none.
        let roles = json!({"q": "user", "a": "answer"});
        assert_eq!(
            part(json!({"q": "Who?", "a": "Jane"}), Some(roles), None),
            ok("Jane")
        );
        assert!(part(qa, Some(Value::Null), None).is_err());
        // What names no single string part is refused.
        for (state, over) in [
            (json!({"a": "x", "b": "y"}), None),
            (json!({"a": "x", "b": "y"}), Some(json!(["a", "b"]))),
            (json!({"a": "x", "n": 3}), Some(json!("n"))),
            (json!({"answer": {"nested": "x"}}), None),
        ] {
            assert!(
                part(state.clone(), None, over.clone()).is_err(),
                "{state} {over:?}"
            );
        }
    }
}
