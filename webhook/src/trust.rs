//! Who is the API server: the clients that may use the reserved share of the in-flight budget
//! ([`crate::budget`]) and of the connections ([`crate::conn`]).
//!
//! Two ways to tell, in the order the docs recommend:
//! - a client certificate that chains to `--client-ca-file` (with a client CA, every client must
//!   present one, so every connection that completes its handshake is the API server's);
//! - a source address in `--api-server-cidrs`, for clusters where the API server cannot be given
//!   a client certificate. Anything else that sends from those addresses (pods on the host
//!   network of a control-plane node, a NAT that hides pods behind them) is trusted too.

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

/// An address block: an address and how many of its leading bits count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cidr {
    addr: IpAddr,
    prefix: u8,
}

impl Cidr {
    /// Whether `ip` is in the block (an IPv4 address written as IPv6, `::ffff:a.b.c.d`, is read as
    /// the IPv4 address).
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.addr.to_canonical(), ip.to_canonical()) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                prefix_eq(u128::from(net.to_bits()), u128::from(ip.to_bits()), 32, self.prefix)
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => prefix_eq(net.to_bits(), ip.to_bits(), 128, self.prefix),
            _ => false,
        }
    }
}

/// Whether the leading `prefix` of `width` bits of `a` and `b` agree.
fn prefix_eq(a: u128, b: u128, width: u8, prefix: u8) -> bool {
    let shift = u32::from(width.saturating_sub(prefix));
    a.checked_shr(shift).unwrap_or(0) == b.checked_shr(shift).unwrap_or(0)
}

impl FromStr for Cidr {
    type Err = String;

    /// `10.0.0.0/24`, `fd00::/64`, or one address (`10.0.0.5`: a /32, or /128).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || format!("{s:?} is not an address or an address block (e.g. 10.0.0.5 or 10.0.0.0/24)");
        let (addr, prefix) = match s.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (s, None),
        };
        let addr = IpAddr::from_str(addr.trim()).map_err(|_| bad())?.to_canonical();
        let width = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            None => width,
            Some(p) => match p.trim().parse::<u8>() {
                Ok(p) if p <= width => p,
                _ => return Err(bad()),
            },
        };
        Ok(Cidr { addr, prefix })
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

/// The configured API server address blocks.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ApiServerAddresses(pub Vec<Cidr>);

impl ApiServerAddresses {
    pub fn contains(&self, ip: IpAddr) -> bool {
        self.0.iter().any(|c| c.contains(ip))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use proptest::prelude::*;

    fn cidr(s: &str) -> Cidr {
        s.parse().unwrap()
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn a_block_holds_the_addresses_that_share_its_prefix() {
        let c = cidr("10.0.0.0/24");
        assert!(c.contains(ip("10.0.0.0")) && c.contains(ip("10.0.0.255")));
        assert!(!c.contains(ip("10.0.1.0")) && !c.contains(ip("9.255.255.255")));
        assert!(c.contains(ip("::ffff:10.0.0.7")));
        assert!(!c.contains(ip("fd00::1")));
        assert!(cidr("fd00::/64").contains(ip("fd00::abcd")));
        assert!(!cidr("fd00::/64").contains(ip("fd00:0:0:1::1")));
    }

    #[test]
    fn one_address_is_a_block_of_one_and_slash_zero_is_everything_of_its_family() {
        let c = cidr("127.0.0.2");
        assert!(c.contains(ip("127.0.0.2")) && !c.contains(ip("127.0.0.3")));
        assert_eq!(c.to_string(), "127.0.0.2/32");
        assert!(cidr("0.0.0.0/0").contains(ip("203.0.113.9")));
        assert!(!cidr("0.0.0.0/0").contains(ip("::1")));
        assert!(cidr("::/0").contains(ip("::1")));
    }

    #[test]
    fn malformed_blocks_are_refused_with_a_reason() {
        for bad in [
            "",
            "10.0.0.0/33",
            "fd00::/129",
            "10.0.0/8",
            "10.0.0.0/x",
            "10.0.0.0/-1",
            "host",
        ] {
            let e = bad.parse::<Cidr>().unwrap_err();
            assert!(e.contains("not an address"), "{bad}: {e}");
        }
    }

    proptest! {
        /// A block always holds its own address, and an address is in every block of it.
        #[test]
        fn a_block_holds_its_own_address(a in any::<u32>(), b in any::<u32>(), prefix in 0u8..=32) {
            let net = IpAddr::from(std::net::Ipv4Addr::from_bits(a));
            let c: Cidr = format!("{net}/{prefix}").parse().unwrap();
            prop_assert!(c.contains(net));
            let other = IpAddr::from(std::net::Ipv4Addr::from_bits(b));
            let same = prefix == 0 || (a >> (32 - u32::from(prefix))) == (b >> (32 - u32::from(prefix)));
            prop_assert_eq!(c.contains(other), same);
        }
    }
}
