//! Timing helpers, the servers under test, `wrk`, and the report.

use crate::Opts;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Median and p99 of a set of durations.
#[derive(Debug, Clone, Copy)]
pub struct Summary {
    /// The median.
    pub p50: Duration,
    /// The 99th percentile.
    pub p99: Duration,
}

impl Summary {
    /// Summarises samples (which it sorts).
    pub fn of(samples: &mut [Duration]) -> Summary {
        samples.sort();
        let at = |q: f64| samples[((samples.len() as f64 - 1.0) * q).round() as usize];
        Summary { p50: at(0.5), p99: at(0.99) }
    }
}

/// Times `iterations` runs of `f`.
pub async fn time_each<F, Fut>(iterations: usize, mut f: F) -> anyhow::Result<Summary>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<()>>,
{
    let mut samples = Vec::with_capacity(iterations);
    for _ in 0..iterations {
        let started = Instant::now();
        f().await?;
        samples.push(started.elapsed());
    }
    Ok(Summary::of(&mut samples))
}

/// Formats a duration in µs or ms.
pub fn fmt(d: Duration) -> String {
    let us = d.as_secs_f64() * 1e6;
    if us < 1000.0 { format!("{us:.1} µs") } else { format!("{:.2} ms", us / 1000.0) }
}

/// A running `plinth serve` (or other server printing its address).
pub struct Server {
    child: Child,
    /// `http://127.0.0.1:PORT`
    pub base: String,
    /// How long from spawn to the listening line.
    pub started_in: Duration,
}

/// The operator key the benchmark's servers are started with; every request
/// the harness sends carries it.
pub const BENCH_KEY: &str = "plinth-bench-operator-key";

/// An HTTP client that sends [`BENCH_KEY`].
pub fn client() -> reqwest::Client {
    let mut headers = reqwest::header::HeaderMap::new();
    if let Ok(value) = format!("Bearer {BENCH_KEY}").parse() {
        headers.insert(reqwest::header::AUTHORIZATION, value);
    }
    reqwest::Client::builder().default_headers(headers).build().unwrap_or_default()
}

/// Lifts the default tenant's invocation-rate quota: the load arms measure
/// the server, not the quota (which is still checked on every call).
pub async fn unthrottle(base: &str) -> anyhow::Result<()> {
    let quotas = serde_json::json!({ "quotas": { "invocationsPerSecond": 1_000_000_000u64, "invocationBurst": 1_000_000_000u64 } });
    let response = client().patch(format!("{base}/admin/tenants/default")).json(&quotas).send().await?;
    anyhow::ensure!(response.status().is_success(), "lifting the rate quota answered {}", response.status());
    Ok(())
}

impl Server {
    /// Starts `plinth serve` with a free port.
    pub fn plinth(opts: &Opts, data: &Path, args: &[&str]) -> anyhow::Result<Server> {
        Server::plinth_with_env(opts, data, args, &[])
    }

    /// [`Server::plinth`] with extra environment (a fleet replica's).
    pub fn plinth_with_env(opts: &Opts, data: &Path, args: &[&str], env: &[(&str, &str)]) -> anyhow::Result<Server> {
        Server::plinth_binary(&opts.plinth, data, args, env)
    }

    /// [`Server::plinth_with_env`] with another build of Plinth.
    pub fn plinth_binary(binary: &Path, data: &Path, args: &[&str], env: &[(&str, &str)]) -> anyhow::Result<Server> {
        let mut command = Command::new(binary);
        command
            .args(["serve", "--listen", "127.0.0.1:0", "--data"])
            .arg(data)
            .args(args)
            .env("PLINTH_LOG", "warn")
            .env("PLINTH_OPERATOR_KEY", BENCH_KEY)
            .envs(env.iter().copied());
        Server::spawn(command, "plinth listening on ")
    }

    /// Starts the stand-in weather service on a free port.
    pub fn fake_weather(opts: &Opts) -> anyhow::Result<Server> {
        let mut command = Command::new(&opts.fake_weather);
        command.arg("127.0.0.1:0");
        Server::spawn(command, "fake weather service listening on ")
    }

    /// Starts `wasmtime serve` on `component` with a free port, as an
    /// operator would run it: its defaults (a fresh instance per request,
    /// from the pooling allocator), plus the WASI CLI interfaces Rust's
    /// standard library imports.
    pub fn wasmtime_serve(wasmtime: &Path, component: &Path, tuned: bool) -> anyhow::Result<Server> {
        let mut command = Command::new(wasmtime);
        command.args(["serve", "-Scli", "--addr", "127.0.0.1:0"]);
        if tuned {
            // What Plinth runs its pool with (runtime::RuntimeConfig's
            // defaults): up to 1 MiB of each freed slot's memory and table
            // kept resident, the written pages found with PAGEMAP_SCAN and
            // reset in place (the peer's published scan skips pages in swap
            // and stops after 32 runs of written pages; Plinth's patched one
            // does neither: docs/sandbox.md), and a deadline (Plinth's is
            // 5 s; the peer's timeout is epoch checks, as Plinth's).
            command.args([
                "-O",
                "pooling-allocator=y",
                "-O",
                "pooling-memory-keep-resident=1048576",
                "-O",
                "pooling-table-keep-resident=1048576",
                "-O",
                "pooling-pagemap-scan=auto",
                "-W",
                "timeout=5s",
            ]);
        }
        command.arg(component);
        // It says where it listens on stderr: `Serving HTTP on http://…/`.
        let mut server = Server::spawn_reading(command, "Serving HTTP on ", Output::Stderr)?;
        server.base = server.base.trim_end_matches('/').to_string();
        Ok(server)
    }

    fn spawn(command: Command, prefix: &str) -> anyhow::Result<Server> {
        Server::spawn_reading(command, prefix, Output::Stdout)
    }

    /// Spawns `command` and waits for the line on `output` that starts with
    /// `prefix` and ends with the server's URL.
    fn spawn_reading(mut command: Command, prefix: &str, output: Output) -> anyhow::Result<Server> {
        let started = Instant::now();
        let (stdout, stderr) = match output {
            Output::Stdout => (Stdio::piped(), Stdio::null()),
            Output::Stderr => (Stdio::null(), Stdio::piped()),
        };
        let mut child = command.stdout(stdout).stderr(stderr).spawn()?;
        let read: Box<dyn std::io::Read + Send> = match output {
            Output::Stdout => Box::new(child.stdout.take().ok_or_else(|| anyhow::anyhow!("no stdout"))?),
            Output::Stderr => Box::new(child.stderr.take().ok_or_else(|| anyhow::anyhow!("no stderr"))?),
        };
        let mut lines = BufReader::new(read).lines();
        let base = loop {
            match lines.next() {
                Some(Ok(line)) => {
                    if let Some(url) = line.strip_prefix(prefix) {
                        break url.to_string();
                    }
                }
                _ => anyhow::bail!("{:?} exited before it listened", command.get_program()),
            }
        };
        let started_in = started.elapsed();
        // Keep draining the output so the server never blocks on it.
        std::thread::spawn(move || for _ in lines {});
        Ok(Server { child, base, started_in })
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Resident memory, in KiB.
    pub fn resident_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap_or_default();
        status
            .lines()
            .find(|l| l.starts_with("VmRSS:"))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Which of a server's outputs says where it listens.
enum Output {
    Stdout,
    Stderr,
}

/// What `wrk` measured.
#[derive(Debug, Clone, Copy)]
pub struct Load {
    /// Requests per second.
    pub rps: f64,
    /// Latency percentiles.
    pub latency: Summary,
    /// Responses that were not 2xx, plus socket errors.
    pub errors: u64,
}

/// Runs `wrk` against `url`, POSTing `body` (JSON) when given.
pub fn wrk(url: &str, body: Option<&str>, duration: Duration, connections: u32) -> anyhow::Result<Load> {
    wrk_with_headers(url, body, &[], duration, connections)
}

/// [`wrk`] POSTing `bodies` (JSON) in turn, one per request: a mix of
/// calls (arm 10's good and refused ones).
pub fn wrk_mix(url: &str, bodies: &[&str], duration: Duration, connections: u32) -> anyhow::Result<Load> {
    anyhow::ensure!(!bodies.is_empty() && bodies.iter().all(|b| !b.contains("]=]")), "bodies wrk cannot send");
    let listed: Vec<String> = bodies.iter().map(|b| format!("[=[{b}]=]")).collect();
    let script = format!(
        "local bodies = {{ {} }}\nlocal i = 0\nrequest = function()\n  i = i % #bodies + 1\n  return wrk.format(nil, nil, nil, bodies[i])\nend\n",
        listed.join(", ")
    );
    wrk_scripted(url, Some(bodies[0]), &[], &script, duration, connections)
}

/// The load before a server is measured: a fresh server spends its first
/// seconds faulting in its instance slots and growing its allocator's
/// arenas, which is not what it costs per call afterwards. The same load as
/// the measurement, for 2 s (1 s in smoke mode); what it measured is
/// returned, for the report to show.
pub fn warm_up(url: &str, body: Option<&str>, headers: &[(&str, &str)], smoke: bool) -> anyhow::Result<Load> {
    let duration = Duration::from_secs(if smoke { 1 } else { 2 });
    wrk_with_headers(url, body, headers, duration, crate::arms::CONNECTIONS)
}

/// [`wrk`], sending `headers` (names and values without quotes or
/// backslashes) with every request as well.
pub fn wrk_with_headers(
    url: &str,
    body: Option<&str>,
    headers: &[(&str, &str)],
    duration: Duration,
    connections: u32,
) -> anyhow::Result<Load> {
    wrk_scripted(url, body, headers, "", duration, connections)
}

/// [`wrk_with_headers`] with more Lua after the settings (`extra`).
fn wrk_scripted(
    url: &str,
    body: Option<&str>,
    headers: &[(&str, &str)],
    extra: &str,
    duration: Duration,
    connections: u32,
) -> anyhow::Result<Load> {
    let script = tempfile::Builder::new().suffix(".lua").tempfile()?;
    let mut lua = format!("wrk.headers[\"Authorization\"] = \"Bearer {BENCH_KEY}\"\n");
    if let Some(body) = body {
        lua.push_str(&format!(
            "wrk.method = \"POST\"\nwrk.body = [=[{body}]=]\nwrk.headers[\"Content-Type\"] = \"application/json\"\n"
        ));
    }
    for (name, value) in headers {
        anyhow::ensure!(
            !format!("{name}{value}").contains(['"', '\\', '\n']),
            "wrk header {name} cannot be written into the script"
        );
        lua.push_str(&format!("wrk.headers[\"{name}\"] = \"{value}\"\n"));
    }
    lua.push_str(extra);
    std::fs::write(script.path(), lua)?;
    let out = Command::new("wrk")
        .args(["-t1", &format!("-c{connections}"), &format!("-d{}s", duration.as_secs().max(1)), "--latency"])
        .arg("-s")
        .arg(script.path())
        .arg(url)
        .output()
        .map_err(|e| anyhow::anyhow!("running wrk ({e}); install it with `apt-get install wrk`"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let value = |prefix: &str| -> Option<String> {
        text.lines().map(str::trim).find(|l| l.starts_with(prefix)).map(|l| l[prefix.len()..].trim().to_string())
    };
    let latency = |q: &str| {
        value(q).and_then(|v| parse_duration(&v)).ok_or_else(|| anyhow::anyhow!("wrk printed no {q}: {text}"))
    };
    let errors = value("Non-2xx or 3xx responses:").and_then(|v| v.parse().ok()).unwrap_or(0)
        + value("Socket errors:")
            .map_or(0, |v| v.split(|c: char| !c.is_ascii_digit()).filter_map(|n| n.parse::<u64>().ok()).sum());
    Ok(Load {
        rps: value("Requests/sec:")
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| anyhow::anyhow!("wrk printed no rate: {text}"))?,
        latency: Summary { p50: latency("50%")?, p99: latency("99%")? },
        errors,
    })
}

impl Report {
    /// "Where the time goes": an echo call at one connection (p50), from the
    /// HTTP arms' end-to-end latencies and the stages timed alone. Plinth's
    /// extra over the native handler is its stages the native one does not
    /// have (auth, instantiate, call, output; both parse, validate and
    /// serialise), and what is left: routing, middleware, quotas, the
    /// answer's headers, scheduling.
    fn time_table(&self) -> String {
        let door = |name: &str| self.one_connection.iter().find(|(d, _)| *d == name).map(|(_, p50)| *p50);
        let (Some(native), Some(a2t)) = (door("native"), door("A2T")) else { return String::new() };
        if self.stages.is_empty() {
            return String::new();
        }
        let mut out = String::from(
            "\n## Where the time goes\n\nAn echo call at one connection (no queueing), p50. End-to-end rows come from \
             arm 1; stages were timed alone in process (arm 2), so they are costs, not a partition that sums exactly.\n\n\
             | stage | time |\n| --- | --- |\n",
        );
        out.push_str(&format!(
            "| HTTP round trip with the native handler (wrk, loopback TCP, hyper, axum; its own parse, validate, serialise) | {} |\n",
            fmt(native)
        ));
        let mut extra = Duration::ZERO;
        for (stage, took) in &self.stages {
            out.push_str(&format!("| {stage} | {} |\n", fmt(*took)));
            let native_does_it = ["parse", "validate", "serialise", "hand-off"].iter().any(|s| stage.starts_with(s));
            if !native_does_it {
                extra += *took;
            }
        }
        out.push_str(&format!("| **Plinth A2T echo, end to end** | **{}** |\n", fmt(a2t)));
        // p50s of separate loads do not subtract exactly: when the stages sum
        // to more than the whole difference, the rest is below what this
        // table can resolve, and says so rather than printing a zero.
        let rest = a2t.saturating_sub(native).checked_sub(extra).map_or_else(
            || format!("not resolved (the stages alone sum to {}, more than Plinth − native)", fmt(extra)),
            fmt,
        );
        out.push_str(&format!(
            "| of which not in the rows above (routing, middleware, quotas, log span, answer headers, scheduling) | {rest} |\n"
        ));
        for (name, what) in [("OTC", "request and answer envelopes"), ("MCP", "JSON-RPC envelope, the direct lane")] {
            if let Some(p50) = door(name) {
                let delta = p50.as_secs_f64() - a2t.as_secs_f64();
                out.push_str(&format!(
                    "| {name} door over A2T ({what}); {name} end to end {} | {:+.1} µs |\n",
                    fmt(p50),
                    delta * 1e6
                ));
            }
        }
        out
    }
}

/// `345.00us`, `1.20ms`, `2.00s` → a duration.
fn parse_duration(text: &str) -> Option<Duration> {
    let split = text.find(|c: char| c.is_ascii_alphabetic())?;
    let (number, unit) = text.split_at(split);
    let number: f64 = number.parse().ok()?;
    let seconds = match unit {
        "us" => number / 1e6,
        "ms" => number / 1e3,
        "s" => number,
        "m" => number * 60.0,
        _ => return None,
    };
    Some(Duration::from_secs_f64(seconds))
}

/// One row of the results table.
struct Row {
    arm: String,
    metric: String,
    value: String,
    target: String,
    met: Option<bool>,
}

/// The results table and notes.
pub struct Report {
    rows: Vec<Row>,
    notes: Vec<String>,
    header: String,
    /// Stages of an echo call timed alone in process (p50).
    stages: Vec<(String, Duration)>,
    /// One-connection p50 of echo per door (`native`, `A2T`, `OTC`, `MCP`).
    one_connection: Vec<(&'static str, Duration)>,
}

impl Report {
    /// An empty report describing this machine and command.
    pub fn new(opts: &Opts) -> Report {
        let cpu = std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|c| {
                c.lines()
                    .find(|l| l.starts_with("model name"))
                    .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
            })
            .unwrap_or_else(|| "unknown".into());
        let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
        let date = Command::new("date")
            .arg("-u")
            .arg("+%Y-%m-%d %H:%M UTC")
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_default();
        let command: Vec<String> = std::env::args().collect();
        let mode = if opts.smoke { "smoke (short runs, few tools: the numbers are not meaningful)" } else { "full" };
        Report {
            rows: Vec::new(),
            notes: Vec::new(),
            stages: Vec::new(),
            one_connection: Vec::new(),
            header: format!(
                "# Plinth benchmark results\n\n- date: {date}\n- machine: {cores} cores, {cpu}\n- mode: {mode}\n- command: `make bench` → `{}`\n",
                command.join(" ")
            ),
        }
    }

    /// Adds a row; `met` compares with the target when there is one.
    pub fn row(&mut self, arm: &str, metric: &str, value: String, target: &str, met: Option<bool>) {
        eprintln!("{arm} | {metric} | {value}");
        self.rows.push(Row { arm: arm.into(), metric: metric.into(), value, target: target.into(), met });
    }

    /// Records a stage of an echo call, timed alone (for the "where the
    /// time goes" table).
    pub fn stage(&mut self, stage: &str, took: Duration) {
        eprintln!("stage | {stage} | {}", fmt(took));
        self.stages.push((stage.into(), took));
    }

    /// Records a door's one-connection p50 of echo.
    pub fn one_connection(&mut self, door: &'static str, p50: Duration) {
        self.one_connection.push((door, p50));
    }

    /// Adds a note under the table.
    pub fn note(&mut self, text: String) {
        self.notes.push(text);
    }

    /// The markdown report.
    pub fn render(&self) -> String {
        let mut out = self.header.clone();
        out.push_str("\n| arm | metric | value | target | met |\n| --- | --- | --- | --- | --- |\n");
        for r in &self.rows {
            let met = match r.met {
                Some(true) => "yes",
                Some(false) => "**no**",
                None => "",
            };
            out.push_str(&format!("| {} | {} | {} | {} | {} |\n", r.arm, r.metric, r.value, r.target, met));
        }
        out.push_str(&self.time_table());
        if !self.notes.is_empty() {
            out.push_str("\n## Notes\n\n");
            for n in &self.notes {
                out.push_str(&format!("- {n}\n"));
            }
        }
        out
    }
}
