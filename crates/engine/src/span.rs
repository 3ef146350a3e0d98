//! Span questions on a causal LM: the model copies the parts of the text a label names, one per
//! line, under a constraint that lets it write nothing but text it read; the code then finds
//! where each copy lies.
//!
//! The growth of a label's branch is steered by [`CopySteer`]: at the start of a line the
//! candidates are every token that begins some piece of the text at a character that is not
//! whitespace, and the words that end the answer (`None`, the end of the turn); inside a line,
//! the tokens that continue some occurrence of the line so far, and the newline or the end of
//! the turn that end it.
//! The backend picks the most likely candidate at each step (see [`crate::backend::Steer`]);
//! [`replay`] reads the same picks back from the logged candidate logits and turns them into
//! spans with probabilities.
//!
//! **Probability of a span**: each step's candidate logits are normalised over the candidates
//! (the constraint renormalises the model's distribution). A span's probability is the
//! probability that its line holds a span at all (one minus the mass of the ending words at
//! the line's start), times the probability of each token after its first, times the
//! probability that it ends where it does (newline or end of turn). The first token is not counted: several spans may start at once, and the
//! line's first token only says which of them comes first.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, OnceLock};

use protocol::SpanFound;
use regex::bytes::Regex;

use crate::backend::{pick, Backend, Steer, Token};
use crate::error::EngineError;

/// Most spans one label's answer lists.
pub const MAX_SPANS: usize = 8;
/// Most tokens one label's answer grows (every span and newline together).
pub const MAX_SPAN_TOKENS: usize = 64;
/// Longest token piece offered (longer pieces are whitespace runs and rare words).
const LONGEST_PIECE: usize = 32;

/// The vocabulary a copy constraint draws from, built once per model.
#[derive(Debug)]
pub(crate) struct SpanVocab {
    /// Tokens by the bytes of their piece: every token a text could be tokenized into whose
    /// piece holds no newline (control tokens are left out).
    by_bytes: HashMap<Vec<u8>, Vec<Token>>,
    newline: Token,
    /// Tokens that end the answer: the first token of `None`, and the end of the turn.
    ends: Vec<Token>,
    /// The end of the turn, which may also end a line.
    eot: Option<Token>,
}

impl SpanVocab {
    pub(crate) fn build(backend: &dyn Backend, turn_end: &str) -> Result<SpanVocab, EngineError> {
        let single = |text: &str, special: bool| -> Result<Option<Token>, EngineError> {
            let t = backend.tokenize(text, special)?;
            Ok(t.first().copied())
        };
        let missing = |what: &str| EngineError::Labels(format!("the vocabulary has no {what}"));
        let newline = match backend.tokenize("\n", false)?.as_slice() {
            [t] => *t,
            _ => return Err(missing("one-token newline")),
        };
        let none = single("None", false)?.ok_or_else(|| missing("token for None"))?;
        let mut ends = vec![none];
        let eot = single(turn_end, true)?.filter(|end| *end != none && *end != newline);
        ends.extend(eot);
        let mut by_bytes: HashMap<Vec<u8>, Vec<Token>> = HashMap::new();
        for id in 0..backend.vocab_size() {
            let token = id as Token;
            let piece = backend.token_bytes(token);
            if piece.is_empty() || piece.len() > LONGEST_PIECE || piece.contains(&b'\n') {
                continue;
            }
            if ends.contains(&token) || backend.ends_generation(token) {
                continue;
            }
            // A control token (`<|im_end|>`) reads as text a plain tokenization never gives.
            if piece.first() == Some(&b'<') && piece.last() == Some(&b'>') && piece.len() > 2 {
                let text = String::from_utf8_lossy(&piece);
                if backend.tokenize(&text, false)? != [token] {
                    continue;
                }
            }
            by_bytes.entry(piece).or_default().push(token);
        }
        Ok(SpanVocab {
            by_bytes,
            newline,
            ends,
            eot,
        })
    }

    /// Tokens whose pieces are prefixes of `rest`, added to `out`.
    fn prefixes_of(&self, rest: &[u8], out: &mut Vec<Token>) {
        for len in 1..=rest.len().min(LONGEST_PIECE) {
            if let Some(tokens) = self.by_bytes.get(&rest[..len]) {
                out.extend_from_slice(tokens);
            }
        }
    }
}

/// The copy constraint over one text (the bytes a root read).
pub(crate) struct CopySteer {
    vocab: Arc<SpanVocab>,
    backend: Arc<dyn Backend>,
    text: Vec<u8>,
    /// Candidates at the start of a line, computed on first use.
    starts: OnceLock<Vec<Token>>,
}

impl std::fmt::Debug for CopySteer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CopySteer")
            .field("text_bytes", &self.text.len())
            .finish()
    }
}

/// Where a line of the answer stands after the tokens picked so far.
struct Line {
    /// Lines ended by a newline.
    done: Vec<Vec<u8>>,
    /// The current line's bytes.
    current: Vec<u8>,
    ended: bool,
}

impl CopySteer {
    pub(crate) fn new(vocab: Arc<SpanVocab>, backend: Arc<dyn Backend>, text: Vec<u8>) -> Self {
        CopySteer {
            vocab,
            backend,
            text,
            starts: OnceLock::new(),
        }
    }

    /// Bytes of the text this steer copies from.
    pub(crate) fn text_len(&self) -> usize {
        self.text.len()
    }

    fn lines(&self, picked: &[Token]) -> Line {
        let mut line = Line {
            done: Vec::new(),
            current: Vec::new(),
            ended: false,
        };
        for &t in picked {
            if line.current.is_empty() && self.vocab.ends.contains(&t) {
                line.ended = true;
            } else if Some(t) == self.vocab.eot {
                // The end of the turn ends the line and the answer.
                line.done.push(std::mem::take(&mut line.current));
                line.ended = true;
            } else if t == self.vocab.newline {
                line.done.push(std::mem::take(&mut line.current));
            } else {
                line.current.extend_from_slice(&self.backend.token_bytes(t));
            }
        }
        line
    }

    fn starts(&self) -> &[Token] {
        self.starts.get_or_init(|| {
            let mut out = Vec::new();
            let text = &self.text;
            for (i, &b) in text.iter().enumerate() {
                // A line starts at the first byte of a character that is not whitespace.
                if (b & 0xC0) == 0x80 || b.is_ascii_whitespace() {
                    continue;
                }
                self.vocab.prefixes_of(&text[i..], &mut out);
            }
            out.sort_unstable();
            out.dedup();
            out
        })
    }
}

/// Start of every occurrence of `needle` in `hay`.
fn occurrences(hay: &[u8], needle: &[u8]) -> Vec<usize> {
    if needle.is_empty() || needle.len() > hay.len() {
        return Vec::new();
    }
    hay.windows(needle.len())
        .enumerate()
        .filter(|(_, w)| *w == needle)
        .map(|(i, _)| i)
        .collect()
}

impl Steer for CopySteer {
    fn candidates(&self, picked: &[Token]) -> Option<Vec<Token>> {
        if picked.len() >= MAX_SPAN_TOKENS {
            return None;
        }
        let line = self.lines(picked);
        if line.ended {
            return None;
        }
        let last_token = picked.len() + 1 == MAX_SPAN_TOKENS;
        if line.current.is_empty() {
            // A repeated line or the span limit ends the answer.
            let repeated = line
                .done
                .last()
                .is_some_and(|l| line.done[..line.done.len() - 1].contains(l) || l.is_empty());
            if repeated || line.done.len() >= MAX_SPANS || last_token {
                return None;
            }
            let mut c = self.vocab.ends.clone();
            c.extend_from_slice(self.starts());
            return Some(c);
        }
        let mut c = Vec::new();
        if !last_token {
            for at in occurrences(&self.text, &line.current) {
                self.vocab
                    .prefixes_of(&self.text[at + line.current.len()..], &mut c);
            }
            c.sort_unstable();
            c.dedup();
        }
        // A line may end once it holds whole characters and something besides whitespace.
        let whole = std::str::from_utf8(&line.current).is_ok_and(|s| !s.trim().is_empty());
        if whole {
            c.insert(0, self.vocab.newline);
            c.extend(self.vocab.eot);
        }
        Some(c)
    }

    fn max_tokens(&self) -> usize {
        MAX_SPAN_TOKENS
    }

    /// Decide by mass, then by logit: at a line's start, whether the answer ends (`None`, the
    /// end of the turn) or a span begins; inside a line, whether it ends (newline, end of turn)
    /// or goes on. The side with more probability wins (ending on a tie), and the highest
    /// logit on that side is the token. Greedy decoding would let `None` win over many
    /// spans that each start with another token.
    fn pick(&self, picked: &[Token], candidates: &[Token], logits: &[f32]) -> Option<usize> {
        let at_start = self.lines(picked).current.is_empty();
        let ends = |t: &Token| self.ends(at_start, *t);
        let ending = mass(candidates, &softmax(logits), ends) >= 0.5;
        let mut best: Option<usize> = None;
        for (i, t) in candidates.iter().enumerate() {
            if ends(t) == ending && best.is_none_or(|b| logits[i] > logits[b]) {
                best = Some(i);
            }
        }
        best.or_else(|| pick(logits))
    }
}

impl CopySteer {
    /// Whether `t` ends the answer (at a line's start: `None`, the end of the turn) or the
    /// line (inside one: the newline, the end of the turn).
    fn ends(&self, at_line_start: bool, t: Token) -> bool {
        if at_line_start {
            self.vocab.ends.contains(&t)
        } else {
            t == self.vocab.newline || Some(t) == self.vocab.eot
        }
    }
}

/// The probability of the candidates `of` selects.
fn mass(candidates: &[Token], probs: &[f64], of: impl Fn(&Token) -> bool) -> f64 {
    candidates
        .iter()
        .zip(probs)
        .filter(|(t, _)| of(t))
        .map(|(_, p)| p)
        .sum()
}

/// A span one branch wrote: its text (trimmed) and probability.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Copied {
    pub text: String,
    pub probability: f64,
}

fn softmax(logits: &[f32]) -> Vec<f64> {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    let exps: Vec<f64> = logits.iter().map(|&l| (l as f64 - max).exp()).collect();
    let sum: f64 = exps.iter().sum();
    exps.into_iter().map(|e| e / sum).collect()
}

/// Replay one branch's growth from its logged steps (the same picks the backend made) and
/// read its spans; `None` when the log does not fit the steer. Returns the spans and the
/// number of steps read.
pub(crate) fn replay<'a>(
    steer: &CopySteer,
    steps: &mut impl Iterator<Item = &'a Vec<f32>>,
) -> Option<(Vec<Copied>, usize)> {
    let mut picked: Vec<Token> = Vec::new();
    let mut spans = Vec::new();
    // Probability of the line being read, while one is open.
    let mut open: Option<f64> = None;
    let mut at_line_start = true;
    while let Some(candidates) = steer.candidates(&picked).filter(|c| !c.is_empty()) {
        let logits = steps.next()?;
        if logits.len() != candidates.len() {
            return None;
        }
        let best = steer.pick(&picked, &candidates, logits)?;
        let token = candidates[best];
        let probs = softmax(logits);
        if at_line_start {
            let end = mass(&candidates, &probs, |t| steer.ends(true, *t));
            open = Some((1.0 - end).clamp(0.0, 1.0));
            at_line_start = false;
        } else if let Some(p) = open.as_mut() {
            // A line-ending step counts the probability that the span ends here, by either
            // ending token.
            if steer.ends(false, token) {
                *p *= mass(&candidates, &probs, |t| steer.ends(false, *t));
            } else {
                *p *= probs[best];
            }
        }
        picked.push(token);
        if steer.ends(false, token) {
            let line = steer.lines(&picked);
            if let (Some(text), Some(p)) = (line.done.last(), open.take()) {
                if let Ok(s) = std::str::from_utf8(text) {
                    spans.push(Copied {
                        text: s.trim().to_string(),
                        probability: p,
                    });
                }
            }
            at_line_start = true;
        }
    }
    Some((spans, picked.len()))
}

/// Where the spans a label's branches copied lie in `text` (the text the question read; each
/// branch read the bytes from `offset`, `len` long), in code points. Every occurrence inside
/// the part a branch read counts; the same place found twice keeps its highest probability;
/// of overlapping places, the longer (then more probable, then earlier) one is kept: a name
/// copied whole and again in part is one span.
pub(crate) fn locate(
    label: &str,
    text: &str,
    found: &[(usize, usize, Vec<Copied>)],
) -> Vec<SpanFound> {
    let bytes = text.as_bytes();
    // (byte start, byte end) -> probability
    let mut places: Vec<(usize, usize, f64)> = Vec::new();
    for (offset, len, copies) in found {
        let end = (*offset + *len).min(bytes.len());
        let Some(part) = bytes.get(*offset..end) else {
            continue;
        };
        for c in copies {
            if c.text.is_empty() {
                continue;
            }
            for at in occurrences(part, c.text.as_bytes()) {
                let (s, e) = (offset + at, offset + at + c.text.len());
                match places.iter_mut().find(|(ps, pe, _)| *ps == s && *pe == e) {
                    Some(p) => p.2 = p.2.max(c.probability),
                    None => places.push((s, e, c.probability)),
                }
            }
        }
    }
    places.sort_by(|a, b| {
        (b.1 - b.0)
            .cmp(&(a.1 - a.0))
            .then(b.2.total_cmp(&a.2))
            .then(a.0.cmp(&b.0))
    });
    let mut kept: Vec<(usize, usize, f64)> = Vec::new();
    for p in places {
        if kept.iter().all(|k| p.1 <= k.0 || p.0 >= k.1) {
            kept.push(p);
        }
    }
    kept.sort_by_key(|k| k.0);
    join_pieces(text, &mut kept);
    kept.into_iter()
        .filter(|(s, e, _)| text.is_char_boundary(*s) && text.is_char_boundary(*e))
        .map(|(s, e, p)| SpanFound {
            label: label.to_string(),
            start: text[..s].chars().count(),
            end: text[..e].chars().count(),
            text: text[s..e].to_string(),
            probability: p,
        })
        .collect()
}

/// Most characters between two places of one label that are joined into one span.
const JOIN_GAP: usize = 2;

/// Join places of one label that are pieces of one written thing: a small model copies a
/// formatted number as its digit groups (`454`, `556`, `5275` of `(454)556-5275`), each a
/// line of its own. Places (byte ranges in text order) at most [`JOIN_GAP`] characters apart,
/// with no whitespace or list separator between them, become one place with the highest of
/// their probabilities; then a place that holds an unmatched `)` takes the `(` just before
/// it, and one with an unmatched `(` the `)` just after it.
fn join_pieces(text: &str, places: &mut Vec<(usize, usize, f64)>) {
    let mut joined: Vec<(usize, usize, f64)> = Vec::with_capacity(places.len());
    for &(s, e, p) in places.iter() {
        if let Some(last) = joined.last_mut() {
            let gap = text.get(last.1..s);
            let joins = gap.is_some_and(|g| {
                g.chars().count() <= JOIN_GAP
                    && !g
                        .chars()
                        .any(|c| c.is_whitespace() || matches!(c, ',' | ';' | '|'))
            });
            if joins && s >= last.1 {
                last.1 = e;
                last.2 = last.2.max(p);
                continue;
            }
        }
        joined.push((s, e, p));
    }
    let bytes = text.as_bytes();
    for place in &mut joined {
        let Some(inner) = text.get(place.0..place.1) else {
            continue;
        };
        let open = inner.matches('(').count();
        let close = inner.matches(')').count();
        if close > open && place.0 > 0 && bytes[place.0 - 1] == b'(' {
            place.0 -= 1;
        } else if open > close && bytes.get(place.1) == Some(&b')') {
            place.1 += 1;
        }
    }
    *places = joined;
}

/// Each place of the text to one label, as a tagger gives each word one tag: of spans of
/// different labels that overlap, the more probable (then longer, then earlier) is kept. The
/// decision pipeline first settles places several labels claim by asking the model
/// (`decision::contest`); this rule settles the rest. In text order.
pub(crate) fn one_label_per_place(mut spans: Vec<SpanFound>) -> Vec<SpanFound> {
    spans.sort_by(|a, b| {
        b.probability
            .total_cmp(&a.probability)
            .then((b.end - b.start).cmp(&(a.end - a.start)))
            .then(a.start.cmp(&b.start))
    });
    let mut kept: Vec<SpanFound> = Vec::with_capacity(spans.len());
    for s in spans {
        if kept.iter().all(|k| s.end <= k.start || s.start >= k.end) {
            kept.push(s);
        }
    }
    kept.sort_by_key(|s| s.start);
    kept
}

/// Whether a text may hold a part that a label of the PII preset names, by a form every such
/// part has: an email address holds an `@`, a card number twelve digits or more, and so on.
/// A label the text cannot hold is not asked on it: its branch would only copy other words
/// (and start contests over them); a span copied under a label without its form is dropped
/// before any contest. The checks are necessary, never sufficient (the model still
/// finds the parts), and apply only to a preset label as the preset describes it (its key with
/// no description, or with the preset's own); any other label, and the preset's names, places
/// and dates, which have no such form, are always asked.
pub(crate) fn may_hold(key: &str, description: Option<&str>, text: &[u8]) -> bool {
    /// The forms, built once; a pattern that failed to build asks its label.
    struct Forms {
        email: Option<Regex>,
        /// An email address as a word, whose domain is not a web address.
        email_word: Option<Regex>,
        url: Option<Regex>,
        ip: Option<Regex>,
        card: Option<Regex>,
        iban: Option<Regex>,
        /// A run of digits each set off by at most two marks, as telephone numbers are
        /// written; a number has 7 to 15 digits (E.164's longest), its extension after.
        digit_run: Option<Regex>,
        /// A date written in numbers (`1999-11-02`, `02.11.1999`), which is not a telephone
        /// number though its digits run like one.
        date: Option<Regex>,
    }
    static FORMS: LazyLock<Forms> = LazyLock::new(|| {
        let re = |pattern: &str| Regex::new(pattern).ok();
        Forms {
            email: re(r"[@＠]"),
            email_word: re(r"[^\s@＠]*[@＠][^\s@＠]*"),
            // A scheme, a `www.`, or a host name's dot before two letters or more.
            url: re(r"://|www\.|\w\.[^\W\d_]{2,}"),
            // Four dotted numbers, or two colons between hex digits (IPv6).
            ip: re(r"\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}|[0-9A-Fa-f]*:[0-9A-Fa-f]*:"),
            // Twelve to nineteen digits standing as a word, each group set off by at most one
            // space, dot or dash (the digits inside an IBAN are not one).
            card: re(r"\b[0-9](?:[ .\-]?[0-9]){11,18}\b"),
            // A country code and two check digits, then ten characters or more.
            iban: re(r"(?i)[a-z]{2}\d{2}(?: ?[a-z0-9]){10,}"),
            digit_run: re(r"\d(?:[ .\-()/]{0,2}\d)*"),
            date: re(r"^(?:\d{4}([-/.])\d{1,2}([-/.])\d{1,2}|\d{1,2}([-/.])\d{1,2}([-/.])\d{4})$"),
        }
    });
    if !as_preset_describes(key, description) {
        return true;
    }
    let f = &*FORMS;
    let has = |form: &Option<Regex>, text: &[u8]| form.as_ref().is_none_or(|r| r.is_match(text));
    match key {
        "EMAIL_ADDRESS" => has(&f.email, text),
        "URL" => match &f.email_word {
            Some(email) => has(&f.url, &email.replace_all(text, &b" "[..])),
            None => true,
        },
        "IP_ADDRESS" => has(&f.ip, text),
        "CREDIT_CARD" => has(&f.card, text),
        "IBAN" => has(&f.iban, text),
        "PHONE_NUMBER" => f.digit_run.as_ref().is_none_or(|r| {
            r.find_iter(text).any(|run| {
                let digits = String::from_utf8_lossy(run.as_bytes())
                    .chars()
                    .filter(|c| c.is_numeric())
                    .count();
                let date = f.date.as_ref().is_some_and(|d| d.is_match(run.as_bytes()));
                (7..=15).contains(&digits) && !date
            })
        }),
        _ => true,
    }
}

/// Whether a label is one of the `pii` preset's as the preset describes it: its key, with no
/// description or with the preset's own.
pub(crate) fn as_preset_describes(key: &str, description: Option<&str>) -> bool {
    protocol::PII_LABELS
        .iter()
        .find(|(k, _)| *k == key)
        .is_some_and(|(_, own)| description.is_none_or(|d| d == *own))
}

/// Payment card numbers in `text`, as code-point ranges: 12 to 19 digits (ISO/IEC 7812)
/// standing as a word, each group set off by at most one space or dash, that pass the Luhn
/// check and begin as a card network's numbers do (Visa 4; Mastercard 51–55 and 2221–2720;
/// American Express 34, 37; Discover 6011, 644–649, 65; JCB 35, 2131, 1800; Diners 30, 36,
/// 38; Maestro 50, 56–58, 6304, 6759, 6761–6763). Not one that follows a `+` (a telephone
/// number written internationally).
pub(crate) fn card_numbers(text: &str) -> Vec<(usize, usize)> {
    static CARD: LazyLock<Option<regex::Regex>> =
        LazyLock::new(|| regex::Regex::new(r"\b[0-9](?:[ \-]?[0-9]){11,18}\b").ok());
    let Some(card) = CARD.as_ref() else {
        return Vec::new();
    };
    let luhn = |digits: &[u32]| {
        let sum: u32 = digits
            .iter()
            .rev()
            .enumerate()
            .map(|(i, &d)| match (i % 2, d * 2) {
                (0, _) => d,
                (_, dd) if dd > 9 => dd - 9,
                (_, dd) => dd,
            })
            .sum();
        sum.is_multiple_of(10)
    };
    let network = |d: &[u32]| {
        let n = |k: usize| d.iter().take(k).fold(0u32, |a, &x| a * 10 + x);
        d[0] == 4
            || (51..=55).contains(&n(2))
            || (2221..=2720).contains(&n(4))
            || [34, 37, 35, 30, 36, 38, 65, 50, 56, 57, 58].contains(&n(2))
            || [6011, 2131, 1800, 6304, 6759, 6761, 6762, 6763].contains(&n(4))
            || (644..=649).contains(&n(3))
    };
    card.find_iter(text)
        .filter(|m| !text[..m.start()].trim_end().ends_with('+'))
        .filter(|m| {
            let digits: Vec<u32> = m.as_str().chars().filter_map(|c| c.to_digit(10)).collect();
            (12..=19).contains(&digits.len()) && network(&digits) && luhn(&digits)
        })
        .map(|m| {
            let start = text[..m.start()].chars().count();
            (start, start + m.as_str().chars().count())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn card_numbers_are_found_by_their_check_digit_and_network() {
        let text = "Paid with 4220 0332 2453 8329 — not 4220 0332 2453 8328, nor the \
                    phone +44 2079 4600 5815 — and with 378282246310005 (Amex), café 5555-5555-5555-4444.";
        let found: Vec<String> = card_numbers(text)
            .into_iter()
            .map(|(a, b)| text.chars().skip(a).take(b - a).collect())
            .collect();
        assert_eq!(
            found,
            [
                "4220 0332 2453 8329",
                "378282246310005",
                "5555-5555-5555-4444"
            ]
        );
        // A Luhn-valid number no card network issues is not one.
        assert!(card_numbers("order 1234567890123452").is_empty());
    }

    #[test]
    fn a_preset_label_is_asked_only_of_a_text_that_has_its_form() {
        let asked = |key: &str, text: &str| may_hold(key, None, text.as_bytes());
        // Each form, met and missed.
        for (key, holds, lacks) in [
            ("EMAIL_ADDRESS", "write to jane@x.io", "write to jane at x"),
            (
                "URL",
                "see https://x/ or giles.info",
                "see the site or mail jo@giles.info",
            ),
            ("IP_ADDRESS", "from 10.0.0.1 or fe80::1", "from 10.0.1"),
            (
                "CREDIT_CARD",
                "card 4220 0332 2453 8329",
                "card 4220 0332 245",
            ),
            (
                "CREDIT_CARD",
                "card 4220-0332-2453-8329.",
                "IBAN GB49FTTI47460547427019",
            ),
            ("IBAN", "to de89 3704 0044 0532 0130 00", "to DE89 3704"),
            ("PHONE_NUMBER", "call (913) 375-8584", "call 375-858"),
            (
                "PHONE_NUMBER",
                "call 001-447-338-1247x14652",
                "card 4220033224538329",
            ),
            ("PHONE_NUMBER", "call 415.555.0199", "seen on 1999-11-02"),
            ("PHONE_NUMBER", "call 1999 1102", "seen on 02.11.1999"),
        ] {
            assert!(asked(key, holds), "{key} on {holds:?}");
            assert!(!asked(key, lacks), "{key} on {lacks:?}");
        }
        // Names, places and dates have no such form: always asked.
        for key in ["PERSON", "LOCATION", "DATE_TIME"] {
            assert!(asked(key, "nothing here"));
        }
        // The preset's description is the preset's label; any other, or another key, is the
        // client's own and always asked.
        let email = protocol::PII_LABELS
            .iter()
            .find(|(k, _)| *k == "EMAIL_ADDRESS")
            .map(|(_, d)| *d);
        assert!(!may_hold("EMAIL_ADDRESS", email, b"no address"));
        assert!(may_hold(
            "EMAIL_ADDRESS",
            Some("a user name or an email address"),
            b"jane"
        ));
        assert!(may_hold("EMAIL", None, b"no address"));
    }

    #[test]
    fn a_copy_is_found_at_code_point_offsets_after_emoji_and_cjk() {
        let text = "😀 東京 mail jane@x.io or jane@x.io";
        let found = vec![(
            0,
            text.len(),
            vec![Copied {
                text: "jane@x.io".into(),
                probability: 0.9,
            }],
        )];
        let spans = locate("EMAIL", text, &found);
        assert_eq!(spans.len(), 2);
        let chars: Vec<char> = text.chars().collect();
        for s in &spans {
            let got: String = chars[s.start..s.end].iter().collect();
            assert_eq!(got, s.text);
            assert_eq!(s.text, "jane@x.io");
        }
        assert_eq!(spans[0].start, 10);
    }

    #[test]
    fn pieces_of_one_number_are_joined_and_take_their_bracket() {
        let text = "Call (454)556-5275x582 or 415 555, 0134 now";
        let copy = |t: &str, p: f64| Copied {
            text: t.into(),
            probability: p,
        };
        let found = vec![(
            0,
            text.len(),
            vec![
                copy("454", 0.6),
                copy("556", 0.9),
                copy("5275", 0.7),
                copy("582", 0.5),
                copy("415", 0.8),
                copy("555", 0.8),
                copy("0134", 0.8),
            ],
        )];
        let spans = locate("PHONE", text, &found);
        let got: Vec<(&str, f64)> = spans
            .iter()
            .map(|s| (s.text.as_str(), s.probability))
            .collect();
        // Whitespace and a comma keep pieces apart.
        assert_eq!(
            got,
            vec![
                ("(454)556-5275x582", 0.9),
                ("415", 0.8),
                ("555", 0.8),
                ("0134", 0.8)
            ]
        );
        assert_eq!((spans[0].start, spans[0].end), (5, 22));
    }

    #[test]
    fn overlapping_places_keep_the_longer() {
        let text = "Ada Lovelace wrote";
        let found = vec![(
            0,
            text.len(),
            vec![
                Copied {
                    text: "Ada".into(),
                    probability: 0.9,
                },
                Copied {
                    text: "Ada Lovelace".into(),
                    probability: 0.8,
                },
            ],
        )];
        let spans = locate("PERSON", text, &found);
        assert_eq!(spans.len(), 1);
        assert_eq!((spans[0].start, spans[0].end), (0, 12));
    }

    #[test]
    fn only_the_part_a_branch_read_is_searched() {
        let text = "a@b.c then a@b.c";
        let found = vec![(
            6,
            text.len() - 6,
            vec![Copied {
                text: "a@b.c".into(),
                probability: 1.0,
            }],
        )];
        let spans = locate("EMAIL", text, &found);
        assert_eq!(spans.len(), 1);
        assert_eq!(spans[0].start, 11);
    }

    #[test]
    fn a_place_claimed_by_two_labels_goes_to_the_more_probable() {
        let span = |label: &str, start, end, p| SpanFound {
            label: label.into(),
            start,
            end,
            text: String::new(),
            probability: p,
        };
        let kept = one_label_per_place(vec![
            span("PHONE_NUMBER", 10, 24, 0.6),
            span("IP_ADDRESS", 10, 24, 0.9),
            span("PERSON", 0, 8, 0.7),
            span("URL", 30, 50, 0.95),
            span("PERSON", 37, 42, 0.9),
        ]);
        let labels: Vec<&str> = kept.iter().map(|s| s.label.as_str()).collect();
        assert_eq!(labels, ["PERSON", "IP_ADDRESS", "URL"]);
    }
}
