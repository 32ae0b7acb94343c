fn main() {
    vendored_sources();
    if std::env::var("CARGO_CFG_FUZZING").is_ok() {
        println!("cargo:rustc-cfg=gc_zeal");
    }

    // Pretend that Cranelift has these features. These are injected via the
    // `wasmtime_environ::foreach_builtin_function!` macro so to ensure that we
    // don't get spurious warnings about unused cfg's these are printed out
    // here.
    faux_feature("stack-switching");
    faux_feature("gc");
    faux_feature("gc-copying");
    faux_feature("gc-null");
    faux_feature("gc-drc");
    faux_feature("threads");
    faux_feature("wmemcheck");
    faux_feature("component-model");
    faux_feature("incremental-cache");
}

fn faux_feature(feature: &str) {
    println!("cargo:rustc-check-cfg=cfg(feature, values(\"{feature}\"))");
    println!("cargo:rustc-cfg=feature=\"{feature}\"");
}

/// PLINTH PATCH: a digest of the vendored sources that decide compiled
/// code (this crate's and `wasmtime-environ`'s, beside it in `vendor/`),
/// for the key of a module's pack (`src/module_reuse.rs`).
fn vendored_sources() {
    use std::hash::Hasher;
    let dirs = ["src", "../wasmtime-environ/src"];
    let mut files = Vec::new();
    for dir in dirs {
        println!("cargo:rerun-if-changed={dir}");
        collect(std::path::Path::new(dir), &mut files);
    }
    files.sort();
    // SipHash with fixed keys: the same sources give the same digest.
    let mut hasher = std::hash::DefaultHasher::new();
    for file in &files {
        hasher.write(file.to_string_lossy().as_bytes());
        hasher.write(&std::fs::read(file).unwrap_or_default());
    }
    println!("cargo:rustc-env=PLINTH_VENDORED_SOURCES={:016x}-{}", hasher.finish(), files.len());
}

fn collect(dir: &std::path::Path, files: &mut Vec<std::path::PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            collect(&path, files);
        } else {
            files.push(path);
        }
    }
}
