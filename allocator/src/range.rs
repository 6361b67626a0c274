//! CIDR ranges and the KEP-3070 static/dynamic bands (AL-2.1 to AL-2.3).
//!
//! Everything about *which* addresses a Service CIDR offers lives here: parsing,
//! usable-address rules per family (IPv4 drops network and broadcast, IPv6 only the
//! network address), the size cap at `u64::MAX`, and the band offset that splits a
//! range into the low static band and the high dynamic band. Allocation state lives
//! in [`crate::ip_allocator`].

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// A Service IP family, spelled like `api.IPFamily`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum IpFamily {
    /// `IPv4`.
    V4,
    /// `IPv6`.
    V6,
}

impl IpFamily {
    /// `"IPv4"` or `"IPv6"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::V4 => "IPv4",
            Self::V6 => "IPv6",
        }
    }

    /// Parse `"IPv4"`/`"IPv6"` exactly.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "IPv4" => Some(Self::V4),
            "IPv6" => Some(Self::V6),
            _ => None,
        }
    }

    /// The other family.
    pub fn other(self) -> Self {
        match self {
            Self::V4 => Self::V6,
            Self::V6 => Self::V4,
        }
    }

    /// Family of an address.
    pub fn of(ip: &IpAddr) -> Self {
        if ip.is_ipv4() { Self::V4 } else { Self::V6 }
    }

    /// Address width in bits.
    pub fn bits(self) -> u8 {
        match self {
            Self::V4 => 32,
            Self::V6 => 128,
        }
    }
}

impl fmt::Display for IpFamily {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Parse an IP the way Go's `netutils.ParseIPSloppy` does: IPv4 octets may carry
/// leading zeros (read as decimal), and IPv4-mapped IPv6 (`::ffff:a.b.c.d`) counts as
/// IPv4, as Go's `net.IP` does. Zones are rejected.
pub fn parse_ip_sloppy(s: &str) -> Option<IpAddr> {
    if s.contains(':') {
        let v6: Ipv6Addr = s.parse().ok()?;
        return Some(match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(v6),
        });
    }
    let mut octets = [0u8; 4];
    let mut parts = s.split('.');
    for o in &mut octets {
        let p = parts.next()?;
        if p.is_empty() || p.len() > 3 || !p.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        *o = p.parse().ok()?;
    }
    if parts.next().is_some() {
        return None;
    }
    Some(IpAddr::V4(Ipv4Addr::from(octets)))
}

/// Address as an integer (IPv4 in the low 32 bits).
pub fn ip_to_u128(ip: IpAddr) -> u128 {
    match ip {
        IpAddr::V4(v4) => u128::from(u32::from(v4)),
        IpAddr::V6(v6) => u128::from(v6),
    }
}

/// Integer back to an address of `family`.
pub fn u128_to_ip(family: IpFamily, v: u128) -> IpAddr {
    match family {
        // Truncation is intended: IPv4 values are < 2^32 by construction.
        IpFamily::V4 => IpAddr::V4(Ipv4Addr::from(v as u32)),
        IpFamily::V6 => IpAddr::V6(Ipv6Addr::from(v)),
    }
}

/// A CIDR, normalised to its network address (Go's `ParseCIDR` masks host bits too).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Cidr {
    network: u128,
    prefix: u8,
    family: IpFamily,
}

impl Cidr {
    /// Parse `addr/prefix`. Host bits are masked off; IPv4 octets may have leading zeros.
    pub fn parse(s: &str) -> Result<Self, String> {
        let (addr, prefix) = s
            .split_once('/')
            .ok_or_else(|| "missing '/' prefix length".to_string())?;
        let ip = if addr.contains(':') {
            IpAddr::V6(
                addr.parse::<Ipv6Addr>()
                    .map_err(|_| format!("{addr:?} is not a valid IP address"))?,
            )
        } else {
            parse_ip_sloppy(addr).ok_or_else(|| format!("{addr:?} is not a valid IP address"))?
        };
        let family = IpFamily::of(&ip);
        if prefix.is_empty() || !prefix.bytes().all(|b| b.is_ascii_digit()) || prefix.len() > 3 {
            return Err(format!("{prefix:?} is not a valid prefix length"));
        }
        let prefix: u8 = prefix
            .parse()
            .map_err(|_| format!("{prefix:?} is not a valid prefix length"))?;
        if prefix > family.bits() {
            return Err(format!(
                "prefix length {prefix} is longer than {} bits",
                family.bits()
            ));
        }
        Ok(Self::new(ip, prefix))
    }

    /// Build from an address and prefix length (clamped to the family width).
    pub fn new(ip: IpAddr, prefix: u8) -> Self {
        let family = IpFamily::of(&ip);
        let prefix = prefix.min(family.bits());
        let host_bits = u32::from(family.bits() - prefix);
        let mask = if host_bits >= 128 {
            0
        } else {
            !0u128 << host_bits
        };
        Self {
            network: ip_to_u128(ip) & mask,
            prefix,
            family,
        }
    }

    /// Address family.
    pub fn family(&self) -> IpFamily {
        self.family
    }

    /// Prefix length.
    pub fn prefix(&self) -> u8 {
        self.prefix
    }

    /// Host bits `h`.
    pub fn host_bits(&self) -> u32 {
        u32::from(self.family.bits() - self.prefix)
    }

    /// The network address.
    pub fn network(&self) -> IpAddr {
        u128_to_ip(self.family, self.network)
    }

    /// Network address as an integer.
    pub fn network_u128(&self) -> u128 {
        self.network
    }

    /// All-host-bits-one address as an integer.
    pub fn broadcast_u128(&self) -> u128 {
        let h = self.host_bits();
        if h >= 128 {
            u128::MAX
        } else {
            self.network | ((1u128 << h) - 1)
        }
    }

    /// Does the CIDR contain `ip` (network and broadcast included)?
    pub fn contains(&self, ip: IpAddr) -> bool {
        IpFamily::of(&ip) == self.family && {
            let v = ip_to_u128(ip);
            v >= self.network && v <= self.broadcast_u128()
        }
    }

    /// The IPv4 broadcast address (`None` for IPv6, which has none).
    pub fn broadcast(&self) -> Option<IpAddr> {
        (self.family == IpFamily::V4).then(|| u128_to_ip(self.family, self.broadcast_u128()))
    }

    /// Does this CIDR contain `other`'s network address (same family)? With
    /// [`Self::prefix`] this tells containment and overlap of prefixes apart.
    pub fn contains_network_of(&self, other: &Cidr) -> bool {
        self.family == other.family
            && other.network >= self.network
            && other.network <= self.broadcast_u128()
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.network(), self.prefix)
    }
}

/// Usable addresses of the IPAddress allocator (AL-2.2): IPv4 `2^h − 2`, IPv6 `2^h − 1`,
/// saturating at `u64::MAX` for `h >= 64`.
pub fn usable_size(cidr: &Cidr) -> u64 {
    let h = cidr.host_bits();
    if h >= 64 {
        return u64::MAX;
    }
    let max = 1u64 << h;
    let minus = match cidr.family() {
        IpFamily::V4 => 2,
        IpFamily::V6 => 1,
    };
    max.saturating_sub(minus)
}

/// Usable addresses of the legacy bitmap allocator: IPv6 capped at 65535.
pub fn legacy_bitmap_size(cidr: &Cidr) -> u64 {
    let h = cidr.host_bits();
    match cidr.family() {
        IpFamily::V4 => (1u64 << h).saturating_sub(2),
        IpFamily::V6 => {
            let s = if h >= 17 { 65536 } else { 1u64 << h };
            s - 1
        }
    }
}

/// KEP-3070 band offset from the full CIDR size `S = 2^h` (saturating at `i64::MAX`):
/// `0` if `S <= 16`, else `clamp(S / 16, 16, 256)`.
pub fn cidr_band_offset(cidr: &Cidr) -> u64 {
    let h = cidr.host_bits();
    let s: u64 = if h >= 63 { i64::MAX as u64 } else { 1u64 << h };
    band_offset(s, 16, 256, 16)
}

/// KEP-3668 NodePort band offset: `0` if `S <= 16`, else `clamp(S / 32, 16, 128)`.
pub fn port_band_offset(size: u64) -> u64 {
    band_offset(size, 16, 128, 32)
}

/// upstream `calculateRangeOffset`: `min(max(min, size/step), max)`, 0 for `size <= min`.
fn band_offset(size: u64, min: u64, max: u64, step: u64) -> u64 {
    if size <= min {
        return 0;
    }
    (size / step).clamp(min, max)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_masks_host_bits_and_prints_canonically() {
        let c = Cidr::parse("10.96.0.1/12").unwrap();
        assert_eq!(c.to_string(), "10.96.0.0/12");
        let c = Cidr::parse("FD00:0::1/108").unwrap();
        assert_eq!(c.to_string(), "fd00::/108");
        assert_eq!(
            Cidr::parse("010.096.000.000/12").unwrap().to_string(),
            "10.96.0.0/12"
        );
        assert!(Cidr::parse("10.96.0.0").is_err());
        assert!(Cidr::parse("10.96.0.0/33").is_err());
        assert!(Cidr::parse("fd00::/129").is_err());
        assert!(Cidr::parse("10.96.0/12").is_err());
        assert!(Cidr::parse("10.96.0.0/+1").is_err());
    }

    #[test]
    fn sloppy_ip_parsing() {
        assert_eq!(
            parse_ip_sloppy("010.0.0.1"),
            Some("10.0.0.1".parse().unwrap())
        );
        assert_eq!(
            parse_ip_sloppy("::ffff:10.0.0.1"),
            Some("10.0.0.1".parse().unwrap())
        );
        assert_eq!(parse_ip_sloppy("garbage"), None);
        assert_eq!(parse_ip_sloppy(""), None);
        assert_eq!(parse_ip_sloppy("1.2.3.4.5"), None);
        assert_eq!(parse_ip_sloppy("1.2.3.256"), None);
    }
}
