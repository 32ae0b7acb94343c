//! OAuth 2.1 for the MCP door (MCP authorization, 2025-11-25): each
//! tenant's MCP URL is a protected resource (RFC 9728 metadata, `401` with
//! `WWW-Authenticate: Bearer resource_metadata=…`), and each tenant's root
//! is an authorization server (RFC 8414 metadata; authorization code with
//! PKCE S256; Client ID Metadata Documents and RFC 7591 registration;
//! refresh with rotation; RFC 7009 revocation). The person signs in as one
//! of the tenant's end users on a page of the same templates and headers as
//! the confirmation pages. The grants themselves are the core's
//! (`host/oauth.rs`); docs/oauth.md is the user's view.
//!
//! | path | what |
//! | --- | --- |
//! | `/.well-known/oauth-protected-resource[/t/{tenant}]/mcp` | the MCP URL's resource metadata |
//! | `/.well-known/oauth-authorization-server[/t/{tenant}]` | the tenant's authorization server metadata |
//! | `{root}/oauth/authorize` | sign-in and consent (`GET` the page, `POST` its form) |
//! | `{root}/oauth/token`, `…/register`, `…/revoke` | the token, registration and revocation endpoints |

use super::links::{Root, issuer, mcp_resource, toolset_of_resource};
use super::pages::{self, Frame, Paragraph, Product, field, form};
use super::{ApiError, ApiOptions, AppState, Caller, schemas};
use crate::host::oauth::{self as core, Authorization, OAuthClient, OAuthError, SCOPES};
use askama::Template;
use axum::Extension;
use axum::body::Bytes;
use axum::extract::{ConnectInfo, Path, RawQuery, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

/// The sign-in form's double-submit token.
const SIGN_IN_TOKEN: pages::SignInToken = pages::SignInToken { cookie: "plinth_oauth_sign_in", field: "login_token" };

/// The authorization request's parameters the page carries in its form.
const CARRIED: [&str; 7] =
    ["response_type", "client_id", "redirect_uri", "state", "code_challenge", "code_challenge_method", "scope"];

fn resource_metadata(options: &ApiOptions, root: Root<'_>, authorization_server: &str) -> Value {
    json!({
        "resource": mcp_resource(options, root),
        "authorization_servers": [authorization_server],
        "scopes_supported": SCOPES.iter().map(|(s, _)| *s).collect::<Vec<_>>(),
        "bearer_methods_supported": ["header"],
        "resource_name": match root.toolset {
            None => format!("Plinth tools of {}", root.tenant),
            Some(toolset) => format!("Plinth toolset {toolset} of {}", root.tenant),
        },
    })
}

fn server_metadata(options: &ApiOptions, root: Root<'_>) -> Value {
    let issuer = issuer(options, root);
    json!({
        "issuer": issuer,
        "authorization_endpoint": format!("{issuer}/oauth/authorize"),
        "token_endpoint": format!("{issuer}/oauth/token"),
        "registration_endpoint": format!("{issuer}/oauth/register"),
        "revocation_endpoint": format!("{issuer}/oauth/revoke"),
        "scopes_supported": SCOPES.iter().map(|(s, _)| *s).collect::<Vec<_>>(),
        "response_types_supported": ["code"],
        "response_modes_supported": ["query"],
        "grant_types_supported": ["authorization_code", "refresh_token"],
        "token_endpoint_auth_methods_supported": ["none"],
        "revocation_endpoint_auth_methods_supported": ["none"],
        "code_challenge_methods_supported": ["S256"],
        "client_id_metadata_document_supported": true,
        "authorization_response_iss_parameter_supported": true,
    })
}

/// A JSON answer that is never cached.
fn no_store(status: StatusCode, body: Value) -> Response {
    let mut response = (status, axum::Json(body)).into_response();
    response.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response.headers_mut().insert(header::PRAGMA, HeaderValue::from_static("no-cache"));
    response
}

/// An OAuth error answer (RFC 6749 §5.2).
fn oauth_error(e: &OAuthError) -> Response {
    let status = match e.code {
        _ if e.retry_after.is_some() => StatusCode::TOO_MANY_REQUESTS,
        "invalid_client" => StatusCode::UNAUTHORIZED,
        "temporarily_unavailable" => StatusCode::SERVICE_UNAVAILABLE,
        _ => StatusCode::BAD_REQUEST,
    };
    let mut response = no_store(status, json!({ "error": e.code, "error_description": e.description }));
    if let Some(secs) = e.retry_after.or((status == StatusCode::SERVICE_UNAVAILABLE).then_some(1)) {
        response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(secs));
    }
    response
}

/// The answer for a tenant without a built-in authorization server (its
/// operator turned OAuth off, or it uses an external identity provider; a
/// tenant that does not exist answers as one with the defaults, which has
/// one): the same as an unknown path.
fn no_authorization_server(tenant: &str) -> Response {
    ApiError::not_found(format!("tenant `{tenant}` has no OAuth authorization server here")).into_response()
}

/// `GET /.well-known/oauth-protected-resource` (under a tenant's root too:
/// `/t/{tenant}/.well-known/…`).
#[utoipa::path(get, summary = "The MCP URL's protected resource metadata (RFC 9728)", description = "Where clients of the MCP door get their tokens: the tenant's authorization server, and the scopes. The same document is served at the RFC 9728 location `/.well-known/oauth-protected-resource/t/{tenant}/mcp` (`/.well-known/oauth-protected-resource/mcp` for the default tenant).", path = "/.well-known/oauth-protected-resource", tag = "OAuth", operation_id = "resource_metadata",
    responses(
        (status = 200, description = "The metadata", body = Value),
        (status = 404, description = "Its operator turned the tenant's OAuth off (a tenant that does not exist answers as one with the defaults: the metadata)", body = schemas::ErrorBody),
    ))]
pub(super) async fn resource_metadata_here(
    State(host): State<AppState>,
    Extension(caller): Extension<Caller>,
    Extension(options): Extension<Arc<ApiOptions>>,
) -> Response {
    resource_metadata_of(&host, &options, Root::of(&caller))
}

/// `GET /.well-known/oauth-protected-resource/mcp`: the default tenant's,
/// where RFC 9728 puts it.
#[utoipa::path(get, summary = "The default tenant's MCP URL's protected resource metadata (RFC 9728)", description = "As `/.well-known/oauth-protected-resource`, at the location RFC 9728 derives from the MCP URL `/mcp`.", path = "/.well-known/oauth-protected-resource/mcp", tag = "OAuth", operation_id = "default_resource_metadata",
    responses(
        (status = 200, description = "The metadata", body = Value),
        (status = 404, description = "The default tenant has no authorization server", body = schemas::ErrorBody),
    ))]
pub(super) async fn default_resource_metadata(
    State(host): State<AppState>,
    Extension(options): Extension<Arc<ApiOptions>>,
) -> Response {
    resource_metadata_of(
        &host,
        &options,
        Root { tenant: crate::tenancy::DEFAULT_TENANT, explicit: false, toolset: None },
    )
}

/// `GET /.well-known/oauth-protected-resource/t/{tenant}/mcp`.
#[utoipa::path(get, summary = "A tenant's MCP URL's protected resource metadata (RFC 9728)", description = "As `/.well-known/oauth-protected-resource`, at the location RFC 9728 derives from the MCP URL `/t/{tenant}/mcp`.", path = "/.well-known/oauth-protected-resource/t/{tenant}/mcp", tag = "OAuth", operation_id = "tenant_resource_metadata",
    params(("tenant" = String, Path, description = "The tenant")),
    responses(
        (status = 200, description = "The metadata", body = Value),
        (status = 404, description = "The tenant's operator turned its OAuth off, or `{tenant}` cannot name a tenant (one that does not exist answers as one with the defaults: the metadata)", body = schemas::ErrorBody),
    ))]
pub(super) async fn tenant_resource_metadata(
    State(host): State<AppState>,
    Extension(options): Extension<Arc<ApiOptions>>,
    Path(tenant): Path<String>,
) -> Response {
    // A segment that cannot name a tenant is no resource (it says nothing
    // of which tenants exist).
    if !crate::tenancy::is_tenant_name(&tenant) {
        return super::no_such_endpoint().into_response();
    }
    // `/t/default/mcp`'s metadata is under `/t/default` too.
    resource_metadata_of(&host, &options, Root::of_tenant(&tenant))
}

/// `GET /.well-known/oauth-protected-resource/t/{tenant}/toolsets/{name}/mcp`:
/// a toolset's MCP URL's, where RFC 9728 puts it (docs/toolsets.md).
#[utoipa::path(get, summary = "A toolset's MCP URL's protected resource metadata (RFC 9728)", description = "As `/.well-known/oauth-protected-resource`, for the toolset's MCP URL `/t/{tenant}/toolsets/{name}/mcp`: a token issued for it (`resource`, RFC 8707) opens that toolset only.", path = "/.well-known/oauth-protected-resource/t/{tenant}/toolsets/{name}/mcp", tag = "OAuth", operation_id = "toolset_resource_metadata",
    params(("tenant" = String, Path, description = "The tenant"), ("name" = String, Path, description = "The toolset")),
    responses(
        (status = 200, description = "The metadata", body = Value),
        (status = 404, description = "`not_found`: OAuth is off for the tenant, or the path cannot name a tenant or a toolset (a tenant or toolset that does not exist answers as one that does: the metadata)", body = schemas::ErrorBody),
    ))]
pub(super) async fn toolset_resource_metadata(
    State(host): State<AppState>,
    Extension(options): Extension<Arc<ApiOptions>>,
    Path((tenant, name)): Path<(String, String)>,
) -> Response {
    // Not looked up: the metadata of a toolset that does not exist is a
    // toolset's like any other, so that it tells a stranger nothing
    // (docs/security.md). A name no toolset may have is no resource.
    if !crate::host::toolsets::is_toolset_name(&name) || !crate::tenancy::is_tenant_name(&tenant) {
        return super::no_such_endpoint().into_response();
    }
    let root = Root { tenant: &tenant, explicit: true, toolset: Some(&name) };
    resource_metadata_of(&host, &options, root)
}

fn resource_metadata_of(host: &AppState, options: &ApiOptions, root: Root<'_>) -> Response {
    if !host.oauth_enabled(root.tenant) {
        return no_authorization_server(root.tenant);
    }
    // The tenant's identity provider when it names one, else its own.
    let server = host.oauth_setting(root.tenant).issuer.unwrap_or_else(|| issuer(options, root));
    no_store(StatusCode::OK, resource_metadata(options, root, &server))
}

/// `GET /.well-known/oauth-authorization-server` (under a tenant's root
/// too).
#[utoipa::path(get, summary = "The tenant's authorization server metadata (RFC 8414)", description = "Its endpoints and what it supports: the authorization code grant with PKCE S256, public clients, Client ID Metadata Documents, dynamic registration, refresh, revocation. Also served at the RFC 8414 location `/.well-known/oauth-authorization-server/t/{tenant}`.", path = "/.well-known/oauth-authorization-server", tag = "OAuth", operation_id = "server_metadata",
    responses(
        (status = 200, description = "The metadata", body = Value),
        (status = 404, description = "The tenant has no built-in authorization server (its operator turned OAuth off or named an identity provider; a tenant that does not exist answers as one with the defaults)", body = schemas::ErrorBody),
    ))]
pub(super) async fn server_metadata_here(
    State(host): State<AppState>,
    Extension(caller): Extension<Caller>,
    Extension(options): Extension<Arc<ApiOptions>>,
) -> Response {
    server_metadata_of(&host, &options, Root::of(&caller))
}

/// `GET /.well-known/oauth-authorization-server/t/{tenant}`.
#[utoipa::path(get, summary = "A tenant's authorization server metadata (RFC 8414)", description = "As `/.well-known/oauth-authorization-server`, at the location RFC 8414 derives from the issuer `/t/{tenant}`.", path = "/.well-known/oauth-authorization-server/t/{tenant}", tag = "OAuth", operation_id = "tenant_server_metadata",
    params(("tenant" = String, Path, description = "The tenant")),
    responses(
        (status = 200, description = "The metadata", body = Value),
        (status = 404, description = "The tenant has no built-in authorization server (its operator turned OAuth off or named an identity provider), or `{tenant}` cannot name a tenant (one that does not exist answers as one with the defaults: the metadata)", body = schemas::ErrorBody),
    ))]
pub(super) async fn tenant_server_metadata(
    State(host): State<AppState>,
    Extension(options): Extension<Arc<ApiOptions>>,
    Path(tenant): Path<String>,
) -> Response {
    if !crate::tenancy::is_tenant_name(&tenant) {
        return super::no_such_endpoint().into_response();
    }
    server_metadata_of(&host, &options, Root::of_tenant(&tenant))
}

fn server_metadata_of(host: &AppState, options: &ApiOptions, root: Root<'_>) -> Response {
    if !host.builtin_oauth(root.tenant) {
        return no_authorization_server(root.tenant);
    }
    no_store(StatusCode::OK, server_metadata(options, root))
}

/// The sign-in and consent page.
#[derive(Template)]
#[template(path = "pages/oauth_authorize.html")]
struct AuthorizePage {
    frame: Frame,
    problem: Option<String>,
    client_name: String,
    client_id: String,
    metadata_document: bool,
    tenant: String,
    scopes: Vec<(&'static str, &'static str)>,
    redirect_uri: String,
    action: String,
    hidden: Vec<(&'static str, String)>,
    token: String,
}

/// An authorization request checked: its client, where to send the answer,
/// and what it asks.
struct Checked {
    client: OAuthClient,
    asked: Authorization,
    state: Option<String>,
}

/// Why an authorization request is not shown: a page saying so, never a
/// redirect. Anyone may register a client whose redirect URI is their own
/// site, so a redirect with the error before the person did anything would
/// make this server an open redirector (RFC 9700 §4.11.2); the client's
/// redirect URI is used only once the person has answered.
struct Refused(StatusCode, String);

fn sign_in_notice(options: &ApiOptions, status: StatusCode, title: &str, said: String) -> Response {
    pages::notice(status, Frame::new(&options.public_url, Product::SignIn, title), vec![Paragraph::of(said)])
}

/// `redirect_uri` with `params` added to its query.
fn with_query(redirect_uri: &str, params: &[(&str, &str)]) -> String {
    let Ok(mut url) = reqwest::Url::parse(redirect_uri) else { return redirect_uri.to_string() };
    {
        let mut query = url.query_pairs_mut();
        for (k, v) in params {
            query.append_pair(k, v);
        }
    }
    url.to_string()
}

/// A redirect to the client with `params`, `state` and `iss` (RFC 9207).
fn back_to_client(
    options: &ApiOptions,
    root: Root<'_>,
    checked_uri: &str,
    state: Option<&str>,
    params: &[(&str, &str)],
) -> Response {
    let issuer = issuer(options, root);
    let mut all: Vec<(&str, &str)> = params.to_vec();
    if let Some(state) = state {
        all.push(("state", state));
    }
    all.push(("iss", &issuer));
    pages::see_other(&with_query(checked_uri, &all), &[])
}

/// Checks an authorization request's fields (from the query or the form).
async fn check_request(
    host: &AppState,
    options: &ApiOptions,
    root: Root<'_>,
    fields: &[(String, String)],
    from: IpAddr,
) -> Result<Checked, Refused> {
    let tenant = root.tenant;
    let one = |name: &str| field(fields, name).filter(|v| !v.is_empty());
    let client_id = one("client_id")
        .ok_or_else(|| Refused(StatusCode::BAD_REQUEST, "The request names no client (`client_id`).".into()))?;
    let client = host
        .oauth_client(tenant, client_id, from)
        .await
        .map_err(|e| Refused(StatusCode::BAD_REQUEST, format!("The client cannot be used: {}.", e.description)))?;
    let redirect_uri = match one("redirect_uri") {
        Some(uri) => uri.to_string(),
        None if client.redirect_uris.len() == 1 => client.redirect_uris[0].clone(),
        None => return Err(Refused(StatusCode::BAD_REQUEST, "The request names no `redirect_uri`.".into())),
    };
    if !core::redirect_matches(&client.redirect_uris, &redirect_uri) {
        return Err(Refused(
            StatusCode::BAD_REQUEST,
            "The address this request would send you back to is not one the client registered; nothing was sent there."
                .into(),
        ));
    }
    let state = one("state").map(str::to_string);
    let refuse = |code: &str, description: &str| {
        Refused(StatusCode::BAD_REQUEST, format!("The application's request cannot be served ({code}): {description}."))
    };
    if one("response_type") != Some("code") {
        return Err(refuse("unsupported_response_type", "only response_type=code is supported"));
    }
    let Some(challenge) = one("code_challenge") else {
        return Err(refuse("invalid_request", "PKCE is required: send code_challenge (S256)"));
    };
    if one("code_challenge_method") != Some("S256") || challenge.len() != 43 {
        return Err(refuse("invalid_request", "code_challenge_method must be S256, with its 43-character challenge"));
    }
    let scopes = core::requested_scopes(one("scope"));
    // The tenant's MCP URL, or one of its toolsets' (RFC 8707): a token
    // for a toolset's opens that toolset only.
    let mut resource = mcp_resource(options, root);
    for (_, asked) in fields.iter().filter(|(k, _)| k == "resource") {
        // Toolsets are served under `/t/{tenant}/` only: the bare root's
        // authorization server issues nothing for a toolset URL it does
        // not serve.
        // Whether the toolset exists is not said here, to a stranger: only
        // once an end user signed in (`authorize`).
        let toolset = toolset_of_resource(options, root, asked).filter(|_| root.explicit);
        match toolset {
            _ if *asked == mcp_resource(options, root) => {}
            Some(_) if *asked == resource || resource == mcp_resource(options, root) => resource = asked.clone(),
            _ => {
                return Err(refuse(
                    "invalid_target",
                    "this authorization server issues tokens for its tenant's MCP URL and its toolsets' MCP URLs only",
                ));
            }
        }
    }
    let asked = Authorization {
        client_id: client.client_id.clone(),
        redirect_uri_given: one("redirect_uri").is_some(),
        redirect_uri,
        code_challenge: challenge.to_string(),
        scopes,
        resource,
    };
    Ok(Checked { client, asked, state })
}

fn authorize_page(
    options: &ApiOptions,
    root: Root<'_>,
    headers: &HeaderMap,
    fields: &[(String, String)],
    checked: &Checked,
    problem: Option<String>,
    status: StatusCode,
) -> Response {
    let tenant = root.tenant;
    let action = format!("{}/oauth/authorize", issuer(options, root));
    let mut hidden: Vec<(&'static str, String)> =
        CARRIED.iter().filter_map(|name| field(fields, name).map(|v| (*name, v.to_string()))).collect();
    hidden.extend(fields.iter().filter(|(k, _)| k == "resource").map(|(_, v)| ("resource", v.clone())));
    let token = SIGN_IN_TOKEN.for_page(headers);
    let scopes = SCOPES.iter().filter(|(s, _)| checked.asked.scopes.iter().any(|a| a == s)).copied().collect();
    let page = AuthorizePage {
        frame: Frame::new(&options.public_url, Product::SignIn, format!("Allow {}?", checked.client.name)),
        problem,
        client_name: checked.client.name.clone(),
        client_id: checked.client.client_id.clone(),
        metadata_document: checked.client.metadata_document,
        tenant: tenant.to_string(),
        scopes,
        redirect_uri: checked.asked.redirect_uri.clone(),
        action,
        hidden,
        token: token.clone(),
    };
    let action_path = format!("{}/oauth/authorize", root.path(options));
    let page = pages::page_posting_to(status, &page, &checked.asked.redirect_uri);
    SIGN_IN_TOKEN.set(page, &options.public_url, token, action_path)
}

/// `GET oauth/authorize`: the sign-in and consent page.
#[utoipa::path(get, summary = "Sign-in and consent (the authorization endpoint)", description = "An authorization code request (OAuth 2.1: `response_type=code`, PKCE S256 required). Shows the person the client (its name from its registration or metadata document), the tenant and the scopes, and a form to sign in as one of the tenant's end users and allow or deny. A request that cannot be served is answered with a page, never a redirect: the client's redirect URI is used only once the person has answered.", path = "/oauth/authorize", tag = "OAuth", operation_id = "authorize_page",
    params(
        ("response_type" = Option<String>, Query, description = "`code`"),
        ("client_id" = Option<String>, Query, description = "A registered client's id, or the URL of the client's metadata document"),
        ("redirect_uri" = Option<String>, Query, description = "One of the client's redirect URIs (a loopback one with any port)"),
        ("state" = Option<String>, Query, description = "Returned to the client as is"),
        ("code_challenge" = Option<String>, Query, description = "The PKCE S256 challenge"),
        ("code_challenge_method" = Option<String>, Query, description = "`S256`"),
        ("scope" = Option<String>, Query, description = "`tools:read`, `tools:call` (both when absent)"),
        ("resource" = Option<String>, Query, description = "The tenant's MCP URL (RFC 8707)"),
    ),
    responses(
        (status = 200, description = "The sign-in and consent page", content_type = "text/html", body = String),
        (status = 400, description = "A request that cannot be served (no usable client or redirect URI, no PKCE, an unknown scope, another resource): a page saying so, never a redirect", content_type = "text/html", body = String),
        (status = 404, description = "The tenant has no built-in authorization server (its operator turned OAuth off or named an identity provider; a tenant that does not exist answers as one with the defaults)", body = schemas::ErrorBody),
    ))]
pub(super) async fn authorize_form(
    State(host): State<AppState>,
    Extension(caller): Extension<Caller>,
    Extension(options): Extension<Arc<ApiOptions>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Response {
    let tenant = &caller.tenant;
    if !host.builtin_oauth(tenant) {
        return no_authorization_server(tenant);
    }
    let fields = form(query.unwrap_or_default().as_bytes());
    let root = Root::of(&caller);
    let checked = match check_request(&host, &options, root, &fields, peer.ip()).await {
        Ok(checked) => checked,
        Err(Refused(status, said)) => return sign_in_notice(&options, status, "Cannot sign in", said),
    };
    // The page does not say whether the tenant has accounts (nor whether it
    // exists): a stranger learns nothing from it (docs/security.md).
    authorize_page(&options, root, &headers, &fields, &checked, None, StatusCode::OK)
}

/// `POST oauth/authorize`: the page's form. Signs the end user in (the
/// same throttles as the confirmation page) and, when they allow, sends
/// the browser back to the client with a code.
#[utoipa::path(post, summary = "Signs in and answers the client (the authorization endpoint's form)", description = "The sign-in and consent form: the authorization request's fields, the end user's name and password, `decision` (`allow` or `deny`) and the page's `login_token` (its cookie holds it too). Failed sign-ins are throttled like the confirmation page's.", path = "/oauth/authorize", tag = "OAuth", operation_id = "authorize",
    request_body(content = schemas::AuthorizeForm, content_type = "application/x-www-form-urlencoded"),
    responses(
        (status = 303, description = "Back to the client: with `code` (allowed) or `error=access_denied`", headers(("Location" = String, description = "The client's redirect URI"))),
        (status = 400, description = "No usable client or redirect URI", content_type = "text/html", body = String),
        (status = 401, description = "Wrong user name or password: the page again (`Plinth-Error-Code: login_failed`)", content_type = "text/html", body = String),
        (status = 403, description = "Not posted from the page in this browser", content_type = "text/html", body = String),
        (status = 404, description = "The tenant has no built-in authorization server (its operator turned OAuth off or named an identity provider; a tenant that does not exist answers as one with the defaults)", body = schemas::ErrorBody),
        (status = 429, description = "Too many failed sign-ins (`login_locked`)", content_type = "text/html", body = String, headers(("Retry-After" = u64, description = "Seconds"))),
        (status = 503, description = "The sign-in cannot be checked now", content_type = "text/html", body = String, headers(("Retry-After" = u64, description = "Seconds"))),
    ))]
pub(super) async fn authorize(
    State(host): State<AppState>,
    Extension(caller): Extension<Caller>,
    Extension(options): Extension<Arc<ApiOptions>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let tenant = &caller.tenant;
    if !host.builtin_oauth(tenant) {
        return no_authorization_server(tenant);
    }
    let fields = form(&body);
    // Another site's form would sign this browser in (login CSRF) or make
    // it consent: only the page itself, in this browser, may post.
    if !SIGN_IN_TOKEN.posted_by_its_page(&headers, &fields, &options.public_url) {
        tracing::warn!(tenant, client = %peer.ip(), "an OAuth sign-in not from its page was refused");
        let said = "This sign-in did not come from its page (it was sent from another site, or the page expired). Start again from the application.".to_string();
        return sign_in_notice(&options, StatusCode::FORBIDDEN, "Not signed in", said);
    }
    let root = Root::of(&caller);
    let checked = match check_request(&host, &options, root, &fields, peer.ip()).await {
        Ok(checked) => checked,
        Err(Refused(status, said)) => return sign_in_notice(&options, status, "Cannot sign in", said),
    };
    let back = |params: &[(&str, &str)]| {
        back_to_client(&options, root, &checked.asked.redirect_uri, checked.state.as_deref(), params)
    };
    if field(&fields, "decision") != Some("allow") {
        return back(&[("error", "access_denied"), ("error_description", "the person denied the request")]);
    }
    let user = field(&fields, "user").unwrap_or("");
    let password = field(&fields, "password").unwrap_or("");
    if let Err(e) = host.log_in_end_user(tenant, user, password, peer.ip()).await {
        tracing::info!(tenant, client = %peer.ip(), error = %e, "an OAuth sign-in failed");
        let problem = pages::login_problem(&e, "sign-in");
        let error = ApiError::from(e);
        let page = authorize_page(&options, root, &headers, &fields, &checked, Some(problem), error.status());
        return error.onto(page);
    }
    // The toolset a token is asked for must exist: said only now, to one
    // of the tenant's end users.
    let asked_toolset = toolset_of_resource(&options, Root { toolset: None, ..root }, &checked.asked.resource);
    if asked_toolset.is_some_and(|toolset| host.toolset(tenant, toolset, None).is_none()) {
        return back(&[("error", "invalid_target"), ("error_description", "this tenant has no such toolset")]);
    }
    match host.issue_code(tenant, user, &checked.asked) {
        Ok(code) => {
            tracing::info!(tenant, client = %checked.client.client_id, "an end user allowed an OAuth client");
            back(&[("code", &code)])
        }
        Err(e) => back(&[("error", "temporarily_unavailable"), ("error_description", &e.description)]),
    }
}

/// `POST oauth/token`.
#[utoipa::path(post, summary = "The token endpoint", description = "`grant_type=authorization_code` (with `code`, `redirect_uri`, `client_id`, `code_verifier`, optionally `resource`) or `grant_type=refresh_token` (with `refresh_token`, `client_id`, optionally `scope` and `resource`). Public clients only: no client secret. A refresh token is used once (the one just replaced may be presented again within 30 s, until its successor is used); presenting a used one again past that revokes its grant. Rated per client address and per grant.", path = "/oauth/token", tag = "OAuth", operation_id = "token",
    request_body(content = schemas::TokenForm, content_type = "application/x-www-form-urlencoded"),
    responses(
        (status = 200, description = "The tokens", body = Value),
        (status = 400, description = "An OAuth error (`invalid_request`, `invalid_grant`, `unsupported_grant_type`, `invalid_scope`, `invalid_target`)", body = Value),
        (status = 401, description = "`invalid_client` (a registered client whose registration is gone: register again)", body = Value),
        (status = 404, description = "The tenant has no built-in authorization server (its operator turned OAuth off or named an identity provider; a tenant that does not exist answers as one with the defaults)", body = schemas::ErrorBody),
        (status = 429, description = "`temporarily_unavailable`: too many token requests from this address, or refreshes of this grant", body = Value, headers(("Retry-After" = u64, description = "Seconds"))),
        (status = 503, description = "`temporarily_unavailable`", body = Value, headers(("Retry-After" = u64, description = "Seconds"))),
    ))]
pub(super) async fn token(
    State(host): State<AppState>,
    Extension(caller): Extension<Caller>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    body: Bytes,
) -> Response {
    let tenant = &caller.tenant;
    if !host.builtin_oauth(tenant) {
        return no_authorization_server(tenant);
    }
    if let Err(e) = host.admit_token_request(peer.ip()) {
        return oauth_error(&e);
    }
    let fields = form(&body);
    let one = |name: &str| field(&fields, name).filter(|v| !v.is_empty());
    let missing = |name: &str| oauth_error(&OAuthError::new("invalid_request", format!("`{name}` is required")));
    let Some(client_id) = one("client_id") else { return missing("client_id") };
    let resource = one("resource");
    let issued = match one("grant_type") {
        Some("authorization_code") => {
            let (Some(code), Some(verifier)) = (one("code"), one("code_verifier")) else {
                return missing("code and code_verifier");
            };
            host.exchange_code(tenant, code, client_id, one("redirect_uri"), verifier, resource)
        }
        Some("refresh_token") => {
            let Some(refresh_token) = one("refresh_token") else { return missing("refresh_token") };
            host.refresh_tokens(tenant, refresh_token, client_id, one("scope"), resource)
        }
        Some(_) => Err(OAuthError::new("unsupported_grant_type", "authorization_code and refresh_token only")),
        None => return missing("grant_type"),
    };
    match issued {
        Ok(tokens) => no_store(StatusCode::OK, tokens.to_json()),
        Err(e) => {
            tracing::info!(tenant, error = e.code, "a token request was refused");
            oauth_error(&e)
        }
    }
}

/// `POST oauth/register`.
#[utoipa::path(post, summary = "Dynamic client registration (RFC 7591)", description = "Registers a public client from its metadata (`redirect_uris`, `client_name`; `token_endpoint_auth_method` `none` if given). A tenant keeps a bounded number of registered clients (when full, its oldest client never used makes room), and one address registers a few at a time; clients that publish a Client ID Metadata Document need no registration.", path = "/oauth/register", tag = "OAuth", operation_id = "register",
    request_body(content = Value, content_type = "application/json"),
    responses(
        (status = 201, description = "The client's id and its metadata", body = Value),
        (status = 400, description = "`invalid_client_metadata`, `invalid_redirect_uri`", body = Value),
        (status = 404, description = "The tenant has no built-in authorization server (its operator turned OAuth off or named an identity provider; a tenant that does not exist answers as one with the defaults)", body = schemas::ErrorBody),
        (status = 429, description = "`temporarily_unavailable`: too many registrations from this address", body = Value, headers(("Retry-After" = u64, description = "Seconds"))),
        (status = 503, description = "`temporarily_unavailable` (the tenant keeps as many clients in use as it may)", body = Value, headers(("Retry-After" = u64, description = "Seconds"))),
    ))]
pub(super) async fn register(
    State(host): State<AppState>,
    Extension(caller): Extension<Caller>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    body: Bytes,
) -> Response {
    let tenant = &caller.tenant;
    if !host.builtin_oauth(tenant) {
        return no_authorization_server(tenant);
    }
    let Ok(metadata) = serde_json::from_slice::<Value>(&body) else {
        return oauth_error(&OAuthError::new("invalid_client_metadata", "the body must be a JSON object"));
    };
    match host.register_oauth_client(tenant, &metadata, peer.ip()) {
        Ok(registered) => no_store(StatusCode::CREATED, registered),
        Err(e) => oauth_error(&e),
    }
}

/// `POST oauth/revoke`.
#[utoipa::path(post, summary = "Token revocation (RFC 7009)", description = "Revokes `token` (a refresh token with every token of its grant, an access token alone) of the client `client_id`. Answers `200` whether or not the token was known.", path = "/oauth/revoke", tag = "OAuth", operation_id = "revoke",
    request_body(content = schemas::RevokeForm, content_type = "application/x-www-form-urlencoded"),
    responses(
        (status = 200, description = "Revoked, or there was nothing to revoke"),
        (status = 400, description = "`invalid_request`", body = Value),
        (status = 404, description = "The tenant has no built-in authorization server (its operator turned OAuth off or named an identity provider; a tenant that does not exist answers as one with the defaults)", body = schemas::ErrorBody),
        (status = 503, description = "`temporarily_unavailable`", body = Value, headers(("Retry-After" = u64, description = "Seconds"))),
    ))]
pub(super) async fn revoke(
    State(host): State<AppState>,
    Extension(caller): Extension<Caller>,
    body: Bytes,
) -> Response {
    let tenant = &caller.tenant;
    if !host.builtin_oauth(tenant) {
        return no_authorization_server(tenant);
    }
    let fields = form(&body);
    let (Some(token), Some(client_id)) = (field(&fields, "token"), field(&fields, "client_id")) else {
        return oauth_error(&OAuthError::new("invalid_request", "`token` and `client_id` are required"));
    };
    match host.revoke_token(tenant, token, client_id) {
        Ok(()) => no_store(StatusCode::OK, json!({})),
        Err(e) => oauth_error(&e),
    }
}

/// `PUT /admin/tenants/{tenant}/oauth`: an operator turns a tenant's
/// authorization server on or off.
#[utoipa::path(put, summary = "How a tenant's MCP URL takes OAuth tokens", description = "`{\"enabled\": false}` turns OAuth off: its metadata answers 404, its tokens stop working, and clients use keys. `{\"issuer\": \"https://idp.example\"}` accepts that identity provider's JWT access tokens for the MCP URL instead of the built-in server's (its end user in `endUserClaim`, default `sub`, which must name one of the tenant's end users unless `anyEndUser` is `true`; its scopes in `scopeClaim`, default `scope`), and the resource metadata names it. The built-in server is the default. Audited.", path = "/admin/tenants/{tenant}/oauth", tag = "Admin", operation_id = "put_tenant_oauth",
    params(("tenant" = String, Path, description = "The tenant")),
    request_body(content = core::OAuthSetting, content_type = "application/json"),
    responses(
        (status = 200, description = "The setting as it now is", body = core::OAuthSetting),
        (status = 400, description = "`invalid_request`", body = schemas::ErrorBody),
        (status = 404, description = "No such tenant", body = schemas::ErrorBody),
    ))]
pub(super) async fn put_tenant_oauth(
    State(host): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(tenant): Path<String>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let setting: core::OAuthSetting = serde_json::from_slice(&body).map_err(|e| {
        ApiError::bad_request(
            "invalid_request",
            format!("expected {{\"enabled\", \"issuer\", \"endUserClaim\", \"scopeClaim\", \"anyEndUser\"}}: {e}"),
        )
    })?;
    host.set_oauth(caller.principal()?, &tenant, setting.clone())?;
    Ok(axum::Json(setting).into_response())
}

/// The OAuth endpoints's operations, merged into the OpenAPI document
/// (`openapi.rs`).
#[derive(utoipa::OpenApi)]
#[openapi(paths(
    resource_metadata_here,
    default_resource_metadata,
    tenant_resource_metadata,
    toolset_resource_metadata,
    server_metadata_here,
    tenant_server_metadata,
    authorize_form,
    authorize,
    token,
    register,
    revoke,
    put_tenant_oauth,
))]
pub(super) struct Doc;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::links::{challenge, resource_metadata_url};

    #[test]
    fn every_url_of_a_tenant_stays_under_the_root_the_client_used() {
        let options = ApiOptions::default();
        let base = &options.public_url;
        let bare = Root { tenant: "default", explicit: false, toolset: None };
        assert_eq!(mcp_resource(&options, bare), format!("{base}/mcp"));
        assert_eq!(issuer(&options, bare), *base);
        assert_eq!(resource_metadata_url(&options, bare), format!("{base}/.well-known/oauth-protected-resource/mcp"));
        let under_t = Root::of_tenant("default");
        assert_eq!(mcp_resource(&options, under_t), format!("{base}/t/default/mcp"));
        assert_eq!(issuer(&options, under_t), format!("{base}/t/default"));
        assert_eq!(
            resource_metadata_url(&options, under_t),
            format!("{base}/.well-known/oauth-protected-resource/t/default/mcp")
        );
        assert_eq!(server_metadata(&options, under_t)["token_endpoint"], format!("{base}/t/default/oauth/token"));
        assert_eq!(under_t.path(&options), "/t/default");
        // Any other tenant has only its `/t/` root.
        assert_eq!(issuer(&options, Root { tenant: "acme", explicit: false, toolset: None }), format!("{base}/t/acme"));
    }

    #[test]
    fn a_challenge_names_the_metadata_and_the_scope() {
        let options = ApiOptions::default();
        assert_eq!(
            challenge(&options, Root::of_tenant("acme"), Some("insufficient_scope"), "tools:call"),
            "Bearer error=\"insufficient_scope\", scope=\"tools:call\", resource_metadata=\"http://127.0.0.1:8080/.well-known/oauth-protected-resource/t/acme/mcp\""
        );
    }
}
