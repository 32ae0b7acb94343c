//! `ToolHost`: the one core every front door calls.
//!
//! It owns the registry (signatures, versions, hashes), the runtime (compiled
//! components) and the store, and offers three things: deploy a packed
//! component, enumerate tools, invoke a version. Validation, limits and
//! storage happen here, so every protocol gets them the same way.

mod catalog;
mod confirmations;
mod console;
mod usage;
pub use usage::{UsageOptions, window as usage_window};
mod executors;
mod places;
use places::{Places, Taken};
mod fetcher;
mod fleet;
pub mod oauth;
mod supply;
pub use console::{ConsoleEntry, ConsoleFilter, ConsoleOptions, Tail, TooManyTails, console_level};
pub use supply::RegistryOptions;
mod retention;
#[cfg(test)]
mod tests;

pub use catalog::{
    Catalog, CatalogEntry, CatalogOrder, CatalogQuery, DesignerSession, MAX_SEARCH_CHARS,
    SESSION_TTL as CATALOG_SESSION_TTL, SignInError,
};
pub use confirmations::{CheqOptions, LoginError, LoginOptions, PageSession};
pub use confirmations::{
    ConfirmationNeed, ConfirmationServer, Confirmed, DEFAULT_CONFIRMATION_TTL, DecideError, MAX_END_USER_CHARS,
    PendingConfirmation, RunningConfirmed, State, as_words, is_end_user_name, published_annotations, rfc3339,
};
pub use fetcher::{JwksError, JwksOptions};

use crate::door::FrontDoor;
use crate::egress::OutboundLimits;
use crate::idempotency::{CallLedger, Claim, Ticket};
use crate::invocation::{self, Described, InputError, OutputError, OutputLimits, ToolResult};
use crate::package::{PackageError, ToolPackage};
use crate::registry::{Registry, Tool, ToolVersion};
use crate::runtime::outbound::OutboundPolicy;
use crate::runtime::{
    self, CallError, CallSetup, Export, LoadError, LoadedComponent, LogBudget, LogLabels, Redactor, Runtime,
    RuntimeConfig,
};
use crate::signature::SignatureDiff;
use crate::store::{CallKey, RegistryStore, SecretsCipher, SqliteStore, StoreError, StoredVersion, Topic};
use crate::telemetry::CallerTrace;
use crate::tenancy::{
    self, AuditEntry, AuditQuery, KeyRecord, NewKey, Principal, Quotas, Role, TenantRecord, unix_now,
};
use confirmations::CheqState;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tracing::Instrument;
use uuid::Uuid;

/// Configuration values, by (tenant, tool name) then key.
pub type ToolConfig = BTreeMap<(String, String), BTreeMap<String, String>>;

/// How to open a host.
#[derive(Debug, Clone)]
pub struct HostOptions {
    /// Where the registry and blobs live (with a database URL, only the
    /// compiled-code cache).
    pub data_dir: PathBuf,
    /// A PostgreSQL URL: the store a fleet of replicas shares. `None` is the
    /// embedded SQLite in the data dir.
    pub database_url: Option<String>,
    /// How often a replica of a fleet reads the change log even when no
    /// notification came (the bound on staleness when one is lost).
    pub change_poll: Duration,
    /// Sandbox limits.
    pub runtime: RuntimeConfig,
    /// Configuration values the operator passed at start; they override
    /// what publishers store.
    pub tool_config: ToolConfig,
    /// An operator key taken from the environment (never stored); keys
    /// created over the API are stored hashed.
    pub operator_key: Option<String>,
    /// Limits beyond the sandbox's own.
    pub limits: HostLimits,
    /// Threads that run tools (apart from the threads serving HTTP).
    pub tool_threads: usize,
    /// How long a call id's response is kept for retries.
    pub call_retention: Duration,
    /// How long a call waits for its end user's confirmation.
    pub confirmation_ttl: Duration,
    /// How long a decided or expired CHEQ transaction (and its evidence) is
    /// kept before it is deleted.
    pub confirmation_retention: Duration,
    /// Deploys that may be received and compiled at once; more are refused
    /// with `503`.
    pub max_concurrent_deploys: usize,
    /// The key stored secrets are encrypted with (base64 of 32 bytes); when
    /// `None`, `DATA/secrets.key` (created at first start).
    pub secrets_key: Option<String>,
    /// End users' logins and external confirmation servers' keys.
    pub cheq: CheqOptions,
    /// How deploys by reference reach registries.
    pub registries: RegistryOptions,
    /// How much of each tenant's recent calls the console keeps.
    pub console: ConsoleOptions,
    /// How usage is written and kept.
    pub usage: UsageOptions,
}

/// How long decided CHEQ transactions are kept unless the operator says
/// otherwise.
pub const DEFAULT_CONFIRMATION_RETENTION: Duration = Duration::from_secs(30 * 24 * 3600);

/// Deploys compiling at once unless the operator says otherwise.
pub const DEFAULT_MAX_CONCURRENT_DEPLOYS: usize = 2;

/// How long call ids are remembered unless the operator says otherwise.
pub const DEFAULT_CALL_RETENTION: Duration = Duration::from_secs(24 * 3600);

/// Operator limits the core enforces around each invocation.
#[derive(Debug, Clone)]
pub struct HostLimits {
    /// Invocations of one tool running at once (a tool may ask for fewer).
    pub max_concurrency_per_tool: u32,
    /// Outbound HTTP policy (shared by every call).
    pub outbound: Arc<OutboundLimits>,
    /// Output sizes passed on.
    pub output: OutputLimits,
}

impl Default for HostLimits {
    fn default() -> Self {
        HostLimits { max_concurrency_per_tool: 16, outbound: Arc::default(), output: OutputLimits::default() }
    }
}

/// Why a deploy was refused.
#[derive(Debug, thiserror::Error)]
pub enum DeployError {
    /// The bytes are not a valid packed tool.
    #[error(transparent)]
    Package(#[from] PackageError),
    /// The component does not compile or link.
    #[error(transparent)]
    Load(#[from] LoadError),
    /// Persisting failed; nothing was registered.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The new version would break callers of an earlier one (any in the
    /// tool's history, retired ones too).
    #[error("{}", breaking_message(.tool, .current, .diff))]
    Breaking {
        /// The tool's name.
        tool: String,
        /// The newest version it would break.
        current: u32,
        /// Every change, breaking or not.
        diff: SignatureDiff,
    },
    /// No such tenant.
    #[error("there is no tenant `{0}`")]
    UnknownTenant(String),
    /// The component is larger than the tenant may deploy.
    #[error("the component is {size} bytes; tenant `{tenant}` may deploy components of at most {max} bytes")]
    TooLarge {
        /// The tenant.
        tenant: String,
        /// The component's size.
        size: usize,
        /// The tenant's quota.
        max: u64,
    },
    /// The tool already has as many versions (retired ones included) as its
    /// tenant allows.
    #[error(
        "`{tool}` already has {max} versions (retired ones count: they keep their rows and bytes), the quota of tenant `{tenant}`; deploy it under a new name or ask the operator for more"
    )]
    TooManyVersions {
        /// The tenant.
        tenant: String,
        /// The tool's name.
        tool: String,
        /// The tenant's quota.
        max: u32,
    },
    /// The component could not be pulled from its registry.
    #[error(transparent)]
    Pull(#[from] crate::supply::oci::OciError),
    /// The tenant's trust policy refuses it.
    #[error(transparent)]
    Untrusted(#[from] crate::supply::Untrusted),
    /// The deploy's task ended before it finished; nothing was deployed.
    #[error("the deploy was interrupted; nothing was deployed")]
    Interrupted,
    /// The tenant is pulling another component already.
    #[error("tenant `{0}` is pulling another component from a registry; deploy this one when that one is done")]
    TenantPulling(String),
    /// As many deploys as the server allows are being received or
    /// compiling; nothing was deployed.
    #[error("the server is receiving and compiling as many deploys as it may; nothing was deployed, retry shortly")]
    Busy,
    /// The tenant already has as many live tools as it may.
    #[error("tenant `{tenant}` already has {max} live tools, its quota; retire one or ask the operator for more")]
    TooManyTools {
        /// The tenant.
        tenant: String,
        /// The tenant's quota.
        max: u32,
    },
    /// `expectVersion` does not match what the deploy would produce.
    #[error("expected this deploy to {}, but it would {}", describe_version(*.expected), describe_version(*.actual))]
    UnexpectedVersion {
        /// What the caller asked for.
        expected: u32,
        /// What the deploy would produce (the existing version for
        /// identical bytes).
        actual: u32,
    },
}

fn describe_version(n: u32) -> String {
    format!("be version {n}")
}

fn breaking_message(tool: &str, current: &u32, diff: &SignatureDiff) -> String {
    let changes: Vec<&str> = diff.breaking().map(|c| c.message.as_str()).collect();
    format!(
        "this would break callers of `{tool}` version {current}: {}. A new version may only add optional inputs, add outputs, widen what inputs accept, or edit descriptions; deploy a tool with a new name for anything else",
        changes.join("; ")
    )
}

/// Why a change to tools, tenants, keys, secrets or config was refused.
#[derive(Debug, thiserror::Error)]
pub enum ChangeError {
    /// What it names does not exist (or belongs to another tenant).
    #[error("{0}")]
    NotFound(String),
    /// The request is not valid.
    #[error("{0}")]
    Invalid(String),
    /// It conflicts with what exists.
    #[error("{0}")]
    Conflict(String),
    /// The caller's role may not make this change (a publisher relaxing
    /// what an operator set).
    #[error("{0}")]
    Forbidden(String),
    /// A confirmation condition was refused.
    #[error(transparent)]
    Condition(#[from] crate::cheq::ConditionError),
    /// Persisting failed; nothing changed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// One of the `--max-concurrent-deploys` deploy slots
/// ([`ToolHost::deploy_slot`]), held from before the component's bytes are
/// read until the deploy is done: an upload is up to 32 MiB in memory, so
/// the bound must cover receiving it, not only compiling it.
#[derive(Debug)]
pub struct DeploySlot {
    /// Released when dropped.
    _permit: tokio::sync::OwnedSemaphorePermit,
}

/// What a deploy did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Deployed {
    /// The toolId.
    pub tool_id: Uuid,
    /// The tool's name.
    pub name: String,
    /// The version the bytes are deployed as.
    pub version: u32,
    /// The sha256 of the bytes.
    pub sha256: String,
    /// The sha256 of the version's signature.
    pub signature_sha256: String,
    /// The version that was current before (none for a new tool).
    pub previous_version: Option<u32>,
    /// `false` when these exact bytes were already deployed (nothing changed).
    pub created: bool,
    /// Where the version came from and who signed it (for bytes deployed
    /// before, what was recorded then).
    pub provenance: crate::supply::Provenance,
}

/// Why an invocation did not produce outputs.
#[derive(Debug, thiserror::Error)]
pub enum InvokeError {
    /// No such tool.
    #[error("there is no tool with id {0}")]
    UnknownTool(String),
    /// The tool exists, the version does not.
    #[error("tool {tool_id} has no version {version}")]
    UnknownVersion {
        /// The toolId.
        tool_id: Uuid,
        /// The version asked for.
        version: u32,
    },
    /// The request does not fit the signature.
    #[error(transparent)]
    Input(#[from] InputError),
    /// The version (or, unpinned, every version) is retired.
    #[error("{0}")]
    Retired(String),
    /// The sandbox stopped the tool.
    #[error(transparent)]
    Call(#[from] CallError),
    /// The tool's answer does not fit its signature or the size limits.
    #[error(transparent)]
    Output(#[from] OutputError),
    /// The tool failed after the host refused one of its outbound requests.
    #[error("the tool tried to reach what it may not: {0}")]
    OutboundDenied(String),
    /// The tool, its tenant or the host is running as many invocations as
    /// it may.
    #[error("{0}")]
    Busy(String),
    /// The tenant is over its invocation rate.
    #[error("tenant `{tenant}` is over its invocation rate; retry after {retry_after:?}")]
    RateLimited {
        /// The tenant.
        tenant: String,
        /// When a call will be accepted again.
        retry_after: Duration,
    },
    /// The call waits for its end user's confirmation (the tool's
    /// `[confirmation]`): the tool has not run, and runs only once the end
    /// user accepts.
    #[error("the call waits for its end user's confirmation (transaction {})", .0.id)]
    ConfirmationPending(PendingConfirmation),
    /// The call needs its end user's confirmation and names no end user.
    #[error(
        "`{0}` needs the confirmation of the end user the call is made for: name them (A2T: the `Plinth-End-User` header; OTC: `context.user_id`); the tool did not run"
    )]
    EndUserRequired(String),
    /// The call needs confirmation and brings what cannot wait for it.
    #[error("{0}")]
    CannotWait(String),
    /// The store failed.
    #[error("the server could not record the call: {0}")]
    Storage(String),
    /// Plinth itself failed while it ran the call (its task was interrupted:
    /// a bug, or the server going down), not the tool.
    #[error("the server could not finish the call: {0}; the tool may or may not have run")]
    Internal(String),
}

impl InvokeError {
    /// Whether the same call, made again, may succeed: busy, over the rate,
    /// the store failing, or the deadline passing while the tool waited (on
    /// a slow backend, say). A trap, exhausted memory, an answer outside the
    /// signature or the size limits, a denied outbound request and a tool
    /// still computing at its deadline fail the same way every time; so do
    /// the refusals of the request itself.
    pub fn is_temporary(&self) -> bool {
        match self {
            InvokeError::Call(CallError::Timeout { computing, .. }) => !computing,
            InvokeError::Call(CallError::Busy)
            | InvokeError::Busy(_)
            | InvokeError::RateLimited { .. }
            | InvokeError::Storage(_) => true,
            InvokeError::Internal(_) => false,
            InvokeError::Call(CallError::ResourceExhausted | CallError::Trapped(_))
            | InvokeError::Output(_)
            | InvokeError::OutboundDenied(_)
            | InvokeError::UnknownTool(_)
            | InvokeError::UnknownVersion { .. }
            | InvokeError::Input(_)
            | InvokeError::Retired(_)
            | InvokeError::ConfirmationPending(_)
            | InvokeError::EndUserRequired(_)
            | InvokeError::CannotWait(_) => false,
        }
    }

    /// The error's stable code, as every front door names it
    /// (`api/error.rs`) and the metrics count it: one of a fixed set.
    pub fn code(&self) -> &'static str {
        match self {
            InvokeError::UnknownTool(_) | InvokeError::UnknownVersion { .. } => "not_found",
            InvokeError::Retired(_) => "version_retired",
            InvokeError::Input(e) => e.code,
            InvokeError::Call(e) => e.code(),
            InvokeError::Busy(_) => "busy",
            InvokeError::RateLimited { .. } => "rate_limited",
            InvokeError::Output(OutputError::Invalid(_)) => "invalid_tool_output",
            InvokeError::Output(OutputError::TooLarge(_)) => "output_too_large",
            InvokeError::OutboundDenied(_) => "outbound_denied",
            InvokeError::ConfirmationPending(_) => "confirmation_pending",
            InvokeError::EndUserRequired(_) => "end_user_required",
            InvokeError::CannotWait(_) => "confirmation_cannot_wait",
            InvokeError::Storage(_) => "storage_failed",
            InvokeError::Internal(_) => "internal",
        }
    }

    /// Whether the tool ran (or began to): the call may have taken effect.
    pub fn tool_ran(&self) -> bool {
        match self {
            InvokeError::Call(CallError::Busy) => false,
            InvokeError::Call(_) | InvokeError::Output(_) | InvokeError::OutboundDenied(_) => true,
            // It may have begun: say so rather than free a call id to run twice.
            InvokeError::Internal(_) => true,
            InvokeError::UnknownTool(_)
            | InvokeError::UnknownVersion { .. }
            | InvokeError::Input(_)
            | InvokeError::Retired(_)
            | InvokeError::Busy(_)
            | InvokeError::RateLimited { .. }
            | InvokeError::ConfirmationPending(_)
            | InvokeError::EndUserRequired(_)
            | InvokeError::CannotWait(_)
            | InvokeError::Storage(_) => false,
        }
    }
}

/// One invocation as the core runs it, whichever front door it came through.
pub struct Call {
    /// The `input` record, built against the version's signature
    /// ([`invocation::input_record`]).
    pub input: wasmtime::component::Val,
    /// The call's id, for the logs.
    pub call_id: String,
    /// Secrets the caller supplied for this call only. They are never stored
    /// and win over the tenant's stored secrets of the same id; ids the
    /// version does not declare are ignored.
    pub secrets: BTreeMap<String, String>,
    /// The end user the call acts for: who must confirm it, if its tool
    /// wants confirmation.
    pub end_user: Option<String>,
    /// The front door it came through.
    pub front_door: FrontDoor,
    /// Set only for a call its end user confirmed ([`confirmations`]).
    pub confirmed: Option<Confirmed>,
    /// Values to redact from everything the call answers and logs, besides
    /// secrets (the `private` inputs the end user entered).
    pub redact: Vec<String>,
    /// The caller's W3C trace context, passed on to the tool's outbound
    /// requests when spans are not exported (when they are, the outbound
    /// request's own span is, in the same trace).
    pub trace: Option<CallerTrace>,
    /// Where the call's log lines are kept for the console (set by
    /// [`ToolHost::invoke`]).
    pub lines: Option<runtime::CallLines>,
    /// Where the call's outbound requests are counted for its usage (set by
    /// [`ToolHost::invoke`]).
    pub outbound: Option<crate::metrics::OutboundTally>,
}

impl Call {
    /// A call of `input` through `front_door`, with a fresh id.
    pub fn new(input: wasmtime::component::Val, front_door: FrontDoor) -> Call {
        Call {
            input,
            call_id: Uuid::new_v4().to_string(),
            secrets: BTreeMap::new(),
            end_user: None,
            front_door,
            confirmed: None,
            redact: Vec::new(),
            trace: None,
            lines: None,
            outbound: None,
        }
    }
}

impl std::fmt::Debug for Call {
    /// Names the supplied secrets, never their values.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Call")
            .field("input", &self.input)
            .field("call_id", &self.call_id)
            .field("secrets", &self.secrets.keys().collect::<Vec<_>>())
            .field("end_user", &self.end_user)
            .field("front_door", &self.front_door)
            .field("confirmed", &self.confirmed.is_some())
            .finish_non_exhaustive()
    }
}

/// A tenant and what enforces its quotas. Replaced whole when its settings
/// change: calls already running keep the permits they hold.
pub struct Tenant {
    /// Its stored settings.
    pub record: TenantRecord,
    /// How many replicas share its quotas: this one enforces
    /// `1/share` of its rate and concurrency (rounded up).
    share: u32,
    /// The invocation-rate token bucket.
    rate: governor::DefaultDirectRateLimiter,
    /// Its running invocations on this replica, as many as may run at once
    /// here, shared with the `Tenant` that replaces this one when its
    /// settings or the fleet's size change.
    running: Places,
}

impl Tenant {
    /// A tenant whose quotas `share` replicas split between them.
    fn new(record: TenantRecord, share: u32) -> Self {
        let q = &record.quotas;
        let share = share.max(1);
        let split = |n: u32| std::num::NonZeroU32::new(n.div_ceil(share)).unwrap_or(std::num::NonZeroU32::MIN);
        let rate = governor::RateLimiter::direct(
            governor::Quota::per_second(split(q.invocations_per_second)).allow_burst(split(q.invocation_burst)),
        );
        let running = Places::new(q.max_concurrent_invocations.div_ceil(share) as usize);
        Tenant { record, share, rate, running }
    }

    /// The tenant with new settings or a new share, after `self`: the
    /// calls running now still count. When the number of replicas changed,
    /// its token bucket starts empty, refilling at the new rate: a replica
    /// joining or leaving never grants a fresh burst. (A quota the operator
    /// edits starts afresh, as a new tenant does.)
    fn succeeding(&self, record: TenantRecord, share: u32) -> Self {
        let mut next = Tenant::new(record, share);
        next.running = self.running.bounded(next.running.max());
        let burst = next.record.quotas.invocation_burst.div_ceil(next.share);
        if next.share != self.share
            && let Some(burst) = std::num::NonZeroU32::new(burst)
        {
            let _ = next.rate.check_n(burst);
        }
        next
    }

    /// A place for one more running invocation, or none while as many run
    /// as the quota allows here.
    fn start_call(&self) -> Option<Taken> {
        self.running.take()
    }

    /// How many more invocations may start here now.
    #[cfg(test)]
    fn free_slots(&self) -> usize {
        self.running.free()
    }
}

/// How many times a deploy decides its version number again after another
/// replica committed the tool's next version first.
const MAX_DEPLOY_ATTEMPTS: u32 = 5;

/// The core: registry + runtime + store.
pub struct ToolHost {
    registry: Registry,
    runtime: Runtime,
    store: Arc<dyn RegistryStore>,
    /// Where this replica's caches stand in the store's change log, and
    /// whether it is ready to serve (see [`ToolHost::catch_up`]).
    fleet: fleet::FleetState,
    /// Config from the operator's command line (wins over `stored_config`).
    tool_config: ToolConfig,
    /// Config publishers stored, by (tenant, tool) then key.
    stored_config: dashmap::DashMap<(String, String), BTreeMap<String, String>>,
    limits: HostLimits,
    tenants: dashmap::DashMap<String, Arc<Tenant>>,
    /// Every key by id, revoked ones included (a revoked key must keep
    /// failing, not become unknown).
    keys: dashmap::DashMap<String, KeyRecord>,
    /// The sha256 of the operator key from the environment, if any.
    operator_key_sha256: Option<String>,
    /// Instance slots of the whole host (the pooling allocator's size).
    slots: Places,
    /// Running invocations per tool.
    per_tool: dashmap::DashMap<Uuid, Places>,
    /// Each tool's share of the log.
    log_budgets: dashmap::DashMap<Uuid, Arc<LogBudget>>,
    /// Secret values by (tenant, id), as publishers stored them.
    secrets: dashmap::DashMap<(String, String), String>,
    /// The threads tools run on (runtimes of their own; see `invoke` and
    /// `executors`).
    executor: Option<executors::Executors>,
    /// Call ids claimed for idempotent calls.
    calls: CallLedger,
    /// The keys this server signs CHEQ objects with, and their expiry.
    cheq: CheqState,
    /// OAuth's settings, fetchers and rates (`host/oauth.rs`).
    oauth: oauth::OAuthState,
    /// Serializes the registry-changing step of deploys and retirements, so
    /// version numbers are assigned without races. Compilation happens
    /// before it is taken.
    changes: std::sync::Mutex<()>,
    /// Deploys being received or compiling now: an upload holds up to
    /// 32 MiB and compilation takes seconds of CPU and much memory, so their
    /// number is bounded and the excess refused at once.
    deploys: Arc<tokio::sync::Semaphore>,
    /// What the core did, for `/metrics` (shared with the sweep that
    /// counts CHEQ expiries).
    metrics: Arc<crate::metrics::Metrics>,
    /// The designer's catalog: its sign-in throttle.
    catalog: catalog::CatalogState,
    /// Trust policies and the registry client.
    supply: supply::SupplyState,
    /// Each tenant's recent calls and live tails.
    console: console::ConsoleState,
    /// This replica's usage totals, written to the store periodically.
    usage: Arc<usage::UsageState>,
}

impl ToolHost {
    /// Opens the data dir, loads every stored version and sweeps blobs no
    /// version refers to.
    pub fn open(options: HostOptions) -> anyhow::Result<Self> {
        // Private: the data dir holds secrets, key hashes and evidence.
        crate::private_files::private_dir(&options.data_dir)?;
        let store: Arc<dyn RegistryStore> = match &options.database_url {
            None => {
                let cipher = SecretsCipher::resolve(&options.data_dir, options.secrets_key.as_deref())?;
                Arc::new(SqliteStore::open(&options.data_dir, cipher)?)
            }
            Some(url) => {
                // Every replica must open the secrets the others sealed: a
                // key made up per data dir would not.
                let key = options.secrets_key.as_deref().ok_or_else(|| {
                    anyhow::anyhow!(
                        "with --database-url, every replica needs the same secrets key: set PLINTH_SECRETS_KEY (or --secrets-key) to 32 random bytes in base64, the same on every replica (docs/fleet.md)"
                    )
                })?;
                let cipher = SecretsCipher::resolve(&options.data_dir, Some(key))?;
                Arc::new(crate::store::PostgresStore::open(url, cipher)?)
            }
        };
        let slots = Places::new(options.runtime.max_instances as usize);
        let deadline = options.runtime.deadline;
        let mut runtime_config = options.runtime;
        runtime_config.cache_dir.get_or_insert_with(|| options.data_dir.join("compiled"));
        let runtime = Runtime::new(runtime_config)?;
        let cheq =
            CheqState::new(store.as_ref(), options.confirmation_ttl, &options.cheq, options.limits.outbound.clone())?;
        let oauth = oauth::OAuthState::new(
            &options.cheq.jwks,
            options.cheq.client_documents_allow_http,
            options.limits.outbound.clone(),
        );
        let supply = supply::SupplyState::new(&options.registries, options.limits.outbound.clone());
        let host = ToolHost {
            supply,
            console: console::ConsoleState::new(options.console.clone()),
            usage: Arc::new(usage::UsageState::new(options.usage.clone())),
            registry: Registry::default(),
            runtime,
            fleet: fleet::FleetState::new(options.change_poll),
            store,
            tool_config: options.tool_config,
            stored_config: dashmap::DashMap::new(),
            limits: options.limits,
            tenants: dashmap::DashMap::new(),
            keys: dashmap::DashMap::new(),
            operator_key_sha256: options.operator_key.as_deref().map(tenancy::key_sha256),
            slots,
            per_tool: dashmap::DashMap::new(),
            log_budgets: dashmap::DashMap::new(),
            secrets: dashmap::DashMap::new(),
            executor: Some(executors::Executors::new(options.tool_threads)?),
            // A call another replica runs ends within its deadline; waiting
            // twice that covers one that waited for a slot first.
            calls: CallLedger::new(options.call_retention, 2 * deadline + Duration::from_secs(1)),
            cheq,
            oauth,
            changes: std::sync::Mutex::new(()),
            deploys: Arc::new(tokio::sync::Semaphore::new(options.max_concurrent_deploys.max(1))),
            metrics: Arc::default(),
            catalog: catalog::CatalogState::new(&options.cheq.login),
        };
        // Where the change log stands before anything is read: a change
        // made while loading is then read again, never missed.
        let start = host.store.changes_since(i64::MAX)?.latest;
        host.interrupt_confirmations()?;
        retention::start_confirmation_sweep(&host, options.confirmation_retention)?;
        usage::start_usage_flush(&host);
        host.fleet.count_replicas(host.store.live_replicas());
        for topic in [Topic::Settings, Topic::Tenants, Topic::Keys, Topic::Secrets, Topic::Config] {
            host.reload(topic)?;
        }
        let (mut loaded, mut retired) = (0usize, 0usize);
        for version in host.store.versions()? {
            // One bad version must not keep the others from being served.
            let (tenant, name, number) = (version.tenant.clone(), version.name.clone(), version.version);
            match host.load_stored(version) {
                Ok(true) => loaded += 1,
                Ok(false) => retired += 1,
                Err(e) => {
                    tracing::error!(tenant, tool = name, version = number, error = %e, "stored version could not be loaded; it is not served")
                }
            }
        }
        tracing::info!(loaded, retired, "stored versions loaded (retired versions are listed, not compiled)");
        host.fleet.caught_up_to(start);
        Ok(host)
    }

    /// Registers a stored version; compiles it only if it is live (a retired
    /// version answers `410` from its metadata alone). Returns whether it
    /// was compiled.
    fn load_stored(&self, stored: StoredVersion) -> Result<bool, DeployError> {
        let component = match stored.retired_at {
            Some(_) => None,
            None => Some(self.runtime.load(&self.store.blob(&stored.sha256)?, &stored.sha256)?),
        };
        let compiled = component.is_some();
        let (tenant, name) = (stored.tenant.clone(), stored.name.clone());
        self.registry.insert(stored.tool_id, &tenant, &name, ToolVersion::from_stored(stored, component));
        Ok(compiled)
    }

    /// Deploys a packed component.
    ///
    /// Identical bytes are a no-op that names the existing version. New bytes
    /// for a known tool name become its next version, if the signature is
    /// compatible with the current version's. `expect_version` makes the
    /// deploy fail unless it results in exactly that version. The new version
    /// is compiled before anything is written, then the blob is stored
    /// (fsynced), then the registry row committed, then it becomes current:
    /// a crash at any point leaves no version without its blob.
    ///
    /// The tool lands in `tenant`, within its quotas (`maxTools`,
    /// `maxVersionsPerTool`, `maxComponentBytes`); `actor` is recorded in
    /// the audit log. It takes one of the deploy slots
    /// ([`ToolHost::deploy_slot`]); with none free it is refused at once.
    pub fn deploy(
        &self,
        actor: &Principal,
        tenant: &str,
        bytes: &[u8],
        expect_version: Option<u32>,
    ) -> Result<Deployed, DeployError> {
        self.deploy_in(self.deploy_slot()?, actor, tenant, bytes, expect_version)
    }

    /// One of the `--max-concurrent-deploys` deploy slots, or
    /// [`DeployError::Busy`] at once when all are taken: refused rather
    /// than queued, since a queue of uploads and compilations would hold
    /// every waiting component in memory. A front door receiving a
    /// component takes it before reading the bytes.
    pub fn deploy_slot(&self) -> Result<DeploySlot, DeployError> {
        let permit = self.deploys.clone().try_acquire_owned().map_err(|_| DeployError::Busy)?;
        Ok(DeploySlot { _permit: permit })
    }

    /// [`ToolHost::deploy`] in a deploy slot already taken; the slot is
    /// released when the deploy is done.
    pub fn deploy_in(
        &self,
        slot: DeploySlot,
        actor: &Principal,
        tenant: &str,
        bytes: &[u8],
        expect_version: Option<u32>,
    ) -> Result<Deployed, DeployError> {
        let registry = crate::supply::RegistrySignatures::NotPulled;
        self.deploy_judged(slot, actor, tenant, bytes, expect_version, None, registry)
    }

    /// A deploy of bytes posted (`source` none) or pulled from a registry:
    /// the tenant's trust policy judges them first, with the registry's
    /// signatures of the artifact they came from.
    #[allow(clippy::too_many_arguments)]
    fn deploy_judged(
        &self,
        slot: DeploySlot,
        actor: &Principal,
        tenant: &str,
        bytes: &[u8],
        expect_version: Option<u32>,
        source: Option<crate::supply::Source>,
        registry: crate::supply::RegistrySignatures,
    ) -> Result<Deployed, DeployError> {
        let _slot = slot;
        let quotas =
            self.tenant(tenant).ok_or_else(|| DeployError::UnknownTenant(tenant.to_string()))?.record.quotas.clone();
        if bytes.len() as u64 > quotas.max_component_bytes {
            return Err(DeployError::TooLarge {
                tenant: tenant.to_string(),
                size: bytes.len(),
                max: quotas.max_component_bytes,
            });
        }
        let provenance = self.judge(tenant, bytes, source, registry)?;
        let package = ToolPackage::read(bytes)?;
        // Checked again under the lock; this spares a refused deploy the
        // compilation.
        self.check_version_quota(tenant, &quotas, &package)?;
        let component = self.runtime.load(bytes, &package.sha256)?;
        // Another replica may number the tool's next version first: then
        // this one learns of it and decides again (the compatibility check
        // included), a few times at most.
        let mut attempts = 0;
        loop {
            match self.commit_version(actor, tenant, bytes, &package, &quotas, &component, expect_version, &provenance)
            {
                Err(DeployError::Store(StoreError::Conflict(why))) if attempts < MAX_DEPLOY_ATTEMPTS => {
                    attempts += 1;
                    tracing::info!(
                        tenant,
                        tool = package.signature.name,
                        why,
                        "another replica deployed first; deciding again"
                    );
                    self.reload(Topic::Versions)?;
                }
                outcome => return outcome,
            }
        }
    }

    /// The part of a deploy that decides the version number and commits
    /// it, under the lock that serialises this process's changes.
    #[allow(clippy::too_many_arguments)]
    fn commit_version(
        &self,
        actor: &Principal,
        tenant: &str,
        bytes: &[u8],
        package: &ToolPackage,
        quotas: &Quotas,
        component: &LoadedComponent,
        expect_version: Option<u32>,
        provenance: &crate::supply::Provenance,
    ) -> Result<Deployed, DeployError> {
        let _changing = self.changes.lock().unwrap_or_else(|p| p.into_inner());
        let existing = self.registry.by_name(tenant, &package.signature.name);
        let previous_version = existing.as_ref().and_then(|t| t.current()).map(|v| v.number);
        if let Some(tool) = &existing
            && let Some(version) = tool.version_with_sha256(&package.sha256)
        {
            if let Some(expected) = expect_version.filter(|e| *e != version.number) {
                return Err(DeployError::UnexpectedVersion { expected, actual: version.number });
            }
            // The version keeps the provenance of its first deploy; evidence
            // this deploy adds (a registry reference, a signer) is audited.
            let recorded = &version.provenance;
            let new_source = provenance.source.is_some() && provenance.source != recorded.source;
            if new_source || provenance.signers.iter().any(|s| !recorded.signers.contains(s)) {
                let audit = AuditEntry::new(actor, Some(tenant), "tool.provenance", &tool.name)
                    .sha256(&version.sha256)
                    .detail(serde_json::json!({
                        "toolId": tool.id,
                        "version": version.number,
                        "provenance": provenance.to_json(),
                    }));
                self.store.record_audit(&audit)?;
            }
            return Ok(Deployed {
                tool_id: tool.id,
                name: tool.name.clone(),
                version: version.number,
                sha256: version.sha256.clone(),
                signature_sha256: version.signature_sha256.clone(),
                previous_version,
                created: false,
                provenance: version.provenance.clone(),
            });
        }
        let number = existing.as_ref().map_or(1, |t| t.newest_number() + 1);
        self.check_version_quota(tenant, quotas, package)?;
        // Stored tools count, retired or not: retiring frees no room (the
        // tool keeps its versions and blobs), else deploy, retire, deploy
        // another would store tools without end.
        if existing.is_none() && self.registry.stored_tools(tenant) >= quotas.max_tools as usize {
            return Err(DeployError::TooManyTools { tenant: tenant.to_string(), max: quotas.max_tools });
        }
        if let Some(expected) = expect_version.filter(|e| *e != number) {
            return Err(DeployError::UnexpectedVersion { expected, actual: number });
        }
        // The locked-signature rule holds over the tool's whole history, not
        // just its current version: a caller may be pinned to any of them,
        // and a tool whose versions are all retired keeps its toolId.
        for earlier in existing.iter().flat_map(|t| t.versions_before(None, usize::MAX)) {
            let diff = SignatureDiff::between(&earlier.signature, &package.signature);
            if !diff.is_compatible() {
                return Err(DeployError::Breaking {
                    tool: package.signature.name.clone(),
                    current: earlier.number,
                    diff,
                });
            }
        }

        let tool_id = existing.as_ref().map_or_else(Uuid::new_v4, |t| t.id);
        let stored = StoredVersion {
            tool_id,
            tenant: tenant.to_string(),
            name: package.signature.name.clone(),
            version: number,
            sha256: package.sha256.clone(),
            signature_sha256: package.signature.sha256(),
            signature: package.signature.clone(),
            manifest: package.manifest.clone(),
            provenance: provenance.clone(),
            created_at: unix_now(),
            retired_at: None,
        };
        let audit = AuditEntry::new(actor, Some(tenant), "tool.deploy", &stored.name).sha256(&stored.sha256).detail(
            serde_json::json!({
                "toolId": tool_id,
                "version": number,
                "previousVersion": previous_version,
                "provenance": provenance.to_json(),
            }),
        );
        self.store.insert_version(&stored, bytes, &audit)?;
        let deployed = Deployed {
            tool_id,
            name: stored.name.clone(),
            version: number,
            sha256: stored.sha256.clone(),
            signature_sha256: stored.signature_sha256.clone(),
            previous_version,
            created: true,
            provenance: provenance.clone(),
        };
        self.registry.insert(
            tool_id,
            tenant,
            &deployed.name,
            ToolVersion::from_stored(stored, Some(component.clone())),
        );
        self.metrics.deployed(tenant);
        Ok(deployed)
    }

    /// Refuses a new version of a tool that already has as many versions as
    /// its tenant's `maxVersionsPerTool` (retired ones count: they keep
    /// their rows and blobs). Bytes that are already a version pass.
    fn check_version_quota(&self, tenant: &str, quotas: &Quotas, package: &ToolPackage) -> Result<(), DeployError> {
        let Some(tool) = self.registry.by_name(tenant, &package.signature.name) else { return Ok(()) };
        if tool.version_count() >= quotas.max_versions_per_tool as usize
            && tool.version_with_sha256(&package.sha256).is_none()
        {
            return Err(DeployError::TooManyVersions {
                tenant: tenant.to_string(),
                tool: tool.name.clone(),
                max: quotas.max_versions_per_tool,
            });
        }
        Ok(())
    }

    /// Retires a version: it can no longer be invoked (callers get `410`),
    /// it stays listed and its bytes stay stored. Unpinned callers move to
    /// the newest version that is not retired. Retiring twice is a no-op.
    pub fn retire(&self, actor: &Principal, tenant: &str, tool_id: &str, version: u32) -> Result<(), ChangeError> {
        let tool = self
            .tool(tenant, tool_id)
            .ok_or_else(|| ChangeError::NotFound(format!("there is no tool with id `{tool_id}`")))?;
        let target = tool
            .version(version)
            .ok_or_else(|| ChangeError::NotFound(format!("tool `{}` has no version {version}", tool.name)))?;
        let _changing = self.changes.lock().unwrap_or_else(|p| p.into_inner());
        if target.retired_at().is_some() {
            return Ok(());
        }
        let at = unix_now();
        let audit = AuditEntry::new(actor, Some(tenant), "tool.retire", &tool.name)
            .sha256(&target.sha256)
            .detail(serde_json::json!({ "toolId": tool.id, "version": version }));
        self.store.retire_version(tool.id, version, at, &audit)?;
        // Its compiled code goes with it; calls already running keep theirs.
        let unloaded = target.retire(at);
        self.registry.changed(tenant);
        self.metrics.retired(tenant);
        tracing::info!(tenant, tool = tool.name, version, "version retired");
        if unloaded {
            tracing::info!(tenant, tool = tool.name, version, "unloaded compiled code of the retired version");
        }
        Ok(())
    }

    /// The metrics in the Prometheus (OpenMetrics) text format.
    pub fn render_metrics(&self) -> String {
        let max = self.runtime.config().max_instances as usize;
        let (cache_hits, cache_misses) = self.runtime.cache_counts();
        self.metrics.render(&crate::metrics::RuntimeState {
            instances_in_use: max.saturating_sub(self.slots.free()),
            instances_max: max,
            cache_hits,
            cache_misses,
            pool: self.runtime.pool_slots(),
            slot_reset: self.runtime.slot_reset(),
        })
    }

    /// The metrics, for the HTTP layer to count its answers.
    pub fn metrics(&self) -> &crate::metrics::Metrics {
        &self.metrics
    }

    /// The registry, for enumeration.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// The tenant's tool with this id; `None` for another tenant's.
    pub fn tool(&self, tenant: &str, id: &str) -> Option<Arc<Tool>> {
        let id = Uuid::parse_str(id).ok()?;
        self.registry.get_in(tenant, &id)
    }

    /// Stores a tenant's secret (replacing any value it had).
    pub fn put_secret(&self, actor: &Principal, tenant: &str, id: &str, value: &str) -> Result<(), ChangeError> {
        // The audit entry names the secret, never its value or a hash of it.
        let audit = AuditEntry::new(actor, Some(tenant), "secret.put", id);
        self.store.put_secret(tenant, id, value, &audit)?;
        self.secrets.insert((tenant.to_string(), id.to_string()), value.to_string());
        tracing::info!(tenant, secret = id, "secret set");
        Ok(())
    }

    /// Deletes a tenant's secret.
    pub fn delete_secret(&self, actor: &Principal, tenant: &str, id: &str) -> Result<(), ChangeError> {
        let audit = AuditEntry::new(actor, Some(tenant), "secret.delete", id);
        if !self.store.delete_secret(tenant, id, &audit)? {
            return Err(ChangeError::NotFound(format!("there is no secret `{id}`")));
        }
        self.secrets.remove(&(tenant.to_string(), id.to_string()));
        tracing::info!(tenant, secret = id, "secret deleted");
        Ok(())
    }

    /// The ids of a tenant's stored secrets (never their values).
    pub fn secret_ids(&self, tenant: &str) -> Vec<String> {
        let mut ids: Vec<String> = self
            .secrets
            .iter()
            .filter(|e| e.key().0 == tenant && !Self::is_registry_credential(&e.key().1))
            .map(|e| e.key().1.clone())
            .collect();
        ids.sort();
        ids
    }

    /// Sets a config value of a tenant's tool (the tool need not be deployed
    /// yet, so config can come first).
    pub fn put_config(
        &self,
        actor: &Principal,
        tenant: &str,
        tool: &str,
        key: &str,
        value: &str,
    ) -> Result<(), ChangeError> {
        let audit = AuditEntry::new(actor, Some(tenant), "config.put", format!("{tool}.{key}"))
            .detail(serde_json::json!({ "value": value }));
        let row = (tenant.to_string(), tool.to_string(), key.to_string(), value.to_string());
        self.store.put_config(&row, &audit)?;
        self.stored_config.entry((row.0, row.1)).or_default().insert(row.2, row.3);
        Ok(())
    }

    /// Deletes a config value.
    pub fn delete_config(&self, actor: &Principal, tenant: &str, tool: &str, key: &str) -> Result<(), ChangeError> {
        let audit = AuditEntry::new(actor, Some(tenant), "config.delete", format!("{tool}.{key}"));
        if !self.store.delete_config(tenant, tool, key, &audit)? {
            return Err(ChangeError::NotFound(format!("`{tool}` has no stored config value `{key}`")));
        }
        if let Some(mut values) = self.stored_config.get_mut(&(tenant.to_string(), tool.to_string())) {
            values.remove(key);
        }
        Ok(())
    }

    /// A tenant's stored config, by tool then key.
    pub fn stored_config(&self, tenant: &str) -> BTreeMap<String, BTreeMap<String, String>> {
        self.stored_config
            .iter()
            .filter(|e| e.key().0 == tenant)
            .map(|e| (e.key().1.clone(), e.value().clone()))
            .collect()
    }

    /// The config a tool's calls see, apart from the manifest's defaults:
    /// what the publisher stored, overridden by the operator's command line.
    fn config_values(&self, tool: &Tool) -> BTreeMap<String, String> {
        let key = (tool.tenant.clone(), tool.name.clone());
        let mut values = self.stored_config.get(&key).map(|v| v.clone()).unwrap_or_default();
        if let Some(operator) = self.tool_config.get(&key) {
            values.extend(operator.iter().map(|(k, v)| (k.clone(), v.clone())));
        }
        values
    }

    /// Config keys a tool requires that neither its tenant, the operator nor
    /// a default supplies (reported at start so they can be fixed).
    pub fn missing_config(&self, tool: &Tool) -> Vec<String> {
        let Some(version) = tool.current() else { return Vec::new() };
        let config = runtime::effective_config(&version.manifest, Some(&self.config_values(tool)));
        version
            .manifest
            .config
            .iter()
            .filter(|(k, v)| v.required && !config.contains_key(*k))
            .map(|(k, _)| k.clone())
            .collect()
    }

    /// The tenant called `name`.
    pub fn tenant(&self, name: &str) -> Option<Arc<Tenant>> {
        self.tenants.get(name).map(|t| t.clone())
    }

    /// Every tenant, in name order.
    pub fn tenants(&self) -> Vec<TenantRecord> {
        let mut all: Vec<TenantRecord> = self.tenants.iter().map(|t| t.record.clone()).collect();
        all.sort_by(|a, b| a.name.cmp(&b.name));
        all
    }

    /// Creates a tenant with default quotas (patched by `quotas`, a JSON
    /// object of [`Quotas`] fields).
    pub fn create_tenant(
        &self,
        actor: &Principal,
        name: &str,
        public_enumeration: bool,
        quotas: &serde_json::Value,
    ) -> Result<TenantRecord, ChangeError> {
        if !tenancy::is_tenant_name(name) {
            return Err(ChangeError::Invalid(
                "a tenant name is 1 to 63 lowercase letters, digits or `-`, not starting with `-`".into(),
            ));
        }
        let quotas = Quotas::default().patched(quotas).map_err(ChangeError::Invalid)?;
        let _changing = self.changes.lock().unwrap_or_else(|p| p.into_inner());
        self.refresh_tenants()?;
        if self.tenants.contains_key(name) {
            return Err(ChangeError::Conflict(format!("tenant `{name}` already exists")));
        }
        let record = TenantRecord { name: name.to_string(), public_enumeration, quotas, created_at: unix_now() };
        self.save_tenant(actor, record, "tenant.create")
    }

    /// In a fleet, reads the tenants again before one is created or
    /// changed: another replica may have changed it a moment ago, and a
    /// change made from a stale copy would undo theirs.
    fn refresh_tenants(&self) -> Result<(), StoreError> {
        if self.store.shared() { self.reload(Topic::Tenants) } else { Ok(()) }
    }

    /// Changes a tenant's public enumeration and quotas (fields of `quotas`
    /// not given keep their values). The new quotas apply to the next call.
    pub fn update_tenant(
        &self,
        actor: &Principal,
        name: &str,
        public_enumeration: Option<bool>,
        quotas: &serde_json::Value,
    ) -> Result<TenantRecord, ChangeError> {
        let _changing = self.changes.lock().unwrap_or_else(|p| p.into_inner());
        self.refresh_tenants()?;
        let current = self.tenant(name).ok_or_else(|| ChangeError::NotFound(format!("there is no tenant `{name}`")))?;
        let record = TenantRecord {
            quotas: current.record.quotas.patched(quotas).map_err(ChangeError::Invalid)?,
            public_enumeration: public_enumeration.unwrap_or(current.record.public_enumeration),
            ..current.record.clone()
        };
        self.save_tenant(actor, record, "tenant.update")
    }

    /// Stores a tenant's settings with their audit entry, then makes them
    /// the ones calls see. Called with `changes` held.
    fn save_tenant(&self, actor: &Principal, record: TenantRecord, action: &str) -> Result<TenantRecord, ChangeError> {
        let detail = serde_json::json!({ "publicEnumeration": record.public_enumeration, "quotas": record.quotas });
        let audit = AuditEntry::new(actor, Some(&record.name), action, &record.name).detail(detail);
        self.store.put_tenant(&record, &audit)?;
        self.put_tenant_state(record.clone());
        tracing::info!(tenant = record.name, action, "tenant settings stored");
        Ok(record)
    }

    /// Makes `record` the settings calls see, carrying over what the
    /// tenant had running ([`Tenant::succeeding`]) unless nothing changed.
    fn put_tenant_state(&self, record: TenantRecord) {
        let share = self.fleet.replicas();
        let next = match self.tenants.get(&record.name).map(|t| t.clone()) {
            Some(current) if current.record == record && current.share == share => return,
            Some(current) => current.succeeding(record, share),
            None => Tenant::new(record, share),
        };
        self.tenants.insert(next.record.name.clone(), Arc::new(next));
    }

    /// Creates an API key; the returned key text is the only copy.
    pub fn create_key(
        &self,
        actor: &Principal,
        tenant: Option<&str>,
        role: Role,
        label: Option<String>,
    ) -> Result<NewKey, ChangeError> {
        self.create_key_with(actor, tenant, role, label, |_| Ok(()))
    }

    /// Creates an API key, handing it to `keep` before it is stored: the key
    /// becomes live only once `keep` has it (the first operator key is
    /// written to its file first, so a crash never leaves a live key nobody
    /// holds). When `keep` fails, nothing is stored.
    pub fn create_key_with(
        &self,
        actor: &Principal,
        tenant: Option<&str>,
        role: Role,
        label: Option<String>,
        keep: impl FnOnce(&NewKey) -> std::io::Result<()>,
    ) -> Result<NewKey, ChangeError> {
        match (role, tenant) {
            (Role::Operator, Some(_)) => {
                return Err(ChangeError::Invalid("an operator key belongs to no tenant; leave out `tenant`".into()));
            }
            (Role::Publisher | Role::Consumer, None) => {
                return Err(ChangeError::Invalid(format!("a {} key needs a `tenant`", role.as_str())));
            }
            (_, Some(t)) if !self.tenants.contains_key(t) => {
                return Err(ChangeError::NotFound(format!("there is no tenant `{t}`")));
            }
            _ => {}
        }
        let new = NewKey::generate(tenant.map(str::to_string), role, label, unix_now())
            .map_err(|e| ChangeError::Store(StoreError::Io(e)))?;
        keep(&new).map_err(|e| ChangeError::Store(StoreError::Io(e)))?;
        let audit = AuditEntry::new(actor, tenant, "key.create", &new.record.id)
            .detail(serde_json::json!({ "role": role.as_str(), "label": new.record.label }));
        self.store.insert_key(&new.record, &audit)?;
        self.keys.insert(new.record.id.clone(), new.record.clone());
        tracing::info!(key_id = new.record.id, role = role.as_str(), tenant, "API key created");
        Ok(new)
    }

    /// Revokes a key: it stops working with the next request.
    pub fn revoke_key(&self, actor: &Principal, id: &str) -> Result<KeyRecord, ChangeError> {
        let record = self
            .keys
            .get(id)
            .map(|k| k.clone())
            .ok_or_else(|| ChangeError::NotFound(format!("there is no key `{id}`")))?;
        let at = unix_now();
        let audit = AuditEntry::new(actor, record.tenant.as_deref(), "key.revoke", id)
            .detail(serde_json::json!({ "role": record.role.as_str() }));
        if self.store.revoke_key(id, at, &audit)?
            && let Some(mut key) = self.keys.get_mut(id)
        {
            key.revoked_at = Some(at);
        }
        tracing::info!(key_id = id, "API key revoked");
        Ok(self.keys.get(id).map(|k| k.clone()).unwrap_or(record))
    }

    /// Every key (never the keys themselves), optionally one tenant's.
    pub fn keys(&self, tenant: Option<&str>) -> Vec<KeyRecord> {
        let mut keys: Vec<KeyRecord> = self
            .keys
            .iter()
            .filter(|k| tenant.is_none_or(|t| k.tenant.as_deref() == Some(t)))
            .map(|k| k.clone())
            .collect();
        keys.sort_by(|a, b| (a.created_at, &a.id).cmp(&(b.created_at, &b.id)));
        keys
    }

    /// A key the server itself uses, by name (see
    /// [`RegistryStore::server_key`]).
    pub fn server_key(&self, name: &str) -> Result<[u8; 32], StoreError> {
        self.store.server_key(name)
    }

    /// Whether a live operator key is stored.
    pub fn has_operator_key(&self) -> bool {
        self.keys.iter().any(|k| k.role == Role::Operator && k.revoked_at.is_none())
    }

    /// Who presents `key`, if it is a live key.
    pub fn authenticate(&self, key: &str) -> Option<Principal> {
        if let Some(id) = tenancy::key_id(key)
            && let Some(record) = self.keys.get(id)
        {
            return (record.revoked_at.is_none() && tenancy::key_matches(key, &record.key_sha256)).then(|| Principal {
                key_id: record.id.clone(),
                role: record.role,
                tenant: record.tenant.clone(),
                token: None,
            });
        }
        let configured = self.operator_key_sha256.as_deref()?;
        tenancy::key_matches(key, configured).then(|| Principal::server(tenancy::ENV_OPERATOR_KEY_ID))
    }

    /// A page of the audit log, newest first.
    pub fn audit(&self, query: &AuditQuery) -> Result<Vec<AuditEntry>, StoreError> {
        self.store.audit(query)
    }

    /// The version of a tenant's tool a call means: `version`, or the current
    /// one when it is `None`. Retired versions are refused.
    pub fn resolve(
        &self,
        tenant: &str,
        tool_id: &str,
        version: Option<u32>,
    ) -> Result<(Arc<Tool>, Arc<ToolVersion>), InvokeError> {
        let tool = self.tool(tenant, tool_id).ok_or_else(|| InvokeError::UnknownTool(tool_id.to_string()))?;
        Self::version_of(tool, version)
    }

    /// `tool`'s current version, or version `version` unless retired: what
    /// [`Self::resolve`] does once it has found the tool (a door that found
    /// it by name calls this).
    pub fn version_of(tool: Arc<Tool>, version: Option<u32>) -> Result<(Arc<Tool>, Arc<ToolVersion>), InvokeError> {
        let version = match version {
            None => tool
                .current()
                .ok_or_else(|| InvokeError::Retired(format!("every version of `{}` is retired", tool.name)))?,
            Some(n) => {
                let version = tool.version(n).ok_or(InvokeError::UnknownVersion { tool_id: tool.id, version: n })?;
                if version.retired_at().is_some() {
                    return Err(InvokeError::Retired(format!("version {n} of `{}` is retired", tool.name)));
                }
                version
            }
        };
        Ok((tool, version))
    }

    /// Runs one call of a resolved version and returns its result.
    ///
    /// The call counts against the tenant's rate and concurrency quotas.
    pub async fn invoke(
        self: &Arc<Self>,
        tool: Arc<Tool>,
        version: Arc<ToolVersion>,
        mut call: Call,
    ) -> Result<ToolResult, InvokeError> {
        let started = std::time::Instant::now();
        let (door, number) = (call.front_door, version.number);
        let lines = runtime::CallLines::default();
        call.lines = Some(lines.clone());
        let outbound = crate::metrics::OutboundTally::default();
        call.outbound = Some(outbound.clone());
        let call_id = call.call_id.clone();
        let outcome = self.dispatch(tool.clone(), version, call).await;
        let elapsed = started.elapsed();
        let code = outcome_code(&outcome);
        self.metrics.invoked(&tool.tenant, &tool.name, number, door.as_str(), code, elapsed);
        self.usage.count(usage::Counted {
            tenant: &tool.tenant,
            tool_id: tool.id.to_string(),
            tool: &tool.name,
            version: number,
            door: door.as_str(),
            outcome: code,
            elapsed,
            outbound: outbound.take(),
        });
        let entry = ConsoleEntry {
            seq: 0,
            at_ms: chrono::Utc::now().timestamp_millis(),
            tool: tool.name.clone(),
            tool_id: tool.id.to_string(),
            version: number,
            call_id,
            door: door.as_str(),
            outcome: code.to_string(),
            duration_ms: elapsed.as_secs_f64() * 1000.0,
            lines: std::mem::take(&mut *lines.lock().unwrap_or_else(|p| p.into_inner())),
        };
        self.console.record(&tool.tenant, entry);
        outcome
    }

    /// [`Self::invoke`] before it is counted: the tenant's rate, where the
    /// call runs, the call.
    async fn dispatch(
        self: &Arc<Self>,
        tool: Arc<Tool>,
        version: Arc<ToolVersion>,
        call: Call,
    ) -> Result<ToolResult, InvokeError> {
        let tenant = tool.tenant.clone();
        let quota = self.tenant(&tenant).ok_or_else(|| InvokeError::UnknownTool(tool.id.to_string()))?;
        // A confirmed call was counted when it was made.
        if call.confirmed.is_none()
            && let Err(not_until) = quota.rate.check()
        {
            // The limiter's own clock: building a new one runs CPUID, which
            // traps to the hypervisor in a VM, on every refused call.
            let retry_after = not_until.wait_time_from(governor::clock::Clock::now(quota.rate.clock()));
            return Err(InvokeError::RateLimited { tenant, retry_after });
        }
        let span =
            tracing::info_span!("invoke", tenant, tool = %tool.name, version = version.number, call_id = call.call_id);
        // The executor is gone only while the host is dropped.
        let executors =
            self.executor.as_ref().ok_or_else(|| InvokeError::Internal("the invocation was interrupted".into()))?;
        let checks_confirmation = call.confirmed.is_none() && self.may_need_confirmation(&tool, &version);
        let pool = executors.for_tool(tool.id);
        let this = self.clone();
        let task = async move {
            // Fail closed: a call its tool wants confirmed never runs unconfirmed.
            if checks_confirmation && let Some(refused) = this.confirm_first(&quota, &tool, &version, &call).await? {
                return Ok(ToolResult::Failed(refused));
            }
            this.run(&quota, &tool, &version, call).await
        }
        .instrument(span);
        let mut task = Box::pin(task);
        // Where the call runs. Most calls are done in microseconds, and
        // handing them to another thread and back would cost more than
        // running them: a call starts on the thread that received it. At its
        // first pause — an epoch tick past its first 500 µs, or a
        // wait on an outbound request — the rest moves to the tool threads,
        // so no tool holds a thread serving HTTP for longer than a tick and a
        // half millisecond.
        // A demoted tool (`executors`) and a publisher's confirmation
        // condition (bounded by `cheq::budget`, but milliseconds of a core)
        // go to the tool threads from the start.
        if pool.starts_inline() && !checks_confirmation {
            let first = std::future::poll_fn(|cx| std::task::Poll::Ready(task.as_mut().poll(cx))).await;
            if let std::task::Poll::Ready(outcome) = first {
                return outcome;
            }
        }
        executors.run(pool, task).await.map_err(|_| InvokeError::Internal("the invocation was interrupted".into()))?
    }

    /// Evaluates the confirmation policy on the call's input; a call that
    /// needs its end user's confirmation becomes a pending transaction
    /// (`InvokeError::ConfirmationPending`) and does not run. A tool that
    /// exports `describe` says first what the call will do, for the CHEQ —
    /// or refuses it with its `tool-error` (returned), and no one is asked.
    async fn confirm_first(
        &self,
        tenant: &Tenant,
        tool: &Tool,
        version: &ToolVersion,
        call: &Call,
    ) -> Result<Option<invocation::ToolError>, InvokeError> {
        let inputs = match invocation::to_json(call.input.clone()) {
            serde_json::Value::Object(inputs) => inputs,
            _ => serde_json::Map::new(),
        };
        if !self.needs_confirmation(tool, version, &inputs) {
            return Ok(None);
        }
        let end_user = call.end_user.clone().ok_or_else(|| InvokeError::EndUserRequired(tool.name.clone()))?;
        // Only secrets the tool declares matter: the others are ignored by
        // any call, so they need not wait.
        let supplied: Vec<String> = version
            .manifest
            .secrets
            .iter()
            .filter(|id| call.secrets.contains_key(*id))
            .map(|id| format!("`{id}`"))
            .collect();
        if !supplied.is_empty() {
            return Err(InvokeError::CannotWait(format!(
                "`{}` runs only once its end user confirms the call, and secrets supplied with a call are never stored, so it cannot wait with {}: store them for the tenant (PUT /admin/secrets/{{id}}) instead; the tool did not run",
                tool.name,
                supplied.join(", ")
            )));
        }
        let description = match self.describe(tenant, tool, version, call).await? {
            Some(Described::Failed(refused)) => return Ok(Some(refused)),
            Some(Described::Description(description)) => Some(description),
            None => None,
        };
        let pending = self.begin_confirmation(tool, version, &inputs, call, &end_user, description.as_ref())?;
        Err(InvokeError::ConfirmationPending(pending))
    }

    /// Secrets `version` declares that neither the caller supplied nor its
    /// tenant stored.
    pub fn missing_secrets(
        &self,
        tool: &Tool,
        version: &ToolVersion,
        supplied: &BTreeMap<String, String>,
    ) -> Vec<String> {
        version
            .manifest
            .secrets
            .iter()
            .filter(|id| {
                !supplied.contains_key(*id) && !self.secrets.contains_key(&(tool.tenant.clone(), (*id).clone()))
            })
            .cloned()
            .collect()
    }

    /// Claims a call id for one execution (see [`crate::idempotency`]).
    pub async fn claim_call(&self, key: &CallKey, request_sha256: &str) -> Result<Claim, StoreError> {
        self.calls.claim(&*self.store, key, request_sha256).await
    }

    /// Settles a claimed call: records its response, or (`None`: the tool
    /// never ran) releases the call id.
    pub fn settle_call(&self, ticket: Ticket, response: Option<&str>) -> Result<(), StoreError> {
        match response {
            Some(response) => {
                let bound = self.tenant(ticket.tenant()).map(|t| t.record.quotas.ledger_bound());
                ticket.record(&*self.store, response, bound.unwrap_or_else(|| Quotas::default().ledger_bound()))
            }
            None => ticket.release(&*self.store),
        }
    }

    /// How long call ids are remembered.
    pub fn call_retention(&self) -> Duration {
        self.calls.retention()
    }

    /// Calls whose answers are still to be kept: accepted CHEQ transactions'
    /// and claimed call ids'.
    pub fn answers_to_keep(&self) -> usize {
        self.confirmed_calls_running() + self.calls.in_flight()
    }

    /// Returns once every call whose answer is to be kept (an accepted CHEQ
    /// transaction's, a claimed call id's) has kept it, even if nobody waits
    /// for it any more. A graceful stop awaits it after its last request, so
    /// that a planned stop leaves no call whose outcome is unknown; the
    /// tools' deadlines bound the wait.
    pub async fn answers_kept(&self) {
        self.confirmed_calls_finished().await;
        // Settled tickets leave the ledger; there is nothing to wait on.
        while self.calls.in_flight() > 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Whether the host can run tools: its store can record calls (it
    /// answers, and its write lock is free) and the threads that run tools
    /// are up.
    pub fn can_run_tools(&self) -> bool {
        self.executor.is_some() && self.store.ping().is_ok()
    }

    async fn run(
        &self,
        tenant: &Tenant,
        tool: &Tool,
        version: &ToolVersion,
        call: Call,
    ) -> Result<ToolResult, InvokeError> {
        let run = RunOf {
            export: Export::Call,
            input: call.input,
            call_id: call.call_id,
            secrets: &call.secrets,
            redact: call.redact,
            trace: call.trace.as_ref(),
            lines: call.lines.clone(),
            outbound: call.outbound.clone(),
        };
        let Ran { result, redactor, denials } = self.execute(tenant, tool, version, run).await?;
        let outcome = result.map_err(InvokeError::from).and_then(|value| {
            let mut result = invocation::read_result(&version.signature, value, self.limits.output)?;
            result.redact(&redactor);
            Ok(result)
        });
        // A tool that failed after a refused request failed because of it:
        // say so, rather than pass on its own account of the failure.
        match (outcome, denials.reason()) {
            (Ok(ToolResult::Failed(_)) | Err(InvokeError::Call(CallError::Trapped(_))), Some(why)) => {
                // The refused address is the tool's to choose: it may carry
                // a secret in it.
                Err(InvokeError::OutboundDenied(redactor.text(&why)))
            }
            (outcome, _) => outcome,
        }
    }

    /// Runs the tool's `describe` for a call that needs confirmation, under
    /// the same slots and limits as the call itself; `None` when the tool
    /// exports none.
    async fn describe(
        &self,
        tenant: &Tenant,
        tool: &Tool,
        version: &ToolVersion,
        call: &Call,
    ) -> Result<Option<Described>, InvokeError> {
        if !version.component().is_some_and(|c| c.describes()) {
            return Ok(None);
        }
        let run = RunOf {
            export: Export::Describe,
            input: call.input.clone(),
            call_id: call.call_id.clone(),
            secrets: &call.secrets,
            redact: call.redact.clone(),
            trace: call.trace.as_ref(),
            lines: call.lines.clone(),
            outbound: call.outbound.clone(),
        };
        let Ran { result, redactor, denials } = self.execute(tenant, tool, version, run).await?;
        let outcome = result.map_err(InvokeError::from).and_then(|value| {
            let mut described = invocation::read_description(value, self.limits.output)?;
            described.redact(&redactor);
            Ok(described)
        });
        // A description made while trying what the tool may not (a request
        // that acts, or to an undeclared host) is not shown to anyone: the
        // call is refused, even if the tool went on as if nothing happened.
        match denials.reason() {
            Some(why) => Err(InvokeError::OutboundDenied(redactor.text(&why))),
            None => outcome.map(Some),
        }
    }

    /// Runs one export of the tool in a fresh instance, within the tenant's,
    /// the tool's and the server's slots and the tool's limits.
    async fn execute(
        &self,
        tenant: &Tenant,
        tool: &Tool,
        version: &ToolVersion,
        run: RunOf<'_>,
    ) -> Result<Ran, InvokeError> {
        // Refuse at once rather than queue: a tool that floods its slots must
        // not make its own callers, or anyone else's, wait without bound.
        let _tool_slot = self.per_tool_slots(tool, version).take().ok_or_else(|| {
            InvokeError::Busy(format!("`{}` is running as many invocations as it may; retry shortly", tool.name))
        })?;
        let config = runtime::effective_config(&version.manifest, Some(&self.config_values(tool)));
        let limits = &version.manifest.limits;
        let quotas = &tenant.record.quotas;
        // The tool's own limits, under its tenant's ceilings (and, in the
        // runtime, under the server's).
        let deadline_ms = limits.deadline_ms.map_or(quotas.max_deadline_ms, |ms| ms.min(quotas.max_deadline_ms));
        let deadline = Duration::from_millis(deadline_ms);
        // A demoted tool's calls take turns (`executors`); waiting for one,
        // no longer than the call's deadline (under the server's), holds
        // only this tool's slot, which bounds the waiters.
        let _turn = match &self.executor {
            Some(executors) => executors.turn(tool.id, deadline.min(self.runtime.config().deadline)).await.map_err(|_| {
                InvokeError::Busy(format!(
                    "`{}` recently ran into its deadline or memory limit, and its calls now take turns; retry later",
                    tool.name
                ))
            })?,
            None => None,
        };
        let _tenant_slot = tenant.start_call().ok_or_else(|| {
            InvokeError::Busy(format!(
                "tenant `{}` is running as many invocations as its quota allows; retry shortly",
                tenant.record.name
            ))
        })?;
        let host_slot = self.slots.take().ok_or_else(|| {
            InvokeError::Busy("the server is running as many tool invocations as it may; retry shortly".into())
        })?;

        let memory_mib = limits.memory_mib.map_or(quotas.max_memory_mib, |m| m.min(quotas.max_memory_mib));
        // Every tool's requests are counted, a tool that declares no host
        // included: its attempts (`undeclared`, `denied`) are the ones to see.
        let outbound = OutboundPolicy::new(&version.host_patterns, &config, self.limits.outbound.clone())
            .for_tenant(&tool.tenant)
            .traced(run.trace.cloned())
            .counted(Arc::new(self.metrics.outbound(&tool.tenant, &tool.name).tallied(run.outbound)));
        // `describe` runs before anyone has confirmed the call: it may read, not act.
        let outbound = if run.export == Export::Describe { outbound.read_only() } else { outbound };
        let denials = outbound.denials();
        let sent_any = outbound.sent_any();
        let setup = CallSetup {
            deadline,
            max_memory_bytes: usize::try_from(memory_mib).unwrap_or(usize::MAX).saturating_mul(1 << 20),
            outbound,
            config,
            log: LogLabels { tool: tool.name.clone(), version: version.number, call_id: run.call_id, lines: run.lines },
            secrets: version
                .manifest
                .secrets
                .iter()
                .filter_map(|id| {
                    let value = match run.secrets.get(id) {
                        Some(supplied) => supplied.clone(),
                        None => self.secrets.get(&(tool.tenant.clone(), id.clone()))?.clone(),
                    };
                    Some((id.clone(), value))
                })
                .collect(),
            log_budget: self.log_budgets.entry(tool.id).or_default().clone(),
            redact: run.redact,
        };
        let redactor = Redactor::new(setup.secrets.values().chain(&setup.redact).cloned());
        let started = std::time::Instant::now();
        // Retired since it was resolved: its code is gone, and so is the call.
        let component = version
            .component()
            .ok_or_else(|| InvokeError::Retired(format!("version {} of `{}` is retired", version.number, tool.name)))?;
        // The tool's execution, a child of the call's span, when spans are
        // exported (OpenTelemetry's semantic conventions for running a tool).
        let span = if crate::telemetry::exporting() {
            tracing::info_span!(
                "tool",
                otel.name = format!("execute_tool {}", tool.name),
                otel.status_code = tracing::field::Empty,
                gen_ai.operation.name = "execute_tool",
                gen_ai.tool.name = %tool.name,
                gen_ai.tool.call.id = %setup.log.call_id,
                plinth.tenant = %tool.tenant,
                plinth.tool.version = version.number,
                plinth.tool.export = run.export.as_str(),
                error.type = tracing::field::Empty,
            )
        } else {
            tracing::Span::none()
        };
        // Timed on the CPU: where the tool's next calls start depends on it.
        let running =
            std::pin::pin!(self.runtime.run(&component, run.export, run.input, setup).instrument(span.clone()));
        let mut on_cpu = executors::OnCpu::new(running);
        let result = (&mut on_cpu).await;
        if let Err(e) = &result {
            span.record("error.type", e.code());
            span.record("otel.status_code", "ERROR");
        }
        let elapsed = started.elapsed();
        if let Some(executors) = &self.executor {
            // A call that sent requests counts its whole time: their work
            // (connecting, TLS, reading) runs in tasks its CPU clock does
            // not see, and such a tool's calls start where that work goes.
            let computed = if sent_any.get() { elapsed.max(on_cpu.spent()) } else { on_cpu.spent() };
            executors.ran(tool.id, &tool.name, &result, elapsed, computed);
        }
        self.metrics.ran(&tool.tenant, &tool.name, version.number, elapsed);
        let elapsed_us = elapsed.as_micros() as u64;
        match &result {
            Ok(_) => tracing::debug!(elapsed_us, export = ?run.export, "tool returned"),
            Err(e) => tracing::info!(elapsed_us, export = ?run.export, error = %e, "tool did not return"),
        }
        // Given back after the store, whose drop may wait for the answer to
        // be written (`runtime::after_answer`): whoever takes this place
        // finds a pool slot free.
        runtime::drop_after_answer(host_slot);
        Ok(Ran { result, redactor, denials })
    }

    /// The places bounding this tool's concurrent invocations: the
    /// operator's ceiling, or less if the tool asks for less.
    fn per_tool_slots(&self, tool: &Tool, version: &ToolVersion) -> Places {
        if let Some(places) = self.per_tool.get(&tool.id) {
            return places.clone();
        }
        let ceiling = self.limits.max_concurrency_per_tool;
        let wanted = version.manifest.limits.max_concurrency.map_or(ceiling, |n| n.clamp(1, ceiling));
        self.per_tool.entry(tool.id).or_insert_with(|| Places::new(wanted as usize)).clone()
    }
}

/// One run of a tool's export: what [`ToolHost::execute`] needs of a call.
struct RunOf<'a> {
    export: Export,
    input: wasmtime::component::Val,
    call_id: String,
    secrets: &'a BTreeMap<String, String>,
    redact: Vec<String>,
    trace: Option<&'a CallerTrace>,
    lines: Option<runtime::CallLines>,
    outbound: Option<crate::metrics::OutboundTally>,
}

/// What a run gave: the raw result, the redactor of the call's secrets and
/// private inputs, and the outbound requests it was refused.
struct Ran {
    result: Result<wasmtime::component::Val, CallError>,
    redactor: Redactor,
    denials: runtime::outbound::Denials,
}

impl Drop for ToolHost {
    fn drop(&mut self) {
        // Dropping a runtime from async code would panic; let its threads
        // finish on their own.
        if let Some(executors) = self.executor.take() {
            executors.shutdown();
        }
    }
}

/// A call's outcome as `/metrics` and the console name it: `ok`,
/// `tool_error`, or the code of what stopped it.
pub fn outcome_code(outcome: &Result<ToolResult, InvokeError>) -> &'static str {
    match outcome {
        Ok(ToolResult::Outputs(_)) => "ok",
        Ok(ToolResult::Failed(_)) => "tool_error",
        Err(e) => e.code(),
    }
}

/// 32 random bytes, base64url.
fn random_token() -> Result<String, StoreError> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| StoreError::Io(std::io::Error::other(e)))?;
    Ok(base64::Engine::encode(&base64::engine::general_purpose::URL_SAFE_NO_PAD, bytes))
}
