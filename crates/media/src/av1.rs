//! AV1 decoded by dav1d (the system's library, through the `dav1d` crate).

use dav1d::{PixelLayout, PlanarImageComponent as Plane};

use crate::frames::{FramesError, Yuv};

/// At most this many turns of "take the pictures out, then send the rest of the packet":
/// one packet holds one temporal unit, so a decoder that needs more is stuck.
const TURNS: usize = 64;

pub(crate) struct Decoder {
    inner: dav1d::Decoder,
}

impl Decoder {
    /// A decoder that refuses frames of more than `max_pixels`.
    pub(crate) fn new(max_pixels: u64) -> Result<Self, FramesError> {
        let mut settings = dav1d::Settings::new();
        // One thread and no frame delay: the server runs many requests side by side, and a
        // picture comes out as soon as its packet is in.
        settings.set_n_threads(1);
        settings.set_max_frame_delay(1);
        settings.set_frame_size_limit(u32::try_from(max_pixels).unwrap_or(u32::MAX));
        // Film grain is noise for the eye: the detector reads the picture without it.
        settings.set_apply_grain(false);
        let inner = dav1d::Decoder::with_settings(&settings)
            .map_err(|e| FramesError::malformed(format!("dav1d did not open: {e}")))?;
        Ok(Decoder { inner })
    }

    /// Decode one packet (a temporal unit) and lend every picture it shows to `each`.
    pub(crate) fn decode(
        &mut self,
        packet: &[u8],
        each: &mut dyn FnMut(&Yuv<'_>) -> Result<(), FramesError>,
    ) -> Result<(), FramesError> {
        let mut sent = self.inner.send_data(packet.to_vec(), None, None, None);
        for _ in 0..TURNS {
            match sent {
                Ok(()) => return self.drain(each),
                Err(e) if e.is_again() => {
                    self.drain(each)?;
                    sent = self.inner.send_pending_data();
                }
                Err(e) => return Err(FramesError::malformed(format!("dav1d: {e}"))),
            }
        }
        Err(FramesError::malformed("dav1d takes no more of a packet"))
    }

    /// Every picture still in the decoder, at the stream's end.
    pub(crate) fn finish(
        &mut self,
        each: &mut dyn FnMut(&Yuv<'_>) -> Result<(), FramesError>,
    ) -> Result<(), FramesError> {
        self.inner.flush();
        self.drain(each)
    }

    fn drain(
        &mut self,
        each: &mut dyn FnMut(&Yuv<'_>) -> Result<(), FramesError>,
    ) -> Result<(), FramesError> {
        loop {
            let picture = match self.inner.get_picture() {
                Ok(p) => p,
                Err(e) if e.is_again() => return Ok(()),
                Err(e) => return Err(FramesError::malformed(format!("dav1d: {e}"))),
            };
            let (x_shift, y_shift, grey) = match picture.pixel_layout() {
                PixelLayout::I400 => (0, 0, true),
                PixelLayout::I420 => (1, 1, false),
                PixelLayout::I422 => (1, 0, false),
                PixelLayout::I444 => (0, 0, false),
            };
            let (y, u, v) = (
                picture.plane(Plane::Y),
                picture.plane(Plane::U),
                picture.plane(Plane::V),
            );
            fn chroma(p: &dav1d::Plane, grey: bool) -> &[u8] {
                if grey {
                    &[]
                } else {
                    p
                }
            }
            each(&Yuv {
                width: picture.width() as usize,
                height: picture.height() as usize,
                y: &y,
                u: chroma(&u, grey),
                v: chroma(&v, grey),
                y_stride: picture.stride(Plane::Y) as usize,
                uv_stride: picture.stride(Plane::U) as usize,
                x_shift,
                y_shift,
                bits: picture.bit_depth() as u32,
            })?;
        }
    }
}
