//! Prints what a detector finds in each picture, with the forward's time:
//!
//!     cargo run --release -p backend-detector --example detect -- (nanodet|centernet) MODEL_DIR PICTURE...

use std::path::Path;
use std::time::Instant;

use anyhow::{anyhow, Context};
use backend_detector::{CenterNet, NanoDet, Network, Rgb};

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [which, dir, pictures @ ..] = args.as_slice() else {
        return Err(anyhow!(
            "usage: detect (nanodet|centernet) MODEL_DIR PICTURE..."
        ));
    };
    let dir = Path::new(dir);
    let model: Box<dyn Network> = match which.as_str() {
        "nanodet" => Box::new(NanoDet::load(dir)?),
        "centernet" => Box::new(CenterNet::load(dir)?),
        other => return Err(anyhow!("{other}: nanodet or centernet")),
    };
    for p in pictures {
        let bytes = std::fs::read(p).with_context(|| p.clone())?;
        let pic = media::decode_picture(&bytes, 1 << 28).with_context(|| p.clone())?;
        let rgb = Rgb {
            width: pic.width,
            height: pic.height,
            pixels: &pic.rgb,
        };
        let t = Instant::now();
        let found = model.detect(rgb, 0.2, 0.5)?;
        println!("{p} ({:.1} ms)", t.elapsed().as_secs_f64() * 1e3);
        for d in found {
            let b = d.bbox.map(|v| (v * 1000.0).round() / 1000.0);
            println!("  {} {:.3} {b:?}", d.label(), d.score);
        }
    }
    Ok(())
}
