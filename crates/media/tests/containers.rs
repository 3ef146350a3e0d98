//! Real containers written by ffmpeg (`tests/fixtures`, a few KB each): a 2-second 64x48 clip
//! at 10 frames a second as MP4, fragmented MP4, QuickTime, WebM and Matroska, and a 301-second
//! 16x16 clip at one frame a second.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use media::{video_facts, Container};

fn fixture(name: &str) -> Vec<u8> {
    std::fs::read(format!(
        "{}/tests/fixtures/{name}",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap()
}

#[test]
fn every_container_gives_its_duration_frames_and_size() {
    for (name, container) in [
        ("clip.mp4", Container::Mp4),
        ("frag.mp4", Container::Mp4),
        ("clip.mov", Container::Mp4),
        ("clip.webm", Container::Matroska),
        ("clip.mkv", Container::Matroska),
    ] {
        let f = video_facts(&fixture(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(f.container, container, "{name}");
        assert_eq!(f.frames, 20, "{name}");
        assert!((f.seconds - 2.0).abs() < 0.05, "{name}: {}", f.seconds);
        assert_eq!((f.width, f.height), (64, 48), "{name}");
    }
    let long = video_facts(&fixture("long.mp4")).unwrap();
    assert_eq!(long.frames, 301);
    assert!((long.seconds - 301.0).abs() < 0.5, "{}", long.seconds);
}

#[test]
fn every_cut_of_a_real_container_reads_or_is_refused() {
    for name in ["clip.mp4", "clip.webm"] {
        let b = fixture(name);
        for n in (0..b.len()).step_by(7) {
            let _ = video_facts(&b[..n]);
        }
        // A flipped byte anywhere: no panic either.
        for i in (0..b.len()).step_by(13) {
            let mut c = b.clone();
            c[i] ^= 0xFF;
            let _ = video_facts(&c);
        }
    }
}
