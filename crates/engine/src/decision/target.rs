//! What a box question's instructions ask to find, read from their words: the detector kind
//! they name (its name, plural or a common other word for it) and the position words that
//! choose among several objects of that kind; then the box chosen among a picture's
//! detections. Pure functions, no model.

use super::moments;
use crate::backend::{iou, Found};

/// Other words for a kind (COCO's names), singular and plural forms included.
const OTHER_WORDS: &[(&str, &str)] = &[
    ("man", "person"),
    ("men", "person"),
    ("woman", "person"),
    ("women", "person"),
    ("people", "person"),
    ("persons", "person"),
    ("boy", "person"),
    ("girl", "person"),
    ("child", "person"),
    ("children", "person"),
    ("kid", "person"),
    ("human", "person"),
    ("pedestrian", "person"),
    ("rider", "person"),
    ("player", "person"),
    ("bike", "bicycle"),
    ("motorbike", "motorcycle"),
    ("scooter", "motorcycle"),
    ("plane", "airplane"),
    ("aeroplane", "airplane"),
    ("aircraft", "airplane"),
    ("jet", "airplane"),
    ("automobile", "car"),
    ("taxi", "car"),
    ("lorry", "truck"),
    ("pickup", "truck"),
    ("ship", "boat"),
    ("hydrant", "fire hydrant"),
    ("puppy", "dog"),
    ("kitten", "cat"),
    ("pony", "horse"),
    ("lamb", "sheep"),
    ("cattle", "cow"),
    ("calf", "cow"),
    ("bag", "handbag"),
    ("purse", "handbag"),
    ("phone", "cell phone"),
    ("cellphone", "cell phone"),
    ("smartphone", "cell phone"),
    ("mobile", "cell phone"),
    ("television", "tv"),
    ("monitor", "tv"),
    ("sofa", "couch"),
    ("plant", "potted plant"),
    ("table", "dining table"),
    ("ball", "sports ball"),
    ("glass", "wine glass"),
    ("doughnut", "donut"),
    ("fridge", "refrigerator"),
    ("hairdryer", "hair drier"),
    ("teddy", "teddy bear"),
    ("racket", "tennis racket"),
];

/// Which of several objects of the kind the instructions mean.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Position {
    /// No position word: the detector's surest object.
    Surest,
    Left,
    Right,
    Top,
    Bottom,
    Largest,
    Smallest,
    Middle,
}

/// The words of a text, lower case, letters and digits only.
fn words(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect()
}

/// Whether `w` is `name` or its plural.
fn names(w: &str, name: &str) -> bool {
    w == name
        || w.strip_suffix('s') == Some(name)
        || w.strip_suffix("es") == Some(name)
        || (name.ends_with("fe") && w.strip_suffix("ves") == name.strip_suffix("fe"))
        || (name.ends_with('f') && w.strip_suffix("ves") == name.strip_suffix('f'))
        || (name == "mouse" && w == "mice")
}

/// The kind the instructions name first (an index into `kinds`), when they name one.
pub(crate) fn named_kind(instructions: &str, kinds: &[&str]) -> Option<usize> {
    let w = words(instructions);
    (0..w.len()).find_map(|at| kind_at(&w, at, kinds))
}

/// The kind named by the words starting at `at`: a kind of two words first ("traffic
/// light", "teddy bear"), then one, then a common other word for one.
fn kind_at(w: &[String], at: usize, kinds: &[&str]) -> Option<usize> {
    let word = w.get(at)?;
    for (k, name) in kinds.iter().enumerate() {
        let parts: Vec<&str> = name.split(' ').collect();
        let [first @ .., last] = parts.as_slice() else {
            continue;
        };
        let Some(here) = w.get(at..at + parts.len()) else {
            continue;
        };
        let leading = first.iter().zip(here).all(|(p, h)| p == h);
        if leading && here.last().is_some_and(|h| names(h, last)) {
            return Some(k);
        }
    }
    let (_, kind) = OTHER_WORDS.iter().find(|(other, _)| names(word, other))?;
    kinds.iter().position(|k| k == kind)
}

/// Words that join a thing to the object it is on, of or near ("the hat on the man").
const JOINS: &[&str] = &[
    "on", "of", "in", "at", "by", "under", "above", "behind", "near", "beside", "around", "inside",
    "from", "over", "below",
];

/// Words before a target that name no thing of their own.
const FILLER: &[&str] = &[
    "the", "a", "an", "find", "locate", "where", "is", "are", "box", "show", "me", "draw", "point",
    "to", "please", "mark", "outline", "its", "his", "her", "their", "this", "that", "these",
    "those", "there", "can", "you", "see", "any", "some", "picture", "photo", "image", "frame",
    "video", "clip", "scene", "one", "ones", "which", "what", "how", "many", "much", "does", "do",
    "appear", "visible", "in", "at", "on",
];

/// The thing the instructions ask to find when it is not an object of the detector's kinds
/// but something on, of or near one ("the dog's collar", "the hat on the man", "the wheel of
/// the bicycle"): the word before the join, or after the possessive. `None` when the kind
/// they name is the target itself ("the dog on the left", "the man with the hat").
pub(crate) fn part_named(instructions: &str, kinds: &[&str]) -> Option<String> {
    let w = words(instructions);
    let first_kind = (0..w.len()).find(|&at| kind_at(&w, at, kinds).is_some())?;
    // "the dog's collar": the kind, the possessive's "s", then the thing.
    if w.get(first_kind + 1).map(String::as_str) == Some("s") {
        if let Some(thing) = w.get(first_kind + 2) {
            let known = kind_at(&w, first_kind + 2, kinds).is_some();
            let plain = FILLER.contains(&thing.as_str()) || chooses(thing);
            if !known && !plain {
                return Some(thing.clone());
            }
        }
    }
    // "the hat on the man": a thing, then a join, before the kind.
    let before = &w[..first_kind];
    let join = before.iter().rposition(|x| JOINS.contains(&x.as_str()))?;
    before[..join]
        .iter()
        .find(|x| !FILLER.contains(&x.as_str()) && !chooses(x))
        .cloned()
}

/// The words that ask for a position, each with the position it asks for.
const POSITIONS: &[(&str, Position)] = &[
    ("left", Position::Left),
    ("leftmost", Position::Left),
    ("leftward", Position::Left),
    ("right", Position::Right),
    ("rightmost", Position::Right),
    ("rightward", Position::Right),
    ("top", Position::Top),
    ("topmost", Position::Top),
    ("upper", Position::Top),
    ("uppermost", Position::Top),
    ("highest", Position::Top),
    ("above", Position::Top),
    ("bottom", Position::Bottom),
    ("bottommost", Position::Bottom),
    ("lower", Position::Bottom),
    ("lowest", Position::Bottom),
    ("below", Position::Bottom),
    ("largest", Position::Largest),
    ("biggest", Position::Largest),
    ("big", Position::Largest),
    ("large", Position::Largest),
    ("closest", Position::Largest),
    ("nearest", Position::Largest),
    ("smallest", Position::Smallest),
    ("small", Position::Smallest),
    ("tiny", Position::Smallest),
    ("farthest", Position::Smallest),
    ("furthest", Position::Smallest),
    ("middle", Position::Middle),
    ("center", Position::Middle),
    ("centre", Position::Middle),
    ("central", Position::Middle),
];

/// Ordinal words, which choose among objects as position words do.
const ORDINALS: &[&str] = &["first", "second", "third", "last", "other"];

/// Whether a word chooses among objects (a position or an ordinal) rather than naming a thing.
fn chooses(word: &str) -> bool {
    POSITIONS.iter().any(|(w, _)| *w == word) || ORDINALS.contains(&word)
}

/// The position the instructions' words ask for: the first position word's.
pub(crate) fn position(instructions: &str) -> Position {
    words(instructions)
        .iter()
        .find_map(|w| POSITIONS.iter().find(|(p, _)| p == w).map(|(_, at)| *at))
        .unwrap_or(Position::Surest)
}

/// The objects a position chooses among: those of the kind the detector is at least half as
/// sure of as of its surest one (a faint double of an object is not "the one on the left"),
/// less any that lies mostly inside a larger one of them the detector is at least as sure of
/// (a part of an object, such as a horse's head seen past another's, is not another object;
/// a fainter box around a sure object and its neighbour does not hide it).
pub(crate) fn candidates(found: &[Found], kind: usize) -> Vec<Found> {
    let best = found
        .iter()
        .filter(|f| f.kind == kind)
        .map(|f| f.score)
        .fold(0.0f32, f32::max);
    let sure: Vec<Found> = found
        .iter()
        .filter(|f| f.kind == kind && f.score >= best / 2.0)
        .copied()
        .collect();
    sure.iter()
        .filter(|f| !sure.iter().any(|g| g.score >= f.score && part_of(f, g)))
        .copied()
        .collect()
}

/// The objects of a kind a picture holds: every detection of it, less one of each pair where
/// one lies mostly inside the other, the one the detector is less sure of (a part of an
/// object, or a box around a group, is not another object).
pub(crate) fn objects(found: &[Found], kind: usize) -> Vec<Found> {
    let of: Vec<Found> = found.iter().filter(|f| f.kind == kind).copied().collect();
    of.iter()
        .filter(|f| {
            !of.iter()
                .any(|g| (part_of(f, g) || part_of(g, f)) && (g.score > f.score))
        })
        .copied()
        .collect()
}

/// How surely `f` is read as its kind rather than as another kind seen at the same place: its
/// score's share of the best score of any kind whose box overlaps it by at least half. The
/// detector scores each kind of a place on its own, so a dog also comes out as a weaker cow;
/// one object has one kind.
pub(crate) fn read_right(f: &Found, found: &[Found]) -> f64 {
    let best = found
        .iter()
        .filter(|g| g.kind != f.kind && iou(&g.edges, &f.edges) >= 0.5)
        .map(|g| g.score)
        .fold(f.score, f32::max);
    if best > 0.0 {
        f64::from(f.score / best)
    } else {
        1.0
    }
}

/// Whether `small` lies mostly inside the larger `big` (at least `CONTAINED` of its area).
fn part_of(small: &Found, big: &Found) -> bool {
    let area = |e: &[f32; 4]| (e[2] - e[0]).max(0.0) * (e[3] - e[1]).max(0.0);
    let (a, b) = (&small.edges, &big.edges);
    let common = [
        a[0].max(b[0]),
        a[1].max(b[1]),
        a[2].min(b[2]),
        a[3].min(b[3]),
    ];
    area(b) > area(a) && area(&common) >= CONTAINED * area(a)
}

/// The share of a box's area inside a larger box that makes it a part of that one.
const CONTAINED: f32 = 0.85;

/// The object a position picks among `candidates`.
pub(crate) fn choose(candidates: &[Found], position: Position) -> Option<Found> {
    let centre = |f: &Found| {
        (
            (f.edges[0] + f.edges[2]) / 2.0,
            (f.edges[1] + f.edges[3]) / 2.0,
        )
    };
    let area = |f: &Found| (f.edges[2] - f.edges[0]) * (f.edges[3] - f.edges[1]);
    let key = |f: &Found| -> f32 {
        let (x, y) = centre(f);
        match position {
            Position::Surest => -f.score,
            Position::Left => x,
            Position::Right => -x,
            Position::Top => y,
            Position::Bottom => -y,
            Position::Largest => -area(f),
            Position::Smallest => area(f),
            Position::Middle => (x - 0.5).powi(2) + (y - 0.5).powi(2),
        }
    };
    candidates
        .iter()
        .min_by(|a, b| key(a).total_cmp(&key(b)))
        .copied()
}

/// Least overlap with the target's box at the moment before for a box to be the target now.
const FOLLOWS: f32 = 0.3;

/// The target through a video's sampled moments (`frames`: each moment's detections): chosen
/// by `position` at the moment the detector is surest of the kind, then followed moment by
/// moment, forwards and backwards, to the box of the kind that overlaps it (by at least
/// `FOLLOWS`) with the most score times overlap: a faint box that happens to overlap a little
/// more does not take the target from a sure one. A moment where none overlaps has no box
/// (the target is hidden or lost there).
pub(crate) fn follow(frames: &[Vec<Found>], kind: usize, position: Position) -> Vec<Option<Found>> {
    let mut out = vec![None; frames.len()];
    let surest = |f: &Vec<Found>| {
        f.iter()
            .filter(|d| d.kind == kind)
            .map(|d| d.score)
            .fold(0.0f32, f32::max)
    };
    let Some(anchor) = (0..frames.len())
        .filter(|&i| surest(&frames[i]) > 0.0)
        .max_by(|&a, &b| surest(&frames[a]).total_cmp(&surest(&frames[b])))
    else {
        return out;
    };
    let Some(start) = choose(&candidates(&frames[anchor], kind), position) else {
        return out;
    };
    out[anchor] = Some(start);
    for order in [
        (anchor + 1..frames.len()).collect::<Vec<_>>(),
        (0..anchor).rev().collect(),
    ] {
        let mut last = start.edges;
        for i in order {
            let next = frames[i]
                .iter()
                .filter(|d| d.kind == kind)
                .map(|d| (iou(&d.edges, &last), d))
                .filter(|(o, _)| *o >= FOLLOWS)
                .max_by(|a, b| (a.0 * a.1.score).total_cmp(&(b.0 * b.1.score)));
            if let Some((_, d)) = next {
                last = d.edges;
                out[i] = Some(*d);
            }
        }
    }
    out
}

/// What a noul or score question about the state's pictures asks that the detector answers.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Grounded {
    /// Whether an object of the kind is in the pictures (a noul).
    Presence(usize),
    /// How many objects of the kind (a score): each level's count, and whether it means that
    /// many or more.
    Count(usize, Vec<(u32, bool)>),
    /// Which of the options' kinds is in the pictures (a choice): each option's kind, in the
    /// question's option order.
    Which(Vec<usize>),
    /// When an object of the kind first appears in the video (a choice asking when): the span
    /// each option names, in the question's option order.
    When(usize, Vec<moments::Span>),
}

/// Words that ask about what a detector of kinds of object does not see.
const UNSEEN: &[&str] = &[
    "colour",
    "color",
    "coloured",
    "colored",
    "red",
    "blue",
    "green",
    "yellow",
    "black",
    "white",
    "brown",
    "grey",
    "gray",
    "orange",
    "pink",
    "purple",
    "wearing",
    "wears",
    "text",
    "written",
    "writing",
    "says",
    "read",
    "happy",
    "sad",
    "angry",
    "mood",
    "smiling",
    "emotion",
    "feel",
    "feeling",
    "weather",
    "sunny",
    "raining",
    "rainy",
    "brand",
    "logo",
    "price",
    "beautiful",
    "old",
    "young",
    "age",
    "collar",
    "hat",
    "tail",
];

/// The detector kind each option names (by its meaning: description, else key), when every
/// option names one and no two name the same.
fn option_kinds(
    options: &[(String, Option<String>)],
    kinds: &[&str],
) -> Result<Vec<usize>, Ungrounded> {
    let mut out = Vec::with_capacity(options.len());
    for (key, description) in options {
        let meaning = protocol::meaning(key, description);
        let Some(k) = named_kind(meaning, kinds) else {
            return Err(Ungrounded::OptionNamesNoKind(meaning.to_string()));
        };
        if out.contains(&k) {
            return Err(Ungrounded::OptionsShareAKind(kinds[k].to_string()));
        }
        out.push(k);
    }
    Ok(out)
}

/// Why the object detector cannot answer a question about the state's media (the refusal's
/// message says it).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub(crate) enum Ungrounded {
    #[error(
        "it asks about {0:?}, which the object detector does not see; it sees which of its \
         kinds of object are where"
    )]
    Unseen(String),
    #[error("it names none of the object detector's kinds (the card's detector.kinds)")]
    NamesNoKind,
    #[error(
        "its option {0:?} names none of the object detector's kinds (the card's detector.kinds)"
    )]
    OptionNamesNoKind(String),
    #[error("two of its options name the same kind, {0}")]
    OptionsShareAKind(String),
    #[error(
        "it asks when, and its option {0:?} names no span of the video (\"at the start\", \
         \"in the middle\", \"at the end\", \"between 2 and 4 seconds\", \"after 3 s\", \
         \"never\")"
    )]
    OptionNamesNoMoment(String),
    #[error("a picture has no moments: a question asking when is answered about a video")]
    PictureHasNoMoments,
    #[error(
        "a score about a picture asks how many, its levels counts (\"none\", \"one\", \
         \"3 or more\")"
    )]
    ScoreNotACount,
    #[error(
        "a {0} question about a picture is not answered from it; ask a noul (\"Is there a \
         dog?\"), a score (\"How many people?\") or a choice among kinds (\"Which animal is \
         there?\")"
    )]
    Type(&'static str),
    #[error(
        "about a video, the detector answers whether a kind appears (a noul) and when it first \
         does (a choice over spans of the clip), not how many or which"
    )]
    VideoCountOrWhich,
}

/// What a noul, score or choice question about the state's pictures asks of the detector, or why the
/// detector cannot answer it (for the refusal's message).
pub(crate) fn grounding(q: &protocol::Question, kinds: &[&str]) -> Result<Grounded, Ungrounded> {
    use protocol::QuestionKind;
    let instructions = q.instructions.as_deref().unwrap_or("");
    let w = words(instructions);
    // A word that is both a colour and a kind ("orange") is the kind unless a kind follows it
    // ("an orange car").
    let unseen = (0..w.len()).find(|&at| {
        UNSEEN.contains(&w[at].as_str())
            && (kind_at(&w, at, kinds).is_none() || kind_at(&w, at + 1, kinds).is_some())
    });
    if let Some(at) = unseen {
        return Err(Ungrounded::Unseen(w[at].clone()));
    }
    if let Some(part) = part_named(instructions, kinds) {
        return Err(Ungrounded::Unseen(part));
    }
    if let QuestionKind::Choice { options } = &q.kind {
        if moments::asks_when(instructions) {
            let kind = named_kind(instructions, kinds).ok_or(Ungrounded::NamesNoKind)?;
            let spans = options
                .iter()
                .map(|(key, description)| {
                    let meaning = protocol::meaning(key, description);
                    moments::span_of(meaning)
                        .ok_or_else(|| Ungrounded::OptionNamesNoMoment(meaning.to_string()))
                })
                .collect::<Result<Vec<_>, _>>()?;
            return Ok(Grounded::When(kind, spans));
        }
        return option_kinds(options, kinds).map(Grounded::Which);
    }
    let Some(kind) = named_kind(instructions, kinds) else {
        return Err(Ungrounded::NamesNoKind);
    };
    match &q.kind {
        QuestionKind::Noul { .. } => Ok(Grounded::Presence(kind)),
        QuestionKind::Score { levels } => {
            let asks_count = w
                .windows(2)
                .any(|p| p[0] == "how" && (p[1] == "many" || p[1] == "much"))
                || w.iter().any(|x| x == "number" || x == "count");
            let counts: Option<Vec<(u32, bool)>> = levels.iter().map(|l| count_of(l)).collect();
            match (asks_count, counts) {
                (true, Some(c)) => Ok(Grounded::Count(kind, c)),
                _ => Err(Ungrounded::ScoreNotACount),
            }
        }
        k => Err(Ungrounded::Type(k.type_name())),
    }
}

/// What a question asks of the detector about the state's media: `None` when the detector
/// reads no media for it (the state has no pictures and no video, or a video beside pictures,
/// or several videos); else what it asks, or why the detector cannot answer it. About the
/// state's pictures a noul or a count; about its only video, whether a kind appears.
pub(crate) fn media_grounding(
    r: &protocol::request::DecisionRequest,
    q: &protocol::Question,
    kinds: &[&str],
) -> Option<Result<Grounded, Ungrounded>> {
    let pictures = match (r.images.len(), r.videos.len()) {
        (0, 1) => false,
        (n, 0) if n > 0 => true,
        _ => return None,
    };
    Some(grounding(q, kinds).and_then(|g| match g {
        Grounded::Count(..) | Grounded::Which(..) if !pictures => {
            Err(Ungrounded::VideoCountOrWhich)
        }
        Grounded::When(..) if pictures => Err(Ungrounded::PictureHasNoMoments),
        g => Ok(g),
    }))
}

/// The count a score level says, and whether it means that many or more.
fn count_of(level: &str) -> Option<(u32, bool)> {
    let w = words(level);
    let number = |x: &str| -> Option<u32> {
        Some(match x {
            "no" | "none" | "zero" | "nobody" | "nothing" => 0,
            "one" | "single" | "1st" => 1,
            "two" | "pair" => 2,
            "three" => 3,
            "four" => 4,
            "five" => 5,
            "six" => 6,
            "seven" => 7,
            "eight" => 8,
            "nine" => 9,
            "ten" => 10,
            d => d.parse().ok()?,
        })
    };
    let n = w.iter().find_map(|x| number(x))?;
    let more = level.contains('+')
        || w.iter()
            .any(|x| matches!(x.as_str(), "more" | "many" | "several" | "plus" | "least"));
    Some((n, more))
}

/// The probability that an object is there, from the objects seen with probabilities `p`:
/// that of the surest. (Not `1 - Π(1 - p)`: the detector's weak boxes of a kind are seldom
/// independent sightings, and on darknet's photographs they summed to a kind that is not
/// there, a cat beside the dog.)
pub(crate) fn presence(p: &[f64]) -> f64 {
    p.iter().copied().fold(0.0, f64::max)
}

/// Which of several kinds is in the pictures, from each kind's presence taken as independent:
/// the question says one of them is there, so each option is the probability that its kind is
/// there and the others are not, given that exactly one is (uniform when none can be).
pub(crate) fn which(presence: &[f64]) -> Vec<f64> {
    let p: Vec<f64> = presence.iter().map(|x| x.clamp(1e-6, 1.0 - 1e-6)).collect();
    let alone: Vec<f64> = (0..p.len())
        .map(|i| {
            p.iter()
                .enumerate()
                .map(|(j, x)| if i == j { *x } else { 1.0 - x })
                .product()
        })
        .collect();
    shares(&alone)
}

/// Each mass's share of their sum (uniform when they sum to nothing).
pub(crate) fn shares(mass: &[f64]) -> Vec<f64> {
    let z: f64 = mass.iter().sum();
    if z.is_nan() || z <= 0.0 {
        return vec![1.0 / mass.len().max(1) as f64; mass.len()];
    }
    mass.iter().map(|m| m / z).collect()
}

/// The probability of each level of `levels` from the objects seen with probabilities `p`,
/// renormalised over the levels. None is there with the probability [`presence`] says is
/// not; given at least one, the count is that of independent objects (Poisson-binomial)
/// given at least one. (Taken whole, the Poisson-binomial sums a kind's weak boxes: on
/// darknet's dog photograph eight faint people, the surest 0.37, made "three or more" 0.63.)
pub(crate) fn count_levels(p: &[f64], levels: &[(u32, bool)]) -> Vec<f64> {
    // exact[n]: the probability that exactly n of the objects are there.
    let mut exact = vec![1.0];
    for &x in p {
        let mut next = vec![0.0; exact.len() + 1];
        for (n, e) in exact.iter().enumerate() {
            next[n] += e * (1.0 - x);
            next[n + 1] += e * x;
        }
        exact = next;
    }
    let some = 1.0 - exact[0];
    let there = presence(p);
    if some > 0.0 {
        for e in exact.iter_mut().skip(1) {
            *e *= there / some;
        }
    }
    exact[0] = 1.0 - there;
    let of = |n: u32, more: bool| -> f64 {
        let n = n as usize;
        if more {
            exact.iter().skip(n).sum()
        } else {
            exact.get(n).copied().unwrap_or(0.0)
        }
    };
    let raw: Vec<f64> = levels.iter().map(|&(n, m)| of(n, m) + 1e-6).collect();
    shares(&raw)
}

#[cfg(test)]
mod tests {
    use super::*;

    const KINDS: &[&str] = &[
        "person",
        "bicycle",
        "dog",
        "horse",
        "knife",
        "mouse",
        "traffic light",
        "teddy bear",
        "cell phone",
    ];

    #[test]
    fn kinds_are_read_by_name_plural_and_other_word() {
        let k = |s: &str| named_kind(s, KINDS).map(|i| KINDS[i]);
        assert_eq!(k("the dog"), Some("dog"));
        assert_eq!(k("The DOGS near the bike"), Some("dog"));
        assert_eq!(k("the bike next to the dog"), Some("bicycle"));
        assert_eq!(k("the horse on the left"), Some("horse"));
        assert_eq!(k("a woman"), Some("person"));
        assert_eq!(k("knives"), Some("knife"));
        assert_eq!(k("the mice"), Some("mouse"));
        assert_eq!(k("the red traffic lights"), Some("traffic light"));
        assert_eq!(k("her teddy bear"), Some("teddy bear"));
        assert_eq!(k("the phone on the desk"), Some("cell phone"));
        assert_eq!(k("the rocket"), None);
        assert_eq!(k("traffic"), None);
    }

    #[test]
    fn positions_choose_among_the_sure_ones() {
        let f = |score: f32, l: f32, t: f32, r: f32, b: f32| Found {
            kind: 3,
            score,
            edges: [l, t, r, b],
        };
        let found = [
            f(0.9, 0.5, 0.1, 0.9, 0.5),
            f(0.7, 0.1, 0.4, 0.3, 0.9),
            // A faint double further left is not "the one on the left".
            f(0.2, 0.0, 0.0, 0.05, 0.05),
            // Nor is a part of the right one.
            f(0.8, 0.5, 0.1, 0.6, 0.2),
            Found {
                kind: 2,
                score: 0.95,
                edges: [0.0, 0.0, 0.1, 0.1],
            },
        ];
        let c = candidates(&found, 3);
        assert_eq!(c.len(), 2);
        let pick = |s: &str| choose(&c, position(s)).map(|f| f.score);
        assert_eq!(pick("the horse on the left"), Some(0.7));
        assert_eq!(pick("the rightmost horse"), Some(0.9));
        assert_eq!(pick("the horse"), Some(0.9));
        assert_eq!(pick("the lower horse"), Some(0.7));
        assert_eq!(pick("the biggest horse"), Some(0.9));
        assert_eq!(choose(&[], Position::Left), None);
    }

    #[test]
    fn a_thing_on_or_of_an_object_is_not_that_object() {
        let kinds = ["person", "bicycle", "dog", "horse", "cup", "dining table"];
        let part = |s: &str| part_named(s, &kinds);
        assert_eq!(part("the dog's collar").as_deref(), Some("collar"));
        assert_eq!(part("the hat on the man").as_deref(), Some("hat"));
        assert_eq!(
            part("Find the wheel of the bicycle").as_deref(),
            Some("wheel")
        );
        assert_eq!(part("the saddle on the horse").as_deref(), Some("saddle"));
        // The kind itself is the target, whatever follows or chooses it.
        for s in [
            "the dog",
            "the dog on the left",
            "the man with the hat",
            "the person on the horse",
            "the cup on the table",
            "the biggest of the dogs",
            "the dog's box",
            "Where is the leftmost horse in the picture?",
            "the horse on the right's",
        ] {
            assert_eq!(part(s), None, "{s}");
        }
        // Asked as a noul, a thing of an object is refused, not answered as the object.
        let noul = protocol::QuestionKind::Noul {
            when_false: None,
            when_true: None,
        };
        let q = protocol::Question::asked(
            noul,
            Some("Is there a wheel on the bicycle?"),
            None,
            protocol::Overflow::Truncate,
        );
        assert_eq!(
            grounding(&q, &kinds),
            Err(Ungrounded::Unseen("wheel".into()))
        );
    }

    #[test]
    fn a_target_is_followed_from_where_it_is_surest() {
        let at = |x: f32, score: f32| Found {
            kind: 1,
            score,
            edges: [x, 0.4, x + 0.2, 0.8],
        };
        // Two objects of the kind: the left one moves right a little each moment; the right
        // one stays. Moment 2 is where the detector is surest; moment 3 loses the left one,
        // and moment 4 finds it again near where it was last seen.
        let frames = vec![
            vec![at(0.10, 0.5), at(0.70, 0.5)],
            vec![at(0.14, 0.5), at(0.70, 0.5)],
            vec![at(0.18, 0.9), at(0.70, 0.6)],
            vec![at(0.70, 0.5)],
            vec![at(0.26, 0.4), at(0.70, 0.5)],
        ];
        let track = follow(&frames, 1, Position::Left);
        let x = |i: usize| track[i].map(|f| f.edges[0]);
        assert_eq!(
            (x(0), x(1), x(2), x(3), x(4)),
            (Some(0.10), Some(0.14), Some(0.18), None, Some(0.26))
        );
        assert!(follow(&frames, 2, Position::Left)
            .iter()
            .all(Option::is_none));
    }

    /// A noul naming a kind asks its presence, a score asking how many with levels that are
    /// counts asks its number; a colour, an unknown kind, uncounted levels or a choice are
    /// not the detector's to answer.
    #[test]
    fn what_a_question_about_a_picture_asks_of_the_detector() {
        use protocol::QuestionKind;
        let kinds = ["person", "bicycle", "car", "dog"];
        let ask = |kind: QuestionKind, instructions: &str| {
            protocol::Question::asked(kind, Some(instructions), None, protocol::Overflow::Truncate)
        };
        let noul = || QuestionKind::Noul {
            when_false: None,
            when_true: None,
        };
        let score = |levels: &[&str]| QuestionKind::Score {
            levels: levels.iter().map(|l| l.to_string()).collect(),
        };
        assert_eq!(
            grounding(&ask(noul(), "Is there a dog in the picture?"), &kinds),
            Ok(Grounded::Presence(3))
        );
        assert_eq!(
            grounding(
                &ask(
                    score(&["None", "One", "2", "Three or more"]),
                    "How many people are there?"
                ),
                &kinds
            ),
            Ok(Grounded::Count(
                0,
                vec![(0, false), (1, false), (2, false), (3, true)]
            ))
        );
        let choice = |options: &[(&str, Option<&str>)]| QuestionKind::Choice {
            options: options
                .iter()
                .map(|(k, d)| (k.to_string(), d.map(String::from)))
                .collect(),
        };
        // A choice among kinds, each option read by its meaning (its description, else its key).
        assert_eq!(
            grounding(
                &ask(
                    choice(&[("a", Some("A dog")), ("b", Some("a car")), ("person", None)]),
                    "Which of these is in the picture?"
                ),
                &kinds
            ),
            Ok(Grounded::Which(vec![3, 2, 0]))
        );
        for (kind, instructions) in [
            (noul(), "Is the dog brown?"),
            (noul(), "Is there a dragon?"),
            (score(&["Low", "High"]), "How many cars are there?"),
            (score(&["None", "One"]), "How old is the man?"),
            (
                choice(&[("dog", None), ("dragon", None)]),
                "Which animal is it?",
            ),
            (
                choice(&[("x", Some("a dog")), ("y", Some("dogs"))]),
                "Which?",
            ),
            (choice(&[("dog", None), ("car", None)]), "Which is red?"),
        ] {
            assert!(
                grounding(&ask(kind, instructions), &kinds).is_err(),
                "{instructions}"
            );
        }
    }

    /// A place the detector scores as two kinds is read as the surer one: the weaker kind's
    /// box there counts by its share of the best score; elsewhere a kind counts whole.
    #[test]
    fn one_place_is_read_as_its_surest_kind() {
        let at = |kind, score, edges| Found { kind, score, edges };
        let dog = at(3, 0.8, [0.1, 0.1, 0.5, 0.6]);
        let cow_on_dog = at(9, 0.2, [0.12, 0.1, 0.5, 0.62]);
        let cow_apart = at(9, 0.3, [0.6, 0.5, 0.9, 0.9]);
        let found = [dog, cow_on_dog, cow_apart];
        assert_eq!(read_right(&dog, &found), 1.0);
        assert!((read_right(&cow_on_dog, &found) - 0.25).abs() < 1e-6);
        assert_eq!(read_right(&cow_apart, &found), 1.0);
    }

    /// Which kind is there: the one there while the others are not, given exactly one is.
    #[test]
    fn which_kind_from_each_kinds_presence() {
        let w = which(&[0.8, 0.5]);
        let (a, b) = (0.8 * 0.5, 0.5 * 0.2);
        assert!((w[0] - a / (a + b)).abs() < 1e-9 && (w[1] - b / (a + b)).abs() < 1e-9);
        let w = which(&[0.5, 0.5, 0.5]);
        assert!(w.iter().all(|x| (x - 1.0 / 3.0).abs() < 1e-9), "{w:?}");
        let w = which(&[0.0, 0.0]);
        assert!((w[0] - 0.5).abs() < 1e-9, "{w:?}");
    }

    /// None is there as presence says; given some, the count of independent objects is
    /// Poisson-binomial; a level "or more" takes the tail.
    #[test]
    fn counts_and_presence_from_each_objects_probability() {
        let p = [0.9, 0.5];
        let levels = [(0, false), (1, false), (2, true)];
        let c = count_levels(&p, &levels);
        // Poisson-binomial: 0.05, 0.5, 0.45; none is 1 - 0.9, the rest shares 0.9 as 0.5 : 0.45.
        let want = [0.1, 0.9 * 0.5 / 0.95, 0.9 * 0.45 / 0.95];
        for (got, want) in c.iter().zip(want) {
            assert!((got - want).abs() < 1e-5, "{c:?}");
        }
        assert_eq!(presence(&p), 0.9);
        assert_eq!(presence(&[]), 0.0);
        // Many faint boxes do not make many objects more likely than none.
        let c = count_levels(&[0.3; 8], &[(0, false), (1, false), (3, true)]);
        assert!(c[0] > 0.69 && c[2] < 0.3, "{c:?}");
        assert_eq!(
            count_levels(&[], &levels)[0],
            shares(&[1.0 + 1e-6, 1e-6, 1e-6])[0]
        );
    }

    #[test]
    fn a_colour_that_is_a_kind_is_the_kind_unless_it_names_anothers_colour() {
        let kinds = ["person", "car", "orange"];
        let q = |s: &str| protocol::Question {
            kind: protocol::QuestionKind::Noul {
                when_false: None,
                when_true: None,
            },
            instructions: Some(s.to_string()),
            preset: None,
            over: None,
            overflow: Default::default(),
            require_full_input: false,
            decision_adapter: None,
        };
        assert_eq!(
            grounding(&q("Is there an orange in the picture?"), &kinds),
            Ok(Grounded::Presence(2))
        );
        assert_eq!(
            grounding(&q("Is there an orange car?"), &kinds),
            Err(Ungrounded::Unseen("orange".into()))
        );
        assert_eq!(
            grounding(&q("Is the car red?"), &kinds),
            Err(Ungrounded::Unseen("red".into()))
        );
    }
}
