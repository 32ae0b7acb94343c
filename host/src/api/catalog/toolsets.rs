//! The designer's toolsets: pick the few tools an agent needs, pin each or
//! let it follow, and see exactly what every door sends the agent's model
//! about them, with its size in tokens (docs/toolsets.md).
//!
//! The pages are a view of the core's toolsets
//! ([`crate::host::toolsets`]); an edit is a form (no script) that makes a
//! new toolset version through [`ToolHost::put_toolset`], as the admin API
//! does. The previews are built by the doors' own functions
//! ([`crate::api::listings::tool_entry`], [`crate::api::a2t::version_json`]), so
//! they are what a client of the toolset's root receives.

use super::*;
use crate::host::TokenCounted;
use crate::host::toolsets::{EntryState, ToolsetError, ToolsetTool};
use crate::store::ToolsetEntry;
use crate::tenancy::Role;
use axum::response::Redirect;
use rmcp::model::{CacheScope, ListToolsResult};

/// `GET catalog/toolsets`.
#[derive(Template)]
#[template(path = "pages/catalog_toolsets.html")]
struct ToolsetsPage {
    frame: Frame,
    crumbs: Vec<(String, Option<String>)>,
    rows: Vec<ToolsetRow>,
    /// Whether the session's key may write toolsets (a publisher's).
    can_write: bool,
    edit_action: String,
    form_token: String,
}

/// One toolset in the list.
struct ToolsetRow {
    name: String,
    href: String,
    version: u32,
    tools: usize,
    description: String,
    /// Tools a call through it cannot reach now (a pinned version retired).
    warnings: usize,
}

/// `GET catalog/toolsets/{name}[?version=N]`.
#[derive(Template)]
#[template(path = "pages/catalog_toolset.html")]
struct ToolsetPage {
    frame: Frame,
    crumbs: Vec<(String, Option<String>)>,
    name: String,
    description: String,
    version: u32,
    newest: u32,
    is_newest: bool,
    created: String,
    tools: Vec<EntryView>,
    /// Each version: number, link, made, whether it is the one shown.
    versions: Vec<(u32, String, String, bool)>,
    diff_action: String,
    /// Where its doors are: (door, URL).
    roots: Vec<(&'static str, String)>,
    can_write: bool,
    edit_action: String,
    form_token: String,
    previews: Vec<Preview>,
    /// How long an MCP client may cache its list (`ttlMs`), in words.
    cache_words: String,
}

/// One tool of the toolset as the page shows it.
struct EntryView {
    name: String,
    href: Option<String>,
    /// "pinned to 2" or "follows the current version (now 3)".
    pin_words: String,
    pinned: Option<u32>,
    /// The versions it may be pinned to (live ones), and whether it is.
    live_versions: Vec<(u32, bool)>,
    /// A warning: the pinned version is retired, or the tool is gone.
    warning: Option<Vec<(bool, String)>>,
    /// The description the agent's model reads.
    description: String,
    /// Its MCP entry's size, in o200k tokens.
    tokens: Option<usize>,
}

/// What one door sends about the toolset's tools, and its size.
struct Preview {
    id: &'static str,
    title: &'static str,
    note: &'static str,
    json: String,
    bytes: usize,
    /// Its tokens; `None` while another count of the tenant's runs
    /// ("counting…": the page does not wait for it).
    tokens: Option<PreviewTokens>,
}

/// A preview's size in tokens.
struct PreviewTokens {
    o200k: usize,
    cl100k: usize,
}

/// `GET catalog/toolsets/{name}/diff?from=A&to=B`.
#[derive(Template)]
#[template(path = "pages/catalog_toolset_diff.html")]
struct ToolsetDiffPage {
    frame: Frame,
    crumbs: Vec<(String, Option<String>)>,
    action: String,
    numbers: Vec<u32>,
    from: u32,
    to: u32,
    breaking: bool,
    description_changed: bool,
    /// (tool, pin in words)
    added: Vec<(String, String)>,
    removed: Vec<(String, String)>,
    changed: Vec<PinChange>,
}

/// A tool whose pin moved: (tool, from, to, the signature's changes as
/// (breaking, message)).
type PinChange = (String, String, String, Vec<(bool, Vec<(bool, String)>)>);

impl Catalog {
    fn can_write(&self) -> bool {
        self.session.principal.role >= Role::Publisher
    }

    fn no_such_toolset(&self, name: &str) -> Response {
        let said = format!("This tenant has no toolset `{}`.", crate::supply::outside_text(name));
        notice(
            &self.options,
            &self.links,
            Some(&self.session),
            StatusCode::NOT_FOUND,
            "No such toolset",
            vec![Paragraph::of(said).id("problem")],
        )
    }
}

/// `pinned to N` or `follows the current version (now N)`, in words.
fn pin_words(pin: Option<u32>, reached: Option<u32>) -> String {
    match (pin, reached) {
        (Some(n), _) => format!("pinned to version {n}"),
        (None, Some(now)) => format!("follows the current version (now {now})"),
        (None, None) => "follows the current version (none is live)".to_string(),
    }
}

#[utoipa::path(get, summary = "The tenant's toolsets", description = "Every toolset of the tenant with its newest version, the number of its tools and whether any pinned version was retired; for a publisher, a form to make a new one.", path = "/catalog/toolsets", tag = "Catalog", operation_id = "catalog_toolsets",
    responses((status = 200, description = "The toolsets", content_type = "text/html", body = String)))]
pub(in crate::api) async fn toolsets(catalog: Catalog) -> Response {
    let Catalog { host, options, session, links, .. } = &catalog;
    let rows = host
        .toolsets(&session.tenant)
        .iter()
        .map(|t| ToolsetRow {
            name: t.name.clone(),
            href: links.toolset(&t.name),
            version: t.version,
            tools: t.tools.len(),
            description: t.description.clone(),
            warnings: host.toolset_tools(t).iter().filter(|e| e.state != EntryState::Live).count(),
        })
        .collect();
    let page = ToolsetsPage {
        frame: frame(options, links, "Toolsets", Some(session)),
        crumbs: vec![("Catalog".into(), Some(links.home())), ("Toolsets".into(), None)],
        rows,
        can_write: catalog.can_write(),
        edit_action: links.toolsets(),
        form_token: session.form_token.clone(),
    };
    pages::page(StatusCode::OK, &page)
}

#[utoipa::path(get, summary = "One toolset, for its designer", description = "A toolset version's tools, each pinned or following its current version (with a warning when a pinned version was retired), its versions, the URLs of its doors, and a preview of what MCP's `tools/list` and A2T's listing send about its tools, with their size in tokens (o200k and cl100k); for a publisher, forms to add, pin, follow and remove tools.", path = "/catalog/toolsets/{name}", tag = "Catalog", operation_id = "catalog_toolset",
    params(("name" = String, Path, description = "The toolset's name"), ("version" = Option<u32>, Query, description = "The version shown (the newest by default)")),
    responses((status = 200, description = "The toolset", content_type = "text/html", body = String), (status = 404, description = "No such toolset or version", content_type = "text/html", body = String)))]
pub(in crate::api) async fn toolset(catalog: Catalog, Path(name): Path<String>) -> Response {
    let asked = match field(&catalog.query, "version") {
        Some(n) => match n.parse::<u32>() {
            Ok(n) => Some(n),
            Err(_) => return catalog.no_such_toolset(&name),
        },
        None => None,
    };
    let Catalog { host, options, session, links, .. } = &catalog;
    let (Some(toolset), Some(newest)) =
        (host.toolset(&session.tenant, &name, asked), host.toolset(&session.tenant, &name, None))
    else {
        return catalog.no_such_toolset(&name);
    };
    let tools = host.toolset_tools(&toolset);
    let listed: Vec<(&ToolsetTool, Arc<Tool>, Arc<ToolVersion>)> = tools
        .iter()
        .filter(|t| t.state == EntryState::Live)
        .filter_map(|t| Some((t, t.tool.clone()?, t.version.clone()?)))
        .collect();
    // What the doors send: built by their own functions, in their order
    // (the registry's, by name).
    let mut mcp_items = Vec::new();
    let mut mcp_entries: HashMap<String, String> = HashMap::new();
    for (_, tool, version) in &listed {
        if let Ok(entry) = crate::api::listings::tool_entry(host, tool, version) {
            mcp_entries.insert(tool.name.clone(), serde_json::to_string(&entry).unwrap_or_default());
            mcp_items.push(entry);
        }
    }
    let ttl = ToolHost::list_ttl_ms(Some(&toolset));
    let mcp_list = ListToolsResult::with_all_items(mcp_items).with_ttl_ms(ttl).with_cache_scope(CacheScope::Private);
    let mcp_json = serde_json::to_value(&mcp_list).unwrap_or_default();
    let a2t_items = listed.iter().map(|(_, tool, version)| crate::api::a2t::version_json(host, tool, version));
    let a2t_body = crate::api::paging::page_of_json(a2t_items, crate::api::paging::DEFAULT_PAGE_LIMIT, None);
    let a2t_json: Value = match axum::body::to_bytes(a2t_body.into_body(), usize::MAX).await {
        Ok(bytes) => serde_json::from_slice(&bytes).unwrap_or_default(),
        Err(_) => Value::Null,
    };
    let mut texts = vec![mcp_json.to_string(), a2t_json.to_string()];
    let per_tool: Vec<(String, String)> = mcp_entries.into_iter().collect();
    texts.extend(per_tool.iter().map(|(_, json)| json.clone()));
    // Counted once per listing (kept by its text), one page of the
    // tenant's at a time: while another counts, the page says so at once.
    let counts = match host.token_counts(&session.tenant, texts).await {
        TokenCounted::Counts { counts, .. } => Some(counts),
        TokenCounted::Busy => None,
        TokenCounted::Failed => return ApiError::internal("the token counts could not be made").into_response(),
    };
    let totals = |i: usize| {
        let (o200k, cl100k) = counts.as_ref()?.get(i).copied()?;
        Some(PreviewTokens { o200k, cl100k })
    };
    let each: HashMap<String, usize> = match &counts {
        Some(counts) => {
            per_tool.iter().zip(counts.iter().skip(2)).map(|((name, _), (o200k, _))| (name.clone(), *o200k)).collect()
        }
        None => HashMap::new(),
    };
    let pretty = |v: &Value| serde_json::to_string_pretty(v).unwrap_or_default();
    let previews = vec![
        Preview {
            id: "preview-mcp",
            title: "MCP: the result of tools/list",
            note: "What an MCP host puts into its model's context, as JSON; hosts wrap it in their own prompt format, so the model's count differs a little.",
            json: pretty(&mcp_json),
            bytes: mcp_json.to_string().len(),
            tokens: totals(0),
        },
        Preview {
            id: "preview-a2t",
            title: "A2T: the listing (GET …/tools)",
            note: "The A2T listing an agent's designer reads its tool signatures from.",
            json: pretty(&a2t_json),
            bytes: a2t_json.to_string().len(),
            tokens: totals(1),
        },
    ];
    let entries = tools
        .iter()
        .map(|t| {
            let reached = t.version.as_ref().map(|v| v.number);
            let warning = match t.state {
                EntryState::Live => None,
                EntryState::RetiredPinned => Some(format!(
                    "Version {} was retired: calls of `{}` through this toolset are refused until a new toolset version pins a live one.",
                    t.entry.version.unwrap_or_default(),
                    t.entry.name
                )),
                EntryState::Retired => Some(format!("Every version of `{}` is retired: it is not listed.", t.entry.name)),
                EntryState::Missing => Some(format!("The tenant has no tool `{}` (or no such version) any more.", t.entry.name)),
            }
            .map(|said| rich(&said));
            let live_versions = t
                .tool
                .as_ref()
                .map(|tool| {
                    tool.versions_before(None, usize::MAX)
                        .iter()
                        .filter(|v| v.retired_at().is_none())
                        .map(|v| (v.number, t.entry.version == Some(v.number)))
                        .collect()
                })
                .unwrap_or_default();
            EntryView {
                name: t.entry.name.clone(),
                href: t.tool.as_ref().map(|tool| links.tool(tool)),
                pin_words: pin_words(t.entry.version, reached),
                pinned: t.entry.version,
                live_versions,
                warning,
                description: t.version.as_ref().map(|v| v.signature.description.clone()).unwrap_or_default(),
                tokens: each.get(&t.entry.name).copied(),
            }
        })
        .collect();
    let versions = host
        .toolset_versions(&session.tenant, &name)
        .iter()
        .rev()
        .map(|v| (v.version, links.toolset_version(&name, v.version), at(v.created_at), v.version == toolset.version))
        .collect();
    // The links are relative to the server (they carry the public URL's
    // path): the public URL's origin before them.
    let public = options.public_url.trim_end_matches('/');
    let origin = public.strip_suffix(pages::path_prefix(public)).unwrap_or(public);
    let root = format!("{origin}{}", links.toolset_root(&name));
    let cache_words = if ttl > 0 {
        format!("every tool is pinned: an MCP client may cache the list for {} s (ttlMs {ttl})", ttl / 1000)
    } else {
        "a tool follows its current version: the list is not to be cached (ttlMs 0)".to_string()
    };
    let page = ToolsetPage {
        frame: frame(options, links, format!("Toolset {name}"), Some(session)),
        crumbs: vec![
            ("Catalog".into(), Some(links.home())),
            ("Toolsets".into(), Some(links.toolsets())),
            (name.clone(), None),
        ],
        name: name.clone(),
        description: toolset.description.clone(),
        version: toolset.version,
        newest: newest.version,
        is_newest: toolset.version == newest.version,
        created: at(toolset.created_at),
        tools: entries,
        versions,
        diff_action: links.toolset_diff(&name),
        roots: vec![("MCP", format!("{root}/mcp")), ("A2T", format!("{root}/tools")), ("OTC", format!("{root}/otc"))],
        can_write: catalog.can_write(),
        edit_action: links.toolsets(),
        form_token: session.form_token.clone(),
        previews,
        cache_words,
    };
    pages::page(StatusCode::OK, &page)
}

/// Tools named in one toolset edit (`tool`, `version` fields).
fn version_field(form: &[(String, String)]) -> Result<Option<u32>, String> {
    match field(form, "version").map(str::trim).filter(|v| !v.is_empty() && *v != "follow") {
        None => Ok(None),
        Some(n) => {
            n.parse().map(Some).map_err(|_| format!("`{}` is not a version number", crate::supply::outside_text(n)))
        }
    }
}

#[utoipa::path(post, summary = "Change a toolset from the catalog", description = "A publisher's form: `action` is `create` (with `toolset` and `description`), `describe`, `add` (`tool`, and `version` to pin it or none to follow), `pin` (`tool`, `version`), `follow` (`tool`) or `remove` (`tool`). Each change makes a new toolset version (`PUT /admin/toolsets/{name}`) and answers `303` to the toolset's page.", path = "/catalog/toolsets", tag = "Catalog", operation_id = "catalog_toolset_edit",
    request_body(content_type = "application/x-www-form-urlencoded", content = String),
    responses((status = 303, description = "Changed: the toolset's page"), (status = 400, description = "The change is refused (the page says why)", content_type = "text/html", body = String), (status = 403, description = "The key may not write toolsets", content_type = "text/html", body = String), (status = 404, description = "No such toolset or tool", content_type = "text/html", body = String)))]
pub(in crate::api) async fn edit(catalog: Catalog, body: Bytes) -> Response {
    let refused = |status: StatusCode, title: &str, said: String| {
        notice(
            &catalog.options,
            &catalog.links,
            Some(&catalog.session),
            status,
            title,
            vec![Paragraph::of(said).id("problem")],
        )
    };
    if !catalog.can_write() {
        return refused(
            StatusCode::FORBIDDEN,
            "Not allowed",
            "Only a publisher key of the tenant may change its toolsets; this session's key is a consumer's.".into(),
        );
    }
    let form = form(&body);
    let name = field(&form, "toolset").unwrap_or("").trim().to_string();
    let action = field(&form, "action").unwrap_or("");
    let tool = field(&form, "tool").unwrap_or("").trim().to_string();
    let version = match version_field(&form) {
        Ok(v) => v,
        Err(why) => return refused(StatusCode::BAD_REQUEST, "Not changed", why),
    };
    let Catalog { host, session, links, .. } = &catalog;
    let current = host.toolset(&session.tenant, &name, None);
    let (mut description, mut tools) = match (&current, action) {
        (None, "create") => (String::new(), Vec::new()),
        (Some(_), "create") => return Redirect::to(&links.toolset(&name)).into_response(),
        (None, _) => return catalog.no_such_toolset(&name),
        (Some(t), _) => (t.description.clone(), t.tools.clone()),
    };
    let position = tools.iter().position(|t| t.name == tool);
    match (action, position) {
        ("create" | "describe", _) => description = field(&form, "description").unwrap_or("").trim().to_string(),
        ("add", Some(i)) => tools[i].version = version,
        ("add", None) => tools.push(ToolsetEntry { name: tool.clone(), version }),
        ("pin", Some(i)) if version.is_some() => tools[i].version = version,
        ("follow", Some(i)) => tools[i].version = None,
        ("remove", Some(i)) => {
            tools.remove(i);
        }
        ("pin" | "follow" | "remove", None) => {
            let said = format!("Toolset `{name}` has no tool `{}`.", crate::supply::outside_text(&tool));
            return refused(StatusCode::NOT_FOUND, "Not changed", said);
        }
        _ => {
            return refused(
                StatusCode::BAD_REQUEST,
                "Not changed",
                "The form asked for no change this page knows.".into(),
            );
        }
    }
    match host.put_toolset(&session.principal, &session.tenant, &name, &description, &tools) {
        Ok(_) => Redirect::to(&links.toolset(&name)).into_response(),
        Err(e) => {
            let status = match &e {
                ToolsetError::UnknownTool(_) | ToolsetError::UnknownVersion { .. } | ToolsetError::NotFound(_) => {
                    StatusCode::NOT_FOUND
                }
                ToolsetError::Conflict => StatusCode::CONFLICT,
                ToolsetError::Store(_) => StatusCode::SERVICE_UNAVAILABLE,
                _ => StatusCode::BAD_REQUEST,
            };
            let said = match &e {
                ToolsetError::Store(_) => "The change could not be stored; nothing changed. Try again.".to_string(),
                e => e.to_string(),
            };
            refused(status, "Not changed", said)
        }
    }
}

#[utoipa::path(get, summary = "Two versions of a toolset side by side", description = "Tools added and removed, pins changed, and for each changed pin the signature diff between the versions the two pins reach; whether an agent written against the older one keeps working.", path = "/catalog/toolsets/{name}/diff", tag = "Catalog", operation_id = "catalog_toolset_diff",
    params(
        ("name" = String, Path, description = "The toolset's name"),
        ("from" = Option<u32>, Query, description = "One version (by default the one before `to`)"),
        ("to" = Option<u32>, Query, description = "The other (by default the newest)"),
    ),
    responses((status = 200, description = "The comparison", content_type = "text/html", body = String), (status = 404, description = "No such toolset or version", content_type = "text/html", body = String)))]
pub(in crate::api) async fn diff(catalog: Catalog, Path(name): Path<String>) -> Response {
    let Catalog { host, options, session, links, query } = &catalog;
    let numbers: Vec<u32> = host.toolset_versions(&session.tenant, &name).iter().map(|v| v.version).collect();
    let Some(newest) = numbers.last().copied() else {
        return catalog.no_such_toolset(&name);
    };
    let Some((from, to)) = compared_pair(query, &numbers, newest) else {
        return catalog.no_such_toolset(&name);
    };
    let Some(diff) = host.diff_toolsets(&session.tenant, &name, from, to) else {
        return catalog.no_such_toolset(&name);
    };
    let words = |e: &ToolsetEntry| pin_words(e.version, None);
    let page = ToolsetDiffPage {
        frame: frame(options, links, format!("Toolset {name}: {from} → {to}"), Some(session)),
        crumbs: vec![
            ("Catalog".into(), Some(links.home())),
            ("Toolsets".into(), Some(links.toolsets())),
            (name.clone(), Some(links.toolset(&name))),
            ("Compare".into(), None),
        ],
        action: links.toolset_diff(&name),
        numbers,
        from,
        to,
        breaking: diff.is_breaking(),
        description_changed: diff.description_changed,
        added: diff.added.iter().map(|e| (e.name.clone(), words(e))).collect(),
        removed: diff.removed.iter().map(|e| (e.name.clone(), words(e))).collect(),
        changed: diff
            .changed
            .iter()
            .map(|c| {
                let changes = c
                    .signature
                    .iter()
                    .flat_map(|d| d.changes.iter())
                    .map(|change| (change.breaking, rich(&change.message)))
                    .collect();
                (c.name.clone(), pin_words(c.from, None), pin_words(c.to, None), changes)
            })
            .collect(),
    };
    pages::page(StatusCode::OK, &page)
}

/// What a tool's page shows of the toolsets: the ones it is in, and those
/// a publisher may add it to.
pub(super) struct ToolInToolsets {
    /// (toolset, link, its pin in words).
    pub(super) member_of: Vec<(String, String, String)>,
    /// Toolsets it may be added to (a publisher's session only).
    pub(super) others: Vec<String>,
    pub(super) edit_action: String,
    pub(super) form_token: String,
}

impl ToolInToolsets {
    pub(super) fn of(host: &ToolHost, links: &Links, session: &DesignerSession, tool: &Tool) -> ToolInToolsets {
        let mut member_of = Vec::new();
        let mut others = Vec::new();
        for toolset in host.toolsets(&session.tenant) {
            match toolset.pin(&tool.name) {
                Some(pin) => {
                    let reached = tool.current().map(|v| v.number);
                    member_of.push((toolset.name.clone(), links.toolset(&toolset.name), pin_words(pin, reached)))
                }
                None => others.push(toolset.name.clone()),
            }
        }
        if session.principal.role < Role::Publisher {
            others.clear();
        }
        ToolInToolsets { member_of, others, edit_action: links.toolsets(), form_token: session.form_token.clone() }
    }
}
