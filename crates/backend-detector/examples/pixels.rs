//! Writes each picture as this runtime decodes it (`media::decode_picture`) to a binary PPM,
//! so that the reference run (`tools/nanodet_reference.js`) reads the very pixels the tests
//! feed the detector: the comparison is then of the networks, not of two JPEG decoders.
//!
//!     cargo run -p backend-detector --example pixels -- OUT_DIR PICTURE...

use std::path::Path;

use anyhow::{anyhow, Context};

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (out, pictures) = args
        .split_first()
        .context("usage: pixels OUT_DIR PICTURE...")?;
    std::fs::create_dir_all(out).with_context(|| out.clone())?;
    for p in pictures {
        let bytes = std::fs::read(p).with_context(|| p.clone())?;
        let pic = media::decode_picture(&bytes, 1 << 28).with_context(|| p.clone())?;
        let stem = Path::new(p)
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .ok_or_else(|| anyhow!("{p}: no file name"))?;
        let mut ppm = format!("P6\n{} {}\n255\n", pic.width, pic.height).into_bytes();
        ppm.extend_from_slice(&pic.rgb);
        let to = Path::new(out).join(format!("{stem}.ppm"));
        std::fs::write(&to, ppm).with_context(|| to.display().to_string())?;
        println!("{}", to.display());
    }
    Ok(())
}
