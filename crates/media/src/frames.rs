//! What every video decoder here shares: why frames cannot be had, which decoded picture each
//! asked moment shows, and planar YUV turned into RGB. The containers and codecs are in
//! `h264` (MP4/QuickTime) and `webm` (WebM/Matroska, with `vpx` and `av1`).

use crate::picture::Picture;

/// Why a video's frames cannot be had.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum FramesError {
    /// A container or codec this runtime does not decode.
    #[error("{0}: frames are decoded from H.264 in MP4, QuickTime, WebM or Matroska and from VP8, VP9 or AV1 in WebM or Matroska")]
    Unsupported(String),
    /// The bytes do not decode.
    #[error("the video does not decode: {0}")]
    Malformed(String),
    /// A frame larger than the caller allows.
    #[error("its frames have {0} pixels, more than {1}")]
    TooLarge(u64, u64),
}

impl FramesError {
    pub(crate) fn malformed(why: impl std::fmt::Display) -> Self {
        FramesError::Malformed(why.to_string())
    }
}

/// Which picture each asked moment shows. Pictures come out of a decoder in the order they
/// are shown (a stream with B frames decodes them out of that order), so the k-th picture
/// out is the one with the k-th presentation time; a moment shows the last picture whose time
/// is not after it, a moment before the first picture the first, one past the end the last.
pub(crate) struct Shown<'m> {
    moments: &'m [f64],
    /// Presentation times in seconds from the first, ascending.
    times: Vec<f64>,
    out: Vec<Option<Picture>>,
    seen: usize,
}

impl<'m> Shown<'m> {
    /// `moments` ascending, in seconds; `times` the stream's presentation times in any unit
    /// and order, `per_second` of them a second.
    pub(crate) fn new(moments: &'m [f64], times: &[i64], per_second: f64) -> Self {
        let mut sorted = times.to_vec();
        sorted.sort_unstable();
        let zero = sorted.first().copied().unwrap_or(0);
        let times = sorted
            .iter()
            .map(|t| t.saturating_sub(zero) as f64 / per_second)
            .collect();
        Shown {
            moments,
            times,
            out: vec![None; moments.len()],
            seen: 0,
        }
    }

    /// The next picture out of the decoder: `make` turns it into RGB when a moment shows it.
    pub(crate) fn offer(
        &mut self,
        make: impl FnOnce() -> Result<Picture, FramesError>,
    ) -> Result<(), FramesError> {
        let k = self.seen.min(self.times.len().saturating_sub(1));
        self.seen += 1;
        let Some(from) = self.times.get(k).copied() else {
            return Ok(());
        };
        let until = self.times.get(k + 1).copied().unwrap_or(f64::INFINITY);
        let first = if k == 0 {
            0
        } else {
            self.moments.partition_point(|m| *m < from)
        };
        let at = first..self.moments.partition_point(|m| *m < until);
        if at.is_empty() {
            return Ok(());
        }
        let picture = make()?;
        for slot in &mut self.out[at] {
            *slot = Some(picture.clone());
        }
        Ok(())
    }

    /// Every moment has its picture: decoding may stop.
    pub(crate) fn done(&self) -> bool {
        self.out.iter().all(Option::is_some)
    }

    /// The pictures, one per moment. A moment no picture was decoded for (a broken stream's
    /// tail) shows the last one before it.
    pub(crate) fn finish(self) -> Result<Vec<Picture>, FramesError> {
        let mut last: Option<Picture> = None;
        let mut pictures = Vec::with_capacity(self.out.len());
        for p in self.out {
            match p.or_else(|| last.clone()) {
                Some(p) => {
                    last = Some(p.clone());
                    pictures.push(p);
                }
                None => return Err(FramesError::malformed("no frame decodes")),
            }
        }
        Ok(pictures)
    }
}

/// A decoded picture as a decoder lends it: three planes, the chroma ones subsampled by
/// `2^x_shift` across and `2^y_shift` down (none: a grey picture), samples of `bits` bits
/// (more than 8: two bytes each, little-endian).
pub(crate) struct Yuv<'a> {
    pub width: usize,
    pub height: usize,
    pub y: &'a [u8],
    pub u: &'a [u8],
    pub v: &'a [u8],
    pub y_stride: usize,
    pub uv_stride: usize,
    pub x_shift: u32,
    pub y_shift: u32,
    pub bits: u32,
}

impl Yuv<'_> {
    /// RGB by BT.601 in studio range, the conversion OpenH264 applies to H.264 frames, so the
    /// same clip gives the same pixels whatever its codec. A plane shorter than its geometry
    /// says is refused, not read past.
    pub(crate) fn to_rgb(&self, max_pixels: u64) -> Result<Picture, FramesError> {
        let (w, h) = (self.width, self.height);
        let pixels = (w as u64) * (h as u64);
        if pixels > max_pixels {
            return Err(FramesError::TooLarge(pixels, max_pixels));
        }
        if w == 0
            || h == 0
            || !(8..=16).contains(&self.bits)
            || self.x_shift > 1
            || self.y_shift > 1
        {
            return Err(FramesError::malformed(
                "a decoded frame has no usable geometry",
            ));
        }
        let wide = usize::from(self.bits > 8);
        let down = self.bits - 8;
        let (cw, ch) = (
            (w + (1 << self.x_shift) - 1) >> self.x_shift,
            (h + (1 << self.y_shift) - 1) >> self.y_shift,
        );
        let fits = |plane: &[u8], stride: usize, pw: usize, ph: usize| {
            stride >= pw << wide && plane.len() >= stride * (ph - 1) + (pw << wide)
        };
        let grey = self.u.is_empty() && self.v.is_empty();
        if !fits(self.y, self.y_stride, w, h)
            || !(grey
                || fits(self.u, self.uv_stride, cw, ch) && fits(self.v, self.uv_stride, cw, ch))
        {
            return Err(FramesError::malformed(
                "a decoded frame is shorter than its size",
            ));
        }
        let sample = |plane: &[u8], at: usize| -> f32 {
            let v = if wide == 1 {
                u16::from_le_bytes([plane[at], plane[at + 1]]) >> down
            } else {
                u16::from(plane[at])
            };
            f32::from(v)
        };
        const Y_MUL: f32 = 255.0 / 219.0;
        const RV: f32 = 255.0 / 224.0 * 1.402;
        const GV: f32 = -255.0 / 224.0 * 1.402 * 0.299 / 0.587;
        const GU: f32 = -255.0 / 224.0 * 1.772 * 0.114 / 0.587;
        const BU: f32 = 255.0 / 224.0 * 1.772;
        let to_byte = |v: f32| v.round().clamp(0.0, 255.0) as u8;
        let mut rgb = Vec::with_capacity(w * h * 3);
        for row in 0..h {
            let crow = (row >> self.y_shift) * self.uv_stride;
            for col in 0..w {
                let luma = (sample(self.y, row * self.y_stride + (col << wide)) - 16.0) * Y_MUL;
                let (u, v) = if grey {
                    (0.0, 0.0)
                } else {
                    let at = crow + ((col >> self.x_shift) << wide);
                    (sample(self.u, at) - 128.0, sample(self.v, at) - 128.0)
                };
                rgb.push(to_byte(luma + RV * v));
                rgb.push(to_byte(luma + GV * v + GU * u));
                rgb.push(to_byte(luma + BU * u));
            }
        }
        Ok(Picture {
            width: w,
            height: h,
            rgb,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_moment_shows_the_last_picture_not_after_it() {
        let moments = [0.0, 0.15, 0.2, 0.45, 9.0];
        // Presentation times out of order, in tenths of a second: 0, 1, 2, 3, 4.
        let mut shown = Shown::new(&moments, &[0, 2, 1, 4, 3], 10.0);
        for k in 0..5u8 {
            shown
                .offer(|| {
                    Ok(Picture {
                        width: 1,
                        height: 1,
                        rgb: vec![k; 3],
                    })
                })
                .unwrap();
        }
        let got: Vec<u8> = shown.finish().unwrap().iter().map(|p| p.rgb[0]).collect();
        assert_eq!(got, [0, 1, 2, 4, 4]);
    }

    #[test]
    fn a_plane_shorter_than_its_geometry_is_refused() {
        fn yuv<'a>(y: &'a [u8], c: &'a [u8]) -> Yuv<'a> {
            Yuv {
                width: 4,
                height: 4,
                y,
                u: c,
                v: c,
                y_stride: 4,
                uv_stride: 2,
                x_shift: 1,
                y_shift: 1,
                bits: 8,
            }
        }
        let (y, c) = (&[16u8; 4 * 4][..], &[128u8; 2 * 2][..]);
        let black = yuv(y, c).to_rgb(1 << 20).unwrap();
        assert!(black.rgb.iter().all(|b| *b == 0), "{:?}", black.rgb);
        assert!(yuv(y, &c[..3]).to_rgb(1 << 20).is_err());
        assert!(yuv(&y[..15], c).to_rgb(1 << 20).is_err());
        assert!(matches!(
            yuv(y, c).to_rgb(15),
            Err(FramesError::TooLarge(16, 15))
        ));
    }
}
