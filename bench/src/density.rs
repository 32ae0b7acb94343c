//! Arm 12, "density": ten thousand versions on one node.
//!
//! What is deployed (the smoke run deploys a few dozen):
//! - Python and JavaScript: [`SOURCES`] genuinely different tools per
//!   language, generated here — each its own WIT world (other field names,
//!   docs and package) and its own code (another operation on the words it
//!   is given) — and built with `plinth pack` and the pinned toolchains
//!   (`make toolchains`). Each is deployed into every one of [`TENANTS`]
//!   tenants: the same bytes in many tenants, as a vendor's tool is.
//! - Rust: the example echo, relabeled [`RUST_BUILDS`] times (each other
//!   bytes, and so another sha256 and another compilation), each deployed
//!   as a version of echo into [`RUST_TENANTS`] tenants.
//!
//! Measured, each against the target: the server's anonymous memory
//! with every version idle (and its file-backed memory, from
//! `/proc/PID/smaps_rollup`), a restart to serving all of them, deploying a
//! new Python tool when the compile cache has seen another (and the first,
//! cold), the first call of versions idle since the restart, the memory
//! compiling one JavaScript and one Python tool leaves, and the memory the
//! same tool costs in 8 more tenants.

use crate::Opts;
use crate::measure::{Report, Server, client, fmt};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

const ARM: &str = "12 density";
/// Distinct Python tools, and distinct JavaScript tools.
const SOURCES: usize = 20;
/// Tenants each Python and JavaScript tool is deployed into.
const TENANTS: usize = 25;
/// Distinct builds of the Rust echo.
const RUST_BUILDS: usize = 1000;
/// Tenants each Rust build is deployed into.
const RUST_TENANTS: usize = 9;
/// Deploys sent at once (the server's default `--max-concurrent-deploys`).
const DEPLOYS_AT_ONCE: usize = 2;

/// Words that make each generated tool's names its own.
const WORDS: [&str; 20] = [
    "alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet", "kilo", "lima",
    "mike", "november", "oscar", "papa", "quebec", "romeo", "sierra", "tango",
];

#[derive(Clone, Copy, PartialEq)]
enum Lang {
    Python,
    JavaScript,
}

impl Lang {
    fn short(self) -> &'static str {
        match self {
            Lang::Python => "py",
            Lang::JavaScript => "js",
        }
    }
}

/// One generated tool: its name and the input field its text goes in.
struct Generated {
    name: String,
    field: String,
    bytes: Vec<u8>,
}

/// The WIT world of generated tool `i` in `lang`.
fn world(lang: Lang, i: usize) -> String {
    let word = WORDS[i % WORDS.len()];
    let short = lang.short();
    format!(
        "package bench-{short}:{word};\n\n\
         /// Generated {short} tool `{word}` (number {i}) for the density benchmark: it works on the\n\
         /// words of a text in its own way.\n\
         world {short}-{word} {{\n\
         \x20   use plinth:tool/types@0.1.0.{{tool-error}};\n\n\
         \x20   record input {{\n\
         \x20       /// The words for `{word}` to work on.\n\
         \x20       text-{word}: string,\n\
         \x20       /// How many times `{word}` repeats its answer.\n\
         \x20       times-{word}: option<u8>,\n\
         \x20   }}\n\n\
         \x20   record output {{\n\
         \x20       /// What `{word}` made of them.\n\
         \x20       answer-{word}: string,\n\
         \x20       /// The answer's length.\n\
         \x20       size: u32,\n\
         \x20   }}\n\n\
         \x20   export call: func(input: input) -> result<output, tool-error>;\n\
         }}\n"
    )
}

/// What generated tool `i` does to its words, in Python.
fn python_source(i: usize) -> String {
    let word = WORDS[i % WORDS.len()];
    let operation = match i % 5 {
        0 => format!("answer = ' '.join(reversed(words)) + ' {i}'"),
        1 => "answer = ' '.join(w.upper() for w in words)".to_string(),
        2 => format!("answer = str(sum(len(w) for w in words) * {})", i + 1),
        3 => "answer = ','.join(sorted(set(words)))".to_string(),
        _ => format!("answer = '-'.join(w[::-1] for w in words if len(w) > {})", i % 3),
    };
    format!(
        "\"\"\"Generated tool `{word}` for the density benchmark.\"\"\"\n\n\
         import wit_world\n\
         from wit_world import Input, Output\n\n\n\
         class WitWorld(wit_world.WitWorld):\n\
         \x20   def call(self, input: Input) -> Output:\n\
         \x20       words = input.text_{word}.split()\n\
         \x20       {operation}\n\
         \x20       answer = answer * (input.times_{word} or 1)\n\
         \x20       return Output(answer_{word}=answer, size=len(answer))\n"
    )
}

/// What generated tool `i` does to its words, in JavaScript.
fn javascript_source(i: usize) -> String {
    let word = WORDS[i % WORDS.len()];
    let camel = format!("{}{}", word[..1].to_uppercase(), &word[1..]);
    let operation = match i % 5 {
        0 => format!("words.reverse().join(' ') + ' {i}'"),
        1 => "words.map((w) => w.toUpperCase()).join(' ')".to_string(),
        2 => format!("String(words.reduce((n, w) => n + w.length, 0) * {})", i + 1),
        3 => "[...new Set(words)].sort().join(',')".to_string(),
        _ => format!("words.filter((w) => w.length > {}).map((w) => [...w].reverse().join('')).join('-')", i % 3),
    };
    format!(
        "// Generated tool `{word}` for the density benchmark.\n\n\
         export function call(input) {{\n\
         \x20 const words = input.text{camel}.split(/\\s+/).filter((w) => w.length > 0);\n\
         \x20 const answer = ({operation}).repeat(input.times{camel} ?? 1);\n\
         \x20 return {{ answer{camel}: answer, size: answer.length }};\n\
         }}\n"
    )
}

/// Builds (or takes from `cache`, keyed by its sources) generated tool `i`.
fn generated(opts: &Opts, lang: Lang, i: usize) -> anyhow::Result<Generated> {
    let word = WORDS[i % WORDS.len()];
    let world_text = world(lang, i);
    let (file, code, language) = match lang {
        Lang::Python => ("app.py", python_source(i), "python"),
        Lang::JavaScript => ("tool.js", javascript_source(i), "js"),
    };
    let name = format!("{}_{word}", lang.short());
    let field = format!("text_{word}");
    let key = plinth::digest::sha256_hex(format!("{world_text}\n{code}\n{language}").as_bytes());
    let cache = opts.density_cache.join(format!("{name}-{}.wasm", &key[..16]));
    if let Ok(bytes) = std::fs::read(&cache) {
        return Ok(Generated { name, field, bytes });
    }
    let dir = tempfile::tempdir()?;
    let wit = dir.path().join("wit");
    std::fs::create_dir_all(wit.join("deps"))?;
    std::fs::write(wit.join("world.wit"), &world_text)?;
    let repo_wit = std::fs::canonicalize(&opts.wit)?;
    std::os::unix::fs::symlink(repo_wit.join("deps/config"), wit.join("deps/config"))?;
    std::os::unix::fs::symlink(&repo_wit, wit.join("deps/plinth-tool"))?;
    std::fs::write(dir.path().join(file), code)?;
    std::fs::write(dir.path().join("plinth.toml"), format!("language = \"{language}\"\n"))?;
    std::fs::create_dir_all(&opts.density_cache)?;
    let toolchains = std::fs::canonicalize(&opts.toolchains)?;
    let out = std::process::Command::new(&opts.plinth)
        .arg("pack")
        .arg(dir.path())
        .arg("-o")
        .arg(&cache)
        .env("PLINTH_COMPONENTIZE_PY", toolchains.join("venv/bin/componentize-py"))
        .env("PLINTH_NODE_MODULES", toolchains.join("node_modules"))
        .output()?;
    anyhow::ensure!(
        out.status.success(),
        "plinth pack of the generated {name} failed (make toolchains?): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(Generated { name, field, bytes: std::fs::read(&cache)? })
}

/// `(anonymous, file-backed)` resident memory of a process, in KiB.
fn memory_kib(server: &Server) -> (u64, u64) {
    let text = std::fs::read_to_string(format!("/proc/{}/smaps_rollup", server.pid())).unwrap_or_default();
    let field = |name: &str| {
        text.lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|n| n.parse::<u64>().ok())
            .unwrap_or(0)
    };
    let (rss, anonymous) = (field("Rss:"), field("Anonymous:"));
    (anonymous, rss.saturating_sub(anonymous))
}

fn mib(kib: u64) -> String {
    format!("{:.1} MiB", kib as f64 / 1024.0)
}

/// Deploys `bytes` into `tenant` → `(toolId, version)`.
async fn deploy(base: &str, tenant: &str, bytes: Vec<u8>) -> anyhow::Result<(String, u64)> {
    let prefix = if tenant == "default" { String::new() } else { format!("/t/{tenant}") };
    loop {
        let response = client()
            .post(format!("{base}{prefix}/admin/tools"))
            .header("content-type", "application/wasm")
            .body(bytes.clone())
            .send()
            .await?;
        let status = response.status();
        // Busy: every deploy slot is taken; wait as Retry-After says.
        if status == 503 {
            tokio::time::sleep(Duration::from_millis(200)).await;
            continue;
        }
        let body: Value = response.json().await?;
        anyhow::ensure!(status.is_success(), "deploying into {tenant} answered {status}: {body}");
        let id = body["toolId"].as_str().unwrap_or_default().to_string();
        return Ok((id, body["version"].as_u64().unwrap_or(0)));
    }
}

/// Creates `name` with room for the arm's versions and calls.
async fn create_tenant(base: &str, name: &str) -> anyhow::Result<()> {
    let quotas = json!({
        "maxTools": 1000, "maxVersionsPerTool": 5000,
        "invocationsPerSecond": 1_000_000, "invocationBurst": 1_000_000,
    });
    let body = if name == "default" {
        let response =
            client().patch(format!("{base}/admin/tenants/default")).json(&json!({ "quotas": quotas })).send().await?;
        anyhow::ensure!(response.status().is_success(), "updating the default tenant answered {}", response.status());
        return Ok(());
    } else {
        json!({ "name": name, "quotas": quotas })
    };
    let response = client().post(format!("{base}/admin/tenants")).json(&body).send().await?;
    anyhow::ensure!(response.status().is_success(), "creating tenant {name} answered {}", response.status());
    Ok(())
}

/// Calls version `version` (None: the current one) of a tool with `text`
/// in `field` → how long it took.
async fn call(
    base: &str,
    tenant: &str,
    (id, name): (&str, &str),
    version: Option<u64>,
    field: &str,
) -> anyhow::Result<Duration> {
    let prefix = if tenant == "default" { String::new() } else { format!("/t/{tenant}") };
    let path = match version {
        Some(v) => format!("{base}{prefix}/tools/{id}/versions/{v}:invoke"),
        None => format!("{base}{prefix}/tools/{id}:invoke"),
    };
    let body = json!({ "name": name, "input_parameters": [{ "name": field, "value": "the quick brown fox" }] });
    let started = Instant::now();
    let response = client().post(&path).json(&body).send().await?;
    let took = started.elapsed();
    let status = response.status();
    anyhow::ensure!(status == 200, "calling {path} answered {status}: {}", response.text().await.unwrap_or_default());
    Ok(took)
}

fn p50(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples.get(samples.len() / 2).copied().unwrap_or_default()
}

fn row(report: &mut Report, metric: &str, value: String, target: &str, met: Option<bool>) {
    report.row(ARM, metric, value, target, met);
}

pub async fn density(opts: &Opts, report: &mut Report) -> anyhow::Result<()> {
    let (sources, tenants, rust_builds, rust_tenants) =
        if opts.smoke { (2, 3, 20, 2) } else { (SOURCES, TENANTS, RUST_BUILDS, RUST_TENANTS) };
    // The tools, built before any server starts (cached between runs).
    let built = Instant::now();
    let mut python = Vec::new();
    let mut javascript = Vec::new();
    for i in 0..sources {
        python.push(Arc::new(generated(opts, Lang::Python, i)?));
        javascript.push(Arc::new(generated(opts, Lang::JavaScript, i)?));
    }
    eprintln!("{ARM}: {} generated tools ready in {}", 2 * sources, fmt(built.elapsed()));
    let echo = std::fs::read(opts.plugins.join("echo.wasm"))?;

    let data = tempfile::tempdir()?;
    let server = Server::plinth(opts, data.path(), &[])?;
    let base = server.base.clone();
    let tenant_names: Vec<String> =
        (0..tenants).map(|t| if t == 0 { "default".to_string() } else { format!("tenant-{t}") }).collect();
    for name in &tenant_names {
        create_tenant(&base, name).await?;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (empty_anonymous, _) = memory_kib(&server);

    // One JavaScript and one Python tool, cold: nothing compiled before.
    let started = Instant::now();
    deploy(&base, "default", javascript[0].bytes.clone()).await?;
    let js_cold = started.elapsed();
    let started = Instant::now();
    deploy(&base, "default", python[0].bytes.clone()).await?;
    let py_cold = started.elapsed();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (after_two, _) = memory_kib(&server);
    let over_empty = after_two.saturating_sub(empty_anonymous);
    row(
        report,
        "anonymous memory after compiling one JavaScript and one Python tool, over the empty server",
        mib(over_empty),
        "≤ 150 MiB",
        Some(over_empty <= 150 * 1024),
    );
    row(report, "deploy of the first Python tool, cold (POST → 201)", fmt(py_cold), "", None);
    row(report, "deploy of the first JavaScript tool, cold", fmt(js_cold), "", None);

    // Another Python tool, now that the compile cache has seen one.
    let started = Instant::now();
    deploy(&base, "default", python[1].bytes.clone()).await?;
    let py_warm = started.elapsed();
    let started = Instant::now();
    deploy(&base, "default", javascript[1].bytes.clone()).await?;
    let js_warm = started.elapsed();
    row(
        report,
        "deploy of a new, distinct Python tool when the cache has seen another",
        fmt(py_warm),
        "≤ 1.5 s",
        Some(py_warm <= Duration::from_millis(1500)),
    );
    row(report, "the same for a distinct JavaScript tool", fmt(js_warm), "", None);

    // The same Python tool in 8 more tenants.
    let more = tenant_names.iter().skip(1).take(8).collect::<Vec<_>>();
    let (before, _) = memory_kib(&server);
    for tenant in &more {
        deploy(&base, tenant, python[0].bytes.clone()).await?;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (after, _) = memory_kib(&server);
    let each = after.saturating_sub(before) / more.len().max(1) as u64;
    row(
        report,
        &format!("the same Python tool in {} more tenants: anonymous memory each", more.len()),
        mib(each),
        "≤ 2 MiB",
        Some(each <= 2 * 1024),
    );

    // Everything else, two deploys at a time.
    let mut jobs: Vec<(String, Arc<Vec<u8>>)> = Vec::new();
    for (t, tenant) in tenant_names.iter().enumerate() {
        for (i, tool) in python.iter().chain(&javascript).enumerate() {
            let done = t == 0 && (i == 0 || i == 1 || i == sources || i == sources + 1) || (i == 0 && t <= 8);
            if !done {
                jobs.push((tenant.clone(), Arc::new(tool.bytes.clone())));
            }
        }
    }
    for b in 0..rust_builds {
        let bytes = Arc::new(plinth::testing::relabeled(&echo, &format!("build {b}")));
        for tenant in tenant_names.iter().take(rust_tenants) {
            jobs.push((tenant.clone(), bytes.clone()));
        }
    }
    let total_versions = jobs.len() + 4 + more.len();
    let started = Instant::now();
    let jobs = Arc::new(std::sync::Mutex::new(jobs.into_iter()));
    let mut workers = Vec::new();
    for _ in 0..DEPLOYS_AT_ONCE {
        let (jobs, base) = (jobs.clone(), base.clone());
        workers.push(tokio::spawn(async move {
            loop {
                let next = jobs.lock().map_err(|_| anyhow::anyhow!("poisoned"))?.next();
                let Some((tenant, bytes)) = next else { return anyhow::Ok(()) };
                deploy(&base, &tenant, bytes.to_vec()).await?;
            }
        }));
    }
    for worker in workers {
        worker.await??;
    }
    let deploying = started.elapsed();
    row(
        report,
        &format!(
            "versions deployed: {total_versions} ({} Python and {} JavaScript from {sources} sources each, {} Rust from {rust_builds} builds), in",
            sources * tenants,
            sources * tenants,
            rust_builds * rust_tenants
        ),
        fmt(deploying),
        "",
        None,
    );
    let (linked_anonymous, linked_file) = memory_kib(&server);
    row(
        report,
        "memory with every version just deployed (linked): anonymous · file-backed",
        format!("{} · {}", mib(linked_anonymous), mib(linked_file)),
        "",
        None,
    );

    // Restart: how long until it serves every version, and what they cost
    // idle.
    let listed: Value = client().get(format!("{base}/tools?pageLimit=200")).send().await?.json().await?;
    let tools = listed["items"].as_array().cloned().unwrap_or_default();
    let rust_id =
        tools.iter().find(|t| t["name"] == "echo").and_then(|t| t["toolId"].as_str()).unwrap_or_default().to_string();
    let python_ids: Vec<(String, String, String)> = {
        python
            .iter()
            .filter_map(|p| {
                let tool = tools.iter().find(|t| t["name"] == p.name.as_str())?;
                Some((tool["toolId"].as_str()?.to_string(), p.name.clone(), p.field.clone()))
            })
            .collect()
    };
    anyhow::ensure!(!rust_id.is_empty() && python_ids.len() == sources, "the deployed tools are not all listed");
    drop(server);
    row(
        report,
        "compiled code on disk (every distinct component, and the compile cache)",
        mib(disk_bytes(&data.path().join("compiled")) / 1024),
        "",
        None,
    );
    let started = Instant::now();
    let server = Server::plinth(opts, data.path(), &[])?;
    let base = server.base.clone();
    loop {
        let ready = client().get(format!("{base}/ready")).send().await.map(|r| r.status() == 200).unwrap_or(false);
        if ready {
            break;
        }
        anyhow::ensure!(started.elapsed() < Duration::from_secs(120), "the restarted server never became ready");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let restart = started.elapsed();
    row(
        report,
        &format!("restart to serving all {total_versions} versions (spawn → /ready 200)"),
        fmt(restart),
        "≤ 5 s",
        Some(restart <= Duration::from_secs(5)),
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (idle_anonymous, idle_file) = memory_kib(&server);
    row(
        report,
        &format!("anonymous memory with all {total_versions} versions idle (after the restart)"),
        mib(idle_anonymous),
        "≤ 2 GiB",
        Some(idle_anonymous <= 2 * 1024 * 1024),
    );
    row(report, "file-backed resident memory then", mib(idle_file), "", None);

    // First calls of versions idle since the restart: Rust versions spread
    // over the builds, and each Python tool once.
    let mut rust_firsts = Vec::new();
    let step = (rust_builds / 50).max(1);
    for build in (0..rust_builds).step_by(step) {
        rust_firsts.push(call(&base, "default", (&rust_id, "echo"), Some(build as u64 + 1), "text").await?);
    }
    let mut python_firsts = Vec::new();
    for (id, name, field) in &python_ids {
        python_firsts.push(call(&base, "default", (id, name), None, field).await?);
    }
    let (rust_p50, python_p50) = (p50(rust_firsts.clone()), p50(python_firsts.clone()));
    row(
        report,
        &format!("first call of a Rust version idle since the restart, p50 of {}", rust_firsts.len()),
        fmt(rust_p50),
        "≤ 50 ms",
        Some(rust_p50 <= Duration::from_millis(50)),
    );
    row(
        report,
        &format!("first call of a Python version idle since the restart, p50 of {}", python_firsts.len()),
        fmt(python_p50),
        "≤ 300 ms",
        Some(python_p50 <= Duration::from_millis(300)),
    );
    let mut warm = Vec::new();
    for (id, name, field) in python_ids.iter().take(5) {
        warm.push(call(&base, "default", (id, name), None, field).await?);
    }
    row(report, "a Python call once linked (for comparison), p50", fmt(p50(warm)), "", None);
    Ok(())
}

/// The bytes of the files under `dir`.
fn disk_bytes(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
    entries
        .flatten()
        .map(|e| {
            let path: PathBuf = e.path();
            if path.is_dir() { disk_bytes(&path) } else { e.metadata().map(|m| m.len()).unwrap_or(0) }
        })
        .sum()
}
