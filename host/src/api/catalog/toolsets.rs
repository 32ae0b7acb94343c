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
use crate::signature::{Signature, Wording};
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
    /// Calls refused for their inputs through each toolset version (a
    /// publisher's session only; `None` when usage could not be read).
    refusals: Option<Vec<ToolsetRefusals>>,
}

/// One toolset version's calls over the last day, and those refused for
/// their inputs, by tool, parameter and code.
struct ToolsetRefusals {
    version: u32,
    calls: u64,
    refused: u64,
    /// The share refused, in words ("40%").
    rate: String,
    /// (tool, parameter, code, calls), most first.
    top: Vec<(String, String, String, u64)>,
}

/// One text of a tool's words in the form: the designer's beside the
/// vendor's.
struct WordField {
    /// The form field: `description`, `input.NAME` or `output.NAME`.
    field: String,
    /// Its element id.
    id: String,
    /// What it describes, in words.
    label: String,
    /// The vendor's text.
    vendor: String,
    /// The designer's, empty when the vendor's is served.
    designer: String,
    max: usize,
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
    /// The description the agent's model reads (the designer's, if any).
    description: String,
    /// Its MCP entry's size, in o200k tokens.
    tokens: Option<usize>,
    /// With the designer's words: its MCP entry's size with the vendor's.
    vendor_tokens: Option<usize>,
    /// A parameter the served version added since the words were written
    /// and they do not cover: "new words to review", naming them.
    review: Option<String>,
    /// Worded parameters the served version lacks (shown, not served).
    stale: Vec<String>,
    /// The words form, for the version served now.
    words: Vec<WordField>,
    /// The version served now, if one.
    served: Option<u32>,
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
    /// (tool, [(field, before, after)]), "the vendor's words" for none.
    reworded: Vec<(String, Vec<WordsChanged>)>,
}

/// One text of a tool's words that changed: (field, before, after).
type WordsChanged = (String, String, String);

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
    // (the registry's, by name) — with the designer's words, and, beside
    // it, the same list with the vendor's.
    let view = Some(&*toolset);
    let has_words = listed.iter().any(|(_, tool, _)| ToolHost::wording_in(view, &tool.name).is_some());
    let mcp_list = |words: bool| {
        let mut items = Vec::new();
        let mut each: Vec<(String, String)> = Vec::new();
        for (_, tool, version) in &listed {
            let wording = if words { ToolHost::wording_in(view, &tool.name) } else { None };
            if let Ok(entry) = crate::api::listings::tool_entry(host, tool, version, wording) {
                each.push((tool.name.clone(), serde_json::to_string(&entry).unwrap_or_default()));
                items.push(entry);
            }
        }
        let ttl = ToolHost::list_ttl_ms(Some(&toolset));
        let list = ListToolsResult::with_all_items(items).with_ttl_ms(ttl).with_cache_scope(CacheScope::Private);
        (serde_json::to_value(&list).unwrap_or_default(), each)
    };
    let (mcp_json, mcp_entries) = mcp_list(true);
    let ttl = ToolHost::list_ttl_ms(Some(&toolset));
    let a2t_items = listed.iter().map(|(_, tool, version)| {
        crate::api::a2t::version_json(host, tool, version, ToolHost::wording_in(view, &tool.name))
    });
    let a2t_body = crate::api::paging::page_of_json(a2t_items, crate::api::paging::DEFAULT_PAGE_LIMIT, None);
    let a2t_json: Value = match axum::body::to_bytes(a2t_body.into_body(), usize::MAX).await {
        Ok(bytes) => serde_json::from_slice(&bytes).unwrap_or_default(),
        Err(_) => Value::Null,
    };
    // Counted in one batch: the two listings, the vendor's MCP list (with
    // words), then each tool's entry, then each worded tool's vendor entry.
    let mut texts = vec![mcp_json.to_string(), a2t_json.to_string()];
    let (vendor_json, vendor_entries) = if has_words { mcp_list(false) } else { (Value::Null, Vec::new()) };
    if has_words {
        texts.push(vendor_json.to_string());
    }
    let first_entry = texts.len();
    texts.extend(mcp_entries.iter().map(|(_, json)| json.clone()));
    let first_vendor_entry = texts.len();
    texts.extend(vendor_entries.iter().map(|(_, json)| json.clone()));
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
    let per_tool = |entries: &[(String, String)], from: usize| -> HashMap<String, usize> {
        let Some(counts) = &counts else { return HashMap::new() };
        entries.iter().zip(counts.iter().skip(from)).map(|((name, _), (o200k, _))| (name.clone(), *o200k)).collect()
    };
    let each = per_tool(&mcp_entries, first_entry);
    let vendor_each = per_tool(&vendor_entries, first_vendor_entry);
    let pretty = |v: &Value| serde_json::to_string_pretty(v).unwrap_or_default();
    let mut previews = vec![
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
    if has_words {
        previews.insert(
            1,
            Preview {
                id: "preview-mcp-vendor",
                title: "MCP with the vendor's words",
                note: "The same list as the tenant's own root serves it: every description the vendor's. Compare its size with the one above.",
                json: pretty(&vendor_json),
                bytes: vendor_json.to_string().len(),
                tokens: totals(2),
            },
        );
    }
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
            let review = t.review.as_ref().filter(|r| r.has_new()).map(|r| {
                let new: Vec<String> = r.new_inputs.iter().chain(&r.new_outputs).map(|n| format!("`{n}`")).collect();
                format!("new words to review: {} (served with the vendor's words)", new.join(", "))
            });
            let stale = t.review.iter().flat_map(|r| r.stale_inputs.iter().chain(&r.stale_outputs)).cloned().collect();
            let words = t.version.as_ref().map(|v| word_fields(&t.entry.name, &t.entry.wording, &v.signature)).unwrap_or_default();
            let served = t.version.as_ref().map(|v| t.entry.wording.apply(&v.signature).description);
            EntryView {
                name: t.entry.name.clone(),
                href: t.tool.as_ref().map(|tool| links.tool(tool)),
                pin_words: pin_words(t.entry.version, reached),
                pinned: t.entry.version,
                live_versions,
                warning,
                description: served.unwrap_or_default(),
                tokens: each.get(&t.entry.name).copied(),
                vendor_tokens: vendor_each.get(&t.entry.name).copied(),
                review,
                stale,
                words,
                served: reached,
            }
        })
        .collect();
    let refusals = if catalog.can_write() { toolset_refusals(host, &session.tenant, &name).await } else { None };
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
        refusals,
    };
    pages::page(StatusCode::OK, &page)
}

/// The words form's fields for one tool: its description, each input the
/// model is shown and each output, the designer's text beside the
/// vendor's.
fn word_fields(tool: &str, wording: &Wording, signature: &Signature) -> Vec<WordField> {
    let id = |field: &str| format!("reword-{tool}-{}", field.replace('.', "-"));
    let mut fields = vec![WordField {
        field: "description".into(),
        id: id("description"),
        label: "The tool".into(),
        vendor: signature.description.clone(),
        designer: wording.description.clone().unwrap_or_default(),
        max: crate::signature::MAX_TOOL_DESCRIPTION_CHARS,
    }];
    for input in signature.inputs.iter().filter(|p| !p.private) {
        let field = format!("input.{}", input.name);
        fields.push(WordField {
            id: id(&field),
            field,
            label: format!("Input {}", input.name),
            vendor: input.description.clone(),
            designer: wording.input_descriptions.get(&input.name).cloned().unwrap_or_default(),
            max: crate::signature::MAX_DESCRIPTION_CHARS,
        });
    }
    for output in &signature.outputs {
        let field = format!("output.{}", output.name);
        fields.push(WordField {
            id: id(&field),
            field,
            label: format!("Output {}", output.name),
            vendor: output.description.clone(),
            designer: wording.output_descriptions.get(&output.name).cloned().unwrap_or_default(),
            max: crate::signature::MAX_DESCRIPTION_CHARS,
        });
    }
    fields
}

/// The calls through each version of toolset `name` over the last day and
/// those refused for their inputs (the designer's counts, every replica's):
/// newest version first. `None` when usage cannot be read.
async fn toolset_refusals(host: &AppState, tenant: &str, name: &str) -> Option<Vec<ToolsetRefusals>> {
    let (reader, tenant, toolset) = (host.clone(), tenant.to_string(), name.to_string());
    // The store may block: off the request threads.
    let usage =
        tokio::task::spawn_blocking(move || reader.usage(&tenant, "day", None, Some(&toolset))).await.ok()?.ok()?;
    /// (tool, parameter, code) → refused calls.
    type ByParameter = HashMap<(String, String, String), u64>;
    let mut per_version: std::collections::BTreeMap<u32, (u64, u64, ByParameter)> = Default::default();
    for item in usage["items"].as_array().into_iter().flatten() {
        let Some(number) = item["toolsetVersion"].as_u64().and_then(|n| u32::try_from(n).ok()) else { continue };
        let counts = per_version.entry(number).or_default();
        counts.0 += item["calls"].as_u64().unwrap_or(0);
        counts.1 += item["outcomes"][crate::host::REFUSED].as_u64().unwrap_or(0);
        let tool = item["tool"].as_str().unwrap_or("").to_string();
        for refused in item["refused"].as_array().into_iter().flatten() {
            let parameter = refused["parameter"].as_str().unwrap_or("(none)").to_string();
            let code = refused["code"].as_str().unwrap_or("?").to_string();
            *counts.2.entry((tool.clone(), parameter, code)).or_default() += refused["calls"].as_u64().unwrap_or(0);
        }
    }
    Some(
        per_version
            .into_iter()
            .rev()
            .filter(|(_, (calls, _, _))| *calls > 0)
            .map(|(version, (calls, refused, top))| {
                let mut top: Vec<_> = top.into_iter().map(|((t, p, c), n)| (t, p, c, n)).collect();
                top.sort_by(|a, b| b.3.cmp(&a.3).then_with(|| (&a.0, &a.1, &a.2).cmp(&(&b.0, &b.1, &b.2))));
                let rate = format!("{}%", (refused * 100 + calls / 2) / calls);
                ToolsetRefusals { version, calls, refused, rate, top }
            })
            .collect(),
    )
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

/// The words a `reword` form posts: each field (`description`,
/// `input.NAME`, `output.NAME`) trimmed, an empty one the vendor's; the
/// fields the form did not carry (a parameter of another version) kept.
fn posted_words(form: &[(String, String)], before: &Wording) -> Wording {
    let mut words = before.clone();
    for (key, value) in form {
        let text = value.trim().replace("\r\n", "\n");
        let text = (!text.is_empty()).then_some(text);
        let set = |map: &mut std::collections::BTreeMap<String, String>, name: &str| match &text {
            Some(text) => {
                map.insert(name.to_string(), text.clone());
            }
            None => {
                map.remove(name);
            }
        };
        match key.split_once('.') {
            None if key == "description" => words.description = text,
            Some(("input", name)) => set(&mut words.input_descriptions, name),
            Some(("output", name)) => set(&mut words.output_descriptions, name),
            _ => {}
        }
    }
    words
}

#[utoipa::path(post, summary = "Change a toolset from the catalog", description = "A publisher's form: `action` is `create` (with `toolset` and `description`), `describe`, `add` (`tool`, and `version` to pin it or none to follow), `pin` (`tool`, `version`), `follow` (`tool`), `remove` (`tool`) or `reword` (`tool`, and the designer's words: `description`, `input.NAME`, `output.NAME`, each empty for the vendor's). Each change makes a new toolset version (`PUT /admin/toolsets/{name}`) and answers `303` to the toolset's page.", path = "/catalog/toolsets", tag = "Catalog", operation_id = "catalog_toolset_edit",
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
        // A pin moved: the core records the version the words are for.
        ("add", Some(i)) => (tools[i].version, tools[i].wording.words_for) = (version, None),
        ("add", None) => tools.push(ToolsetEntry { name: tool.clone(), version, ..Default::default() }),
        // Saved from a form shown for one version: written for it, its new
        // parameters reviewed (saved empty, the vendor's words accepted).
        ("reword", Some(i)) => {
            tools[i].wording = posted_words(&form, &tools[i].wording);
            tools[i].wording.words_for = field(&form, "words_for").and_then(|n| n.parse().ok());
        }
        ("pin", Some(i)) if version.is_some() => (tools[i].version, tools[i].wording.words_for) = (version, None),
        ("follow", Some(i)) => (tools[i].version, tools[i].wording.words_for) = (None, None),
        ("remove", Some(i)) => {
            tools.remove(i);
        }
        ("pin" | "follow" | "remove" | "reword", None) => {
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
        reworded: diff
            .reworded
            .iter()
            .map(|r| {
                let words = |text: &Option<String>| text.clone().unwrap_or_else(|| "(the vendor's words)".into());
                let changes = r.changes.iter().map(|c| (c.field.clone(), words(&c.from), words(&c.to))).collect();
                (r.name.clone(), changes)
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
