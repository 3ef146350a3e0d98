//! Assets and images: the top-level `assets` object, 4.0 `images` data URLs, multipart parts,
//! placeholder uses, and image headers read from the bytes (never decoded to pixels).
//!
//! Every refusal here fails the whole request with 400 `invalid_request`, a fixed reason word
//! and, where a limit was broken, that limit.

use std::collections::BTreeMap;

use base64::Engine as _;
use bytes::Bytes;
use serde::Serialize;
use serde_json::{Map, Value};
use utoipa::ToSchema;

use crate::error::{reason, ProtocolError, QuestionErrorKind, QuestionFailure};

/// Most bytes of one image.
pub const MAX_IMAGE_BYTES: usize = 16 << 20;
/// Most pixels of one image as sent.
pub const MAX_IMAGE_PIXELS: u64 = 16_000_000;
/// Largest ratio of an image's long side to its short side.
pub const MAX_ASPECT_RATIO: u64 = 200;
/// Most bytes of one video, decoded.
pub const MAX_VIDEO_BYTES: usize = 64 << 20;
/// Longest video, in seconds, as its container says.
pub const MAX_VIDEO_SECONDS: u64 = 300;
/// Most frames of one video's first video track, as its container counts them.
pub const MAX_VIDEO_FRAMES: u64 = 18_000;
/// Most bytes of one asset reference.
pub const MAX_REFERENCE_BYTES: usize = 1024;
/// Most bytes of all references of a request together.
pub const MAX_REFERENCES_BYTES: usize = 65_536;

/// The multipart parts of a body other than `request`, by part name.
pub type Parts = BTreeMap<String, Bytes>;

/// An image format read from the bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImageFormat {
    Png,
    Jpeg,
    WebP,
}

/// What the header of an image says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImageInfo {
    pub format: ImageFormat,
    pub width: u64,
    pub height: u64,
}

/// What an asset holds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum AssetKind {
    Image(ImageInfo),
    Video(media::VideoFacts),
}

/// One accepted asset of the top-level `assets` object.
#[derive(Debug, Clone, PartialEq)]
pub struct Asset {
    pub reference: String,
    pub kind: AssetKind,
    /// Its bytes, as sent (shared, not copied, by every use).
    pub bytes: Bytes,
}

/// A video a request reads: what its container says, and its bytes as sent.
#[derive(Debug, Clone, PartialEq)]
pub struct Clip {
    pub facts: media::VideoFacts,
    pub bytes: Bytes,
}

/// An image a request reads: what its header says, and its bytes as sent (decoded to pixels
/// only by a model that looks at them).
#[derive(Debug, Clone, PartialEq)]
pub struct Picture {
    pub info: ImageInfo,
    pub bytes: Bytes,
}

/// A request's assets, with a matcher that finds all their references in a string in one
/// pass (leftmost, the longest reference winning at each place), so counting uses costs the
/// length of the text, not the text times the number of references.
#[derive(Debug, Clone, Default)]
pub struct Assets {
    list: Vec<Asset>,
    refs: Option<aho_corasick::AhoCorasick>,
}

impl Assets {
    pub fn new(list: Vec<Asset>) -> Result<Assets, ProtocolError> {
        let refs = if list.is_empty() {
            None
        } else {
            let matcher = aho_corasick::AhoCorasick::builder()
                .match_kind(aho_corasick::MatchKind::LeftmostLongest)
                .build(list.iter().map(|a| a.reference.as_str()))
                .map_err(|e| {
                    refused(
                        reason::ASSET_REFERENCE_INVALID,
                        format!("the asset references cannot be matched: {e}"),
                    )
                })?;
            Some(matcher)
        };
        Ok(Assets { list, refs })
    }
}

impl std::ops::Deref for Assets {
    type Target = [Asset];
    fn deref(&self) -> &[Asset] {
        &self.list
    }
}

fn refused(reason: &'static str, message: String) -> ProtocolError {
    ProtocolError::invalid(message).with_reason(reason)
}

/// Read an image's format and size from its header; refuse what the runtime does not read.
pub fn inspect_image(bytes: &[u8], what: &str) -> Result<ImageInfo, ProtocolError> {
    if bytes.len() > MAX_IMAGE_BYTES {
        return Err(refused(
            reason::IMAGE_TOO_LARGE,
            format!(
                "{what} has {} bytes; an image may have at most {MAX_IMAGE_BYTES}",
                bytes.len()
            ),
        )
        .with_limit(MAX_IMAGE_BYTES as u64));
    }
    // The signature decides the format; a known signature with a broken header is malformed.
    let format = if bytes.starts_with(b"\x89PNG\r\n\x1a\n") {
        ImageFormat::Png
    } else if bytes.starts_with(&[0xFF, 0xD8, 0xFF]) {
        ImageFormat::Jpeg
    } else if bytes.len() >= 12 && &bytes[..4] == b"RIFF" && &bytes[8..12] == b"WEBP" {
        ImageFormat::WebP
    } else {
        let found = imagesize::image_type(bytes)
            .map(|t| format!("{t:?}"))
            .unwrap_or_else(|_| "not an image format this runtime knows".into());
        return Err(refused(
            reason::IMAGE_FORMAT_UNSUPPORTED,
            format!("{what} is {found}; send PNG, JPEG or WebP"),
        ));
    };
    let size = imagesize::blob_size(bytes).map_err(|e| {
        refused(
            reason::IMAGE_MALFORMED,
            format!("{what}: the image header does not read ({e})"),
        )
    })?;
    let (width, height) = (size.width as u64, size.height as u64);
    if width == 0 || height == 0 {
        return Err(refused(
            reason::IMAGE_MALFORMED,
            format!("{what} is {width}x{height} pixels: an image has at least one pixel"),
        ));
    }
    if animated(format, bytes) {
        return Err(refused(
            reason::IMAGE_ANIMATED,
            format!("{what} is an animated image; send one still frame"),
        ));
    }
    if width * height > MAX_IMAGE_PIXELS {
        return Err(refused(
            reason::IMAGE_TOO_LARGE,
            format!(
                "{what} has {width}x{height} pixels; an image may have at most {MAX_IMAGE_PIXELS}"
            ),
        )
        .with_limit(MAX_IMAGE_PIXELS));
    }
    if width.max(height) > MAX_ASPECT_RATIO * width.min(height) {
        return Err(refused(
            reason::IMAGE_ASPECT_RATIO,
            format!(
                "{what} is {width}x{height} pixels; its sides may differ by a factor of at most {MAX_ASPECT_RATIO}"
            ),
        )
        .with_limit(MAX_ASPECT_RATIO));
    }
    Ok(ImageInfo {
        format,
        width,
        height,
    })
}

/// An APNG has an `acTL` chunk before its first `IDAT`; an animated WebP sets the animation
/// flag of its `VP8X` chunk (or carries `ANIM`).
fn animated(format: ImageFormat, b: &[u8]) -> bool {
    match format {
        ImageFormat::Jpeg => false,
        ImageFormat::Png => {
            let mut at = 8;
            while at + 8 <= b.len() {
                let len = u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]) as usize;
                let kind = &b[at + 4..at + 8];
                if kind == b"acTL" {
                    return true;
                }
                if kind == b"IDAT" || kind == b"IEND" {
                    return false;
                }
                at = at.saturating_add(12).saturating_add(len);
            }
            false
        }
        ImageFormat::WebP => {
            let vp8x = b.len() > 20 && &b[12..16] == b"VP8X" && b[20] & 0x02 != 0;
            vp8x || b.windows(4).take(64).any(|w| w == b"ANIM")
        }
    }
}

/// Read a video's container from its bytes (never from a declared type) and hold it to the
/// limits: 400 `video_too_large` past its bytes, `video_too_long` past its seconds or frames,
/// `invalid_media` when its duration or frames do not read.
pub fn inspect_video(bytes: &[u8], what: &str) -> Result<media::VideoFacts, ProtocolError> {
    if bytes.len() > MAX_VIDEO_BYTES {
        return Err(refused(
            reason::VIDEO_TOO_LARGE,
            format!(
                "{what} has {} bytes; a video may have at most {MAX_VIDEO_BYTES}",
                bytes.len()
            ),
        )
        .with_limit(MAX_VIDEO_BYTES as u64));
    }
    let facts = media::video_facts(bytes)
        .map_err(|e| refused(reason::INVALID_MEDIA, format!("{what}: {e}")))?;
    if facts.seconds > MAX_VIDEO_SECONDS as f64 {
        return Err(refused(
            reason::VIDEO_TOO_LONG,
            format!(
                "{what} lasts {:.1} s; a video may last at most {MAX_VIDEO_SECONDS} s",
                facts.seconds
            ),
        )
        .with_limit(MAX_VIDEO_SECONDS));
    }
    if facts.frames > MAX_VIDEO_FRAMES {
        return Err(refused(
            reason::VIDEO_TOO_LONG,
            format!(
                "{what} has {} frames; a video may have at most {MAX_VIDEO_FRAMES}",
                facts.frames
            ),
        )
        .with_limit(MAX_VIDEO_FRAMES));
    }
    Ok(facts)
}

/// The base64 text of a data URL (or asset) holding at most `limit` bytes once decoded; past
/// that, refused with `too_large` before anything is decoded.
fn decode_base64_within(
    text: &str,
    what: &str,
    limit: usize,
    too_large: &'static str,
) -> Result<Vec<u8>, ProtocolError> {
    if text.len() > limit / 3 * 4 + 4 {
        return Err(
            refused(too_large, format!("{what} is larger than {limit} bytes"))
                .with_limit(limit as u64),
        );
    }
    base64::engine::general_purpose::STANDARD
        .decode(text.trim())
        .map_err(|e| {
            refused(
                reason::ENCODING_MALFORMED,
                format!("{what} is not valid base64 ({e})"),
            )
        })
}

fn decode_base64(text: &str, what: &str) -> Result<Vec<u8>, ProtocolError> {
    decode_base64_within(text, what, MAX_IMAGE_BYTES, reason::IMAGE_TOO_LARGE)
}

/// The base64 data of a `data:<kind>/...;base64,` URL.
fn data_url<'a>(v: &'a Value, what: &str, kind: &str) -> Result<&'a str, ProtocolError> {
    let s = v.as_str().ok_or_else(|| {
        refused(
            reason::ENCODING_MALFORMED,
            format!("{what} must be a data URL string"),
        )
    })?;
    s.strip_prefix("data:")
        .and_then(|rest| rest.split_once(";base64,"))
        .filter(|(mime, _)| mime.starts_with(kind) && mime[kind.len()..].starts_with('/'))
        .map(|(_, data)| data)
        .ok_or_else(|| {
            refused(
                reason::ENCODING_MALFORMED,
                format!("{what} must be a data:{kind}/...;base64, URL"),
            )
        })
}

/// Read one 4.0 `images` entry: a `data:image/...;base64,` URL, its header checked.
pub fn read_data_url(v: &Value, what: &str) -> Result<Picture, ProtocolError> {
    let data = data_url(v, what, "image")?;
    let bytes = Bytes::from(decode_base64(data, what)?);
    Ok(Picture {
        info: inspect_image(&bytes, what)?,
        bytes,
    })
}

/// Read one `videos` entry: a `data:video/...;base64,` URL whose bytes are a video
/// container within the limits (the type in the URL is not trusted: the bytes decide).
pub fn read_video_data_url(v: &Value, what: &str) -> Result<Clip, ProtocolError> {
    let data = data_url(v, what, "video")?;
    let bytes = Bytes::from(decode_base64_within(
        data,
        what,
        MAX_VIDEO_BYTES,
        reason::VIDEO_TOO_LARGE,
    )?);
    Ok(Clip {
        facts: inspect_video(&bytes, what)?,
        bytes,
    })
}

/// Decode the top-level `assets` object, claiming multipart `parts` by name. Every part must be
/// claimed by exactly one asset.
pub fn parse_assets(value: Option<&Value>, parts: &Parts) -> Result<Assets, ProtocolError> {
    let empty = Map::new();
    let map = match value {
        None | Some(Value::Null) => &empty,
        Some(Value::Object(m)) => m,
        Some(_) => {
            return Err(ProtocolError::schema(
                &["assets"],
                "assets must be an object of references to assets",
            ))
        }
    };
    let total: usize = map.keys().map(String::len).sum();
    if total > MAX_REFERENCES_BYTES {
        return Err(refused(
            reason::ASSET_REFERENCE_INVALID,
            format!(
                "the asset references have {total} bytes in all; at most {MAX_REFERENCES_BYTES}"
            ),
        )
        .with_limit(MAX_REFERENCES_BYTES as u64));
    }
    let mut claimed: BTreeMap<&str, &str> = BTreeMap::new();
    let mut assets = Vec::with_capacity(map.len());
    for (reference, asset) in map {
        if reference.is_empty() || reference.len() > MAX_REFERENCE_BYTES {
            return Err(refused(
                reason::ASSET_REFERENCE_INVALID,
                format!(
                    "an asset reference has {} bytes; a reference has 1 to {MAX_REFERENCE_BYTES}",
                    reference.len()
                ),
            )
            .with_limit(MAX_REFERENCE_BYTES as u64));
        }
        let what = format!("asset {reference:?}");
        let obj = asset.as_object().ok_or_else(|| {
            ProtocolError::schema(&["assets", reference], format!("{what} must be an object"))
        })?;
        if let Some(k) = obj
            .keys()
            .find(|k| !matches!(k.as_str(), "type" | "data_base64" | "part"))
        {
            return Err(ProtocolError::invalid(format!(
                "unknown member {k:?} in {what}; allowed: type, data_base64, part"
            ))
            .with_reason(reason::UNKNOWN_MEMBER));
        }
        let kind = match obj.get("type").and_then(Value::as_str) {
            Some("image") => "image",
            Some("video") => "video",
            _ => {
                return Err(ProtocolError::schema(
                    &["assets", reference, "type"],
                    format!("{what}: type must be image or video"),
                ))
            }
        };
        let bytes: Bytes = match (obj.get("data_base64"), obj.get("part")) {
            (Some(Value::String(data)), None) if kind == "video" => Bytes::from(
                decode_base64_within(data, &what, MAX_VIDEO_BYTES, reason::VIDEO_TOO_LARGE)?,
            ),
            (Some(Value::String(data)), None) => Bytes::from(decode_base64(data, &what)?),
            (None, Some(Value::String(part))) => {
                let Some((name, bytes)) = parts.get_key_value(part.as_str()) else {
                    return Err(refused(
                        reason::ASSET_PART_MISSING,
                        format!("{what} claims part {part:?}, which the body does not have"),
                    ));
                };
                if let Some(other) = claimed.insert(name.as_str(), reference.as_str()) {
                    return Err(refused(
                        reason::PART_CLAIMED_TWICE,
                        format!("part {part:?} is claimed by asset {other:?} and by {what}"),
                    ));
                }
                bytes.clone()
            }
            _ => {
                return Err(ProtocolError::schema(
                    &["assets", reference],
                    format!(
                        "{what} needs exactly one of data_base64 (a string) or part (a part name)"
                    ),
                ))
            }
        };
        let kind = match kind {
            "image" => AssetKind::Image(inspect_image(&bytes, &what)?),
            _ => AssetKind::Video(inspect_video(&bytes, &what)?),
        };
        assets.push(Asset {
            reference: reference.clone(),
            kind,
            bytes,
        });
    }
    if let Some(name) = parts.keys().find(|p| !claimed.contains_key(p.as_str())) {
        return Err(refused(
            reason::PART_UNCLAIMED,
            format!("part {name:?} is claimed by no asset: every part after request holds one asset's bytes"),
        ));
    }
    Assets::new(assets)
}

/// Which image a box question locates in: the one its instructions reference, else the
/// state's only image. Returns whether the target is the question's own image.
pub fn box_target(question_images: usize, state_images: usize) -> Result<bool, QuestionFailure> {
    match (question_images, state_images) {
        (1, _) => Ok(true),
        (0, 1) => Ok(false),
        (0, 0) => Err(QuestionFailure::new(
            QuestionErrorKind::InvalidQuestion,
            reason::BOX_NEEDS_IMAGE,
            "a box question needs an image: reference one in its instructions or send one in the state",
        )),
        _ => Err(QuestionFailure::new(
            QuestionErrorKind::InvalidQuestion,
            reason::BOX_TARGET_AMBIGUOUS,
            "a box question's instructions must reference one image, or the state must hold exactly one",
        )),
    }
}

/// The video a box question with `at`, or a track question, reads: the state's only one.
pub fn video_target(state_videos: usize) -> Result<(), QuestionFailure> {
    match state_videos {
        1 => Ok(()),
        0 => Err(QuestionFailure::new(
            QuestionErrorKind::InvalidQuestion,
            reason::BOX_NEEDS_IMAGE,
            "a track question, or a box question with at, needs one video in the state",
        )),
        _ => Err(QuestionFailure::new(
            QuestionErrorKind::InvalidQuestion,
            reason::BOX_TARGET_AMBIGUOUS,
            "a track question, or a box question with at, reads the state's only video; this state holds several",
        )),
    }
}

/// Every use of an asset in a value's strings, as indices into `assets` in the order they
/// occur (object keys are never read).
pub fn list_uses(v: &Value, assets: &Assets, uses: &mut Vec<usize>) {
    match v {
        Value::String(s) => list_in(s, assets, uses),
        Value::Array(a) => a.iter().for_each(|x| list_uses(x, assets, uses)),
        Value::Object(o) => o.values().for_each(|x| list_uses(x, assets, uses)),
        _ => {}
    }
}

/// Occurrences in one string, left to right, the longest reference winning at each place.
fn list_in(s: &str, assets: &Assets, uses: &mut Vec<usize>) {
    let Some(refs) = &assets.refs else {
        return;
    };
    uses.extend(refs.find_iter(s).map(|m| m.pattern().as_usize()));
}

/// An asset: bytes inline or a multipart part. The OpenAPI document's shape of what
/// [`parse_assets`] reads (member by member from the body's value, so that the base64 text of
/// a large video is read in place, not copied into a struct first).
#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AssetDoc {
    #[serde(rename = "type")]
    pub kind: AssetTypeDoc,
    pub data_base64: Option<String>,
    pub part: Option<String>,
}

/// What an asset holds.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum AssetTypeDoc {
    Image,
    Video,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn png(w: u32, h: u32, animated: bool) -> Vec<u8> {
        let mut b = b"\x89PNG\r\n\x1a\n".to_vec();
        let mut ihdr = w.to_be_bytes().to_vec();
        ihdr.extend(h.to_be_bytes());
        ihdr.extend([8, 6, 0, 0, 0]);
        b.extend(13u32.to_be_bytes());
        b.extend(b"IHDR");
        b.extend(ihdr);
        b.extend([0; 4]);
        if animated {
            b.extend(8u32.to_be_bytes());
            b.extend(b"acTL");
            b.extend([0; 8]);
            b.extend([0; 4]);
        }
        b.extend(0u32.to_be_bytes());
        b.extend(b"IDAT");
        b.extend([0; 4]);
        b
    }

    #[test]
    fn headers_are_read_not_decoded() {
        let i = inspect_image(&png(640, 480, false), "x").unwrap();
        assert_eq!((i.format, i.width, i.height), (ImageFormat::Png, 640, 480));
        let e = inspect_image(&png(4, 4, true), "x").unwrap_err();
        assert_eq!(e.reason, Some(reason::IMAGE_ANIMATED));
        let e = inspect_image(&png(5000, 5000, false), "x").unwrap_err();
        assert_eq!(
            (e.reason, e.limit),
            (Some(reason::IMAGE_TOO_LARGE), Some(MAX_IMAGE_PIXELS))
        );
        let e = inspect_image(&png(1000, 2, false), "x").unwrap_err();
        assert_eq!(e.reason, Some(reason::IMAGE_ASPECT_RATIO));
        let e = inspect_image(b"GIF89a\x01\x00\x01\x00", "x").unwrap_err();
        assert_eq!(e.reason, Some(reason::IMAGE_FORMAT_UNSUPPORTED));
    }

    #[test]
    fn bytes_limit_and_box_targets() {
        let mut big = png(4, 4, false);
        big.resize(MAX_IMAGE_BYTES + 1, 0);
        let e = inspect_image(&big, "x").unwrap_err();
        assert_eq!(e.limit, Some(MAX_IMAGE_BYTES as u64));
        assert_eq!(box_target(1, 3), Ok(true));
        assert_eq!(box_target(0, 1), Ok(false));
        assert_eq!(
            box_target(0, 0).unwrap_err().reason,
            reason::BOX_NEEDS_IMAGE
        );
        assert_eq!(
            box_target(0, 2).unwrap_err().reason,
            reason::BOX_TARGET_AMBIGUOUS
        );
        assert_eq!(
            box_target(2, 0).unwrap_err().reason,
            reason::BOX_TARGET_AMBIGUOUS
        );
    }

    #[test]
    fn longest_reference_wins_and_keys_are_not_read() {
        let a = |r: &str| Asset {
            reference: r.into(),
            kind: AssetKind::Video(media::VideoFacts {
                container: media::Container::Mp4,
                seconds: 1.0,
                frames: 1,
                width: 1,
                height: 1,
            }),
            bytes: Bytes::new(),
        };
        let assets = Assets::new(vec![a("<img>"), a("<img>2")]).unwrap();
        let mut uses = Vec::new();
        let v = serde_json::json!({"<img>": "see <img>2 and <img> and <img>"});
        list_uses(&v, &assets, &mut uses);
        assert_eq!(uses, [1, 0, 0]);
    }
}
