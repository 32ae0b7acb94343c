//! Outbound HTTP: a tool reaches only the hosts its manifest declares, and
//! never the host's own network unless the operator allows it.
//!
//! Every `wasi:http/outgoing-handler` request of a tool passes through
//! [`OutboundPolicy::send_request`], the one place the policy is enforced
//! (the shape Spin uses for `allowed_outbound_hosts`):
//! 1. the authority must match an `allowed-hosts` entry of the manifest;
//! 2. the invocation must not have used up its request budget;
//! 3. the name is resolved and **every** address must be public — loopback,
//!    private, link-local (cloud metadata), CGNAT, multicast and reserved
//!    ranges are refused unless an operator CIDR allows them;
//! 4. plain HTTP then connects to the address that was checked (the URI is
//!    rewritten to it, the `Host` header keeps the name), so a DNS answer that
//!    changes between check and connect cannot redirect the request. HTTPS
//!    connects by name, and certificate verification refuses a rebound
//!    internal server, which cannot prove it is that name;
//! 5. the response body is capped.
//!
//! Each refusal is logged and recorded, so the host can tell the caller that
//! the tool tried to reach what it may not.

use crate::manifest::{HostPattern, split_host_port};
use http_body_util::BodyExt;
use ipnet::IpNet;
use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::{Arc, Mutex};
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

/// The operator's side of the outbound policy, the same for every call.
#[derive(Debug, Clone)]
pub struct OutboundLimits {
    /// Non-public networks the operator lets tools reach (for backends on
    /// 127.0.0.1 or a private network). Empty: none.
    pub allowed_private: Vec<IpNet>,
    /// Requests one invocation may send.
    pub max_requests: u32,
    /// Largest response body a tool may read, per request.
    pub max_response_bytes: u64,
}

impl Default for OutboundLimits {
    fn default() -> Self {
        OutboundLimits { allowed_private: Vec::new(), max_requests: 20, max_response_bytes: 10 << 20 }
    }
}

/// Refused outbound requests of one invocation, for the caller's answer.
#[derive(Debug, Clone, Default)]
pub struct Denials(Arc<Mutex<Vec<String>>>);

impl Denials {
    fn record(&self, why: String) {
        tracing::warn!(target: "plinth::outbound", reason = %why, "outbound request refused");
        self.0.lock().unwrap_or_else(|p| p.into_inner()).push(why);
    }

    /// The first refusal, if any.
    pub fn first(&self) -> Option<String> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).first().cloned()
    }
}

/// What one invocation of one tool may call.
#[derive(Debug, Clone, Default)]
pub struct OutboundPolicy {
    allowed: Vec<AllowedHost>,
    limits: Arc<OutboundLimits>,
    sent: u32,
    denials: Denials,
}

impl OutboundPolicy {
    /// The policy for a tool's manifest entries; `${config.KEY}` entries take
    /// the host and port of the URL configured under `KEY` (and allow nothing
    /// when it is unset or not a URL).
    pub fn new(patterns: &[HostPattern], config: &BTreeMap<String, String>, limits: Arc<OutboundLimits>) -> Self {
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
        OutboundPolicy { allowed, limits, sent: 0, denials: Denials::default() }
    }

    /// Where this invocation's refusals are recorded.
    pub fn denials(&self) -> Denials {
        self.denials.clone()
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
        let uri = request.uri().clone();
        // Host and port only: a `user:password@` part is the tool's secret.
        let target = uri.authority().map_or_else(
            || "(no host)".to_string(),
            |a| a.port().map_or_else(|| a.host().to_string(), |port| format!("{}:{port}", a.host())),
        );
        let deny = |denials: &Denials, why: String| -> Box<dyn Future<Output = _> + Send> {
            denials.record(why);
            Box::new(async { Err(HttpError::HttpRequestDenied) })
        };
        if !uri.authority().is_some_and(|a| self.allows(uri.scheme_str(), a.as_str())) {
            return deny(&self.denials, format!("`{target}` is not among the hosts the tool declares"));
        }
        self.sent += 1;
        if self.sent > self.limits.max_requests {
            return deny(
                &self.denials,
                format!("more than {} outbound requests in one invocation", self.limits.max_requests),
            );
        }
        let options = options.unwrap_or_default();
        let options = RequestOptions {
            connect_timeout: options.connect_timeout.or(Some(CONNECT_TIMEOUT)),
            first_byte_timeout: options.first_byte_timeout.or(Some(FIRST_BYTE_TIMEOUT)),
            between_bytes_timeout: options.between_bytes_timeout.or(Some(BETWEEN_BYTES_TIMEOUT)),
        };
        let (limits, denials) = (self.limits.clone(), self.denials.clone());
        Box::new(async move {
            let mut request = request;
            let pinned = check_addresses(&uri, &limits, &denials).await?;
            if uri.scheme_str() == Some("http") {
                // Connect to exactly the address that was checked.
                let path = uri.path_and_query().map_or("/", |p| p.as_str());
                *request.uri_mut() =
                    format!("http://{pinned}{path}").parse().map_err(|_| HttpError::HttpRequestUriInvalid)?;
            }
            let (response, io) = wasmtime_wasi_http::default_send_request(request, Some(options)).await?;
            let max = limits.max_response_bytes;
            let response = response.map(move |body| {
                http_body_util::Limited::new(body, max as usize)
                    .map_err(move |e| match e.downcast::<HttpError>() {
                        Ok(inner) => *inner,
                        Err(_) => HttpError::HttpResponseBodySize(Some(max)),
                    })
                    .boxed_unsync()
            });
            Ok((response, Box::new(io) as Box<dyn Future<Output = Result<(), HttpError>> + Send>))
        })
    }
}

/// Resolves the request's host and refuses it unless every address is
/// public or in a network the operator allows. Returns the address to use.
async fn check_addresses(
    uri: &http::Uri,
    limits: &OutboundLimits,
    denials: &Denials,
) -> Result<std::net::SocketAddr, HttpError> {
    let authority = uri.authority().ok_or(HttpError::HttpRequestUriInvalid)?;
    let port = authority.port_u16().unwrap_or(if uri.scheme_str() == Some("http") { 80 } else { 443 });
    let host = authority.host().trim_start_matches('[').trim_end_matches(']');
    let addresses: Vec<std::net::SocketAddr> = match tokio::net::lookup_host((host, port)).await {
        Ok(found) => found.collect(),
        Err(_) => return Err(HttpError::DnsError { rcode: None, info_code: None }),
    };
    let Some(first) = addresses.first().copied() else {
        return Err(HttpError::DnsError { rcode: None, info_code: None });
    };
    for address in &addresses {
        let ip = address.ip();
        if is_internal(ip) && !limits.allowed_private.iter().any(|net| net.contains(&ip)) {
            denials.record(format!(
                "`{authority}` resolves to {ip}, an address on the host's own or a private network, which the operator does not allow"
            ));
            return Err(HttpError::DestinationIpProhibited);
        }
    }
    Ok(first)
}

/// Addresses a tool must not reach by default: everything that is not the
/// public internet.
pub fn is_internal(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_internal_v4(v4),
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return is_internal_v4(v4);
            }
            let segments = v6.segments();
            // NAT64 (64:ff9b::/96) embeds an IPv4 address.
            if segments[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
                let [a, b] = segments[6].to_be_bytes();
                let [c, d] = segments[7].to_be_bytes();
                return is_internal_v4(Ipv4Addr::new(a, b, c, d));
            }
            v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                || (segments[0] & 0xfe00) == 0xfc00 // unique local fc00::/7
                || (segments[0] & 0xffc0) == 0xfe80 // link-local fe80::/10
                || (segments[0] & 0xffc0) == 0xfec0 // site-local fec0::/10
                || v6 == Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254) // AWS metadata (IPv6)
        }
    }
}

fn is_internal_v4(ip: Ipv4Addr) -> bool {
    let [a, b, c, _] = ip.octets();
    ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local() // 169.254/16, cloud metadata
        || ip.is_unspecified()
        || ip.is_broadcast()
        || ip.is_multicast()
        || a == 0
        || (a == 100 && (64..128).contains(&b)) // CGNAT 100.64/10
        || (a == 192 && b == 0 && c == 0) // IETF protocol assignments
        || (a == 198 && (18..20).contains(&b)) // benchmarking 198.18/15
        || a >= 240 // reserved
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(entries: &[&str], config: &[(&str, &str)]) -> OutboundPolicy {
        let patterns: Vec<_> = entries.iter().map(|e| HostPattern::parse(e).unwrap()).collect();
        let config = config.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        OutboundPolicy::new(&patterns, &config, Default::default())
    }

    #[test]
    fn internal_addresses_are_recognised() {
        for internal in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "224.0.0.1",
            "255.255.255.255",
            "240.0.0.1",
            "::1",
            "::",
            "fc00::1",
            "fd12::1",
            "fe80::1",
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
            "64:ff9b::a9fe:a9fe",
            "ff02::1",
        ] {
            assert!(is_internal(internal.parse().unwrap()), "{internal}");
        }
        for public in ["93.184.216.34", "8.8.8.8", "1.1.1.1", "2606:4700::1111", "::ffff:8.8.8.8"] {
            assert!(!is_internal(public.parse().unwrap()), "{public}");
        }
    }

    #[tokio::test]
    async fn loopback_is_refused_unless_the_operator_allows_it() {
        let uri: http::Uri = "http://127.0.0.1:9/".parse().unwrap();
        let denials = Denials::default();
        let closed = OutboundLimits::default();
        assert!(matches!(check_addresses(&uri, &closed, &denials).await, Err(HttpError::DestinationIpProhibited)));
        assert!(denials.first().unwrap().contains("127.0.0.1"));
        let open = OutboundLimits { allowed_private: vec!["127.0.0.0/8".parse().unwrap()], ..Default::default() };
        assert_eq!(check_addresses(&uri, &open, &Denials::default()).await.unwrap(), "127.0.0.1:9".parse().unwrap());
        let localhost: http::Uri = "http://localhost:9/".parse().unwrap();
        assert!(
            check_addresses(&localhost, &closed, &Denials::default()).await.is_err(),
            "names are checked after resolution"
        );
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
