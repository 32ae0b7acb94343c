//! The links every door hands out, shared from here rather than borrowed
//! from one another: CHEQ's (a pending call's URI pack, the draft's figure
//! 3; the confirmation page's link; the end user a call names), used by
//! A2T, OTC, MCP, the catalog and the CHEQ endpoints; and OAuth's (a
//! tenant's root, issuer and MCP resource, the challenge of a refusal),
//! used by the OAuth endpoints and the access check in front of MCP.

use super::{ApiError, ApiOptions, Caller, pages};
use crate::host::authorizations::PendingAuthorization;
use crate::host::oauth::SCOPES;
use crate::host::{InvokeError, MAX_END_USER_CHARS, PendingConfirmation, is_end_user_name};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

/// The URI pack's keys, exactly as the draft spells them.
pub const CONFIRMATION_URI: &str = "confirmation uri";
/// The resource URI's key.
pub const RESOURCE_URI: &str = "resource uri";
/// The result URI's key.
pub const RESULT_URI: &str = "result uri";

/// The A2T header that names the end user a call acts for.
pub const END_USER_HEADER: &str = "plinth-end-user";

/// The end user named by the A2T `Plinth-End-User` header, if any.
pub fn end_user_header(headers: &HeaderMap) -> Result<Option<String>, ApiError> {
    let Some(value) = headers.get(END_USER_HEADER) else { return Ok(None) };
    let user = value.to_str().map_err(|_| bad_end_user())?.to_string();
    check_end_user(&user)?;
    Ok(Some(user))
}

/// An end user's name: 1 to 128 printable characters.
pub fn check_end_user(user: &str) -> Result<(), ApiError> {
    if !is_end_user_name(user) {
        return Err(bad_end_user());
    }
    Ok(())
}

fn bad_end_user() -> ApiError {
    ApiError::bad_request(
        "invalid_end_user",
        format!("the end user must be named by 1 to {MAX_END_USER_CHARS} printable characters"),
    )
}

/// `https://host/t/acme` (or the bare public URL for the default tenant).
pub(super) fn root(options: &ApiOptions, tenant: &str) -> String {
    if tenant == crate::tenancy::DEFAULT_TENANT {
        options.public_url.clone()
    } else {
        format!("{}/t/{tenant}", options.public_url)
    }
}

/// The two URLs of an authorization link (docs/authorization.md): the page
/// its person opens (`url`, under the tenant's root), and the one an agent
/// polls until they are done (`check_url`: under `toolset`'s root when the
/// call came through one, which a key scoped to it opens, as a CHEQ result
/// URI is).
pub fn authorization_urls(options: &ApiOptions, tenant: &str, link: &str, toolset: Option<&str>) -> (String, String) {
    let root = root(options, tenant);
    let check_root = match toolset {
        None => root.clone(),
        Some(name) => format!("{}/t/{tenant}/toolsets/{name}", options.public_url),
    };
    (format!("{root}/connections/{link}"), format!("{check_root}/connections/{link}/status"))
}

/// A call's pending authorizations as every door shows them:
/// `[{"provider", "scopes", "url", "checkUrl"}]` (`toolset`: the root the
/// call came through, if a toolset's).
pub fn authorization_challenges(
    options: &ApiOptions,
    pending: &[PendingAuthorization],
    toolset: Option<&str>,
) -> Value {
    pending
        .iter()
        .map(|p| {
            let (url, check_url) = authorization_urls(options, &p.tenant, &p.link, toolset);
            json!({ "provider": p.provider, "scopes": p.scopes, "url": url, "checkUrl": check_url })
        })
        .collect()
}

/// The A2T answer to a call that needs its end user's grants first: `403
/// authorization_required`, the challenges beside the error, `Link` to the
/// first page (so that a person's tool can open it).
pub fn authorization_required(options: &ApiOptions, e: &InvokeError, toolset: Option<&str>) -> Response {
    let InvokeError::AuthorizationRequired { pending, .. } = e else {
        return ApiError::internal("an authorization answer for another error").into_response();
    };
    let challenges = authorization_challenges(options, pending, toolset);
    let mut response = ApiError::new(StatusCode::FORBIDDEN, e.code(), e.to_string())
        .with("authorization", challenges.clone())
        .into_response();
    if let Some(url) = challenges[0]["url"].as_str()
        && let Ok(link) = HeaderValue::from_str(&format!("<{url}>; rel=\"authorization\""))
    {
        response.headers_mut().insert(header::LINK, link);
    }
    response
}

/// The URI pack (figure 3) of a pending call.
pub fn uri_pack_body(options: &ApiOptions, pending: &PendingConfirmation) -> Value {
    uri_pack_body_in(options, pending, None)
}

/// The URI pack of a call made through `toolset`'s root (when given): its
/// result URI is under that root, which a key scoped to the toolset opens.
pub fn uri_pack_body_in(options: &ApiOptions, pending: &PendingConfirmation, toolset: Option<&str>) -> Value {
    let root = root(options, &pending.tenant);
    let confirmation = pending.confirmation_uri.clone().unwrap_or_else(|| format!("{root}/cheq/confirm"));
    let result_root = match toolset {
        None => root.clone(),
        Some(name) => format!("{}/t/{}/toolsets/{name}", options.public_url, pending.tenant),
    };
    json!({
        CONFIRMATION_URI: confirmation,
        RESOURCE_URI: format!("{root}/cheq/transactions/{}", pending.id),
        RESULT_URI: format!("{result_root}/cheq/results/{}", pending.id),
    })
}

/// `202 Accepted` with the URI pack and `Location: {result uri}`; its
/// result URI under `toolset`'s root when the call came through one.
pub fn uri_pack(options: &ApiOptions, pending: &PendingConfirmation, toolset: Option<&str>) -> Response {
    pack_response(uri_pack_body_in(options, pending, toolset))
}

/// `202 Accepted` with `pack`.
fn pack_response(pack: Value) -> Response {
    let location = pack[RESULT_URI].as_str().and_then(|uri| HeaderValue::from_str(uri).ok());
    let mut response = (StatusCode::ACCEPTED, axum::Json(pack)).into_response();
    if let Some(location) = location {
        response.headers_mut().insert(header::LOCATION, location);
    }
    response
}

/// The link an end user opens to confirm a waiting call: the confirmation
/// page with the call's resource URI in its query (no credential:
/// accepting still needs the end user's login or their confirmation
/// server's signature). What the MCP door elicits and the catalog links to.
pub(crate) fn confirmation_link(options: &ApiOptions, pending: &PendingConfirmation) -> String {
    let pack = uri_pack_body(options, pending);
    let page = pack[CONFIRMATION_URI].as_str().unwrap_or_default();
    let resource = pack[RESOURCE_URI].as_str().unwrap_or_default();
    let query: String = form_urlencoded::Serializer::new(String::new()).append_pair("resource_uri", resource).finish();
    // An external confirmation server's URI may have a query of its own.
    let separator = if page.contains('?') { '&' } else { '?' };
    format!("{page}{separator}{query}")
}

/// A tenant's platform root as a client reached it: `/t/{tenant}`, or, for
/// the default tenant reached without it, `/`. Every URL a client is given
/// (resource, issuer, endpoints, metadata) stays under the root it came
/// through: the SDKs check that the resource is the URL they called and
/// that the issuer is the one they derived the metadata's URL from, so a
/// client of `/t/default/mcp` must never be sent to `/mcp`, nor the other
/// way round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Root<'a> {
    /// The tenant.
    pub tenant: &'a str,
    /// Reached through `/t/{tenant}/` (every tenant but the default one
    /// always is).
    pub explicit: bool,
    /// The toolset whose MCP URL is meant (`…/toolsets/{name}/mcp`), if
    /// any: a protected resource of its own (docs/toolsets.md).
    pub toolset: Option<&'a str>,
}

impl<'a> Root<'a> {
    /// The root of `tenant` reached through `/t/{tenant}/`.
    pub fn of_tenant(tenant: &'a str) -> Root<'a> {
        Root { tenant, explicit: true, toolset: None }
    }

    /// The root the request of `caller` came through.
    pub fn of(caller: &'a Caller) -> Root<'a> {
        Root {
            tenant: &caller.tenant,
            explicit: caller.tenant_root,
            toolset: caller.toolset.as_ref().map(|t| t.name.as_str()),
        }
    }

    /// Whether it is `/t/{tenant}` rather than `/`.
    fn under_t(&self) -> bool {
        self.explicit || self.tenant != crate::tenancy::DEFAULT_TENANT
    }

    /// Its URL.
    pub fn url(&self, options: &ApiOptions) -> String {
        if self.under_t() { format!("{}/t/{}", options.public_url, self.tenant) } else { options.public_url.clone() }
    }

    /// Its path on this server (cookie paths).
    pub(super) fn path(&self, options: &ApiOptions) -> String {
        let prefix = pages::path_prefix(&options.public_url);
        if self.under_t() { format!("{prefix}/t/{}", self.tenant) } else { prefix.to_string() }
    }
}

/// The tenant's issuer: the URL of the platform root the client used.
pub fn issuer(options: &ApiOptions, root: Root<'_>) -> String {
    root.url(options)
}

/// The tenant's MCP URL under `root`: the resource its tokens are for.
pub fn mcp_resource(options: &ApiOptions, root: Root<'_>) -> String {
    match root.toolset {
        None => format!("{}/mcp", issuer(options, root)),
        Some(toolset) => format!("{}/toolsets/{toolset}/mcp", issuer(options, root)),
    }
}

/// The MCP URL a request came to under `root`: the toolset's pinned root
/// `…/toolsets/{name}@{n}/mcp` when it was reached by a pin, else
/// [`mcp_resource`]. A token works only where its resource is this URL,
/// compared whole; no token is issued for a pinned root.
pub fn presented_mcp_url(options: &ApiOptions, root: Root<'_>, pinned: Option<u32>) -> String {
    match (root.toolset, pinned) {
        (Some(toolset), Some(n)) => format!("{}/toolsets/{toolset}@{n}/mcp", issuer(options, root)),
        _ => mcp_resource(options, root),
    }
}

/// The toolset whose MCP URL `resource` is, under `root`'s issuer (the
/// name only: whether it is live is the caller's to check).
pub fn toolset_of_resource<'r>(options: &ApiOptions, root: Root<'_>, resource: &'r str) -> Option<&'r str> {
    let issuer = issuer(options, root);
    let name = resource.strip_prefix(issuer.as_str())?.strip_prefix("/toolsets/")?.strip_suffix("/mcp")?;
    crate::host::toolsets::is_toolset_name(name).then_some(name)
}

/// `url` with `/.well-known/{name}` put between its origin and its path
/// (RFC 9728 §3.1, RFC 8414 §3.1).
fn well_known(url: &str, name: &str) -> String {
    let after_scheme = url.find("://").map_or(0, |i| i + 3);
    let path_at = url[after_scheme..].find('/').map_or(url.len(), |i| after_scheme + i);
    let (origin, path) = url.split_at(path_at);
    format!("{origin}/.well-known/{name}{}", path.trim_end_matches('/'))
}

/// The URL of the resource metadata of the MCP URL under `root`.
pub fn resource_metadata_url(options: &ApiOptions, root: Root<'_>) -> String {
    well_known(&mcp_resource(options, root), "oauth-protected-resource")
}

/// The scopes, space-separated, as a challenge names them.
pub fn all_scopes() -> String {
    SCOPES.iter().map(|(s, _)| *s).collect::<Vec<_>>().join(" ")
}

/// The `WWW-Authenticate` value of a refusal at the MCP URL under `root`:
/// `error` (`invalid_token`, `insufficient_scope`) when there is one, the
/// scope needed, and where the resource metadata is.
pub fn challenge(options: &ApiOptions, root: Root<'_>, error: Option<&str>, scope: &str) -> String {
    let mut value = String::from("Bearer ");
    if let Some(error) = error {
        value.push_str(&format!("error=\"{error}\", "));
    }
    value.push_str(&format!("scope=\"{scope}\", resource_metadata=\"{}\"", resource_metadata_url(options, root)));
    value
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_confirmation_link_carries_the_resource_uri_whatever_query_the_page_has() {
        let options = ApiOptions { public_url: "https://tools.example.com".into(), ..ApiOptions::default() };
        let pending = |tenant: &str, confirmation_uri: Option<&str>| PendingConfirmation {
            id: "tx1".into(),
            expires_at: 0,
            tenant: tenant.into(),
            confirmation_uri: confirmation_uri.map(str::to_string),
        };
        assert_eq!(
            confirmation_link(&options, &pending("default", None)),
            "https://tools.example.com/cheq/confirm?resource_uri=https%3A%2F%2Ftools.example.com%2Fcheq%2Ftransactions%2Ftx1"
        );
        assert_eq!(
            confirmation_link(&options, &pending("acme", Some("https://confirm.example/page?realm=acme"))),
            "https://confirm.example/page?realm=acme&resource_uri=https%3A%2F%2Ftools.example.com%2Ft%2Facme%2Fcheq%2Ftransactions%2Ftx1"
        );
    }

    #[test]
    fn well_known_urls_go_between_the_origin_and_the_path() {
        assert_eq!(
            well_known("http://127.0.0.1:8080/t/acme/mcp", "oauth-protected-resource"),
            "http://127.0.0.1:8080/.well-known/oauth-protected-resource/t/acme/mcp"
        );
        assert_eq!(
            well_known("https://tools.example", "oauth-authorization-server"),
            "https://tools.example/.well-known/oauth-authorization-server"
        );
    }
}
