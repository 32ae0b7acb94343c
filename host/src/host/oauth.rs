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

use super::ToolHost;
use super::fetcher::{JwksError, JwksFetcher, JwksOptions};
use super::random_token;
use crate::digest::sha256_hex;
use crate::store::{OAuthGrant, StoreError};
use crate::tenancy::{TokenGrant, unix_now};
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

/// How far an external token's `exp` and `nbf` may be off this server's
/// clock.
const CLOCK_LEEWAY_SECS: i64 = 60;
/// The longest bearer read as an external JWT.
const MAX_JWT_BYTES: usize = 16 * 1024;

/// A client, as the authorization page and the token endpoint see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OAuthClient {
    pub client_id: String,
    /// Its `client_name`, else its id.
    pub name: String,
    pub redirect_uris: Vec<String>,
    /// Whether its id is the URL of its metadata document.
    pub metadata_document: bool,
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

/// What the open endpoints take from one client, rated: registrations by
/// client address (an IPv6 site), token requests by client address (an
/// IPv6 host), refreshes by grant. In a fleet each replica rates its own
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

/// Whether `given` matches one of `registered` (OAuth 2.1 §2.3.1): exactly,
/// or, for an `http` loopback address, with any port.
pub fn redirect_matches(registered: &[String], given: &str) -> bool {
    let Ok(given_url) = reqwest::Url::parse(given) else { return false };
    registered.iter().any(|r| {
        if r == given {
            return true;
        }
        let Ok(mut r) = reqwest::Url::parse(r) else { return false };
        let loopback = r.scheme() == "http" && matches!(r.host_str(), Some("127.0.0.1" | "[::1]" | "localhost"));
        loopback && r.set_port(given_url.port()).is_ok() && r == given_url
    })
}

/// Checks a redirect URI a client declares: absolute, no fragment, `https`
/// or an `http` loopback address, or a private-use scheme of a native app
/// (`com.example.app:/callback`).
fn sound_redirect_uri(uri: &str) -> bool {
    let Ok(url) = reqwest::Url::parse(uri) else { return false };
    if url.fragment().is_some() || !url.username().is_empty() || url.password().is_some() {
        return false;
    }
    match url.scheme() {
        "https" => url.host_str().is_some(),
        "http" => matches!(url.host_str(), Some("127.0.0.1" | "[::1]" | "localhost")),
        // A native app's private-use scheme (RFC 8252 §7.1): a reverse
        // domain name (`com.example.app:/cb`), or one of the plain names
        // MCP hosts use. Any other plain scheme may be a handler of the
        // browser (`javascript:`, `data:`, `file:`, `blob:`) or of the
        // operating system (`ms-msdt:`, `search-ms:`), which a redirect
        // from this server must never open.
        scheme => scheme.contains('.') || MCP_HOST_SCHEMES.contains(&scheme),
    }
}

/// The private-use redirect schemes without a dot that MCP hosts register
/// (Cursor's `cursor://anysphere.cursor-mcp/oauth/callback`, VS Code's
/// `vscode://…`).
pub const MCP_HOST_SCHEMES: [&str; 6] = ["cursor", "vscode", "vscode-insiders", "windsurf", "zed", "claude"];

/// A client's metadata (registered or fetched) checked: its redirect URIs
/// and name.
fn client_from_metadata(client_id: &str, metadata: &Value, document: bool) -> Result<OAuthClient, OAuthError> {
    let invalid = |why: &str| OAuthError::new("invalid_client_metadata", why);
    let uris = metadata["redirect_uris"].as_array().ok_or_else(|| invalid("`redirect_uris` must be a list"))?;
    let mut redirect_uris = Vec::new();
    for uri in uris {
        let uri = uri.as_str().filter(|u| sound_redirect_uri(u)).ok_or_else(|| {
            OAuthError::new(
                "invalid_redirect_uri",
                "every redirect URI must be https://, http:// on a loopback address, or an app's own scheme, without a fragment",
            )
        })?;
        redirect_uris.push(uri.to_string());
    }
    if redirect_uris.is_empty() || redirect_uris.len() > 16 {
        return Err(invalid("`redirect_uris` must list 1 to 16 URIs"));
    }
    // Every client is public (PKCE, no secret): a registration asking for
    // a secret method is answered `none` (RFC 7591 §3.2.1 lets the server
    // replace what it does not support), a document's is not used.
    let name = metadata["client_name"].as_str().filter(|n| !n.trim().is_empty()).unwrap_or(client_id);
    let name: String = name.chars().filter(|c| !c.is_control()).take(100).collect();
    Ok(OAuthClient { client_id: client_id.to_string(), name, redirect_uris, metadata_document: document })
}

/// Whether a client id is one this server registered (RFC 7591).
fn is_registered_client_id(client_id: &str) -> bool {
    client_id.starts_with("plinth_client_") && client_id.len() <= 100
}

/// Whether a client id is a Client ID Metadata Document's URL.
pub fn is_metadata_document_url(client_id: &str) -> bool {
    client_id.starts_with("https://") || client_id.starts_with("http://")
}

/// Why a client's metadata document was not used, in words. Every failure
/// to fetch it is told alike, whatever the cause (its name resolving to a
/// private address, a refused connection, a timeout): telling them apart
/// would map which names exist on the server's networks. The log keeps the
/// cause.
fn document_refusal(e: &JwksError) -> &'static str {
    match e {
        JwksError::Insecure => "must be at an https:// URL",
        JwksError::Credentials => "URL must not contain a user name or password",
        JwksError::TooLarge(_) => "is larger than this server reads",
        JwksError::Invalid => "is not a JSON object served as application/json",
        JwksError::InternalAddress | JwksError::Unavailable => {
            "could not be fetched (unreachable, not allowed, too slow, redirected or not 200)"
        }
    }
}

/// The S256 code challenge of `verifier` (RFC 7636 §4.2).
fn s256(verifier: &str) -> String {
    use base64::Engine;
    use sha2::Digest;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(sha2::Sha256::digest(verifier.as_bytes()))
}

/// A verifier RFC 7636 §4.1 allows: 43 to 128 unreserved characters.
fn sound_verifier(verifier: &str) -> bool {
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
    pub(super) fn load_oauth_settings(&self) -> Result<(), StoreError> {
        let mut oauth = std::collections::HashMap::new();
        for (tenant, key, value) in self.store.settings()? {
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
    /// server or an external issuer): it exists and its operator did not
    /// turn OAuth off. Answered from memory: every unauthenticated request
    /// to an MCP URL asks.
    pub fn oauth_enabled(&self, tenant: &str) -> bool {
        self.tenant(tenant).is_some() && self.oauth.settings.get(tenant).is_none_or(|s| s.enabled)
    }

    /// Whether `tenant`'s built-in authorization server is the one that
    /// issues its tokens.
    pub fn builtin_oauth(&self, tenant: &str) -> bool {
        self.oauth_enabled(tenant) && self.oauth.settings.get(tenant).is_none_or(|s| s.issuer.is_none())
    }

    /// Whether anyone can sign in to `tenant`'s authorization server.
    pub fn tenant_has_end_users(&self, tenant: &str) -> Result<bool, StoreError> {
        self.store.has_end_users(tenant)
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

    /// Registers a client (RFC 7591) from its metadata, for a request from
    /// `from` (registrations are rated per client address); answers the
    /// registration response. A tenant with as many clients as it may keep
    /// deletes its oldest never used to make room.
    pub fn register_oauth_client(
        &self,
        tenant: &str,
        metadata: &Value,
        from: std::net::IpAddr,
    ) -> Result<Value, OAuthError> {
        let raw = metadata.to_string();
        if raw.len() > MAX_CLIENT_METADATA_BYTES {
            return Err(OAuthError::new("invalid_client_metadata", "the client metadata is too long"));
        }
        let site = crate::client_address::prefix(from, crate::client_address::SITE_PREFIX);
        if let Err(wait) = self.oauth.rates.registrations.take(&site) {
            tracing::info!(tenant, client = %from, "a client registration was refused: too many from its address");
            return Err(OAuthError::too_often("registrations from this address", wait));
        }
        let client_id = format!("plinth_client_{}", random_token()?.trim_end_matches('='));
        let client = client_from_metadata(&client_id, metadata, false)?;
        let stored = json!({
            "client_name": client.name,
            "redirect_uris": client.redirect_uris,
        });
        let now = unix_now();
        let registered = crate::store::off_the_workers(|| {
            self.store.register_oauth_client(tenant, &client_id, &stored.to_string(), now, MAX_REGISTERED_CLIENTS)
        })?;
        if !registered {
            return Err(OAuthError::new(
                "temporarily_unavailable",
                "this tenant has as many registered clients in use as it may keep; use a client metadata document",
            ));
        }
        Ok(json!({
            "client_id": client_id,
            "client_id_issued_at": now,
            "client_name": client.name,
            "redirect_uris": client.redirect_uris,
            "grant_types": ["authorization_code", "refresh_token"],
            "response_types": ["code"],
            "token_endpoint_auth_method": "none",
        }))
    }

    /// The client `client_id` of `tenant`, for a request from `from`: a
    /// registered one, or the one its metadata document describes (fetched
    /// under the outbound policy, a few at a time per client address).
    pub async fn oauth_client(
        &self,
        tenant: &str,
        client_id: &str,
        from: std::net::IpAddr,
    ) -> Result<OAuthClient, OAuthError> {
        let unknown = || OAuthError::new("invalid_client", "this authorization server knows no such client");
        if client_id.len() > MAX_CLIENT_ID_BYTES {
            return Err(OAuthError::new("invalid_client", "the client_id is longer than this server reads"));
        }
        if is_metadata_document_url(client_id) {
            let document = self.oauth.documents.get_for(client_id, Some(from)).await.map_err(|e| {
                OAuthError::new("invalid_client", format!("the client's metadata document {}", document_refusal(&e)))
            })?;
            // The document must name itself (draft-ietf-oauth-client-id-metadata-document §4.1).
            if document["client_id"].as_str() != Some(client_id) {
                return Err(OAuthError::new(
                    "invalid_client",
                    "the client's metadata document does not name its own URL as its client_id",
                ));
            }
            return client_from_metadata(client_id, &document, true);
        }
        if !is_registered_client_id(client_id) {
            return Err(unknown());
        }
        let stored = crate::store::off_the_workers(|| self.store.oauth_client(tenant, client_id))?;
        let stored = stored.ok_or_else(unknown)?;
        let metadata: Value = serde_json::from_str(&stored).map_err(|_| unknown())?;
        client_from_metadata(client_id, &metadata, false)
    }

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

    /// Records that a registered client was used (a code issued to it, a
    /// refresh): the sweep and a full tenant spare it. Best effort: a
    /// store failure here fails nothing.
    fn client_used(&self, tenant: &str, client_id: &str) {
        if !is_registered_client_id(client_id) {
            return;
        }
        let now = unix_now();
        if let Err(e) = crate::store::off_the_workers(|| self.store.touch_oauth_client(tenant, client_id, now)) {
            tracing::warn!(tenant, error = %e, "a client's last use was not recorded");
        }
    }

    /// Refuses a token request naming a registered client whose
    /// registration is gone (swept after long disuse): `invalid_client`,
    /// on which clients register again (RFC 6749 §5.2), rather than
    /// `invalid_grant`, on which they would keep the stale id.
    fn client_still_registered(&self, tenant: &str, client_id: &str) -> Result<(), OAuthError> {
        if !is_registered_client_id(client_id) {
            return Ok(());
        }
        match crate::store::off_the_workers(|| self.store.oauth_client(tenant, client_id))? {
            Some(_) => Ok(()),
            None => {
                Err(OAuthError::new("invalid_client", "this client is not registered here (any more); register again"))
            }
        }
    }

    /// Admits a token request from `from`, or refuses it when that address
    /// asked too often.
    pub fn admit_token_request(&self, from: std::net::IpAddr) -> Result<(), OAuthError> {
        let host = crate::client_address::prefix(from, crate::client_address::HOST_PREFIX);
        self.oauth.rates.token_requests.take(&host).map_err(|wait| {
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
        let found = crate::store::off_the_workers(|| self.store.oauth_grant(&sha))?;
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
        let found = crate::store::off_the_workers(|| self.store.oauth_grant(&sha))?;
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
        let Some(grant) = crate::store::off_the_workers(|| self.store.oauth_grant(&sha))? else { return Ok(()) };
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
}

impl ToolHost {
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

    /// What an external identity provider's JWT access token grants at
    /// `tenant`'s MCP URL `resource`, if it is one: typed as an access token
    /// where it says (`typ`, RFC 9068), signed by a key of the tenant's
    /// issuer (its OIDC discovery document's `jwks_uri`, fetched and cached
    /// under the outbound policy; fetched again, at most once every 30 s,
    /// when the token names a key the cached set lacks), issued by it, for
    /// `resource` (`aud`), live (`exp`, `nbf`, a minute's leeway), naming
    /// in the configured claim one of the tenant's end users (anyone, if
    /// the operator allowed it). `None` for anything else.
    pub async fn external_grant(
        &self,
        tenant: &str,
        token: &str,
        resource: &str,
    ) -> Result<Option<TokenGrant>, StoreError> {
        let Some(setting) = self.oauth.settings.get(tenant).map(|s| s.clone()).filter(|s| s.enabled) else {
            return Ok(None);
        };
        let Some(issuer) = setting.issuer.as_deref() else { return Ok(None) };
        if token.len() > MAX_JWT_BYTES {
            return Ok(None);
        }
        let refuse = |why: &str| {
            tracing::info!(tenant, why, "an external access token was refused");
            Ok(None)
        };
        let Some(jwt) = Jwt::parse(token) else { return Ok(None) };
        if !access_token_type(jwt.typ.as_deref()) {
            return refuse("its `typ` is not an access token's (at+jwt)");
        }
        let providers = &self.oauth.providers;
        let discovery = match providers.get(&format!("{issuer}/.well-known/openid-configuration")).await {
            Ok(document) => document,
            Err(e) => {
                tracing::warn!(tenant, error = %e, "the tenant's identity provider's discovery document was not used");
                return Ok(None);
            }
        };
        if discovery["issuer"].as_str() != Some(issuer) {
            return refuse("the discovery document names another issuer");
        }
        let Some(jwks_uri) = discovery["jwks_uri"].as_str() else { return Ok(None) };
        let mut keys = providers.get(jwks_uri).await;
        // A key the cached set lacks: the provider may have rotated its
        // keys since (a refetch at most every 30 s per URL).
        if keys.as_ref().is_ok_and(|keys| jwt.names_a_key_not_in(keys)) {
            keys = providers.refetch(jwks_uri).await;
        }
        let keys = match keys {
            Ok(keys) => keys,
            Err(e) => {
                tracing::warn!(tenant, error = %e, "the tenant's identity provider's keys were not used");
                return Ok(None);
            }
        };
        if !jwt.verified_by(&keys) {
            return refuse("no key of the issuer signed it");
        }
        let grant = match granted_by(&setting, issuer, &jwt.claims, resource, crate::tenancy::unix_now(), token) {
            Ok(grant) => grant,
            Err(why) => return refuse(why),
        };
        if !self.end_user_may_act(tenant, &setting, &grant.end_user)? {
            return refuse("its end-user claim names none of the tenant's end users");
        }
        Ok(Some(grant))
    }

    /// Whether an external token naming `end_user` may act as them: one of
    /// `tenant`'s end users, or anyone when its operator allowed it
    /// ([`OAuthSetting::any_end_user`]).
    pub(super) fn end_user_may_act(
        &self,
        tenant: &str,
        setting: &OAuthSetting,
        end_user: &str,
    ) -> Result<bool, StoreError> {
        if setting.any_end_user {
            return Ok(true);
        }
        Ok(crate::store::off_the_workers(|| self.store.end_user(tenant, end_user))?.is_some())
    }
}

/// Whether a JWT's header `typ` (if it has one) is an access token's (RFC
/// 9068 §2.1: `at+jwt`, or its full media type): an ID token or any other
/// JWT the provider signs is not one. Media types ignore case.
fn access_token_type(typ: Option<&str>) -> bool {
    typ.is_none_or(|typ| typ.eq_ignore_ascii_case("at+jwt") || typ.eq_ignore_ascii_case("application/at+jwt"))
}

/// What a verified external token's `claims` grant at `resource`, or why
/// nothing: issued by `issuer`, for `resource`, live at `now`, naming a
/// valid end user in the setting's claim. Its scopes are those of
/// [`SCOPES`] it carries.
fn granted_by(
    setting: &OAuthSetting,
    issuer: &str,
    claims: &Value,
    resource: &str,
    now: i64,
    token: &str,
) -> Result<TokenGrant, &'static str> {
    if claims["iss"].as_str() != Some(issuer) {
        return Err("another issuer");
    }
    let audience = match &claims["aud"] {
        Value::String(aud) => aud == resource,
        Value::Array(auds) => auds.iter().any(|a| a.as_str() == Some(resource)),
        _ => false,
    };
    if !audience {
        return Err("not for this MCP URL");
    }
    if claims["exp"].as_i64().is_none_or(|exp| exp + CLOCK_LEEWAY_SECS <= now)
        || claims["nbf"].as_i64().is_some_and(|nbf| nbf - CLOCK_LEEWAY_SECS > now)
    {
        return Err("expired or not yet valid");
    }
    let end_user = claims[&setting.end_user_claim]
        .as_str()
        .filter(|u| super::is_end_user_name(u))
        .ok_or("no valid end user in its end-user claim")?;
    let carried: Vec<&str> = match &claims[&setting.scope_claim] {
        Value::String(scopes) => scopes.split(' ').collect(),
        Value::Array(scopes) => scopes.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    };
    let scopes =
        carried.into_iter().filter(|s| SCOPES.iter().any(|(known, _)| known == s)).map(str::to_string).collect();
    let client_id = claims["client_id"].as_str().or(claims["azp"].as_str()).unwrap_or("").to_string();
    let family = claims["jti"].as_str().map_or_else(|| sha256_hex(token.as_bytes())[..32].to_string(), str::to_string);
    Ok(TokenGrant { client_id, end_user: end_user.to_string(), scopes, resource: resource.to_string(), family })
}

/// A JWT (compact JWS) taken apart: what was signed, the signature, its
/// header's `alg`, `kid` and `typ`, its claims.
struct Jwt {
    signed: String,
    signature: Vec<u8>,
    alg: String,
    kid: Option<String>,
    typ: Option<String>,
    claims: Value,
}

impl Jwt {
    fn parse(token: &str) -> Option<Jwt> {
        use base64::Engine;
        let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let mut parts = token.split('.');
        let (header, payload, signature) = (parts.next()?, parts.next()?, parts.next()?);
        if parts.next().is_some() {
            return None;
        }
        let header: Value = serde_json::from_slice(&b64.decode(header).ok()?).ok()?;
        let claims: Value = serde_json::from_slice(&b64.decode(payload).ok()?).ok()?;
        Some(Jwt {
            signed: format!("{}.{}", token.split('.').next()?, token.split('.').nth(1)?),
            signature: b64.decode(signature).ok()?,
            alg: header["alg"].as_str()?.to_string(),
            kid: header["kid"].as_str().map(str::to_string),
            typ: header["typ"].as_str().map(str::to_string),
            claims: claims.is_object().then_some(claims)?,
        })
    }

    /// Whether it names a key (`kid`) that `jwks` does not have.
    fn names_a_key_not_in(&self, jwks: &Value) -> bool {
        let keys = jwks["keys"].as_array().map(Vec::as_slice).unwrap_or_default();
        self.kid.as_deref().is_some_and(|kid| !keys.iter().any(|k| k["kid"].as_str() == Some(kid)))
    }

    /// Whether a key of `jwks` (the one its `kid` names, else any of the
    /// right type) signed it, with `ES256`, `RS256` or `EdDSA`.
    fn verified_by(&self, jwks: &Value) -> bool {
        use base64::Engine;
        let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let field = |key: &Value, name: &str| key[name].as_str().and_then(|v| b64.decode(v).ok());
        let keys = jwks["keys"].as_array().map(Vec::as_slice).unwrap_or_default();
        let candidates = keys.iter().filter(|k| self.kid.is_none() || k["kid"].as_str() == self.kid.as_deref());
        candidates.take(8).any(|key| match (self.alg.as_str(), key["kty"].as_str()) {
            ("ES256", Some("EC")) if key["crv"] == "P-256" => {
                let (Some(x), Some(y)) = (field(key, "x"), field(key, "y")) else { return false };
                let point = [&[4u8][..], &x, &y].concat();
                ring::signature::UnparsedPublicKey::new(&ring::signature::ECDSA_P256_SHA256_FIXED, point)
                    .verify(self.signed.as_bytes(), &self.signature)
                    .is_ok()
            }
            ("RS256", Some("RSA")) => {
                let (Some(n), Some(e)) = (field(key, "n"), field(key, "e")) else { return false };
                ring::signature::RsaPublicKeyComponents { n, e }
                    .verify(&ring::signature::RSA_PKCS1_2048_8192_SHA256, self.signed.as_bytes(), &self.signature)
                    .is_ok()
            }
            ("EdDSA", Some("OKP")) if key["crv"] == "Ed25519" => {
                let Some(x) = field(key, "x").and_then(|x| <[u8; 32]>::try_from(x).ok()) else { return false };
                let Ok(signature) = ed25519_dalek::Signature::from_slice(&self.signature) else { return false };
                ed25519_dalek::VerifyingKey::from_bytes(&x)
                    .is_ok_and(|k| k.verify_strict(self.signed.as_bytes(), &signature).is_ok())
            }
            _ => false,
        })
    }
}

#[cfg(test)]
mod tests {
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
