//! IP canonicalisation and family detection (ES-1.4).
//!
//! Since 1.33 upstream writes canonical strings: IPv4 without leading zeros,
//! IPv6 lower-case and zero-compressed, IPv4-mapped IPv6 written as IPv4.
//! Writing anything else would make every slice differ from upstream's.

use std::net::IpAddr;

/// Address family of a parsed address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Family {
    V4,
    V6,
}

impl Family {
    /// The EndpointSlice `addressType` for this family.
    pub fn address_type(self) -> &'static str {
        match self {
            Family::V4 => super::keys::ADDRESS_TYPE_IPV4,
            Family::V6 => super::keys::ADDRESS_TYPE_IPV6,
        }
    }
}

/// Parses an address the way upstream's "sloppy" parser does (IPv4 octets may carry
/// leading zeros; an IPv4-mapped IPv6 literal is the IPv4 address it maps); the
/// allocator's parser, so both crates read addresses alike.
pub use svcplane_allocator::range::parse_ip_sloppy as parse_sloppy;

/// Family of an address string, after sloppy parsing.
pub fn family_of(s: &str) -> Option<Family> {
    parse_sloppy(s).map(|ip| match ip {
        IpAddr::V4(_) => Family::V4,
        IpAddr::V6(_) => Family::V6,
    })
}

/// Whether `s` already is the canonical string of a parseable address,
/// checked without allocating (the common case: API servers store
/// canonical pod IPs).
pub fn is_canonical(s: &str) -> bool {
    canonical_family(s).is_some()
}

/// The family of `s` when it already is canonical, else `None`.
pub fn canonical_family(s: &str) -> Option<Family> {
    match s.parse::<IpAddr>() {
        // std's IPv4 parser rejects leading zeros, so what it accepts is canonical.
        Ok(IpAddr::V4(_)) => Some(Family::V4),
        Ok(IpAddr::V6(v6)) => {
            if v6.to_ipv4_mapped().is_some() {
                return None;
            }
            let mut buf = StackStr::default();
            let same = std::fmt::Write::write_fmt(&mut buf, format_args!("{v6}")).is_ok()
                && buf.as_bytes() == s.as_bytes();
            same.then_some(Family::V6)
        }
        Err(_) => None,
    }
}

/// A fixed buffer large enough for any formatted IPv6 address.
#[derive(Debug)]
struct StackStr {
    buf: [u8; 64],
    len: usize,
}

impl Default for StackStr {
    fn default() -> Self {
        Self {
            buf: [0; 64],
            len: 0,
        }
    }
}

impl StackStr {
    fn as_bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

impl std::fmt::Write for StackStr {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        let end = self.len + s.len();
        let dst = self.buf.get_mut(self.len..end).ok_or(std::fmt::Error)?;
        dst.copy_from_slice(s.as_bytes());
        self.len = end;
        Ok(())
    }
}

/// Canonical string and family of an address, or `None` when unparseable.
pub fn canonical(s: &str) -> Option<(String, Family)> {
    parse_sloppy(s).map(|ip| match ip {
        IpAddr::V4(v4) => (v4.to_string(), Family::V4),
        IpAddr::V6(v6) => (v6.to_string(), Family::V6),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    #[rstest]
    #[case::v4_plain("10.0.0.1", "10.0.0.1", Family::V4)]
    #[case::v4_leading_zeros("01.002.3.4", "1.2.3.4", Family::V4)]
    #[case::v6_zero_runs(
        "1234:0000:0000:0000:5678:0000:0000:9abc",
        "1234::5678:0:0:9abc",
        Family::V6
    )]
    #[case::v6_documented_example(
        "1234::5678:0000:0000:9abc:def0",
        "1234::5678:0:0:9abc:def0",
        Family::V6
    )]
    #[case::v6_upper_case("FD00::ABCD", "fd00::abcd", Family::V6)]
    #[case::v4_mapped_is_v4("::ffff:1.2.3.4", "1.2.3.4", Family::V4)]
    fn rule_1_4_canonical_ip_strings(
        #[case] input: &str,
        #[case] want: &str,
        #[case] family: Family,
    ) {
        assert_eq!(canonical(input), Some((want.to_string(), family)));
    }

    #[rstest]
    #[case::v4("10.0.0.1", true)]
    #[case::v4_leading_zero("010.0.0.1", false)]
    #[case::v6("fd00::1", true)]
    #[case::v6_upper("FD00::1", false)]
    #[case::v6_uncompressed("fd00:0:0:0:0:0:0:1", false)]
    #[case::v4_mapped("::ffff:1.2.3.4", false)]
    #[case::garbage("x", false)]
    fn rule_1_4_canonical_check_agrees_with_canonicalisation(
        #[case] input: &str,
        #[case] want: bool,
    ) {
        assert_eq!(is_canonical(input), want);
        assert_eq!(
            is_canonical(input),
            canonical(input).is_some_and(|(c, _)| c == input)
        );
    }

    #[rstest]
    #[case("")]
    #[case("not-an-ip")]
    #[case("1.2.3")]
    #[case("1.2.3.4.5")]
    #[case("256.1.1.1")]
    #[case("1.2.3.0004")]
    fn rule_1_4_unparseable_ips_are_rejected(#[case] input: &str) {
        assert_eq!(canonical(input), None);
    }
}
