//! OAuth clients: registered dynamically (RFC 7591, stored, a bounded
//! number per tenant) or named by the URL of their Client ID Metadata
//! Document, fetched under the outbound policy and cached briefly; their
//! redirect URIs checked.

use super::{MAX_CLIENT_ID_BYTES, MAX_CLIENT_METADATA_BYTES, MAX_REGISTERED_CLIENTS, OAuthError};
use crate::host::ToolHost;
use crate::host::fetcher::{JwksError, Requester};
use crate::host::random_token;
use crate::tenancy::unix_now;
use serde_json::{Value, json};

/// A client, as the authorization page and the token endpoint see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OAuthClient {
    pub client_id: String,
    /// Its `client_name`, else its id.
    pub name: String,
    pub redirect_uris: Vec<String>,
    /// What it says it is, if it said (a registration must).
    pub application_type: Option<ApplicationType>,
    /// Whether its id is the URL of its metadata document.
    pub metadata_document: bool,
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
pub(super) fn sound_redirect_uri(uri: &str) -> bool {
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

/// What a client says it is (OpenID Connect Dynamic Client Registration
/// §2, `application_type`), which decides the redirect URIs it may use.
/// MCP's 2026-07-28 revision requires clients to say it when they register.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApplicationType {
    /// An app on the user's device: a loopback `http` address, its own
    /// scheme, or `https`.
    Native,
    /// A web site: `https`, or `http` on a loopback address (a site run
    /// locally); never a private-use scheme.
    Web,
}

impl ApplicationType {
    fn as_str(self) -> &'static str {
        match self {
            ApplicationType::Native => "native",
            ApplicationType::Web => "web",
        }
    }

    /// Whether a sound redirect URI ([`sound_redirect_uri`]) is one this
    /// kind of client may use.
    fn allows(self, uri: &str) -> bool {
        match self {
            ApplicationType::Native => true,
            ApplicationType::Web => uri.starts_with("https://") || uri.starts_with("http://"),
        }
    }
}

/// The `application_type` a client's metadata names: `Ok(None)` when it
/// names none and `required` is false (a metadata document, or a client
/// registered before it was required).
pub(super) fn application_type(metadata: &Value, required: bool) -> Result<Option<ApplicationType>, OAuthError> {
    match metadata.get("application_type") {
        None | Some(Value::Null) if !required => Ok(None),
        None | Some(Value::Null) => Err(OAuthError::new(
            "invalid_client_metadata",
            "`application_type` is required when a client registers: `native` for an app on the user's device, `web` for a web site (MCP 2026-07-28, OpenID Connect Registration §2)",
        )),
        Some(Value::String(kind)) if kind == "native" => Ok(Some(ApplicationType::Native)),
        Some(Value::String(kind)) if kind == "web" => Ok(Some(ApplicationType::Web)),
        Some(_) => Err(OAuthError::new("invalid_client_metadata", "`application_type` must be `native` or `web`")),
    }
}

/// How a client's metadata reached this server, which decides what it must
/// say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum MetadataFrom {
    /// Posted to the registration endpoint now: `application_type` required.
    Registration,
    /// Fetched from its metadata document.
    Document,
    /// As stored at its registration.
    Stored,
}

/// A client's metadata (registered or fetched) checked: its redirect URIs
/// (each one its `application_type` allows, when it names one) and name.
pub(super) fn client_from_metadata(
    client_id: &str,
    metadata: &Value,
    from: MetadataFrom,
) -> Result<OAuthClient, OAuthError> {
    let invalid = |why: &str| OAuthError::new("invalid_client_metadata", why);
    let kind = application_type(metadata, from == MetadataFrom::Registration)?;
    let uris = metadata["redirect_uris"].as_array().ok_or_else(|| invalid("`redirect_uris` must be a list"))?;
    let mut redirect_uris = Vec::new();
    for uri in uris {
        let uri = uri.as_str().filter(|u| sound_redirect_uri(u)).ok_or_else(|| {
            OAuthError::new(
                "invalid_redirect_uri",
                "every redirect URI must be https://, http:// on a loopback address, or an app's own scheme, without a fragment",
            )
        })?;
        if let Some(kind) = kind.filter(|kind| !kind.allows(uri)) {
            return Err(OAuthError::new(
                "invalid_redirect_uri",
                format!(
                    "a `{}` client's redirect URIs must be https:// (or http:// on a loopback address); an app's own scheme is for `native` clients",
                    kind.as_str()
                ),
            ));
        }
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
    Ok(OAuthClient {
        client_id: client_id.to_string(),
        name,
        redirect_uris,
        application_type: kind,
        metadata_document: from == MetadataFrom::Document,
    })
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

impl ToolHost {
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
        let client = client_from_metadata(&client_id, metadata, MetadataFrom::Registration)?;
        let application_type = client.application_type.map(ApplicationType::as_str);
        let stored = json!({
            "client_name": client.name,
            "redirect_uris": client.redirect_uris,
            "application_type": application_type,
        });
        let now = unix_now();
        // A tenant that does not exist is answered as one that does, and
        // nothing is stored for it (docs/security.md: the client is then
        // unknown at the sign-in page).
        let registered = self.tenant(tenant).is_none()
            || crate::store::off_the_workers(|| {
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
            "application_type": application_type,
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
            let document =
                self.oauth.documents.get_for(client_id, Some(Requester::Address(from))).await.map_err(|e| {
                    OAuthError::new(
                        "invalid_client",
                        format!("the client's metadata document {}", document_refusal(&e)),
                    )
                })?;
            // The document must name itself (draft-ietf-oauth-client-id-metadata-document §4.1).
            if document["client_id"].as_str() != Some(client_id) {
                return Err(OAuthError::new(
                    "invalid_client",
                    "the client's metadata document does not name its own URL as its client_id",
                ));
            }
            return client_from_metadata(client_id, &document, MetadataFrom::Document);
        }
        // A tenant that does not exist has no registered client, and is
        // not looked up.
        if !is_registered_client_id(client_id) || self.tenant(tenant).is_none() {
            return Err(unknown());
        }
        let stored = crate::store::off_the_workers(|| self.store.oauth_client(tenant, client_id))?;
        let stored = stored.ok_or_else(unknown)?;
        let metadata: Value = serde_json::from_str(&stored).map_err(|_| unknown())?;
        client_from_metadata(client_id, &metadata, MetadataFrom::Stored)
    }

    /// Records that a registered client was used (a code issued to it, a
    /// refresh): the sweep and a full tenant spare it. Best effort: a
    /// store failure here fails nothing.
    pub(super) fn client_used(&self, tenant: &str, client_id: &str) {
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
    pub(super) fn client_still_registered(&self, tenant: &str, client_id: &str) -> Result<(), OAuthError> {
        if !is_registered_client_id(client_id) {
            return Ok(());
        }
        let stored = match self.tenant(tenant) {
            Some(_) => crate::store::off_the_workers(|| self.store.oauth_client(tenant, client_id))?,
            None => None,
        };
        match stored {
            Some(_) => Ok(()),
            None => {
                Err(OAuthError::new("invalid_client", "this client is not registered here (any more); register again"))
            }
        }
    }
}
