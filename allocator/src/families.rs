//! Service IP-family resolution and clusterIP/clusterIPs normalisation
//! (AL-4, AL-5.1, WH-8.3; upstream `initIPFamilyFields`,
//! `ValidateServiceClusterIPsRelatedFields`, `normalizeClusterIPs`,
//! `patchAllocatedValues`, `dropTypeDependentFields`).
//!
//! Before any address is picked, the registry decides *which* families a Service gets,
//! in which order, and rejects inconsistent combinations. These are pure functions over
//! [`SvcView`], ported rule by rule so field paths, values and messages match.

use crate::error::{FieldError, FieldValue};
use crate::range::{IpFamily, parse_ip_sloppy};
use crate::view::{CLUSTER_IP_NONE, PREFER_DUAL_STACK, REQUIRE_DUAL_STACK, SINGLE_STACK, SvcView};

/// Message of `validation.IsValidIP`.
pub const INVALID_IP_MSG: &str = "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)";
/// An IPv4 octet written with leading zeros (strict IP validation).
pub const LEADING_ZEROS_MSG: &str = "must not have leading 0s";
/// An IPv4 address written as an IPv4-mapped IPv6 one (strict IP validation).
pub const IPV4_MAPPED_MSG: &str = "must not be an IPv4-mapped IPv6 address";

/// Which Service IP families the cluster serves, and the primary (first flag CIDR).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClusterFamilies {
    /// Family of the first `--service-cluster-ip-range` CIDR.
    pub primary: IpFamily,
    /// An IPv4 allocator exists.
    pub has_v4: bool,
    /// An IPv6 allocator exists.
    pub has_v6: bool,
}

impl ClusterFamilies {
    /// Is `f` configured?
    pub fn has(&self, f: IpFamily) -> bool {
        match f {
            IpFamily::V4 => self.has_v4,
            IpFamily::V6 => self.has_v6,
        }
    }

    /// Two families configured.
    pub fn is_dual_stack(&self) -> bool {
        self.has_v4 && self.has_v6
    }
}

/// Family of an IP string the way upstream's `familyOf` sees it (`None` if not an IP).
pub fn family_of_str(ip: &str) -> Option<IpFamily> {
    parse_ip_sloppy(ip).map(|a| IpFamily::of(&a))
}

/// What kube-apiserver says of one legacy IP field's value with
/// `StrictIPCIDRValidation` on (beta and on by default since 1.33, still so in 1.37):
/// not an IP at all; else leading zeros in an IPv4 octet (read as octal by libc,
/// so two programs may disagree on the address) and an IPv4-mapped IPv6 address,
/// each its own error (WH-8.8). Other non-canonical forms (upper-case IPv6, `::0:1`)
/// are valid; the API server only warns about them.
pub fn ip_errors(ip: &str) -> Vec<&'static str> {
    if parse_ip_sloppy(ip).is_none() {
        return vec![INVALID_IP_MSG];
    }
    match ip.parse::<std::net::IpAddr>() {
        Err(_) => vec![LEADING_ZEROS_MSG],
        Ok(std::net::IpAddr::V6(v6)) if v6.to_ipv4_mapped().is_some() => vec![IPV4_MAPPED_MSG],
        Ok(_) => Vec::new(),
    }
}

fn cluster_ips_value(v: &SvcView) -> FieldValue {
    FieldValue::StrList(Some(v.cluster_ips.clone()))
}

fn policy_value(v: &SvcView) -> FieldValue {
    FieldValue::OptStr(v.ip_family_policy.clone())
}

fn policy(v: &SvcView) -> &str {
    v.ip_family_policy.as_deref().unwrap_or("")
}

/// `ValidateServiceClusterIPsRelatedFields` (WH-8.3). Skipped for ExternalName.
/// `old` is the stored Service on an update: a ClusterIP it already holds is
/// accepted as it is, so strict IP checks never lock a stored Service (WH-8.8).
pub fn validate_cluster_ips_related_fields(v: &SvcView, old: Option<&SvcView>) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if v.is_external_name() {
        return errs;
    }
    if !v.cluster_ip.is_empty() {
        if v.cluster_ips.is_empty() {
            errs.push(FieldError::required("spec.clusterIPs", ""));
        } else if v.cluster_ips[0] != v.cluster_ip {
            errs.push(FieldError::invalid(
                "spec.clusterIPs",
                cluster_ips_value(v),
                "first value must match `clusterIP`",
            ));
        }
    } else if !v.cluster_ips.is_empty() {
        errs.push(FieldError::invalid(
            "spec.clusterIPs",
            cluster_ips_value(v),
            "must be empty when `clusterIP` is not specified",
        ));
    }

    let mut seen: Vec<&str> = Vec::new();
    for (i, fam) in v.ip_families.iter().enumerate() {
        if IpFamily::parse(fam).is_none() {
            errs.push(FieldError::not_supported(
                format!("spec.ipFamilies[{i}]"),
                FieldValue::Str(fam.clone()),
                &["IPv4", "IPv6"],
            ));
        }
        if seen.contains(&fam.as_str()) {
            errs.push(FieldError::duplicate(
                format!("spec.ipFamilies[{i}]"),
                FieldValue::Str(fam.clone()),
            ));
        }
        seen.push(fam);
    }

    if let Some(p) = &v.ip_family_policy
        && ![SINGLE_STACK, PREFER_DUAL_STACK, REQUIRE_DUAL_STACK].contains(&p.as_str())
    {
        errs.push(FieldError::not_supported(
            "spec.ipFamilyPolicy",
            policy_value(v),
            &[PREFER_DUAL_STACK, REQUIRE_DUAL_STACK, SINGLE_STACK],
        ));
    }

    let mut has_invalid_ips = false;
    for (i, ip) in v.cluster_ips.iter().enumerate() {
        if i == 0 && ip == CLUSTER_IP_NONE {
            if v.cluster_ips.len() > 1 {
                has_invalid_ips = true;
                errs.push(FieldError::invalid(
                    "spec.clusterIPs",
                    cluster_ips_value(v),
                    "'None' must be the first and only value",
                ));
            }
            continue;
        }
        if old.is_some_and(|o| o.cluster_ips.contains(ip)) {
            continue;
        }
        let field = format!("spec.clusterIPs[{i}]");
        let found = ip_errors(ip);
        has_invalid_ips |= !found.is_empty();
        errs.extend(
            found
                .into_iter()
                .map(|msg| FieldError::invalid(field.clone(), FieldValue::Str(ip.clone()), msg)),
        );
    }

    if v.cluster_ips.len() > 2 {
        errs.push(FieldError::invalid(
            "spec.clusterIPs",
            cluster_ips_value(v),
            "may only hold up to 2 values",
        ));
    }
    if has_invalid_ips {
        return errs;
    }

    if v.cluster_ips.len() > 1 {
        // IsDualStackIPStrings: exactly one IP of each family.
        let v4 = v
            .cluster_ips
            .iter()
            .filter(|ip| family_of_str(ip) == Some(IpFamily::V4))
            .count();
        let v6 = v
            .cluster_ips
            .iter()
            .filter(|ip| family_of_str(ip) == Some(IpFamily::V6))
            .count();
        let dual = v.cluster_ips.len() <= 2 && v4 == 1 && v6 == 1;
        if !dual {
            errs.push(FieldError::invalid(
                "spec.clusterIPs",
                cluster_ips_value(v),
                "may specify no more than one IP for each IP family",
            ));
        }
    }

    if !v.is_headless() && !v.cluster_ips.is_empty() && !v.ip_families.is_empty() {
        for (i, ip) in v.cluster_ips.iter().enumerate() {
            let Some(fam) = v.ip_families.get(i) else {
                break;
            };
            let is_v6 = family_of_str(ip) == Some(IpFamily::V6);
            if fam == "IPv4" && is_v6 {
                errs.push(FieldError::invalid(
                    format!("spec.clusterIPs[{i}]"),
                    FieldValue::Str(ip.clone()),
                    format!("expected an IPv4 value as indicated by `ipFamilies[{i}]`"),
                ));
            }
            if fam == "IPv6" && !is_v6 {
                errs.push(FieldError::invalid(
                    format!("spec.clusterIPs[{i}]"),
                    FieldValue::Str(ip.clone()),
                    format!("expected an IPv6 value as indicated by `ipFamilies[{i}]`"),
                ));
            }
        }
    }
    errs
}

/// Upstream `isMatchingPreferDualStackClusterIPFields` (AL-4 step 1).
pub fn is_matching_prefer_dual_stack(new: &SvcView, old: Option<&SvcView>) -> bool {
    let Some(old) = old else { return false };
    let Some(p) = &new.ip_family_policy else {
        return false;
    };
    if old.type_ != new.type_ || !new.needs_cluster_ip() {
        return false;
    }
    if p != PREFER_DUAL_STACK {
        return false;
    }
    if old
        .ip_family_policy
        .as_deref()
        .is_some_and(|op| op != PREFER_DUAL_STACK)
    {
        return false;
    }
    old.cluster_ips == new.cluster_ips && old.ip_families == new.ip_families
}

/// `initIPFamilyFields` (AL-4): default `ipFamilyPolicy` and `ipFamilies`, reject
/// inconsistent requests. Errors are the 422 causes, in upstream order.
pub fn init_ip_family_fields(
    new: &mut SvcView,
    old: Option<&SvcView>,
    cluster: &ClusterFamilies,
) -> Result<(), Vec<FieldError>> {
    if new.is_external_name() {
        return Ok(());
    }
    if is_matching_prefer_dual_stack(new, old) {
        return Ok(());
    }
    if new.ip_family_policy.is_none() {
        if let Some(p) = old.and_then(|o| o.ip_family_policy.clone()) {
            new.ip_family_policy = Some(p);
        } else if new.cluster_ip == CLUSTER_IP_NONE && new.selectorless {
            new.ip_family_policy = Some(REQUIRE_DUAL_STACK.into());
        } else {
            new.ip_family_policy = Some(SINGLE_STACK.into());
        }
    }

    let pre = validate_cluster_ips_related_fields(new, old);
    if !pre.is_empty() {
        return Err(pre);
    }

    let mut errs = Vec::new();
    if let Some(old) = old {
        if policy(new) == SINGLE_STACK {
            if old.cluster_ips == new.cluster_ips && new.cluster_ips.len() > 1 {
                new.cluster_ips.truncate(1);
            }
            if old.ip_families == new.ip_families && new.ip_families.len() > 1 {
                new.ip_families.truncate(1);
            }
        } else {
            if !new.cluster_ips.is_empty() && new.cluster_ips.len() < old.cluster_ips.len() {
                errs.push(FieldError::invalid(
                    "spec.ipFamilyPolicy",
                    policy_value(new),
                    "must be 'SingleStack' to release the secondary cluster IP",
                ));
            }
            if !new.ip_families.is_empty() && new.ip_families.len() < old.ip_families.len() {
                errs.push(FieldError::invalid(
                    "spec.ipFamilyPolicy",
                    policy_value(new),
                    "must be 'SingleStack' to release the secondary IP family",
                ));
            }
        }
    }

    if policy(new) == SINGLE_STACK {
        if new.cluster_ips.len() == 2 {
            errs.push(FieldError::invalid(
                "spec.ipFamilyPolicy",
                policy_value(new),
                "must be 'RequireDualStack' or 'PreferDualStack' when multiple cluster IPs are specified",
            ));
        }
        if new.ip_families.len() == 2 {
            errs.push(FieldError::invalid(
                "spec.ipFamilyPolicy",
                policy_value(new),
                "must be 'RequireDualStack' or 'PreferDualStack' when multiple IP families are specified",
            ));
        }
    }

    for i in 0..new.cluster_ips.len() {
        if new.cluster_ips[i] == CLUSTER_IP_NONE {
            break;
        }
        // Pre-validation proved every entry parses.
        let Some(fam) = family_of_str(&new.cluster_ips[i]) else {
            continue;
        };
        if i >= new.ip_families.len() {
            if cluster.has(fam) {
                new.ip_families.push(fam.as_str().into());
            } else {
                errs.push(FieldError::invalid(
                    format!("spec.clusterIPs[{i}]"),
                    cluster_ips_value(new),
                    format!("{fam} is not configured on this cluster"),
                ));
            }
        }
    }
    if !errs.is_empty() {
        return Err(errs);
    }

    if new.cluster_ip == CLUSTER_IP_NONE && new.selectorless {
        if new.ip_families.is_empty() {
            new.ip_families.push(cluster.primary.as_str().into());
        }
        if new.ip_families.len() < 2 && policy(new) != SINGLE_STACK {
            let other = if new.ip_families[0] == "IPv4" {
                "IPv6"
            } else {
                "IPv4"
            };
            new.ip_families.push(other.into());
        }
        return Ok(());
    }

    if policy(new) == REQUIRE_DUAL_STACK && !cluster.is_dual_stack() {
        errs.push(FieldError::invalid(
            "spec.ipFamilyPolicy",
            policy_value(new),
            "this cluster is not configured for dual-stack services",
        ));
    }
    for (i, fam) in new.ip_families.iter().enumerate() {
        if !IpFamily::parse(fam).is_some_and(|f| cluster.has(f)) {
            errs.push(FieldError::invalid(
                format!("spec.ipFamilies[{i}]"),
                FieldValue::Str(fam.clone()),
                "not configured on this cluster",
            ));
        }
    }
    if !errs.is_empty() {
        return Err(errs);
    }

    if new.ip_families.is_empty() {
        new.ip_families.push(cluster.primary.as_str().into());
    }
    if policy(new) != SINGLE_STACK && new.ip_families.len() == 1 && cluster.is_dual_stack() {
        let other = match new.ip_families[0].as_str() {
            "IPv4" => "IPv6",
            _ => "IPv4",
        };
        new.ip_families.push(other.into());
    }
    Ok(())
}

/// `normalizeClusterIPs` (AL-5.1): keep `clusterIP` and `clusterIPs` in step for old clients.
pub fn normalize_cluster_ips(new: &mut SvcView, old: Option<&SvcView>) {
    let Some(old) = old else {
        if !new.cluster_ip.is_empty() && new.cluster_ips.is_empty() {
            new.cluster_ips = vec![new.cluster_ip.clone()];
        }
        return;
    };
    if !old.cluster_ips.is_empty() && new.cluster_ips.is_empty() && old.cluster_ip == new.cluster_ip
    {
        new.cluster_ips = old.cluster_ips.clone();
    }
    if old.cluster_ip != new.cluster_ip {
        let same_ips = old.cluster_ips == new.cluster_ips;
        if !old.cluster_ip.is_empty() && new.cluster_ip.is_empty() {
            if same_ips {
                new.cluster_ips.clear();
            }
        } else if same_ips {
            new.cluster_ips = vec![new.cluster_ip.clone()];
        }
    }
}

/// `patchAllocatedValues` (AL-5.1): an update that omits allocated values keeps them.
pub fn patch_allocated_values(new: &mut SvcView, old: &SvcView) {
    if old.needs_cluster_ip() && new.needs_cluster_ip() {
        if new.cluster_ip.is_empty() {
            new.cluster_ip = old.cluster_ip.clone();
        }
        if new.cluster_ips.is_empty() && !old.cluster_ips.is_empty() {
            new.cluster_ips = old.cluster_ips.clone();
        }
    }
    if old.needs_node_port() && new.needs_node_port() {
        let new_used: Vec<i32> = new.node_ports();
        let used: Vec<i32> = old
            .node_ports()
            .into_iter()
            .filter(|p| new_used.contains(p))
            .collect();
        for p in &mut new.ports {
            if p.node_port == 0 {
                // Go map semantics: the last old port with that name wins; missing → 0.
                let old_val = old
                    .ports
                    .iter()
                    .rev()
                    .find(|o| o.name == p.name)
                    .map_or(0, |o| o.node_port);
                if !used.contains(&old_val) {
                    p.node_port = old_val;
                }
            }
        }
    }
    if old.needs_health_check() && new.needs_health_check() && new.health_check_node_port == 0 {
        new.health_check_node_port = old.health_check_node_port;
    }
}

/// `dropTypeDependentFields` (allocation part): on a type change, clear allocated values
/// the user left untouched so they are released rather than rejected.
pub fn drop_type_dependent_fields(new: &mut SvcView, old: &SvcView) {
    if old.needs_cluster_ip() && !new.needs_cluster_ip() {
        if old.cluster_ip == new.cluster_ip && old.cluster_ips == new.cluster_ips {
            new.cluster_ip.clear();
            new.cluster_ips.clear();
        }
        if old.ip_families == new.ip_families {
            new.ip_families.clear();
        }
        if policy(old) == policy(new) {
            new.ip_family_policy = None;
        }
    }
    if old.needs_node_port() && !new.needs_node_port() {
        let old_ports = old.node_ports();
        if new.node_ports().iter().all(|p| old_ports.contains(p)) {
            for p in &mut new.ports {
                p.node_port = 0;
            }
        }
    }
    if old.needs_health_check()
        && !new.needs_health_check()
        && old.health_check_node_port == new.health_check_node_port
    {
        new.health_check_node_port = 0;
    }
}
