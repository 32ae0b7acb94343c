//! The store's slice for end-user authorization (docs/authorization.md):
//! the OAuth providers a tenant configures for its tools' APIs, the
//! authorization links a person follows to grant a tool's provider access
//! to their account, and the grants that result — each a person's tokens
//! at one provider, sealed at rest like every secret.
//!
//! A trait of its own, beside [`super::RegistryStore`], implemented by both
//! backends and tested by the shared suite. Every token and client secret
//! is sealed by the store with the secrets key, bound to its row (tenant,
//! end user, provider and which token it is), so that a copied database
//! reveals none and a value cannot be moved to another row; callers hand
//! the store plain values and get plain values back.

use super::StoreError;
use crate::tenancy::AuditEntry;

/// A tenant's provider, as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredProvider {
    pub tenant: String,
    /// The id tools name in their manifest (`[[authorization]] provider`).
    pub id: String,
    /// Its settings as JSON (issuer or endpoints, client id, extra
    /// parameters, display name): everything but the client secret.
    pub settings: String,
    /// The client secret, plain (sealed at rest); `None` for a public client.
    pub client_secret: Option<String>,
    pub updated_at: i64,
}

/// A person's grant at one provider of their tenant: what Plinth attaches
/// to their tools' requests.
#[derive(Clone, PartialEq, Eq)]
pub struct StoredGrant {
    pub tenant: String,
    pub end_user: String,
    pub provider: String,
    /// Plain (sealed at rest).
    pub access_token: String,
    /// Plain (sealed at rest); `None` when the provider issued none.
    pub refresh_token: Option<String>,
    /// The scopes the provider granted, space-separated as OAuth spells them.
    pub scopes: String,
    /// When the access token expires (Unix seconds); `None` when the
    /// provider did not say.
    pub expires_at: Option<i64>,
    pub created_at: i64,
    /// Changed by every write of the grant: what a refresh compares to know
    /// that no other replica refreshed it meanwhile.
    pub updated_at: i64,
}

impl std::fmt::Debug for StoredGrant {
    /// Never the tokens.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoredGrant")
            .field("tenant", &self.tenant)
            .field("end_user", &self.end_user)
            .field("provider", &self.provider)
            .field("scopes", &self.scopes)
            .field("expires_at", &self.expires_at)
            .field("updated_at", &self.updated_at)
            .finish_non_exhaustive()
    }
}

/// Where an authorization link is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkState {
    /// Made; its person has not come back from the provider.
    Pending,
    /// The person came back and the code is being exchanged (a link is
    /// taken once: a second callback with its `state` finds nothing).
    Exchanging,
    /// The grant was stored.
    Connected,
    /// It ended without a grant (denied at the provider, the exchange
    /// failed): its `error` says why.
    Failed,
}

impl LinkState {
    /// As stored.
    pub fn as_str(self) -> &'static str {
        match self {
            LinkState::Pending => "pending",
            LinkState::Exchanging => "exchanging",
            LinkState::Connected => "connected",
            LinkState::Failed => "failed",
        }
    }

    /// From its stored form.
    pub fn parse(text: &str) -> Option<LinkState> {
        Some(match text {
            "pending" => LinkState::Pending,
            "exchanging" => LinkState::Exchanging,
            "connected" => LinkState::Connected,
            "failed" => LinkState::Failed,
            _ => return None,
        })
    }
}

/// An authorization link: what a challenge points the person to, and what
/// the provider's redirect back finds by its `state`.
#[derive(Clone, PartialEq, Eq)]
pub struct StoredLink {
    /// 128 random bits, in the link's URL (and its `check_url`).
    pub id: String,
    pub tenant: String,
    /// The person who must follow it: only they can finish it.
    pub end_user: String,
    pub provider: String,
    /// The scopes asked for, space-separated.
    pub scopes: String,
    /// The sha256 (hex) of the `state` sent to the provider; the state
    /// itself is never stored.
    pub state_sha256: String,
    /// The PKCE code verifier, plain (sealed at rest).
    pub verifier: String,
    /// What asks (the tool, its version, its tenant), as JSON for the page.
    pub asked_by: String,
    pub created_at: i64,
    pub expires_at: i64,
    pub state: LinkState,
    /// Why it failed, for the person and the agent polling it (never a
    /// token, never the provider's raw answer).
    pub error: Option<String>,
}

impl std::fmt::Debug for StoredLink {
    /// Never the verifier.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoredLink")
            .field("id", &self.id)
            .field("tenant", &self.tenant)
            .field("end_user", &self.end_user)
            .field("provider", &self.provider)
            .field("scopes", &self.scopes)
            .field("state", &self.state)
            .field("expires_at", &self.expires_at)
            .finish_non_exhaustive()
    }
}

/// What [`AuthorizationStore::insert_link`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LinkInserted {
    /// Stored.
    Stored,
    /// An unexpired pending link for the same person, provider and scopes
    /// exists: that one is answered instead (a retried call gets the same
    /// link), and nothing is stored.
    Existing(StoredLink),
    /// The person, or the tenant, has as many pending links as allowed:
    /// nothing is stored.
    TooMany,
}

/// Bounds on the pending links one person and one tenant may have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinkBounds {
    pub per_end_user: u64,
    pub per_tenant: u64,
}

/// The end-user authorization slice of the store.
pub trait AuthorizationStore: Send + Sync {
    /// Every tenant's providers (loaded at start, and again on the change
    /// log's `authorizations` topic in a fleet).
    fn providers(&self) -> Result<Vec<StoredProvider>, StoreError>;

    /// Creates or replaces a provider, audited, in one transaction.
    fn put_provider(&self, provider: &StoredProvider, audit: &AuditEntry) -> Result<(), StoreError>;

    /// Deletes a provider with every grant and link made for it, audited;
    /// whether it existed.
    fn delete_provider(&self, tenant: &str, id: &str, audit: &AuditEntry) -> Result<bool, StoreError>;

    /// Stores a pending link, unless one like it is pending or a bound is
    /// reached (checked in the same transaction as the insert, race-free
    /// across replicas). Expired links do not count.
    fn insert_link(&self, link: &StoredLink, bounds: LinkBounds, now: i64) -> Result<LinkInserted, StoreError>;

    /// A tenant's link by id (any state, expired or not).
    fn link(&self, tenant: &str, id: &str) -> Result<Option<StoredLink>, StoreError>;

    /// Takes the pending, unexpired link whose state hashes to
    /// `state_sha256`: marks it [`LinkState::Exchanging`] and answers it;
    /// `None` when there is none (unknown, expired, or already taken: a
    /// state works once).
    fn take_link(&self, tenant: &str, state_sha256: &str, now: i64) -> Result<Option<StoredLink>, StoreError>;

    /// Ends a taken link: connected, or failed with `error`.
    fn finish_link(&self, tenant: &str, id: &str, state: LinkState, error: Option<&str>) -> Result<(), StoreError>;

    /// Deletes links that expired before `before`; how many.
    fn sweep_links(&self, before: i64) -> Result<u64, StoreError>;

    /// A person's grant at a provider.
    fn grant(&self, tenant: &str, end_user: &str, provider: &str) -> Result<Option<StoredGrant>, StoreError>;

    /// Every grant a person holds in their tenant.
    fn grants_of(&self, tenant: &str, end_user: &str) -> Result<Vec<StoredGrant>, StoreError>;

    /// Creates or replaces a person's grant at a provider, audited (the
    /// audit entry never carries a token).
    fn put_grant(&self, grant: &StoredGrant, audit: &AuditEntry) -> Result<(), StoreError>;

    /// Replaces a grant's tokens after a refresh, only if the stored grant
    /// is still the one refreshed (`updated_at` equals `refreshed_from`):
    /// whether it was replaced. A refresh that lost to another (a replica)
    /// writes nothing.
    fn replace_refreshed(&self, grant: &StoredGrant, refreshed_from: i64) -> Result<bool, StoreError>;

    /// Claims the right to refresh a grant until `until` (Unix seconds):
    /// whether this caller holds it. Held by at most one caller at a time
    /// across replicas; a claim past its `until` may be taken by another.
    fn claim_refresh(&self, tenant: &str, end_user: &str, provider: &str, until: i64, now: i64)
    -> Result<bool, StoreError>;

    /// Gives a refresh claim back (the refresh ended, either way).
    fn release_refresh(&self, tenant: &str, end_user: &str, provider: &str) -> Result<(), StoreError>;

    /// Deletes a person's grant at a provider, audited; whether it existed.
    fn delete_grant(&self, tenant: &str, end_user: &str, provider: &str, audit: &AuditEntry)
    -> Result<bool, StoreError>;
}
