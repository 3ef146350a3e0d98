//! Assets, images, multipart bodies and `over`, against the real server (text-only model).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use base64::Engine as _;
use common::{multipart, post, post_raw, shared, TICKET};
use serde_json::{json, Value};

/// A PNG header (signature, IHDR, optional acTL, IDAT): enough for the runtime, which reads
/// headers and never decodes pixels.
fn png(w: u32, h: u32, animated: bool) -> Vec<u8> {
    let mut b = b"\x89PNG\r\n\x1a\n".to_vec();
    let chunk = |b: &mut Vec<u8>, kind: &[u8], data: &[u8]| {
        b.extend((data.len() as u32).to_be_bytes());
        b.extend(kind);
        b.extend(data);
        b.extend([0; 4]);
    };
    let mut ihdr = w.to_be_bytes().to_vec();
    ihdr.extend(h.to_be_bytes());
    ihdr.extend([8, 6, 0, 0, 0]);
    chunk(&mut b, b"IHDR", &ihdr);
    if animated {
        chunk(&mut b, b"acTL", &[0, 0, 0, 2, 0, 0, 0, 0]);
    }
    chunk(&mut b, b"IDAT", &[0; 16]);
    chunk(&mut b, b"IEND", &[]);
    b
}

fn b64(b: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(b)
}

fn noul(instructions: &str) -> Value {
    json!({"type": "noul", "instructions": instructions})
}

fn with_asset(asset: Value) -> Value {
    json!({
        "state": {"receipt": "<receipt>", "note": "Uploaded by the customer."},
        "assets": {"<receipt>": asset},
        "questions": {"complete": noul("Does <receipt> show a total?")}
    })
}

async fn refused(path: &str, body: &Value) -> Value {
    let s = shared();
    let (status, h, v) = post(&s.url(path), body).await;
    assert_eq!(status, 400, "{v}");
    assert!(h.contains_key("server-timing"));
    v
}

#[tokio::test]
async fn an_image_in_the_state_of_a_text_model_is_refused_after_its_checks() {
    let ok = json!({"type": "image", "data_base64": b64(&png(64, 48, false))});
    let v = refused("/v1/systemone", &with_asset(ok.clone())).await;
    assert_eq!(v["code"], "invalid_request");
    assert_eq!(v["reason"], "modality_unsupported");
    let v = refused("/v1/decisions", &with_asset(ok)).await;
    assert_eq!(v["error"]["reason"], "modality_unsupported");
    let video = json!({"type": "video", "data_base64": b64(CLIP_MP4)});
    let v = refused("/v1/decisions", &with_asset(video)).await;
    assert_eq!(v["error"]["reason"], "modality_unsupported");
}

/// Real containers written by ffmpeg (the media crate's fixtures): 2 s at 10 frames a second,
/// and 301 s at one frame a second.
const CLIP_MP4: &[u8] = include_bytes!("../../media/tests/fixtures/clip.mp4");
const CLIP_WEBM: &[u8] = include_bytes!("../../media/tests/fixtures/clip.webm");
const LONG_MP4: &[u8] = include_bytes!("../../media/tests/fixtures/long.mp4");

#[tokio::test]
async fn videos_are_read_from_their_bytes_before_the_model_refuses_them() {
    // `videos` data URLs are the internal form's (/v1/decisions; vllm-sr/5.0 takes video
    // assets instead); both are read the same way.
    let url = |kind: &str, b: &[u8]| format!("data:video/{kind};base64,{}", b64(b));
    let ask = |videos: Value| {
        json!({"state": "What happens in the clip?", "videos": videos,
               "questions": {"moving": noul("Does something move across the scene?")}})
    };
    let asset = |b: &[u8]| with_asset(json!({"type": "video", "data_base64": b64(b)}));
    // Readable and within the limits: the text model then refuses the modality, on every
    // container, whatever type the data URL claims.
    for v in [
        url("mp4", CLIP_MP4),
        url("webm", CLIP_WEBM),
        url("mp4", CLIP_WEBM),
    ] {
        let e = refused("/v1/decisions", &ask(json!([v]))).await;
        assert_eq!(e["error"]["reason"], "modality_unsupported", "{e}");
    }
    let e = refused("/v1/systemone", &asset(CLIP_WEBM)).await;
    assert_eq!(e["reason"], "modality_unsupported", "{e}");
    // Longer than 300 s by its container: video_too_long with the limit.
    let e = refused("/v1/decisions", &ask(json!([url("mp4", LONG_MP4)]))).await;
    assert_eq!(
        (e["error"]["code"].as_str(), e["error"]["reason"].as_str()),
        (Some("invalid_request"), Some("video_too_long")),
        "{e}"
    );
    assert_eq!(e["error"]["limit"], 300);
    let e = refused("/v1/systemone", &asset(LONG_MP4)).await;
    assert_eq!(
        (
            e["code"].as_str(),
            e["reason"].as_str(),
            e["limit"].as_u64()
        ),
        (Some("invalid_request"), Some("video_too_long"), Some(300)),
        "{e}"
    );
    // Bytes that are no container, or a container cut short: invalid_media.
    for bad in [b"not a video".as_slice(), &CLIP_MP4[..CLIP_MP4.len() / 3]] {
        let e = refused("/v1/decisions", &ask(json!([url("mp4", bad)]))).await;
        assert_eq!(e["error"]["reason"], "invalid_media", "{e}");
        let e = refused("/v1/systemone", &asset(bad)).await;
        assert_eq!(e["reason"], "invalid_media", "{e}");
    }
    // A videos entry that is no video data URL.
    let e = refused(
        "/v1/decisions",
        &ask(json!([format!("data:image/png;base64,{}", b64(CLIP_MP4))])),
    )
    .await;
    assert_eq!(e["error"]["reason"], "encoding_malformed", "{e}");
}

#[tokio::test]
async fn every_image_refusal_has_its_reason_and_limit() {
    let cases: Vec<(Value, &str, Option<u64>)> = vec![
        (
            json!({"type": "image", "data_base64": "%%% not base64"}),
            "encoding_malformed",
            None,
        ),
        (
            json!({"type": "image", "data_base64": b64(&png(5000, 4000, false))}),
            "image_too_large",
            Some(16_000_000),
        ),
        (
            json!({"type": "image", "data_base64": b64(&png(8, 8, true))}),
            "image_animated",
            None,
        ),
        (
            json!({"type": "image", "data_base64": b64(&png(4000, 10, false))}),
            "image_aspect_ratio",
            Some(200),
        ),
        (
            json!({"type": "image", "data_base64": b64(b"GIF89a\x01\x00\x01\x00\x00\x00\x00")}),
            "image_format_unsupported",
            None,
        ),
        (
            json!({"type": "image", "data_base64": b64(b"\x89PNG\r\n\x1a\n\x00")}),
            "image_malformed",
            None,
        ),
        (
            json!({"type": "image", "part": "nope"}),
            "asset_part_missing",
            None,
        ),
    ];
    for (asset, reason, limit) in cases {
        let v = refused("/v1/systemone", &with_asset(asset)).await;
        assert_eq!(v["code"], "invalid_request", "{reason}: {v}");
        assert_eq!(v["reason"], reason, "{v}");
        assert_eq!(v["limit"].as_u64(), limit, "{reason}");
        assert!(v["message"].as_str().unwrap().contains("<receipt>"), "{v}");
    }
}

#[tokio::test]
async fn references_must_be_used_and_sized() {
    let img = json!({"type": "image", "data_base64": b64(&png(4, 4, false))});
    let body = json!({"state": "no placeholder here", "assets": {"<x>": img},
        "questions": {"q": noul("?")}});
    let v = refused("/v1/systemone", &body).await;
    assert_eq!(v["reason"], "asset_unreferenced");
    let long = "r".repeat(1025);
    let body = json!({"state": long, "assets": {long.clone(): img}, "questions": {"q": noul("?")}});
    let v = refused("/v1/systemone", &body).await;
    assert_eq!(v["reason"], "asset_reference_invalid");
    assert_eq!(v["limit"], 1024);
    let body = json!({"state": "", "assets": {"": img}, "questions": {"q": noul("?")}});
    let v = refused("/v1/systemone", &body).await;
    assert_eq!(v["reason"], "asset_reference_invalid");
    let mut assets = serde_json::Map::new();
    let mut state = String::new();
    for i in 0..70 {
        let r = format!("{i:04}{}", "r".repeat(1000));
        state.push_str(&r);
        assets.insert(r, img.clone());
    }
    let body = json!({"state": state, "assets": assets, "questions": {"q": noul("?")}});
    let v = refused("/v1/systemone", &body).await;
    assert_eq!(v["reason"], "asset_reference_invalid");
    assert_eq!(v["limit"], 65536);
}

#[tokio::test]
async fn images_in_questions_fail_those_questions_only() {
    let s = shared();
    let img = json!({"type": "image", "data_base64": b64(&png(4, 4, false))});
    let body = json!({"state": TICKET, "assets": {"<logo>": img},
        "questions": {"ok": noul("Is a refund asked for?"), "pic": noul("Is <logo> our logo?"),
            "opt": {"type": "choice", "criteria": {"a": "like <logo>", "b": "other"}}}});
    let (status, _, v) = post(&s.url("/v1/decisions"), &body).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["answers"]["ok"]["type"], "noul");
    for id in ["pic", "opt"] {
        assert_eq!(v["answers"][id]["error"], "invalid_question");
        assert_eq!(v["answers"][id]["reason"], "question_images_unsupported");
    }
    let (status, _, v) = post(&s.url("/v1/systemone"), &body).await;
    assert_eq!(status, 422, "{v}");
    assert_eq!(v["reason"], "question_images_unsupported");
}

#[tokio::test]
async fn legacy_images_are_data_urls_checked_before_the_modality() {
    let body = |img: &str| json!({"state": "x", "images": [img], "questions": {"q": noul("?")}});
    let v = refused("/v1/decisions", &body("https://example.com/a.png")).await;
    assert_eq!(v["error"]["reason"], "encoding_malformed");
    let url = format!("data:image/png;base64,{}", b64(&png(4, 4, false)));
    let v = refused("/v1/decisions", &body(&url)).await;
    assert_eq!(v["error"]["reason"], "modality_unsupported");
}

async fn send_multipart(body: (Vec<u8>, String)) -> (u16, Value) {
    let s = shared();
    let (status, _, v) = post_raw(
        &s.url("/v1/systemone"),
        body.0,
        &[("content-type", body.1.as_str())],
    )
    .await;
    (status, v)
}

#[tokio::test]
async fn multipart_parts_are_claimed_by_exactly_one_asset() {
    let img = png(16, 16, false);
    let req = with_asset(json!({"type": "image", "part": "scan"}));
    // Read, checked, then refused for the modality: the part reached the asset.
    let (status, v) = send_multipart(multipart(&req, &[("scan", &img)])).await;
    assert_eq!(
        (status, v["reason"].as_str()),
        (400, Some("modality_unsupported")),
        "{v}"
    );
    let (_, v) = send_multipart(multipart(&req, &[("scan", &png(9, 9, true))])).await;
    assert_eq!(v["reason"], "image_animated");
    let (_, v) = send_multipart(multipart(&req, &[("scan", &img), ("extra", &img)])).await;
    assert_eq!(v["reason"], "part_unclaimed");
    let twice = json!({"state": "<a> <b>", "questions": {"q": noul("?")},
        "assets": {"<a>": {"type": "image", "part": "scan"}, "<b>": {"type": "image", "part": "scan"}}});
    let (_, v) = send_multipart(multipart(&twice, &[("scan", &img)])).await;
    assert_eq!(v["reason"], "part_claimed_twice");
    // The first part must be the request.
    let (mut body, ct) = multipart(&req, &[("scan", &img)]);
    let s = String::from_utf8_lossy(&body).replacen("name=\"request\"", "name=\"other\"", 1);
    body = s.into_bytes();
    let (status, v) = send_multipart((body, ct)).await;
    assert_eq!(
        (status, v["reason"].as_str()),
        (400, Some("multipart_malformed")),
        "{v}"
    );
    // A text-only request in a multipart body is answered.
    let plain = json!({"state": TICKET, "questions": {"q": noul("Refund?")}});
    let (status, v) = send_multipart(multipart(&plain, &[])).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["answers"]["q"]["type"], "noul");
}

#[tokio::test]
async fn over_reads_the_named_state_keys_in_state_order() {
    let s = shared();
    let q = noul("Is the customer asking for a refund?");
    let state = json!({"ticket": TICKET, "agent": "We will look into it.", "tag": "billing"});
    let mut over = q.clone();
    over["over"] = json!(["tag", "ticket"]);
    let mut all = q.clone();
    all["over"] = json!(["agent", "tag", "ticket"]);
    let mut missing = q.clone();
    missing["over"] = json!("nope");
    let body = json!({"state": state, "questions": {"whole": q, "over": over, "all": all, "missing": missing}});
    let (status, _, v) = post(&s.url("/v1/decisions"), &body).await;
    assert_eq!(status, 200, "{v}");
    let a = &v["answers"];
    assert_eq!(
        a["all"], a["whole"],
        "over naming every key reads the whole state"
    );
    assert_eq!(a["missing"]["reason"], "question_malformed");
    assert!(a["missing"]["message"].as_str().unwrap().contains("nope"));
    // The same as a request whose state holds only those keys, in state order.
    let alone = json!({"state": {"ticket": TICKET, "tag": "billing"}, "questions": {"q": noul("Is the customer asking for a refund?")}});
    let (_, _, w) = post(&s.url("/v1/decisions"), &alone).await;
    assert_eq!(a["over"], w["answers"]["q"]);
    assert_ne!(a["over"], a["whole"]);
    let (_, _, w) = post(&s.url("/v1/decisions"), &json!({"state": "text", "questions": {"q": {"type": "noul", "instructions": "?", "over": "a"}}})).await;
    assert_eq!(w["error"]["reason"], "question_malformed", "{w}");
}
