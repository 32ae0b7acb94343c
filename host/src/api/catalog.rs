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
//! | `GET catalog/toolsets`, `POST catalog/toolsets` | the tenant's toolsets; a publisher's changes to one |
//! | `GET catalog/toolsets/{name}` | a toolset for its designer: its tools, pins, versions, and what each door sends, in tokens |
//! | `GET catalog/toolsets/{name}/diff` | two versions of a toolset side by side |
//! | `GET catalog/providers` | (a publisher's session) the tenant's authorization providers, never a secret |
//!
//! Everything shown is a view of the core's model (`Signature`,
//! `SignatureDiff`, the registry's versions, the confirmation policy, the
//! manifest's hosts, the sha256); a call runs through
//! [`ToolHost::invoke`](crate::host::ToolHost::invoke) after
//! [`crate::host::ToolHost::check_input`], as the other doors' do, once per form: the
//! form's call id is claimed in the core's call ledger
//! ([`crate::idempotency`]), so a browser that sends it again gets the first
//! call's answer. Who may see a page is decided in `auth.rs`
//! (`Access::Catalog`), as for every route.

pub(in crate::api) mod diff;
pub(in crate::api) mod list;
pub(in crate::api) mod providers;
pub(in crate::api) mod session;
pub(in crate::api) mod tool_page;
pub(in crate::api) mod toolsets;
pub(in crate::api) mod try_call;

use super::pages::{self, DesignerBar, Frame, Paragraph, Product, field, form};
use super::{ApiError, ApiOptions, AppState, Caller, schemas};
use crate::door::FrontDoor;
use crate::host::ConsoleEntry;
use crate::host::{
    CATALOG_SESSION_TTL, Call, CatalogOrder, CatalogQuery, ConfirmationNeed, DesignerSession, InvokeError,
    MAX_SEARCH_CHARS, State as TxState, ToolHost, as_words,
};
use crate::idempotency::Claim;
use crate::invocation::ToolResult;
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
    /// `{path of the public URL}/t/{tenant}`: toolsets are served there
    /// only, for the default tenant too.
    tenant_root: String,
}

impl Links {
    fn new(options: &ApiOptions, tenant: &str) -> Links {
        Links {
            root: pages::tenant_root_path(&options.public_url, tenant),
            tenant_root: format!("{}/t/{tenant}", pages::path_prefix(&options.public_url)),
        }
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

    fn toolsets(&self) -> String {
        format!("{}/catalog/toolsets", self.root)
    }

    fn providers(&self) -> String {
        format!("{}/catalog/providers", self.root)
    }

    fn toolset(&self, name: &str) -> String {
        format!("{}/catalog/toolsets/{}", self.root, encode(name))
    }

    fn toolset_version(&self, name: &str, version: u32) -> String {
        format!("{}?version={version}", self.toolset(name))
    }

    fn toolset_diff(&self, name: &str) -> String {
        format!("{}/diff", self.toolset(name))
    }

    /// A toolset's root on the doors, relative to the server.
    fn toolset_root(&self, name: &str) -> String {
        format!("{}/toolsets/{}", self.tenant_root, encode(name))
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

// What the pages about one tool share.

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
        let Catalog { host, options, session, query, .. } = Catalog::from_request_parts(parts, host).await?;
        let Path(tool_id) = Path::<String>::from_request_parts(parts, &host).await.map_err(|e| e.into_response())?;
        let Some(tool) = host.tool(&session.tenant, &tool_id) else {
            return Err(Unavailable::Tool.page(&options, &session));
        };
        Ok(AboutTool { host, options, session, tool, query })
    }
}

/// What every catalog page starts from: the session (there behind
/// `Access::Catalog`, `auth.rs`), the options, the tenant's links and the
/// query's fields.
pub(super) struct Catalog {
    host: AppState,
    options: Arc<ApiOptions>,
    session: DesignerSession,
    links: Links,
    query: Vec<(String, String)>,
}

impl FromRequestParts<AppState> for Catalog {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, host: &AppState) -> Result<Self, Response> {
        let options = parts.extensions.get::<Arc<ApiOptions>>().cloned();
        let session = parts.extensions.get::<DesignerSession>().cloned();
        let (Some(options), Some(session)) = (options, session) else {
            return Err(ApiError::internal("the server is misconfigured").into_response());
        };
        let links = Links::new(&options, &session.tenant);
        let query = form(parts.uri.query().unwrap_or_default().as_bytes());
        Ok(Catalog { host: host.clone(), options, session, links, query })
    }
}

/// The two versions a comparison page shows, older first, from its query's
/// `from` and `to`: `to` by default `newest`, `from` by default the
/// version before `to` among `numbers`; `None` when either is not a number.
fn compared_pair(query: &[(String, String)], numbers: &[u32], newest: u32) -> Option<(u32, u32)> {
    let to = field(query, "to").map_or(Some(newest), |n| n.parse().ok());
    let from = match field(query, "from") {
        Some(n) => n.parse().ok(),
        None => to.map(|to| numbers.iter().copied().filter(|n| *n < to).max().unwrap_or(to)),
    };
    from.zip(to).map(|(a, b): (u32, u32)| (a.min(b), a.max(b)))
}

/// Version `n` of `tool` (its current one when `None`, else its newest).
fn find_version(tool: &Tool, n: Option<&str>) -> Result<Arc<ToolVersion>, Unavailable> {
    let found = match n {
        Some(n) => n.parse::<u32>().ok().and_then(|n| tool.version(n)),
        None => tool.current().or_else(|| tool.version(tool.newest_number())),
    };
    found.ok_or_else(|| Unavailable::Version(tool.name.clone()))
}

/// The catalog's pages's operations, merged into the OpenAPI document
/// (`openapi.rs`).
#[derive(utoipa::OpenApi)]
#[openapi(paths(
    session::sign_in_form,
    session::sign_in,
    session::sign_out,
    list::catalog,
    tool_page::tool,
    diff::diff,
    try_call::try_form,
    try_call::try_call,
    try_call::confirmation,
    toolsets::toolsets,
    toolsets::toolset,
    toolsets::edit,
    toolsets::diff,
    providers::providers,
))]
pub(super) struct Doc;

#[cfg(test)]
mod tests {
    use super::try_call::{SHOWN_JSON_BYTES, form_sha256, shown_json, typed};
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
