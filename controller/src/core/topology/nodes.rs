//! Node accounting for the topology cache (TH-3.3.1): the share
//! of allocatable CPU each zone holds, from the ready worker Nodes.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Node;

use crate::core::keys::LABEL_ZONE;

/// Nodes carrying any of these labels (any value) are left out of the CPU
/// accounting.
pub const EXCLUDED_NODE_LABELS: [&str; 2] = [
    "node-role.kubernetes.io/control-plane",
    "node-role.kubernetes.io/master",
];

/// The share of the cluster's allocatable CPU in each zone, for at least two
/// zones. Zones are kept in name order so every walk over them is
/// deterministic.
#[derive(Debug, Clone, PartialEq)]
pub struct ZoneRatios {
    ratios: BTreeMap<String, f64>,
}

impl ZoneRatios {
    /// Builds ratios from allocatable CPU per zone in millicores, as upstream
    /// does: `zone / total`. `None` when fewer than two zones remain or the
    /// total is not positive (hints are impossible then).
    pub fn from_cpu(cpu_by_zone: &BTreeMap<String, i128>) -> Option<Self> {
        Self::with_total(cpu_by_zone, cpu_by_zone.values().sum())
    }

    fn with_total(cpu_by_zone: &BTreeMap<String, i128>, total: i128) -> Option<Self> {
        if total == 0 || cpu_by_zone.len() < 2 {
            return None;
        }
        let ratios = cpu_by_zone
            .iter()
            .map(|(zone, &milli)| (zone.clone(), milli as f64 / total as f64))
            .collect();
        Some(Self { ratios })
    }

    /// Ratios given directly, for tests and benches. Follows the same rule
    /// as [`ZoneRatios::from_cpu`]: fewer than two zones give `None`.
    pub fn from_ratios<'z>(ratios: impl IntoIterator<Item = (&'z str, f64)>) -> Option<Self> {
        let ratios: BTreeMap<String, f64> =
            ratios.into_iter().map(|(z, r)| (z.to_owned(), r)).collect();
        (ratios.len() >= 2).then_some(Self { ratios })
    }

    pub fn get(&self, zone: &str) -> Option<f64> {
        self.ratios.get(zone).copied()
    }

    /// Zones and their ratios, in zone-name order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, f64)> + '_ {
        self.ratios.iter().map(|(z, r)| (z.as_str(), *r))
    }

    pub fn len(&self) -> usize {
        self.ratios.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ratios.is_empty()
    }
}

/// What the Node walk of TH-3.3.1 found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeAccounting {
    /// A counted Node had no zone or no allocatable CPU: no ratios at all.
    Insufficient { node: String },
    /// Allocatable CPU per zone, in nanocores (possibly fewer than two
    /// zones, or none).
    CpuByZone(BTreeMap<String, i128>),
}

impl NodeAccounting {
    /// The zone ratios, or `None` when hints are impossible (insufficient
    /// node information, zero total CPU, fewer than two zones).
    pub fn ratios(&self) -> Option<ZoneRatios> {
        match self {
            NodeAccounting::Insufficient { .. } => None,
            NodeAccounting::CpuByZone(nanos) => {
                // Upstream sums quantities exactly and reads each sum's
                // MilliValue (rounded up): per zone and for the total.
                let total = ceil_div(nanos.values().sum(), 1_000_000);
                let milli = nanos
                    .iter()
                    .map(|(z, n)| (z.clone(), ceil_div(*n, 1_000_000)))
                    .collect();
                ZoneRatios::with_total(&milli, total)
            }
        }
    }

    /// Allocatable CPU per zone in millicores (rounded up), empty when
    /// insufficient.
    pub fn milli_by_zone(&self) -> BTreeMap<String, i128> {
        match self {
            NodeAccounting::Insufficient { .. } => BTreeMap::new(),
            NodeAccounting::CpuByZone(nanos) => nanos
                .iter()
                .map(|(z, n)| (z.clone(), ceil_div(*n, 1_000_000)))
                .collect(),
        }
    }
}

/// Walks the Nodes (TH-3.3.1): skips control-plane Nodes and Nodes that are
/// not ready; any remaining Node without a zone or without allocatable CPU
/// makes the whole walk insufficient. CPU is summed exactly, in nanocores.
pub fn account<'n>(nodes: impl IntoIterator<Item = &'n Node>) -> NodeAccounting {
    let mut nanos_by_zone: BTreeMap<String, i128> = BTreeMap::new();
    for node in nodes {
        if is_excluded(node) || !is_ready(node) {
            continue;
        }
        let zone = zone_of(node);
        let cpu = allocatable_cpu_nanos(node);
        match (zone, cpu) {
            (Some(zone), Some(cpu)) if cpu != 0 => match nanos_by_zone.get_mut(zone) {
                Some(sum) => *sum += cpu,
                None => {
                    nanos_by_zone.insert(zone.to_owned(), cpu);
                }
            },
            _ => {
                return NodeAccounting::Insufficient {
                    node: node.metadata.name.clone().unwrap_or_default(),
                };
            }
        }
    }
    NodeAccounting::CpuByZone(nanos_by_zone)
}

/// Zone ratios straight from Nodes (TH-3.3.1); `None` when hints are
/// impossible.
pub fn zone_ratios<'n>(nodes: impl IntoIterator<Item = &'n Node>) -> Option<ZoneRatios> {
    account(nodes).ratios()
}

/// Whether a Node update must re-run the topology work item (ES-2.1): its
/// readiness or its zone label changed. CPU and other label changes do not.
pub fn update_needs_topology_sync(old: &Node, new: &Node) -> bool {
    is_ready(old) != is_ready(new) || zone_label(old) != zone_label(new)
}

fn is_excluded(node: &Node) -> bool {
    node.metadata
        .labels
        .as_ref()
        .is_some_and(|l| EXCLUDED_NODE_LABELS.iter().any(|k| l.contains_key(*k)))
}

/// The first `Ready` condition is `True` (no condition: not ready).
pub fn is_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
        .is_some_and(|c| c.status == "True")
}

fn zone_label(node: &Node) -> Option<&str> {
    node.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(LABEL_ZONE))
        .map(String::as_str)
}

fn zone_of(node: &Node) -> Option<&str> {
    zone_label(node).filter(|z| !z.is_empty())
}

/// Allocatable CPU in nanocores; `None` when absent or unparseable (both
/// count as zero, i.e. "no CPU").
pub fn allocatable_cpu_nanos(node: &Node) -> Option<i128> {
    let q = node.status.as_ref()?.allocatable.as_ref()?.get("cpu")?;
    parse_quantity_nanos(&q.0)
}

fn ceil_div(a: i128, b: i128) -> i128 {
    let q = a / b;
    if a % b > 0 { q + 1 } else { q }
}

/// Parses a Kubernetes resource quantity (`4`, `3920m`, `1.5`, `2k`, `1Ki`,
/// `5e3`) into nano-units, rounding up below one nano-unit. `None` when the
/// text is not a quantity or does not fit.
pub fn parse_quantity_nanos(text: &str) -> Option<i128> {
    let s = text.trim();
    let (negative, s) = match s.as_bytes().first()? {
        b'-' => (true, &s[1..]),
        b'+' => (false, &s[1..]),
        _ => (false, s),
    };
    let number_end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (number, suffix) = s.split_at(number_end);
    let (int_part, frac_part) = number.split_once('.').unwrap_or((number, ""));
    if int_part.is_empty() && frac_part.is_empty() {
        return None;
    }
    let mut mantissa: i128 = 0;
    for c in int_part.bytes().chain(frac_part.bytes()) {
        if !c.is_ascii_digit() {
            return None;
        }
        mantissa = mantissa
            .checked_mul(10)?
            .checked_add(i128::from(c - b'0'))?;
    }
    // value = mantissa * 10^(exp10) * 1024^binary, in units; nanos add 9.
    let frac_digits = i32::try_from(frac_part.len()).ok()?;
    let (exp10, binary): (i32, u32) = match suffix {
        "" => (0, 0),
        "n" => (-9, 0),
        "u" => (-6, 0),
        "m" => (-3, 0),
        "k" => (3, 0),
        "M" => (6, 0),
        "G" => (9, 0),
        "T" => (12, 0),
        "P" => (15, 0),
        "E" => (18, 0),
        "Ki" => (0, 1),
        "Mi" => (0, 2),
        "Gi" => (0, 3),
        "Ti" => (0, 4),
        "Pi" => (0, 5),
        "Ei" => (0, 6),
        other => {
            let exp = other.strip_prefix(['e', 'E'])?;
            (exp.parse::<i32>().ok()?, 0)
        }
    };
    let mut value = mantissa.checked_mul(1024i128.checked_pow(binary)?)?;
    let shift = exp10.checked_add(9)?.checked_sub(frac_digits)?;
    if shift >= 0 {
        value = value.checked_mul(10i128.checked_pow(u32::try_from(shift).ok()?)?)?;
    } else {
        let divisor = 10i128.checked_pow(u32::try_from(-shift).ok()?);
        value = match divisor {
            Some(d) => ceil_div(value, d),
            // Smaller than any representable nano-unit: rounds up to one.
            None => i128::from(value > 0),
        };
    }
    Some(if negative { -value } else { value })
}
