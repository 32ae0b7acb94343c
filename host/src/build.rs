//! `plinth pack DIR` builds the tool from source for its language
//! (`language` in `plinth.toml`), with the pinned toolchain:
//!
//! - Rust: `cargo build --release --target wasm32-wasip2`;
//! - Python: componentize-py, over `app.py` and the other `.py` files of
//!   the tool, with the Python SDK (`sdk/python/plinth_sdk.py`, built into
//!   this binary) beside them;
//! - JavaScript: componentize-js, over `tool.js` and the other `.js`/`.mjs`
//!   files, with the JavaScript SDK (`sdk/js/plinth_sdk.js`) beside them.
//!
//! The Python and JavaScript sources are copied into a temporary directory
//! with the SDK, so the tool's own directory is never written to.

use crate::manifest::Language;
use anyhow::{Context, bail};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The componentize-py release the Python SDK is written against.
pub const COMPONENTIZE_PY_VERSION: &str = "0.25.1";
/// The componentize-js release the JavaScript SDK is written against.
pub const COMPONENTIZE_JS_VERSION: &str = "0.23.0";

/// The Python SDK, as `plinth_sdk.py` on the tool's Python path.
pub const PYTHON_SDK: &str = include_str!("../../sdk/python/plinth_sdk.py");
/// The JavaScript SDK, as `plinth_sdk.js` beside the tool's sources.
pub const JS_SDK: &str = include_str!("../../sdk/js/plinth_sdk.js");
/// The Node script that runs componentize-js.
const JS_BUILD_SCRIPT: &str = include_str!("../../sdk/js/build.mjs");

/// A component built from source; `path` lives as long as this does.
pub struct Built {
    /// The component.
    pub path: PathBuf,
    _dir: Option<tempfile::TempDir>,
}

/// Builds the tool in `dir` (written in `language`, its world `world`).
pub fn build(dir: &Path, language: Language, world: &str) -> anyhow::Result<Built> {
    match language {
        Language::Rust => Ok(Built { path: cargo_build(dir)?, _dir: None }),
        Language::Python => componentize_py(dir, world),
        Language::Js => componentize_js(dir, world),
    }
}

/// Builds the crate for wasm32-wasip2 and returns the component's path.
fn cargo_build(crate_dir: &Path) -> anyhow::Result<PathBuf> {
    let output = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args(["build", "--release", "--target", "wasm32-wasip2", "--message-format=json-render-diagnostics"])
        .arg("--manifest-path")
        .arg(crate_dir.join("Cargo.toml"))
        .stderr(std::process::Stdio::inherit())
        .output()
        .context("running cargo (is it installed? is the wasm32-wasip2 target added?)")?;
    if !output.status.success() {
        bail!("cargo build failed; see the messages above");
    }
    let mut built = None;
    for line in String::from_utf8_lossy(&output.stdout).lines() {
        let Ok(message) = serde_json::from_str::<serde_json::Value>(line) else { continue };
        let is_cdylib = message["target"]["kind"].as_array().is_some_and(|k| k.iter().any(|k| k == "cdylib"));
        if message["reason"] == "compiler-artifact"
            && is_cdylib
            && let Some(files) = message["filenames"].as_array()
        {
            built = files.iter().filter_map(|f| f.as_str()).find(|f| f.ends_with(".wasm")).map(PathBuf::from);
        }
    }
    built.ok_or_else(|| anyhow::anyhow!("cargo built no .wasm; the tool crate needs `crate-type = [\"cdylib\"]`"))
}

fn componentize_py(dir: &Path, world: &str) -> anyhow::Result<Built> {
    if !dir.join("app.py").is_file() {
        bail!("a Python tool's code starts in app.py, and {} has none", dir.display());
    }
    let tool = find_tool(
        "PLINTH_COMPONENTIZE_PY",
        &[dir.join(".venv/bin/componentize-py")],
        "componentize-py",
        &format!(
            "install it in the tool's directory: python3 -m venv .venv && .venv/bin/pip install componentize-py=={COMPONENTIZE_PY_VERSION}"
        ),
    )?;
    let version = run(Command::new(&tool).arg("--version"), "componentize-py --version")?;
    check_version("componentize-py", version.split_whitespace().last().unwrap_or(""), COMPONENTIZE_PY_VERSION)?;

    let build = tempfile::tempdir().context("creating a build directory")?;
    copy_sources(dir, build.path(), &["py"])?;
    std::fs::write(build.path().join("plinth_sdk.py"), PYTHON_SDK)?;
    let out = build.path().join("tool.wasm");
    let mut command = Command::new(&tool);
    command
        .arg("-d")
        .arg(dir.join("wit"))
        .args(["-w", world, "componentize", "app", "-p"])
        .arg(build.path())
        .arg("-o")
        .arg(&out);
    run(&mut command, "componentize-py")?;
    Ok(Built { path: out, _dir: Some(build) })
}

fn componentize_js(dir: &Path, world: &str) -> anyhow::Result<Built> {
    if !dir.join("tool.js").is_file() {
        bail!("a JavaScript tool's code starts in tool.js, and {} has none", dir.display());
    }
    let node_modules = match std::env::var_os("PLINTH_NODE_MODULES") {
        Some(path) => PathBuf::from(path),
        None => dir.join("node_modules"),
    };
    let package = node_modules.join("@bytecodealliance/componentize-js/package.json");
    let manifest: serde_json::Value = std::fs::read(&package)
        .ok()
        .and_then(|bytes| serde_json::from_slice(&bytes).ok())
        .with_context(|| {
            format!(
                "componentize-js is not installed in {}: run `npm install` in the tool's directory (its package.json pins @bytecodealliance/componentize-js {COMPONENTIZE_JS_VERSION}), or set PLINTH_NODE_MODULES",
                node_modules.display()
            )
        })?;
    check_version("componentize-js", manifest["version"].as_str().unwrap_or(""), COMPONENTIZE_JS_VERSION)?;
    let node = find_tool("PLINTH_NODE", &[], "node", "install Node.js 20 or later")?;

    let build = tempfile::tempdir().context("creating a build directory")?;
    copy_sources(dir, build.path(), &["js", "mjs"])?;
    std::fs::write(build.path().join("plinth_sdk.js"), JS_SDK)?;
    let script = build.path().join("plinth-build.mjs");
    std::fs::write(&script, JS_BUILD_SCRIPT)?;
    let out = build.path().join("tool.wasm");
    let mut command = Command::new(&node);
    command
        .arg(&script)
        .arg("--node-modules")
        .arg(std::path::absolute(&node_modules)?)
        .arg("--source")
        .arg(build.path().join("tool.js"))
        .arg("--wit")
        .arg(std::path::absolute(dir.join("wit"))?)
        .args(["--world", world, "--out"])
        .arg(&out);
    run(&mut command, "componentize-js")?;
    Ok(Built { path: out, _dir: Some(build) })
}

/// The toolchain program: `env` if set, else the first of `candidates` that
/// exists, else `name` on the PATH.
fn find_tool(env: &str, candidates: &[PathBuf], name: &str, install: &str) -> anyhow::Result<PathBuf> {
    if let Some(path) = std::env::var_os(env) {
        return Ok(PathBuf::from(path));
    }
    if let Some(found) = candidates.iter().find(|c| c.is_file()) {
        return Ok(found.clone());
    }
    let on_path = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|paths| std::env::split_paths(&paths).collect::<Vec<_>>())
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file());
    on_path.ok_or_else(|| anyhow::anyhow!("{name} was not found: {install} (or set {env})"))
}

fn check_version(tool: &str, found: &str, pinned: &str) -> anyhow::Result<()> {
    if found != pinned {
        bail!(
            "plinth pack builds with {tool} {pinned}, the version its SDK is written against; found {}",
            if found.is_empty() { "an unknown version" } else { found }
        );
    }
    Ok(())
}

/// Runs a toolchain command; its errors go to the user's terminal, its
/// output is returned.
fn run(command: &mut Command, what: &str) -> anyhow::Result<String> {
    let output = command.stderr(std::process::Stdio::inherit()).output().with_context(|| format!("running {what}"))?;
    if !output.status.success() {
        bail!("{what} failed ({}); see the messages above", output.status);
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// Folders that never hold a tool's sources: environments, dependencies,
/// build output, the WIT.
const NOT_SOURCES: &[&str] =
    &[".venv", "venv", "__pycache__", "node_modules", "target", "wit", ".git", "plinth_sdk.py", "plinth_sdk.js"];

/// Copies the files of `dir` with one of `extensions`, keeping their
/// relative paths, into `to`.
fn copy_sources(dir: &Path, to: &Path, extensions: &[&str]) -> anyhow::Result<()> {
    for entry in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let entry = entry?;
        let name = entry.file_name();
        if NOT_SOURCES.iter().any(|skip| name == *skip) {
            continue;
        }
        let path = entry.path();
        let kind = entry.file_type()?;
        if kind.is_dir() {
            let sub = to.join(&name);
            std::fs::create_dir_all(&sub)?;
            copy_sources(&path, &sub, extensions)?;
        } else if kind.is_file() && path.extension().and_then(|e| e.to_str()).is_some_and(|e| extensions.contains(&e)) {
            std::fs::copy(&path, to.join(&name)).with_context(|| format!("copying {}", path.display()))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The versions `plinth pack` requires are the ones `make toolchains`
    /// installs.
    #[test]
    fn the_required_toolchains_are_the_pinned_ones() {
        let requirements = include_str!("../../sdk/toolchains/requirements.txt");
        assert!(requirements.contains(&format!("componentize-py=={COMPONENTIZE_PY_VERSION}")), "{requirements}");
        let package: serde_json::Value =
            serde_json::from_str(include_str!("../../sdk/toolchains/package.json")).unwrap();
        assert_eq!(package["dependencies"]["@bytecodealliance/componentize-js"], COMPONENTIZE_JS_VERSION);
    }
}
