//! Tenants, API keys, quotas and the audit log: who may do what to which
//! tools, and how much of the server each tenant may use.
//!
//! A tenant is a namespace of tools (a vendor). Every request carries an API
//! key; a key has one [`Role`] and, unless it is an operator key, belongs to
//! one tenant. Keys are random, shown once and stored only as their sha256
//! (they carry 256 bits of entropy, so a fast hash is enough: there is
//! nothing to brute-force). The HTTP layer turns a key into a [`Principal`]
//! and the core checks the principal against each action.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// The built-in tenant, also served at the root `/`.
pub const DEFAULT_TENANT: &str = "default";

/// Whether `name` is a valid tenant name: 1 to 63 lowercase letters, digits
/// or `-`, starting with a letter or digit (it appears in URLs as
/// `/t/{tenant}/`).
pub fn is_tenant_name(name: &str) -> bool {
    (1..=63).contains(&name.len())
        && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
}

/// What a key may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// One tenant: enumerate and invoke its tools.
    Consumer,
    /// One tenant: what a consumer may, plus deploy and retire tools and
    /// manage the tenant's secrets and config.
    Publisher,
    /// The whole server: tenants, quotas, keys of any tenant, and what a
    /// publisher may do in every tenant.
    Operator,
}

impl Role {
    /// The name used in the API and the store.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Consumer => "consumer",
            Role::Publisher => "publisher",
            Role::Operator => "operator",
        }
    }

    /// Parses a role name.
    pub fn parse(s: &str) -> Option<Role> {
        match s {
            "consumer" => Some(Role::Consumer),
            "publisher" => Some(Role::Publisher),
            "operator" => Some(Role::Operator),
            _ => None,
        }
    }
}

/// Who is making a request: the key's id (never the key), its role and its
/// tenant (`None` for operators).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    /// The key's id, as recorded in the audit log.
    pub key_id: String,
    /// What the key may do.
    pub role: Role,
    /// The tenant the key belongs to; `None` for an operator key.
    pub tenant: Option<String>,
    /// For an OAuth access token rather than a key: what it grants (its
    /// end user, scopes and resource).
    pub token: Option<std::sync::Arc<TokenGrant>>,
    /// The toolset it is scoped to: a key made for it, or a token issued
    /// for its MCP URL. Such a principal opens that toolset's roots and
    /// nothing else.
    pub toolset: Option<String>,
}

impl Principal {
    /// The server itself acting on the operator's behalf (tools deployed
    /// from `--plugins`/`--watch`, the first operator key).
    pub fn server(what: &str) -> Principal {
        Principal { key_id: what.to_string(), role: Role::Operator, tenant: None, token: None, toolset: None }
    }

    /// Whether the principal may act in `tenant` at all (its own tenant, or
    /// any tenant for an operator). Anything else must look like a tenant
    /// that does not exist.
    pub fn sees(&self, tenant: &str) -> bool {
        self.role == Role::Operator || self.tenant.as_deref() == Some(tenant)
    }
}

/// What a valid access token grants.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenGrant {
    /// The client it was issued to.
    pub client_id: String,
    /// The end user who signed in: calls made with it are theirs.
    pub end_user: String,
    /// The scopes granted.
    pub scopes: Vec<String>,
    /// The resource (a tenant's MCP URL) it is for.
    pub resource: String,
    /// Its grant's id (a code and every token issued from it).
    pub family: String,
}

impl TokenGrant {
    /// Whether it carries `scope`.
    pub fn has(&self, scope: &str) -> bool {
        self.scopes.iter().any(|s| s == scope)
    }
}

/// Per-tenant limits, set by the operator. A missing field takes its
/// default, so a stored quota set keeps working when fields are added.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct Quotas {
    /// Tools stored, fully retired ones included (a retired tool keeps its
    /// id, versions and blobs; a new version of it needs no more room).
    pub max_tools: u32,
    /// Largest packed component a deploy may send, in bytes.
    pub max_component_bytes: u64,
    /// Invocations a second, sustained (the token bucket's refill rate).
    pub invocations_per_second: u32,
    /// Invocations that may arrive at once after a quiet spell (the
    /// bucket's size).
    pub invocation_burst: u32,
    /// Invocations of the tenant's tools running at once.
    pub max_concurrent_invocations: u32,
    /// Ceiling on one instance's linear memory, in MiB.
    pub max_memory_mib: u64,
    /// Ceiling on one invocation's wall-clock time, in milliseconds.
    pub max_deadline_ms: u64,
    /// Versions one tool may have, retired ones included (they keep their
    /// rows and blobs).
    pub max_versions_per_tool: u32,
    /// Call ids remembered for retries (OTC `call_id`, the catalog's try
    /// forms), running ones included. Past it, the oldest settled ones are
    /// forgotten before their retention ends: a retry of one runs again.
    pub max_recorded_calls: u64,
    /// Bytes of recorded responses kept for retries. Past it, the oldest
    /// are forgotten as for `maxRecordedCalls`.
    pub max_recorded_call_bytes: u64,
    /// CHEQ transactions waiting for their end users at once. A call that
    /// would open one more is refused (`429 too_many_pending_confirmations`)
    /// and nothing is stored.
    pub max_pending_confirmations: u64,
    /// Bytes the tenant's waiting transactions hold (their inputs and signed
    /// CHEQs), refused past as for `maxPendingConfirmations`.
    pub max_pending_confirmation_bytes: u64,
    /// Transactions waiting for any one end user at once.
    pub max_pending_confirmations_per_end_user: u64,
    /// Bytes the transactions waiting for any one end user hold.
    pub max_pending_confirmation_bytes_per_end_user: u64,
    /// Transactions kept, whatever their state (waiting, decided, expired,
    /// kept for the retention period). Past it, the oldest settled ones are
    /// forgotten before their retention ends: unanswered and rejected ones
    /// first, then accepted ones.
    pub max_stored_confirmations: u64,
    /// Bytes the tenant's kept transactions hold (with their decisions and
    /// answers), forgotten past as for `maxStoredConfirmations`.
    pub max_stored_confirmation_bytes: u64,
    /// Bytes one transaction may hold when it opens: its inputs and the
    /// signed CHEQ. A call whose would be larger is refused (`413
    /// confirmation_too_large`) and nothing is stored.
    pub max_confirmation_bytes: u64,
    /// Secrets stored, registry credentials included (each up to 64 KiB,
    /// kept sealed in the store and in every replica's memory). Past it a
    /// new id is refused; an existing one can always be set again.
    pub max_secrets: u32,
    /// Config values stored, over all the tenant's tools (deployed or
    /// not yet). Past it a new (tool, key) is refused; an existing one can
    /// always be set again.
    pub max_config_values: u32,
    /// End users of the built-in confirmation server. Past it a new name is
    /// refused; an existing one's password can always be set again.
    pub max_end_users: u32,
}

impl Default for Quotas {
    fn default() -> Self {
        Quotas {
            max_tools: 1_000,
            max_component_bytes: 32 << 20,
            invocations_per_second: 1_000,
            invocation_burst: 2_000,
            max_concurrent_invocations: 32,
            max_memory_mib: 64,
            max_deadline_ms: 5_000,
            max_versions_per_tool: 100,
            max_recorded_calls: 100_000,
            max_recorded_call_bytes: 256 << 20,
            max_pending_confirmations: 10_000,
            max_pending_confirmation_bytes: 64 << 20,
            max_pending_confirmations_per_end_user: 100,
            max_pending_confirmation_bytes_per_end_user: 8 << 20,
            max_stored_confirmations: 100_000,
            max_stored_confirmation_bytes: 256 << 20,
            max_confirmation_bytes: 128 << 10,
            max_secrets: 1_000,
            max_config_values: 2_000,
            max_end_users: 10_000,
        }
    }
}

/// How much of one tenant's call ledger is kept (its quotas
/// `maxRecordedCalls` and `maxRecordedCallBytes`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LedgerBound {
    /// Records kept, settled or running.
    pub records: u64,
    /// Bytes of recorded responses kept.
    pub bytes: u64,
}

impl LedgerBound {
    /// How many of the oldest records to forget from a ledger holding
    /// `records` and `bytes`: `None` when it is within bounds. Past the
    /// record bound, it trims the excess and a sixty-fourth of the bound
    /// more, so that a tenant at its bound does not trim on every call.
    pub fn trim_batch(&self, records: u64, bytes: u64) -> Option<u64> {
        let slack = (self.records / 64).max(1);
        if records > self.records {
            Some(records - self.records + slack)
        } else if bytes > self.bytes {
            Some(slack.min(64))
        } else {
            None
        }
    }
}

/// How many CHEQ transactions one tenant may keep, and how large (its
/// quotas `maxPendingConfirmations` … `maxStoredConfirmationBytes`): what
/// the store checks, in the transaction that would store a new one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConfirmationBound {
    /// Transactions waiting at once.
    pub pending: u64,
    /// Bytes they hold.
    pub pending_bytes: u64,
    /// Transactions waiting for one end user at once.
    pub pending_per_end_user: u64,
    /// Bytes they hold.
    pub pending_bytes_per_end_user: u64,
    /// Transactions kept, whatever their state.
    pub stored: u64,
    /// Bytes they hold.
    pub stored_bytes: u64,
}

/// What one tenant's CHEQ transactions hold, as the store counts them.
/// `pending` counts every transaction still marked waiting, those whose
/// expiry passed but that nothing marked expired yet included.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ConfirmationUsage {
    /// Transactions marked waiting.
    pub pending: u64,
    /// Bytes they hold.
    pub pending_bytes: u64,
    /// Transactions kept.
    pub stored: u64,
    /// Bytes they hold.
    pub stored_bytes: u64,
}

/// The bound that refused a new CHEQ transaction, by its quota.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfirmationLimit {
    /// `maxPendingConfirmations`.
    Pending,
    /// `maxPendingConfirmationBytes`.
    PendingBytes,
    /// `maxPendingConfirmationsPerEndUser`.
    PendingPerEndUser,
    /// `maxPendingConfirmationBytesPerEndUser`.
    PendingBytesPerEndUser,
    /// `maxStoredConfirmations`: every kept transaction is waiting or
    /// running, so none can be forgotten to make room.
    Stored,
    /// `maxStoredConfirmationBytes`, likewise.
    StoredBytes,
}

impl ConfirmationLimit {
    /// The quota's name, as the admin API spells it.
    pub fn quota(self) -> &'static str {
        match self {
            ConfirmationLimit::Pending => "maxPendingConfirmations",
            ConfirmationLimit::PendingBytes => "maxPendingConfirmationBytes",
            ConfirmationLimit::PendingPerEndUser => "maxPendingConfirmationsPerEndUser",
            ConfirmationLimit::PendingBytesPerEndUser => "maxPendingConfirmationBytesPerEndUser",
            ConfirmationLimit::Stored => "maxStoredConfirmations",
            ConfirmationLimit::StoredBytes => "maxStoredConfirmationBytes",
        }
    }

    /// Whether it bounds one end user's transactions (else the tenant's).
    pub fn per_end_user(self) -> bool {
        matches!(self, ConfirmationLimit::PendingPerEndUser | ConfirmationLimit::PendingBytesPerEndUser)
    }
}

impl ConfirmationBound {
    /// The tenant-wide waiting bound a new transaction of `bytes` would
    /// pass, with `usage` stored.
    pub fn pending_refusal(&self, usage: &ConfirmationUsage, bytes: u64) -> Option<ConfirmationLimit> {
        if usage.pending.saturating_add(1) > self.pending {
            Some(ConfirmationLimit::Pending)
        } else if usage.pending_bytes.saturating_add(bytes) > self.pending_bytes {
            Some(ConfirmationLimit::PendingBytes)
        } else {
            None
        }
    }

    /// The bound on one end user's waiting transactions a new one of
    /// `bytes` would pass, with `waiting` of `waiting_bytes` theirs already.
    pub fn end_user_refusal(&self, waiting: u64, waiting_bytes: u64, bytes: u64) -> Option<ConfirmationLimit> {
        if waiting.saturating_add(1) > self.pending_per_end_user {
            Some(ConfirmationLimit::PendingPerEndUser)
        } else if waiting_bytes.saturating_add(bytes) > self.pending_bytes_per_end_user {
            Some(ConfirmationLimit::PendingBytesPerEndUser)
        } else {
            None
        }
    }

    /// How many of the oldest settled transactions to forget before one of
    /// `bytes` is stored beside `usage`: `None` when it fits. Past the
    /// count, the excess and a sixty-fourth of the bound more, so that a
    /// tenant at its bound does not forget on every call (as the call
    /// ledger, [`LedgerBound::trim_batch`]).
    pub fn trim_batch(&self, usage: &ConfirmationUsage, bytes: u64) -> Option<u64> {
        let slack = (self.stored / 64).max(1);
        if usage.stored.saturating_add(1) > self.stored {
            Some(usage.stored.saturating_add(1) - self.stored + slack)
        } else if usage.stored_bytes.saturating_add(bytes) > self.stored_bytes {
            Some(slack.min(64))
        } else {
            None
        }
    }

    /// The stored bound that still refuses after every settled transaction
    /// that could go went: `maxStoredConfirmations` or its bytes.
    pub fn stored_refusal(&self, usage: &ConfirmationUsage) -> ConfirmationLimit {
        if usage.stored.saturating_add(1) > self.stored {
            ConfirmationLimit::Stored
        } else {
            ConfirmationLimit::StoredBytes
        }
    }
}

impl Quotas {
    /// How much of the tenant's call ledger is kept.
    pub fn ledger_bound(&self) -> LedgerBound {
        LedgerBound { records: self.max_recorded_calls, bytes: self.max_recorded_call_bytes }
    }

    /// How many CHEQ transactions the tenant may keep, and how large.
    pub fn confirmation_bound(&self) -> ConfirmationBound {
        ConfirmationBound {
            pending: self.max_pending_confirmations,
            pending_bytes: self.max_pending_confirmation_bytes,
            pending_per_end_user: self.max_pending_confirmations_per_end_user,
            pending_bytes_per_end_user: self.max_pending_confirmation_bytes_per_end_user,
            stored: self.max_stored_confirmations,
            stored_bytes: self.max_stored_confirmation_bytes,
        }
    }

    /// The value of the quota that `limit` names.
    pub fn confirmation_limit(&self, limit: ConfirmationLimit) -> u64 {
        match limit {
            ConfirmationLimit::Pending => self.max_pending_confirmations,
            ConfirmationLimit::PendingBytes => self.max_pending_confirmation_bytes,
            ConfirmationLimit::PendingPerEndUser => self.max_pending_confirmations_per_end_user,
            ConfirmationLimit::PendingBytesPerEndUser => self.max_pending_confirmation_bytes_per_end_user,
            ConfirmationLimit::Stored => self.max_stored_confirmations,
            ConfirmationLimit::StoredBytes => self.max_stored_confirmation_bytes,
        }
    }

    /// These quotas with the fields of `patch` (a JSON object of the same
    /// fields) replaced. Unknown fields and values below 1 are refused.
    pub fn patched(&self, patch: &serde_json::Value) -> Result<Quotas, String> {
        let serde_json::Value::Object(fields) = patch else {
            return Err("quotas must be a JSON object".into());
        };
        let mut merged = serde_json::to_value(self).map_err(|e| e.to_string())?;
        for (key, value) in fields {
            merged[key] = value.clone();
        }
        let quotas: Quotas = serde_json::from_value(merged).map_err(|e| format!("invalid quotas: {e}"))?;
        let zero = [
            ("maxTools", u64::from(quotas.max_tools)),
            ("maxComponentBytes", quotas.max_component_bytes),
            ("invocationsPerSecond", u64::from(quotas.invocations_per_second)),
            ("invocationBurst", u64::from(quotas.invocation_burst)),
            ("maxConcurrentInvocations", u64::from(quotas.max_concurrent_invocations)),
            ("maxMemoryMib", quotas.max_memory_mib),
            ("maxDeadlineMs", quotas.max_deadline_ms),
            ("maxVersionsPerTool", u64::from(quotas.max_versions_per_tool)),
            ("maxRecordedCalls", quotas.max_recorded_calls),
            ("maxRecordedCallBytes", quotas.max_recorded_call_bytes),
            ("maxPendingConfirmations", quotas.max_pending_confirmations),
            ("maxPendingConfirmationBytes", quotas.max_pending_confirmation_bytes),
            ("maxPendingConfirmationsPerEndUser", quotas.max_pending_confirmations_per_end_user),
            ("maxPendingConfirmationBytesPerEndUser", quotas.max_pending_confirmation_bytes_per_end_user),
            ("maxStoredConfirmations", quotas.max_stored_confirmations),
            ("maxStoredConfirmationBytes", quotas.max_stored_confirmation_bytes),
            ("maxConfirmationBytes", quotas.max_confirmation_bytes),
            ("maxSecrets", u64::from(quotas.max_secrets)),
            ("maxConfigValues", u64::from(quotas.max_config_values)),
            ("maxEndUsers", u64::from(quotas.max_end_users)),
        ]
        .into_iter()
        .find(|(_, v)| *v == 0);
        match zero {
            Some((name, _)) => Err(format!("invalid quotas: {name} must be at least 1")),
            None => Ok(quotas),
        }
    }
}

/// A tenant as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TenantRecord {
    /// Its name (the `{tenant}` in `/t/{tenant}/`).
    pub name: String,
    /// Whether anyone may enumerate its tools without a key (invocation
    /// always needs one).
    pub public_enumeration: bool,
    /// Its limits.
    pub quotas: Quotas,
    /// When it was created (Unix seconds).
    pub created_at: i64,
}

/// An API key as stored: never the key itself, only its sha256.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyRecord {
    /// The key's public id (also the middle part of the key).
    pub id: String,
    /// Its tenant; `None` for an operator key.
    pub tenant: Option<String>,
    /// What it may do.
    pub role: Role,
    /// The sha256 of the whole key, hex.
    pub key_sha256: String,
    /// A note from whoever created it.
    pub label: Option<String>,
    /// When it was created (Unix seconds).
    pub created_at: i64,
    /// When it was revoked, if it was.
    pub revoked_at: Option<i64>,
    /// The toolset it is scoped to (a consumer key that opens that
    /// toolset's roots and nothing else); `None` for the whole tenant.
    pub toolset: Option<String>,
}

/// A freshly generated key: the text to hand out once, and its record.
pub struct NewKey {
    /// `plk_{id}_{secret}`: shown once, never stored.
    pub key: String,
    /// What is stored.
    pub record: KeyRecord,
}

/// Prefix of every generated key (makes leaked keys easy to scan for).
pub const KEY_PREFIX: &str = "plk_";

impl NewKey {
    /// A new random key for `role` in `tenant`.
    pub fn generate(tenant: Option<String>, role: Role, label: Option<String>, at: i64) -> std::io::Result<NewKey> {
        let mut id = [0u8; 8];
        let mut secret = [0u8; 32];
        getrandom::fill(&mut id).map_err(std::io::Error::other)?;
        getrandom::fill(&mut secret).map_err(std::io::Error::other)?;
        let id = hex::encode(id);
        use base64::Engine as _;
        let key = format!("{KEY_PREFIX}{id}_{}", base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(secret));
        let record = KeyRecord {
            id,
            tenant,
            role,
            key_sha256: key_sha256(&key),
            label,
            created_at: at,
            revoked_at: None,
            toolset: None,
        };
        Ok(NewKey { key, record })
    }
}

/// The stored form of a key.
pub fn key_sha256(key: &str) -> String {
    hex::encode(Sha256::digest(key.as_bytes()))
}

/// The id part of a generated key (`plk_{id}_{secret}`), if it has that
/// shape.
pub fn key_id(key: &str) -> Option<&str> {
    let rest = key.strip_prefix(KEY_PREFIX)?;
    let (id, secret) = rest.split_once('_')?;
    (id.len() == 16 && id.bytes().all(|b| b.is_ascii_hexdigit()) && !secret.is_empty()).then_some(id)
}

/// The audit id of the operator key from the environment
/// (`PLINTH_OPERATOR_KEY`).
pub const ENV_OPERATOR_KEY_ID: &str = "env:PLINTH_OPERATOR_KEY";

/// Compares a presented key with a stored hash in constant time.
pub fn key_matches(key: &str, stored_sha256: &str) -> bool {
    key_sha256(key).as_bytes().ct_eq(stored_sha256.as_bytes()).into()
}

/// One entry of the append-only audit log.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AuditEntry {
    /// Its position in the log (assigned by the store; 0 before).
    pub seq: i64,
    /// When (Unix seconds).
    pub at: i64,
    /// Who: the key id (or what the server did on its own, e.g. `--plugins`).
    pub actor: String,
    /// The tenant affected, if any.
    pub tenant: Option<String>,
    /// What: `tool.deploy`, `tool.retire`, `key.create`, `key.revoke`,
    /// `secret.put`, `secret.delete`, `config.put`, `config.delete`,
    /// `tenant.create`, `tenant.update`.
    pub action: String,
    /// What it was done to (a tool, a key id, a secret id, a tenant).
    pub target: String,
    /// The content hash involved (a deployed component's sha256).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// The rest of what happened (never a secret value or a key).
    pub detail: serde_json::Value,
}

impl AuditEntry {
    /// An entry for `action` on `target` by `actor`, now.
    pub fn new(actor: &Principal, tenant: Option<&str>, action: &str, target: impl Into<String>) -> AuditEntry {
        AuditEntry {
            seq: 0,
            at: unix_now(),
            actor: actor.key_id.clone(),
            tenant: tenant.map(str::to_string),
            action: action.to_string(),
            target: target.into(),
            sha256: None,
            detail: serde_json::Value::Null,
        }
    }

    /// With a content hash.
    pub fn sha256(mut self, sha256: &str) -> Self {
        self.sha256 = Some(sha256.to_string());
        self
    }

    /// With details.
    pub fn detail(mut self, detail: serde_json::Value) -> Self {
        self.detail = detail;
        self
    }
}

/// Which part of the audit log to read, newest first.
#[derive(Debug, Clone, Default)]
pub struct AuditQuery {
    /// Only entries about this tenant.
    pub tenant: Option<String>,
    /// Only entries older than this position.
    pub before: Option<i64>,
    /// At most this many.
    pub limit: usize,
}

/// Seconds since the Unix epoch.
pub fn unix_now() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tenant_names_are_url_safe() {
        for good in ["default", "acme", "a", "acme-2", "9lives"] {
            assert!(is_tenant_name(good), "{good}");
        }
        for bad in ["", "-acme", "Acme", "ac me", "a/b", "a.b", &"a".repeat(64)] {
            assert!(!is_tenant_name(bad), "{bad}");
        }
    }

    #[test]
    fn a_generated_key_matches_only_its_own_hash() {
        let new = NewKey::generate(Some("acme".into()), Role::Consumer, None, 1).unwrap();
        assert!(new.key.starts_with(KEY_PREFIX));
        assert_eq!(key_id(&new.key), Some(new.record.id.as_str()));
        assert!(key_matches(&new.key, &new.record.key_sha256));
        assert!(!new.record.key_sha256.contains(&new.key), "only the hash is stored");
        let mut tampered = new.key.clone();
        tampered.push('x');
        assert!(!key_matches(&tampered, &new.record.key_sha256));
        let other = NewKey::generate(None, Role::Operator, None, 1).unwrap();
        assert_ne!(other.key, new.key);
        assert_eq!(key_id("plk_nothex!!!!!!!!!!!_x"), None);
        assert_eq!(key_id("Bearer something"), None);
    }

    #[test]
    fn quotas_are_patched_field_by_field_and_refuse_nonsense() {
        let quotas = Quotas::default();
        let patched = quotas.patched(&serde_json::json!({ "maxTools": 3 })).unwrap();
        assert_eq!(patched.max_tools, 3);
        assert_eq!(patched.invocation_burst, quotas.invocation_burst);
        assert_eq!(quotas.patched(&serde_json::json!({ "maxVersionsPerTool": 2 })).unwrap().max_versions_per_tool, 2);
        let err = quotas.patched(&serde_json::json!({ "maxVersionsPerTool": 0 })).unwrap_err();
        assert!(err.contains("maxVersionsPerTool must be at least 1"), "{err}");
        let err = quotas.patched(&serde_json::json!({ "maxTool": 3 })).unwrap_err();
        assert!(err.contains("maxTool"), "{err}");
        let err = quotas.patched(&serde_json::json!({ "maxTools": 0 })).unwrap_err();
        assert!(err.contains("maxTools must be at least 1"), "{err}");
        assert!(quotas.patched(&serde_json::json!({ "maxTools": -1 })).is_err());
        assert!(quotas.patched(&serde_json::json!([1])).is_err());
        let stored: Quotas = serde_json::from_str("{}").unwrap();
        assert_eq!(stored, Quotas::default(), "a stored quota set missing fields takes the defaults");
        let cheq = quotas.patched(&serde_json::json!({ "maxPendingConfirmationsPerEndUser": 4 })).unwrap();
        assert_eq!(cheq.confirmation_bound().pending_per_end_user, 4);
        let err = quotas.patched(&serde_json::json!({ "maxStoredConfirmations": 0 })).unwrap_err();
        assert!(err.contains("maxStoredConfirmations must be at least 1"), "{err}");
    }

    #[test]
    fn principals_see_only_their_tenant_unless_operators() {
        let consumer = Principal {
            key_id: "k".into(),
            role: Role::Consumer,
            tenant: Some("acme".into()),
            token: None,
            toolset: None,
        };
        assert!(consumer.sees("acme"));
        assert!(!consumer.sees("globex"));
        assert!(Principal::server("x").sees("globex"));
    }
}
