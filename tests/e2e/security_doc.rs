//! docs/security.md maps every threat to the test that proves its control;
//! this keeps that map true as tests are renamed or removed.

use std::path::Path;

/// Each `path.rs::…::name` (or `::name`, meaning the file named before it) in
/// a row's test cell, as (file, name).
fn references(cell: &str) -> Vec<(String, String)> {
    let mut found = Vec::new();
    let mut file: Option<String> = None;
    for word in cell.split(|c: char| c.is_whitespace() || matches!(c, '`' | ',' | ';' | '(' | ')')) {
        let (path, item) = match word.split_once(".rs::") {
            Some((path, item)) => (Some(format!("{path}.rs")), item),
            None => match word.strip_prefix("::") {
                Some(item) => (None, item),
                None => continue,
            },
        };
        if path.is_some() {
            file = path;
        }
        let (Some(file), Some(name)) = (&file, item.rsplit("::").next()) else { continue };
        if !name.is_empty() {
            found.push((file.clone(), name.to_string()));
        }
    }
    found
}

/// Whether `source` has a test function `name` (its attributes, above any
/// doc comment, include `#[test]` or `#[tokio::test]`), or a module of tests
/// by that name.
fn is_test(source: &str, name: &str) -> bool {
    let lines: Vec<&str> = source.lines().map(str::trim).collect();
    lines.iter().enumerate().any(|(i, line)| {
        if line.starts_with(&format!("mod {name} ")) {
            return true;
        }
        if !(line.starts_with(&format!("fn {name}(")) || line.starts_with(&format!("async fn {name}("))) {
            return false;
        }
        lines[..i]
            .iter()
            .rev()
            .take_while(|above| above.starts_with("#[") || above.starts_with("///"))
            .any(|above| above.starts_with("#[test]") || above.starts_with("#[tokio::test"))
    })
}

#[test]
fn every_threat_names_a_test_that_exists() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let doc = std::fs::read_to_string(root.join("docs/security.md")).expect("docs/security.md");
    let mut rows = 0;
    let mut in_threats = false;
    for line in doc.lines() {
        if line.starts_with("| threat |") {
            in_threats = true;
            continue;
        }
        if !line.starts_with('|') {
            in_threats = false;
            continue;
        }
        if !in_threats || line.starts_with("| ---") {
            continue;
        }
        rows += 1;
        let cells: Vec<&str> = line.trim_matches('|').split(" | ").collect();
        assert_eq!(cells.len(), 4, "a threat row has four cells (threat, who, control, test): {line}");
        let tests = references(cells[3]);
        assert!(!tests.is_empty(), "this threat names no test: {line}");
        for (file, name) in tests {
            let source = std::fs::read_to_string(root.join(&file))
                .unwrap_or_else(|e| panic!("{file}, named in docs/security.md, cannot be read: {e}"));
            assert!(is_test(&source, &name), "docs/security.md names {file}::{name}, which is not a test there");
        }
    }
    assert!(rows >= 60, "docs/security.md lost its threat tables ({rows} rows found)");
}
