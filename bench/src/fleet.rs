//! Arm 8: fleet mode (issue 19) — replicas of `plinth serve` on one real
//! PostgreSQL (`plinth::testing::TestPostgres`, Debian's server on
//! 127.0.0.1).
//!
//! - throughput of the same echo call against one replica, then against two,
//!   with the same load generator (two `wrk` processes of half the
//!   connections each, both at one replica, then one at each);
//! - how long a deploy made on replica A takes to be listed by replica B,
//!   and a key revoked on A to be refused by B: from A's answer to the first
//!   poll of B (every millisecond) that sees it.

use crate::Opts;
use crate::arms::{CONNECTIONS, echo_body, load_duration, load_row, tool_id};
use crate::measure::{Load, Report, Server, Summary, client, fmt, unthrottle, wrk};
use plinth::testing::TestPostgres;
use serde_json::Value;
use std::time::{Duration, Instant};

const SECRETS_KEY: &str = "AQIDBAUGBwgJCgsMDQ4PEBESExQVFhcYGRobHB0eHyA=";

fn replica(opts: &Opts, database: &str, data: &tempfile::TempDir, args: &[&str]) -> anyhow::Result<Server> {
    let env = [("PLINTH_DATABASE_URL", database), ("PLINTH_SECRETS_KEY", SECRETS_KEY)];
    Server::plinth_with_env(opts, data.path(), args, &env)
}

/// Polls `check` every millisecond until it holds (30 s at most); returns
/// how long that took.
async fn until<F, Fut>(mut check: F) -> anyhow::Result<Duration>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<bool>>,
{
    let started = Instant::now();
    while !check().await? {
        anyhow::ensure!(started.elapsed() < Duration::from_secs(30), "not within 30 s");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    Ok(started.elapsed())
}

/// Two `wrk` runs at once, half the connections each: the sum of their
/// rates, the worse of their percentiles.
fn two_loads(urls: [&str; 2], body: &str, duration: Duration) -> anyhow::Result<Load> {
    let loads: Vec<anyhow::Result<Load>> = std::thread::scope(|s| {
        let runs: Vec<_> = urls.iter().map(|url| s.spawn(|| wrk(url, Some(body), duration, CONNECTIONS / 2))).collect();
        runs.into_iter().map(|r| r.join().unwrap_or_else(|_| Err(anyhow::anyhow!("wrk thread panicked")))).collect()
    });
    let mut total = Load { rps: 0.0, latency: Summary { p50: Duration::ZERO, p99: Duration::ZERO }, errors: 0 };
    for load in loads {
        let load = load?;
        total.rps += load.rps;
        total.latency.p50 = total.latency.p50.max(load.latency.p50);
        total.latency.p99 = total.latency.p99.max(load.latency.p99);
        total.errors += load.errors;
    }
    Ok(total)
}

pub async fn fleet(opts: &Opts, report: &mut Report) -> anyhow::Result<()> {
    let postgres = tokio::task::block_in_place(TestPostgres::start);
    let database = postgres.fresh_database();
    let plugins = tempfile::tempdir()?;
    std::fs::copy(opts.plugins.join("echo.wasm"), plugins.path().join("echo.wasm"))?;
    let plugins_arg = plugins.path().to_string_lossy().to_string();
    let (data_a, data_b) = (tempfile::tempdir()?, tempfile::tempdir()?);
    let a = replica(opts, &database, &data_a, &["--plugins", &plugins_arg])?;
    unthrottle(&a.base).await?;
    let echo = tool_id(&a.base, "echo").await?;
    let body = echo_body("hello, tools");
    let duration = load_duration(opts);

    // The same load generator for both: two `wrk` processes, half the
    // connections each — both at A, then one at A and one at B.
    let url_a = format!("{}/tools/{echo}:invoke", a.base);
    crate::measure::warm_up(&url_a, Some(&body), &[], opts.smoke)?;
    let one = two_loads([&url_a, &url_a], &body, duration)?;
    load_row(report, "8 fleet: 1 replica, echo (2 wrk × 4 connections)", &one);

    let b = replica(opts, &database, &data_b, &["--plugins", &plugins_arg])?;
    until(|| async { Ok(client().get(format!("{}/ready", b.base)).send().await?.status() == 200) }).await?;
    let url_b = format!("{}/tools/{echo}:invoke", b.base);
    crate::measure::warm_up(&url_b, Some(&body), &[], opts.smoke)?;
    let two = two_loads([&url_a, &url_b], &body, duration)?;
    load_row(report, "8 fleet: 2 replicas, echo (one wrk × 4 connections each)", &two);
    report.row(
        "8 fleet",
        "2 replicas ÷ 1 replica, requests/s (two cores: both replicas and both wrk share them)",
        format!("{:.2}×", two.rps / one.rps),
        "",
        None,
    );

    // Deploy propagation: A answers 201, B lists the version.
    let rounds = if opts.smoke { 2 } else { 20 };
    let bytes = std::fs::read(opts.plugins.join("echo.wasm"))?;
    let http = client();
    let mut deploys = Vec::new();
    for round in 0..rounds {
        let mut labelled = bytes.clone();
        // A custom section: new bytes, the same (compatible) signature.
        let label = format!("fleet-bench-{round}");
        labelled.extend_from_slice(&[0, (1 + 11 + label.len()) as u8, 11]);
        labelled.extend_from_slice(b"build-label");
        labelled.extend_from_slice(label.as_bytes());
        let response = http
            .post(format!("{}/admin/tools", a.base))
            .header("content-type", "application/wasm")
            .body(labelled)
            .send()
            .await?;
        anyhow::ensure!(response.status() == 201, "deploy answered {}", response.status());
        let deployed: Value = response.json().await?;
        let version = deployed["version"].as_u64().unwrap_or(0);
        let url = format!("{}/tools/{echo}/versions/{version}", b.base);
        deploys.push(until(|| async { Ok(http.get(&url).send().await?.status() == 200) }).await?);
    }
    let deploys = Summary::of(&mut deploys);
    report.row(
        "8 fleet",
        &format!("deploy on A → listed on B, p50 · p99 ({rounds} deploys)"),
        format!("{} · {}", fmt(deploys.p50), fmt(deploys.p99)),
        "",
        None,
    );

    // Revocation propagation: A answers the DELETE, B refuses the key.
    let mut revocations = Vec::new();
    for _ in 0..rounds {
        let created: Value = http
            .post(format!("{}/admin/keys", a.base))
            .json(&serde_json::json!({ "tenant": "default", "role": "consumer" }))
            .send()
            .await?
            .json()
            .await?;
        let (id, key) = (created["id"].as_str().unwrap_or_default(), created["key"].as_str().unwrap_or_default());
        let plain = reqwest::Client::new();
        let status_on_b = || async {
            Ok::<_, anyhow::Error>(plain.get(format!("{}/tools", b.base)).bearer_auth(key).send().await?.status())
        };
        until(|| async { Ok(status_on_b().await? == 200) }).await?;
        let response = http.delete(format!("{}/admin/keys/{id}", a.base)).send().await?;
        anyhow::ensure!(response.status().is_success(), "revocation answered {}", response.status());
        revocations.push(until(|| async { Ok(status_on_b().await? == 401) }).await?);
    }
    let revocations = Summary::of(&mut revocations);
    report.row(
        "8 fleet",
        &format!("key revoked on A → refused on B, p50 · p99 ({rounds} keys)"),
        format!("{} · {}", fmt(revocations.p50), fmt(revocations.p99)),
        "",
        None,
    );
    drop((a, b));
    Ok(())
}
