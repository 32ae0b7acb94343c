//! `ToolHost`: the one core every front door calls.
//!
//! It owns the registry (signatures, versions, hashes), the runtime (compiled
//! components) and the store, and offers three things: deploy a packed
//! component, enumerate tools, invoke a version. Validation, limits and
//! storage happen here, so every protocol gets them the same way.

pub mod authorizations;
mod catalog;
mod confirmations;
mod console;
mod deploy;
mod invoke;
mod refusals;
mod secrets;
mod tenants;
pub mod toolsets;
mod usage;
pub use refusals::{ConsoleSettings, MAX_VALUE_CHARS};
pub use usage::{UsageOptions, window as usage_window};
mod executors;
mod places;
use places::{Places, Taken};
mod fetcher;
mod fleet;
pub mod oauth;
mod supply;
pub use console::{ConsoleEntry, ConsoleFilter, ConsoleOptions, REFUSED, Refusal, Tail, TooManyTails, console_level};
pub use invoke::RateTaken;
pub use supply::RegistryOptions;
mod retention;
#[cfg(test)]
mod tests;

pub use catalog::{
    Catalog, CatalogEntry, CatalogOrder, CatalogQuery, DesignerSession, MAX_SEARCH_CHARS,
    SESSION_TTL as CATALOG_SESSION_TTL, SignInError, TokenCounted,
};
pub use confirmations::{CheqOptions, LoginError, LoginOptions, PageSession};
pub use confirmations::{
    ConfirmationNeed, ConfirmationServer, Confirmed, DEFAULT_CONFIRMATION_TTL, DecideError, MAX_END_USER_CHARS,
    PendingConfirmation, RunningConfirmed, State, as_words, is_end_user_name, published_annotations, rfc3339,
};
pub use fetcher::{JwksError, JwksOptions};

use crate::door::FrontDoor;
use crate::egress::OutboundLimits;
use crate::idempotency::CallLedger;
use crate::invocation::{InputError, OutputError, OutputLimits, ToolResult};
use crate::package::PackageError;
use crate::registry::{Registry, Tool, ToolVersion};
use crate::runtime::{self, CallError, LoadError, LogBudget, Runtime, RuntimeConfig};
use crate::signature::SignatureDiff;
use crate::store::authorizations::AuthorizationStore;
use crate::store::{RegistryStore, SecretsCipher, SqliteStore, StoreError, StoredVersion, Topic};
use crate::telemetry::CallerTrace;
use crate::tenancy::{self, KeyRecord, TenantRecord};
use confirmations::CheqState;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
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
    /// How long a version goes uncalled before its linked code is let go
    /// (the next call links it again from the compiled cache).
    pub idle_unlink: Duration,
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
    /// The connections tools' outbound requests go out on: the pools
    /// every call shares (`runtime::outbound::pool`).
    pub connections: runtime::outbound::Connections,
    /// Output sizes passed on.
    pub output: OutputLimits,
}

impl Default for HostLimits {
    fn default() -> Self {
        HostLimits {
            max_concurrency_per_tool: 16,
            outbound: Arc::default(),
            connections: Default::default(),
            output: OutputLimits::default(),
        }
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
    /// Retiring the version would break the toolsets that pin it
    /// (`host/toolsets.rs`); a forced retirement goes ahead.
    #[error("{message}")]
    PinnedByToolsets {
        /// What to do about it.
        message: String,
        /// The toolsets, by name.
        toolsets: Vec<String>,
    },
    /// A confirmation condition was refused.
    #[error(transparent)]
    Condition(#[from] crate::cheq::ConditionError),
    /// A bound on work done at once is reached (the tenant's share of the
    /// password-hashing slots); nothing changed, try again shortly.
    #[error("{0}")]
    Busy(String),
    /// The tenant holds as many of these as its quota allows; nothing was
    /// stored.
    #[error("{message}")]
    QuotaExceeded {
        /// What to do about it.
        message: String,
        /// The quota's name (`maxSecrets`, `maxConfigValues`,
        /// `maxEndUsers`).
        quota: &'static str,
        /// Its value.
        max: u32,
    },
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
    /// The call came through a toolset's root and names a version of one
    /// of its tools the toolset does not give (`host/toolsets.rs`; a tool
    /// outside it is [`InvokeError::UnknownTool`]).
    #[error("{0}")]
    OutsideToolset(String),
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
    /// The tenant is running as many invocations as its quota allows
    /// (answered as `busy`; usage counts its reason apart).
    #[error("{0}")]
    OverQuota(String),
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
    /// The call acts with its end user's own account and names no end user.
    #[error(
        "`{0}` acts with the own account of the end user the call is made for: name them (A2T: the `Plinth-End-User` header; OTC: `context.user_id`; MCP: `_meta.endUser`, or call with the person's OAuth token); the tool did not run"
    )]
    AccountEndUserRequired(String),
    /// The call needs confirmation and brings what cannot wait for it.
    #[error("{0}")]
    CannotWait(String),
    /// The call needs confirmation on this server's page and names someone
    /// who is not one of the tenant's end users: nobody could confirm it.
    #[error(
        "`{end_user}` is not an end user of this tenant, so nobody could confirm the call on its confirmation page: name one of its end users (a publisher adds them: PUT /admin/end-users/{{name}}); the tool did not run and nothing was stored"
    )]
    UnknownEndUser {
        /// The name the call gave.
        end_user: String,
    },
    /// Opening the call's transaction would pass one of its tenant's
    /// bounds on the transactions it keeps: nothing was stored.
    #[error("{}", too_many_pending(.limit, *.max, .end_user))]
    TooManyPending {
        /// The bound.
        limit: crate::tenancy::ConfirmationLimit,
        /// Its value.
        max: u64,
        /// The end user the call was made for.
        end_user: String,
    },
    /// The call's transaction, as it would be stored (its inputs and the
    /// signed CHEQ), is larger than the tenant's `maxConfirmationBytes`.
    #[error(
        "the call's confirmation would hold {bytes} bytes (its inputs and the signed CHEQ), more than this tenant keeps for one (maxConfirmationBytes, {max}): make the call with smaller inputs; the tool did not run and nothing was stored"
    )]
    ConfirmationTooLarge {
        /// Its size.
        bytes: u64,
        /// The quota.
        max: u64,
    },
    /// The call acts with its end user's account at a provider, and they
    /// have not granted it (or must again: a new scope, a refresh refused):
    /// nothing ran; each pending link is what they follow.
    #[error("{}", authorization_required(.tool, .end_user, .pending))]
    AuthorizationRequired {
        /// The tool's name.
        tool: String,
        /// The person who must grant it.
        end_user: String,
        /// What to follow, one per provider.
        pending: Vec<authorizations::PendingAuthorization>,
    },
    /// The call's account cannot be used now: its provider is not
    /// configured, or could not be reached to refresh the token.
    #[error("{0}; the tool did not run")]
    AuthorizationUnavailable(String),
    /// The store failed.
    #[error("the server could not record the call: {0}")]
    Storage(String),
    /// The version's code could not be linked for the call (its compiled
    /// code, or its bytes, could not be read or compiled); the tool did not
    /// run.
    #[error("{0}; the tool did not run")]
    Unavailable(String),
    /// Plinth itself failed while it ran the call (its task was interrupted:
    /// a bug, or the server going down), not the tool.
    #[error("the server could not finish the call: {0}; the tool may or may not have run")]
    Internal(String),
}

/// What a call waiting for its end user's grants is told.
fn authorization_required(tool: &str, end_user: &str, pending: &[authorizations::PendingAuthorization]) -> String {
    let providers: Vec<String> = pending.iter().map(|p| format!("`{}`", p.provider)).collect();
    format!(
        "`{tool}` acts with {end_user}'s own account at {}: {end_user} must grant it first, at the link given; the tool did not run",
        providers.join(", ")
    )
}

/// What a call refused by one of its tenant's CHEQ bounds is told: the
/// bound (its quota and value) and what to do.
fn too_many_pending(limit: &crate::tenancy::ConfirmationLimit, max: u64, end_user: &str) -> String {
    use crate::tenancy::ConfirmationLimit;
    let quota = limit.quota();
    let whose = if limit.per_end_user() { format!("end user `{end_user}`") } else { "this tenant".to_string() };
    let what = match limit {
        ConfirmationLimit::Pending | ConfirmationLimit::PendingPerEndUser => "calls waiting for confirmation",
        ConfirmationLimit::PendingBytes | ConfirmationLimit::PendingBytesPerEndUser => {
            "bytes of calls waiting for confirmation"
        }
        ConfirmationLimit::Stored | ConfirmationLimit::StoredBytes => {
            return format!(
                "this tenant keeps as many confirmations as it may ({quota}, {max}) and every one is still waiting or running, so none can be forgotten: have their end users decide the ones waiting, or wait for them to expire; the tool did not run and nothing was stored"
            );
        }
    };
    let allowed = if limit.per_end_user() { "this tenant allows one end user" } else { "its quota allows" };
    format!(
        "{whose} has as many {what} as {allowed} ({quota}, {max}): have the end user decide the ones waiting (accept or reject them), or wait for them to expire, then make the call again; the tool did not run and nothing was stored"
    )
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
            | InvokeError::OverQuota(_)
            | InvokeError::RateLimited { .. }
            | InvokeError::Storage(_)
            | InvokeError::AuthorizationUnavailable(_)
            | InvokeError::Unavailable(_) => true,
            InvokeError::Internal(_) => false,
            InvokeError::Call(CallError::ResourceExhausted | CallError::Trapped(_))
            | InvokeError::Output(_)
            | InvokeError::OutboundDenied(_)
            | InvokeError::UnknownTool(_)
            | InvokeError::UnknownVersion { .. }
            | InvokeError::Input(_)
            | InvokeError::Retired(_)
            | InvokeError::OutsideToolset(_)
            | InvokeError::ConfirmationPending(_)
            | InvokeError::EndUserRequired(_)
            | InvokeError::AccountEndUserRequired(_)
            | InvokeError::CannotWait(_)
            | InvokeError::UnknownEndUser { .. }
            | InvokeError::TooManyPending { .. }
            | InvokeError::ConfirmationTooLarge { .. }
            | InvokeError::AuthorizationRequired { .. } => false,
        }
    }

    /// The error's stable code, as every front door names it
    /// (`api/error.rs`) and the metrics count it: one of a fixed set.
    pub fn code(&self) -> &'static str {
        match self {
            InvokeError::UnknownTool(_) | InvokeError::UnknownVersion { .. } => "not_found",
            InvokeError::Retired(_) => "version_retired",
            InvokeError::OutsideToolset(_) => "outside_toolset",
            InvokeError::Input(e) => e.code,
            InvokeError::Call(e) => e.code(),
            InvokeError::Busy(_) | InvokeError::OverQuota(_) => "busy",
            InvokeError::RateLimited { .. } => "rate_limited",
            InvokeError::Output(OutputError::Invalid(_)) => "invalid_tool_output",
            InvokeError::Output(OutputError::TooLarge(_)) => "output_too_large",
            InvokeError::OutboundDenied(_) => "outbound_denied",
            InvokeError::ConfirmationPending(_) => "confirmation_pending",
            InvokeError::EndUserRequired(_) | InvokeError::AccountEndUserRequired(_) => "end_user_required",
            InvokeError::CannotWait(_) => "confirmation_cannot_wait",
            InvokeError::UnknownEndUser { .. } => "unknown_end_user",
            InvokeError::TooManyPending { .. } => "too_many_pending_confirmations",
            InvokeError::ConfirmationTooLarge { .. } => "confirmation_too_large",
            InvokeError::AuthorizationRequired { .. } => "authorization_required",
            InvokeError::AuthorizationUnavailable(_) => "authorization_unavailable",
            InvokeError::Storage(_) => "storage_failed",
            InvokeError::Unavailable(_) => "tool_unavailable",
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
            | InvokeError::OutsideToolset(_)
            | InvokeError::Busy(_)
            | InvokeError::OverQuota(_)
            | InvokeError::RateLimited { .. }
            | InvokeError::ConfirmationPending(_)
            | InvokeError::EndUserRequired(_)
            | InvokeError::AccountEndUserRequired(_)
            | InvokeError::CannotWait(_)
            | InvokeError::UnknownEndUser { .. }
            | InvokeError::TooManyPending { .. }
            | InvokeError::ConfirmationTooLarge { .. }
            | InvokeError::AuthorizationRequired { .. }
            | InvokeError::AuthorizationUnavailable(_)
            | InvokeError::Storage(_)
            | InvokeError::Unavailable(_) => false,
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
    /// Tokens the caller supplied for this call only, by provider id (OTC
    /// `context.authorization`): used instead of the end user's grant at
    /// that provider, never stored; ids the version does not declare are
    /// ignored.
    pub authorizations: BTreeMap<String, String>,
    /// The end user the call acts for: who must confirm it, if its tool
    /// wants confirmation.
    pub end_user: Option<String>,
    /// The front door it came through.
    pub front_door: FrontDoor,
    /// The toolset (name, version) whose root it came through, if one:
    /// its usage is counted for the toolset's designer too.
    pub toolset: Option<(String, u32)>,
    /// Set only for a call its end user confirmed ([`confirmations`]).
    pub confirmed: Option<Confirmed>,
    /// Set only for a call whose door took its tenant's rate already
    /// ([`ToolHost::take_rate`]).
    pub rate: Option<RateTaken>,
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
            authorizations: BTreeMap::new(),
            end_user: None,
            front_door,
            toolset: None,
            confirmed: None,
            rate: None,
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
            .field("authorizations", &self.authorizations.keys().collect::<Vec<_>>())
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

/// The core: registry + runtime + store.
pub struct ToolHost {
    registry: Arc<Registry>,
    runtime: Arc<Runtime>,
    store: Arc<dyn RegistryStore>,
    /// Components to compile into the cache in the background (by sha256):
    /// stored versions whose compiled code is not there (after a wasmtime
    /// upgrade, or another replica's deploy), so that their first call
    /// only links.
    to_prepare: std::sync::Mutex<std::sync::mpsc::Sender<String>>,
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
    /// End-user authorization: providers, links, grants
    /// (`host/authorizations.rs`).
    authorizations: authorizations::AuthorizationState,
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
    /// The tenants' toolsets, every version (`host/toolsets.rs`).
    toolsets: toolsets::ToolsetState,
    /// Each tenant's console settings (`host/refusals.rs`).
    console_settings: dashmap::DashMap<String, refusals::ConsoleSettings>,
}

impl ToolHost {
    /// Opens the data dir, loads every stored version and sweeps blobs no
    /// version refers to.
    pub fn open(options: HostOptions) -> anyhow::Result<Self> {
        // Private: the data dir holds secrets, key hashes and evidence.
        crate::private_files::private_dir(&options.data_dir)?;
        // One backend, two slices of it: the registry and end-user
        // authorization (`store::authorizations`).
        let (store, authorization_store): (Arc<dyn RegistryStore>, Arc<dyn AuthorizationStore>) = match &options
            .database_url
        {
            None => {
                let cipher = SecretsCipher::resolve(&options.data_dir, options.secrets_key.as_deref())?;
                let backend = Arc::new(SqliteStore::open(&options.data_dir, cipher)?);
                (backend.clone(), backend)
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
                let backend = Arc::new(crate::store::PostgresStore::open(url, cipher)?);
                (backend.clone(), backend)
            }
        };
        let slots = Places::new(options.runtime.max_instances as usize);
        let deadline = options.runtime.deadline;
        let mut runtime_config = options.runtime;
        runtime_config.cache_dir.get_or_insert_with(|| options.data_dir.join("compiled"));
        let runtime = Arc::new(Runtime::new(runtime_config)?);
        let to_prepare = start_preparing(runtime.clone(), store.clone())?;
        let cheq =
            CheqState::new(store.as_ref(), options.confirmation_ttl, &options.cheq, options.limits.outbound.clone())?;
        let oauth = oauth::OAuthState::new(
            &options.cheq.jwks,
            options.cheq.client_documents_allow_http,
            options.limits.outbound.clone(),
        );
        let supply = supply::SupplyState::new(&options.registries, options.limits.outbound.clone());
        let authorizations = authorizations::AuthorizationState::new(
            authorization_store,
            authorizations::ExchangeOptions { allow_http: options.cheq.client_documents_allow_http },
            options.limits.outbound.clone(),
        )?;
        let host = ToolHost {
            authorizations,
            supply,
            console: console::ConsoleState::new(options.console.clone()),
            usage: Arc::new(usage::UsageState::new(options.usage.clone())),
            console_settings: dashmap::DashMap::new(),
            registry: Arc::default(),
            runtime,
            to_prepare: std::sync::Mutex::new(to_prepare),
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
            toolsets: toolsets::ToolsetState::default(),
        };
        // Where the change log stands before anything is read: a change
        // made while loading is then read again, never missed.
        let start = host.store.changes_since(i64::MAX)?.latest;
        host.interrupt_confirmations()?;
        retention::start_confirmation_sweep(&host, options.confirmation_retention)?;
        usage::start_usage_flush(&host);
        host.fleet.count_replicas(host.store.live_replicas());
        for topic in [Topic::Settings, Topic::Tenants, Topic::Keys, Topic::Toolsets, Topic::Secrets, Topic::Config] {
            host.reload(topic)?;
        }
        let (mut live, mut retired) = (0usize, 0usize);
        for version in host.store.versions()? {
            if host.load_stored(version) {
                live += 1;
            } else {
                retired += 1;
            }
        }
        tracing::info!(live, retired, "stored versions registered (each is linked at its first call)");
        start_unlinking_idle(&host.registry, options.idle_unlink)?;
        host.fleet.caught_up_to(start);
        Ok(host)
    }

    /// Registers a stored version without linking it: its first call does
    /// (a retired version answers `410` from its metadata alone). A live
    /// version whose compiled code is not in the cache is compiled in the
    /// background. Returns whether it is live.
    fn load_stored(&self, stored: StoredVersion) -> bool {
        let live = stored.retired_at.is_none();
        if live && !self.runtime.is_cached(&stored.sha256) {
            // The receiver lives as long as the runtime; a send fails only
            // once it is gone, and then the first call compiles.
            let _ = self.to_prepare.lock().unwrap_or_else(|p| p.into_inner()).send(stored.sha256.clone());
        }
        let (tenant, name) = (stored.tenant.clone(), stored.name.clone());
        self.registry.insert(stored.tool_id, &tenant, &name, ToolVersion::from_stored(stored, None));
        live
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
            outbound_connections_opened: self.limits.connections.opened(),
            outbound_connections_idle: self.limits.connections.idle(),
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

/// The thread that compiles stored components missing from the compiled
/// cache, one at a time; it ends with the host (when the sender is
/// dropped).
fn start_preparing(
    runtime: Arc<Runtime>,
    store: Arc<dyn RegistryStore>,
) -> std::io::Result<std::sync::mpsc::Sender<String>> {
    let (send, receive) = std::sync::mpsc::channel::<String>();
    std::thread::Builder::new().name("plinth-prepare".into()).spawn(move || {
        while let Ok(sha256) = receive.recv() {
            if runtime.is_cached(&sha256) {
                continue;
            }
            match prepare_stored(&runtime, &*store, &sha256) {
                Ok(()) => tracing::info!(sha256, "compiled a stored component in the background"),
                Err(error) => {
                    tracing::warn!(
                        sha256,
                        error,
                        "a stored component could not be compiled; its first call will try again"
                    )
                }
            }
        }
    })?;
    Ok(send)
}

/// Compiles a stored component into the compiled cache unless it is
/// there, from its bytes in the store.
fn prepare_stored(runtime: &Runtime, store: &dyn RegistryStore, sha256: &str) -> Result<(), String> {
    let bytes = store.blob(sha256).map_err(|e| e.to_string())?;
    runtime.prepare(&bytes, sha256).map_err(|e| e.to_string())
}

/// The thread that lets the linked code of versions idle for `idle` go;
/// it ends with the registry.
fn start_unlinking_idle(registry: &Arc<Registry>, idle: Duration) -> std::io::Result<()> {
    let registry = Arc::downgrade(registry);
    let every = (idle / 4).clamp(Duration::from_millis(100), Duration::from_secs(30));
    std::thread::Builder::new().name("plinth-unlink-idle".into()).spawn(move || {
        loop {
            std::thread::sleep(every);
            let Some(registry) = registry.upgrade() else { return };
            let unlinked = registry.unlink_idle(idle.as_secs());
            if unlinked > 0 {
                tracing::debug!(unlinked, "idle versions let their linked code go");
            }
        }
    })?;
    Ok(())
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
