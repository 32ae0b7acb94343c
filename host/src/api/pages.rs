//! What every page people read shares — the designer's catalog
//! (`catalog.rs`) and the built-in CHEQ confirmation pages (`cheq.rs`): one
//! layout (`host/templates/pages/base.html`, askama, compile-time checked,
//! every value HTML-escaped unless a template says otherwise), one
//! stylesheet served by the server, and one set of headers — never cached,
//! never framed, no script, no inline style.

use askama::Template;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{Html, IntoResponse, Response};

/// Where the stylesheet is served, under the server's root (`Scope::Server`).
pub const STYLESHEET_PATH: &str = "/assets/plinth.css";

/// The stylesheet, built into the binary.
const STYLESHEET: &str = include_str!("../../assets/plinth.css");

/// The policy of every page: nothing but this server's stylesheet, forms
/// posted to this server, never framed (no clickjacking of a button).
const CONTENT_SECURITY_POLICY: &str =
    "default-src 'none'; style-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// `GET /assets/plinth.css`. Its URL carries its hash, so it may be cached
/// long: a new stylesheet has a new URL.
#[utoipa::path(get, summary = "The pages' stylesheet", description = "The one stylesheet of the catalog's and the confirmation pages; the pages link it with `?v=` and a digest of its content.", path = "/assets/plinth.css", tag = "Server", operation_id = "stylesheet",
    params(("v" = Option<String>, Query, description = "A digest of the stylesheet, so that a new one has a new URL (not checked)")),
    responses((status = 200, description = "The stylesheet", content_type = "text/css", body = String)))]
pub(super) async fn stylesheet() -> Response {
    let mut response = ([(header::CONTENT_TYPE, "text/css; charset=utf-8")], STYLESHEET).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("public, max-age=86400"));
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    response
}

/// The path part of the public URL (`https://host/plinth` → `/plinth`;
/// usually empty): what the pages' own links start with, so that they work
/// behind a proxy that serves the server under a path, whatever name the
/// browser reached it by.
pub fn path_prefix(public_url: &str) -> &str {
    let after_scheme = public_url.split_once("://").map_or(public_url, |(_, rest)| rest);
    after_scheme.find('/').map_or("", |at| after_scheme[at..].trim_end_matches('/'))
}

/// The path on this server of `tenant`'s platform root: the public URL's
/// path, then `/t/{tenant}` for every tenant but the default one.
pub fn tenant_root_path(public_url: &str, tenant: &str) -> String {
    let prefix = path_prefix(public_url);
    if tenant == crate::tenancy::DEFAULT_TENANT { prefix.to_string() } else { format!("{prefix}/t/{tenant}") }
}

/// The stylesheet's URL, with a digest of its content so that browsers
/// never keep an old one.
fn stylesheet_url(public_url: &str) -> String {
    static VERSION: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let version = VERSION.get_or_init(|| crate::digest::sha256_hex(STYLESHEET.as_bytes())[..12].to_string());
    format!("{}{STYLESHEET_PATH}?v={version}", path_prefix(public_url))
}

/// Which product a page belongs to, named in its top bar.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Product {
    /// The designer's catalog.
    Catalog,
    /// The built-in confirmation server.
    Confirmation,
    /// The built-in OAuth authorization server's sign-in and consent.
    SignIn,
    /// The person's connected accounts (docs/authorization.md).
    Accounts,
}

/// What the layout shows around a page's content.
pub struct Frame {
    /// The page's title (the `<title>` and, unless the page says otherwise,
    /// its `<h1>`).
    pub title: String,
    /// The stylesheet's URL.
    pub stylesheet: String,
    /// `Catalog` or `Confirmation`.
    pub product: &'static str,
    /// The top bar's link home, if the product has one.
    pub home: Option<String>,
    /// `narrow` for pages of a single form, `wide` otherwise.
    pub width: &'static str,
    /// The signed-in designer's bar, on catalog pages.
    pub designer: Option<DesignerBar>,
}

/// Who is signed in to the catalog, and how to sign out.
pub struct DesignerBar {
    /// The tenant whose catalog it is.
    pub tenant: String,
    /// The key's id (never the key).
    pub key_id: String,
    /// Where the sign-out form posts.
    pub sign_out: String,
    /// The session's form token.
    pub form_token: String,
}

impl Frame {
    /// A frame for a page of `product` titled `title`.
    pub fn new(public_url: &str, product: Product, title: impl Into<String>) -> Frame {
        let (product, width) = match product {
            Product::Catalog => ("Catalog", "wide"),
            Product::Confirmation => ("Confirmation", "narrow"),
            Product::SignIn => ("Sign-in", "narrow"),
            Product::Accounts => ("Accounts", "narrow"),
        };
        Frame {
            title: title.into(),
            stylesheet: stylesheet_url(public_url),
            product,
            home: None,
            width,
            designer: None,
        }
    }
}

/// A paragraph of a plain page: text, some of it strong, and an id the
/// tests and screen readers can find it by.
pub struct Paragraph {
    /// The element's id.
    pub id: Option<&'static str>,
    /// Its pieces, in order.
    pub spans: Vec<Span>,
}

/// A piece of a [`Paragraph`].
pub enum Span {
    /// Plain text.
    Text(String),
    /// Text in `<strong>`.
    Strong(String),
}

impl Paragraph {
    /// An empty paragraph.
    pub fn new() -> Paragraph {
        Paragraph { id: None, spans: Vec::new() }
    }

    /// A paragraph of plain `text`.
    pub fn of(text: impl Into<String>) -> Paragraph {
        Paragraph::new().text(text)
    }

    /// With an id.
    pub fn id(mut self, id: &'static str) -> Paragraph {
        self.id = Some(id);
        self
    }

    /// Followed by plain text.
    pub fn text(mut self, text: impl Into<String>) -> Paragraph {
        self.spans.push(Span::Text(text.into()));
        self
    }

    /// Followed by strong text.
    pub fn strong(mut self, text: impl Into<String>) -> Paragraph {
        self.spans.push(Span::Strong(text.into()));
        self
    }
}

impl Default for Paragraph {
    fn default() -> Self {
        Paragraph::new()
    }
}

/// What a page shows the tenant's provider `id` as: its display name, else
/// its id (a provider deleted since, or never configured).
pub fn provider_name(host: &crate::host::ToolHost, tenant: &str, id: &str) -> String {
    host.authorization_providers(tenant)
        .into_iter()
        .find(|(provider, ..)| provider == id)
        .and_then(|(_, settings, ..)| settings.display_name)
        .unwrap_or_else(|| id.to_string())
}

/// Form (or query) fields, URL-decoded, in order.
pub fn form(raw: &[u8]) -> Vec<(String, String)> {
    form_urlencoded::parse(raw).into_owned().collect()
}

/// The first value of the field `name`.
pub fn field<'a>(fields: &'a [(String, String)], name: &str) -> Option<&'a str> {
    fields.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
}

/// The value of the cookie `name` in `headers`, if any.
pub fn cookie(headers: &axum::http::HeaderMap, name: &str) -> Option<String> {
    Some(
        headers
            .get_all(header::COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(cookie::Cookie::split_parse)
            .filter_map(Result::ok)
            .find(|c| c.name() == name)?
            .value()
            .to_string(),
    )
}

/// Whether the form token `presented` is `expected`, compared in constant
/// time (how long the comparison takes says nothing of the token). An
/// empty `expected` matches nothing.
pub fn form_token_matches(presented: &str, expected: &str) -> bool {
    !expected.is_empty() && bool::from(subtle::ConstantTimeEq::ct_eq(presented.as_bytes(), expected.as_bytes()))
}

/// A cookie of the pages (a session, or a sign-in form's token): never read
/// by script (`HttpOnly`), never sent with a request from another site
/// (`SameSite=Strict`), only over TLS when the public URL is https, sent to
/// `path` and below only, for `max_age_secs` (`0` forgets it).
pub fn page_cookie(
    public_url: &str,
    name: &'static str,
    value: String,
    path: String,
    max_age_secs: i64,
) -> cookie::Cookie<'static> {
    cookie::Cookie::build((name, value))
        .path(path)
        .http_only(true)
        .secure(public_url.starts_with("https://"))
        .same_site(cookie::SameSite::Strict)
        .max_age(cookie::time::Duration::seconds(max_age_secs))
        .build()
}

/// A cookie that must come back with a navigation from another site (a
/// provider's redirect back to the connections callback): as
/// [`page_cookie`], but `SameSite=Lax`, which a browser sends with a
/// top-level `GET` from another site, never with a post or a subrequest.
/// Keep its `path` narrow: it is sent there only.
pub fn navigation_cookie(
    public_url: &str,
    name: &'static str,
    value: String,
    path: String,
    max_age_secs: i64,
) -> cookie::Cookie<'static> {
    let mut cookie = page_cookie(public_url, name, value, path, max_age_secs);
    cookie.set_same_site(cookie::SameSite::Lax);
    cookie
}

/// A new random id for a form (a sign-in form's token, a try form's call
/// id): 122 random bits, as 32 lowercase hex digits.
pub fn new_form_id() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

/// Whether `id` has the shape [`new_form_id`] gives.
pub fn is_form_id(id: &str) -> bool {
    id.len() == 32 && id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// A sign-in form's double-submit token, against login CSRF (another site
/// signing this browser in as someone else): the page sets it in a cookie
/// sent to the form's action only and carries it in a hidden field, and a
/// post counts only when the two agree. Another site can neither read the
/// cookie nor make the browser send it (`SameSite=Strict`).
pub struct SignInToken {
    /// The cookie's name.
    pub cookie: &'static str,
    /// The form field's name.
    pub field: &'static str,
}

impl SignInToken {
    /// How long a sign-in form's token lasts.
    const SECS: i64 = 24 * 3600;

    /// The token for a sign-in page: this browser's, when its cookie holds
    /// a sound one (so that two open tabs agree), else a new one.
    pub fn for_page(&self, headers: &axum::http::HeaderMap) -> String {
        cookie(headers, self.cookie).filter(|t| is_form_id(t)).unwrap_or_else(new_form_id)
    }

    /// `page` with the cookie holding `token`, sent to `action` only.
    pub fn set(&self, mut page: Response, public_url: &str, token: String, action: String) -> Response {
        let cookie = page_cookie(public_url, self.cookie, token, action, Self::SECS);
        if let Ok(cookie) = HeaderValue::from_str(&cookie.to_string()) {
            page.headers_mut().append(header::SET_COOKIE, cookie);
        }
        page
    }

    /// Whether a sign-in post came from its page in this browser: not sent
    /// from elsewhere ([`posted_from_elsewhere`]), and its field holds its
    /// cookie's token.
    pub fn posted_by_its_page(
        &self,
        headers: &axum::http::HeaderMap,
        fields: &[(String, String)],
        public_url: &str,
    ) -> bool {
        let token = cookie(headers, self.cookie).unwrap_or_default();
        !posted_from_elsewhere(headers, public_url)
            && form_token_matches(field(fields, self.field).unwrap_or(""), &token)
    }
}

/// What a page tells the person whose `sign-in` (or `login`: the page's
/// word for it) was refused.
pub fn login_problem(e: &crate::host::LoginError, word: &str) -> String {
    use crate::host::LoginError;
    match e {
        LoginError::Invalid => "Wrong user name or password.".to_string(),
        LoginError::Locked { .. } => format!("{}.", crate::host::as_words(&e.to_string())),
        LoginError::Busy | LoginError::Store(_) => {
            format!("The {word} could not be checked now; try again in a moment.")
        }
    }
}

/// `303 See Other` to `location`, setting `cookies`, never cached.
pub fn see_other(location: &str, cookies: &[cookie::Cookie<'static>]) -> Response {
    let mut response = StatusCode::SEE_OTHER.into_response();
    let headers = response.headers_mut();
    if let Ok(location) = HeaderValue::from_str(location) {
        headers.insert(header::LOCATION, location);
    }
    for cookie in cookies {
        if let Ok(cookie) = HeaderValue::from_str(&cookie.to_string()) {
            headers.append(header::SET_COOKIE, cookie);
        }
    }
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// Whether a form post came from another site, or another origin of this
/// one, as far as the browser says: a `Sec-Fetch-Site` other than
/// `same-origin`, or — from a browser that sends no Fetch Metadata — an
/// `Origin` other than this server's own (the public URL's, or the one the
/// browser reached it by, its `Host`).
///
/// `Sec-Fetch-Site: none` (a navigation the user made: typed, a bookmark)
/// is refused too: a form of these pages posts `same-origin`, a reload of
/// its answer too, and a user-made navigation is never a post. `Origin:
/// null` (what a page under `Referrer-Policy: no-referrer`, ours among
/// them, posts with) and no `Origin` at all (a client that is not a
/// browser) say nothing either way: the form's token decides.
pub fn posted_from_elsewhere(headers: &axum::http::HeaderMap, public_url: &str) -> bool {
    if let Some(site) = headers.get("sec-fetch-site") {
        return site.as_bytes() != b"same-origin";
    }
    let Some(origin) = headers.get(header::ORIGIN) else { return false };
    if origin.as_bytes() == b"null" {
        return false;
    }
    // An origin that does not even parse is not this server's.
    let Some(theirs) = origin.to_str().ok().and_then(Origin::parse) else { return true };
    let ours = Origin::parse(public_url).is_some_and(|ours| ours == theirs);
    let reached = headers
        .get(header::HOST)
        .and_then(|host| host.to_str().ok())
        .and_then(|host| host.parse::<axum::http::uri::Authority>().ok())
        .is_some_and(|host| {
            host.host().eq_ignore_ascii_case(&theirs.host)
                && host.port_u16().unwrap_or(theirs.default_port()) == theirs.port
        });
    !(ours || reached)
}

/// A web origin: scheme, host and port (the scheme's default when the URL
/// names none), in lower case.
#[derive(Debug, PartialEq, Eq)]
struct Origin {
    scheme: String,
    host: String,
    port: u16,
}

impl Origin {
    /// The origin of `url` (`scheme://host[:port]`, with or without a path).
    fn parse(url: &str) -> Option<Origin> {
        let uri: axum::http::Uri = url.parse().ok()?;
        let scheme = uri.scheme_str()?.to_ascii_lowercase();
        let host = uri.host()?.to_ascii_lowercase();
        let mut origin = Origin { scheme, host, port: 0 };
        origin.port = uri.port_u16().unwrap_or(origin.default_port());
        Some(origin)
    }

    /// The port of this scheme when a URL names none.
    fn default_port(&self) -> u16 {
        if self.scheme == "https" { 443 } else { 80 }
    }
}

/// A page that says something: a title and paragraphs, and a link on.
#[derive(Template)]
#[template(path = "pages/notice.html")]
pub struct Notice {
    /// The layout.
    pub frame: Frame,
    /// What it says.
    pub paragraphs: Vec<Paragraph>,
    /// A link on (`(href, text)`), if any.
    pub link: Option<(String, String)>,
}

/// `template` as a page with `status`, with the headers every page has:
/// never cached, never framed, no script (the CSP). A template that cannot
/// be rendered (a bug, not input) answers a plain `500`.
pub fn page(status: StatusCode, template: &impl Template) -> Response {
    let mut response = match template.render() {
        Ok(html) => (status, Html(html)).into_response(),
        Err(e) => {
            tracing::error!(error = %e, "a page could not be rendered");
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                Html("<!doctype html><title>Error</title><p>The page could not be shown.</p>"),
            )
                .into_response()
        }
    };
    let headers = response.headers_mut();
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CONTENT_SECURITY_POLICY));
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    response
}

/// A page whose form's answer is a redirect to `target` as well as this
/// server: the CSP's `form-action` applies to the redirects that follow a
/// post too, so it names `target`'s origin (or, for an app's own scheme,
/// that scheme). A target that cannot be named leaves the page as it is.
pub fn page_posting_to(status: StatusCode, template: &impl Template, target: &str) -> Response {
    let mut response = page(status, template);
    let source = reqwest::Url::parse(target).ok().and_then(|url| match url.scheme() {
        "http" | "https" => {
            let origin = url.origin().ascii_serialization();
            (origin != "null").then_some(origin)
        }
        scheme => Some(format!("{scheme}:")),
    });
    let policy = source
        .filter(|s| s.bytes().all(|b| b.is_ascii_graphic() && b != b';' && b != b','))
        .map(|s| CONTENT_SECURITY_POLICY.replace("form-action 'self'", &format!("form-action 'self' {s}")));
    if let Some(policy) = policy.and_then(|p| HeaderValue::from_str(&p).ok()) {
        response.headers_mut().insert(header::CONTENT_SECURITY_POLICY, policy);
    }
    response
}

/// A [`Notice`] page.
pub fn notice(status: StatusCode, frame: Frame, paragraphs: Vec<Paragraph>) -> Response {
    page(status, &Notice { frame, paragraphs, link: None })
}

/// Text as an end user must see it on a confirmation page: escaped by the
/// template, with every character a screen would not show as it is
/// (`cheq::shown`) as a visible, distinctly styled `<U+XXXX>` marker.
pub struct Revealed {
    /// The pieces, in order.
    pub pieces: Vec<Piece>,
}

/// A piece of [`Revealed`] text.
pub struct Piece {
    /// Text shown as it is (empty for a marker).
    pub text: String,
    /// A hidden character: its code point in hex and what it is.
    pub hidden: Option<(String, &'static str)>,
}

impl Revealed {
    /// `value`, split as `cheq::shown` splits it.
    pub fn new(value: &str) -> Revealed {
        let pieces = crate::cheq::shown(value)
            .into_iter()
            .map(|piece| match piece {
                crate::cheq::Shown::Text(t) => Piece { text: t.to_string(), hidden: None },
                crate::cheq::Shown::Hidden(c) => {
                    let what = if crate::cheq::is_combining_mark(c) { "combining mark" } else { "invisible character" };
                    Piece { text: String::new(), hidden: Some((format!("{:04X}", u32::from(c)), what)) }
                }
            })
            .collect();
        Revealed { pieces }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_start_with_the_public_urls_path() {
        assert_eq!(path_prefix("http://127.0.0.1:8080"), "");
        assert_eq!(path_prefix("https://tools.example.com/"), "");
        assert_eq!(path_prefix("https://tools.example.com/plinth/"), "/plinth");
        assert_eq!(path_prefix("https://tools.example.com/a/b"), "/a/b");
    }

    #[test]
    fn a_post_from_another_site_or_origin_is_known_by_fetch_metadata_or_else_its_origin() {
        let posted = |pairs: &[(&'static str, &str)]| {
            let mut headers = axum::http::HeaderMap::new();
            for (name, value) in pairs {
                headers.insert(*name, value.parse().unwrap());
            }
            posted_from_elsewhere(&headers, "https://tools.example.com/plinth")
        };
        // Fetch Metadata: this origin's own forms only.
        assert!(!posted(&[("sec-fetch-site", "same-origin"), ("origin", "https://evil.example")]));
        for site in ["cross-site", "same-site", "none", "Same-Origin"] {
            assert!(posted(&[("sec-fetch-site", site), ("origin", "https://tools.example.com")]), "{site}");
        }
        // Without it, the Origin: the public URL's, or the one reached.
        assert!(!posted(&[("origin", "https://tools.example.com")]));
        assert!(!posted(&[("origin", "https://TOOLS.example.com:443")]));
        assert!(!posted(&[("origin", "http://127.0.0.1:8080"), ("host", "127.0.0.1:8080")]));
        assert!(!posted(&[("origin", "http://localhost"), ("host", "LOCALHOST:80")]));
        for foreign in [
            "https://evil.example",
            "http://tools.example.com",
            "https://tools.example.com:8443",
            "https://tools.example.com.evil.example",
            "not an origin",
        ] {
            assert!(posted(&[("origin", foreign), ("host", "127.0.0.1:8080")]), "{foreign}");
        }
        assert!(posted(&[("origin", "http://127.0.0.1:9090"), ("host", "127.0.0.1:8080")]));
        // Nothing said: the form's token decides.
        assert!(!posted(&[]));
        assert!(!posted(&[("origin", "null")]));
    }

    #[test]
    fn a_form_token_matches_only_itself_and_an_empty_one_nothing() {
        assert!(form_token_matches("abc", "abc"));
        assert!(!form_token_matches("abd", "abc") && !form_token_matches("ab", "abc"));
        assert!(!form_token_matches("", ""), "a missing token is no token");
    }

    #[test]
    fn vendor_text_is_escaped_and_hidden_characters_are_markers() {
        let frame = Frame::new("http://x", Product::Confirmation, "<script>alert(1)</script>");
        let html = Notice {
            frame,
            paragraphs: vec![Paragraph::of("<img src=x onerror=alert(1)>").id("problem").strong("\"&'")],
            link: None,
        }
        .render()
        .unwrap();
        assert!(!html.contains("<script>alert") && !html.contains("<img src"), "{html}");
        assert!(html.contains("&#60;img src=x onerror=alert(1)&#62;"), "{html}");
        assert!(html.contains("<p id=\"problem\">"), "{html}");
        assert!(html.contains("<strong>&#34;&#38;&#39;</strong>"), "{html}");

        let revealed = Revealed::new("a\u{202E}b");
        assert_eq!(revealed.pieces.len(), 3);
        assert_eq!(revealed.pieces[1].hidden, Some(("202E".to_string(), "invisible character")));
    }
}
