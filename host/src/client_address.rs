//! How a client is counted by its address, wherever the server limits what
//! one client may hold (connections, failed logins).
//!
//! One IPv6 host usually holds a whole /64 (and a site a /48), so counting
//! single IPv6 addresses would let one client rotate past any per-address
//! limit; an IPv4-mapped IPv6 address is the IPv4 client it maps.

use std::net::{IpAddr, Ipv6Addr};

/// The IPv6 prefix of one host: a client's connections, and its (user,
/// address) login failures and known addresses, are counted by it.
pub const HOST_PREFIX: u8 = 64;

/// The IPv6 prefix of one site: the address login throttle counts by it, so
/// that a client cannot rotate through the /64s it holds.
pub const SITE_PREFIX: u8 = 48;

/// `address` as the network it is counted by: an IPv4 address itself (also
/// when IPv4-mapped), an IPv6 address as its first `v6_prefix` bits (at
/// most 128).
pub fn prefix(address: IpAddr, v6_prefix: u8) -> IpAddr {
    match address {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let bits = u32::from(v6_prefix.min(128));
                let mask = u128::MAX.checked_shl(128 - bits).unwrap_or(0);
                IpAddr::V6(Ipv6Addr::from(u128::from(v6) & mask))
            }
        },
        v4 => v4,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn ipv6_clients_are_counted_by_their_prefix_and_ipv4_as_themselves() {
        assert_eq!(prefix(ip("2001:db8:1:2:3:4:5:6"), 64), ip("2001:db8:1:2::"));
        assert_eq!(prefix(ip("2001:db8:1:2:3:4:5:6"), 48), ip("2001:db8:1::"));
        assert_eq!(prefix(ip("2001:db8:1:2:3:4:5:6"), 128), ip("2001:db8:1:2:3:4:5:6"));
        assert_eq!(prefix(ip("2001:db8:1:2:3:4:5:6"), 0), ip("::"));
        assert_eq!(prefix(ip("::ffff:192.0.2.1"), 48), ip("192.0.2.1"));
        assert_eq!(prefix(ip("192.0.2.1"), 48), ip("192.0.2.1"));
    }
}
