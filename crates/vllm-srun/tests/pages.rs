//! The pages and the status data in one `serve` process: worker, router (publishing every
//! model of the process through `*`), the keys service and the pages, as `vllm-srun serve`
//! runs them. The browser test of the pages themselves is `tests/pages_check.py`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use serde_json::{json, Value};

const SIGNALS: &str = "sparrow-nano";

fn serve(pages: bool, dir: &std::path::Path) -> TestServer {
    let small = test_model();
    let mut o = options();
    o.router = Some(in_process_router(&small, SIGNALS));
    o.models = vec![small, SIGNALS.into()];
    o.service = Some(vllm_srun::ServiceOptions::in_dir(dir).expect("service"));
    o.pages = pages;
    start(o)
}

async fn get_json(url: &str) -> Value {
    client()
        .get(url)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

async fn status(s: &TestServer) -> Value {
    // The router sees the worker's health every two seconds.
    for _ in 0..100 {
        let v = get_json(&s.url("/api/status")).await;
        if v["status"] == "ready" {
            return v;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    panic!("the status never became ready");
}

fn model<'a>(v: &'a Value, id: &str) -> &'a Value {
    v["models"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["id"] == id)
        .unwrap_or_else(|| panic!("{id} is not listed: {v}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_lists_every_model_of_the_process_with_its_server_times() {
    let dir = std::env::temp_dir().join(format!("vsr-pages-{}", std::process::id()));
    let s = serve(true, &dir);
    let v = status(&s).await;
    for id in [test_model().as_str(), SIGNALS, "vllm-sr/auto"] {
        assert_eq!(model(&v, id)["state"], "ready", "{id}: {v}");
    }
    assert_eq!(model(&v, "vllm-sr/auto")["system"], "two");
    assert_eq!(model(&v, SIGNALS)["requests"], 0);
    // A System One request counts under the model's own name (not `*`).
    let r = client()
        .post(s.url("/v1/systemone"))
        .json(&json!({"model": SIGNALS, "state": "What is 2 + 2?",
               "questions": {"q": {"type": "noul", "instructions": "Is this math?"}}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let v = status(&s).await;
    let m = model(&v, SIGNALS);
    assert_eq!(
        (m["requests"].as_u64(), m["answered"].as_u64()),
        (Some(1), Some(1)),
        "{m}"
    );
    assert!(m["latency_ms"]["p50"].is_u64(), "{m}");
    // /api/info names the process's models too.
    let info = get_json(&s.url("/api/info")).await;
    let ids: Vec<&str> = info["models"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["id"].as_str())
        .collect();
    assert!(ids.contains(&SIGNALS) && !ids.contains(&"*"), "{ids:?}");
    // Each model's limits are its worker's (from its card) with the service's own, and a
    // request one past a published limit is refused at that limit.
    for id in [SIGNALS, test_model().as_str()] {
        let l = &model(&info, id)["limits"];
        for k in [
            "max_state_chars",
            "max_options",
            "max_states",
            "max_questions",
            "max_images",
            "max_image_bytes",
            "max_videos",
            "max_video_bytes",
            "max_video_seconds",
            "max_video_frames",
            "max_request_tokens",
            "timeout_seconds",
        ] {
            assert!(l[k].is_u64(), "{id}: {k} missing from {l}");
        }
        assert_eq!(l["box"], false, "{l}");
    }
    let limits = &model(&info, SIGNALS)["limits"];
    let max_states = limits["max_states"].as_u64().unwrap();
    let states: serde_json::Map<String, Value> = (0..=max_states)
        .map(|i| {
            (
                format!("s{i}"),
                json!({"state": "x", "questions": {"q": {"type": "noul", "instructions": "?"}}}),
            )
        })
        .collect();
    let (st, _, e) = post(
        &s.url("/v1/decisions"),
        &json!({"model": SIGNALS, "states": states}),
    )
    .await;
    assert_eq!(st, 400, "{e}");
    assert_eq!(e["error"]["reason"], "too_many_states", "{e}");
    assert_eq!(e["error"]["limit"], max_states);
    // /pt/api/info: what vllm-sr/auto routes to, with System Two's budgets per key.
    let two = get_json(&s.url("/pt/api/info")).await;
    assert!(two["models"][0]["routes_to"].is_array(), "{two}");
    assert!(two["rate_limits"]["per_key"].is_object(), "{two}");
    // The pages, with their policy.
    for path in ["/", "/keys", "/status", "/assets/pow.js"] {
        let r = client().get(s.url(path)).send().await.unwrap();
        assert_eq!(r.status(), 200, "{path}");
        assert!(
            r.headers().contains_key("content-security-policy"),
            "{path}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_pages_leaves_the_apis_alone() {
    let dir = std::env::temp_dir().join(format!("vsr-nopages-{}", std::process::id()));
    let s = serve(false, &dir);
    let r = client().get(s.url("/")).send().await.unwrap();
    assert_eq!(r.status(), 404);
    let r = client().get(s.url("/api/info")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let _ = std::fs::remove_dir_all(&dir);
}
