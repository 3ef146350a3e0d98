//! Key-value pairs read from a state's text (`battery: 6%`, `dirt_level=34`), as the
//! package's `kv` models read them.

use std::sync::OnceLock;

use regex::Regex;

/// Most pairs read from one state.
pub(crate) const MAX_PAIRS: usize = 16;
/// Features of one value.
pub(crate) const N_FEATURES: usize = 4;

/// One pair: its key, the label of its line (the text before the line's first `:` when that
/// differs from the key, else the key), and its value.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Pair {
    pub key: String,
    pub label: String,
    pub value: f64,
}

fn pattern() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    // key [:=] number [%]; the key may follow a label on its line ("zone_a: dirt_level=34").
    RE.get_or_init(|| {
        Regex::new(r"([A-Za-z][A-Za-z0-9_ .\-]{0,40}?)\s*[:=]\s*(-?\d+(?:\.\d+)?)\s*(%?)")
            .unwrap_or_else(|_| unreachable!("the pattern is valid"))
    })
}

/// Python's `str.splitlines`: lines end at \n, \r, \r\n, \v, \f, \x1c-\x1e, \x85, \u2028
/// and \u2029.
fn lines(text: &str) -> impl Iterator<Item = &str> {
    let mut rest = text;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        match rest.char_indices().find(|(_, c)| {
            matches!(
                c,
                '\n' | '\r'
                    | '\x0b'
                    | '\x0c'
                    | '\x1c'
                    | '\x1d'
                    | '\x1e'
                    | '\u{85}'
                    | '\u{2028}'
                    | '\u{2029}'
            )
        }) {
            Some((i, c)) => {
                let line = &rest[..i];
                let mut next = i + c.len_utf8();
                if c == '\r' && rest[next..].starts_with('\n') {
                    next += 1;
                }
                rest = &rest[next..];
                Some(line)
            }
            None => {
                let line = rest;
                rest = "";
                Some(line)
            }
        }
    })
}

/// The first `max` pairs of `text`, line by line.
pub(crate) fn kv_pairs(text: &str, max: usize) -> Vec<Pair> {
    let mut out = Vec::new();
    for line in lines(text) {
        let head = line.split(':').next().unwrap_or("").trim();
        for m in pattern().captures_iter(line) {
            let (Some(k), Some(v)) = (m.get(1), m.get(2)) else {
                continue;
            };
            let key = k.as_str().trim().to_string();
            let Ok(value) = v.as_str().parse::<f64>() else {
                continue;
            };
            let label = if !head.is_empty() && head != key {
                head.to_string()
            } else {
                key.clone()
            };
            out.push(Pair { key, label, value });
            if out.len() >= max {
                return out;
            }
        }
    }
    out
}

/// Fixed features of a value, computed in f64 and read as f32, as the package does.
pub(crate) fn value_features(v: f64) -> [f32; N_FEATURES] {
    let a = v.abs();
    [
        (v / 100.0).clamp(-1.0, 1.0) as f32,
        (a.ln_1p().copysign(v) / 5.0) as f32,
        if 0.0 < a && a < 1.0 { 1.0 } else { 0.0 },
        (v / 10.0).clamp(-1.0, 1.0) as f32,
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_follow_lines_and_labels() {
        let p = kv_pairs(
            "battery: 6%\nzone_a: dirt_level=34\r\nfront_obstacle_m = 7.0\u{2028}x: -2",
            16,
        );
        let got: Vec<(&str, &str, f64)> = p
            .iter()
            .map(|p| (p.key.as_str(), p.label.as_str(), p.value))
            .collect();
        assert_eq!(
            got,
            vec![
                ("battery", "battery", 6.0),
                ("dirt_level", "zone_a", 34.0),
                ("front_obstacle_m", "front_obstacle_m = 7.0", 7.0),
                ("x", "x", -2.0),
            ]
        );
        assert_eq!(kv_pairs("a: 1, b: 2, c: 3", 2).len(), 2);
        assert!(kv_pairs("no numbers here", 16).is_empty());
    }

    #[test]
    fn value_features_clip_and_flag() {
        assert_eq!(value_features(500.0)[0], 1.0);
        assert_eq!(value_features(-500.0)[3], -1.0);
        assert_eq!(value_features(0.5)[2], 1.0);
        assert_eq!(value_features(0.0)[2], 0.0);
        assert!((value_features(-9.0)[1] - (-(10f64.ln()) / 5.0) as f32).abs() < 1e-7);
    }
}
