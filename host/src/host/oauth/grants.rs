//! Grants and tokens of the built-in authorization server: codes (PKCE
//! S256, used once), opaque access and refresh tokens stored by sha256 with
//! their grant, refresh rotation with reuse detection, revocation, and what
//! a token grants.

use super::{
    ACCESS_PREFIX, ACCESS_TTL, CODE_PREFIX, CODE_TTL, IssuedTokens, KEPT_TOKENS_PER_GRANT, OAuthError, REFRESH_PREFIX,
    REFRESH_REUSE_WINDOW, REFRESH_TTL, known_scopes,
};
use crate::digest::sha256_hex;
use crate::host::ToolHost;
use crate::host::random_token;
use crate::store::{OAuthGrant, StoreError};
use crate::tenancy::{TokenGrant, unix_now};
use serde_json::{Value, json};
use std::time::Duration;

/// The S256 code challenge of `verifier` (RFC 7636 §4.2).
pub(super) fn s256(verifier: &str) -> String {
    use base64::Engine;
    use sha2::Digest;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(sha2::Sha256::digest(verifier.as_bytes()))
}

/// A verifier RFC 7636 §4.1 allows: 43 to 128 unreserved characters.
pub(super) fn sound_verifier(verifier: &str) -> bool {
    (43..=128).contains(&verifier.len())
        && verifier.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~'))
}

/// What an authorization request asked, once its client and redirect URI
/// are known good.
#[derive(Debug, Clone)]
pub struct Authorization {
    pub client_id: String,
    pub redirect_uri: String,
    /// Whether the request named it (else it was the client's only one):
    /// the token request must then name it too (RFC 6749 §4.1.3).
    pub redirect_uri_given: bool,
    pub code_challenge: String,
    pub scopes: Vec<String>,
    pub resource: String,
}

impl ToolHost {
    /// Issues a code for what `end_user` consented to.
    pub fn issue_code(&self, tenant: &str, end_user: &str, asked: &Authorization) -> Result<String, OAuthError> {
        let code = format!("{CODE_PREFIX}{}", random_token()?.trim_end_matches('='));
        let detail = json!({ "redirect_uri": asked.redirect_uri, "redirect_uri_given": asked.redirect_uri_given,
                             "code_challenge": asked.code_challenge });
        let grant = OAuthGrant {
            token_sha256: sha256_hex(code.as_bytes()),
            kind: "code".into(),
            tenant: tenant.to_string(),
            client_id: asked.client_id.clone(),
            end_user: end_user.to_string(),
            scope: asked.scopes.join(" "),
            resource: asked.resource.clone(),
            family: uuid::Uuid::new_v4().to_string(),
            detail: detail.to_string(),
            expires_at: unix_now() + CODE_TTL.as_secs() as i64,
            used_at: None,
            revoked_at: None,
        };
        crate::store::off_the_workers(|| self.store.insert_oauth_grants(std::slice::from_ref(&grant)))?;
        self.client_used(tenant, &asked.client_id);
        Ok(code)
    }

    /// The stored grant of the token or code whose sha256 is `sha`, if any;
    /// none for a tenant that does not exist, which is never looked up
    /// (its OAuth endpoints answer as a tenant's that does:
    /// [`ToolHost::oauth_enabled`]).
    fn grant_of(&self, tenant: &str, sha: &str) -> Result<Option<OAuthGrant>, StoreError> {
        if self.tenant(tenant).is_none() {
            return Ok(None);
        }
        crate::store::off_the_workers(|| self.store.oauth_grant(sha))
    }

    /// Admits a token request from `from`, or refuses it when that address
    /// (an IPv6 client by its /48 site, as registrations and logins count
    /// it: a site has 65,536 /64s to rotate through) asked too often.
    pub fn admit_token_request(&self, from: std::net::IpAddr) -> Result<(), OAuthError> {
        let site = crate::client_address::prefix(from, crate::client_address::SITE_PREFIX);
        self.oauth.rates.token_requests.take(&site).map_err(|wait| {
            tracing::info!(client = %from, "a token request was refused: too many from its address");
            OAuthError::too_often("token requests from this address", wait)
        })
    }

    /// Exchanges a code (authorization_code grant). Everything is checked
    /// before the code is spent: someone who saw a code but not its
    /// verifier (or at another tenant, or for another client) cannot burn
    /// it.
    pub fn exchange_code(
        &self,
        tenant: &str,
        code: &str,
        client_id: &str,
        redirect_uri: Option<&str>,
        verifier: &str,
        resource: Option<&str>,
    ) -> Result<IssuedTokens, OAuthError> {
        let now = unix_now();
        let sha = sha256_hex(code.as_bytes());
        let found = self.grant_of(tenant, &sha)?;
        let grant = found
            .filter(|g| g.kind == "code" && g.tenant == tenant)
            .ok_or_else(|| OAuthError::grant("the code is not valid"))?;
        if grant.client_id != client_id {
            return Err(OAuthError::grant("the code was issued to another client"));
        }
        self.client_still_registered(tenant, client_id)?;
        let detail: Value = serde_json::from_str(&grant.detail).unwrap_or_default();
        let required = detail["redirect_uri_given"].as_bool().unwrap_or(true);
        match redirect_uri {
            Some(uri) if detail["redirect_uri"].as_str() != Some(uri) => {
                return Err(OAuthError::grant("redirect_uri is not the one the code was issued with"));
            }
            None if required => {
                return Err(OAuthError::new("invalid_request", "`redirect_uri` is required: the request named one"));
            }
            _ => {}
        }
        if !sound_verifier(verifier) || detail["code_challenge"].as_str() != Some(&s256(verifier)) {
            return Err(OAuthError::grant("the code_verifier does not match the code_challenge"));
        }
        if resource.is_some_and(|r| r != grant.resource) {
            return Err(OAuthError::new("invalid_target", "the code was issued for another resource"));
        }
        // Every check passed: now it is spent, once.
        let used = crate::store::off_the_workers(|| self.store.use_oauth_grant(&sha, now))?;
        let grant = used.ok_or_else(|| OAuthError::grant("the code is not valid"))?;
        if grant.used_at.is_some() {
            // A code replayed by whoever holds its verifier too: it may have
            // been stolen; what the first exchange issued is revoked (OAuth
            // 2.1 §4.1.3).
            crate::store::off_the_workers(|| self.store.revoke_oauth(&sha, Some(&grant.family), now))?;
            return Err(OAuthError::grant("the code was already used; the tokens issued for it are revoked"));
        }
        if grant.revoked_at.is_some() || grant.expires_at <= now {
            return Err(OAuthError::grant("the code has expired"));
        }
        let scopes: Vec<String> = grant.scope.split(' ').map(str::to_string).collect();
        self.issue_after_use(&sha, &grant, &scopes)
    }

    /// Issues tokens for a code or refresh token just spent; if a replay
    /// revoked its grant in between (after the spend, before these
    /// tokens existed), revokes them too.
    fn issue_after_use(&self, spent: &str, grant: &OAuthGrant, scopes: &[String]) -> Result<IssuedTokens, OAuthError> {
        let parent = (grant.kind == "refresh").then_some(spent);
        let tokens = self.issue_tokens(grant, scopes, parent)?;
        let revoked =
            crate::store::off_the_workers(|| self.store.oauth_grant(spent))?.is_none_or(|g| g.revoked_at.is_some());
        if revoked {
            let now = crate::tenancy::unix_now();
            crate::store::off_the_workers(|| self.store.revoke_oauth(spent, Some(&grant.family), now))?;
            return Err(OAuthError::grant("the grant was revoked while these tokens were issued"));
        }
        Ok(tokens)
    }

    /// Refreshes (refresh_token grant): the refresh token is used once;
    /// presenting a used one revokes its family, unless it is the one just
    /// replaced, presented again within [`REFRESH_REUSE_WINDOW`] of its use
    /// and before its successor was used: that refreshes again.
    pub fn refresh_tokens(
        &self,
        tenant: &str,
        refresh_token: &str,
        client_id: &str,
        scope: Option<&str>,
        resource: Option<&str>,
    ) -> Result<IssuedTokens, OAuthError> {
        let now = unix_now();
        let sha = sha256_hex(refresh_token.as_bytes());
        let invalid = || OAuthError::grant("the refresh token is not valid");
        let ours = |g: &OAuthGrant| g.kind == "refresh" && g.tenant == tenant && g.client_id == client_id;
        // Checked before it is marked used: another client presenting it
        // must not spend its owner's token.
        let found = self.grant_of(tenant, &sha)?;
        let Some(found) = found.filter(ours) else {
            self.client_still_registered(tenant, client_id)?;
            return Err(invalid());
        };
        if let Err(wait) = self.oauth.rates.refreshes.take(&found.family) {
            tracing::info!(tenant, "a refresh was refused: its grant refreshed too often");
            return Err(OAuthError::too_often("refreshes of this grant", wait));
        }
        let used = crate::store::off_the_workers(|| self.store.use_oauth_grant(&sha, now))?;
        let grant = used.filter(ours).ok_or_else(invalid)?;
        // A revoked refresh token is presented only from a stale copy: a
        // token the grant's owner moved past (its successor was used), or
        // one a retry replaced. Like a replay, it revokes the grant.
        let replayed = grant.used_at.is_some_and(|first_use| {
            grant.revoked_at.is_some() || now - first_use > REFRESH_REUSE_WINDOW.as_secs() as i64
        });
        if replayed || (grant.revoked_at.is_some() && grant.expires_at > now) {
            crate::store::off_the_workers(|| self.store.revoke_oauth(&sha, Some(&grant.family), now))?;
            tracing::warn!(tenant, "a spent or revoked refresh token was presented again: its grant is revoked");
            return Err(OAuthError::grant("the refresh token was already used or revoked; its grant is revoked"));
        }
        if grant.used_at.is_some() {
            // A retry within the window: what the first use issued is
            // replaced (the client never stored it), so one line of tokens
            // stays live.
            tracing::info!(tenant, "a refresh token was presented again within its reuse window");
            crate::store::off_the_workers(|| self.store.revoke_unused_refresh(&grant.family, now))?;
        }
        if grant.revoked_at.is_some() || grant.expires_at <= now || !self.builtin_oauth(tenant) {
            return Err(OAuthError::grant("the refresh token has expired or was revoked"));
        }
        if resource.is_some_and(|r| r != grant.resource) {
            return Err(OAuthError::new("invalid_target", "the refresh token was issued for another resource"));
        }
        // A removed end user's grants were revoked; a store that failed to
        // say so is asked again.
        if crate::store::off_the_workers(|| self.store.end_user(tenant, &grant.end_user))?.is_none() {
            return Err(OAuthError::grant("the end user this token acts for no longer exists"));
        }
        let granted: Vec<String> = grant.scope.split(' ').map(str::to_string).collect();
        let scopes = match known_scopes(scope) {
            None => granted,
            Some(asked) => {
                if asked.iter().any(|s| !granted.contains(s)) {
                    return Err(OAuthError::new("invalid_scope", "a refresh cannot widen the scopes granted"));
                }
                asked
            }
        };
        let tokens = self.issue_after_use(&sha, &grant, &scopes)?;
        if grant.used_at.is_none() {
            // The token this one replaced leaves its reuse window now.
            let detail: Value = serde_json::from_str(&grant.detail).unwrap_or_default();
            if let Some(parent) = detail["parent"].as_str() {
                crate::store::off_the_workers(|| self.store.revoke_oauth(parent, None, now))?;
            }
        }
        let spare = [sha256_hex(tokens.access_token.as_bytes()), sha256_hex(tokens.refresh_token.as_bytes())];
        if let Err(e) = crate::store::off_the_workers(|| {
            self.store.prune_oauth_family(&grant.family, KEPT_TOKENS_PER_GRANT, &spare)
        }) {
            tracing::warn!(tenant, error = %e, "a grant's old tokens were not pruned");
        }
        self.client_used(tenant, client_id);
        Ok(tokens)
    }

    /// Issues an access and a refresh token of `from`'s grant; the refresh
    /// token remembers the one it replaces (`parent`), whose reuse window
    /// its own use closes.
    fn issue_tokens(
        &self,
        from: &OAuthGrant,
        scopes: &[String],
        parent: Option<&str>,
    ) -> Result<IssuedTokens, OAuthError> {
        let now = unix_now();
        let access_token = format!("{ACCESS_PREFIX}{}", random_token()?.trim_end_matches('='));
        let refresh_token = format!("{REFRESH_PREFIX}{}", random_token()?.trim_end_matches('='));
        let grant = |token: &str, kind: &str, ttl: Duration| OAuthGrant {
            token_sha256: sha256_hex(token.as_bytes()),
            kind: kind.into(),
            scope: scopes.join(" "),
            detail: "{}".into(),
            expires_at: now + ttl.as_secs() as i64,
            used_at: None,
            revoked_at: None,
            ..from.clone()
        };
        let refresh = OAuthGrant {
            detail: parent.map_or_else(|| "{}".into(), |p| json!({ "parent": p }).to_string()),
            ..grant(&refresh_token, "refresh", REFRESH_TTL)
        };
        let grants = [grant(&access_token, "access", ACCESS_TTL), refresh];
        crate::store::off_the_workers(|| self.store.insert_oauth_grants(&grants))?;
        Ok(IssuedTokens { access_token, refresh_token, scope: scopes.join(" ") })
    }

    /// Revokes a token (RFC 7009): a refresh token with its whole grant, an
    /// access token alone. A token that is not the client's, or unknown, is
    /// left alone (and the answer is the same).
    pub fn revoke_token(&self, tenant: &str, token: &str, client_id: &str) -> Result<(), OAuthError> {
        let sha = sha256_hex(token.as_bytes());
        let Some(grant) = self.grant_of(tenant, &sha)? else { return Ok(()) };
        if grant.tenant != tenant || grant.client_id != client_id {
            return Ok(());
        }
        let family = (grant.kind == "refresh").then_some(grant.family.as_str());
        crate::store::off_the_workers(|| self.store.revoke_oauth(&sha, family, unix_now()))?;
        Ok(())
    }

    /// What the access token `token` grants at `tenant`, if it is valid:
    /// issued by this tenant, live, not revoked, and the tenant's
    /// authorization server still on.
    pub fn access_grant(&self, tenant: &str, token: &str) -> Result<Option<TokenGrant>, StoreError> {
        if !token.starts_with(ACCESS_PREFIX) || token.len() > 100 || self.tenant(tenant).is_none() {
            return Ok(None);
        }
        let sha = sha256_hex(token.as_bytes());
        let Some(g) = crate::store::off_the_workers(|| self.store.oauth_grant(&sha))? else { return Ok(None) };
        let live = g.kind == "access"
            && g.tenant == tenant
            && g.revoked_at.is_none()
            && g.expires_at > unix_now()
            && self.builtin_oauth(tenant);
        Ok(live.then(|| TokenGrant {
            client_id: g.client_id,
            end_user: g.end_user,
            scopes: g.scope.split(' ').filter(|s| !s.is_empty()).map(str::to_string).collect(),
            resource: g.resource,
            family: g.family,
        }))
    }

    /// What the OAuth access token `token` grants at `tenant`'s MCP URL
    /// `resource`: one of the built-in server's, or a JWT of the tenant's
    /// external identity provider. `None` when it is neither, or not good.
    pub async fn token_grant(
        &self,
        tenant: &str,
        token: &str,
        resource: &str,
    ) -> Result<Option<TokenGrant>, StoreError> {
        let grant = if token.starts_with(ACCESS_PREFIX) {
            self.access_grant(tenant, token)?
        } else {
            self.external_grant(tenant, token, resource).await?
        };
        Ok(grant.filter(|g| g.resource == resource))
    }
}
