//! Box questions answered by the object detector a decision model carries.
//!
//! Each box question's target picture (the one its instructions reference, else the state's
//! only one) is decoded and read by the detector once per request however many questions ask
//! about it, on a blocking thread beside the request's text questions. The instructions name
//! a kind of object: by its name, plural or another common word for it (`target`), else the
//! model itself answers a choice among the detector's kinds and "something else". Position
//! words choose among several objects of that kind. The confidence is the probability that
//! the kind was read right times the detector's score of the chosen object, calibrated to the
//! probability that the box is right (the detector's curve, `calibration`); a target the detector does not find gets
//! the whole picture with a low confidence (a box is always given; a noul says whether the
//! target is there).
//!
//! The text path places a stand-in failure where each box or track question sits; [`place`] puts the
//! answers there.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use protocol::answer::{BoxAnswer, Edges, NoulAnswer, TrackMoment};
use protocol::assets::Clip;
use protocol::error::{reason, QuestionErrorKind, QuestionFailure};
use protocol::request::{DecisionBody, DecisionRequest, MediaTarget, QuestionKind};
use protocol::{Answer, Overflow, Question, Roles, Usage};
use serde_json::json;

use super::model::{entries, Decision, DecisionModel};
use super::readout::{choice_answer, score_answer};
use super::{moments, target};
use crate::backend::{Detector, Found};

/// What the detector finds at least this surely is a candidate box (the rest is noise).
const MIN_SCORE: f32 = 0.05;
/// The confidence is `sigmoid(A + B * logit(raw))`, raw being the probability the kind was
/// read right times the detector's score of the chosen box: the logistic curve fitted by
/// `tools/boxset.py` on 468 box questions about 160 composed scenes (cut-outs of
/// hand-marked objects on empty backgrounds, a third of them asking for an absent kind), where,
/// judged leave-one-photo-out, it took NanoDet's Brier score from 0.255 to 0.163 and the
/// expected calibration error from 0.275 to 0.042.
pub const CALIBRATION: (f64, f64) = (2.1959, 1.4907);
/// CenterNet's curve, fitted by `tools/boxset.py` on the same 160 scenes: its answers through
/// NanoDet's curve refitted (`a = 0.6760, b = 1.0164`), composed with that curve.
pub const CENTERNET_CALIBRATION: (f64, f64) = (2.9078, 1.5151);

/// The confidence curve of a detector, by its name (NanoDet's for one without its own).
pub fn calibration(detector: &str) -> (f64, f64) {
    match detector {
        "centernet-coco" => CENTERNET_CALIBRATION,
        _ => CALIBRATION,
    }
}

/// The calibrated probability that the box of `found` (the whole picture when nothing was
/// found) overlaps the true one by at least half, the kind read right with `p_kind`, on the
/// detector's curve `(a, b)`.
fn confidence((a, b): (f64, f64), found: Option<&Found>, p_kind: f64) -> f64 {
    let raw = found.map_or(NOT_FOUND, |f| p_kind * f64::from(f.score));
    let p = raw.clamp(1e-4, 1.0 - 1e-4);
    let z = a + b * (p / (1.0 - p)).ln();
    1.0 / (1.0 + (-z).exp())
}

/// The longest video a box question with `at` or a track question reads (the card's
/// `limits.box_video_max_seconds`): the detector reads each sampled moment, one or two a
/// second, at a tenth to a quarter of a second each on a CPU.
pub const BOX_VIDEO_MAX_SECONDS: u64 = 30;
/// The raw confidence of the whole picture, given when the target was not found.
const NOT_FOUND: f64 = 0.01;
/// The option of the kind question that says the target is none of the detector's kinds.
const ELSE: &str = "something else";

/// The box answers of a body: per request (in body order), each box question's index among
/// its request's questions and its answer, and the tokens the kind questions read.
pub(super) struct Located {
    answers: Vec<(Vec<(usize, Answer)>, Usage)>,
}

/// What the detector found in one picture, or why it could not look.
type Detected = Result<Arc<Vec<Found>>, QuestionFailure>;

/// Whether any request of the body asks a box question, or a question the detector answers
/// about the state's pictures.
pub(super) fn asks_boxes(body: &DecisionBody, kinds: &[&str]) -> bool {
    entries(body).iter().any(|(_, r)| {
        r.questions.iter().any(|s| match &s.question {
            Ok(q) => {
                matches!(
                    q.kind,
                    QuestionKind::Box { .. } | QuestionKind::Track { .. }
                ) || grounded(r, q, kinds).is_some()
            }
            Err(_) => false,
        })
    })
}

/// What a question about the state's media asks of the detector, where it can answer
/// (`target::media_grounding`, the rule the text path's stand-ins follow too).
fn grounded(r: &DecisionRequest, q: &Question, kinds: &[&str]) -> Option<target::Grounded> {
    target::media_grounding(r, q, kinds)?.ok()
}

/// Put each box answer where the text path left its stand-in.
pub(super) fn place(decision: &mut Decision, located: Located) {
    let mut responses: Vec<&mut protocol::DecisionResponse> = match decision {
        Decision::Single(r) => vec![r],
        Decision::Batch(b) => b.states.iter_mut().map(|(_, r)| r).collect(),
    };
    let mut total = Usage::default();
    for (response, (answers, usage)) in responses.iter_mut().zip(located.answers) {
        for (index, answer) in answers {
            let Some((_, entry)) = response.answers.iter_mut().nth(index) else {
                continue;
            };
            // Only a stand-in is replaced: a refused request keeps its refusal.
            let stand_in = entry.answer.failure().is_some_and(|f| {
                f.reason == reason::BOX_UNSUPPORTED
                    || f.reason == reason::TRACK_UNSUPPORTED
                    || f.reason == reason::MODALITY_UNSUPPORTED
            });
            if stand_in {
                entry.answer = answer;
            }
        }
        response.usage.add(&usage);
        total.add(&usage);
    }
    if let Decision::Batch(b) = decision {
        b.usage.add(&total);
    }
}

impl DecisionModel {
    /// Answer every box and track question of `body` whose picture or video is clear.
    pub(super) async fn locate(
        &self,
        detector: &Arc<dyn Detector>,
        body: &DecisionBody,
    ) -> Located {
        let mut seen: HashMap<(usize, usize), Detected> = HashMap::new();
        let mut answers = Vec::new();
        for (_, r) in entries(body) {
            let mut mine = Vec::new();
            let mut usage = Usage::default();
            for (index, slot) in r.questions.iter().enumerate() {
                let Ok(q) = &slot.question else { continue };
                let failed = |failure: QuestionFailure| Answer::Failed {
                    type_word: slot.type_word.clone(),
                    failure,
                };
                // A question without a clear target was failed by the text path already.
                let answer = match r.media_target(slot, &q.kind) {
                    Some(Ok(MediaTarget::Picture(picture))) => {
                        match detected(detector, &mut seen, &picture.bytes).await {
                            Ok(found) => {
                                self.answer(&**detector, q, r, &found, None, &mut usage)
                                    .await
                            }
                            Err(f) => failed(f),
                        }
                    }
                    Some(Ok(MediaTarget::Video(clip))) => {
                        match self.on_video(detector, q, r, clip, &mut usage).await {
                            Ok(a) => a,
                            Err(f) => failed(f),
                        }
                    }
                    Some(Err(_)) => continue,
                    None => {
                        let Some(g) = grounded(r, q, detector.kinds()) else {
                            continue;
                        };
                        if let [clip] = r.videos.as_slice() {
                            let answer = match self.appears(detector, &g, q, clip).await {
                                Ok(a) => a,
                                Err(f) => failed(f),
                            };
                            mine.push((index, answer));
                            continue;
                        }
                        // Every picture of the state, each read once per request.
                        let mut pictures = Vec::with_capacity(r.images.len());
                        let mut failure = None;
                        for picture in &r.images {
                            match detected(detector, &mut seen, &picture.bytes).await {
                                Ok(f) => pictures.push(f),
                                Err(f) => {
                                    failure = Some(f);
                                    break;
                                }
                            }
                        }
                        match failure {
                            Some(f) => failed(f),
                            None => grounded_answer(calibration(detector.name()), &g, &pictures, q),
                        }
                    }
                };
                mine.push((index, answer));
            }
            answers.push((mine, usage));
        }
        Located { answers }
    }

    /// Whether a kind appears in the state's only video, or when it first does: the detector
    /// reads one moment a second (as a track question does). Whether is the surest
    /// sighting's confidence; when, each option's share of the first appearance
    /// (`moments::first_seen`, each moment's presence its surest sighting's).
    async fn appears(
        &self,
        detector: &Arc<dyn Detector>,
        g: &target::Grounded,
        q: &Question,
        clip: &Clip,
    ) -> Result<Answer, QuestionFailure> {
        let seconds = readable_seconds(clip, "questions about what it shows")?;
        let (target::Grounded::Presence(kind) | target::Grounded::When(kind, _)) = g else {
            return Err(QuestionFailure::malformed(
                "not a question the video answers",
            ));
        };
        let times: Vec<f64> = (0..)
            .map(f64::from)
            .take_while(|t| *t < seconds.max(0.001))
            .collect();
        let frames = detect_frames(detector.clone(), clip.bytes.clone(), times.clone()).await?;
        let cal = calibration(detector.name());
        let there: Vec<f64> = frames
            .iter()
            .map(|found| target::presence(&sightings(cal, found, *kind)))
            .collect();
        match (g, &q.kind) {
            (target::Grounded::When(_, spans), QuestionKind::Choice { options }) => {
                let seen: Vec<(f64, f64)> = times.iter().copied().zip(there).collect();
                let probs: Vec<f64> = target::shares(&moments::first_seen(&seen, seconds, spans))
                    .into_iter()
                    .map(round)
                    .collect();
                let keys: Vec<String> = options.iter().map(|(k, _)| k.clone()).collect();
                Ok(choice_answer(&probs, &keys))
            }
            _ => Ok(Answer::Noul(NoulAnswer {
                noul: round(target::presence(&there).max(confidence(cal, None, 1.0))),
            })),
        }
    }

    /// A box question with `at`, or a track question, on the state's only video.
    async fn on_video(
        &self,
        detector: &Arc<dyn Detector>,
        q: &Question,
        r: &DecisionRequest,
        clip: &Clip,
        usage: &mut Usage,
    ) -> Result<Answer, QuestionFailure> {
        let seconds = readable_seconds(clip, "box questions with at and track questions")?;
        let moments: Vec<f64> = match q.kind {
            QuestionKind::Box { at: Some(at) } if at <= seconds => vec![at],
            QuestionKind::Box { .. } => {
                return Err(QuestionFailure::malformed(format!(
                    "at is past the video's end ({seconds:.2} s)"
                )))
            }
            QuestionKind::Track { rate } => {
                let step = 1.0 / f64::from(rate.max(1));
                (0..)
                    .map(|k| f64::from(k) * step)
                    .take_while(|t| *t < seconds)
                    .collect()
            }
            _ => return Err(QuestionFailure::malformed("not a question about a video")),
        };
        let frames = detect_frames(detector.clone(), clip.bytes.clone(), moments.clone()).await?;
        let Some(first) = frames.first() else {
            return Err(QuestionFailure::malformed(
                "the video has no moment to read",
            ));
        };
        if let QuestionKind::Box { at } = q.kind {
            return Ok(self.answer(&**detector, q, r, first, at, usage).await);
        }
        let instructions = q.instructions.as_deref().unwrap_or("");
        let (kind, p_kind) = self
            .kind_of(detector.kinds(), instructions, r, usage)
            .await?;
        let followed = match kind {
            Some(k) => target::follow(&frames, k, target::position(instructions)),
            None => vec![None; frames.len()],
        };
        let mut last = [0.0, 0.0, 1.0, 1.0];
        let mut track = Vec::with_capacity(moments.len());
        // A moment before the target is first seen takes the box where it is first seen.
        if let Some(f) = followed.iter().flatten().next() {
            last = f.edges.map(f64::from);
        }
        let part = target::part_named(instructions, detector.kinds()).is_some();
        for (time, found) in moments.iter().zip(&followed) {
            if let Some(f) = found {
                last = f.edges.map(f64::from);
            }
            let sure = confidence(
                calibration(detector.name()),
                found.as_ref().filter(|_| !part),
                p_kind,
            );
            track.push(TrackMoment {
                time: round(*time),
                edges: edges(last),
                confidence: Some(round(sure)),
                visible: round(sure),
            });
        }
        Ok(Answer::Track(track))
    }

    /// The kind the instructions name (with the probability it was read right): by word, or
    /// by the model's own choice among the detector's kinds.
    async fn kind_of(
        &self,
        kinds: &[&'static str],
        instructions: &str,
        r: &DecisionRequest,
        usage: &mut Usage,
    ) -> Result<(Option<usize>, f64), QuestionFailure> {
        if let Some(k) = target::named_kind(instructions, kinds) {
            return Ok((Some(k), 1.0));
        }
        // No word names one of the kinds: the model's own choice among them and "something
        // else", with its probability.
        let mut options: Vec<(String, Option<String>)> =
            kinds.iter().map(|k| (k.to_string(), None)).collect();
        options.push((ELSE.into(), Some("none of the other kinds".into())));
        let question = Question::asked(
            QuestionKind::choice(options)?,
            Some("Which kind of object is this text asking to find in a picture?"),
            None,
            Overflow::Truncate,
        );
        let mut request = DecisionRequest::asked(
            json!(instructions),
            Roles::Absent,
            vec![("kind".into(), Ok(question))],
        );
        request.options.deadline_ms = r.options.deadline_ms;
        let unavailable = |m: String| {
            QuestionFailure::new(QuestionErrorKind::Unavailable, reason::INFERENCE_ERROR, m)
        };
        let (decision, _) = self
            .decide_text(&DecisionBody::Single(request), Instant::now())
            .await
            .map_err(|e| unavailable(format!("the target's kind could not be read: {e}")))?;
        let Decision::Single(response) = decision else {
            return Err(unavailable("the target's kind was not read".into()));
        };
        usage.add(&response.usage);
        let read = match response.answers.iter().next().map(|(_, a)| &a.answer) {
            Some(Answer::Choice(c)) => {
                let p = c.probabilities.get(&c.choice).copied().unwrap_or(0.0);
                Ok((kinds.iter().position(|k| *k == c.choice), p))
            }
            Some(Answer::Failed { failure, .. }) => Err(failure.clone()),
            _ => Err(unavailable("the target's kind was not read".into())),
        };
        read
    }

    /// One box question's answer from its picture's (or its moment's) detections.
    async fn answer(
        &self,
        detector: &dyn Detector,
        q: &Question,
        r: &DecisionRequest,
        found: &[Found],
        time: Option<f64>,
        usage: &mut Usage,
    ) -> Answer {
        let instructions = q.instructions.as_deref().unwrap_or("");
        let kinds = detector.kinds();
        let (kind, p_kind) = match self.kind_of(kinds, instructions, r, usage).await {
            Ok(read) => read,
            Err(failure) => {
                return Answer::Failed {
                    type_word: "box".into(),
                    failure,
                }
            }
        };
        let chosen = kind.and_then(|k| {
            target::choose(
                &target::candidates(found, k),
                target::position(instructions),
            )
        });
        let box_edges = chosen.map_or([0.0, 0.0, 1.0, 1.0], |f| f.edges.map(f64::from));
        // A thing on or of the object ("the dog's collar") is somewhere in its box, but the
        // detector did not find the thing itself: the box is given as not found.
        let sure = chosen.filter(|_| target::part_named(instructions, kinds).is_none());
        Answer::Box(BoxAnswer {
            edges: edges(box_edges),
            confidence: Some(round(confidence(
                calibration(detector.name()),
                sure.as_ref(),
                p_kind,
            ))),
            time: time.map(round),
        })
    }
}

/// Each object of `kind` in one picture or moment, with the calibrated confidence that it is
/// there (the detector's curve, the kind read right by its share of the place's best score,
/// `target::read_right`).
fn sightings(cal: (f64, f64), found: &[Found], kind: usize) -> Vec<f64> {
    target::objects(found, kind)
        .iter()
        .map(|f| confidence(cal, Some(f), target::read_right(f, found)))
        .collect()
}

/// A noul or score about the state's pictures, answered from what the detector saw in them:
/// each object of the kind is there with its confidence (`sightings`); a noul is the surest
/// one's (never below a whole picture's confidence when none was seen: the detector misses
/// some), a score each level's share of the count's distribution, the objects taken as
/// independent.
fn grounded_answer(
    cal: (f64, f64),
    g: &target::Grounded,
    pictures: &[Arc<Vec<Found>>],
    q: &Question,
) -> Answer {
    let seen = |kind: usize| -> Vec<f64> {
        pictures
            .iter()
            .flat_map(|found| sightings(cal, found, kind))
            .collect()
    };
    let kind = match g {
        target::Grounded::Presence(k) | target::Grounded::Count(k, _) => *k,
        // Refused for pictures by `media_grounding`: a picture has no moments.
        target::Grounded::When(k, _) => *k,
        target::Grounded::Which(kinds) => {
            let QuestionKind::Choice { options } = &q.kind else {
                return Answer::Noul(NoulAnswer { noul: 0.0 });
            };
            let presence: Vec<f64> = kinds
                .iter()
                .map(|k| target::presence(&seen(*k)).max(confidence(cal, None, 1.0)))
                .collect();
            let probs: Vec<f64> = target::which(&presence).into_iter().map(round).collect();
            let keys: Vec<String> = options.iter().map(|(k, _)| k.clone()).collect();
            return choice_answer(&probs, &keys);
        }
    };
    let p = seen(kind);
    match (g, &q.kind) {
        (target::Grounded::Count(_, levels), QuestionKind::Score { levels: legend }) => {
            let probs: Vec<f64> = target::count_levels(&p, levels)
                .into_iter()
                .map(round)
                .collect();
            score_answer(&probs, legend)
        }
        _ => Answer::Noul(NoulAnswer {
            noul: round(target::presence(&p).max(confidence(cal, None, 1.0))),
        }),
    }
}

/// Four decimals, within [0, 1] for fractions and probabilities.
fn round(x: f64) -> f64 {
    (x.max(0.0) * 10_000.0).round() / 10_000.0
}

/// `[left, top, right, bottom]` as the answer's edges, within the picture.
fn edges(e: [f64; 4]) -> Edges {
    let f = |x: f64| round(x.min(1.0));
    Edges {
        left: f(e[0]),
        top: f(e[1]),
        right: f(e[2]),
        bottom: f(e[3]),
    }
}

/// Decode a video's frames at `moments` and run the detector on each, off the async threads.
async fn detect_frames(
    detector: Arc<dyn Detector>,
    bytes: Bytes,
    moments: Vec<f64>,
) -> Result<Vec<Vec<Found>>, QuestionFailure> {
    off_thread(move || {
        let frames = media::decode_frames(&bytes, &moments, protocol::assets::MAX_IMAGE_PIXELS)
            .map_err(|e| {
                QuestionFailure::new(
                    QuestionErrorKind::InvalidInput,
                    reason::INVALID_MEDIA,
                    format!("the video's frames do not decode: {e}"),
                )
            })?;
        frames.iter().map(|p| look(&*detector, p)).collect()
    })
    .await
}

/// The video's length, when the detector reads videos that long (`BOX_VIDEO_MAX_SECONDS`);
/// else `box_video_too_long`, saying which questions (`what`) read at most that.
fn readable_seconds(clip: &Clip, what: &str) -> Result<f64, QuestionFailure> {
    let seconds = clip.facts.seconds;
    if !seconds.is_finite() || seconds > BOX_VIDEO_MAX_SECONDS as f64 {
        return Err(QuestionFailure::new(
            QuestionErrorKind::InvalidQuestion,
            reason::BOX_VIDEO_TOO_LONG,
            format!(
                "the video lasts {seconds:.1} s; {what} read at most {BOX_VIDEO_MAX_SECONDS} s"
            ),
        )
        .with_limit(BOX_VIDEO_MAX_SECONDS));
    }
    Ok(seconds)
}

/// What the detector finds in a picture, each picture of a request read once (`seen`, keyed
/// by where its bytes are).
async fn detected(
    detector: &Arc<dyn Detector>,
    seen: &mut HashMap<(usize, usize), Detected>,
    bytes: &Bytes,
) -> Detected {
    let key = (bytes.as_ptr() as usize, bytes.len());
    if let Some(f) = seen.get(&key) {
        return f.clone();
    }
    let f = detect(detector.clone(), bytes.clone()).await;
    seen.insert(key, f.clone());
    f
}

/// Decode a picture and run the detector on it, off the async threads.
async fn detect(detector: Arc<dyn Detector>, bytes: Bytes) -> Detected {
    off_thread(move || {
        let picture =
            media::decode_picture(&bytes, protocol::assets::MAX_IMAGE_PIXELS).map_err(|e| {
                QuestionFailure::new(
                    QuestionErrorKind::InvalidInput,
                    reason::IMAGE_MALFORMED,
                    format!("the target picture does not decode: {e}"),
                )
            })?;
        look(&*detector, &picture).map(Arc::new)
    })
    .await
}

/// What the detector finds in a picture at least `MIN_SCORE` surely.
fn look(detector: &dyn Detector, p: &media::Picture) -> Result<Vec<Found>, QuestionFailure> {
    detector
        .detect(p.width, p.height, &p.rgb)
        .map(|f| f.into_iter().filter(|f| f.score >= MIN_SCORE).collect())
        .map_err(|e| {
            QuestionFailure::new(
                QuestionErrorKind::Unavailable,
                reason::INFERENCE_ERROR,
                format!("the detector failed: {e}"),
            )
        })
}

/// Run decoding and detection on a blocking thread.
async fn off_thread<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, QuestionFailure> + Send + 'static,
) -> Result<T, QuestionFailure> {
    tokio::task::spawn_blocking(work).await.unwrap_or_else(|e| {
        Err(QuestionFailure::new(
            QuestionErrorKind::Unavailable,
            reason::INFERENCE_ERROR,
            format!("the detector stopped: {e}"),
        ))
    })
}
