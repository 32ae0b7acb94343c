//! The person's pages of end-user authorization (docs/authorization.md):
//! the link a challenge gives them, the provider's redirect back, their
//! connected accounts; and the status the agent polls. The decisions are
//! the core's (`host/authorizations.rs`); these pages log the person in
//! with the confirmation page's login (`login.rs`: one session, the same
//! form checks) and show what the core says, every value escaped.
//!
//! Under every platform root:
//!
//! | path | who | what |
//! | --- | --- | --- |
//! | `GET connections/{link}` | the person (logged in as the link's end user) | who asks, for which account and scopes; **Continue** |
//! | `POST connections/{link}` | the same, with the page's form token | `303` to the provider's authorization request |
//! | `GET connections/callback` | the provider's redirect, in the person's browser | the code taken once, the grant stored; "Connected" |
//! | `GET connections/{link}/status` | a consumer key of the tenant (the agent) | `{"state": "pending"\|"connected"\|"failed", …}` |
//! | `GET connections` | the person | their connected accounts, each with **Revoke** |
//! | `POST connections/{provider}/revoke` | the same, with the page's form token | revoked (at the provider too) |
//!
//! The session cookie is `SameSite=Strict`, which a browser does not send
//! with the provider's redirect back (a navigation from another site). So
//! **Continue** also sets a cookie of its own, `SameSite=Lax`, sent to the
//! callback's path only, holding the same session for as long as a link
//! lasts: the callback knows whose browser came back, and a callback in a
//! browser without that person's session takes nothing.

use super::links::root;
use super::login::{self, FormRefusal, Next};
use super::pages::{self, Frame, Paragraph, Product, form};
use super::{Access, ApiError, ApiOptions, AppState, Caller, Routes, Scope, schemas};
use crate::host::authorizations::{AuthorizationError, CallbackQuery, LINK_TTL, LinkView};
use crate::host::{PageSession, rfc3339};
use crate::store::authorizations::LinkState;
use crate::tenancy::Principal;
use askama::Template;
use axum::Extension;
use axum::extract::{DefaultBodyLimit, FromRequest, Path, RawQuery, Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::json;
use std::sync::Arc;

/// The cookie that carries the person's session to the callback.
const CALLBACK_COOKIE: &str = "plinth_connection";
/// The longest callback query read: a provider's `code`, `state` and
/// `iss` fit many times over.
pub const MAX_CALLBACK_QUERY_BYTES: usize = 8 * 1024;
/// The forms' bodies (a form token, nothing else).
const MAX_FORM_BYTES: usize = 16 * 1024;

/// The routes of the person's pages and of the agent's status.
pub(super) fn routes(routes: Routes) -> Routes {
    use Access::{Invoke, Open};
    use Scope::Tenant;
    let limit = DefaultBodyLimit::max(MAX_FORM_BYTES);
    routes
        .add(Method::GET, "/connections", Open, Tenant, get(accounts))
        .add(Method::GET, "/connections/callback", Open, Tenant, get(callback))
        .add(Method::GET, "/connections/{link}", Open, Tenant, get(link_page))
        .add(Method::POST, "/connections/{link}", Open, Tenant, post(follow).layer(limit))
        .add(Method::GET, "/connections/{link}/status", Invoke, Tenant, get(status))
        .add(Method::POST, "/connections/{provider}/revoke", Open, Tenant, post(revoke).layer(limit))
}

fn notice(options: &ApiOptions, status: StatusCode, title: &str, paragraphs: Vec<Paragraph>) -> Response {
    pages::notice(status, Frame::new(&options.public_url, Product::Accounts, title), paragraphs)
}

/// A core refusal as a page: its status, message, code (`Plinth-Error-Code`)
/// and `Retry-After`, as the one error mapping (`error.rs`) makes them.
fn refused(options: &ApiOptions, title: &str, e: AuthorizationError) -> Response {
    let message = e.to_string();
    let error = ApiError::from(e);
    error.onto(notice(options, StatusCode::OK, title, vec![Paragraph::of(message).id("problem")]))
}

/// A refused form of these pages.
fn form_refused(options: &ApiOptions, refusal: FormRefusal) -> Response {
    let said = match refusal {
        FormRefusal::NotLoggedIn => "You are not logged in: open the link you were given again.",
        FormRefusal::Elsewhere => "This request did not come from this server's page. Nothing was done.",
        FormRefusal::WithoutToken => {
            "This request did not come from this server's page (its form token is missing or wrong). Nothing was done."
        }
    };
    notice(options, refusal.status(), "Nothing was done", vec![Paragraph::of(said).id("problem")])
}

/// A form of these pages posted by the logged-in person: from this origin,
/// with a session of the tenant and its form token ([`login::posted_form`]);
/// anything else is refused, as a page, before the handler runs.
pub(super) struct PersonsForm {
    session: PageSession,
    headers: HeaderMap,
}

impl FromRequest<AppState> for PersonsForm {
    type Rejection = Response;

    async fn from_request(request: Request, host: &AppState) -> Result<Self, Response> {
        let (parts, body) = request.into_parts();
        let (Some(caller), Some(options)) =
            (parts.extensions.get::<Caller>(), parts.extensions.get::<Arc<ApiOptions>>())
        else {
            return Err(ApiError::internal("the server is misconfigured").into_response());
        };
        // As every body over its route's limit is answered (`413
        // request_too_large`).
        let Ok(body) = axum::body::to_bytes(body, MAX_FORM_BYTES).await else {
            let message = "the form is larger than this server accepts";
            return Err(ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, "request_too_large", message).into_response());
        };
        match login::posted_form(host, options, &caller.tenant, &parts.headers, &form(&body)) {
            Ok(session) => Ok(PersonsForm { session, headers: parts.headers }),
            Err(refusal) => Err(form_refused(options, refusal)),
        }
    }
}

fn unknown_link(options: &ApiOptions) -> Response {
    let said = Paragraph::of("There is no such link: call the tool again for a new one.").id("problem");
    notice(options, StatusCode::NOT_FOUND, "Unknown link", vec![said])
}

/// The page of a link for another person than the one logged in: only
/// that it is another person's.
fn another_persons(options: &ApiOptions, session: &PageSession) -> Response {
    let said = Paragraph::new()
        .id("problem")
        .text("This link is for another person; you are logged in as ")
        .strong(&session.user)
        .text(". Only the person it was made for can follow it.");
    let mut page = notice(options, StatusCode::FORBIDDEN, "Not your link", vec![said]);
    page.headers_mut().insert("plinth-error-code", HeaderValue::from_static("not_your_link"));
    page
}

/// The link page: who asks, for which account and scopes, for whom.
#[derive(Template)]
#[template(path = "pages/connections_link.html")]
struct LinkPage {
    frame: Frame,
    tool: String,
    version: u32,
    tenant: String,
    provider: String,
    scopes: Vec<String>,
    user: String,
    action: String,
    form_token: String,
    expires: String,
}

/// `GET connections/{link}`: the login page, or for its person the link
/// page (for another person: that it is not theirs).
#[utoipa::path(get, summary = "An authorization link's page", description = "What a challenge's `url` opens: without an end-user session of the tenant, the login page; for the link's end user, who asks (the tool, its version, the tenant), for which provider and scopes, and **Continue**; for another person, only that the link is not theirs.", path = "/connections/{link}", tag = "Accounts", operation_id = "connection_link",
    params(("link" = String, Path, description = "The link's id (from the challenge)")),
    responses(
        (status = 200, description = "The login page, the link page, or (followed already) that the account is connected", content_type = "text/html", body = String),
        (status = 403, description = "The link is another person's", content_type = "text/html", body = String),
        (status = 409, description = "The person is back from the provider and the sign-in is being finished", content_type = "text/html", body = String),
        (status = 410, description = "The link expired or failed", content_type = "text/html", body = String),
        schemas::LinkPageFailures,
    ))]
pub(super) async fn link_page(
    State(host): State<AppState>,
    Extension(caller): Extension<Caller>,
    Extension(options): Extension<Arc<ApiOptions>>,
    Path(link): Path<String>,
    headers: HeaderMap,
) -> Response {
    let Some(next) = Next::connections(&format!("/connections/{link}")) else { return unknown_link(&options) };
    let Some(session) = login::session_of(&host, &headers, &caller.tenant) else {
        return login::login_page(&options, &caller.tenant, &headers, &next, None);
    };
    let view = match host.authorization_link_view(&caller.tenant, &link) {
        Ok(view) => view,
        Err(AuthorizationError::NotFound(_)) => return unknown_link(&options),
        Err(e) => return refused(&options, "Not available", e),
    };
    if view.end_user != session.user {
        return another_persons(&options, &session);
    }
    match view.state {
        LinkState::Pending => {}
        LinkState::Exchanging => {
            let said = Paragraph::of("You are back from the provider; the sign-in is being finished.").id("problem");
            return notice(&options, StatusCode::CONFLICT, "Being finished", vec![said]);
        }
        LinkState::Connected => {
            let said = Paragraph::new()
                .id("outcome")
                .text("Your ")
                .strong(&view.provider_name)
                .text(" account is connected: you can go back to your agent.");
            return notice(&options, StatusCode::OK, "Connected", vec![said]);
        }
        LinkState::Failed => {
            let why = view.error.clone().unwrap_or_else(|| "this link can no longer be followed".into());
            let said = vec![Paragraph::of(why).id("problem"), Paragraph::of("Call the tool again for a new link.")];
            return notice(&options, StatusCode::GONE, "Link ended", said);
        }
    }
    let page = LinkPage {
        frame: Frame::new(
            &options.public_url,
            Product::Accounts,
            format!("Connect your {} account", view.provider_name),
        ),
        tool: view.tool.clone(),
        version: view.version,
        tenant: view.tenant.clone(),
        provider: view.provider_name.clone(),
        scopes: view.scopes.clone(),
        user: session.user.clone(),
        action: format!("{}/connections/{link}", root(&options, &caller.tenant)),
        form_token: session.form_token.clone(),
        expires: rfc3339(view.expires_at),
    };
    // The form's answer is a redirect to the provider: the page's CSP must
    // allow the form to go there (`form-action` covers redirects).
    let callback = callback_url(&options, &caller.tenant);
    match host.authorization_redirect(&caller.tenant, &link, &session.user, &callback).await {
        Ok(target) => pages::page_posting_to(StatusCode::OK, &page, &target),
        Err(e @ AuthorizationError::Provider(_)) => refused(&options, "Provider not available", e),
        Err(e) => refused(&options, "Not available", e),
    }
}

/// Plinth's redirect URI at the tenant's providers.
fn callback_url(options: &ApiOptions, tenant: &str) -> String {
    format!("{}/connections/callback", root(options, tenant))
}

/// `POST connections/{link}`: **Continue**, to the provider.
#[utoipa::path(post, summary = "Continue to the provider", description = "From the link page: needs the end user's session, the page's form token and a post from this origin; the person must be the link's end user. Answers `303` to the provider's authorization request (code with PKCE S256, `state`), and sets the cookie that carries the session to the callback.", path = "/connections/{link}", tag = "Accounts", operation_id = "follow_connection_link",
    params(("link" = String, Path, description = "The link's id")),
    request_body(content = schemas::ConnectionForm, content_type = "application/x-www-form-urlencoded"),
    responses(
        (status = 303, description = "To the provider", headers(
            ("Location" = String, description = "The provider's authorization request"),
            ("Set-Cookie" = String, description = "The session, for the callback only (HttpOnly, SameSite=Lax)"),
        )),
        (status = 401, description = "Not logged in", content_type = "text/html", body = String),
        (status = 403, description = "Posted from elsewhere or without the page's form token, or the link is another person's", content_type = "text/html", body = String),
        (status = 410, description = "The link was followed already or expired, or its provider is gone", content_type = "text/html", body = String),
        schemas::LinkPageFailures,
    ))]
pub(super) async fn follow(
    State(host): State<AppState>,
    Extension(caller): Extension<Caller>,
    Extension(options): Extension<Arc<ApiOptions>>,
    Path(link): Path<String>,
    PersonsForm { session, headers }: PersonsForm,
) -> Response {
    let callback = callback_url(&options, &caller.tenant);
    let target = match host.authorization_redirect(&caller.tenant, &link, &session.user, &callback).await {
        Ok(target) => target,
        Err(AuthorizationError::NotFound(_)) => return unknown_link(&options),
        Err(AuthorizationError::NotYours) => return another_persons(&options, &session),
        Err(e) => return refused(&options, "Not available", e),
    };
    let token = login::session_token(&headers).unwrap_or_default();
    let path = format!("{}/connections/callback", pages::tenant_root_path(&options.public_url, &caller.tenant));
    let cookie = pages::navigation_cookie(&options.public_url, CALLBACK_COOKIE, token, path, LINK_TTL.as_secs() as i64);
    pages::see_other(&target, &[cookie])
}

/// The callback's query: each parameter once at most (two of one are
/// refused: which one the provider meant is not for Plinth to guess).
fn callback_query(raw: &str) -> Result<CallbackQuery, &'static str> {
    let mut query = CallbackQuery::default();
    let mut seen = std::collections::BTreeSet::new();
    for (key, value) in form(raw.as_bytes()) {
        let slot = match key.as_str() {
            "state" => {
                if seen.insert("state") {
                    query.state = value;
                    continue;
                }
                return Err("state");
            }
            "code" => &mut query.code,
            "iss" => &mut query.iss,
            "error" => &mut query.error,
            // `error_description`, `error_uri`, `session_state`…: not read.
            _ => continue,
        };
        if slot.replace(value).is_some() {
            return Err("a parameter");
        }
    }
    Ok(query)
}

/// `GET connections/callback?code&state&iss` (or `?error&state`): the
/// provider's redirect back, in the person's browser.
#[utoipa::path(get, summary = "The providers' redirect back (Plinth's redirect URI)", description = "Register `{root}/connections/callback` at the provider as the client's redirect URI. Needs the session of the person who followed the link (without one, nothing is taken); its `state` finds the link once, its `iss` must be the provider's (RFC 9207), and its code is exchanged for the grant, stored sealed.", path = "/connections/callback", tag = "Accounts", operation_id = "connection_callback",
    params(
        ("state" = Option<String>, Query, description = "The link's `state`, as the provider got it"),
        ("code" = Option<String>, Query, description = "The authorization code"),
        ("iss" = Option<String>, Query, description = "The provider's issuer identifier (RFC 9207)"),
        ("error" = Option<String>, Query, description = "The provider's refusal (`access_denied`…)"),
    ),
    responses(
        (status = 200, description = "Connected: the person can go back to their agent", content_type = "text/html", body = String),
        (status = 400, description = "Not a sign-in (no `state`, a parameter twice, too long), or the sign-in failed (another issuer's `iss`, a refusal, a failed exchange): the link failed, and says why", content_type = "text/html", body = String),
        (status = 401, description = "No end-user session: log in and follow the link again (nothing was taken)", content_type = "text/html", body = String),
        (status = 410, description = "No pending link has this `state` (finished already, expired, or never made)", content_type = "text/html", body = String),
        schemas::PageUnavailable,
    ))]
pub(super) async fn callback(
    State(host): State<AppState>,
    Extension(caller): Extension<Caller>,
    Extension(options): Extension<Arc<ApiOptions>>,
    RawQuery(raw): RawQuery,
    headers: HeaderMap,
) -> Response {
    let mut answer = callback_answer(&host, &caller, &options, raw.as_deref().unwrap_or(""), &headers).await;
    // Its work is done, whatever came of it.
    let path = format!("{}/connections/callback", pages::tenant_root_path(&options.public_url, &caller.tenant));
    let forget = pages::navigation_cookie(&options.public_url, CALLBACK_COOKIE, String::new(), path, 0);
    if let Ok(forget) = HeaderValue::from_str(&forget.to_string()) {
        answer.headers_mut().append(header::SET_COOKIE, forget);
    }
    answer
}

async fn callback_answer(
    host: &AppState,
    caller: &Caller,
    options: &ApiOptions,
    raw: &str,
    headers: &HeaderMap,
) -> Response {
    let not_a_sign_in = |why: &str| {
        let said = vec![
            Paragraph::of(format!("This is not a sign-in this server can finish ({why}).")).id("problem"),
            Paragraph::of("Follow the link you were given again."),
        ];
        notice(options, StatusCode::BAD_REQUEST, "Not connected", said)
    };
    if raw.len() > MAX_CALLBACK_QUERY_BYTES {
        return not_a_sign_in("its query is too long");
    }
    let query = match callback_query(raw) {
        Ok(query) => query,
        Err(what) => return not_a_sign_in(&format!("{what} came twice")),
    };
    if query.state.is_empty() {
        return not_a_sign_in("it has no state");
    }
    // The session came along in the callback's own cookie (the provider's
    // redirect is a navigation from another site); or, in a browser that
    // sends it, the session cookie itself.
    let session = login::session_in(host, headers, &caller.tenant, CALLBACK_COOKIE)
        .or_else(|| login::session_of(host, headers, &caller.tenant));
    let Some(session) = session else {
        let said = vec![
            Paragraph::of("You are not logged in here, so nothing was taken from this sign-in.").id("problem"),
            Paragraph::of("Log in and follow the link you were given again."),
        ];
        return notice(options, StatusCode::UNAUTHORIZED, "Log in first", said);
    };
    let callback = callback_url(options, &caller.tenant);
    match host.complete_authorization(&caller.tenant, &session.user, &callback, &query).await {
        Ok(view) => ended(options, &view),
        Err(e) => refused(options, "Not connected", e),
    }
}

/// The page of a link that ended.
fn ended(options: &ApiOptions, view: &LinkView) -> Response {
    if view.state == LinkState::Connected {
        let said = Paragraph::new()
            .id("outcome")
            .text("Connected: your ")
            .strong(&view.provider_name)
            .text(" account is connected. You can go back to your agent.");
        return notice(options, StatusCode::OK, "Connected", vec![said]);
    }
    let why = view.error.clone().unwrap_or_else(|| "the sign-in did not finish".into());
    let said = vec![Paragraph::of(why).id("problem"), Paragraph::of("Call the tool again for a new link.")];
    let mut page = notice(options, StatusCode::BAD_REQUEST, "Not connected", said);
    page.headers_mut().insert("plinth-error-code", HeaderValue::from_static("authorization_failed"));
    page
}

/// `GET connections/{link}/status`: where a link is, for the agent.
#[utoipa::path(get, summary = "Where an authorization link is (its check URL)", description = "What a challenge's `check_url` answers the agent polling it: `pending` until the person is back from the provider, then `connected` (call the tool again) or `failed` (`error` says why; the next call gets a new link). Needs a consumer key of the tenant, as the CHEQ result URIs do; through a toolset's root (a key scoped to it), the links of its tools' calls only.", path = "/connections/{link}/status", tag = "Accounts", operation_id = "connection_status",
    params(("link" = String, Path, description = "The link's id")),
    responses(
        (status = 200, description = "Where the link is", body = schemas::ConnectionStatus),
        (status = 404, description = "`not_found`: no such link in this tenant (or through this toolset)", body = schemas::ErrorBody),
        schemas::StorageFailed,
    ))]
pub(super) async fn status(
    State(host): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(link): Path<String>,
) -> Result<Response, ApiError> {
    let view = host.authorization_link_view(&caller.tenant, &link)?;
    // Through a toolset's root, only the links of its tools' calls.
    if caller.toolset.is_some() && host.tool_named_in(&caller.tenant, caller.toolset.as_deref(), &view.tool).is_none() {
        return Err(AuthorizationError::NotFound("no such authorization link".into()).into());
    }
    let state = match view.state {
        LinkState::Pending | LinkState::Exchanging => "pending",
        LinkState::Connected => "connected",
        LinkState::Failed => "failed",
    };
    let mut body = json!({ "state": state, "provider": view.provider, "expiresAt": view.expires_at });
    if let Some(error) = &view.error {
        body["error"] = json!(error);
    }
    let mut response = axum::Json(body).into_response();
    response.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    Ok(response)
}

/// The connected accounts page.
#[derive(Template)]
#[template(path = "pages/connections_list.html")]
struct AccountsPage {
    frame: Frame,
    user: String,
    accounts: Vec<AccountRow>,
    form_token: String,
}

/// A connected account.
struct AccountRow {
    provider: String,
    name: String,
    scopes: String,
    connected: String,
    action: String,
}

/// `GET connections`: the login page, or the person's connected accounts.
#[utoipa::path(get, summary = "The person's connected accounts", description = "Without an end-user session of the tenant, the login page; with one, every account the person connected (provider, scopes, since when), each with **Revoke**.", path = "/connections", tag = "Accounts", operation_id = "connections",
    responses(
        (status = 200, description = "The login page, or the person's accounts", content_type = "text/html", body = String),
        schemas::PageUnavailable,
    ))]
pub(super) async fn accounts(
    State(host): State<AppState>,
    Extension(caller): Extension<Caller>,
    Extension(options): Extension<Arc<ApiOptions>>,
    headers: HeaderMap,
) -> Response {
    let Some(session) = login::session_of(&host, &headers, &caller.tenant) else {
        let next = Next::Connections("/connections".into());
        return login::login_page(&options, &caller.tenant, &headers, &next, None);
    };
    let grants = match host.grants_of(&caller.tenant, &session.user) {
        Ok(grants) => grants,
        Err(e) => return refused(&options, "Not available", e),
    };
    let root = root(&options, &caller.tenant);
    let accounts = grants
        .into_iter()
        .map(|g| AccountRow {
            action: format!(
                "{root}/connections/{}/revoke",
                form_urlencoded::byte_serialize(g.provider.as_bytes()).collect::<String>()
            ),
            name: g.provider_name,
            scopes: if g.scopes.is_empty() { "(the provider's default)".into() } else { g.scopes.join(" ") },
            connected: rfc3339(g.connected_at),
            provider: g.provider,
        })
        .collect();
    let page = AccountsPage {
        frame: Frame::new(&options.public_url, Product::Accounts, "Your connected accounts"),
        user: session.user.clone(),
        accounts,
        form_token: session.form_token.clone(),
    };
    pages::page(StatusCode::OK, &page)
}

/// `POST connections/{provider}/revoke`: **Revoke**, then the accounts
/// page again.
#[utoipa::path(post, summary = "Revoke a connected account", description = "From the accounts page: needs the end user's session, the page's form token and a post from this origin. Removes the person's grant at the provider (revoked at the provider too, RFC 7009, when it has a revocation endpoint) and answers `303` to the accounts page.", path = "/connections/{provider}/revoke", tag = "Accounts", operation_id = "revoke_own_connection",
    params(("provider" = String, Path, description = "The provider's id")),
    request_body(content = schemas::ConnectionForm, content_type = "application/x-www-form-urlencoded"),
    responses(
        (status = 303, description = "Revoked: to the accounts page", headers(("Location" = String, description = "The accounts page"))),
        (status = 401, description = "Not logged in", content_type = "text/html", body = String),
        (status = 403, description = "Posted from elsewhere or without the page's form token", content_type = "text/html", body = String),
        (status = 404, description = "The person has no account connected at that provider", content_type = "text/html", body = String),
        schemas::PageUnavailable,
    ))]
pub(super) async fn revoke(
    State(host): State<AppState>,
    Extension(caller): Extension<Caller>,
    Extension(options): Extension<Arc<ApiOptions>>,
    Path(provider): Path<String>,
    PersonsForm { session, .. }: PersonsForm,
) -> Response {
    let actor = Principal::server(&format!("end-user:{}", session.user));
    if let Err(e) = host.revoke_grant(&actor, &caller.tenant, &session.user, &provider).await {
        return refused(&options, "Not revoked", e);
    }
    tracing::info!(tenant = caller.tenant, end_user = session.user, provider, "a person revoked a connected account");
    pages::see_other(&format!("{}/connections", root(&options, &caller.tenant)), &[])
}

/// The pages' operations, merged into the OpenAPI document (`openapi.rs`).
#[derive(utoipa::OpenApi)]
#[openapi(paths(link_page, follow, callback, status, accounts, revoke))]
pub(super) struct Doc;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_callback_query_names_each_parameter_once_at_most() {
        let query = callback_query("code=c1&state=s1&iss=https%3A%2F%2Flogin.example&session_state=x").unwrap();
        assert_eq!(query.state, "s1");
        assert_eq!(query.code.as_deref(), Some("c1"));
        assert_eq!(query.iss.as_deref(), Some("https://login.example"));
        assert_eq!(query.error, None);
        for twice in ["state=a&state=b", "code=a&code=b&state=s", "state=s&iss=a&iss=b", "state=s&error=a&error=b"] {
            assert!(callback_query(twice).is_err(), "{twice}");
        }
        assert_eq!(callback_query("").unwrap(), CallbackQuery::default());
    }
}
