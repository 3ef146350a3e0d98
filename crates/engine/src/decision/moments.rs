//! When something first appears in a video: a choice question asking "when" ("At which
//! moment does a dog appear?") over options that each name a span of the clip ("at the
//! start", "in the middle", "at the end", "between 2 and 4 seconds", "after 3 s", "never").
//! Pure functions: the spans read from the options' words, and each option's probability
//! from the detector's presence at each sampled moment. No model.

/// A span of the clip an option names.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Span {
    /// From `.0` to before `.1` seconds (`.1` may be infinite).
    Seconds(f64, f64),
    /// A third of the clip: 0 the start, 1 the middle, 2 the end.
    Third(u8),
    /// The target never appears.
    Never,
}

/// The words and numbers of a text, lower case; a number keeps its decimal point.
fn tokens(text: &str) -> Vec<String> {
    text.split(|c: char| !(c.is_alphanumeric() || c == '.'))
        .map(|t| t.trim_matches('.'))
        .filter(|t| !t.is_empty())
        .map(str::to_lowercase)
        .collect()
}

/// Whether a question's instructions ask when ("When does…", "At which moment…", "At what
/// point…", "In which part of the video…").
pub(crate) fn asks_when(instructions: &str) -> bool {
    let t = tokens(instructions);
    let has = |words: &[&str]| t.iter().any(|w| words.contains(&w.as_str()));
    has(&["when"])
        || has(&["which", "what"])
            && has(&[
                "moment", "time", "point", "part", "second", "seconds", "instant",
            ])
}

/// The span an option names, when it names one.
pub(crate) fn span_of(option: &str) -> Option<Span> {
    let t = tokens(option);
    let has = |words: &[&str]| t.iter().any(|w| words.contains(&w.as_str()));
    if has(&["never", "nowhere", "none", "not", "doesn", "no"]) {
        return Some(Span::Never);
    }
    let numbers: Vec<f64> = t
        .iter()
        .filter_map(|w| w.trim_end_matches('s').parse::<f64>().ok())
        .filter(|n| n.is_finite() && *n >= 0.0)
        .collect();
    match numbers.as_slice() {
        [a, b] => return Some(Span::Seconds(a.min(*b), a.max(*b))),
        [n] => {
            let span = if has(&["before", "under", "within", "by", "first", "less"]) {
                Span::Seconds(0.0, *n)
            } else if has(&["after", "past", "later", "from", "over", "more"]) {
                Span::Seconds(*n, f64::INFINITY)
            } else {
                Span::Seconds(*n, n + 1.0)
            };
            return Some(span);
        }
        [] => {}
        _ => return None,
    }
    if has(&[
        "start",
        "beginning",
        "begin",
        "begins",
        "first",
        "early",
        "opening",
        "outset",
    ]) {
        Some(Span::Third(0))
    } else if has(&["middle", "halfway", "midway", "half"]) {
        Some(Span::Third(1))
    } else if has(&["end", "ending", "last", "final", "late", "close"]) {
        Some(Span::Third(2))
    } else {
        None
    }
}

/// Each option's probability that the target first appears in its span, from `seen`: each
/// sampled moment's time (ascending) and the probability the target is there then, moments
/// taken as independent. The target first appears at a moment when it is there and was at
/// none before; "never" is its absence at every moment. Unnormalised: the caller takes each
/// option's share of what the options cover, so a question without a "never" option is
/// answered given that the target appears.
pub(crate) fn first_seen(seen: &[(f64, f64)], seconds: f64, spans: &[Span]) -> Vec<f64> {
    let mut unseen_so_far = 1.0;
    let mut first = Vec::with_capacity(seen.len());
    for (t, p) in seen {
        let p = p.clamp(0.0, 1.0);
        first.push((*t, unseen_so_far * p));
        unseen_so_far *= 1.0 - p;
    }
    let third = seconds.max(f64::MIN_POSITIVE) / 3.0;
    spans
        .iter()
        .map(|span| match span {
            Span::Never => unseen_so_far,
            Span::Seconds(from, until) => first
                .iter()
                .filter(|(t, _)| from <= t && t < until)
                .map(|(_, p)| p)
                .sum(),
            Span::Third(k) => {
                let (from, until) = (f64::from(*k) * third, f64::from(*k + 1) * third);
                first
                    .iter()
                    .filter(|(t, _)| *t >= from && (*t < until || *k == 2))
                    .map(|(_, p)| p)
                    .sum()
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each option's share, as the caller takes it.
    fn first_seen(seen: &[(f64, f64)], seconds: f64, spans: &[Span]) -> Vec<f64> {
        let mass = super::first_seen(seen, seconds, spans);
        let z: f64 = mass.iter().sum();
        mass.iter().map(|m| m / z).collect()
    }

    #[test]
    fn options_name_spans_of_the_clip() {
        assert!(asks_when("At which moment does a dog appear?"));
        assert!(asks_when("When does the car show up?"));
        assert!(asks_when("In what part of the video is there a person?"));
        assert!(!asks_when("Which animal is there?"));
        assert_eq!(span_of("At the start"), Some(Span::Third(0)));
        assert_eq!(span_of("in the middle"), Some(Span::Third(1)));
        assert_eq!(span_of("towards the end"), Some(Span::Third(2)));
        assert_eq!(span_of("It does not appear"), Some(Span::Never));
        assert_eq!(span_of("never"), Some(Span::Never));
        assert_eq!(span_of("0-2 s"), Some(Span::Seconds(0.0, 2.0)));
        assert_eq!(
            span_of("between 2.5 and 4 seconds"),
            Some(Span::Seconds(2.5, 4.0))
        );
        assert_eq!(span_of("after 3s"), Some(Span::Seconds(3.0, f64::INFINITY)));
        assert_eq!(
            span_of("in the first 2 seconds"),
            Some(Span::Seconds(0.0, 2.0))
        );
        assert_eq!(span_of("at 3 s"), Some(Span::Seconds(3.0, 4.0)));
        assert_eq!(span_of("a dog"), None);
        assert_eq!(span_of("1, 2 or 3 s"), None);
    }

    #[test]
    fn the_first_sure_moment_takes_the_answer() {
        // Absent for 2 s, then there: the target first appears at 2 s, in the middle third
        // of a 6 s clip.
        let seen: Vec<(f64, f64)> = [0.01, 0.01, 0.9, 0.95, 0.9, 0.9]
            .iter()
            .enumerate()
            .map(|(t, p)| (t as f64, *p))
            .collect();
        let spans = [Span::Third(0), Span::Third(1), Span::Third(2), Span::Never];
        let p = first_seen(&seen, 6.0, &spans);
        assert!(p[1] > 0.85, "{p:?}");
        assert!(p[3] < 0.01, "{p:?}");
        assert!((p.iter().sum::<f64>() - 1.0).abs() < 1e-9);
        // Never there: "never" takes the answer; without a "never" option, the spans share
        // what little there is.
        let absent: Vec<(f64, f64)> = (0..6).map(|t| (f64::from(t), 0.01)).collect();
        assert!(first_seen(&absent, 6.0, &spans)[3] > 0.9);
        let p = first_seen(&absent, 6.0, &spans[..3]);
        assert!((p.iter().sum::<f64>() - 1.0).abs() < 1e-9, "{p:?}");
        // Seconds: from 2 s on.
        let p = first_seen(
            &seen,
            6.0,
            &[Span::Seconds(0.0, 2.0), Span::Seconds(2.0, 9.0)],
        );
        assert!(p[1] > 0.95, "{p:?}");
    }
}
