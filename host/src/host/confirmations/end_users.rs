//! End-user accounts: who may log in to the built-in confirmation page and
//! confirm the calls made for them (Argon2id hashes; the throttles are
//! `login.rs`).

use super::login::{self, LoginError};
use crate::host::{ChangeError, ToolHost};
use crate::store::StoreError;
use crate::tenancy::{AuditEntry, Principal, unix_now};
use argon2::Argon2;
use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use std::sync::Arc;

/// The shortest end-user password accepted.
pub const MIN_PASSWORD_CHARS: usize = 8;

/// A hash no password matches in practice, checked for unknown user names so
/// that they take as long as known ones.
const UNKNOWN_USER_HASH: &str =
    "$argon2id$v=19$m=19456,t=2,p=1$AAAAAAAAAAAAAAAAAAAAAA$Uy0bGqOQ2VjW8rRXb6tVX9z5m6a0m4fGZ0F6yH0wq7I";

/// Longest end-user name.
pub const MAX_END_USER_CHARS: usize = 128;

/// Whether `name` can name an end user: 1 to [`MAX_END_USER_CHARS`]
/// printable characters.
pub fn is_end_user_name(name: &str) -> bool {
    let length = name.chars().count();
    (1..=MAX_END_USER_CHARS).contains(&length) && !name.chars().any(char::is_control)
}

impl ToolHost {
    /// Refuses a call of `version` whose confirmation `end_user` could not
    /// give, before anything runs or is stored: on this server's page (the
    /// tenant has no external confirmation server, or the tool has private
    /// inputs, which only this page collects) only the tenant's end users
    /// can log in, so the name must be one of them. An external server's
    /// people are its own, unknown here: any name is taken, bounded like
    /// any other by the tenant's quotas.
    pub(in crate::host) fn check_confirmer(
        &self,
        tenant: &str,
        version: &crate::registry::ToolVersion,
        end_user: &str,
    ) -> Result<(), crate::host::InvokeError> {
        if self.confirmation_uri(tenant, version).is_some() {
            return Ok(());
        }
        match self.store.end_user(tenant, end_user) {
            Ok(Some(_)) => Ok(()),
            Ok(None) => Err(crate::host::InvokeError::UnknownEndUser { end_user: end_user.to_string() }),
            Err(e) => Err(crate::host::InvokeError::Storage(e.to_string())),
        }
    }

    /// Sets an end user's password: who may log in to the built-in
    /// confirmation page and confirm the calls made for them. Only an
    /// Argon2id hash is stored. The hash takes one of the hashing slots
    /// logins use, within its tenant's share, or is refused at once
    /// ([`ChangeError::Busy`]): a publisher setting passwords in a loop
    /// never waits in front of, nor takes the slots of, another tenant's
    /// logins. It is computed off the async threads.
    pub async fn put_end_user(
        self: &Arc<Self>,
        actor: &Principal,
        tenant: &str,
        name: &str,
        password: &str,
    ) -> Result<(), ChangeError> {
        if password.chars().count() < MIN_PASSWORD_CHARS {
            return Err(ChangeError::Invalid(format!(
                "an end user's password must be at least {MIN_PASSWORD_CHARS} characters"
            )));
        }
        let Some(slot) = login::HashingSlots::for_password(&self.cheq.login.hashing, tenant) else {
            return Err(ChangeError::Busy(
                "the server is checking or setting as many of this tenant's passwords as it may at once; try again in a moment".into(),
            ));
        };
        let host = self.clone();
        let (actor, tenant, name, password) =
            (actor.clone(), tenant.to_string(), name.to_string(), password.to_string());
        tokio::task::spawn_blocking(move || {
            let _slot = slot;
            host.store_end_user(&actor, &tenant, &name, &password)
        })
        .await
        .map_err(|_| ChangeError::Invalid("the password could not be hashed".into()))?
    }

    fn store_end_user(&self, actor: &Principal, tenant: &str, name: &str, password: &str) -> Result<(), ChangeError> {
        let mut salt = [0u8; 16];
        getrandom::fill(&mut salt).map_err(|e| ChangeError::Invalid(e.to_string()))?;
        let salt = SaltString::encode_b64(&salt).map_err(|e| ChangeError::Invalid(e.to_string()))?;
        let hash = Argon2::default()
            .hash_password(password.as_bytes(), &salt)
            .map_err(|e| ChangeError::Invalid(e.to_string()))?
            .to_string();
        let audit = AuditEntry::new(actor, Some(tenant), "end_user.put", name);
        let max = self.quotas_of(tenant).max_end_users;
        if !self.store.put_end_user(tenant, name, &hash, &audit, u64::from(max))? {
            return Err(ChangeError::QuotaExceeded {
                message: format!(
                    "the tenant has {max} end users, as many as its quota `maxEndUsers` allows; delete one, or ask the operator for more"
                ),
                quota: "maxEndUsers",
                max,
            });
        }
        // A new password ends what the old one signed in to.
        self.store.revoke_oauth_of(tenant, Some(name), unix_now())?;
        tracing::info!(tenant, end_user = name, "end user set");
        Ok(())
    }

    /// Removes an end user: they can no longer log in to confirm.
    pub fn delete_end_user(&self, actor: &Principal, tenant: &str, name: &str) -> Result<(), ChangeError> {
        let audit = AuditEntry::new(actor, Some(tenant), "end_user.delete", name);
        if !self.store.delete_end_user(tenant, name, &audit)? {
            return Err(ChangeError::NotFound(format!("there is no end user `{name}`")));
        }
        // Their OAuth grants end with them (a later user of the name gets none),
        // and so do their grants at providers (deleted by the store with them:
        // the cached ones go too, or a call would still act with them).
        self.authorizations.forget_end_user(tenant, name);
        self.store.revoke_oauth_of(tenant, Some(name), unix_now())?;
        Ok(())
    }

    /// Logs an end user in to the built-in confirmation page, from the
    /// client at `address` (the TCP peer). Refused at once, before any
    /// hashing, while the tenant's failed-login budget is spent or the
    /// address, the (user, address) or the user (but at an address it
    /// logged in from before) is locked out by failed logins, or when no
    /// hashing slot is free for it (counted against the address only when
    /// that address holds its own share of them); otherwise the
    /// password is checked off the async threads. An unknown tenant or user
    /// name is answered, throttled and timed like a wrong password.
    pub async fn log_in_end_user(
        self: &Arc<Self>,
        tenant: &str,
        name: &str,
        password: &str,
        address: std::net::IpAddr,
    ) -> Result<(), LoginError> {
        if !is_end_user_name(name) {
            return Err(LoginError::Invalid);
        }
        let guard = &self.cheq.login;
        // Made-up tenants share one budget, each with users of its own
        // (`LoginTenant`).
        let throttled = login::LoginTenant::new(tenant, self.tenant(tenant).is_some());
        guard.check(throttled, name, address)?;
        let slot = guard.hashing_slot(throttled, name, address)?;
        let host = self.clone();
        let (t, n, p) = (tenant.to_string(), name.to_string(), password.to_string());
        let valid = tokio::task::spawn_blocking(move || {
            let _slot = slot;
            host.check_end_user(&t, &n, &p)
        })
        .await
        .unwrap_or(Ok(false))?;
        if valid {
            guard.succeeded(throttled, name, address);
            Ok(())
        } else {
            guard.failed(throttled, name, address);
            Err(LoginError::Invalid)
        }
    }

    /// Whether `password` is `name`'s (slow on purpose: run it off the
    /// async threads, in a hashing slot). An unknown name costs the same as
    /// a wrong password.
    fn check_end_user(&self, tenant: &str, name: &str, password: &str) -> Result<bool, StoreError> {
        // A tenant that does not exist is not looked up (the hash below
        // still runs: it answers as late as an unknown user's).
        let stored = if self.tenant(tenant).is_some() { self.store.end_user(tenant, name)? } else { None };
        let hash = stored.as_deref().unwrap_or(UNKNOWN_USER_HASH);
        let matches = PasswordHash::new(hash)
            .is_ok_and(|hash| Argon2::default().verify_password(password.as_bytes(), &hash).is_ok());
        Ok(matches && stored.is_some())
    }
}
