//! Real containers written by ffmpeg (`tests/fixtures`, a few KB each): a 2-second 64x48 clip
//! at 10 frames a second as MP4, fragmented MP4, QuickTime, WebM and Matroska, and a 301-second
//! 16x16 clip at one frame a second; `fade.mp4`, High-profile H.264 with B frames; the same
//! 64x48 test pattern in VP9 (8- and 10-bit), AV1 (4:2:0, and 4:4:4 10-bit) and H.264 in
//! Matroska (`tools/video_fixtures.sh`).

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

/// A clip encoded here (H.264 in MP4) decodes back, frame by frame at the asked moments, to
/// the pictures it was made of (up to the codec's loss).
#[test]
fn h264_frames_decode_at_their_moments() {
    // Ten frames at 5 fps, each one flat grey level brighter than the last.
    let frames: Vec<media::Picture> = (0..10u8)
        .map(|i| media::Picture {
            width: 64,
            height: 48,
            rgb: vec![20 + i * 20; 64 * 48 * 3],
        })
        .collect();
    let clip = media::encode_mp4(&frames, 5).unwrap();
    let facts = media::video_facts(&clip).unwrap();
    assert_eq!((facts.frames, facts.width, facts.height), (10, 64, 48));
    assert!((facts.seconds - 2.0).abs() < 0.01, "{facts:?}");
    let moments = [0.0, 0.5, 1.05, 1.99, 5.0];
    let got = media::decode_frames(&clip, &moments, 1 << 20).unwrap();
    let level =
        |p: &media::Picture| p.rgb.iter().map(|&b| f64::from(b)).sum::<f64>() / p.rgb.len() as f64;
    // Frame k shows from k / 5 s: the moments show frames 0, 2, 5, 9 and (past the end) 9.
    for (p, k) in got.iter().zip([0u8, 2, 5, 9, 9]) {
        assert_eq!((p.width, p.height), (64, 48));
        let want = f64::from(20 + k * 20);
        assert!(
            (level(p) - want).abs() < 6.0,
            "frame {k}: level {}",
            level(p)
        );
    }
    assert!(matches!(
        media::decode_frames(&clip, &[0.0], 100),
        Err(media::FramesError::TooLarge(3072, 100))
    ));
    assert!(matches!(
        media::decode_frames(&[0x1A, 0x45, 0xDF, 0xA3, 0, 0, 0, 0], &[0.0], 1 << 20),
        Err(media::FramesError::Malformed(_))
    ));
    assert!(matches!(
        media::decode_frames(b"not a video at all", &[0.0], 1 << 20),
        Err(media::FramesError::Unsupported(_))
    ));
}

/// Clips ffmpeg wrote decode at their moments, whatever their container and codec.
#[test]
fn ffmpeg_clips_decode_in_every_container() {
    for name in ["clip.mp4", "clip.mov", "clip.webm", "clip.mkv"] {
        let frames = media::decode_frames(&fixture(name), &[0.0, 1.0, 1.95], 1 << 20)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(frames.len(), 3);
        for f in &frames {
            assert_eq!(
                (f.width, f.height, f.rgb.len()),
                (64, 48, 64 * 48 * 3),
                "{name}"
            );
        }
    }
}

/// Mean absolute difference of two pictures' bytes.
fn distance(a: &media::Picture, b: &media::Picture) -> f64 {
    assert_eq!((a.width, a.height), (b.width, b.height));
    let sum: f64 = a
        .rgb
        .iter()
        .zip(&b.rgb)
        .map(|(x, y)| f64::from(x.abs_diff(*y)))
        .sum();
    sum / a.rgb.len() as f64
}

/// The same test pattern in every codec gives the same picture at each moment (up to each
/// codec's loss), far nearer to it than to the picture of another moment: frames are decoded,
/// converted alike and placed at their times whatever the codec, bit depth or subsampling.
/// (The 4:4:4 clip keeps the pattern's colour edges that 4:2:0 blurs: about 7 from the
/// reference at every moment; its first frame is 0.35 from ffmpeg's own RGB.)
#[test]
fn every_codec_shows_the_same_picture_at_each_moment() {
    let moments = [0.0, 0.55, 1.0, 1.95];
    let reference = media::decode_frames(&fixture("clip-h264.mkv"), &moments, 1 << 20).unwrap();
    for name in [
        "clip-vp9.webm",
        "clip-vp9-10bit.webm",
        "clip-av1.webm",
        "clip-av1-444-10bit.mkv",
        "clip.webm",
    ] {
        let got = media::decode_frames(&fixture(name), &moments, 1 << 20)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(got.len(), moments.len(), "{name}");
        for (i, p) in got.iter().enumerate() {
            let same = distance(p, &reference[i]);
            let other = distance(p, &reference[(i + 1) % moments.len()]);
            eprintln!(
                "{name} at {}: {same:.1} (another moment {other:.1})",
                moments[i]
            );
            assert!(
                same < 8.0 && other > 1.5 * same,
                "{name} at {}: {same} against {other}",
                moments[i]
            );
        }
    }
}

/// Frames larger than the caller allows are refused before anything is decoded, in every
/// container; a cut or damaged WebM stays an error, never a panic.
#[test]
fn webm_frames_respect_the_pixel_limit_and_damage() {
    for name in [
        "clip-vp9.webm",
        "clip-av1.webm",
        "clip.mkv",
        "clip-h264.mkv",
    ] {
        assert!(
            matches!(
                media::decode_frames(&fixture(name), &[0.0], 100),
                Err(media::FramesError::TooLarge(3072, 100))
            ),
            "{name}"
        );
        let b = fixture(name);
        for n in (0..b.len()).step_by(97) {
            let _ = media::decode_frames(&b[..n], &[0.0, 1.0], 1 << 20);
        }
        for i in (0..b.len()).step_by(89) {
            let mut c = b.clone();
            c[i] ^= 0x5A;
            let _ = media::decode_frames(&c, &[0.0, 1.0], 1 << 20);
        }
    }
}

/// A High-profile H.264 clip with B frames (ffmpeg: a white 96×64 picture fading in from
/// black over 2 s at 10 fps, `-bf 3`): pictures come out of the decoder in the order they are
/// shown, so the brightness at each moment rises frame after frame.
#[test]
fn b_frames_are_shown_in_order() {
    let clip = fixture("fade.mp4");
    let moments: Vec<f64> = (0..20).map(|k| f64::from(k) / 10.0 + 0.01).collect();
    let frames = media::decode_frames(&clip, &moments, 1 << 20).unwrap();
    let level =
        |p: &media::Picture| p.rgb.iter().map(|&b| f64::from(b)).sum::<f64>() / p.rgb.len() as f64;
    let levels: Vec<f64> = frames.iter().map(level).collect();
    assert!(levels[0] < 30.0 && levels[19] > 220.0, "{levels:?}");
    assert!(levels.windows(2).all(|w| w[1] > w[0]), "{levels:?}");
}
/// A file neither its facts nor its frames can be read from: unreadable as `container`.
fn unreadable(name: &str, container: &str) {
    let b = fixture(name);
    match media::video_facts(&b) {
        Err(media::MediaError::Unreadable { container: c, .. }) => assert_eq!(c, container),
        other => panic!("{name}: {other:?}"),
    }
    assert!(
        matches!(
            media::decode_frames(&b, &[0.0], 1 << 20),
            Err(media::FramesError::Malformed(_))
        ),
        "{name}"
    );
}

/// `zero-box.mp4` and `cut-zero-box.mp4` (found by `fuzz/`): MP4s whose `dinf` or `trak`
/// holds a box declaring 0 bytes, the second in a `moov` cut short. The `mp4` crate would
/// read that header forever; they are refused as unreadable instead.
#[test]
fn a_box_smaller_than_its_header_is_refused_not_read_forever() {
    unreadable("zero-box.mp4", "mp4");
    unreadable("cut-zero-box.mp4", "mp4");
}

/// `split-header.mp4` (found by `fuzz/`): a `meta` box whose last 7 bytes are too few for a
/// box; the `mp4` crate reads a header across them into the next box and allocates the 3 GB
/// that header declares. Refused before it is read.
#[test]
fn a_header_running_past_its_box_is_refused() {
    unreadable("split-header.mp4", "mp4");
    match media::video_facts(&fixture("split-header.mp4")) {
        Err(media::MediaError::Unreadable { why, .. }) => {
            assert!(why.contains("too few for a box"), "{why}")
        }
        other => panic!("{other:?}"),
    }
}

/// `empty-trun.mp4` (found by `fuzz/`): a fragment's track run claiming billions of samples
/// that carry no fields, which the `mp4` crate counts through one empty turn at a time (over
/// 10 s under the fuzzer). Refused before it is read.
#[test]
fn a_track_run_claiming_more_samples_than_bytes_is_refused() {
    unreadable("empty-trun.mp4", "mp4");
    match media::video_facts(&fixture("empty-trun.mp4")) {
        Err(media::MediaError::Unreadable { why, .. }) => {
            assert!(
                why.contains("more samples than the file has bytes"),
                "{why}"
            )
        }
        other => panic!("{other:?}"),
    }
}

/// `huge-sample.mp4` (found by `fuzz/`): a sample table declaring a 4 GiB sample in a 9 KB
/// file. The `mp4` crate allocates a sample at its declared size before reading it; the table
/// is refused before any sample is read.
#[test]
fn a_sample_table_claiming_more_than_the_file_is_refused_before_reading() {
    let b = fixture("huge-sample.mp4");
    match media::decode_frames(&b, &[0.0, 0.5, 1.0], 64 * 64) {
        Err(media::FramesError::Malformed(why)) => assert!(why.contains("claims more"), "{why}"),
        other => panic!("{other:?}"),
    }
}

/// `crc-loop.mkv` (found by `fuzz/`): a Matroska segment opening with a CRC-32 element, which
/// `matroska-demuxer` looks past by seeking back to the same place at every turn. Its reader
/// runs out of calls and the file is unreadable (before, this test never ended).
#[test]
fn a_container_reader_that_goes_round_is_stopped() {
    unreadable("crc-loop.mkv", "matroska");
}
