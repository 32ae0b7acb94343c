//! Two versions of a tool side by side, from `SignatureDiff`.

use super::*;

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
pub(in crate::api) async fn diff(about: AboutTool) -> Response {
    let AboutTool { options, session, tool, query, .. } = about;
    let links = Links::new(&options, &session.tenant);
    let mut numbers: Vec<u32> = tool.versions_before(None, usize::MAX).iter().map(|v| v.number).collect();
    numbers.reverse();
    let newest = tool.current().map_or(tool.newest_number(), |v| v.number);
    // The older one is compared with the newer, whichever way they came.
    let versions = compared_pair(&query, &numbers, newest);
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
