//! Page sessions and waiting calls: an end user logged in to the built-in
//! confirmation page, and the repeated calls that wait on a transaction,
//! both kept in the store so that any replica knows them.

use crate::host::{ToolHost, random_token};
use crate::store::{StoreError, StoredSession};
use crate::tenancy::unix_now;
use std::time::Duration;

/// A logged-in end user of the built-in confirmation page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageSession {
    /// The tenant it is for.
    pub tenant: String,
    /// The end user.
    pub user: String,
    /// The token every form of the session carries (CSRF).
    pub form_token: String,
}

impl ToolHost {
    /// Opens a confirmation-page session for `user` (whose password was
    /// checked) lasting `ttl`; returns the cookie's value. Only its sha256
    /// is stored, in the store, so that any replica knows the session.
    pub fn open_page_session(&self, tenant: &str, user: &str, ttl: Duration) -> Result<String, StoreError> {
        let token = random_token()?;
        let now = unix_now();
        self.store.insert_session(
            &StoredSession {
                token_sha256: crate::digest::sha256_hex(token.as_bytes()),
                tenant: tenant.to_string(),
                user: user.to_string(),
                form_token: random_token()?,
                expires_at: now.saturating_add(i64::try_from(ttl.as_secs()).unwrap_or(i64::MAX)),
            },
            now,
        )?;
        Ok(token)
    }

    /// The live session of `tenant` whose cookie is `token`.
    pub fn page_session(&self, tenant: &str, token: &str) -> Result<Option<PageSession>, StoreError> {
        // A made-up tenant is answered from memory, never from the store.
        if self.tenant(tenant).is_none() {
            return Ok(None);
        }
        let stored = self.store.session(&crate::digest::sha256_hex(token.as_bytes()), unix_now())?;
        Ok(stored.filter(|s| s.tenant == tenant).map(|s| PageSession {
            tenant: s.tenant,
            user: s.user,
            form_token: s.form_token,
        }))
    }
}

impl ToolHost {
    /// The transaction a repeated call (by the front door's fingerprint of
    /// it) waits on, while it is kept.
    pub fn waiting_call(&self, tenant: &str, fingerprint: &str) -> Result<Option<String>, StoreError> {
        self.store.waiting_call(tenant, fingerprint, unix_now())
    }

    /// Records that the call `fingerprint` waits on transaction `id` until
    /// `kept_until`, within `max_per_tenant` such calls per tenant.
    pub fn keep_waiting_call(
        &self,
        tenant: &str,
        fingerprint: &str,
        id: &str,
        kept_until: i64,
        max_per_tenant: usize,
    ) -> Result<(), StoreError> {
        self.store.put_waiting_call(tenant, fingerprint, id, kept_until, max_per_tenant)
    }

    /// Forgets a waiting call (its outcome was delivered).
    pub fn forget_waiting_call(&self, tenant: &str, fingerprint: &str) -> Result<(), StoreError> {
        self.store.delete_waiting_call(tenant, fingerprint)
    }
}
