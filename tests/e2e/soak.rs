//! A bounded soak: several clients mix good and misbehaving calls for a
//! quarter of a minute. The host must answer every request, never fail a good
//! call, and keep its memory bounded.

use crate::support::{Server, fixture, invocation, plugins_dir};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

const SOAK: Duration = Duration::from_secs(15);
const CLIENTS: usize = 4;

/// Resident memory of a process, in KiB.
fn resident_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// One kind of call: tool, parameters, acceptable statuses. Good calls must
/// answer 200.
type Call = (&'static str, Vec<(&'static str, Value)>, &'static [u16]);

fn calls() -> Vec<Call> {
    let booking = vec![
        ("flight_number", json!("UA123")),
        ("date", json!("2026-12-24")),
        ("passengers", json!(2)),
        ("cabin_class", json!("ECONOMY")),
    ];
    vec![
        ("echo", vec![("text", json!("good"))], &[200]),
        ("book_flight", booking, &[200]),
        // Never 504: a spinner starved of CPU at nice 19 is still computing
        // at its deadline (`runtime::within`).
        ("spin_forever", vec![("note", json!("x"))], &[422, 503]),
        ("echo", vec![("text", json!("good again"))], &[200]),
        ("memory_bomb", vec![("note", json!("x"))], &[422, 503]),
        ("panic_at_once", vec![("note", json!("x"))], &[422, 503]),
        ("huge_output", vec![("megabytes", json!(4))], &[422, 503]),
        ("deep_recursion", vec![("note", json!("x"))], &[422, 503]),
    ]
}

#[tokio::test(flavor = "multi_thread")]
async fn good_calls_never_fail_while_bad_ones_run() {
    let dir = tempfile::tempdir().unwrap();
    for name in ["echo", "book_flight"] {
        std::fs::copy(plugins_dir().join(format!("{name}.wasm")), dir.path().join(format!("{name}.wasm"))).unwrap();
    }
    for name in ["spin_forever", "memory_bomb", "panic_at_once", "huge_output", "deep_recursion"] {
        std::fs::write(dir.path().join(format!("{name}.wasm")), fixture(&format!("{name}.wasm"))).unwrap();
    }
    let server = std::sync::Arc::new(Server::start_in(
        tempfile::tempdir().unwrap(),
        &["--plugins", dir.path().to_str().unwrap(), "--deadline-ms", "400", "--max-memory-mib", "32"],
    ));
    let mut ids = std::collections::HashMap::new();
    for (tool, _, _) in calls() {
        ids.insert(tool, server.tool_id(tool).await);
    }
    for _ in 0..50 {
        assert_eq!(server.invoke("echo", &[("text", json!("warm"))]).await.0, 200);
    }
    let rss_start = resident_kib(server.pid());

    let started = Instant::now();
    let clients: Vec<_> = (0..CLIENTS)
        .map(|client| {
            let (server, ids) = (server.clone(), ids.clone());
            tokio::spawn(async move {
                let plan = calls();
                let (mut answered, mut good_ok) = (0usize, 0usize);
                let mut i = client;
                while started.elapsed() < SOAK {
                    let (tool, params, accepted) = &plan[i % plan.len()];
                    i += 1;
                    let path = format!("/tools/{}:invoke", ids[tool]);
                    let response =
                        server.request(reqwest::Method::POST, &path).json(&invocation(tool, params)).send().await;
                    let status = response.unwrap_or_else(|e| panic!("{tool}: no answer: {e}")).status().as_u16();
                    assert!(accepted.contains(&status), "{tool} answered {status}");
                    answered += 1;
                    good_ok += usize::from(accepted == &[200]);
                }
                (answered, good_ok)
            })
        })
        .collect();
    let (mut answered, mut good) = (0, 0);
    for client in clients {
        let (a, g) = client.await.unwrap();
        answered += a;
        good += g;
    }

    assert_eq!(server.get("/health").await.0, 200, "the host is alive");
    let rss_end = resident_kib(server.pid());
    eprintln!("soak: {answered} requests, {good} good ones all answered 200; resident {rss_start} KiB → {rss_end} KiB");
    assert!(answered > 40, "only {answered} requests in {SOAK:?}");
    assert!(rss_end < rss_start * 3, "resident memory grew from {rss_start} KiB to {rss_end} KiB");
}
