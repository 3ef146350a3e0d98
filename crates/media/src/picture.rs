//! Pictures decoded to RGB pixels: PNG, JPEG and WebP, read by the `image` crate from their
//! bytes (never from a declared type), orientation as sent (EXIF orientation is not applied).
//!
//! A picture's header is read before its pixels: one over `max_pixels` is refused without
//! decoding, so a small file that claims a huge picture costs nothing.

use std::io::Cursor;

use image::{ImageFormat, ImageReader, Limits};

/// A decoded picture: `rgb` holds `width × height` RGB triples, row by row.
#[derive(Debug, Clone, PartialEq)]
pub struct Picture {
    pub width: usize,
    pub height: usize,
    pub rgb: Vec<u8>,
}

/// Why a picture's bytes do not decode.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum PictureError {
    #[error("not a picture format this runtime reads (PNG, JPEG or WebP)")]
    UnknownFormat,
    #[error("the picture is {width}×{height}, over the {max} pixels this runtime decodes")]
    TooLarge { width: u32, height: u32, max: u64 },
    #[error("the {format} picture does not decode: {why}")]
    Unreadable { format: &'static str, why: String },
}

/// Decodes PNG, JPEG or WebP bytes to RGB.
pub fn decode_picture(bytes: &[u8], max_pixels: u64) -> Result<Picture, PictureError> {
    let reader = ImageReader::new(Cursor::new(bytes))
        .with_guessed_format()
        .map_err(|_| PictureError::UnknownFormat)?;
    let (kind, format) = match reader.format() {
        Some(k @ ImageFormat::Png) => (k, "PNG"),
        Some(k @ ImageFormat::Jpeg) => (k, "JPEG"),
        Some(k @ ImageFormat::WebP) => (k, "WebP"),
        _ => return Err(PictureError::UnknownFormat),
    };
    let unreadable = |why: String| PictureError::Unreadable { format, why };
    let (width, height) = ImageReader::with_format(Cursor::new(bytes), kind)
        .into_dimensions()
        .map_err(|e| unreadable(e.to_string()))?;
    if u64::from(width) * u64::from(height) > max_pixels {
        return Err(PictureError::TooLarge {
            width,
            height,
            max: max_pixels,
        });
    }
    let mut reader = reader;
    let mut limits = Limits::default();
    limits.max_image_width = Some(width);
    limits.max_image_height = Some(height);
    limits.max_alloc = Some(max_pixels.saturating_mul(16).max(1 << 20));
    reader.limits(limits);
    let img = reader.decode().map_err(|e| unreadable(e.to_string()))?;
    let rgb = img.to_rgb8();
    Ok(Picture {
        width: rgb.width() as usize,
        height: rgb.height() as usize,
        rgb: rgb.into_raw(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn png(width: u32, height: u32) -> Vec<u8> {
        let img = image::RgbImage::from_fn(width, height, |x, y| image::Rgb([x as u8, y as u8, 7]));
        let mut out = Cursor::new(Vec::new());
        img.write_to(&mut out, ImageFormat::Png).ok();
        out.into_inner()
    }

    #[test]
    fn a_png_decodes_to_its_pixels() {
        let p = decode_picture(&png(3, 2), 100).ok();
        let p = p.filter(|p| p.width == 3 && p.height == 2);
        assert_eq!(p.map(|p| p.rgb[3..6].to_vec()), Some(vec![1, 0, 7]));
    }

    #[test]
    fn bad_bytes_and_oversized_pictures_are_refused() {
        assert_eq!(
            decode_picture(b"hello", 100),
            Err(PictureError::UnknownFormat)
        );
        assert!(matches!(
            decode_picture(&png(20, 20), 100),
            Err(PictureError::TooLarge {
                width: 20,
                height: 20,
                max: 100
            })
        ));
        let mut cut = png(20, 20);
        cut.truncate(cut.len() / 2);
        assert!(matches!(
            decode_picture(&cut, 1000),
            Err(PictureError::Unreadable { format: "PNG", .. })
        ));
    }
}
