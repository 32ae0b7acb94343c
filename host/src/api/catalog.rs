//! The designer's catalog: server-rendered pages over the core's one model,
//! for the person who chooses, at design time, which tools (and which
//! versions) an agent's instructions name (A2T draft section 5.2).
//!
//! Every path is under the tenant's platform root (`/catalog` for the
//! default tenant, `/t/{tenant}/catalog` for every tenant):
//!
//! | path | what |
//! | --- | --- |
//! | `GET catalog/sign-in`, `POST catalog/sign-in` | sign in with an API key of the tenant |
//! | `POST catalog/sign-out` | end the session |
//! | `GET catalog` | every tool: search, tag filter, order |
//! | `GET catalog/tools/{id}` | a version's signature, confirmation policy, outbound hosts, hash; the versions |
//! | `GET catalog/tools/{id}/diff` | two versions side by side, from `SignatureDiff` |
//! | `GET`/`POST catalog/tools/{id}/try` | a form generated from the signature; the call and its answer |
//! | `GET catalog/confirmations/{id}` | the state and answer of a call that waits for its end user |
//!
//! Everything shown is a view of the core's model (`Signature`,
//! `SignatureDiff`, the registry's versions, the confirmation policy, the
//! manifest's hosts, the sha256); a call runs through
//! [`ToolHost::invoke`](crate::host::ToolHost::invoke) after
//! [`invocation::input_record`], as the other doors' do, once per form: the
//! form's call id is claimed in the core's call ledger
//! ([`crate::idempotency`]), so a browser that sends it again gets the first
//! call's answer. Who may see a page is decided in `auth.rs`
//! (`Access::Catalog`), as for every route.

use super::pages::{self, DesignerBar, Frame, Paragraph, Product, field, form};
use super::{ApiError, ApiOptions, AppState, Caller, schemas};
use crate::door::FrontDoor;
use crate::host::ConsoleEntry;
use crate::host::{
    CATALOG_SESSION_TTL, Call, CatalogOrder, CatalogQuery, ConfirmationNeed, DesignerSession, InvokeError,
    MAX_SEARCH_CHARS, State as TxState, ToolHost, as_words,
};
use crate::idempotency::Claim;
use crate::invocation::{self, ToolResult};
use crate::registry::{Tool, ToolVersion};
use crate::signature::{Change, EnumValue, InputParam, InputType, OutputType, SignatureDiff};
use crate::store::CallKey;
use crate::tenancy::unix_now;
use askama::Template;
use axum::Extension;
use axum::body::Bytes;
use axum::extract::{ConnectInfo, FromRequestParts, Path, RawQuery, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::{BTreeSet, HashMap};
use std::net::SocketAddr;
use std::sync::Arc;

/// The session cookie. Its `Path` is the catalog of one platform root, so a
/// browser sends a tenant's session to that tenant's catalog only (and the
/// core refuses a session presented at another tenant's root anyway).
const SESSION_COOKIE: &str = "plinth_catalog_session";
/// The sign-in form's cookie: a random token that the form carries too (a
/// double submit), so that a page of another site cannot sign the browser
/// in with a key of its choosing (login CSRF), whatever the browser says of
/// where a post came from: that page can neither read the cookie nor make
/// the browser send it (`SameSite=Strict`). Sent to the sign-in path only.
const SIGN_IN_TOKEN: pages::SignInToken =
    pages::SignInToken { cookie: "plinth_catalog_sign_in", field: "sign_in_token" };
/// Tools on one page of the catalog.
const PAGE_SIZE: usize = 50;
/// A string input gets a multi-line box unless it is at most this long.
const ONE_LINE_CHARS: u32 = 120;

/// The links of one tenant's catalog, all relative to the server
/// (`{path of the public URL}{/t/tenant}/catalog…`).
struct Links {
    root: String,
}

impl Links {
    fn new(options: &ApiOptions, tenant: &str) -> Links {
        Links { root: pages::tenant_root_path(&options.public_url, tenant) }
    }

    fn home(&self) -> String {
        format!("{}/catalog", self.root)
    }

    fn sign_in(&self) -> String {
        format!("{}/catalog/sign-in", self.root)
    }

    fn sign_out(&self) -> String {
        format!("{}/catalog/sign-out", self.root)
    }

    fn tagged(&self, tag: &str) -> String {
        format!("{}/catalog?tag={}", self.root, encode(tag))
    }

    fn tool(&self, tool: &Tool) -> String {
        format!("{}/catalog/tools/{}", self.root, tool.id)
    }

    fn version(&self, tool: &Tool, number: u32) -> String {
        format!("{}?version={number}", self.tool(tool))
    }

    fn diff(&self, tool: &Tool) -> String {
        format!("{}/diff", self.tool(tool))
    }

    fn diff_of(&self, tool: &Tool, from: u32, to: u32) -> String {
        format!("{}?from={from}&to={to}", self.diff(tool))
    }

    fn try_it(&self, tool: &Tool) -> String {
        format!("{}/try", self.tool(tool))
    }

    fn confirmation(&self, id: &str) -> String {
        format!("{}/catalog/confirmations/{}", self.root, encode(id))
    }

    /// Where a request to `uri` (as routed, its platform root taken off)
    /// came to: what a sign-in returns to.
    fn here(&self, uri: &Uri) -> String {
        format!("{}{}", self.root, uri.path_and_query().map_or("/catalog", |pq| pq.as_str()))
    }

    /// `next` if it is a page of this catalog, else the catalog: a sign-in
    /// never sends the browser anywhere else.
    fn within(&self, next: &str) -> String {
        let home = self.home();
        let inside = next == home || next.starts_with(&format!("{home}/")) || next.starts_with(&format!("{home}?"));
        let plain =
            !next.contains("..") && !next.contains("//") && !next.contains('\\') && !next.contains(char::is_control);
        if inside && plain { next.to_string() } else { home }
    }
}

/// A moment as the pages show it: `2026-12-24 09:30 UTC`.
fn at(unix: i64) -> String {
    chrono::DateTime::from_timestamp(unix, 0).map(|t| t.format("%Y-%m-%d %H:%M UTC").to_string()).unwrap_or_default()
}

/// Text whose `quoted` parts (the core's messages quote names so) are
/// shown as code: `(is code, text)` pieces.
fn rich(text: &str) -> Vec<(bool, String)> {
    let parts: Vec<&str> = text.split('`').collect();
    // An odd number of backticks is not quoting: the text as it is.
    if parts.len().is_multiple_of(2) {
        return vec![(false, text.to_string())];
    }
    parts.iter().enumerate().filter(|(_, p)| !p.is_empty()).map(|(i, p)| (i % 2 == 1, p.to_string())).collect()
}

fn encode(text: &str) -> String {
    form_urlencoded::byte_serialize(text.as_bytes()).collect()
}

/// The catalog session cookie's value in `headers`, if any.
pub(super) fn session_token(headers: &HeaderMap) -> Option<String> {
    pages::cookie(headers, SESSION_COOKIE)
}

/// A frame for a catalog page; with the designer's bar when signed in.
fn frame(options: &ApiOptions, links: &Links, title: impl Into<String>, session: Option<&DesignerSession>) -> Frame {
    let mut frame = Frame::new(&options.public_url, Product::Catalog, title);
    frame.home = Some(links.home());
    frame.designer = session.map(|s| DesignerBar {
        tenant: s.tenant.clone(),
        key_id: s.principal.key_id.clone(),
        sign_out: links.sign_out(),
        form_token: s.form_token.clone(),
    });
    frame
}

/// A plain catalog page.
fn notice(
    options: &ApiOptions,
    links: &Links,
    session: Option<&DesignerSession>,
    status: StatusCode,
    title: &str,
    paragraphs: Vec<Paragraph>,
) -> Response {
    let page = pages::Notice {
        frame: frame(options, links, title, session),
        paragraphs,
        link: Some((links.home(), "Back to the catalog".to_string())),
    };
    pages::page(status, &page)
}

// Signing in and out.

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
pub(super) fn sign_in_required(
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
pub(super) fn forged_form(options: &ApiOptions, session: &DesignerSession) -> Response {
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

/// The access layer's answer when the sessions cannot be read.
pub(super) fn sessions_unreadable(options: &ApiOptions, tenant: &str) -> Response {
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
pub(super) async fn sign_in_form(
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
pub(super) async fn sign_in(
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
pub(super) async fn sign_out(
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

// The catalog.

/// `GET catalog?q=…&tag=…&sort=name|newest&page=N`.
#[derive(Template)]
#[template(path = "pages/catalog.html")]
struct CatalogPage {
    frame: Frame,
    links: CatalogLinks,
    tenant: String,
    q: String,
    max_search: usize,
    tags: Vec<String>,
    selected_tag: String,
    newest_first: bool,
    count_text: String,
    entries: Vec<EntryView>,
    previous: Option<String>,
    next: Option<String>,
}

/// The links a template needs by name.
struct CatalogLinks {
    home: String,
}

/// One tool in the list.
struct EntryView {
    id: String,
    name: String,
    href: String,
    description: String,
    tags: Vec<(String, String)>,
    version: u32,
    deployed: String,
    otc_id: String,
    confirmation: Option<&'static str>,
}

/// The words a list shows for a tool's confirmation need.
/// What MCP clients are told of the tool ([`crate::manifest::ToolAnnotations::published`]), in words.
fn annotation_words(host: &crate::host::ToolHost, tool: &Tool, version: &ToolVersion) -> Vec<(&'static str, String)> {
    let published = crate::host::published_annotations(version, host.confirmation_need(tool, version));
    let yes_no = |b: bool| if b { "yes" } else { "no" }.to_string();
    let mut words = Vec::new();
    if let Some(title) = published.title {
        words.push(("Title", title));
    }
    for (what, value) in [
        ("Read-only", published.read_only),
        ("Destructive", published.destructive),
        ("Idempotent", published.idempotent),
        ("Reaches the outside world", published.open_world),
    ] {
        if let Some(value) = value {
            words.push((what, yes_no(value)));
        }
    }
    words
}

fn confirmation_badge(need: ConfirmationNeed) -> Option<&'static str> {
    match need {
        ConfirmationNeed::Never => None,
        ConfirmationNeed::Sometimes => Some("some calls need confirmation"),
        ConfirmationNeed::Always => Some("every call needs confirmation"),
    }
}

#[utoipa::path(get, summary = "The tenant's tools", description = "Every tool with a live version: its name, description, tags, current version and the ids it is reachable by (A2T, OTC, MCP); searched by the words of names and descriptions, filtered by tag, ordered by name or newest deploy, 50 a page.", path = "/catalog", tag = "Catalog", operation_id = "catalog",
    params(
        ("q" = Option<String>, Query, description = "Words each tool has in its name or description"),
        ("tag" = Option<String>, Query, description = "A tag each tool has"),
        ("sort" = Option<String>, Query, description = "`name` (the default) or `newest`"),
        ("page" = Option<u32>, Query, description = "The page, from 1"),
    ),
    responses((status = 200, description = "The catalog", content_type = "text/html", body = String)))]
pub(super) async fn catalog(
    State(host): State<AppState>,
    Extension(caller): Extension<Caller>,
    Extension(options): Extension<Arc<ApiOptions>>,
    Extension(session): Extension<DesignerSession>,
    RawQuery(query): RawQuery,
) -> Response {
    let query = form(query.unwrap_or_default().as_bytes());
    let q = field(&query, "q").unwrap_or("").chars().take(MAX_SEARCH_CHARS).collect::<String>();
    let tag = field(&query, "tag").unwrap_or("").to_string();
    let newest_first = field(&query, "sort") == Some("newest");
    let page_number = field(&query, "page").and_then(|p| p.parse::<usize>().ok()).filter(|p| *p >= 1).unwrap_or(1);
    let order = if newest_first { CatalogOrder::NewestDeploy } else { CatalogOrder::Name };
    let found = host.catalog(&caller.tenant, &CatalogQuery::new(&q, Some(tag.clone()), order));
    let links = Links::new(&options, &caller.tenant);
    let total = found.entries.len();
    let pages = total.div_ceil(PAGE_SIZE).max(1);
    let page_number = page_number.min(pages);
    let entries = found
        .entries
        .iter()
        .skip((page_number - 1) * PAGE_SIZE)
        .take(PAGE_SIZE)
        .map(|entry| {
            let (tool, current) = (&entry.tool, &entry.current);
            EntryView {
                id: tool.id.to_string(),
                name: tool.name.clone(),
                href: links.tool(tool),
                description: current.signature.description.clone(),
                tags: current.signature.tags.iter().map(|t| (t.clone(), links.tagged(t))).collect(),
                version: current.number,
                deployed: at(current.created_at),
                otc_id: crate::tool_ids::otc_tool_id(tool, current),
                confirmation: confirmation_badge(host.confirmation_need(tool, current)),
            }
        })
        .collect();
    let searched = !q.trim().is_empty() || !tag.is_empty();
    let count_text = match (total, searched) {
        (0, true) => "No tool matches.".to_string(),
        (0, false) => "This tenant has no tools yet.".to_string(),
        (1, _) => "1 tool.".to_string(),
        (n, _) if pages > 1 => format!("{n} tools; page {page_number} of {pages}."),
        (n, _) => format!("{n} tools."),
    };
    let page_link = |n: usize| {
        format!(
            "{}?q={}&tag={}&sort={}&page={n}",
            links.home(),
            encode(&q),
            encode(&tag),
            if newest_first { "newest" } else { "name" }
        )
    };
    let previous = (page_number > 1).then(|| page_link(page_number - 1));
    let next = (page_number < pages).then(|| page_link(page_number + 1));
    let page = CatalogPage {
        frame: frame(&options, &links, format!("Tools of {}", caller.tenant), Some(&session)),
        links: CatalogLinks { home: links.home() },
        tenant: caller.tenant.clone(),
        q,
        max_search: MAX_SEARCH_CHARS,
        tags: found.tags,
        selected_tag: tag,
        newest_first,
        count_text,
        entries,
        previous,
        next,
    };
    pages::page(StatusCode::OK, &page)
}

// One tool.

/// An input or output parameter as the pages show it.
struct ParamView {
    name: String,
    kind: String,
    constraint: Option<String>,
    /// An input's `required`, `optional` or `private`: (class, words).
    badge: Option<(&'static str, &'static str)>,
    description: String,
    values: Vec<(String, String)>,
    /// `added`, `removed` or `changed` on the diff page.
    class: Option<&'static str>,
}

fn enum_values(values: &[EnumValue]) -> Vec<(String, String)> {
    values.iter().map(|v| (v.name.clone(), v.description.clone())).collect()
}

/// What an input takes, in words: its type, and the constraint on it.
fn input_kind(param: &InputParam) -> (String, Option<String>) {
    match &param.ty {
        InputType::String { max_length: Some(max) } => ("string".into(), Some(format!("at most {max} characters"))),
        InputType::String { max_length: None } => ("string".into(), None),
        InputType::Int { wit, min, max } => {
            ("integer".into(), Some(format!("from {min} to {max} ({})", format!("{wit:?}").to_lowercase())))
        }
        InputType::Boolean => ("boolean".into(), Some("true or false".into())),
        InputType::Enum { values } => ("enum".into(), Some(format!("one of {} values", values.len()))),
    }
}

fn input_views(
    signature: &crate::signature::Signature,
    class: impl Fn(&str) -> Option<&'static str>,
) -> Vec<ParamView> {
    signature
        .inputs
        .iter()
        .map(|p| {
            let (kind, constraint) = input_kind(p);
            let badge = match (p.private, p.required) {
                (true, _) => ("warn", "private: typed by the end user"),
                (false, true) => ("", "required"),
                (false, false) => ("muted", "optional"),
            };
            let values = if let InputType::Enum { values } = &p.ty { enum_values(values) } else { Vec::new() };
            let (name, description) = (p.name.clone(), p.description.clone());
            ParamView { name, kind, constraint, badge: Some(badge), description, values, class: class(&p.id) }
        })
        .collect()
}

fn output_views(
    signature: &crate::signature::Signature,
    class: impl Fn(&str) -> Option<&'static str>,
) -> Vec<ParamView> {
    signature
        .outputs
        .iter()
        .map(|p| {
            let kind = match &p.ty {
                OutputType::Json { .. } => "JSON value".into(),
                OutputType::Int => "integer".into(),
                other => other.a2t_name().to_string(),
            };
            let values = if let OutputType::Enum { values } = &p.ty { enum_values(values) } else { Vec::new() };
            let (name, description) = (p.name.clone(), p.description.clone());
            ParamView { name, kind, constraint: None, badge: None, description, values, class: class(&p.id) }
        })
        .collect()
}

/// What a page was asked for that is not there, or may not be tried.
enum Unavailable {
    /// The tenant has no such tool.
    Tool,
    /// The tool (named) has no such version.
    Version(String),
    /// The core refused it (a retired version).
    Refused(ApiError),
}

impl Unavailable {
    /// The page that says so.
    fn page(self, options: &ApiOptions, session: &DesignerSession) -> Response {
        let links = Links::new(options, &session.tenant);
        let (status, title, said, error) = match self {
            Unavailable::Tool => (StatusCode::NOT_FOUND, "No such tool", "This tenant has no such tool.".into(), None),
            Unavailable::Version(tool) => {
                (StatusCode::NOT_FOUND, "No such version", format!("`{tool}` has no such version."), None)
            }
            Unavailable::Refused(e) => (e.status(), "Cannot be tried", e.message().to_string(), Some(e)),
        };
        let page = notice(options, &links, Some(session), status, title, vec![Paragraph::of(said).id("problem")]);
        match error {
            Some(e) => e.onto(page),
            None => page,
        }
    }
}

/// What a page about one tool starts from: the tenant's tool its path
/// names (`{tool_id}`), the session, the options and the query's fields.
/// A tool the tenant does not have is the page that says so.
pub(super) struct AboutTool {
    host: AppState,
    options: Arc<ApiOptions>,
    session: DesignerSession,
    tool: Arc<Tool>,
    query: Vec<(String, String)>,
}

impl FromRequestParts<AppState> for AboutTool {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, host: &AppState) -> Result<Self, Response> {
        // Both are there behind `Access::Catalog` (`auth.rs`).
        let options = parts.extensions.get::<Arc<ApiOptions>>().cloned();
        let session = parts.extensions.get::<DesignerSession>().cloned();
        let (Some(options), Some(session)) = (options, session) else {
            return Err(ApiError::internal("the server is misconfigured").into_response());
        };
        let Path(tool_id) = Path::<String>::from_request_parts(parts, host).await.map_err(|e| e.into_response())?;
        let Some(tool) = host.tool(&session.tenant, &tool_id) else {
            return Err(Unavailable::Tool.page(&options, &session));
        };
        let query = form(parts.uri.query().unwrap_or_default().as_bytes());
        Ok(AboutTool { host: host.clone(), options, session, tool, query })
    }
}

/// Version `n` of `tool` (its current one when `None`, else its newest).
fn find_version(tool: &Tool, n: Option<&str>) -> Result<Arc<ToolVersion>, Unavailable> {
    let found = match n {
        Some(n) => n.parse::<u32>().ok().and_then(|n| tool.version(n)),
        None => tool.current().or_else(|| tool.version(tool.newest_number())),
    };
    found.ok_or_else(|| Unavailable::Version(tool.name.clone()))
}

/// `GET catalog/tools/{id}[?version=N]`.
#[derive(Template)]
#[template(path = "pages/catalog_tool.html")]
struct ToolPage {
    frame: Frame,
    crumbs: Vec<(String, Option<String>)>,
    name: String,
    description: String,
    tags: Vec<(String, String)>,
    version: u32,
    current: Option<u32>,
    is_current: bool,
    retired: Option<String>,
    try_href: String,
    compare_href: Option<String>,
    inputs: Vec<ParamView>,
    outputs: Vec<ParamView>,
    confirmation: String,
    confirmation_note: Option<String>,
    hosts: Vec<String>,
    secrets: Vec<String>,
    /// The published annotations, as (what, said).
    annotations: Vec<(&'static str, String)>,
    tool_id: String,
    otc_id: String,
    sha256: String,
    deployed: String,
    /// The registry reference and manifest digest it was pulled from.
    source: Option<(String, String)>,
    /// Its verified signers: key name, kind, fingerprint.
    signers: Vec<(String, String, String)>,
    versions: Vec<VersionRow>,
    /// The tool's recent failed calls with their log lines, for a
    /// publisher of the tenant (or an operator); `None` for a consumer.
    failures: Option<Vec<ConsoleEntry>>,
    /// The tool's usage over the last hour, for a publisher; `None` for a
    /// consumer.
    usage: Option<UsageChart>,
}

/// A tool's last hour, drawn as bars (server-rendered SVG, no script).
struct UsageChart {
    calls: u64,
    failures: u64,
    /// (door, version, p50, p95, p99) in milliseconds, as text.
    latency: Vec<(String, u32, String, String, String)>,
    /// (declared host, status, requests), every door and version's.
    outbound: Vec<(String, String, u64)>,
    /// One per minute: x, the height of its calls and of its failures (of
    /// [`CHART_HEIGHT`]), and its title.
    bars: Vec<(u32, u32, u32, String)>,
}

/// The chart's size in SVG units, and one minute's width.
const CHART_HEIGHT: u32 = 80;
const BAR_WIDTH: u32 = 8;

impl UsageChart {
    fn from_usage(usage: &serde_json::Value) -> UsageChart {
        use std::collections::BTreeMap;
        let items = usage["items"].as_array().cloned().unwrap_or_default();
        let since = usage["since"].as_i64().unwrap_or(0);
        let mut minutes: BTreeMap<i64, (u64, u64)> = BTreeMap::new();
        let (mut calls, mut failures) = (0, 0);
        let mut latency = Vec::new();
        let mut outbound: BTreeMap<(String, String), u64> = BTreeMap::new();
        let ms = |v: &serde_json::Value| v.as_f64().map_or("—".to_string(), |n| format!("≤ {n} ms"));
        for item in &items {
            calls += item["calls"].as_u64().unwrap_or(0);
            latency.push((
                item["door"].as_str().unwrap_or("?").to_string(),
                item["version"].as_u64().unwrap_or(0) as u32,
                ms(&item["latencyMs"]["p50"]),
                ms(&item["latencyMs"]["p95"]),
                ms(&item["latencyMs"]["p99"]),
            ));
            for request in item["outbound"].as_array().into_iter().flatten() {
                let host = request["host"].as_str().unwrap_or("?").to_string();
                let status = request["status"].as_str().unwrap_or("?").to_string();
                *outbound.entry((host, status)).or_default() += request["requests"].as_u64().unwrap_or(0);
            }
            for point in item["series"].as_array().into_iter().flatten() {
                let slot = minutes.entry(point["start"].as_i64().unwrap_or(0)).or_default();
                slot.0 += point["calls"].as_u64().unwrap_or(0);
                slot.1 += point["failures"].as_u64().unwrap_or(0);
                failures += point["failures"].as_u64().unwrap_or(0);
            }
        }
        let most = minutes.values().map(|m| m.0).max().unwrap_or(0).max(1);
        let bars = minutes
            .iter()
            .map(|(start, (n, failed))| {
                let x = u32::try_from((start - since) / 60).unwrap_or(0).min(60) * BAR_WIDTH;
                let height = |v: u64| ((v * u64::from(CHART_HEIGHT)).div_ceil(most)) as u32;
                let minute = chrono::DateTime::from_timestamp(*start, 0)
                    .map_or(String::new(), |t| t.format("%H:%M").to_string());
                (x, height(*n), height(*failed), format!("{minute} UTC: {n} calls, {failed} failed"))
            })
            .collect();
        let outbound = outbound.into_iter().map(|((host, status), n)| (host, status, n)).collect();
        UsageChart { calls, failures, latency, outbound, bars }
    }
}

/// A row of the versions table.
struct VersionRow {
    number: u32,
    href: String,
    deployed: String,
    retired: Option<String>,
    current: bool,
    sha256: String,
    short_sha256: String,
    diff_href: Option<String>,
}

#[utoipa::path(get, summary = "A tool's page", description = "A version's signature for a human (inputs with their types, ranges, enum values and descriptions; outputs), its confirmation policy, the outbound hosts it may reach, its content hash, and every version.", path = "/catalog/tools/{tool_id}", tag = "Catalog", operation_id = "catalog_tool",
    params(("tool_id" = String, Path, description = "The tool's `toolId`"), ("version" = Option<u32>, Query, description = "The version shown (the current one by default)")),
    responses((status = 200, description = "The tool", content_type = "text/html", body = String), (status = 404, description = "No such tool or version", content_type = "text/html", body = String)))]
pub(super) async fn tool(about: AboutTool) -> Response {
    let AboutTool { host, options, session, tool, query } = about;
    let version = match find_version(&tool, field(&query, "version")) {
        Ok(version) => version,
        Err(why) => return why.page(&options, &session),
    };
    let links = Links::new(&options, &session.tenant);
    let current = tool.current().map(|v| v.number);
    let signature = &version.signature;
    let versions = tool.versions_before(None, usize::MAX);
    let rows = versions
        .iter()
        .map(|v| VersionRow {
            number: v.number,
            href: links.version(&tool, v.number),
            deployed: at(v.created_at),
            retired: v.retired_at().map(at),
            current: Some(v.number) == current,
            sha256: v.sha256.clone(),
            short_sha256: v.sha256.chars().take(12).collect(),
            diff_href: current
                .filter(|c| *c != v.number)
                .map(|c| links.diff_of(&tool, v.number.min(c), v.number.max(c))),
        })
        .collect();
    let (confirmation, confirmation_note) = confirmation_words(&host, &tool, &version);
    let page = ToolPage {
        frame: frame(&options, &links, tool.name.clone(), Some(&session)),
        crumbs: vec![("Catalog".into(), Some(links.home())), (tool.name.clone(), None)],
        name: tool.name.clone(),
        description: signature.description.clone(),
        tags: signature.tags.iter().map(|t| (t.clone(), links.tagged(t))).collect(),
        version: version.number,
        current,
        is_current: Some(version.number) == current,
        retired: version.retired_at().map(at),
        try_href: format!("{}?version={}", links.try_it(&tool), version.number),
        compare_href: (versions.len() > 1).then(|| links.diff(&tool)),
        inputs: input_views(signature, |_| None),
        outputs: output_views(signature, |_| None),
        confirmation,
        confirmation_note,
        hosts: version.manifest.allowed_hosts.clone(),
        secrets: version.manifest.secrets.clone(),
        annotations: annotation_words(&host, &tool, &version),
        tool_id: tool.id.to_string(),
        otc_id: crate::tool_ids::otc_tool_id(&tool, &version),
        sha256: version.sha256.clone(),
        deployed: at(version.created_at),
        source: version.provenance.source.as_ref().map(|s| (s.reference.clone(), s.manifest_digest.clone())),
        signers: version
            .provenance
            .signers
            .iter()
            .map(|s| (s.key.clone(), s.kind.clone(), s.fingerprint.clone()))
            .collect(),
        versions: rows,
        failures: (session.principal.role >= crate::tenancy::Role::Publisher).then(|| {
            let filter = crate::host::ConsoleFilter {
                tool: Some(tool.id.to_string()),
                failures_only: true,
                ..Default::default()
            };
            host.recent_calls(&tool.tenant, &filter, None, RECENT_FAILURES)
        }),
        usage: None,
    };
    let mut page = page;
    if page.failures.is_some() {
        let (host, tenant, id) = (host.clone(), tool.tenant.clone(), tool.id.to_string());
        // The store may block: off the request threads.
        let usage = tokio::task::spawn_blocking(move || host.usage(&tenant, "hour", Some(&id))).await;
        page.usage = usage.ok().and_then(Result::ok).map(|u| UsageChart::from_usage(&u));
    }
    pages::page(StatusCode::OK, &page)
}

/// Recent failed calls a publisher sees on a tool's page.
const RECENT_FAILURES: usize = 10;

/// The confirmation policy that applies to `version`'s calls, in words,
/// and where it comes from.
fn confirmation_words(host: &AppState, tool: &Tool, version: &ToolVersion) -> (String, Option<String>) {
    let private = version.signature.inputs.iter().any(|p| p.private);
    let overridden = host.confirmation_override(tool.id);
    let policy = overridden.as_ref().unwrap_or(&version.manifest.confirmation);
    let rule = if private {
        "Every call needs its end user's confirmation: the end user types its private inputs on the confirmation page."
            .to_string()
    } else if policy.required {
        "Every call needs its end user's confirmation before it runs.".to_string()
    } else if let Some(when) = &policy.when {
        format!(
            "A call needs its end user's confirmation when this condition on its inputs holds (or cannot be evaluated): {when}"
        )
    } else {
        "No call needs confirmation: calls run at once.".to_string()
    };
    let source = if overridden.is_some() {
        Some("Set by the tenant's publisher, over what the tool declares in its plinth.toml.".to_string())
    } else if !policy.is_empty() {
        Some("Declared by the tool ([confirmation] in its plinth.toml).".to_string())
    } else {
        None
    };
    (rule, source)
}

// Comparing two versions.

/// `GET catalog/tools/{id}/diff?from=A&to=B`.
#[derive(Template)]
#[template(path = "pages/catalog_diff.html")]
struct DiffPage {
    frame: Frame,
    crumbs: Vec<(String, Option<String>)>,
    action: String,
    numbers: Vec<u32>,
    from: u32,
    to: u32,
    compatible: bool,
    from_retired: Option<String>,
    groups: Vec<ChangeGroup>,
    old: SideView,
    new: SideView,
}

/// Changes of one kind.
struct ChangeGroup {
    title: &'static str,
    id: &'static str,
    changes: Vec<ChangeView>,
}

/// One change, as `SignatureDiff` says it.
struct ChangeView {
    code: &'static str,
    breaking: bool,
    message: Vec<(bool, String)>,
}

/// One side of the comparison.
struct SideView {
    deployed: String,
    short_sha256: String,
    inputs: Vec<ParamView>,
    outputs: Vec<ParamView>,
}

#[utoipa::path(get, summary = "Two versions of a tool side by side", description = "What was added, changed and removed from the older to the newer (`SignatureDiff`), and whether a caller written against the older one keeps working.", path = "/catalog/tools/{tool_id}/diff", tag = "Catalog", operation_id = "catalog_diff",
    params(
        ("tool_id" = String, Path, description = "The tool's `toolId`"),
        ("from" = Option<u32>, Query, description = "One version (by default the one before `to`)"),
        ("to" = Option<u32>, Query, description = "The other (by default the current one)"),
    ),
    responses((status = 200, description = "The comparison", content_type = "text/html", body = String), (status = 404, description = "No such tool or version", content_type = "text/html", body = String)))]
pub(super) async fn diff(about: AboutTool) -> Response {
    let AboutTool { options, session, tool, query, .. } = about;
    let links = Links::new(&options, &session.tenant);
    let mut numbers: Vec<u32> = tool.versions_before(None, usize::MAX).iter().map(|v| v.number).collect();
    numbers.reverse();
    let newest = tool.current().map_or(tool.newest_number(), |v| v.number);
    let to = field(&query, "to").map_or(Some(newest), |n| n.parse().ok());
    let from = match field(&query, "from") {
        Some(n) => n.parse().ok(),
        None => to.map(|to| numbers.iter().copied().filter(|n| *n < to).max().unwrap_or(to)),
    };
    // The older one is compared with the newer, whichever way they came.
    let versions = from.zip(to).map(|(a, b)| (a.min(b), a.max(b)));
    let Some(((from, old), (to, new))) =
        versions.and_then(|(from, to)| Some(((from, tool.version(from)?), (to, tool.version(to)?))))
    else {
        return Unavailable::Version(tool.name.clone()).page(&options, &session);
    };
    let diff = SignatureDiff::between(&old.signature, &new.signature);
    let changed: BTreeSet<&str> = diff.changes.iter().filter_map(|c| c.parameter.as_deref()).collect();
    let old_inputs: BTreeSet<&str> = old.signature.inputs.iter().map(|p| p.id.as_str()).collect();
    let new_inputs: BTreeSet<&str> = new.signature.inputs.iter().map(|p| p.id.as_str()).collect();
    let old_outputs: BTreeSet<&str> = old.signature.outputs.iter().map(|p| p.id.as_str()).collect();
    let new_outputs: BTreeSet<&str> = new.signature.outputs.iter().map(|p| p.id.as_str()).collect();
    let mark = |id: &str, other_side: &BTreeSet<&str>, missing: &'static str| {
        if !other_side.contains(id) {
            Some(missing)
        } else if changed.contains(id) {
            Some("changed")
        } else {
            None
        }
    };
    let side = |version: &ToolVersion, inputs: Vec<ParamView>, outputs: Vec<ParamView>| SideView {
        deployed: at(version.created_at),
        short_sha256: version.sha256.chars().take(12).collect(),
        inputs,
        outputs,
    };
    let old_view = side(
        &old,
        input_views(&old.signature, |id| mark(id, &new_inputs, "removed")),
        output_views(&old.signature, |id| mark(id, &new_outputs, "removed")),
    );
    let new_view = side(
        &new,
        input_views(&new.signature, |id| mark(id, &old_inputs, "added")),
        output_views(&new.signature, |id| mark(id, &old_outputs, "added")),
    );
    let page = DiffPage {
        frame: frame(&options, &links, format!("{}: version {from} and version {to}", tool.name), Some(&session)),
        crumbs: vec![
            ("Catalog".into(), Some(links.home())),
            (tool.name.clone(), Some(links.tool(&tool))),
            ("Compare versions".into(), None),
        ],
        action: links.diff(&tool),
        numbers,
        from,
        to,
        compatible: diff.is_compatible(),
        from_retired: old.retired_at().map(at),
        groups: change_groups(diff),
        old: old_view,
        new: new_view,
    };
    pages::page(StatusCode::OK, &page)
}

/// The diff's changes: what was added, what changed, what was removed.
fn change_groups(diff: SignatureDiff) -> Vec<ChangeGroup> {
    let mut groups = [
        ChangeGroup { title: "Added", id: "added", changes: Vec::new() },
        ChangeGroup { title: "Changed", id: "changed", changes: Vec::new() },
        ChangeGroup { title: "Removed", id: "removed", changes: Vec::new() },
    ];
    for change in diff.changes {
        let group = if change.code.ends_with("_added") {
            0
        } else if change.code.ends_with("_removed") {
            2
        } else {
            1
        };
        let Change { code, breaking, message, .. } = change;
        groups[group].changes.push(ChangeView { code, breaking, message: rich(&message) });
    }
    groups.into_iter().filter(|g| !g.changes.is_empty()).collect()
}

// Trying a tool.

/// `GET`/`POST catalog/tools/{id}/try`.
#[derive(Template)]
#[template(path = "pages/catalog_try.html")]
struct TryPage {
    frame: Frame,
    crumbs: Vec<(String, Option<String>)>,
    name: String,
    description: String,
    action: String,
    form_token: String,
    /// This form's call id: new on every page, so each form sent is one call.
    call_id: String,
    /// On the answer to a form sent again: how many hours its answer is kept.
    resent: Option<u64>,
    versions: Vec<u32>,
    version: u32,
    current: u32,
    problem: Option<Vec<(bool, String)>>,
    fields: Vec<FieldView>,
    private: Vec<String>,
    end_user: Option<EndUserField>,
    answer: Option<Answer>,
}

/// How a field is entered.
enum Control {
    /// A one-line text box.
    Line,
    /// A multi-line text box.
    Text,
    /// A whole number between two bounds.
    Number(String, String),
    /// One of a list (an enum's values, or true/false).
    Choice(Vec<String>),
}

/// One input of the form.
struct FieldView {
    name: String,
    required: bool,
    hint: String,
    description: String,
    values: Vec<(String, String)>,
    control: Control,
    /// What was entered (kept when the form comes back with errors).
    value: String,
    /// Why the core refused it.
    error: Option<Vec<(bool, String)>>,
}

/// The end user a call is made for, when it may need confirmation.
struct EndUserField {
    hint: String,
    value: String,
    error: Option<Vec<(bool, String)>>,
}

/// What came of a call; kept as JSON in the call ledger, to answer the
/// same form sent again.
#[derive(Clone, Serialize, Deserialize)]
enum Answer {
    /// The tool's outputs: `(name, value as JSON)`.
    Outputs { outputs: Vec<(String, String)> },
    /// Refused, or failed: the status, code and message the A2T door would
    /// answer, and the fields an agent could act on.
    Refused { status: u16, code: String, message: Vec<(bool, String)>, details: Vec<(String, String)> },
    /// Waiting for its end user's confirmation.
    Pending { end_user: String, expires: String, confirm_href: Option<String>, pack: String, status_href: String },
    /// A waiting call's state, not yet answered.
    Waiting { state: String, expires: String },
    /// The kept answer of a call made through another door, in that door's
    /// shape: its status and JSON.
    Kept { status: u16, json: String },
}

impl Answer {
    fn refused(error: &ApiError) -> Answer {
        let details = error
            .fields()
            .iter()
            .map(|(k, v)| (k.clone(), v.as_str().map_or_else(|| v.to_string(), str::to_string)))
            .collect();
        Answer::Refused {
            status: error.status().as_u16(),
            code: error.code().to_string(),
            message: rich(error.message()),
            details,
        }
    }
}

/// Bytes of JSON a page shows of one value (and the call ledger keeps of
/// a try form's answer); past it the value is cut, and says so.
const SHOWN_JSON_BYTES: usize = 64 * 1024;

/// `value` as a page shows it: indented when that fits in
/// [`SHOWN_JSON_BYTES`], else compact — indentation grows with nesting, so
/// a deep value indented can be many times its own size — and cut there
/// with a note. Never more work than that many bytes of output.
fn shown_json(value: &Value) -> String {
    /// A writer that refuses what goes past its room.
    struct Bounded(Vec<u8>);
    impl std::io::Write for Bounded {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            if self.0.len() + bytes.len() > SHOWN_JSON_BYTES {
                return Err(std::io::ErrorKind::OutOfMemory.into());
            }
            self.0.extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut out = Bounded(Vec::new());
    if serde_json::to_writer_pretty(&mut out, value).is_ok() {
        return String::from_utf8(out.0).unwrap_or_default();
    }
    let mut out = Bounded(Vec::new());
    if serde_json::to_writer(&mut out, value).is_ok() {
        return String::from_utf8(out.0).unwrap_or_default();
    }
    // Full: what was written, cut at a character boundary.
    let text = String::from_utf8_lossy(&out.0);
    let text = text.trim_end_matches(char::REPLACEMENT_CHARACTER);
    format!("{text}… (shown in part: the first {} KiB)", SHOWN_JSON_BYTES / 1024)
}

/// The form of `version`, with what was entered and the core's errors.
fn try_page(
    host: &AppState,
    options: &ApiOptions,
    session: &DesignerSession,
    tool: &Tool,
    version: &ToolVersion,
    entered: &HashMap<String, String>,
    errors: &HashMap<String, String>,
) -> TryPage {
    let links = Links::new(options, &session.tenant);
    let signature = &version.signature;
    let fields = signature
        .inputs
        .iter()
        .filter(|p| !p.private)
        .map(|p| {
            let (kind, constraint) = input_kind(p);
            let (control, values) = match &p.ty {
                InputType::String { max_length: Some(max) } if *max <= ONE_LINE_CHARS => (Control::Line, Vec::new()),
                InputType::String { .. } => (Control::Text, Vec::new()),
                InputType::Int { min, max, .. } => (Control::Number(min.to_string(), max.to_string()), Vec::new()),
                InputType::Boolean => (Control::Choice(vec!["true".into(), "false".into()]), Vec::new()),
                InputType::Enum { values } => {
                    (Control::Choice(values.iter().map(|v| v.name.clone()).collect()), enum_values(values))
                }
            };
            FieldView {
                name: p.name.clone(),
                required: p.required,
                hint: match constraint {
                    Some(c) => format!("{kind}, {c}"),
                    None => kind,
                },
                description: p.description.clone(),
                values,
                control,
                value: entered.get(&p.name).cloned().unwrap_or_default(),
                error: errors.get(&p.name).map(|e| rich(e)),
            }
        })
        .collect();
    let need = host.confirmation_need(tool, version);
    let end_user = (need != ConfirmationNeed::Never).then(|| EndUserField {
        hint: match need {
            ConfirmationNeed::Always => "Every call of this tool waits for its end user's confirmation: name who confirms it (an end user of this tenant's confirmation server).".into(),
            _ => "Some calls of this tool wait for their end user's confirmation: name who would confirm this one.".into(),
        },
        value: entered.get(END_USER_FIELD).cloned().unwrap_or_default(),
        error: errors.get(END_USER_FIELD).map(|e| rich(e)),
    });
    let mut versions: Vec<u32> =
        tool.versions_before(None, usize::MAX).iter().filter(|v| v.retired_at().is_none()).map(|v| v.number).collect();
    versions.reverse();
    TryPage {
        frame: frame(options, &links, format!("Try {}", tool.name), Some(session)),
        crumbs: vec![
            ("Catalog".into(), Some(links.home())),
            (tool.name.clone(), Some(links.version(tool, version.number))),
            ("Try it".into(), None),
        ],
        name: tool.name.clone(),
        description: signature.description.clone(),
        action: links.try_it(tool),
        form_token: session.form_token.clone(),
        call_id: pages::new_form_id(),
        resent: None,
        versions,
        version: version.number,
        current: tool.current().map_or(0, |v| v.number),
        problem: errors.get("").map(|e| rich(e)),
        fields,
        private: signature.inputs.iter().filter(|p| p.private).map(|p| p.name.clone()).collect(),
        end_user,
        answer: None,
    }
}

/// The form's field for the end user (apart from the tool's inputs,
/// which are `input.{name}`).
const END_USER_FIELD: &str = "end_user";

/// The live version a form names (the current one by default).
fn live_version(tool: &Arc<Tool>, n: Option<&str>) -> Result<(Arc<Tool>, Arc<ToolVersion>), Unavailable> {
    let number = match n {
        Some(n) => Some(n.parse::<u32>().map_err(|_| Unavailable::Version(tool.name.clone()))?),
        None => None,
    };
    ToolHost::version_of(tool.clone(), number).map_err(|e| Unavailable::Refused(ApiError::from(e)))
}

/// `GET catalog/tools/{id}/try[?version=N]`: the form.
#[utoipa::path(get, summary = "A form to try a tool", description = "A form generated from a live version's signature.", path = "/catalog/tools/{tool_id}/try", tag = "Catalog", operation_id = "catalog_try_form",
    params(("tool_id" = String, Path, description = "The tool's `toolId`"), ("version" = Option<String>, Query, description = "The version (the current one by default)")),
    responses(
        (status = 200, description = "The form", content_type = "text/html", body = String),
        (status = 404, description = "No such tool or version", content_type = "text/html", body = String),
        (status = 410, description = "The version is retired", content_type = "text/html", body = String),
    ))]
pub(super) async fn try_form(about: AboutTool) -> Response {
    let AboutTool { host, options, session, tool, query } = about;
    let (tool, version) = match live_version(&tool, field(&query, "version")) {
        Ok(found) => found,
        Err(why) => return why.page(&options, &session),
    };
    let page = try_page(&host, &options, &session, &tool, &version, &HashMap::new(), &HashMap::new());
    pages::page(StatusCode::OK, &page)
}

/// A form value as the JSON the signature asks for. A whole number that
/// does not parse stays text, so that the core's validation names the
/// parameter and what it takes.
fn typed(param: &InputParam, text: &str) -> Value {
    match &param.ty {
        InputType::Int { .. } => {
            let trimmed = text.trim();
            trimmed
                .parse::<i64>()
                .map(Value::from)
                .or_else(|_| trimmed.parse::<u64>().map(Value::from))
                .unwrap_or_else(|_| Value::String(text.to_string()))
        }
        InputType::Boolean => match text {
            "true" => Value::Bool(true),
            "false" => Value::Bool(false),
            _ => Value::String(text.to_string()),
        },
        InputType::String { .. } | InputType::Enum { .. } => Value::String(text.to_string()),
    }
}

/// `POST catalog/tools/{id}/try`: validates the form against the signature
/// (the core's [`invocation::input_record`]: every bad field is named next
/// to it) and runs the call through the core.
#[utoipa::path(post, summary = "Tries a tool", description = "Checks the form against the signature (each bad field refused where it is) and runs the call through the core, as an A2T call: the tenant's quotas, the tool's limits and its confirmation policy apply. The page's status is the call's. The form's `call_id` makes it one call: the same form sent again (a reload) is answered from the record of its first call, marked `idempotent-replayed: true`, and the tool does not run again.", path = "/catalog/tools/{tool_id}/try", tag = "Catalog", operation_id = "catalog_try",
    params(("tool_id" = String, Path, description = "The tool's `toolId`")),
    request_body(content = schemas::TryForm, content_type = "application/x-www-form-urlencoded"),
    responses(
        (status = 200, description = "It ran: its outputs (or, for the form sent again, its first call's)", content_type = "text/html", body = String,
            headers(("idempotent-replayed" = Option<String>, description = "`true` when the answer is the recorded one of this form's first call"))),
        (status = 202, description = "It waits for its end user's confirmation: the URI pack and the links on", content_type = "text/html", body = String,
            headers(("idempotent-replayed" = Option<String>, description = "`true` when the answer is the recorded one of this form's first call"))),
        (status = 400, description = "The form has no call id (`invalid_request`): nothing ran", content_type = "text/html", body = String),
        (status = 404, description = "No such tool or version", content_type = "text/html", body = String),
        (status = 409, description = "The form's call id was sent before with other values (`call_id_reused`): nothing ran", content_type = "text/html", body = String),
        (status = 410, description = "The version is retired", content_type = "text/html", body = String),
        (status = 422, description = "A field is refused (at the field), the tool failed for good, or the form's first call has no answer to show (`call_outcome_unknown`: not run again)", content_type = "text/html", body = String),
        (status = 503, description = "Busy, over the tenant's rate, the tool asks for a retry, the call cannot be recorded (`storage_failed`), or the form's first call still runs on another replica (`call_in_progress`)", content_type = "text/html", body = String, headers(("Retry-After" = u64, description = "Seconds"))),
        (status = 504, description = "The tool did not answer in time", content_type = "text/html", body = String, headers(("Retry-After" = u64, description = "Seconds"))),
    ))]
pub(super) async fn try_call(about: AboutTool, body: Bytes) -> Response {
    let AboutTool { host, options, session, tool, .. } = about;
    let form = form(&body);
    let (tool, version) = match live_version(&tool, field(&form, "version")) {
        Ok(found) => found,
        Err(why) => return why.page(&options, &session),
    };
    let signature = &version.signature;
    let mut entered = HashMap::new();
    let mut given = Vec::new();
    for param in signature.inputs.iter().filter(|p| !p.private) {
        let text = field(&form, &format!("input.{}", param.name)).unwrap_or("");
        entered.insert(param.name.clone(), text.to_string());
        // An empty field is a value left out.
        if !text.is_empty() {
            given.push((param.name.as_str(), typed(param, text)));
        }
    }
    let mut errors = HashMap::new();
    let end_user = field(&form, END_USER_FIELD).map(str::trim).filter(|u| !u.is_empty()).map(str::to_string);
    if let Some(user) = &end_user {
        entered.insert(END_USER_FIELD.to_string(), user.clone());
        if let Err(e) = super::links::check_end_user(user) {
            errors.insert(END_USER_FIELD.to_string(), e.message().to_string());
        }
    }
    let arguments: Vec<(&str, &Value)> = given.iter().map(|(name, value)| (*name, value)).collect();
    let input = match invocation::input_record(signature, &arguments) {
        Ok(input) if errors.is_empty() => Some(input),
        Ok(_) => None,
        Err(refused) => {
            for e in refused {
                errors.entry(e.parameter.clone().unwrap_or_default()).or_insert(e.message);
            }
            None
        }
    };
    let Some(input) = input else {
        let page = try_page(&host, &options, &session, &tool, &version, &entered, &errors);
        return ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid_input", "the form has errors")
            .onto(pages::page(StatusCode::UNPROCESSABLE_ENTITY, &page));
    };
    // The form's call id makes it one call: the same form sent again (a
    // reload, back and send again, a second click) is answered from the
    // ledger's record of the first, and the tool does not run again.
    let show =
        |errors: &HashMap<String, String>| try_page(&host, &options, &session, &tool, &version, &entered, errors);
    let Some(form_call_id) = field(&form, CALL_ID_FIELD).filter(|id| pages::is_form_id(id)) else {
        let mut page = show(&errors);
        page.problem = Some(rich(
            "This form has no call id (it did not come from this page): nothing ran. Send it again from here.",
        ));
        return ApiError::bad_request("invalid_request", "the form has no call id")
            .onto(pages::page(StatusCode::BAD_REQUEST, &page));
    };
    let key = CallKey {
        tenant: session.tenant.clone(),
        caller: session.principal.key_id.clone(),
        // Apart from the OTC door's call ids, which its callers choose.
        call_id: format!("catalog:{form_call_id}"),
    };
    let retention_hours = host.call_retention().as_secs() / 3600;
    // The answer to the form sent again; `kept` when it is the first
    // call's answer (not that it has none to show).
    let resent = |answer: Answer, status: StatusCode, kept: bool| {
        let mut page = show(&errors);
        page.answer = Some(answer);
        page.resent = kept.then_some(retention_hours);
        let mut response = pages::page(status, &page);
        response.headers_mut().insert("idempotent-replayed", axum::http::HeaderValue::from_static("true"));
        response
    };
    let ticket = match host.claim_call(&key, &form_sha256(tool.id, &form)).await {
        Ok(Claim::Run(ticket)) => ticket,
        Ok(Claim::Recorded(kept)) => {
            let kept = serde_json::from_str::<KeptAnswer>(&kept).ok();
            return match kept {
                // Final: what was temporary then is not retried by a reload.
                Some(KeptAnswer { status, answer }) => {
                    let status = super::error::settled(StatusCode::from_u16(status).unwrap_or(StatusCode::OK));
                    resent(answer, status, true)
                }
                None => {
                    let error = outcome_unknown("This form's call ran before, but its answer cannot be shown again.");
                    resent(Answer::refused(&error), error.status(), false)
                }
            };
        }
        Ok(Claim::Unfinished) => {
            let error = outcome_unknown(
                "This form's call began, but its outcome was never recorded (the server stopped while it ran): it may or may not have taken effect.",
            );
            return resent(Answer::refused(&error), error.status(), false);
        }
        Ok(Claim::RunningElsewhere) => {
            let error = ApiError::call_in_progress(
                "This form's call still runs (on another replica of the server): reload this page in a moment to see its answer.",
            );
            return resent(Answer::refused(&error), error.status(), false);
        }
        Ok(Claim::Conflict) => {
            let mut page = show(&errors);
            page.problem = Some(rich(
                "This form was already sent with other values: nothing ran now. Check the values and send the form again.",
            ));
            return ApiError::new(StatusCode::CONFLICT, "call_id_reused", "the form was sent before with other values")
                .onto(pages::page(StatusCode::CONFLICT, &page));
        }
        Err(e) => {
            tracing::error!(tenant = session.tenant, error = %e, "a catalog call id could not be claimed");
            let error = ApiError::storage_failed("the call could not be recorded; it did not run");
            let mut page = show(&errors);
            page.answer = Some(Answer::refused(&error));
            return error.onto(pages::page(StatusCode::SERVICE_UNAVAILABLE, &page));
        }
    };
    let mut call = Call::new(input, FrontDoor::A2t);
    call.call_id = key.call_id;
    call.end_user = end_user;
    // Its own task: a browser that goes away mid-call must not leave the
    // call id claimed and unrecorded while the tool runs on.
    let run = run_once(host.clone(), options.clone(), session.clone(), tool.clone(), version.clone(), call, ticket);
    let Ok(came) = tokio::spawn(tracing::Instrument::instrument(run, tracing::Span::current())).await else {
        let error = ApiError::internal("the call was interrupted");
        let mut page = show(&errors);
        page.answer = Some(Answer::refused(&error));
        return error.onto(pages::page(StatusCode::INTERNAL_SERVER_ERROR, &page));
    };
    match came {
        Came::AtField(name, message) => {
            errors.entry(name).or_insert(message);
            pages::page(StatusCode::UNPROCESSABLE_ENTITY, &show(&errors))
        }
        Came::Answer { status, answer, refusal } => {
            let mut page = show(&errors);
            page.answer = Some(answer);
            match refusal {
                Some(error) => error.onto(pages::page(status, &page)),
                None => pages::page(status, &page),
            }
        }
    }
}

/// The form's field with its call id.
const CALL_ID_FIELD: &str = "call_id";

/// What identifies a try form's request in the ledger: the tool and every
/// field but the tokens, in order. The same form sent again hashes the
/// same; the same call id with other values is a conflict.
fn form_sha256(tool_id: uuid::Uuid, form: &[(String, String)]) -> String {
    let mut fields: Vec<&(String, String)> =
        form.iter().filter(|(name, _)| name != "form_token" && name != CALL_ID_FIELD).collect();
    fields.sort();
    let request = serde_json::json!({ "catalog_try": tool_id.to_string(), "fields": fields });
    crate::digest::sha256_hex(request.to_string().as_bytes())
}

/// `422 call_outcome_unknown`: a form sent again whose first call's answer
/// cannot be shown; it is not run again.
fn outcome_unknown(said: &str) -> ApiError {
    ApiError::new(
        StatusCode::UNPROCESSABLE_ENTITY,
        "call_outcome_unknown",
        format!("{said} It was not run again; check before calling again."),
    )
}

/// A call's answer as the ledger keeps it for its form.
#[derive(Serialize, Deserialize)]
struct KeptAnswer {
    /// The page's status.
    status: u16,
    answer: Answer,
}

/// What came of a call the catalog ran.
enum Came {
    /// Its answer: what the tool gave, a refusal, or that it waits.
    Answer { status: StatusCode, answer: Answer, refusal: Option<ApiError> },
    /// A field the core refused as the call was made (named, and why): the
    /// tool did not run.
    AtField(String, String),
}

/// Runs a claimed call through the core and settles its claim: the answer
/// kept for the form sent again when the tool ran (or may have) or the call
/// now waits for its end user (a second post must not open a second
/// transaction); the call id given back when it was refused before it ran.
async fn run_once(
    host: AppState,
    options: Arc<ApiOptions>,
    session: DesignerSession,
    tool: Arc<Tool>,
    version: Arc<ToolVersion>,
    call: Call,
    ticket: crate::idempotency::Ticket,
) -> Came {
    let (call_id, end_user, number) = (call.call_id.clone(), call.end_user.clone(), version.number);
    let outcome = host.invoke(tool.clone(), version, call).await;
    tracing::info!(
        tenant = session.tenant,
        key = session.principal.key_id,
        tool = tool.name,
        version = number,
        call_id,
        "a call was tried from the catalog"
    );
    let keep = match &outcome {
        Ok(_) | Err(InvokeError::ConfirmationPending(_)) => true,
        Err(e) => e.tool_ran(),
    };
    let came = came_of(&options, &session, end_user, outcome);
    let kept = match &came {
        Came::Answer { status, answer, .. } if keep => {
            serde_json::to_string(&KeptAnswer { status: status.as_u16(), answer: answer.clone() }).ok()
        }
        _ => None,
    };
    let settled = match (keep, kept) {
        (true, Some(kept)) => host.settle_call(ticket, Some(&kept)),
        (false, _) => host.settle_call(ticket, None),
        // Not recordable: left unfinished, so a resubmission says the
        // outcome is unknown rather than run it again.
        (true, None) => {
            drop(ticket);
            Ok(())
        }
    };
    if let Err(e) = settled {
        // The page still shows the answer; the form sent again is told its
        // outcome is unknown rather than run again.
        tracing::error!(error = %e, "a catalog call's answer could not be recorded");
    }
    came
}

/// The page's answer to a call's typed outcome.
fn came_of(
    options: &ApiOptions,
    session: &DesignerSession,
    end_user: Option<String>,
    outcome: Result<ToolResult, InvokeError>,
) -> Came {
    let refused = |error: ApiError| Came::Answer {
        status: error.status(),
        answer: Answer::refused(&error),
        refusal: Some(error),
    };
    match outcome {
        Ok(ToolResult::Outputs(outputs)) => {
            let outputs = outputs.iter().map(|o| (o.name.clone(), shown_json(&o.value))).collect();
            Came::Answer { status: StatusCode::OK, answer: Answer::Outputs { outputs }, refusal: None }
        }
        Ok(ToolResult::Failed(failed)) => refused(ApiError::from(failed)),
        Err(InvokeError::ConfirmationPending(pending)) => {
            let links = Links::new(options, &session.tenant);
            let pack = super::links::uri_pack_body(options, &pending);
            // A link to the built-in confirmation page only: an external
            // confirmation server takes the pack its own way.
            let confirm_href =
                pending.confirmation_uri.is_none().then(|| super::links::confirmation_link(options, &pending));
            let answer = Answer::Pending {
                end_user: end_user.unwrap_or_default(),
                expires: at(pending.expires_at),
                confirm_href,
                pack: shown_json(&pack),
                status_href: links.confirmation(&pending.id),
            };
            Came::Answer { status: StatusCode::ACCEPTED, answer, refusal: None }
        }
        Err(InvokeError::Input(e)) => Came::AtField(e.parameter.unwrap_or_default(), e.message),
        Err(InvokeError::EndUserRequired(_)) => Came::AtField(
            END_USER_FIELD.to_string(),
            "This call needs its end user's confirmation: name the end user who confirms it.".to_string(),
        ),
        Err(e) => refused(ApiError::from(e)),
    }
}

// A call that waits for its end user.

/// `GET catalog/confirmations/{id}`.
#[derive(Template)]
#[template(path = "pages/catalog_confirmation.html")]
struct ConfirmationStatusPage {
    frame: Frame,
    crumbs: Vec<(String, Option<String>)>,
    tool: String,
    tool_href: String,
    version: u32,
    end_user: String,
    created: String,
    answer: Answer,
}

/// The state of a call made for an end user, and once it ran, its answer
/// (as the result URI gives it, to a consumer key of the tenant: a catalog
/// session is one).
#[utoipa::path(get, summary = "A call waiting for its end user", description = "Its state and, once it ran, its answer (what its result URI gives).", path = "/catalog/confirmations/{id}", tag = "Catalog", operation_id = "catalog_confirmation",
    params(("id" = String, Path, description = "The transaction id")),
    responses(
        (status = 200, description = "The call", content_type = "text/html", body = String),
        (status = 404, description = "No such call", content_type = "text/html", body = String),
        (status = 503, description = "It could not be read", content_type = "text/html", body = String, headers(("Retry-After" = u64, description = "Seconds"))),
    ))]
pub(super) async fn confirmation(
    State(host): State<AppState>,
    Extension(options): Extension<Arc<ApiOptions>>,
    Extension(session): Extension<DesignerSession>,
    Path(id): Path<String>,
) -> Response {
    let links = Links::new(&options, &session.tenant);
    let c = match host.confirmation(&session.tenant, &id) {
        Ok(Some(c)) => c,
        Ok(None) => {
            let said = Paragraph::of("There is no such call waiting for confirmation.").id("problem");
            return notice(&options, &links, Some(&session), StatusCode::NOT_FOUND, "No such call", vec![said]);
        }
        Err(e) => {
            tracing::warn!(tenant = session.tenant, error = %e, "a CHEQ transaction could not be read");
            let said = Paragraph::of("The call could not be read now; try again in a moment.").id("problem");
            return ApiError::storage_failed("the call could not be read").onto(notice(
                &options,
                &links,
                Some(&session),
                StatusCode::SERVICE_UNAVAILABLE,
                "Try again",
                vec![said],
            ));
        }
    };
    let state = TxState::of(&c, unix_now());
    let answer = match state {
        TxState::Pending => {
            Answer::Waiting { state: "It waits for its end user's confirmation".into(), expires: at(c.expires_at) }
        }
        TxState::Running => {
            Answer::Waiting { state: "It was confirmed and runs now".into(), expires: at(c.expires_at) }
        }
        // What the result URI gives, as its door keeps it: not read back
        // into outputs (the catalog does not parse a door's answers).
        TxState::Done => {
            let status = c.result_status.unwrap_or(200);
            let body = c.result_body.as_deref().unwrap_or_default();
            let json = serde_json::from_str::<Value>(body)
                .map_or_else(|_| shown_json(&Value::String(body.to_string())), |json| shown_json(&json));
            Answer::Kept { status, json }
        }
        other => Answer::refused(&ApiError::unanswered(other)),
    };
    let tool = host.registry().get_in(&session.tenant, &c.tool_id);
    let (name, href) = match &tool {
        Some(tool) => (tool.name.clone(), links.version(tool, c.version)),
        None => (c.tool_id.to_string(), links.home()),
    };
    let page = ConfirmationStatusPage {
        frame: frame(&options, &links, "A call waiting for confirmation", Some(&session)),
        crumbs: vec![("Catalog".into(), Some(links.home())), (name.clone(), Some(href.clone())), ("Call".into(), None)],
        tool: name,
        tool_href: href,
        version: c.version,
        end_user: c.end_user.clone(),
        created: at(c.created_at),
        answer,
    };
    pages::page(StatusCode::OK, &page)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn links(public_url: &str, tenant: &str) -> Links {
        Links::new(&ApiOptions { public_url: public_url.into(), ..ApiOptions::default() }, tenant)
    }

    #[test]
    fn a_deep_or_large_value_is_shown_compact_and_in_part() {
        // Small: indented.
        assert_eq!(shown_json(&json!({"a": [1]})), "{\n  \"a\": [\n    1\n  ]\n}");
        // 1 MB of lists nested 80 deep: indented it would be ~80 MB.
        let mut deep = json!("x".repeat(100));
        for _ in 0..80 {
            deep = json!([deep.clone(), deep.clone()]);
            if deep.to_string().len() > 1 << 20 {
                break;
            }
        }
        let mut nested = json!(1);
        for _ in 0..80 {
            nested = json!([nested]);
        }
        let each = nested.to_string().len() + 1;
        let wide = vec![nested; (1 << 20) / each + 1];
        for value in [deep, Value::Array(wide)] {
            assert!(value.to_string().len() >= 1 << 20);
            let shown = shown_json(&value);
            assert!(shown.len() <= SHOWN_JSON_BYTES + 64, "{}", shown.len());
            assert!(shown.ends_with("(shown in part: the first 64 KiB)"), "{}", &shown[shown.len() - 80..]);
            assert!(!shown.contains('\n'), "compact once indenting does not fit");
        }
        // Compact fits: compact, whole.
        let mut nested = json!(1);
        for _ in 0..80 {
            nested = json!([nested, nested.clone()]);
            if nested.to_string().len() > 20_000 {
                break;
            }
        }
        assert_eq!(shown_json(&nested), nested.to_string());
    }

    #[test]
    fn a_sign_in_returns_within_its_own_catalog_only() {
        let acme = links("https://tools.example.com/plinth", "acme");
        assert_eq!(acme.home(), "/plinth/t/acme/catalog");
        for kept in ["/plinth/t/acme/catalog", "/plinth/t/acme/catalog?q=x", "/plinth/t/acme/catalog/tools/1/try"] {
            assert_eq!(acme.within(kept), kept);
        }
        for refused in [
            "",
            "/catalog",
            "/plinth/t/acme/catalogue",
            "/plinth/t/globex/catalog",
            "https://evil.example/plinth/t/acme/catalog",
            "//evil.example/plinth/t/acme/catalog",
            "/plinth/t/acme/catalog/../../../admin",
            "/plinth/t/acme/catalog/\\evil",
            "/plinth/t/acme/catalog/\r\nSet-Cookie: x",
        ] {
            assert_eq!(acme.within(refused), acme.home(), "{refused:?}");
        }
        assert_eq!(links("http://127.0.0.1:8080", "default").home(), "/catalog");
    }

    #[test]
    fn a_try_form_is_the_same_request_whatever_its_tokens_and_field_order() {
        let tool = |id: &str| id.parse::<uuid::Uuid>().unwrap();
        let form =
            |pairs: &[(&str, &str)]| pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect::<Vec<_>>();
        let echo = tool("3a468a71-b869-4a46-8c8f-7612f18bfa39");
        let sent = form(&[("form_token", "a"), ("version", "1"), ("input.text", "hi"), ("call_id", "x")]);
        let again = form(&[("input.text", "hi"), ("call_id", "y"), ("version", "1"), ("form_token", "b")]);
        assert_eq!(form_sha256(echo, &sent), form_sha256(echo, &again));
        let other = form(&[("form_token", "a"), ("version", "1"), ("input.text", "ho"), ("call_id", "x")]);
        assert_ne!(form_sha256(echo, &sent), form_sha256(echo, &other));
        let elsewhere = tool("5b468a71-b869-4a46-8c8f-7612f18bfa39");
        assert_ne!(form_sha256(echo, &sent), form_sha256(elsewhere, &sent));
    }

    #[test]
    fn form_ids_are_new_each_time_and_only_their_shape_is_taken() {
        let (a, b) = (pages::new_form_id(), pages::new_form_id());
        assert!(pages::is_form_id(&a) && pages::is_form_id(&b) && a != b);
        for refused in ["", "0123", "0123456789ABCDEF0123456789abcdef", "0123456789abcdef0123456789abcdeg", "../../x"] {
            assert!(!pages::is_form_id(refused), "{refused}");
        }
    }

    #[test]
    fn quoted_names_in_messages_become_code() {
        assert_eq!(
            rich("parameter `passengers` must be from 1 to 9"),
            [(false, "parameter ".to_string()), (true, "passengers".into()), (false, " must be from 1 to 9".into())]
        );
        assert_eq!(rich("an odd ` backtick"), [(false, "an odd ` backtick".to_string())]);
    }

    #[test]
    fn form_text_becomes_the_json_the_signature_asks_for() {
        let param = |ty| InputParam {
            id: "p".into(),
            name: "p".into(),
            field: "p".into(),
            description: "d".into(),
            required: true,
            ty,
            private: false,
        };
        let int = param(InputType::Int { wit: crate::signature::IntKind::U64, min: 0, max: u64::MAX.into() });
        assert_eq!(typed(&int, " 12 "), json!(12));
        assert_eq!(typed(&int, "18446744073709551615"), json!(u64::MAX));
        assert_eq!(typed(&int, "twelve"), json!("twelve"), "left for the core to refuse, by name");
        let boolean = param(InputType::Boolean);
        assert_eq!((typed(&boolean, "true"), typed(&boolean, "false")), (json!(true), json!(false)));
        assert_eq!(typed(&param(InputType::String { max_length: None }), "12"), json!("12"));
    }
}
