//! The command line: `clap`'s description of every subcommand, argument
//! and flag. What the commands do is `main.rs` (serve, new, pack, inspect,
//! push) and `client.rs` (the commands that talk to a server).

use clap::{Parser, Subcommand, ValueEnum};
use std::net::SocketAddr;
use std::path::PathBuf;

#[derive(Parser)]
#[command(
    name = "plinth",
    version,
    about = "A host for AI-agent tools: sandboxed WebAssembly components served over A2T"
)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Subcommand)]
pub(crate) enum Command {
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
    /// Compiles the component on standard input into `--out` (the server
    /// runs this in a process of its own for every compilation).
    #[command(hide = true)]
    CompileWorker {
        /// The file to write the compiled code to.
        #[arg(long)]
        out: PathBuf,
        /// Cranelift's incremental cache folder.
        #[arg(long)]
        incremental: Option<PathBuf>,
    },
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
        /// Only these outcomes, comma-separated (ok, tool_error, refused, timeout, …).
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
    /// A tenant's usage per tool version and door: calls, and those
    /// refused for their inputs (by parameter and code) or by its limits.
    Usage {
        /// Only this tool (name or toolId).
        #[arg(long)]
        tool: Option<String>,
        /// hour (the default), day or week.
        #[arg(long)]
        window: Option<String>,
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
    /// A tenant's authorization providers: where its tools act with a
    /// person's own account (publisher key; docs/authorization.md).
    Provider {
        #[command(subcommand)]
        command: ProviderCommand,
    },
    /// A person's connected accounts: list and revoke them (publisher key;
    /// docs/authorization.md).
    Connections {
        #[command(subcommand)]
        command: ConnectionsCommand,
    },
    /// Retire a version: invocations of it answer 410 from now on.
    Retire {
        /// The tool's name or toolId.
        tool: String,
        /// The version to retire.
        version: u32,
        /// Retire it even when toolsets pin it (they then mark it
        /// retired-pinned).
        #[arg(long)]
        force: bool,
        #[command(flatten)]
        target: TenantTarget,
    },
    /// A tenant's toolsets: named sets of its tools, each pinned or
    /// following its current version (publisher key; docs/toolsets.md).
    Toolset {
        #[command(subcommand)]
        command: ToolsetCommand,
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
pub(crate) enum TrustCommand {
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
pub(crate) enum RegistryCommand {
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
pub(crate) enum ProviderCommand {
    /// Create or replace a provider. The client secret is read from a file
    /// or an environment variable, never from the command line; left out,
    /// the one stored is kept.
    Set(Box<ProviderSetArgs>),
    /// Every provider of the tenant (never a secret).
    List {
        #[command(flatten)]
        target: TenantTarget,
    },
    /// Delete a provider, with every grant and link made for it.
    Delete {
        /// The provider's id.
        id: String,
        #[command(flatten)]
        target: TenantTarget,
    },
}

/// `plinth provider set`'s arguments.
#[derive(clap::Args)]
pub(crate) struct ProviderSetArgs {
    /// The provider's id, as tools name it in `[[authorization]]`.
    pub(crate) id: String,
    /// The provider's issuer identifier (its metadata names the
    /// endpoints, and its `iss` must come back with every code).
    #[arg(long)]
    pub(crate) issuer: Option<String>,
    /// Plinth's client id at the provider.
    #[arg(long)]
    pub(crate) client_id: String,
    /// A file whose first line is the client secret.
    #[arg(long, value_name = "FILE", conflicts_with = "client_secret_env")]
    pub(crate) client_secret_file: Option<PathBuf>,
    /// An environment variable holding the client secret.
    #[arg(long, value_name = "VAR")]
    pub(crate) client_secret_env: Option<String>,
    /// An extra parameter of the authorization request, as NAME=VALUE
    /// (repeatable), e.g. access_type=offline.
    #[arg(long = "param", value_name = "NAME=VALUE")]
    pub(crate) params: Vec<String>,
    /// What the person is shown (default: the id).
    #[arg(long)]
    pub(crate) display_name: Option<String>,
    /// The resource (RFC 8707) the tokens are for.
    #[arg(long)]
    pub(crate) resource: Option<String>,
    /// The authorization endpoint (overrides the issuer's metadata; with
    /// --token-endpoint, stands without an issuer).
    #[arg(long)]
    pub(crate) authorization_endpoint: Option<String>,
    /// The token endpoint (overrides the issuer's metadata).
    #[arg(long)]
    pub(crate) token_endpoint: Option<String>,
    /// The revocation endpoint (RFC 7009; overrides the issuer's metadata).
    #[arg(long)]
    pub(crate) revocation_endpoint: Option<String>,
    #[command(flatten)]
    pub(crate) target: TenantTarget,
}

#[derive(Subcommand)]
pub(crate) enum ConnectionsCommand {
    /// A person's connected accounts (never a token).
    List {
        /// The end user.
        #[arg(long)]
        end_user: String,
        #[command(flatten)]
        target: TenantTarget,
    },
    /// Revoke a person's account at a provider (at the provider too, when
    /// it has a revocation endpoint).
    Revoke {
        /// The end user.
        #[arg(long)]
        end_user: String,
        /// The provider's id.
        #[arg(long)]
        provider: String,
        #[command(flatten)]
        target: TenantTarget,
    },
}

#[derive(Subcommand)]
pub(crate) enum TenantCommand {
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
pub(crate) enum CheqCommand {
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
pub(crate) enum KeyCommand {
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
        /// Scope a consumer key to this toolset of its tenant: it opens
        /// that toolset's roots and nothing else.
        #[arg(long)]
        toolset: Option<String>,
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
pub(crate) enum ToolsetCommand {
    /// Create a toolset, or its next version (the same content changes
    /// nothing).
    Set {
        /// The toolset's name.
        name: String,
        /// What it is for, for the agent's designer.
        #[arg(long, default_value = "")]
        description: String,
        /// A tool: `NAME` follows its current version, `NAME@N` pins
        /// version N (repeatable).
        #[arg(long = "tool")]
        tools: Vec<String>,
        /// The designer's words for the model, served at the toolset's
        /// roots in place of the vendor's: `TOOL=TEXT` (the tool's
        /// description), `TOOL.INPUT=TEXT`, `TOOL.output.OUTPUT=TEXT`
        /// (repeatable; the tool must be one of `--tool`).
        #[arg(long = "describe", value_name = "TOOL[.PARAM]=TEXT")]
        describe: Vec<String>,
        /// The designer's words from a JSON file: `{"TOOL": {"description",
        /// "inputDescriptions": {NAME: TEXT}, "outputDescriptions": {…}}}`
        /// (`--describe` wins over it).
        #[arg(long = "words", value_name = "FILE")]
        words: Option<std::path::PathBuf>,
        #[command(flatten)]
        target: TenantTarget,
    },
    /// One toolset: its tools as they stand now and its URLs.
    Show {
        /// The toolset's name.
        name: String,
        /// A version of it (default: its newest).
        #[arg(long)]
        version: Option<u32>,
        #[command(flatten)]
        target: TenantTarget,
    },
    /// Every toolset of the tenant.
    List {
        #[command(flatten)]
        target: TenantTarget,
    },
    /// Delete a toolset: its roots answer 404 and its scoped keys are revoked.
    Rm {
        /// The toolset's name.
        name: String,
        #[command(flatten)]
        target: TenantTarget,
    },
}

#[derive(Subcommand)]
pub(crate) enum ToolsCommand {
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
pub(crate) struct ServerArgs {
    /// The server's base URL.
    #[arg(long, env = "PLINTH_SERVER", default_value = "http://127.0.0.1:8080")]
    pub(crate) server: String,
    /// The API key to send (`Authorization: Bearer`).
    #[arg(long, env = "PLINTH_KEY", hide_env_values = true)]
    pub(crate) key: Option<String>,
}

/// A running server and the tenant whose tools to act on.
#[derive(clap::Args)]
pub(crate) struct TenantTarget {
    #[command(flatten)]
    pub(crate) server: ServerArgs,
    /// The tenant whose tools to act on (its platform root is /t/TENANT/).
    #[arg(long, env = "PLINTH_TENANT", default_value = "default")]
    pub(crate) tenant: String,
}

#[derive(clap::Args)]
pub(crate) struct ServeArgs {
    /// Address to listen on (port 0 picks a free port; the address is printed).
    #[arg(long, env = "PLINTH_LISTEN", default_value = "127.0.0.1:8080")]
    pub(crate) listen: SocketAddr,
    /// Data directory: the registry database and the component blobs (with
    /// --database-url, only this replica's cache of compiled tools).
    #[arg(long, env = "PLINTH_DATA", default_value = "./plinth-data")]
    pub(crate) data: PathBuf,
    /// Store everything in this PostgreSQL database (postgres://…) instead
    /// of SQLite in the data dir: any number of replicas sharing it serve
    /// the same tools (docs/fleet.md). Needs --secrets-key, the same on
    /// every replica.
    #[arg(long, env = "PLINTH_DATABASE_URL", hide_env_values = true)]
    pub(crate) database_url: Option<String>,
    /// With --database-url: how often, in milliseconds, this replica reads
    /// the change log even without a notification — the bound on how long a
    /// change made on another replica (a revoked key, say) can go unseen
    /// here when a notification is lost.
    #[arg(long, env = "PLINTH_CHANGE_POLL_MS", default_value_t = 1000)]
    pub(crate) change_poll_ms: u64,
    /// Deploy every .wasm in this directory at start.
    #[arg(long, env = "PLINTH_PLUGINS")]
    pub(crate) plugins: Option<PathBuf>,
    /// Deploy every .wasm in this directory at start, and each one added or
    /// replaced while the server runs (after it has been still for 500 ms).
    #[arg(long, env = "PLINTH_WATCH")]
    pub(crate) watch: Option<PathBuf>,
    /// An operator key of your choosing (at least 16 characters), accepted
    /// as well as the stored keys; prefer the environment variable to the
    /// flag. Without it, a first start creates an operator key in
    /// DATA/operator.key.
    #[arg(long, env = "PLINTH_OPERATOR_KEY", hide_env_values = true)]
    pub(crate) operator_key: Option<String>,
    /// Configuration value for a tool, as [TENANT/]TOOL.KEY=VALUE
    /// (repeatable; in the environment, comma-separated). It overrides what
    /// the tenant's publisher stored. The tenant defaults to `default`.
    #[arg(
        long = "tool-config",
        env = "PLINTH_TOOL_CONFIG",
        value_delimiter = ',',
        value_name = "[TENANT/]TOOL.KEY=VALUE"
    )]
    pub(crate) tool_config: Vec<String>,
    /// An end-user authorization provider to set at start, as
    /// [TENANT/]ID=FILE: FILE is its settings as JSON, as `PUT
    /// /admin/authorization-providers/{id}` takes them (docs/authorization.md).
    /// Set (audited) on every start, over what a publisher stored
    /// (repeatable; in the environment, comma-separated). The tenant
    /// defaults to `default`.
    #[arg(
        long = "authorization-provider",
        env = "PLINTH_AUTHORIZATION_PROVIDER",
        value_delimiter = ',',
        value_name = "[TENANT/]ID=FILE"
    )]
    pub(crate) authorization_provider: Vec<String>,
    /// Wall-clock time one invocation may take, in milliseconds.
    #[arg(long, env = "PLINTH_DEADLINE_MS", default_value_t = 5000)]
    pub(crate) deadline_ms: u64,
    /// Linear memory one tool instance may use, in MiB.
    #[arg(long, env = "PLINTH_MAX_MEMORY_MIB", default_value_t = 64)]
    pub(crate) max_memory_mib: usize,
    /// Tool instances that may run at once.
    #[arg(long, env = "PLINTH_MAX_INSTANCES", default_value_t = 100)]
    pub(crate) max_instances: u32,
    /// Invocations of one tool running at once; more answer 503.
    #[arg(long, env = "PLINTH_MAX_CONCURRENCY_PER_TOOL", default_value_t = 16)]
    pub(crate) max_concurrency_per_tool: u32,
    /// A non-public network tools may reach (CIDR, repeatable; in the
    /// environment, comma-separated), e.g. 127.0.0.0/8 for local backends.
    /// Loopback, private, link-local and metadata addresses are refused
    /// otherwise.
    #[arg(long = "allow-private-cidr", env = "PLINTH_ALLOW_PRIVATE_CIDR", value_delimiter = ',', value_name = "CIDR")]
    pub(crate) allow_private_cidr: Vec<ipnet::IpNet>,
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
    pub(crate) insecure_registries: Vec<String>,
    /// How long a deploy by reference may take to pull, in seconds.
    #[arg(long, env = "PLINTH_REGISTRY_TIMEOUT_SECS", default_value_t = 120)]
    pub(crate) registry_timeout_secs: u64,
    /// Recent calls (with their tools' log lines) kept per tenant for its
    /// publishers' console (`GET /admin/logs`); 0 keeps none.
    #[arg(long, env = "PLINTH_CONSOLE_ENTRIES", default_value_t = 1000)]
    pub(crate) console_entries: usize,
    /// How long a recent call is shown in the console, in minutes.
    #[arg(long, env = "PLINTH_CONSOLE_RETENTION_MINUTES", default_value_t = 60)]
    pub(crate) console_retention_minutes: u64,
    /// Live tails of the console (`GET /admin/logs` as server-sent events)
    /// open at once per tenant.
    #[arg(long, env = "PLINTH_CONSOLE_MAX_TAILS", default_value_t = 4)]
    pub(crate) console_max_tails: usize,
    /// Memory the console's recent calls may hold per tenant, in KiB (the
    /// oldest go first); the console needs at most tenants × this.
    #[arg(long, env = "PLINTH_CONSOLE_MAX_KIB", default_value_t = 4096)]
    pub(crate) console_max_kib: usize,
    /// How often each replica writes its usage counts to the store, in
    /// seconds (a crash loses at most this much); 0 counts no usage.
    #[arg(long, env = "PLINTH_USAGE_FLUSH_SECS", default_value_t = 5)]
    pub(crate) usage_flush_secs: u64,
    /// How long hourly usage (`GET /admin/usage?window=day|week`) is kept, in days.
    #[arg(long, env = "PLINTH_USAGE_RETENTION_DAYS", default_value_t = 8)]
    pub(crate) usage_retention_days: u64,
    /// Outbound HTTP requests one invocation may send.
    #[arg(long, env = "PLINTH_OUTBOUND_MAX_REQUESTS", default_value_t = 20)]
    pub(crate) outbound_max_requests: u32,
    /// Largest outbound response body a tool may read, in KiB.
    #[arg(long, env = "PLINTH_OUTBOUND_MAX_RESPONSE_KIB", default_value_t = 10 * 1024)]
    pub(crate) outbound_max_response_kib: u64,
    /// How long a tool's outbound connection is kept open idle for the
    /// next request, in seconds; 0 opens a connection per request
    /// (docs/sandbox.md, "Connections").
    #[arg(long, env = "PLINTH_OUTBOUND_IDLE_TIMEOUT_SECS", default_value_t = 30)]
    pub(crate) outbound_idle_timeout_secs: u64,
    /// Outbound connections open at once (in use or idle) for one tenant's
    /// tools; a request past it waits, within its connect timeout.
    #[arg(long, env = "PLINTH_OUTBOUND_MAX_CONNECTIONS_PER_TENANT", default_value_t = 128)]
    pub(crate) outbound_max_connections_per_tenant: usize,
    /// Outbound connections open at once for one tenant to one host and address.
    #[arg(long, env = "PLINTH_OUTBOUND_MAX_CONNECTIONS_PER_HOST", default_value_t = 64)]
    pub(crate) outbound_max_connections_per_host: usize,
    /// Idle outbound connections kept per tenant and host.
    #[arg(long, env = "PLINTH_OUTBOUND_MAX_IDLE_PER_HOST", default_value_t = 16)]
    pub(crate) outbound_max_idle_per_host: usize,
    /// Idle outbound connections kept per tenant.
    #[arg(long, env = "PLINTH_OUTBOUND_MAX_IDLE_PER_TENANT", default_value_t = 64)]
    pub(crate) outbound_max_idle_per_tenant: usize,
    /// Idle outbound connections kept in all.
    #[arg(long, env = "PLINTH_OUTBOUND_MAX_IDLE", default_value_t = 1024)]
    pub(crate) outbound_max_idle: usize,
    /// CA certificates (PEM) tools' `https` backends may be signed by,
    /// beside the web's public roots: an operator's own CA.
    #[arg(long, env = "PLINTH_OUTBOUND_CA_FILE", value_name = "PEM")]
    pub(crate) outbound_ca_file: Option<std::path::PathBuf>,
    /// Largest invocation request body, in KiB; larger answers 413.
    #[arg(long, env = "PLINTH_MAX_REQUEST_KIB", default_value_t = 1024)]
    pub(crate) max_request_kib: usize,
    /// Largest single output value passed on, in KiB; larger answers 502.
    #[arg(long, env = "PLINTH_MAX_OUTPUT_KIB", default_value_t = 1024)]
    pub(crate) max_output_kib: usize,
    /// Threads that run tools, apart from those serving HTTP (default: twice
    /// the cores, at least 4); as many again run costly tools' calls.
    #[arg(long, env = "PLINTH_TOOL_THREADS")]
    pub(crate) tool_threads: Option<usize>,
    /// Leave the threads serving HTTP free to run on any CPU, at the
    /// kernel's default time slice. By default each is pinned to a CPU of
    /// its own with a short slice, so that a request wakes one at once
    /// beside busy tools; on a machine shared with other busy processes, a
    /// pinned thread cannot flee a CPU another process holds.
    #[arg(long, env = "PLINTH_HTTP_THREADS_FREE")]
    pub(crate) http_threads_free: bool,
    /// How long a call id's response is kept, in hours: an OTC retry with
    /// the same `call_id` within it (or a catalog try form sent again) gets
    /// the recorded response and the tool does not run again.
    #[arg(long, env = "PLINTH_CALL_RETENTION_HOURS", default_value_t = 24)]
    pub(crate) call_retention_hours: u64,
    /// How long a call that needs its end user's confirmation (CHEQ) waits
    /// for it, in seconds; unanswered, it expires and the tool never runs.
    #[arg(long, env = "PLINTH_CONFIRMATION_TTL_SECS", default_value_t = 900)]
    pub(crate) confirmation_ttl_secs: u64,
    /// Password hashes (end-user logins to the confirmation page, password
    /// changes) computed at once; a login beyond that answers 503 at once
    /// (default: one per core, at least 2). Each costs 19 MiB while it runs.
    #[arg(long, env = "PLINTH_MAX_PASSWORD_CHECKS")]
    pub(crate) max_password_checks: Option<usize>,
    /// Of the password hashes at once, the most one tenant's logins and
    /// password sets hold (made-up tenants together count as one); beyond
    /// it they answer 503 at once (default: half of --max-password-checks,
    /// at least 1).
    #[arg(long, env = "PLINTH_MAX_PASSWORD_CHECKS_PER_TENANT")]
    pub(crate) max_password_checks_per_tenant: Option<usize>,
    /// Of the password hashes at once, the most logins from one client
    /// address (an IPv6 /48) hold; beyond it they answer 503 at once and
    /// count as failed logins of that address (default: half of
    /// --max-password-checks, at least 1).
    #[arg(long, env = "PLINTH_MAX_PASSWORD_CHECKS_PER_ADDRESS")]
    pub(crate) max_password_checks_per_address: Option<usize>,
    /// Failed confirmation-page logins of one user name (per tenant) before
    /// it is locked out; each further failure doubles the lockout. Catalog
    /// sign-ins with one key id count the same way, in a table of their own.
    #[arg(long, env = "PLINTH_LOGIN_LOCKOUT_AFTER", default_value_t = 5)]
    pub(crate) login_lockout_after: u32,
    /// Failed confirmation-page logins from one client address (the TCP
    /// peer: behind a proxy, the proxy's) before it is locked out; failed
    /// catalog sign-ins count the same way, in a table of their own.
    #[arg(long, env = "PLINTH_LOGIN_ADDRESS_LOCKOUT_AFTER", default_value_t = 20)]
    pub(crate) login_address_lockout_after: u32,
    /// The first lockout after too many failed logins, in seconds; it
    /// doubles with each further failure.
    #[arg(long, env = "PLINTH_LOGIN_LOCKOUT_SECS", default_value_t = 1)]
    pub(crate) login_lockout_secs: u64,
    /// The longest lockout, in seconds.
    #[arg(long, env = "PLINTH_LOGIN_LOCKOUT_MAX_SECS", default_value_t = 900)]
    pub(crate) login_lockout_max_secs: u64,
    /// Failed confirmation-page and OAuth sign-in logins per minute for
    /// each tenant (that many at once at most, refilled evenly); beyond it
    /// every login to that tenant is refused before hashing (`429
    /// login_locked`) until one is earned, except at an address where its
    /// user logged in before. Failed catalog sign-ins have budgets of this
    /// size of their own.
    #[arg(long, env = "PLINTH_MAX_FAILED_LOGINS_PER_MINUTE", default_value_t = 600)]
    pub(crate) max_failed_logins_per_minute: u32,
    /// Keys each failed-login throttle table (users, (user, address) pairs,
    /// addresses) and the table of addresses users logged in from keep at
    /// most. A locked key is never forgotten; a table full of locks refuses
    /// the logins it could not count (`503 login_busy`).
    #[arg(long, env = "PLINTH_LOGIN_THROTTLE_MAX_KEYS", default_value_t = 10_000)]
    pub(crate) login_throttle_max_keys: usize,
    /// Accept `http://` JWKS URLs for external confirmation servers (for
    /// tests and closed networks only: the keys decide what runs).
    #[arg(long, env = "PLINTH_CHEQ_ALLOW_HTTP_JWKS")]
    pub(crate) cheq_allow_http_jwks: bool,
    /// Accept `http://` URLs for OAuth clients' metadata documents (client
    /// ids) and tenants' external identity providers (their discovery
    /// documents and keys), for tests and closed networks only: these
    /// documents say where codes go and which tokens are good.
    #[arg(long, env = "PLINTH_OAUTH_ALLOW_HTTP")]
    pub(crate) oauth_allow_http: bool,
    /// Largest JWKS of an external confirmation server, in KiB.
    #[arg(long, env = "PLINTH_CHEQ_JWKS_MAX_KIB", default_value_t = 64)]
    pub(crate) cheq_jwks_max_kib: usize,
    /// How long an external confirmation server's keys are trusted before
    /// they are fetched again, in seconds (a key it revokes is trusted that
    /// long at most).
    #[arg(long, env = "PLINTH_CHEQ_JWKS_CACHE_SECS", default_value_t = 300)]
    pub(crate) cheq_jwks_cache_secs: u64,
    /// How long a failed fetch of an external confirmation server's keys is
    /// answered from the cache (`502`) before it is tried again, in seconds.
    #[arg(long, env = "PLINTH_CHEQ_JWKS_FAILURE_CACHE_SECS", default_value_t = 5)]
    pub(crate) cheq_jwks_failure_cache_secs: u64,
    /// The URL clients reach this server at, for the absolute URIs of a
    /// CHEQ URI pack (default: `http://` and the listening address). Set it
    /// when the server is behind a proxy or listens on 0.0.0.0.
    #[arg(long, env = "PLINTH_PUBLIC_URL")]
    pub(crate) public_url: Option<String>,
    /// More names the MCP endpoint answers to (DNS-rebinding protection
    /// accepts only the loopback names, the public URL's host and the
    /// listening address otherwise): `name` for any port, `name:port` for
    /// one; repeat it (or comma-separate in the environment) for the names
    /// a balancer or a cluster gives the server.
    #[arg(long = "mcp-allowed-host", env = "PLINTH_MCP_ALLOWED_HOSTS", value_delimiter = ',', value_name = "HOST")]
    pub(crate) mcp_allowed_hosts: Vec<String>,
    /// Browser origins (`https://app.example`) allowed to call the MCP
    /// endpoint and the OAuth metadata, token, registration and revocation
    /// endpoints from script (CORS); none by default. Repeat it, or
    /// comma-separate in the environment.
    #[arg(long = "cors-origin", env = "PLINTH_CORS_ORIGINS", value_delimiter = ',', value_name = "ORIGIN")]
    pub(crate) cors_origins: Vec<String>,
    /// Connections open at once (keep it below the process's open-file
    /// limit). At the cap the server stops accepting: further clients wait
    /// in the kernel's listen backlog until a connection closes.
    #[arg(long, env = "PLINTH_MAX_CONNECTIONS", default_value_t = 1024)]
    pub(crate) max_connections: usize,
    /// Connections open at once from one client address (the TCP peer; an
    /// IPv6 client counted by its /64). Beyond it a new connection from that
    /// address is closed at once; other clients are still served.
    #[arg(long, env = "PLINTH_MAX_CONNECTIONS_PER_ADDRESS", default_value_t = 64)]
    pub(crate) max_connections_per_address: usize,
    /// Seconds a request head may take to arrive: a new connection's first
    /// from its accept, a kept-alive one's next from its first byte; then
    /// the connection is closed.
    #[arg(long, env = "PLINTH_HEADER_READ_TIMEOUT_SECS", default_value_t = 10)]
    pub(crate) header_read_timeout_secs: u64,
    /// Seconds a request body may take to arrive after its head; later
    /// answers 408 and closes the connection.
    #[arg(long, env = "PLINTH_REQUEST_BODY_TIMEOUT_SECS", default_value_t = 30)]
    pub(crate) request_body_timeout_secs: u64,
    /// Seconds a connection serving no request may stay without a byte
    /// read or written (an idle keep-alive connection) before it is closed.
    #[arg(long, env = "PLINTH_IDLE_TIMEOUT_SECS", default_value_t = 60)]
    pub(crate) idle_timeout_secs: u64,
    /// How instance memory is allocated.
    #[arg(long, env = "PLINTH_ALLOCATOR", value_enum, default_value_t = Allocator::Pooling)]
    pub(crate) allocator: Allocator,
    /// Log format.
    #[arg(long, env = "PLINTH_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub(crate) log_format: LogFormat,
    /// Export traces (a span per request, per tool execution and per
    /// outbound request of a tool) to this OpenTelemetry collector, over
    /// OTLP/HTTP with protobuf: its base URL, such as http://127.0.0.1:4318
    /// (`/v1/traces` is appended). Off when unset: then nothing is exported
    /// or attempted (docs/observability.md).
    #[arg(long, env = "PLINTH_OTLP_ENDPOINT", value_name = "URL")]
    pub(crate) otlp_endpoint: Option<String>,
    /// Keys of a caller's `tracestate` passed on to tools' backends with
    /// its `traceparent` (repeatable; in the environment, comma-separated).
    /// None by default: a caller's `tracestate` carries other vendors' data.
    #[arg(long = "forward-tracestate", env = "PLINTH_FORWARD_TRACESTATE", value_delimiter = ',', value_name = "KEY")]
    pub(crate) forward_tracestate: Vec<String>,
    /// How freed pool slots are reset for the next instance: `scan` (the
    /// pages a call wrote, found with Linux's PAGEMAP_SCAN) or `prefix`
    /// (the first MiB of each memory, whatever was written). Both are
    /// sound. See docs/sandbox.md.
    #[arg(long, env = "PLINTH_SLOT_RESET", value_enum, default_value_t = SlotResetArg::Scan)]
    pub(crate) slot_reset: SlotResetArg,
    /// How long a decided or expired CHEQ transaction, with its evidence,
    /// is kept, in days; then it is deleted and its result URI answers 404.
    #[arg(long, env = "PLINTH_CONFIRMATION_RETENTION_DAYS", default_value_t = 30)]
    pub(crate) confirmation_retention_days: u64,
    /// The same in seconds, overriding the days (for tests).
    #[arg(long, env = "PLINTH_CONFIRMATION_RETENTION_SECS", hide = true)]
    pub(crate) confirmation_retention_secs: Option<u64>,
    /// Deploys that may be received and compiled at once (an upload takes its
    /// slot before its body is read); more answer 503 with Retry-After.
    #[arg(long, env = "PLINTH_MAX_CONCURRENT_DEPLOYS", default_value_t = plinth::host::DEFAULT_MAX_CONCURRENT_DEPLOYS)]
    pub(crate) max_concurrent_deploys: usize,
    /// Seconds a compile worker (the process that compiles a deployed
    /// component) may take before it is killed; the deploy (or first call)
    /// then answers 503 `compile_unavailable` and nothing is kept.
    #[arg(long, env = "PLINTH_COMPILE_DEADLINE_SECS", default_value_t = 300)]
    pub(crate) compile_deadline_secs: u64,
    /// A compile worker's data limit (RLIMIT_DATA: its heap and private
    /// mappings), in MiB; 0 for none. Compiling a Python or JavaScript tool
    /// needs about 1 GiB. The worker is the kernel's first choice when
    /// memory runs out, whatever this is.
    #[arg(long, env = "PLINTH_COMPILE_WORKER_MEMORY_MIB", default_value_t = 4096)]
    pub(crate) compile_worker_memory_mib: u64,
    /// Seconds a version goes uncalled before its linked code is let go;
    /// its next call links it again from the compiled cache (milliseconds).
    #[arg(long, env = "PLINTH_IDLE_UNLINK_SECS", default_value_t = 600)]
    pub(crate) idle_unlink_secs: u64,
    /// The key stored secrets are encrypted with: the base64 of 32 random
    /// bytes (`head -c32 /dev/urandom | base64`); prefer the environment
    /// variable to the flag. Without it, DATA/secrets.key is used (created
    /// at first start), and a copy of the whole data dir can decrypt them.
    #[arg(long, env = "PLINTH_SECRETS_KEY", hide_env_values = true)]
    pub(crate) secrets_key: Option<String>,
}

#[derive(Clone, Copy, ValueEnum)]
pub(crate) enum Allocator {
    /// Pre-reserved instance slots: the fastest instantiation.
    Pooling,
    /// Allocate per instance (for hosts that restrict virtual memory).
    OnDemand,
}

/// How freed pool slots are reset (`plinth::runtime::SlotReset`).
#[derive(Clone, Copy, ValueEnum)]
pub(crate) enum SlotResetArg {
    /// Rewrite the first MiB of each memory and table, hand back the rest.
    Prefix,
    /// Rewrite only the pages PAGEMAP_SCAN finds written (in memory, in
    /// swap or migrating), up to a MiB; hand back the rest.
    Scan,
}

#[derive(Clone, Copy, ValueEnum)]
pub(crate) enum Lang {
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
pub(crate) enum LogFormat {
    Text,
    Json,
}

#[derive(clap::Args)]
pub(crate) struct PackArgs {
    /// The tool's directory: its `wit/` folder, optional `plinth.toml`
    /// and sources.
    #[arg(default_value = ".")]
    pub(crate) crate_dir: PathBuf,
    /// A component already built from the tool; without it, the tool is
    /// built for its language (`language` in plinth.toml): `cargo build
    /// --release --target wasm32-wasip2`, componentize-py or componentize-js.
    #[arg(long)]
    pub(crate) wasm: Option<PathBuf>,
    /// Where to write the packed tool (default: `<tool_name>.wasm` in the
    /// current directory).
    #[arg(short, long)]
    pub(crate) output: Option<PathBuf>,
}
