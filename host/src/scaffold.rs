//! `plinth new NAME --lang rust|python|js`: a complete tool that builds,
//! from templates built into this binary (`host/templates/`): its WIT world
//! with documented example fields, the WIT it depends on, `plinth.toml`, the
//! source file and a README with the commands that build and pack it.

use crate::manifest::Language;
use anyhow::{Context, bail};
use std::path::{Path, PathBuf};

/// The WIT every tool's `wit/deps/` holds: the tool contract and the
/// interfaces a tool may import.
const CONTRACT_WIT: &[(&str, &str)] = &[
    ("plinth-tool/tool.wit", include_str!("../../wit/tool.wit")),
    ("config/world.wit", include_str!("../../wit/deps/config/world.wit")),
    ("config/store.wit", include_str!("../../wit/deps/config/store.wit")),
];

/// WASI 0.2, which a Python or JavaScript tool's world imports for outbound
/// HTTP (Rust tools reach it through the SDK's own bindings).
const WASI_WIT: &[(&str, &str)] = &[
    ("http/http.wit", include_str!("../../wit/deps/http/http.wit")),
    ("io/io.wit", include_str!("../../wit/deps/io/io.wit")),
    ("clocks/clocks.wit", include_str!("../../wit/deps/clocks/clocks.wit")),
    ("random/random.wit", include_str!("../../wit/deps/random/random.wit")),
    ("cli/cli.wit", include_str!("../../wit/deps/cli/cli.wit")),
    ("filesystem/filesystem.wit", include_str!("../../wit/deps/filesystem/filesystem.wit")),
    ("sockets/sockets.wit", include_str!("../../wit/deps/sockets/sockets.wit")),
];

const WORLD: &str = include_str!("../templates/common/world.wit");
const MANIFEST: &str = include_str!("../templates/common/plinth.toml");
const README: &str = include_str!("../templates/common/README.md");

/// Writes a new tool called `name` (kebab case: the WIT world's name) in
/// `language` into `dir`, which must not exist yet. Returns the files
/// written, relative to `dir`.
pub fn new_tool(dir: &Path, name: &str, language: Language) -> anyhow::Result<Vec<PathBuf>> {
    check_name(name)?;
    if dir.exists() {
        bail!("{} already exists; plinth new writes a new folder", dir.display());
    }
    let snake = name.replace('-', "_");
    let (imports, source, setup, files): (&str, &str, String, Vec<(&str, &str)>) = match language {
        Language::Rust => (
            "",
            "src/lib.rs",
            "rustup target add wasm32-wasip2   # once".into(),
            vec![
                ("Cargo.toml", include_str!("../templates/rust/Cargo.toml")),
                ("src/lib.rs", include_str!("../templates/rust/src/lib.rs")),
                ("plinth-sdk/Cargo.toml", include_str!("../templates/rust/sdk-Cargo.toml")),
                ("plinth-sdk/src/lib.rs", include_str!("../../sdk/src/lib.rs")),
            ],
        ),
        Language::Python => (
            PORTABLE_IMPORTS,
            "app.py",
            format!(
                "python3 -m venv .venv && .venv/bin/pip install componentize-py=={}   # once",
                crate::build::COMPONENTIZE_PY_VERSION
            ),
            vec![("app.py", include_str!("../templates/python/app.py"))],
        ),
        Language::Js => (
            PORTABLE_IMPORTS,
            "tool.js",
            "npm install   # once: the pinned componentize-js".into(),
            vec![
                ("tool.js", include_str!("../templates/js/tool.js")),
                ("package.json", include_str!("../templates/js/package.json")),
                // Types for editors and TypeScript; `plinth pack` puts the
                // SDK itself beside the sources.
                ("plinth_sdk.d.ts", include_str!("../../sdk/js/plinth_sdk.d.ts")),
            ],
        ),
    };
    let language_line = match language {
        Language::Rust => String::new(),
        other => format!("language = \"{}\"\n", other.as_str()),
    };
    let fill = |template: &str| {
        template
            .replace("{{imports}}", imports)
            .replace("{{language}}", &language_line)
            .replace("{{language_name}}", language_name(language))
            .replace("{{memory}}", &language.min_memory_mib().max(16).to_string())
            .replace("{{source}}", source)
            .replace("{{componentize_js}}", crate::build::COMPONENTIZE_JS_VERSION)
            .replace("{{setup}}", &setup)
            .replace("{{name_snake}}", &snake)
            .replace("{{name}}", name)
    };
    let mut written = Vec::new();
    let mut write = |path: String, text: String| -> anyhow::Result<()> {
        let full = dir.join(&path);
        if let Some(parent) = full.parent() {
            std::fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
        }
        std::fs::write(&full, text).with_context(|| format!("writing {}", full.display()))?;
        written.push(PathBuf::from(path));
        Ok(())
    };
    write("wit/world.wit".into(), fill(WORLD))?;
    let portable = if language == Language::Rust { &[][..] } else { WASI_WIT };
    for (path, text) in CONTRACT_WIT.iter().chain(portable) {
        write(format!("wit/deps/{path}"), (*text).to_string())?;
    }
    write("plinth.toml".into(), fill(MANIFEST))?;
    write("README.md".into(), fill(README))?;
    for (path, text) in files {
        // The vendored SDK and its types are copied as they are.
        let text =
            if path.starts_with("plinth-sdk/") || path.ends_with(".d.ts") { text.to_string() } else { fill(text) };
        write(path.to_string(), text)?;
    }
    Ok(written)
}

/// What a Python or JavaScript tool's world imports so that its SDK can
/// log, read config and secrets, and make outbound HTTP requests.
const PORTABLE_IMPORTS: &str =
    "    include plinth:tool/imports@0.1.0;\n    import wasi:http/outgoing-handler@0.2.12;\n";

fn language_name(language: Language) -> &'static str {
    match language {
        Language::Rust => "Rust",
        Language::Python => "Python",
        Language::Js => "JavaScript",
    }
}

/// A tool's name as WIT writes a world's: lowercase words of letters and
/// digits joined by `-`, starting with a letter (`lookup-weather`).
fn check_name(name: &str) -> anyhow::Result<()> {
    let words_ok = name.split('-').all(|word| {
        word.chars().next().is_some_and(|c| c.is_ascii_lowercase())
            && word.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
    });
    if !words_ok || name.len() > 200 {
        bail!(
            "`{name}` cannot name a tool: use lowercase words of letters and digits joined by `-`, each starting with a letter (e.g. `lookup-weather`)"
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_language_gets_a_tool_whose_wit_and_manifest_read() {
        for language in [Language::Rust, Language::Python, Language::Js] {
            let root = tempfile::tempdir().unwrap();
            let dir = root.path().join("say-hello");
            let files = new_tool(&dir, "say-hello", language).unwrap();
            assert!(files.contains(&PathBuf::from("README.md")), "{files:?}");
            let mut resolve = wit_parser::Resolve::default();
            let (package, _) = resolve.push_path(dir.join("wit")).unwrap();
            let world = crate::package::select_world(&resolve, package, None).unwrap();
            let manifest =
                crate::manifest::ToolManifest::from_toml(&std::fs::read_to_string(dir.join("plinth.toml")).unwrap())
                    .unwrap();
            assert_eq!(manifest.language, language);
            let signature = crate::signature::derive(&resolve, world, "say-hello", &manifest).unwrap();
            assert_eq!(signature.name, "say_hello");
            let names: Vec<&str> = signature.inputs.iter().map(|p| p.name.as_str()).collect();
            assert_eq!(names, ["name", "tone", "times"]);
            let readme = std::fs::read_to_string(dir.join("README.md")).unwrap();
            assert!(readme.contains("plinth pack ."), "{readme}");
            for file in files.iter().filter(|f| !f.starts_with("wit/deps") && !f.starts_with("plinth-sdk")) {
                let text = std::fs::read_to_string(dir.join(file)).unwrap();
                assert!(!text.contains("{{"), "{} keeps a placeholder:\n{text}", file.display());
            }
            assert!(new_tool(&dir, "say-hello", language).is_err(), "an existing folder is never overwritten");
        }
    }

    #[test]
    fn a_name_must_be_a_wit_world_name() {
        for bad in ["Hello", "hello_world", "-hello", "hello-", "1hello", "hello--world", ""] {
            assert!(check_name(bad).is_err(), "{bad}");
        }
        check_name("lookup-weather2").unwrap();
    }
}
