//! Each catalogue detector's forward on one photograph (resized to 416×416 for NanoDet,
//! 512×512 for CenterNet), ours against the reference runtime: TensorFlow.js running the
//! same graph model in Node.js (`tools/nanodet_reference.js --time`,
//! `tools/centernet_reference.js --time`, on its WebAssembly backend: XNNPACK; its plain
//! JavaScript backend is forty times slower and no fair reference), on the very pixels ours
//! reads.

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use backend_detector::{CenterNet, NanoDet, Network, Rgb};

use crate::common::median;

/// `runs` forwards of ours (after three warm-up runs) per detector; the reference's median
/// of 20.
pub async fn detector(runs: usize) -> anyhow::Result<()> {
    for (id, script) in [
        ("nanodet-coco", "nanodet_reference.js"),
        ("centernet-coco", "centernet_reference.js"),
    ] {
        println!("{id}:");
        one(id, script, runs)?;
    }
    Ok(())
}

fn one(id: &str, script: &str, runs: usize) -> anyhow::Result<()> {
    let resolved = hub::resolve(id, true)?;
    let dir = resolved
        .dir
        .ok_or_else(|| anyhow::anyhow!("the detector has no package directory"))?;
    let photos = std::env::var_os("VLLM_SRUN_TEST_PHOTOS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/share/darknet/data"));
    let photo = photos.join("dog.jpg");
    let bytes = std::fs::read(&photo).map_err(|e| anyhow::anyhow!("{}: {e}", photo.display()))?;
    let pic = media::decode_picture(&bytes, 1 << 28)?;
    let model: Box<dyn Network> = match id {
        "centernet-coco" => Box::new(CenterNet::load(&dir)?),
        _ => Box::new(NanoDet::load(&dir)?),
    };
    let rgb = Rgb {
        width: pic.width,
        height: pic.height,
        pixels: &pic.rgb,
    };
    let input = model.input(rgb)?;
    let mut forward = Vec::new();
    let mut whole = Vec::new();
    for r in 0..runs + 3 {
        let t = Instant::now();
        model.forward(input.clone())?;
        let f = t.elapsed();
        let t = Instant::now();
        let found = model.detect(rgb, 0.3, 0.5)?;
        let w = t.elapsed();
        if r == 0 {
            let names: Vec<String> = found
                .iter()
                .map(|d| format!("{} {:.2}", d.label(), d.score))
                .collect();
            println!("{}: {}", photo.display(), names.join(", "));
        }
        if r >= 3 {
            forward.push(f);
            whole.push(w);
        }
    }
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let ours = ms(median(forward));
    println!(
        "ours (backend-detector, {} threads): forward p50 {ours:.1} ms; decode + resize + forward + boxes p50 {:.1} ms",
        crate::common::raw_threads(),
        ms(median(whole))
    );

    // The reference reads the same pixels, from a PPM.
    let ppm = std::env::temp_dir().join(format!("vsr-bench-{}.ppm", std::process::id()));
    let mut body = format!("P6\n{} {}\n255\n", pic.width, pic.height).into_bytes();
    body.extend_from_slice(&pic.rgb);
    std::fs::write(&ppm, body)?;
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tools")
        .join(script);
    for backend in ["wasm"] {
        let out = Command::new("node")
            .arg(&script)
            .arg("--time")
            .arg(&dir)
            .arg(&ppm)
            .env("TFJS_BACKEND", backend)
            .output();
        let line = match out {
            Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout).trim().to_string(),
            Ok(o) => {
                println!(
                    "reference (TensorFlow.js {backend}): not run ({}); install it as \
                     {} says and set NODE_PATH",
                    String::from_utf8_lossy(&o.stderr)
                        .lines()
                        .last()
                        .unwrap_or("no output"),
                    script.display()
                );
                continue;
            }
            Err(e) => {
                println!("reference: node not run: {e}");
                break;
            }
        };
        let v: serde_json::Value =
            serde_json::from_str(&line).map_err(|e| anyhow::anyhow!("{line}: {e}"))?;
        let theirs = v["median_ms"].as_f64().unwrap_or(f64::NAN);
        println!(
            "reference (TensorFlow.js {}): forward p50 {theirs:.1} ms; ours / reference {:.2} (target ≤ 1.5)",
            v["backend"].as_str().unwrap_or(backend),
            ours / theirs
        );
    }
    let _ = std::fs::remove_file(&ppm);
    Ok(())
}
