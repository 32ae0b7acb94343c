//! The end user's login to the pages a person opens from an agent's link:
//! the built-in confirmation page (`cheq.rs`) and the connections pages
//! (`connections.rs`, docs/authorization.md). Both are one product to the
//! person: one login form (`POST cheq/login`), one session, and the same
//! checks on every form a logged-in page posts — so that what protects
//! one protects the other, and neither grows its own copy.
//!
//! - **The login** checks the end user's password (throttled and bounded
//!   in the core, `host/confirmations/login.rs`) and is refused unless it
//!   was posted by its own page in this browser (a double-submit token in
//!   a cookie sent to the form's action only, and Fetch Metadata): another
//!   site cannot log this browser in as someone else (login CSRF).
//! - **Where it goes on to** is named by the page, never chosen freely: a
//!   resource URI of this tenant (the confirmation page), or a path under
//!   this tenant's `/connections` (a link, the connected accounts): see
//!   [`Next`]. Nothing else is a target, so the login is no open redirect.
//! - **A posted form** ([`posted_form`]) must come from this origin and
//!   carry the session's form token, checked before anything is done.

use super::links::root;
use super::pages::{self, Frame, Paragraph, Product, field, form};
use super::{ApiError, ApiOptions, AppState, Caller, schemas};
use crate::host::PageSession;
use askama::Template;
use axum::Extension;
use axum::body::Bytes;
use axum::extract::{ConnectInfo, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

/// How long an end user stays logged in to the pages.
pub(super) const SESSION_TTL: Duration = Duration::from_secs(30 * 60);
/// The session cookie (`SameSite=Strict`, sent to every path: the core
/// finds the session again by tenant, so another tenant's root sees none).
pub(super) const SESSION_COOKIE: &str = "plinth_cheq_session";
/// The login form's double-submit token (as the catalog's sign-in has).
const LOGIN_TOKEN: pages::SignInToken = pages::SignInToken { cookie: "plinth_cheq_login", field: "login_token" };
/// The longest link id a `next` may name (the core's are 22 characters).
const MAX_LINK_CHARS: usize = 64;

/// Where a login goes on to: what the page that asked for it was.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Next {
    /// The confirmation page of this resource URI (checked by that page:
    /// it confirms this tenant's transactions only).
    Confirm(String),
    /// A path under this tenant's root: `/connections` or
    /// `/connections/{link}` ([`Next::connections`] checks it).
    Connections(String),
}

impl Next {
    /// `path` as a target, if it is one: `/connections`, or
    /// `/connections/{link}` with a link id of 1 to 64 of `A-Za-z0-9_-`.
    /// Anything else (another path, a query, `..`, an absolute URL) is none.
    pub(super) fn connections(path: &str) -> Option<Next> {
        let sound = match path.strip_prefix("/connections") {
            Some("") => true,
            Some(rest) => rest.strip_prefix('/').is_some_and(|id| {
                (1..=MAX_LINK_CHARS).contains(&id.len())
                    && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
            }),
            None => false,
        };
        sound.then(|| Next::Connections(path.to_string()))
    }

    /// Its URL under `tenant`'s root.
    fn url(&self, options: &ApiOptions, tenant: &str) -> String {
        match self {
            Next::Confirm(resource_uri) => format!(
                "{}/cheq/confirm?resource_uri={}",
                root(options, tenant),
                form_urlencoded::byte_serialize(resource_uri.as_bytes()).collect::<String>()
            ),
            Next::Connections(path) => format!("{}{path}", root(options, tenant)),
        }
    }
}

/// The logged-in end user of `tenant` whose session cookie `headers` carry
/// (or, at the connections callback, `also`: the cookie that comes back
/// from the provider). Sessions live in the store, so that any replica of
/// a fleet knows them.
pub(super) fn session_of(host: &AppState, headers: &HeaderMap, tenant: &str) -> Option<PageSession> {
    session_in(host, headers, tenant, SESSION_COOKIE)
}

/// [`session_of`], the session's token read from the cookie `name`.
pub(super) fn session_in(host: &AppState, headers: &HeaderMap, tenant: &str, name: &str) -> Option<PageSession> {
    let token = pages::cookie(headers, name)?;
    match host.page_session(tenant, &token) {
        Ok(session) => session,
        Err(e) => {
            tracing::warn!(tenant, error = %e, "an end user's page session could not be read");
            None
        }
    }
}

/// The session token `headers` carry, if any (for a cookie that carries it
/// on to the connections callback).
pub(super) fn session_token(headers: &HeaderMap) -> Option<String> {
    pages::cookie(headers, SESSION_COOKIE)
}

/// Why a form of a logged-in page was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum FormRefusal {
    /// Posted from another site or origin (Fetch Metadata, or `Origin`).
    Elsewhere,
    /// No session of this tenant.
    NotLoggedIn,
    /// Without the session's form token, or with another.
    WithoutToken,
}

impl FormRefusal {
    /// Its status: `401` without a session, else `403`.
    pub(super) fn status(self) -> StatusCode {
        match self {
            FormRefusal::NotLoggedIn => StatusCode::UNAUTHORIZED,
            FormRefusal::Elsewhere | FormRefusal::WithoutToken => StatusCode::FORBIDDEN,
        }
    }
}

/// The session of a form a logged-in page posted (`fields`, with its
/// `form_token`), checked in this order: from this origin, a session of
/// `tenant`, its form token. Nothing is done with a refused form.
pub(super) fn posted_form(
    host: &AppState,
    options: &ApiOptions,
    tenant: &str,
    headers: &HeaderMap,
    fields: &[(String, String)],
) -> Result<PageSession, FormRefusal> {
    if pages::posted_from_elsewhere(headers, &options.public_url) {
        tracing::warn!(tenant, "an end user's form posted from another site was refused");
        return Err(FormRefusal::Elsewhere);
    }
    let session = session_of(host, headers, tenant).ok_or(FormRefusal::NotLoggedIn)?;
    if !pages::form_token_matches(field(fields, "form_token").unwrap_or(""), &session.form_token) {
        tracing::warn!(tenant, "an end user's form without its page's form token was refused");
        return Err(FormRefusal::WithoutToken);
    }
    Ok(session)
}

/// The login page.
#[derive(Template)]
#[template(path = "pages/cheq_login.html")]
struct LoginPage {
    frame: Frame,
    problem: Option<String>,
    /// What logging in is for, in a sentence.
    lede: &'static str,
    action: String,
    resource_uri: Option<String>,
    next: Option<String>,
    token: String,
}

/// The login page, going on to `next` once logged in (`401` with
/// `problem`, else `200`).
pub(super) fn login_page(
    options: &ApiOptions,
    tenant: &str,
    headers: &HeaderMap,
    next: &Next,
    problem: Option<String>,
) -> Response {
    let status = if problem.is_none() { StatusCode::OK } else { StatusCode::UNAUTHORIZED };
    let action = format!("{}/cheq/login", root(options, tenant));
    let token = LOGIN_TOKEN.for_page(headers);
    // The cookie goes to the form's action only: its path on this server.
    let action_path = format!("{}/cheq/login", pages::tenant_root_path(&options.public_url, tenant));
    let (product, title, lede, resource_uri, next) = match next {
        Next::Confirm(uri) => (
            Product::Confirmation,
            "Log in to confirm",
            "Log in to see what you are asked to confirm.",
            Some(uri.clone()),
            None,
        ),
        Next::Connections(path) => (
            Product::Accounts,
            "Log in to your accounts",
            "Log in to see which account you are asked to connect, and the accounts you connected.",
            None,
            Some(path.clone()),
        ),
    };
    let page = LoginPage {
        frame: Frame::new(&options.public_url, product, title),
        problem,
        lede,
        action,
        resource_uri,
        next,
        token: token.clone(),
    };
    LOGIN_TOKEN.set(pages::page(status, &page), &options.public_url, token, action_path)
}

fn notice(options: &ApiOptions, status: StatusCode, title: &str, paragraphs: Vec<Paragraph>) -> Response {
    pages::notice(status, Frame::new(&options.public_url, Product::Confirmation, title), paragraphs)
}

/// `POST cheq/login`: checks the end user's password and opens a session.
/// The core throttles failed logins by user name and by client address (the
/// TCP peer) and bounds the hashing; a refusal is the login page again, with
/// its status (`401`, `429`, `503`), `Retry-After` when waiting helps, and
/// the error code in `Plinth-Error-Code`.
#[utoipa::path(post, summary = "Logs an end user in to the confirmation and connections pages", description = "Checks the end user's password and opens a session, then goes on to the confirmation page of `resource_uri`, or to `next`: `/connections` or `/connections/{link}` under this tenant's root (nothing else). Failed logins are throttled by user name and by client address, and the hashing is bounded; a refusal is the login page again, with its status, `Retry-After` when waiting helps, and the error code in `Plinth-Error-Code`.", path = "/cheq/login", tag = "CHEQ", operation_id = "login",
    request_body(content = schemas::LoginForm, content_type = "application/x-www-form-urlencoded"),
    responses(
        (status = 303, description = "Logged in: to the confirmation page, or the connections page named by `next`, with the session cookie", headers(
            ("Location" = String, description = "The confirmation page, or the connections page"),
            ("Set-Cookie" = String, description = "The session (HttpOnly, SameSite=Strict)"),
        )),
        (status = 400, description = "`next` names no connections page of this tenant", content_type = "text/html", body = String),
        (status = 401, description = "Wrong user name or password: the login page again (`Plinth-Error-Code: login_failed`)", content_type = "text/html", body = String),
        (status = 403, description = "The login did not come from the login page in this browser: sent from another site or origin, or without the token of the page's cookie", content_type = "text/html", body = String),
        (status = 429, description = "Too many failed logins: the login page (`login_locked`)", content_type = "text/html", body = String,
            headers(("Retry-After" = u64, description = "Seconds"))),
        (status = 503, description = "The login cannot be checked now (`login_busy`, `storage_failed`)", content_type = "text/html", body = String,
            headers(("Retry-After" = u64, description = "Seconds"))),
    ))]
pub(super) async fn login(
    State(host): State<AppState>,
    Extension(caller): Extension<Caller>,
    Extension(options): Extension<Arc<ApiOptions>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    // A login posted by another site would log this browser in as someone
    // else (login CSRF): only this server's own page, in this browser, may
    // post it.
    let fields = form(&body);
    if !LOGIN_TOKEN.posted_by_its_page(&headers, &fields, &options.public_url) {
        tracing::warn!(tenant = caller.tenant, client = %peer.ip(), "an end user's login not from its page was refused");
        let said = Paragraph::of(
            "This login did not come from the login page (it was sent from another site, or its form expired). \
             Open the link you were given again.",
        );
        return notice(&options, StatusCode::FORBIDDEN, "Not logged in", vec![said]);
    }
    let next = match field(&fields, "next").filter(|n| !n.is_empty()) {
        Some(path) => match Next::connections(path) {
            Some(next) => next,
            None => {
                let said = Paragraph::of(
                    "This login names no page of this server to go on to. Open the link you were given again.",
                );
                return notice(&options, StatusCode::BAD_REQUEST, "Not logged in", vec![said]);
            }
        },
        None => Next::Confirm(field(&fields, "resource_uri").unwrap_or("").to_string()),
    };
    let user = field(&fields, "user").unwrap_or("");
    let password = field(&fields, "password").unwrap_or("");
    if let Err(e) = host.log_in_end_user(&caller.tenant, user, password, peer.ip()).await {
        tracing::info!(tenant = caller.tenant, client = %peer.ip(), error = %e, "an end user's login failed");
        let problem = pages::login_problem(&e, "login");
        let page = login_page(&options, &caller.tenant, &headers, &next, Some(problem));
        return ApiError::from(e).onto(page);
    }
    let token = match host.open_page_session(&caller.tenant, user, SESSION_TTL) {
        Ok(token) => token,
        Err(e) => {
            tracing::warn!(tenant = caller.tenant, error = %e, "an end user's page session could not be opened");
            let said = Paragraph::of("The session could not be opened; try again in a moment.");
            return notice(&options, StatusCode::SERVICE_UNAVAILABLE, "Try again", vec![said]);
        }
    };
    let cookie =
        pages::page_cookie(&options.public_url, SESSION_COOKIE, token, "/".into(), SESSION_TTL.as_secs() as i64);
    pages::see_other(&next.url(&options, &caller.tenant), &[cookie])
}

/// The login's operation, merged into the OpenAPI document (`openapi.rs`).
#[derive(utoipa::OpenApi)]
#[openapi(paths(login))]
pub(super) struct Doc;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_login_goes_on_to_this_tenants_connections_pages_only() {
        assert_eq!(Next::connections("/connections"), Some(Next::Connections("/connections".into())));
        assert!(Next::connections("/connections/AbC-_09").is_some());
        for elsewhere in [
            "",
            "/",
            "/connectionsx",
            "/connections/",
            "/connections/a/b",
            "/connections/a?b",
            "/connections/..",
            "/connections/%2e%2e",
            "//evil.example/connections",
            "https://evil.example/connections",
            "/cheq/confirm",
            "/connections/a b",
        ] {
            assert_eq!(Next::connections(elsewhere), None, "{elsewhere}");
        }
        assert_eq!(Next::connections(&format!("/connections/{}", "a".repeat(65))), None);
        let options = ApiOptions { public_url: "https://tools.example".into(), ..ApiOptions::default() };
        assert_eq!(
            Next::connections("/connections/abc").unwrap().url(&options, "acme"),
            "https://tools.example/t/acme/connections/abc"
        );
        assert_eq!(
            Next::Confirm("https://tools.example/cheq/transactions/t 1".into()).url(&options, "default"),
            "https://tools.example/cheq/confirm?resource_uri=https%3A%2F%2Ftools.example%2Fcheq%2Ftransactions%2Ft+1"
        );
    }
}
