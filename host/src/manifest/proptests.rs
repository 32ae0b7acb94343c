//! Property tests: `plinth.toml`, its embedded JSON form and `allowed-hosts`
//! entries come from publishers, so no text may crash or hang the parser;
//! every refusal is a typed [`ManifestError`] with a message.

use super::*;
use crate::egress::OutboundLimits;
use crate::runtime::outbound::OutboundPolicy;
use proptest::prelude::*;
use std::sync::Arc;

/// A refusal a caller can show: a message, never empty.
fn clean<T>(result: Result<T, ManifestError>) -> Result<Option<T>, TestCaseError> {
    match result {
        Ok(value) => Ok(Some(value)),
        Err(e) => {
            prop_assert!(!e.to_string().trim().is_empty(), "an empty message for {e:?}");
            Ok(None)
        }
    }
}

/// A manifest that parsed must survive the trip into the packed tool's
/// section and back unchanged: what is deployed is what was checked.
fn round_trips(manifest: &ToolManifest) -> Result<(), TestCaseError> {
    let again = ToolManifest::from_section(&manifest.to_section());
    prop_assert!(again.is_ok(), "the section of a valid manifest is refused: {:?}", again.err());
    prop_assert_eq!(&again.unwrap(), manifest);
    for entry in &manifest.allowed_hosts {
        prop_assert!(HostPattern::parse(entry).is_ok(), "a checked entry `{}` no longer parses", entry);
    }
    Ok(())
}

/// Keys a manifest knows (at every level) and a few it does not.
fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => prop::sample::select(vec![
            "world", "tags", "toolkit", "img", "allowed-hosts", "inputs", "config", "secrets", "limits",
            "confirmation", "max-length", "min", "max", "private", "description", "required", "default",
            "deadline-ms", "memory-mib", "max-concurrency", "when",
        ])
        .prop_map(str::to_string),
        1 => "[a-z_-]{1,12}",
        1 => any::<String>(),
    ]
}

/// Any TOML value, nested a little.
fn toml_value() -> impl Strategy<Value = toml::Value> {
    let leaf = prop_oneof![
        any::<String>().prop_map(toml::Value::String),
        prop::sample::select(vec!["api.example.com", "*.example.org:8443", "${config.url}", "Travel", "api-key"])
            .prop_map(|s| toml::Value::String(s.into())),
        any::<i64>().prop_map(toml::Value::Integer),
        prop::sample::select(vec![0i64, 1, -1, 255, 256, 65535, 65536, u32::MAX as i64, i64::MIN, i64::MAX])
            .prop_map(toml::Value::Integer),
        any::<f64>().prop_map(toml::Value::Float),
        any::<bool>().prop_map(toml::Value::Boolean),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(toml::Value::Array),
            prop::collection::btree_map(key(), inner, 0..6).prop_map(|m| toml::Value::Table(m.into_iter().collect())),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    #[test]
    fn any_text_is_parsed_or_refused(text in any::<String>()) {
        if let Some(manifest) = clean(ToolManifest::from_toml(&text))? {
            round_trips(&manifest)?;
        }
    }

    #[test]
    fn any_table_is_parsed_or_refused(table in prop::collection::btree_map(key(), toml_value(), 0..8)) {
        let table: toml::Table = table.into_iter().collect();
        let text = toml::to_string(&table);
        prop_assume!(text.is_ok());
        if let Some(manifest) = clean(ToolManifest::from_toml(&text.unwrap()))? {
            round_trips(&manifest)?;
        }
    }

    #[test]
    fn any_section_bytes_are_parsed_or_refused(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        if let Some(manifest) = clean(ToolManifest::from_section(&bytes))? {
            round_trips(&manifest)?;
        }
    }

    #[test]
    fn any_section_json_is_parsed_or_refused(table in prop::collection::btree_map(key(), toml_value(), 0..8)) {
        // The same shapes as JSON, the way a hand-made component would carry them.
        let json = serde_json::to_vec(&table).unwrap_or_default();
        if let Some(manifest) = clean(ToolManifest::from_section(&json))? {
            round_trips(&manifest)?;
        }
    }

    #[test]
    fn any_allowed_host_entry_is_parsed_or_refused(entry in prop_oneof![
        any::<String>(),
        "[a-zA-Z0-9.*:\\[\\]${}/@-]{0,24}",
    ]) {
        if let Some(pattern) = clean(HostPattern::parse(&entry))? {
            match &pattern {
                HostPattern::Exact { host, .. } => {
                    prop_assert!(!host.is_empty() && !host.contains('*') && !host.contains('/'));
                    prop_assert_eq!(host, &host.to_ascii_lowercase());
                }
                HostPattern::Subdomains { suffix, .. } => {
                    prop_assert!(!suffix.is_empty() && !suffix.contains('*') && !suffix.contains('/'));
                    prop_assert_eq!(suffix, &suffix.to_ascii_lowercase());
                }
                HostPattern::ConfigUrl(key) => prop_assert!(!key.is_empty()),
            }
            // Matching any authority against it never panics.
            let policy = OutboundPolicy::new(&[pattern], &BTreeMap::new(), Arc::new(OutboundLimits::default()));
            policy.allows(Some("https"), &entry);
            policy.allows(Some("http"), "example.com:80");
        }
    }

    /// A `${config.KEY}` entry takes its host from whatever URL is
    /// configured: any text is handled, and a URL allows exactly its own
    /// host and port.
    #[test]
    fn a_configured_url_allows_exactly_its_authority(
        value in prop_oneof![any::<String>(), "[a-zA-Z]{0,6}://[a-z0-9.:@\\[\\]-]{0,20}(/.{0,8})?"],
        scheme in prop::sample::select(vec!["http", "https", "HTTPS"]),
        host in "[a-z0-9-]{1,10}(\\.[a-z0-9-]{1,10}){0,2}",
        port in prop::option::of(1u16..),
        other in "[a-z0-9.-]{1,20}",
    ) {
        let pattern = HostPattern::parse("${config.backend}").map_err(|e| TestCaseError::fail(e.to_string()))?;
        let limits = Arc::new(OutboundLimits::default());
        // Any configured text: no panic.
        let config = BTreeMap::from([("backend".to_string(), value.clone())]);
        let policy = OutboundPolicy::new(std::slice::from_ref(&pattern), &config, limits.clone());
        policy.allows(Some("https"), &value);
        // A URL: its authority, and nothing else.
        let authority = match port {
            Some(p) => format!("{host}:{p}"),
            None => host.clone(),
        };
        let url = format!("{scheme}://user@{authority}/path?q#f");
        let config = BTreeMap::from([("backend".to_string(), url.clone())]);
        let policy = OutboundPolicy::new(&[pattern], &config, limits);
        let http = scheme == "http";
        let effective = port.unwrap_or(if http { 80 } else { 443 });
        let wire = if http { "http" } else { "https" };
        let exact = format!("{host}:{effective}");
        prop_assert!(policy.allows(Some(wire), &exact), "{} refused for {}", exact, url);
        if other != host {
            let elsewhere = format!("{other}:{effective}");
            prop_assert!(!policy.allows(Some(wire), &elsewhere), "{} allowed for {}", elsewhere, url);
        }
        let wrong_port = format!("{host}:{}", effective.wrapping_add(1).max(1));
        prop_assert!(!policy.allows(Some(wire), &wrong_port), "{} allowed for {}", wrong_port, url);
    }

    /// `*.suffix` reaches the subdomains of `suffix` and nothing else: not
    /// the suffix itself, not a name that merely ends with the same letters.
    #[test]
    fn a_wildcard_allows_only_subdomains(
        suffix in "[a-z0-9-]{1,10}(\\.[a-z0-9-]{1,10}){0,3}",
        label in "[a-z0-9-]{1,10}",
        port in prop::option::of(1u16..),
        other_port in 1u16..,
    ) {
        let entry = match port {
            Some(p) => format!("*.{suffix}:{p}"),
            None => format!("*.{suffix}"),
        };
        let pattern = HostPattern::parse(&entry).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let policy = OutboundPolicy::new(&[pattern], &BTreeMap::new(), Arc::new(OutboundLimits::default()));
        let on = |host: &str, p: u16| policy.allows(Some("https"), &format!("{host}:{p}"));
        let p = port.unwrap_or(443);
        let sub = format!("{label}.{suffix}");
        let shouted = format!("{}.{suffix}", label.to_ascii_uppercase());
        let glued = format!("{label}{suffix}");
        let beyond = format!("{label}.{suffix}.evil");
        prop_assert!(on(&sub, p), "{} refused", sub);
        prop_assert!(on(&shouted, p), "{} refused", shouted);
        prop_assert!(!on(&suffix, p), "{} allowed", suffix);
        prop_assert!(!on(&glued, p), "{} allowed", glued);
        prop_assert!(!on(&beyond, p), "{} allowed", beyond);
        if port.is_some() && other_port != p {
            prop_assert!(!on(&sub, other_port), "{}:{} allowed", sub, other_port);
        }
    }
}

/// Nesting far past anything a manifest needs is refused, not a stack
/// overflow (which would abort the whole server, not just the deploy).
#[test]
fn deep_nesting_is_refused_cleanly() {
    let depth = 100_000;
    let arrays = format!("tags = {}{}", "[".repeat(depth), "]".repeat(depth));
    assert!(ToolManifest::from_toml(&arrays).is_err());
    let inline = format!("limits = {}{}", "{a = ".repeat(depth), "}".repeat(depth));
    assert!(ToolManifest::from_toml(&inline).is_err());
    let dotted = format!("inputs.x{} = 1", ".a".repeat(depth));
    assert!(ToolManifest::from_toml(&dotted).is_err());
    let header = format!("[inputs.x{}]\nb = 1", ".a".repeat(depth));
    assert!(ToolManifest::from_toml(&header).is_err());
    let json = format!("{{\"tags\": {}{}}}", "[".repeat(depth), "]".repeat(depth));
    assert!(ToolManifest::from_section(json.as_bytes()).is_err());
}
