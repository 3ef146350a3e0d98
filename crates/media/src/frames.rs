//! Frames of a video decoded at chosen moments: MP4/QuickTime containers (the `mp4` crate)
//! holding H.264 video (Cisco's OpenH264, built from source by the `openh264` crate). Every
//! sample is decoded in order (a P frame needs the ones before it); the frame shown at each
//! asked moment is converted to RGB. Other codecs (H.265, VP8, VP9, AV1) and Matroska/WebM
//! containers are refused with [`FramesError::Unsupported`], which says what was found.

use std::io::Cursor;
use std::panic::{catch_unwind, AssertUnwindSafe};

use openh264::decoder::{DecodedYUV, Decoder, DecoderConfig, Flush};
use openh264::formats::YUVSource;
use openh264::OpenH264API;

use crate::picture::Picture;
use crate::{first_video_track, sniff, Container};

/// Why a video's frames cannot be had.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum FramesError {
    /// A container or codec this runtime does not decode.
    #[error("{0}: frames are decoded from H.264 video in MP4 or QuickTime only")]
    Unsupported(String),
    /// The bytes do not decode.
    #[error("the video does not decode: {0}")]
    Malformed(String),
    /// A frame larger than the caller allows.
    #[error("its frames have {0} pixels, more than {1}")]
    TooLarge(u64, u64),
}

/// The frame shown at each of `moments` (seconds from the start, ascending), as RGB, with
/// frames of at most `max_pixels` pixels. A moment past the last frame gets the last frame.
pub fn decode_frames(
    bytes: &[u8],
    moments: &[f64],
    max_pixels: u64,
) -> Result<Vec<Picture>, FramesError> {
    match sniff(bytes) {
        Some(Container::Mp4) => {}
        Some(Container::Matroska) => {
            return Err(FramesError::Unsupported("a Matroska or WebM video".into()))
        }
        None => return Err(FramesError::Unsupported("not a video container".into())),
    }
    catch_unwind(AssertUnwindSafe(|| mp4_frames(bytes, moments, max_pixels))).unwrap_or_else(|_| {
        Err(FramesError::Malformed(
            "its tables contradict each other".into(),
        ))
    })
}

fn mp4_frames(bytes: &[u8], moments: &[f64], max_pixels: u64) -> Result<Vec<Picture>, FramesError> {
    let malformed = |e: &dyn std::fmt::Display| FramesError::Malformed(e.to_string());
    let mut r = mp4::Mp4Reader::read_header(Cursor::new(bytes), bytes.len() as u64)
        .map_err(|e| malformed(&e))?;
    let track = first_video_track(&r)
        .ok_or_else(|| FramesError::Malformed("it has no video track".into()))?;
    match track.media_type() {
        Ok(mp4::MediaType::H264) => {}
        Ok(other) => return Err(FramesError::Unsupported(format!("{other} video"))),
        Err(e) => return Err(FramesError::Unsupported(e.to_string())),
    }
    let pixels = u64::from(track.width()) * u64::from(track.height());
    if pixels > max_pixels {
        return Err(FramesError::TooLarge(pixels, max_pixels));
    }
    let (id, timescale, count) = (
        track.track_id(),
        track.timescale().max(1),
        track.sample_count(),
    );
    // The parameter sets open the stream, in Annex B form as the decoder reads it.
    let mut stream = Vec::new();
    for set in [
        track.sequence_parameter_set(),
        track.picture_parameter_set(),
    ] {
        stream.extend_from_slice(&[0, 0, 0, 1]);
        stream.extend_from_slice(set.map_err(|e| malformed(&e))?);
    }
    // Frames come out of the decoder in the order they are shown (a stream with B frames
    // decodes them out of that order): the k-th picture out is the one with the k-th
    // presentation time. Each moment shows the last picture whose time is not after it.
    let mut samples = Vec::with_capacity(count as usize);
    for sample_id in 1..=count {
        if let Some(sample) = r.read_sample(id, sample_id).map_err(|e| malformed(&e))? {
            let shown = sample.start_time as i64 + i64::from(sample.rendering_offset);
            samples.push((shown, sample.bytes));
        }
    }
    let mut times: Vec<i64> = samples.iter().map(|(t, _)| *t).collect();
    times.sort_unstable();
    let zero = times.first().copied().unwrap_or(0);
    let seconds = |t: i64| (t - zero) as f64 / f64::from(timescale);
    // For each picture out, in order, the moments it is the one shown at.
    let wanted = |k: usize| -> std::ops::Range<usize> {
        let from = seconds(times[k]);
        let until = times.get(k + 1).map_or(f64::INFINITY, |t| seconds(*t));
        let first = if k == 0 {
            0
        } else {
            moments.partition_point(|m| *m < from)
        };
        first..moments.partition_point(|m| *m < until)
    };
    let config = DecoderConfig::new().flush_after_decode(Flush::NoFlush);
    let mut decoder =
        Decoder::with_api_config(OpenH264API::from_source(), config).map_err(|e| malformed(&e))?;
    decoder.decode(&stream).map_err(|e| malformed(&e))?;
    let mut out: Vec<Option<Picture>> = vec![None; moments.len()];
    let mut shown = 0usize;
    let mut keep = |yuv: &DecodedYUV<'_>, out: &mut Vec<Option<Picture>>| {
        let at = wanted(shown.min(times.len().saturating_sub(1)));
        shown += 1;
        if at.is_empty() {
            return;
        }
        let (w, h) = yuv.dimensions();
        let mut rgb = vec![0u8; w * h * 3];
        yuv.write_rgb8(&mut rgb);
        let picture = Picture {
            width: w,
            height: h,
            rgb,
        };
        for slot in &mut out[at] {
            *slot = Some(picture.clone());
        }
    };
    for (_, bytes) in &samples {
        let packet = annex_b(bytes)?;
        if let Some(yuv) = decoder.decode(&packet).map_err(|e| malformed(&e))? {
            keep(&yuv, &mut out);
        }
        if out.iter().all(Option::is_some) {
            break;
        }
    }
    if out.iter().any(Option::is_none) {
        for yuv in decoder.flush_remaining().map_err(|e| malformed(&e))? {
            keep(&yuv, &mut out);
        }
    }
    // A moment no picture was decoded for (a broken stream's tail) shows the last one.
    let mut last: Option<Picture> = None;
    let mut pictures = Vec::with_capacity(out.len());
    for p in out {
        match p.or_else(|| last.clone()) {
            Some(p) => {
                last = Some(p.clone());
                pictures.push(p);
            }
            None => return Err(FramesError::Malformed("no frame decodes".into())),
        }
    }
    Ok(pictures)
}

/// An MP4 sample's NAL units (each behind a 4-byte big-endian length) in Annex B form.
fn annex_b(sample: &[u8]) -> Result<Vec<u8>, FramesError> {
    let cut = |why: &str| FramesError::Malformed(why.to_string());
    let mut out = Vec::with_capacity(sample.len() + 16);
    let mut rest = sample;
    while !rest.is_empty() {
        let (len, tail) = rest
            .split_first_chunk::<4>()
            .ok_or_else(|| cut("a NAL unit's length is cut off"))?;
        let len = u32::from_be_bytes(*len) as usize;
        let unit = tail
            .get(..len)
            .ok_or_else(|| cut("a NAL unit runs past its sample"))?;
        out.extend_from_slice(&[0, 0, 0, 1]);
        out.extend_from_slice(unit);
        rest = &tail[len..];
    }
    Ok(out)
}

/// Encode `frames` (all of one size, even sides) as H.264 in an MP4 container at `fps`
/// frames per second: what a client's video looks like, for tests and benchmarks.
pub fn encode_mp4(frames: &[Picture], fps: u32) -> Result<Vec<u8>, FramesError> {
    use openh264::encoder::Encoder;
    use openh264::formats::{RgbSliceU8, YUVBuffer};
    let failed = |e: &dyn std::fmt::Display| FramesError::Malformed(e.to_string());
    let first = frames
        .first()
        .ok_or_else(|| FramesError::Malformed("no frames to encode".into()))?;
    let (w, h) = (first.width, first.height);
    let mut encoder = Encoder::new().map_err(|e| failed(&e))?;
    let (mut sps, mut pps) = (Vec::new(), Vec::new());
    let mut samples: Vec<(Vec<u8>, bool)> = Vec::with_capacity(frames.len());
    for f in frames {
        let yuv = YUVBuffer::from_rgb_source(RgbSliceU8::new(&f.rgb, (f.width, f.height)));
        let bits = encoder.encode(&yuv).map_err(|e| failed(&e))?;
        let mut sample = Vec::new();
        let mut sync = false;
        for l in 0..bits.num_layers() {
            let Some(layer) = bits.layer(l) else { continue };
            for n in 0..layer.nal_count() {
                let Some(unit) = layer.nal_unit(n) else {
                    continue;
                };
                // Each unit starts with its Annex B start code (3 or 4 bytes).
                let body = unit
                    .strip_prefix(&[0, 0, 0, 1])
                    .or_else(|| unit.strip_prefix(&[0, 0, 1]))
                    .unwrap_or(unit);
                match body.first().map(|b| b & 0x1f) {
                    Some(7) => sps = body.to_vec(),
                    Some(8) => pps = body.to_vec(),
                    Some(kind) => {
                        sync |= kind == 5;
                        sample.extend_from_slice(&(body.len() as u32).to_be_bytes());
                        sample.extend_from_slice(body);
                    }
                    None => {}
                }
            }
        }
        samples.push((sample, sync));
    }
    let config = mp4::Mp4Config {
        major_brand: str::parse("isom").map_err(|e| failed(&e))?,
        minor_version: 512,
        compatible_brands: vec![
            str::parse("isom").map_err(|e| failed(&e))?,
            str::parse("avc1").map_err(|e| failed(&e))?,
        ],
        timescale: 1000,
    };
    let mut out =
        mp4::Mp4Writer::write_start(Cursor::new(Vec::new()), &config).map_err(|e| failed(&e))?;
    out.add_track(&mp4::TrackConfig {
        track_type: mp4::TrackType::Video,
        timescale: fps * 100,
        language: "und".into(),
        media_conf: mp4::MediaConfig::AvcConfig(mp4::AvcConfig {
            width: w as u16,
            height: h as u16,
            seq_param_set: sps,
            pic_param_set: pps,
        }),
    })
    .map_err(|e| failed(&e))?;
    for (i, (bytes, is_sync)) in samples.into_iter().enumerate() {
        out.write_sample(
            1,
            &mp4::Mp4Sample {
                start_time: i as u64 * 100,
                duration: 100,
                rendering_offset: 0,
                is_sync,
                bytes: bytes.into(),
            },
        )
        .map_err(|e| failed(&e))?;
    }
    out.write_end().map_err(|e| failed(&e))?;
    Ok(out.into_writer().into_inner())
}
