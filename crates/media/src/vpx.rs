//! VP8 and VP9 decoded by libvpx (the system's library, through `env-libvpx-sys`): the only
//! unsafe code of this crate, kept to the library's documented decode loop. A frame the
//! library lends is read through [`Yuv`] before the next packet goes in.

use std::ptr;

use vpx_sys as sys;

use crate::frames::{FramesError, Yuv};

/// Which of libvpx's two decoders.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Vp {
    Vp8,
    Vp9,
}

/// An open libvpx decoder; destroyed on drop.
pub(crate) struct Decoder {
    ctx: sys::vpx_codec_ctx_t,
    open: bool,
}

impl Decoder {
    pub(crate) fn new(codec: Vp) -> Result<Box<Self>, FramesError> {
        // One thread: the server runs many requests side by side.
        let cfg = sys::vpx_codec_dec_cfg_t {
            threads: 1,
            w: 0,
            h: 0,
        };
        // SAFETY: a zeroed context is what vpx_codec_dec_init_ver expects to fill in; the
        // interface pointers are static tables of the library. The context lives in a box
        // so its address does not change after init (the library keeps pointers into it).
        unsafe {
            let mut decoder = Box::new(Decoder {
                ctx: std::mem::zeroed(),
                open: false,
            });
            let iface = match codec {
                Vp::Vp8 => sys::vpx_codec_vp8_dx(),
                Vp::Vp9 => sys::vpx_codec_vp9_dx(),
            };
            let err = sys::vpx_codec_dec_init_ver(
                &mut decoder.ctx,
                iface,
                &cfg,
                0,
                sys::VPX_DECODER_ABI_VERSION as i32,
            );
            if err != sys::vpx_codec_err_t::VPX_CODEC_OK {
                return Err(FramesError::malformed(format!(
                    "libvpx did not open its {codec:?} decoder ({err:?})"
                )));
            }
            decoder.open = true;
            Ok(decoder)
        }
    }

    /// Decode one packet and lend every frame it shows to `each`, in order.
    pub(crate) fn decode(
        &mut self,
        packet: &[u8],
        each: &mut dyn FnMut(&Yuv<'_>) -> Result<(), FramesError>,
    ) -> Result<(), FramesError> {
        let size = u32::try_from(packet.len())
            .map_err(|_| FramesError::malformed("a packet is larger than 4 GiB"))?;
        // SAFETY: the packet is a valid slice for the call; libvpx copies what it keeps.
        let err = unsafe {
            sys::vpx_codec_decode(&mut self.ctx, packet.as_ptr(), size, ptr::null_mut(), 0)
        };
        if err != sys::vpx_codec_err_t::VPX_CODEC_OK {
            return Err(FramesError::malformed(format!("libvpx: {err:?}")));
        }
        let mut iter: sys::vpx_codec_iter_t = ptr::null();
        loop {
            // SAFETY: `iter` starts null and is only advanced by the library; the image it
            // returns stays valid until the next decode call on this context, and every
            // slice below is built from the image's own planes, strides and size.
            let image = unsafe { sys::vpx_codec_get_frame(&mut self.ctx, &mut iter) };
            let Some(img) = (unsafe { image.as_ref() }) else {
                return Ok(());
            };
            let yuv = unsafe { lend(img) }?;
            each(&yuv)?;
        }
    }
}

/// The planes of a frame libvpx lends, as slices of the lengths its geometry gives.
///
/// # Safety
/// `img` must be a frame the library returned and has not yet reused.
unsafe fn lend(img: &sys::vpx_image_t) -> Result<Yuv<'_>, FramesError> {
    let bad = || FramesError::malformed("libvpx lent a frame with no usable geometry");
    let wide = (img.fmt as u32) & sys::VPX_IMG_FMT_HIGHBITDEPTH != 0;
    let bits = if wide { img.bit_depth.clamp(9, 16) } else { 8 };
    let (w, h) = (img.d_w as usize, img.d_h as usize);
    let (xs, ys) = (img.x_chroma_shift, img.y_chroma_shift);
    let (y_stride, u_stride, v_stride) = (img.stride[0], img.stride[1], img.stride[2]);
    if y_stride <= 0 || u_stride <= 0 || u_stride != v_stride || xs > 1 || ys > 1 {
        return Err(bad());
    }
    let (y_stride, uv_stride) = (y_stride as usize, u_stride as usize);
    let ch = (h + (1 << ys) - 1) >> ys;
    let plane = |p: *mut u8, stride: usize, rows: usize| -> Result<&[u8], FramesError> {
        if p.is_null() || rows == 0 {
            return Err(bad());
        }
        let len = stride.checked_mul(rows).ok_or_else(bad)?;
        // SAFETY: libvpx allocates each plane as `stride` bytes for each of its rows.
        Ok(unsafe { std::slice::from_raw_parts(p, len) })
    };
    Ok(Yuv {
        width: w,
        height: h,
        y: plane(img.planes[0], y_stride, h)?,
        u: plane(img.planes[1], uv_stride, ch)?,
        v: plane(img.planes[2], uv_stride, ch)?,
        y_stride,
        uv_stride,
        x_shift: xs,
        y_shift: ys,
        bits,
    })
}

impl Drop for Decoder {
    fn drop(&mut self) {
        if self.open {
            // SAFETY: the context was initialised by `new` and is destroyed once.
            unsafe {
                sys::vpx_codec_destroy(&mut self.ctx);
            }
        }
    }
}
