//! `plinth.toml` as a tenant writes it, and the JSON section `plinth pack`
//! embeds (what a deploy reads back from an uploaded component).
//!
//! Properties: no panic; whatever parses survives the round trip through
//! the embedded section unchanged; every accepted `allowed-hosts` entry
//! parses again to the same pattern; every refusal is a `ManifestError`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use plinth::manifest::{HostPattern, ToolManifest, split_host_port};

fuzz_target!(|data: &[u8]| {
    // The embedded section: any bytes a component may carry.
    if let Ok(manifest) = ToolManifest::from_section(data) {
        round_trip(&manifest);
    }
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(manifest) = ToolManifest::from_toml(text) {
        round_trip(&manifest);
        let patterns = manifest.host_patterns();
        assert_eq!(patterns.len(), manifest.allowed_hosts.len(), "an accepted host entry no longer parses");
        // What the confirmation policy's conditions make of the tool's
        // inputs: a typed refusal or a compiled policy.
        let inputs: Vec<&str> = manifest.inputs.keys().map(String::as_str).collect();
        if manifest.confirmation.check(&inputs).is_ok() {
            let _ = manifest.confirmation.compile();
        }
        let _ = manifest.annotations.published(true, false);
        let _ = manifest.annotations.published(false, true);
    }
    for line in text.lines().take(64) {
        if let Ok(pattern) = HostPattern::parse(line) {
            assert_eq!(HostPattern::parse(line).ok(), Some(pattern));
        }
        let _ = split_host_port(line);
    }
});

fn round_trip(manifest: &ToolManifest) {
    let section = manifest.to_section();
    let back = ToolManifest::from_section(&section)
        .unwrap_or_else(|e| panic!("the embedded form of an accepted manifest is refused: {e}"));
    assert_eq!(&back, manifest, "the manifest changed through its embedded form");
}
