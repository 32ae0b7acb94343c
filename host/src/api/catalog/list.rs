//! The list of a tenant's tools: search, tag filter, order.

use super::*;

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
    toolsets: String,
    /// The providers' page, for a publisher's session.
    providers: Option<String>,
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
pub(in crate::api) async fn catalog(
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
        links: CatalogLinks {
            home: links.home(),
            toolsets: links.toolsets(),
            providers: (session.principal.role >= crate::tenancy::Role::Publisher).then(|| links.providers()),
        },
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
