//! What `vllm-srun serve` runs (the keys guard, the router and the worker on one port) against
//! the worker alone: a compressed or multipart body reads the same through every face, and is
//! answered exactly as the worker alone answers it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::Write;
use std::path::PathBuf;
use std::sync::OnceLock;

use common::*;
use serde_json::{json, Value};

const SIGNALS: &str = "sparrow-nano";

/// A body as sent: what it is, its bytes, its headers.
type Sent<'a> = (&'a str, Vec<u8>, Vec<(&'a str, &'a str)>);

fn with_detector(mut o: vllm_srun::ServeOptions) -> vllm_srun::ServeOptions {
    o.detectors = vec![(test_model(), "nanodet-coco".into())];
    o
}

/// The worker alone.
fn worker() -> &'static TestServer {
    static S: OnceLock<TestServer> = OnceLock::new();
    S.get_or_init(|| {
        let mut o = deciding(&test_model());
        o.models.push(SIGNALS.into());
        start(with_detector(o))
    })
}

/// The composition `serve` runs: keys service, router (publishing every model through `*`)
/// and worker on one port, its keys on a SQLite file of its own.
fn composed() -> &'static TestServer {
    static S: OnceLock<TestServer> = OnceLock::new();
    S.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("vsr-serve-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let small = test_model();
        let mut o = deciding(&small);
        o.router = Some(in_process_router(&small, SIGNALS));
        o.models.push(SIGNALS.into());
        o.service = Some(vllm_srun::ServiceOptions::in_dir(&dir).expect("service"));
        start(with_detector(o))
    })
}

/// Debian's darknet photograph of a dog and a bicycle (`VLLM_SRUN_TEST_PHOTOS` overrides).
fn dog() -> Vec<u8> {
    let dir = std::env::var_os("VLLM_SRUN_TEST_PHOTOS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/share/darknet/data"));
    std::fs::read(dir.join("dog.jpg")).expect("dog.jpg (Debian's darknet package holds it)")
}

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

/// The router sees its worker's health every two seconds: wait until it routes.
async fn routed(s: &TestServer) {
    for _ in 0..300 {
        let (status, v) = get(&s.url("/api/status")).await;
        if status == 200 && v["status"] == "ready" {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    panic!("the router never became ready");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compressed_and_multipart_bodies_read_through_serve_as_through_the_worker() {
    let (alone, serve) = (worker(), composed());
    routed(serve).await;
    let text = json!({"model": test_model(), "state": TICKET, "questions": {
        "refund": {"type": "noul", "instructions": "Is the customer asking for money back?"},
        "team": {"type": "choice", "instructions": "Which team should handle this?",
                 "criteria": {"Billing": "Payments and refunds", "Technical": "Bugs"}}}});
    let plain = text.to_string().into_bytes();
    let photo = json!({"model": test_model(), "state": "<photo> Someone's pet.",
        "assets": {"<photo>": {"type": "image", "part": "photo"}},
        "questions": {"where": {"type": "box", "instructions": "the dog"}}});
    let (form, form_type) = multipart(&photo, &[("photo", &dog())]);
    let bodies: [Sent; 4] = [
        ("json", plain.clone(), vec![]),
        ("gzip", gzip(&plain), vec![("content-encoding", "gzip")]),
        (
            "zstd",
            zstd::encode_all(&plain[..], 3).unwrap(),
            vec![("content-encoding", "zstd")],
        ),
        (
            "multipart",
            form,
            vec![("content-type", form_type.as_str())],
        ),
    ];
    for path in ["/v1/systemone", "/v1/decisions"] {
        for (what, body, headers) in &bodies {
            let a = post_raw(&alone.url(path), body.clone(), headers).await;
            let s = post_raw(&serve.url(path), body.clone(), headers).await;
            assert_eq!(a.0, 200, "{path} {what}, the worker alone: {}", a.2);
            assert_eq!(s.0, 200, "{path} {what}, serve: {}", s.2);
            assert!(a.2["answers"].is_object(), "{path} {what}: {}", a.2);
            assert_eq!(s.2["answers"], a.2["answers"], "{path} {what}");
        }
    }
    // The photo reached the detector through every face: the dog's box, on its left half.
    let (_, _, v) = post_raw(
        &serve.url("/v1/decisions"),
        bodies[3].1.clone(),
        &bodies[3].2,
    )
    .await;
    let right = v["answers"]["where"]["box"]["right"].as_f64();
    assert!(right.is_some_and(|r| r < 0.6), "{v}");
    // A body in a coding the layer does not read, or one that does not decode, is refused by
    // serve with the worker's words.
    for (enc, status, reason) in [
        ("br", 415, "encoding_unsupported"),
        ("gzip", 400, "encoding_malformed"),
    ] {
        for path in ["/v1/systemone", "/v1/decisions"] {
            let h = [("content-encoding", enc)];
            let a = post_raw(&alone.url(path), plain.clone(), &h).await;
            let s = post_raw(&serve.url(path), plain.clone(), &h).await;
            assert_eq!(
                (a.0, s.0),
                (status, status),
                "{path} {enc}: {} / {}",
                a.2,
                s.2
            );
            let word = |v: &Value| {
                v["reason"]
                    .as_str()
                    .or(v["error"]["reason"].as_str())
                    .map(str::to_string)
            };
            assert_eq!(word(&a.2).as_deref(), Some(reason), "{path} {enc}: {}", a.2);
            assert_eq!(word(&s.2).as_deref(), Some(reason), "{path} {enc}: {}", s.2);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_model_listing_of_serve_carries_the_workers_cards() {
    let (alone, serve) = (worker(), composed());
    routed(serve).await;
    let (status, w) = get(&alone.url("/v1/models")).await;
    assert_eq!(status, 200, "{w}");
    let (status, v) = get(&serve.url("/v1/models")).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["object"], "list");
    assert_eq!(v["api_version"], w["api_version"], "{v}");
    // The System One SDKs' shape, as the worker lists it, but for the body limits: behind
    // the router what arrives is what the public face lets through.
    let public = v["limits"]["max_request_bytes"].as_u64().unwrap();
    assert!(public > 0 && public < 96 << 20, "{v}");
    let mut cards = v["models"].clone();
    let own = w["models"].as_array().unwrap();
    for (m, own) in cards.as_array_mut().unwrap().iter_mut().zip(own) {
        let (limits, alone) = (&mut m["card"]["limits"], &own["card"]["limits"]);
        assert_eq!(limits["max_request_bytes"], public, "{limits}");
        let carried = public - protocol::limits::MULTIPART_HEADROOM_BYTES as u64;
        for k in ["max_image_bytes", "max_video_bytes"] {
            let want = alone[k].as_u64().unwrap().min(carried);
            assert_eq!(limits[k], want, "{k}");
        }
        for k in ["max_request_bytes", "max_image_bytes", "max_video_bytes"] {
            limits[k] = alone[k].clone();
        }
    }
    assert_eq!(cards, w["models"]);
    // The keys service's /api/info and the published listing say the same.
    let (status, info) = get(&serve.url("/api/info")).await;
    assert_eq!(status, 200, "{info}");
    let mine = info["models"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["id"] == test_model() || m["name"] == test_model())
        .unwrap_or_else(|| panic!("{info}"));
    assert_eq!(mine["limits"]["max_request_bytes"], public, "{mine}");
    let (_, published) = get(&serve.url("/v1/systemone/models")).await;
    for m in published["models"].as_array().unwrap() {
        assert_eq!(m["card"]["limits"]["max_request_bytes"], public, "{m}");
    }
    let ids: Vec<&str> = v["data"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["id"].as_str())
        .collect();
    let model = test_model();
    for id in ["vllm-sr/auto", model.as_str(), SIGNALS] {
        assert!(ids.contains(&id), "{id} is not listed: {ids:?}");
    }
    // Each served model's OpenAI entry carries its card and features.
    let entry = v["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["id"] == SIGNALS)
        .unwrap();
    assert_eq!(entry["card"]["id"], SIGNALS, "{entry}");
    assert!(entry["card"]["question_types"].is_array(), "{entry}");
    assert!(entry["features"].is_array(), "{entry}");
    assert!(entry["surfaces"].is_array(), "{entry}");
    // The largest body is what the public face reads.
    assert!(
        v["limits"]["max_request_bytes"].as_u64().unwrap() > 0,
        "{v}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deadline_is_answered_as_each_published_path_answers_it() {
    let serve = composed();
    routed(serve).await;
    let body = json!({"model": test_model(), "state": TICKET, "options": {"deadline_ms": 1},
        "questions": {"refund": {"type": "noul", "instructions": "Is the customer asking for money back?"}}});
    // System One fails the request on a failed question: the published 504 `timeout`.
    let (status, _, v) = post(&serve.url("/v1/systemone"), &body).await;
    assert_eq!(status, 504, "{v}");
    assert_eq!(v["error"]["code"], "timeout", "{v}");
    // /v1/decisions answers the question in place, as the worker alone does, whichever of a
    // queued or a started forward the deadline found.
    let (status, _, v) = post(&serve.url("/v1/decisions"), &body).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["answers"]["refund"]["error"], "deadline_exceeded", "{v}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_hosted_images_member_reaches_the_worker_as_an_asset() {
    use base64::Engine as _;
    let serve = composed();
    routed(serve).await;
    let url = format!(
        "data:image/jpeg;base64,{}",
        base64::engine::general_purpose::STANDARD.encode(dog())
    );
    // system-duo-api.txt's box example: the state's only image in `images`.
    let body = json!({"model": test_model(), "state": "Someone's pet.", "images": [url],
        "questions": {"where": {"type": "box", "instructions": "the dog"}}});
    let (status, _, v) = post(&serve.url("/v1/systemone"), &body).await;
    assert_eq!(status, 200, "{v}");
    let right = v["answers"]["where"]["box"]["right"].as_f64();
    assert!(right.is_some_and(|r| r < 0.6), "{v}");
    // The same picture by asset, straight to the worker, answers the same.
    let b64 = url.split_once(',').unwrap().1;
    let direct = json!({"model": test_model(), "state": "<p>Someone's pet.",
        "assets": {"<p>": {"type": "image", "data_base64": b64}},
        "questions": {"where": {"type": "box", "instructions": "the dog"}}});
    let (status, _, w) = post(&worker().url("/v1/systemone"), &direct).await;
    assert_eq!(status, 200, "{w}");
    assert_eq!(v["answers"], w["answers"]);
    // A link is never fetched: the worker's word for it.
    let link = json!({"model": test_model(), "state": "x", "images": ["https://example.com/a.png"],
        "questions": {"q": {"type": "noul", "instructions": "Is it a dog?"}}});
    let (status, _, v) = post(&serve.url("/v1/systemone"), &link).await;
    assert_eq!(status, 400, "{v}");
    assert_eq!(v["reason"], "encoding_malformed", "{v}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_image_in_one_entry_of_states_fails_only_that_entry() {
    let serve = composed();
    routed(serve).await;
    let q =
        json!({"q": {"type": "noul", "instructions": "Is the customer asking for money back?"}});
    let body = json!({"model": test_model(), "states": {
        "bad": {"state": "x", "images": ["https://example.com/a.png"], "questions": q},
        "good": {"state": TICKET, "questions": q}}});
    let (status, _, v) = post(&serve.url("/v1/decisions"), &body).await;
    assert_eq!(status, 200, "{v}");
    let bad = &v["states"]["bad"]["answers"]["q"];
    assert_eq!(bad["error"], "invalid_input", "{v}");
    assert_eq!(bad["reason"], "input_malformed", "{v}");
    assert!(
        v["states"]["good"]["answers"]["q"]["noul"].is_number(),
        "{v}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_that_is_not_json_is_refused_by_serve_as_by_the_worker() {
    let (alone, serve) = (worker(), composed());
    routed(serve).await;
    for body in [&b"{\"model\": \"x\", \"state\""[..], b"[1, 2]"] {
        for path in ["/v1/systemone", "/v1/decisions"] {
            let a = post_raw(&alone.url(path), body.to_vec(), &[]).await;
            let s = post_raw(&serve.url(path), body.to_vec(), &[]).await;
            assert_eq!(s.0, a.0, "{path}: {} / {}", a.2, s.2);
            let reason = |v: &Value| {
                v["reason"]
                    .as_str()
                    .or(v["error"]["reason"].as_str())
                    .map(str::to_string)
            };
            assert_eq!(
                reason(&s.2),
                Some("body_malformed".into()),
                "{path}: {}",
                s.2
            );
            assert_eq!(reason(&a.2), reason(&s.2), "{path}");
            // vllm-sr/5.0's validation shape: a detail list.
            if path == "/v1/systemone" {
                assert_eq!(s.0, 422, "{}", s.2);
                assert_eq!(s.2["detail"][0]["loc"], json!(["body"]), "{}", s.2);
            }
        }
    }
}

/// One byte limit for the public face: the keys guard reads what the router's listener
/// reads, so a body over it is the published 413 naming the public limit on every path,
/// whether it arrives plain or inflates past it from gzip.
#[tokio::test]
async fn the_public_body_limit_is_one_number_for_guard_and_router() {
    let serve = composed();
    routed(serve).await;
    let limit = protocol::limits::PUBLIC_REQUEST_BYTES;
    let big = vec![b' '; limit + 1];
    for path in ["/v1/systemone", "/v1/decisions"] {
        let (status, _, v) = post_raw(&serve.url(path), big.clone(), &[]).await;
        assert_eq!(status, 413, "{path}: {v}");
        let code = v["code"].as_str().or(v["error"]["code"].as_str());
        assert_eq!(code, Some("request_too_large"), "{path}: {v}");
        let said = v["limit"].as_u64().or(v["error"]["limit"].as_u64());
        assert_eq!(said, Some(limit as u64), "{path}: {v}");
    }
    let (status, _, v) = post_raw(
        &serve.url("/v1/systemone"),
        gzip(&big),
        &[("content-encoding", "gzip")],
    )
    .await;
    assert_eq!(
        (status, v["limit"].as_u64()),
        (413, Some(limit as u64)),
        "{v}"
    );
}

/// What the public face advertises arrives: a video of exactly the card's `max_video_bytes`
/// (a short clip padded by a `free` box to that size), sent in a multipart body as the
/// System One SDKs send media, is answered, not refused with 413 by any layer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_video_at_the_advertised_maximum_is_answered_through_serve() {
    let serve = composed();
    routed(serve).await;
    let (_, listing) = get(&serve.url("/v1/models")).await;
    let card = listing["models"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == test_model())
        .map(|m| m["card"]["limits"].clone())
        .unwrap();
    let max = card["max_video_bytes"].as_u64().unwrap() as usize;
    let mut clip = grey_clip(4, 64, 64, 2);
    let pad = max - clip.len();
    clip.extend((pad as u32).to_be_bytes());
    clip.extend(b"free");
    clip.resize(max, 0);
    let request = json!({"model": test_model(), "state": "<clip> A camera's clip.",
        "assets": {"<clip>": {"type": "video", "part": "clip"}},
        "questions": {"dog": {"type": "noul", "instructions": "Does a dog appear in the video?"}}});
    let (form, form_type) = multipart(&request, &[("clip", &clip)]);
    assert!(form.len() <= listing["limits"]["max_request_bytes"].as_u64().unwrap() as usize);
    let (status, _, v) = post_raw(
        &serve.url("/v1/systemone"),
        form,
        &[("content-type", form_type.as_str())],
    )
    .await;
    assert_eq!(status, 200, "{v}");
    let p = v["answers"]["dog"]["noul"].as_f64().unwrap();
    assert!(p < 0.5, "a grey clip shows no dog: {v}");
}
