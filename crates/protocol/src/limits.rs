//! The limits a worker holds every decision request to while decoding it, in one place: the
//! decoder enforces these constants, the model card publishes them (`card.limits`), and the
//! keys service's `/api/info` and the limits page show the card's values, so the refusals,
//! the document and the page cannot disagree.

use serde::Serialize;
use serde_json::Value;

use crate::assets::{
    MAX_IMAGE_BYTES, MAX_IMAGE_PIXELS, MAX_VIDEO_BYTES, MAX_VIDEO_FRAMES, MAX_VIDEO_SECONDS,
};
use crate::error::{reason, ProtocolError};
use crate::{MAX_LEVELS, MAX_OPTIONS, MAX_QUESTIONS};

/// Most Unicode code points of one state's text (every string of an object state together).
pub const MAX_STATE_CHARS: usize = 16 << 20;
/// Bytes of a request body a worker reads (`--max-request-bytes`), as sent and once decoded.
pub const WORKER_REQUEST_BYTES: usize = 16 << 20;
/// Bytes of a request body the public face reads (the router's listener and the keys guard in
/// front of it, `max_request_bytes` of the router config).
pub const PUBLIC_REQUEST_BYTES: usize = 48 << 20;
/// Bytes a worker the router manages reads (worker-api.txt: 96 MiB): above the public face's
/// limit, so a client meets that limit, never an inner 413.
pub const MANAGED_WORKER_REQUEST_BYTES: usize = 96 << 20;
/// Bytes a multipart body keeps for its `request` part and its boundaries: a picture or a
/// video of the body limit less this is the largest that arrives in one, so the public face
/// advertises that.
pub const MULTIPART_HEADROOM_BYTES: usize = 1 << 20;
/// Bytes of an answer the router and the keys guard read back from a worker (to split a batch,
/// count usage).
pub const ANSWER_BYTES: usize = 64 << 20;
/// Bytes of a worker's model listing the router reads to merge listings.
pub const LISTING_BYTES: usize = 16 << 20;
/// Most entries of a batch's `states`.
pub const MAX_STATES: usize = 1024;
/// Most images of one request (every entry's, each use of an asset counted).
pub const MAX_IMAGES: usize = 64;
/// Most videos of one request, counted as images are.
pub const MAX_VIDEOS: usize = 8;

/// What [`request_limits`] publishes.
#[derive(Debug, Clone, Serialize)]
pub struct RequestLimits {
    pub max_state_chars: usize,
    pub max_options: usize,
    pub max_levels: usize,
    pub max_states: usize,
    pub max_questions: usize,
    pub max_images: usize,
    pub max_image_bytes: usize,
    pub max_image_pixels: u64,
    pub max_videos: usize,
    pub max_video_bytes: usize,
    pub max_video_seconds: u64,
    pub max_video_frames: u64,
}

/// The decoder's limits, as a card publishes them.
pub fn request_limits() -> RequestLimits {
    RequestLimits {
        max_state_chars: MAX_STATE_CHARS,
        max_options: MAX_OPTIONS,
        max_levels: MAX_LEVELS,
        max_states: MAX_STATES,
        max_questions: MAX_QUESTIONS,
        max_images: MAX_IMAGES,
        max_image_bytes: MAX_IMAGE_BYTES,
        max_image_pixels: MAX_IMAGE_PIXELS,
        max_videos: MAX_VIDEOS,
        max_video_bytes: MAX_VIDEO_BYTES,
        max_video_seconds: MAX_VIDEO_SECONDS,
        max_video_frames: MAX_VIDEO_FRAMES,
    }
}

/// Code points of every string in a state, stopping once past `limit`.
fn state_chars(v: &Value, limit: usize) -> usize {
    match v {
        Value::String(s) => s.chars().count(),
        Value::Array(a) => a.iter().fold(0, |n, x| {
            if n > limit {
                n
            } else {
                n + state_chars(x, limit)
            }
        }),
        Value::Object(m) => m.values().fold(0, |n, x| {
            if n > limit {
                n
            } else {
                n + state_chars(x, limit)
            }
        }),
        _ => 0,
    }
}

/// A state longer than [`MAX_STATE_CHARS`] code points is refused (400 `state_too_long`).
pub fn check_state(state: &Value, what: &str) -> Result<(), ProtocolError> {
    let n = state_chars(state, MAX_STATE_CHARS);
    if n > MAX_STATE_CHARS {
        return Err(ProtocolError::invalid(format!(
            "{what} has more than {MAX_STATE_CHARS} code points"
        ))
        .with_reason(reason::STATE_TOO_LONG)
        .with_limit(MAX_STATE_CHARS as u64));
    }
    Ok(())
}

/// A request's counts across its entries: `states` entries, questions, images, videos.
pub fn check_counts(
    states: usize,
    questions: usize,
    images: usize,
    videos: usize,
) -> Result<(), ProtocolError> {
    let over = [
        (
            states,
            MAX_STATES,
            reason::TOO_MANY_STATES,
            "entries in states",
        ),
        (
            questions,
            MAX_QUESTIONS,
            reason::TOO_MANY_QUESTIONS,
            "questions",
        ),
        (images, MAX_IMAGES, reason::TOO_MANY_IMAGES, "images"),
        (videos, MAX_VIDEOS, reason::TOO_MANY_VIDEOS, "videos"),
    ]
    .into_iter()
    .find(|(n, max, _, _)| n > max);
    match over {
        Some((n, max, word, what)) => Err(ProtocolError::invalid(format!(
            "the request holds {n} {what}; at most {max}"
        ))
        .with_reason(word)
        .with_limit(max as u64)),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn each_limit_refuses_one_past_it_with_its_word() {
        assert!(check_counts(MAX_STATES, MAX_QUESTIONS, MAX_IMAGES, MAX_VIDEOS).is_ok());
        for (counts, word) in [
            ((MAX_STATES + 1, 1, 0, 0), reason::TOO_MANY_STATES),
            ((1, MAX_QUESTIONS + 1, 0, 0), reason::TOO_MANY_QUESTIONS),
            ((1, 1, MAX_IMAGES + 1, 0), reason::TOO_MANY_IMAGES),
            ((1, 1, 0, MAX_VIDEOS + 1), reason::TOO_MANY_VIDEOS),
        ] {
            let e = check_counts(counts.0, counts.1, counts.2, counts.3).unwrap_err();
            assert_eq!(e.reason, Some(word));
        }
        let long = json!({"a": "é".repeat(MAX_STATE_CHARS), "b": ["x"]});
        let e = check_state(&long, "state").unwrap_err();
        assert_eq!(e.reason, Some(reason::STATE_TOO_LONG));
        assert_eq!(e.limit, Some(MAX_STATE_CHARS as u64));
        assert!(check_state(&json!({"a": "é".repeat(MAX_STATE_CHARS)}), "state").is_ok());
    }
}
