//! Frames of WebM and Matroska videos: the first video track's blocks (`matroska-demuxer`),
//! decoded by the codec its `CodecID` names: VP8 and VP9 by libvpx, AV1 by dav1d, H.264 by
//! OpenH264.

use matroska_demuxer::{Frame, TrackType};

use crate::frames::{FramesError, Shown, Yuv};
use crate::picture::Picture;
use crate::{av1, h264, vpx};

pub(crate) fn matroska_frames(
    bytes: &[u8],
    moments: &[f64],
    max_pixels: u64,
) -> Result<Vec<Picture>, FramesError> {
    let mut file = crate::open_matroska(bytes).map_err(FramesError::malformed)?;
    let track = file
        .tracks()
        .iter()
        .find(|t| t.track_type() == TrackType::Video)
        .ok_or_else(|| FramesError::malformed("it has no video track"))?;
    let number = track.track_number().get();
    if let Some(v) = track.video() {
        let pixels = v.pixel_width().get().saturating_mul(v.pixel_height().get());
        if pixels > max_pixels {
            return Err(FramesError::TooLarge(pixels, max_pixels));
        }
    }
    // The codec is known before any block is read: one this runtime does not decode is
    // refused without reading the file's frames.
    let stream = match track.codec_id() {
        "V_VP8" => Stream::Packets(Codec::Vpx(vpx::Decoder::new(vpx::Vp::Vp8)?)),
        "V_VP9" => Stream::Packets(Codec::Vpx(vpx::Decoder::new(vpx::Vp::Vp9)?)),
        "V_AV1" => Stream::Packets(Codec::Av1(av1::Decoder::new(max_pixels)?)),
        "V_MPEG4/ISO/AVC" => {
            let (sets, length_size) = h264::avc_config(track.codec_private().unwrap_or_default())?;
            Stream::Avc(sets, length_size)
        }
        other => {
            return Err(FramesError::Unsupported(format!(
                "{} video in Matroska",
                if other.is_empty() { "unnamed" } else { other }
            )))
        }
    };
    // Timestamps count units of timestamp_scale nanoseconds.
    let per_second = 1e9 / file.info().timestamp_scale().get() as f64;
    let mut packets = Vec::new();
    let mut frame = Frame::default();
    while file
        .next_frame(&mut frame)
        .map_err(FramesError::malformed)?
    {
        if frame.track == number {
            let at = i64::try_from(frame.timestamp).unwrap_or(i64::MAX);
            packets.push((at, !frame.is_invisible, std::mem::take(&mut frame.data)));
        }
    }
    let mut decoder = match stream {
        Stream::Packets(codec) => codec,
        Stream::Avc(sets, length_size) => {
            let samples: Vec<(i64, Vec<u8>)> = packets
                .into_iter()
                .map(|(at, _, data)| (at, data))
                .collect();
            return h264::decode(
                &sets,
                length_size,
                &samples,
                per_second,
                moments,
                max_pixels,
            );
        }
    };
    let shown_times: Vec<i64> = packets.iter().filter(|p| p.1).map(|p| p.0).collect();
    let mut shown = Shown::new(moments, &shown_times, per_second);
    for (_, _, data) in &packets {
        decoder.decode(data, &mut |yuv| shown.offer(|| yuv.to_rgb(max_pixels)))?;
        if shown.done() {
            return shown.finish();
        }
    }
    decoder.finish(&mut |yuv| shown.offer(|| yuv.to_rgb(max_pixels)))?;
    shown.finish()
}

/// How a track's blocks are decoded: packet by packet, or (H.264, from its parameter sets and
/// NAL length size) by `h264::decode` over the whole stream.
enum Stream {
    Packets(Codec),
    Avc(Vec<Vec<u8>>, usize),
}

enum Codec {
    Vpx(Box<vpx::Decoder>),
    Av1(av1::Decoder),
}

impl Codec {
    fn decode(
        &mut self,
        packet: &[u8],
        each: &mut dyn FnMut(&Yuv<'_>) -> Result<(), FramesError>,
    ) -> Result<(), FramesError> {
        match self {
            Codec::Vpx(d) => d.decode(packet, each),
            Codec::Av1(d) => d.decode(packet, each),
        }
    }

    fn finish(
        &mut self,
        each: &mut dyn FnMut(&Yuv<'_>) -> Result<(), FramesError>,
    ) -> Result<(), FramesError> {
        match self {
            // libvpx shows every frame from its own packet.
            Codec::Vpx(_) => Ok(()),
            Codec::Av1(d) => d.finish(each),
        }
    }
}
