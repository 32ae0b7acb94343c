//! The `plinth` command: `serve`, `pack` and `inspect`.

use anyhow::{Context, bail};
use clap::Parser;
use cli::{
    Allocator, CheqCommand, Cli, Command, ConnectionsCommand, KeyCommand, LogFormat, PackArgs, ProviderCommand,
    RegistryCommand, ServeArgs, SlotResetArg, TenantCommand, ToolsCommand, ToolsetCommand, TrustCommand,
};
use plinth::api;
use plinth::egress::OutboundLimits;
use plinth::host::{CheqOptions, HostLimits, HostOptions, JwksOptions, LoginOptions, ToolConfig, ToolHost};
use plinth::invocation::OutputLimits;
use plinth::manifest::ToolManifest;
use plinth::package::{self, ToolPackage};
use plinth::runtime::{RuntimeConfig, SlotReset};
use plinth::telemetry::SpanExport;
use plinth::tenancy::{DEFAULT_TENANT, Principal, Role, is_tenant_name};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

mod cli;
mod client;

/// mimalloc rather than glibc's malloc. Memory a tool thread allocates (a
/// call's answer) is often freed on an HTTP thread; glibc frees it under the
/// allocating thread's arena lock, so a tool thread preempted while it holds
/// that lock — a busy tool's, at a lower priority — stalled HTTP threads for
/// milliseconds (bench/ANALYSIS.md, arm 6). mimalloc hands such frees back
/// without a lock.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    if matches!(cli.command, Command::Inspect { .. } | Command::Diff { .. } | Command::Openapi) {
        // Commands that only print what they read from files end quietly,
        // like any Unix filter, when their reader goes (`plinth inspect x |
        // head`), instead of panicking in `println!` on a broken pipe. The
        // server and the network commands keep Rust's default (EPIPE is an
        // error they handle).
        // SAFETY: at the start of main, before any thread exists.
        unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    }
    let result = match cli.command {
        Command::Serve(args) => serve(*args),
        Command::New { name, lang, dir } => new_tool(&name, lang.into(), dir),
        Command::Pack(args) => pack(args),
        Command::Inspect { file } => inspect(&file),
        Command::Diff { old, new } => match client::diff(&old, &new) {
            Ok(true) => Ok(()),
            Ok(false) => return std::process::ExitCode::from(1),
            Err(e) => Err(e),
        },
        Command::CompileWorker { out, incremental } => plinth::runtime::run_worker(&out, incremental.as_deref()),
        Command::Openapi => {
            print!("{}", plinth::api::openapi::rendered());
            Ok(())
        }
        Command::Cheq { command: CheqCommand::Verify { file, jwks } } => match client::verify_cheq(&file, &jwks) {
            Ok(true) => Ok(()),
            Ok(false) => return std::process::ExitCode::from(1),
            Err(e) => Err(e),
        },
        Command::Deploy { source, expect_version, target } => client::deploy(&target, &source, expect_version),
        Command::Push { tool, reference, insecure, username } => push(&tool, &reference, insecure, username),
        Command::Logs { tool, version, outcome, level, follow, target } => {
            let query: Vec<(&str, String)> =
                [("tool", tool), ("version", version.map(|v| v.to_string())), ("outcome", outcome), ("level", level)]
                    .into_iter()
                    .filter_map(|(k, v)| v.map(|v| (k, v)))
                    .collect();
            client::logs(&target, &query, follow)
        }
        Command::Usage { tool, window, target } => {
            let query: Vec<(&str, String)> =
                [("tool", tool), ("window", window)].into_iter().filter_map(|(k, v)| v.map(|v| (k, v))).collect();
            client::usage(&target, &query)
        }
        Command::Trust { command } => match command {
            TrustCommand::Show { target } => client::show_trust(&target),
            TrustCommand::Set { require_signature, keys, scopes, target } => {
                client::set_trust(&target, require_signature, &keys, &scopes)
            }
            TrustCommand::Check { target } => match client::check_trust(&target) {
                Ok(true) => Ok(()),
                Ok(false) => return std::process::ExitCode::from(1),
                Err(e) => Err(e),
            },
        },
        Command::Registry { command } => match command {
            RegistryCommand::Login { registry, username, target } => {
                client::registry_login(&target, &registry, &username)
            }
            RegistryCommand::Logout { registry, target } => client::registry_logout(&target, &registry),
            RegistryCommand::List { target } => client::registry_list(&target),
        },
        Command::Provider { command } => match command {
            ProviderCommand::Set(args) => client::set_provider(&args),
            ProviderCommand::List { target } => client::list_providers(&target),
            ProviderCommand::Delete { id, target } => client::delete_provider(&target, &id),
        },
        Command::Connections { command } => match command {
            ConnectionsCommand::List { end_user, target } => client::list_connections(&target, &end_user),
            ConnectionsCommand::Revoke { end_user, provider, target } => {
                client::revoke_connection(&target, &end_user, &provider)
            }
        },
        Command::Retire { tool, version, force, target } => client::retire(&target, &tool, version, force),
        Command::Toolset { command } => match command {
            ToolsetCommand::Set { name, description, tools, describe, words, target } => {
                client::set_toolset(&target, &name, &description, &tools, &describe, words.as_deref())
            }
            ToolsetCommand::Show { name, version, target } => client::show_toolset(&target, &name, version),
            ToolsetCommand::List { target } => client::list_toolsets(&target),
            ToolsetCommand::Rm { name, target } => client::delete_toolset(&target, &name),
        },
        Command::Tools { command: ToolsCommand::List { target } } => client::list(&target),
        Command::Tools { command: ToolsCommand::Versions { tool, target } } => client::versions(&target, &tool),
        Command::Tenant { command } => match command {
            TenantCommand::Create { name, public, quotas, server } => {
                client::create_tenant(&server, &name, public, &quotas)
            }
            TenantCommand::Set { name, public, quotas, server } => {
                client::update_tenant(&server, &name, public, &quotas)
            }
            TenantCommand::List { server } => client::list_tenants(&server),
        },
        Command::Key { command } => match command {
            KeyCommand::Create { tenant, role, label, toolset, server } => {
                client::create_key(&server, tenant.as_deref(), &role, label.as_deref(), toolset.as_deref())
            }
            KeyCommand::Revoke { id, server } => client::revoke_key(&server, &id),
            KeyCommand::List { tenant, server } => client::list_keys(&server, tenant.as_deref()),
        },
        Command::Audit { tenant, limit, server } => client::audit(&server, tenant.as_deref(), limit),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::from(2)
        }
    }
}

/// Logs to stderr; with `otlp_endpoint`, spans to that collector as well
/// (returned, to be flushed at a graceful stop). Without it no
/// OpenTelemetry layer is installed at all.
fn init_logs(format: LogFormat, otlp_endpoint: Option<&str>) -> anyhow::Result<Option<SpanExport>> {
    use tracing_subscriber::Layer as _;
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    let filter = tracing_subscriber::EnvFilter::try_from_env("PLINTH_LOG")
        // rmcp logs every session it serves at info and every JSON-RPC
        // error (with its data) at warn: per request, and anyone's to trigger.
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,rmcp=error"));
    // Colours only for a person at a terminal: a file or a collector gets plain text.
    let colours = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let logs = tracing_subscriber::fmt::layer().with_ansi(colours).with_writer(std::io::stderr);
    let logs = match format {
        LogFormat::Text => logs.boxed(),
        LogFormat::Json => logs.json().boxed(),
    };
    let Some(endpoint) = otlp_endpoint else {
        let filter = tracing_subscriber::filter::FilterExt::and(filter, plinth::telemetry::ClosesAreNotErrors);
        tracing_subscriber::registry().with(logs.with_filter(filter)).init();
        return Ok(None);
    };
    let export = SpanExport::to(endpoint)?;
    // Each layer its own filter: PLINTH_LOG says what is logged, not which
    // spans are exported.
    let filter = tracing_subscriber::filter::FilterExt::and(
        tracing_subscriber::filter::FilterExt::and(filter, plinth::telemetry::ClosesAreNotErrors),
        tracing_subscriber::filter::filter_fn(plinth::telemetry::logged),
    );
    tracing_subscriber::registry().with(logs.with_filter(filter)).with(export.layer()).init();
    tracing::info!(endpoint = plinth::telemetry::redacted_endpoint(endpoint), "exporting traces over OTLP");
    Ok(Some(export))
}

/// Sets the provider an `--authorization-provider [TENANT/]ID=FILE` entry
/// names, from the JSON settings in FILE.
fn set_authorization_provider(host: &ToolHost, entry: &str) -> anyhow::Result<()> {
    let (target, file) =
        entry.split_once('=').with_context(|| format!("--authorization-provider `{entry}`: write [TENANT/]ID=FILE"))?;
    let (tenant, id) = target.split_once('/').unwrap_or((plinth::tenancy::DEFAULT_TENANT, target));
    let text = std::fs::read(file).with_context(|| format!("--authorization-provider {target}: reading {file}"))?;
    let settings: plinth::host::authorizations::ProviderSettings = serde_json::from_slice(&text)
        .with_context(|| format!("--authorization-provider {target}: {file} is not a provider's settings"))?;
    host.put_authorization_provider(&Principal::server("--authorization-provider"), tenant, id, settings)
        .with_context(|| format!("--authorization-provider {target}"))?;
    tracing::info!(tenant, provider = id, "set an authorization provider from its file");
    Ok(())
}

/// `[TENANT/]TOOL.KEY=VALUE` entries → per-(tenant, tool) maps.
fn parse_tool_config(entries: &[String]) -> anyhow::Result<ToolConfig> {
    let mut config = ToolConfig::new();
    for entry in entries.iter().filter(|e| !e.trim().is_empty()) {
        let parsed = entry
            .split_once('=')
            .and_then(|(target, value)| target.split_once('.').map(|(tool, key)| (tool, key, value)))
            .map(|(tool, key, value)| match tool.split_once('/') {
                Some((tenant, tool)) => (tenant, tool, key, value),
                None => (DEFAULT_TENANT, tool, key, value),
            })
            .filter(|(tenant, tool, key, _)| is_tenant_name(tenant) && !tool.is_empty() && !key.is_empty());
        let Some((tenant, tool, key, value)) = parsed else {
            bail!(
                "--tool-config `{entry}` is not [TENANT/]TOOL.KEY=VALUE (for example lookup_weather_by_city.backend-url=http://127.0.0.1:8090)"
            );
        };
        config.entry((tenant.to_string(), tool.to_string())).or_default().insert(key.to_string(), value.to_string());
    }
    Ok(config)
}

/// The pools tools' outbound requests go out on, bounded by the flags, and
/// the TLS roots new `https` connections trust (the web's and the
/// operator's CA file, if given).
fn outbound_connections(args: &ServeArgs) -> anyhow::Result<plinth::runtime::outbound::Connections> {
    use plinth::runtime::outbound::{Connections, PoolSettings, outbound_tls};
    let extra_roots = match &args.outbound_ca_file {
        Some(path) => std::fs::read(path).with_context(|| format!("reading --outbound-ca-file {}", path.display()))?,
        None => Vec::new(),
    };
    let tls = outbound_tls(&extra_roots).map_err(|e| anyhow::anyhow!("--outbound-ca-file: {e}"))?;
    let settings = PoolSettings {
        idle_timeout: Duration::from_secs(args.outbound_idle_timeout_secs),
        max_per_tenant: args.outbound_max_connections_per_tenant.max(1),
        max_per_destination: args.outbound_max_connections_per_host.max(1),
        max_idle_per_destination: args.outbound_max_idle_per_host,
        max_idle_per_tenant: args.outbound_max_idle_per_tenant,
        max_idle: args.outbound_max_idle,
    };
    Ok(Connections::new(settings, Some(tls)))
}

fn serve(args: ServeArgs) -> anyhow::Result<()> {
    let export = init_logs(args.log_format, args.otlp_endpoint.as_deref().filter(|e| !e.is_empty()))?;
    plinth::telemetry::forward_tracestate_keys(
        args.forward_tracestate.iter().map(|k| k.trim().to_string()).filter(|k| !k.is_empty()).collect(),
    );
    let served = run_server(args);
    // After the runtime is gone: the spans of the last requests are sent.
    if let Some(export) = export {
        export.shutdown();
    }
    served
}

fn run_server(args: ServeArgs) -> anyhow::Result<()> {
    let connections = outbound_connections(&args)?;
    let options = HostOptions {
        data_dir: args.data.clone(),
        database_url: args.database_url.clone().filter(|u| !u.is_empty()),
        change_poll: Duration::from_millis(args.change_poll_ms.max(10)),
        runtime: RuntimeConfig {
            deadline: Duration::from_millis(args.deadline_ms.max(1)),
            max_memory_bytes: args.max_memory_mib.max(1) << 20,
            max_instances: args.max_instances.max(1),
            pooling: matches!(args.allocator, Allocator::Pooling),
            slot_reset: match args.slot_reset {
                SlotResetArg::Prefix => SlotReset::Prefix,
                SlotResetArg::Scan => SlotReset::Scan,
            },
            cache_dir: None,
            // Compilation runs in a process of its own: this program. Linux's
            // /proc/self/exe is this process's binary even once the file
            // it was started from is replaced or removed (an upgrade).
            compile_worker: Some(PathBuf::from("/proc/self/exe"))
                .filter(|exe| exe.exists())
                .or_else(|| std::env::current_exe().ok()),
            compile_deadline: Duration::from_secs(args.compile_deadline_secs.max(1)),
            compile_memory_bytes: Some(args.compile_worker_memory_mib)
                .filter(|mib| *mib > 0)
                .map(|mib| mib.saturating_mul(1 << 20)),
            ..RuntimeConfig::default()
        },
        tool_config: parse_tool_config(&args.tool_config)?,
        operator_key: args.operator_key.clone().filter(|k| !k.is_empty()),
        tool_threads: args
            .tool_threads
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(4, |n| n.get() * 2).max(4)),
        call_retention: Duration::from_secs(args.call_retention_hours.max(1).saturating_mul(3600)),
        confirmation_ttl: Duration::from_secs(args.confirmation_ttl_secs.max(1)),
        confirmation_retention: Duration::from_secs(
            args.confirmation_retention_secs
                .unwrap_or_else(|| args.confirmation_retention_days.saturating_mul(24 * 3600))
                .max(1),
        ),
        max_concurrent_deploys: args.max_concurrent_deploys.max(1),
        idle_unlink: Duration::from_secs(args.idle_unlink_secs.max(1)),
        secrets_key: args.secrets_key.clone().filter(|k| !k.is_empty()),
        cheq: CheqOptions {
            login: LoginOptions {
                max_concurrent_hashes: args
                    .max_password_checks
                    .unwrap_or_else(|| LoginOptions::default().max_concurrent_hashes)
                    .max(1),
                hashes_per_tenant: args.max_password_checks_per_tenant,
                hashes_per_address: args.max_password_checks_per_address,
                user_failures: args.login_lockout_after.max(1),
                address_failures: args.login_address_lockout_after.max(1),
                lockout_base: Duration::from_secs(args.login_lockout_secs.max(1)),
                lockout_max: Duration::from_secs(args.login_lockout_max_secs.max(args.login_lockout_secs).max(1)),
                max_failures_per_minute: args.max_failed_logins_per_minute.max(1),
                max_tracked: args.login_throttle_max_keys.max(1),
            },
            jwks: JwksOptions {
                allow_http: args.cheq_allow_http_jwks,
                max_bytes: args.cheq_jwks_max_kib.max(1).saturating_mul(1024),
                cache_ttl: Duration::from_secs(args.cheq_jwks_cache_secs),
                failure_ttl: Duration::from_secs(args.cheq_jwks_failure_cache_secs),
            },
            client_documents_allow_http: args.oauth_allow_http,
        },
        registries: plinth::host::RegistryOptions {
            insecure: args.insecure_registries.clone(),
            timeout: Duration::from_secs(args.registry_timeout_secs.max(1)),
        },
        console: plinth::host::ConsoleOptions {
            entries_per_tenant: args.console_entries,
            retention: Duration::from_secs(args.console_retention_minutes.max(1).saturating_mul(60)),
            max_tails_per_tenant: args.console_max_tails,
            max_bytes_per_tenant: args.console_max_kib.saturating_mul(1024),
        },
        usage: plinth::host::UsageOptions {
            flush: Duration::from_secs(args.usage_flush_secs),
            retention: Duration::from_secs(args.usage_retention_days.max(1).saturating_mul(24 * 3600)),
        },
        limits: HostLimits {
            max_concurrency_per_tool: args.max_concurrency_per_tool.max(1),
            outbound: Arc::new(OutboundLimits {
                allowed_private: args.allow_private_cidr.clone(),
                max_requests: args.outbound_max_requests,
                max_response_bytes: args.outbound_max_response_kib.saturating_mul(1024),
            }),
            connections,
            output: OutputLimits {
                max_value_bytes: args.max_output_kib.saturating_mul(1024),
                max_total_bytes: args.max_output_kib.saturating_mul(4096),
            },
        },
    };
    if options.operator_key.as_ref().is_some_and(|k| k.len() < 16) {
        bail!("PLINTH_OPERATOR_KEY is too short to be a key: use at least 16 random characters");
    }
    let host = ToolHost::open(options).with_context(|| format!("opening the data dir {}", args.data.display()))?;
    if args.operator_key.as_deref().is_none_or(str::is_empty) && !host.has_operator_key() {
        create_operator_key(&host, &args.data)?;
    }
    for entry in args.authorization_provider.iter().filter(|e| !e.trim().is_empty()) {
        set_authorization_provider(&host, entry)?;
    }
    if let Some(dir) = &args.plugins {
        deploy_dir(&host, dir)?;
    }
    if let Some(dir) = &args.watch {
        deploy_dir(&host, dir)?;
    }
    for tool in &host.registry().all() {
        let missing = host.missing_config(tool);
        if !missing.is_empty() {
            tracing::warn!(tenant = tool.tenant, tool = tool.name, keys = ?missing, "required config is not set: PUT /t/{}/admin/config/{}/KEY", tool.tenant, tool.name);
        }
        let missing = tool.current().map(|v| host.missing_secrets(tool, &v, &Default::default())).unwrap_or_default();
        if !missing.is_empty() {
            tracing::warn!(tenant = tool.tenant, tool = tool.name, secrets = ?missing, "declared secrets are not set: PUT /t/{}/admin/secrets/ID", tool.tenant);
        }
    }

    // The threads serving HTTP: one per CPU, with short time slices (`cpu_policy`).
    if args.http_threads_free {
        plinth::cpu_policy::leave_http_threads_free();
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .on_thread_start(plinth::cpu_policy::http_thread_started)
        .on_thread_park(plinth::cpu_policy::settle_http_worker)
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind(args.listen)
            .await
            .with_context(|| format!("listening on {}", args.listen))?;
        let addr = listener.local_addr()?;
        tracing::info!(tools = host.registry().len(), "serving on http://{addr}");
        // The one line on stdout: scripts and tests read the address from it.
        println!("plinth listening on http://{addr}");
        let host = Arc::new(host);
        host.keep_in_step()?;
        let _watcher = match &args.watch {
            Some(dir) => Some(watch(host.clone(), dir)?),
            None => None,
        };
        if args.public_url.is_none() && addr.ip().is_unspecified() {
            tracing::warn!(
                "listening on every address without --public-url: links in CHEQ answers name {addr}, and MCP clients reaching this server by another name are refused (DNS-rebinding protection); set --public-url to the address clients use"
            );
        }
        let public_url = args.public_url.clone().unwrap_or_else(|| format!("http://{addr}"));
        let public_url = public_url.trim_end_matches('/').to_string();
        let state_key = host.server_key(api::mcp::STATE_KEY).context("reading the MCP request-state key")?;
        let options = api::ApiOptions {
            max_request_bytes: args.max_request_kib.saturating_mul(1024),
            mcp: api::mcp::McpOptions::for_server(&public_url, addr, state_key)
                .with_names(&args.mcp_allowed_hosts, &args.cors_origins),
            cors_origins: args.cors_origins.iter().map(|o| o.trim_end_matches('/').to_string()).collect(),
            public_url,
            request_body_timeout: Duration::from_secs(args.request_body_timeout_secs.max(1)),
        };
        let stopping = options.mcp.stopping.clone();
        let draining = host.clone();
        let app = api::router(host, options);
        let limits = api::serve::ConnectionLimits {
            max_connections: args.max_connections.max(1),
            max_per_address: args.max_connections_per_address.max(1),
            header_read_timeout: Duration::from_secs(args.header_read_timeout_secs.max(1)),
            idle_timeout: Duration::from_secs(args.idle_timeout_secs.max(1)),
        };
        let shutdown = async move {
            shutdown_signal().await;
            stopping.send_replace(true);
        };
        api::serve::serve(listener, app, limits, shutdown).await?;
        // Calls whose caller hung up may still run (an accepted CHEQ
        // transaction, a claimed call id): let them finish and keep their
        // answers rather than leave their outcome unknown.
        let running = draining.answers_to_keep();
        if running > 0 {
            tracing::info!(running, "waiting for calls to finish and keep their answers");
        }
        draining.answers_kept().await;
        draining.flush_usage().await;
        tracing::info!("stopped");
        Ok(())
    })
}

/// Creates the first operator key, writes it to `DATA/operator.key` (readable
/// by the owner only) and prints it once. The file is written (atomically)
/// before the key is stored: a crash in between leaves a key file that does
/// not work, never a live key that nobody holds.
fn create_operator_key(host: &ToolHost, data: &Path) -> anyhow::Result<()> {
    let path = data.join("operator.key");
    let new = host
        .create_key_with(
            &Principal::server("first start"),
            None,
            Role::Operator,
            Some("created at first start".into()),
            |new| plinth::private_files::write_private_file(&path, &format!("{}\n", new.key)),
        )
        .with_context(|| format!("creating the first operator key in {}", path.display()))?;
    println!("operator key (saved to {}; shown only now): {}", path.display(), new.key);
    Ok(())
}

/// Deploys every `.wasm` in `dir`, in name order. A broken file is reported
/// and skipped; the others are still served.
fn deploy_dir(host: &ToolHost, dir: &Path) -> anyhow::Result<()> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("reading the plugins directory {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "wasm"))
        .collect();
    files.sort();
    for path in files {
        deploy_file(host, &path);
    }
    Ok(())
}

/// Deploys one file, logging the outcome (the `--plugins` and `--watch` path).
fn deploy_file(host: &ToolHost, path: &Path) {
    let actor = Principal::server("plugins-dir");
    let outcome = std::fs::read(path)
        .map_err(anyhow::Error::from)
        .and_then(|bytes| Ok(host.deploy(&actor, DEFAULT_TENANT, &bytes, None)?));
    match outcome {
        Ok(d) if d.created => {
            tracing::info!(file = %path.display(), tool = d.name, tool_id = %d.tool_id, version = d.version, "deployed")
        }
        Ok(d) => tracing::info!(file = %path.display(), tool = d.name, version = d.version, "already deployed"),
        Err(e) => tracing::error!(file = %path.display(), error = format!("{e:#}"), "not deployed"),
    }
}

/// Watches `dir` and deploys each `.wasm` created or replaced in it, once it
/// has been still for a moment (copies arrive in pieces). Dropping the
/// returned debouncer stops the watch.
fn watch(
    host: Arc<ToolHost>,
    dir: &Path,
) -> anyhow::Result<notify_debouncer_mini::Debouncer<notify_debouncer_mini::notify::RecommendedWatcher>> {
    use notify_debouncer_mini::{DebounceEventResult, new_debouncer, notify::RecursiveMode};
    let mut debouncer = new_debouncer(Duration::from_millis(500), move |events: DebounceEventResult| match events {
        Ok(events) => {
            let mut paths: Vec<PathBuf> = events
                .into_iter()
                .map(|e| e.path)
                .filter(|p| p.extension().is_some_and(|x| x == "wasm") && p.is_file())
                .collect();
            paths.sort();
            paths.dedup();
            for path in paths {
                deploy_file(&host, &path);
            }
        }
        Err(e) => tracing::error!(error = %e, "watching the deploy directory failed"),
    })?;
    debouncer
        .watcher()
        .watch(dir, RecursiveMode::NonRecursive)
        .with_context(|| format!("watching {}", dir.display()))?;
    tracing::info!(dir = %dir.display(), "watching for tools to deploy");
    Ok(debouncer)
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! { _ = ctrl_c => {}, _ = terminate => {} }
}

fn new_tool(name: &str, language: plinth::manifest::Language, dir: Option<PathBuf>) -> anyhow::Result<()> {
    let dir = dir.unwrap_or_else(|| PathBuf::from(name));
    let files = plinth::scaffold::new_tool(&dir, name, language)?;
    eprintln!("created {} ({} files); next:", dir.display(), files.len());
    let readme = std::fs::read_to_string(dir.join("README.md")).unwrap_or_default();
    let steps = readme.split("```sh\n").nth(1).and_then(|s| s.split("```").next()).unwrap_or("plinth pack .\n");
    eprint!("  cd {}\n{}", dir.display(), steps.lines().map(|l| format!("  {l}\n")).collect::<String>());
    Ok(())
}

fn pack(args: PackArgs) -> anyhow::Result<()> {
    let crate_dir = &args.crate_dir;
    let manifest_path = crate_dir.join("plinth.toml");
    let manifest = match std::fs::read_to_string(&manifest_path) {
        Ok(text) => ToolManifest::from_toml(&text).with_context(|| manifest_path.display().to_string())?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => ToolManifest::default(),
        Err(e) => return Err(e).with_context(|| manifest_path.display().to_string()),
    };
    let wit_dir = crate_dir.join("wit");
    let mut resolve = wit_parser::Resolve::default();
    let (wit_package, _) = resolve
        .push_path(&wit_dir)
        .map_err(|e| anyhow::anyhow!("{e:#}"))
        .with_context(|| format!("reading the tool's WIT in {}", wit_dir.display()))?;
    let world = package::select_world(&resolve, wit_package, manifest.world.as_deref())?;

    let language = manifest.language;
    if let Some(mib) = manifest.limits.memory_mib
        && mib < language.min_memory_mib()
    {
        eprintln!(
            "warning: plinth.toml asks for {mib} MiB of memory, but a {} tool needs at least {} MiB to start; its calls will fail",
            language.as_str(),
            language.min_memory_mib()
        );
    }
    let built;
    let wasm_path = match &args.wasm {
        Some(path) => path.as_path(),
        None => {
            built = plinth::build::build(crate_dir, language, &resolve.worlds[world].name)?;
            built.path.as_path()
        }
    };
    let component = std::fs::read(wasm_path).with_context(|| format!("reading {}", wasm_path.display()))?;
    let (packed, tool) = package::pack(&component, &resolve, world, manifest)?;
    let output = args.output.unwrap_or_else(|| PathBuf::from(format!("{}.wasm", tool.signature.name)));
    if let Some(parent) = output.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::write(&output, &packed).with_context(|| format!("writing {}", output.display()))?;
    eprintln!(
        "packed {} ({} inputs, {} outputs) into {} — sha256 {}",
        tool.signature.name,
        tool.signature.inputs.len(),
        tool.signature.outputs.len(),
        output.display(),
        tool.sha256
    );
    Ok(())
}

/// `plinth push TOOL REF`: packs a tool folder first, then pushes the
/// packed bytes as they are (an embedded signature stays valid).
fn push(tool: &Path, reference: &str, insecure: bool, username: Option<String>) -> anyhow::Result<()> {
    let reference = plinth::supply::Reference::parse(reference).map_err(anyhow::Error::msg)?;
    let packed_dir;
    let file = if tool.is_dir() {
        packed_dir = tempfile::tempdir()?;
        let output = packed_dir.path().join("tool.wasm");
        pack(PackArgs { crate_dir: tool.to_path_buf(), wasm: None, output: Some(output.clone()) })?;
        output
    } else {
        tool.to_path_buf()
    };
    let bytes = std::fs::read(&file).with_context(|| format!("reading {}", file.display()))?;
    let package = ToolPackage::read(&bytes)
        .with_context(|| format!("{} is not a packed tool: `plinth pack` it first", file.display()))?;
    let credentials = match username {
        Some(username) => Some(plinth::supply::oci::Credentials {
            username,
            password: std::env::var("PLINTH_REGISTRY_PASSWORD")
                .context("--username needs the password in PLINTH_REGISTRY_PASSWORD")?,
        }),
        None => None,
    };
    let client = plinth::supply::oci::OciClient::new(plinth::supply::oci::OciOptions {
        insecure: if insecure { vec![reference.registry.clone()] } else { Vec::new() },
        limits: None,
        timeout: Duration::from_secs(600),
    })?;
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let digest = runtime.block_on(client.push(&reference, credentials.as_ref(), &bytes))?;
    eprintln!("pushed {} (sha256 {}) to {reference}", package.signature.name, package.sha256);
    println!("{}", reference.at(&digest));
    Ok(())
}

fn inspect(file: &Path) -> anyhow::Result<()> {
    let bytes = std::fs::read(file).with_context(|| format!("reading {}", file.display()))?;
    let tool = ToolPackage::read(&bytes)?;
    let json = plinth::signature::a2t::signature_json(None, 1, Some(1), &tool.signature);
    println!("{}", serde_json::to_string_pretty(&json)?);
    eprintln!(
        "sha256 {} — the toolId is assigned when the tool is first deployed; version numbers by the server",
        tool.sha256
    );
    Ok(())
}
