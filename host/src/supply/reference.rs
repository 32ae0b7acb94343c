//! OCI references: `registry[:port]/repository[:tag][@sha256:hex]`, the
//! grammar of the OCI distribution spec and Docker's `reference` package,
//! with one difference: the registry must be named. A bare `acme/echo`
//! means Docker Hub to Docker, which is rarely what a vendor of Wasm tools
//! means, so it is refused with an example instead.

use std::fmt;

/// The tag assumed when a reference names neither a tag nor a digest.
const DEFAULT_TAG: &str = "latest";

/// A parsed reference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reference {
    /// `host[:port]`.
    pub registry: String,
    /// `acme/tools/echo`.
    pub repository: String,
    /// The tag, if one was named (`latest` when neither a tag nor a digest was).
    pub tag: Option<String>,
    /// `sha256:<64 hex>`: when given, it is what is pulled, and the tag only
    /// says where it came from.
    pub digest: Option<String>,
}

impl Reference {
    /// Parses a reference, or says what is wrong with it.
    pub fn parse(text: &str) -> Result<Reference, String> {
        let text = text.trim();
        if text.is_empty() || text.len() > 512 {
            return Err("a reference is 1 to 512 characters, like ghcr.io/acme/echo:1.0".into());
        }
        let (name, digest) = match text.split_once('@') {
            Some((name, digest)) => (name, Some(digest)),
            None => (text, None),
        };
        if let Some(d) = digest
            && !is_sha256_digest(d)
        {
            return Err(format!("`{d}` is not a digest: write sha256: and 64 lowercase hex digits"));
        }
        // A tag follows the last `:` after the last `/` (a `:` before it is a port).
        let last_slash = name.rfind('/').ok_or_else(|| missing_registry(text))?;
        let (name, tag) = match name[last_slash..].rfind(':') {
            Some(at) => (&name[..last_slash + at], Some(&name[last_slash + at + 1..])),
            None => (name, None),
        };
        if let Some(t) = tag
            && !is_tag(t)
        {
            return Err(format!(
                "`{t}` is not a tag: 1 to 128 letters, digits, `_`, `.` or `-`, not starting with `.` or `-`"
            ));
        }
        let (registry, repository) = name.split_once('/').ok_or_else(|| missing_registry(text))?;
        if !is_registry(registry) {
            return Err(missing_registry(text));
        }
        if !repository.split('/').all(is_path_component) {
            return Err(format!(
                "`{repository}` is not a repository: lowercase letters and digits in parts separated by `/`, with single `.`, `_`, `__` or `-` between them"
            ));
        }
        let tag = tag.map(str::to_string).or_else(|| digest.is_none().then(|| DEFAULT_TAG.to_string()));
        let reference = Reference {
            // Host names are case-insensitive: one spelling for credentials and URLs.
            registry: registry.to_ascii_lowercase(),
            repository: repository.to_string(),
            tag,
            digest: digest.map(str::to_string),
        };
        // The written form (with the default tag added) is what is stored
        // and parsed again: it must fit the same bound.
        if reference.to_string().len() > 512 {
            return Err("a reference is 1 to 512 characters, like ghcr.io/acme/echo:1.0".into());
        }
        Ok(reference)
    }

    /// What a manifest request names: the digest when there is one, else the tag.
    pub fn manifest_name(&self) -> &str {
        self.digest.as_deref().or(self.tag.as_deref()).unwrap_or(DEFAULT_TAG)
    }

    /// The same repository at `digest` (the tag kept, to say where it came from).
    pub fn at(&self, digest: &str) -> Reference {
        Reference { digest: Some(digest.to_string()), ..self.clone() }
    }

    /// The registry's host without a port, for matching against networks.
    pub fn host(&self) -> &str {
        match self.registry.strip_prefix('[') {
            Some(v6) => v6.split(']').next().unwrap_or(v6),
            None => self.registry.split(':').next().unwrap_or(&self.registry),
        }
    }
}

impl fmt::Display for Reference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.registry, self.repository)?;
        if let Some(tag) = &self.tag {
            write!(f, ":{tag}")?;
        }
        if let Some(digest) = &self.digest {
            write!(f, "@{digest}")?;
        }
        Ok(())
    }
}

fn missing_registry(text: &str) -> String {
    format!(
        "`{text}` names no registry: write it in full, like ghcr.io/acme/echo:1.0 or 127.0.0.1:5000/acme/echo@sha256:…"
    )
}

/// `sha256:` and 64 lowercase hex digits.
pub fn is_sha256_digest(d: &str) -> bool {
    d.strip_prefix("sha256:")
        .is_some_and(|hex| hex.len() == 64 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
}

fn is_tag(t: &str) -> bool {
    let b = t.as_bytes();
    (1..=128).contains(&b.len())
        && (b[0].is_ascii_alphanumeric() || b[0] == b'_')
        && b.iter().all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'.' | b'-'))
}

/// A registry: a domain (with a dot), `localhost`, an IPv4 or bracketed IPv6
/// address, each with an optional port.
fn is_registry(r: &str) -> bool {
    let (host, port) = if let Some(v6) = r.strip_prefix('[') {
        let Some((addr, rest)) = v6.split_once(']') else { return false };
        if addr.parse::<std::net::Ipv6Addr>().is_err() {
            return false;
        }
        (None, rest.strip_prefix(':').map(Some).unwrap_or(if rest.is_empty() { None } else { Some("x") }))
    } else {
        match r.split_once(':') {
            Some((h, p)) => (Some(h), Some(p)),
            None => (Some(r), None),
        }
    };
    if port.is_some_and(|p| p.parse::<u16>().map_or(true, |n| n == 0)) {
        return false;
    }
    host.is_none_or(|h| {
        (h.contains('.') || h == "localhost" || port.is_some())
            && h.split('.').all(|label| {
                !label.is_empty()
                    && label.len() <= 63
                    && label.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'-')
                    && !label.starts_with('-')
                    && !label.ends_with('-')
            })
    })
}

/// `[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*`.
fn is_path_component(c: &str) -> bool {
    let alnum = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    let b = c.as_bytes();
    if b.is_empty() || b.len() > 255 || !alnum(b[0]) || !alnum(b[b.len() - 1]) {
        return false;
    }
    // Every run of separators is `.`, `_`, `__` or dashes only.
    b.split(|c| alnum(*c))
        .filter(|run| !run.is_empty())
        .all(|run| run == b"." || run == b"_" || run == b"__" || run.iter().all(|c| *c == b'-'))
        && b.iter().all(|c| alnum(*c) || matches!(c, b'.' | b'_' | b'-'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_parse_like_the_distribution_spec_says() {
        let r = Reference::parse("127.0.0.1:5000/acme/echo:1.0").unwrap();
        assert_eq!((r.registry.as_str(), r.repository.as_str()), ("127.0.0.1:5000", "acme/echo"));
        assert_eq!((r.tag.as_deref(), r.digest.as_deref()), (Some("1.0"), None));
        assert_eq!(r.manifest_name(), "1.0");
        assert_eq!(r.host(), "127.0.0.1");

        let digest = format!("sha256:{}", "ab".repeat(32));
        let pinned = Reference::parse(&format!("ghcr.io/acme/tools/echo:1.0@{digest}")).unwrap();
        assert_eq!(pinned.manifest_name(), digest, "the digest wins over the tag");
        assert_eq!(pinned.to_string(), format!("ghcr.io/acme/tools/echo:1.0@{digest}"));
        let bare = Reference::parse(&format!("ghcr.io/acme/echo@{digest}")).unwrap();
        assert_eq!(bare.tag, None);

        let latest = Reference::parse("localhost:5000/echo").unwrap();
        assert_eq!(latest.tag.as_deref(), Some("latest"));
        assert_eq!(Reference::parse("[::1]:5000/a/b:v").unwrap().host(), "::1");
        assert!(Reference::parse("registry.example/a__b/c-d.e/f---g:v_1").is_ok());
        assert_eq!(Reference::parse("GHCR.io/acme/echo:V1").unwrap().to_string(), "ghcr.io/acme/echo:V1");
    }

    /// Found by the `signatures` fuzz target: a reference of 505 to 512
    /// characters without a tag was accepted, but its written form (with
    /// `:latest`) was longer than 512 and refused when read back.
    #[test]
    fn an_accepted_reference_reads_back_from_its_written_form() {
        // A repository of 49-letter parts, cut to `n` characters (ending on a letter).
        let repository = |n: usize| vec!["a".repeat(49); 11].join("/")[..n].to_string();
        let long = format!("registry.example/{}", repository(495));
        assert_eq!(long.len(), 512);
        let err = Reference::parse(&long).unwrap_err();
        assert!(err.starts_with("a reference is 1 to 512 characters"), "{err}");
        let fits = format!("registry.example/{}", repository(488));
        let reference = Reference::parse(&fits).unwrap();
        assert_eq!(Reference::parse(&reference.to_string()).unwrap(), reference);
    }

    #[test]
    fn malformed_references_are_refused_with_the_reason() {
        for (bad, says) in [
            ("acme/echo:1.0", "names no registry"),
            ("echo", "names no registry"),
            ("ghcr.io/Acme/echo", "is not a repository"),
            ("ghcr.io/acme//echo", "is not a repository"),
            ("ghcr.io/acme/echo:-x", "is not a tag"),
            ("ghcr.io/acme/echo@sha256:abc", "is not a digest"),
            ("ghcr.io/acme/echo@md5:0123", "is not a digest"),
            ("ghcr.io:99999/acme/echo", "names no registry"),
            ("ghcr.io/acme/echo:1.0;rm", "is not a tag"),
            ("", "1 to 512"),
        ] {
            let e = Reference::parse(bad).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }
}
