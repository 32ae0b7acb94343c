//! Signing in to a tenant's catalog and out: the sign-in page, the
//! session cookie, and the access layer's refusals (no session, a forged
//! form, sessions that cannot be read).

use super::*;

/// The sign-in page.
#[derive(Template)]
#[template(path = "pages/catalog_sign_in.html")]
struct SignInPage {
    frame: Frame,
    tenant: String,
    problem: Option<String>,
    action: String,
    next: String,
    token: String,
    hours: u64,
}

/// The sign-in page with `status`, returning to `next`, and its token's
/// cookie: the browser's if it has a well-formed one (so two open sign-in
/// forms both work), else a new one.
fn sign_in_page(
    options: &ApiOptions,
    tenant: &str,
    headers: &HeaderMap,
    status: StatusCode,
    next: &str,
    problem: Option<String>,
) -> Response {
    let links = Links::new(options, tenant);
    let mut frame = frame(options, &links, "Sign in to the catalog", None);
    frame.width = "narrow";
    let token = SIGN_IN_TOKEN.for_page(headers);
    let page = SignInPage {
        frame,
        tenant: tenant.to_string(),
        problem,
        action: links.sign_in(),
        next: links.within(next),
        token: token.clone(),
        hours: CATALOG_SESSION_TTL.as_secs() / 3600,
    };
    SIGN_IN_TOKEN.set(pages::page(status, &page), &options.public_url, token, links.sign_in())
}

/// The access layer's refusal of a catalog page without a live session of
/// this tenant: `401` with the sign-in page, which returns here.
pub(in crate::api) fn sign_in_required(
    options: &ApiOptions,
    tenant: &str,
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
) -> Response {
    let links = Links::new(options, tenant);
    // A form posted without a session returns to the catalog, not to a
    // page that only answers posts.
    let next = if method == Method::GET || method == Method::HEAD { links.here(uri) } else { links.home() };
    ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", "sign in to the catalog first").onto(sign_in_page(
        options,
        tenant,
        headers,
        StatusCode::UNAUTHORIZED,
        &next,
        None,
    ))
}

/// The access layer's refusal of a form that did not come from a catalog
/// page of this session: `403`, nothing done.
pub(in crate::api) fn forged_form(options: &ApiOptions, session: &DesignerSession) -> Response {
    let links = Links::new(options, &session.tenant);
    let said = Paragraph::of(
        "This request did not come from a catalog page (its form token is missing or wrong, or it was sent from another site). Nothing was done.",
    )
    .id("problem");
    ApiError::new(StatusCode::FORBIDDEN, "forbidden", "the form token is missing or wrong").onto(notice(
        options,
        &links,
        Some(session),
        StatusCode::FORBIDDEN,
        "Not done",
        vec![said],
    ))
}

/// The access layer's answer to a session whose key's role may not do
/// what the page does (a consumer changing a toolset).
pub(in crate::api) fn not_allowed(options: &ApiOptions, session: &DesignerSession) -> Response {
    let links = Links::new(options, &session.tenant);
    let said = Paragraph::of(format!(
        "This session's key is a {}'s: only a publisher key of the tenant may do this. Nothing was done.",
        session.principal.role.as_str()
    ))
    .id("problem");
    ApiError::new(StatusCode::FORBIDDEN, "forbidden", "this session's key may not do this").onto(notice(
        options,
        &links,
        Some(session),
        StatusCode::FORBIDDEN,
        "Not allowed",
        vec![said],
    ))
}

/// The access layer's answer when the sessions cannot be read.
pub(in crate::api) fn sessions_unreadable(options: &ApiOptions, tenant: &str) -> Response {
    let links = Links::new(options, tenant);
    let said = Paragraph::of("The session could not be checked now; try again in a moment.").id("problem");
    ApiError::storage_failed("the session could not be checked").onto(notice(
        options,
        &links,
        None,
        StatusCode::SERVICE_UNAVAILABLE,
        "Try again",
        vec![said],
    ))
}

/// `GET catalog/sign-in[?next=…]`.
#[utoipa::path(get, summary = "The catalog's sign-in page", description = "A form for an API key of the tenant, returning to `next` (a page of the same catalog) once signed in.", path = "/catalog/sign-in", tag = "Catalog", operation_id = "catalog_sign_in_form",
    params(("next" = Option<String>, Query, description = "The catalog page to go on to")),
    responses((status = 200, description = "The sign-in page", content_type = "text/html", body = String, headers(
        ("Set-Cookie" = String, description = "The sign-in form's token (`plinth_catalog_sign_in`; HttpOnly, SameSite=Strict, Path: this root's sign-in), which its form carries too"),
    ))))]
pub(in crate::api) async fn sign_in_form(
    Extension(caller): Extension<Caller>,
    Extension(options): Extension<Arc<ApiOptions>>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Response {
    let query = form(query.unwrap_or_default().as_bytes());
    sign_in_page(&options, &caller.tenant, &headers, StatusCode::OK, field(&query, "next").unwrap_or(""), None)
}

/// `POST catalog/sign-in` with `key` (and `next`): opens a session and
/// returns to `next`, or shows the form again with why not (`401`, `429`
/// or `503`, with `Retry-After` when waiting helps).
#[utoipa::path(post, summary = "Signs in to the catalog", description = "Checks that the form is the sign-in page's (its token is its cookie's; the browser does not say it came from elsewhere), then the key (any live key of the tenant; a consumer key is enough), and opens a session. Failed sign-ins are throttled like the confirmation pages' logins; a refusal is the sign-in page again, with its status, `Retry-After` when waiting helps, and the code in `Plinth-Error-Code`.", path = "/catalog/sign-in", tag = "Catalog", operation_id = "catalog_sign_in",
    request_body(content = schemas::SignInForm, content_type = "application/x-www-form-urlencoded"),
    responses(
        (status = 303, description = "Signed in: on to `next`, with the session cookie", headers(
            ("Location" = String, description = "The catalog page to go on to"),
            ("Set-Cookie" = String, description = "The session (HttpOnly, SameSite=Strict, Path: this root's catalog)"),
        )),
        (status = 401, description = "The key does not open this tenant's catalog (`unauthorized`)", content_type = "text/html", body = String),
        (status = 403, description = "The sign-in did not come from the sign-in page: from another site or origin, or without the token of the page's cookie (`forbidden`)", content_type = "text/html", body = String),
        (status = 429, description = "Too many failed sign-ins (`login_locked`)", content_type = "text/html", body = String,
            headers(("Retry-After" = u64, description = "Seconds"))),
        (status = 503, description = "The sign-in cannot be checked or recorded now (`login_busy`, `storage_failed`)", content_type = "text/html", body = String,
            headers(("Retry-After" = u64, description = "Seconds"))),
    ))]
pub(in crate::api) async fn sign_in(
    State(host): State<AppState>,
    Extension(caller): Extension<Caller>,
    Extension(options): Extension<Arc<ApiOptions>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let form = form(&body);
    let next = field(&form, "next").unwrap_or("");
    // The form must be this server's sign-in page's, in this browser.
    if !SIGN_IN_TOKEN.posted_by_its_page(&headers, &form, &options.public_url) {
        tracing::warn!(tenant = caller.tenant, client = %peer.ip(), "a catalog sign-in not from its form was refused");
        let problem = "This sign-in did not come from this page (it was sent from another site, or its form expired); sign in here.";
        let page = sign_in_page(&options, &caller.tenant, &headers, StatusCode::FORBIDDEN, next, Some(problem.into()));
        return ApiError::new(StatusCode::FORBIDDEN, "forbidden", "a sign-in not from the sign-in page").onto(page);
    }
    let key = field(&form, "key").unwrap_or("").trim();
    let token = match host.sign_in_designer(&caller.tenant, key, peer.ip()) {
        Ok(token) => token,
        Err(e) => {
            tracing::info!(tenant = caller.tenant, client = %peer.ip(), error = %e, "a catalog sign-in failed");
            let problem = match &e {
                crate::host::SignInError::Invalid => {
                    "This key does not open this tenant's catalog: it is unknown, revoked, or another tenant's."
                        .to_string()
                }
                crate::host::SignInError::Store(_) => {
                    "The sign-in could not be recorded; try again in a moment.".into()
                }
                _ => format!("{}.", as_words(&e.to_string())),
            };
            let error = ApiError::from(e);
            let page = sign_in_page(&options, &caller.tenant, &headers, error.status(), next, Some(problem));
            return error.onto(page);
        }
    };
    let links = Links::new(&options, &caller.tenant);
    let cookie = session_cookie(&options, &links, token, CATALOG_SESSION_TTL.as_secs() as i64);
    pages::see_other(&links.within(next), &[cookie])
}

/// `POST catalog/sign-out`: ends the session (the access layer checked
/// its form token) and forgets the cookie.
#[utoipa::path(post, summary = "Signs out of the catalog", description = "Ends the session and forgets its cookie.", path = "/catalog/sign-out", tag = "Catalog", operation_id = "catalog_sign_out",
    request_body(content = schemas::FormTokenForm, content_type = "application/x-www-form-urlencoded"),
    responses((status = 303, description = "Signed out: on to the sign-in page", headers(
        ("Location" = String, description = "The sign-in page"),
        ("Set-Cookie" = String, description = "The session cookie, expired"),
    ))))]
pub(in crate::api) async fn sign_out(
    State(host): State<AppState>,
    Extension(caller): Extension<Caller>,
    Extension(options): Extension<Arc<ApiOptions>>,
    headers: HeaderMap,
) -> Response {
    if let Some(token) = session_token(&headers)
        && let Err(e) = host.sign_out_designer(&token)
    {
        tracing::warn!(tenant = caller.tenant, error = %e, "a catalog session could not be ended");
        return sessions_unreadable(&options, &caller.tenant);
    }
    let links = Links::new(&options, &caller.tenant);
    pages::see_other(&links.sign_in(), &[session_cookie(&options, &links, String::new(), 0)])
}

/// The session cookie, scoped to this root's catalog (an empty one that
/// expires at once forgets it).
fn session_cookie(options: &ApiOptions, links: &Links, token: String, max_age_secs: i64) -> cookie::Cookie<'static> {
    pages::page_cookie(&options.public_url, SESSION_COOKIE, token, links.home(), max_age_secs)
}

/// The catalog session cookie's value in `headers`, if any.
pub(in crate::api) fn session_token(headers: &HeaderMap) -> Option<String> {
    pages::cookie(headers, SESSION_COOKIE)
}
