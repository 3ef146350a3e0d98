//! Untrusted media as the worker reads it: a container sniffed and read for its facts, its
//! frames decoded at a few moments, a picture decoded under a pixel limit. No input may
//! panic, hang or allocate past what it holds.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = media::sniff(data);
    if media::video_facts(data).is_ok() {
        let _ = media::decode_frames(data, &[0.0, 0.5, 1.0], 64 * 64);
    }
    let _ = media::decode_picture(data, 256 * 256);
});
