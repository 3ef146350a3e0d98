//! Untrusted media as the worker reads it: a container sniffed and read for its facts, its
//! frames decoded at a few moments, a picture decoded under a pixel limit. No input may
//! panic out of `media`, hang or allocate past what it holds.
//!
//! The container crates still panic on some tables (the `mp4` crate unwraps a sample's time);
//! `media` catches a reader's panic and reports the file unreadable, which is the invariant
//! under test. libFuzzer's hook would abort at the panic itself, before that catch, so this
//! target replaces it with a silent one: a panic that escapes `media` still aborts the run
//! (libfuzzer-sys aborts when its own catch sees one).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    static QUIET: std::sync::Once = std::sync::Once::new();
    QUIET.call_once(|| std::panic::set_hook(Box::new(|_| {})));
    let _ = media::sniff(data);
    if media::video_facts(data).is_ok() {
        let _ = media::decode_frames(data, &[0.0, 0.5, 1.0], 64 * 64);
    }
    let _ = media::decode_picture(data, 256 * 256);
});
