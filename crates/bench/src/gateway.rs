//! SIE through the gateway and NATS JetStream against the same requests sent straight to the
//! worker, in one process (worker, gateway and client; `nats-server` beside it).

use std::time::{Duration, Instant};

use serde_json::json;

use crate::common::*;

fn nats_server() -> anyhow::Result<std::path::PathBuf> {
    ["/usr/sbin/nats-server", "/usr/bin/nats-server"]
        .iter()
        .map(std::path::PathBuf::from)
        .find(|p| p.is_file())
        .ok_or_else(|| {
            anyhow::anyhow!("nats-server is not installed (Debian: apt install nats-server)")
        })
}

/// `requests` encode requests of one short text: one at a time (latency), then eight at a
/// time (throughput), straight to the worker over HTTP and through the gateway. The per-item
/// overhead is the difference of the medians.
pub async fn gateway(model: &str, requests: usize) -> anyhow::Result<()> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())?
        .port();
    let dir = std::env::temp_dir().join(format!("vsr-bench-nats-{}", std::process::id()));
    let mut nats = std::process::Command::new(nats_server()?)
        .args(["-js", "-a", "127.0.0.1", "-p", &port.to_string(), "-sd"])
        .arg(&dir)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()?;
    let url = format!("nats://127.0.0.1:{port}");
    let result = measure(model, requests, &url).await;
    let _ = nats.kill();
    let _ = nats.wait();
    let _ = std::fs::remove_dir_all(&dir);
    result
}

async fn measure(model: &str, requests: usize, nats: &str) -> anyhow::Result<()> {
    let o = vllm_srun::ServeOptions {
        models: vec![model.to_string()],
        port: 0,
        nats: Some(vllm_srun::NatsOptions {
            url: nats.to_string(),
            worker: queue::WorkerConfig::default(),
        }),
        ..vllm_srun::ServeOptions::default()
    };
    let (registry, worker) = serve_in_process(o).await?;
    wait(|| registry.encoder(None)).await?;
    let config = server::GatewayConfig {
        max_request_bytes: 16 << 20,
        timeout: Duration::from_secs(60),
    };
    let gw = vllm_srun::bind_gateway(nats, config, "127.0.0.1", 0).await?;
    let gateway = format!("http://{}", gw.addr);
    tokio::spawn(gw.run());
    let client = reqwest::Client::new();
    let body = |i: usize| json!({"items": [{"id": i.to_string(), "text": format!("parcel {i} arrived damaged, please refund")}]});
    let path = format!("/v1/encode/{model}");
    // The worker makes the stream once its model has loaded.
    let started = Instant::now();
    while time_request(&client, &format!("{gateway}{path}"), &body(0))
        .await
        .is_err()
    {
        if started.elapsed() > Duration::from_secs(60) {
            return Err(anyhow::anyhow!(
                "no worker took work through the gateway within 60 s"
            ));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    println!("SIE encode of one short text ({model}), {requests} requests per row:");
    println!(
        "{:<34} {:>10} {:>10} {:>14}",
        "path", "p50 ms", "p99 ms", "8 at once /s"
    );
    let mut p50 = Vec::new();
    for (name, base) in [
        ("straight to the worker (HTTP)", &worker),
        ("gateway + JetStream + worker", &gateway),
        ("straight to the worker, again", &worker),
    ] {
        let url = format!("{base}{path}");
        let mut times = Vec::with_capacity(requests);
        for i in 0..requests {
            times.push(time_request(&client, &url, &body(i)).await?);
        }
        let t = Instant::now();
        let mut tasks = Vec::new();
        for k in 0..8 {
            let (client, url) = (client.clone(), url.clone());
            let share: Vec<usize> = (0..requests).filter(|i| i % 8 == k).collect();
            tasks.push(tokio::spawn(async move {
                for i in share {
                    time_request(&client, &url, &body(i)).await?;
                }
                Ok::<(), anyhow::Error>(())
            }));
        }
        for task in tasks {
            task.await??;
        }
        let rate = requests as f64 / t.elapsed().as_secs_f64();
        let (m, p99) = (median(times.clone()), pct(times, 0.99));
        println!(
            "{name:<34} {:>10.2} {:>10.2} {rate:>14.0}",
            m.as_secs_f64() * 1e3,
            p99.as_secs_f64() * 1e3
        );
        p50.push(m);
    }
    let direct = (p50[0] + p50[2]) / 2;
    println!(
        "per-item overhead of the gateway and JetStream at p50: {:.2} ms",
        (p50[1].as_secs_f64() - direct.as_secs_f64()) * 1e3
    );
    Ok(())
}
