//! The keys service in a real `vllm-srun router` process, on its SQLite file: a key a client
//! received survives `kill -9` in the middle of a burst of creations.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};

use serde_json::{json, Value};

const CONFIG: &str = r#"
deployments:
  - {name: d, workers: ["http://127.0.0.1:9"], models: [m]}
backends:
  - {name: b, url: "http://127.0.0.1:9", models: [llm]}
decisions:
  - {name: all, modelRefs: [{model: llm}]}
default_decision: all
"#;

async fn create(client: &reqwest::Client, base: &str) -> Option<String> {
    let c: Value = client
        .post(format!("{base}/api/keys/challenge"))
        .send()
        .await
        .ok()?
        .json()
        .await
        .ok()?;
    let ch = c["challenge"].as_str()?.to_string();
    let d = c["difficulty"].as_u64()? as u32;
    let nonce = (0u64..).find(|n| service::keys::solves(&ch, &n.to_string(), d))?;
    let r = client
        .post(format!("{base}/api/keys"))
        .json(&json!({"challenge": ch, "nonce": nonce.to_string(), "accept_terms": true}))
        .send()
        .await
        .ok()?;
    if r.status() != 201 {
        return None;
    }
    let k: Value = r.json().await.ok()?;
    k["api_key"].as_str().map(str::to_string)
}

/// The router process, killed when the test ends however it ends.
struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_during_a_burst_of_key_creations_loses_no_received_key() {
    let dir = std::env::temp_dir().join(format!("vsr-keys-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("router.yaml"), CONFIG).unwrap();
    std::fs::write(
        dir.join("service.yaml"),
        "difficulty: 4\nkeys_per_hour: 100000\nkeys_per_day: 100000\nchallenges_per_minute: 100000\n",
    )
    .unwrap();
    let mut child = Killed(
        Command::new(env!("CARGO_BIN_EXE_vllm-srun"))
            .args(["router", "--port", "0", "--config"])
            .arg(dir.join("router.yaml"))
            .arg("--service-config")
            .arg(dir.join("service.yaml"))
            .arg("--data-dir")
            .arg(&dir)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let mut line = String::new();
    BufReader::new(child.0.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let base = line
        .trim()
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("{line}"))
        .to_string();
    let client = reqwest::Client::new();
    let received = Arc::new(Mutex::new(Vec::<String>::new()));
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let (client, base, received) = (client.clone(), base.clone(), received.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..25 {
                match create(&client, &base).await {
                    Some(k) => received.lock().unwrap().push(k),
                    None => break,
                }
            }
        }));
    }
    // Kill the process in the middle of the burst.
    while received.lock().unwrap().len() < 80 {
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    }
    // SIGKILL: no chance to flush or finish a write.
    let _ = child.0.kill();
    let _ = child.0.wait();
    for t in tasks {
        let _ = t.await;
    }
    let keys = received.lock().unwrap().clone();
    assert!(keys.len() >= 80 && keys.len() < 200, "{}", keys.len());
    let store = service::Store::open(&service::Store::sqlite_url(&dir))
        .await
        .unwrap();
    for k in &keys {
        let secret = service::keys::Secret::parse(k).unwrap();
        let row = store.key_by_hash(&secret.hash()).await.unwrap();
        assert_eq!(
            row.map(|r| r.status),
            Some("active".to_string()),
            "lost a received key"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
