//! The keys service's own costs.

use std::time::{Duration, Instant};

/// Percentiles (p50, p99) of durations, microseconds.
pub(crate) fn micros(mut v: Vec<Duration>) -> (f64, f64) {
    v.sort_unstable();
    let at = |p: f64| {
        v.get(((p * v.len() as f64) as usize).min(v.len().saturating_sub(1)))
            .map_or(0.0, |d| d.as_secs_f64() * 1e6)
    };
    (at(0.5), at(0.99))
}

/// The keys service's own costs: verifying a key on SQLite among 10,000, and one admission
/// decision with 10,000 requests waiting (from 10,000 addresses, and from 100), including
/// a push-out when every waiting place is taken.
pub async fn service_costs() -> anyhow::Result<()> {
    use service::admission::{AdmissionConfig, Arrival, Queue, Ticket};
    use service::keys::Secret;
    use service::store::KeyRow;

    let dir = std::env::temp_dir().join(format!("vsr-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let store = service::Store::open(&service::Store::sqlite_url(&dir)).await?;
    let mut secrets = Vec::new();
    for i in 0..10_000 {
        let s = Secret::generate();
        let id = format!("key_{i}");
        store
            .insert_key(&KeyRow {
                id: id.clone(),
                hash: s.hash(),
                prefix: s.shown().to_string(),
                label: String::new(),
                budget: id,
                address: format!("10.0.{}.{}", i / 256, i % 256),
                status: "active".into(),
                created_at: 0,
            })
            .await?;
        secrets.push(s);
    }
    let mut times = Vec::new();
    let mut state = 7u64;
    let mut next = move || {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1);
        state >> 33
    };
    for _ in 0..5_000 {
        let s = &secrets[(next() % secrets.len() as u64) as usize];
        let t = Instant::now();
        let row = store.key_by_hash(&s.hash()).await?;
        times.push(t.elapsed());
        if row.is_none() {
            return Err(anyhow::anyhow!("a stored key was not found"));
        }
    }
    let (p50, p99) = micros(times);
    println!("key verification on SQLite (10,000 keys, hash + indexed lookup): p50 {p50:.1} µs, p99 {p99:.1} µs");
    let _ = std::fs::remove_dir_all(&dir);

    for addresses in [10_000u64, 100] {
        let cfg = AdmissionConfig {
            places: 64,
            waiting: 10_000,
            ..AdmissionConfig::default()
        };
        let mut q: Queue<()> = Queue::new(cfg);
        let ticket = |i: u64| Ticket {
            address: format!("a{}", i % addresses).into(),
            key: format!("k{i}").into(),
            tokens: 100,
        };
        let mut grants = std::collections::VecDeque::new();
        let mut i = 0u64;
        while q.waiting() < 10_000 {
            if let Arrival::Start(g) = q.arrive(ticket(i), (), 0) {
                grants.push_back(g);
            }
            i += 1;
        }
        // Steady state: one ends (its place goes to the next), one arrives and waits.
        let (mut release, mut arrive, mut push) = (Vec::new(), Vec::new(), Vec::new());
        for n in 0..20_000 {
            let g = grants
                .pop_front()
                .ok_or_else(|| anyhow::anyhow!("no grant"))?;
            let t = Instant::now();
            let started = q.release(&g, n);
            release.push(t.elapsed());
            grants.extend(started.into_iter().map(|(_, g)| g));
            let t = Instant::now();
            let a = q.arrive(ticket(i), (), n);
            let took = t.elapsed();
            i += 1;
            match a {
                Arrival::Start(g) => grants.push_back(g),
                Arrival::Wait {
                    pushed_out: None, ..
                } => arrive.push(took),
                _ => {}
            }
            // Full: a newcomer from a fresh address pushes out the busiest's newest.
            if n % 10 == 0 {
                let t = Instant::now();
                let a = q.arrive(
                    Ticket {
                        address: format!("fresh{n}").into(),
                        key: format!("fresh{n}").into(),
                        tokens: 100,
                    },
                    (),
                    n,
                );
                if let Arrival::Wait {
                    pushed_out: Some(_),
                    ..
                } = a
                {
                    push.push(t.elapsed());
                }
            }
        }
        let (r50, r99) = micros(release);
        let (a50, a99) = micros(arrive);
        let (p50, p99) = micros(push);
        println!(
            "admission, 10,000 waiting from {addresses} addresses: release + next start p50 {r50:.1} / p99 {r99:.1} µs; \
             arrival p50 {a50:.1} / p99 {a99:.1} µs; push-out p50 {p50:.1} / p99 {p99:.1} µs"
        );
    }
    Ok(())
}
