//! End-user authorization in the core (docs/authorization.md): a tool acts
//! with its call's end user's own account at the API behind it.
//!
//! - **Providers** are a tenant's: an OAuth authorization server (by its
//!   issuer's metadata, or explicit endpoints), a client id and a sealed
//!   client secret. Two tenants may configure the same id differently; a
//!   tool names a provider id of its own tenant only.
//! - **A call** of a version whose manifest declares `[[authorization]]`
//!   needs its end user's grant at each provider, holding every scope the
//!   entry asks. Without one it runs nothing and answers a challenge: a
//!   link the person follows ([`PendingAuthorization`]). With one, the
//!   runtime attaches the token to the requests to the entry's hosts
//!   (`runtime::outbound::tokens`); the tool never sees it.
//! - **A link** is followed by its person only: the page asks them to log
//!   in as the end user it names, then sends them to the provider with
//!   PKCE and a `state`; the provider's redirect back is taken once, its
//!   `iss` checked (RFC 9207), the code exchanged, and the grant stored
//!   sealed per (tenant, end user, provider).
//! - **Refreshes** happen before a token expires, one per grant however
//!   many calls (and replicas) need it at once: a lock in this process and
//!   a claim in the store across replicas; the others wait for its result.
//!   A refresh the provider refuses (`invalid_grant`) removes the grant:
//!   the next call is a challenge again.
//! - **Bounds**: links per person and per tenant, unfinished ones expiring;
//!   every answer of a provider bounded in bytes and time, untrusted.

mod exchange;

pub use exchange::{CallbackQuery, ExchangeOptions, ProviderDocument, TokenAnswer};

use super::{InvokeError, ToolHost};
use crate::digest::sha256_hex;
use crate::manifest::{AuthorizationNeed, HostPattern};
use crate::registry::{Tool, ToolVersion};
use crate::store::StoreError;
use crate::store::authorizations::{
    AuthorizationStore, LinkBounds, LinkInserted, LinkState, StoredGrant, StoredLink, StoredProvider,
};
use crate::tenancy::{AuditEntry, Principal, unix_now};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// How long an authorization link may be followed.
pub const LINK_TTL: Duration = Duration::from_secs(15 * 60);
/// Pending links one person may have, and one tenant.
pub const LINK_BOUNDS: LinkBounds = LinkBounds { per_end_user: 16, per_tenant: 10_000 };
/// A token is refreshed when it has less than this left.
pub const REFRESH_MARGIN: Duration = Duration::from_secs(60);
/// How long a replica holds the right to refresh one grant.
const REFRESH_CLAIM: Duration = Duration::from_secs(60);
/// How long a call waits for another replica's refresh of its grant.
const REFRESH_WAIT: Duration = Duration::from_secs(10);
/// Grants kept in memory at most (each a person at a provider).
const CACHED_GRANTS: usize = 10_000;
/// Providers a tenant may configure.
pub const MAX_PROVIDERS_PER_TENANT: usize = 64;

/// A provider's settings as a publisher writes them (`PUT
/// /admin/authorization-providers/{id}`): an issuer, whose metadata
/// (RFC 8414, else OpenID discovery) gives the endpoints, or the endpoints
/// themselves; the client Plinth is at the provider.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ProviderSettings {
    /// What the person is shown ("Inbox"); the id when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub display_name: Option<String>,
    /// The provider's issuer identifier: its metadata is fetched from it,
    /// and its `iss` (RFC 9207) must come back with every code.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub issuer: Option<String>,
    /// Overrides what the metadata says (or stands without an issuer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub authorization_endpoint: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_endpoint: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revocation_endpoint: Option<String>,
    /// Plinth's client id at the provider.
    pub client_id: String,
    /// Its client secret: written, never read back (sealed at rest).
    #[serde(default, skip_serializing)]
    pub client_secret: Option<String>,
    /// Extra parameters of the authorization request (`access_type`,
    /// `prompt`…); never one Plinth sets itself.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub authorization_parameters: BTreeMap<String, String>,
    /// The resource (RFC 8707) the tokens are for, if the provider wants one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource: Option<String>,
    /// The hosts of the API its tokens are for (`api.inbox.example`,
    /// `*.inbox.example`, `host:port`): when set, a person's token goes
    /// only to these, whatever hosts a tool declares for it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub api_hosts: Vec<String>,
}

/// Where a provider is, and who Plinth is there: what its stored secret
/// and people's refresh tokens are sent to.
fn where_it_is(settings: &ProviderSettings) -> [Option<&str>; 6] {
    [
        settings.issuer.as_deref(),
        settings.authorization_endpoint.as_deref(),
        settings.token_endpoint.as_deref(),
        settings.revocation_endpoint.as_deref(),
        Some(settings.client_id.as_str()),
        settings.resource.as_deref(),
    ]
}

/// The parameters of an authorization request Plinth sets itself: a
/// provider's `authorizationParameters` may not name them.
const OWN_PARAMETERS: [&str; 8] = [
    "response_type",
    "client_id",
    "redirect_uri",
    "scope",
    "state",
    "code_challenge",
    "code_challenge_method",
    "resource",
];

/// Why a provider setting, a link or a grant was refused.
#[derive(Debug, thiserror::Error)]
pub enum AuthorizationError {
    /// The settings are not usable (the message says which field).
    #[error("{0}")]
    InvalidProvider(String),
    /// The tenant has as many providers as it may.
    #[error("a tenant may configure at most {MAX_PROVIDERS_PER_TENANT} providers")]
    TooManyProviders,
    /// No such provider, link or grant in this tenant.
    #[error("{0}")]
    NotFound(String),
    /// The link is another person's: only its end user may follow it.
    #[error("this link is for another person: log in as the end user it names")]
    NotYours,
    /// The link can no longer be followed (expired, finished, taken).
    #[error("{0}")]
    Gone(String),
    /// The provider did not answer as it should (down, slow, garbage): the
    /// message names it, never its raw answer.
    #[error("{0}")]
    Provider(String),
    #[error("{0}")]
    Storage(#[from] StoreError),
}

/// A challenge: the link a call's end user must follow before the call can
/// act with their account at `provider`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingAuthorization {
    pub tenant: String,
    pub provider: String,
    /// The link's id (a door makes its URL and its `check_url` from it).
    pub link: String,
    /// The scopes asked of the person.
    pub scopes: Vec<String>,
    pub expires_at: i64,
}

/// What the link page shows the person before they go to the provider.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkView {
    pub tenant: String,
    pub end_user: String,
    pub provider: String,
    pub provider_name: String,
    pub scopes: Vec<String>,
    /// The tool that asks, its version and its tenant (as stored with the link).
    pub tool: String,
    pub version: u32,
    pub state: LinkState,
    pub error: Option<String>,
    pub expires_at: i64,
}

/// A person's grant as their own page and the admin API show it: never a
/// token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GrantView {
    pub provider: String,
    pub provider_name: String,
    pub scopes: Vec<String>,
    pub expires_at: Option<i64>,
    pub connected_at: i64,
    pub refreshable: bool,
}

/// A call's tokens: for each `[[authorization]]` entry, the hosts (its
/// patterns) and the token the runtime attaches to requests to them.
pub type CallTokens = Vec<(Vec<HostPattern>, Vec<HostPattern>, String)>;

/// The authorization concern's state in the core.
pub(crate) struct AuthorizationState {
    store: Arc<dyn AuthorizationStore>,
    /// Every tenant's providers, by (tenant, id): a cache of the store.
    providers: dashmap::DashMap<(String, String), Arc<StoredProvider>>,
    /// Grants by (tenant, end user, provider): a bounded cache of the store,
    /// dropped whenever the store's `authorizations` topic moves.
    grants: dashmap::DashMap<(String, String, String), Arc<StoredGrant>>,
    /// One refresh per grant in this process; the store's claim across replicas.
    refreshing: dashmap::DashMap<(String, String, String), Arc<tokio::sync::Mutex<()>>>,
    /// Talks to providers.
    exchange: exchange::Exchange,
}

impl AuthorizationState {
    /// The state for `store`, with `exchange` options.
    pub(crate) fn new(
        store: Arc<dyn AuthorizationStore>,
        options: exchange::ExchangeOptions,
        limits: Arc<crate::egress::OutboundLimits>,
    ) -> Result<AuthorizationState, StoreError> {
        let state = AuthorizationState {
            store,
            providers: Default::default(),
            grants: Default::default(),
            refreshing: Default::default(),
            exchange: exchange::Exchange::new(options, limits),
        };
        state.reload()?;
        Ok(state)
    }

    /// Reads the providers again and forgets the cached grants (the store's
    /// `authorizations` topic moved: another replica changed one).
    pub(crate) fn reload(&self) -> Result<(), StoreError> {
        let providers = self.store.providers()?;
        self.providers.clear();
        for provider in providers {
            self.providers.insert((provider.tenant.clone(), provider.id.clone()), Arc::new(provider));
        }
        self.grants.clear();
        Ok(())
    }

    /// The store slice (for the retention sweep).
    pub(crate) fn store(&self) -> Arc<dyn AuthorizationStore> {
        self.store.clone()
    }

    fn provider(&self, tenant: &str, id: &str) -> Option<Arc<StoredProvider>> {
        self.providers.get(&(tenant.to_string(), id.to_string())).map(|p| p.clone())
    }

    fn remember(&self, grant: StoredGrant) -> Arc<StoredGrant> {
        if self.grants.len() >= CACHED_GRANTS {
            self.grants.clear();
        }
        let grant = Arc::new(grant);
        self.grants.insert((grant.tenant.clone(), grant.end_user.clone(), grant.provider.clone()), grant.clone());
        grant
    }

    fn forget(&self, tenant: &str, end_user: &str, provider: &str) {
        self.grants.remove(&(tenant.to_string(), end_user.to_string(), provider.to_string()));
    }

    /// Forgets every cached grant of a person (the end user was deleted:
    /// the store deleted their grants with them).
    pub(crate) fn forget_end_user(&self, tenant: &str, end_user: &str) {
        self.grants.retain(|(t, u, _), _| !(t == tenant && u == end_user));
    }
}

/// The scopes of a space-separated list.
fn scopes_of(list: &str) -> Vec<String> {
    list.split_ascii_whitespace().map(str::to_string).collect()
}

/// Whether `granted` holds every scope of `need`.
fn holds(granted: &str, need: &AuthorizationNeed) -> bool {
    let granted: std::collections::BTreeSet<&str> = granted.split_ascii_whitespace().collect();
    need.scopes.iter().all(|s| granted.contains(s.as_str()))
}

/// 32 random bytes, base64url.
fn random() -> Result<String, StoreError> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| StoreError::Inconsistent(format!("no randomness: {e}")))?;
    Ok(B64.encode(bytes))
}

/// The `state` of a link, made from its PKCE verifier (secret, sealed at
/// rest), so that it need not be stored: only its sha256 is.
fn state_of(verifier: &str) -> String {
    B64.encode(sha256(format!("plinth-authorization-state:{verifier}").as_bytes()))
}

/// The PKCE S256 challenge of a verifier.
fn challenge_of(verifier: &str) -> String {
    B64.encode(sha256(verifier.as_bytes()))
}

fn sha256(bytes: &[u8]) -> [u8; 32] {
    use sha2::Digest as _;
    sha2::Sha256::digest(bytes).into()
}

/// Checks a provider's settings before they are stored.
fn check_settings(id: &str, settings: &ProviderSettings, allow_http: bool) -> Result<(), AuthorizationError> {
    let invalid = |why: String| Err(AuthorizationError::InvalidProvider(why));
    if !crate::manifest::is_provider_id(id) {
        return invalid(format!(
            "provider id `{id}`: use 1 to 64 lowercase letters, digits, `_` or `-`, starting with a letter"
        ));
    }
    if settings.api_hosts.len() > 16
        || settings.api_hosts.iter().any(|h| h.contains('$') || HostPattern::parse(h).is_err())
    {
        return invalid(
            "`apiHosts` takes at most 16 host names (`api.example.com`, `*.example.com`, `host:port`)".into(),
        );
    }
    if settings.client_id.is_empty() || settings.client_id.len() > 256 {
        return invalid("`clientId` must be 1 to 256 characters".into());
    }
    if settings.client_secret.as_ref().is_some_and(|s| s.is_empty() || s.len() > 4096) {
        return invalid("`clientSecret` must be 1 to 4096 characters".into());
    }
    if settings
        .display_name
        .as_ref()
        .is_some_and(|n| n.trim().is_empty() || n.chars().count() > 100 || n.chars().any(char::is_control))
    {
        return invalid("`displayName` must be 1 to 100 characters, without control characters".into());
    }
    if settings.issuer.is_none() && (settings.authorization_endpoint.is_none() || settings.token_endpoint.is_none()) {
        return invalid(
            "give `issuer` (its metadata names the endpoints), or `authorizationEndpoint` and `tokenEndpoint`".into(),
        );
    }
    for (field, url) in [
        ("issuer", &settings.issuer),
        ("authorizationEndpoint", &settings.authorization_endpoint),
        ("tokenEndpoint", &settings.token_endpoint),
        ("revocationEndpoint", &settings.revocation_endpoint),
        ("resource", &settings.resource),
    ] {
        if let Some(url) = url {
            exchange::check_url(url, allow_http)
                .map_err(|why| AuthorizationError::InvalidProvider(format!("`{field}`: {why}")))?;
        }
    }
    if settings.authorization_parameters.len() > 16 {
        return invalid("at most 16 `authorizationParameters`".into());
    }
    for (name, value) in &settings.authorization_parameters {
        if OWN_PARAMETERS.contains(&name.as_str()) {
            return invalid(format!("`authorizationParameters` may not set `{name}`: Plinth sets it"));
        }
        if name.is_empty() || name.len() > 64 || value.len() > 1024 {
            return invalid(
                "an authorization parameter's name must be 1 to 64 characters and its value at most 1,024".into(),
            );
        }
    }
    Ok(())
}

impl ToolHost {
    /// The tokens a call of `version` acts with: for each `[[authorization]]`
    /// entry, the token the caller supplied for its provider (OTC
    /// `context.authorization`, used for this call only), else its end
    /// user's grant (refreshed first when it is about to expire). A call
    /// without a grant for an entry runs nothing: it is answered the links
    /// its end user must follow ([`InvokeError::AuthorizationRequired`]).
    pub(super) async fn call_tokens(
        &self,
        tool: &Tool,
        version: &ToolVersion,
        end_user: Option<&str>,
        supplied: &BTreeMap<String, String>,
    ) -> Result<CallTokens, InvokeError> {
        let needs = &version.manifest.authorization;
        if needs.is_empty() {
            return Ok(Vec::new());
        }
        let mut tokens = Vec::with_capacity(needs.len());
        let mut pending = Vec::new();
        for need in needs {
            let hosts: Vec<HostPattern> = need.hosts.iter().filter_map(|h| HostPattern::parse(h).ok()).collect();
            // The provider's own list of its API's hosts, when it has one.
            let bound: Vec<HostPattern> = self
                .authorizations
                .provider(&tool.tenant, &need.provider)
                .and_then(|p| serde_json::from_str::<ProviderSettings>(&p.settings).ok())
                .map(|s| s.api_hosts.iter().filter_map(|h| HostPattern::parse(h).ok()).collect())
                .unwrap_or_default();
            if let Some(token) = supplied.get(&need.provider) {
                tokens.push((hosts, bound, token.clone()));
                continue;
            }
            let end_user = end_user.ok_or_else(|| InvokeError::AccountEndUserRequired(tool.name.clone()))?;
            if self.authorizations.provider(&tool.tenant, &need.provider).is_none() {
                return Err(InvokeError::AuthorizationUnavailable(format!(
                    "`{}` acts with its end user's `{}` account, and tenant `{}` configures no provider `{}`: a publisher must set it (PUT /admin/authorization-providers/{})",
                    tool.name, need.provider, tool.tenant, need.provider, need.provider
                )));
            }
            match self.usable_grant(&tool.tenant, end_user, need).await? {
                Some(grant) => tokens.push((hosts, bound, grant.access_token.clone())),
                None => pending.push(self.authorization_link(tool, version, end_user, need)?),
            }
        }
        if pending.is_empty() {
            Ok(tokens)
        } else {
            Err(InvokeError::AuthorizationRequired {
                tool: tool.name.clone(),
                end_user: end_user.unwrap_or_default().to_string(),
                pending,
            })
        }
    }

    /// The person's grant for `need`, usable now: holding its scopes, and
    /// refreshed when it is about to expire. `None`: they must follow a
    /// link (none, too few scopes, the refresh refused).
    pub(super) async fn usable_grant(
        &self,
        tenant: &str,
        end_user: &str,
        need: &AuthorizationNeed,
    ) -> Result<Option<Arc<StoredGrant>>, InvokeError> {
        let key = (tenant.to_string(), end_user.to_string(), need.provider.clone());
        let cached = self.authorizations.grants.get(&key).map(|g| g.clone());
        let grant = match cached {
            Some(grant) => grant,
            None => {
                let stored =
                    crate::store::off_the_workers(|| self.authorizations.store.grant(tenant, end_user, &need.provider))
                        .map_err(|e| InvokeError::Storage(e.to_string()))?;
                match stored {
                    Some(grant) => self.authorizations.remember(grant),
                    None => return Ok(None),
                }
            }
        };
        if !holds(&grant.scopes, need) {
            // A version asking for more than was granted: the person is
            // asked again (step-up).
            return Ok(None);
        }
        let now = unix_now();
        let margin = REFRESH_MARGIN.as_secs() as i64;
        if grant.expires_at.is_none_or(|at| at - margin > now) {
            return Ok(Some(grant));
        }
        if grant.refresh_token.is_none() {
            return Ok(None);
        }
        self.refreshed(grant).await
    }

    /// `grant` refreshed, once across every call and replica that needs it
    /// now: `None` when the provider refused the refresh (the grant is
    /// removed; the person must follow a link again).
    async fn refreshed(&self, grant: Arc<StoredGrant>) -> Result<Option<Arc<StoredGrant>>, InvokeError> {
        let key = (grant.tenant.clone(), grant.end_user.clone(), grant.provider.clone());
        let lock = self.authorizations.refreshing.entry(key.clone()).or_default().clone();
        let _one = lock.lock().await;
        let store = &self.authorizations.store;
        let storage = |e: StoreError| InvokeError::Storage(e.to_string());
        let (tenant, end_user, provider) = (&grant.tenant, &grant.end_user, &grant.provider);
        let margin = REFRESH_MARGIN.as_secs() as i64;
        let waited_until = tokio::time::Instant::now() + REFRESH_WAIT;
        let result = loop {
            // Another call (or replica) may have refreshed it meanwhile.
            let current = crate::store::off_the_workers(|| store.grant(tenant, end_user, provider)).map_err(storage)?;
            let Some(current) = current else { break Ok(None) };
            let now = unix_now();
            if current.updated_at != grant.updated_at || current.expires_at.is_none_or(|at| at - margin > now) {
                self.authorizations.forget(tenant, end_user, provider);
                break Ok(Some(self.authorizations.remember(current)));
            }
            let until = now + REFRESH_CLAIM.as_secs() as i64;
            if crate::store::off_the_workers(|| store.claim_refresh(tenant, end_user, provider, until, now))
                .map_err(storage)?
            {
                let refreshed = self.refresh_now(&current).await;
                // The claim's `until` is its token: a holder that outlived
                // it never releases the claim of whoever took over.
                if let Err(e) =
                    crate::store::off_the_workers(|| store.release_refresh(tenant, end_user, provider, until))
                {
                    tracing::warn!(tenant, end_user, provider, error = %e, "a refresh claim was not given back; it lapses on its own");
                }
                break refreshed;
            }
            // Another replica refreshes it: wait for its result.
            if tokio::time::Instant::now() >= waited_until {
                break Err(InvokeError::AuthorizationUnavailable(format!(
                    "the `{provider}` account's token is being refreshed elsewhere and did not arrive in time; retry"
                )));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        drop(_one);
        // This call's own handle first, or the count never falls to one.
        drop(lock);
        self.authorizations.refreshing.remove_if(&key, |_, l| Arc::strong_count(l) <= 1);
        result
    }

    /// Refreshes `grant` at its provider (this caller holds the claim).
    async fn refresh_now(&self, grant: &StoredGrant) -> Result<Option<Arc<StoredGrant>>, InvokeError> {
        let (tenant, end_user, provider_id) = (&grant.tenant, &grant.end_user, &grant.provider);
        let storage = |e: StoreError| InvokeError::Storage(e.to_string());
        let Some(provider) = self.authorizations.provider(tenant, provider_id) else { return Ok(None) };
        let Some(refresh_token) = &grant.refresh_token else { return Ok(None) };
        match self.authorizations.exchange.refresh(&provider, refresh_token).await {
            Ok(answer) => {
                let now = unix_now();
                let fresh = StoredGrant {
                    access_token: answer.access_token,
                    // A provider that does not rotate keeps the old one.
                    refresh_token: answer.refresh_token.or_else(|| grant.refresh_token.clone()),
                    scopes: answer.scope.unwrap_or_else(|| grant.scopes.clone()),
                    expires_at: answer.expires_in.map(|s| now.saturating_add(s)),
                    updated_at: now.max(grant.updated_at + 1),
                    ..grant.clone()
                };
                let replaced = crate::store::off_the_workers(|| {
                    self.authorizations.store.replace_refreshed(&fresh, grant.updated_at)
                })
                .map_err(storage)?;
                self.authorizations.forget(tenant, end_user, provider_id);
                if replaced {
                    return Ok(Some(self.authorizations.remember(fresh)));
                }
                let current =
                    crate::store::off_the_workers(|| self.authorizations.store.grant(tenant, end_user, provider_id))
                        .map_err(storage)?;
                Ok(current.map(|g| self.authorizations.remember(g)))
            }
            Err(exchange::ExchangeError::Refused(why)) => {
                tracing::info!(
                    tenant,
                    end_user,
                    provider = provider_id,
                    why,
                    "a refresh was refused: the grant is removed"
                );
                let audit = AuditEntry::new(
                    &Principal::server("token refresh"),
                    Some(tenant),
                    "authorization.refresh_refused",
                    format!("{end_user}/{provider_id}"),
                )
                .detail(json!({ "endUser": end_user, "provider": provider_id, "why": why }));
                crate::store::off_the_workers(|| {
                    self.authorizations.store.delete_grant(tenant, end_user, provider_id, &audit)
                })
                .map_err(storage)?;
                self.authorizations.forget(tenant, end_user, provider_id);
                Ok(None)
            }
            Err(e) => Err(InvokeError::AuthorizationUnavailable(format!(
                "the `{}` provider could not refresh the account's token: {e}; retry shortly",
                provider_name(&provider)
            ))),
        }
    }

    /// The link `end_user` must follow to grant `need` for `tool`: a new
    /// one, or the pending one already made for the same grant.
    fn authorization_link(
        &self,
        tool: &Tool,
        version: &ToolVersion,
        end_user: &str,
        need: &AuthorizationNeed,
    ) -> Result<PendingAuthorization, InvokeError> {
        let now = unix_now();
        let storage = |e: StoreError| InvokeError::Storage(e.to_string());
        // Only the tenant's end users can log in to follow a link: a made-up
        // name stores nothing (or anyone could fill the tenant's links).
        if self.store.end_user(&tool.tenant, end_user).map_err(storage)?.is_none() {
            return Err(InvokeError::UnknownEndUser { end_user: end_user.to_string() });
        }
        let verifier = random().map_err(storage)?;
        let link = StoredLink {
            id: random().map_err(storage)?[..22].to_string(),
            tenant: tool.tenant.clone(),
            end_user: end_user.to_string(),
            provider: need.provider.clone(),
            scopes: need.scopes.join(" "),
            state_sha256: sha256_hex(state_of(&verifier).as_bytes()),
            verifier,
            asked_by: json!({ "tool": tool.name, "version": version.number }).to_string(),
            created_at: now,
            expires_at: now + LINK_TTL.as_secs() as i64,
            state: LinkState::Pending,
            error: None,
        };
        let inserted = crate::store::off_the_workers(|| self.authorizations.store.insert_link(&link, LINK_BOUNDS, now))
            .map_err(|e| InvokeError::Storage(e.to_string()))?;
        let answered = match inserted {
            LinkInserted::Stored => link,
            LinkInserted::Existing(existing) => existing,
            LinkInserted::TooMany => {
                return Err(InvokeError::OverQuota(format!(
                    "`{end_user}` has as many unfinished authorization links as allowed ({} a person, {} a tenant): follow one, or wait for them to expire",
                    LINK_BOUNDS.per_end_user, LINK_BOUNDS.per_tenant
                )));
            }
        };
        Ok(PendingAuthorization {
            tenant: answered.tenant,
            provider: answered.provider,
            link: answered.id,
            scopes: scopes_of(&answered.scopes),
            expires_at: answered.expires_at,
        })
    }

    /// What the link page shows of `tenant`'s link `id`.
    pub fn authorization_link_view(&self, tenant: &str, id: &str) -> Result<LinkView, AuthorizationError> {
        let link = self.link_of(tenant, id)?;
        let provider = self.authorizations.provider(tenant, &link.provider);
        let asked: Value = serde_json::from_str(&link.asked_by).unwrap_or(Value::Null);
        Ok(LinkView {
            tenant: link.tenant,
            end_user: link.end_user,
            provider_name: provider.as_deref().map_or_else(|| link.provider.clone(), provider_name),
            provider: link.provider,
            scopes: scopes_of(&link.scopes),
            tool: asked["tool"].as_str().unwrap_or_default().to_string(),
            version: asked["version"].as_u64().and_then(|v| u32::try_from(v).ok()).unwrap_or_default(),
            state: if link.state == LinkState::Pending && link.expires_at <= unix_now() {
                LinkState::Failed
            } else {
                link.state
            },
            error: if link.state == LinkState::Pending && link.expires_at <= unix_now() {
                Some("the link expired: call the tool again for a new one".into())
            } else {
                link.error
            },
            expires_at: link.expires_at,
        })
    }

    fn link_of(&self, tenant: &str, id: &str) -> Result<StoredLink, AuthorizationError> {
        let missing = || AuthorizationError::NotFound("no such authorization link".into());
        if self.tenant(tenant).is_none() || id.len() > 64 {
            return Err(missing());
        }
        crate::store::off_the_workers(|| self.authorizations.store.link(tenant, id))?.ok_or_else(missing)
    }

    /// Where the person who follows link `id` as `end_user` (logged in) is
    /// sent: the provider's authorization request, coming back to
    /// `callback`.
    pub async fn authorization_redirect(
        &self,
        tenant: &str,
        id: &str,
        end_user: &str,
        callback: &str,
    ) -> Result<String, AuthorizationError> {
        let link = self.link_of(tenant, id)?;
        if link.end_user != end_user {
            return Err(AuthorizationError::NotYours);
        }
        if link.state != LinkState::Pending || link.expires_at <= unix_now() {
            return Err(AuthorizationError::Gone(
                "this link was followed already, or expired: call the tool again for a new one".into(),
            ));
        }
        let provider = self.authorizations.provider(tenant, &link.provider).ok_or_else(|| {
            AuthorizationError::Gone(format!("the provider `{}` is no longer configured", link.provider))
        })?;
        let settings = settings_of(&provider);
        let document = self.authorizations.exchange.document(&provider).await?;
        let mut url = reqwest::Url::parse(&document.authorization_endpoint)
            .map_err(|_| AuthorizationError::Provider("the provider's authorization endpoint is not a URL".into()))?;
        {
            let mut query = url.query_pairs_mut();
            for (name, value) in &settings.authorization_parameters {
                query.append_pair(name, value);
            }
            query
                .append_pair("response_type", "code")
                .append_pair("client_id", &settings.client_id)
                .append_pair("redirect_uri", callback)
                .append_pair("state", &state_of(&link.verifier))
                .append_pair("code_challenge", &challenge_of(&link.verifier))
                .append_pair("code_challenge_method", "S256");
            if !link.scopes.is_empty() {
                query.append_pair("scope", &link.scopes);
            }
            if let Some(resource) = &settings.resource {
                query.append_pair("resource", resource);
            }
        }
        Ok(url.to_string())
    }

    /// The provider's redirect back (`callback`'s query): takes the link
    /// its `state` names (once), checks that `end_user` is its person and
    /// that `iss` is the provider's (RFC 9207), exchanges the code and
    /// stores the grant. Answers the link as it ended.
    pub async fn complete_authorization(
        &self,
        tenant: &str,
        end_user: &str,
        callback: &str,
        query: &exchange::CallbackQuery,
    ) -> Result<LinkView, AuthorizationError> {
        let gone = || {
            AuthorizationError::Gone(
                "this sign-in was finished already, or its link expired: call the tool again for a new one".into(),
            )
        };
        if self.tenant(tenant).is_none() {
            return Err(gone());
        }
        let state_sha256 = sha256_hex(query.state.as_bytes());
        let now = unix_now();
        let link = crate::store::off_the_workers(|| self.authorizations.store.take_link(tenant, &state_sha256, now))?
            .ok_or_else(gone)?;
        let fail = |why: String| -> Result<LinkView, AuthorizationError> {
            crate::store::off_the_workers(|| {
                self.authorizations.store.finish_link(tenant, &link.id, LinkState::Failed, Some(&why))
            })?;
            self.authorization_link_view(tenant, &link.id)
        };
        if link.end_user != end_user {
            tracing::warn!(tenant, link = link.id, "an authorization callback came to another person's browser");
            return fail("the sign-in came back to another person's browser session: nothing was granted".into());
        }
        let Some(provider) = self.authorizations.provider(tenant, &link.provider) else {
            return fail(format!("the provider `{}` is no longer configured", link.provider));
        };
        if let Some(error) = &query.error {
            return fail(format!(
                "{} answered `{}`: nothing was granted",
                provider_name(&provider),
                exchange::quoted(error)
            ));
        }
        let document = match self.authorizations.exchange.document(&provider).await {
            Ok(document) => document,
            Err(e) => return fail(e.to_string()),
        };
        // RFC 9207: a provider that says it sends `iss` must send its own;
        // any other issuer is a mix-up (a code of another provider).
        match (&query.iss, &document.issuer) {
            (Some(iss), Some(issuer)) if iss != issuer => {
                return fail(format!(
                    "the sign-in came back from another issuer than {}'s: nothing was granted",
                    provider_name(&provider)
                ));
            }
            (None, Some(_)) if document.iss_in_response => {
                return fail(format!(
                    "{} did not say who it is (`iss`): nothing was granted",
                    provider_name(&provider)
                ));
            }
            (Some(_), None) => {
                return fail(
                    "an `iss` came back from a provider configured without an issuer: nothing was granted".into(),
                );
            }
            _ => {}
        }
        let Some(code) = &query.code else { return fail("the sign-in came back without a code".into()) };
        let answer =
            match self.authorizations.exchange.redeem(&provider, &document, code, callback, &link.verifier).await {
                Ok(answer) => answer,
                Err(e) => return fail(e.to_string()),
            };
        let grant = StoredGrant {
            tenant: tenant.to_string(),
            end_user: link.end_user.clone(),
            provider: link.provider.clone(),
            scopes: answer.scope.unwrap_or_else(|| link.scopes.clone()),
            access_token: answer.access_token,
            refresh_token: answer.refresh_token,
            expires_at: answer.expires_in.map(|s| now.saturating_add(s)),
            created_at: now,
            updated_at: now,
        };
        let mut audit = AuditEntry::new(
            &Principal::server(&format!("end-user:{end_user}")),
            Some(tenant),
            "authorization.grant",
            format!("{end_user}/{}", link.provider),
        )
        .detail(json!({ "endUser": end_user, "provider": link.provider, "scopes": grant.scopes }));
        audit.actor = format!("end-user:{end_user}");
        crate::store::off_the_workers(|| self.authorizations.store.put_grant(&grant, &audit))?;
        self.authorizations.forget(tenant, end_user, &link.provider);
        crate::store::off_the_workers(|| {
            self.authorizations.store.finish_link(tenant, &link.id, LinkState::Connected, None)
        })?;
        tracing::info!(tenant, end_user, provider = link.provider, "an account was connected");
        self.authorization_link_view(tenant, &link.id)
    }

    /// A person's grants, as their page and the admin API show them.
    pub fn grants_of(&self, tenant: &str, end_user: &str) -> Result<Vec<GrantView>, AuthorizationError> {
        let grants = crate::store::off_the_workers(|| self.authorizations.store.grants_of(tenant, end_user))?;
        Ok(grants
            .into_iter()
            .map(|g| GrantView {
                provider_name: self
                    .authorizations
                    .provider(tenant, &g.provider)
                    .as_deref()
                    .map_or_else(|| g.provider.clone(), provider_name),
                scopes: scopes_of(&g.scopes),
                expires_at: g.expires_at,
                connected_at: g.created_at,
                refreshable: g.refresh_token.is_some(),
                provider: g.provider,
            })
            .collect())
    }

    /// Revokes a person's grant at a provider: at the provider first
    /// (RFC 7009, when it has a revocation endpoint; a failure there is
    /// logged, the grant removed all the same), then here, audited.
    pub async fn revoke_grant(
        &self,
        actor: &Principal,
        tenant: &str,
        end_user: &str,
        provider_id: &str,
    ) -> Result<(), AuthorizationError> {
        let grant = crate::store::off_the_workers(|| self.authorizations.store.grant(tenant, end_user, provider_id))?
            .ok_or_else(|| {
            AuthorizationError::NotFound(format!("`{end_user}` has no `{provider_id}` account connected"))
        })?;
        if let Some(provider) = self.authorizations.provider(tenant, provider_id) {
            let token = grant.refresh_token.as_deref().unwrap_or(&grant.access_token);
            if let Err(e) = self.authorizations.exchange.revoke(&provider, token).await {
                tracing::warn!(tenant, end_user, provider = provider_id, error = %e, "the provider did not revoke the grant; it is removed here all the same");
            }
        }
        let audit = AuditEntry::new(actor, Some(tenant), "authorization.revoke", format!("{end_user}/{provider_id}"))
            .detail(json!({ "endUser": end_user, "provider": provider_id }));
        crate::store::off_the_workers(|| {
            self.authorizations.store.delete_grant(tenant, end_user, provider_id, &audit)
        })?;
        self.authorizations.forget(tenant, end_user, provider_id);
        Ok(())
    }

    /// A tenant's providers, as the admin API shows them (never a secret).
    pub fn authorization_providers(&self, tenant: &str) -> Vec<(String, ProviderSettings, bool, i64)> {
        let mut providers: Vec<_> = self
            .authorizations
            .providers
            .iter()
            .filter(|p| p.key().0 == tenant)
            .map(|p| (p.id.clone(), settings_of(&p), p.client_secret.is_some(), p.updated_at))
            .collect();
        providers.sort_by(|a, b| a.0.cmp(&b.0));
        providers
    }

    /// Creates or replaces a tenant's provider `id` (audited). A secret
    /// left out of `settings` keeps the stored one.
    pub fn put_authorization_provider(
        &self,
        actor: &Principal,
        tenant: &str,
        id: &str,
        mut settings: ProviderSettings,
    ) -> Result<(), AuthorizationError> {
        if self.tenant(tenant).is_none() {
            return Err(AuthorizationError::NotFound(format!("there is no tenant `{tenant}`")));
        }
        check_settings(id, &settings, self.authorizations.exchange.allows_http())?;
        let existing = self.authorizations.provider(tenant, id);
        if existing.is_none()
            && self.authorizations.providers.iter().filter(|p| p.key().0 == tenant).count() >= MAX_PROVIDERS_PER_TENANT
        {
            return Err(AuthorizationError::TooManyProviders);
        }
        // Moved to another issuer, endpoint or client: the stored secret and
        // the people's refresh tokens are not sent to the new place. Its
        // secret must come again, and every grant made at the old one goes.
        let previous = existing.as_ref().and_then(|p| serde_json::from_str::<ProviderSettings>(&p.settings).ok());
        let moved = previous.is_some_and(|old| where_it_is(&old) != where_it_is(&settings));
        if moved && settings.client_secret.is_none() && existing.as_ref().is_some_and(|p| p.client_secret.is_some()) {
            return Err(AuthorizationError::InvalidProvider(
                "the provider's issuer, endpoints, client id or resource changed: send its `clientSecret` again (the stored one is never sent to a new place)".into(),
            ));
        }
        if moved {
            let audit = AuditEntry::new(actor, Some(tenant), "authorization_provider.moved", id);
            crate::store::off_the_workers(|| self.authorizations.store.delete_provider(tenant, id, &audit))?;
            self.authorizations.grants.retain(|(t, _, p), _| !(t == tenant && p == id));
        }
        let existing = if moved { None } else { existing };
        let client_secret = settings.client_secret.take().or_else(|| existing.and_then(|p| p.client_secret.clone()));
        let stored = StoredProvider {
            tenant: tenant.to_string(),
            id: id.to_string(),
            settings: serde_json::to_string(&settings).unwrap_or_default(),
            client_secret,
            updated_at: unix_now(),
        };
        let audit = AuditEntry::new(actor, Some(tenant), "authorization_provider.put", id)
            .detail(json!({ "settings": settings, "clientSecretSet": stored.client_secret.is_some() }));
        crate::store::off_the_workers(|| self.authorizations.store.put_provider(&stored, &audit))?;
        self.authorizations.exchange.forget(tenant, id);
        self.authorizations.providers.insert((tenant.to_string(), id.to_string()), Arc::new(stored));
        Ok(())
    }

    /// Deletes a tenant's provider, with every grant and link made for it
    /// (audited).
    pub fn delete_authorization_provider(
        &self,
        actor: &Principal,
        tenant: &str,
        id: &str,
    ) -> Result<(), AuthorizationError> {
        let audit = AuditEntry::new(actor, Some(tenant), "authorization_provider.delete", id);
        if !crate::store::off_the_workers(|| self.authorizations.store.delete_provider(tenant, id, &audit))? {
            return Err(AuthorizationError::NotFound(format!("tenant `{tenant}` has no provider `{id}`")));
        }
        self.authorizations.providers.remove(&(tenant.to_string(), id.to_string()));
        self.authorizations.exchange.forget(tenant, id);
        self.authorizations.grants.retain(|(t, _, p), _| !(t == tenant && p == id));
        Ok(())
    }
}

/// A stored provider's settings (its secret apart).
fn settings_of(provider: &StoredProvider) -> ProviderSettings {
    serde_json::from_str(&provider.settings).unwrap_or_default()
}

/// What the person is shown a provider as.
fn provider_name(provider: &StoredProvider) -> String {
    settings_of(provider).display_name.unwrap_or_else(|| provider.id.clone())
}

impl From<exchange::ExchangeError> for AuthorizationError {
    fn from(e: exchange::ExchangeError) -> Self {
        AuthorizationError::Provider(e.to_string())
    }
}

/// The checks of what a provider sends, without the fetching around them:
/// for the fuzzers (`fuzz/`), not an API.
#[doc(hidden)]
pub mod fuzzing {
    pub use super::exchange::{CallbackQuery, ExchangeError, ProviderDocument, TokenAnswer, quoted};

    /// A metadata document, as [`super::exchange`] reads it.
    pub fn document(bytes: &[u8], issuer: &str, allow_http: bool) -> Result<ProviderDocument, ExchangeError> {
        super::exchange::parse_document(bytes, issuer, allow_http)
    }

    /// A token endpoint's answer with `status`.
    pub fn token_answer(status: u16, bytes: &[u8]) -> Result<TokenAnswer, ExchangeError> {
        super::exchange::parse_token_answer(status, bytes)
    }

    /// A provider's settings, as a publisher's `PUT` is checked.
    pub fn settings(id: &str, json: &[u8]) -> Result<super::ProviderSettings, String> {
        let settings: super::ProviderSettings = serde_json::from_slice(json).map_err(|e| e.to_string())?;
        super::check_settings(id, &settings, false).map_err(|e| e.to_string())?;
        Ok(settings)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_state_is_made_from_its_verifier_and_tells_nothing_of_it() {
        let verifier = "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk";
        assert_eq!(state_of(verifier), state_of(verifier));
        assert_ne!(state_of(verifier), state_of("another"));
        assert!(!state_of(verifier).contains(verifier));
        // RFC 7636 appendix B.
        assert_eq!(challenge_of(verifier), "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM");
    }

    #[test]
    fn a_grant_holds_a_need_only_with_every_scope() {
        let need = |scopes: &[&str]| AuthorizationNeed {
            provider: "inbox".into(),
            scopes: scopes.iter().map(|s| s.to_string()).collect(),
            hosts: vec!["api.inbox.example".into()],
        };
        assert!(holds("inbox.read inbox.write", &need(&["inbox.read"])));
        assert!(holds("inbox.read", &need(&[])));
        assert!(!holds("inbox.read", &need(&["inbox.read", "inbox.write"])));
        assert!(!holds("", &need(&["inbox.read"])));
    }

    #[test]
    fn a_providers_settings_are_checked_before_they_are_stored() {
        let good = ProviderSettings {
            issuer: Some("https://login.example".into()),
            client_id: "plinth".into(),
            ..Default::default()
        };
        assert!(check_settings("inbox", &good, false).is_ok());
        let refused =
            |settings: ProviderSettings, id: &str| check_settings(id, &settings, false).unwrap_err().to_string();
        assert!(refused(good.clone(), "Inbox").contains("provider id"));
        assert!(refused(ProviderSettings { issuer: None, ..good.clone() }, "inbox").contains("authorizationEndpoint"));
        assert!(
            refused(ProviderSettings { issuer: Some("http://login.example".into()), ..good.clone() }, "inbox")
                .contains("issuer")
        );
        let mut own = good.clone();
        own.authorization_parameters.insert("redirect_uri".into(), "https://evil.example".into());
        assert!(refused(own, "inbox").contains("redirect_uri"));
        assert!(refused(ProviderSettings { client_id: String::new(), ..good }, "inbox").contains("clientId"));
    }
}
