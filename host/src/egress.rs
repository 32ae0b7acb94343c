//! Connections the host makes for others, under one address policy: the
//! pieces the runtime's outbound requests (`runtime::outbound`) and the
//! host's own fetches (registries, identity providers, OAuth client
//! documents, confirmation servers' keys) share. A leaf: it names no other
//! module of the crate.

pub(crate) mod lookups;

use ipnet::IpNet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

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

impl OutboundLimits {
    /// Whether the address policy refuses `ip`: see [`refuses_address`].
    pub fn refuses(&self, ip: IpAddr) -> bool {
        refuses_address(ip, &self.allowed_private)
    }
}

/// The one address policy for every outbound connection the host makes for
/// others (a tool's requests, a confirmation server's keys): `ip` is refused
/// when it is internal ([`is_internal`]) and in no network the operator
/// allows (`allowed_private`, from `--allow-private-cidr`).
fn refuses_address(ip: IpAddr, allowed_private: &[IpNet]) -> bool {
    is_internal(ip) && !allowed_private.iter().any(|net| net.contains(&ip))
}

impl Default for OutboundLimits {
    fn default() -> Self {
        OutboundLimits { allowed_private: Vec::new(), max_requests: 20, max_response_bytes: 10 << 20 }
    }
}

/// Addresses a tool must not reach by default: everything that is not the
/// public internet. IPv6 forms that carry an IPv4 address, or that a router
/// may translate to one, count as internal when the IPv4 address is, or
/// always where it cannot be told (6to4, Teredo, local-use NAT64, the
/// deprecated IPv4-compatible form).
pub fn is_internal(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_internal_v4(v4),
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return is_internal_v4(v4);
            }
            let segments = v6.segments();
            let embedded = || {
                let [a, b] = segments[6].to_be_bytes();
                let [c, d] = segments[7].to_be_bytes();
                Ipv4Addr::new(a, b, c, d)
            };
            // NAT64 (64:ff9b::/96) and IPv4-translated (::ffff:0:0:0/96)
            // embed an IPv4 address.
            if segments[..6] == [0x64, 0xff9b, 0, 0, 0, 0] || segments[..6] == [0, 0, 0, 0, 0xffff, 0] {
                return is_internal_v4(embedded());
            }
            v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                || segments[..6] == [0; 6] // IPv4-compatible ::/96 (deprecated; routed as IPv4 by some stacks)
                || segments[..3] == [0x64, 0xff9b, 1] // local-use NAT64 64:ff9b:1::/48
                || segments[0] == 0x2002 // 6to4 2002::/16: relays reach the embedded IPv4 address
                || segments[..2] == [0x2001, 0] // Teredo 2001::/32: tunnels to an IPv4 address
                || segments[..2] == [0x2001, 0xdb8] // documentation 2001:db8::/32
                || segments[..4] == [0x100, 0, 0, 0] // discard-only 100::/64
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

/// A response's body, or `None` as soon as it runs past `max` bytes (only
/// `max` are ever held): how the host reads what others' servers send
/// (confirmation servers' keys, OAuth documents, registries).
pub async fn read_capped(response: &mut reqwest::Response, max: usize) -> Result<Option<Vec<u8>>, reqwest::Error> {
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await? {
        if body.len() + chunk.len() > max {
            return Ok(None);
        }
        body.extend_from_slice(&chunk);
    }
    Ok(Some(body))
}

/// A reqwest resolver under the outbound policy: resolves, and refuses the
/// name unless every address passes it. A client built with it connects
/// only to what it returns (confirmation servers' keys, OAuth client
/// documents and identity providers, registries). Its lookups are one of
/// the bounded sets of [`lookups`]: a lookup past the bound is
/// refused at once, one that does not answer in time fails.
pub struct CheckedResolver {
    limits: Arc<OutboundLimits>,
    lookups: &'static lookups::NameLookups,
}

impl CheckedResolver {
    /// A resolver under `limits` for names an operator or a tenant chose
    /// (confirmation servers, identity providers, registries), whose
    /// lookups are the host's set.
    pub fn new(limits: Arc<OutboundLimits>) -> CheckedResolver {
        CheckedResolver { limits, lookups: &lookups::HOST_LOOKUPS }
    }

    /// A resolver under `limits` for names anyone may choose (OAuth client
    /// metadata documents), whose lookups are a set of their own: names
    /// that never answer, sent by strangers who hang up at once, cannot
    /// take the slots registries and identity providers need.
    pub fn for_strangers(limits: Arc<OutboundLimits>) -> CheckedResolver {
        CheckedResolver { limits, lookups: &lookups::STRANGER_LOOKUPS }
    }
}

/// The resolver's refusal, found again in the client's error.
#[derive(Debug, thiserror::Error)]
#[error("the name resolves to an address the outbound policy refuses")]
struct RefusedAddress;

impl reqwest::dns::Resolve for CheckedResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let (limits, lookups) = (self.limits.clone(), self.lookups);
        Box::pin(async move {
            let found: Vec<SocketAddr> = lookups.resolve(name.as_str(), 0).await?;
            if found.is_empty() || found.iter().any(|a| limits.refuses(a.ip())) {
                return Err(Box::new(RefusedAddress) as Box<dyn std::error::Error + Send + Sync>);
            }
            Ok(Box::new(found.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

/// Whether `e` comes from the resolver refusing an address.
pub fn caused_by_refusal(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut source = Some(e);
    while let Some(e) = source {
        if e.is::<RefusedAddress>() {
            return true;
        }
        source = e.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

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
            // 6to4, whatever IPv4 address it embeds.
            "2002:7f00:1::1",
            "2002:a00:1::1",
            "2002:808:808::1",
            // Local-use NAT64.
            "64:ff9b:1::a00:1",
            "64:ff9b:1::808:808",
            // IPv4-compatible.
            "::127.0.0.1",
            "::10.0.0.1",
            "::8.8.8.8",
            // IPv4-translated and NAT64 with an internal IPv4 address.
            "::ffff:0:127.0.0.1",
            "64:ff9b::127.0.0.1",
            "64:ff9b::10.1.2.3",
            // Teredo.
            "2001::1",
            "2001:0:4136:e378:8000:63bf:3fff:fdd2",
            "2001:db8::1",
            "100::1",
        ] {
            assert!(is_internal(internal.parse().unwrap()), "{internal}");
        }
        for public in [
            "93.184.216.34",
            "8.8.8.8",
            "1.1.1.1",
            "2606:4700::1111",
            "::ffff:8.8.8.8",
            "64:ff9b::808:808",
            "::ffff:0:8.8.8.8",
            "2001:4860:4860::8888",
            "2003::1",
        ] {
            assert!(!is_internal(public.parse().unwrap()), "{public}");
        }
    }

    #[test]
    fn one_address_policy_refuses_internal_addresses_outside_the_allowed_networks() {
        let closed = OutboundLimits::default();
        let open = OutboundLimits { allowed_private: vec!["127.0.0.0/8".parse().unwrap()], ..Default::default() };
        let loopback: IpAddr = "127.0.0.1".parse().unwrap();
        let private: IpAddr = "10.0.0.1".parse().unwrap();
        let public: IpAddr = "93.184.216.34".parse().unwrap();
        assert!(closed.refuses(loopback) && closed.refuses(private) && !closed.refuses(public));
        assert!(!open.refuses(loopback) && open.refuses(private) && !open.refuses(public));
        assert_eq!(refuses_address(loopback, &open.allowed_private), open.refuses(loopback));
    }
}
