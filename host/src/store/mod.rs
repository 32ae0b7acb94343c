//! Durable state: every row the host keeps and the component bytes its
//! versions point to, behind one trait ([`RegistryStore`]) with two
//! implementations.
//!
//! All SQL lives in this module. The embedded default is SQLite in the data
//! dir ([`SqliteStore`], component bytes as content-addressed files,
//! [`BlobStore`]); a fleet of replicas shares PostgreSQL ([`PostgresStore`],
//! the bytes in the database). Whatever a replica holds in memory is a cache
//! of the store that [`RegistryStore::changes_since`] says when to refresh.

#[macro_use]
pub mod authorizations;
mod blobs;
mod postgres;
mod sealed;
mod sqlite;
#[cfg(test)]
mod suite;

pub use blobs::BlobStore;
pub use postgres::PostgresStore;
pub use sealed::{KEY_FILE as SECRETS_KEY_FILE, SecretsCipher};
pub use sqlite::SqliteStore;

use crate::manifest::ToolManifest;
use crate::signature::Signature;
use crate::tenancy::{
    AuditEntry, AuditQuery, ConfirmationBound, ConfirmationLimit, ConfirmationUsage, KeyRecord, LedgerBound,
    TenantRecord,
};
use uuid::Uuid;

/// A persistence failure. Messages name the data dir path, never contents.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The database refused or failed an operation.
    #[error("registry database: {0}")]
    Database(#[from] rusqlite::Error),
    /// A blob could not be written or read.
    #[error("blob store: {0}")]
    Io(#[from] std::io::Error),
    /// A blob's bytes no longer match its hash.
    #[error("blob {0} is corrupt: its bytes do not match its sha256")]
    Corrupt(String),
    /// Rows refer to rows that do not exist.
    #[error("registry database is inconsistent: {0}")]
    Inconsistent(String),
    /// A stored row could not be decoded.
    #[error("registry row for {0} is unreadable: {1}")]
    Decode(String, serde_json::Error),
    /// PostgreSQL refused or failed an operation, or could not be reached.
    #[error("database: {0}")]
    Postgres(#[from] sqlx::Error),
    /// A concurrent change won (another replica deployed this tool's next
    /// version first): reload and decide again.
    #[error("a concurrent change won: {0}")]
    Conflict(String),
    /// The secrets key is malformed.
    #[error("{0}")]
    SecretsKey(String),
    /// The stored secrets were sealed with another key.
    #[error(
        "the stored secrets cannot be decrypted with the key given (it is not the one they were stored with, or the database was altered): start the server with the key they were stored with (PLINTH_SECRETS_KEY, or the file secrets.key in the data dir). If that key is lost, the stored secrets are too: see docs/deploying.md, \"The data dir\""
    )]
    WrongSecretsKey,
}

/// Runs `wait` — a wait for the database: SQLite's lock, held by a write
/// that fsyncs, or a PostgreSQL answer, up to seconds — without holding up
/// the other requests of the async worker it is called on: on a
/// multi-threaded runtime's worker, the worker's other tasks move to
/// another thread for as long as it lasts (`block_in_place`). Elsewhere (a
/// blocking thread, a current-thread runtime, no runtime) it just runs.
pub(crate) fn off_the_workers<T>(wait: impl FnOnce() -> T) -> T {
    use tokio::runtime::{Handle, RuntimeFlavor};
    match Handle::try_current() {
        Ok(handle) if handle.runtime_flavor() == RuntimeFlavor::MultiThread => {
            // Its worker role goes to another thread: so does its CPU.
            crate::cpu_policy::unsettle();
            tokio::task::block_in_place(wait)
        }
        _ => wait(),
    }
}

/// One version of one tool, as persisted.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredVersion {
    /// The tool's id, stable across versions.
    pub tool_id: Uuid,
    /// The tenant the tool belongs to.
    pub tenant: String,
    /// The tool's name.
    pub name: String,
    /// The version number (1, 2, …).
    pub version: u32,
    /// The sha256 of the component bytes.
    pub sha256: String,
    /// The signature locked to this version.
    pub signature: Signature,
    /// The sha256 of the signature's canonical JSON (its ETag).
    pub signature_sha256: String,
    /// The manifest it was packed with.
    pub manifest: ToolManifest,
    /// Where it came from and who signed it.
    pub provenance: crate::supply::Provenance,
    /// When it was deployed (Unix seconds).
    pub created_at: i64,
    /// When it was retired (Unix seconds), if it was.
    pub retired_at: Option<i64>,
}

/// One replica's calls of one tool version through one door with one
/// outcome, in one time bucket (`host/usage.rs`).
#[derive(Debug, Clone, PartialEq)]
pub struct UsageRow {
    /// The tenant.
    pub tenant: String,
    /// The tool's id.
    pub tool_id: String,
    /// The tool's name.
    pub tool: String,
    /// The version.
    pub version: u32,
    /// `a2t`, `otc` or `mcp`.
    pub door: String,
    /// `ok`, `tool_error`, or what stopped the call.
    pub outcome: String,
    /// `minute` or `hour`.
    pub granularity: String,
    /// The bucket's start (Unix seconds).
    pub bucket: i64,
    /// The replica that counted them.
    pub replica: String,
    /// Calls.
    pub calls: u64,
    /// Their total duration, in milliseconds.
    pub total_ms: f64,
    /// How many took each of the latency histogram's ranges.
    pub histogram: Vec<u64>,
    /// The calls' outbound requests: declared host → status → requests.
    pub outbound: std::collections::BTreeMap<String, std::collections::BTreeMap<String, u64>>,
    /// The calls refused before they ran: parameter → code → calls (the
    /// parameters a signature's or placeholders, the codes a fixed set).
    pub refused: std::collections::BTreeMap<String, std::collections::BTreeMap<String, u64>>,
    /// For the calls made through a toolset's root, that toolset's name
    /// and version: such rows are the designer's, kept apart
    /// ([`RegistryStore::toolset_usage`]); the vendor's rows (`None`)
    /// count every call, these included.
    pub toolset: Option<(String, u32)>,
}

/// One tool of a toolset: its name, and the version it is pinned to
/// (`None`: it follows the tool's current version).
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize)]
pub struct ToolsetEntry {
    /// The tool's name in the tenant.
    pub name: String,
    /// The pinned version; `None` follows the current one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<u32>,
    /// The designer's words for it, in place of the vendor's (stored in
    /// the same JSON: rows from before words existed read as none).
    #[serde(flatten, default)]
    pub wording: crate::signature::Wording,
}

/// One version of a tenant's toolset, as persisted (`host/toolsets.rs`).
/// A version's content never changes; deleting a toolset marks every one
/// of its versions deleted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredToolset {
    /// The tenant.
    pub tenant: String,
    /// The toolset's name.
    pub name: String,
    /// Its version (1, 2, …; numbering goes on after a delete).
    pub version: u32,
    /// What it is for, for the agent's designer.
    pub description: String,
    /// Its tools, by name.
    pub tools: Vec<ToolsetEntry>,
    /// When this version was made (Unix seconds).
    pub created_at: i64,
    /// When the toolset was deleted, if it was.
    pub deleted_at: Option<i64>,
}

/// A secret as stored: `(tenant, id, value)`.
pub type StoredSecret = (String, String, String);

/// A tenant setting as stored: `(tenant, key, JSON value)`.
pub type StoredSetting = (String, String, String);

/// A tool config value as stored: `(tenant, tool, key, value)`.
pub type StoredConfig = (String, String, String, String);

/// What an OAuth credential the built-in authorization server issued is
/// (`api/oauth.rs`, `host/oauth.rs`). Only the sha256 of the credential
/// itself is stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OAuthGrant {
    /// The sha256 (hex) of the code or token.
    pub token_sha256: String,
    /// `code`, `access` or `refresh`.
    pub kind: String,
    /// The tenant whose authorization server issued it.
    pub tenant: String,
    /// The client it was issued to.
    pub client_id: String,
    /// The end user who signed in and consented.
    pub end_user: String,
    /// The scopes granted, space-separated.
    pub scope: String,
    /// The resource (the tenant's MCP URL) it is for.
    pub resource: String,
    /// The grant it belongs to: a code and every token issued from it,
    /// refreshed or not, share it, and are revoked together.
    pub family: String,
    /// A code's `redirect_uri` and `code_challenge` (JSON); `{}` otherwise.
    pub detail: String,
    /// When it stops being valid (Unix seconds).
    pub expires_at: i64,
    /// When a code was exchanged or a refresh token rotated.
    pub used_at: Option<i64>,
    /// When it (or its family) was revoked.
    pub revoked_at: Option<i64>,
}

/// Whose call id this is: call ids are the caller's idempotency keys, so
/// they are scoped to the tenant and the key that sent them.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CallKey {
    /// The tenant called.
    pub tenant: String,
    /// The id of the key that called.
    pub caller: String,
    /// The caller's call id.
    pub call_id: String,
}

/// What claiming a call id found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claimed {
    /// Nobody had: the caller runs the call.
    Fresh,
    /// Claimed before, for the request with this hash; `response` is `None`
    /// while (or if) that call has not finished.
    Existing {
        /// The sha256 of the request that claimed it.
        request_sha256: String,
        /// The recorded response.
        response: Option<String>,
        /// Whether the claim is held by another live replica that may still
        /// be running the call (always `false` for a store only one process
        /// uses: a claim this process does not hold has lost its runner).
        running_elsewhere: bool,
    },
}

/// The kinds of state a replica caches in memory, each refreshed as a whole
/// when the change log says it changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Topic {
    /// API keys (a revocation). First in order: a replica refreshes what
    /// decides access before anything else.
    Keys,
    /// Tenants and their quotas.
    Tenants,
    /// Toolsets (what a toolset's roots and scoped keys open).
    Toolsets,
    /// Tenants' secrets.
    Secrets,
    /// Tools' stored config.
    Config,
    /// Tenant settings (CHEQ servers and overrides).
    Settings,
    /// End-user authorization: providers, and people's grants (a replica
    /// drops the grants it caches).
    Authorizations,
    /// Versions: deploys and retirements.
    Versions,
}

impl Topic {
    /// Every topic, in the order a replica refreshes them: what decides
    /// access first, versions (which may need compiling) last.
    pub const ALL: [Topic; 8] = [
        Topic::Keys,
        Topic::Tenants,
        Topic::Toolsets,
        Topic::Secrets,
        Topic::Config,
        Topic::Settings,
        Topic::Authorizations,
        Topic::Versions,
    ];

    /// Its name in the change log.
    pub fn as_str(self) -> &'static str {
        match self {
            Topic::Tenants => "tenants",
            Topic::Keys => "keys",
            Topic::Toolsets => "toolsets",
            Topic::Secrets => "secrets",
            Topic::Config => "config",
            Topic::Settings => "settings",
            Topic::Authorizations => "authorizations",
            Topic::Versions => "versions",
        }
    }

    /// The topic named `name` in the change log.
    pub fn parse(name: &str) -> Option<Topic> {
        Topic::ALL.into_iter().find(|t| t.as_str() == name)
    }
}

/// What changed since a point in the change log.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ChangeFeed {
    /// The newest change (pass it to the next `changes_since`).
    pub latest: i64,
    /// The topics changed after the point asked about.
    pub topics: std::collections::BTreeSet<Topic>,
}

/// A logged-in end user of the built-in confirmation server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredSession {
    /// The sha256 of the session cookie's value (the value itself is never
    /// stored).
    pub token_sha256: String,
    /// The tenant it is for.
    pub tenant: String,
    /// The end user.
    pub user: String,
    /// The token every form of the session carries (CSRF).
    pub form_token: String,
    /// When it expires (Unix seconds).
    pub expires_at: i64,
}

/// A designer signed in to the catalog pages with an API key
/// (`host::catalog`). The key itself is never stored: its id and sha256
/// let every request check that it is still live.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredDesignerSession {
    /// The sha256 of the session cookie's value (the value itself is never
    /// stored).
    pub token_sha256: String,
    /// The tenant whose catalog it opens.
    pub tenant: String,
    /// The id of the key it was opened with (as the audit log names keys).
    pub key_id: String,
    /// The sha256 of that key, as `api_keys` stores it.
    pub key_sha256: String,
    /// The token every form of the session carries (CSRF).
    pub form_token: String,
    /// When it was opened (Unix seconds).
    pub created_at: i64,
    /// When it expires (Unix seconds).
    pub expires_at: i64,
}

/// A CHEQ transaction as stored: a call that waits for (or was decided by)
/// its end user's confirmation. Private input values are never stored.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredConfirmation {
    /// The transaction id (random; in the resource and result URIs).
    pub id: String,
    /// The tenant of the tool.
    pub tenant: String,
    /// The tool.
    pub tool_id: Uuid,
    /// The version that runs, pinned when the call was made.
    pub version: u32,
    /// The end user who must confirm.
    pub end_user: String,
    /// The front door the call came through (`a2t`, `otc`): the result is
    /// answered in its shape.
    pub front_door: String,
    /// The call's id.
    pub call_id: String,
    /// The inputs the tool will run with, as JSON by parameter name.
    pub inputs: String,
    /// The CHEQ object signed by this server (a JWS, general JSON).
    pub cheq: String,
    /// `pending`, `accepted` (running), `done`, `rejected`, `expired` or
    /// `interrupted` (the server went down while the tool ran).
    pub state: String,
    /// When the call was made (Unix seconds).
    pub created_at: i64,
    /// When an unanswered confirmation expires (Unix seconds).
    pub expires_at: i64,
    /// When it was accepted or rejected.
    pub decided_at: Option<i64>,
    /// The evidence of the decision: the CHEQ with every signature as
    /// accepted, or who rejected it.
    pub decision: Option<String>,
    /// The answer the caller gets from the result URI, once the tool ran.
    pub result_status: Option<u16>,
    /// Its body.
    pub result_body: Option<String>,
}

/// Stores `c` with no bound in the way, as the tests that are not about
/// the bounds do.
#[cfg(test)]
pub(crate) fn store_pending(store: &dyn RegistryStore, c: &StoredConfirmation) {
    let none = u64::MAX / 4;
    let bound = ConfirmationBound {
        pending: none,
        pending_bytes: none,
        pending_per_end_user: none,
        pending_bytes_per_end_user: none,
        stored: none,
        stored_bytes: none,
    };
    store.insert_confirmation(c, bound, 0).unwrap().unwrap();
}

#[cfg(test)]
impl StoredConfirmation {
    /// A pending transaction of the `default` tenant, for the unit tests.
    pub fn pending_for_test(id: &str, expires_at: i64) -> StoredConfirmation {
        StoredConfirmation {
            id: id.into(),
            tenant: "default".into(),
            tool_id: Uuid::nil(),
            version: 1,
            end_user: "ann".into(),
            front_door: "a2t".into(),
            call_id: "c".into(),
            inputs: "{}".into(),
            cheq: "{}".into(),
            state: "pending".into(),
            created_at: 0,
            expires_at,
            decided_at: None,
            decision: None,
            result_status: None,
            result_body: None,
        }
    }
}

impl StoredConfirmation {
    /// The bytes it holds as stored, as the store counts them for the
    /// tenant's bounds: its inputs, its CHEQ, its decision and its answer.
    pub fn stored_bytes(&self) -> u64 {
        let optional = |text: &Option<String>| text.as_ref().map_or(0, String::len);
        let bytes = self.inputs.len() + self.cheq.len() + optional(&self.decision) + optional(&self.result_body);
        u64::try_from(bytes).unwrap_or(u64::MAX)
    }
}

/// The states of settled CHEQ transactions, in the order a tenant past its
/// stored bound forgets them (each oldest first, by expiry): those nobody
/// accepted (unanswered, rejected) before those whose acceptance they are
/// the evidence of. Waiting (`pending`) and running (`accepted`) ones are
/// never forgotten; the audit log keeps every decision's entry.
pub const FORGOTTEN_FIRST: [&str; 5] = ["expired", "rejected", "retired", "interrupted", "done"];

/// What one tenant's transactions hold, read from the counts the store's
/// triggers keep (none yet: nothing).
fn usage_of(row: Option<(i64, i64, i64, i64)>) -> ConfirmationUsage {
    let count = |n: i64| u64::try_from(n).unwrap_or(0);
    row.map_or_else(ConfirmationUsage::default, |(pending, pending_bytes, stored, stored_bytes)| ConfirmationUsage {
        pending: count(pending),
        pending_bytes: count(pending_bytes),
        stored: count(stored),
        stored_bytes: count(stored_bytes),
    })
}

/// The `store_meta` row up to which (Unix seconds) expired CHEQ
/// transactions were claimed for counting.
const EXPIRIES_CLAIMED_UNTIL: &str = "cheq-expiries-claimed-until";

/// The stored [`EXPIRIES_CLAIMED_UNTIL`] mark, read.
fn claimed_until(stored: Option<String>) -> Result<Option<i64>, StoreError> {
    stored
        .map(|mark| {
            mark.parse::<i64>().map_err(|_| {
                StoreError::Inconsistent(format!("store_meta `{EXPIRIES_CLAIMED_UNTIL}` is not a time: {mark}"))
            })
        })
        .transpose()
}

/// How many CHEQ transactions of one tool expired unanswered in a window
/// [`RegistryStore::claim_expired_confirmations`] claimed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExpiredConfirmations {
    /// The tenant of the tool.
    pub tenant: String,
    /// The tool's name (its id, should the tool be gone).
    pub tool: String,
    /// How many expired.
    pub count: u64,
}

/// How the MCP URL of `tenant`'s toolset `name` ends, whatever the public
/// origin (`…/t/{tenant}/toolsets/{name}/mcp`): the OAuth grants issued
/// for it are revoked when the toolset is deleted.
pub fn toolset_resource_suffix(tenant: &str, name: &str) -> String {
    format!("/t/{tenant}/toolsets/{name}/mcp")
}

/// The host's persistent rows: the registry of versions, tenants, keys, the
/// secrets and config publishers store for tools, and the audit log.
///
/// Every change takes the [`AuditEntry`] that records it and writes both in
/// one transaction: a change is never stored without its audit entry, nor an
/// entry without its change.
pub trait RegistryStore: Send + Sync {
    /// Every stored version of every tool, oldest first.
    fn versions(&self) -> Result<Vec<StoredVersion>, StoreError>;
    /// Records a new version (and the tool, on its first version) with its
    /// component bytes, stored content-addressed before the row. A version
    /// that already exists is never overwritten. Refused with
    /// [`StoreError::Conflict`] unless it is the next of its tool: version 1
    /// of a name the tenant does not have yet, or the newest version + 1 of
    /// the tool with this id and name — so replicas that raced to deploy
    /// the same tool never number two versions alike.
    fn insert_version(&self, version: &StoredVersion, bytes: &[u8], audit: &AuditEntry) -> Result<(), StoreError>;
    /// The component bytes with this sha256, checked against it.
    fn blob(&self, sha256: &str) -> Result<Vec<u8>, StoreError>;
    /// Marks a version retired (its row and blob stay, for audit). Returns
    /// whether it was live until now.
    fn retire_version(&self, tool_id: Uuid, version: u32, at: i64, audit: &AuditEntry) -> Result<bool, StoreError>;

    /// Every stored secret.
    fn secrets(&self) -> Result<Vec<StoredSecret>, StoreError>;
    /// Sets a tenant's secret; a new id only while the tenant holds fewer
    /// than `max` secrets (registry credentials included), checked in the
    /// write's own transaction (in PostgreSQL under a lock of the tenant's
    /// secrets, so that replicas racing for the last place take one).
    /// Returns whether it was stored: `false`, nothing written.
    fn put_secret(&self, tenant: &str, id: &str, value: &str, audit: &AuditEntry, max: u64)
    -> Result<bool, StoreError>;
    /// Deletes a tenant's secret; returns whether it existed.
    fn delete_secret(&self, tenant: &str, id: &str, audit: &AuditEntry) -> Result<bool, StoreError>;

    /// Every stored config value.
    fn config(&self) -> Result<Vec<StoredConfig>, StoreError>;
    /// Sets a config value of a tenant's tool; a new (tool, key) only while
    /// the tenant holds fewer than `max` config values, checked as
    /// [`RegistryStore::put_secret`] checks. Returns whether it was stored.
    fn put_config(&self, value: &StoredConfig, audit: &AuditEntry, max: u64) -> Result<bool, StoreError>;
    /// Deletes a config value; returns whether it existed.
    fn delete_config(&self, tenant: &str, tool: &str, key: &str, audit: &AuditEntry) -> Result<bool, StoreError>;

    /// Every tenant.
    fn tenants(&self) -> Result<Vec<TenantRecord>, StoreError>;
    /// Creates a tenant, or replaces its settings.
    fn put_tenant(&self, tenant: &TenantRecord, audit: &AuditEntry) -> Result<(), StoreError>;

    /// Every key (revoked ones included).
    fn keys(&self) -> Result<Vec<KeyRecord>, StoreError>;
    /// Records a new key. A key scoped to a toolset is refused with
    /// [`StoreError::Conflict`] unless the toolset is live, checked in the
    /// transaction that stores it (a concurrent delete cannot miss it).
    fn insert_key(&self, key: &KeyRecord, audit: &AuditEntry) -> Result<(), StoreError>;
    /// Revokes a key; returns whether it was live until now.
    fn revoke_key(&self, id: &str, at: i64, audit: &AuditEntry) -> Result<bool, StoreError>;

    /// Every version of every toolset, deleted ones included, by tenant,
    /// name and version.
    fn toolsets(&self) -> Result<Vec<StoredToolset>, StoreError>;
    /// Records a toolset's new version. Refused with
    /// [`StoreError::Conflict`] unless its number is the next of its
    /// (tenant, name): 1 for a name never used, else the newest + 1 (a
    /// deleted toolset's numbers are not reused).
    fn insert_toolset(&self, toolset: &StoredToolset, audit: &AuditEntry) -> Result<(), StoreError>;
    /// Marks every version of a toolset deleted at `at` and revokes the
    /// keys scoped to it and the OAuth grants whose resource is its MCP
    /// URL (ending in [`toolset_resource_suffix`]), in one transaction;
    /// returns whether it was live.
    fn delete_toolset(&self, tenant: &str, name: &str, at: i64, audit: &AuditEntry) -> Result<bool, StoreError>;

    /// Claims `key` for one execution: `Fresh` when nobody had, else what
    /// was recorded for it. Records created before `expired_before` are
    /// forgotten first.
    fn claim_call(
        &self,
        key: &CallKey,
        request_sha256: &str,
        now: i64,
        expired_before: i64,
    ) -> Result<Claimed, StoreError>;
    /// Records the response of a claimed call. When its tenant's ledger is
    /// then past `bound`, its oldest settled records are forgotten until it
    /// is within it again (never the one just recorded, nor a running one).
    fn record_call(&self, key: &CallKey, response: &str, bound: LedgerBound) -> Result<(), StoreError>;
    /// Releases the claim of a call whose tool never ran.
    fn release_call(&self, key: &CallKey) -> Result<(), StoreError>;

    /// Deletes call-id records created before `before`, every tenant's, in
    /// batches; returns how many.
    fn sweep_calls(&self, before: i64) -> Result<usize, StoreError>;

    /// Stores a new pending CHEQ transaction if its tenant's transactions
    /// stay within `bound`, checked at `now` in the very transaction that
    /// stores it (replicas storing at once never pass a bound together).
    /// Transactions whose expiry passed are marked `expired` first, when a
    /// bound is reached, so they no longer count as waiting; past the stored
    /// bound the tenant's oldest settled transactions are forgotten, in the
    /// order of [`FORGOTTEN_FIRST`] (never a waiting or running one).
    /// `Ok(Err(limit))`, and nothing stored, when a waiting bound (the
    /// tenant's or the end user's) would be passed, or when nothing settled
    /// is left to forget.
    fn insert_confirmation(
        &self,
        confirmation: &StoredConfirmation,
        bound: ConfirmationBound,
        now: i64,
    ) -> Result<Result<(), ConfirmationLimit>, StoreError>;
    /// The waiting bound (the tenant's or `end_user`'s) a new transaction
    /// of at least `bytes` would pass at `now`, if any, read without
    /// writing: the cheap refusal a call gets before its `describe` runs and
    /// its CHEQ is signed. It refuses only what
    /// [`RegistryStore::insert_confirmation`] would refuse at that moment
    /// (the tenant's count is taken as exact only while none of its waiting
    /// transactions has expired); that insert checks again.
    fn pending_refusal(
        &self,
        tenant: &str,
        end_user: &str,
        bytes: u64,
        bound: ConfirmationBound,
        now: i64,
    ) -> Result<Option<ConfirmationLimit>, StoreError>;
    /// One CHEQ transaction.
    fn confirmation(&self, id: &str) -> Result<Option<StoredConfirmation>, StoreError>;
    /// Moves a transaction from `pending` to `state`, with the evidence of
    /// the decision, at `audit.at`. `false` (and nothing changed) when it
    /// was no longer pending or had expired: a transaction is decided at
    /// most once.
    fn decide_confirmation(
        &self,
        id: &str,
        state: &str,
        decision: Option<&str>,
        audit: &AuditEntry,
    ) -> Result<bool, StoreError>;
    /// Records the answer of an accepted transaction's call (`done`). One
    /// no longer `accepted` (it ended `retired`) is left as it is.
    fn finish_confirmation(&self, id: &str, status: u16, body: &str) -> Result<(), StoreError>;
    /// Ends an accepted transaction whose version was retired before its
    /// call could run (`retired`), appending `audit`. Returns whether it was
    /// `accepted`.
    fn retire_confirmation(&self, id: &str, audit: &AuditEntry) -> Result<bool, StoreError>;
    /// Marks every transaction still `accepted` whose runner is gone as
    /// `interrupted`: run at start. With one process, none can still be
    /// running; in a fleet, those of replicas that stopped beating.
    fn interrupt_confirmations(&self) -> Result<usize, StoreError>;
    /// Deletes the transactions settled before `before` (Unix seconds): a
    /// decided one (`done`, `rejected`, `expired`, `interrupted`, `retired`)
    /// by when it was decided, an unanswered one by when it expired. A
    /// pending transaction is never deleted before it expires, nor a running
    /// (`accepted`) one at all. Returns how many were deleted.
    fn sweep_confirmations(&self, before: i64) -> Result<usize, StoreError>;
    /// Claims, for counting, the transactions that expired unanswered (still
    /// `pending`, their expiry passed) since the last claim and at or before
    /// `until` (Unix seconds), by tenant and tool. The mark of how far
    /// expiries were claimed is stored with them and moved in the same
    /// transaction, so each expiry is claimed once: across restarts, and by
    /// one replica of a fleet (they take turns on the mark). The first claim
    /// on a store claims nothing and sets the mark at `until`; a mark at or
    /// past `until` (another replica's clock ahead) claims nothing and is
    /// not moved back.
    fn claim_expired_confirmations(&self, until: i64) -> Result<Vec<ExpiredConfirmations>, StoreError>;

    /// Every tenant setting.
    fn settings(&self) -> Result<Vec<StoredSetting>, StoreError>;
    /// Creates or replaces a tenant setting.
    fn put_setting(&self, setting: &StoredSetting, audit: &AuditEntry) -> Result<(), StoreError>;
    /// Replaces a tenant setting only if its value is still `expected`
    /// (`None`: only if it has none), in one atomic step: `false`, and
    /// nothing written (not even the audit entry), when another writer — on
    /// this replica or another — changed it first. For settings whose new
    /// value is computed from the old one (a trust policy keeps the floor an
    /// operator set).
    fn replace_setting(
        &self,
        setting: &StoredSetting,
        expected: Option<&str>,
        audit: &AuditEntry,
    ) -> Result<bool, StoreError>;
    /// Removes a tenant setting.
    fn delete_setting(&self, tenant: &str, key: &str, audit: &AuditEntry) -> Result<bool, StoreError>;

    /// Whether the tenant has any end user.
    fn has_end_users(&self, tenant: &str) -> Result<bool, StoreError>;

    /// Writes usage buckets (replacing a row of the same key: each replica
    /// writes its own totals).
    fn put_usage(&self, rows: &[UsageRow]) -> Result<(), StoreError>;
    /// A tenant's usage buckets of calls through its toolset `toolset`
    /// (every version of it), of one granularity from `since`.
    fn toolset_usage(
        &self,
        tenant: &str,
        toolset: &str,
        granularity: &str,
        since: i64,
    ) -> Result<Vec<UsageRow>, StoreError>;
    /// A tenant's usage buckets of one granularity from `since` (Unix
    /// seconds), every replica's.
    fn usage(&self, tenant: &str, granularity: &str, since: i64) -> Result<Vec<UsageRow>, StoreError>;
    /// Deletes the buckets of one granularity older than `before`.
    fn sweep_usage(&self, granularity: &str, before: i64) -> Result<u64, StoreError>;

    /// Stores OAuth credentials, all or none.
    fn insert_oauth_grants(&self, grants: &[OAuthGrant]) -> Result<(), StoreError>;
    /// The credential whose sha256 this is.
    fn oauth_grant(&self, token_sha256: &str) -> Result<Option<OAuthGrant>, StoreError>;
    /// Marks a code or refresh token used at `now`, once: returns it as it
    /// was before (so `used_at` is `Some` when it had been used already:
    /// a replay), or `None` when there is no such credential.
    fn use_oauth_grant(&self, token_sha256: &str, now: i64) -> Result<Option<OAuthGrant>, StoreError>;
    /// Revokes one credential (`Some`) or its whole family (`None`).
    fn revoke_oauth(&self, token_sha256: &str, family: Option<&str>, now: i64) -> Result<(), StoreError>;
    /// Revokes every credential of `tenant`'s built-in server, or only
    /// those `end_user` was issued (their account was removed or its
    /// password changed).
    fn revoke_oauth_of(&self, tenant: &str, end_user: Option<&str>, now: i64) -> Result<(), StoreError>;
    /// Deletes credentials that expired before `before`; returns how many.
    fn sweep_oauth_grants(&self, before: i64) -> Result<usize, StoreError>;
    /// Registers an OAuth client (RFC 7591) of a tenant. When the tenant
    /// already has `max`, the oldest never used (no code ever issued to it,
    /// no credential held) is deleted to make room; when none can be,
    /// `false` and nothing is stored.
    fn register_oauth_client(
        &self,
        tenant: &str,
        client_id: &str,
        metadata: &str,
        now: i64,
        max: u64,
    ) -> Result<bool, StoreError>;
    /// Deletes clients that hold no credential and were either never used
    /// and registered before `unused_before`, or last used before
    /// `idle_before`: open registration cannot fill a tenant for good, and
    /// a client idle past its refresh token's life is kept long enough to
    /// sign in again under its id. Returns how many.
    fn sweep_oauth_clients(&self, unused_before: i64, idle_before: i64) -> Result<usize, StoreError>;
    /// Records that a registered client obtained a code or refreshed at `now`.
    fn touch_oauth_client(&self, tenant: &str, client_id: &str, now: i64) -> Result<(), StoreError>;
    /// Deletes a grant's access and refresh tokens past the newest `keep`
    /// of each kind (every refresh adds one of each), never those whose
    /// sha256 is in `spare` (the ones just issued); returns how many.
    fn prune_oauth_family(&self, family: &str, keep: u32, spare: &[String]) -> Result<usize, StoreError>;
    /// Revokes a grant's refresh tokens that were never used (the tokens a
    /// refresh issued before it was retried).
    fn revoke_unused_refresh(&self, family: &str, now: i64) -> Result<(), StoreError>;
    /// A registered client's metadata (JSON).
    fn oauth_client(&self, tenant: &str, client_id: &str) -> Result<Option<String>, StoreError>;

    /// The password hash of a tenant's end user.
    fn end_user(&self, tenant: &str, name: &str) -> Result<Option<String>, StoreError>;
    /// Creates or updates an end user (who logs in to confirm calls); a new
    /// one only while the tenant has fewer than `max`, checked as
    /// [`RegistryStore::put_secret`] checks. Returns whether it was stored.
    fn put_end_user(
        &self,
        tenant: &str,
        name: &str,
        password_hash: &str,
        audit: &AuditEntry,
        max: u64,
    ) -> Result<bool, StoreError>;
    /// Removes an end user, with their grants and authorization links
    /// ([`authorizations::AuthorizationStore`]) in the same transaction.
    fn delete_end_user(&self, tenant: &str, name: &str, audit: &AuditEntry) -> Result<bool, StoreError>;

    /// Answers when the database can be read and its write lock taken
    /// (within a moment): when calls can be recorded.
    fn ping(&self) -> Result<(), StoreError>;

    /// A session of the built-in confirmation server, stored (expired ones
    /// are dropped first).
    fn insert_session(&self, session: &StoredSession, now: i64) -> Result<(), StoreError>;
    /// The live session whose cookie hashes to `token_sha256`.
    fn session(&self, token_sha256: &str, now: i64) -> Result<Option<StoredSession>, StoreError>;

    /// A designer's catalog session, stored (expired ones are dropped
    /// first, and the oldest of its key's sessions beyond
    /// `max_per_key`).
    fn insert_designer_session(
        &self,
        session: &StoredDesignerSession,
        now: i64,
        max_per_key: usize,
    ) -> Result<(), StoreError>;
    /// The live catalog session whose cookie hashes to `token_sha256`.
    fn designer_session(&self, token_sha256: &str, now: i64) -> Result<Option<StoredDesignerSession>, StoreError>;
    /// Ends a catalog session (signing out).
    fn delete_designer_session(&self, token_sha256: &str) -> Result<(), StoreError>;

    /// The transaction a 2025-11-25 MCP client's call (by tenant and
    /// fingerprint) waits on, while it is kept.
    fn waiting_call(&self, tenant: &str, fingerprint: &str, now: i64) -> Result<Option<String>, StoreError>;
    /// Records that the call `fingerprint` waits on transaction `id` until
    /// `kept_until`; a tenant keeps at most `max_per_tenant` (expired ones
    /// are dropped to make room; past the cap it is not recorded).
    fn put_waiting_call(
        &self,
        tenant: &str,
        fingerprint: &str,
        id: &str,
        kept_until: i64,
        max_per_tenant: usize,
    ) -> Result<(), StoreError>;
    /// Forgets a waiting call.
    fn delete_waiting_call(&self, tenant: &str, fingerprint: &str) -> Result<(), StoreError>;

    /// A 32-byte key the server itself uses (the CHEQ signing keys, the MCP
    /// request-state key), by name: the stored one, or a new random one
    /// stored first when there is none. Every replica of a fleet gets the
    /// same. SQLite keeps each in its file in the data dir (`name` is the
    /// file's name), as 64 hex digits.
    fn server_key(&self, name: &str) -> Result<[u8; 32], StoreError>;

    /// The topics changed after `after` in the change log (every change a
    /// replica caches appends to it), and where the log ends now.
    fn changes_since(&self, after: i64) -> Result<ChangeFeed, StoreError>;
    /// Whether other processes write this store: then a replica refreshes
    /// what it caches from the change log.
    fn shared(&self) -> bool {
        false
    }
    /// Blocks until another process may have changed something, or
    /// `timeout` passes. Returns whether it was woken by a change
    /// notification.
    fn wait_for_change(&self, timeout: std::time::Duration) -> bool {
        std::thread::sleep(timeout);
        false
    }
    /// How many replicas share the store now (those whose heartbeat is
    /// recent), for each replica's share of the tenants' quotas.
    fn live_replicas(&self) -> usize {
        1
    }

    /// Entries of the audit log, newest first.
    fn audit(&self, query: &AuditQuery) -> Result<Vec<AuditEntry>, StoreError>;
    /// Appends an entry that goes with no stored change (a refused
    /// attempt, evidence about what is stored already).
    fn record_audit(&self, audit: &AuditEntry) -> Result<(), StoreError>;
}
