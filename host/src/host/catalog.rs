//! The designer's catalog in the core: who is signed in to the catalog
//! pages, and the search over a tenant's tools they browse.
//!
//! A designer signs in with an API key of the tenant (a consumer key is
//! enough). The key is checked once, under the same throttle as the
//! confirmation pages' logins (`confirmations::login`, a table of its own),
//! and the session keeps only the key's id and sha256: every request finds
//! the key again among the live ones, so revoking it ends its sessions at
//! once (on another replica of a fleet, as soon as that replica reads the
//! revocation from the change log). Sessions live in the store, by the
//! sha256 of their cookie, so any replica knows them.
//!
//! Transport-free: the pages are `api::catalog`.

use super::ToolHost;
use super::confirmations::login::{LoginError, LoginGuard, LoginOptions};
use crate::registry::{Tool, ToolVersion};
use crate::store::{StoreError, StoredDesignerSession};
use crate::tenancy::{self, Principal, unix_now};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

/// How long a designer stays signed in.
pub const SESSION_TTL: Duration = Duration::from_secs(8 * 3600);
/// Catalog sessions one key keeps open at most; signing in again past it
/// ends the oldest.
pub const MAX_SESSIONS_PER_KEY: usize = 16;
/// Longest search the catalog reads (characters), and most words in it.
pub const MAX_SEARCH_CHARS: usize = 200;
/// Most words of a search that count.
pub const MAX_SEARCH_WORDS: usize = 10;

pub mod token_counts;

pub use token_counts::TokenCounted;

/// The catalog's state in the core: the throttle on failed sign-ins, and
/// the toolset pages' token counts.
pub(crate) struct CatalogState {
    sign_ins: LoginGuard,
    token_counts: token_counts::TokenCounts,
}

impl CatalogState {
    /// With the same settings as the confirmation pages' logins.
    pub(crate) fn new(options: &LoginOptions) -> CatalogState {
        CatalogState { sign_ins: LoginGuard::new(options), token_counts: Default::default() }
    }
}

/// A designer signed in to a tenant's catalog, as a request finds them.
#[derive(Debug, Clone)]
pub struct DesignerSession {
    /// The tenant whose catalog it opens.
    pub tenant: String,
    /// The key's principal, found again among the live keys.
    pub principal: Principal,
    /// The token every form of the session carries (CSRF).
    pub form_token: String,
    /// When it ends (Unix seconds).
    pub expires_at: i64,
}

/// Why a sign-in was refused.
#[derive(Debug, thiserror::Error)]
pub enum SignInError {
    /// The key is unknown, revoked, or not one of this tenant's (which of
    /// these is not said), or the tenant does not exist.
    #[error("this key does not open this tenant's catalog")]
    Invalid,
    /// Too many failed sign-ins from this address, for this key id, or on
    /// the whole server.
    #[error("too many failed sign-ins; try again in {} seconds", .retry_after.as_secs().max(1))]
    Locked {
        /// When a sign-in may be tried again.
        retry_after: Duration,
    },
    /// The throttle cannot count one more failure.
    #[error("too many sign-ins at once; try again in a moment")]
    Busy,
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl SignInError {
    /// Seconds to wait before trying again, for `Retry-After`.
    pub fn retry_after_secs(&self) -> Option<u64> {
        match self {
            SignInError::Locked { retry_after } => Some(retry_after.as_millis().div_ceil(1000).max(1) as u64),
            SignInError::Busy => Some(1),
            SignInError::Invalid | SignInError::Store(_) => None,
        }
    }
}

impl From<LoginError> for SignInError {
    fn from(e: LoginError) -> Self {
        match e {
            LoginError::Locked { retry_after } => SignInError::Locked { retry_after },
            LoginError::Busy => SignInError::Busy,
            LoginError::Invalid => SignInError::Invalid,
            LoginError::Store(e) => SignInError::Store(e),
        }
    }
}

/// How the catalog lists tools.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum CatalogOrder {
    /// By name.
    #[default]
    Name,
    /// The most recently deployed current version first.
    NewestDeploy,
}

/// What the designer searches for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CatalogQuery {
    /// Words each shown tool has in its name or description (any case).
    pub words: Vec<String>,
    /// A tag each shown tool has.
    pub tag: Option<String>,
    /// The order.
    pub order: CatalogOrder,
}

impl CatalogQuery {
    /// A query for the words of `search` (the first [`MAX_SEARCH_WORDS`] of
    /// its first [`MAX_SEARCH_CHARS`] characters), bounded so that a search
    /// costs at most that much per tool.
    pub fn new(search: &str, tag: Option<String>, order: CatalogOrder) -> CatalogQuery {
        let search: String = search.chars().take(MAX_SEARCH_CHARS).collect();
        let words = search.split_whitespace().take(MAX_SEARCH_WORDS).map(str::to_lowercase).collect();
        CatalogQuery { words, tag: tag.filter(|t| !t.is_empty()), order }
    }

    /// Whether `version` (a tool's current one) matches.
    fn matches(&self, version: &ToolVersion) -> bool {
        let signature = &version.signature;
        if self.tag.as_ref().is_some_and(|tag| !signature.tags.contains(tag)) {
            return false;
        }
        if self.words.is_empty() {
            return true;
        }
        // `book_flight` is found by "book flight" too.
        let text =
            format!("{} {} {}", signature.name, signature.name.replace('_', " "), signature.description).to_lowercase();
        self.words.iter().all(|word| text.contains(word.as_str()))
    }
}

/// One tool in the catalog: the tool and its current version.
#[derive(Clone)]
pub struct CatalogEntry {
    /// The tool.
    pub tool: Arc<Tool>,
    /// What unpinned callers get.
    pub current: Arc<ToolVersion>,
}

/// What the catalog shows of a tenant for a query.
pub struct Catalog {
    /// The tools that match, in the query's order.
    pub entries: Vec<CatalogEntry>,
    /// Every tag of the tenant's current versions, sorted (what the tag
    /// filter offers).
    pub tags: Vec<String>,
}

impl ToolHost {
    /// Checks `key` for `tenant`'s catalog and opens a session lasting
    /// [`SESSION_TTL`]; returns the cookie's value. Failed sign-ins are
    /// throttled by client address, by key id and per tenant (made-up
    /// tenants sharing one budget, each with its key ids' own locks), as
    /// the confirmation pages' logins are.
    pub fn sign_in_designer(&self, tenant: &str, key: &str, address: IpAddr) -> Result<String, SignInError> {
        // A key's id is public (the audit log shows it): a guesser of one
        // key's secret is throttled per id. Anything else is counted by its
        // hash, so that made-up keys do not lock each other out.
        let throttled_as = tenancy::key_id(key).map_or_else(|| tenancy::key_sha256(key), str::to_string);
        let guard = &self.catalog.sign_ins;
        // Made-up tenants share one failed-sign-in budget, each with key ids
        // of its own (`LoginTenant`).
        let exists = self.tenant(tenant).is_some();
        let throttled = super::confirmations::login::LoginTenant::new(tenant, exists);
        guard.check(throttled, &throttled_as, address)?;
        let principal = self.authenticate(key).filter(|p| p.sees(tenant) && exists);
        let Some(principal) = principal else {
            guard.failed(throttled, &throttled_as, address);
            return Err(SignInError::Invalid);
        };
        guard.succeeded(throttled, &throttled_as, address);
        let token = super::random_token()?;
        let now = unix_now();
        self.store.insert_designer_session(
            &StoredDesignerSession {
                token_sha256: crate::digest::sha256_hex(token.as_bytes()),
                tenant: tenant.to_string(),
                key_id: principal.key_id,
                key_sha256: tenancy::key_sha256(key),
                form_token: super::random_token()?,
                created_at: now,
                expires_at: now.saturating_add(SESSION_TTL.as_secs() as i64),
            },
            now,
            MAX_SESSIONS_PER_KEY,
        )?;
        Ok(token)
    }

    /// Each of `texts`' (o200k, cl100k) token counts, for a page of
    /// `tenant`'s catalog: kept from before where they were counted, else
    /// counted off the request threads, one page of the tenant's at a time
    /// (`Busy` at once while another runs: `catalog/token_counts.rs`).
    pub async fn token_counts(&self, tenant: &str, texts: Vec<String>) -> TokenCounted {
        let counted = self.catalog.token_counts.count(tenant, texts).await;
        let outcome = match &counted {
            TokenCounted::Counts { fresh: true, .. } => Some("counted"),
            TokenCounted::Counts { fresh: false, .. } => Some("cached"),
            TokenCounted::Busy => Some("busy"),
            TokenCounted::Failed => None,
        };
        if let Some(outcome) = outcome {
            self.metrics.token_counts(tenant, outcome);
        }
        counted
    }

    /// The live catalog session of `tenant` whose cookie is `token`, with
    /// its key's principal; `None` when there is none, it expired, it is
    /// another tenant's, or its key was revoked.
    pub fn designer_session(&self, tenant: &str, token: &str) -> Result<Option<DesignerSession>, StoreError> {
        // A made-up tenant is answered from memory, never from the store.
        if self.tenant(tenant).is_none() {
            return Ok(None);
        }
        let stored = self.store.designer_session(&crate::digest::sha256_hex(token.as_bytes()), unix_now())?;
        let Some(stored) = stored.filter(|s| s.tenant == tenant) else { return Ok(None) };
        let Some(principal) = self.live_principal(&stored.key_id, &stored.key_sha256) else { return Ok(None) };
        Ok(Some(DesignerSession {
            tenant: stored.tenant,
            principal,
            form_token: stored.form_token,
            expires_at: stored.expires_at,
        }))
    }

    /// Ends the catalog session whose cookie is `token` (signing out).
    pub fn sign_out_designer(&self, token: &str) -> Result<(), StoreError> {
        self.store.delete_designer_session(&crate::digest::sha256_hex(token.as_bytes()))
    }

    /// The principal of the key with this id and hash, if it is live: a
    /// stored key not revoked, or the operator key from the environment.
    fn live_principal(&self, key_id: &str, key_sha256: &str) -> Option<Principal> {
        use subtle::ConstantTimeEq;
        let same = |stored: &str| bool::from(stored.as_bytes().ct_eq(key_sha256.as_bytes()));
        if let Some(record) = self.keys.get(key_id) {
            return (record.revoked_at.is_none() && same(&record.key_sha256)).then(|| Principal {
                key_id: record.id.clone(),
                role: record.role,
                tenant: record.tenant.clone(),
                token: None,
                toolset: record.toolset.clone(),
            });
        }
        let configured = self.operator_key_sha256.as_deref()?;
        let principal = Principal::server(tenancy::ENV_OPERATOR_KEY_ID);
        (principal.key_id == key_id && same(configured)).then_some(principal)
    }

    /// The tenant's tools that `query` finds, with a live current version,
    /// and every tag they have.
    pub fn catalog(&self, tenant: &str, query: &CatalogQuery) -> Catalog {
        let (tools, _) = self.registry.page(tenant, None, usize::MAX, |tool| tool.current().is_some());
        let mut tags = std::collections::BTreeSet::new();
        let mut entries = Vec::new();
        for tool in tools {
            let Some(current) = tool.current() else { continue };
            tags.extend(current.signature.tags.iter().cloned());
            if query.matches(&current) {
                entries.push(CatalogEntry { tool, current });
            }
        }
        if query.order == CatalogOrder::NewestDeploy {
            // Stable: equal times stay in name order.
            entries.sort_by_key(|e| std::cmp::Reverse(e.current.created_at));
        }
        Catalog { entries, tags: tags.into_iter().collect() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_search_is_bounded_and_case_blind() {
        let query = CatalogQuery::new("  Flight  BOOK ", Some(String::new()), CatalogOrder::Name);
        assert_eq!(query.words, ["flight", "book"]);
        assert_eq!(query.tag, None, "an empty tag filters nothing");
        let long = "word ".repeat(100);
        assert_eq!(CatalogQuery::new(&long, None, CatalogOrder::Name).words.len(), MAX_SEARCH_WORDS);
        let one = "x".repeat(10 * MAX_SEARCH_CHARS);
        assert_eq!(CatalogQuery::new(&one, None, CatalogOrder::Name).words[0].len(), MAX_SEARCH_CHARS);
    }
}
