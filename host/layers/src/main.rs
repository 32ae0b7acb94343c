//! The import-direction check: `plinth-layers [SRC]` (default: the host's
//! `src/`) reads every module of the host's library, collects the `crate::`,
//! `super::` and `self::` paths it names — in `use` items, in function
//! bodies, in macro calls and in attributes such as utoipa's `paths(...)` —
//! and fails when modules import each other around a circle, printing the
//! edges that close it.
//!
//! What counts (ARCHITECTURE.md, "Layers"):
//! - A module is a file (`host/oauth.rs` is `host::oauth`); a `mod x { }`
//!   written inline belongs to its file.
//! - Code that only tests compile (`#[cfg(test)]` items and the files they
//!   declare) and comments are skipped.
//! - A parent and its own descendants may use each other freely; any other
//!   edge is lifted to the two siblings under the closest common parent
//!   (`host::oauth → tenancy` is `host → tenancy` at the top; `api::mcp →
//!   api::cheq` is `mcp → cheq` inside `api`). Each folder's siblings, and
//!   the top-level modules, must then form no cycle.
//! - A name a module re-exports (`pub use oauth::TokenGrant;` in `host`)
//!   counts as the module it comes from (`crate::host::TokenGrant` is an
//!   edge to `host::oauth`), so that a re-export cannot hide an edge.
//! - A path reached through a `use`d module alias (`use crate::host; …
//!   host::oauth::X`) counts as an edge to the aliased module (`host`), the
//!   `use` that brought it in.

use proc_macro2::{Delimiter, TokenStream, TokenTree};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use syn::visit::Visit;

fn main() -> std::process::ExitCode {
    let mut args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    // `--edges`: also print every lifted edge (group: from -> to), the
    // graph the layer table of ARCHITECTURE.md is read from.
    let print_edges = args.iter().any(|a| a == "--edges");
    args.retain(|a| a != "--edges");
    let src = args.first().map(PathBuf::from).unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../src"));
    if print_edges {
        match edges(&src) {
            Ok(all) => {
                for (group, from, to) in all {
                    println!(
                        "{}: {from} -> {to}",
                        if group.is_empty() { "crate".to_string() } else { group.join("::") }
                    );
                }
            }
            Err(e) => eprintln!("{e}"),
        }
    }
    match check(&src) {
        Ok(summary) => {
            println!("{summary}");
            std::process::ExitCode::SUCCESS
        }
        Err(report) => {
            eprintln!("{report}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// The crate's top-level modules by layer, highest first (ARCHITECTURE.md,
/// "Layers"): a module may use its own layer's (without a cycle) and the
/// layers below, never one above. A new top-level module takes its place
/// here, and in ARCHITECTURE.md's table.
const LAYERS: &[(&str, &[&str])] = &[
    ("doors", &["api", "build", "scaffold"]),
    ("core", &["host"]),
    ("state", &["registry", "idempotency", "tool_ids", "store"]),
    ("models", &["package", "signature", "supply", "invocation", "metrics"]),
    ("engine and rules", &["runtime", "manifest", "cheq"]),
    (
        "leaves",
        &[
            "tenancy",
            "telemetry",
            "cpu_policy",
            "client_address",
            "door",
            "digest",
            "private_files",
            "egress",
            "keyed_rate",
            "heap",
            "testing",
        ],
    ),
];

/// A top-level module's layer (0 the highest), if the table has it.
fn layer_of(layers: &[(&str, &[&str])], module: &str) -> Option<usize> {
    layers.iter().position(|(_, modules)| modules.contains(&module))
}

/// A module path below the crate root (`["host", "oauth"]`); the root is `[]`.
type ModPath = Vec<String>;

/// One use of another module: where it is written and what it names.
#[derive(Clone, Debug)]
struct Use {
    file: PathBuf,
    line: usize,
    text: String,
}

/// Every lifted edge of the library under `src`: (group, from, to).
fn edges(src: &Path) -> Result<Vec<(ModPath, String, String)>, String> {
    Ok(lifted_uses(src)?.0.into_keys().collect())
}

/// Reads the library under `src` and answers a one-line summary, or the
/// report of every cycle and upward use found.
fn check(src: &Path) -> Result<String, String> {
    check_with(src, LAYERS)
}

/// [`check`] against the layer table `layers`.
fn check_with(src: &Path, layers: &[(&str, &[&str])]) -> Result<String, String> {
    let (lifted, modules, edges) = lifted_uses(src)?;
    let upward = report_upward(&lifted, &modules_at_top(src)?, layers);
    match report_cycles(&lifted, modules, edges) {
        Ok(summary) if upward.is_empty() => Ok(summary),
        Ok(_) => Err(upward),
        Err(cycles) => Err(format!("{upward}{cycles}")),
    }
}

/// The crate's top-level modules.
fn modules_at_top(src: &Path) -> Result<BTreeSet<String>, String> {
    Ok(discover(src)?.into_keys().filter(|m| m.len() == 1).map(|m| m[0].clone()).collect())
}

/// Every top-level module missing from `layers`, and every use of a module
/// in a layer above the user's.
fn report_upward(
    lifted: &BTreeMap<(ModPath, String, String), Vec<Use>>,
    top: &BTreeSet<String>,
    layers: &[(&str, &[&str])],
) -> String {
    let mut report = String::new();
    for module in top.iter().filter(|m| layer_of(layers, m).is_none()) {
        let _ = writeln!(
            report,
            "module `{module}` has no layer: add it to LAYERS (host/layers/src/main.rs) and to ARCHITECTURE.md's table"
        );
    }
    for ((group, from, to), uses) in lifted.iter().filter(|((group, _, _), _)| group.is_empty()) {
        let (Some(a), Some(b)) = (layer_of(layers, from), layer_of(layers, to)) else { continue };
        if b < a {
            let _ = writeln!(report, "`{from}` ({}) uses `{to}` ({}), a layer above it:", layers[a].0, layers[b].0);
            for u in uses.iter().take(4) {
                let _ = writeln!(report, "    {}:{} {}", u.file.display(), u.line, u.text);
            }
            let _ = group;
        }
    }
    report
}

/// The uses between modules, lifted to siblings (group, from, to), with
/// the number of modules and of uses counted.
#[allow(clippy::type_complexity)]
fn lifted_uses(src: &Path) -> Result<(BTreeMap<(ModPath, String, String), Vec<Use>>, usize, usize), String> {
    let modules = discover(src)?;
    let known: BTreeSet<ModPath> = modules.keys().cloned().collect();
    // (group, from, to) → the uses that make the edge.
    let mut lifted: BTreeMap<(ModPath, String, String), Vec<Use>> = BTreeMap::new();
    let mut edges = 0;
    let mut collected = Vec::new();
    // A re-exported name (module path + name) → the path it stands for.
    let mut exports: BTreeMap<ModPath, ModPath> = BTreeMap::new();
    for (module, file) in &modules {
        let text = std::fs::read_to_string(file).map_err(|e| format!("{}: {e}", file.display()))?;
        let parsed = syn::parse_file(&text).map_err(|e| format!("{}: {e}", file.display()))?;
        let mut collector = Collector { scope: module.clone(), known: &known, found: Vec::new(), exports: Vec::new() };
        collector.visit_file(&parsed);
        exports.extend(collector.exports);
        collected.push((module, file, collector.found));
    }
    for (module, file, found) in collected {
        for (target, line, text) in found {
            let target = through_exports(&known, &exports, target);
            let Some(to) = owning_module(&known, &target) else { continue };
            let Some((group, from_child, to_child)) = lift(module, &to) else { continue };
            edges += 1;
            lifted.entry((group, from_child, to_child)).or_default().push(Use {
                file: file.strip_prefix(src).unwrap_or(file).to_path_buf(),
                line,
                text,
            });
        }
    }
    Ok((lifted, modules.len(), edges))
}

/// The report of every cycle among the lifted edges, or the summary.
fn report_cycles(
    lifted: &BTreeMap<(ModPath, String, String), Vec<Use>>,
    modules: usize,
    edges: usize,
) -> Result<String, String> {
    let mut groups: BTreeMap<ModPath, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    for (group, from, to) in lifted.keys() {
        groups.entry(group.clone()).or_default().entry(from.clone()).or_default().insert(to.clone());
    }
    let mut report = String::new();
    for (group, graph) in &groups {
        for cycle in strongly_connected(graph).into_iter().filter(|c| c.len() > 1) {
            let place = if group.is_empty() {
                "the crate's top-level modules".to_string()
            } else {
                format!("the modules of `{}`", group.join("::"))
            };
            let _ = writeln!(
                report,
                "import cycle among {place}: {}",
                cycle.iter().cloned().collect::<Vec<_>>().join(", ")
            );
            for from in &cycle {
                for to in graph.get(from).into_iter().flatten().filter(|to| cycle.contains(*to)) {
                    let uses = &lifted[&(group.clone(), from.clone(), to.clone())];
                    let _ = writeln!(
                        report,
                        "  {from} -> {to} ({} use{}):",
                        uses.len(),
                        if uses.len() == 1 { "" } else { "s" }
                    );
                    for u in uses.iter().take(4) {
                        let _ = writeln!(report, "    {}:{} {}", u.file.display(), u.line, u.text);
                    }
                    if uses.len() > 4 {
                        let _ = writeln!(report, "    … and {} more", uses.len() - 4);
                    }
                }
            }
        }
    }
    if report.is_empty() {
        Ok(format!("layers: {modules} modules, {edges} cross-module uses, no import cycle, no use of a higher layer"))
    } else {
        Err(report)
    }
}

/// Every module file of the library, found by following `mod x;` from
/// `lib.rs` (skipping the ones only tests compile).
fn discover(src: &Path) -> Result<BTreeMap<ModPath, PathBuf>, String> {
    let mut modules = BTreeMap::new();
    let mut pending = vec![(ModPath::new(), src.join("lib.rs"), src.to_path_buf())];
    while let Some((module, file, dir)) = pending.pop() {
        let text = std::fs::read_to_string(&file).map_err(|e| format!("{}: {e}", file.display()))?;
        let parsed = syn::parse_file(&text).map_err(|e| format!("{}: {e}", file.display()))?;
        declared_files(&parsed.items, &module, &dir, &mut pending)?;
        modules.insert(module, file);
    }
    Ok(modules)
}

/// The `mod x;` declarations in `items`, with the file each names; `dir` is
/// the folder a child of this module lives in.
fn declared_files(
    items: &[syn::Item],
    module: &ModPath,
    dir: &Path,
    pending: &mut Vec<(ModPath, PathBuf, PathBuf)>,
) -> Result<(), String> {
    for item in items {
        let syn::Item::Mod(m) = item else { continue };
        if only_for_tests(&m.attrs) {
            continue;
        }
        let name = m.ident.to_string();
        let mut child = module.clone();
        child.push(name.clone());
        match &m.content {
            // An inline module's own `mod y;` live in dir/x/.
            Some((_, inner)) => declared_files(inner, &child, &dir.join(&name), pending)?,
            None => {
                let flat = dir.join(format!("{name}.rs"));
                let (file, child_dir) = if flat.exists() {
                    (flat, dir.join(&name))
                } else {
                    (dir.join(&name).join("mod.rs"), dir.join(&name))
                };
                if !file.exists() {
                    return Err(format!(
                        "module `{}` is declared but neither {name}.rs nor {name}/mod.rs exists in {}",
                        child.join("::"),
                        dir.display()
                    ));
                }
                pending.push((child, file, child_dir));
            }
        }
    }
    Ok(())
}

/// Whether attributes carry `#[cfg(test)]` (alone, not `cfg(not(test))`).
fn only_for_tests(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| a.path().is_ident("cfg") && a.parse_args::<syn::Ident>().is_ok_and(|i| i == "test"))
}

/// `target` with every re-exported name on its way replaced by the path it
/// stands for (`host::TokenGrant` → `host::oauth::TokenGrant`).
fn through_exports(known: &BTreeSet<ModPath>, exports: &BTreeMap<ModPath, ModPath>, mut target: ModPath) -> ModPath {
    for _ in 0..8 {
        let Some(module) = owning_module(known, &target) else { break };
        let Some(name) = target.get(module.len()) else { break };
        let mut exported = module.clone();
        exported.push(name.clone());
        let Some(source) = exports.get(&exported) else { break };
        let mut next = source.clone();
        next.extend(target[module.len() + 1..].iter().cloned());
        if next == target {
            break;
        }
        target = next;
    }
    target
}

/// The known module a resolved path falls in: its longest prefix that is a
/// module file (an item's path names the module that holds it).
fn owning_module(known: &BTreeSet<ModPath>, target: &[String]) -> Option<ModPath> {
    (0..=target.len()).rev().map(|n| target[..n].to_vec()).find(|p| known.contains(p))
}

/// An edge between two module files, lifted to the siblings under their
/// closest common parent; `None` for a module and its own ancestor or
/// descendant (and for a module and itself).
fn lift(from: &ModPath, to: &ModPath) -> Option<(ModPath, String, String)> {
    let common = from.iter().zip(to).take_while(|(a, b)| a == b).count();
    if common == from.len() || common == to.len() {
        return None;
    }
    Some((from[..common].to_vec(), from[common].clone(), to[common].clone()))
}

/// Tarjan's strongly connected components, each as a set of nodes.
fn strongly_connected(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<BTreeSet<String>> {
    struct State<'g> {
        graph: &'g BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'g str, usize>,
        low: BTreeMap<&'g str, usize>,
        stack: Vec<&'g str>,
        on_stack: BTreeSet<&'g str>,
        out: Vec<BTreeSet<String>>,
    }
    fn visit<'g>(s: &mut State<'g>, v: &'g str) {
        let i = s.index.len();
        s.index.insert(v, i);
        s.low.insert(v, i);
        s.stack.push(v);
        s.on_stack.insert(v);
        for w in s.graph.get(v).into_iter().flatten() {
            if !s.index.contains_key(w.as_str()) {
                visit(s, w);
                let lw = s.low[w.as_str()];
                let lv = s.low.get_mut(v).expect("visited");
                *lv = (*lv).min(lw);
            } else if s.on_stack.contains(w.as_str()) {
                let iw = s.index[w.as_str()];
                let lv = s.low.get_mut(v).expect("visited");
                *lv = (*lv).min(iw);
            }
        }
        if s.low[v] == s.index[v] {
            let mut component = BTreeSet::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack.remove(w);
                component.insert(w.to_string());
                if w == v {
                    break;
                }
            }
            s.out.push(component);
        }
    }
    let mut s = State {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in graph.keys() {
        if !s.index.contains_key(v.as_str()) {
            visit(&mut s, v);
        }
    }
    s.out
}

/// Walks one file and collects every path it names that starts with
/// `crate`, `super` or `self`, resolved against the module it is written in.
struct Collector<'k> {
    /// The module the walker is in (an inline `mod` extends it).
    scope: ModPath,
    /// Every module of the crate.
    known: &'k BTreeSet<ModPath>,
    found: Vec<(ModPath, usize, String)>,
    /// What this file re-exports: (module path + name, the path it stands for).
    exports: Vec<(ModPath, ModPath)>,
}

impl Collector<'_> {
    fn record(&mut self, segments: &[String], line: usize) {
        if let Some(resolved) = self.resolve(segments) {
            self.found.push((resolved, line, segments.join("::")));
        }
    }

    /// `segments` as a path from the crate root, if they start with
    /// `crate`, `super` or `self`.
    fn resolve(&self, segments: &[String]) -> Option<ModPath> {
        let first = segments.first()?;
        let mut resolved = match first.as_str() {
            "crate" => ModPath::new(),
            "super" | "self" => self.scope.clone(),
            _ => return None,
        };
        let mut rest = segments;
        if first == "crate" || first == "self" {
            rest = &segments[1..];
        }
        while rest.first().is_some_and(|s| s == "super") {
            resolved.pop()?;
            rest = &rest[1..];
        }
        resolved.extend(rest.iter().cloned());
        Some(resolved)
    }

    /// A `use` path as written: one that starts with a child module's name
    /// (`use oauth::X;` in `host`) is relative to this module.
    fn use_path(&self, mut path: Vec<String>) -> Vec<String> {
        if let Some(first) = path.first() {
            let mut child = self.scope.clone();
            child.push(first.clone());
            if self.known.contains(&child) {
                path.insert(0, "self".to_string());
            }
        }
        path
    }

    /// Paths written inside macro calls and attribute arguments, which syn
    /// leaves as tokens: `crate :: a :: b`, `super :: x`.
    fn scan_tokens(&mut self, tokens: TokenStream) {
        let flat: Vec<TokenTree> = tokens.into_iter().collect();
        let mut i = 0;
        while i < flat.len() {
            match &flat[i] {
                TokenTree::Group(g) => {
                    if g.delimiter() != Delimiter::None || !g.stream().is_empty() {
                        self.scan_tokens(g.stream());
                    }
                    i += 1;
                }
                TokenTree::Ident(id)
                    if matches!(id.to_string().as_str(), "crate" | "super" | "self") && is_path_sep(&flat, i + 1) =>
                {
                    let line = id.span().start().line;
                    let mut segments = vec![id.to_string()];
                    let mut j = i + 1;
                    while is_path_sep(&flat, j) {
                        match flat.get(j + 2) {
                            Some(TokenTree::Ident(next)) => {
                                segments.push(next.to_string());
                                j += 3;
                            }
                            _ => break,
                        }
                    }
                    self.record(&segments, line);
                    i = j.max(i + 1);
                }
                _ => i += 1,
            }
        }
    }

    /// Records the paths of a `use` tree; `exported` when the `use` is
    /// visible outside its module (a re-export).
    fn use_tree(&mut self, prefix: &mut Vec<String>, tree: &syn::UseTree, exported: bool) {
        let (ident, alias, line) = match tree {
            syn::UseTree::Path(p) => {
                prefix.push(p.ident.to_string());
                self.use_tree(prefix, &p.tree, exported);
                prefix.pop();
                return;
            }
            syn::UseTree::Group(g) => {
                for t in &g.items {
                    self.use_tree(prefix, t, exported);
                }
                return;
            }
            syn::UseTree::Glob(g) => {
                let path = self.use_path(prefix.clone());
                self.record(&path, g.star_token.spans[0].start().line);
                return;
            }
            syn::UseTree::Name(n) => (&n.ident, &n.ident, n.ident.span().start().line),
            syn::UseTree::Rename(r) => (&r.ident, &r.rename, r.ident.span().start().line),
        };
        let mut full = prefix.clone();
        if ident != "self" {
            full.push(ident.to_string());
        }
        let full = self.use_path(full);
        self.record(&full, line);
        if exported
            && alias != "_"
            && let Some(source) = self.resolve(&full)
        {
            let mut name = self.scope.clone();
            name.push(if ident == "self" { prefix.last().cloned().unwrap_or_default() } else { alias.to_string() });
            self.exports.push((name, source));
        }
    }
}

fn is_path_sep(tokens: &[TokenTree], at: usize) -> bool {
    matches!((tokens.get(at), tokens.get(at + 1)), (Some(TokenTree::Punct(a)), Some(TokenTree::Punct(b))) if a.as_char() == ':' && b.as_char() == ':')
}

fn item_attrs(item: &syn::Item) -> &[syn::Attribute] {
    use syn::Item::*;
    match item {
        Const(i) => &i.attrs,
        Enum(i) => &i.attrs,
        ExternCrate(i) => &i.attrs,
        Fn(i) => &i.attrs,
        ForeignMod(i) => &i.attrs,
        Impl(i) => &i.attrs,
        Macro(i) => &i.attrs,
        Mod(i) => &i.attrs,
        Static(i) => &i.attrs,
        Struct(i) => &i.attrs,
        Trait(i) => &i.attrs,
        TraitAlias(i) => &i.attrs,
        Type(i) => &i.attrs,
        Union(i) => &i.attrs,
        Use(i) => &i.attrs,
        _ => &[],
    }
}

fn impl_item_attrs(item: &syn::ImplItem) -> &[syn::Attribute] {
    match item {
        syn::ImplItem::Const(i) => &i.attrs,
        syn::ImplItem::Fn(i) => &i.attrs,
        syn::ImplItem::Type(i) => &i.attrs,
        syn::ImplItem::Macro(i) => &i.attrs,
        _ => &[],
    }
}

impl<'ast> Visit<'ast> for Collector<'_> {
    fn visit_item(&mut self, item: &'ast syn::Item) {
        if only_for_tests(item_attrs(item)) {
            return;
        }
        syn::visit::visit_item(self, item);
    }

    fn visit_impl_item(&mut self, item: &'ast syn::ImplItem) {
        if only_for_tests(impl_item_attrs(item)) {
            return;
        }
        syn::visit::visit_impl_item(self, item);
    }

    fn visit_item_mod(&mut self, m: &'ast syn::ItemMod) {
        // A declared file is walked as a module of its own; an inline one
        // is walked here, with `super` resolved from inside it.
        if let Some((_, items)) = &m.content {
            for attr in &m.attrs {
                self.visit_attribute(attr);
            }
            self.scope.push(m.ident.to_string());
            for item in items {
                self.visit_item(item);
            }
            self.scope.pop();
        }
    }

    fn visit_item_use(&mut self, u: &'ast syn::ItemUse) {
        for attr in &u.attrs {
            self.visit_attribute(attr);
        }
        let exported = !matches!(u.vis, syn::Visibility::Inherited);
        self.use_tree(&mut Vec::new(), &u.tree, exported);
    }

    fn visit_path(&mut self, path: &'ast syn::Path) {
        let segments: Vec<String> = path.segments.iter().map(|s| s.ident.to_string()).collect();
        if let Some(first) = path.segments.first() {
            self.record(&segments, first.ident.span().start().line);
        }
        syn::visit::visit_path(self, path);
    }

    fn visit_macro(&mut self, mac: &'ast syn::Macro) {
        self.scan_tokens(mac.tokens.clone());
        syn::visit::visit_macro(self, mac);
    }

    fn visit_attribute(&mut self, attr: &'ast syn::Attribute) {
        if let syn::Meta::List(list) = &attr.meta {
            self.scan_tokens(list.tokens.clone());
        }
        syn::visit::visit_attribute(self, attr);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// [`check`] with every module the tests name in one layer: only
    /// cycles fail.
    fn flat(dir: &Path) -> Result<String, String> {
        check_with(dir, &[("all", &["a", "b", "api", "host", "tenancy"])])
    }

    /// A crate written to a temporary folder: (relative path, text) pairs.
    fn crate_of(files: &[(&str, &str)]) -> PathBuf {
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("plinth-layers-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        for (path, text) in files {
            let file = dir.join(path);
            std::fs::create_dir_all(file.parent().unwrap()).unwrap();
            std::fs::write(file, text).unwrap();
        }
        dir
    }

    #[test]
    fn a_planted_cycle_fails_and_names_both_edges() {
        let dir = crate_of(&[
            ("lib.rs", "pub mod a; pub mod b;"),
            ("a.rs", "use crate::b::Thing;\npub fn f() {}"),
            ("b.rs", "pub struct Thing;\npub fn g() { crate::a::f(); }"),
        ]);
        let report = flat(&dir).unwrap_err();
        assert!(report.contains("import cycle among the crate's top-level modules: a, b"), "{report}");
        assert!(report.contains("a -> b (1 use):\n    a.rs:1 crate::b::Thing"), "{report}");
        assert!(report.contains("b -> a (1 use):\n    b.rs:2 crate::a::f"), "{report}");
    }

    #[test]
    fn one_direction_passes() {
        let dir = crate_of(&[
            ("lib.rs", "pub mod a; pub mod b;"),
            ("a.rs", "use crate::b::Thing;"),
            ("b.rs", "pub struct Thing;"),
        ]);
        assert!(
            flat(&dir).unwrap().contains("3 modules, 1 cross-module uses, no import cycle, no use of a higher layer")
        );
    }

    #[test]
    fn test_code_comments_and_strings_do_not_count() {
        let dir = crate_of(&[
            ("lib.rs", "pub mod a; pub mod b;"),
            ("a.rs", "use crate::b::Thing;"),
            (
                "b.rs",
                "pub struct Thing;\n// crate::a::f()\n/// crate::a::f()\nconst S: &str = \"crate::a::f\";\n#[cfg(test)]\nmod tests { use crate::a::f; }\n#[cfg(test)]\nmod more;\nimpl Thing { #[cfg(test)] fn t() { crate::a::f(); } }",
            ),
            ("b/more.rs", "use crate::a::f;"),
        ]);
        assert!(flat(&dir).is_ok(), "{:?}", flat(&dir));
    }

    #[test]
    fn paths_in_macros_attributes_and_nested_groups_count() {
        let dir = crate_of(&[
            ("lib.rs", "pub mod a; pub mod b;"),
            ("a.rs", "use crate::{b::{Thing}};"),
            ("b.rs", "pub struct Thing;\n#[derive(Doc)]\n#[doc_paths(paths(crate::a::handler))]\nstruct Api;"),
        ]);
        assert!(flat(&dir).unwrap_err().contains("b -> a"));
        let dir = crate_of(&[
            ("lib.rs", "pub mod a; pub mod b;"),
            ("a.rs", "use crate::b::Thing;"),
            ("b.rs", "pub struct Thing;\nfn f() { tokio::select! { _ = crate::a::go() => {} } }"),
        ]);
        assert!(flat(&dir).unwrap_err().contains("b -> a"));
    }

    #[test]
    fn parent_and_child_may_use_each_other_but_siblings_may_not() {
        let dir = crate_of(&[
            ("lib.rs", "pub mod api;"),
            ("api/mod.rs", "pub mod a2t; pub mod cheq; pub fn shared() {}"),
            ("api/a2t.rs", "use super::shared; use super::cheq::link;"),
            ("api/cheq.rs", "pub fn link() { super::a2t::list(); }"),
        ]);
        let report = flat(&dir).unwrap_err();
        assert!(report.contains("import cycle among the modules of `api`: a2t, cheq"), "{report}");
    }

    #[test]
    fn a_submodule_edge_lifts_to_its_top_level_module() {
        // host::oauth -> tenancy and tenancy -> host::oauth's parent folder.
        let dir = crate_of(&[
            ("lib.rs", "pub mod host; pub mod tenancy;"),
            ("host.rs", "mod oauth; use crate::tenancy::Role;"),
            ("host/oauth.rs", "pub struct TokenGrant;"),
            ("tenancy.rs", "pub struct Role; use crate::host::oauth::TokenGrant;"),
        ]);
        let report = flat(&dir).unwrap_err();
        assert!(report.contains("host -> tenancy"), "{report}");
        assert!(
            report.contains("tenancy -> host (1 use):\n    tenancy.rs:1 crate::host::oauth::TokenGrant"),
            "{report}"
        );
    }

    #[test]
    fn a_re_export_does_not_hide_the_module_it_comes_from() {
        // `host` re-exports `oauth::TokenGrant`; `tenancy` names it through
        // `host`, yet the edge is to `host::oauth`, a sibling of
        // `host::confirmations` that uses `tenancy`... and inside `host`,
        // `oauth` names `confirmations` through the parent's re-export.
        let dir = crate_of(&[
            ("lib.rs", "pub mod host;"),
            (
                "host.rs",
                "mod confirmations; mod oauth; pub use confirmations::{Setting as CheqSetting}; pub use oauth::*;",
            ),
            ("host/confirmations.rs", "pub struct Setting; use super::oauth::Grant;"),
            ("host/oauth.rs", "pub struct Grant; fn f() { let _ = super::CheqSetting; }"),
        ]);
        let report = flat(&dir).unwrap_err();
        assert!(report.contains("import cycle among the modules of `host`: confirmations, oauth"), "{report}");
        assert!(report.contains("oauth -> confirmations (1 use):\n    host/oauth.rs:1 super::CheqSetting"), "{report}");
    }

    #[test]
    fn a_use_of_a_higher_layer_fails_even_without_a_cycle() {
        let dir = crate_of(&[
            ("lib.rs", "pub mod host; pub mod tenancy; pub mod extra;"),
            ("host.rs", "pub struct ToolHost;"),
            ("tenancy.rs", "fn f() { let _ = crate::host::ToolHost; }"),
            ("extra.rs", ""),
        ]);
        let report = check(&dir).unwrap_err();
        assert!(
            report.contains(
                "`tenancy` (leaves) uses `host` (core), a layer above it:\n    tenancy.rs:1 crate::host::ToolHost"
            ),
            "{report}"
        );
        assert!(report.contains("module `extra` has no layer"), "{report}");
    }

    #[test]
    fn super_in_an_inline_module_resolves_from_inside_it() {
        let dir = crate_of(&[
            ("lib.rs", "pub mod a; pub mod b;"),
            ("a.rs", "pub mod inner { use super::super::b::Thing; }"),
            ("b.rs", "pub struct Thing; use crate::a::inner;"),
        ]);
        assert!(flat(&dir).unwrap_err().contains("a -> b"));
    }
}
