//! The store's slice for end-user authorization (docs/authorization.md):
//! the OAuth providers a tenant configures for its tools' APIs, the
//! authorization links a person follows to grant a tool's provider access
//! to their account, and the grants that result — each a person's tokens
//! at one provider, sealed at rest like every secret.
//!
//! A trait of its own, beside [`super::RegistryStore`], implemented by both
//! backends and tested by the shared suite. Every token, client secret and
//! PKCE verifier is sealed by the store with the secrets key, bound to its
//! row (tenant, end user, provider or link, and which field it is:
//! [`SecretsCipher::seal_field`]), so that a copied database reveals none
//! and a value cannot be moved to another row, another field or a tenant's
//! secrets; callers hand the store plain values and get plain values back.
//! The row ↔ struct conversions and the sealing are here, once, for both
//! backends ([`AtRest`], [`Columns`]).

use super::{SecretsCipher, StoreError};
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
#[expect(clippy::large_enum_variant, reason = "answered once per insert, never kept in bulk")]
pub enum LinkInserted {
    /// Stored.
    Stored,
    /// An unexpired pending link for the same person, provider and scopes
    /// exists: that one is answered instead (a retried call gets the same
    /// link), and nothing is stored.
    Existing(StoredLink),
    /// The person, or the tenant, has as many open links (pending or
    /// exchanging, unexpired) as allowed: nothing is stored.
    TooMany,
}

/// Bounds on the open links (pending, or taken and not yet finished) one
/// person and one tenant may have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinkBounds {
    pub per_end_user: u64,
    pub per_tenant: u64,
}

impl LinkBounds {
    /// Whether one more link fits beside the open links a person and their
    /// tenant have.
    pub fn admit(&self, of_end_user: u64, of_tenant: u64) -> bool {
        of_end_user < self.per_end_user && of_tenant < self.per_tenant
    }
}

/// The end-user authorization slice of the store.
pub trait AuthorizationStore: Send + Sync {
    /// Every tenant's providers (loaded at start, and again on the change
    /// log's `authorizations` topic in a fleet).
    fn providers(&self) -> Result<Vec<StoredProvider>, StoreError>;

    /// Creates or replaces a provider, audited, in one transaction (with a
    /// change-log row on the `authorizations` topic).
    fn put_provider(&self, provider: &StoredProvider, audit: &AuditEntry) -> Result<(), StoreError>;

    /// Deletes a provider with every grant and link made for it, audited,
    /// in one transaction; whether it existed.
    fn delete_provider(&self, tenant: &str, id: &str, audit: &AuditEntry) -> Result<bool, StoreError>;

    /// Stores a pending link, unless one like it is pending or a bound is
    /// reached (checked in the same transaction as the insert, race-free
    /// across replicas). Expired links do not count. Refused with
    /// [`StoreError::Conflict`] when its provider does not exist (deleted
    /// meanwhile).
    fn insert_link(&self, link: &StoredLink, bounds: LinkBounds, now: i64) -> Result<LinkInserted, StoreError>;

    /// A tenant's link by id (any state, expired or not).
    fn link(&self, tenant: &str, id: &str) -> Result<Option<StoredLink>, StoreError>;

    /// Takes the pending, unexpired link whose state hashes to
    /// `state_sha256`: marks it [`LinkState::Exchanging`] and answers it;
    /// `None` when there is none (unknown, expired, or already taken: a
    /// state works once).
    fn take_link(&self, tenant: &str, state_sha256: &str, now: i64) -> Result<Option<StoredLink>, StoreError>;

    /// Ends a taken link: connected, or failed with `error`. Only a link
    /// [`LinkState::Exchanging`] changes (a link is never pending again);
    /// `state` must be [`LinkState::Connected`] or [`LinkState::Failed`]
    /// ([`StoreError::Inconsistent`] otherwise).
    fn finish_link(&self, tenant: &str, id: &str, state: LinkState, error: Option<&str>) -> Result<(), StoreError>;

    /// Deletes links that expired before `before`; how many.
    fn sweep_links(&self, before: i64) -> Result<u64, StoreError>;

    /// A person's grant at a provider.
    fn grant(&self, tenant: &str, end_user: &str, provider: &str) -> Result<Option<StoredGrant>, StoreError>;

    /// Every grant a person holds in their tenant.
    fn grants_of(&self, tenant: &str, end_user: &str) -> Result<Vec<StoredGrant>, StoreError>;

    /// Creates or replaces a person's grant at a provider, audited (the
    /// audit entry never carries a token), with a change-log row. Its
    /// `updated_at` is stored as given, or, replacing a grant, as at least
    /// the replaced one's + 1: a refresh of the replaced grant then finds it
    /// changed. Refused with [`StoreError::Conflict`] when its provider does
    /// not exist (deleted meanwhile).
    fn put_grant(&self, grant: &StoredGrant, audit: &AuditEntry) -> Result<(), StoreError>;

    /// Replaces a grant's tokens, scopes and expiry after a refresh, only if
    /// the stored grant is still the one refreshed (`updated_at` equals
    /// `refreshed_from`): whether it was replaced. A refresh that lost to
    /// another (a replica) writes nothing. The stored `updated_at` becomes
    /// `max(grant.updated_at, refreshed_from + 1)` (two writes in one second
    /// still differ); with a change-log row, no audit entry (the core
    /// audits what failed).
    fn replace_refreshed(&self, grant: &StoredGrant, refreshed_from: i64) -> Result<bool, StoreError>;

    /// Claims the right to refresh a grant until `until` (Unix seconds):
    /// whether this caller holds it (`false` too when there is no such
    /// grant). Held by at most one caller at a time across replicas; a
    /// claim whose `until` is at or before `now` may be taken by another.
    /// Kept on the grant's row; no write of the grant releases it.
    fn claim_refresh(
        &self,
        tenant: &str,
        end_user: &str,
        provider: &str,
        until: i64,
        now: i64,
    ) -> Result<bool, StoreError>;

    /// Gives back the refresh claim made with `until` (the refresh ended,
    /// either way). A claim taken over since (its holder outlived `until`)
    /// is another's, with another `until`, and stays.
    fn release_refresh(&self, tenant: &str, end_user: &str, provider: &str, until: i64) -> Result<(), StoreError>;

    /// Deletes a person's grant at a provider, audited, with a change-log
    /// row; whether it existed.
    fn delete_grant(
        &self,
        tenant: &str,
        end_user: &str,
        provider: &str,
        audit: &AuditEntry,
    ) -> Result<bool, StoreError>;
}

/// The kinds of sealed field of this slice, as the associated data names
/// them ([`SecretsCipher::seal_field`]), each with its row's key.
const CLIENT_SECRET: &str = "authorization-provider-client-secret";
const ACCESS_TOKEN: &str = "authorization-grant-access-token";
const REFRESH_TOKEN: &str = "authorization-grant-refresh-token";
const VERIFIER: &str = "authorization-link-verifier";

/// What seals or opens one field: `(kind, the row's key, value)` → value.
type FieldCipher<'a> = dyn Fn(&str, &[&str], &str) -> Result<String, StoreError> + 'a;

/// A row of this slice with secret fields.
pub(super) trait SecretFields: Sized {
    /// Itself with each secret field replaced by `f(kind, row key, value)`.
    fn map_secrets(self, f: &FieldCipher<'_>) -> Result<Self, StoreError>;
}

impl SecretFields for StoredProvider {
    fn map_secrets(mut self, f: &FieldCipher<'_>) -> Result<Self, StoreError> {
        let key = [self.tenant.as_str(), self.id.as_str()];
        self.client_secret = self.client_secret.as_deref().map(|s| f(CLIENT_SECRET, &key, s)).transpose()?;
        Ok(self)
    }
}

impl SecretFields for StoredGrant {
    fn map_secrets(mut self, f: &FieldCipher<'_>) -> Result<Self, StoreError> {
        let key = [self.tenant.as_str(), self.end_user.as_str(), self.provider.as_str()];
        let access_token = f(ACCESS_TOKEN, &key, &self.access_token)?;
        let refresh_token = self.refresh_token.as_deref().map(|t| f(REFRESH_TOKEN, &key, t)).transpose()?;
        (self.access_token, self.refresh_token) = (access_token, refresh_token);
        Ok(self)
    }
}

impl SecretFields for StoredLink {
    fn map_secrets(mut self, f: &FieldCipher<'_>) -> Result<Self, StoreError> {
        self.verifier = f(VERIFIER, &[self.tenant.as_str(), self.id.as_str()], &self.verifier)?;
        Ok(self)
    }
}

/// A row as the database holds it: its secret fields sealed, each bound to
/// its kind and its row's key (a value copied to another row, or another
/// field, does not open there).
pub(super) struct AtRest<T>(T);

impl<T: SecretFields + Clone> AtRest<T> {
    /// `plain`, sealed to be stored.
    pub(super) fn seal(plain: &T, cipher: &SecretsCipher) -> Result<Self, StoreError> {
        plain.clone().map_secrets(&|kind, key, value| cipher.seal_field(kind, key, value)).map(AtRest)
    }

    /// The stored row, opened ([`StoreError::WrongSecretsKey`] when a value
    /// does not open for its row and field).
    pub(super) fn open(self, cipher: &SecretsCipher) -> Result<T, StoreError> {
        self.0.map_secrets(&|kind, key, sealed| cipher.open_field(kind, key, sealed))
    }

    /// The row, its secret fields sealed: what to bind.
    pub(super) fn row(&self) -> &T {
        &self.0
    }
}

/// A row of a query's answer, read by column index, in either backend.
pub(super) trait Columns {
    fn text(&self, i: usize) -> Result<String, StoreError>;
    fn maybe_text(&self, i: usize) -> Result<Option<String>, StoreError>;
    fn int(&self, i: usize) -> Result<i64, StoreError>;
    fn maybe_int(&self, i: usize) -> Result<Option<i64>, StoreError>;
}

/// The columns of a provider row, in [`provider_row`]'s order.
macro_rules! provider_columns {
    () => {
        "tenant, id, settings, client_secret, updated_at"
    };
}

/// The columns of a grant row, in [`grant_row`]'s order.
macro_rules! grant_columns {
    () => {
        "tenant, end_user, provider, access_token, refresh_token, scopes, expires_at, created_at, updated_at"
    };
}

/// The columns of a link row, in [`link_row`]'s order.
macro_rules! link_columns {
    () => {
        "id, tenant, end_user, provider, scopes, state_sha256, verifier, asked_by, created_at, expires_at, state, error"
    };
}

/// A provider row ([`provider_columns!`]).
pub(super) fn provider_row(r: &impl Columns) -> Result<AtRest<StoredProvider>, StoreError> {
    Ok(AtRest(StoredProvider {
        tenant: r.text(0)?,
        id: r.text(1)?,
        settings: r.text(2)?,
        client_secret: r.maybe_text(3)?,
        updated_at: r.int(4)?,
    }))
}

/// A grant row ([`grant_columns!`]).
pub(super) fn grant_row(r: &impl Columns) -> Result<AtRest<StoredGrant>, StoreError> {
    Ok(AtRest(StoredGrant {
        tenant: r.text(0)?,
        end_user: r.text(1)?,
        provider: r.text(2)?,
        access_token: r.text(3)?,
        refresh_token: r.maybe_text(4)?,
        scopes: r.text(5)?,
        expires_at: r.maybe_int(6)?,
        created_at: r.int(7)?,
        updated_at: r.int(8)?,
    }))
}

/// A link row ([`link_columns!`]).
pub(super) fn link_row(r: &impl Columns) -> Result<AtRest<StoredLink>, StoreError> {
    let id = r.text(0)?;
    let state = r.text(10)?;
    let state = LinkState::parse(&state)
        .ok_or_else(|| StoreError::Inconsistent(format!("authorization link {id} is in no known state: {state}")))?;
    Ok(AtRest(StoredLink {
        tenant: r.text(1)?,
        end_user: r.text(2)?,
        provider: r.text(3)?,
        scopes: r.text(4)?,
        state_sha256: r.text(5)?,
        verifier: r.text(6)?,
        asked_by: r.text(7)?,
        created_at: r.int(8)?,
        expires_at: r.int(9)?,
        state,
        error: r.maybe_text(11)?,
        id,
    }))
}

/// The state [`AuthorizationStore::finish_link`] may end a link in, as
/// stored.
pub(super) fn finished_state(state: LinkState) -> Result<&'static str, StoreError> {
    match state {
        LinkState::Connected | LinkState::Failed => Ok(state.as_str()),
        LinkState::Pending | LinkState::Exchanging => {
            Err(StoreError::Inconsistent(format!("a link is not finished as {}", state.as_str())))
        }
    }
}

/// Why a link or a grant was refused for want of its provider.
pub(super) fn no_provider(tenant: &str, provider: &str) -> StoreError {
    StoreError::Conflict(format!("tenant {tenant} has no authorization provider {provider}"))
}
