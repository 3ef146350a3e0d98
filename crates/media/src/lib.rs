//! Media read from their bytes, as `system-duo-api.txt` asks: "the service reads a video's
//! container from its bytes, not from the type in the data URL". What a container says (its
//! duration, the frames of its first video track, their size) comes from the container's own
//! indexes, read by the `mp4` and `matroska-demuxer` crates. Frames are decoded by maintained
//! codec libraries: OpenH264 (`h264`), the system's libvpx (`vpx`) and dav1d (`av1`); the
//! WebM/Matroska path is `webm`, what they share `frames`.
//!
//! Architecture invariant: nothing here panics or allocates past the input's size on bad
//! bytes. Both readers bound their tables by the boxes that hold them; a reader that still
//! panics on some input is caught and reported as unreadable.

mod av1;
mod budget;
pub mod frames;
mod h264;
mod iso;
pub mod picture;
mod vpx;
mod webm;
pub use frames::FramesError;
pub use h264::encode_mp4;
pub use picture::{decode_picture, Picture, PictureError};

use std::panic::{catch_unwind, AssertUnwindSafe};

/// A video container this runtime reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Container {
    /// ISO base media: MP4 or QuickTime.
    Mp4,
    /// Matroska or WebM.
    Matroska,
}

impl Container {
    pub fn word(self) -> &'static str {
        match self {
            Container::Mp4 => "mp4",
            Container::Matroska => "matroska",
        }
    }
}

/// What a video's container says.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct VideoFacts {
    pub container: Container,
    /// Seconds, from the container's duration (or its video track's, or its last frame's
    /// time where the container gives none).
    pub seconds: f64,
    /// Frames of the first video track.
    pub frames: u64,
    pub width: u64,
    pub height: u64,
}

/// Why a video's bytes do not read.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum MediaError {
    /// Neither an MP4/QuickTime nor a Matroska/WebM container.
    #[error("not a video container this runtime reads (MP4, QuickTime, WebM or Matroska)")]
    UnknownContainer,
    /// A known container whose duration, frames or video track cannot be read.
    #[error("the {container} container does not read: {why}")]
    Unreadable {
        container: &'static str,
        why: String,
    },
}

/// The container the bytes start like, if any.
pub fn sniff(bytes: &[u8]) -> Option<Container> {
    // ISO base media: a box whose type is `ftyp` (or a QuickTime file's first atoms).
    let iso = bytes.len() >= 12
        && matches!(
            &bytes[4..8],
            b"ftyp" | b"moov" | b"mdat" | b"wide" | b"free" | b"skip"
        );
    if iso {
        return Some(Container::Mp4);
    }
    // EBML's magic number opens every Matroska and WebM file.
    if bytes.starts_with(&[0x1A, 0x45, 0xDF, 0xA3]) {
        return Some(Container::Matroska);
    }
    None
}

/// Read a video's container: its duration, frame count and frame size.
pub fn video_facts(bytes: &[u8]) -> Result<VideoFacts, MediaError> {
    let container = sniff(bytes).ok_or(MediaError::UnknownContainer)?;
    let unreadable = |why: String| MediaError::Unreadable {
        container: container.word(),
        why,
    };
    let read = catch_unwind(AssertUnwindSafe(|| match container {
        Container::Mp4 => mp4_facts(bytes),
        Container::Matroska => matroska_facts(bytes),
    }));
    let facts = read
        .map_err(|_| unreadable("its tables contradict each other".into()))?
        .map_err(|e| unreadable(e.to_string()))?;
    if !facts.seconds.is_finite() || facts.seconds <= 0.0 {
        return Err(unreadable("it gives no duration".into()));
    }
    if facts.frames == 0 {
        return Err(unreadable("its video track has no frames".into()));
    }
    Ok(facts)
}

/// The frame shown at each of `moments` (seconds from the start, ascending), as RGB, with
/// frames of at most `max_pixels` pixels. A moment past the last frame gets the last frame.
/// H.264 in MP4 or QuickTime; VP8, VP9, AV1 or H.264 in WebM or Matroska.
pub fn decode_frames(
    bytes: &[u8],
    moments: &[f64],
    max_pixels: u64,
) -> Result<Vec<Picture>, FramesError> {
    let read = match sniff(bytes) {
        Some(Container::Mp4) => h264::mp4_frames,
        Some(Container::Matroska) => webm::matroska_frames,
        None => return Err(FramesError::Unsupported("not a video container".into())),
    };
    // A reader or decoder binding that still panics on some input is caught here.
    catch_unwind(AssertUnwindSafe(|| read(bytes, moments, max_pixels)))
        .unwrap_or_else(|_| Err(FramesError::malformed("its tables contradict each other")))
}

/// An MP4's first video track (the lowest track id), the one whose frames are counted and
/// decoded.
fn first_video_track<R: std::io::Read + std::io::Seek>(
    r: &mp4::Mp4Reader<R>,
) -> Option<&mp4::Mp4Track> {
    r.tracks()
        .values()
        .filter(|t| matches!(t.track_type(), Ok(mp4::TrackType::Video)))
        .min_by_key(|t| t.track_id())
}

/// Why a known container's facts do not read.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Unread {
    #[error("it has no video track")]
    NoVideoTrack,
    #[error("it gives no duration")]
    NoDuration,
    #[error("{0}")]
    Boxes(&'static str),
    #[error("{0}")]
    Mp4(#[from] mp4::Error),
    #[error("{0}")]
    Matroska(#[from] matroska_demuxer::DemuxError),
}

/// An MP4 reader on `bytes`, as every MP4 read here opens one: its box tree checked first
/// (`iso`), its reads through the call budget (`budget`).
pub(crate) fn open_mp4(bytes: &[u8]) -> Result<mp4::Mp4Reader<budget::Budgeted<'_>>, Unread> {
    iso::sound(bytes).map_err(Unread::Boxes)?;
    Ok(mp4::Mp4Reader::read_header(
        budget::Budgeted::new(bytes),
        bytes.len() as u64,
    )?)
}

/// A Matroska reader on `bytes`, its reads through the call budget (`budget`).
pub(crate) fn open_matroska(
    bytes: &[u8],
) -> Result<matroska_demuxer::MatroskaFile<budget::Budgeted<'_>>, Unread> {
    Ok(matroska_demuxer::MatroskaFile::open(
        budget::Budgeted::new(bytes),
    )?)
}

fn mp4_facts(bytes: &[u8]) -> Result<VideoFacts, Unread> {
    let r = open_mp4(bytes)?;
    let track = first_video_track(&r).ok_or(Unread::NoVideoTrack)?;
    let frames = if track.trafs.is_empty() {
        u64::from(track.trak.mdia.minf.stbl.stsz.sample_count)
    } else {
        track
            .trafs
            .iter()
            .filter_map(|t| t.trun.as_ref())
            .map(|t| u64::from(t.sample_count))
            .sum()
    };
    let mdhd = &track.trak.mdia.mdhd;
    // A fragmented file (`empty_moov`) says its length only in its fragments: the sum of
    // their samples' durations, each a trun's own or its fragment's (or track's) default.
    let fragments: u64 = track
        .trafs
        .iter()
        .filter_map(|t| t.trun.as_ref().map(|run| (t, run)))
        .map(|(t, run)| {
            if run.sample_durations.is_empty() {
                let each = t
                    .tfhd
                    .default_sample_duration
                    .unwrap_or(track.default_sample_duration);
                u64::from(run.sample_count) * u64::from(each)
            } else {
                run.sample_durations.iter().map(|d| u64::from(*d)).sum()
            }
        })
        .sum();
    let seconds = ratio(r.moov.mvhd.duration, r.moov.mvhd.timescale)
        .or_else(|| ratio(mdhd.duration, mdhd.timescale))
        .or_else(|| ratio(fragments, mdhd.timescale));
    Ok(VideoFacts {
        container: Container::Mp4,
        seconds: seconds.ok_or(Unread::NoDuration)?,
        frames,
        width: u64::from(track.width()),
        height: u64::from(track.height()),
    })
}

/// `units / per_second` seconds, if both say something.
fn ratio(units: u64, per_second: u32) -> Option<f64> {
    (units > 0 && per_second > 0).then(|| units as f64 / f64::from(per_second))
}

fn matroska_facts(bytes: &[u8]) -> Result<VideoFacts, Unread> {
    let mut f = open_matroska(bytes)?;
    let track = f
        .tracks()
        .iter()
        .find(|t| t.track_type() == matroska_demuxer::TrackType::Video)
        .ok_or(Unread::NoVideoTrack)?;
    let number = track.track_number().get();
    let (width, height) = track
        .video()
        .map(|v| (v.pixel_width().get(), v.pixel_height().get()))
        .unwrap_or((0, 0));
    // Timestamps count units of timestamp_scale nanoseconds.
    let scale = f.info().timestamp_scale().get() as f64 / 1e9;
    let declared = f.info().duration().map(|d| d * scale);
    let mut frame = matroska_demuxer::Frame::default();
    let (mut frames, mut last) = (0u64, 0u64);
    while f.next_frame(&mut frame)? {
        if frame.track == number {
            frames += 1;
            last = last.max(frame.timestamp);
        }
    }
    // A stream written without a duration (live WebM) lasts to its last frame, and one more
    // frame's time: the mean frame time.
    let seconds = declared.filter(|s| *s > 0.0).unwrap_or_else(|| {
        let span = last as f64 * scale;
        if frames > 1 {
            span * frames as f64 / (frames - 1) as f64
        } else {
            span
        }
    });
    Ok(VideoFacts {
        container: Container::Matroska,
        seconds,
        frames,
        width,
        height,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_that_are_no_container_are_said_so() {
        assert_eq!(video_facts(b""), Err(MediaError::UnknownContainer));
        assert_eq!(
            video_facts(b"\x89PNG\r\n\x1a\n0000000000"),
            Err(MediaError::UnknownContainer)
        );
    }

    #[test]
    fn a_broken_container_is_unreadable_not_a_panic() {
        // An ftyp box that claims more bytes than there are, then nothing.
        let mut b = vec![0, 0, 0, 0x20];
        b.extend_from_slice(b"ftypisom");
        b.extend_from_slice(&[0; 8]);
        assert!(matches!(
            video_facts(&b),
            Err(MediaError::Unreadable {
                container: "mp4",
                ..
            })
        ));
        // EBML magic and garbage.
        let mut b = vec![0x1A, 0x45, 0xDF, 0xA3];
        b.extend_from_slice(&[0xFF; 40]);
        assert!(matches!(
            video_facts(&b),
            Err(MediaError::Unreadable {
                container: "matroska",
                ..
            })
        ));
        // Every truncation of a real box header stays an error.
        for n in 0..b.len() {
            let _ = video_facts(&b[..n]);
        }
    }
}
