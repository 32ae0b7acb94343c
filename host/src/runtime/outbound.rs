//! Outbound HTTP: a tool reaches only the hosts its manifest declares.
//!
//! Every `wasi:http/outgoing-handler` request of a tool passes through
//! [`OutboundPolicy::send_request`], the one place the allowlist is enforced
//! (the shape Spin uses for `allowed_outbound_hosts`).

use crate::manifest::{HostPattern, split_host_port};
use std::collections::BTreeMap;
use std::time::Duration;
use wasmtime_wasi_http::{Error as HttpError, RequestOptions, WasiBody, WasiHttpHooks};

/// Connect timeout when the tool sets none.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Time to the first response byte when the tool sets none.
const FIRST_BYTE_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest pause between response body frames when the tool sets none.
const BETWEEN_BYTES_TIMEOUT: Duration = Duration::from_secs(10);

/// One allowed host, with config references already resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
enum AllowedHost {
    Exact { host: String, port: Option<u16> },
    Subdomains { suffix: String, port: Option<u16> },
}

/// The hosts one invocation of one tool may call.
#[derive(Debug, Clone, Default)]
pub struct OutboundPolicy {
    allowed: Vec<AllowedHost>,
}

impl OutboundPolicy {
    /// The policy for a tool's manifest entries; `${config.KEY}` entries take
    /// the host and port of the URL configured under `KEY` (and allow nothing
    /// when it is unset or not a URL).
    pub fn new(patterns: &[HostPattern], config: &BTreeMap<String, String>) -> Self {
        let allowed = patterns
            .iter()
            .filter_map(|p| match p {
                HostPattern::Exact { host, port } => Some(AllowedHost::Exact { host: host.clone(), port: *port }),
                HostPattern::Subdomains { suffix, port } => {
                    Some(AllowedHost::Subdomains { suffix: suffix.clone(), port: *port })
                }
                HostPattern::ConfigUrl(key) => {
                    let (host, port) = url_host_port(config.get(key)?)?;
                    Some(AllowedHost::Exact { host, port: Some(port) })
                }
            })
            .collect();
        OutboundPolicy { allowed }
    }

    /// Whether a request to `authority` over `scheme` is allowed.
    pub fn allows(&self, scheme: Option<&str>, authority: &str) -> bool {
        let Some((host, port)) = split_host_port(authority) else { return false };
        let host = host.to_ascii_lowercase();
        let port = port.unwrap_or(if scheme == Some("http") { 80 } else { 443 });
        self.allowed.iter().any(|allowed| match allowed {
            AllowedHost::Exact { host: h, port: p } => *h == host && p.is_none_or(|p| p == port),
            AllowedHost::Subdomains { suffix, port: p } => {
                host.len() > suffix.len() + 1
                    && host.ends_with(suffix.as_str())
                    && host[..host.len() - suffix.len()].ends_with('.')
                    && p.is_none_or(|p| p == port)
            }
        })
    }
}

/// `http://host:8080/path` → `("host", 8080)`, with the scheme's default port.
fn url_host_port(url: &str) -> Option<(String, u16)> {
    let (scheme, rest) = url.split_once("://")?;
    let default_port = match scheme.to_ascii_lowercase().as_str() {
        "http" => 80,
        "https" => 443,
        _ => return None,
    };
    let authority = rest.split(['/', '?', '#']).next()?;
    let authority = authority.rsplit_once('@').map_or(authority, |(_, a)| a);
    let (host, port) = split_host_port(authority)?;
    (!host.is_empty()).then(|| (host.to_ascii_lowercase(), port.unwrap_or(default_port)))
}

impl WasiHttpHooks for OutboundPolicy {
    fn send_request(
        &mut self,
        request: http::Request<WasiBody>,
        options: Option<RequestOptions>,
        fut: Box<dyn Future<Output = Result<(), HttpError>> + Send>,
    ) -> Box<
        dyn Future<
                Output = Result<
                    (http::Response<WasiBody>, Box<dyn Future<Output = Result<(), HttpError>> + Send>),
                    HttpError,
                >,
            > + Send,
    > {
        drop(fut);
        let uri = request.uri();
        let allowed = uri.authority().is_some_and(|a| self.allows(uri.scheme_str(), a.as_str()));
        if !allowed {
            tracing::warn!(authority = ?uri.authority().map(|a| a.as_str()), "outbound request refused: host not allowed for this tool");
            return Box::new(async { Err(HttpError::HttpRequestDenied) });
        }
        let options = options.unwrap_or_default();
        let options = RequestOptions {
            connect_timeout: options.connect_timeout.or(Some(CONNECT_TIMEOUT)),
            first_byte_timeout: options.first_byte_timeout.or(Some(FIRST_BYTE_TIMEOUT)),
            between_bytes_timeout: options.between_bytes_timeout.or(Some(BETWEEN_BYTES_TIMEOUT)),
        };
        Box::new(async move {
            use http_body_util::BodyExt;
            let (response, io) = wasmtime_wasi_http::default_send_request(request, Some(options)).await?;
            Ok((
                response.map(BodyExt::boxed_unsync),
                Box::new(io) as Box<dyn Future<Output = Result<(), HttpError>> + Send>,
            ))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(entries: &[&str], config: &[(&str, &str)]) -> OutboundPolicy {
        let patterns: Vec<_> = entries.iter().map(|e| HostPattern::parse(e).unwrap()).collect();
        let config = config.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        OutboundPolicy::new(&patterns, &config)
    }

    #[test]
    fn exact_hosts_and_ports() {
        let p = policy(&["api.example.com", "pinned.example.com:8443"], &[]);
        assert!(p.allows(Some("https"), "api.example.com"));
        assert!(p.allows(Some("http"), "API.example.com:8080"));
        assert!(p.allows(Some("https"), "pinned.example.com:8443"));
        assert!(!p.allows(Some("https"), "pinned.example.com"));
        assert!(!p.allows(Some("https"), "example.com"));
        assert!(!p.allows(Some("https"), "api.example.com.evil.net"));
    }

    #[test]
    fn wildcards_match_subdomains_only() {
        let p = policy(&["*.example.com"], &[]);
        assert!(p.allows(Some("https"), "a.example.com"));
        assert!(p.allows(Some("https"), "a.b.example.com"));
        assert!(!p.allows(Some("https"), "example.com"));
        assert!(!p.allows(Some("https"), "badexample.com"));
    }

    #[test]
    fn config_urls_allow_their_host_and_port() {
        let p = policy(&["${config.backend-url}"], &[("backend-url", "http://127.0.0.1:8090/base")]);
        assert!(p.allows(Some("http"), "127.0.0.1:8090"));
        assert!(!p.allows(Some("http"), "127.0.0.1:8091"));
        assert!(!p.allows(Some("http"), "127.0.0.1"));
        let https = policy(&["${config.u}"], &[("u", "https://api.example.com")]);
        assert!(https.allows(Some("https"), "api.example.com"));
        let unset = policy(&["${config.backend-url}"], &[]);
        assert!(!unset.allows(Some("http"), "127.0.0.1:8090"));
        let not_a_url = policy(&["${config.u}"], &[("u", "file:///etc/passwd")]);
        assert!(!not_a_url.allows(Some("http"), "localhost"));
    }

    #[test]
    fn nothing_is_allowed_by_default() {
        assert!(!OutboundPolicy::default().allows(Some("https"), "example.com"));
    }
}
