//! H.264 frames of MP4/QuickTime containers (the `mp4` crate), decoded by Cisco's OpenH264
//! (built from source by the `openh264` crate). Every sample is decoded in order (a P frame
//! needs the ones before it); the frame shown at each asked moment is converted to RGB.

use std::io::Cursor;

use openh264::decoder::{DecodedYUV, Decoder, DecoderConfig, Flush};
use openh264::formats::YUVSource;
use openh264::OpenH264API;

use crate::first_video_track;
use crate::frames::{FramesError, Shown};
use crate::picture::Picture;

pub(crate) fn mp4_frames(
    bytes: &[u8],
    moments: &[f64],
    max_pixels: u64,
) -> Result<Vec<Picture>, FramesError> {
    let mut r = crate::open_mp4(bytes).map_err(FramesError::malformed)?;
    let track =
        first_video_track(&r).ok_or_else(|| FramesError::malformed("it has no video track"))?;
    match track.media_type() {
        Ok(mp4::MediaType::H264) => {}
        Ok(other) => return Err(FramesError::Unsupported(format!("{other} video in MP4"))),
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
    let sets = [
        track
            .sequence_parameter_set()
            .map_err(FramesError::malformed)?
            .to_vec(),
        track
            .picture_parameter_set()
            .map_err(FramesError::malformed)?
            .to_vec(),
    ];
    // The reader allocates each sample at the size its table declares before it reads it:
    // tables that claim more samples or bytes than the file holds are refused first.
    let declared: u64 = if track.trafs.is_empty() {
        let stsz = &track.trak.mdia.minf.stbl.stsz;
        if stsz.sample_size > 0 {
            u64::from(stsz.sample_size) * u64::from(stsz.sample_count)
        } else {
            stsz.sample_sizes.iter().map(|n| u64::from(*n)).sum()
        }
    } else {
        track
            .trafs
            .iter()
            .filter_map(|t| t.trun.as_ref())
            .flat_map(|run| &run.sample_sizes)
            .map(|n| u64::from(*n))
            .sum()
    };
    if u64::from(count) > bytes.len() as u64 || declared > bytes.len() as u64 {
        return Err(FramesError::malformed(
            "its sample table claims more bytes than the file holds",
        ));
    }
    let mut samples = Vec::with_capacity(count as usize);
    for sample_id in 1..=count {
        if let Some(sample) = r
            .read_sample(id, sample_id)
            .map_err(FramesError::malformed)?
        {
            let shown = sample.start_time as i64 + i64::from(sample.rendering_offset);
            samples.push((shown, sample.bytes));
        }
    }
    decode(
        &sets,
        4,
        &samples,
        f64::from(timescale),
        moments,
        max_pixels,
    )
}

/// The parameter sets and NAL length size of an `avcC` record (ISO 14496-15), as Matroska's
/// `V_MPEG4/ISO/AVC` tracks carry it in their codec private data.
pub(crate) fn avc_config(record: &[u8]) -> Result<(Vec<Vec<u8>>, usize), FramesError> {
    let cut = || FramesError::malformed("its AVC configuration is cut off");
    let mut rest = record.get(4..).ok_or_else(cut)?;
    let mut byte = || -> Result<u8, FramesError> {
        let (b, tail) = rest.split_first().ok_or_else(cut)?;
        rest = tail;
        Ok(*b)
    };
    let length_size = usize::from(byte()? & 3) + 1;
    let mut sets = Vec::new();
    for mask in [0x1f, 0xff] {
        for _ in 0..byte()? & mask {
            let len = usize::from(u16::from_be_bytes([byte()?, byte()?]));
            let mut set = Vec::with_capacity(len);
            for _ in 0..len {
                set.push(byte()?);
            }
            sets.push(set);
        }
    }
    Ok((sets, length_size))
}

/// Decode H.264 `samples` (presentation time, NAL units each behind a `length_size`-byte
/// big-endian length) after the parameter `sets`, until every moment has its picture.
pub(crate) fn decode(
    sets: &[Vec<u8>],
    length_size: usize,
    samples: &[(i64, impl AsRef<[u8]>)],
    per_second: f64,
    moments: &[f64],
    max_pixels: u64,
) -> Result<Vec<Picture>, FramesError> {
    // The parameter sets open the stream, in Annex B form as the decoder reads it.
    let mut stream = Vec::new();
    for set in sets {
        stream.extend_from_slice(&[0, 0, 0, 1]);
        stream.extend_from_slice(set);
    }
    let times: Vec<i64> = samples.iter().map(|(t, _)| *t).collect();
    let mut shown = Shown::new(moments, &times, per_second);
    let config = DecoderConfig::new().flush_after_decode(Flush::NoFlush);
    let mut decoder = Decoder::with_api_config(OpenH264API::from_source(), config)
        .map_err(FramesError::malformed)?;
    decoder.decode(&stream).map_err(FramesError::malformed)?;
    let rgb = |yuv: &DecodedYUV<'_>| {
        let (w, h) = yuv.dimensions();
        let pixels = (w * h) as u64;
        if pixels > max_pixels {
            return Err(FramesError::TooLarge(pixels, max_pixels));
        }
        let mut rgb = vec![0u8; w * h * 3];
        yuv.write_rgb8(&mut rgb);
        Ok(Picture {
            width: w,
            height: h,
            rgb,
        })
    };
    for (_, bytes) in samples {
        let packet = annex_b(bytes.as_ref(), length_size)?;
        if let Some(yuv) = decoder.decode(&packet).map_err(FramesError::malformed)? {
            shown.offer(|| rgb(&yuv))?;
        }
        if shown.done() {
            break;
        }
    }
    if !shown.done() {
        for yuv in decoder.flush_remaining().map_err(FramesError::malformed)? {
            shown.offer(|| rgb(&yuv))?;
        }
    }
    shown.finish()
}

/// A sample's NAL units (each behind a `length_size`-byte big-endian length) in Annex B form.
fn annex_b(sample: &[u8], length_size: usize) -> Result<Vec<u8>, FramesError> {
    let cut = |why: &str| FramesError::Malformed(why.to_string());
    let mut out = Vec::with_capacity(sample.len() + 16);
    let mut rest = sample;
    while !rest.is_empty() {
        if rest.len() < length_size {
            return Err(cut("a NAL unit's length is cut off"));
        }
        let (len, tail) = rest.split_at(length_size);
        let len = len.iter().fold(0usize, |n, b| n << 8 | usize::from(*b));
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
