//! The built-in OAuth 2.1 authorization server of each tenant, in the core:
//! clients, codes, tokens. Its HTTP surface (metadata, the sign-in and
//! consent page, the token, registration and revocation endpoints) is
//! `api/oauth.rs`; docs/oauth.md says what it does and why.
//!
//! - **Clients** are public (PKCE, no secret): registered dynamically
//!   (RFC 7591, stored, a bounded number per tenant) or named by the URL of
//!   their Client ID Metadata Document, fetched under the outbound policy
//!   (https, public addresses unless the operator allows, size and time
//!   bounds, no redirects) and cached briefly.
//! - **Codes** last a minute and are exchanged once, with the PKCE S256
//!   verifier, by the client they were issued to, for the redirect URI they
//!   were issued with. A code exchanged twice revokes what the first
//!   exchange issued.
//! - **Tokens** are opaque random strings; the store keeps their sha256
//!   with the grant (tenant, client, end user, scopes, resource), so every
//!   replica of a fleet validates, refreshes and revokes them. A refresh
//!   token is used once: refreshing rotates it, and presenting a used one
//!   again (a stolen copy) revokes its whole family — except the one just
//!   replaced, within [`REFRESH_REUSE_WINDOW`] of its use and until its
//!   successor is used (a retry after a lost answer, two processes sharing
//!   stored credentials). A grant keeps at most [`KEPT_TOKENS_PER_GRANT`]
//!   tokens of each kind.
//! - **Bounds**: what the open endpoints take from one client is rated
//!   ([`OAuthRates`]: registrations and token requests per address,
//!   refreshes per grant); a tenant full of registered clients makes room
//!   by deleting the oldest never used.

mod clients;
mod external;
mod grants;

pub use clients::{MCP_HOST_SCHEMES, OAuthClient, is_metadata_document_url, redirect_matches};
pub use grants::Authorization;

use super::ToolHost;
use super::fetcher::{JwksFetcher, JwksOptions};
use crate::store::StoreError;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;

/// The scopes an agent's token may carry: what a consumer key may do.
/// Publishing and operating are never granted to an agent.
pub const SCOPES: [(&str, &str); 2] =
    [("tools:read", "list the tools and read their signatures"), ("tools:call", "call the tools, as you")];

/// How long an access token lasts.
pub const ACCESS_TTL: Duration = Duration::from_secs(3600);
/// How long a refresh token lasts (each refresh issues a new one).
pub const REFRESH_TTL: Duration = Duration::from_secs(30 * 24 * 3600);
/// How long a code lasts.
pub const CODE_TTL: Duration = Duration::from_secs(60);
/// Clients a tenant may have registered dynamically: registration is open
/// to anyone, so what it can make the server keep is bounded.
pub const MAX_REGISTERED_CLIENTS: u64 = 10_000;
/// The longest client metadata (registered or fetched) accepted.
pub const MAX_CLIENT_METADATA_BYTES: usize = 16 * 1024;
/// The longest `client_id` looked at (a metadata document's URL included).
pub const MAX_CLIENT_ID_BYTES: usize = 1024;
/// How long after its use a refresh token may be presented again and still
/// refresh (until the token that replaced it is used): long enough for a
/// client to retry a refresh whose answer it lost, or for a second process
/// sharing the same stored credentials to refresh at about the same time;
/// short enough that a copy stolen later is caught by reuse detection.
pub const REFRESH_REUSE_WINDOW: Duration = Duration::from_secs(30);
/// Access and refresh tokens a grant keeps at most, of each kind: older
/// ones (long replaced by refreshes) are deleted.
pub const KEPT_TOKENS_PER_GRANT: u32 = 4;
/// How long a registered client that was ever used is kept after its last
/// use (once it holds no credential): a refresh token's life and a margin,
/// so a client back after its refresh token expired signs in again under
/// the id it has stored.
pub const CLIENT_KEPT_AFTER_USE: Duration = Duration::from_secs(REFRESH_TTL.as_secs() + 7 * 24 * 3600);

/// The prefixes of the credentials this server issues: a bearer that
/// starts with one is a token, not an API key.
pub const ACCESS_PREFIX: &str = "plinth_at_";
const REFRESH_PREFIX: &str = "plinth_rt_";
const CODE_PREFIX: &str = "plinth_ac_";

/// The tenant setting that holds its [`OAuthSetting`] (none: the default).
pub(super) const OAUTH_SETTING: &str = "oauth";

/// How a tenant's MCP URL takes OAuth tokens: from its built-in
/// authorization server (the default), from an external identity provider
/// (`issuer`), or not at all (`enabled: false`). Set by an operator.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct OAuthSetting {
    /// `false`: no OAuth at all (keys only).
    #[serde(default = "yes")]
    pub enabled: bool,
    /// An external identity provider's issuer (OIDC discovery at
    /// `{issuer}/.well-known/openid-configuration`), whose JWT access
    /// tokens for the tenant's MCP URL are accepted instead of the built-in
    /// server's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub issuer: Option<String>,
    /// The claim that names the end user (default `sub`).
    #[serde(default = "sub_claim")]
    pub end_user_claim: String,
    /// The claim that holds the scopes, a space-separated string or a list
    /// (default `scope`).
    #[serde(default = "scope_claim")]
    pub scope_claim: String,
    /// `true`: an external token may name anyone in its end-user claim.
    /// By default it must name one of the tenant's end users: whoever can
    /// get a token from the provider (any account there) cannot act as a
    /// name the tenant never made.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub any_end_user: bool,
}

fn yes() -> bool {
    true
}
fn sub_claim() -> String {
    "sub".into()
}
fn scope_claim() -> String {
    "scope".into()
}

impl Default for OAuthSetting {
    fn default() -> Self {
        OAuthSetting {
            enabled: true,
            issuer: None,
            end_user_claim: sub_claim(),
            scope_claim: scope_claim(),
            any_end_user: false,
        }
    }
}

/// Why an OAuth request was refused: the RFC 6749 error code and what to
/// tell the client.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code}: {description}")]
pub struct OAuthError {
    pub code: &'static str,
    pub description: String,
    /// Set when the client asked too often: seconds until it may again
    /// (`429` with `Retry-After`).
    pub retry_after: Option<u64>,
}

impl OAuthError {
    pub fn new(code: &'static str, description: impl Into<String>) -> OAuthError {
        OAuthError { code, description: description.into(), retry_after: None }
    }

    /// A refusal for asking too often: again in `wait`.
    fn too_often(what: &str, wait: Duration) -> OAuthError {
        let secs = wait.as_secs() + 1;
        OAuthError {
            retry_after: Some(secs),
            ..OAuthError::new("temporarily_unavailable", format!("too many {what}; try again in {secs} s"))
        }
    }

    fn grant(description: &str) -> OAuthError {
        OAuthError::new("invalid_grant", description)
    }
}

impl From<StoreError> for OAuthError {
    fn from(e: StoreError) -> Self {
        tracing::warn!(error = %e, "the OAuth store failed");
        OAuthError::new("temporarily_unavailable", "the authorization server's store failed; try again")
    }
}

/// What the token endpoint answers (RFC 6749 §5.1).
#[derive(Debug, Clone)]
pub struct IssuedTokens {
    pub access_token: String,
    pub refresh_token: String,
    pub scope: String,
}

impl IssuedTokens {
    pub fn to_json(&self) -> Value {
        json!({
            "access_token": self.access_token,
            "token_type": "Bearer",
            "expires_in": ACCESS_TTL.as_secs(),
            "refresh_token": self.refresh_token,
            "scope": self.scope,
        })
    }
}

/// The scopes of a request that this server knows, each once, in order.
/// Others (`openid`, `offline_access`, another server's) are ignored, as
/// RFC 6749 §3.3 allows; `None` when it asks for none this server knows.
pub fn known_scopes(scope: Option<&str>) -> Option<Vec<String>> {
    let mut known: Vec<String> = Vec::new();
    for s in scope.unwrap_or("").split(' ') {
        if SCOPES.iter().any(|(k, _)| *k == s) && !known.iter().any(|g| g == s) {
            known.push(s.to_string());
        }
    }
    (!known.is_empty()).then_some(known)
}

/// The scopes an authorization request is granted: those it asks for that
/// this server knows, or all of them when it asks for none it knows.
pub fn requested_scopes(scope: Option<&str>) -> Vec<String> {
    known_scopes(scope).unwrap_or_else(|| SCOPES.iter().map(|(s, _)| s.to_string()).collect())
}

/// What the open endpoints take from one client, rated: registrations and
/// token requests by client address (an IPv6 client by its /48 site),
/// refreshes by grant. In a fleet each replica rates its own
/// share of the traffic.
pub(super) struct OAuthRates {
    registrations: crate::keyed_rate::KeyedRate<std::net::IpAddr>,
    token_requests: crate::keyed_rate::KeyedRate<std::net::IpAddr>,
    refreshes: crate::keyed_rate::KeyedRate<String>,
}

/// Keys each rate table remembers at most.
const RATED_KEYS: usize = 10_000;

impl Default for OAuthRates {
    fn default() -> Self {
        use crate::keyed_rate::KeyedRate;
        OAuthRates {
            // An MCP host registers once per user and server; a NAT of
            // users a few at a time.
            registrations: KeyedRate::new(20, Duration::from_secs(30), RATED_KEYS),
            token_requests: KeyedRate::new(60, Duration::from_millis(500), RATED_KEYS),
            // A client refreshes about once an access token's life.
            refreshes: KeyedRate::new(6, Duration::from_secs(10), RATED_KEYS),
        }
    }
}
/// The OAuth state a server keeps in memory: the tenants' settings, the
/// fetchers of documents others serve, and the open endpoints' rates.
pub(super) struct OAuthState {
    /// Tenants' OAuth settings other than the default: off, or an external
    /// issuer.
    pub settings: dashmap::DashMap<String, OAuthSetting>,
    /// OAuth clients' metadata documents, fetched and cached under the
    /// same rules as confirmation servers' keys, and to public addresses
    /// only unless the operator allows http (tests, closed networks):
    /// anyone can make the server fetch one.
    pub documents: JwksFetcher,
    /// Tenants' external identity providers' discovery documents and key
    /// sets: a cache of their own, so that made-up client documents cannot
    /// crowd them out.
    pub providers: JwksFetcher,
    /// What the open OAuth endpoints take from one client.
    pub rates: OAuthRates,
}

impl OAuthState {
    /// `jwks`: the rules confirmation servers' keys are fetched under,
    /// which documents follow too (with `http://` only when
    /// `documents_allow_http`); `outbound`: the address policy of tools'
    /// outbound requests.
    pub fn new(
        jwks: &JwksOptions,
        documents_allow_http: bool,
        outbound: Arc<crate::egress::OutboundLimits>,
    ) -> OAuthState {
        let options = JwksOptions { allow_http: documents_allow_http, ..jwks.clone() };
        OAuthState {
            settings: Default::default(),
            documents: JwksFetcher::documents(
                options.clone(),
                if documents_allow_http {
                    outbound.clone()
                } else {
                    Arc::new(crate::egress::OutboundLimits { allowed_private: Vec::new(), ..(*outbound).clone() })
                },
                MAX_CLIENT_METADATA_BYTES,
            ),
            providers: JwksFetcher::documents_of(options, outbound, jwks.max_bytes),
            rates: Default::default(),
        }
    }
}

impl ToolHost {
    /// Loads the tenants' OAuth settings, replacing what was loaded before
    /// (another replica may have changed or removed some).
    pub(super) fn load_oauth_settings(&self, settings: &[crate::store::StoredSetting]) -> Result<(), StoreError> {
        let mut oauth = std::collections::HashMap::new();
        for (tenant, key, value) in settings.iter().cloned() {
            if key == OAUTH_SETTING {
                let what = format!("tenant {tenant} setting {key}");
                let setting: OAuthSetting = serde_json::from_str(&value).map_err(|e| StoreError::Decode(what, e))?;
                oauth.insert(tenant, setting);
            }
        }
        self.oauth.settings.retain(|tenant, _| oauth.contains_key(tenant));
        for (tenant, setting) in oauth {
            self.oauth.settings.insert(tenant, setting);
        }
        Ok(())
    }

    /// A tenant's OAuth setting (the default unless an operator set one).
    pub fn oauth_setting(&self, tenant: &str) -> OAuthSetting {
        self.oauth.settings.get(tenant).map(|s| s.clone()).unwrap_or_default()
    }

    /// Whether `tenant`'s MCP URL takes OAuth tokens (from its built-in
    /// server or an external issuer): its operator did not turn OAuth off.
    /// A tenant that does not exist answers as one with the default
    /// setting (on, the built-in server), so that its metadata, its MCP
    /// URL's challenge and its OAuth endpoints tell a stranger nothing of
    /// whether it exists (docs/security.md): no token of it is ever good,
    /// no code is issued for it (no one signs in to it) and nothing is
    /// stored for it. Answered from memory: every unauthenticated request
    /// to an MCP URL asks.
    pub fn oauth_enabled(&self, tenant: &str) -> bool {
        self.oauth.settings.get(tenant).is_none_or(|s| s.enabled)
    }

    /// Whether `tenant`'s built-in authorization server is the one that
    /// issues its tokens.
    pub fn builtin_oauth(&self, tenant: &str) -> bool {
        self.oauth_enabled(tenant) && self.oauth.settings.get(tenant).is_none_or(|s| s.issuer.is_none())
    }

    /// Sets how a tenant's MCP URL takes OAuth tokens (an operator's
    /// choice, audited). An external issuer must be a URL the outbound
    /// policy lets this server fetch. Tokens of the other kind stop
    /// working at once.
    pub fn set_oauth(
        &self,
        actor: &crate::tenancy::Principal,
        tenant: &str,
        setting: OAuthSetting,
    ) -> Result<(), super::ChangeError> {
        if self.tenant(tenant).is_none() {
            return Err(super::ChangeError::NotFound(format!("there is no tenant `{tenant}`")));
        }
        if let Some(issuer) = &setting.issuer {
            let discovery = format!("{}/.well-known/openid-configuration", issuer.trim_end_matches('/'));
            if issuer.ends_with('/') || self.oauth.providers.check_url(&discovery).is_err() {
                return Err(super::ChangeError::Invalid(
                    "`issuer` must be an https:// URL without a trailing slash, user name or password, on an address this server may reach".into(),
                ));
            }
        }
        for claim in [&setting.end_user_claim, &setting.scope_claim] {
            if claim.is_empty() || claim.len() > 64 {
                return Err(super::ChangeError::Invalid("claim names are 1 to 64 characters".into()));
            }
        }
        let audit = crate::tenancy::AuditEntry::new(actor, Some(tenant), "oauth.put", tenant)
            .detail(serde_json::to_value(&setting).unwrap_or_default());
        let leaves_builtin = !setting.enabled || setting.issuer.is_some();
        let value = serde_json::to_string(&setting).unwrap_or_default();
        self.store.put_setting(&(tenant.to_string(), OAUTH_SETTING.into(), value), &audit)?;
        // Tokens of the built-in server end with it: turning it on again
        // does not bring them back.
        if leaves_builtin {
            self.store.revoke_oauth_of(tenant, None, crate::tenancy::unix_now())?;
        }
        self.oauth.settings.insert(tenant.to_string(), setting);
        Ok(())
    }
}

/// The checks `external_grant` and `oauth_client` make of what outside
/// parties send (an external issuer's JWT and key set, a client's metadata)
/// without the fetching around them: for the fuzzers (`fuzz/`), not an API.
#[doc(hidden)]
pub mod fuzzing {
    use super::clients::{MetadataFrom, client_from_metadata, sound_redirect_uri};
    use super::external::{Jwt, MAX_JWT_BYTES, access_token_type, granted_by};
    use super::*;
    use crate::tenancy::TokenGrant;

    /// What [`ToolHost::external_grant`] decides once it holds the issuer's
    /// key set `jwks`, in its order: the token's size, its form, its `typ`,
    /// a key of `jwks` that signed it, its claims at `now`.
    pub fn external_token(
        setting: &OAuthSetting,
        issuer: &str,
        token: &str,
        jwks: &Value,
        resource: &str,
        now: i64,
    ) -> Result<TokenGrant, &'static str> {
        if token.len() > MAX_JWT_BYTES {
            return Err("longer than a JWT is read");
        }
        let jwt = Jwt::parse(token).ok_or("not a JWT")?;
        if !access_token_type(jwt.typ.as_deref()) {
            return Err("not an access token");
        }
        let _ = jwt.names_a_key_not_in(jwks);
        if !jwt.verified_by(jwks) {
            return Err("no key of the issuer signed it");
        }
        granted_by(setting, issuer, &jwt.claims, resource, now, token)
    }

    /// A client's metadata, registered or fetched (a CIMD document).
    pub fn client_metadata(client_id: &str, metadata: &Value, document: bool) -> Result<OAuthClient, OAuthError> {
        let from = if document { MetadataFrom::Document } else { MetadataFrom::Registration };
        client_from_metadata(client_id, metadata, from)
    }

    /// Whether a declared redirect URI is one a client may register.
    pub fn sound_redirect(uri: &str) -> bool {
        sound_redirect_uri(uri)
    }
}

#[cfg(test)]
mod tests {
    use super::clients::sound_redirect_uri;
    use super::external::{Jwt, access_token_type, granted_by};
    use super::grants::{s256, sound_verifier};
    use super::*;

    #[test]
    fn a_redirect_uri_matches_exactly_or_on_loopback_with_any_port() {
        let registered = vec!["https://app.example/cb".to_string(), "http://127.0.0.1/callback".to_string()];
        assert!(redirect_matches(&registered, "https://app.example/cb"));
        assert!(redirect_matches(&registered, "http://127.0.0.1:53211/callback"));
        for other in [
            "https://app.example/cb/",
            "https://app.example/cb?x=1",
            "https://app.example.evil/cb",
            "https://app.example:8443/cb",
            "http://127.0.0.1:5/other",
            "http://localhost:5/callback",
            "not a url",
        ] {
            assert!(!redirect_matches(&registered, other), "{other}");
        }
    }

    #[test]
    fn only_sound_redirect_uris_are_registered() {
        for good in [
            "https://app.example/cb",
            "http://127.0.0.1:3000/cb",
            "http://localhost/cb",
            "com.example.app:/cb",
            // Private-use schemes as MCP hosts use them (RFC 8252 §7.1).
            "cursor://anysphere.cursor-mcp/oauth/callback",
            "vscode://vscode.github-authentication/did-authenticate",
        ] {
            assert!(sound_redirect_uri(good), "{good}");
        }
        for bad in [
            "http://app.example/cb",
            "https://app.example/cb#frag",
            "javascript:alert(1)",
            "data:text/html,x",
            "https://user:pw@app.example/cb",
            "/relative",
            "file:///etc/passwd",
            "vbscript:msgbox",
            "blob:https://app.example/x",
            "about:blank",
            "view-source:https://app.example/",
            "chrome-extension://abc/cb",
            "wss://app.example/cb",
            "custom:/cb",
            "ms-msdt:/id",
            "search-ms:query=x",
        ] {
            assert!(!sound_redirect_uri(bad), "{bad}");
        }
    }

    #[test]
    fn a_registration_says_what_it_is_and_its_redirect_uris_fit_it() {
        use super::clients::{MetadataFrom, client_from_metadata};
        let with = |kind: Option<&str>, uris: &[&str], from: MetadataFrom| {
            let mut metadata = json!({ "client_name": "Host", "redirect_uris": uris });
            if let Some(kind) = kind {
                metadata["application_type"] = json!(kind);
            }
            client_from_metadata("c", &metadata, from).map_err(|e| e.code)
        };
        let native =
            ["http://127.0.0.1:5000/cb", "cursor://anysphere.cursor-mcp/oauth/callback", "https://app.example/cb"];
        assert!(with(Some("native"), &native, MetadataFrom::Registration).is_ok());
        assert!(
            with(Some("web"), &["https://app.example/cb", "http://localhost/cb"], MetadataFrom::Registration).is_ok()
        );
        assert_eq!(
            with(Some("web"), &["com.example.app:/cb"], MetadataFrom::Registration).err(),
            Some("invalid_redirect_uri")
        );
        assert_eq!(
            with(None, &["https://app.example/cb"], MetadataFrom::Registration).err(),
            Some("invalid_client_metadata")
        );
        assert_eq!(
            with(Some("desktop"), &["https://app.example/cb"], MetadataFrom::Registration).err(),
            Some("invalid_client_metadata")
        );
        // A metadata document, or a client registered before it was
        // required, need not say; when it says, its URIs must fit.
        assert!(with(None, &["com.example.app:/cb"], MetadataFrom::Document).is_ok());
        assert!(with(None, &["com.example.app:/cb"], MetadataFrom::Stored).is_ok());
        assert_eq!(
            with(Some("web"), &["com.example.app:/cb"], MetadataFrom::Document).err(),
            Some("invalid_redirect_uri")
        );
    }

    #[test]
    fn scopes_default_to_all_and_unknown_ones_are_ignored() {
        assert_eq!(requested_scopes(None), ["tools:read", "tools:call"]);
        assert_eq!(requested_scopes(Some("tools:read tools:read")), ["tools:read"]);
        // RFC 6749 §3.3: what the server does not know it may ignore, as
        // OIDC-minded clients ask for `openid` and `offline_access`.
        assert_eq!(requested_scopes(Some("openid offline_access tools:call")), ["tools:call"]);
        assert_eq!(requested_scopes(Some("openid offline_access")), ["tools:read", "tools:call"]);
        assert_eq!(known_scopes(Some("admin openid")), None);
    }

    #[test]
    fn an_external_token_grants_only_when_issued_by_its_issuer_for_this_url_live_and_for_an_end_user() {
        let setting = OAuthSetting { issuer: Some("https://idp.example".into()), ..OAuthSetting::default() };
        let resource = "https://tools.example/t/acme/mcp";
        let good = json!({ "iss": "https://idp.example", "aud": [resource, "other"], "exp": 2_000, "nbf": 900,
                           "sub": "alice", "scope": "openid tools:read tools:call", "client_id": "c", "jti": "j1" });
        let grant = granted_by(&setting, "https://idp.example", &good, resource, 1_000, "t").unwrap();
        assert_eq!(
            (grant.end_user.as_str(), grant.scopes.as_slice()),
            ("alice", ["tools:read", "tools:call"].map(String::from).as_slice())
        );
        assert_eq!((grant.client_id.as_str(), grant.family.as_str()), ("c", "j1"));
        let with = |field: &str, value: Value| {
            let mut claims = good.clone();
            claims[field] = value;
            granted_by(&setting, "https://idp.example", &claims, resource, 1_000, "t").err()
        };
        assert_eq!(with("iss", json!("https://evil.example")), Some("another issuer"));
        assert_eq!(with("aud", json!("https://tools.example/t/other/mcp")), Some("not for this MCP URL"));
        assert_eq!(with("exp", json!(900)), Some("expired or not yet valid"));
        assert_eq!(with("exp", Value::Null), Some("expired or not yet valid"));
        assert_eq!(with("nbf", json!(1_100)), Some("expired or not yet valid"));
        assert_eq!(with("sub", json!("a\nb")), Some("no valid end user in its end-user claim"));
        assert_eq!(with("sub", json!(42)), Some("no valid end user in its end-user claim"));
        // Another end-user claim, scopes as a list.
        let custom =
            OAuthSetting { end_user_claim: "email_local".into(), scope_claim: "scp".into(), ..setting.clone() };
        let mut claims = good.clone();
        claims["email_local"] = json!("bob");
        claims["scp"] = json!(["tools:read", "admin"]);
        let grant = granted_by(&custom, "https://idp.example", &claims, resource, 1_000, "t").unwrap();
        assert_eq!((grant.end_user.as_str(), grant.scopes.as_slice()), ("bob", ["tools:read".to_string()].as_slice()));
    }

    /// An issuer's `exp` or `nbf` at the ends of i64 overflowed the leeway
    /// arithmetic (a panic where overflow is checked, a wrapped comparison
    /// where it is not).
    #[test]
    fn an_external_token_with_extreme_times_is_judged_without_overflow() {
        let setting = OAuthSetting { issuer: Some("https://idp.example".into()), ..OAuthSetting::default() };
        let resource = "https://tools.example/t/acme/mcp";
        let claims = |exp: i64, nbf: i64| json!({ "iss": "https://idp.example", "aud": resource, "exp": exp, "nbf": nbf, "sub": "alice" });
        let judge =
            |exp, nbf| granted_by(&setting, "https://idp.example", &claims(exp, nbf), resource, 1_000, "t").err();
        // Far in the future: live.
        assert_eq!(judge(i64::MAX, 900), None);
        assert_eq!(judge(i64::MAX - 30, i64::MIN), None);
        // Far in the past: expired; far in the future: not yet valid.
        assert_eq!(judge(i64::MIN, 900), Some("expired or not yet valid"));
        assert_eq!(judge(2_000, i64::MAX), Some("expired or not yet valid"));
    }

    #[test]
    fn an_external_token_is_verified_by_its_issuers_key() {
        use base64::Engine;
        use ring::signature::KeyPair;
        let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let rng = ring::rand::SystemRandom::new();
        let es256 = &ring::signature::ECDSA_P256_SHA256_FIXED_SIGNING;
        let key = |rng: &ring::rand::SystemRandom| {
            let pkcs8 = ring::signature::EcdsaKeyPair::generate_pkcs8(es256, rng).unwrap();
            ring::signature::EcdsaKeyPair::from_pkcs8(es256, pkcs8.as_ref(), rng).unwrap()
        };
        let (signer, stranger) = (key(&rng), key(&rng));
        let jwk = |pair: &ring::signature::EcdsaKeyPair, kid: &str| {
            let point = pair.public_key().as_ref();
            json!({ "kty": "EC", "crv": "P-256", "kid": kid, "x": b64.encode(&point[1..33]), "y": b64.encode(&point[33..]) })
        };
        let header = b64.encode(json!({ "alg": "ES256", "kid": "k1" }).to_string());
        let payload = b64.encode(json!({ "iss": "https://idp.example", "sub": "alice" }).to_string());
        let signed = format!("{header}.{payload}");
        let token = |by: &ring::signature::EcdsaKeyPair| {
            format!("{signed}.{}", b64.encode(by.sign(&rng, signed.as_bytes()).unwrap().as_ref()))
        };
        let jwks = json!({ "keys": [jwk(&stranger, "k0"), jwk(&signer, "k1")] });
        assert!(Jwt::parse(&token(&signer)).unwrap().verified_by(&jwks));
        assert!(!Jwt::parse(&token(&stranger)).unwrap().verified_by(&jwks), "signed by another key");
        assert!(
            !Jwt::parse(&token(&signer)).unwrap().verified_by(&json!({ "keys": [jwk(&signer, "k9")] })),
            "no such kid"
        );
        // An altered payload, or "none", is no token.
        let tampered = token(&signer).replacen(
            &payload,
            &b64.encode(json!({ "iss": "https://idp.example", "sub": "bob" }).to_string()),
            1,
        );
        assert!(!Jwt::parse(&tampered).unwrap().verified_by(&jwks));
        let none = format!("{}.{payload}.", b64.encode(json!({ "alg": "none" }).to_string()));
        assert!(Jwt::parse(&none).is_none_or(|jwt| !jwt.verified_by(&jwks)));
    }

    #[test]
    fn an_external_token_must_be_typed_as_an_access_token_where_it_says() {
        for allowed in [None, Some("at+jwt"), Some("application/at+jwt"), Some("AT+JWT")] {
            assert!(access_token_type(allowed), "{allowed:?}");
        }
        for refused in ["JWT", "jwt", "id_token+jwt", "logout+jwt", "", "at+jwt "] {
            assert!(!access_token_type(Some(refused)), "{refused}");
        }
        use base64::Engine;
        let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let header = b64.encode(json!({ "alg": "ES256", "typ": "JWT", "kid": "k1" }).to_string());
        let jwt = Jwt::parse(&format!("{header}.{}.AA", b64.encode("{}"))).unwrap();
        assert_eq!(jwt.typ.as_deref(), Some("JWT"));
        assert!(jwt.names_a_key_not_in(&json!({ "keys": [{ "kid": "k0" }] })));
        assert!(!jwt.names_a_key_not_in(&json!({ "keys": [{ "kid": "k1" }] })));
    }

    #[test]
    fn the_any_end_user_opt_in_is_off_unless_an_operator_sets_it() {
        let setting: OAuthSetting = serde_json::from_value(json!({ "issuer": "https://idp.example" })).unwrap();
        assert!(!setting.any_end_user);
        assert_eq!(serde_json::to_value(&setting).unwrap().get("anyEndUser"), None);
        let open: OAuthSetting = serde_json::from_value(json!({ "anyEndUser": true })).unwrap();
        assert!(open.any_end_user);
        assert_eq!(serde_json::to_value(&open).unwrap()["anyEndUser"], true);
    }

    #[test]
    fn pkce_is_s256_of_a_sound_verifier() {
        // RFC 7636 appendix B.
        assert_eq!(s256("dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk"), "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM");
        assert!(sound_verifier("dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk"));
        assert!(!sound_verifier("short"));
        assert!(!sound_verifier(&"a b".repeat(20)));
    }
}
