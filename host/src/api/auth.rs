//! Who may call which endpoint, decided once for every route.
//!
//! Every route is registered with an [`Access`]; [`authorize`] runs before
//! its handler and either answers `401`/`403`/`404` or hands the handler a
//! [`Caller`]: the tenant the request is about and who is asking. The rules:
//!
//! 1. `401` when the key is missing, unknown or revoked — except for
//!    enumeration of a tenant that made its enumeration public.
//! 2. `404` when the route is about a tenant the key does not belong to, or
//!    one that does not exist (the two are indistinguishable).
//! 3. `403` when the key belongs to the tenant but its role is too low.
//!
//! The catalog's pages (`Access::Catalog`) take their key from a catalog
//! session instead (see [`authorize_designer`]): without a live session of
//! the tenant they answer `401` with the sign-in page.
//!
//! Roles are ordered consumer < publisher < operator; each may do what the
//! ones below it may.

use super::access::{Access, Caller, Scope, unauthorized};
use super::links::Root as OAuthRoot;
use super::{ApiError, ApiOptions, AppState};
use crate::tenancy::{DEFAULT_TENANT, Principal, Role, is_tenant_name};
use axum::extract::Request;
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use std::sync::Arc;

/// The platform root a request came through, set by [`strip_tenant_root`].
#[derive(Debug, Clone)]
struct TenantRoot(Option<String>);

/// The toolset root a request came through (`/t/{tenant}/toolsets/{name}`
/// or `…/{name}@{n}`), set by [`strip_tenant_root`].
#[derive(Debug, Clone)]
struct ToolsetRoot {
    name: String,
    version: Option<u32>,
}

/// `/toolsets/{name}[@{n}]/rest` → the toolset's root and `/rest`, when
/// `rest` is one of the doors a toolset is served on (A2T's `/tools…`,
/// OTC's `/otc/…`, MCP's `/mcp`, and what an agent polls after a call made
/// there: CHEQ's result URI, an authorization link's status); `Err` for any
/// other path under
/// `/toolsets/` (no route: `404`).
fn toolset_root(path: &str) -> Option<Result<(ToolsetRoot, String), ()>> {
    let rest = path.strip_prefix("/toolsets/")?;
    let (segment, tail) = rest.split_once('/').map_or((rest, ""), |(s, t)| (s, t));
    let tail = format!("/{tail}");
    let (name, version) = match segment.split_once('@') {
        None => (segment, None),
        Some((name, n)) => match n.parse::<u32>() {
            // One spelling per version: `@1`, never `@01` or `@+1`.
            Ok(v) if v >= 1 && v.to_string() == n => (name, Some(v)),
            _ => return Some(Err(())),
        },
    };
    // The doors, and the result URI of a call made through them.
    let door = tail == "/tools"
        || tail.starts_with("/tools/")
        || tail.starts_with("/otc/")
        || tail == "/mcp"
        || tail.starts_with("/cheq/results/")
        || tail.strip_prefix("/connections/").is_some_and(|rest| rest.ends_with("/status"));
    if !crate::host::toolsets::is_toolset_name(name) || !door {
        return Some(Err(()));
    }
    Some(Ok((ToolsetRoot { name: name.to_string(), version }, tail)))
}

/// Rewrites `/t/{tenant}/rest` to `/rest` and remembers the tenant, so that
/// one set of routes serves every platform root; and
/// `/t/{tenant}/toolsets/{name}[@{n}]/rest` to `/rest` too, remembering
/// the toolset, so that the doors' handlers serve a toolset's root as
/// another view of the same tenant. Runs before routing.
pub fn strip_tenant_root(request: Request) -> Request {
    let mut request = strip_platform_root(request);
    // Only under a tenant's explicit root: a toolset's MCP URL is an OAuth
    // resource of its own, whose metadata lives under `/t/{tenant}/…`.
    if request.extensions().get::<TenantRoot>().is_none_or(|root| root.0.is_none()) {
        return request;
    }
    let path = request.uri().path().to_string();
    let Some(root) = toolset_root(&path) else { return request };
    let (root, tail) = match root {
        Ok(found) => found,
        Err(()) => {
            *request.uri_mut() = axum::http::Uri::from_static("/t/invalid");
            return request;
        }
    };
    let path_and_query = match request.uri().query() {
        Some(q) => format!("{tail}?{q}"),
        None => tail,
    };
    let mut parts = request.uri().clone().into_parts();
    match path_and_query.parse() {
        Ok(pq) => parts.path_and_query = Some(pq),
        Err(_) => parts.path_and_query = Some(axum::http::uri::PathAndQuery::from_static("/t/invalid")),
    }
    if let Ok(uri) = axum::http::Uri::from_parts(parts) {
        *request.uri_mut() = uri;
    }
    request.extensions_mut().insert(root);
    request
}

fn strip_platform_root(mut request: Request) -> Request {
    let path = request.uri().path();
    let root = path.strip_prefix("/t/").map(|rest| match rest.split_once('/') {
        Some((tenant, tail)) => (tenant.to_string(), format!("/{tail}")),
        None => (rest.to_string(), "/".to_string()),
    });
    let Some((tenant, tail)) = root else {
        request.extensions_mut().insert(TenantRoot(None));
        return request;
    };
    // Not a tenant name: no route, so that no handler sees the text (it
    // would go into cookie paths and links).
    if !is_tenant_name(&tenant) {
        *request.uri_mut() = axum::http::Uri::from_static("/t/invalid");
        request.extensions_mut().insert(TenantRoot(None));
        return request;
    }
    let path_and_query = match request.uri().query() {
        Some(q) => format!("{tail}?{q}"),
        None => tail,
    };
    let mut parts = request.uri().clone().into_parts();
    match path_and_query.parse() {
        Ok(pq) => parts.path_and_query = Some(pq),
        Err(_) => parts.path_and_query = Some(axum::http::uri::PathAndQuery::from_static("/t/invalid")),
    }
    if let Ok(uri) = axum::http::Uri::from_parts(parts) {
        *request.uri_mut() = uri;
    }
    request.extensions_mut().insert(TenantRoot(Some(tenant)));
    request
}

/// The bearer token of a request, if it has one.
fn bearer(request: &Request) -> Option<&str> {
    bearer_token(request.headers())
}

/// The bearer token in `headers`, if there is one.
pub fn bearer_token(headers: &axum::http::HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim()).filter(|t| !t.is_empty())
}

fn no_such_toolset(name: &str, version: Option<u32>) -> ApiError {
    let message = match version {
        None => format!("there is no toolset `{name}` in this tenant"),
        Some(n) => format!("there is no version {n} of toolset `{name}` in this tenant"),
    };
    ApiError::new(StatusCode::NOT_FOUND, "toolset_not_found", message)
}

fn no_such_tenant(tenant: &str) -> ApiError {
    ApiError::not_found(format!("there is no tenant `{tenant}` this key may use"))
}

/// The access decision for one request to an endpoint with `access` and
/// `scope`; see the module docs for the rules.
pub async fn authorize(access: Access, scope: Scope, mut request: Request, next: Next) -> Response {
    // Put there by `super::router`, before routing.
    let Some(host) = request.extensions().get::<AppState>().cloned() else {
        return ApiError::internal("the server is misconfigured").into_response();
    };
    let root = request.extensions().get::<TenantRoot>().and_then(|r| r.0.clone());
    if scope == Scope::Server && root.is_some() {
        return super::no_such_endpoint().into_response();
    }
    let tenant_root = root.is_some();
    let tenant = root.unwrap_or_else(|| DEFAULT_TENANT.to_string());
    let toolset_root = request.extensions().get::<ToolsetRoot>().cloned();
    if access.is_catalog() {
        return authorize_designer(host, access, tenant, tenant_root, request, next).await;
    }
    let presented = bearer(&request).map(str::to_string);
    let options = request.extensions().get::<Arc<ApiOptions>>().cloned();
    // The MCP URL is an OAuth protected resource: its refusals say where
    // to get a token. Looked up when needed (a token to check, a refusal),
    // once: a token's refusal is given the setting its check saw.
    let at_mcp = request.uri().path() == "/mcp";
    let oauth = || {
        let root = OAuthRoot {
            tenant: tenant.as_str(),
            explicit: tenant_root,
            toolset: toolset_root.as_ref().map(|r| r.name.as_str()),
        };
        options.as_deref().filter(|_| at_mcp && host.oauth_enabled(&tenant)).map(|options| (options, root))
    };
    let mut oauth_seen = None;
    // A key first (an operator's configured key may look like anything),
    // then a token.
    let principal = match presented.as_deref() {
        Some(bearer) => match host.authenticate(bearer) {
            Some(principal) => Some(principal),
            None if is_token(bearer) => {
                let seen = *oauth_seen.insert(oauth());
                let pinned = toolset_root.as_ref().and_then(|r| r.version);
                match token_principal(&host, seen, pinned, bearer).await {
                    Ok(principal) => principal,
                    Err(error) => return error.into_response(),
                }
            }
            None => None,
        },
        None => None,
    };
    let toolset_name = toolset_root.as_ref().map(|r| r.name.as_str());
    let decision = decide(&host, access, scope, &tenant, toolset_name, presented.is_some(), principal.as_ref());
    if let Err(error) = decision {
        return refusal(error, presented.is_some(), oauth_seen.unwrap_or_else(oauth));
    }
    // A toolset's root: the toolset (that version, or its newest) must be
    // live; the doors then serve its view of the tenant.
    let toolset = match &toolset_root {
        // An open endpoint (OTC's health check) names no tool: it answers
        // the same under every root, and so says nothing of which toolsets
        // exist.
        None => None,
        Some(_) if access == Access::Open => None,
        Some(root) => match host.toolset(&tenant, &root.name, root.version) {
            Some(toolset) => Some(toolset),
            None => return no_such_toolset(&root.name, root.version).into_response(),
        },
    };
    request.extensions_mut().insert(Caller { tenant, tenant_root, principal, toolset });
    next.run(request).await
}

/// Whether a bearer is an OAuth access token rather than a key: one of the
/// built-in server's, or a JWT (three dot-separated parts; keys have none).
fn is_token(bearer: &str) -> bool {
    bearer.starts_with(crate::host::oauth::ACCESS_PREFIX) || bearer.split('.').count() == 3
}

/// The principal of an OAuth access token: valid, issued by the tenant's
/// authorization server for the MCP URL it is presented at, compared whole
/// (the default tenant's `/mcp` and `/t/default/mcp` are two URLs: a token
/// is for the one it was asked for; a toolset's pinned root
/// `…/toolsets/{name}@{n}/mcp`, `pinned`, is another URL than the
/// toolset's, for which no token is issued: it takes a scoped key), and
/// presented there (`oauth` is `Some` only at the MCP URL of a tenant
/// whose authorization server is on). Anywhere else a token is no
/// credential: A2T, OTC and the admin API take keys.
async fn token_principal(
    host: &AppState,
    oauth: Option<(&ApiOptions, OAuthRoot<'_>)>,
    pinned: Option<u32>,
    token: &str,
) -> Result<Option<Principal>, ApiError> {
    let Some((options, root)) = oauth else { return Ok(None) };
    let tenant = root.tenant;
    let resource = super::links::presented_mcp_url(options, root, pinned);
    let unreadable =
        |e: crate::store::StoreError| ApiError::storage_failed(format!("the token could not be checked: {e}"));
    let grant = host.token_grant(tenant, token, &resource).await.map_err(unreadable)?;
    if grant.is_none() {
        // A good token issued for one of the tenant's toolsets, presented
        // at another MCP URL: refused, saying why (docs/toolsets.md).
        let elsewhere = host.access_grant(tenant, token).map_err(unreadable)?;
        if let Some(scoped) = elsewhere
            .as_ref()
            .and_then(|g| super::links::toolset_of_resource(options, OAuthRoot { toolset: None, ..root }, &g.resource))
        {
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "outside_toolset",
                format!(
                    "this token was issued for toolset `{scoped}`: it opens /t/{tenant}/toolsets/{scoped}/mcp and nothing else"
                ),
            )
            .with("toolset", scoped));
        }
    }
    Ok(grant.map(|grant| Principal {
        key_id: format!("oauth:{}", grant.family),
        role: Role::Consumer,
        tenant: Some(tenant.to_string()),
        token: Some(Arc::new(grant)),
        toolset: root.toolset.map(str::to_string),
    }))
}

/// The decision for a catalog page: the request's catalog session must be
/// a live one of `tenant` (its key found again among the live keys: a
/// revoked key's sessions end with it), else `401` and the sign-in page.
/// A form posted (any method but `GET` and `HEAD`) must also come from
/// this origin (`Sec-Fetch-Site`, else `Origin`, where the browser sends
/// them: [`super::pages::posted_from_elsewhere`]) and carry
/// the session's form token, else `403` and nothing is done. The handler
/// gets the [`Caller`] and the [`DesignerSession`](crate::host::DesignerSession).
async fn authorize_designer(
    host: AppState,
    access: Access,
    tenant: String,
    tenant_root: bool,
    mut request: Request,
    next: Next,
) -> Response {
    let Some(options) = request.extensions().get::<Arc<ApiOptions>>().cloned() else {
        return ApiError::internal("the server is misconfigured").into_response();
    };
    let session = match super::catalog::session::session_token(request.headers()) {
        None => None,
        Some(token) => match host.designer_session(&tenant, &token) {
            Ok(session) => session,
            Err(e) => {
                tracing::warn!(tenant, error = %e, "a catalog session could not be read");
                return super::catalog::session::sessions_unreadable(&options, &tenant);
            }
        },
    };
    let session = session
        .filter(|s| decide(&host, Access::Catalog, Scope::Tenant, &tenant, None, true, Some(&s.principal)).is_ok());
    let Some(session) = session else {
        return super::catalog::session::sign_in_required(
            &options,
            &tenant,
            request.method(),
            request.uri(),
            request.headers(),
        );
    };
    if access.least_role().is_some_and(|least| session.principal.role < least) {
        return super::catalog::session::not_allowed(&options, &session);
    }
    if !matches!(*request.method(), Method::GET | Method::HEAD) {
        if super::pages::posted_from_elsewhere(request.headers(), &options.public_url) {
            tracing::warn!(tenant, "a catalog form posted from another site was refused");
            return super::catalog::session::forged_form(&options, &session);
        }
        let (parts, body) = request.into_parts();
        let Ok(bytes) = axum::body::to_bytes(body, options.max_request_bytes).await else {
            return ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "request_too_large",
                "the form is larger than this server accepts",
            )
            .into_response();
        };
        let token = form_urlencoded::parse(&bytes).find(|(k, _)| k == "form_token").map(|(_, v)| v.into_owned());
        let token = token.unwrap_or_default();
        if !super::pages::form_token_matches(&token, &session.form_token) {
            tracing::warn!(tenant, "a catalog form without its session's form token was refused");
            return super::catalog::session::forged_form(&options, &session);
        }
        request = Request::from_parts(parts, axum::body::Body::from(bytes));
    }
    request.extensions_mut().insert(Caller {
        tenant,
        tenant_root,
        principal: Some(session.principal.clone()),
        toolset: None,
    });
    request.extensions_mut().insert(session);
    next.run(request).await
}

/// The same decision for a caller [`authorize`] already let through with
/// a lower access (the MCP door decides per JSON-RPC method, once it has
/// read which). A caller without a principal presented no key: a bad key
/// is refused before.
pub fn refusal_for(
    host: &AppState,
    options: Option<&ApiOptions>,
    access: Access,
    scope: Scope,
    caller: &Caller,
) -> Option<Response> {
    let principal = caller.principal.as_ref();
    let toolset = caller.toolset.as_ref().map(|t| t.name.as_str());
    decide(host, access, scope, &caller.tenant, toolset, principal.is_some(), principal).err().map(|e| {
        let oauth = options.filter(|_| host.oauth_enabled(&caller.tenant)).map(|o| (o, OAuthRoot::of(caller)));
        refusal(e, principal.is_some(), oauth)
    })
}

/// A refusal, with the `WWW-Authenticate` challenge a `401` carries: at an
/// OAuth protected resource (`oauth`: its options and tenant), with where
/// its metadata is and the scope needed, on a `403` for a scope too.
fn refusal(error: ApiError, key_presented: bool, oauth: Option<(&ApiOptions, OAuthRoot<'_>)>) -> Response {
    let invalid = error.status() == StatusCode::UNAUTHORIZED && key_presented;
    let needed = error.fields().iter().find(|(k, _)| k == "scope").and_then(|(_, v)| v.as_str().map(str::to_string));
    let insufficient = error.code() == "insufficient_scope";
    let mut response = error.into_response();
    let challenge = match (response.status(), oauth) {
        (StatusCode::UNAUTHORIZED, Some((options, root))) => {
            let error = invalid.then_some("invalid_token");
            Some(super::links::challenge(options, root, error, &super::links::all_scopes()))
        }
        (StatusCode::UNAUTHORIZED, None) => {
            Some(if invalid { "Bearer error=\"invalid_token\"" } else { "Bearer" }.to_string())
        }
        (StatusCode::FORBIDDEN, Some((options, root))) if insufficient => {
            Some(super::links::challenge(options, root, Some("insufficient_scope"), needed.as_deref().unwrap_or("")))
        }
        _ => None,
    };
    if let Some(value) = challenge.and_then(|c| HeaderValue::from_str(&c).ok()) {
        response.headers_mut().insert(header::WWW_AUTHENTICATE, value);
    }
    response
}

/// The decision: see the module docs. `toolset` is the toolset whose root
/// the request came through, if any: a principal scoped to a toolset is
/// refused (`403 outside_toolset`) anywhere but that toolset's roots.
fn decide(
    host: &AppState,
    access: Access,
    scope: Scope,
    tenant: &str,
    toolset: Option<&str>,
    key_presented: bool,
    principal: Option<&Principal>,
) -> Result<(), ApiError> {
    let Some(least) = access.least_role() else { return Ok(()) };
    let Some(principal) = principal else {
        // A bad key is refused even where no key is needed: a client that
        // sends one expects it to count.
        let public = access == Access::Enumerate
            && !key_presented
            && host.tenant(tenant).is_some_and(|t| t.record.public_enumeration);
        return if public { Ok(()) } else { Err(unauthorized()) };
    };
    if scope == Scope::Tenant && (!principal.sees(tenant) || host.tenant(tenant).is_none()) {
        return Err(no_such_tenant(tenant));
    }
    if let Some(scoped) = &principal.toolset
        && toolset != Some(scoped.as_str())
    {
        let what = if principal.token.is_some() { "token was issued for" } else { "key is scoped to" };
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "outside_toolset",
            format!(
                "this {what} toolset `{scoped}`: it opens /t/{tenant}/toolsets/{scoped}/ (tools, otc, mcp) and nothing else"
            ),
        )
        .with("toolset", scoped.as_str()));
    }
    // A token carries what its scopes allow, and never more than a
    // consumer key.
    if let Some(token) = &principal.token {
        // Listing comes with calling: a token granted only `tools:call`
        // must still be able to open the session and find its tools.
        let (needed, granted) = match access {
            Access::Enumerate => ("tools:read", token.has("tools:read") || token.has("tools:call")),
            Access::Invoke => ("tools:call", token.has("tools:call")),
            _ => ("", false),
        };
        if !granted {
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "insufficient_scope",
                format!("this token was not granted the scope this needs (`{needed}`)"),
            )
            .with("scope", needed));
        }
    }
    if principal.role < least {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            format!("a {} key may not do this; it needs a {} key", principal.role.as_str(), least.as_str()),
        ));
    }
    Ok(())
}
