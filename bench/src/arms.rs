//! The benchmark arms. Each measures, adds rows to the report, and cleans up
//! after itself.

use crate::Opts;
use crate::measure::{
    Load, Report, Server, Summary, client, fmt, time_each, unthrottle, warm_up, wrk, wrk_mix, wrk_with_headers,
};
use plinth::invocation::input_value;
use plinth::manifest::ToolManifest;
use plinth::package::{self, ToolPackage};
use plinth::runtime::{CallSetup, Runtime, RuntimeConfig, SlotReset};
use plinth::signature::Signature;
use serde_json::{Value, json};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};
use wasmtime::component::{ComponentType, Lift, Lower, Val};

pub(crate) const CONNECTIONS: u32 = 8;

pub(crate) fn load_duration(opts: &Opts) -> Duration {
    if opts.smoke { Duration::from_secs(1) } else { Duration::from_secs(10) }
}

pub(crate) fn echo_body(text: &str) -> String {
    json!({"name": "echo", "input_parameters": [{"name": "text", "value": text}]}).to_string()
}

/// Rounds of the arms whose round-by-round ratios spread widest on a
/// shared machine: arm 1 (a door's ratio to A2T ranged 0.74–1.22 within one
/// run) and arm 5 (its first round, before the offenders rest long, is the
/// worst in every run). Arms 10 and 11 also take five; the others three.
const WIDE_ROUNDS: usize = 5;

/// The headers of an MCP 2026-07-28 `tools/call` of echo, besides the key and
/// `Content-Type`: the revision wants the method and the tool's name in
/// headers too (rmcp refuses a request without them, HTTP 400).
const MCP_ECHO_HEADERS: &[(&str, &str)] = &[
    ("Accept", "application/json, text/event-stream"),
    ("MCP-Protocol-Version", "2026-07-28"),
    ("Mcp-Method", "tools/call"),
    ("Mcp-Name", "echo"),
];

/// A JSON-RPC `tools/call` of echo, with the per-request `_meta` the
/// 2026-07-28 revision requires in place of a session.
fn mcp_echo_body(text: &str) -> String {
    json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "echo", "arguments": {"text": text},
        "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                  "io.modelcontextprotocol/clientCapabilities": {}}}})
    .to_string()
}

/// Sends one MCP echo call and checks that the tool answered `text`. An MCP
/// failure (a JSON-RPC error, or a result with `isError`) comes back as
/// HTTP 200, which wrk counts as a success, so the arm checks the answer by
/// hand.
async fn check_mcp_echo(url: &str, body: &str, text: &str) -> anyhow::Result<()> {
    let mut request = client().post(url).header("Content-Type", "application/json").body(body.to_string());
    for (name, value) in MCP_ECHO_HEADERS {
        request = request.header(*name, *value);
    }
    let response = request.send().await?;
    let status = response.status();
    let answer = response.text().await?;
    anyhow::ensure!(status.is_success(), "the MCP echo call answered {status}: {answer}");
    // A JSON answer, or an SSE stream whose answer is a `data:` line with the id.
    let message = std::iter::once(answer.as_str())
        .chain(answer.lines().filter_map(|line| line.strip_prefix("data:")))
        .filter_map(|json| serde_json::from_str::<Value>(json.trim()).ok())
        .find(|message| message.get("id").is_some())
        .ok_or_else(|| anyhow::anyhow!("the MCP echo call answered no JSON-RPC response: {answer}"))?;
    let result = &message["result"];
    anyhow::ensure!(
        result["isError"] != true && result["structuredContent"]["text"] == text,
        "the MCP echo call answered {message}"
    );
    Ok(())
}

pub(crate) async fn tool_id(base: &str, name: &str) -> anyhow::Result<String> {
    let page: Value = client().get(format!("{base}/tools?pageLimit=200")).send().await?.json().await?;
    page["items"]
        .as_array()
        .and_then(|items| items.iter().find(|t| t["name"] == name))
        .and_then(|t| t["toolId"].as_str())
        .map(str::to_string)
        .ok_or_else(|| anyhow::anyhow!("no tool {name}"))
}

fn echo_signature(opts: &Opts) -> anyhow::Result<Signature> {
    Ok(ToolPackage::read(&std::fs::read(opts.plugins.join("echo.wasm"))?)?.signature)
}

pub(crate) fn load_row(report: &mut Report, arm: &str, load: &Load) {
    report.row(
        arm,
        "requests/s · p50 · p99",
        format!("{:.0} · {} · {}{}", load.rps, fmt(load.latency.p50), fmt(load.latency.p99), errors(load)),
        "",
        None,
    );
}

fn errors(load: &Load) -> String {
    if load.errors == 0 { String::new() } else { format!(" ({} errors)", load.errors) }
}

/// One target of arm 1's rounds: where it is, what wrk sends it.
pub(crate) struct Target {
    pub(crate) url: String,
    pub(crate) body: String,
    pub(crate) headers: &'static [(&'static str, &'static str)],
}

/// What one target measured in each round: the load (8 connections) and
/// the one-connection p50.
#[derive(Default)]
pub(crate) struct Rounds {
    loads: Vec<Load>,
    one: Vec<Duration>,
}

impl Rounds {
    /// One round over `targets`, in their order: every target's load at
    /// [`CONNECTIONS`], then every target's p50 at one connection, so that
    /// the loads a ratio compares are seconds apart, not a target's two
    /// loads apart.
    pub(crate) fn run(targets: &mut [(&Target, &mut Rounds)], duration: Duration) -> anyhow::Result<()> {
        for (target, measured) in targets.iter_mut() {
            let (url, body) = (&target.url, Some(target.body.as_str()));
            measured.loads.push(wrk_with_headers(url, body, target.headers, duration, CONNECTIONS)?);
        }
        for (target, measured) in targets.iter_mut() {
            let (url, body) = (&target.url, Some(target.body.as_str()));
            measured.one.push(wrk_with_headers(url, body, target.headers, duration, 1)?.latency.p50);
        }
        Ok(())
    }

    /// The round whose throughput is the median.
    pub(crate) fn median_load(&self) -> Load {
        median_load(&self.loads)
    }

    pub(crate) fn median_one(&self) -> Duration {
        Summary::of(&mut self.one.clone()).p50
    }

    /// Throughput ÷ `other`'s, round by round: the median and every round's.
    pub(crate) fn throughput_over(&self, other: &Rounds) -> (f64, String) {
        median_of(self.loads.iter().zip(&other.loads).map(|(x, y)| x.rps / y.rps).collect())
    }

    /// One-connection p50 ÷ `other`'s, round by round.
    pub(crate) fn one_over(&self, other: &Rounds) -> (f64, String) {
        median_of(self.one.iter().zip(&other.one).map(|(x, y)| x.as_secs_f64() / y.as_secs_f64()).collect())
    }
}

/// The load whose throughput is the median of `loads`.
pub(crate) fn median_load(loads: &[Load]) -> Load {
    let mut loads = loads.to_vec();
    loads.sort_by(|x, y| x.rps.total_cmp(&y.rps));
    loads[loads.len() / 2]
}

/// The median of per-round values, and the rounds, as text.
fn median_of(mut values: Vec<f64>) -> (f64, String) {
    let rounds = values.iter().map(|v| format!("{v:.2}")).collect::<Vec<_>>().join(", ");
    values.sort_by(f64::total_cmp);
    (values[values.len() / 2], rounds)
}

/// Arm 1: the overhead of one invocation over HTTP. Every compared target
/// (the native ceiling, Plinth's three doors, the peer twice) is measured
/// in each of several rounds, one after the other, so that a change in the
/// machine's load falls on all of them; each ratio is taken round by round
/// and its median reported (a target is met when the median meets it).
pub async fn http_overhead(opts: &Opts, report: &mut Report) -> anyhow::Result<()> {
    let duration = load_duration(opts);

    // (a) The ceiling: a native handler doing echo's work (parse, validate
    // against the same signature, answer) with the same HTTP stack.
    let signature = Arc::new(echo_signature(opts)?);
    let app = axum::Router::new().route(
        "/echo",
        axum::routing::post(move |body: axum::body::Bytes| {
            let signature = signature.clone();
            async move {
                let request: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                match input_value(&signature, &request) {
                    Ok(Val::Record(fields)) => {
                        let text = match &fields[0].1 {
                            Val::String(s) => s.clone(),
                            _ => String::new(),
                        };
                        axum::Json(json!({"output_parameters": [{"name": "text", "value": text}]}))
                    }
                    _ => axum::Json(json!({"error": "invalid"})),
                }
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let native_url = format!("http://{}/echo", listener.local_addr()?);
    let native_server = tokio::spawn(async move { axum::serve(listener, app).await });
    let body = echo_body("hello, tools");
    tokio::task::block_in_place(|| warm_up(&native_url, Some(&body), &[], opts.smoke))?;

    // (b) Plinth invoking echo; (c) the weather tool against the fake backend.
    let weather = Server::fake_weather(opts)?;
    let data = tempfile::tempdir()?;
    let config = format!("lookup_weather_by_city.backend-url={}", weather.base);
    let plugins = opts.plugins.to_string_lossy().to_string();
    let plinth = Server::plinth(
        opts,
        data.path(),
        &["--plugins", &plugins, "--tool-config", &config, "--allow-private-cidr", "127.0.0.0/8"],
    )?;
    unthrottle(&plinth.base).await?;
    let echo = tool_id(&plinth.base, "echo").await?;
    let echo_url = format!("{}/tools/{echo}:invoke", plinth.base);
    let cold = tokio::task::block_in_place(|| warm_up(&echo_url, Some(&body), &[], opts.smoke))?;
    load_row(report, "1b Plinth echo, the first seconds of a fresh server (warm-up, not compared)", &cold);
    let forecast = tool_id(&plinth.base, "lookup_weather_by_city").await?;
    let weather_body =
        json!({"name": "lookup_weather_by_city", "input_parameters": [{"name": "city", "value": "Paris"}]}).to_string();
    let c = tokio::task::block_in_place(|| {
        wrk(&format!("{}/tools/{forecast}:invoke", plinth.base), Some(&weather_body), duration, CONNECTIONS)
    })?;
    load_row(report, "1c Plinth weather (2 backend calls)", &c);

    // (d) The same echo through the OTC front door (no call_id: nothing
    // recorded); (e) through the MCP front door (2026-07-28: no session;
    // the revision's headers and `_meta` on every request). Every MCP
    // request of the loads is the same, so one checked by hand before and
    // after stands for them (wrk counts HTTP statuses only, and MCP errors
    // are HTTP 200); the loads' 8 connections stay under the per-tool
    // concurrency limit (16), so none is refused busy in between.
    let native = Target { url: native_url, body: body.clone(), headers: &[] };
    let a2t = Target { url: echo_url, body: body.clone(), headers: &[] };
    let otc = Target {
        url: format!("{}/otc/tools/call", plinth.base),
        body: json!({"request": {"tool_id": "Default.Echo", "input": {"text": "hello, tools"}}}).to_string(),
        headers: &[],
    };
    let mcp =
        Target { url: format!("{}/mcp", plinth.base), body: mcp_echo_body("hello, tools"), headers: MCP_ECHO_HEADERS };
    check_mcp_echo(&mcp.url, &mcp.body, "hello, tools").await?;

    // (f) The peer, twice: as `wasmtime serve` starts by default, and with
    // the pool settings Plinth runs with.
    let peers = match &opts.peer {
        Some(peer) => {
            let mut started = Vec::new();
            for tuned in [false, true] {
                let server = Server::wasmtime_serve(&peer.wasmtime, &peer.echo, tuned)?;
                let url = format!("{}/", server.base);
                // The peer answers what Plinth answers, or the comparison means nothing.
                let answer: Value = client().post(&url).body(body.clone()).send().await?.json().await?;
                anyhow::ensure!(
                    answer["output_parameters"][0]["value"] == "hello, tools",
                    "the peer echo answered {answer}"
                );
                tokio::task::block_in_place(|| warm_up(&url, Some(&body), &[], opts.smoke))?;
                started.push((server, Target { url, body: body.clone(), headers: &[] }));
            }
            started
        }
        None => {
            report.note(
                "the peer arm (`wasmtime serve`) did not run: it needs wasmtime-cli, which `make bench` builds and \
                 `make bench-smoke` does not"
                    .into(),
            );
            Vec::new()
        }
    };

    let (rounds, round_duration) =
        if opts.smoke { (1, Duration::from_secs(1)) } else { (WIDE_ROUNDS, Duration::from_secs(5)) };
    let (mut a, mut b, mut d, mut e) = (Rounds::default(), Rounds::default(), Rounds::default(), Rounds::default());
    let mut f: Vec<Rounds> = peers.iter().map(|_| Rounds::default()).collect();
    for round in 0..rounds {
        // Every other round runs the targets in reverse order (as arms 10
        // and 11), so that the machine drifting within a round favours
        // neither the targets measured first nor those measured last.
        let mut order: Vec<(&Target, &mut Rounds)> =
            vec![(&native, &mut a), (&a2t, &mut b), (&otc, &mut d), (&mcp, &mut e)];
        order.extend(peers.iter().map(|(_, peer)| peer).zip(f.iter_mut()));
        if round % 2 == 1 {
            order.reverse();
        }
        tokio::task::block_in_place(|| Rounds::run(&mut order, round_duration))?;
    }
    check_mcp_echo(&mcp.url, &mcp.body, "hello, tools").await?;
    native_server.abort();
    drop(peers);

    let of_rounds = format!("median of {rounds} alternating rounds");
    // A smoke run's seconds of a debug build say nothing of the targets.
    let judged = |met: bool| (!opts.smoke).then_some(met);
    load_row(report, &format!("1a native axum echo (ceiling; {of_rounds})"), &a.median_load());
    load_row(report, &format!("1b Plinth echo ({of_rounds})"), &b.median_load());
    report.one_connection("native", a.median_one());
    report.one_connection("A2T", b.median_one());
    for (door, name, id, rounds) in
        [("1d Plinth echo via OTC", "OTC", "1 d/b", &d), ("1e Plinth echo via MCP", "MCP", "1 e/b", &e)]
    {
        load_row(report, &format!("{door} ({of_rounds})"), &rounds.median_load());
        report.one_connection(name, rounds.median_one());
        let (ratio, each) = rounds.throughput_over(&b);
        report.row(
            id,
            &format!("{name} ÷ A2T echo throughput ({of_rounds}) · p50 one connection {name}"),
            format!("{ratio:.2} (rounds {each}) · {}", fmt(rounds.median_one())),
            "≥ 0.9 (within 10%)",
            judged(ratio >= 0.9),
        );
    }
    // Both peers are judged: the issue sets the target against the tuned
    // one, and whichever of the two is faster in a run is the fair bar.
    for (i, measured) in f.iter().enumerate() {
        let (tuned, label) = if i == 1 {
            (true, "with Plinth's pool settings (keep 1 MiB resident, PAGEMAP_SCAN, 5 s timeout)")
        } else {
            (false, "at its defaults")
        };
        load_row(report, &format!("1f wasmtime serve echo (peer {label}; {of_rounds})"), &measured.median_load());
        let (throughput, each) = b.throughput_over(measured);
        let (latency, each_one) = b.one_over(measured);
        let id = if tuned { "1 b/f" } else { "1 b/f default" };
        report.row(
            id,
            &format!("Plinth A2T echo ÷ wasmtime serve {label}, requests/s ({of_rounds})"),
            format!("{throughput:.2} (rounds {each})"),
            "≥ 1.0",
            judged(throughput >= 1.0),
        );
        report.row(
            &format!("{id} one connection"),
            &format!("p50 Plinth A2T echo ÷ p50 wasmtime serve {label} ({of_rounds}): Plinth · peer"),
            format!("{latency:.2} (rounds {each_one}; {} · {})", fmt(b.median_one()), fmt(measured.median_one())),
            "≤ 1.0",
            judged(latency <= 1.0),
        );
    }

    let (ratio, each) = b.throughput_over(&a);
    report.row(
        "1 b/a",
        &format!("throughput ratio ({of_rounds})"),
        format!("{ratio:.2} (rounds {each})"),
        // Reported without a target: on this 2-core machine the load
        // generator shares the server's cores, and the ratio measures that
        // more than Plinth (bench/ANALYSIS.md).
        "",
        None,
    );
    report.row(
        "1 one connection",
        "p50 native · p50 Plinth echo (median of the rounds)",
        format!("{} · {}", fmt(a.median_one()), fmt(b.median_one())),
        "",
        None,
    );
    // The overhead is a difference of two noisy p50s: it is resolved only
    // when every round puts Plinth above the native handler.
    let differences: Vec<f64> =
        b.one.iter().zip(&a.one).map(|(x, y)| x.as_secs_f64() * 1e6 - y.as_secs_f64() * 1e6).collect();
    let each = differences.iter().map(|d| format!("{d:.0} µs")).collect::<Vec<_>>().join(", ");
    // Unresolved, it is not judged: the noise may be larger than the target.
    let (value, met) = if differences.iter().all(|d| *d > 0.0) {
        let (median, _) = median_of(differences.clone());
        (format!("{median:.0} µs (rounds {each})"), judged(median <= 50.0))
    } else {
        (format!("not resolved: inside the noise (rounds {each})"), None)
    };
    report.row("1 b−a", "Plinth's overhead per echo call, p50 (one connection, no queueing)", value, "≤ 50 µs", met);
    Ok(())
}

#[derive(ComponentType, Lower)]
#[component(record)]
struct EchoInput {
    text: String,
}

#[derive(ComponentType, Lift)]
#[component(record)]
struct EchoOutput {
    text: String,
}

/// Lifted to type-check the call; the bench never reads it.
#[allow(dead_code)]
#[derive(ComponentType, Lift)]
#[component(record)]
struct ToolError {
    message: String,
    #[component(name = "developer-message")]
    developer_message: Option<String>,
    #[component(name = "can-retry")]
    can_retry: bool,
    #[component(name = "retry-after-ms")]
    retry_after_ms: Option<u64>,
    #[component(name = "additional-prompt-content")]
    additional_prompt_content: Option<String>,
}

/// Arm 2: instantiate + call in process.
pub async fn in_process(opts: &Opts, report: &mut Report) -> anyhow::Result<()> {
    let iterations = if opts.smoke { 200 } else { 5000 };
    let bytes = std::fs::read(opts.plugins.join("echo.wasm"))?;
    let sha = plinth::digest::sha256_hex(&bytes);
    let signature = echo_signature(opts)?;
    let request = json!({"name": "echo", "input_parameters": [{"name": "text", "value": "hello"}]});

    let mut dynamic = Vec::new();
    for pooling in [true, false] {
        let runtime = Runtime::new(RuntimeConfig { pooling, ..Default::default() })?;
        let component = runtime.load(&bytes, &sha)?;
        // Warm up, then measure.
        for _ in 0..50 {
            runtime.call(&component, input_value(&signature, &request)?, CallSetup::bare("echo")).await?;
        }
        let summary = time_each(iterations, || async {
            let input = input_value(&signature, &request)?;
            runtime.call(&component, input, CallSetup::bare("echo")).await?;
            Ok(())
        })
        .await?;
        let name = if pooling { "2 pooling, dynamic Val" } else { "2 on-demand, dynamic Val" };
        report.row(
            name,
            "instantiate + call p50 · p99",
            format!("{} · {}", fmt(summary.p50), fmt(summary.p99)),
            "",
            None,
        );
        dynamic.push(summary);

        if pooling {
            let typed = time_each(iterations, || async {
                let (mut store, _) = runtime.store(CallSetup::bare("echo"));
                let instance = component.instance_pre().instantiate_async(&mut store).await?;
                let func = instance.get_typed_func::<(EchoInput,), (Result<EchoOutput, ToolError>,)>(
                    &mut store,
                    component.call_export(),
                )?;
                let (out,) = func.call_async(&mut store, (EchoInput { text: "hello".into() },)).await?;
                anyhow::ensure!(out.is_ok_and(|o| o.text == "hello"), "echo answered wrongly");
                Ok(())
            })
            .await?;
            report.row(
                "2 pooling, typed call",
                "instantiate + call p50 · p99",
                format!("{} · {}", fmt(typed.p50), fmt(typed.p99)),
                "p50 ≤ 15 µs",
                Some(typed.p50 <= Duration::from_micros(15)),
            );
        }
    }
    // Where the time of a pooled call goes.
    let runtime = Runtime::new(RuntimeConfig::default())?;
    let component = runtime.load(&bytes, &sha)?;
    let setup_only = time_each(iterations, || async {
        std::hint::black_box(runtime.store(CallSetup::bare("echo")));
        Ok(())
    })
    .await?;
    report.row("2 breakdown", "store setup alone (limiter, deadline, stdio pipes; the WASI context is built at a call's first WASI import) p50", fmt(setup_only.p50), "", None);
    let instantiate_only = time_each(iterations, || async {
        let (mut store, _) = runtime.store(CallSetup::bare("echo"));
        std::hint::black_box(component.instance_pre().instantiate_async(&mut store).await?);
        Ok(())
    })
    .await?;
    report.row("2 breakdown", "store setup + instantiate, no call, p50", fmt(instantiate_only.p50), "", None);

    let speedup = dynamic[1].p50.as_secs_f64() / dynamic[0].p50.as_secs_f64();
    // Without a target: the ratio measures wasmtime's allocators, not
    // Plinth (bench/ANALYSIS.md).
    report.row("2 on-demand/pooling", "p50 ratio", format!("{speedup:.2}×"), "", None);
    report.row(
        "2 pooling, dynamic Val",
        "p50 (target applies to the full path too)",
        fmt(dynamic[0].p50),
        "≤ 15 µs",
        Some(dynamic[0].p50 <= Duration::from_micros(15)),
    );
    let validation = time_each(iterations * 10, || async {
        std::hint::black_box(input_value(&signature, &request)?);
        Ok(())
    })
    .await?;
    report.row(
        "2 validation alone",
        "p50 · p99",
        format!("{} · {}", fmt(validation.p50), fmt(validation.p99)),
        "",
        None,
    );
    keep_resident(opts, report, &bytes, &sha, &signature, &request).await?;
    stages(opts, report, &runtime, &component, &signature).await?;
    Ok(())
}

/// How much of what a call wrote to its instance's memory is reset in place
/// when the slot is freed (`RuntimeConfig::keep_resident_bytes`), page by
/// page from nothing, with a second thread calling echo all the while: the
/// alternative, handing the pages back to the kernel (`madvise`), makes it
/// interrupt every other core running the process to flush its TLB, a cost
/// a lone thread never sees.
async fn keep_resident(
    opts: &Opts,
    report: &mut Report,
    bytes: &[u8],
    sha: &str,
    signature: &Signature,
    request: &Value,
) -> anyhow::Result<()> {
    let iterations = if opts.smoke { 200 } else { 5000 };
    let sizes = [0, 4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 2 << 20, 4 << 20];
    for (slot_reset, keep) in [SlotReset::Prefix, SlotReset::Scan].into_iter().flat_map(|r| sizes.map(|k| (r, k))) {
        let config = RuntimeConfig { keep_resident_bytes: keep, slot_reset, ..Default::default() };
        let runtime = Arc::new(Runtime::new(config)?);
        let component = runtime.load(bytes, sha)?;
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let neighbour = {
            let (runtime, component, stop) = (runtime.clone(), component.clone(), stop.clone());
            let input = input_value(signature, request)?;
            tokio::spawn(async move {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let _ = runtime.call(&component, input.clone(), CallSetup::bare("echo")).await;
                    tokio::task::yield_now().await;
                }
            })
        };
        let summary = time_each(iterations, || async {
            runtime.call(&component, input_value(signature, request)?, CallSetup::bare("echo")).await?;
            Ok(())
        })
        .await?;
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        neighbour.await?;
        let kib = keep >> 10;
        let method = match slot_reset {
            SlotReset::Prefix => "the first",
            SlotReset::Scan => "PAGEMAP_SCAN's written pages within",
        };
        report.row(
            "2 keep resident",
            &format!(
                "{method} {kib} KiB reset in place; pooled instantiate + call p50 · p99, a second thread calling too"
            ),
            format!("{} · {}", fmt(summary.p50), fmt(summary.p99)),
            "",
            None,
        );
    }
    Ok(())
}

/// Where the time of an echo call goes, stage by stage, each timed alone
/// in process (p50): what the "where the time goes" table is built from,
/// with the HTTP arms' one-connection latencies.
async fn stages(
    opts: &Opts,
    report: &mut Report,
    runtime: &Runtime,
    component: &plinth::runtime::LoadedComponent,
    signature: &Signature,
) -> anyhow::Result<()> {
    let iterations = if opts.smoke { 200 } else { 5000 };
    let body = echo_body("hello, tools");
    let stored = plinth::tenancy::key_sha256(crate::measure::BENCH_KEY);
    let auth = time_each(iterations, || async {
        anyhow::ensure!(plinth::tenancy::key_matches(crate::measure::BENCH_KEY, &stored));
        Ok(())
    })
    .await?;
    let parse = time_each(iterations, || async {
        std::hint::black_box(serde_json::from_slice::<Value>(body.as_bytes())?);
        Ok(())
    })
    .await?;
    let parsed: Value = serde_json::from_str(&body)?;
    let validate = time_each(iterations, || async {
        std::hint::black_box(input_value(signature, &parsed)?);
        Ok(())
    })
    .await?;
    // The hand-off a call pays when it moves to the tool threads: spawning
    // on another runtime and waiting for it there.
    let tools = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    let hand_off = time_each(iterations, || async {
        tools.spawn(async { std::hint::black_box(1) }).await?;
        Ok(())
    })
    .await?;
    tools.shutdown_background();
    let instantiate = time_each(iterations, || async {
        let (mut store, _) = runtime.store(CallSetup::bare("echo"));
        std::hint::black_box(component.instance_pre().instantiate_async(&mut store).await?);
        Ok(())
    })
    .await?;
    let whole = time_each(iterations, || async {
        runtime.call(component, input_value(signature, &parsed)?, CallSetup::bare("echo")).await?;
        Ok(())
    })
    .await?;
    let value = runtime.call(component, input_value(signature, &parsed)?, CallSetup::bare("echo")).await?;
    let output = time_each(iterations, || async {
        let result = plinth::invocation::read_result(signature, value.clone(), Default::default())?;
        std::hint::black_box(result);
        Ok(())
    })
    .await?;
    let result = plinth::invocation::read_result(signature, value.clone(), Default::default())?;
    let plinth::invocation::ToolResult::Outputs(outputs) = result else { anyhow::bail!("echo failed") };
    let serialise = time_each(iterations, || async {
        std::hint::black_box(serde_json::to_vec(&json!({ "output_parameters": outputs }))?);
        Ok(())
    })
    .await?;
    // What the metrics cost a call: its counter and two histograms, and
    // the HTTP answer's counter (the labels of a series that exists).
    let metrics = plinth::metrics::Metrics::default();
    let outcome: Result<plinth::invocation::ToolResult, plinth::host::InvokeError> =
        Ok(plinth::invocation::ToolResult::Outputs(outputs.clone()));
    let door = plinth::door::FrontDoor::A2t;
    let counted = time_each(iterations, || async {
        metrics.ran("default", "echo", 1, Duration::from_micros(9));
        let code = plinth::host::outcome_code(&outcome);
        metrics.invoked("default", "echo", 1, door.as_str(), code, Duration::from_micros(20));
        metrics.answered("POST", "/tools/{tool_ref}", 200);
        Ok(())
    })
    .await?;
    let call = whole.p50.saturating_sub(instantiate.p50);
    for (stage, took) in [
        ("auth (sha256 of the key, constant-time compare)", auth.p50),
        ("parse (the body's JSON)", parse.p50),
        ("validate (against the signature, into a component value)", validate.p50),
        ("hand-off to the tool threads and back (paid only by calls that pause)", hand_off.p50),
        ("instantiate (store setup + instance from the pool)", instantiate.p50),
        ("call (echo's code, its first touches of memory, the slot's reset: over HTTP, after the answer)", call),
        ("output (checked against the signature, to JSON values)", output.p50),
        ("serialise (the answer's JSON)", serialise.p50),
        ("metrics (the call's counter and histograms, the answer's counter)", counted.p50),
    ] {
        report.stage(stage, took);
    }
    Ok(())
}

/// What evaluating a confirmation condition costs: the heaviest the budget
/// accepts (two nested comprehensions over 64-entry literals, negated) and
/// two comprehensions over the largest inputs a condition may read. The unit tests check that they
/// are accepted and evaluate; how long they take is measured here.
pub async fn conditions(opts: &Opts, report: &mut Report) -> anyhow::Result<()> {
    use plinth::cheq::{ConfirmationPolicy, budget};
    let iterations = if opts.smoke { 20 } else { 500 };
    let list = format!("[{}]", (0..64).map(|i| i.to_string()).collect::<Vec<_>>().join(","));
    let mut items = Vec::new();
    while serde_json::to_string(&items)?.len() + 4 <= budget::MAX_INPUT_BYTES {
        items.push(json!("a"));
    }
    let cases = [
        (
            "2 condition, nested comprehensions over literals",
            format!("!{list}.all(a, {list}.all(b, a + b != 1000 && a * b != 5000))"),
            json!({}),
        ),
        (
            "2 condition, comprehensions over the largest inputs",
            "items.all(i, i != 'x' && i != 'y' && i != 'z') && items.exists(i, i == 'w')".to_string(),
            json!({ "items": items }),
        ),
    ];
    for (arm, condition, inputs) in cases {
        let policy = ConfirmationPolicy { required: false, when: Some(condition) };
        policy.check(&["items"]).map_err(|e| anyhow::anyhow!("{e}"))?;
        let compiled = policy.compile();
        let inputs = inputs.as_object().cloned().unwrap_or_default();
        // Both evaluate to false: `true` would also be the fail-closed answer
        // of a condition that could not be evaluated.
        anyhow::ensure!(!compiled.applies_to(&inputs), "{arm}: not evaluated");
        let summary = time_each(iterations, || async {
            std::hint::black_box(compiled.applies_to(&inputs));
            Ok(())
        })
        .await?;
        report.row(arm, "evaluation p50 · p99", format!("{} · {}", fmt(summary.p50), fmt(summary.p99)), "", None);
    }
    Ok(())
}

/// A generated tool: a real, distinct signature (and a component that traps
/// if called, which enumeration never does).
fn generated_tool(i: usize, wit: &std::path::Path) -> anyhow::Result<Vec<u8>> {
    let mut resolve = wit_parser::Resolve::default();
    let config = format!(
        "{}\n{}",
        std::fs::read_to_string(wit.join("deps/config/world.wit"))?,
        std::fs::read_to_string(wit.join("deps/config/store.wit"))?
    );
    resolve.push_str("config.wit", &config)?;
    resolve.push_str("tool.wit", &std::fs::read_to_string(wit.join("tool.wit"))?)?;
    let text = format!(
        "package bench:tool{i};\n/// Generated tool number {i}, one of many for the enumeration benchmark.\n\
         world generated-tool-{i} {{\n use plinth:tool/types@0.1.0.{{tool-error}};\n\
         record input {{\n /// The query for tool {i}.\n query-{i}: string,\n /// How many results.\n count: option<u16>,\n }}\n\
         record output {{\n /// The answer.\n answer: string,\n }}\n\
         export call: func(input: input) -> result<output, tool-error>;\n}}"
    );
    let pkg = resolve.push_str("world.wit", &text)?;
    let world = resolve.select_world(&[pkg], None)?;
    let mut module = wit_component::dummy_module(&resolve, world, wit_parser::ManglingAndAbi::Standard32);
    wit_component::embed_component_metadata(&mut module, &resolve, world, wit_component::StringEncoding::UTF8)?;
    let component = wit_component::ComponentEncoder::default().module(&module)?.validate(true).encode()?;
    let (packed, _) = package::pack(&component, &resolve, world, ToolManifest::default())?;
    Ok(packed)
}

async fn get_json(client: &reqwest::Client, url: &str) -> anyhow::Result<Value> {
    let response = client.get(url).send().await?;
    anyhow::ensure!(response.status().is_success(), "GET {url}: {}", response.status());
    Ok(response.json().await?)
}

/// `GET url`: the whole body, and how long it took to arrive. The client's
/// own JSON parsing is not the server's latency, so it is left out.
async fn get_timed(client: &reqwest::Client, url: &str) -> anyhow::Result<(Vec<u8>, Duration)> {
    let started = Instant::now();
    let response = client.get(url).send().await?;
    anyhow::ensure!(response.status().is_success(), "GET {url}: {}", response.status());
    let body = response.bytes().await?;
    let took = started.elapsed();
    Ok((body.to_vec(), took))
}

/// Page latency of `GET /tools?pageLimit=100` (first page, repeated), until
/// the whole page has arrived.
async fn page_latency(client: &reqwest::Client, base: &str, iterations: usize) -> anyhow::Result<Summary> {
    let url = format!("{base}/tools?pageLimit=100");
    let mut samples = Vec::with_capacity(iterations);
    for _ in 0..iterations {
        let (body, took) = get_timed(client, &url).await?;
        anyhow::ensure!(serde_json::from_slice::<Value>(&body)?["items"].is_array(), "not a page");
        samples.push(took);
    }
    Ok(Summary::of(&mut samples))
}

/// Latency of GETs cycling through `urls`.
async fn cycle_gets(client: &reqwest::Client, urls: &[String], iterations: usize) -> anyhow::Result<Summary> {
    let mut n = 0;
    time_each(iterations, || {
        n += 1;
        let url = urls[n % urls.len()].clone();
        async move {
            get_json(client, &url).await?;
            Ok(())
        }
    })
    .await
}

/// Arms 3 and 4b: enumeration at scale, restart time, memory per version.
pub async fn enumeration_and_start(opts: &Opts, report: &mut Report) -> anyhow::Result<()> {
    let many = if opts.smoke { 300 } else { 10_000 };
    let iterations = if opts.smoke { 50 } else { 500 };
    let dir = tempfile::tempdir()?;
    let started = Instant::now();
    let wit = opts.wit.clone();
    let small_dir = dir.path().join("small");
    let large_dir = dir.path().join("large");
    std::fs::create_dir_all(&small_dir)?;
    std::fs::create_dir_all(&large_dir)?;
    tokio::task::block_in_place(|| -> anyhow::Result<()> {
        for i in 0..many {
            let bytes = generated_tool(i, &wit)?;
            if i < 100 {
                std::fs::write(small_dir.join(format!("t{i:05}.wasm")), &bytes)?;
            }
            std::fs::write(large_dir.join(format!("t{i:05}.wasm")), &bytes)?;
        }
        Ok(())
    })?;
    report.note(format!("generated and packed {many} distinct tools in {:.1} s", started.elapsed().as_secs_f64()));
    let client = client();

    // An empty server, for the memory baseline.
    let empty_data = tempfile::tempdir()?;
    let empty = Server::plinth(opts, empty_data.path(), &[])?;
    let baseline_kib = empty.resident_kib();
    drop(empty);

    // 100 tools: deploy, then restart with everything in the compiled cache.
    let small_data = tempfile::tempdir()?;
    let first = Server::plinth(opts, small_data.path(), &["--plugins", small_dir.to_str().unwrap_or_default()])?;
    report.note(format!("first start with 100 tools to deploy and compile: {:.2} s", first.started_in.as_secs_f64()));
    drop(first);
    let mut restarts = Vec::new();
    for _ in 0..3 {
        let server = Server::plinth(opts, small_data.path(), &[])?;
        restarts.push(server.started_in);
    }
    let restart = Summary::of(&mut restarts);
    report.row(
        "4 restart",
        "100 cached tools, spawn → listening (median of 3)",
        fmt(restart.p50),
        "≤ 1 s",
        Some(restart.p50 <= Duration::from_secs(1)),
    );
    let small = Server::plinth(opts, small_data.path(), &[])?;
    let small_pages = page_latency(&client, &small.base, iterations).await?;
    drop(small);

    // Many tools: more than the default tenant's quota allows, so the
    // operator raises it first (it is stored in the data dir).
    let large_data = tempfile::tempdir()?;
    {
        let setup = Server::plinth(opts, large_data.path(), &[])?;
        let quota = json!({ "quotas": { "maxTools": many + 1 } });
        let response = client.patch(format!("{}/admin/tenants/default", setup.base)).json(&quota).send().await?;
        anyhow::ensure!(response.status().is_success(), "raising maxTools answered {}", response.status());
    }
    let deploy_started = Instant::now();
    let large = Server::plinth(opts, large_data.path(), &["--plugins", large_dir.to_str().unwrap_or_default()])?;
    report.note(format!("deploying {many} tools at start took {:.1} s", deploy_started.elapsed().as_secs_f64()));
    let resident = large.resident_kib();
    let per_version = resident.saturating_sub(baseline_kib) as f64 / many as f64;
    report.row("4 memory", "resident memory per deployed, idle version", format!("{per_version:.1} KiB"), "", None);

    let pages = page_latency(&client, &large.base, iterations).await?;
    report.row(
        "3 enumeration",
        &format!("GET /tools?pageLimit=100 with {many} tools, p50 · p99"),
        format!("{} · {}", fmt(pages.p50), fmt(pages.p99)),
        "p99 ≤ 2 ms",
        Some(pages.p99 <= Duration::from_millis(2)),
    );
    let growth = pages.p50.as_secs_f64() / small_pages.p50.as_secs_f64();
    report.row(
        "3 enumeration",
        &format!("page p50 at {many} tools / at 100 tools"),
        format!("{growth:.2}×"),
        "≈ 1 (independent of tool count)",
        Some(growth < 1.5),
    );

    // Walk every page.
    let mut page_times = Vec::new();
    let mut cursor: Option<String> = None;
    let mut seen = 0;
    let walk_started = Instant::now();
    loop {
        let url = match &cursor {
            Some(c) => format!("{}/tools?pageLimit=100&pageCursor={c}", large.base),
            None => format!("{}/tools?pageLimit=100", large.base),
        };
        let (body, took) = get_timed(&client, &url).await?;
        page_times.push(took);
        let page: Value = serde_json::from_slice(&body)?;
        seen += page["items"].as_array().map_or(0, Vec::len);
        match page["paging"]["next"].as_str() {
            Some(next) => cursor = Some(next.to_string()),
            None => break,
        }
    }
    anyhow::ensure!(seen == many, "walked {seen} tools of {many}");
    let walk = Summary::of(&mut page_times);
    report.row(
        "3 enumeration",
        &format!("walk all {} pages: total · page p50 · p99", page_times.len()),
        format!("{} · {} · {}", fmt(walk_started.elapsed()), fmt(walk.p50), fmt(walk.p99)),
        "p99 ≤ 2 ms",
        Some(walk.p99 <= Duration::from_millis(2)),
    );

    let first_page = get_json(&client, &format!("{}/tools?pageLimit=100", large.base)).await?;
    let ids: Vec<String> = first_page["items"]
        .as_array()
        .map(|items| items.iter().filter_map(|t| t["toolId"].as_str().map(str::to_string)).collect())
        .unwrap_or_default();
    let tools: Vec<String> = ids.iter().map(|id| format!("{}/tools/{id}", large.base)).collect();
    let one = cycle_gets(&client, &tools, iterations).await?;
    report.row("3 enumeration", "GET /tools/{id} p50 · p99", format!("{} · {}", fmt(one.p50), fmt(one.p99)), "", None);
    let version_lists: Vec<String> = tools.iter().map(|url| format!("{url}/versions")).collect();
    let versions = cycle_gets(&client, &version_lists, iterations).await?;
    report.row(
        "3 enumeration",
        "GET /tools/{id}/versions p50 · p99",
        format!("{} · {}", fmt(versions.p50), fmt(versions.p99)),
        "",
        None,
    );
    Ok(())
}

/// Arm 4a: deploy-to-serving time, compiling and from the compiled cache.
pub async fn deploy(opts: &Opts, report: &mut Report) -> anyhow::Result<()> {
    let bytes = std::fs::read(opts.plugins.join("lookup_weather_by_city.wasm"))?;
    let client = client();
    let post = |base: String| {
        let (client, bytes) = (client.clone(), bytes.clone());
        async move {
            let started = Instant::now();
            let response = client
                .post(format!("{base}/admin/tools"))
                .header("content-type", "application/wasm")
                .body(bytes)
                .send()
                .await?;
            anyhow::ensure!(response.status() == 201, "deploy answered {}", response.status());
            Ok::<_, anyhow::Error>(started.elapsed())
        }
    };
    let fresh_data = tempfile::tempdir()?;
    let fresh_server = Server::plinth(opts, fresh_data.path(), &[])?;
    let fresh = post(fresh_server.base.clone()).await?;
    drop(fresh_server);
    report.row("4 deploy", "weather tool, compiling (POST → 201, serving)", fmt(fresh), "", None);

    // A second server whose compiled cache already holds the component.
    let cached_data = tempfile::tempdir()?;
    let cache = cached_data.path().join("compiled");
    std::fs::create_dir_all(&cache)?;
    // The compiled entries (and their checksums), not the compile cache.
    for entry in std::fs::read_dir(fresh_data.path().join("compiled"))? {
        let entry = entry?;
        if entry.file_type()?.is_file() {
            std::fs::copy(entry.path(), cache.join(entry.file_name()))?;
        }
    }
    let cached_server = Server::plinth(opts, cached_data.path(), &[])?;
    let cached = post(cached_server.base.clone()).await?;
    report.row(
        "4 deploy",
        "weather tool, compiled code cached (POST → 201, serving)",
        fmt(cached),
        "≤ 50 ms",
        Some(cached <= Duration::from_millis(50)),
    );
    Ok(())
}

/// Arm 5: good calls while another client drives timeouts and memory bombs.
pub async fn under_faults(opts: &Opts, report: &mut Report) -> anyhow::Result<()> {
    let duration = load_duration(opts);
    let dir = tempfile::tempdir()?;
    std::fs::copy(opts.plugins.join("echo.wasm"), dir.path().join("echo.wasm"))?;
    for name in ["spin_forever", "memory_bomb"] {
        std::fs::copy(opts.fixtures.join(format!("{name}.wasm")), dir.path().join(format!("{name}.wasm")))?;
    }
    let data = tempfile::tempdir()?;
    let server = Server::plinth(
        opts,
        data.path(),
        &["--plugins", dir.path().to_str().unwrap_or_default(), "--deadline-ms", "200"],
    )?;
    unthrottle(&server.base).await?;
    let echo = tool_id(&server.base, "echo").await?;
    let url = format!("{}/tools/{echo}:invoke", server.base);
    let body = echo_body("hello, tools");
    // p99 is the tail, and one stall of this shared machine moves it:
    // rounds without and with faults alternate, and the medians are compared.
    tokio::task::block_in_place(|| warm_up(&url, Some(&body), &[], opts.smoke))?;
    let rounds = if opts.smoke { 1 } else { WIDE_ROUNDS };
    let (mut calm, mut stormy) = (Vec::new(), Vec::new());
    let (mut ran, mut refused) = (0, 0);
    for _ in 0..rounds {
        calm.push(tokio::task::block_in_place(|| wrk(&url, Some(&body), duration, CONNECTIONS))?);
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let mut faults = Vec::new();
        for tool in ["spin_forever", "memory_bomb"] {
            let id = tool_id(&server.base, tool).await?;
            let url = format!("{}/tools/{id}:invoke", server.base);
            let body = json!({"name": tool, "input_parameters": [{"name": "note", "value": "x"}]});
            let stop = stop.clone();
            faults.push(tokio::spawn(async move {
                let client = client();
                // (ran to their limit, refused as busy while the tool rested)
                let (mut ran, mut refused) = (0u64, 0u64);
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    match client.post(&url).json(&body).send().await.map(|r| r.status().as_u16()) {
                        Ok(503) => refused += 1,
                        _ => ran += 1,
                    }
                }
                (ran, refused)
            }));
        }
        stormy.push(tokio::task::block_in_place(|| wrk(&url, Some(&body), duration, CONNECTIONS))?);
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for f in faults {
            let (r, b) = f.await?;
            (ran, refused) = (ran + r, refused + b);
        }
    }
    // Round by round: each faulty round against the calm one just before it.
    let (ratio, each) = median_of(
        calm.iter().zip(&stormy).map(|(c, s)| s.latency.p99.as_secs_f64() / c.latency.p99.as_secs_f64()).collect(),
    );
    let (calm, stormy) = (round_of_median_p99(&mut calm), round_of_median_p99(&mut stormy));
    load_row(report, &format!("5 echo, no faults (the round of median p99 of {rounds})"), &calm);
    load_row(report, &format!("5 echo, under faults (the round of median p99 of {rounds})"), &stormy);
    report.note(format!(
        "arm 5: while wrk measured the faulty rounds, {ran} calls of the spinning tool and the memory bomb ran to their limits \
         and {refused} were refused as busy while the demoted tools rested"
    ));
    report.row(
        "5 faults",
        &format!("good-call p99 under faults ÷ without (median of {rounds} alternating rounds' ratios)"),
        format!("{ratio:.2}× (rounds {each})"),
        "≤ 1.5×",
        (!opts.smoke).then_some(ratio <= 1.5),
    );
    Ok(())
}

/// Arm 2, over HTTP: what resetting freed slots by prefix (`--slot-reset
/// prefix`, the first MiB whatever was written) costs echo against the
/// default, the written pages `PAGEMAP_SCAN` finds (docs/sandbox.md): two
/// servers, one of each, under the same wrk load in alternating rounds; the
/// medians are compared.
pub async fn slot_reset_cost(opts: &Opts, report: &mut Report) -> anyhow::Result<()> {
    let duration = load_duration(opts);
    let dir = tempfile::tempdir()?;
    std::fs::copy(opts.plugins.join("echo.wasm"), dir.path().join("echo.wasm"))?;
    let plugins = dir.path().to_str().unwrap_or_default();
    let prefix = warm_echo_server(opts, &opts.plinth, plugins, &["--slot-reset", "prefix"]).await?;
    let scan = warm_echo_server(opts, &opts.plinth, plugins, &["--slot-reset", "scan"]).await?;
    let urls = [&prefix.2, &scan.2];
    let body = echo_body("hello, tools");
    let rounds = if opts.smoke { 1 } else { 3 };
    let (mut by_prefix, mut by_scan) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        by_prefix.push(tokio::task::block_in_place(|| wrk(urls[0], Some(&body), duration, CONNECTIONS))?);
        by_scan.push(tokio::task::block_in_place(|| wrk(urls[1], Some(&body), duration, CONNECTIONS))?);
    }
    let (prefix_rps, scan_rps) = (median_load(&by_prefix).rps, median_load(&by_scan).rps);
    let (prefix_p99, scan_p99) = (round_of_median_p99(&mut by_prefix), round_of_median_p99(&mut by_scan));
    load_row(
        report,
        &format!("2 slot reset: echo, --slot-reset prefix (p99: the round of median p99 of {rounds})"),
        &prefix_p99,
    );
    load_row(
        report,
        &format!("2 slot reset: echo, --slot-reset scan (p99: the round of median p99 of {rounds})"),
        &scan_p99,
    );
    let ratio = prefix_rps / scan_rps;
    report.row(
        "2 slot reset",
        &format!("echo throughput, prefix ÷ scan (the default; medians of {rounds} alternating rounds)"),
        format!("{ratio:.2} ({prefix_rps:.0} ÷ {scan_rps:.0} req/s)"),
        "",
        None,
    );
    Ok(())
}

/// A server of `binary` (with `args`) whose plugins folder holds echo, its
/// rate quota lifted, warmed up: the server, its data folder (kept as long
/// as the server runs) and echo's A2T URL.
async fn warm_echo_server(
    opts: &Opts,
    binary: &Path,
    plugins: &str,
    args: &[&str],
) -> anyhow::Result<(Server, tempfile::TempDir, String)> {
    let data = tempfile::tempdir()?;
    let server = Server::plinth_binary(binary, data.path(), &[&["--plugins", plugins], args].concat(), &[])?;
    unthrottle(&server.base).await?;
    let url = format!("{}/tools/{}:invoke", server.base, tool_id(&server.base, "echo").await?);
    let body = echo_body("hello, tools");
    tokio::task::block_in_place(|| warm_up(&url, Some(&body), &[], opts.smoke))?;
    Ok((server, data, url))
}

/// Arm 11, only with `--baseline BINARY` (another build of Plinth: an
/// earlier commit's release binary): A2T echo on this build and on the
/// baseline, under the same loads (8 connections, then one) in rounds whose
/// order alternates; each ratio is taken round by round. Issue 31 asks that
/// its changes slow echo by no more than 5%.
pub async fn against_baseline(opts: &Opts, baseline: &Path, report: &mut Report) -> anyhow::Result<()> {
    let plugins = tempfile::tempdir()?;
    std::fs::copy(opts.plugins.join("echo.wasm"), plugins.path().join("echo.wasm"))?;
    let plugins = plugins.path().to_str().unwrap_or_default();
    let body = echo_body("hello, tools");
    let mut started = Vec::new();
    for binary in [opts.plinth.as_path(), baseline] {
        let (server, data, url) = warm_echo_server(opts, binary, plugins, &[]).await?;
        started.push((server, data, Target { url, body: body.clone(), headers: &[] }));
    }
    let (rounds, round_duration) =
        if opts.smoke { (1, Duration::from_secs(1)) } else { (WIDE_ROUNDS, Duration::from_secs(5)) };
    let (mut this, mut base) = (Rounds::default(), Rounds::default());
    for round in 0..rounds {
        let mut order = [(&started[0].2, &mut this), (&started[1].2, &mut base)];
        if round % 2 == 1 {
            order.reverse();
        }
        tokio::task::block_in_place(|| Rounds::run(&mut order, round_duration))?;
    }
    let of_rounds = format!("median of {rounds} rounds, order alternating");
    let judged = |met: bool| (!opts.smoke).then_some(met);
    load_row(report, &format!("11 this build, A2T echo ({of_rounds})"), &this.median_load());
    load_row(report, &format!("11 baseline {}, A2T echo ({of_rounds})", baseline.display()), &base.median_load());
    let (throughput, each) = this.throughput_over(&base);
    report.row(
        "11 this ÷ baseline",
        &format!("echo requests/s ({of_rounds})"),
        format!("{throughput:.2} (rounds {each})"),
        "≥ 0.97",
        judged(throughput >= 0.97),
    );
    let (latency, each) = this.one_over(&base);
    report.row(
        "11 this ÷ baseline one connection",
        &format!("echo p50 ({of_rounds}): this · baseline"),
        format!("{latency:.2} (rounds {each}; {} · {})", fmt(this.median_one()), fmt(base.median_one())),
        "≤ 1.03",
        judged(latency <= 1.03),
    );
    Ok(())
}

/// Of several rounds of a load, the one whose p99 is the median.
fn round_of_median_p99(loads: &mut Vec<Load>) -> Load {
    loads.sort_by_key(|load| load.latency.p99);
    loads.swap_remove(loads.len() / 2)
}

/// Arm 6: a busy neighbour — a tool that legally computes 1.5 ms per call,
/// called by as many clients as wrk has connections — beside echo and
/// `/health`. A call starts on the thread that received it; a tool whose
/// calls computed long lately starts on the tool threads instead, so that two
/// such calls cannot hold both HTTP threads of a 2-core machine. Calm and
/// busy rounds alternate; the medians are compared.
pub async fn busy_neighbour(opts: &Opts, report: &mut Report) -> anyhow::Result<()> {
    const COMPUTE_MICROS: u32 = 1500;
    let duration = load_duration(opts);
    let dir = tempfile::tempdir()?;
    std::fs::copy(opts.plugins.join("echo.wasm"), dir.path().join("echo.wasm"))?;
    std::fs::copy(opts.fixtures.join("compute.wasm"), dir.path().join("compute.wasm"))?;
    let data = tempfile::tempdir()?;
    let server = Server::plinth(opts, data.path(), &["--plugins", dir.path().to_str().unwrap_or_default()])?;
    unthrottle(&server.base).await?;
    let echo = tool_id(&server.base, "echo").await?;
    let url = format!("{}/tools/{echo}:invoke", server.base);
    let body = echo_body("hello, tools");
    let compute = format!("{}/tools/{}:invoke", server.base, tool_id(&server.base, "compute").await?);
    let compute_body = json!({"name": "compute", "input_parameters": [{"name": "micros", "value": COMPUTE_MICROS}]});
    tokio::task::block_in_place(|| warm_up(&url, Some(&body), &[], opts.smoke))?;
    let rounds = if opts.smoke { 1 } else { 3 };
    let (mut calm, mut busy, mut health) = (Vec::new(), Vec::new(), Vec::new());
    let mut computed = 0u64;
    for _ in 0..rounds {
        calm.push(tokio::task::block_in_place(|| wrk(&url, Some(&body), duration, CONNECTIONS))?);
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let neighbours: Vec<_> = (0..CONNECTIONS)
            .map(|_| {
                let (url, body, stop) = (compute.clone(), compute_body.clone(), stop.clone());
                tokio::spawn(async move {
                    let client = client();
                    let mut ok = 0u64;
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        if client.post(&url).json(&body).send().await.is_ok_and(|r| r.status() == 200) {
                            ok += 1;
                        }
                    }
                    ok
                })
            })
            .collect();
        // `/health`, one request after another, timed from here.
        let probe = {
            let (url, stop) = (format!("{}/health", server.base), stop.clone());
            tokio::spawn(async move {
                let client = client();
                let mut samples = Vec::new();
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let started = Instant::now();
                    if client.get(&url).send().await.is_ok_and(|r| r.status() == 200) {
                        samples.push(started.elapsed());
                    }
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                samples
            })
        };
        busy.push(tokio::task::block_in_place(|| wrk(&url, Some(&body), duration, CONNECTIONS))?);
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for neighbour in neighbours {
            computed += neighbour.await?;
        }
        let mut samples = probe.await?;
        anyhow::ensure!(!samples.is_empty(), "/health never answered 200 beside the busy tool");
        health.push(Summary::of(&mut samples));
    }
    let (calm, busy) = (round_of_median_p99(&mut calm), round_of_median_p99(&mut busy));
    health.sort_by_key(|h| h.p99);
    let health = &health[health.len() / 2];
    load_row(report, &format!("6 echo, calm (the round of median p99 of {rounds})"), &calm);
    load_row(
        report,
        &format!("6 echo, beside a {COMPUTE_MICROS} µs tool (the round of median p99 of {rounds})"),
        &busy,
    );
    report.note(format!(
        "arm 6: while wrk measured the busy rounds, {CONNECTIONS} clients called the {COMPUTE_MICROS} µs tool \
         {computed} times in all"
    ));
    let ratio = busy.latency.p99.as_secs_f64() / calm.latency.p99.as_secs_f64();
    report.row(
        "6 busy neighbour",
        &format!("echo p99 beside it / calm (medians of {rounds} alternating rounds)"),
        format!("{ratio:.2}×"),
        "≤ 1.5×",
        Some(ratio <= 1.5),
    );
    report.row(
        "6 busy neighbour",
        &format!("/health p50 · p99 beside it (the round of median p99 of {rounds})"),
        format!("{} · {}", fmt(health.p50), fmt(health.p99)),
        "p99 ≤ 5 ms",
        Some(health.p99 <= Duration::from_millis(5)),
    );
    Ok(())
}

/// Arm 7: the same echo tool in Rust, Python and JavaScript (issue 18):
/// the component's size; deploying it to a fresh server (compiling its
/// native code: POST → 201); the server's resident memory once it holds
/// the idle version; and a pooled instantiate + call in process.
pub async fn languages(opts: &Opts, report: &mut Report) -> anyhow::Result<()> {
    let tools = [
        ("Rust", opts.plugins.join("echo.wasm")),
        ("Python", opts.fixtures.join("echo_py.wasm")),
        ("JavaScript", opts.fixtures.join("echo_js.wasm")),
    ];
    let signature = echo_signature(opts)?;
    let request = json!({"name": "echo", "input_parameters": [{"name": "text", "value": "hello"}]});
    for (language, path) in tools {
        let bytes = std::fs::read(&path).map_err(|e| anyhow::anyhow!("{}: {e} (make fixtures)", path.display()))?;
        let arm = format!("7 {language} echo");
        report.row(&arm, "component size", format!("{:.2} MB", bytes.len() as f64 / 1e6), "", None);

        let empty_data = tempfile::tempdir()?;
        let empty = Server::plinth(opts, empty_data.path(), &[])?.resident_kib();
        let data = tempfile::tempdir()?;
        let server = Server::plinth(opts, data.path(), &[])?;
        let started = Instant::now();
        let response = client()
            .post(format!("{}/admin/tools", server.base))
            .header("content-type", "application/wasm")
            .body(bytes.clone())
            .send()
            .await?;
        anyhow::ensure!(response.status() == 201, "deploying the {language} echo answered {}", response.status());
        let deployed = started.elapsed();
        drop(server);
        // The idle version's cost, without what compiling it left in the
        // allocator: a restart loads it from the compiled-code cache.
        let restarted = Server::plinth(opts, data.path(), &[])?;
        let idle_kib = restarted.resident_kib().saturating_sub(empty);
        drop(restarted);
        report.row(&arm, "deploy, compiling (POST → 201, serving)", fmt(deployed), "", None);
        report.row(
            &arm,
            "resident memory of a server holding only this idle version, over an empty one",
            format!("{:.1} MiB", idle_kib as f64 / 1024.0),
            "",
            None,
        );

        let iterations = if opts.smoke { 20 } else { 1000 };
        let runtime = Runtime::new(RuntimeConfig::default())?;
        let component = runtime.load(&bytes, &plinth::digest::sha256_hex(&bytes))?;
        for _ in 0..10 {
            runtime.call(&component, input_value(&signature, &request)?, CallSetup::bare("echo")).await?;
        }
        let summary = time_each(iterations, || async {
            runtime.call(&component, input_value(&signature, &request)?, CallSetup::bare("echo")).await?;
            Ok(())
        })
        .await?;
        let instantiate = time_each(iterations, || async {
            let (mut store, _) = runtime.store(CallSetup::bare("echo"));
            std::hint::black_box(component.instance_pre().instantiate_async(&mut store).await?);
            Ok(())
        })
        .await?;
        report.row(
            &arm,
            "pooled instantiate + call p50 · p99",
            format!("{} · {}", fmt(summary.p50), fmt(summary.p99)),
            "",
            None,
        );
        report.row(&arm, "of which store setup + instantiate, no call, p50", fmt(instantiate.p50), "", None);
    }
    Ok(())
}

/// Arm 9: what observability costs a call. Metrics are always on (their
/// cost per call is a stage in arm 2); traces are exported only with
/// `--otlp-endpoint`. Echo over A2T on a server that exports every
/// request's spans to a local OTLP sink, against the same server without,
/// both scraped by a Prometheus-like client every second; the rounds
/// alternate and the medians are compared.
pub async fn observability(opts: &Opts, report: &mut Report) -> anyhow::Result<()> {
    let duration = load_duration(opts);
    // The sink: accepts every OTLP/HTTP export and counts its bytes.
    let received = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let counted = received.clone();
    let sink = axum::Router::new().route(
        "/v1/traces",
        axum::routing::post(move |body: axum::body::Bytes| {
            counted.fetch_add(body.len() as u64, std::sync::atomic::Ordering::Relaxed);
            async { axum::http::StatusCode::OK }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let sink_url = format!("http://{}", listener.local_addr()?);
    let sink = tokio::spawn(async move { axum::serve(listener, sink).await });

    let dir = tempfile::tempdir()?;
    std::fs::copy(opts.plugins.join("echo.wasm"), dir.path().join("echo.wasm"))?;
    let plugins = dir.path().to_string_lossy().to_string();
    let (plain_data, traced_data) = (tempfile::tempdir()?, tempfile::tempdir()?);
    let plain = Server::plinth(opts, plain_data.path(), &["--plugins", &plugins])?;
    let traced = Server::plinth(opts, traced_data.path(), &["--plugins", &plugins, "--otlp-endpoint", &sink_url])?;
    let body = echo_body("hello, tools");
    let mut urls = Vec::new();
    for server in [&plain, &traced] {
        unthrottle(&server.base).await?;
        urls.push(format!("{}/tools/{}:invoke", server.base, tool_id(&server.base, "echo").await?));
    }
    // Prometheus scraping both, once a second, all along.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let scrapes: Vec<_> = [&plain, &traced]
        .iter()
        .map(|server| {
            let (url, stop) = (format!("{}/metrics", server.base), stop.clone());
            tokio::spawn(async move {
                let client = client();
                let mut scraped = 0u32;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    if client.get(&url).send().await.is_ok_and(|r| r.status().is_success()) {
                        scraped += 1;
                    }
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
                scraped
            })
        })
        .collect();
    for url in &urls {
        tokio::task::block_in_place(|| warm_up(url, Some(&body), &[], opts.smoke))?;
    }
    let rounds = if opts.smoke { 1 } else { 3 };
    let (mut without, mut with) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        without.push(tokio::task::block_in_place(|| wrk(&urls[0], Some(&body), duration, CONNECTIONS))?);
        with.push(tokio::task::block_in_place(|| wrk(&urls[1], Some(&body), duration, CONNECTIONS))?);
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut scraped = 0;
    for scrape in scrapes {
        scraped += scrape.await?;
    }
    // The last batch leaves within the exporter's 2 s interval.
    tokio::time::sleep(Duration::from_secs(3)).await;
    sink.abort();
    let (without, with) = (median_load(&without), median_load(&with));
    load_row(report, &format!("9 echo, metrics scraped, no traces (median of {rounds})"), &without);
    load_row(report, &format!("9 echo, metrics scraped, every request traced to OTLP (median of {rounds})"), &with);
    let ratio = with.rps / without.rps;
    report.row("9 traces on ÷ off", "requests/s", format!("{ratio:.2}"), "", None);
    let bytes = received.load(std::sync::atomic::Ordering::Relaxed);
    anyhow::ensure!(bytes > 0, "the traced server exported nothing to the sink");
    report.note(format!(
        "arm 9: {scraped} scrapes of /metrics during the loads; the sink received {:.1} MB of OTLP spans",
        bytes as f64 / 1e6
    ));
    Ok(())
}

/// Arm 10: what the vendor's console costs. Echo on a server that counts
/// usage ÷ one that counts none (`--usage-flush-secs 0`), and echo's p99
/// with a live tail (`GET /admin/logs` as server-sent events, read as fast
/// as it comes) attached ÷ without, in alternating rounds. One call in ten
/// is refused for its inputs (`text` given as a number), as LLMs' calls
/// are: each is a console entry and a usage count by parameter and code.
pub async fn console_cost(opts: &Opts, report: &mut Report) -> anyhow::Result<()> {
    let duration = load_duration(opts);
    let dir = tempfile::tempdir()?;
    std::fs::copy(opts.plugins.join("echo.wasm"), dir.path().join("echo.wasm"))?;
    let plugins = dir.path().to_string_lossy().to_string();
    let (off_data, on_data) = (tempfile::tempdir()?, tempfile::tempdir()?);
    let off = Server::plinth(opts, off_data.path(), &["--plugins", &plugins, "--usage-flush-secs", "0"])?;
    let on = Server::plinth(opts, on_data.path(), &["--plugins", &plugins])?;
    let body = echo_body("hello, tools");
    let refused = r#"{"name":"echo","input_parameters":[{"name":"text","value":42}]}"#;
    let mix: Vec<&str> = (0..10).map(|i| if i == 9 { refused } else { body.as_str() }).collect();
    let mut urls = Vec::new();
    for server in [&off, &on] {
        unthrottle(&server.base).await?;
        urls.push(format!("{}/tools/{}:invoke", server.base, tool_id(&server.base, "echo").await?));
    }
    for url in &urls {
        tokio::task::block_in_place(|| warm_up(url, Some(&body), &[], opts.smoke))?;
    }
    // Five rounds: a round's p99 ratio ranges 0.85–1.28 on this shared
    // machine, and the target is 1.10.
    let rounds = if opts.smoke { 1 } else { WIDE_ROUNDS };
    let (mut uncounted, mut counted, mut tailed) = (Vec::new(), Vec::new(), Vec::new());
    let mut tail_events = 0;
    // The counted load runs between the other two, which swap places each
    // round: it is next to both, and neither is always first.
    #[derive(Clone, Copy)]
    enum Setting {
        Uncounted,
        Counted,
        Tailed,
    }
    use Setting::*;
    for round in 0..rounds {
        let order = if round % 2 == 0 { [Uncounted, Counted, Tailed] } else { [Tailed, Counted, Uncounted] };
        for load in order {
            let url = &urls[if matches!(load, Uncounted) { 0 } else { 1 }];
            let tail = if matches!(load, Tailed) { Some(Tail::attach(&on.base).await?) } else { None };
            let measured = tokio::task::block_in_place(|| wrk_mix(url, &mix, duration, CONNECTIONS))?;
            tail_events += tail.map_or(0, Tail::detach);
            match load {
                Uncounted => uncounted.push(measured),
                Counted => counted.push(measured),
                Tailed => tailed.push(measured),
            }
        }
    }
    // Round by round, like arms 1 and 5: each ratio against the round's
    // counted load, the median of the rounds' ratios reported.
    let (ratio, each) = median_of(counted.iter().zip(&uncounted).map(|(c, u)| c.rps / u.rps).collect());
    let (growth, each_growth) = median_of(
        tailed
            .iter()
            .zip(&counted)
            .map(|(t, c)| t.latency.p99.as_secs_f64() / c.latency.p99.as_secs_f64().max(1e-9))
            .collect(),
    );
    // The tail's cost counts only if it carried the load's calls: about one
    // event per request (wrk's requests are its rate times the duration).
    let requests: f64 = tailed.iter().map(|l| l.rps * duration.as_secs_f64()).sum();
    let carried = tail_events as f64 >= 0.9 * requests;
    let (uncounted, counted, tailed) = (median_load(&uncounted), median_load(&counted), median_load(&tailed));
    load_row(report, &format!("10 echo, usage not counted (median of {rounds})"), &uncounted);
    load_row(report, &format!("10 echo, usage counted (median of {rounds})"), &counted);
    load_row(report, &format!("10 echo, usage counted, a live tail attached (median of {rounds})"), &tailed);
    let met = (!opts.smoke).then_some(ratio >= 0.95);
    report.row(
        "10 usage counted ÷ not",
        &format!("requests/s (median of {rounds} alternating rounds' ratios)"),
        format!("{ratio:.2} (rounds {each})"),
        "≥ 0.95",
        met,
    );
    let met = (!opts.smoke && carried).then_some(growth <= 1.10);
    report.row(
        "10 p99 with a tail ÷ without",
        &format!("echo p99 (median of {rounds} alternating rounds' ratios)"),
        format!("{growth:.2} (rounds {each_growth})"),
        "≤ 1.10",
        met,
    );
    report.note(format!(
        "arm 10: the tails received {tail_events} call events while wrk made about {requests:.0} requests{}",
        if carried { "" } else { " — too few: the tail's cost is not judged" }
    ));
    Ok(())
}

/// A live tail of the console, read as fast as it comes.
struct Tail {
    reader: tokio::task::JoinHandle<()>,
    events: Arc<std::sync::atomic::AtomicU64>,
}

impl Tail {
    async fn attach(base: &str) -> anyhow::Result<Tail> {
        let mut response = client()
            .get(format!("{base}/admin/logs"))
            .header("Accept", "text/event-stream")
            .send()
            .await?
            .error_for_status()?;
        let events = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let counted = events.clone();
        let reader = tokio::spawn(async move {
            // Counted, not parsed: a tail's reader is usually on another
            // machine, and here it shares the server's two cores. The
            // last bytes of a chunk are kept: an event's name may be split
            // between two chunks.
            let name = memchr::memmem::Finder::new(b"event: call");
            let mut carry: Vec<u8> = Vec::new();
            while let Ok(Some(chunk)) = response.chunk().await {
                carry.extend_from_slice(&chunk);
                let calls = name.find_iter(&carry).count() as u64;
                counted.fetch_add(calls, std::sync::atomic::Ordering::Relaxed);
                carry.drain(..carry.len().saturating_sub(10));
            }
        });
        Ok(Tail { reader, events })
    }

    /// Hangs up; how many call events arrived.
    fn detach(self) -> u64 {
        self.reader.abort();
        self.events.load(std::sync::atomic::Ordering::Relaxed)
    }
}
