//! NodePort allocation (AL-7.1): the `--service-node-port-range`, its
//! KEP-3668 bands and a bitmap of taken ports.
//!
//! Dynamic picks start at a random port in the upper band and wrap within it, then
//! try the lower band; static requests may use any port of the range.

use std::fmt;

use crate::bitmap::HierBitmap;
use crate::error::PortAllocError;
use crate::range::port_band_offset;
use crate::rng::Rng;

/// An inclusive port range `base ..= base + size - 1` (upstream `net.PortRange`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortRange {
    base: u16,
    size: u32,
}

impl PortRange {
    /// Parse like upstream `ParsePortRange`: `LOW-HIGH`, `BASE+OFFSET` or a single port.
    /// Empty ranges are refused here (upstream would build a range of size 0).
    pub fn parse(value: &str) -> Result<Self, String> {
        let v = value.trim();
        if v.is_empty() {
            return Err("port range must not be empty".into());
        }
        let num = |s: &str| -> Result<u32, String> {
            if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) || s.len() > 6 {
                return Err(format!("unable to parse port range: {v}"));
            }
            s.parse::<u32>()
                .map_err(|_| format!("unable to parse port range: {v}"))
        };
        let (low, high) = match (v.find('-'), v.find('+')) {
            (None, None) => {
                let p = num(v)?;
                (p, p)
            }
            (Some(i), None) => (num(&v[..i])?, num(&v[i + 1..])?),
            (None, Some(i)) => {
                let low = num(&v[..i])?;
                (low, low + num(&v[i + 1..])?)
            }
            _ => return Err(format!("unable to parse port range: {v}")),
        };
        if low > 65535 || high > 65535 {
            return Err(format!("the port range cannot be greater than 65535: {v}"));
        }
        if high < low {
            return Err(format!("end port cannot be less than start port: {v}"));
        }
        // Checked above: low <= 65535.
        Ok(Self {
            base: low as u16,
            size: high - low + 1,
        })
    }

    /// Build from inclusive bounds.
    pub fn new(low: u16, high: u16) -> Option<Self> {
        (low <= high).then(|| Self {
            base: low,
            size: u32::from(high) - u32::from(low) + 1,
        })
    }

    /// First port.
    pub fn base(&self) -> u16 {
        self.base
    }

    /// Number of ports.
    pub fn size(&self) -> u32 {
        self.size
    }

    /// Last port.
    pub fn last(&self) -> u16 {
        // base + size - 1 <= 65535 by construction.
        (u32::from(self.base) + self.size - 1) as u16
    }

    /// Does the range contain `port`?
    pub fn contains(&self, port: i32) -> bool {
        port >= i32::from(self.base) && port <= i32::from(self.last())
    }
}

impl fmt::Display for PortRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.base, self.last())
    }
}

/// Taken NodePorts of one range.
#[derive(Debug, Clone)]
pub struct PortAllocator {
    range: PortRange,
    band_offset: u64,
    slots: HierBitmap,
}

impl PortAllocator {
    /// An empty allocator over `range`.
    pub fn new(range: PortRange) -> Self {
        let size = u64::from(range.size);
        Self {
            range,
            band_offset: port_band_offset(size),
            slots: HierBitmap::new(size),
        }
    }

    /// The range.
    pub fn range(&self) -> PortRange {
        self.range
    }

    /// Size of the lower (static) band.
    pub fn band_offset(&self) -> u64 {
        self.band_offset
    }

    /// Ports taken.
    pub fn used(&self) -> u64 {
        self.slots.used()
    }

    /// Ports free.
    pub fn free(&self) -> u64 {
        self.slots.len() - self.slots.used()
    }

    fn offset(&self, port: i32) -> Option<u64> {
        self.range
            .contains(port)
            .then(|| (port - i32::from(self.range.base)) as u64)
    }

    /// Is `port` taken?
    pub fn has(&self, port: i32) -> bool {
        self.offset(port).is_some_and(|o| self.slots.has(o))
    }

    /// Static allocation.
    pub fn allocate(&mut self, port: i32) -> Result<(), PortAllocError> {
        let o = self
            .offset(port)
            .ok_or_else(|| PortAllocError::NotInRange {
                valid_ports: self.range.to_string(),
            })?;
        if self.slots.set(o) {
            Ok(())
        } else {
            Err(PortAllocError::Allocated)
        }
    }

    /// Dynamic allocation: upper band from a random start, then the lower band.
    pub fn allocate_next(&mut self, rng: &mut Rng) -> Result<i32, PortAllocError> {
        let (lo, hi) = (self.band_offset, self.slots.len());
        let mut pick = None;
        if hi > lo {
            pick = self.slots.first_free(lo + rng.below(hi - lo), hi);
            if pick.is_none() {
                pick = self.slots.first_free(lo, hi);
            }
        }
        if pick.is_none() && lo > 0 {
            let start = rng.below(lo);
            pick = self
                .slots
                .first_free(start, lo)
                .or_else(|| self.slots.first_free(0, start));
        }
        let o = pick.ok_or(PortAllocError::Full)?;
        self.slots.set(o);
        // o < size <= 65536, so this fits.
        Ok(i32::from(self.range.base) + o as i32)
    }

    /// Release `port`; a free or out-of-range port is a no-op (`false`).
    pub fn release(&mut self, port: i32) -> bool {
        self.offset(port).is_some_and(|o| self.slots.clear(o))
    }

    /// Is `port` in the upper (dynamic) band?
    pub fn in_upper_band(&self, port: i32) -> bool {
        self.offset(port).is_some_and(|o| o >= self.band_offset)
    }

    /// Taken ports, ascending.
    pub fn allocated(&self) -> impl Iterator<Item = i32> + '_ {
        self.slots
            .iter()
            .map(|o| i32::from(self.range.base) + o as i32)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_notations() {
        assert_eq!(
            PortRange::parse("30000-32767").unwrap().to_string(),
            "30000-32767"
        );
        assert_eq!(
            PortRange::parse("30000+2767").unwrap().to_string(),
            "30000-32767"
        );
        assert_eq!(
            PortRange::parse(" 30000 ").unwrap().to_string(),
            "30000-30000"
        );
        assert!(PortRange::parse("32767-30000").is_err());
        assert!(PortRange::parse("30000-70000").is_err());
        assert!(PortRange::parse("a-b").is_err());
        assert!(PortRange::parse("1-2+3").is_err());
        assert!(PortRange::parse("").is_err());
    }

    #[test]
    fn errors_have_upstream_text() {
        let mut a = PortAllocator::new(PortRange::parse("30000-32767").unwrap());
        assert_eq!(
            a.allocate(29999).unwrap_err().to_string(),
            "provided port is not in the valid range. The range of valid ports is 30000-32767"
        );
        a.allocate(30000).unwrap();
        assert_eq!(
            a.allocate(30000).unwrap_err().to_string(),
            "provided port is already allocated"
        );
        let mut tiny = PortAllocator::new(PortRange::parse("1-1").unwrap());
        tiny.allocate_next(&mut Rng::new(0)).unwrap();
        assert_eq!(
            tiny.allocate_next(&mut Rng::new(0))
                .unwrap_err()
                .to_string(),
            "range is full"
        );
    }
}
