//! The `plinth` command: `serve`, `pack` and `inspect`.

use anyhow::{Context, bail};
use clap::{Parser, Subcommand, ValueEnum};
use plinth::api;
use plinth::egress::OutboundLimits;
use plinth::host::{CheqOptions, HostLimits, HostOptions, JwksOptions, LoginOptions, ToolConfig, ToolHost};
use plinth::invocation::OutputLimits;
use plinth::manifest::ToolManifest;
use plinth::package::{self, ToolPackage};
use plinth::runtime::{RuntimeConfig, SlotReset};
use plinth::telemetry::SpanExport;
use plinth::tenancy::{DEFAULT_TENANT, Principal, Role, is_tenant_name};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

mod client;

/// mimalloc rather than glibc's malloc. Memory a tool thread allocates (a
/// call's answer) is often freed on an HTTP thread; glibc frees it under the
/// allocating thread's arena lock, so a tool thread preempted while it holds
/// that lock — a busy tool's, at a lower priority — stalled HTTP threads for
/// milliseconds (bench/ANALYSIS.md, arm 6). mimalloc hands such frees back
/// without a lock.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "plinth",
    version,
    about = "A host for AI-agent tools: sandboxed WebAssembly components served over A2T"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the tools over HTTP.
    Serve(Box<ServeArgs>),
    /// Start a new tool: a folder with its WIT, plinth.toml, source and a
    /// README saying how to build and pack it.
    New {
        /// The tool's name in kebab case (its WIT world), e.g. `lookup-weather`.
        name: String,
        /// The language to write it in.
        #[arg(long, value_enum, default_value = "rust")]
        lang: Lang,
        /// Where to create it (default: a folder named after the tool).
        #[arg(long)]
        dir: Option<PathBuf>,
    },
    /// Build a tool (Rust, Python or JavaScript; or take a built component)
    /// and embed its docs and plinth.toml, producing the one .wasm file that
    /// is deployed.
    Pack(PackArgs),
    /// Print the A2T signature a packed tool will be served with.
    Inspect {
        /// The packed .wasm file.
        file: PathBuf,
    },
    /// Compare two packed versions of a tool offline: prints every change
    /// and whether the new one is compatible (exit code 1 when it breaks
    /// callers of the old one).
    Diff {
        /// The version callers use now.
        old: PathBuf,
        /// The candidate.
        new: PathBuf,
    },
    /// Print the server's OpenAPI 3.1 document (what `GET /openapi.json`
    /// serves; `plinth openapi > docs/openapi.json` refreshes the committed
    /// copy).
    Openapi,
    /// CHEQ evidence.
    Cheq {
        #[command(subcommand)]
        command: CheqCommand,
    },
    /// Deploy a packed tool to a running server: a file, or an OCI
    /// reference the server pulls (`registry/repo:tag` or `…@sha256:…`).
    Deploy {
        /// The packed .wasm file, or an OCI reference.
        source: String,
        /// Fail unless the deploy results in exactly this version.
        #[arg(long)]
        expect_version: Option<u32>,
        #[command(flatten)]
        target: TenantTarget,
    },
    /// Push a tool to an OCI registry in the Wasm artifact layout (what
    /// `wkg oci pull` reads): a packed .wasm, or a tool folder (packed
    /// first). Prints the manifest digest to deploy by.
    Push {
        /// A packed (and possibly signed) .wasm file, or a tool folder.
        tool: PathBuf,
        /// Where: `registry/repository:tag`.
        reference: String,
        /// Reach the registry over plain http (a local test registry).
        #[arg(long)]
        insecure: bool,
        /// The registry user name; the password is read from
        /// PLINTH_REGISTRY_PASSWORD.
        #[arg(long, env = "PLINTH_REGISTRY_USERNAME")]
        username: Option<String>,
    },
    /// A tenant's recent calls with their tools' log lines (publisher or
    /// operator key); with --follow, each call as it ends.
    Logs {
        /// Only this tool's calls (name or toolId).
        #[arg(long)]
        tool: Option<String>,
        /// Only this version's.
        #[arg(long)]
        version: Option<u32>,
        /// Only these outcomes, comma-separated (ok, tool_error, timeout, …).
        #[arg(long)]
        outcome: Option<String>,
        /// The least level of the log lines shown (trace, debug, info, warn, error).
        #[arg(long)]
        level: Option<String>,
        /// Keep printing calls as they end (until interrupted).
        #[arg(short, long)]
        follow: bool,
        #[command(flatten)]
        target: TenantTarget,
    },
    /// A tenant's trust policy: which keys' signatures it trusts and
    /// whether deploys must carry one.
    Trust {
        #[command(subcommand)]
        command: TrustCommand,
    },
    /// A tenant's credentials for the registries it deploys from.
    Registry {
        #[command(subcommand)]
        command: RegistryCommand,
    },
    /// Retire a version: invocations of it answer 410 from now on.
    Retire {
        /// The tool's name or toolId.
        tool: String,
        /// The version to retire.
        version: u32,
        #[command(flatten)]
        target: TenantTarget,
    },
    /// List a server's tools, or one tool's versions.
    Tools {
        #[command(subcommand)]
        command: ToolsCommand,
    },
    /// Create, list and change tenants (operator key).
    Tenant {
        #[command(subcommand)]
        command: TenantCommand,
    },
    /// Create, list and revoke API keys (operator key).
    Key {
        #[command(subcommand)]
        command: KeyCommand,
    },
    /// Read the audit log, newest first (operator or publisher key).
    Audit {
        /// Only this tenant's entries.
        #[arg(long)]
        tenant: Option<String>,
        /// At most this many entries.
        #[arg(long, default_value_t = 50)]
        limit: usize,
        #[command(flatten)]
        server: ServerArgs,
    },
}

#[derive(Subcommand)]
enum TrustCommand {
    /// Print the policy, each key with its kind and fingerprint.
    Show {
        #[command(flatten)]
        target: TenantTarget,
    },
    /// Replace the policy (`--trusted-key NAME=FILE` for each key).
    Set {
        /// Refuse deploys that no trusted key signed.
        #[arg(long)]
        require_signature: bool,
        /// A trusted key, as NAME=FILE (repeatable): a PEM public key
        /// (cosign.pub, or an Ed25519 key) or a `wasmsign2 keygen` public
        /// key file.
        #[arg(long = "trusted-key", value_name = "NAME=FILE")]
        keys: Vec<String>,
        /// Limits the key NAME to deploys pulled from repositories that
        /// match PATTERN (`registry/repository`, `registry/prefix/*`,
        /// `registry/*`; repeatable): it then signs for nothing else, and
        /// never for posted bytes.
        #[arg(long = "key-scope", value_name = "NAME=PATTERN")]
        scopes: Vec<String>,
        #[command(flatten)]
        target: TenantTarget,
    },
    /// List the live versions the policy would refuse if deployed now
    /// (exit code 1 when there are some).
    Check {
        #[command(flatten)]
        target: TenantTarget,
    },
}

#[derive(Subcommand)]
enum RegistryCommand {
    /// Store credentials for a registry (the password from
    /// PLINTH_REGISTRY_PASSWORD, or the first line of standard input).
    Login {
        /// `host` or `host:port`.
        registry: String,
        /// The user name.
        #[arg(long)]
        username: String,
        #[command(flatten)]
        target: TenantTarget,
    },
    /// Delete a registry's credentials.
    Logout {
        /// `host` or `host:port`.
        registry: String,
        #[command(flatten)]
        target: TenantTarget,
    },
    /// List the registries the tenant has credentials for.
    List {
        #[command(flatten)]
        target: TenantTarget,
    },
}

#[derive(Subcommand)]
enum TenantCommand {
    /// Create a tenant.
    Create {
        /// Its name: the `{tenant}` of its platform root `/t/{tenant}/`.
        name: String,
        /// Let anyone enumerate its tools without a key.
        #[arg(long)]
        public: bool,
        /// A quota, as FIELD=N (repeatable), e.g. maxTools=10.
        #[arg(long = "quota", value_name = "FIELD=N")]
        quotas: Vec<String>,
        #[command(flatten)]
        server: ServerArgs,
    },
    /// Change a tenant's quotas or public enumeration.
    Set {
        /// The tenant.
        name: String,
        /// Let anyone enumerate its tools without a key (true or false).
        #[arg(long)]
        public: Option<bool>,
        /// A quota, as FIELD=N (repeatable).
        #[arg(long = "quota", value_name = "FIELD=N")]
        quotas: Vec<String>,
        #[command(flatten)]
        server: ServerArgs,
    },
    /// Every tenant with its quotas.
    List {
        #[command(flatten)]
        server: ServerArgs,
    },
}

#[derive(Subcommand)]
enum CheqCommand {
    /// Verify a signed CHEQ offline: every signature against the given key
    /// sets. FILE is a JWS (general JSON) or the evidence that
    /// `GET /admin/cheq/{id}` returns (its decision, else its CHEQ). Exit
    /// code 1 when it does not verify.
    Verify {
        /// The signed CHEQ or evidence, as JSON.
        file: PathBuf,
        /// A JWKS URL (or file) to trust; repeat for the resource server's
        /// and the confirmation server's.
        #[arg(long = "jwks", value_name = "URL", required = true)]
        jwks: Vec<String>,
    },
}

#[derive(Subcommand)]
enum KeyCommand {
    /// Create a key; it is printed once and cannot be shown again.
    Create {
        /// The tenant it belongs to (not for operator keys).
        #[arg(long)]
        tenant: Option<String>,
        /// What it may do.
        #[arg(long, value_parser = ["operator", "publisher", "consumer"])]
        role: String,
        /// A note to recognise it by.
        #[arg(long)]
        label: Option<String>,
        #[command(flatten)]
        server: ServerArgs,
    },
    /// Revoke a key: it stops working at once.
    Revoke {
        /// The key's id (the part between `plk_` and the next `_`).
        id: String,
        #[command(flatten)]
        server: ServerArgs,
    },
    /// Every key's id, tenant, role and state (never the keys).
    List {
        /// Only this tenant's keys.
        #[arg(long)]
        tenant: Option<String>,
        #[command(flatten)]
        server: ServerArgs,
    },
}

#[derive(Subcommand)]
enum ToolsCommand {
    /// Every tool at its current version.
    List {
        #[command(flatten)]
        target: TenantTarget,
    },
    /// Every version of one tool, newest first.
    Versions {
        /// The tool's name or toolId.
        tool: String,
        #[command(flatten)]
        target: TenantTarget,
    },
}

/// Where a running server is, for the client commands.
#[derive(clap::Args)]
struct ServerArgs {
    /// The server's base URL.
    #[arg(long, env = "PLINTH_SERVER", default_value = "http://127.0.0.1:8080")]
    server: String,
    /// The API key to send (`Authorization: Bearer`).
    #[arg(long, env = "PLINTH_KEY", hide_env_values = true)]
    key: Option<String>,
}

/// A running server and the tenant whose tools to act on.
#[derive(clap::Args)]
struct TenantTarget {
    #[command(flatten)]
    server: ServerArgs,
    /// The tenant whose tools to act on (its platform root is /t/TENANT/).
    #[arg(long, env = "PLINTH_TENANT", default_value = "default")]
    tenant: String,
}

#[derive(clap::Args)]
struct ServeArgs {
    /// Address to listen on (port 0 picks a free port; the address is printed).
    #[arg(long, env = "PLINTH_LISTEN", default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    /// Data directory: the registry database and the component blobs (with
    /// --database-url, only this replica's cache of compiled tools).
    #[arg(long, env = "PLINTH_DATA", default_value = "./plinth-data")]
    data: PathBuf,
    /// Store everything in this PostgreSQL database (postgres://…) instead
    /// of SQLite in the data dir: any number of replicas sharing it serve
    /// the same tools (docs/fleet.md). Needs --secrets-key, the same on
    /// every replica.
    #[arg(long, env = "PLINTH_DATABASE_URL", hide_env_values = true)]
    database_url: Option<String>,
    /// With --database-url: how often, in milliseconds, this replica reads
    /// the change log even without a notification — the bound on how long a
    /// change made on another replica (a revoked key, say) can go unseen
    /// here when a notification is lost.
    #[arg(long, env = "PLINTH_CHANGE_POLL_MS", default_value_t = 1000)]
    change_poll_ms: u64,
    /// Deploy every .wasm in this directory at start.
    #[arg(long, env = "PLINTH_PLUGINS")]
    plugins: Option<PathBuf>,
    /// Deploy every .wasm in this directory at start, and each one added or
    /// replaced while the server runs (after it has been still for 500 ms).
    #[arg(long, env = "PLINTH_WATCH")]
    watch: Option<PathBuf>,
    /// An operator key of your choosing (at least 16 characters), accepted
    /// as well as the stored keys; prefer the environment variable to the
    /// flag. Without it, a first start creates an operator key in
    /// DATA/operator.key.
    #[arg(long, env = "PLINTH_OPERATOR_KEY", hide_env_values = true)]
    operator_key: Option<String>,
    /// Configuration value for a tool, as [TENANT/]TOOL.KEY=VALUE
    /// (repeatable; in the environment, comma-separated). It overrides what
    /// the tenant's publisher stored. The tenant defaults to `default`.
    #[arg(
        long = "tool-config",
        env = "PLINTH_TOOL_CONFIG",
        value_delimiter = ',',
        value_name = "[TENANT/]TOOL.KEY=VALUE"
    )]
    tool_config: Vec<String>,
    /// Wall-clock time one invocation may take, in milliseconds.
    #[arg(long, env = "PLINTH_DEADLINE_MS", default_value_t = 5000)]
    deadline_ms: u64,
    /// Linear memory one tool instance may use, in MiB.
    #[arg(long, env = "PLINTH_MAX_MEMORY_MIB", default_value_t = 64)]
    max_memory_mib: usize,
    /// Tool instances that may run at once.
    #[arg(long, env = "PLINTH_MAX_INSTANCES", default_value_t = 100)]
    max_instances: u32,
    /// Invocations of one tool running at once; more answer 503.
    #[arg(long, env = "PLINTH_MAX_CONCURRENCY_PER_TOOL", default_value_t = 16)]
    max_concurrency_per_tool: u32,
    /// A non-public network tools may reach (CIDR, repeatable; in the
    /// environment, comma-separated), e.g. 127.0.0.0/8 for local backends.
    /// Loopback, private, link-local and metadata addresses are refused
    /// otherwise.
    #[arg(long = "allow-private-cidr", env = "PLINTH_ALLOW_PRIVATE_CIDR", value_delimiter = ',', value_name = "CIDR")]
    allow_private_cidr: Vec<ipnet::IpNet>,
    /// A registry (`host` or `host:port`) deploys by reference reach over
    /// plain http rather than https (repeatable; in the environment,
    /// comma-separated): for a local or closed-network registry. Its
    /// address must still pass the outbound policy (--allow-private-cidr).
    #[arg(
        long = "insecure-registry",
        env = "PLINTH_INSECURE_REGISTRIES",
        value_delimiter = ',',
        value_name = "HOST[:PORT]"
    )]
    insecure_registries: Vec<String>,
    /// How long a deploy by reference may take to pull, in seconds.
    #[arg(long, env = "PLINTH_REGISTRY_TIMEOUT_SECS", default_value_t = 120)]
    registry_timeout_secs: u64,
    /// Recent calls (with their tools' log lines) kept per tenant for its
    /// publishers' console (`GET /admin/logs`); 0 keeps none.
    #[arg(long, env = "PLINTH_CONSOLE_ENTRIES", default_value_t = 1000)]
    console_entries: usize,
    /// How long a recent call is shown in the console, in minutes.
    #[arg(long, env = "PLINTH_CONSOLE_RETENTION_MINUTES", default_value_t = 60)]
    console_retention_minutes: u64,
    /// Live tails of the console (`GET /admin/logs` as server-sent events)
    /// open at once per tenant.
    #[arg(long, env = "PLINTH_CONSOLE_MAX_TAILS", default_value_t = 4)]
    console_max_tails: usize,
    /// Memory the console's recent calls may hold per tenant, in KiB (the
    /// oldest go first); the console needs at most tenants × this.
    #[arg(long, env = "PLINTH_CONSOLE_MAX_KIB", default_value_t = 4096)]
    console_max_kib: usize,
    /// How often each replica writes its usage counts to the store, in
    /// seconds (a crash loses at most this much); 0 counts no usage.
    #[arg(long, env = "PLINTH_USAGE_FLUSH_SECS", default_value_t = 5)]
    usage_flush_secs: u64,
    /// How long hourly usage (`GET /admin/usage?window=day|week`) is kept, in days.
    #[arg(long, env = "PLINTH_USAGE_RETENTION_DAYS", default_value_t = 8)]
    usage_retention_days: u64,
    /// Outbound HTTP requests one invocation may send.
    #[arg(long, env = "PLINTH_OUTBOUND_MAX_REQUESTS", default_value_t = 20)]
    outbound_max_requests: u32,
    /// Largest outbound response body a tool may read, in KiB.
    #[arg(long, env = "PLINTH_OUTBOUND_MAX_RESPONSE_KIB", default_value_t = 10 * 1024)]
    outbound_max_response_kib: u64,
    /// Largest invocation request body, in KiB; larger answers 413.
    #[arg(long, env = "PLINTH_MAX_REQUEST_KIB", default_value_t = 1024)]
    max_request_kib: usize,
    /// Largest single output value passed on, in KiB; larger answers 502.
    #[arg(long, env = "PLINTH_MAX_OUTPUT_KIB", default_value_t = 1024)]
    max_output_kib: usize,
    /// Threads that run tools, apart from those serving HTTP (default: twice
    /// the cores, at least 4); as many again run costly tools' calls.
    #[arg(long, env = "PLINTH_TOOL_THREADS")]
    tool_threads: Option<usize>,
    /// Leave the threads serving HTTP free to run on any CPU, at the
    /// kernel's default time slice. By default each is pinned to a CPU of
    /// its own with a short slice, so that a request wakes one at once
    /// beside busy tools; on a machine shared with other busy processes, a
    /// pinned thread cannot flee a CPU another process holds.
    #[arg(long, env = "PLINTH_HTTP_THREADS_FREE")]
    http_threads_free: bool,
    /// How long a call id's response is kept, in hours: an OTC retry with
    /// the same `call_id` within it (or a catalog try form sent again) gets
    /// the recorded response and the tool does not run again.
    #[arg(long, env = "PLINTH_CALL_RETENTION_HOURS", default_value_t = 24)]
    call_retention_hours: u64,
    /// How long a call that needs its end user's confirmation (CHEQ) waits
    /// for it, in seconds; unanswered, it expires and the tool never runs.
    #[arg(long, env = "PLINTH_CONFIRMATION_TTL_SECS", default_value_t = 900)]
    confirmation_ttl_secs: u64,
    /// Password hashes (end-user logins to the confirmation page, password
    /// changes) computed at once; a login beyond that answers 503 at once
    /// (default: one per core). Each costs 19 MiB while it runs.
    #[arg(long, env = "PLINTH_MAX_PASSWORD_CHECKS")]
    max_password_checks: Option<usize>,
    /// Failed confirmation-page logins of one user name (per tenant) before
    /// it is locked out; each further failure doubles the lockout. Catalog
    /// sign-ins with one key id count the same way, in a table of their own.
    #[arg(long, env = "PLINTH_LOGIN_LOCKOUT_AFTER", default_value_t = 5)]
    login_lockout_after: u32,
    /// Failed confirmation-page logins from one client address (the TCP
    /// peer: behind a proxy, the proxy's) before it is locked out; failed
    /// catalog sign-ins count the same way, in a table of their own.
    #[arg(long, env = "PLINTH_LOGIN_ADDRESS_LOCKOUT_AFTER", default_value_t = 20)]
    login_address_lockout_after: u32,
    /// The first lockout after too many failed logins, in seconds; it
    /// doubles with each further failure.
    #[arg(long, env = "PLINTH_LOGIN_LOCKOUT_SECS", default_value_t = 1)]
    login_lockout_secs: u64,
    /// The longest lockout, in seconds.
    #[arg(long, env = "PLINTH_LOGIN_LOCKOUT_MAX_SECS", default_value_t = 900)]
    login_lockout_max_secs: u64,
    /// Failed confirmation-page and OAuth sign-in logins per minute for
    /// each tenant (that many at once at most, refilled evenly); beyond it
    /// every login to that tenant is refused before hashing (`429
    /// login_locked`) until one is earned, except at an address where its
    /// user logged in before. Failed catalog sign-ins have budgets of this
    /// size of their own.
    #[arg(long, env = "PLINTH_MAX_FAILED_LOGINS_PER_MINUTE", default_value_t = 600)]
    max_failed_logins_per_minute: u32,
    /// Keys each failed-login throttle table (users, (user, address) pairs,
    /// addresses) and the table of addresses users logged in from keep at
    /// most. A locked key is never forgotten; a table full of locks refuses
    /// the logins it could not count (`503 login_busy`).
    #[arg(long, env = "PLINTH_LOGIN_THROTTLE_MAX_KEYS", default_value_t = 10_000)]
    login_throttle_max_keys: usize,
    /// Accept `http://` JWKS URLs for external confirmation servers (for
    /// tests and closed networks only: the keys decide what runs).
    #[arg(long, env = "PLINTH_CHEQ_ALLOW_HTTP_JWKS")]
    cheq_allow_http_jwks: bool,
    /// Accept `http://` URLs for OAuth clients' metadata documents (client
    /// ids) and tenants' external identity providers (their discovery
    /// documents and keys), for tests and closed networks only: these
    /// documents say where codes go and which tokens are good.
    #[arg(long, env = "PLINTH_OAUTH_ALLOW_HTTP")]
    oauth_allow_http: bool,
    /// Largest JWKS of an external confirmation server, in KiB.
    #[arg(long, env = "PLINTH_CHEQ_JWKS_MAX_KIB", default_value_t = 64)]
    cheq_jwks_max_kib: usize,
    /// How long an external confirmation server's keys are trusted before
    /// they are fetched again, in seconds (a key it revokes is trusted that
    /// long at most).
    #[arg(long, env = "PLINTH_CHEQ_JWKS_CACHE_SECS", default_value_t = 300)]
    cheq_jwks_cache_secs: u64,
    /// How long a failed fetch of an external confirmation server's keys is
    /// answered from the cache (`502`) before it is tried again, in seconds.
    #[arg(long, env = "PLINTH_CHEQ_JWKS_FAILURE_CACHE_SECS", default_value_t = 5)]
    cheq_jwks_failure_cache_secs: u64,
    /// The URL clients reach this server at, for the absolute URIs of a
    /// CHEQ URI pack (default: `http://` and the listening address). Set it
    /// when the server is behind a proxy or listens on 0.0.0.0.
    #[arg(long, env = "PLINTH_PUBLIC_URL")]
    public_url: Option<String>,
    /// More names the MCP endpoint answers to (DNS-rebinding protection
    /// accepts only the loopback names, the public URL's host and the
    /// listening address otherwise): `name` for any port, `name:port` for
    /// one; repeat it (or comma-separate in the environment) for the names
    /// a balancer or a cluster gives the server.
    #[arg(long = "mcp-allowed-host", env = "PLINTH_MCP_ALLOWED_HOSTS", value_delimiter = ',', value_name = "HOST")]
    mcp_allowed_hosts: Vec<String>,
    /// Browser origins (`https://app.example`) allowed to call the MCP
    /// endpoint and the OAuth metadata, token, registration and revocation
    /// endpoints from script (CORS); none by default. Repeat it, or
    /// comma-separate in the environment.
    #[arg(long = "cors-origin", env = "PLINTH_CORS_ORIGINS", value_delimiter = ',', value_name = "ORIGIN")]
    cors_origins: Vec<String>,
    /// Connections open at once (keep it below the process's open-file
    /// limit). At the cap the server stops accepting: further clients wait
    /// in the kernel's listen backlog until a connection closes.
    #[arg(long, env = "PLINTH_MAX_CONNECTIONS", default_value_t = 1024)]
    max_connections: usize,
    /// Connections open at once from one client address (the TCP peer; an
    /// IPv6 client counted by its /64). Beyond it a new connection from that
    /// address is closed at once; other clients are still served.
    #[arg(long, env = "PLINTH_MAX_CONNECTIONS_PER_ADDRESS", default_value_t = 64)]
    max_connections_per_address: usize,
    /// Seconds a request head may take to arrive: a new connection's first
    /// from its accept, a kept-alive one's next from its first byte; then
    /// the connection is closed.
    #[arg(long, env = "PLINTH_HEADER_READ_TIMEOUT_SECS", default_value_t = 10)]
    header_read_timeout_secs: u64,
    /// Seconds a request body may take to arrive after its head; later
    /// answers 408 and closes the connection.
    #[arg(long, env = "PLINTH_REQUEST_BODY_TIMEOUT_SECS", default_value_t = 30)]
    request_body_timeout_secs: u64,
    /// Seconds a connection serving no request may stay without a byte
    /// read or written (an idle keep-alive connection) before it is closed.
    #[arg(long, env = "PLINTH_IDLE_TIMEOUT_SECS", default_value_t = 60)]
    idle_timeout_secs: u64,
    /// How instance memory is allocated.
    #[arg(long, env = "PLINTH_ALLOCATOR", value_enum, default_value_t = Allocator::Pooling)]
    allocator: Allocator,
    /// Log format.
    #[arg(long, env = "PLINTH_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    /// Export traces (a span per request, per tool execution and per
    /// outbound request of a tool) to this OpenTelemetry collector, over
    /// OTLP/HTTP with protobuf: its base URL, such as http://127.0.0.1:4318
    /// (`/v1/traces` is appended). Off when unset: then nothing is exported
    /// or attempted (docs/observability.md).
    #[arg(long, env = "PLINTH_OTLP_ENDPOINT", value_name = "URL")]
    otlp_endpoint: Option<String>,
    /// Keys of a caller's `tracestate` passed on to tools' backends with
    /// its `traceparent` (repeatable; in the environment, comma-separated).
    /// None by default: a caller's `tracestate` carries other vendors' data.
    #[arg(long = "forward-tracestate", env = "PLINTH_FORWARD_TRACESTATE", value_delimiter = ',', value_name = "KEY")]
    forward_tracestate: Vec<String>,
    /// How freed pool slots are reset for the next instance: `scan` (the
    /// pages a call wrote, found with Linux's PAGEMAP_SCAN) or `prefix`
    /// (the first MiB of each memory, whatever was written). Both are
    /// sound. See docs/sandbox.md.
    #[arg(long, env = "PLINTH_SLOT_RESET", value_enum, default_value_t = SlotResetArg::Scan)]
    slot_reset: SlotResetArg,
    /// How long a decided or expired CHEQ transaction, with its evidence,
    /// is kept, in days; then it is deleted and its result URI answers 404.
    #[arg(long, env = "PLINTH_CONFIRMATION_RETENTION_DAYS", default_value_t = 30)]
    confirmation_retention_days: u64,
    /// The same in seconds, overriding the days (for tests).
    #[arg(long, env = "PLINTH_CONFIRMATION_RETENTION_SECS", hide = true)]
    confirmation_retention_secs: Option<u64>,
    /// Deploys that may be received and compiled at once (an upload takes its
    /// slot before its body is read); more answer 503 with Retry-After.
    #[arg(long, env = "PLINTH_MAX_CONCURRENT_DEPLOYS", default_value_t = plinth::host::DEFAULT_MAX_CONCURRENT_DEPLOYS)]
    max_concurrent_deploys: usize,
    /// The key stored secrets are encrypted with: the base64 of 32 random
    /// bytes (`head -c32 /dev/urandom | base64`); prefer the environment
    /// variable to the flag. Without it, DATA/secrets.key is used (created
    /// at first start), and a copy of the whole data dir can decrypt them.
    #[arg(long, env = "PLINTH_SECRETS_KEY", hide_env_values = true)]
    secrets_key: Option<String>,
}

#[derive(Clone, Copy, ValueEnum)]
enum Allocator {
    /// Pre-reserved instance slots: the fastest instantiation.
    Pooling,
    /// Allocate per instance (for hosts that restrict virtual memory).
    OnDemand,
}

/// How freed pool slots are reset (`plinth::runtime::SlotReset`).
#[derive(Clone, Copy, ValueEnum)]
enum SlotResetArg {
    /// Rewrite the first MiB of each memory and table, hand back the rest.
    Prefix,
    /// Rewrite only the pages PAGEMAP_SCAN finds written (in memory, in
    /// swap or migrating), up to a MiB; hand back the rest.
    Scan,
}

#[derive(Clone, Copy, ValueEnum)]
enum Lang {
    Rust,
    Python,
    Js,
}

impl From<Lang> for plinth::manifest::Language {
    fn from(lang: Lang) -> Self {
        match lang {
            Lang::Rust => Self::Rust,
            Lang::Python => Self::Python,
            Lang::Js => Self::Js,
        }
    }
}

#[derive(Clone, Copy, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(clap::Args)]
struct PackArgs {
    /// The tool's directory: its `wit/` folder, optional `plinth.toml`
    /// and sources.
    #[arg(default_value = ".")]
    crate_dir: PathBuf,
    /// A component already built from the tool; without it, the tool is
    /// built for its language (`language` in plinth.toml): `cargo build
    /// --release --target wasm32-wasip2`, componentize-py or componentize-js.
    #[arg(long)]
    wasm: Option<PathBuf>,
    /// Where to write the packed tool (default: `<tool_name>.wasm` in the
    /// current directory).
    #[arg(short, long)]
    output: Option<PathBuf>,
}

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
        Command::Retire { tool, version, target } => client::retire(&target, &tool, version),
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
            KeyCommand::Create { tenant, role, label, server } => {
                client::create_key(&server, tenant.as_deref(), &role, label.as_deref())
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
    let Some(endpoint) = otlp_endpoint else {
        let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
        match format {
            LogFormat::Text => builder.init(),
            LogFormat::Json => builder.json().init(),
        }
        return Ok(None);
    };
    let export = SpanExport::to(endpoint)?;
    let logs = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    let logs = match format {
        LogFormat::Text => logs.boxed(),
        LogFormat::Json => logs.json().boxed(),
    };
    // Each layer its own filter: PLINTH_LOG says what is logged, not which
    // spans are exported.
    let filter = tracing_subscriber::filter::FilterExt::and(
        filter,
        tracing_subscriber::filter::filter_fn(plinth::telemetry::logged),
    );
    tracing_subscriber::registry().with(logs.with_filter(filter)).with(export.layer()).init();
    tracing::info!(endpoint = plinth::telemetry::redacted_endpoint(endpoint), "exporting traces over OTLP");
    Ok(Some(export))
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
        secrets_key: args.secrets_key.clone().filter(|k| !k.is_empty()),
        cheq: CheqOptions {
            login: LoginOptions {
                max_concurrent_hashes: args
                    .max_password_checks
                    .unwrap_or_else(|| LoginOptions::default().max_concurrent_hashes)
                    .max(1),
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
