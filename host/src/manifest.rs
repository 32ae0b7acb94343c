//! `plinth.toml`: what a tool declares that WIT cannot say.
//!
//! The vendor writes it next to the tool's `Cargo.toml`; `plinth pack` checks
//! it and embeds it in the component (custom section [`SECTION_NAME`]) as
//! JSON, together with the name of the tool's WIT world, so that one `.wasm`
//! file is the whole deployable unit.

use crate::cheq::ConfirmationPolicy;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Name of the custom section that carries the manifest inside a packed tool.
pub const SECTION_NAME: &str = "plinth-manifest";

/// A tool's manifest. Every key is optional; unknown keys are refused so a typo
/// is caught at pack time instead of being silently ignored.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct ToolManifest {
    /// The language the tool is written in, which says how `plinth pack`
    /// builds it from source (Rust when absent).
    #[serde(default, skip_serializing_if = "Language::is_rust")]
    pub language: Language,
    /// The WIT world that defines the tool. Written by `plinth pack`; in
    /// `plinth.toml` it is needed only when the tool's WIT package has several
    /// worlds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub world: Option<String>,
    /// A2T tags, for filtering the enumeration.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    /// The Open Tool Calling toolkit the tool belongs to (`Travel` in
    /// `Travel.BookFlight@1.0.0`); by default its tenant's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub toolkit: Option<String>,
    /// A2T `img`: a URL of an image for the tool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub img: Option<String>,
    /// Hosts the tool may call over `wasi:http`: `host`, `host:port`,
    /// `*.suffix` (any subdomain), or `${config.KEY}` for the host of the URL
    /// the operator configured under `KEY`. Nothing else is reachable.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allowed_hosts: Vec<String>,
    /// Constraints WIT types cannot express, by input parameter id.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub inputs: BTreeMap<String, InputConstraints>,
    /// Configuration keys the tool reads through `wasi:config/store`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub config: BTreeMap<String, ConfigKey>,
    /// Ids of the secrets the tool reads (`plinth:tool/secrets`); the
    /// operator stores the values.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub secrets: Vec<String>,
    /// Limits the tool asks for; the operator's ceilings still apply.
    #[serde(default, skip_serializing_if = "ToolLimits::is_empty")]
    pub limits: ToolLimits,
    /// When a call needs the end user's confirmation (CHEQ).
    #[serde(default, skip_serializing_if = "ConfirmationPolicy::is_empty")]
    pub confirmation: ConfirmationPolicy,
    /// What the publisher says of the tool for clients to show (MCP's
    /// tool annotations): claims, not enforced.
    #[serde(default, skip_serializing_if = "ToolAnnotations::is_empty")]
    pub annotations: ToolAnnotations,
    /// The accounts the tool acts with: for each, its tenant's provider,
    /// the scopes the person grants, and the hosts whose requests carry the
    /// person's token (docs/authorization.md).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub authorization: Vec<AuthorizationNeed>,
}

/// One account a tool acts with (`[[authorization]]`): Plinth holds the
/// person's grant at `provider` and attaches its token to the tool's
/// requests to `hosts`; the tool never sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct AuthorizationNeed {
    /// The id of a provider the tool's tenant configures (1 to 64 of
    /// `[a-z0-9_-]`, starting with a letter).
    pub provider: String,
    /// The scopes asked of the person (OAuth scope tokens); none asks for
    /// the provider's default.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scopes: Vec<String>,
    /// The hosts whose requests carry the token: each one of the tool's
    /// `allowed-hosts` entries, written the same way.
    pub hosts: Vec<String>,
}

/// At most this many `[[authorization]]` entries.
pub const MAX_AUTHORIZATIONS: usize = 4;
/// At most this many scopes in one entry.
pub const MAX_SCOPES: usize = 32;

/// A valid provider id: 1 to 64 of `[a-z0-9_-]`, starting with a letter.
pub fn is_provider_id(id: &str) -> bool {
    (1..=64).contains(&id.len())
        && id.starts_with(|c: char| c.is_ascii_lowercase())
        && id.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'_' | b'-'))
}

/// A valid OAuth scope token (RFC 6749 §3.3: printable ASCII but space,
/// `"` and `\\`), at most 128 bytes.
pub fn is_scope(scope: &str) -> bool {
    (1..=128).contains(&scope.len())
        && scope.bytes().all(|b| b == 0x21 || (0x23..=0x5b).contains(&b) || (0x5d..=0x7e).contains(&b))
}

/// The publisher's claims about a tool, published as MCP tool annotations
/// and shown in the catalog. Plinth enforces none of them; where it knows
/// better (a tool that reaches no host cannot touch the world, a tool that
/// may need confirmation changes something) its facts win.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct ToolAnnotations {
    /// A human-readable title (1 to 100 characters, no control characters).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// The tool changes nothing (`readOnlyHint`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_only: Option<bool>,
    /// What it changes may be destroyed or overwritten (`destructiveHint`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destructive: Option<bool>,
    /// The same call twice has the effect of one (`idempotentHint`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotent: Option<bool>,
    /// It reaches beyond a closed domain (`openWorldHint`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub open_world: Option<bool>,
}

impl ToolAnnotations {
    fn is_empty(&self) -> bool {
        *self == ToolAnnotations::default()
    }

    /// What is published for a tool with these claims: a tool that may need
    /// its end user's confirmation changes something (not read-only,
    /// destructive), and one that reaches no host cannot reach the world
    /// (the sandbox enforces that). Claims stand for the rest.
    pub fn published(&self, may_need_confirmation: bool, reaches_no_host: bool) -> ToolAnnotations {
        ToolAnnotations {
            title: self.title.clone(),
            read_only: if may_need_confirmation { Some(false) } else { self.read_only },
            destructive: if may_need_confirmation { Some(true) } else { self.destructive },
            idempotent: self.idempotent,
            open_world: if reaches_no_host { Some(false) } else { self.open_world },
        }
    }
}

/// The languages `plinth pack` builds tools from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Language {
    /// A Rust crate built with cargo for `wasm32-wasip2`.
    #[default]
    Rust,
    /// Python, built with componentize-py.
    Python,
    /// JavaScript, built with componentize-js.
    Js,
}

impl Language {
    fn is_rust(&self) -> bool {
        *self == Language::Rust
    }

    /// Its name in `plinth.toml` and on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            Language::Rust => "rust",
            Language::Python => "python",
            Language::Js => "js",
        }
    }

    /// The linear memory, in MiB, a tool in this language needs to start:
    /// its runtime's own heap (CPython's, SpiderMonkey's) comes before any
    /// of the tool's data. Measured with tools built by the pinned
    /// toolchains: Python starts in 16 MiB, not in 8; JavaScript in 10, not
    /// in 9.
    pub fn min_memory_mib(self) -> u64 {
        match self {
            Language::Rust => 1,
            Language::Python => 16,
            Language::Js => 10,
        }
    }
}

/// Limits a tool asks for, each capped by the operator's ceiling.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct ToolLimits {
    /// Wall-clock time per invocation, in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline_ms: Option<u64>,
    /// Linear memory per instance, in MiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_mib: Option<u64>,
    /// Invocations of this tool running at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_concurrency: Option<u32>,
}

impl ToolLimits {
    fn is_empty(&self) -> bool {
        *self == ToolLimits::default()
    }
}

/// Narrowing of an input parameter beyond its WIT type.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct InputConstraints {
    /// Maximum length of a string, in characters (Unicode scalar values).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_length: Option<u32>,
    /// Smallest allowed integer; must lie within the WIT type's range.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min: Option<i64>,
    /// Largest allowed integer; must lie within the WIT type's range.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max: Option<i64>,
    /// Never taken from the agent: the end user enters it on the
    /// confirmation page (CHEQ's privacy flow), and it is never returned to
    /// the agent or logged. Strings only; every call needs confirmation.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub private: bool,
}

/// A configuration key the tool reads.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct ConfigKey {
    /// What the operator should put there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Whether the tool cannot work without it.
    #[serde(default)]
    pub required: bool,
    /// The value used when the operator sets none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<String>,
}

/// Why a manifest was refused.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    /// `plinth.toml` is not valid TOML or has unknown keys.
    #[error("plinth.toml: {0}")]
    Toml(#[from] toml::de::Error),
    /// The embedded manifest section is not valid.
    #[error("the `{SECTION_NAME}` section is not a valid manifest: {0}")]
    Section(#[from] serde_json::Error),
    /// A toolkit name OTC cannot carry.
    #[error("toolkit `{0}`: use 1 to 64 ASCII letters, digits or `_`")]
    Toolkit(String),
    /// A secret id with characters outside `[a-z0-9._-]`.
    #[error("secret id `{0}`: use 1 to 128 lowercase letters, digits, `.`, `_` or `-`")]
    SecretId(String),
    /// An `[annotations]` title that is empty, too long or has control
    /// characters.
    #[error("annotations.title: use 1 to 100 characters, without control characters")]
    Title,
    /// An `allowed-hosts` entry cannot be understood.
    #[error("allowed-hosts entry `{entry}`: {why}")]
    AllowedHost {
        /// The entry as written.
        entry: String,
        /// What is wrong with it.
        why: &'static str,
    },
    /// An `[[authorization]]` entry that cannot be used.
    #[error("[[authorization]] {0}")]
    Authorization(String),
}

impl ToolManifest {
    /// Parses and checks `plinth.toml` text.
    pub fn from_toml(text: &str) -> Result<Self, ManifestError> {
        let manifest: ToolManifest = toml::from_str(text)?;
        manifest.check()?;
        Ok(manifest)
    }

    /// Parses and checks the embedded JSON form.
    pub fn from_section(data: &[u8]) -> Result<Self, ManifestError> {
        let manifest: ToolManifest = serde_json::from_slice(data)?;
        manifest.check()?;
        Ok(manifest)
    }

    /// The embedded JSON form.
    pub fn to_section(&self) -> Vec<u8> {
        // Serializing a plain struct of strings and maps cannot fail.
        serde_json::to_vec(self).unwrap_or_default()
    }

    fn check(&self) -> Result<(), ManifestError> {
        if let Some(toolkit) = &self.toolkit
            && !is_toolkit_name(toolkit)
        {
            return Err(ManifestError::Toolkit(toolkit.clone()));
        }
        for entry in &self.allowed_hosts {
            HostPattern::parse(entry)?;
        }
        if let Some(title) = &self.annotations.title
            && (title.trim().is_empty() || title.chars().count() > 100 || title.chars().any(char::is_control))
        {
            return Err(ManifestError::Title);
        }
        for id in &self.secrets {
            if !is_secret_id(id) {
                return Err(ManifestError::SecretId(id.clone()));
            }
        }
        self.check_authorization()
    }

    /// Each `[[authorization]]` entry names a provider id, sound scopes and
    /// hosts among `allowed-hosts`, and no two share a provider or a host
    /// (a request's token is never in doubt).
    fn check_authorization(&self) -> Result<(), ManifestError> {
        let refuse = |why: String| Err(ManifestError::Authorization(why));
        if self.authorization.len() > MAX_AUTHORIZATIONS {
            return refuse(format!("at most {MAX_AUTHORIZATIONS} entries"));
        }
        let mut providers = std::collections::BTreeSet::new();
        let mut hosts = std::collections::BTreeSet::new();
        for need in &self.authorization {
            let provider = &need.provider;
            if !is_provider_id(provider) {
                return refuse(format!(
                    "provider `{provider}`: use 1 to 64 lowercase letters, digits, `_` or `-`, starting with a letter"
                ));
            }
            if !providers.insert(provider.as_str()) {
                return refuse(format!("provider `{provider}` is named twice: one entry per provider"));
            }
            if need.scopes.len() > MAX_SCOPES {
                return refuse(format!("provider `{provider}`: at most {MAX_SCOPES} scopes"));
            }
            if let Some(bad) = need.scopes.iter().find(|s| !is_scope(s)) {
                return refuse(format!(
                    "provider `{provider}`: scope `{bad}` is not an OAuth scope (printable ASCII without spaces, quotes or backslashes, at most 128 bytes)"
                ));
            }
            if need.hosts.is_empty() {
                return refuse(format!(
                    "provider `{provider}`: `hosts` must name the hosts whose requests carry the person's token"
                ));
            }
            for host in &need.hosts {
                if !self.allowed_hosts.contains(host) {
                    return refuse(format!(
                        "provider `{provider}`: host `{host}` is not one of `allowed-hosts` (write it the same way there)"
                    ));
                }
                if !hosts.insert(host.as_str()) {
                    return refuse(format!("host `{host}` is named by two providers: a request's token must be one"));
                }
            }
        }
        Ok(())
    }

    /// The accounts the tool acts with, as every door publishes them
    /// (A2T's `authorization` extension, MCP's `_meta.authorization`):
    /// `[{"provider", "scopes"}]`, never the hosts (what the tool reaches
    /// is the operator's business, not the agent's).
    pub fn published_authorization(&self) -> serde_json::Value {
        self.authorization
            .iter()
            .map(|need| serde_json::json!({ "provider": need.provider, "scopes": need.scopes }))
            .collect()
    }

    /// The parsed `allowed-hosts` entries.
    pub fn host_patterns(&self) -> Vec<HostPattern> {
        // Entries were checked when the manifest was parsed.
        self.allowed_hosts.iter().filter_map(|e| HostPattern::parse(e).ok()).collect()
    }
}

/// A valid OTC toolkit name: 1 to 64 of `[A-Za-z0-9_]`.
pub fn is_toolkit_name(name: &str) -> bool {
    (1..=64).contains(&name.len()) && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// A valid secret id: 1 to 128 of `[a-z0-9._-]`.
pub fn is_secret_id(id: &str) -> bool {
    (1..=128).contains(&id.len())
        && id.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'.' | b'_' | b'-'))
}

/// One parsed `allowed-hosts` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostPattern {
    /// `host` or `host:port`, compared case-insensitively.
    Exact {
        /// Lower-cased host name or IP literal.
        host: String,
        /// `None` allows any port.
        port: Option<u16>,
    },
    /// `*.suffix`: any subdomain of `suffix` (not `suffix` itself).
    Subdomains {
        /// Lower-cased suffix without the leading `*.`.
        suffix: String,
        /// `None` allows any port.
        port: Option<u16>,
    },
    /// `${config.KEY}`: the authority of the URL configured under `KEY`.
    ConfigUrl(String),
}

impl HostPattern {
    /// Parses one entry.
    pub fn parse(entry: &str) -> Result<Self, ManifestError> {
        let bad = |why| ManifestError::AllowedHost { entry: entry.to_string(), why };
        if let Some(key) = entry.strip_prefix("${config.").and_then(|r| r.strip_suffix('}')) {
            if key.is_empty() {
                return Err(bad("the config key is empty"));
            }
            return Ok(HostPattern::ConfigUrl(key.to_string()));
        }
        if entry.contains("://") || entry.contains('/') {
            return Err(bad("write a host, not a URL (for example `api.example.com` or `api.example.com:8443`)"));
        }
        let (host, port) = split_host_port(entry).ok_or_else(|| bad("the port is not a number from 1 to 65535"))?;
        if host.is_empty() {
            return Err(bad("the host is empty"));
        }
        let host = host.to_ascii_lowercase();
        if let Some(suffix) = host.strip_prefix("*.") {
            if suffix.is_empty() || suffix.contains('*') {
                return Err(bad("a wildcard must look like `*.example.com`"));
            }
            return Ok(HostPattern::Subdomains { suffix: suffix.to_string(), port });
        }
        if host.contains('*') {
            return Err(bad("a wildcard is allowed only as a leading `*.`"));
        }
        Ok(HostPattern::Exact { host, port })
    }
}

/// Splits `host[:port]` (with `[v6]:port` for IPv6 literals).
pub fn split_host_port(authority: &str) -> Option<(&str, Option<u16>)> {
    if let Some(rest) = authority.strip_prefix('[') {
        let (host, after) = rest.split_once(']')?;
        return match after.strip_prefix(':') {
            Some(port) => Some((host, Some(parse_port(port)?))),
            None if after.is_empty() => Some((host, None)),
            None => None,
        };
    }
    match authority.rsplit_once(':') {
        Some((host, port)) if !host.contains(':') => Some((host, Some(parse_port(port)?))),
        _ => Some((authority, None)),
    }
}

fn parse_port(port: &str) -> Option<u16> {
    port.parse::<u16>().ok().filter(|p| *p != 0)
}

#[cfg(test)]
mod proptests;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_key() {
        let m = ToolManifest::from_toml(
            r#"
            world = "book-flight"
            tags = ["travel"]
            img = "https://example.com/plane.png"
            allowed-hosts = ["api.example.com", "*.example.org:8443", "${config.backend-url}"]
            [inputs.flight_number]
            max-length = 6
            [inputs.passengers]
            min = 1
            max = 9
            [config.backend-url]
            description = "where"
            required = true
            [limits]
            deadline-ms = 2000
            memory-mib = 16
            max-concurrency = 4
            "#,
        )
        .unwrap();
        assert_eq!(m.world.as_deref(), Some("book-flight"));
        assert_eq!(m.inputs["flight_number"].max_length, Some(6));
        assert_eq!(m.inputs["passengers"].max, Some(9));
        assert!(m.config["backend-url"].required);
        assert_eq!(m.limits, ToolLimits { deadline_ms: Some(2000), memory_mib: Some(16), max_concurrency: Some(4) });
        assert_eq!(
            m.host_patterns(),
            vec![
                HostPattern::Exact { host: "api.example.com".into(), port: None },
                HostPattern::Subdomains { suffix: "example.org".into(), port: Some(8443) },
                HostPattern::ConfigUrl("backend-url".into()),
            ]
        );
        assert_eq!(ToolManifest::from_section(&m.to_section()).unwrap(), m);
    }

    #[test]
    fn refuses_unknown_keys_and_bad_hosts() {
        let err = ToolManifest::from_toml("tagz = []").unwrap_err().to_string();
        assert!(err.contains("unknown field `tagz`"), "{err}");
        assert!(ToolManifest::from_toml("secrets = ['Api Key']").is_err());
        assert_eq!(ToolManifest::from_toml("toolkit = 'Travel_2'").unwrap().toolkit.as_deref(), Some("Travel_2"));
        for bad in ["''", "'Acme.Travel'", "'acme-travel'", &format!("'{}'", "x".repeat(65))] {
            assert!(ToolManifest::from_toml(&format!("toolkit = {bad}")).is_err(), "{bad}");
        }
        assert_eq!(ToolManifest::from_toml("secrets = ['api-key']").unwrap().secrets, ["api-key"]);
        for bad in ["https://api.example.com", "api.example.com:99999", "a.*.com", "*.", "${config.}"] {
            let toml = format!("allowed-hosts = [{bad:?}]");
            assert!(ToolManifest::from_toml(&toml).is_err(), "{bad} was accepted");
        }
    }

    #[test]
    fn an_authorization_names_a_provider_scopes_and_hosts_the_tool_may_reach() {
        let good = "allowed-hosts = ['api.inbox.example', '${config.calendar-url}']\n\
                    [[authorization]]\nprovider = 'inbox'\nscopes = ['inbox.read', 'https://inbox.example/auth/mail']\nhosts = ['api.inbox.example']\n\
                    [[authorization]]\nprovider = 'calendar'\nhosts = ['${config.calendar-url}']\n";
        let manifest = ToolManifest::from_toml(good).unwrap();
        assert_eq!(manifest.authorization.len(), 2);
        assert_eq!(manifest.authorization[0].scopes, ["inbox.read", "https://inbox.example/auth/mail"]);
        assert!(manifest.authorization[1].scopes.is_empty());
        // The embedded form carries it, and reads back the same.
        assert_eq!(ToolManifest::from_section(&manifest.to_section()).unwrap(), manifest);
        let with = |entry: &str| {
            let toml = format!("allowed-hosts = ['api.inbox.example', 'other.example']\n[[authorization]]\n{entry}");
            ToolManifest::from_toml(&toml).map_err(|e| e.to_string())
        };
        assert!(with("provider = 'inbox'\nhosts = ['api.inbox.example']").is_ok());
        for (bad, says) in [
            ("provider = 'Inbox'\nhosts = ['api.inbox.example']", "provider `Inbox`"),
            ("provider = 'inbox'\nhosts = []", "must name the hosts"),
            ("provider = 'inbox'\nhosts = ['api.inbox.example:443']", "not one of `allowed-hosts`"),
            ("provider = 'inbox'\nhosts = ['undeclared.example']", "not one of `allowed-hosts`"),
            ("provider = 'inbox'\nscopes = ['two words']\nhosts = ['api.inbox.example']", "is not an OAuth scope"),
            ("provider = 'inbox'\nhosts = ['api.inbox.example']\ntoken = 'x'", "unknown field `token`"),
            (
                "provider = 'inbox'\nhosts = ['api.inbox.example']\n[[authorization]]\nprovider = 'inbox'\nhosts = ['other.example']",
                "named twice",
            ),
            (
                "provider = 'inbox'\nhosts = ['api.inbox.example']\n[[authorization]]\nprovider = 'mail'\nhosts = ['api.inbox.example']",
                "named by two providers",
            ),
        ] {
            let err = with(bad).unwrap_err();
            assert!(err.contains(says), "{bad}: {err}");
        }
    }

    #[test]
    fn splits_host_and_port() {
        assert_eq!(split_host_port("a.com"), Some(("a.com", None)));
        assert_eq!(split_host_port("a.com:80"), Some(("a.com", Some(80))));
        assert_eq!(split_host_port("[::1]:8080"), Some(("::1", Some(8080))));
        assert_eq!(split_host_port("[::1]"), Some(("::1", None)));
        assert_eq!(split_host_port("a.com:x"), None);
    }
}
