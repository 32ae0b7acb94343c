//! Plinth's benchmark harness (`make bench`; `make bench-smoke` in CI).
//!
//! Every arm runs in one process, one after the other, on 127.0.0.1, and
//! the table compares arms measured in the same run: absolute numbers move
//! between runs on a shared machine, ratios much less. End-to-end arms drive
//! the real `plinth` binary over real HTTP with `wrk` (a separate process,
//! keep-alive, fixed concurrency); each server gets 2 s of the same load
//! before it is measured (`measure::warm_up`), and arm 1 reports what those
//! first seconds of a fresh server measured. In-process arms time a loop and report the
//! median and p99 of the iterations (criterion's statistics would not fit in
//! one table with the HTTP arms; a plain loop of thousands of iterations is
//! enough for medians of microsecond operations).

mod accounts;
mod arms;
mod backends;
mod density;
mod fleet;
mod measure;

/// The server's allocator (`host/src/main.rs`): the in-process arms time
/// Plinth's runtime, and what they time includes its allocations.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::path::PathBuf;

/// What the harness needs to find and how long to run.
pub struct Opts {
    /// Short runs and few tools: checks the harness still works (CI).
    pub smoke: bool,
    /// The `plinth` binary.
    pub plinth: PathBuf,
    /// The `fake-weather` binary.
    pub fake_weather: PathBuf,
    /// Packed example tools.
    pub plugins: PathBuf,
    /// Packed fixtures (the misbehaving tools).
    pub fixtures: PathBuf,
    /// The repository's `wit/` folder (to generate tools).
    pub wit: PathBuf,
    /// The pinned Python and JavaScript toolchains (`make toolchains`).
    pub toolchains: PathBuf,
    /// Where the density arm keeps the tools it generated and built, between
    /// runs (building them takes minutes).
    pub density_cache: PathBuf,
    /// Where to write the report.
    pub out: Option<PathBuf>,
    /// The peer arm: `wasmtime` (wasmtime-cli, the same wasmtime version)
    /// and the wasi:http echo component it serves. `make bench` builds
    /// both; without them (`make bench-smoke`) the arm is skipped, and the
    /// report says so.
    pub peer: Option<Peer>,
    /// Another build of Plinth to compare this one with (arm 11, which runs
    /// only when it is given).
    pub baseline: Option<PathBuf>,
    /// Only these arms (`--arm N`, repeatable; none: every arm). A report
    /// of some arms is for looking at, never committed.
    pub arms: Vec<u32>,
}

/// What the peer arm runs.
pub struct Peer {
    /// The `wasmtime` binary.
    pub wasmtime: PathBuf,
    /// `bench/peer-echo`, built for wasm32-wasip2.
    pub echo: PathBuf,
}

impl Opts {
    fn parse() -> anyhow::Result<Opts> {
        let mut args = std::env::args().skip(1);
        let mut opts = Opts {
            smoke: false,
            plinth: "target/release/plinth".into(),
            fake_weather: "target/release/fake-weather".into(),
            plugins: "target/plugins".into(),
            fixtures: "target/fixtures".into(),
            wit: "wit".into(),
            toolchains: "target/toolchains".into(),
            density_cache: "target/bench-density".into(),
            out: None,
            peer: None,
            baseline: None,
            arms: Vec::new(),
        };
        let (mut wasmtime, mut peer_echo) = (None, None);
        while let Some(arg) = args.next() {
            let mut value = || args.next().ok_or_else(|| anyhow::anyhow!("{arg} needs a value"));
            match arg.as_str() {
                "--smoke" => opts.smoke = true,
                "--plinth" => opts.plinth = value()?.into(),
                "--fake-weather" => opts.fake_weather = value()?.into(),
                "--plugins" => opts.plugins = value()?.into(),
                "--fixtures" => opts.fixtures = value()?.into(),
                "--wit" => opts.wit = value()?.into(),
                "--toolchains" => opts.toolchains = value()?.into(),
                "--out" => opts.out = Some(value()?.into()),
                "--wasmtime" => wasmtime = Some(value()?.into()),
                "--peer-echo" => peer_echo = Some(value()?.into()),
                "--baseline" => opts.baseline = Some(value()?.into()),
                "--arm" => opts.arms.push(value()?.parse()?),
                other => anyhow::bail!("unknown argument {other}"),
            }
        }
        anyhow::ensure!(
            opts.arms.is_empty() || opts.out.is_none(),
            "--arm runs some arms only: their report is for looking at, not for --out"
        );
        opts.peer = match (wasmtime, peer_echo) {
            (Some(wasmtime), Some(echo)) => Some(Peer { wasmtime, echo }),
            (None, None) => None,
            _ => anyhow::bail!("--wasmtime and --peer-echo go together"),
        };
        Ok(opts)
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let opts = Opts::parse()?;
    let mut report = measure::Report::new(&opts);
    let runs = |arm: u32| opts.arms.is_empty() || opts.arms.contains(&arm);
    if runs(1) {
        arms::http_overhead(&opts, &mut report).await?;
    }
    if runs(2) {
        arms::in_process(&opts, &mut report).await?;
        arms::conditions(&opts, &mut report).await?;
        arms::slot_reset_cost(&opts, &mut report).await?;
    }
    if runs(3) {
        arms::enumeration_and_start(&opts, &mut report).await?;
    }
    if runs(4) {
        arms::deploy(&opts, &mut report).await?;
    }
    if runs(5) {
        arms::under_faults(&opts, &mut report).await?;
    }
    if runs(6) {
        arms::busy_neighbour(&opts, &mut report).await?;
    }
    if runs(7) {
        arms::languages(&opts, &mut report).await?;
    }
    if runs(8) {
        fleet::fleet(&opts, &mut report).await?;
    }
    if runs(9) {
        arms::observability(&opts, &mut report).await?;
    }
    if runs(10) {
        arms::console_cost(&opts, &mut report).await?;
    }
    if runs(12) {
        density::density(&opts, &mut report).await?;
    }
    if runs(13) {
        accounts::accounts(&opts, &mut report).await?;
    }
    if runs(14) {
        backends::backend_calls(&opts, &mut report).await?;
    }
    if let Some(baseline) = &opts.baseline
        && runs(11)
    {
        arms::against_baseline(&opts, baseline, &mut report).await?;
    }
    let mut text = report.render();
    // The hand-written analysis of the targets (what was profiled, what was
    // found) travels with every generated report.
    if let Ok(analysis) = std::fs::read_to_string("bench/ANALYSIS.md") {
        text.push('\n');
        text.push_str(&analysis);
    }
    println!("{text}");
    if let Some(out) = &opts.out {
        std::fs::write(out, &text)?;
        eprintln!("written to {}", out.display());
    }
    Ok(())
}
